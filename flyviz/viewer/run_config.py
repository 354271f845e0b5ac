"""What the next runs apply: the run configuration part, and interventions on loan.

:class:`RunConfigPart` (``"run_config"``) holds the interventions of the next
runs, whether they run beside the untouched model (and how), and interventions
for the next run only. The user's list is kept through runs, Reset and opened
recordings; a model empties it and unticks *Compare* (its neurons are another
brain's; a ticked box over an empty list would only refuse the next run).

A feature that runs a comparison of its own (a Patching cell's patch, the
circuit's "run with only the circuit") *lends* interventions to the list through
an :class:`InterventionLoan` part: the loan puts them in the list and ticks
*Compare with untouched*, and gives both back (the list and the box as they were)
when its lifetime ends (Reset, a model, an opened recording) or as soon as the user
takes the lent interventions out of the list (then only the box goes back). So a
patch is never left in the list, nor the box ticked, once the feature's run is over.

No Qt here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flyviz.record.recording import COMPARISON_MODES
from flyviz.viewer.feature_parts import FeaturePart
from flyviz.viewer.parts import PER_MODEL, UNTIL_RESET, StatePart
from flyviz.viewer.settings import ViewerError

if TYPE_CHECKING:
    from flyviz.viewer.state import ViewerState

__all__ = ["COMPARE_MODES", "InterventionLoan", "RunConfigPart", "checked_interventions"]

#: How a comparison runs the untouched model: teacher-forced on the intervened text, or free
#: (:data:`flyviz.record.flyrec_codec.COMPARISON_MODES`, the one list).
COMPARE_MODES = COMPARISON_MODES


def checked_interventions(items: Iterable[Any]) -> tuple[Any, ...]:
    """``items`` as a tuple of intervention objects, or a :class:`ViewerError`."""
    from flyviz.model.interventions import Clamp, Cut, Scale, Silence, Stimulate
    from flyviz.model.patching import Patch

    items = tuple(items)
    for item in items:
        if not isinstance(item, (Silence, Clamp, Stimulate, Cut, Scale, Patch)):
            raise ViewerError(f"an intervention must be a flyviz.model.interventions object, "
                              f"got {type(item).__name__}")
    return items


class RunConfigPart(StatePart):
    """The interventions of the next runs, the comparison and next-run-only interventions."""

    name = "run_config"
    lifetime = PER_MODEL

    def __init__(self) -> None:
        super().__init__()
        self.interventions: tuple[Any, ...] = ()
        self.comparing = False
        self.compare_mode = COMPARE_MODES[0]
        self.next_interventions: tuple[Any, ...] = ()
        self.next_description = ""

    def clear(self) -> None:
        self.set_interventions(())
        self.set_comparing(False)
        self.set_next(())

    def set_interventions(self, items: Iterable[Any]) -> None:
        items = checked_interventions(items)
        if items != self.interventions:
            self.interventions = items
            self.state.events.interventions.emit(items)

    def set_comparing(self, comparing: bool, mode: str | None = None) -> None:
        mode = self.compare_mode if mode is None else mode
        if mode not in COMPARE_MODES:
            raise ViewerError(f"comparison mode {mode!r} must be one of {', '.join(COMPARE_MODES)}")
        if (bool(comparing), mode) != (self.comparing, self.compare_mode):
            self.comparing, self.compare_mode = bool(comparing), mode
            self.state.events.comparing.emit(self.comparing, mode)

    def set_next(self, items: Iterable[Any] = (), description: str = "") -> None:
        items = checked_interventions(items or ())
        description = str(description) if items else ""
        if (items, description) != (self.next_interventions, self.next_description):
            self.next_interventions, self.next_description = items, description
            self.state.events.next_interventions.emit(items, description)


class InterventionLoan(FeaturePart):
    """Interventions a feature lends the next runs, compared with the untouched model, and
    the emphasis that goes with them (a Patching cell's group), until Reset, a model or an
    opened recording.

    Parameters
    ----------
    name
        The part's name (the lending feature's: ``"patching"``, ``"circuit_run"``).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name, UNTIL_RESET)
        self.lent: tuple[Any, ...] = ()
        self._before: tuple[tuple[Any, ...], bool] | None = None

    def attach(self, state: ViewerState) -> None:
        super().attach(state)
        state.events.interventions.connect(self._on_interventions)

    @property
    def active(self) -> bool:
        """True while the loan's interventions are in the list."""
        return self._before is not None

    def lend(self, items: Iterable[Any]) -> None:
        """Put ``items`` in the list instead of what is there and tick *Compare*; what was
        there comes back when the loan ends."""
        items = checked_interventions(items)
        config = self.state.run_config
        if self._before is None:
            self._before = (config.interventions, config.comparing)
        self.lent = items
        config.set_interventions(items)
        config.set_comparing(True)

    def clear(self) -> None:
        """End the loan: the list and *Compare* go back to how they were before it, and the
        emphasis goes."""
        super().clear()
        if self._before is None:
            return
        (items, comparing), self._before = self._before, None
        self.lent = ()
        config = self.state.run_config
        config.set_interventions(items)
        config.set_comparing(comparing)

    def on_model(self) -> None:
        # The run configuration emptied itself for the new brain: nothing to give back.
        self._before, self.lent = None, ()
        super().on_model()

    def _on_interventions(self, items: tuple[Any, ...]) -> None:
        if self._before is None or not self.lent or any(i in items for i in self.lent):
            return
        # The user took the lent interventions out: the list is theirs; the box goes back.
        comparing = self._before[1]
        self._before, self.lent = None, ()
        self.state.run_config.set_comparing(comparing)

    def frozen(self) -> StatePart:
        twin = InterventionLoan(self.name)
        twin.lent, twin._before = self.lent, self._before
        return twin
