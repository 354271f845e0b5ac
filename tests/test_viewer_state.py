"""The viewer state without Qt: what is shown, validated, with change signals.

A fresh interpreter that imports :mod:`flyviz.viewer` loads no Qt and no vispy;
out-of-range tokens, unknown colour layers and bad settings are clear
one-line errors that change nothing; every change is announced once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flyviz.errors import InputError
from flyviz.model.interventions import Silence
from flyviz.model.layout import ball_layout
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import ColourLayer, ColourScale
from flyviz.viewer import STATE, ViewerError, ViewerState

GUI_MODULES = {"PySide6", "shiboken6", "vispy", "pyqtgraph", "OpenGL"}
N = 50


def _frame(i: int, state: np.ndarray):
    from flyviz.record.frame import Frame

    return Frame(position=i, phase="prompt", input_token_id=i, input_text=f"t{i}",
                 predicted_token_id=0, predicted_text="x", probability=0.5,
                 top_k_ids=np.zeros(2, np.int32), top_k_probabilities=np.zeros(2, np.float32),
                 top_k_text=("x", "y"), state=state, mean_abs_state=float(np.abs(state).mean()),
                 text_so_far="t" * (i + 1))


def _recording(frames: int = 4) -> Recording:
    rec = Recording(N, {"model_name": "tiny"})
    for i in range(frames):
        rec.append(_frame(i, np.linspace(-1, 1, N, dtype=np.float32) * (i + 1) / frames))
    return rec


@pytest.fixture
def state() -> ViewerState:
    s = ViewerState()
    s.set_model(None, anatomy=ball_layout(N), name="tiny")
    return s


def _record(signal) -> list:
    seen: list = []
    signal.connect(lambda *args: seen.append(args))
    return seen


def test_importing_the_viewer_state_loads_no_qt_and_no_vispy():
    script = textwrap.dedent("""
        import json, sys
        from flyviz.viewer import ViewerState
        state = ViewerState()
        state.display.mode = "abs"
        print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "psygnal" in loaded          # the test saw the state's own imports
    assert not loaded & GUI_MODULES


def test_the_shown_token_is_validated_and_announced(state):
    indices, lives = _record(state.events.index), _record(state.events.live)
    state.set_recording(_recording(4))
    assert (state.index, state.live) == (3, True) and indices[-1] == (3,)
    state.index = 1
    assert (state.index, state.live) == (1, False) and lives[-1] == (False,)
    for bad in (4, -1, 2.5, True):
        with pytest.raises(ViewerError, match="token|whole number"):
            state.index = bad
    assert state.index == 1     # a refused value changes nothing
    with pytest.raises(InputError, match=r"token 7 is out of range: the recording has 4 tokens"):
        state.index = 7
    count = len(indices)
    state.index = 1             # no change, no signal
    assert len(indices) == count
    state.go_live()
    assert (state.index, state.live) == (3, True)


def test_frames_appended_while_live_are_shown_and_not_while_scrubbing(state):
    state.set_recording(_recording(2))
    appended = _record(state.events.frames_appended)
    state.append(_frame(2, np.zeros(N, np.float32)))
    assert state.index == 2 and appended == [(3,)]
    state.index = 0
    state.append(_frame(3, np.zeros(N, np.float32)))
    assert state.index == 0 and len(state.recording) == 4


def test_a_recording_of_another_model_is_refused(state):
    with pytest.raises(ViewerError, match="7 neurons but the model shown has 50"):
        state.set_recording(Recording(7))


def test_colour_layers_are_registered_chosen_and_unknown_ones_refused(state):
    state.set_recording(_recording(3))
    importance = ColourLayer.static("importance", np.arange(N, dtype=np.float32),
                                    scale=ColourScale.given(0.0, 49.0))
    state.add_colour_layer("importance", "Importance", lambda: importance, available=False)
    layers, chosen = _record(state.events.layer), _record(state.events.colour_by)
    with pytest.raises(ViewerError, match="unknown colour layer 'nope'.*state, delta.*, importance"):
        state.colour_by = "nope"
    with pytest.raises(ViewerError, match="already exists"):
        state.add_colour_layer("importance", "again", lambda: None)
    state.colour_by = "importance"
    assert state.layer is importance and chosen == [("importance",)] and layers == [(importance,)]
    assert state.value_range() == (0.0, 49.0)
    np.testing.assert_array_equal(state.values(0), np.arange(N))
    # Withdrawing the shown entry goes back to the recorded state.
    state.set_available(["importance"], False)
    assert state.colour_by == STATE and state.layer.is_state and layers[-1] == (None,)


def test_a_layer_that_cannot_be_built_leaves_the_colours_as_they_were(state):
    def no_map():
        raise InputError("open a lesion map first")

    state.add_colour_layer("importance", "Importance", no_map)
    with pytest.raises(InputError, match="open a lesion map first"):
        state.colour_by = "importance"
    assert state.colour_by == STATE


def test_display_settings_make_the_state_layer_and_the_style(state):
    state.set_recording(_recording(4))
    changes = _record(state.display.events.mode)
    state.display.mode = "abs"
    state.display.auto_scale = False
    state.display.limit = 0.5
    state.display.point_size = 4.0
    assert changes == [("abs", "signed")]
    style = state.style()
    assert style.layer.colormap == "abs" and style.layer.scale == ColourScale.fixed(0.5)
    assert style.point_size == 4.0 and style.gain is None
    assert state.value_range() == (0.0, 0.5)
    state.display.auto_scale = True
    low, high = state.value_range()          # |x| up to 1 on the last frame
    assert low == 0.0 and 0.9 < high <= 1.0
    for field, bad in (("mode", "rainbow"), ("glow", 3.0), ("point_size", 0.0),
                       ("limit", float("nan"))):
        before = getattr(state.display, field)
        with pytest.raises(ViewerError):
            setattr(state.display, field, bad)
        assert getattr(state.display, field) == before


def test_run_settings_are_validated_and_make_generation_settings():
    state = ViewerState()
    state.run.temperature = 0.0
    state.run.max_new_tokens = 5
    state.run.seed = 7
    settings = state.run.generation_settings(top_k=3)
    assert (settings.max_new_tokens, settings.temperature, settings.seed, settings.top_k) == \
        (5, 0.0, 7, 3)
    for field, bad in (("max_new_tokens", 0), ("max_new_tokens", 2.5), ("temperature", -1),
                       ("states_dtype", "int8"), ("speed_cap", -1.0)):
        with pytest.raises(ViewerError):
            setattr(state.run, field, bad)


def test_selection_picks_and_highlights_are_checked_against_the_model(state):
    selected, picked, lit = (_record(state.events.selected), _record(state.events.picked),
                             _record(state.events.highlight))
    state.selected = 3
    with pytest.raises(ViewerError, match="neuron 50 is out of range"):
        state.selected = 50
    assert state.selected == 3 and selected == [(3,)]
    state.picked = [9, 2, 9]
    np.testing.assert_array_equal(state.picked, [2, 9])
    with pytest.raises(ViewerError, match="neuron -1 is out of range"):
        state.picked = [1, -1]
    np.testing.assert_array_equal(picked[-1][0], [2, 9])
    state.highlights.set_neurons("find", [4, 5])
    assert state.highlight is not None and np.flatnonzero(state.highlight).tolist() == [4, 5]
    state.highlights.set("find", None)
    assert state.highlight is None and lit[-1] == (None,)
    # Another model: the selection, picks and highlights of the old one are gone.
    state.highlights.set_neurons("find", [1])
    state.set_model(None, anatomy=ball_layout(20), name="other")
    assert state.selected is None and state.picked.size == 0 and state.highlight is None
    assert len(state.recording) == 0 and state.recording.neurons == 20


def test_what_features_draw_over_the_views_is_the_states(state):
    """Clicks (select, pick), the rings of intervened neurons, synapse lines, the text's
    shading and the open atlas: validated, announced once, unchanged by a bad value."""
    selected, picked, rings = (_record(state.events.selected), _record(state.events.picked),
                               _record(state.events.intervened))
    assert state.select(4) and state.select(4) and selected == [(4,), (4,)]   # shown again
    assert not state.select(N) and not state.select(True) and state.selected == 4
    assert state.select(None) and state.selected is None
    state.pick([7, 3])
    state.pick([5], add=True)                                   # Shift+click adds
    np.testing.assert_array_equal(state.picked, [3, 5, 7])
    state.pick([])                                              # a click on nothing
    assert state.picked.size == 0 and len(picked) == 3
    state.intervened = [8, 1, 8]
    np.testing.assert_array_equal(state.intervened, [1, 8])
    with pytest.raises(ViewerError, match="neuron 50 is out of range"):
        state.intervened = [50]
    assert state.intervened.tolist() == [1, 8] and len(rings) == 1

    lines = _record(state.events.lines)
    points, colours = np.zeros((4, 3)), np.ones((4, 4))
    state.set_lines("why", points, colours)
    state.set_lines("circuit", points[:2], colours[:2])
    assert state.shown_lines == "circuit" and lines == [("why",), ("circuit",)]
    with pytest.raises(ViewerError, match="an RGBA colour per point"):
        state.set_lines("circuit", points, colours[:2])
    assert state.lines("circuit")[0].shape == (2, 3)
    state.set_lines("circuit", None)                            # the trace's come back
    assert state.shown_lines == "why" and state.lines("circuit") is None

    flows = _record(state.events.token_flows)
    state.token_flows = [0.5, -1]
    state.token_flows = (0.5, -1.0)                             # the same: no signal
    assert state.token_flows == (0.5, -1.0) and flows == [((0.5, -1.0),)]
    with pytest.raises(ViewerError, match="finite"):
        state.token_flows = [float("nan")]
    assert state.token_flows == (0.5, -1.0)

    atlas, opened = object(), _record(state.events.atlas)
    state.atlas = atlas
    state.atlas = atlas
    assert state.atlas is atlas and state.frozen().atlas is atlas and opened == [(atlas,)]
    # A view that owns a camera writes it when asked (before an export reads it).
    pose = CameraPose(azimuth=10.0, elevation=20.0, center=(0.0, 0.0, 0.0), scale_factor=300.0)
    state.events.camera_wanted.connect(lambda: setattr(state, "camera", pose))
    assert state.sync_camera() == pose == state.camera
    # Another model: its rings start empty.
    state.set_model(None, anatomy=ball_layout(20), name="other")
    assert state.intervened.size == 0


def test_camera_and_view(state):
    cameras = _record(state.events.camera)
    pose = CameraPose(azimuth=30.0, elevation=10.0, center=(0.0, 0.0, 0.0), scale_factor=400.0)
    state.camera = pose
    assert state.camera == pose and cameras == [(pose,)]
    state.view = "top"
    assert state.view == "top" and state.camera is None
    with pytest.raises(ViewerError, match="unknown view 'under'"):
        state.view = "under"
    with pytest.raises(ViewerError, match="CameraPose"):
        state.camera = (1, 2, 3)


def test_interventions_and_comparison(state):
    seen = _record(state.events.interventions)
    state.interventions = [Silence("superclass:optic")]
    assert state.interventions == (Silence("superclass:optic"),) and len(seen) == 1
    with pytest.raises(ViewerError, match="intervention"):
        state.interventions = ["silence everything"]
    state.set_comparing(True, "free")
    assert (state.comparing, state.compare_mode) == (True, "free")
    with pytest.raises(ViewerError, match="comparison mode"):
        state.set_comparing(True, "sideways")


def test_mesh_settings_are_placeholders_that_validate(state):
    state.mesh.mesh_shown = True
    with pytest.raises(ViewerError, match="mesh opacity"):
        state.mesh.mesh_opacity = 2.0


def test_a_snapshot_is_frozen_while_the_recording_grows(state):
    state.set_recording(_recording(3))
    frozen = state.snapshot()
    state.append(_frame(3, np.ones(N, np.float32)))
    state.recording.metadata["later"] = True
    assert len(frozen) == 3 and len(state.recording) == 4
    assert "later" not in frozen.metadata
    np.testing.assert_array_equal(frozen.states(), state.recording.states()[:3])
    assert frozen[2].text_so_far == state.recording[2].text_so_far
    from flyviz.errors import RecordingError

    with pytest.raises(RecordingError, match="frozen snapshot"):
        frozen.append(_frame(3, np.zeros(N, np.float32)))


def test_the_highlight_filter_is_checked_against_the_models_superclasses():
    from flyviz.model.checkpoint import Anatomy

    anatomy = ball_layout(N)
    anatomy = Anatomy(positions=anatomy.positions, valid=anatomy.valid, kind=anatomy.kind,
                      superclass=["optic"] * 25 + ["central"] * 25)
    state = ViewerState()
    state.set_model(None, anatomy=anatomy)
    seen = _record(state.events.filter)
    state.set_filter("optic", " T4 ")
    assert (state.filter_superclass, state.filter_cell_type) == ("optic", "T4")
    assert seen == [("optic", "T4")]
    with pytest.raises(ViewerError, match="unknown superclass 'dragons'; this model's are "
                                          "central, optic"):
        state.set_filter("dragons")
    state.set_filter(cell_type="")
    assert (state.filter_superclass, state.filter_cell_type) == ("optic", "")


def test_the_filter_mask_lights_the_superclass_and_the_cell_type_prefix():
    from flyviz.model.checkpoint import Anatomy
    from flyviz.viewer.highlight import filter_mask

    base = ball_layout(4)
    anatomy = Anatomy(positions=base.positions, valid=base.valid, kind=base.kind,
                      superclass=["optic", "optic", "central", "optic"],
                      cell_type=["T4a", "Mi1", "T4b", "T5"])
    assert filter_mask(anatomy) is None
    assert filter_mask(anatomy, "optic").tolist() == [True, True, False, True]
    assert filter_mask(anatomy, "", " t4").tolist() == [True, False, True, False]
    assert filter_mask(anatomy, "optic", "T4").tolist() == [True, False, False, False]
