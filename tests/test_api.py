"""The public API: ``import flyviz`` stays Qt-free, load/run/save/load/compare/export_movie
behave as documented, and the one runner reuses its engine without mixing runs."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import flyviz
from flyviz.errors import FlyvizError, InputError, ModelNotFoundError
from flyviz.record.run import GenerationSettings
from flyviz.record.runner import Model

PROMPT = "the cat and the dog"
GUI_MODULES = ("PySide6", "shiboken6", "vispy", "pyqtgraph", "OpenGL")


def _modules_loaded_by(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; the top-level modules it loaded, and its output."""
    script = textwrap.dedent(code) + textwrap.dedent("""
        import json, sys
        print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return {"modules": set(json.loads(done.stdout.strip().splitlines()[-1])),
            "stdout": done.stdout}


def test_import_flyviz_loads_no_gui_and_not_even_numpy():
    loaded = _modules_loaded_by("import flyviz")["modules"]
    assert not loaded & set(GUI_MODULES)
    # The API's modules load on first use: importing the package costs milliseconds.
    assert "numpy" not in loaded and "scipy" not in loaded


def test_loading_and_running_the_demo_loads_no_gui():
    result = _modules_loaded_by("""
        import flyviz
        model = flyviz.load("demo")
        recording = flyviz.run(model, "Once upon a time", max_new_tokens=3, seed=1)
        print(len(recording), recording.states().shape)
    """)
    assert not result["modules"] & set(GUI_MODULES)
    frames, shape = result["stdout"].splitlines()[0].split(" ", 1)
    assert shape == f"({frames}, 49393)" and int(frames) >= 5


def test_the_public_names_are_documented():
    for name in flyviz.__all__:
        value = getattr(flyviz, name)
        assert inspect.getdoc(value), name
    for function in (flyviz.load, flyviz.run, flyviz.compare, flyviz.trace, flyviz.export_movie):
        doc = inspect.getdoc(function)
        assert "Parameters\n----------" in doc and "Returns\n-------" in doc, function.__name__
    assert flyviz.errors.FlyvizError is FlyvizError
    with pytest.raises(AttributeError):
        flyviz.no_such_name  # noqa: B018


def test_the_error_classes_have_one_home():
    import flyviz.model.errors as old
    from flyviz.export import ExportCancelled
    from flyviz.model.selection import SelectionError

    for name in old.__all__:
        assert getattr(old, name) is getattr(flyviz.errors, name)
    assert SelectionError is flyviz.errors.SelectionError
    assert ExportCancelled is flyviz.errors.ExportCancelled
    assert issubclass(flyviz.errors.MissingDependencyError, FlyvizError)


@pytest.fixture
def model(tiny_checkpoint):
    with Model(tiny_checkpoint, spec="tiny") as loaded:
        yield loaded


def test_run_records_states_tokens_texts_and_probabilities(model):
    recording = flyviz.run(model, PROMPT, max_new_tokens=6, temperature=0.8, seed=3)
    frames = list(model.frames(PROMPT, GenerationSettings(max_new_tokens=6, temperature=0.8,
                                                          seed=3)))
    assert len(recording) == len(frames)
    states = recording.states()
    assert states.shape == (len(frames), model.neurons) and states.dtype == np.float32
    # float16 storage: within its precision of the engine's states.
    np.testing.assert_allclose(states, np.stack([f.state for f in frames]), atol=2e-3)
    assert list(recording.token_ids) == [f.input_token_id for f in frames]
    assert recording.token_ids[0] == model.checkpoint.config.bos_token_id
    assert recording.token_texts == [f.input_text for f in frames]
    assert list(recording.predicted_ids) == [f.predicted_token_id for f in frames]
    np.testing.assert_array_equal(recording.probabilities, [f.probability for f in frames])
    generated = [f.predicted_token_id for f in frames if f.is_generation]
    assert recording.text == model.tokenizer.decode(generated) == frames[-1].text_so_far
    assert recording.prompt == PROMPT and recording.metadata["seed"] == 3
    assert recording.metadata["model"] == "tiny"


def test_save_and_load_give_back_the_same_run(model, tmp_path):
    recording = flyviz.run(model, PROMPT, max_new_tokens=5, states_dtype="float32")
    path = recording.save(tmp_path / "run.flyrec")
    loaded = flyviz.Recording.load(path)
    np.testing.assert_array_equal(loaded.states(), recording.states())
    assert loaded.text == recording.text and loaded.token_texts == recording.token_texts
    np.testing.assert_array_equal(loaded.probabilities, recording.probabilities)
    assert loaded.metadata == recording.metadata
    # A random seed was drawn, stored, and replays the run.
    from flyviz.record.replay import replay_recording

    assert isinstance(loaded.metadata["seed"], int)
    assert replay_recording(loaded, model).matched


def test_interventions_as_objects_or_text_are_the_same_run(model):
    settings = dict(max_new_tokens=5, seed=2)
    as_objects = flyviz.run(model, PROMPT, interventions=[
        flyviz.Silence("superclass:cb_sensory"), flyviz.Clamp("side:left", 0.25, start=3)],
        **settings)
    as_text = flyviz.run(model, PROMPT, interventions=[
        "silence superclass:cb_sensory", "--clamp=side:left=0.25@3:"], **settings)
    np.testing.assert_array_equal(as_objects.states(), as_text.states())
    assert as_objects.metadata["interventions"] == as_text.metadata["interventions"]
    anatomy = model.anatomy
    sensory = np.array([s == "cb_sensory" for s in anatomy.superclass])
    left = np.array([s == "left" for s in anatomy.side])
    states = as_objects.states()
    # Silenced throughout; from token 3 on the later clamp wins where both apply.
    assert np.all(states[:, sensory & ~left] == 0) and np.all(states[:3, sensory] == 0)
    np.testing.assert_allclose(states[3:, left], 0.25, atol=1e-3)
    plain = flyviz.run(model, PROMPT, **settings)
    assert not np.array_equal(plain.states(), as_objects.states())
    with pytest.raises(InputError, match="not an intervention"):
        flyviz.run(model, PROMPT, interventions=["shout superclass:cb_sensory"])
    with pytest.raises(InputError, match="not an intervention"):
        flyviz.run(model, PROMPT, interventions=[42])


def test_one_engine_serves_every_run_and_runs_do_not_leak_into_each_other(model):
    settings = GenerationSettings(max_new_tokens=6, seed=4, temperature=0.7)
    first = model.record(PROMPT, settings, interventions=["silence side:left"])
    engine = model.engine
    second = model.record(PROMPT, settings)
    third = model.record(PROMPT, settings)
    assert model.engine is engine
    np.testing.assert_array_equal(second.states(), third.states())
    assert not np.array_equal(first.states(), second.states())
    with Model(model.checkpoint) as fresh:
        np.testing.assert_array_equal(fresh.record(PROMPT, settings).states(), second.states())


def test_a_new_run_ends_the_previous_one_between_two_tokens(model):
    settings = GenerationSettings(max_new_tokens=8, seed=5)
    reference = [f.state for f in model.frames(PROMPT, settings)]
    old = model.frames(PROMPT, settings, interventions=["silence all"])
    assert np.all(next(old).state == 0)
    new = model.frames(PROMPT, settings)
    assert next(old, None) is None  # superseded: it never steps the engine again
    states = [f.state for f in new]
    assert len(states) == len(reference)
    for got, want in zip(states, reference):
        np.testing.assert_array_equal(got, want)
    # A run stopped by its consumer leaves the engine ready for the next one.
    cancelled = model.frames(PROMPT, settings)
    next(cancelled)
    cancelled.close()
    np.testing.assert_array_equal(next(model.frames(PROMPT, settings)).state, reference[0])


def test_a_spiking_brain_or_no_prompt_given_the_language_functions_is_said(model):
    from flyviz.kinds.spiking import SpikingModel

    brain = SpikingModel.load("demo")
    for call in (lambda: flyviz.run(brain, PROMPT), lambda: flyviz.trace(brain, PROMPT),
                 lambda: flyviz.compare(brain, PROMPT, ["silence sign:inhibitory"]),
                 lambda: flyviz.importance(brain, PROMPT)):
        with pytest.raises(InputError, match="SpikingModel is a model of another kind, not a Fly LLM: "
                                             ".*flyviz.runs.Run.*BrainWidget.live"):
            call()
    for call in (lambda: flyviz.run(model, None, max_new_tokens=2),
                 lambda: flyviz.compare(model, None, ["silence sign:inhibitory"],
                                        max_new_tokens=2)):
        with pytest.raises(InputError, match="the prompt must be text \\(a str\\), not None"):
            call()


def test_bad_input_is_checked_when_the_run_is_asked_for(model):
    with pytest.raises(InputError, match="prompt is empty"):
        model.frames("   ")
    with pytest.raises(InputError, match="max new tokens"):
        flyviz.run(model, PROMPT, max_new_tokens=0)
    with pytest.raises(InputError, match="outside|selects no"):
        model.frames(PROMPT, interventions=["silence id:999999"])
    with pytest.raises(InputError, match="not a model"):
        flyviz.run(object(), PROMPT)
    with pytest.raises(ModelNotFoundError):
        flyviz.load("/no/such/model/folder")


def test_run_and_compare_accept_a_spec(tmp_path, tiny_checkpoint):
    from flyviz.model.writers import write_connectome_dataset, write_recital_web

    write_recital_web(tiny_checkpoint, tmp_path / "model")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "dataset")
    recording = flyviz.run(str(tmp_path / "model"), PROMPT, max_new_tokens=4)
    assert recording.metadata["model"] == str((tmp_path / "model").resolve())
    result = flyviz.compare(str(tmp_path / "model"), PROMPT, "silence superclass:cb_sensory",
                            max_new_tokens=4)
    assert result["baseline"]["tokens"] == list(recording.generated_ids)
    assert result["interventions"][0]["kind"] == "silence"
    steps = result["forced"]["steps"]
    assert len(steps) == len(recording.generated_ids)
    assert all(step["kl"] >= 0 for step in steps) and any(step["kl"] > 0 for step in steps)


def test_load_takes_a_kernel_and_both_kernels_agree(tiny_checkpoint):
    from flyviz.model import kernels

    settings = GenerationSettings(max_new_tokens=5, seed=1)
    runs = {}
    for kernel in ("scipy", "llvm"):
        with Model(tiny_checkpoint, kernel=kernel, threads=1) as model:
            runs[kernel] = model.record(PROMPT, settings, states_dtype="float32")
            assert model.engine.kernel == kernels.resolve(kernel)
    np.testing.assert_array_equal(runs["scipy"].states(), runs["llvm"].states())


def test_export_movie_writes_frames_drawn_where_the_model_puts_its_neurons(tmp_path):
    """In this process, like a script, whatever OpenGL views other tests drew before
    (the offscreen renderer releases Qt's context before it draws, and its own after)."""
    pytest.importorskip("vispy")
    iio = pytest.importorskip("imageio.v3")
    from flyviz.errors import RecordingError
    from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer

    out = tmp_path
    tokenizer = write_tokenizer(out / "tokenizer.json", vocab_size=300)
    checkpoint = make_random_checkpoint(neurons=523, edges=7001, vocabulary=300,
                                        tokenizer_path=tokenizer, seed=11)
    with Model(checkpoint) as model:
        recording = flyviz.run(model, "the cat and the dog", max_new_tokens=2)
        flyviz.export_movie(recording, out / "frames", model=model, size="96x64",
                            frames_per_token=1, overlays=False, start=1, stop=3)
    saved = recording.save(out / "run.flyrec")
    with pytest.warns(UserWarning, match="generic layout"):
        flyviz.export_movie(saved, out / "ball", size=(96, 64), frames_per_token=1, stop=1)
    with pytest.raises(InputError, match="unknown option\\(s\\) colour"):
        flyviz.export_movie(recording, out / "x.mp4", colour="red")
    with pytest.raises(FlyvizError) as bad_fps:
        flyviz.export_movie(recording, out / "x.mp4", fps=0)
    assert type(bad_fps.value).__name__ == "ExportError"
    with pytest.raises(RecordingError):
        flyviz.export_movie(out / "missing.flyrec", out / "x.mp4")
    with pytest.raises(FlyvizError, match="OpenGL 'vulkan'.* auto, egl, default, osmesa"):
        flyviz.export_movie(recording, out / "x.mp4", gl="vulkan")
    # A spec for the model: refused with the line that loads it, before anything renders.
    with pytest.raises(InputError, match="model must be a loaded model .*, not 'demo' \\(str\\); "
                                         "load it first: model=flyviz.load\\('demo'\\)"):
        flyviz.export_movie(recording, out / "x.mp4", model="demo")
    with pytest.raises(InputError, match="model must be a loaded model"):
        flyviz.export_movie(recording, out / "x.mp4", model=checkpoint)
    pngs = sorted((out / "frames").glob("*.png"))
    assert len(pngs) == 2
    image = iio.imread(pngs[-1])
    assert image.shape == (64, 96, 3)
    # Something is drawn: not one flat background colour.
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 10
    assert len(list((out / "ball").glob("*.png"))) == 1
    assert not (out / "x.mp4").exists()


def test_a_str_is_text_a_path_is_a_file_and_a_str_naming_a_file_is_refused(model, tmp_path,
                                                                             monkeypatch):
    story = "the cat and the dog sat on the mat.\n\nthe dog ran to the cat."
    (tmp_path / "story.txt").write_text(story, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    as_text = flyviz.importance(model, story, by=None, context=16)
    as_file = flyviz.importance(model, Path("story.txt"), by=None, context=16)
    np.testing.assert_array_equal(as_text.estimate, as_file.estimate)
    assert as_text.positions == as_file.positions > 10
    # A list may mix texts and paths: each str is a text, each Path a file.
    mixed = flyviz.importance(model, [story, Path("story.txt")], by=None, context=16)
    assert mixed.positions == 2 * as_text.positions
    # The name of an existing file, given as a str, is neither read nor analysed as text.
    for given in ("story.txt", str(tmp_path / "story.txt"), [story, "story.txt"]):
        with pytest.raises(InputError, match=r"'[^']*story\.txt' is the name of an existing "
                                             r"file.*pass pathlib\.Path\("):
            flyviz.importance(model, given, by=None, context=16)
    with pytest.raises(InputError, match="existing folder"):
        flyviz.importance(model, str(tmp_path), by=None, context=16)
    # A plain word is text, even where a folder of that name exists here.
    (tmp_path / "cat").mkdir()
    assert flyviz.importance(model, "cat", by=None, context=16).positions >= 1
    flyviz.run(model, PROMPT, max_new_tokens=2).save(tmp_path / "run.flyrec")
    with pytest.raises(InputError, match=r"'run\.flyrec' is the name of an existing file.*"
                                         r"to trace the saved recording"):
        flyviz.trace(model, "run.flyrec")
    assert flyviz.trace(model, Path("run.flyrec")).position >= 0
    with pytest.raises(InputError, match="to patch from the saved recording"):
        flyviz.Patch("all", "run.flyrec")
    assert flyviz.Patch("all", Path("run.flyrec")).source.label == "recording run.flyrec"


@pytest.mark.parametrize("prompt", [b"the cat", 5, ["the cat"]], ids=["bytes", "int", "list"])
def test_a_prompt_that_is_not_a_str_is_refused_everywhere(model, prompt):
    kind = type(prompt).__name__
    calls = {
        "run": lambda: flyviz.run(model, prompt, max_new_tokens=2),
        "compare": lambda: flyviz.compare(model, prompt, ["silence all"], max_new_tokens=2),
        "frames": lambda: list(model.frames(prompt, GenerationSettings(max_new_tokens=2))),
        "trace": lambda: flyviz.trace(model, prompt),
        "patch source": lambda: flyviz.run(model, PROMPT, max_new_tokens=2, interventions=[
            flyviz.Patch("all", flyviz.PatchSource.from_prompt(prompt))]),
    }
    for name, call in calls.items():
        with pytest.raises(InputError, match=rf"\b{kind}\b") as caught:
            call()
        assert "\n" not in str(caught.value), name
    with pytest.raises(InputError, match=rf"the prompt must be text \(a str\), not .*\({kind}\)"):
        flyviz.run(model, prompt, max_new_tokens=2)


MISTYPED = {
    "max_new_tokens='3'": (dict(max_new_tokens="3"), r"max new tokens must be a whole number"),
    "max_new_tokens=2.5": (dict(max_new_tokens=2.5), r"max new tokens must be a whole number"),
    "max_new_tokens=0": (dict(max_new_tokens=0), r"max new tokens 0 must be between 1 and"),
    "max_new_tokens=nan": (dict(max_new_tokens=float("nan")),
                           r"max new tokens must be a whole number"),
    "seed=inf": (dict(seed=float("inf")), r"seed must be a whole number"),
    "min_new_tokens=1.5": (dict(min_new_tokens=1.5), r"min new tokens must be a whole number"),
    "seed=1.5": (dict(seed=1.5), r"seed must be a whole number"),
    "seed='7'": (dict(seed="7"), r"seed must be a whole number"),
    "top_k='5'": (dict(top_k="5"), r"top-k must be a whole number"),
    "temperature='hot'": (dict(temperature="hot"), r"temperature must be a number"),
    "top_p=None": (dict(top_p=None), r"top-p must be a number"),
    "states_dtype='int8'": (dict(states_dtype="int8"), r"states_dtype 'int8' .* is not one of "
                                                       r"float16, float32"),
}


@pytest.mark.parametrize("case", sorted(MISTYPED))
def test_a_mistyped_run_setting_is_one_input_error_naming_it(model, case):
    kwargs, expected = MISTYPED[case]
    with pytest.raises(InputError, match=expected) as caught:
        flyviz.run(model, PROMPT, **{"max_new_tokens": 2, **kwargs})
    assert "\n" not in str(caught.value)
    if "states_dtype" not in kwargs and "min_new_tokens" not in kwargs and "top_k" not in kwargs:
        with pytest.raises(InputError, match=expected):
            flyviz.compare(model, PROMPT, ["silence all"], **{"max_new_tokens": 2, **kwargs})


def test_compare_and_neuron_trace_refuse_what_they_cannot_take(model):
    with pytest.raises(InputError, match="interventions must be a list .* not int"):
        flyviz.compare(model, PROMPT, 42, max_new_tokens=2)
    recording = flyviz.run(model, PROMPT, max_new_tokens=2, states_dtype="float32")
    last = model.neurons - 1
    for neuron, expected in ((-1, rf"neuron -1 must be between 0 and {last}"),
                             (model.neurons, rf"neuron {model.neurons} must be between 0 and"),
                             ("5", r"neuron must be a whole number .* not '5' \(str\)"),
                             (1.5, r"neuron must be a whole number")):
        with pytest.raises(InputError, match=expected):
            recording.neuron_trace(neuron)
    np.testing.assert_array_equal(recording.neuron_trace(np.int64(last)),
                                  recording.states()[:, last])
