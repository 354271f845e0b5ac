"""Hostile input, second round (issue 31, part 5, root causes 1-6): a trace of a patched run,
atlas metadata outside the checksums, FIFOs and bad worker counts, an output over an input,
a full disk, and names too long for the file system.

Each bad input is one ``flyviz: error:`` line and exit 2 (one flyviz exception in the
library), with nothing half-written left behind.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_checks import cli_run, one_error_line

import flyviz
from flyviz import cli, fileio
from flyviz.analysis.atlas import Atlas, AtlasError, AtlasSettings, build_atlas, open_atlas
from flyviz.analysis.corpus import build_corpus
from flyviz.errors import FileAccessError, FlyvizError, InputError
from flyviz.model.patching import Patch, PatchSource
from flyviz.model.resolve import load_model
from flyviz.model.synthetic import _WORDS
from flyviz.model.tokenizer import FlyTokenizer

SETTINGS = AtlasSettings(top_k=4, streams=5, context=24, chunk_tokens=100, min_token_count=2,
                         samples_per_band=2)
GROUPS = "first: id:0-99\nsecond: id:100-199\nthird: id:200-396\n"
PROMPT = "Once upon a time the cat"
SOURCE = "Once upon a day the cat"  # the same length in tokens, another at position 4
PATCH = "id:0-199@4:5"
LONG = "n" * 300  # one name component over the 255-character limit


@pytest.fixture(scope="module")
def world2(tmp_path_factory, tokenizer_path):
    """A tiny model in a folder, a text, its atlas, groups, a source recording and a run
    patched from it, made once."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_fly_llm_hf

    root = tmp_path_factory.mktemp("hostile2")
    vocab = FlyTokenizer(tokenizer_path).vocab_size
    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=397, edges=6001, d_embed=16, vocabulary=vocab, readout_rank=9, seed=5,
        tokenizer_path=tokenizer_path, name="hostile2"))
    write_fly_llm_hf(ckpt, root / "model")
    model = load_model(str(root / "model"))
    rng = np.random.default_rng(2)
    stories = [" ".join(rng.choice(_WORDS, rng.integers(3, 12))).capitalize() + "."
               for _ in range(60)]
    text = root / "text.txt"
    text.write_text("\n\n".join(stories) + "\n", encoding="utf-8")
    corpus = build_corpus([text], FlyTokenizer(tokenizer_path), context=SETTINGS.context)
    atlas = root / "good.atlas"
    build_atlas(str(root / "model"), model, corpus, atlas, SETTINGS, workers=0)
    groups = root / "groups.txt"
    groups.write_text(GROUPS, encoding="utf-8")
    spec = str(root / "model")
    source = root / "source.flyrec"
    patched = root / "patched.flyrec"
    assert cli.main(["generate", spec, "--prompt", SOURCE, "--max-new-tokens", "3",
                     "--record", str(source)]) == 0
    assert cli.main(["generate", spec, "--prompt", PROMPT, "--max-new-tokens", "3",
                     "--patch", PATCH, "--source", str(source), "--record",
                     str(patched)]) == 0
    return {"root": root, "spec": spec, "model": model, "text": text, "atlas": atlas,
            "groups": groups, "source": source, "patched": patched}




def _ends_in_one_line(code: int, err: str, *expected: str) -> None:
    """A run that met the error after it began: its status lines, then one error line."""
    assert "Traceback" not in err, err
    lines = err.rstrip("\n").split("\n")
    one_error_line(code, lines[-1] + "\n", *expected)
    assert not any(line.startswith("flyviz: error:") for line in lines[:-1]), err


# ---------------------------------------------------------------- 1. a patched run's trace
def test_the_trace_of_a_patched_run_is_exact_and_sees_the_patch(world2):
    model = world2["model"]
    patch = Patch("id:0-199", PatchSource.from_prompt(SOURCE), 4, 5)
    plain = flyviz.trace(model, PROMPT)
    att = flyviz.trace(model, PROMPT, interventions=[patch])
    # The decomposition of the patched run adds up to its logit.
    assert att.completeness_error is not None
    assert abs(att.completeness_error) < 1e-4 * max(1.0, abs(att.value))
    # The state it explains is the patched run's: after step 2 the source's state.
    source_states = PatchSource.from_prompt(SOURCE).with_states(model).states
    assert np.array_equal(att.tape.x(4)[:200], source_states[4][:200])
    assert not np.array_equal(plain.tape.x(4)[:200], source_states[4][:200])
    assert np.array_equal(att.tape.x(3), plain.tape.x(3))  # before the window: untouched
    # What the patch set is a source of the decomposition (the state it wrote carries L).
    assert att.clamp_flow != 0.0 and plain.clamp_flow == 0.0
    assert att.value != pytest.approx(plain.value)


def test_trace_of_a_patched_run_on_the_command_line(capsys, world2):
    spec, source = world2["spec"], str(world2["source"])
    for how in (["--source-prompt", SOURCE], ["--source", source]):
        code, out, err = cli_run(capsys, "trace", spec, "--prompt", PROMPT, "--patch", PATCH,
                              *how, "--json")
        assert code == 0, err
        result = json.loads(out)
        assert abs(result["completeness_error"]) < 1e-4 * max(1.0, abs(result["target"]["value"]))
        assert result["clamp_flow"] != 0.0  # the patch is a source of the decomposition
    # A source of another length is one line, as it is for generate.
    code, _, err = cli_run(capsys, "trace", spec, "--prompt", PROMPT + " sat down", "--patch",
                        PATCH, "--source-prompt", SOURCE)
    one_error_line(code, err, "tokens long", "--align end")


def test_a_recordings_patch_source_given_again_is_advice_that_works(capsys, world2):
    patched, source = str(world2["patched"]), str(world2["source"])
    for command in (["trace", "--recording", patched], ["replay", patched]):
        code, _, err = cli_run(capsys, *command)
        one_error_line(code, err, "is not stored with it", "--source REC")
        code, out, err = cli_run(capsys, *command, "--source", source)
        assert code == 0, err
    # The library says the same, and its patch_source works.
    with pytest.raises(InputError, match="patch_source="):
        flyviz.trace(world2["model"], world2["patched"])
    att = flyviz.trace(world2["model"], world2["patched"], patch_source=world2["source"])
    assert abs(att.completeness_error) < 1e-4 * max(1.0, abs(att.value))
    # A source given for a recording without such a patch is refused, not ignored.
    code, _, err = cli_run(capsys, "trace", "--recording", source, "--source", source)
    one_error_line(code, err, "holds no patch whose source is missing")


def test_another_models_source_is_one_line(capsys, world2, tmp_path):
    from flyviz.record.recording import Recording

    rec = Recording.load(world2["source"])
    wrong = PatchSource(states=np.zeros((len(rec), 12), np.float32), label="other")
    with pytest.raises(InputError, match="holds states of 12 neurons"):
        flyviz.trace(world2["model"], PROMPT, interventions=[Patch("all", wrong, 4, 5)])


# ---------------------------------------------------------------- 2. atlas metadata
def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text(encoding="utf-8"))
    edit(value)
    path.write_text(json.dumps(value), encoding="utf-8")


def _both(atlas: Path, edit_meta, key: str) -> None:
    """The same edit in the consolidated metadata and in the file it stands for."""
    _edit_json(atlas / ".zmetadata", lambda m: edit_meta(m["metadata"][key]))
    _edit_json(atlas / key, edit_meta)


def _drop_chunk_and_digest(atlas: Path) -> None:
    (atlas / "mean" / "0").unlink()
    _edit_json(atlas / ".zattrs", lambda a: a["flyviz_integrity"]["arrays"]["mean"].pop("0"))
    _edit_json(atlas / ".zmetadata", lambda m: m["metadata"][".zattrs"]["flyviz_integrity"]
               ["arrays"]["mean"].pop("0"))


METADATA_EDITS = {
    "dtype in .zmetadata": lambda a: _edit_json(
        a / ".zmetadata", lambda m: m["metadata"]["mean/.zarray"].update(dtype=">f4")),
    "dtype everywhere": lambda a: _both(a, lambda z: z.update(dtype=">f4"), "mean/.zarray"),
    "dimension separator": lambda a: _both(
        a, lambda z: z.update(dimension_separator="/"), "mean/.zarray"),
    "histogram shape": lambda a: _both(
        a, lambda z: z.update(shape=[z["shape"][0], z["shape"][1] // 2]), "histogram/.zarray"),
    "shape shrunk": lambda a: _both(a, lambda z: z.update(shape=[100]), "mean/.zarray"),
    "chunk and digest deleted": _drop_chunk_and_digest,
    "neurons 5000": lambda a: _both(
        a, lambda z: z["flyviz_atlas"]["model"].update(neurons=5000), ".zattrs"),
    "neurons abc": lambda a: _both(
        a, lambda z: z["flyviz_atlas"]["model"].update(neurons="abc"), ".zattrs"),
}


@pytest.mark.parametrize("how", sorted(METADATA_EDITS))
def test_edited_atlas_metadata_is_one_line_everywhere(capsys, world2, tmp_path, how):
    atlas = tmp_path / "m.atlas"
    shutil.copytree(world2["atlas"], atlas)
    METADATA_EDITS[how](atlas)
    code, stdout, err = cli_run(capsys, "neuron", str(atlas), "3")
    one_error_line(code, err, "m.atlas is damaged", "build it again")
    assert stdout == ""
    for opener in (open_atlas, lambda p: Atlas(p, verify=False)):
        with pytest.raises(AtlasError, match="is damaged"):
            opener(atlas)
    from flyviz.app.atlas.atlas_panel import check_atlas

    with pytest.raises(AtlasError, match="is damaged"):
        check_atlas(atlas)
    from flyviz.napari._reader import get_reader

    reader = get_reader(str(atlas))
    assert reader is not None  # still looks like an atlas: the reader must refuse it
    with pytest.raises(FlyvizError, match="is damaged"):
        reader(str(atlas))


def test_an_intact_atlas_passes_its_metadata_check(world2):
    from flyviz.analysis import integrity

    digests = integrity.chunk_digests(world2["atlas"])
    attrs = json.loads((world2["atlas"] / ".zattrs").read_text(encoding="utf-8"))
    assert attrs[integrity.ATTRIBUTE] == digests and "seal" in digests
    assert np.isfinite(open_atlas(world2["atlas"]).card(3).mean)


def test_result_tables_carry_a_checksum_of_their_header_and_rows(world2, tmp_path):
    from flyviz.analysis.importance import read_neuron_table

    out = tmp_path / "est.csv"
    flyviz.importance(world2["model"], world2["text"], by=str(world2["groups"]), out=out,
                      max_tokens=200)
    neurons = tmp_path / "est.neurons.csv"
    info, columns = read_neuron_table(neurons)
    assert "table_crc32" not in info and columns["neuron"].size == 397
    lines = neurons.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[1].replace("delta_ce_est", "delta_ce_esu")
    for damaged in ("".join(lines[:1] + [header] + lines[2:]),
                    "".join(lines[:3] + [lines[3].replace("0", "1", 1)] + lines[4:])):
        neurons.write_text(damaged, encoding="utf-8")
        with pytest.raises(InputError, match="CRC-32"):
            read_neuron_table(neurons)


def test_a_lesion_maps_header_line_is_checked(capsys, world2, tmp_path):
    from flyviz.analysis.sweep import LesionMap, SweepError

    out = tmp_path / "lesions.csv"
    code, _, err = cli_run(capsys, "sweep", world2["spec"], "--by", str(world2["groups"]),
                        "--text", str(world2["text"]), "--out", str(out), "--workers", "0",
                        "--max-tokens", "200")
    assert code == 0, err
    LesionMap(out)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    head = json.loads(lines[0][len("# flyviz-sweep "):])
    head["mode"] = "cut-out" if head.get("mode") != "cut-out" else "silence"
    out.write_text("# flyviz-sweep " + json.dumps(head) + "\n" + "".join(lines[1:]),
                   encoding="utf-8")
    with pytest.raises(SweepError, match="CRC-32"):
        LesionMap(out)


# ---------------------------------------------------------------- 3. hangs
def _fifo_atlas(world2, tmp_path: Path, member: str) -> Path:
    atlas = tmp_path / "f.atlas"
    shutil.copytree(world2["atlas"], atlas)
    (atlas / member).unlink()
    os.mkfifo(atlas / member)
    return atlas


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs (os.mkfifo)")
@pytest.mark.parametrize("member", ["mean/0", ".zmetadata"])
def test_a_fifo_in_an_atlas_is_refused_not_waited_on(world2, tmp_path, member):
    atlas = _fifo_atlas(world2, tmp_path, member)
    # In a subprocess with a timeout: a hang fails the test instead of stopping the suite.
    result = subprocess.run([sys.executable, "-m", "flyviz", "neuron", str(atlas), "3"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(Path(flyviz.__file__).parents[1])})
    one_error_line(result.returncode, result.stderr, "f.atlas is damaged", "FIFO")
    with pytest.raises(AtlasError, match="FIFO"):
        Atlas(atlas, verify=False)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs (os.mkfifo)")
def test_a_folder_that_is_no_atlas_is_said_so_before_its_tree_is_walked(capsys, tmp_path,
                                                                        monkeypatch):
    """``flyviz neuron / 3`` walked the whole tree, then called a pipe in /proc damage, under
    an empty name; a file given for an atlas was called a missing folder."""
    from flyviz.analysis import integrity

    folder = tmp_path / "not-an-atlas"
    (folder / "deep").mkdir(parents=True)
    os.mkfifo(folder / "deep" / "pipe")
    walked = []
    monkeypatch.setattr(integrity, "check_regular_tree", lambda *a: walked.append(a))
    for given in (folder, Path("/")):
        code, _, err = cli_run(capsys, "neuron", str(given), "3")
        one_error_line(code, err, f"{given} is not a flyviz atlas", "flyviz atlas")
        assert "damaged" not in err
    assert walked == []
    recording = tmp_path / "run.flyrec"
    recording.write_bytes(b"FLYREC")
    code, _, err = cli_run(capsys, "neuron", str(recording), "3")
    one_error_line(code, err, "run.flyrec is a file, not a folder", "made by 'flyviz atlas'")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this system has no FIFOs (os.mkfifo)")
def test_the_file_helpers_open_regular_files_only(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FileAccessError, match="FIFO"):
        fileio.open_regular(fifo)
    with pytest.raises(FileAccessError, match="folder"):
        fileio.check_regular(tmp_path)
    plain = tmp_path / "plain"
    plain.write_bytes(b"abc")
    assert fileio.read_regular_bytes(plain) == b"abc"


@pytest.mark.parametrize("workers", [-1, 1.5, "2", True, 5000])
def test_a_bad_worker_count_is_refused_before_any_work(world2, workers, monkeypatch):
    """Refused before the model is wrapped, the groups read, the corpus built or a run
    started: each of those steps fails this test if it is reached (the break it catches: the
    worker count checked only when the run starts, after the corpus is built)."""
    import flyviz.analysis.causal
    import flyviz.analysis.corpus
    import flyviz.analysis.importance
    import flyviz.record.runner

    def work(*args, **kwargs):
        raise AssertionError("work began before the worker count was checked")

    for module, name in ((flyviz.record.runner, "as_model"),
                         (flyviz.analysis.corpus, "build_corpus"),
                         (flyviz.analysis.importance, "importance_groups"),
                         (flyviz.analysis.importance, "run_importance"),
                         (flyviz.analysis.causal, "run_causal_trace")):
        monkeypatch.setattr(module, name, work)
    with pytest.raises(InputError, match=r"workers.* must be"):
        flyviz.importance(world2["model"], "the cat sat on the mat", workers=workers)
    with pytest.raises(InputError, match=r"workers.* must be"):
        flyviz.causal_trace(world2["model"], "the cat", "the dog", " sat", workers=workers)


# ---------------------------------------------------------------- 4. an output over an input
def _over_input_cases(w: dict, f: Path) -> dict[str, tuple[list[str], Path]]:
    """``{case: (argv, the input it would overwrite)}``; ``f`` is a copy of that input."""
    spec = w["spec"]
    return {
        "figure --out REC": (["figure", str(f), "--kind", "raster", "--sort", "similarity",
                              "--out", str(f)], f),
        "trace --graph REC": (["trace", "--recording", str(f), "--graph", str(f)], f),
        "generate --record SOURCE": (["generate", spec, "--prompt", PROMPT, "--patch",
                                      PATCH, "--source", str(f), "--record", str(f)], f),
        "sweep --out TEXT": (["sweep", spec, "--by", "superclass", "--text", str(f), "--out",
                              str(f), "--workers", "0"], f),
        "sweep --out BY": (["sweep", spec, "--by", str(f), "--text", str(w["text"]), "--out",
                            str(f), "--workers", "0"], f),
        "importance --out TEXT": (["importance", spec, "--text", str(f), "--out", str(f)], f),
        "importance --out BY": (["importance", spec, "--text", str(w["text"]), "--by", str(f),
                                 "--out", str(f)], f),
        "patch --out BY": (["patch", spec, "--clean", PROMPT, "--corrupt", SOURCE, "--answer",
                            " the", "--by", str(f), "--out", str(f)], f),
    }


SOURCES = {"figure --out REC": "source", "trace --graph REC": "source",
           "generate --record SOURCE": "source", "sweep --out TEXT": "text",
           "sweep --out BY": "groups", "importance --out TEXT": "text",
           "importance --out BY": "groups", "patch --out BY": "groups"}


@pytest.mark.parametrize("link", [False, True], ids=["same name", "hard link"])
@pytest.mark.parametrize("case", sorted(SOURCES))
def test_an_output_over_an_input_is_refused(capsys, world2, tmp_path, case, link):
    original = world2[SOURCES[case]]
    suffix = {"figure --out REC": ".png", "trace --graph REC": ".json"}.get(case, ".csv")
    kept = tmp_path / f"input{original.suffix}"
    shutil.copy(original, kept)
    target = tmp_path / f"out{suffix}"
    if link:
        os.link(kept, target)  # another name of the same file
    else:
        target = tmp_path / f"input{suffix}"
        shutil.copy(original, target)
    argv, _ = _over_input_cases(world2, target)[case]
    if link:  # read the input by its own name, write through the link
        argv = [str(kept) if a == str(target) else a for a in argv]
        out_flag = {"figure --out REC": "--out", "trace --graph REC": "--graph",
                    "generate --record SOURCE": "--record"}.get(case, "--out")
        argv[argv.index(out_flag) + 1] = str(target)
        checked = kept
    else:
        checked = target
    before = checked.read_bytes()
    code, stdout, err = cli_run(capsys, *argv)
    one_error_line(code, err, "would destroy it", "is the recording itself"
              if SOURCES[case] == "source" else "is the input of")
    assert checked.read_bytes() == before


# ---------------------------------------------------------------- 5. a full disk
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _left_over(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_full_disk_as_trace_writes_its_graph(capsys, monkeypatch, world2, tmp_path):
    monkeypatch.setattr(fileio.os, "replace", _no_space)
    out = tmp_path / "graph.json"
    code, _, err = cli_run(capsys, "trace", world2["spec"], "--prompt", PROMPT, "--graph", str(out))
    one_error_line(code, err, "no space left", "graph.json")
    assert _left_over(tmp_path) == []  # no graph, no temporary


def test_the_atomic_writer_leaves_the_old_file_on_a_full_disk(monkeypatch, tmp_path):
    out = tmp_path / "kept.txt"
    out.write_text("old", encoding="utf-8")
    with pytest.raises(FileAccessError, match="no space left"):
        with fileio.atomic_write(out, "w") as handle:
            handle.write("new")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert out.read_text(encoding="utf-8") == "old" and _left_over(tmp_path) == ["kept.txt"]
    fileio.write_text_atomically(out, "new")
    assert out.read_text(encoding="utf-8") == "new"
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~fileio._UMASK)


def test_a_full_disk_as_a_run_starts_leaves_no_store_and_a_torn_one_is_rewritten(
        capsys, monkeypatch, world2, tmp_path):
    from flyviz.analysis import parts

    out = tmp_path / "lesions.csv"
    argv = ["sweep", world2["spec"], "--by", str(world2["groups"]), "--text",
            str(world2["text"]), "--out", str(out), "--workers", "0", "--max-tokens", "200"]
    with monkeypatch.context() as patched:
        patched.setattr(parts.os, "replace", _no_space)
        code, _, err = cli_run(capsys, *argv)
    _ends_in_one_line(code, err, "no space left")
    assert _left_over(tmp_path) == []  # no OUT.parts with a 0-byte run.json
    # A store cut off as it started (what an older flyviz left): a rerun and --resume work.
    for extra in ([], ["--resume"]):
        store = tmp_path / "lesions.csv.parts"
        store.mkdir(exist_ok=True)
        (store / "run.json").write_bytes(b"" if not extra else b'{"format": "flyv')
        out.unlink(missing_ok=True)
        code, _, err = cli_run(capsys, *argv, *extra)
        assert code == 0, err
        assert out.is_file() and not store.exists()


def test_a_full_disk_as_importance_writes_leaves_no_result_and_resume_finishes(
        capsys, monkeypatch, world2, tmp_path):
    from flyviz.analysis import importance_file

    out = tmp_path / "est.csv"
    argv = ["importance", world2["spec"], "--text", str(world2["text"]), "--by",
            str(world2["groups"]), "--out", str(out), "--max-tokens", "200"]
    with monkeypatch.context() as patched:
        patched.setattr(importance_file, "write_zarr", _no_space)
        code, _, err = cli_run(capsys, *argv)
    _ends_in_one_line(code, err, "no space left", "est.csv")
    # None of the three outputs, half or whole; the finished tasks are kept.
    assert _left_over(tmp_path) == ["est.csv.parts"]
    code, _, err = cli_run(capsys, *argv, "--resume")
    assert code == 0, err
    assert _left_over(tmp_path) == ["est.csv", "est.neurons.csv", "est.zarr"]


def test_a_full_disk_as_a_table_is_written(monkeypatch, tmp_path):
    from flyviz.analysis import table_file

    monkeypatch.setattr(table_file.os, "replace", _no_space)
    with pytest.raises(FileAccessError, match="no space left"):
        table_file.write_table_file(tmp_path / "t.csv", {"a": [1.0, 2.0]}, {"format": "x"},
                                    "csv", csv_prefix="# x ", parquet_key=b"x", what="x")
    assert _left_over(tmp_path) == []


def test_nwb_is_not_handed_a_disk_without_room(capsys, monkeypatch, world2, tmp_path):
    pytest.importorskip("pynwb", reason="convert --to nwb needs the nwb extra")
    from flyviz.record import convert

    real = shutil.disk_usage
    monkeypatch.setattr(convert.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=1000))
    out = tmp_path / "run.nwb"
    code, _, err = cli_run(capsys, "convert", str(world2["source"]), "--to", "nwb", str(out))
    one_error_line(code, err, "no space left", "free some space")
    assert _left_over(tmp_path) == []


def test_a_full_disk_is_one_line_whatever_command_meets_it(capsys, monkeypatch, world2,
                                                           tmp_path):
    from flyviz import figures

    monkeypatch.setattr(figures.os, "replace", _no_space)
    code, _, err = cli_run(capsys, "figure", str(world2["source"]), "--kind", "raster", "--sort",
                        "similarity", "--out", str(tmp_path / "f.png"))
    one_error_line(code, err, "no space left")
    assert _left_over(tmp_path) == []


# ---------------------------------------------------------------- 6. long names
def _long_cases(w: dict, tmp: Path) -> dict[str, list[str]]:
    spec, long = w["spec"], str(tmp / LONG)
    text, rec, atlas = str(w["text"]), str(w["source"]), str(w["atlas"])
    return {
        "generate SPEC": ["generate", long, "--prompt", PROMPT],
        "generate --record": ["generate", spec, "--prompt", PROMPT, "--record", long + ".flyrec"],
        "generate --dataset": ["generate", spec, "--prompt", PROMPT, "--dataset", long],
        "compare --source": ["compare", spec, "--prompt", PROMPT, "--patch", "all",
                             "--source", long],
        "trace --graph": ["trace", spec, "--prompt", PROMPT, "--graph", long + ".json"],
        "trace --recording": ["trace", "--recording", long],
        "select SPEC": ["select", long, "all"],
        "info SPEC": ["info", long],
        "verify SPEC": ["verify", long],
        "replay REC": ["replay", long],
        "export --mesh": ["export", spec, "--prompt", PROMPT, "--out", str(tmp / "m.gif"),
                          "--mesh", long],
        "convert OUT": ["convert", rec, "--to", "npz", long + ".npz"],
        "figure --out": ["figure", rec, "--kind", "raster", "--sort", "similarity", "--out",
                         long + ".png"],
        "atlas --corpus": ["atlas", spec, "--corpus", long, "--out", str(tmp / "a.atlas"),
                           "--workers", "0"],
        "atlas --out": ["atlas", spec, "--corpus", text, "--out", long, "--workers", "0"],
        "neuron ATLAS": ["neuron", long, "3"],
        "sweep --by": ["sweep", spec, "--by", long, "--text", text, "--out",
                       str(tmp / "o.csv"), "--workers", "0"],
        "sweep --out": ["sweep", spec, "--by", "superclass", "--text", text, "--out", long + ".csv", "--workers", "0"],
        "patch --out": ["patch", spec, "--clean", PROMPT, "--corrupt", SOURCE, "--answer",
                        " the", "--by", "superclass", "--out", long + ".csv"],
        "importance --text": ["importance", spec, "--text", long, "--out", str(tmp / "i.csv")],
        "gui --atlas": ["gui", "--model", spec, "--atlas", long],
        "gui --lesion-map": ["gui", "--model", spec, "--lesion-map", long + ".csv"],
        "gui --recording": ["gui", "--recording", long, "--atlas", atlas],
    }


@pytest.mark.parametrize("case", sorted(_long_cases({"spec": "", "text": "", "source": "",
                                                     "atlas": ""}, Path("."))))
def test_a_name_over_the_limit_is_one_line_in_every_argument(capsys, world2, tmp_path, case):
    argv = _long_cases(world2, tmp_path)[case]
    code, stdout, err = cli_run(capsys, *argv)
    one_error_line(code, err, "too long", "nnnn")
    assert len(err) < 400  # the name is shortened, not printed whole
    assert _left_over(tmp_path) == []


def test_the_library_load_of_a_long_name_is_one_flyviz_error(tmp_path):
    for spec in (LONG, str(tmp_path / LONG / "model")):
        with pytest.raises(FileAccessError, match="too long"):
            flyviz.load(spec)


def test_any_oserror_that_reaches_the_command_line_is_one_line(capsys, monkeypatch, world2):
    """The class: whatever command meets an OSError (here: EACCES, ELOOP, EIO) prints one
    line naming the path."""
    from flyviz.commands import info

    for code_ in (errno.EACCES, errno.ELOOP, errno.EIO, errno.EROFS):
        def fail(args, code_=code_):
            raise OSError(code_, os.strerror(code_), "/some/where")
        monkeypatch.setattr(info, "run", fail)
        code, _, err = cli_run(capsys, "info", world2["spec"])
        one_error_line(code, err, "/some/where")


def test_trace_graph_onto_a_folder_or_into_a_read_only_one(capsys, monkeypatch, world2,
                                                          tmp_path):
    folder = tmp_path / "g.json"
    folder.mkdir()
    code, _, err = cli_run(capsys, "trace", world2["spec"], "--prompt", PROMPT, "--graph",
                        str(folder))
    one_error_line(code, err, "is a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    real_access = os.access
    # Root may write anywhere: the check is asked what a user's process would be told.
    monkeypatch.setattr(fileio.os, "access",
                        lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    code, stdout, err = cli_run(capsys, "trace", world2["spec"], "--prompt", PROMPT, "--graph",
                             str(locked / "g.json"))
    one_error_line(code, err, "is not writable")
    assert stdout == ""  # refused before the trace
    locked.chmod(0o755)


def test_patch_figure_into_a_folder_that_takes_no_file_fails_before_the_table(capsys, world2,
                                                                              tmp_path):
    """/proc takes no new file, even from root: the figure's folder is tried before the run,
    so the table is not written and then the figure refused (issue 41)."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    table = tmp_path / "cells.csv"
    code, stdout, err = cli_run(capsys, "patch", world2["spec"], "--clean", PROMPT, "--corrupt",
                                SOURCE, "--answer", " the", "--by", "superclass", "--out",
                                str(table), "--figure", "/proc/heatmap.png")
    one_error_line(code, err, "cannot write --figure /proc/heatmap.png")
    assert not table.exists() and list(tmp_path.iterdir()) == []


def test_the_library_importance_refuses_an_out_that_is_its_own_text(world2, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(Path(world2["text"]).read_text(encoding="utf-8"), encoding="utf-8")
    before = text.read_bytes()
    for given in (text, [text]):
        with pytest.raises(InputError, match="out .*text.txt is the input of text"):
            flyviz.importance(world2["model"], given, out=text)
    assert text.read_bytes() == before
    groups = tmp_path / "groups.txt"
    groups.write_text("first: id:0-99\n", encoding="utf-8")
    with pytest.raises(InputError, match="the input of by"):
        flyviz.importance(world2["model"], "the cat sat", by=str(groups), out=groups)
    assert groups.read_text(encoding="utf-8") == "first: id:0-99\n"
