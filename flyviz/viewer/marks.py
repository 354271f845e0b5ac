"""The highlight and the marks drawn over the brain: two parts of the viewer state.

* :class:`HighlightPart` (``"highlight"``): the named emphasis masks
  (:class:`~flyviz.viewer.highlight.Highlights`) and the superclass / cell-type
  filter; cleared by a model.
* :class:`MarksPart` (``"marks"``): the selected neuron, the picked neurons, the
  neurons the interventions touch (ringed) and synapses drawn as lines by source;
  cleared by a model (a feature's own marks, such as the circuit's lines, belong
  to that feature's part, whose lifetime clears them: :mod:`flyviz.viewer.feature_parts`).

Both emit on the state's :attr:`~flyviz.viewer.state.ViewerState.events`. No Qt here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.viewer.highlight import Highlights
from flyviz.viewer.parts import PER_MODEL, StatePart
from flyviz.viewer.settings import ViewerError

if TYPE_CHECKING:
    from flyviz.viewer.state import ViewerState

__all__ = ["HighlightPart", "MarksPart", "neuron_set"]


def neuron_set(neurons: Iterable[int] | np.ndarray, count: int) -> np.ndarray:
    """``neurons`` as sorted unique indices, or a :class:`ViewerError` naming one out of
    range of a model of ``count`` neurons."""
    chosen = np.unique(np.asarray(list(neurons) if not isinstance(neurons, np.ndarray)
                                  else neurons, dtype=np.int64).ravel())
    if chosen.size and (chosen[0] < 0 or chosen[-1] >= count):
        bad = int(chosen[0] if chosen[0] < 0 else chosen[-1])
        raise ViewerError(f"neuron {bad} is out of range: the model has {count:,} neurons")
    return chosen


class HighlightPart(StatePart):
    """Which neurons stay lit: named masks (the newest shown) and the filter."""

    name = "highlight"
    lifetime = PER_MODEL

    def __init__(self) -> None:
        super().__init__()
        self.highlights: Highlights | None = None
        self._masks: dict[str, np.ndarray] = {}
        self.filter = ("", "")

    def attach(self, state: ViewerState) -> None:
        super().attach(state)
        masks = self._masks if self.highlights is None else self.highlights.masks
        self.highlights = Highlights(state.events.highlight.emit, lambda: state.neurons)
        self.highlights.restore(masks)

    def clear(self) -> None:
        assert self.highlights is not None
        self.highlights.clear()
        self.filter = ("", "")
        self.state.events.filter.emit("", "")

    def frozen(self) -> StatePart:
        twin = HighlightPart()
        assert self.highlights is not None
        source = self.highlights.shown
        if source is not None:      # the shown mask is what a picture draws
            mask = self.highlights.mask(source)
            assert mask is not None
            twin._masks = {source: mask.copy()}
        twin.filter = self.filter
        return twin


class MarksPart(StatePart):
    """The selected and picked neurons, the intervened (ringed) ones and synapse lines."""

    name = "marks"
    lifetime = PER_MODEL

    def __init__(self) -> None:
        super().__init__()
        self.selected: int | None = None
        self.picked = np.zeros(0, np.int64)
        self.intervened = np.zeros(0, np.int64)
        self.lines: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def clear(self) -> None:
        events = self.state.events
        self.selected = None
        self.picked = np.zeros(0, np.int64)
        self.intervened = np.zeros(0, np.int64)
        events.selected.emit(None)
        events.picked.emit(self.picked.copy())
        events.intervened.emit(self.intervened.copy())
        for source in list(self.lines):
            self.set_lines(source, None)

    def set_picked(self, neurons: Iterable[int] | np.ndarray) -> None:
        picks = neuron_set(neurons, self.state.neurons)
        if not np.array_equal(picks, self.picked):
            self.picked = picks
            self.state.events.picked.emit(picks.copy())

    def set_intervened(self, neurons: Iterable[int] | np.ndarray) -> None:
        touched = neuron_set(neurons, self.state.neurons)
        if not np.array_equal(touched, self.intervened):
            self.intervened = touched
            self.state.events.intervened.emit(touched.copy())

    def set_lines(self, source: str, points: Any = None, colours: Any = None) -> None:
        lines = None
        if points is not None and len(points):
            pts = np.asarray(points, np.float32).reshape(-1, 3)
            if colours is None or np.shape(colours) != (pts.shape[0], 4):
                raise ViewerError(f"the lines of {source!r} need an RGBA colour per point")
            lines = (pts, np.asarray(colours, np.float32))
        had = self.lines.pop(source, None)
        if lines is not None:
            self.lines[source] = lines
        if had is not None or lines is not None:
            self.state.events.lines.emit(source)

    @property
    def shown_lines(self) -> str | None:
        return next(reversed(self.lines), None)

    def frozen(self) -> StatePart:
        twin = MarksPart()
        twin.selected = self.selected
        twin.picked = self.picked.copy()
        twin.intervened = self.intervened.copy()
        twin.lines = dict(self.lines)       # the arrays are replaced, never written in place
        return twin
