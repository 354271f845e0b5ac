"""The viewer state's parts, and how long what each holds lives.

A :class:`~flyviz.viewer.state.ViewerState` is made of parts (napari's
``components/`` are the model): the model shown, the shown recording and token,
the camera, the colour layers, the highlight, the marks drawn over the brain,
the run configuration, the meshes, and one part per feature or kind for what
that feature owns (a spiking screen's effect, *Why?*'s trace, the circuit's
emphasis, a patch on loan to the interventions...). Each part says in one
place, its :class:`Lifetime`, what happens to it when

* a **new run** starts (``"new_run"``),
* the user presses **Reset** (``"reset"``: the recording is emptied),
* a **model** is loaded (``"model"``: another brain, or the same one again),
* a **recording** is opened (``"recording"``: a saved run, or a script's).

The state tells every part of these four events in one place
(:meth:`ViewerState.lifecycle <flyviz.viewer.state.ViewerState.lifecycle>`),
which calls the part's ``on_new_run``, ``on_reset``, ``on_model`` or
``on_recording``: by default :meth:`StatePart.clear` where the lifetime says
:data:`CLEAR`, nothing where it says :data:`KEEP`. A part that needs more (a
loan to give back) overrides the hook. :meth:`~flyviz.viewer.state.ViewerState.frozen`
is a copy of the parts (:meth:`StatePart.frozen`).

No Qt here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from flyviz.viewer.state import ViewerState

__all__ = ["CLEAR", "KEEP", "LIFECYCLE_EVENTS", "MODEL", "NEW_RUN", "RECORDING", "RESET",
           "Lifetime", "StatePart"]

#: A new run started (its empty recording is shown).
NEW_RUN = "new_run"
#: Reset: the run stopped and the recording was emptied.
RESET = "reset"
#: A model was loaded (another brain, or the same one again).
MODEL = "model"
#: A recording was opened (a file, or a script's ``set_recording``).
RECORDING = "recording"
#: The four events a part's :class:`Lifetime` answers, in the order the docs list them.
LIFECYCLE_EVENTS = (NEW_RUN, RESET, MODEL, RECORDING)

#: What a part holds stays.
KEEP = "keep"
#: What a part holds is forgotten (:meth:`StatePart.clear`).
CLEAR = "clear"

_HOOKS = {NEW_RUN: "on_new_run", RESET: "on_reset", MODEL: "on_model",
          RECORDING: "on_recording"}


@dataclass(frozen=True)
class Lifetime:
    """What each of the four events does to a part: :data:`KEEP` or :data:`CLEAR`.

    The default is a model's: kept through runs, Reset and opened recordings,
    forgotten when a model is loaded (what a part holds about neurons means
    nothing for another brain).
    """

    new_run: str = KEEP
    reset: str = KEEP
    model: str = CLEAR
    recording: str = KEEP

    def __post_init__(self) -> None:
        for event in LIFECYCLE_EVENTS:
            if getattr(self, event) not in (KEEP, CLEAR):
                raise ValueError(f"a lifetime says {KEEP!r} or {CLEAR!r} for {event}, "
                                 f"got {getattr(self, event)!r}")

    def clears(self, event: str) -> bool:
        """True when ``event`` (one of :data:`LIFECYCLE_EVENTS`) clears the part."""
        if event not in _HOOKS:
            raise ValueError(f"unknown event {event!r}; the events are "
                             f"{', '.join(LIFECYCLE_EVENTS)}")
        return getattr(self, event) == CLEAR

    def describe(self) -> str:
        """The lifetime in words, e.g. ``"cleared by a new run, Reset and a model"``."""
        words = {NEW_RUN: "a new run", RESET: "Reset", MODEL: "a model",
                 RECORDING: "an opened recording"}
        cleared = [words[e] for e in LIFECYCLE_EVENTS if self.clears(e)]
        if not cleared:
            return "kept through everything"
        listed = cleared[0] if len(cleared) == 1 else \
            ", ".join(cleared[:-1]) + " and " + cleared[-1]
        return f"cleared by {listed}"


#: Cleared by every event: what belongs to the one run on screen.
PER_RUN = Lifetime(new_run=CLEAR, reset=CLEAR, model=CLEAR, recording=CLEAR)
#: Kept through runs, cleared by Reset, a model and an opened recording: what a feature
#: lends the next runs (a patch in the interventions, "compare" ticked).
UNTIL_RESET = Lifetime(new_run=KEEP, reset=CLEAR, model=CLEAR, recording=CLEAR)
#: Kept through runs, Reset and opened recordings; cleared by a model.
PER_MODEL = Lifetime()
#: Kept through everything (settings, the user's own lists).
ALWAYS = Lifetime(model=KEEP)


class StatePart:
    """One part of a :class:`~flyviz.viewer.state.ViewerState`.

    Subclasses name themselves (:attr:`name`, unique in a state), declare their
    :attr:`lifetime` and implement :meth:`clear`; those holding mutable values
    extend :meth:`frozen` so that a frozen state's part shares nothing that
    either side changes later. A part emits its own changes on the state's
    :attr:`~flyviz.viewer.state.ViewerState.events` (the core parts) or on
    signals of its own (a feature's).
    """

    #: The part's name in :attr:`ViewerState.parts <flyviz.viewer.state.ViewerState.parts>`.
    name: ClassVar[str] = ""
    #: What a new run, Reset, a model and an opened recording do to the part.
    lifetime: ClassVar[Lifetime] = PER_MODEL

    def __init__(self) -> None:
        self._state: ViewerState | None = None

    @property
    def state(self) -> ViewerState:
        """The state this part belongs to."""
        if self._state is None:
            raise RuntimeError(f"the {self.name or type(self).__name__} part belongs to no "
                               "viewer state yet (ViewerState.add_part)")
        return self._state

    @property
    def attached(self) -> bool:
        """True once the part belongs to a state."""
        return self._state is not None

    def attach(self, state: ViewerState) -> None:
        """Belong to ``state`` (called by :meth:`~flyviz.viewer.state.ViewerState.add_part`)."""
        self._state = state

    # ------------------------------------------------------------ lifetime
    def clear(self) -> None:
        """Forget what the part holds (what :data:`CLEAR` in its lifetime does)."""

    def follow(self, event: str) -> None:
        """Do what the lifetime says for ``event``: :meth:`clear`, or nothing."""
        if self.lifetime.clears(event):
            self.clear()

    def on_new_run(self) -> None:
        """A new run started."""
        self.follow(NEW_RUN)

    def on_reset(self) -> None:
        """The user pressed Reset."""
        self.follow(RESET)

    def on_model(self) -> None:
        """A model was loaded."""
        self.follow(MODEL)

    def on_recording(self) -> None:
        """A recording was opened."""
        self.follow(RECORDING)

    def hook(self, event: str) -> Any:
        """The bound hook for ``event`` (``on_new_run``...)."""
        return getattr(self, _HOOKS[event])

    # ------------------------------------------------------------ copies
    def frozen(self) -> StatePart:
        """A copy for a frozen state (attached to none yet); later changes to either side
        do not reach the other. The default copies the part's attributes shallowly:
        parts holding mutable containers copy those too."""
        twin = copy.copy(self)
        twin._state = None
        return twin

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: {self.lifetime.describe()}>"
