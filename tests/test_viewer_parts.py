"""The viewer state's parts: each says what a new run, Reset, a model and an opened
recording do to it, the state tells them all in one place, and a frozen state is a
copy of the parts. No Qt here."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.model.interventions import Silence
from flyviz.model.layout import ball_layout
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.viewer import ViewerError, ViewerState
from flyviz.viewer.feature_parts import FeaturePart
from flyviz.viewer.parts import (CLEAR, KEEP, LIFECYCLE_EVENTS, MODEL, NEW_RUN, PER_RUN,
                                 RECORDING, RESET, UNTIL_RESET, Lifetime, StatePart)
from flyviz.viewer.run_config import InterventionLoan

N = 40


@pytest.fixture
def state() -> ViewerState:
    s = ViewerState()
    s.set_model(None, anatomy=ball_layout(N), name="tiny")
    return s


def _lines(k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    return np.ones((2 * k, 3), np.float32), np.ones((2 * k, 4), np.float32)


def _event(state: ViewerState, event: str) -> None:
    """What the window's runs do for ``event``."""
    if event == MODEL:
        state.set_model(None, anatomy=ball_layout(N), name="again")
    else:
        state.set_recording(Recording(N), cause=event)


class Counter(StatePart):
    name = "counter"
    lifetime = Lifetime(new_run=CLEAR, reset=KEEP, model=CLEAR, recording=KEEP)

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def clear(self) -> None:
        self.count = 0


def test_a_part_follows_its_lifetime_and_the_state_says_so_after_every_part(state):
    part = state.add_part(Counter())
    seen: list[tuple[str, int]] = []
    state.events.lifecycle.connect(lambda event: seen.append((event, part.count)))
    for event, kept in ((NEW_RUN, False), (RESET, True), (MODEL, False), (RECORDING, True)):
        part.count = 3
        _event(state, event)
        assert part.count == (3 if kept else 0), event
        assert seen[-1] == (event, part.count)      # the signal comes after the parts
    assert state.parts["counter"] is part
    with pytest.raises(ViewerError, match="counter"):
        state.add_part(Counter())
    with pytest.raises(ViewerError, match="unknown event"):
        state.lifecycle("coffee")
    with pytest.raises(ViewerError, match="no part named 'nope'"):
        state.part("nope")


def test_lifetimes_describe_themselves_and_refuse_other_words():
    assert PER_RUN.describe() == ("cleared by a new run, Reset, a model and an opened "
                                  "recording")
    assert UNTIL_RESET.describe() == "cleared by Reset, a model and an opened recording"
    assert Lifetime(model=KEEP).describe() == "kept through everything"
    with pytest.raises(ValueError, match="keep"):
        Lifetime(reset="sometimes")
    assert set(LIFECYCLE_EVENTS) == {NEW_RUN, RESET, MODEL, RECORDING}


def test_a_model_clears_marks_highlights_and_pose_but_runs_and_reset_keep_them(state):
    state.picked = [1, 2]
    state.intervened = [3]
    state.select(4)
    state.set_lines("user", *_lines())
    state.highlights.set_neurons("find", np.array([5, 6]))
    state.set_filter(cell_type="KC")
    state.camera = CameraPose(azimuth=20.0, elevation=5.0, center=(0.0, 0.0, 0.0),
                              scale_factor=100.0, fov=30.0)
    state.interventions = (Silence("id:1"),)
    for event in (NEW_RUN, RESET, RECORDING):
        _event(state, event)
        assert state.picked.tolist() == [1, 2] and state.intervened.tolist() == [3]
        assert state.selected == 4 and state.shown_lines == "user"
        assert state.highlight is not None and state.camera is not None
    _event(state, MODEL)
    assert state.picked.size == 0 and state.intervened.size == 0 and state.selected is None
    assert state.shown_lines is None and state.highlight is None and state.camera is None
    assert state.filter_cell_type == ""
    assert state.interventions == ()                     # another brain's neurons


def test_a_features_emphasis_and_lines_go_when_its_lifetime_says(state):
    circuit = state.add_part(FeaturePart("circuit", PER_RUN))
    lesions = state.add_part(FeaturePart("lesions"))
    for event in LIFECYCLE_EVENTS:
        circuit.emphasise([1, 2, 3])
        circuit.draw_lines(*_lines())
        lesions.emphasise([7])
        assert state.highlights.shown == "lesions"
        _event(state, event)
        assert circuit.emphasis is None and circuit.lines is None, event
        assert (lesions.emphasis is None) == (event == MODEL), event
    assert state.highlights.shown == "lesions"       # the one left after an opened recording


def test_why_shading_and_lines_are_the_runs(state):
    for event in LIFECYCLE_EVENTS:
        state.token_flows = (0.5, -0.25)
        state.set_lines("why", *_lines())
        _event(state, event)
        assert state.token_flows is None and state.lines("why") is None, event


def test_a_loan_gives_back_the_list_and_the_box_at_reset_but_not_at_a_new_run(state):
    mine = (Silence("id:9"),)
    state.interventions = mine
    loan = state.add_part(InterventionLoan("patching"))
    patch = (Silence("id:1"),)
    loan.lend(patch)
    loan.emphasise([1])
    assert state.interventions == patch and state.comparing
    _event(state, NEW_RUN)                   # the comparison the loan is for
    assert state.interventions == patch and state.comparing and loan.emphasis is not None
    _event(state, RESET)
    assert state.interventions == mine and not state.comparing and loan.emphasis is None
    assert not loan.active


def test_a_loan_ends_when_the_user_takes_it_out_of_the_list(state):
    loan = state.add_part(InterventionLoan("patching"))
    loan.lend((Silence("id:1"),))
    state.interventions = ()                 # the Interventions dock's Clear
    assert not state.comparing and not loan.active
    state.interventions = (Silence("id:2"),)
    _event(state, RESET)                     # nothing on loan: the user's list stays
    assert state.interventions == (Silence("id:2"),)


def test_a_user_ticked_comparison_stays_through_reset(state):
    state.interventions = (Silence("id:2"),)
    state.set_comparing(True)
    for event in (NEW_RUN, RESET, RECORDING):
        _event(state, event)
        assert state.comparing


def test_frozen_is_a_copy_of_every_part_and_shares_nothing_later(state):
    rec = Recording(N)
    state.set_recording(rec)
    state.picked = [1]
    state.intervened = [2, 3]
    state.set_lines("circuit", *_lines())
    state.highlights.set_neurons("find", np.array([4]))
    part = state.add_part(Counter())
    part.count = 5
    copy = state.frozen()
    assert list(copy.parts) == list(state.parts)
    assert all(copy.parts[n] is not p and copy.parts[n].state is copy
               for n, p in state.parts.items())
    assert copy.picked.tolist() == [1] and copy.intervened.tolist() == [2, 3]
    assert copy.shown_lines == "circuit" and copy.highlight is not None
    assert copy.parts["counter"].count == 5            # type: ignore[attr-defined]
    state.picked = [7]
    state.set_lines("circuit", None)
    _event(state, MODEL)
    assert copy.picked.tolist() == [1] and copy.shown_lines == "circuit"
    assert copy.parts["counter"].count == 5            # type: ignore[attr-defined]
    copy.intervened = [5]
    assert state.intervened.size == 0


def test_a_model_empties_the_run_configuration_even_with_a_loan_out(state):
    state.interventions = (Silence("id:9"),)
    loan = state.add_part(InterventionLoan("patching"))
    loan.lend((Silence("id:1"),))
    state.set_next_interventions((Silence("id:3"),), "three silenced")
    _event(state, MODEL)
    assert state.interventions == () and not state.comparing and not loan.active
    assert state.next_interventions == ()


def test_a_frozen_state_shows_another_model_and_recording(state):
    from flyviz.record.recording import Recording as Rec

    copy = state.frozen()
    copy.set_model(None, anatomy=ball_layout(N), name="again")
    copy.set_recording(Rec(N))
    copy.atlas = None
    assert copy.recording is not state.recording and copy.model_name == "again"


def test_the_language_models_docks_choices_are_its_kinds_part_of_the_state(state):
    """The Fly LLM's docks' choices (the prompt, Why?'s lag...) are its kind's dock settings,
    kept in the state's kind settings: the user's, through runs, Reset and another kind's
    model, copied by ``frozen()``; another kind keeps its own there, or none."""
    from dataclasses import dataclass

    from flyviz.kinds import LANGUAGE, ModelKind
    from flyviz.kinds.language import LanguageDockSettings
    from flyviz.kinds.spiking import SPIKING

    docks = state.kind_settings.docks_of(LANGUAGE)
    assert isinstance(docks, LanguageDockSettings) and state.docks is docks
    assert state.kind_settings.docks_of(SPIKING) is None
    state.docks.why_lag, state.docks.prompt = 3, "Once upon a time"
    for cause in (NEW_RUN, RESET):
        state.set_recording(Recording(N), cause=cause)
        assert state.docks is docks and (docks.why_lag, docks.prompt) == (3, "Once upon a time")
    state.set_model(None, anatomy=ball_layout(N), name="another", kind=SPIKING)
    assert state.docks is docks and docks.why_lag == 3
    copy = state.frozen()
    assert copy.docks == docks and copy.docks is not docks
    docks.why_lag = 5
    assert copy.docks.why_lag == 3

    @dataclass
    class Chosen:
        view: str = "all"

    class OwnKind(ModelKind):
        key = "own-docks"

        def new_dock_settings(self) -> Chosen:
            return Chosen()

    own = OwnKind()
    chosen = state.kind_settings.docks_of(own)
    assert chosen == Chosen() and state.kind_settings.docks_of(own) is chosen


def test_highlights_hand_their_masks_to_a_new_view_in_order_and_unshown():
    # What HighlightPart.attach does when the state meets a new view: the masks move over
    # through Highlights' own masks/restore, the newest still the one shown.
    from flyviz.viewer.highlight import Highlights

    old = Highlights(lambda mask: None, lambda: 4)
    old.set("find", np.array([True, False, False, False]))
    old.set("lesions", np.array([False, True, False, False]))
    taken = old.masks
    taken.pop("find")                               # a new dict: the old keeps its own
    assert old.mask("find") is not None
    applied: list[object] = []
    new = Highlights(applied.append, lambda: 4)
    new.restore(old.masks)
    assert applied == [] and list(new.masks) == ["find", "lesions"] and new.shown == "lesions"
    np.testing.assert_array_equal(new.mask("lesions"), [False, True, False, False])
