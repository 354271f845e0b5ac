"""Nothing lost: ``--record FILE`` never writes over a file already at FILE (it may be the
only copy of a long run), refusing in one line before the model loads; the renders made
again from their recording (``export``, ``figure``, ``share``) replace an earlier output of
the same name, as savefig does, and their last line says so."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from flyviz.cli import build_parser, main
from flyviz.fileio import KEPT_RECORDING_HELP

#: A model that is not there: a command that reached its loader would say so instead.
NO_MODEL = "no-such-model-folder"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _commands_taking(dest: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name for name, command in sub.choices.items()
            if any(action.dest == dest for action in command._actions)}


def _argv(command: str, tmp_path: Path, record: Path) -> list:
    """Each command that takes --record, run on a model that is not there."""
    return {
        "generate": ["generate", NO_MODEL, "--prompt", "Once upon a time", "--record", record],
        "compare": ["compare", NO_MODEL, "--prompt", "Once upon a time", "--silence",
                    "sign:inhibitory", "--record", record],
        "export": ["export", NO_MODEL, "--prompt", "Once upon a time", "--out",
                   tmp_path / "run.mp4", "--record", record],
        "simulate": ["simulate", NO_MODEL, "--duration", "10ms", "--record", record],
    }[command]


RECORDING_COMMANDS = ["generate", "compare", "export", "simulate"]


def test_every_command_taking_record_is_checked_here():
    """A command that gains --record gains a row in the test below."""
    assert _commands_taking("record") == set(RECORDING_COMMANDS)


@pytest.mark.parametrize("command", RECORDING_COMMANDS)
def test_an_existing_recording_is_not_written_over(capsys, tmp_path, command):
    """The same command typed again replaced the recording without a word: one line
    naming the file and what to do, exit 2, and nothing run (the model here is not there:
    the same command with a new name goes on to its loader and says so)."""
    record = tmp_path / "run.flyrec"
    record.write_bytes(b"FLYREC hours of a cluster's run \x00\x01")
    before = record.read_bytes()
    code, stdout, err = _run(capsys, *_argv(command, tmp_path, record))
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert (f"--record {record} already exists, and a recording is never written over: give "
            f"a new name, or delete {record} first") in err
    assert NO_MODEL not in err
    assert record.read_bytes() == before
    assert not (tmp_path / "run.mp4").exists()
    # A new name is not refused: the run goes on to load the model.
    code, _, err = _run(capsys, *_argv(command, tmp_path, tmp_path / "new.flyrec"))
    assert code == 2 and NO_MODEL in err and "already exists" not in err, err


@pytest.mark.parametrize("command", RECORDING_COMMANDS)
def test_every_recording_command_says_so_in_its_help(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert KEPT_RECORDING_HELP in said


# ------------------------------------------------------------ renders and conversions
@pytest.fixture(scope="module")
def saved(tmp_path_factory, demo_cache):
    """A short run of the embedded demo brain and a comparison (its untouched run kept
    beside the silenced one), saved."""
    saved_cache = os.environ.get("FLYVIZ_CACHE_DIR")
    os.environ["FLYVIZ_CACHE_DIR"] = str(demo_cache)
    root = tmp_path_factory.mktemp("kept")
    try:
        assert main(["generate", "demo", "--prompt", "Once upon a time", "--max-new-tokens",
                     "2", "--record", str(root / "short.flyrec")]) == 0
        assert main(["compare", "demo", "--prompt", "Once upon a time", "--max-new-tokens",
                     "3", "--silence", "sign:inhibitory",
                     "--record", str(root / "compared.flyrec")]) == 0
    finally:
        if saved_cache is None:
            os.environ.pop("FLYVIZ_CACHE_DIR", None)
        else:
            os.environ["FLYVIZ_CACHE_DIR"] = saved_cache
    return root


@pytest.fixture
def rec(saved, demo_cache, monkeypatch):
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    return saved / "short.flyrec"


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("name, argv", [
    ("page.html", ["share", "{rec}", "--out", "{out}"]),
    ("raster.png", ["figure", "{rec}", "--kind", "raster", "--sort", "similarity",
                    "--out", "{out}"]),
])
def test_a_render_says_it_replaced_the_earlier_file(capsys, tmp_path, rec, name,
                                                                  argv):
    out = tmp_path / name
    argv = [a.format(rec=rec, out=out) for a in argv]
    code, _, err = _run(capsys, *argv)
    assert code == 0 and "replaced the earlier" not in err, err
    out.write_bytes(b"an earlier one")
    code, _, err = _run(capsys, *argv)
    assert code == 0, err
    last = _last_line(err)
    assert f"wrote {out} (" in last and last.endswith("; replaced the earlier file)"), last
    assert out.read_bytes() != b"an earlier one"


def test_an_export_says_it_replaced_the_earlier_movie_or_frames(capsys, tmp_path, rec):
    pytest.importorskip("vispy")
    pytest.importorskip("imageio_ffmpeg")
    small = ["--size", "48x32", "--frames-per-token", "1", "--hold", "0"]
    movie, frames = tmp_path / "run.gif", tmp_path / "frames"
    movie.write_bytes(b"an earlier movie")
    code, _, err = _run(capsys, "export", rec, "--out", movie, "--fps", "10", *small)
    assert code == 0 and _last_line(err).startswith(f"wrote {movie} ("), err
    assert _last_line(err).endswith("; replaced the earlier file)")
    code, _, err = _run(capsys, "export", rec, "--out", frames, *small)
    assert code == 0 and "replaced the earlier" not in err, err
    code, _, err = _run(capsys, "export", rec, "--out", frames, *small)
    assert code == 0 and _last_line(err).endswith("; replaced the earlier frames)"), err
