"""Synapses drawn as lines between somas in the brain view: one visual, several sources.

*Why?* draws the synapses that carry most of a traced logit; the Circuit dock
draws a circuit's strongest synapses. Each sets or clears its lines by name in
the viewer state (:meth:`~flyviz.viewer.state.ViewerState.set_lines`); the window
draws them in one line visual over the brain view through :class:`SynapseLines`
(as the highlight sources share the emphasis mask), which shows the newest ones
set, so clearing a circuit's lines brings back a trace's. :func:`synapse_lines`
gives the one overlay of a brain view.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.app.base.theme import NEGATIVE, POSITIVE

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.brain.brain_view import BrainView

__all__ = ["SynapseLines", "line_segments", "synapse_lines"]

def line_segments(positions: np.ndarray, visible: np.ndarray, pre: np.ndarray,
                  post: np.ndarray, weight: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(points, colours, kept)``: the synapses ``pre -> post`` whose two somas are drawn
    (and differ), as segments (``2 k`` points, pre then post) with an RGBA per point: red
    for a positive ``weight``, blue for a negative one, alpha growing with ``|weight|``;
    ``kept`` is the mask of the synapses drawn."""
    pre, post = np.asarray(pre, dtype=np.int64), np.asarray(post, dtype=np.int64)
    weight = np.asarray(weight, dtype=np.float64)
    kept = visible[pre] & visible[post] & (pre != post)
    pre, post, weight = pre[kept], post[kept], weight[kept]
    if not weight.size:
        return np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), kept
    points = np.empty((2 * weight.size, 3), np.float32)
    points[0::2] = positions[pre]
    points[1::2] = positions[post]
    largest = float(np.abs(weight).max())
    strength = np.abs(weight) / largest if largest > 0 else np.ones_like(weight)
    colours = np.empty((weight.size, 4), np.float32)
    colours[:, :3] = np.where((weight > 0)[:, None], np.array(POSITIVE) / 255.0,
                              np.array(NEGATIVE) / 255.0)
    colours[:, 3] = 0.1 + 0.6 * strength
    return points, np.repeat(colours, 2, axis=0), kept


class SynapseLines:
    """The brain view's line overlay: named sources of segments, the newest set shown.

    Parameters
    ----------
    brain
        The view the lines are drawn over (created on first use, added light over
        the cloud, no depth test: a line shows where it crosses neurons).
    """

    def __init__(self, brain: "BrainView") -> None:
        self.brain = brain
        self.visual: Any = None
        self._sources: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def set(self, source: str, points: np.ndarray | None, colours: np.ndarray | None = None
            ) -> None:
        """Draw ``points`` (segments) in ``colours`` for ``source`` (it becomes the one shown);
        ``None`` or no points clears the source's lines."""
        self._sources.pop(source, None)
        if points is not None and len(points):
            assert colours is not None
            self._sources[source] = (np.asarray(points, np.float32),
                                     np.asarray(colours, np.float32))
        self._show()

    @property
    def shown(self) -> str | None:
        """The source whose lines are drawn (``None``: no lines)."""
        return next(reversed(self._sources), None)

    def _show(self) -> None:
        from flyviz.render.marks import draw_lines

        source = self.shown
        points, colours = self._sources[source] if source is not None else (None, None)
        self.visual = draw_lines(self.visual, self.brain.view.scene, points, colours)
        if self.visual is not None:
            self.brain.canvas.update()


_OVERLAYS: "weakref.WeakKeyDictionary[Any, SynapseLines]" = weakref.WeakKeyDictionary()


def synapse_lines(brain: "BrainView") -> SynapseLines:
    """The one :class:`SynapseLines` of ``brain`` (made on first use)."""
    overlay = _OVERLAYS.get(brain)
    if overlay is None:
        overlay = _OVERLAYS[brain] = SynapseLines(brain)
    return overlay
