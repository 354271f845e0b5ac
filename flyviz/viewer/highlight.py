"""Which neurons the brain view keeps lit: one emphasis mask, several sources.

The superclass and cell-type filter, *Find neurons* and a lesion map's
selected group each want to light some neurons and dim the rest. They share
the brain view's one emphasis mask through :class:`Highlights`: each source
sets or clears its own mask by name, and the view shows the newest one set,
so clearing a search brings back the filter that was there before it.

Each :class:`~flyviz.viewer.state.ViewerState` holds one (``state.highlights``);
no Qt here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def filter_mask(anatomy: Any, superclass: str = "", cell_type: str = "") -> np.ndarray | None:
    """The neurons of ``superclass`` whose cell type starts with ``cell_type`` (either ``""``:
    any), as a mask over ``anatomy``'s neurons; ``None`` when neither narrows anything."""
    cell_type = cell_type.strip().lower()
    mask = None
    if superclass and anatomy.superclass is not None:
        mask = np.fromiter((s == superclass for s in anatomy.superclass), bool,
                           len(anatomy.superclass))
    if cell_type and anatomy.cell_type is not None:
        types = np.fromiter((str(t).lower().startswith(cell_type) for t in anatomy.cell_type),
                            bool, len(anatomy.cell_type))
        mask = types if mask is None else mask & types
    return mask


class Highlights:
    """Named emphasis masks; the most recently set one is shown.

    Parameters
    ----------
    apply
        ``apply(mask)``: show ``mask`` (``None``: every neuron lit), e.g.
        :meth:`~flyviz.app.brain.brain_view.BrainView.set_emphasis`.
    neurons
        ``neurons()``: how many neurons the view draws now; masks of another
        length (left from an earlier model) are dropped, never shown.
    """

    def __init__(self, apply: Callable[[np.ndarray | None], None],
                 neurons: Callable[[], int]) -> None:
        self._apply = apply
        self._neurons = neurons
        self._masks: dict[str, np.ndarray] = {}

    def set(self, source: str, mask: np.ndarray | None) -> None:
        """Light ``mask`` for ``source`` (it becomes the shown one); ``None`` clears it."""
        self._masks.pop(source, None)
        if mask is not None:
            self._masks[source] = np.asarray(mask, dtype=bool)
        self._show()

    def set_neurons(self, source: str, neurons: np.ndarray | None) -> None:
        """Light exactly the neurons with indices ``neurons`` (``None`` clears)."""
        if neurons is None:
            self.set(source, None)
            return
        mask = np.zeros(self._neurons(), dtype=bool)
        mask[np.asarray(neurons, dtype=np.int64)] = True
        self.set(source, mask)

    def clear(self) -> None:
        """Drop every source's mask (a new model: masks of the old one mean nothing)."""
        had = bool(self._masks)
        self._masks.clear()
        if had:
            self._show()

    def mask(self, source: str) -> np.ndarray | None:
        """The mask ``source`` set (``None`` if it has none)."""
        return self._masks.get(source)

    @property
    def masks(self) -> dict[str, np.ndarray]:
        """Every source's mask, the oldest first (a new dict; the masks are not copied)."""
        return dict(self._masks)

    def restore(self, masks: Mapping[str, np.ndarray]) -> None:
        """Take ``masks`` (another :class:`Highlights`' :attr:`masks`) after this one's own,
        in their order, without showing them: a state that made this one anew for a new
        view keeps its masks, and shows them when it next shows anything."""
        self._masks.update(masks)

    @property
    def shown(self) -> str | None:
        """The source whose mask the view shows (``None``: every neuron lit)."""
        self._drop_stale()
        return next(reversed(self._masks), None)

    def _drop_stale(self) -> None:
        n = self._neurons()
        for source in [s for s, m in self._masks.items() if m.shape != (n,)]:
            del self._masks[source]

    def _show(self) -> None:
        source = self.shown
        self._apply(None if source is None else self._masks[source])
