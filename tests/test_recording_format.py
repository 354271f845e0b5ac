"""The .flyrec format: damage is one line, opening is lazy, runs replay token for token."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from flyviz.cli import main
from flyviz.model.errors import InputError, RecordingError
from flyviz.record.recording import Recording, content_digest
from flyviz.record.run import GenerationSettings
from flyviz.record.runner import record_prompt


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer_path, tokenizer_vocabulary):
    """Small models of one size in the ngxson layout: 'a'; 'b', a's graph with other
    weights; 'c', another graph."""
    import dataclasses

    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_fly_llm_hf

    root = tmp_path_factory.mktemp("models")
    a, c = (make_random_checkpoint(neurons=311, edges=4000, d_embed=16, seed=seed,
                                   vocabulary=tokenizer_vocabulary, tokenizer_path=tokenizer_path,
                                   name=name) for name, seed in (("a", 21), ("c", 22)))
    b = dataclasses.replace(a, name="b", head_b=np.roll(a.head_b, 1, axis=0))
    for ckpt in (a, b, c):
        write_fly_llm_hf(ckpt, root / ckpt.name)
    return root


@pytest.fixture(scope="module")
def model_a(models):
    from flyviz.model.resolve import load_model

    return load_model(str(models / "a"))


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flyviz: error:"), err
    return err


# ------------------------------------------------------------------ file surgery
def parts(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + length]), raw[8 + length:]


def join(header: dict, data: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def rewrite(path: Path, out: Path, *, meta: dict | None = None, tensors: dict | None = None,
            reseal: bool = False) -> Path:
    """Write ``path`` again with the official safetensors writer, changing metadata and
    tensors; ``reseal`` computes a fresh content_sha256 (a writer that means it)."""
    header, _ = parts(path)
    metadata = dict(header["__metadata__"])
    metadata.update(meta or {})
    metadata = {k: v for k, v in metadata.items() if v is not None}
    arrays = load_file(str(path))
    for name, value in (tensors or {}).items():
        if value is None:
            arrays.pop(name, None)
        else:
            arrays[name] = value
    if reseal:
        metadata["content_sha256"] = content_digest(
            {k: v for k, v in metadata.items()},
            {k: (str(a.dtype), [int(s) for s in a.shape], b"" if k == "states" else a.tobytes())
             for k, a in arrays.items()})
    save_file(arrays, str(out), metadata={k: v for k, v in metadata.items() if v is not None})
    return out


def edit_frames(path: Path, out: Path, change, *, reseal: bool = False,
                key: str = "frames") -> Path:
    header, _ = parts(path)
    frames = json.loads(header["__metadata__"][key])
    change(frames)
    return rewrite(path, out, meta={key: json.dumps(frames)}, reseal=reseal)


def write_v1_0(rec: Recording, path: Path) -> Path:
    """A recording as flyviz 0.1 wrote it: format_version "1", float16, no checksums."""
    n = len(rec)
    top = max(len(f.top_k_ids) for f in rec)
    ids = np.full((n, top), -1, np.int32)
    probs = np.zeros((n, top), np.float32)
    for i, f in enumerate(rec):
        ids[i, :len(f.top_k_ids)] = f.top_k_ids
        probs[i, :len(f.top_k_probabilities)] = f.top_k_probabilities
    infos = rec._infos
    tensors = {"states": rec.states().astype(np.float16),
               "position": np.array([f.position for f in infos], np.int64),
               "input_token_id": np.array([f.input_token_id for f in infos], np.int64),
               "predicted_token_id": np.array([f.predicted_token_id for f in infos], np.int64),
               "probability": np.array([f.probability for f in infos], np.float64),
               "mean_abs_state": np.array([f.mean_abs_state for f in infos], np.float64),
               "top_k_ids": ids, "top_k_probabilities": probs}
    texts = [{"phase": f.phase, "input_text": f.input_text, "predicted_text": f.predicted_text,
              "top_k_text": list(f.top_k_text), "text_keep": f.text_keep,
              "text_tail": f.text_tail, "generation_index": f.generation_index} for f in infos]
    save_file(tensors, str(path), metadata={
        "format": "flyviz-recording", "format_version": "1", "flyviz_version": "0.1.0",
        "neurons": str(rec.neurons), "metadata": json.dumps(rec.metadata),
        "frames": json.dumps(texts)})
    return path


@pytest.fixture(scope="module")
def saved(model_a, tmp_path_factory):
    """A sampled run saved with float16 and with float32 states, and as flyviz 0.1 saved it."""
    root = tmp_path_factory.mktemp("saved")
    settings = GenerationSettings(max_new_tokens=12, temperature=0.9, top_k=5).validate()
    out = {}
    for dtype in ("float16", "float32"):
        rec = record_prompt(model_a, "the little dog saw", settings, states_dtype=dtype)
        out[dtype] = rec.save(root / f"run-{dtype}.flyrec")
    out["v1.0"] = write_v1_0(Recording.load(out["float16"]), root / "run-v1.0.flyrec")
    out["comparison"] = compared(model_a, "free", settings).save(root / "compared.flyrec")
    return out


def compared(model, mode: str, settings: GenerationSettings | None = None) -> Recording:
    """A comparison recording: the model with a third of its neurons silenced against
    itself untouched."""
    from flyviz.model.interventions import Silence
    from flyviz.record.compare import Comparison

    comparison = Comparison.for_checkpoint(model, [Silence("id:0-100"), Silence([200, 201])])
    try:
        return comparison.record("the little dog saw",
                                 settings or GenerationSettings(max_new_tokens=10, top_k=5),
                                 mode=mode)
    finally:
        comparison.close()


# --------------------------------------------------------------- versions and states
def test_states_are_float16_by_default_and_float32_exactly_on_request(model_a, saved):
    from flyviz.model.engine import Engine
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.record.run import iter_frames

    f16, f32 = Recording.load(saved["float16"]), Recording.load(saved["float32"])
    assert f16.states_dtype == np.float16 and f32.states_dtype == np.float32
    assert saved["float32"].stat().st_size > 1.8 * saved["float16"].stat().st_size - 20_000
    # The same seeded run gives the same frames: float32 states come back bit for bit.
    settings = GenerationSettings(max_new_tokens=12, temperature=0.9, top_k=5,
                                  seed=f32.metadata["seed"])
    engine = Engine(model_a)
    frames = list(iter_frames(engine, tokenizer_for(model_a), "the little dog saw", settings))
    engine.close()
    assert [f.predicted_token_id for f in frames] == [f.predicted_token_id for f in f32]
    exact = np.stack([f.state for f in frames])
    np.testing.assert_array_equal(f32.states(), exact)
    np.testing.assert_allclose(f16.states(), exact, atol=1e-3)
    assert not np.array_equal(f16.states(), exact)


def test_a_flyviz_0_1_recording_still_opens(saved):
    old, new = Recording.load(saved["v1.0"]), Recording.load(saved["float16"])
    assert len(old) == len(new) and old.metadata == new.metadata
    np.testing.assert_array_equal(old.states(), new.states())
    assert [f.text_so_far for f in old] == [f.text_so_far for f in new]


@pytest.mark.parametrize("mode", ["forced", "free"])
def test_a_comparison_reopens_with_both_runs_its_interventions_and_kl(model_a, tmp_path, mode):
    from flyviz.model.interventions import from_json
    from flyviz.record.compare import comparison_trace

    rec = compared(model_a, mode)
    assert rec.baseline is not None and len(rec) > 5
    path = rec.save(tmp_path / "c.flyrec")
    back = Recording.load(path)
    for a, b in ((rec, back), (rec.baseline, back.baseline)):
        assert b is not None and len(a) == len(b) and a.metadata == b.metadata
        np.testing.assert_array_equal(a.states(), b.states())
        assert [f.text_so_far for f in a] == [f.text_so_far for f in b]
        assert a.generated_ids == b.generated_ids
    assert [str(i) for i in from_json(back.metadata["interventions"])] == \
        ["silence id:0-100", "silence id:200,201"]
    assert "interventions" not in back.baseline.metadata
    trace = comparison_trace(back)
    assert trace.mode == mode and trace.kl.shape == (len(back),)
    assert np.isfinite(trace.kl).all() and trace.kl[-1] > 0
    # The silenced neurons are 0 in the intervened run only.
    assert not back.states()[:, :101].any() and back.baseline.states()[:, :101].any()
    np.testing.assert_allclose(trace.mean_abs_delta,
                               np.abs(rec.states() - rec.baseline.states()).mean(axis=1),
                               atol=2e-3)
    if mode == "forced":     # the intervened model read the untouched run's tokens
        assert back.generated_ids == back.baseline.generated_ids
    # Opened lazily, the untouched states come from the file too.
    lazy = Recording.load(path, verify=False)
    np.testing.assert_array_equal(lazy.baseline.state(3), rec.baseline.state(3))


def test_a_comparison_is_sealed_as_a_1_2_reader_checks_it(saved):
    """The untouched run is extra tensors and keys: a 1.2 reader ignores them, and its
    seal (every tensor's bytes but ``states``) still matches."""
    path = saved["comparison"]
    header, _ = parts(path)
    meta = header["__metadata__"]
    assert meta["format_version"] == "1.4"
    arrays = load_file(str(path))
    assert {"baseline.states", "baseline.state_crc32", "baseline.top_k_ids"} <= set(arrays)
    assert {"baseline.frames", "baseline.metadata"} <= set(meta)
    contents = {k: (str(a.dtype), [int(s) for s in a.shape], b"" if k == "states" else
                    a.tobytes()) for k, a in arrays.items()}
    assert content_digest(meta, contents) == meta["content_sha256"]
    # Without the untouched run it is the intervened run alone, as 1.2 had it.
    alone = Recording.load(rewrite(path, path.with_name("alone.flyrec"), reseal=True, meta={
        "baseline.frames": None, "baseline.metadata": None,
        "metadata": json.dumps({k: v for k, v in json.loads(meta["metadata"]).items()
                                if k != "comparison"})},
        tensors={k: None for k in arrays if k.startswith("baseline.")}))
    assert alone.baseline is None and len(alone) == len(Recording.load(path))


def test_saving_into_a_file_says_that_it_is_a_file(tmp_path):
    """Saving as bad.flyrec/run.flyrec where bad.flyrec is a file said "File exists"."""
    from flyviz.model.errors import RecordingError

    blocker = tmp_path / "bad.flyrec"
    blocker.write_bytes(b"a recording, not a folder")
    for out in (blocker / "run.flyrec", blocker / "deeper" / "run.flyrec"):
        with pytest.raises(RecordingError) as err:
            Recording(7).save(out)
        assert str(err.value) == f"cannot write recording {out}: {blocker} is a file, not a folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.flyrec"]


def test_version_rules(saved, tmp_path):
    path = saved["float16"]
    # A newer minor version adds what an older reader may ignore: it opens.
    newer = rewrite(path, tmp_path / "1.7.flyrec", reseal=True,
                    meta={"format_version": "1.7", "future_field": "{}"},
                    tensors={"future_tensor": np.arange(3, dtype=np.int32)})
    assert len(Recording.load(newer)) == len(Recording.load(path))
    # A newer major version is refused with what to do.
    major = rewrite(path, tmp_path / "2.0.flyrec", reseal=True, meta={"format_version": "2.0"})
    with pytest.raises(RecordingError, match="newer flyviz.*upgrade flyviz"):
        Recording.load(major)
    for bad in ("x", "1.a", "", "-1"):
        with pytest.raises(RecordingError, match="format_version"):
            Recording.load(rewrite(path, tmp_path / "bad.flyrec", reseal=True,
                                   meta={"format_version": bad}))


# ------------------------------------------------------------------------- damage
def test_the_reported_edits_give_one_line_and_exit_2(saved, tmp_path, capsys, monkeypatch):
    old = saved["v1.0"]  # what flyviz 0.1 wrote: no seal, so only the checks can tell
    cases = {
        "no phase": edit_frames(old, tmp_path / "a.flyrec", lambda f: f[2].pop("phase")),
        "version 1.1": rewrite(old, tmp_path / "b.flyrec", meta={"format_version": "1.1"}),
        "metadata list": rewrite(old, tmp_path / "c.flyrec", meta={"metadata": "[1, 2]"}),
        "unknown phase": edit_frames(old, tmp_path / "d.flyrec",
                                     lambda f: f[1].update(phase="dreaming")),
        "nan state": rewrite(old, tmp_path / "e.flyrec", tensors={
            "states": np.where(np.arange(311) == 7, np.nan,
                               load_file(str(old))["states"]).astype(np.float16)}),
    }
    expected = {"no phase": "frame 2 has no phase", "version 1.1": "no state_crc32",
                "metadata list": "metadata is not a JSON object",
                "unknown phase": "unknown phase 'dreaming'", "nan state": "NaN"}
    pytest.importorskip("vispy")
    from PySide6.QtWidgets import QApplication

    def no_window(*args, **kwargs):
        raise AssertionError("a window opened for a damaged recording")

    monkeypatch.setattr(QApplication, "exec", no_window)
    for name, path in cases.items():
        rc = main(["export", "--recording", str(path), "--out", str(tmp_path / "x.mp4")])
        err = one_line(capsys)
        assert rc == 2 and expected[name] in err and path.name in err, (name, err)
        rc = main(["gui", "--recording", str(path)])
        assert rc == 2 and expected[name] in one_line(capsys), name
    assert not (tmp_path / "x.mp4").exists()


@pytest.mark.parametrize("value", ["many", "3.5", "", "1e3"])
def test_a_neuron_count_that_is_not_a_whole_number_is_named_not_called_bad_json(
        saved, tmp_path, capsys, value):
    # The header is valid JSON; its neurons field is what is wrong, and the line says so.
    bad = rewrite(saved["float16"], tmp_path / "bad.flyrec", meta={"neurons": value})
    with pytest.raises(RecordingError) as info:
        Recording.load(bad)
    message = str(info.value)
    assert "not valid JSON" not in message, message
    assert f"neurons {value!r} is not a whole number" in message, message
    rc = main(["convert", str(bad), "--to", "npz", str(tmp_path / "out.npz")])
    err = one_line(capsys)
    assert rc == 2 and "bad.flyrec" in err and f"neurons {value!r}" in err
    assert not (tmp_path / "out.npz").exists()


def _variants(path: Path, rng: np.random.Generator, tmp: Path) -> list[tuple[str, bytes]]:
    """Damaged copies of a recording: truncated, bit-flipped, header JSON edited, tensors
    of wrong shapes and dtypes (each edit with its old seal and with a fresh one)."""
    good = path.read_bytes()
    header, data = parts(path)
    meta = header["__metadata__"]
    out: list[tuple[str, bytes]] = []
    for cut in sorted({0, 4, 8, 9, len(good) - 1, *rng.integers(0, len(good), 30).tolist()}):
        out.append((f"truncated at {cut}", good[:cut]))
    for _ in range(120):
        raw = bytearray(good)
        where = int(rng.integers(0, len(raw)))
        raw[where] ^= 1 << int(rng.integers(0, 8))
        out.append((f"bit flipped at {where}", bytes(raw)))

    def meta_edit(label: str, **changes: str | None) -> None:
        edited = {**header, "__metadata__": {k: v for k, v in {**meta, **changes}.items()
                                             if v is not None}}
        out.append((label, join(edited, data)))

    frames = json.loads(meta["frames"])
    frame_edits = {
        "phase missing": lambda f: f[0].pop("phase"),
        "phase unknown": lambda f: f[0].update(phase="sleep"),
        "text_keep negative": lambda f: f[-1].update(text_keep=-1),
        "text_keep past the text": lambda f: f[-1].update(text_keep=10**6),
        "text_keep a string": lambda f: f[-1].update(text_keep="3"),
        "generation_index bad": lambda f: f[-1].update(generation_index="x"),
        "top_k_text not a list": lambda f: f[0].update(top_k_text="abc"),
        "top_k_text too short": lambda f: f[0].update(top_k_text=f[0]["top_k_text"][:1]),
        "frame not an object": lambda f: f.__setitem__(0, [1, 2]),
        "one frame fewer": lambda f: f.pop(),
    }
    for label, change in frame_edits.items():
        copy = json.loads(meta["frames"])
        change(copy)
        meta_edit(f"frames: {label}", frames=json.dumps(copy))
    for label, changes in {
        "metadata a list": {"metadata": "[1]"}, "metadata not JSON": {"metadata": "{"},
        "frames not a list": {"frames": json.dumps({"a": frames})},
        "frames not JSON": {"frames": "[{"}, "neurons zero": {"neurons": "0"},
        "neurons negative": {"neurons": "-4"}, "neurons text": {"neurons": "many"},
        "neurons other": {"neurons": "310"}, "format other": {"format": "other"},
        "no frames": {"frames": None}, "no neurons": {"neurons": None},
        "version 2": {"format_version": "2.0"}, "version text": {"format_version": "one"},
        "seal removed": {"content_sha256": None}, "seal wrong": {"content_sha256": "0" * 64},
        "prompt edited": {"metadata": meta["metadata"].replace("little", "big")},
    }.items():
        meta_edit(f"header: {label}", **changes)
    edited = {**header, "__metadata__": {**meta, "neurons": 311}}
    out.append(("header: a number where a string belongs", join(edited, data)))
    out.append(("header: not an object", join([1, 2], data)))  # type: ignore[arg-type]
    # Tensors of the wrong shape or dtype, or NaN states with a matching checksum.
    arrays = load_file(str(path))
    states = arrays["states"]
    nan_states = states.copy()
    nan_states[3, 5] = np.nan
    nan_crc = np.array([zlib.crc32(row.tobytes()) for row in nan_states], dtype=np.uint32)
    for label, tensors in {
        "states one neuron short": {"states": states[:, :-1]},
        "states float64": {"states": states.astype(np.float64)},
        "states int16": {"states": states.view(np.int16)},
        "states one frame short": {"states": states[:-1]},
        "states missing": {"states": None},
        "position int32": {"position": arrays["position"].astype(np.int32)},
        "position negative": {"position": arrays["position"] - 100},
        "top_k_ids flat": {"top_k_ids": arrays["top_k_ids"][:, 0].copy()},
        "top_k_probabilities wide": {"top_k_probabilities": np.hstack(
            [arrays["top_k_probabilities"], arrays["top_k_probabilities"][:, :1]])},
        "probability NaN": {"probability": np.full_like(arrays["probability"], np.nan)},
        "probability above 1": {"probability": arrays["probability"] + 1.5},
        "checksums missing": {"state_crc32": None},
        "checksums wrong": {"state_crc32": arrays["state_crc32"] + 1},
        "NaN states with their checksums": {"states": nan_states, "state_crc32": nan_crc},
    }.items():
        for reseal in (False, True):
            target = tmp / "variant.flyrec"
            rewrite(path, target, tensors=tensors, reseal=reseal)
            out.append((f"tensors: {label} ({'resealed' if reseal else 'old seal'})",
                        target.read_bytes()))
    for label, change in frame_edits.items():
        target = edit_frames(path, tmp / "variant.flyrec", change, reseal=True)
        out.append((f"frames: {label} (resealed)", target.read_bytes()))
    if "baseline.frames" in meta:
        out.extend(_comparison_variants(path, meta, arrays, frame_edits, tmp))
    return out


def _comparison_variants(path: Path, meta: dict, arrays: dict, frame_edits: dict,
                         tmp: Path) -> list[tuple[str, bytes]]:
    """Damaged copies of a comparison's untouched run and of its per-frame numbers, each
    resealed (a writer that means it) so that only the checks can tell."""
    out: list[tuple[str, bytes]] = []
    target = tmp / "variant.flyrec"
    for label, change in frame_edits.items():
        edit_frames(path, target, change, reseal=True, key="baseline.frames")
        out.append((f"untouched frames: {label}", target.read_bytes()))
    states = arrays["baseline.states"]
    nan_states = states.copy()
    nan_states[1, 2] = np.nan
    nan_crc = np.array([zlib.crc32(row.tobytes()) for row in nan_states], dtype=np.uint32)
    for label, tensors in {
        "states one neuron short": {"baseline.states": states[:, :-1]},
        "states one frame short": {"baseline.states": states[:-1]},
        "states missing": {"baseline.states": None},
        "checksums missing": {"baseline.state_crc32": None},
        "checksums wrong": {"baseline.state_crc32": arrays["baseline.state_crc32"] + 1},
        "NaN states with their checksums": {"baseline.states": nan_states,
                                            "baseline.state_crc32": nan_crc},
        "probability above 1": {"baseline.probability": arrays["baseline.probability"] + 1.5},
        "position negative": {"baseline.position": arrays["baseline.position"] - 100},
    }.items():
        rewrite(path, target, tensors=tensors, reseal=True)
        out.append((f"untouched tensors: {label}", target.read_bytes()))
    metadata = json.loads(meta["metadata"])

    def compared(label: str, change) -> None:
        edited = json.loads(json.dumps(metadata))
        change(edited)
        rewrite(path, target, reseal=True, meta={"metadata": json.dumps(edited)})
        out.append((f"comparison: {label}", target.read_bytes()))

    compared("removed", lambda m: m.pop("comparison"))
    compared("not an object", lambda m: m.update(comparison=[1]))
    compared("mode unknown", lambda m: m["comparison"].update(mode="sideways"))
    compared("kl one short", lambda m: m["comparison"]["kl"].pop())
    compared("kl negative", lambda m: m["comparison"]["kl"].__setitem__(0, -1.0))
    compared("kl text", lambda m: m["comparison"]["kl"].__setitem__(0, "big"))
    compared("delta not a list", lambda m: m["comparison"].update(mean_abs_delta=3))
    for label, changes in {"untouched metadata a list": {"baseline.metadata": "[1]"},
                           "untouched metadata not JSON": {"baseline.metadata": "{"},
                           "untouched frames removed": {"baseline.frames": None}}.items():
        rewrite(path, target, reseal=True, meta=changes)
        out.append((f"header: {label}", target.read_bytes()))
    return out


@pytest.mark.parametrize("states", ["float16", "float32", "comparison"])
def test_fuzzed_recordings_give_only_one_line(saved, tmp_path, states):
    rng = np.random.default_rng({"float16": 2026, "float32": 7, "comparison": 13}[states])
    variants = _variants(saved[states], rng, tmp_path)
    assert len(variants) > 200
    target = tmp_path / "damaged.flyrec"
    for label, data in variants:
        target.write_bytes(data)
        with pytest.raises(RecordingError) as info:
            Recording.load(target)
        assert "\n" not in str(info.value), label
        # Opened lazily, the damage is still found: on open, or when the frame is read.
        with pytest.raises(RecordingError):
            lazy = Recording.load(target, verify=False)
            for run in (lazy, lazy.baseline):
                if run is not None:
                    run.states()
                    for frame in run:
                        assert frame.text_so_far is not None


def test_fuzzed_recordings_through_the_command_line(saved, tmp_path, capsys):
    pytest.importorskip("vispy")
    rng = np.random.default_rng(11)
    variants = _variants(saved["float16"], rng, tmp_path)
    picks = rng.choice(len(variants), 12, replace=False)
    for i in picks:
        label, data = variants[int(i)]
        (tmp_path / "d.flyrec").write_bytes(data)
        rc = main(["export", "--recording", str(tmp_path / "d.flyrec"), "--out",
                   str(tmp_path / "x.webm")])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("flyviz: error:"), \
            (label, err)


# ------------------------------------------------------------------ lazy and large
LAZY_PROBE = """
import json, resource, sys
import numpy as np, psutil
import flyviz.model.safetensors_io
from flyviz.record.recording import Recording
process = psutil.Process()
before = process.memory_info().rss
rec = Recording.load(sys.argv[1], verify=sys.argv[2] == "verify")
opened = process.memory_info().rss
state = rec.state(len(rec) // 2)
print(json.dumps({"before": before, "opened": opened, "after_read": process.memory_info().rss,
                  "mapped": isinstance(rec._stored, np.memmap), "frames": len(rec),
                  "held": rec.nbytes(), "state_shape": list(state.shape)}))
"""


def test_a_large_recording_opens_lazily(tmp_path):
    """States stay in the file: opening ~100 MB of states adds a few MB of memory.

    (The 2 GB figures are in ``tests/bench_recording.py``.)"""
    pytest.importorskip("psutil")
    from flyviz.record.frame import Frame

    neurons, frames = 49_393, 1_024
    rec = Recording(neurons, {"model_name": "large"})
    rng = np.random.default_rng(0)
    state = rng.uniform(-1, 1, neurons).astype(np.float32)
    for i in range(frames):
        state = np.roll(state, 1)
        rec.append(Frame(i, "generation", 3, "a", 4, "b", 0.5, np.array([4]), np.array([0.5]),
                         ("b",), state, 0.5, "b" * (i + 1), i))
    path = rec.save(tmp_path / "large.flyrec")
    size = path.stat().st_size
    assert size > 100e6
    for mode in ("verify", "lazy"):
        out = subprocess.run([sys.executable, "-c", LAZY_PROBE, str(path), mode],
                             capture_output=True, text=True, check=True)
        probe = json.loads(out.stdout)
        assert probe["mapped"] and probe["frames"] == frames and probe["held"] == 0
        assert probe["state_shape"] == [neurons]
        # Reading the file whole (what flyviz 0.1 did) would add its size, and more.
        assert probe["after_read"] - probe["before"] < 0.2 * size, (mode, probe)
    np.testing.assert_array_equal(Recording.load(path).state(1000),
                                  rec.state(1000))


# ------------------------------------------------------------------------- replay
def test_a_random_seed_is_drawn_and_kept():
    settings = GenerationSettings(temperature=0.8).validate()
    assert isinstance(settings.seed, int) and 0 <= settings.seed < 2**31
    fixed = GenerationSettings(temperature=0.8, seed=5)
    assert fixed.validate() is fixed
    with pytest.raises(InputError, match="seed"):
        GenerationSettings(seed=-1).validate()


def test_a_sampled_run_saved_and_replayed_matches_token_for_token(models, model_a, tmp_path,
                                                                  capsys):
    # Without --seed a run draws one and records it (a replay needs it).
    drawn = tmp_path / "drawn.flyrec"
    rc = main(["generate", str(models / "a"), "--prompt", "the cat", "--temperature", "1.1",
               "--max-new-tokens", "3", "--record", str(drawn), "--json"])
    run = json.loads(capsys.readouterr().out)
    assert rc == 0 and isinstance(run["seed"], int)
    assert Recording.load(drawn).metadata["seed"] == run["seed"]
    rc = main(["replay", str(drawn), "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["matched"]

    # Seed 1: a sampled run that parts from the greedy one on this model (about 1 seed in
    # 300 samples the greedy tokens here; a drawn seed would make the check below flaky).
    path = tmp_path / "sampled.flyrec"
    rc = main(["generate", str(models / "a"), "--prompt", "the cat and the dog", "--temperature",
               "1.1", "--top-p", "0.95", "--max-new-tokens", "25", "--seed", "1",
               "--record", str(path), "--json"])
    run = json.loads(capsys.readouterr().out)
    assert rc == 0 and run["seed"] == 1
    rec = Recording.load(path)
    meta = rec.metadata
    assert meta["seed"] == run["seed"] and meta["temperature"] == 1.1
    identity = meta["model_identity"]
    assert identity["spec"] == str((models / "a").resolve()) and identity["layout"] == "fly-llm-hf"
    assert len(identity["weights_sha256"]) == 64 and set(identity["graph_sha256"]) == {
        "brain.w_offsets", "brain.w_indices", "brain.w_values", "brain.in_index",
        "brain.out_index"}
    assert rec.generated_ids == run["tokens"]
    # Sampling at this temperature differs from greedy, so the seed matters.
    greedy = record_prompt(model_a, "the cat and the dog", GenerationSettings(max_new_tokens=25))
    assert greedy.generated_ids != rec.generated_ids

    rc = main(["replay", str(path), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["matched"] and result["replayed"] == run["tokens"]
    assert result["identity_note"] is None and result["max_probability_error"] < 1e-6

    # On another model the replay names where it parts, and says the model differs.
    rc = main(["replay", str(path), "--model", str(models / "b")])
    captured = capsys.readouterr()
    assert rc == 1 and "MISMATCH at generated token" in captured.out
    assert "note:" in captured.err and "weights differ" in captured.err


def test_replay_refuses_what_cannot_be_replayed(saved, tmp_path, capsys):
    no_seed = rewrite(saved["float16"], tmp_path / "noseed.flyrec", reseal=True, meta={
        "metadata": json.dumps({**Recording.load(saved["float16"]).metadata, "seed": None})})
    rc = main(["replay", str(no_seed)])
    assert rc == 2 and "did not store" in one_line(capsys)
    nameless = rewrite(saved["float16"], tmp_path / "nameless.flyrec", reseal=True,
                       meta={"metadata": json.dumps({"temperature": 0.0})})
    rc = main(["replay", str(nameless)])
    assert rc == 2 and "--model" in one_line(capsys)


def test_identity_tells_models_apart_across_layouts(model_a, models, tmp_path):
    from flyviz.model.formats import load_folder
    from flyviz.model.identity import identity_mismatch, model_identity
    from flyviz.model.writers import write_connectome_dataset, write_recital_web

    identity = model_identity(model_a)
    # The same weights as a web export joined to a dataset: the same identity.
    write_recital_web(model_a, tmp_path / "web")
    write_connectome_dataset(model_a, tmp_path / "dataset")
    same = load_folder(tmp_path / "web", dataset_dir=tmp_path / "dataset")
    assert model_identity(same)["weights_sha256"] == identity["weights_sha256"]
    assert model_identity(same)["graph_sha256"] == identity["graph_sha256"]
    assert identity_mismatch(identity, same) is None
    other = load_folder(models / "c")
    note = identity_mismatch(identity, other, "run.flyrec")
    assert note and "run.flyrec" in note and "different graph" in note
    note = identity_mismatch(identity, load_folder(models / "b"))
    assert note and "weights differ" in note and "same graph" in note
    assert identity_mismatch(None, other) is None  # a recording from before identities


# ------------------------------------------------------------------ the spec's words
SPEC = Path(__file__).resolve().parent.parent / "docs" / "recording-format.md"


def _section(title: str) -> str:
    """The text of the spec's section ``## title`` (up to the next ``## ``)."""
    text = SPEC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_seal_recomputed_from_the_specs_words_matches_a_saved_file(tiny_checkpoint,
                                                                       tmp_path):
    """The Integrity section's recipe, followed word for word with hashlib (not flyviz's
    code), gives the file's content_sha256; its example of how a shape is written is
    exactly the text that recipe hashes."""
    import hashlib
    import re

    integrity = " ".join(_section("Integrity").split())
    example = re.search(r"the shape as .*?\(`(\[[^`]*\])`", integrity)
    assert example is not None, "the Integrity section shows how a shape is written"
    assert "json.dumps(list(shape))" in integrity and "compact" not in integrity
    assert example.group(1) == json.dumps([12, 49393])

    rec = record_prompt(tiny_checkpoint, "a b", GenerationSettings(max_new_tokens=2, seed=1))
    path = rec.save(tmp_path / "run.flyrec")
    header, _ = parts(path)
    metadata = header.pop("__metadata__")
    arrays = load_file(str(path))

    def field(data: bytes) -> bytes:
        return struct.pack("<Q", len(data)) + data

    digest = hashlib.sha256()
    for key in sorted(k for k in metadata if k != "content_sha256"):
        digest.update(field(key.encode()) + field(metadata[key].encode()))
    for name in sorted(arrays):
        array = arrays[name]
        digest.update(field(name.encode()) + field(str(array.dtype).encode())
                      + field(json.dumps(list(array.shape)).encode()))
        if name != "states":
            digest.update(field(array.astype(array.dtype.newbyteorder("<")).tobytes()))
    assert digest.hexdigest() == metadata["content_sha256"]


def test_the_spec_documents_every_key_of_a_spiking_recording(tmp_path):
    """Every metadata key a spiking run writes (``kind``, ``state_units``, ``spiking`` and
    each of its keys, ``after_input`` included) is in the spec's Run metadata, which says
    its states are float32 and its frames' null generation_index is what a bin has."""
    import re

    from test_spiking_kind import write_brain

    brain = write_brain(tmp_path / "brain")
    rec = tmp_path / "run.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--duration", "25ms",
                 "--input-until", "15ms", "--record", str(rec)]) == 0
    recording = Recording.load(rec)
    meta = recording.metadata
    assert recording.states_dtype == np.float32
    assert all(f.generation_index is None and f.phase == "generation" for f in recording)
    documented = set(re.findall(r"^\| ([^|]*) \|", _section("Run metadata"), re.M))
    names = {name for cell in documented for name in re.findall(r"`([^`]+)`", cell)}
    keys = set(meta) | set(meta["spiking"])
    assert "after_input" in keys and "run_ticks" in keys
    assert keys <= names, f"undocumented: {sorted(keys - names)}"
    text = " ".join(SPEC.read_text(encoding="utf-8").split())
    assert "A spiking run's states (its rates in Hz" in text and "always float32" in text
    assert "`null` for prompt frames and for frames that predict no token" in text


@pytest.mark.parametrize("which", ["float16", "float32", "v1.0", "comparison"])
def test_bytes_not_covered_by_a_tensor_are_damage(saved, tmp_path, capsys, which):
    """A safetensors file is its header and its tensors, every byte covered: a recording
    with bytes appended (a copy that went on, a file written into twice) or between its
    tensors opened and replayed as if intact."""
    path = saved[which]
    raw = path.read_bytes()
    for extra in (b"\0", b"garbage", bytes(4096)):
        appended = tmp_path / "appended.flyrec"
        appended.write_bytes(raw + extra)
        with pytest.raises(RecordingError, match=f"it holds {len(extra):,} bytes after its "
                                                 "last tensor"):
            Recording.load(appended)
    assert main(["replay", str(appended)]) == 2
    err = one_line(capsys)
    assert "appended.flyrec is damaged (it holds 4,096 bytes after its last tensor)" in err
    # Eight bytes slipped in after the first tensor, the others' offsets moved past them.
    header, data = parts(path)
    entries = sorted((k for k in header if k != "__metadata__"),
                     key=lambda k: header[k]["data_offsets"][0])
    first_end = header[entries[0]]["data_offsets"][1]
    for name in entries[1:]:
        header[name]["data_offsets"] = [o + 8 for o in header[name]["data_offsets"]]
    holed = tmp_path / "holed.flyrec"
    holed.write_bytes(join(header, data[:first_end] + bytes(8) + data[first_end:]))
    with pytest.raises(RecordingError, match="it holds 8 bytes between its tensors"):
        Recording.load(holed)
