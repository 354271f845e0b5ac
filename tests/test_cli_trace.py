"""``flyviz trace``: the printed explanation, its JSON, the graph file, and one-line errors."""

from __future__ import annotations

import json

import pytest
from gl_skip import skip_if_no_offscreen_gl

from flyviz.cli import main
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import write_connectome_dataset, write_recital_web

PROMPT = "the little dog saw a big red ball"


@pytest.fixture
def web_model(tiny_checkpoint, tmp_path):
    write_recital_web(tiny_checkpoint, tmp_path / "model")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "dataset")
    return tmp_path / "model"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, err, *words):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flyviz: error:"), err
    for word in words:
        assert word in lines[0], lines[0]


def test_trace_prints_the_explanation_and_writes_json_and_the_graph(capsys, web_model,
                                                                    tmp_path):
    code, out, _ = _run(capsys, "trace", web_model, "--prompt", PROMPT)
    assert code == 0
    assert "L = logit[" in out and "completeness error" in out
    assert "neurons carrying most at position" in out and "cell types carrying most" in out
    graph_path = tmp_path / "graph.json"
    code, out, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--json", "--nodes",
                          "30", "--window", "5", "--graph", graph_path)
    assert code == 0
    data = json.loads(out)
    assert data["window"] == [data["position"] - 4, data["position"]]
    total = (sum(t["flow"] for t in data["token_flows"]) + data["pad_flow"] + data["bias_flow"]
             + data["earlier_flow"] + data["constant"])
    assert total == pytest.approx(data["target"]["value"], abs=1e-4 * max(1, abs(total)))
    assert data["completeness_error"] == pytest.approx(data["target"]["value"] - total, abs=1e-6)
    assert sum(n["kept"] for n in data["nodes"]) <= 30
    graph = json.loads(graph_path.read_text())
    assert graph["metadata"]["prompt_tokens"][0] == "<s>"
    assert "wrote the graph" in err
    # The same trace with a target and a rival named as text.
    target = data["target"]["text"]
    code, out, _ = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--target", target,
                        "--versus", "<s>", "--json")
    assert code == 0 and json.loads(out)["target"]["versus"]["text"] == "<s>"
    code, out, _ = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--target",
                        f"id:{data['target']['token']}", "--json")
    assert code == 0 and json.loads(out)["target"]["value"] == data["target"]["value"]
    code, out, _ = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--mode", "gradient")
    assert code == 0 and "gradient mode" in out


def test_trace_of_a_recording_and_its_errors(capsys, web_model, tmp_path, tiny_checkpoint,
                                             tokenizer_path):
    rec = tmp_path / "run.flyrec"
    code, _, _ = _run(capsys, "generate", web_model, "--prompt", "the dog", "--max-new-tokens",
                      "4", "--record", rec, "--states", "float32", "--silence", "id:0-9")
    assert code == 0
    code, out, _ = _run(capsys, "trace", "--recording", rec, "--position", "3", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["position"] == 3 and data["interventions"][0]["kind"] == "silence"
    assert abs(data["completeness_error"]) <= 1e-4 * max(1, abs(data["target"]["value"]))
    silenced = [n for n in data["nodes"] if n["neuron"] < 10]
    assert all(n["flow"] == 0 for n in silenced)
    # The same recording traced on another model with as many neurons.
    other = make_random_checkpoint(neurons=tiny_checkpoint.config.neurons, edges=7001,
                                   d_embed=16, vocabulary=tiny_checkpoint.config.vocabulary,
                                   seed=99, tokenizer_path=tokenizer_path)
    write_recital_web(other, tmp_path / "other" / "model")
    write_connectome_dataset(other, tmp_path / "other" / "dataset")
    code, _, err = _run(capsys, "trace", tmp_path / "other" / "model", "--recording", rec,
                        "--position", "3")
    _one_line_error(code, err, "recording")
    code, _, err = _run(capsys, "trace", "--recording", rec, "--position", "40")
    _one_line_error(code, err, "position 40")


@pytest.mark.parametrize("options, words", [
    (("--position", "99"), ("position 99", "0..")),
    (("--position", "-1"), ("negative",)),
    (("--target", " little dog saw"), ("not one token",)),
    (("--target", ""), ("no token",)),
    (("--target", "id:999999"), ("outside the vocabulary",)),
    (("--window", "0"), ("--window 0", "empty")),
    (("--nodes", "0"), ("--nodes 0",)),
    (("--silence", "superclass:nothing_like_this"), ("superclass",)),
])
def test_bad_trace_options_are_one_line_errors(capsys, web_model, options, words):
    code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, *options)
    _one_line_error(code, err, *words)


def test_trace_needs_a_prompt_or_a_recording(capsys, web_model):
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", str(web_model)])
    _one_line_error(exit_info.value.code, capsys.readouterr().err, "--prompt --recording")
    code, _, err = _run(capsys, "trace", web_model, "--prompt", "   ")
    _one_line_error(code, err, "empty")


def test_bench_trace_measures_a_trace_against_forward_steps(capsys, web_model):
    code, out, _ = _run(capsys, "bench", web_model, "--trace", "6", "--threads", "2", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["window"] == 6
    (entry,) = result["kernels"]
    assert entry["forward_ms"] > 0 and entry["sweep_ms"] > 0
    assert entry["trace_ratio"] == pytest.approx(entry["trace_ms"] / entry["forward_ms"])
    neurons = 523
    assert entry["tape_bytes"] >= 6 * 2 * neurons * 4          # x and s, float32, per step
    assert entry["tape_bytes_gradient"] >= entry["tape_bytes"] + 6 * neurons * 4
    assert abs(entry["completeness_error"]) < 1e-3
    code, _, err = _run(capsys, "bench", web_model, "--trace", "1")
    _one_line_error(code, err, "--trace 1")


def test_trace_movie_writes_one_frame_per_step_of_the_window(capsys, web_model, tmp_path):
    pytest.importorskip("vispy")
    iio = pytest.importorskip("imageio.v3")
    frames = tmp_path / "why"
    code, out, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--window", "4",
                          "--movie", frames, "--movie-size", "96x64", "--reverse")
    if code == 2:
        skip_if_no_offscreen_gl(err)
    assert code == 0, err
    assert "L = logit[" in out                      # the explanation is printed as without
    assert "one per step of the window" in err
    written = sorted(frames.glob("*.png"))
    assert len(written) == 4 and iio.imread(written[0]).shape == (64, 96, 3)


@pytest.mark.parametrize("options, words", [
    (("--movie", "why.avi"), (".avi",)),
    (("--movie", "why.mp4", "--movie-size", "huge"), ("WIDTHxHEIGHT",)),
    (("--movie", "why.mp4", "--movie-fps", "0"), ("fps",)),
])
def test_bad_movie_options_are_one_line_errors_before_the_trace(capsys, web_model, tmp_path,
                                                               monkeypatch, options, words):
    import flyviz.record.trace

    def no_trace(*args, **kwargs):
        raise AssertionError("the trace ran before the options were checked")

    monkeypatch.setattr(flyviz.record.trace, "trace", no_trace)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, *options)
    _one_line_error(code, err, *words)
    assert list(here.iterdir()) == []
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", str(web_model), "--prompt", PROMPT, "--movie", "x.mp4",
              "--flow-scale", "loud"])
    _one_line_error(exit_info.value.code, capsys.readouterr().err, "--flow-scale")


@pytest.mark.parametrize("target, words", [("id:-1", ("id -1", "outside the vocabulary")),
                                           ("id:abc", ("'id:abc' is not a token id",)),
                                           ("id:", ("is not a token id",))])
def test_an_id_target_is_read_as_an_id(capsys, web_model, target, words):
    code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--target", target)
    _one_line_error(code, err, *words)


@pytest.mark.parametrize("options", [("--movie-fps", "0"), ("--movie-size", "0x0"),
                                     ("--movie-fps", "8"), ("--reverse",),
                                     ("--flow-scale", "window"), ("--view", "top")])
def test_movie_settings_without_a_movie_are_refused(capsys, web_model, options):
    code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, *options)
    _one_line_error(code, err, options[0], "add --movie OUT")


def _no_model(monkeypatch):
    import flyviz.commands.trace as trace_command

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the outputs were checked")

    monkeypatch.setattr(trace_command, "model_from_args", no_model)


@pytest.mark.parametrize("option, name", [("--movie", "m.gif"), ("--movie", "frames"),
                                          ("--graph", "g.json")])
def test_outputs_that_cannot_be_written_are_refused_before_the_model_loads(
        capsys, web_model, tmp_path, monkeypatch, option, name):
    from pathlib import Path

    _no_model(monkeypatch)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    refused = [(a_file / name, "a-file is a file, not a folder")]
    if Path("/proc/self").is_dir():      # /proc takes no file, though os.access says it does
        refused.append((Path("/proc") / name, "the folder /proc takes no new file"))
    if name == "frames":
        refused.append((a_file, "it is a file; give a folder name"))
    elif option == "--graph":         # (an existing folder named as a movie takes its frames)
        (tmp_path / name).mkdir()
        refused.append((tmp_path / name, "it is a folder; give a file name"))
    for out, words in refused:
        code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, option, out)
        _one_line_error(code, err, f"cannot write {option} {out}", words)
    # A missing folder is no reason: it is made when the output is written.
    with pytest.raises(AssertionError, match="the model loaded"):
        main(["trace", str(web_model), "--prompt", PROMPT, option,
              str(tmp_path / "new" / name)])
    assert not (tmp_path / "new").exists()


def test_a_missing_folder_of_the_graph_is_made_as_export_makes_its_outs(capsys, web_model,
                                                                        tmp_path):
    graph = tmp_path / "new" / "deeper" / "g.json"
    code, _, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--graph", graph)
    assert code == 0, err
    assert json.loads(graph.read_text())["metadata"]["prompt_tokens"][0] == "<s>"


#: A prompt long enough (195 steps) that the tiny model's frozen steps, multiplied over the
#: default window, grow the flows until float32 rounding swamps L.
LONG_PROMPT = PROMPT + " " + " ".join([PROMPT] * 23)


def test_a_trace_whose_flows_do_not_add_up_is_marked_and_exits_1(capsys, web_model):
    code, out, err = _run(capsys, "trace", web_model, "--prompt", LONG_PROMPT, "--json")
    assert code == 1
    data = json.loads(out)                           # the result is still printed, marked
    assert data["window"][1] - data["window"][0] + 1 == 128     # the default window
    assert data["complete"] is False
    error, value = data["completeness_error"], data["target"]["value"]
    assert abs(error) > data["completeness_tolerance"] == pytest.approx(1e-3 * max(1, abs(value)))
    holding = data["holding_window"]
    assert 1 <= holding < 128
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flyviz trace: the flows do not add up")
    assert f"completeness error {error:+.3g}" in lines[0] and f"--window {holding}" in lines[0]
    # The window it names adds up.
    code, out, err = _run(capsys, "trace", web_model, "--prompt", LONG_PROMPT, "--json",
                          "--window", holding)
    assert code == 0, err
    data = json.loads(out)
    assert data["complete"] is True and data["holding_window"] == holding
    assert abs(data["completeness_error"]) <= data["completeness_tolerance"]
    # The text says it too, beside the error.
    code, out, _ = _run(capsys, "trace", web_model, "--prompt", LONG_PROMPT)
    assert code == 1 and "NOT EXACT" in out


def test_the_windows_default_is_the_librarys(capsys, web_model):
    import inspect

    import flyviz
    from flyviz.commands import trace as trace_command
    from flyviz.model.explain import DEFAULT_WINDOW, explain
    from flyviz.record.trace import trace

    assert trace_command.DEFAULT_WINDOW == DEFAULT_WINDOW
    for function in (flyviz.trace, trace, explain):
        assert inspect.signature(function).parameters["window"].default == DEFAULT_WINDOW


def test_a_trace_too_big_for_the_memory_is_refused_before_the_run(capsys, web_model,
                                                                   monkeypatch):
    import flyviz.model.explain as explain

    def no_tape(*args, **kwargs):
        raise AssertionError("the run was recorded before its memory was checked")

    monkeypatch.setattr(explain, "record_tape", no_tape)
    # Room for about 60 steps of the tiny model (523 neurons).
    per_step = explain.trace_memory(523, 512, 1) // 2
    monkeypatch.setattr(explain, "available_memory", lambda: 60 * per_step)
    code, _, err = _run(capsys, "trace", web_model, "--prompt", LONG_PROMPT)
    _one_line_error(code, err, "would need about", "MiB", "--window 47")


def test_a_shared_page_whose_flows_do_not_add_up_says_so(capsys, web_model, tmp_path):
    rec = tmp_path / "long.flyrec"
    code, _, err = _run(capsys, "generate", web_model, "--prompt", LONG_PROMPT,
                        "--max-new-tokens", "1", "--record", rec, "--states", "float32")
    assert code == 0, err
    page = tmp_path / "why.html"
    code, _, err = _run(capsys, "share", rec, "--out", page, "--trace", 190)
    assert code == 1 and page.is_file()
    last = err.strip().splitlines()[-1]
    assert last.startswith("flyviz share: the flows do not add up") and "--window " in last
    holding = int(last.split("--window ")[1].split()[0])
    code, _, err = _run(capsys, "share", rec, "--out", page, "--trace", 190, "--window", holding)
    assert code == 0, err


def test_a_frames_folder_holding_other_files_is_refused_before_the_model_loads(
        capsys, web_model, tmp_path, monkeypatch):
    """``--movie notes`` where notes is a folder of the user's files: the trace ran and was
    printed, and only then was the movie refused (export refuses the same folder before
    its run)."""
    _no_model(monkeypatch)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("mine\n")
    code, out, err = _run(capsys, "trace", web_model, "--prompt", PROMPT, "--movie", folder)
    _one_line_error(code, err, f"{folder} holds other files (todo.txt)")
    assert out == "" and sorted(p.name for p in folder.iterdir()) == ["todo.txt"]
