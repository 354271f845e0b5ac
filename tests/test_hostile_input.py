"""Hostile input: every bad input is one ``flyviz: error:`` line and exit 2, never a traceback,
a hang, a wrong answer or a damaged file (issue 21, parts 2 and 3).

Damaged atlases are tried through the command line, the library and the app's reader; the
signal tests run ``flyviz atlas``/``sweep`` in a subprocess on a tiny model and a local
cluster and interrupt it once its workers are up.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_checks import cli_run, one_error_line

from flyviz import cli
from flyviz.analysis import atlas_stats
from flyviz.analysis import cluster, integrity
from flyviz.analysis.atlas import Atlas, AtlasError, AtlasSettings, build_atlas
from flyviz.analysis.sweep import LesionMap, SweepError
from flyviz.errors import InputError, MissingDependencyError
from flyviz.model.synthetic import _WORDS

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = AtlasSettings(top_k=4, streams=5, context=24, chunk_tokens=100, min_token_count=2,
                         samples_per_band=2)
GROUPS = "first: id:0-99\nsecond: id:100-199\nthird: id:200-396\n"


@pytest.fixture(scope="module")
def world(small_world):
    """A tiny model in a folder (workers load it), a text, its atlas, a recording and a
    lesion map, made once."""
    from flyviz.analysis.sweep import SweepSettings, run_sweep, sweep_groups

    rng = np.random.default_rng(2)
    stories = [" ".join(rng.choice(_WORDS, rng.integers(3, 12))).capitalize() + "."
               for _ in range(60)]
    made = small_world("hostile", neurons=397, edges=6001, seed=5, name="hostile", anatomy=False,
                       text="\n\n".join(stories) + "\n", text_name="text.txt",
                       context=SETTINGS.context)
    root, model, text, corpus = made["root"], made["model"], made["text"], made["corpus"]
    atlas = root / "good.atlas"
    build_atlas(str(root / "model"), model, corpus, atlas, SETTINGS, workers=0)
    groups_file = root / "groups.txt"
    groups_file.write_text(GROUPS, encoding="utf-8")
    lesions = root / "lesions.csv"
    run_sweep(str(root / "model"), model, corpus, sweep_groups(model, groups_file), lesions,
              SweepSettings(streams=4, context=24, chunk_tokens=200), by=str(groups_file),
              workers=0)
    recording = root / "run.flyrec"
    assert cli.main(["generate", str(root / "model"), "--prompt", "the cat", "--max-new-tokens",
                     "3", "--record", str(recording)]) == 0
    return {"root": root, "spec": str(root / "model"), "model": model, "text": text,
            "corpus": corpus, "atlas": atlas, "lesions": lesions, "groups": groups_file,
            "recording": recording}




# ---------------------------------------------------------------- missing extras
EXTRA_CASES = {
    "atlas": (("distributed",), "flyviz atlas needs Dask; install it with pip install "
                                "'flyviz[atlas]'"),
    "sweep": (("distributed",), "flyviz sweep needs Dask; install it with pip install "
                                "'flyviz[atlas]'"),
    "patch": (("distributed",), "flyviz patch needs Dask; install it with pip install "
                                "'flyviz[atlas]'"),
    "dynamics": (("distributed",), "flyviz dynamics --nulls needs Dask; install it with pip "
                                   "install 'flyviz[atlas]'"),
    "build-demo": (("distributed",), "flyviz build-demo needs Dask; install it with pip "
                                     "install 'flyviz[atlas]'"),
    "nwb": (("pynwb",), "flyviz convert --to nwb needs pynwb; install it with pip install "
                        "'flyviz[nwb]'"),
    "zarr": (("xarray",), "flyviz convert --to zarr needs xarray and zarr; install it with "
                          "pip install 'flyviz[data]'"),
    "llvm": (("llvmlite",), "--kernel llvm needs llvmlite; install it with pip install "
                            "'flyviz[fast]'"),
    "parquet corpus": (("pyarrow",), "reading Parquet (c.parquet) needs pyarrow; install it "
                                     "with pip install 'flyviz[atlas]'"),
    "parquet result": (("pyarrow",), "writing a Parquet lesion map needs pyarrow; install it "
                                     "with pip install 'flyviz[atlas]'"),
}


@pytest.mark.parametrize("case", sorted(EXTRA_CASES))
def test_a_missing_extra_is_one_line_before_any_work(capsys, monkeypatch, world, tmp_path, case):
    hidden, line = EXTRA_CASES[case]
    for name in hidden:  # what an installation without the extra looks like to find_spec
        monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / "out"
    argv = {
        "atlas": ["atlas", world["spec"], "--corpus", str(world["text"]), "--out",
                  str(out.with_suffix(".atlas")), "--workers", "2"],
        "sweep": ["sweep", world["spec"], "--by", str(world["groups"]), "--text",
                  str(world["text"]), "--out", str(out.with_suffix(".csv")), "--workers", "2"],
        # patch, dynamics and build-demo did their work first and failed only on starting Dask
        "patch": ["patch", world["spec"], "--clean", "the cat", "--corrupt", "the dog",
                  "--answer", " the", "--by", str(world["groups"]), "--out",
                  str(out.with_suffix(".csv")), "--workers", "2"],
        "dynamics": ["dynamics", world["spec"], "--prompt", "the cat", "--nulls", "1"],
        "build-demo": ["build-demo", "--out", str(out), "--scale", "tiny"],
        "nwb": ["convert", str(world["recording"]), "--to", "nwb", str(out.with_suffix(".nwb"))],
        "zarr": ["convert", str(world["recording"]), str(out.with_suffix(".zarr"))],
        "llvm": ["generate", world["spec"], "--prompt", "the", "--kernel", "llvm"],
        "parquet corpus": ["atlas", world["spec"], "--corpus", str(world["text"]),
                           str(world["root"] / "c.parquet"), "--out",
                           str(out.with_suffix(".atlas")), "--workers", "0"],
        "parquet result": ["sweep", world["spec"], "--by", str(world["groups"]), "--text",
                           str(world["text"]), "--out", str(out.with_suffix(".parquet")),
                           "--workers", "0"],
    }[case]
    (world["root"] / "c.parquet").write_bytes(b"never read")
    code, stdout, err = cli_run(capsys, *argv)
    one_error_line(code, err, line)
    assert stdout == ""
    assert list(tmp_path.iterdir()) == []  # no OUT.parts, no partial output


SHIPPED_CASES = {
    "names.jsonl": lambda w: ["circuit", w["spec"], "--task", "names.jsonl", "--workers", "0"],
    "heldout.txt": lambda w: ["sweep", w["spec"], "--by", str(w["groups"]), "--text",
                              "heldout.txt", "--out", "l.csv", "--workers", "0"],
    "checks-demo.txt": lambda w: ["check", "demo", "--battery", "checks-demo.txt",
                                  "--workers", "0"],
    "sets.txt": lambda w: ["screen", "demo", "--sets", "sets.txt", "--mode", "silence",
                           "--out", "screen", "--workers", "0"],
}


@pytest.mark.parametrize("name", sorted(SHIPPED_CASES))
def test_a_missing_shipped_example_says_where_a_clone_holds_it(capsys, monkeypatch, world,
                                                                tmp_path, name):
    """The help's examples name files of a clone's root; typed elsewhere, the error says where."""
    from flyviz.fileio import SHIPPED_EXAMPLES

    where = SHIPPED_EXAMPLES[name]
    assert (ROOT / where).is_file()
    monkeypatch.chdir(tmp_path)
    code, stdout, err = cli_run(capsys, *SHIPPED_CASES[name](world))
    one_error_line(code, err, f"{name}", f"the shipped {name} is {where} in a clone of flyviz "
                                         "(run from its root)")
    assert stdout == "" and list(tmp_path.iterdir()) == []


def test_library_calls_name_their_extra(monkeypatch, world, tmp_path):
    from flyviz.record.recording import Recording

    recording = Recording.load(world["recording"])
    monkeypatch.setitem(sys.modules, "pynwb", None)
    monkeypatch.setitem(sys.modules, "xarray", None)
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingDependencyError, match=r"to_nwb needs pynwb; install it with "
                                                     r"pip install 'flyviz\[nwb\]'"):
        recording.to_nwb(tmp_path / "r.nwb")
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[data\]'"):
        recording.to_xarray()
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[data\]'"):
        recording.to_zarr(tmp_path / "r.zarr")
    with pytest.raises(MissingDependencyError, match=r"flyviz atlas needs Dask"):
        build_atlas(world["spec"], world["model"], world["corpus"], tmp_path / "a.atlas",
                    SETTINGS, workers=2)
    assert list(tmp_path.iterdir()) == []
    # In this process Dask is not needed.
    build_atlas(world["spec"], world["model"], world["corpus"], tmp_path / "a.atlas",
                SETTINGS, workers=0)


# ---------------------------------------------------------------- damaged atlases
def _damage(atlas: Path, how: str) -> None:
    chunk = atlas / "mean" / "0"
    if how == "deleted chunk":
        chunk.unlink()
    elif how == "deleted folder":
        shutil.rmtree(atlas / "top_value")
    elif how == "flipped byte":
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0x10
        chunk.write_bytes(bytes(data))
    elif how == "truncated chunk":
        chunk.write_bytes(chunk.read_bytes()[:20])


DAMAGE = ("deleted chunk", "deleted folder", "flipped byte", "truncated chunk")


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_atlas_is_one_line_everywhere(capsys, world, tmp_path, how):
    atlas = tmp_path / "d.atlas"
    shutil.copytree(world["atlas"], atlas)
    truth = Atlas(world["atlas"]).card(3).mean
    _damage(atlas, how)
    # The command line.
    code, stdout, err = cli_run(capsys, "neuron", str(atlas), "3")
    one_error_line(code, err, "d.atlas is damaged", "build it again")
    assert stdout == ""
    what = "'top_value'" if how == "deleted folder" else "'mean'"
    assert what in err
    # The library: refused on opening, and (opened unverified) on reading the chunk.
    with pytest.raises(AtlasError, match="is damaged"):
        Atlas(atlas)
    lazy = Atlas(atlas, verify=False)
    with pytest.raises(AtlasError, match="is damaged"):
        lazy.card(3)
    if how != "deleted folder":  # the colours of the app read the whole array
        with pytest.raises(AtlasError, match="is damaged"):
            lazy.statistic("mean")
    # The app's open path (before and after a model is loaded), and gui --atlas.
    from flyviz.app.atlas.atlas_panel import check_atlas, open_checked

    with pytest.raises(AtlasError, match="is damaged"):
        check_atlas(atlas)
    with pytest.raises(AtlasError, match="is damaged"):
        open_checked(atlas, world["model"])
    code, _, err = cli_run(capsys, "gui", "--model", world["spec"], "--atlas", str(atlas))
    one_error_line(code, err, "is damaged")
    assert Atlas(world["atlas"]).card(3).mean == truth  # the original still reads


def _strip_digests(atlas: Path) -> None:
    """Make ``atlas`` look like one written before flyviz kept chunk digests."""
    attrs = json.loads((atlas / ".zattrs").read_text(encoding="utf-8"))
    attrs.pop(integrity.ATTRIBUTE)
    (atlas / ".zattrs").write_text(json.dumps(attrs), encoding="utf-8")
    meta = json.loads((atlas / ".zmetadata").read_text(encoding="utf-8"))
    meta["metadata"][".zattrs"].pop(integrity.ATTRIBUTE)
    (atlas / ".zmetadata").write_text(json.dumps(meta), encoding="utf-8")


def test_an_atlas_without_digests_opens_with_a_note_and_can_be_sealed(capsys, world, tmp_path):
    old = tmp_path / "old.atlas"
    shutil.copytree(world["atlas"], old)
    _strip_digests(old)
    code, stdout, err = cli_run(capsys, "neuron", str(old), "3")
    assert code == 0 and "neuron 3" in stdout
    assert err.startswith("flyviz: note: ") and "no chunk digests" in err
    assert Atlas(old).integrity_note
    # A damaged chunk of such an atlas is still one line, not a decoder traceback.
    broken = tmp_path / "broken.atlas"
    shutil.copytree(old, broken)
    _damage(broken, "truncated chunk")
    code, _, err = cli_run(capsys, "neuron", str(broken), "3")
    one_error_line(code, err, "cannot be read")
    # Sealing rewrites the two metadata files only.
    chunks = {p: p.read_bytes() for p in old.rglob("*") if p.is_file()
              and p.name not in (".zattrs", ".zmetadata")}
    integrity.seal_store(old)
    assert {p: p.read_bytes() for p in chunks} == chunks
    assert Atlas(old).integrity_note is None
    _damage(old, "flipped byte")
    with pytest.raises(AtlasError, match="CRC-32"):
        Atlas(old)


def test_the_shipped_demo_atlas_carries_digests_of_its_chunks():
    demo = ROOT / "assets" / "demo" / "atlas"
    if not demo.is_dir():
        pytest.skip("the demo atlas is not built")
    attrs = json.loads((demo / ".zattrs").read_text(encoding="utf-8"))
    consolidated = json.loads((demo / ".zmetadata").read_text(encoding="utf-8"))
    assert attrs[integrity.ATTRIBUTE] == integrity.chunk_digests(demo)
    assert consolidated["metadata"][".zattrs"] == attrs
    assert Atlas(demo).integrity_note is None


# ---------------------------------------------------------------- lesion maps
def test_a_damaged_lesion_map_is_one_line(capsys, world, tmp_path):
    lines = world["lesions"].read_text(encoding="utf-8").splitlines(keepends=True)
    assert LesionMap(world["lesions"]).integrity_note is None
    edited = tmp_path / "edited.csv"
    row = lines[2].split(",")
    row[4] = repr(float(row[4]) + 0.5)  # delta_ce of the first group: a plausible number
    edited.write_text("".join(lines[:2] + [",".join(row)] + lines[3:]), encoding="utf-8")
    short = tmp_path / "short.csv"
    short.write_text("".join(lines[:-1]), encoding="utf-8")
    for path in (edited, short):
        with pytest.raises(SweepError, match="rows_sha256"):
            LesionMap(path)
        code, _, err = cli_run(capsys, "gui", "--model", world["spec"], "--lesion-map", str(path))
        one_error_line(code, err, "is damaged")
    # A lesion map from before the digest opens, with a note.
    head = json.loads(lines[0][len("# flyviz-sweep "):])
    head.pop("rows_sha256")
    head.pop("table_crc32", None)  # nor the table checksum that came later
    old = tmp_path / "old.csv"
    old.write_text("# flyviz-sweep " + json.dumps(head) + "\n" + "".join(lines[1:]),
                   encoding="utf-8")
    assert "no digest" in (LesionMap(old).integrity_note or "")


# ---------------------------------------------------------------- convert
def test_convert_refuses_to_overwrite_its_input(capsys, world, tmp_path):
    from flyviz.record.convert import convert
    from flyviz.record.recording import Recording

    rec = tmp_path / "run.flyrec"
    shutil.copy(world["recording"], rec)
    before = rec.read_bytes()
    link = tmp_path / "link.npz"
    os.link(rec, link)
    for out in (rec, link, tmp_path / "." / "run.flyrec"):
        code, _, err = cli_run(capsys, "convert", str(rec), "--to", "npz", str(out))
        # named as convert names its arguments (it said "--out ... (--recording)")
        one_error_line(code, err, "OUT ", "is the recording itself (REC)")
    code, _, err = cli_run(capsys, "share", str(rec), "--out", str(rec))
    one_error_line(code, err, "--out ", "is the recording itself (REC)")
    with pytest.raises(InputError, match="recording itself"):
        convert(Recording.load(rec), link, "npz")
    assert rec.read_bytes() == before
    Recording.load(rec)


# ---------------------------------------------------------------- values and state
@pytest.mark.parametrize("option", ["--scale=all->all=1e300", "--stimulate=input=1e300",
                                    "--scale=all->all=3.5e38", "--stimulate=all=-1e39"])
def test_values_must_be_finite_in_float32(capsys, world, option):
    for command in ("generate", "compare"):
        code, stdout, err = cli_run(capsys, command, world["spec"], "--prompt", "the cat",
                                 "--max-new-tokens", "2", "--json", option)
        one_error_line(code, err, "float32")
        assert stdout == ""


def test_a_state_that_stops_being_finite_is_one_line(world):
    from flyviz.model.engine import Engine

    engine = Engine(world["model"], threads=1)
    engine.step(world["model"].config.bos_token_id)
    engine.state[5] = np.inf  # as an overflow inside a step would leave it
    engine.state[6] = -np.inf
    with pytest.raises(InputError, match="no longer finite"):
        engine.step(3)


def test_huge_float32_finite_scales_saturate_without_warnings(capsys, world):
    code, out, err = cli_run(capsys, "generate", world["spec"], "--prompt", "the cat",
                          "--max-new-tokens", "2", "--json", "--scale", "all->all=3e38")
    assert code == 0, err
    assert err == "" and "NaN" not in out


# ---------------------------------------------------------------- select, prompts
@pytest.mark.parametrize("query, expected", [
    ("(" * 200 + "all" + ")" * 200, "nest more than"),
    ("!" * 979 + "all", "selects no neurons"),
    ("id:99999999999999999999999999", "outside 0..396"),
    ("id:5-" + "9" * 5000, "outside 0..396"),
    ("id:" + "0" * 5000 + "1 & " + "(" * 65 + "all" + ")" * 65, "nest more than"),
])
def test_select_never_overflows(capsys, world, query, expected):
    code, _, err = cli_run(capsys, "select", world["spec"], query)
    one_error_line(code, err, expected)


def test_select_reads_long_chains_of_not(capsys, world):
    code, out, err = cli_run(capsys, "select", world["spec"], "!" * 2000 + "id:3", "--json")
    assert code == 0, err
    assert json.loads(out)["indices"] == [3]


@pytest.mark.parametrize("prompt", ["Once \udcff upon", "lone \ud800 surrogate"])
def test_prompts_that_are_not_utf8_are_one_line(capsys, world, prompt):
    for command in ("generate", "compare"):
        extra = ["--silence", "id:1"] if command == "compare" else []
        code, _, err = cli_run(capsys, command, world["spec"], "--prompt", prompt, *extra)
        one_error_line(code, err, "not valid UTF-8")


def test_invalid_bytes_on_a_real_command_line(world):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "flyviz", "generate", world["spec"],
                           "--prompt", os.fsencode("Once \udcff upon")], env=env,
                          capture_output=True, timeout=60)
    err = done.stderr.decode("utf-8", "replace")
    one_error_line(done.returncode, err, "byte 0xff")


# ---------------------------------------------------------------- resume, parts, refusals
def _interrupted(world, out: Path, interrupt_after, calls: int = 2) -> Path:
    restore = interrupt_after(atlas_stats, "chunk_statistics", calls)
    with pytest.raises(cluster.Interrupted):
        build_atlas(world["spec"], world["model"], world["corpus"], out, SETTINGS, workers=0)
    restore()
    parts = cluster.parts_folder(out)
    assert parts.is_dir()
    return parts


@pytest.mark.parametrize("how", ["truncated", "empty", "crc"])
def test_resume_over_a_damaged_part_file_recomputes_it(world, tmp_path, interrupt_after, how):
    out = tmp_path / "r.atlas"
    parts = _interrupted(world, out, interrupt_after, calls=3)
    node = sorted(parts.glob("node-*.npz"))[0]
    data = node.read_bytes()
    if how == "truncated":
        node.write_bytes(data[:len(data) // 2])
    elif how == "empty":
        node.write_bytes(b"")
    else:  # a flipped byte inside a stored member: the zip's CRC-32 fails
        raw = bytearray(data)
        raw[60] ^= 0xFF
        node.write_bytes(bytes(raw))
    notes: list[str] = []
    build_atlas(world["spec"], world["model"], world["corpus"], out, SETTINGS, workers=0,
                resume=True, log=notes.append)
    assert any("damaged" in n for n in notes), notes
    for name in ("mean", "histogram", "top_value", "driving_token"):
        np.testing.assert_array_equal(Atlas(out)._read(name), Atlas(world["atlas"])._read(name))


def test_an_interrupt_before_any_chunk_leaves_no_parts(world, tmp_path, interrupt_after):
    out = tmp_path / "n.atlas"
    interrupt_after(atlas_stats, "chunk_statistics", 0)
    with pytest.raises(cluster.Interrupted, match="nothing is saved"):
        build_atlas(world["spec"], world["model"], world["corpus"], out, SETTINGS, workers=0)
    assert list(tmp_path.iterdir()) == []


def test_refusals_come_before_the_corpus_is_read(capsys, world, tmp_path, interrupt_after):
    out = tmp_path / "x.atlas"
    base = ["atlas", world["spec"], "--corpus", str(world["text"]), "--workers", "0",
            "--batch", "5", "--context", "24", "--chunk-tokens", "100", "--top-k", "4"]
    code, _, err = cli_run(capsys, *base, "--out", str(out), "--resume")
    one_error_line(code, err, "nothing to resume")
    code, _, err = cli_run(capsys, *base, "--out", str(tmp_path / "no" / "such" / "x.atlas"))
    one_error_line(code, err, "does not exist")
    _interrupted(world, out, interrupt_after)
    code, _, err = cli_run(capsys, *base, "--out", str(out))
    one_error_line(code, err, "add --resume")
    code, _, err = cli_run(capsys, "atlas", world["spec"], "--corpus", str(world["text"]),
                        "--workers", "0", "--out", str(out), "--resume", "--top-k", "7")
    one_error_line(code, err, "cannot resume")  # no status line before it
    sweep = ["sweep", world["spec"], "--by", str(world["groups"]), "--text", str(world["text"]),
             "--workers", "0"]
    code, _, err = cli_run(capsys, *sweep, "--out", str(tmp_path / "s.csv"), "--resume")
    one_error_line(code, err, "nothing to resume")


def test_a_bad_scheduler_address_makes_no_client(capsys, monkeypatch, world, tmp_path):
    import distributed

    def no_client(*args, **kwargs):
        raise AssertionError("a Client was made for a malformed address")

    monkeypatch.setattr(distributed, "Client", no_client)
    for address in ("not a url", "tcp://host:port", "tcp://:99999", "tcp://h:1/x y"):
        for command in ("atlas", "sweep"):
            argv = ([command, world["spec"], "--corpus" if command == "atlas" else "--text",
                     str(world["text"]), "--out", str(tmp_path / f"o.{command}.csv"
                                                       if command == "sweep" else tmp_path / "o"),
                     "--scheduler", address])
            if command == "sweep":
                argv[2:2] = ["--by", str(world["groups"])]
            code, _, err = cli_run(capsys, *argv)
            one_error_line(code, err, "is not a scheduler address")
    assert list(tmp_path.iterdir()) == []


def test_dask_log_lines_and_warnings_stay_quiet(capsys):
    import logging
    import warnings

    with cluster.quiet_dask():
        logging.getLogger("distributed.worker").error("KilledWorker: a worker died")
        warnings.warn_explicit("port in use", UserWarning, "scheduler.py", 1,
                               module="distributed.scheduler")
    assert capsys.readouterr().err == ""


def test_zarr_and_pynwb_warnings_stay_off_stderr(capsys, world, tmp_path):
    clash = tmp_path / "clash.atlas"
    shutil.copytree(world["atlas"], clash)
    (clash / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", '
                                     '"attributes": {}}', encoding="utf-8")
    code, _, err = cli_run(capsys, "neuron", str(clash), "3")
    one_error_line(code, err, "not a flyviz atlas")  # zarr's v2/v3 warning does not come first
    pytest.importorskip("pynwb")
    code, _, err = cli_run(capsys, "convert", str(world["recording"]), "--to", "nwb",
                        str(tmp_path / "run.h5"), "--no-labels")
    assert code == 0 and err.startswith("flyviz: wrote") and err.count("\n") == 1, err


# ---------------------------------------------------------------- the app's arguments
def test_gui_refuses_a_model_that_cannot_exist_before_any_window(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), QT_QPA_PLATFORM="offscreen")
    done = subprocess.run([sys.executable, "-m", "flyviz", "gui", "--model",
                           str(tmp_path / "nonexistent")], env=env, capture_output=True,
                          text=True, timeout=60)
    one_error_line(done.returncode, done.stderr, "no such folder")


def test_gui_size_names_the_limit_it_breaks(capsys):
    for size, limit in (("99999x99999", "at most 16384x16384"), ("100x100", "at least 320x240")):
        with pytest.raises(SystemExit) as exc:
            cli.main(["gui", "--size", size])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert limit in err and err.count("\n") == 1


# ---------------------------------------------------------------- signals on a cluster
def _terminal_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal's shell leaves them, whatever this test
    process has set (an ignored signal would be inherited through exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


#: CPU seconds the Dask worker processes spend after "ready" before the signal is sent:
#: a worker that has used this much is running its first chunk (an idle one uses next to
#: none; a worker's first chunk alone takes longer).
_WORKER_CPU_S = 0.2


def _descendant_cpu(pid: int) -> float:
    """CPU seconds (user and system) used so far by the processes ``pid`` started."""
    import psutil

    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # a process that has just exited
            continue
        total += times.user + times.system
    return total


def _interrupt_when_workers_run(argv: list[str], how: str, cwd: Path) -> tuple[int, str]:
    """Run ``flyviz ARGV`` in its own session; once it says its Dask workers are ready and
    they have started computing, send SIGINT to the whole process group (Ctrl+C in a
    terminal) or SIGTERM to flyviz."""
    import threading

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-m", "flyviz", *argv], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True, preexec_fn=_terminal_signals)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            lines.append(raw.decode("utf-8", "replace"))
            if "worker(s) ready" in lines[-1]:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(90), "".join(lines)
        # The workers take their first tasks: wait until they have computed for a moment.
        idle = _descendant_cpu(process.pid)
        deadline = time.monotonic() + 60
        while _descendant_cpu(process.pid) - idle < _WORKER_CPU_S:
            assert process.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.02)
        if how == "SIGINT":
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, "".join(lines).replace("\r", "\n")


@pytest.fixture(scope="module")
def long_text(tmp_path_factory):
    """A text the tiny model needs far longer than the test waits for (about 66,000 tokens,
    several seconds on two workers)."""
    rng = np.random.default_rng(9)
    path = tmp_path_factory.mktemp("long") / "long.txt"
    path.write_text("\n\n".join(" ".join(rng.choice(_WORDS, 40)) + "." for _ in range(1500)),
                    encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("command, how", [("atlas", "SIGINT"), ("sweep", "SIGTERM")])
def test_interrupting_a_local_cluster_is_quiet(world, long_text, tmp_path, command, how):
    out = tmp_path / ("x.atlas" if command == "atlas" else "x.csv")
    argv = [command, world["spec"], "--out", str(out), "--workers", "2", "--context", "24",
            "--chunk-tokens", "2000", "--batch", "2"]
    argv += (["--corpus", str(long_text), "--compact"] if command == "atlas"
             else ["--text", str(long_text), "--by", str(world["groups"])])
    code, err = _interrupt_when_workers_run(argv, how, tmp_path)
    assert code == 130, err
    assert "Traceback" not in err and "leaked semaphore" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[")]
    assert lines[-1].startswith(f"flyviz {command}: interrupted"), err
    assert len(lines) == 3, err  # two status lines, then the interrupted line
    assert not out.exists()
    # Either nothing was finished (and nothing is left) or the parts say how to resume.
    assert cluster.parts_folder(out).is_dir() == ("--resume" in lines[-1])
