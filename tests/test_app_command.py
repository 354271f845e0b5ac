"""``flyviz gui`` options: bad values are one-line errors with exit status 2, before Qt starts."""

from __future__ import annotations

import argparse

import pytest

from flyviz.cli import main
from flyviz.commands import gui


def test_size_option_parses_and_rejects():
    assert gui._size("1600x1000") == (1600, 1000)
    assert gui._size(" 1280 X 720 ") == (1280, 720)
    for bad in ("big", "100x100", "1280x", "0x0"):
        with pytest.raises(argparse.ArgumentTypeError):
            gui._size(bad)


def test_bad_options_exit_2_with_one_line(capsys):
    assert main(["gui", "--prompt", "   "]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flyviz: error:") and "prompt" in err and "\n" not in err
    with pytest.raises(SystemExit) as exc:
        main(["gui", "--size", "huge"])
    assert exc.value.code == 2
    assert "1280x800" in capsys.readouterr().err


def test_defaults_open_the_demo():
    parser = argparse.ArgumentParser()
    gui.configure(parser)
    args = parser.parse_args([])
    assert args.model == "demo" and args.prompt is None and args.size is None


def test_gl_option_asks_for_software_opengl_before_qt_starts(monkeypatch):
    parser = argparse.ArgumentParser()
    gui.configure(parser)
    assert parser.parse_args([]).gl == "auto"
    assert parser.parse_args(["--gl", "software"]).gl == "software"
    with pytest.raises(SystemExit):
        parser.parse_args(["--gl", "vulkan"])
    monkeypatch.delenv("LIBGL_ALWAYS_SOFTWARE", raising=False)
    gui.use_gl("auto")
    import os

    assert "LIBGL_ALWAYS_SOFTWARE" not in os.environ
    gui.use_gl("software")
    assert os.environ["LIBGL_ALWAYS_SOFTWARE"] == "1"


def test_the_model_may_be_given_as_spec_like_every_other_command(capsys):
    """``flyviz gui demo`` failed as printed ("unrecognized arguments: demo")."""
    from flyviz.cli import build_parser, main

    args = build_parser().parse_args(["gui", "demo"])
    assert args.spec == "demo"
    assert main(["gui", "no-such-folder-anywhere", "--model", "another-one"]) == 2
    err = capsys.readouterr().err
    assert "two models given" in err and len(err.strip().splitlines()) == 1
    assert main(["gui", "./no-such-model-folder"]) == 2     # the SPEC is the model checked
    assert "no-such-model-folder" in capsys.readouterr().err
