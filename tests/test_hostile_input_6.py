"""Hostile input, part 6: a standard output that cannot be written, options that are
blank or ignored, a recording header whose field is the wrong type, a negative value
that looks like an option. Each is one ``flyviz: error:`` line and a non-zero exit,
never a traceback and never a silent run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_checks import cli_run, one_error_line

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------ a standard output that fails
def _flyviz_with_stdout(redirect: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``flyviz ARGV`` in a shell with standard output redirected by ``redirect``
    (``>&-`` closes it, ``>/dev/full`` makes every write fail with a full device)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = f'exec "$@" {redirect}'
    return subprocess.run(["sh", "-c", script, "sh", sys.executable, "-m", "flyviz", *argv],
                          env=env, capture_output=False, stderr=subprocess.PIPE, text=True,
                          timeout=120)


def _one_stdout_line(done: subprocess.CompletedProcess[str], why: str) -> None:
    assert done.returncode != 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, \
        done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("flyviz: error: cannot write to standard output: "), lines[0]
    assert why in lines[0], lines[0]


needs_posix = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell's >&-")


@needs_posix
@pytest.mark.parametrize("argv", [("generate", "demo", "--prompt", "hi", "--max-new-tokens", "2"),
                                  ("info", "demo")])
def test_a_closed_standard_output_is_one_line_naming_it(argv):
    done = _flyviz_with_stdout(">&-", *argv)
    _one_stdout_line(done, "closed")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("argv", [("generate", "demo", "--prompt", "hi", "--max-new-tokens", "2"),
                                  ("info", "demo")])
def test_a_full_standard_output_is_one_line_naming_it(argv):
    done = _flyviz_with_stdout(">/dev/full", *argv)
    _one_stdout_line(done, "no space left")


@needs_posix
def test_a_command_that_writes_to_standard_output_still_works(tmp_path):
    # The guard must not get in the way of a standard output that works.
    out = tmp_path / "out.txt"
    done = _flyviz_with_stdout(f">'{out}'", "info", "demo")
    assert done.returncode == 0, done.stderr
    assert out.read_text().strip()


# ------------------------------------------------------------------ a blank --scheduler
@pytest.mark.parametrize("address", ["", "   "])
@pytest.mark.parametrize("command", ["atlas", "sweep", "importance"])
def test_a_blank_scheduler_address_is_refused_not_taken_as_a_local_cluster(capsys, tmp_path,
                                                                          command, address):
    # An empty --scheduler (an unset variable: --scheduler "$SCHED") used to run the work
    # on a local cluster without a word.
    text = tmp_path / "text.txt"
    text.write_text("Once upon a time there was a little girl.\n")
    out = tmp_path / "out"
    argv = {"atlas": ["atlas", "demo", "--corpus", str(text), "--out", str(out)],
            "sweep": ["sweep", "demo", "--by", "superclass", "--text", str(text),
                      "--out", f"{out}.csv"],
            "importance": ["importance", "demo", "--text", str(text), "--out", f"{out}.csv"]}
    code, _, err = cli_run(capsys, *argv[command], "--scheduler", address)
    one_error_line(code, err, "--scheduler", "empty")
    assert not out.exists() and not Path(f"{out}.csv").exists()


# ------------------------------------------------ export options the output would ignore
@pytest.mark.parametrize("out, extra, named", [
    ("run.gif", ["--quality", "10"], "--quality"),
    ("frames/", ["--quality", "10"], "--quality"),
    ("run.webm", ["--speed", "slow"], "--speed"),
    ("run.gif", ["--speed", "slow"], "--speed"),
    ("run.mp4", ["--mesh-scale", "0.008"], "--mesh-scale"),
])
def test_export_refuses_an_option_its_output_would_ignore(capsys, tmp_path, out, extra, named):
    # --quality is an MP4/WebM encoder's CRF, --speed the x264 preset, --mesh-scale scales
    # --mesh files: given where they do nothing, they were dropped without a word.
    target = tmp_path / out
    code, _, err = cli_run(capsys, "export", "demo", "--prompt", "hi", "--max-new-tokens", "2",
                           "--out", str(target), *extra)
    one_error_line(code, err, named)
    assert not target.exists()
    assert not any(tmp_path.iterdir())  # refused before any work: nothing written


# -------------------------------------------- a negative value that reads as an option
@pytest.mark.parametrize("argv, option, value", [
    (["simulate", "demo", "--duration", "-1s", "--out", "x.parquet"], "--duration", "-1s"),
    (["export", "demo", "--prompt", "hi", "--size", "-5x5", "--out", "x.mp4"], "--size",
     "-5x5"),
    (["export", "demo", "--prompt", "hi", "--tokens", "-5:", "--out", "x.mp4"], "--tokens",
     "-5:"),
    (["export", "demo", "--prompt", "hi", "--siz", "-5x5", "--out", "x.mp4"], "--size",
     "-5x5"),  # an abbreviation, as argparse takes it
])
def test_a_value_with_a_leading_minus_says_how_to_write_it(capsys, tmp_path, monkeypatch,
                                                            argv, option, value):
    # argparse reads "-1s" as an option and said only "expected one argument".
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        cli_run(capsys, *argv)
    err = capsys.readouterr().err
    one_error_line(done.value.code, err, f"{option} {value}", f"write {option}={value}")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_value_before_an_option_is_still_reported_as_missing(capsys):
    with pytest.raises(SystemExit) as done:
        cli_run(capsys, "simulate", "demo", "--duration", "--out", "x.parquet")
    err = capsys.readouterr().err
    one_error_line(done.value.code, err, "--duration: expected one argument")
    assert "write" not in err


# ------------------------------------------------- standard descriptors closed at start
#: Runs ``flyviz ARGV`` in-process with descriptors 1 and 2 closed first (as
#: ``flyviz ... >&- 2>&-`` or a launcher that gives the app none starts it), noting the
#: descriptor of every file the command opens; the notes go to the descriptor in argv[1].
_WITH_STANDARD_DESCRIPTORS_CLOSED = """
import builtins, io, json, os, sys
report = os.fdopen(int(sys.argv[1]), "w")
os.close(1)
os.close(2)
sys.stdout = sys.stderr = None          # what Python sets for a descriptor closed at start
opened = []
real_open = io.open

def noting_open(file, mode="r", *args, **kwargs):
    handle = real_open(file, mode, *args, **kwargs)
    if isinstance(file, (str, os.PathLike)) and any(m in mode for m in "wax+"):
        opened.append([os.fspath(file), handle.fileno()])
    return handle

builtins.open = io.open = noting_open
from flyviz import cli
code = cli.main(sys.argv[2:])
null = os.stat(os.devnull).st_rdev
json.dump({"code": code, "opened": opened,
           "null": [os.fstat(fd).st_rdev == null for fd in (1, 2)]}, report)
report.close()
"""


@needs_posix
def test_no_file_a_command_writes_takes_a_closed_standard_descriptors_place(tmp_path):
    # An output opened as descriptor 1 or 2 would take in what C code or a child process
    # (Qt's and OpenGL's warnings, ffmpeg) writes to standard output or error.
    import json

    record = tmp_path / "run.flyrec"
    read, write = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with subprocess.Popen([sys.executable, "-c", _WITH_STANDARD_DESCRIPTORS_CLOSED, str(write),
                           "generate", "demo", "--prompt", "hi", "--max-new-tokens", "2",
                           "--record", str(record)], env=env, pass_fds=(write,)) as child:
        os.close(write)
        with os.fdopen(read) as notes:
            found = json.loads(notes.read() or "{}")
        assert child.wait(timeout=120) == 0
    assert found["code"] == 2          # its summary line could not be written: said so
    assert found["null"] == [True, True]
    written = [fd for name, fd in found["opened"] if "run.flyrec" in Path(name).name]
    assert written and min(written) > 2, found["opened"]

    from flyviz.record.recording import Recording

    assert len(Recording.load(record)) > 0


@needs_posix
def test_an_error_with_standard_error_closed_does_not_go_into_standard_output(tmp_path):
    # print(file=sys.stderr) with sys.stderr None writes to standard output: the error
    # line went into what the user kept of the command's output.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m", "flyviz",
                           "info", str(tmp_path / "no-such-model")],
                          env=env, stdout=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
