"""What the commands that read a language recording say about its model and its runs:
one line that names what the user gave and what to give instead."""

from __future__ import annotations

import json

import pytest

from cli_checks import cli_run, one_error_line
from flyviz.record.recording import Recording
from test_cli_commands import web_model  # noqa: F401

PROMPT = "the dog ran to the park"


@pytest.fixture
def recorded(capsys, web_model, tmp_path):  # noqa: F811
    """A run of the tiny model, recorded."""
    path = tmp_path / "run.flyrec"
    code, _, err = cli_run(capsys, "generate", str(web_model), "--prompt", PROMPT,
                           "--max-new-tokens", "4", "--seed", "1", "--record", str(path))
    assert code == 0, err
    return path


@pytest.fixture
def model_gone(recorded, tmp_path):
    """The recording, naming a model folder that is not there."""
    loaded = Recording.load(recorded)
    missing = str(tmp_path / "moved-away")
    loaded.metadata["model"] = missing
    loaded.metadata["model_identity"]["spec"] = missing
    return loaded.save(tmp_path / "gone.flyrec"), missing


#: Every command that loads the model a recording names, and how its user names another.
MODEL_READERS = {
    "replay": (["replay", "{rec}"], "--model SPEC"),
    "share": (["share", "{rec}", "--out", "{tmp}/p.html"], "--model SPEC"),
    "figure": (["figure", "{rec}", "--kind", "raster", "--out", "{tmp}/f.png"], "--model SPEC"),
    "export": (["export", "--recording", "{rec}", "--out", "{tmp}/m.gif"], "SPEC"),
    "convert": (["convert", "{rec}", "{tmp}/x.npz"], "--model SPEC"),
    "trace": (["trace", "--recording", "{rec}", "--position", "2"], "SPEC"),
}


@pytest.mark.parametrize("reader", sorted(MODEL_READERS))
def test_a_recordings_missing_model_is_named_as_the_recordings(capsys, tmp_path, model_gone,
                                                               reader):
    """The loader's 'no such folder: PATH; a model is ...' read as if the user had typed
    PATH; the error says the recording names it and how to give another."""
    path, missing = model_gone
    argv, instead = MODEL_READERS[reader]
    code, _, err = cli_run(capsys, *[a.format(rec=path, tmp=tmp_path) for a in argv])
    one_error_line(code, err, f"the recording names the model {missing}, which is not found "
                   f"(no such folder); give another as {instead}")
    assert "a model is a folder" not in err
    assert not any(tmp_path.glob("[pfmx].*"))


def test_a_missing_model_the_user_typed_keeps_the_loaders_error(capsys, tmp_path, recorded):
    code, _, err = cli_run(capsys, "share", str(recorded), "--out", str(tmp_path / "p.html"),
                           "--model", str(tmp_path / "typo"))
    one_error_line(code, err, f"no such folder: {tmp_path / 'typo'}; a model is")


@pytest.fixture
def other_graph(tmp_path, tokenizer_path, tokenizer_vocabulary):
    """A model of the recorded one's size on another graph (another seed)."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_fly_llm_hf

    other = validate_checkpoint(make_random_checkpoint(
        neurons=523, edges=7001, d_embed=16, vocabulary=tokenizer_vocabulary, readout_rank=12,
        seed=12, tokenizer_path=tokenizer_path, name="other"))
    write_fly_llm_hf(other, tmp_path / "other")         # holds its graph: no dataset beside
    return tmp_path / "other"


#: Every command that shows a recording with another model (--model, or SPEC for export).
MISMATCH_READERS = {
    "convert": ["convert", "{rec}", "{tmp}/x.npz", "--model", "{other}"],
    "export": ["export", "{other}", "--recording", "{rec}", "--out", "{tmp}/frames", "--size",
               "64x48", "--frames-per-token", "1", "--hold", "0", "--tokens", "1:2"],
    "share": ["share", "{rec}", "--out", "{tmp}/p.html", "--model", "{other}"],
    "figure": ["figure", "{rec}", "--kind", "raster", "--out", "{tmp}/f.png", "--model",
               "{other}"],
}


@pytest.mark.parametrize("reader", sorted(MISMATCH_READERS))
def test_a_recording_shown_with_another_graph_says_so(capsys, tmp_path, recorded, other_graph,
                                                      reader):
    """share and figure drew a run on another model's graph without a word; every command
    that does now writes the note convert and export write, and still writes its file."""
    argv = [a.format(rec=recorded, tmp=tmp_path, other=other_graph)
            for a in MISMATCH_READERS[reader]]
    code, _, err = cli_run(capsys, *argv)
    assert code == 0, err
    assert "flyviz: note: run.flyrec was made with model on a different graph" in err, err
    assert "in other" in err


def test_replaying_a_comparison_says_which_of_its_runs_was_replayed(capsys, tmp_path,
                                                                    web_model):  # noqa: F811
    """'all 6 generated tokens match' read as both runs of a comparison; a teacher-forced
    one replays its untouched run, a free-running one its intervened run."""
    from flyviz.model.interventions import as_interventions
    from flyviz.model.resolve import load_model
    from flyviz.record.compare import Comparison
    from flyviz.record.run import GenerationSettings

    checkpoint = load_model(str(web_model))
    for mode in ("forced", "free"):
        comparison = Comparison.for_checkpoint(checkpoint, as_interventions(["silence input"]))
        try:
            comparison.record(PROMPT, GenerationSettings(max_new_tokens=4, seed=2), mode=mode,
                              spec=str(web_model)).save(tmp_path / f"{mode}.flyrec")
        finally:
            comparison.close()
    for mode, run in (("forced", "untouched"), ("free", "intervened")):
        code, out, _ = cli_run(capsys, "replay", str(tmp_path / f"{mode}.flyrec"))
        assert code == 0
        assert out.startswith(f"{mode}.flyrec: all 4 generated tokens of its {run} run"), out
        code, out, _ = cli_run(capsys, "replay", str(tmp_path / f"{mode}.flyrec"), "--json")
        assert code == 0 and json.loads(out)["run"] == run
    code, out, _ = cli_run(capsys, "generate", str(web_model), "--prompt", PROMPT,
                           "--max-new-tokens", "2", "--record", str(tmp_path / "one.flyrec"))
    code, out, _ = cli_run(capsys, "replay", str(tmp_path / "one.flyrec"), "--json")
    assert code == 0 and json.loads(out)["run"] is None


def test_a_recording_with_a_damaged_header_says_damaged_once(capsys, tmp_path, recorded):
    """'the header is not valid JSON; the file is damaged, it is not a flyviz recording or
    it is damaged' said it twice; a model file keeps its 'the file is damaged, download it
    again'."""
    from flyviz.errors import CheckpointError
    from flyviz.model.safetensors_io import SafetensorsFile

    data = bytearray(recorded.read_bytes())
    data[8] = ord("#")                                  # the header's opening brace
    bad = tmp_path / "bad.flyrec"
    bad.write_bytes(bytes(data))
    code, _, err = cli_run(capsys, "replay", str(bad))
    one_error_line(code, err, "bad.flyrec: the header is not valid JSON; it is not a flyviz "
                   "recording or it is damaged")
    assert err.count("damaged") == 1
    with pytest.raises(CheckpointError, match="not valid JSON; the file is damaged, download "
                                              "it again"):
        SafetensorsFile(bad, error=CheckpointError)


@pytest.mark.parametrize("argv", [
    ["generate", "demo", "--prompt", "hi", "--max-new-tokens", "2"],
    ["compare", "demo", "--prompt", "hi", "--silence", "all"],
    ["export", "demo", "--prompt", "hi", "--out", "{tmp}/m.mp4"],
    ["simulate", "demo", "--duration", "10ms"],
], ids=lambda argv: argv[0])
def test_every_record_option_wants_a_flyrec_name(capsys, tmp_path, argv):
    """--record x.txt saved a recording named x.txt with generate (simulate refused it): one
    check refuses it for every command, in the same words, before anything runs."""
    given = tmp_path / "x.txt"
    code, _, err = cli_run(capsys, *[a.format(tmp=tmp_path) for a in argv],
                           "--record", str(given))
    one_error_line(code, err, f"--record {given} must end in .flyrec",
                   "e.g. --record x.flyrec")
    assert list(tmp_path.iterdir()) == []
