"""Nothing lost: ``--record FILE`` never writes over a file already at FILE (it may be the
only copy of a long run), refusing in one line before the model loads; the renders and
conversions made again from their inputs (``export``, ``figure``, ``share``, ``convert``,
``trace --graph``/``--movie``, the ``--figure`` of ``patch``, ``circuit`` and ``check``,
``build-demo``) replace an earlier output of the same name, as savefig does, and the line
saying each was written says so; ``convert`` never merges into, nor deletes with, an
earlier Zarr store what is not the store's, nor ``build-demo`` with an earlier demo brain
what it did not write."""

from __future__ import annotations

import argparse
import errno
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
    ("run.npz", ["convert", "{rec}", "{out}", "--no-labels"]),
])
def test_a_render_or_conversion_says_it_replaced_the_earlier_file(capsys, tmp_path, rec, name,
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


def test_a_zarr_store_is_replaced_whole_never_merged_into(capsys, tmp_path, saved, rec):
    """A single run's store takes the place of a comparison's: nothing of the comparison
    is left (its untouched run's arrays would make the store a comparison that never
    was), and the last line says it replaced it."""
    pytest.importorskip("zarr")
    from flyviz.record.convert import open_zarr
    from flyviz.record.recording import Recording

    out = tmp_path / "run.zarr"
    assert _run(capsys, "convert", saved / "compared.flyrec", out, "--no-labels")[0] == 0
    assert "baseline_state" in open_zarr(out)
    code, _, err = _run(capsys, "convert", rec, out, "--no-labels")
    assert code == 0 and _last_line(err).endswith("; replaced the earlier store)"), err
    store = open_zarr(out)
    assert "baseline_state" not in store and not (out / "baseline_state").exists()
    assert store.sizes["token"] == len(Recording.load(rec))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.zarr"]   # nothing left beside


def _not_a_recording(tmp_path: Path) -> Path:
    """A recording that does not load: a refusal said after loading it would say so."""
    bad = tmp_path / "bad.flyrec"
    bad.write_bytes(b"not a recording")
    return bad


def test_a_store_holding_other_files_is_refused_before_the_recording_loads(capsys, tmp_path):
    """Replacing the store deleted the user's notes put in its folder, without a word."""
    store = tmp_path / "run.zarr"
    store.mkdir()
    (store / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}', "utf-8")
    (store / "notes.txt").write_text("what the run showed\n", "utf-8")
    code, _, err = _run(capsys, "convert", _not_a_recording(tmp_path), store, "--no-labels")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{store} is a Zarr store that also holds notes.txt" in err
    assert (store / "notes.txt").read_text("utf-8") == "what the run showed\n"


@pytest.mark.parametrize("to, name, said", [
    ("zarr", "model", "exists and is not a store flyviz wrote"),
    ("npz", "run.npz", "it is a folder; give a file name"),
])
def test_a_folder_that_is_not_the_output_is_refused_before_the_recording_loads(
        capsys, tmp_path, to, name, said):
    """A model's folder (or a folder named as a file) given as OUT was refused only after
    the recording and its model had loaded, or not before the write failed."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text("{}", "utf-8")
    code, _, err = _run(capsys, "convert", _not_a_recording(tmp_path), "--to", to, folder,
                        "--no-labels")
    assert code == 2 and err.count("\n") == 1 and said in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]


def test_a_store_that_fails_to_take_its_place_leaves_the_earlier_one(tmp_path, monkeypatch,
                                                                     tiny_checkpoint):
    """The earlier store was deleted before the new one was moved in: a failing move
    left neither."""
    pytest.importorskip("zarr")
    from flyviz.errors import ExportError
    from flyviz.record import convert
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import record_prompt

    recording = record_prompt(tiny_checkpoint, "the dog", GenerationSettings(max_new_tokens=2))
    out = convert.to_zarr(recording, tmp_path / "run.zarr")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    replace = os.replace

    def failing(src, dst):
        if Path(dst) == out and Path(src).name == "store":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        replace(src, dst)

    monkeypatch.setattr(convert.os, "replace", failing)
    with pytest.raises(ExportError, match="cannot write"):
        convert.to_zarr(recording, out)
    monkeypatch.undo()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert convert.open_zarr(out).sizes["token"] == len(recording)
    assert [p.name for p in tmp_path.iterdir()] == ["run.zarr"]


# ------------------------------------------------- the other renders: graphs, figures, movies
ORACLE_BRAIN = Path(__file__).resolve().parent / "oracle" / "spiking" / "small"


@pytest.fixture(scope="module")
def world(small_world):
    """A small model with anatomy (patch's --by side) and two prompts of one length."""
    world = small_world("replaced", neurons=211, edges=4001, seed=4, anatomy=True,
                        text="the girl went home and the boy saw a cat.\n" * 3, context=8)
    tokenizer = world["tokenizer"]
    pairs = [("the girl went home and", "the boy went home and"),
             ("the cat saw a dog and", "the dog saw a cat and")]
    clean, corrupt = next(((a, b) for a, b in pairs
                           if len(tokenizer.encode(a)) == len(tokenizer.encode(b))), pairs[0])
    answer = next(w for w in (" she", " the", " a", " he", " and")
                  if len(tokenizer.encode(w)) == 1)
    return {**world, "clean": clean, "corrupt": corrupt, "answer": answer}


def _places(world, tmp_path: Path) -> dict:
    battery = tmp_path / "battery.txt"
    battery.write_text("a: excite id:0,1,2 ; read id:3,4 ; expect increase\n", "utf-8")
    return {"spec": world["spec"], "dataset": world["dataset"], "text": world["text"],
            "clean": world["clean"], "corrupt": world["corrupt"], "answer": world["answer"],
            "brain": ORACLE_BRAIN, "battery": battery, "tmp": tmp_path}


#: (output, its name, argv ({out} is it; {n} the run, 1 or 2), the start of the line that
#: says it was written, the extras it needs). ``trace`` runs on the demo brain.
OTHER_RENDERS = [
    ("trace --graph", "graph.json",
     ["trace", "demo", "--prompt", "Once upon a time", "--window", "2", "--graph", "{out}"],
     "flyviz: wrote the graph (", ()),
    ("trace --movie", "why.gif",
     ["trace", "demo", "--prompt", "Once upon a time", "--window", "2", "--movie", "{out}",
      "--movie-size", "48x32", "--movie-fps", "10"],
     "flyviz: wrote {out} (", ("vispy", "imageio_ffmpeg")),
    ("patch --figure", "trace.png",
     ["patch", "{spec}", "--dataset", "{dataset}", "--clean", "{clean}", "--corrupt",
      "{corrupt}", "--answer", "{answer}", "--by", "side", "--positions", "1:2", "--window",
      "2", "--workers", "0", "--batch", "4", "--out", "{tmp}/trace-{n}.csv",
      "--figure", "{out}"],
     "heatmap written to {out}", ("matplotlib",)),
    ("circuit --figure", "curve.png",
     ["circuit", "{spec}", "--dataset", "{dataset}", "--task", "{text}", "--points", "3",
      "--workers", "0", "--figure", "{out}"],
     "flyviz circuit: wrote {out}", ("matplotlib",)),
    ("check --figure", "checks.png",
     ["check", "{brain}", "--battery", "{battery}", "--shuffles", "1", "--random-sets", "0",
      "--duration", "10ms", "--workers", "0", "--figure", "{out}"],
     "flyviz: wrote the figure to {out}", ("matplotlib", "pandas", "pyarrow")),
]


def _line_about(printed: str, start: str) -> str:
    """The last line printed (stdout and stderr) that begins with ``start``."""
    lines = [line for line in printed.splitlines() if line.startswith(start)]
    assert lines, (start, printed)
    return lines[-1]


@pytest.mark.parametrize("output, name, argv, said, needs", OTHER_RENDERS,
                         ids=[row[0] for row in OTHER_RENDERS])
def test_every_other_render_says_it_replaced_the_earlier_file(capsys, tmp_path, monkeypatch,
                                                               demo_cache, world, output, name,
                                                               argv, said, needs):
    """``trace --graph``/``--movie`` and the ``--figure`` of ``patch``, ``circuit`` and
    ``check`` replaced a file of the same name without a word: the same command typed
    again lost the earlier render unnoticed. Their line saying it was written says so, as
    export's, figure's and share's do; the first run's does not."""
    for module in needs:
        pytest.importorskip(module)
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    out = tmp_path / name
    places = {**_places(world, tmp_path), "out": out}
    start = said.format(out=out)
    for n in (1, 2):
        code, stdout, err = _run(capsys, *[a.format(n=n, **places) for a in argv])
        assert code == 0, err
        line = _line_about(stdout + err, start)
        if n == 1:
            assert "replaced" not in line and "replaced the earlier" not in err, line
            # A stand-in for the earlier render, to tell that the second run replaced it.
            out.write_bytes(b"an earlier one")
    assert line.endswith("replaced the earlier file)"), line
    assert out.read_bytes() != b"an earlier one"


def test_a_trace_movie_says_it_replaced_the_earlier_frames(capsys, tmp_path, monkeypatch,
                                                           demo_cache):
    pytest.importorskip("vispy")
    pytest.importorskip("imageio_ffmpeg")
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    frames = tmp_path / "frames"
    argv = ["trace", "demo", "--prompt", "Once upon a time", "--window", "2", "--movie",
            frames, "--movie-size", "48x32"]
    code, _, err = _run(capsys, *argv)
    assert code == 0 and "replaced the earlier" not in err, err
    assert _line_about(err, f"flyviz: wrote {frames}")
    code, _, err = _run(capsys, *argv)
    assert code == 0, err
    assert _line_about(err, f"flyviz: wrote {frames}").endswith(
        "; replaced the earlier frames)"), err


# ------------------------------------------------------------------ the demo brain's folder
def _stand_in_build(out, *, atlas_only: bool = False):
    """What ``build_demo`` (or ``build_demo_atlas``) leaves in ``out``, in no time: the
    command's own lines are what these tests read."""
    import json
    import shutil

    out = Path(out)
    if atlas_only:
        (out / "atlas").mkdir(exist_ok=True)
        (out / "atlas" / "zarr.json").write_text("{}", "utf-8")
        return out / "atlas"
    if out.exists():
        shutil.rmtree(out)
    (out / "model").mkdir(parents=True)
    (out / "demo.json").write_text(json.dumps({"seed": 1}), "utf-8")
    return {"build_seconds": 0.0, "neurons": 10, "edges": 20,
            "quality": {"cross_entropy_model": 1.0, "cross_entropy_unigram": 2.0,
                        "cross_entropy_bigram": 1.5}}


@pytest.fixture
def quick_build(monkeypatch):
    """``flyviz build-demo`` with its build and atlas stood in for (minutes at full scale;
    tests/test_demo_build.py builds the tiny one for real)."""
    import flyviz.demo.build as build_module

    monkeypatch.setattr(build_module, "build_demo", lambda out, **_: _stand_in_build(out))
    monkeypatch.setattr(build_module, "build_demo_atlas",
                        lambda out, **_: _stand_in_build(out, atlas_only=True))


def test_build_demo_says_it_replaced_the_earlier_demo_brain(capsys, tmp_path, quick_build):
    """Building the demo brain again into its folder replaced it without a word."""
    out = tmp_path / "demo"
    argv = ["build-demo", "--scale", "tiny", "--out", out, "--workers", "0"]
    for n in (1, 2):
        code, stdout, err = _run(capsys, *argv)
        assert code == 0, err
        line = _line_about(stdout, f"demo brain written to {out} ")
        assert ("replaced" in line) == (n == 2), line
    assert line.endswith("; replaced the earlier demo brain)"), line
    for n in (1, 2):
        code, stdout, err = _run(capsys, *argv, "--atlas-only")
        assert code == 0, err
        line = _line_about(stdout, f"demo atlas written to {out / 'atlas'} ")
        assert ("replaced" in line) == (n == 2), line
    assert line.endswith("(replaced the earlier atlas)"), line


@pytest.mark.parametrize("stranger", ["notes.txt", "plots"])
def test_build_demo_never_deletes_what_it_did_not_write(capsys, tmp_path, quick_build,
                                                       stranger):
    """A demo brain's folder that also held the user's notes (or a folder of plots) was
    deleted whole, notes and all, by building again: refused in one line before the build,
    as convert refuses a Zarr store that holds other files."""
    out = tmp_path / "demo"
    _stand_in_build(out)
    kept = out / stranger
    if stranger == "plots":
        kept.mkdir()
        kept = kept / "a.png"
    kept.write_bytes(b"the user's")
    code, stdout, err = _run(capsys, "build-demo", "--scale", "tiny", "--out", out,
                             "--workers", "0")
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert (f"--out {out} is a demo brain that also holds {stranger}, which building it "
            "again would delete: move that out, or choose another folder") in err
    assert kept.read_bytes() == b"the user's"


def test_the_demo_build_itself_refuses_a_folder_holding_other_files(tmp_path):
    """The library's build_demo deletes its folder too: it refuses the same folder, before
    any of its minutes of work."""
    from flyviz.demo.build import build_demo
    from flyviz.errors import InputError

    out = tmp_path / "demo"
    _stand_in_build(out)
    (out / "notes.txt").write_text("mine", "utf-8")
    with pytest.raises(InputError, match="also holds notes.txt"):
        build_demo(out, scale="tiny", progress=lambda *_: pytest.fail("the build started"))
    assert (out / "notes.txt").read_text("utf-8") == "mine"
