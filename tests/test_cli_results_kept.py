"""Nothing lost: every command that writes a result refuses, before any model is loaded, to
write over a finished one at its ``--out`` (``simulate``'s: the spike table of a run that may
have taken hours); ``--resume`` continuing an interrupted run is
the one way a result is written over; each command's ``--help`` says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flyviz.analysis.atlas_build import FORMAT as ATLAS_FORMAT
from flyviz.analysis.circuit_file import FILES as CIRCUIT_FILES
from flyviz.analysis.circuit_file import FORMAT as CIRCUIT_FORMAT
from flyviz.cli import main
from flyviz.fileio import KEPT_RESULT_HELP

ROOT = Path(__file__).resolve().parent.parent
#: A model that is not there: a command that reached its loader would say so instead.
NO_MODEL = "no-such-model-folder"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _argv(command: str, tmp_path: Path, out: Path) -> list:
    text = tmp_path / "story.txt"
    text.write_text("Once upon a time there was a little dog.\n", encoding="utf-8")
    return {
        "atlas": ["atlas", NO_MODEL, "--corpus", text, "--workers", "0", "--out", out],
        "sweep": ["sweep", NO_MODEL, "--by", "superclass", "--text", text, "--workers", "0",
                  "--out", out],
        "importance": ["importance", NO_MODEL, "--text", text, "--workers", "0", "--out", out],
        "patch": ["patch", NO_MODEL, "--clean", "a cat", "--corrupt", "a dog", "--answer", " x",
                  "--by", "superclass", "--workers", "0", "--out", out],
        "circuit": ["circuit", NO_MODEL, "--task", tmp_path / "task.jsonl", "--workers", "0",
                    "--out", out],
        "check": ["check", NO_MODEL, "--battery", ROOT / "examples" / "checks-demo.txt",
                  "--workers", "0", "--out", out],
        "simulate": ["simulate", NO_MODEL, "--duration", "10ms", "--out", out],
    }[command]


#: (command, the --out name, whether the result is a folder, what the refusal calls it)
RESULTS = [("atlas", "stories.atlas", True, "atlas"),
           ("sweep", "lesions.csv", False, "lesion map"),
           ("importance", "estimate.csv", False, "importance estimate"),
           ("patch", "trace.csv", False, "causal trace"),
           ("circuit", "found", True, "circuit"),
           ("check", "checks.csv", False, "check table"),
           ("simulate", "spikes.parquet", False, "spike table"),
           ("simulate", "spikes.csv.gz", False, "spike table")]


def _finished(out: Path, folder: bool) -> Path:
    """A stand-in for a finished result at ``out`` (a folder: an atlas's or a circuit's
    marker, so that it is taken for one); returns the file that must survive."""
    if not folder:
        out.write_text("hours of work\n", encoding="utf-8")
        return out
    out.mkdir()
    if out.suffix == ".atlas":
        kept = out / ".zattrs"
        kept.write_text(json.dumps({"flyviz_atlas": {"format": ATLAS_FORMAT}}), "utf-8")
        return kept
    for name in CIRCUIT_FILES:
        (out / name).write_text("kept\n", encoding="utf-8")
    kept = out / "circuit.json"
    kept.write_text(json.dumps({"format": CIRCUIT_FORMAT}), encoding="utf-8")
    return kept


@pytest.mark.parametrize("command, name, folder, what", RESULTS)
def test_a_finished_result_is_not_written_over(capsys, tmp_path, command, name, folder, what):
    """The same command typed again (sweep and patch wrote over their result without a
    word): one line naming the file and what to do, exit 2, before the model loads (the
    model here is not there, so a command that reached its loader would say that)."""
    out = tmp_path / name
    kept = _finished(out, folder)
    before = kept.read_bytes()
    code, stdout, err = _run(capsys, *_argv(command, tmp_path, out))
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert f"--out {out} is a finished {what}: give a new name, or delete {out}" in err
    assert kept.read_bytes() == before
    # A new name is not refused: the command goes on (to its model, which is not there, or
    # to circuit's task file, read first and not there either).
    code, _, err = _run(capsys, *_argv(command, tmp_path, tmp_path / f"new-{name}"))
    assert code == 2 and "is a finished" not in err, err


@pytest.mark.parametrize("command", ["atlas", "sweep", "importance", "patch"])
def test_resume_continues_into_a_result_only_with_a_kept_run(capsys, tmp_path, command):
    """``--resume`` with an interrupted run kept in OUT.parts goes on to the model (which is
    not there here); with nothing kept, it is refused as any other run is."""
    name, folder = {"atlas": ("a.atlas", True), "sweep": ("s.csv", False),
                    "importance": ("i.csv", False), "patch": ("p.csv", False)}[command]
    out = tmp_path / name
    _finished(out, folder)
    code, _, err = _run(capsys, *_argv(command, tmp_path, out), "--resume")
    assert code == 2 and "is a finished" in err, err
    parts = tmp_path / f"{name}.parts"
    parts.mkdir()
    (parts / "run.json").write_text("{}\n", encoding="utf-8")
    code, _, err = _run(capsys, *_argv(command, tmp_path, out), "--resume")
    assert code != 0 and "is a finished" not in err and NO_MODEL in err, err


@pytest.mark.parametrize("command", sorted({c for c, *_ in RESULTS}))
def test_every_result_command_says_so_in_its_help(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert KEPT_RESULT_HELP in said
