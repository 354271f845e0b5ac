"""Runs of any kind through flyviz.runs: the request, the run, the controller and its engine.

A script starts a run the way every host does: the state's kind says which run the state
describes, :class:`flyviz.runs.Run` steps the kind's frames into the recording, and a
:class:`flyviz.runs.Runs` over a :class:`ThreadEngine` keeps the state following (pause,
step, resume, stop, with no Qt). A spiking run's settings are a part of the state: a script
that sets them gets the run, spike for spike, that the Stimulus dock (bound to the same
object) starts.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import flyviz
from flyviz.errors import FlyvizError, InputError
from flyviz.record.run import GenerationSettings
from flyviz.runs import IDLE, PAUSED, Run, RunRequest, Runs
from flyviz.viewer.state import ViewerState

pytestmark = pytest.mark.usefixtures("spiking_kernels")


def _state(model) -> ViewerState:
    state = ViewerState()
    state.set_model(model)
    return state


def test_a_run_is_the_same_as_the_apis_and_a_bad_request_is_one_line(demo):
    run = Run(demo, RunRequest("Once upon a time", GenerationSettings(max_new_tokens=4)))
    recording = run.record()
    reference = flyviz.run(demo, "Once upon a time", max_new_tokens=4)
    assert len(recording) == len(reference) and recording.metadata["prompt"] == "Once upon a time"
    np.testing.assert_array_equal(recording.states(), reference.states())
    assert run.request.settings.seed is not None           # the seed the recording keeps
    with pytest.raises(InputError, match="nothing to compare"):
        Run(demo, RunRequest("Once", compare="forced"))     # before anything runs
    with pytest.raises(InputError, match="comparison mode 'sideways'"):
        Run(demo, RunRequest("Once", interventions=["silence superclass:visual_projection"],
                             compare="sideways"))


def test_a_request_of_the_wrong_settings_type_or_dtype_is_one_line(demo):
    from flyviz.kinds.spiking import BinSettings

    for request, said in [
            (RunRequest("Once", BinSettings()), "a Fly LLM run's settings are a flyviz.record.run."
                                                "GenerationSettings \\(or None\\), not "
                                                "BinSettings"),
            (RunRequest("Once", states_dtype="int8"), "states_dtype 'int8' \\(str\\) is not one of "
                                                      "float16, float32"),
            (RunRequest(None), "the prompt must be text \\(a str\\), not None"),
            ("Once upon a time", "a run's request is a flyviz.runs.RunRequest \\(or None\\), "
                                 "not 'Once upon a time'")]:
        with pytest.raises(InputError, match=said):
            Run(demo, request)
    # None still means the kind's default (float16 states for the Fly LLM).
    assert Run(demo, RunRequest("Once", states_dtype=None)).recording.states_dtype == "float16"


def test_a_comparison_is_an_option_of_the_request(demo):
    request = RunRequest("Once upon a time", GenerationSettings(max_new_tokens=3, seed=1),
                         ["silence superclass:visual_projection"], compare="free")
    recording = Run(demo, request).record()
    assert recording.baseline is not None and len(recording.baseline) >= len(recording) > 0
    assert recording.metadata["comparison"]["mode"] == "free"
    assert len(recording.metadata["comparison"]["kl"]) == len(recording)
    untouched = flyviz.run(demo, "Once upon a time", max_new_tokens=3, seed=1)
    np.testing.assert_array_equal(recording.baseline.states(), untouched.states())


def test_the_controller_starts_the_run_the_state_describes_and_the_state_follows(demo):
    state = _state(demo)
    state.docks.prompt = "Tom and his dog"
    state.run.max_new_tokens, state.run.speed_cap = 3, 0
    runs = Runs(state)
    grew: list[int] = []
    ended: list[tuple[str, int]] = []
    runs.events.frame.connect(grew.append)
    runs.events.ended.connect(lambda reason, n: ended.append((reason, n)))
    run = runs.start()
    assert run is not None and runs.wait(120)
    assert state.recording is run.recording and run.recording.metadata["prompt"] == "Tom and his dog"
    n = len(run.recording)
    assert ended == [("done", n)] and grew[-1] == n and state.index == n - 1
    assert runs.worker_state == IDLE
    # A request the kind refuses is said, and nothing starts.
    said: list[tuple[str, bool]] = []
    runs.events.message.connect(lambda text, error: said.append((text, error)))
    state.docks.prompt = "   "
    assert runs.start() is None and said[-1][1] and state.recording is run.recording
    runs.close()


class _Counting:
    """A model of a kind whose runs never end on their own: frame i lights neuron i % 7."""

    neurons, name = 7, "counting"

    def __init__(self) -> None:
        from flyviz.kinds import ModelKind, state_frame

        class Counting(ModelKind):
            title = "counting model"

            def frames(self, model, request, settings=None, *, interventions=(),
                       recording=None):
                i = 0
                while True:
                    values = np.zeros(model.neurons, np.float32)
                    values[i % model.neurons] = 1.0
                    frame = state_frame(i, values)
                    if recording is not None:
                        recording.append(frame)
                    yield frame
                    i += 1

        self.kind = Counting()


def test_pause_step_resume_and_stop_without_qt():
    state = _state(_Counting())
    runs = Runs(state)
    changed = threading.Condition()
    seen: list[str] = []

    def note(worker: str) -> None:
        with changed:
            seen.append(worker)
            changed.notify_all()

    runs.events.worker.connect(note)
    runs.events.frame.connect(lambda _n: note("frame"))
    runs.start(RunRequest(start_paused=True))
    with changed:
        assert changed.wait_for(lambda: PAUSED in seen, 60)
    assert len(state.recording) == 0                       # paused before the first frame
    runs.step()
    with changed:
        assert changed.wait_for(lambda: seen[-2:] == ["frame", PAUSED], 60)
    assert len(state.recording) == 1 and state.index == 0  # exactly one more, still paused
    runs.resume()
    with changed:
        assert changed.wait_for(lambda: len(state.recording) >= 5, 60)
    runs.stop()                                            # returns once the thread ended
    stopped_at = len(state.recording)
    assert runs.end_reason == "stopped" and runs.worker_state == IDLE
    np.testing.assert_array_equal(np.argmax(state.recording.states(), axis=1),
                                  np.arange(stopped_at) % 7)
    runs.close()


def test_a_failing_run_is_said_and_record_raises(demo):
    from flyviz.kinds import ModelKind, state_frame

    class Failing(ModelKind):
        title = "failing model"

        def frames(self, model, request, settings=None, *, interventions=(), recording=None):
            frame = state_frame(0, np.ones(model.neurons, np.float32))
            if recording is not None:
                recording.append(frame)
            yield frame
            raise InputError("the model ran out of input")

    class Model:
        kind = Failing()
        neurons, name = 5, "failing"

    runs = Runs(_state(Model()))
    with pytest.raises(FlyvizError, match="ran out of input"):
        runs.record()
    assert runs.end_reason == "failed" and len(runs.state.recording) == 1
    runs.close()


# ---------------------------------------------------------------- the spiking brain
@pytest.fixture(scope="module")
def spiking_model(tmp_path_factory):
    from test_spiking_kind import write_brain

    from flyviz.kinds.spiking import SpikingModel

    return SpikingModel.load(str(write_brain(tmp_path_factory.mktemp("runs") / "brain")))


def test_a_script_reproduces_a_spiking_view_from_the_states_settings(spiking_model):
    from flyviz.kinds.spiking import SPIKING, BinSettings, Stimulus, record_run

    state = _state(spiking_model)
    settings = state.kind_settings.of(SPIKING)
    assert settings is state.kind_settings.of(SPIKING)     # one object, kept by the state
    settings.excite, settings.silence = "side:left", "id:720575940600000005"
    settings.rate, settings.bins, settings.seed, settings.speed = 400.0, 6, 3, 0
    runs = Runs(state)
    assert runs.speed_cap() == 0
    runs.record()
    shown = state.recording
    offline = record_run(spiking_model, Stimulus("side:left", 400.0, "id:720575940600000005", 3),
                         BinSettings(bins=6))
    assert len(shown) == 6 and shown.metadata["spiking"]["silenced"] == 1
    np.testing.assert_array_equal(shown.states(), offline.states())
    assert shown.metadata["spiking"]["bin_spikes"] == offline.metadata["spiking"]["bin_spikes"]
    for got, want in zip(shown.spikes.arrays(), offline.spikes.arrays()):
        np.testing.assert_array_equal(got, want)
    # The speed is a factor of real time: 2x of 10 ms bins is 200 bins a second.
    settings.speed = 2.0
    assert runs.speed_cap() == pytest.approx(200.0)
    # Bad settings are refused where they are set, and change nothing.
    with pytest.raises(InputError, match="the number of bins"):
        settings.bins = 0
    assert settings.bins == 6
    # A frozen state copies them; later changes do not reach the copy.
    copy = state.frozen()
    settings.rate = 10.0
    assert copy.kind_settings.of(SPIKING).rate == 400.0
    runs.close()


def test_the_stimulus_dock_is_a_view_of_the_states_settings(qtbot):
    pytest.importorskip("pytestqt")
    from flyviz.app.spiking.spiking_panel import StimulusPanel
    from flyviz.kinds.spiking import SpikingRunSettings

    panel = StimulusPanel()
    qtbot.addWidget(panel)
    settings = SpikingRunSettings()
    panel.bind(settings)
    settings.rate, settings.bins, settings.excite = 400.0, 12, "id:0"     # a script
    assert (panel.rate.value(), panel.bins.value(), panel.excite.text()) == (400.0, 12, "id:0")
    panel.silence.setText("type:MN9")                                     # the user
    panel.speed.setValue(0.5)
    assert (settings.silence, settings.speed) == ("type:MN9", 0.5)
    assert panel.stimulus() == settings.stimulus()
    # 0 Hz drives nothing (the run would be a dark brain): the settings refuse it, for the
    # dock and the napari widget alike, and the dock's box stops above it.
    for rate in (0.0, -5.0):
        with pytest.raises(InputError, match="above 0 Hz"):
            settings.rate = rate
    panel.rate.setValue(0.0)
    assert settings.rate == panel.rate.value() > 0
