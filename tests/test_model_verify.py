"""Checkpoint verification: the authors' rules, refusals on load, and ``flyviz verify``.

The golden traces here are computed by an independent NumPy step written in
this file (it does not import the engine), as the release's own traces were
computed by a NumPy reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from flyviz.cli import main
from flyviz.model.errors import CheckpointError
from flyviz.model.formats import load_folder
from flyviz.model.formats.dataset import DatasetFiles, check_dataset
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf, write_recital_web,
                                  write_wordbrain)

BUFFER_FILES = {"brain.w_offsets": ("graph/edges_offsets.i32", "<i4", "int32"),
                "brain.w_values": ("graph/edges_weight.f32", "<f4", "float32"),
                "brain.in_index": ("interface/in_index.i32", "<i4", "int64"),
                "brain.out_index": ("interface/out_index.i32", "<i4", "int64")}
GOLDEN_PROMPTS = ("Once upon a time, there was a", "Tom and his dog",
                  "The little bird was afraid of the rain. Its mother")


def digest(array: np.ndarray, dtype: str) -> str:
    """The frozen-buffer convention of fly-formats.md 2.2, written out independently."""
    data = np.asarray(array).astype(np.dtype(dtype).newbyteorder("<"))
    return hashlib.sha256(dtype.encode() + str(tuple(data.shape)).encode()
                          + data.tobytes()).hexdigest()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("flyviz: error:"), err
    return err


@pytest.fixture
def released(tiny_checkpoint, tmp_path):
    """The tiny model as a release: wordbrain weights, web export, and the dataset apart."""
    write_connectome_dataset(tiny_checkpoint, tmp_path / "data" / "connectome")
    write_wordbrain(tiny_checkpoint, tmp_path / "models" / "wordbrain",
                    tokenizer_path=tiny_checkpoint.tokenizer_path)
    write_recital_web(tiny_checkpoint, tmp_path / "models" / "web")
    return tmp_path


# ----------------------------------------------------------------- the manifest rules
def test_the_convention_reproduces_a_released_digest():
    # fly-formats.md 2.2 gives the released out_index digest as 5ac16e2c...0a18: the
    # identity over 49,393 neurons as int64.
    from flyviz.model.formats.common import array_digest

    value = array_digest(np.arange(49_393, dtype=np.int32), "int64")
    assert value.startswith("5ac16e2c") and value.endswith("0a18")
    assert value == digest(np.arange(49_393), "int64")


def test_writers_satisfy_every_manifest_rule(released, tiny_checkpoint):
    root = released / "data" / "connectome"
    manifest = json.loads((root / "manifest.json").read_text())
    # Section 3: files keyed by logical name; arrays {file, dtype, shape, bytes, sha256},
    # JSON files {file, bytes, sha256}; every hash and size right.
    assert set(manifest["files"]) == {
        "edges_offsets", "edges_source", "edges_weight_f32", "edges_weight_i16",
        "input_neurons", "output_neurons", "body_id", "type_index", "soma_position",
        "soma_valid", "type_labels", "cell_type", "superclass", "side"}
    for name, entry in manifest["files"].items():
        path = root / entry["file"]
        keys = {"file", "bytes", "sha256"} | ({"dtype", "shape"} if not entry["file"].endswith(
            ".json") else set())
        assert set(entry) == keys, name
        assert path.stat().st_size == entry["bytes"] and sha256(path) == entry["sha256"], name
        if "shape" in entry:
            ext_dtype = {"i16": "<i2", "i32": "<i4", "i64": "<i8", "u8": "u1", "u16": "<u2",
                         "f32": "<f4"}[entry["file"].rsplit(".", 1)[1]]
            assert np.dtype(ext_dtype).name == entry["dtype"]
            assert np.prod(entry["shape"]) * np.dtype(ext_dtype).itemsize == entry["bytes"]
    n, e = manifest["neurons"], manifest["edges"]
    assert (n, e) == (tiny_checkpoint.config.neurons, tiny_checkpoint.n_edges)
    values = np.fromfile(root / "graph/edges_weight.f32", "<f4")
    assert manifest["weights"]["negative_edges"] == int((values < 0).sum())
    assert manifest["weights"]["positive_edges"] == int((values > 0).sum())
    codes = np.fromfile(root / "graph/edges_weight.i16", "<i2")
    quant = manifest["weights"]["quantised"]
    # The authors' packager's codes and error, to the bit (float32 arithmetic).
    assert (codes.tolist(), quant["scale"], quant["max_absolute_error"]) == tuple(
        x.tolist() if isinstance(x, np.ndarray) else x for x in authors_quantise(values))
    assert manifest["soma"]["positioned"] == int(np.fromfile(root / "neurons/soma_valid.u8",
                                                             "u1").sum())
    # Frozen digests, recomputed from the files as the authors' verifier does.
    frozen = manifest["frozen_buffers_sha256"]
    assert manifest["frozen_buffers_original_dtype"]["brain.w_indices"] == "int32"
    for name, (file, stored, original) in BUFFER_FILES.items():
        assert frozen[name] == digest(np.fromfile(root / file, stored), original), name
    assert frozen["brain.w_indices"] == digest(np.fromfile(root / "graph/edges_source.u16",
                                                           "<u2"), "int32")
    # ... and the 18 checks of check_dataset all pass, none skipped.
    results = check_dataset(DatasetFiles.open(root), hash_files=True, quantised=True)
    assert [r.status for r in results] == ["pass"] * len(results)
    assert len(results) == len(manifest["files"]) + 17  # one hash row per file, then 2-18

    # Section 2.2: selectors keyed by selector name, safetensors_sha256, seven digests.
    wb = released / "models" / "wordbrain"
    entry = json.loads((wb / "manifest.json").read_text())["selectors"]["minimum_validation_ce"]
    assert entry["file"] == "min-ce.safetensors" and "sha256" not in entry
    assert entry["safetensors_sha256"] == sha256(wb / "min-ce.safetensors")
    type_index = np.fromfile(root / "neurons/type_index.i32", "<i4")
    assert entry["frozen_buffers_sha256"] == {
        **frozen, "brain.node_type_index": digest(type_index, "int64"),
        "brain.edge_group_index": digest(np.zeros(0, np.int64), "int64")}
    # Section 4.2: the web manifest's files and graph digests.
    web = json.loads((released / "models" / "web" / "manifest.json").read_text())
    assert web["graph"]["frozen_buffers_sha256"] == frozen
    for f in web["files"].values():
        path = released / "models" / "web" / f["file"]
        assert f["dtype"] == "float32" and f["bytes"] == path.stat().st_size
        assert f["sha256"] == sha256(path) and np.prod(f["shape"]) * 4 == f["bytes"]
    assert {"neurons", "delay_k", "neurons_per_slot", "d_embed", "readout_rank", "vocabulary",
            "pad_token_id", "leak", "layer_norm_eps", "bos_token_id",
            "eos_token_id"} <= set(web["config"])


def test_a_release_style_wordbrain_manifest_is_read(released, tiny_checkpoint):
    """A manifest laid out as package_model_release.py writes it, including a second
    selector whose entry names its file."""
    wb = released / "models" / "wordbrain"
    manifest = json.loads((wb / "manifest.json").read_text())
    entry = manifest["selectors"].pop("minimum_validation_ce")
    manifest["selectors"] = {"maximum_validation_accuracy": {**entry,
                                                             "file": "max-accuracy.safetensors"},
                             "minimum_validation_ce": entry}
    (wb / "manifest.json").write_text(json.dumps(manifest))
    ckpt = load_folder(wb, dataset_dir=released / "data" / "connectome")
    assert ckpt.digests["file/min-ce.safetensors"] == entry["safetensors_sha256"]
    assert ckpt.digests["model/brain.node_type_index"] == ckpt.digests["graph/brain.node_type_index"]


# ------------------------------------------------------------- refused on every load
def test_a_corrupted_wordbrain_weights_file_is_refused(released, capsys):
    weights = released / "models" / "wordbrain" / "min-ce.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-7] ^= 0x01  # a low mantissa bit of the last parameter: still a finite number
    weights.write_bytes(bytes(raw))
    for command in ("info", "generate"):
        extra = ["--prompt", "the cat"] if command == "generate" else []
        rc = main([command, str(released / "models" / "wordbrain"), "--dataset",
                   str(released / "data" / "connectome"), *extra])
        err = one_line_error(capsys)
        assert rc == 2 and "min-ce.safetensors" in err and "SHA-256" in err


def test_a_stale_digest_dataset_is_refused(released, capsys):
    """The graph changed and its per-file hashes were updated; the manifest's frozen
    digests (the model's too) were not."""
    root = released / "data" / "connectome"
    weights = np.fromfile(root / "graph/edges_weight.f32", "<f4")
    weights[5] *= 1.5  # same sign, so the sign counts still agree
    weights.tofile(root / "graph/edges_weight.f32")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["edges_weight_f32"]["sha256"] = sha256(root / "graph/edges_weight.f32")
    (root / "manifest.json").write_text(json.dumps(manifest))
    rc = main(["info", str(released / "models" / "web"), "--dataset", str(root)])
    err = one_line_error(capsys)
    assert rc == 2 and "brain.w_values" in err and "edges_weight.f32" in err
    # With the dataset's own digests updated too, the weights' digests still disagree.
    manifest["frozen_buffers_sha256"]["brain.w_values"] = digest(weights, "float32")
    (root / "manifest.json").write_text(json.dumps(manifest))
    rc = main(["info", str(released / "models" / "wordbrain"), "--dataset", str(root)])
    err = one_line_error(capsys)
    assert rc == 2 and "different graph" in err and "brain.w_values" in err


def test_a_wrong_node_type_index_is_refused(released, capsys):
    root = released / "data" / "connectome"
    types = np.fromfile(root / "neurons/type_index.i32", "<i4")
    first, other = 0, int(np.flatnonzero(types != types[0])[0])
    types[[first, other]] = types[[other, first]]  # still a valid index over the same labels
    types.tofile(root / "neurons/type_index.i32")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"]["type_index"]["sha256"] = sha256(root / "neurons/type_index.i32")
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "neurons/cell_type.json").unlink()  # labels now come from the edited index
    del manifest["files"]["cell_type"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    rc = main(["info", str(released / "models" / "wordbrain"), "--dataset", str(root)])
    err = one_line_error(capsys)
    assert rc == 2 and "brain.node_type_index" in err and "cell-type index" in err
    # The web export records only the five graph buffers: it still loads.
    assert main(["info", str(released / "models" / "web"), "--dataset", str(root)]) == 0


def test_damaged_or_inconsistent_dataset_counts_are_refused(released, capsys):
    root = released / "data" / "connectome"
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["weights"]["negative_edges"] += 1
    (root / "manifest.json").write_text(json.dumps(manifest))
    rc = main(["info", str(released / "models" / "web"), "--dataset", str(root)])
    assert rc == 2 and "negative" in one_line_error(capsys)


def test_without_its_dataset_a_model_says_to_pass_dataset(released, capsys):
    rc = main(["info", str(released / "models" / "web")])
    err = one_line_error(capsys)
    assert rc == 2 and "no connectome dataset was found" in err
    assert main(["info", str(released / "models" / "web"), "--dataset",
                 str(released / "data" / "connectome"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["frozen_buffers_sha256"]["agree"] is True
    assert info["frozen_buffers_sha256"]["recomputed"]["brain.w_values"] == \
        info["frozen_buffers_sha256"]["model"]["brain.w_values"]
    rc = main(["info", str(released / "models" / "web"), "--dataset", str(released / "nope")])
    assert rc == 2 and "dataset folder not found" in one_line_error(capsys)
    rc = main(["generate", "demo", "--prompt", "x", "--dataset", str(released / "data")])
    assert rc == 2 and "demo brain brings its own graph" in one_line_error(capsys)
    rc = main(["bench", "--dataset", str(released / "data" / "connectome")])
    assert rc == 2 and "goes with a model SPEC" in one_line_error(capsys)


def test_every_model_command_takes_dataset():
    from flyviz.cli import build_parser

    parser = build_parser()
    for command in ("info", "generate", "export", "bench", "verify", "replay", "gui"):
        sub = parser._subparsers._group_actions[0].choices[command]  # type: ignore[union-attr]
        option = next(a for a in sub._actions if "--dataset" in a.option_strings)
        assert "Example: --dataset" in option.help, command


# ------------------------------------------------------------------- golden traces
class AuthorsFly:
    """The forward pass of fly-formats.md 1.5 in float32, generating as section 4.3 documents
    the authors' exporter: each step records the state that produced its logits, every token
    but EOS is fed (the last one too), and the final state is the state after that.
    ``feed_last=False`` gives the convention flyviz used to compare against, for contrast."""

    def __init__(self, ckpt) -> None:
        from scipy.sparse import csr_matrix

        cfg = self.cfg = ckpt.config
        f32 = np.float32
        self.wte, self.in_proj = np.asarray(ckpt.wte, f32), np.asarray(ckpt.in_proj, f32)
        self.gain, self.rec_gain = np.asarray(ckpt.gain, f32), np.asarray(ckpt.rec_gain, f32)
        self.bias = np.asarray(ckpt.bias, f32)
        self.ln_w, self.ln_b = np.asarray(ckpt.ln_weight, f32), np.asarray(ckpt.ln_bias, f32)
        self.head = None if ckpt.head is None else np.asarray(ckpt.head, f32)
        self.head_a = None if ckpt.head_a is None else np.asarray(ckpt.head_a, f32)
        self.head_b = None if ckpt.head_b is None else np.asarray(ckpt.head_b, f32)
        self.W = csr_matrix((np.asarray(ckpt.w_values, f32), np.asarray(ckpt.w_indices, np.int32),
                             np.asarray(ckpt.w_offsets, np.int32)),
                            shape=(cfg.neurons, cfg.neurons))
        self.in_index = np.asarray(ckpt.in_index, np.int64)

    def _step(self, x: np.ndarray, recent: list[int], token: int) -> tuple[np.ndarray, np.ndarray]:
        cfg = self.cfg
        history = [token] + recent[::-1][:cfg.delay_k - 1]    # slot j reads the token j back
        drive = np.concatenate([self.wte[history[j]] @ self.in_proj[j]
                                for j in range(cfg.delay_k)])
        pre = self.rec_gain * self.W.dot(x)
        np.add.at(pre, self.in_index, drive)
        x = ((1 - cfg.leak) * x + cfg.leak * np.tanh(self.gain * pre + self.bias)).astype(np.float32)
        mean = x.mean()
        normed = (x - mean) / np.sqrt(((x - mean) ** 2).mean() + cfg.layer_norm_eps)
        normed = normed * self.ln_w + self.ln_b
        logits = normed @ self.head.T if self.head is not None else \
            (normed @ self.head_a.T) @ self.head_b.T
        return x, logits.astype(np.float32)

    def run(self, prompt_ids: list[int], max_new: int, *, feed_last: bool = True) -> dict:
        cfg = self.cfg
        x = np.zeros(cfg.neurons, np.float32)
        recent = [cfg.pad_token_id] * cfg.delay_k            # oldest first
        for token in prompt_ids:
            x, logits = self._step(x, recent, token)
            recent = recent[1:] + [token]
        steps = []
        for _ in range(max_new):
            p = np.exp(logits - logits.max())
            p /= p.sum()
            token = int(np.argmax(logits))
            steps.append({"token": token, "top1_probability": float(p[token]),
                          "mean_abs_state": float(np.abs(x).mean())})
            if token == cfg.eos_token_id or (not feed_last and len(steps) == max_new):
                break
            x, logits = self._step(x, recent, token)
            recent = recent[1:] + [token]
        return {"prompt_ids": prompt_ids, "tokens": [s["token"] for s in steps], "steps": steps,
                "final_state_sha256": hashlib.sha256(x.astype("<f4").tobytes()).hexdigest(),
                "final_state_mean_abs": float(np.abs(x).mean())}


def _golden(ckpt, max_new: int = 10, *, feed_last: bool = True,
            prompts: tuple[str, ...] = GOLDEN_PROMPTS) -> list[dict]:
    from flyviz.model.tokenizer import FlyTokenizer

    tokenizer = FlyTokenizer(ckpt.tokenizer_path)
    reference = AuthorsFly(ckpt)
    return [{"prompt": prompt, **reference.run([ckpt.config.bos_token_id]
                                               + tokenizer.encode(prompt), max_new,
                                               feed_last=feed_last)}
            for prompt in prompts]


def authors_quantise(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The int16 copy as fly-formats.md section 3 documents the authors' packager: scale a
    Python float, codes and recorded error from float32 arrays."""
    values = np.asarray(values, dtype=np.float32)
    scale = float(np.abs(values).max()) / 32767.0
    codes = np.rint(values / scale).astype(np.int16)
    return codes, scale, float(np.abs(codes.astype(np.float32) * scale - values).max())


def authors_files(ckpt, root: Path, max_new: int = 10, **golden) -> tuple[Path, Path]:
    """A dataset and a web export holding what the authors' tools write: flyviz's layout, with
    the int16 copy and its manifest values from :func:`authors_quantise` and the golden traces
    from :class:`AuthorsFly`."""
    dataset = write_connectome_dataset(ckpt, root / "dataset")
    manifest = json.loads((dataset / "manifest.json").read_text())
    codes, scale, error = authors_quantise(np.fromfile(dataset / "graph/edges_weight.f32", "<f4"))
    codes.tofile(dataset / "graph/edges_weight.i16")
    manifest["files"]["edges_weight_i16"]["sha256"] = sha256(dataset / "graph/edges_weight.i16")
    manifest["weights"]["quantised"].update(scale=scale, max_absolute_error=error)
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    web = write_recital_web(ckpt, root / "web",
                            extra_manifest={"golden": _golden(ckpt, max_new, **golden)})
    return dataset, web


def float64_rule_rejects(dataset: Path) -> bool:
    """Whether flyviz's former int16 check (float64, no slack) fails this dataset."""
    manifest = json.loads((dataset / "manifest.json").read_text())
    quant = manifest["weights"]["quantised"]
    codes = np.fromfile(dataset / "graph/edges_weight.i16", "<i2").astype(np.float64)
    weights = np.fromfile(dataset / "graph/edges_weight.f32", "<f4").astype(np.float64)
    return bool(np.abs(codes * quant["scale"] - weights).max() > quant["max_absolute_error"])


def verify_json(web: Path, dataset: Path, capsys) -> tuple[int, dict]:
    rc = main(["verify", str(web), "--dataset", str(dataset), "--json"])
    return rc, json.loads(capsys.readouterr().out)


def _first_failure(trace: dict, replay: dict) -> int | None:
    for i, (a, b) in enumerate(zip(trace["steps"], replay["steps"])):
        if a["token"] != b["token"] or abs(a["top1_probability"] - b["top1_probability"]) > 2e-4 \
                or abs(a["mean_abs_state"] - b["mean_abs_state"]) > 2e-5:
            return i
    return None if len(trace["steps"]) == len(replay["steps"]) else min(
        len(trace["steps"]), len(replay["steps"]))


def test_verify_replays_golden_traces_and_names_the_failing_step(tiny_checkpoint, tmp_path,
                                                                capsys):
    golden = _golden(tiny_checkpoint)
    dataset = tmp_path / "elsewhere" / "connectome"
    write_connectome_dataset(tiny_checkpoint, dataset)
    write_recital_web(tiny_checkpoint, tmp_path / "web", extra_manifest={"golden": golden})
    rc = main(["verify", str(tmp_path / "web"), "--dataset", str(dataset), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0, report["summary"]
    assert report["passed"] and report["counts"]["fail"] == 0
    assert [g["passed"] for g in report["golden"]] == [True] * len(GOLDEN_PROMPTS)
    assert all(g["max_probability_error"] <= 2e-4 for g in report["golden"])
    groups = {c["group"] for c in report["checks"] if c["status"] == "pass"}
    assert groups == {"files", "dataset", "binding", "checkpoint", "golden"}

    # One weight changed (and the export's own file hashes updated): the replay parts
    # from the golden trace, and verify names the prompt and the step.
    trace = golden[1]
    token = trace["tokens"][3]
    head_b = np.array(tiny_checkpoint.head_b)
    head_b[token, int(np.argmax(np.abs(head_b[token])))] *= 1.25
    changed = dataclasses.replace(tiny_checkpoint, head_b=head_b)
    write_recital_web(changed, tmp_path / "web", extra_manifest={"golden": golden})
    expected = [_first_failure(t, AuthorsFly(changed).run(t["prompt_ids"], len(t["steps"])))
                for t in golden]
    assert expected[1] is not None and expected[1] <= 3
    rc = main(["verify", str(tmp_path / "web"), "--dataset", str(dataset)])
    out = capsys.readouterr().out
    assert rc == 1 and "NOT verified" in out
    for prompt, step in zip(GOLDEN_PROMPTS, expected):
        row = next(line for line in out.splitlines()
                   if line.startswith("golden") and prompt[:20] in line)
        if step is None:
            assert " pass " in row, row
        else:
            assert " FAIL " in row and f"prompt {prompt!r}" in row and f"step {step}:" in row, row


SIZES = np.linspace(301, 4096, 10).astype(int)


def _model(neurons: int, seed: int, tokenizer_path: Path, vocabulary: int, **kw):
    return make_random_checkpoint(neurons=int(neurons), edges=int(neurons) * 20, d_embed=8,
                                  readout_rank=8, vocabulary=vocabulary, seed=seed,
                                  tokenizer_path=tokenizer_path, **kw)


def test_verify_passes_what_the_authors_tools_write(tmp_path, tokenizer_path,
                                                    tokenizer_vocabulary, capsys):
    """10 seeds, 301 to 4,096 neurons: the authors' float32 int16 copy and final-state
    convention pass every check, where flyviz's former rules failed them."""
    rejected_before = 0
    for seed, neurons in enumerate(SIZES):
        ckpt = _model(neurons, seed, tokenizer_path, tokenizer_vocabulary)
        dataset, web = authors_files(ckpt, tmp_path / str(seed), max_new=8)
        rejected_before += float64_rule_rejects(dataset)
        rc, report = verify_json(web, dataset, capsys)
        assert rc == 0 and report["passed"], (seed, neurons, report["summary"])
        rows = {c["name"]: c for c in report["checks"]}
        assert rows["int16 weights error"]["status"] == "pass"
        assert rows["int16 weights error"]["authors_check"] == 13
        assert [g["passed"] for g in report["golden"]] == [True] * len(GOLDEN_PROMPTS)
        finals = [c for c in report["checks"] if c["name"].startswith("final state")]
        assert len(finals) == len(GOLDEN_PROMPTS) and all(c["status"] == "pass" for c in finals)
        assert [g["final_state_fed_last"] for g in report["golden"]] == [
            g["expected_tokens"][-1] != ckpt.config.eos_token_id for g in report["golden"]]
    # The fixtures do exercise the convention: the float64 rule without slack rejected most.
    assert rejected_before >= 5, rejected_before


EXTENSION_DTYPES = {"i16": "<i2", "i32": "<i4", "i64": "<i8", "u8": "u1", "u16": "<u2",
                    "f32": "<f4"}


def authors_18_checks(root: Path) -> list[tuple[int, bool]]:
    """The dataset authors' 18 checks as fly-formats.md section 3 documents them, in float32."""
    manifest = json.loads((root / "manifest.json").read_text())
    files = manifest["files"]
    hashes_ok = []

    def load(key: str):
        entry = files[key]
        raw = (root / entry["file"]).read_bytes()
        hashes_ok.append(hashlib.sha256(raw).hexdigest() == entry["sha256"])
        if entry["file"].endswith(".json"):
            return json.loads(raw)
        dtype = EXTENSION_DTYPES[entry["file"].rsplit(".", 1)[1]]
        return np.frombuffer(raw, dtype=dtype).reshape(entry["shape"])

    offsets, source = load("edges_offsets"), load("edges_source")
    weight = load("edges_weight_f32")
    n, e = manifest["neurons"], manifest["edges"]
    checks = [
        (2, offsets.size == n + 1 and source.size == e and weight.size == e),
        (3, bool(np.all(np.diff(offsets) >= 0))),
        (4, int(offsets[0]) == 0 and int(offsets[-1]) == e),
        (5, int(source.min()) >= 0 and int(source.max()) < n),
        (6, bool(np.isfinite(weight).all())),
        (7, int((weight < 0).sum()) == manifest["weights"]["negative_edges"]
         and int((weight > 0).sum()) == manifest["weights"]["positive_edges"]),
    ]
    dtypes = manifest["frozen_buffers_original_dtype"]
    buffers = {"brain.w_offsets": offsets, "brain.w_indices": source, "brain.w_values": weight,
               "brain.in_index": load("input_neurons"), "brain.out_index": load("output_neurons")}
    for number, (name, array) in enumerate(buffers.items(), start=8):
        checks.append((number, manifest["frozen_buffers_sha256"][name]
                       == digest(array, dtypes[name])))
    codes = load("edges_weight_i16")
    quant = manifest["weights"]["quantised"]
    error = float(np.abs(codes.astype(np.float32) * quant["scale"] - weight).max())
    checks.append((13, error <= quant["max_absolute_error"] * 1.000001))
    checks.append((14, bool(np.array_equal(np.sign(codes.astype(np.float32)), np.sign(weight)))))
    labels, type_index = load("type_labels"), load("type_index")
    checks.append((15, int(type_index.min()) == 0 and int(type_index.max()) == len(labels) - 1))
    valid = load("soma_valid")
    checks.append((16, int(valid.sum()) == manifest["soma"]["positioned"]))
    checks.append((17, bool((load("soma_position")[valid == 0] == 0).all())))
    body = load("body_id")
    checks.append((18, len(np.unique(body)) == n))
    for key in set(files) - {"edges_offsets", "edges_source", "edges_weight_f32",
                             "input_neurons", "output_neurons", "edges_weight_i16",
                             "type_labels", "type_index", "soma_valid", "soma_position",
                             "body_id"}:
        load(key)
    return [(1, len(hashes_ok) == len(files) and all(hashes_ok))] + checks


def test_the_authors_18_checks_pass_on_every_dataset_flyviz_writes(tmp_path, tokenizer_path,
                                                                   tokenizer_vocabulary):
    old_way_fails = 0
    for seed, neurons in enumerate(SIZES):
        ckpt = _model(neurons, 100 + seed, tokenizer_path, tokenizer_vocabulary)
        root = write_connectome_dataset(ckpt, tmp_path / str(seed))
        results = authors_18_checks(root)
        assert [number for number, _ok in results] == list(range(1, 19))
        assert all(ok for _number, ok in results), (seed, neurons, results)
        # The same dataset with the int16 copy made as flyviz made it before, in float64:
        # the authors' check 13 rejects it on some seeds, so passing above means something.
        manifest = json.loads((root / "manifest.json").read_text())
        values = np.asarray(ckpt.w_values, np.float32)
        scale = manifest["weights"]["quantised"]["scale"]
        codes = np.rint(values.astype(np.float64) / scale).astype(np.int16)
        codes.tofile(root / "graph/edges_weight.i16")
        manifest["files"]["edges_weight_i16"]["sha256"] = sha256(root / "graph/edges_weight.i16")
        manifest["weights"]["quantised"]["max_absolute_error"] = float(
            np.abs(codes * scale - values.astype(np.float64)).max())
        (root / "manifest.json").write_text(json.dumps(manifest))
        old_way_fails += not dict(authors_18_checks(root))[13]
    assert old_way_fails >= 5, old_way_fails


def test_every_row_says_whether_it_is_one_of_the_authors_18(released, capsys):
    from flyviz.commands.verify import table
    from flyviz.model.verify import verify_checkpoint

    rc, report = verify_json(released / "models" / "web", released / "data" / "connectome",
                             capsys)
    assert rc == 0
    numbers = {c["authors_check"] for c in report["checks"] if c["origin"] == "authors"}
    assert numbers == set(range(1, 19))
    assert all(c["authors_check"] is None for c in report["checks"] if c["origin"] == "flyviz")
    assert {c["group"] for c in report["checks"] if c["origin"] == "flyviz"} >= {
        "files", "binding", "checkpoint", "golden"}
    row = next(c for c in report["checks"] if c["authors_check"] == 13)
    assert row["authors_name"] == "quantised round-trip within manifest"
    ckpt = load_folder(released / "models" / "web", dataset_dir=released / "data" / "connectome")
    lines = table(verify_checkpoint(ckpt)).splitlines()
    assert any(line.startswith("dataset     authors 13 int16 weights error") for line in lines)
    assert any(line.startswith("golden      flyviz") for line in lines)


def test_an_int16_error_over_the_bound_fails_and_one_within_the_slack_passes(
        tmp_path, tokenizer_path, tokenizer_vocabulary, capsys):
    ckpt = _model(1000, 3, tokenizer_path, tokenizer_vocabulary)
    dataset, web = authors_files(ckpt, tmp_path, max_new=4)
    manifest = json.loads((dataset / "manifest.json").read_text())
    error = manifest["weights"]["quantised"]["max_absolute_error"]
    # The file's real error (the authors' float32 arithmetic, recomputed here) 1 % over the
    # recorded bound fails; 0.00005 % over it is within the authors' slack and passes.
    codes = np.fromfile(dataset / "graph/edges_weight.i16", "<i2")
    weights = np.fromfile(dataset / "graph/edges_weight.f32", "<f4")
    real = float(np.abs(codes.astype(np.float32) * manifest["weights"]["quantised"]["scale"]
                        - weights).max())
    assert real == error
    for bound, passes in ((real / 1.01, False), (real / 1.0000005, True)):
        manifest["weights"]["quantised"]["max_absolute_error"] = bound
        (dataset / "manifest.json").write_text(json.dumps(manifest))
        rc, report = verify_json(web, dataset, capsys)
        row = next(c for c in report["checks"] if c["name"] == "int16 weights error")
        assert (rc == 0, row["status"]) == ((True, "pass") if passes else (False, "fail")), row
        assert passes or ("float32" in row["detail"] and "1.000001" in row["detail"])


def test_golden_traces_ending_at_their_length_and_at_eos_both_pass(
        tmp_path, tokenizer_path, tokenizer_vocabulary, capsys):
    ckpt = _model(900, 5, tokenizer_path, tokenizer_vocabulary)
    free = _golden(ckpt, 12)
    # Make a token the model generates mid-trace its end-of-sequence token.
    tokens = free[0]["tokens"]
    elsewhere = {t for trace in free[1:] for t in trace["tokens"]}
    stop = next(i for i in range(1, 12) if tokens[i] not in tokens[:i] + list(elsewhere))
    cfg = dataclasses.replace(ckpt.config, eos_token_id=tokens[stop])
    ckpt = dataclasses.replace(ckpt, config=cfg)
    dataset, web = authors_files(ckpt, tmp_path, max_new=12)
    golden = json.loads((web / "manifest.json").read_text())["golden"]
    lengths = [len(g["tokens"]) for g in golden]
    assert lengths[0] == stop + 1 and golden[0]["tokens"][-1] == cfg.eos_token_id
    assert 12 in lengths  # another trace runs to its length
    rc, report = verify_json(web, dataset, capsys)
    assert rc == 0, report["summary"]
    fed = {len(g["expected_tokens"]): g["final_state_fed_last"] for g in report["golden"]}
    assert fed[stop + 1] is False and fed[12] is True
    # The state before the last step is not the final state of a trace that ran its length.
    before = _golden(ckpt, 12, feed_last=False)
    manifest = json.loads((web / "manifest.json").read_text())
    manifest["golden"] = before
    (web / "manifest.json").write_text(json.dumps(manifest))
    rc, report = verify_json(web, dataset, capsys)
    failed = {g["prompt"] for g in report["golden"] if g["final_state_failure"]}
    assert rc == 1 and failed == {t["prompt"] for t in before if len(t["tokens"]) == 12}


def test_flyviz_writes_golden_traces_into_every_web_export_and_release(released,
                                                                       tiny_checkpoint, capsys):
    """The four prompts, 60 tokens, matching the independent float32 reference; verify
    replays the ones a release carries in web/ (flyviz's own release included)."""
    from flyviz.model.writers import GOLDEN_MAX_NEW_TOKENS, GOLDEN_PROMPTS as WRITTEN

    web = json.loads((released / "models" / "web" / "manifest.json").read_text())
    assert [g["prompt"] for g in web["golden"]] == list(WRITTEN) and len(WRITTEN) == 4
    reference = _golden(tiny_checkpoint, GOLDEN_MAX_NEW_TOKENS, prompts=WRITTEN)
    for ours, theirs in zip(web["golden"], reference):
        assert ours["prompt_ids"] == theirs["prompt_ids"] and ours["tokens"] == theirs["tokens"]
        assert len(ours["steps"]) == GOLDEN_MAX_NEW_TOKENS or ours["tokens"][-1] == 2
        assert max(abs(a["top1_probability"] - b["top1_probability"]) for a, b in
                   zip(ours["steps"], theirs["steps"])) <= 2e-4
        assert abs(ours["final_state_mean_abs"] - theirs["final_state_mean_abs"]) <= 2e-5
    assert web["graph"]["quantised_alternative"]["scale"] == json.loads(
        (released / "data" / "connectome" / "manifest.json").read_text()
    )["weights"]["quantised"]["scale"]
    assert len(web["verification"]["quantisation_drift"]) == 4
    assert web["verification"]["numpy_matches_torch"] is None
    release = json.loads((released / "models" / "wordbrain" / "manifest.json").read_text())
    assert release["web_export"]["golden_prompts"] == list(WRITTEN)
    rc, report = verify_json(released / "models" / "wordbrain",
                             released / "data" / "connectome", capsys)
    assert rc == 0 and len(report["golden"]) == 4, report["summary"]
    assert any(c["name"] == "sha256 web/head_a.f32" and c["status"] == "pass"
               for c in report["checks"])
    assert next(c for c in report["checks"] if c["name"] == "selector name")[
        "detail"] == "minimum_validation_ce (the authors' name)"
    # Without the replays, web/ is still hashed: a damaged file there fails.
    head_a = released / "models" / "wordbrain" / "web" / "head_a.f32"
    raw = bytearray(head_a.read_bytes())
    raw[0] ^= 0x01
    head_a.write_bytes(bytes(raw))
    rc = main(["verify", str(released / "models" / "wordbrain"), "--dataset",
               str(released / "data" / "connectome"), "--no-golden"])
    out = capsys.readouterr().out
    assert rc == 1 and any(line.startswith("files") and "web/head_a.f32" in line
                           and " FAIL " in line for line in out.splitlines())


def test_a_release_manifest_has_every_key_the_authors_write(released):
    wb = released / "models" / "wordbrain"
    manifest = json.loads((wb / "manifest.json").read_text())
    assert {"schema_version", "created_at_utc", "experiment", "architecture",
            "trainable_parameters", "encoder_parameters", "readout_parameters", "graph",
            "selectors", "held_out_scores", "training", "web_export", "license"} <= set(manifest)
    assert manifest["trainable_parameters"] == (manifest["encoder_parameters"]
                                                + manifest["readout_parameters"]
                                                + 5 * manifest["architecture"]["neurons"])
    from flyviz.model.safetensors_io import SafetensorsFile

    assert SafetensorsFile(wb / "min-ce.safetensors").metadata["selector"] == \
        "minimum_validation_ce"
    web = json.loads((wb / "web" / "manifest.json").read_text())
    assert {"schema_version", "created_at_utc", "experiment", "selector", "checkpoint_sha256",
            "updates", "trainable_parameters", "config", "index_checks", "graph", "layout",
            "files", "verification", "golden"} <= set(web)
    dataset = json.loads((released / "data" / "connectome" / "manifest.json").read_text())
    assert {"schema_version", "created_at_utc", "name", "description", "neurons", "edges",
            "csr", "weights", "interface", "soma", "types", "provenance",
            "frozen_buffers_sha256", "frozen_buffers_original_dtype", "frozen_buffers_rebuild",
            "files", "license"} <= set(dataset)
    assert {"signed", "absolute_max", "negative_edges", "positive_edges", "zero_edges",
            "canonical", "quantised"} <= set(dataset["weights"])
    assert {"encoding", "scale", "max_absolute_error", "max_relative_error",
            "sign_preserved"} <= set(dataset["weights"]["quantised"])


def test_an_older_flyviz_selector_name_is_read_with_a_note(released, tiny_checkpoint, capsys):
    from flyviz.model.safetensors_io import save_safetensors
    from flyviz.model.writers import _parameter_tensors

    wb = released / "models" / "wordbrain"
    save_safetensors(wb / "min-ce.safetensors", _parameter_tensors(tiny_checkpoint),
                     {"experiment": "tiny", "selector": "min-ce", "updates": "0"})
    manifest = json.loads((wb / "manifest.json").read_text())
    manifest["selectors"]["minimum_validation_ce"]["safetensors_sha256"] = sha256(
        wb / "min-ce.safetensors")
    (wb / "manifest.json").write_text(json.dumps(manifest))
    rc, report = verify_json(wb, released / "data" / "connectome", capsys)
    row = next(c for c in report["checks"] if c["name"] == "selector name")
    assert rc == 0 and row["status"] == "pass", report["summary"]
    assert "'min-ce'" in row["detail"] and "minimum_validation_ce" in row["detail"]
    assert "not an error" in row["detail"]


def test_verify_hashes_large_files_against_the_hub_cache(tiny_checkpoint, tmp_path, capsys):
    """ngxson's checkpoint has no manifest: a Hugging Face cache stores each LFS file
    under its SHA-256 and each small file under its git blob SHA-1; verify uses both."""
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "plain")
    blobs, snapshot = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        data = (tmp_path / "plain" / name).read_bytes()
        blob = hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else \
            hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
        (blobs / blob).write_bytes(data)
        (snapshot / name).symlink_to(Path("../../blobs") / blob)
    rc = main(["verify", str(snapshot), "--no-golden", "--json"])
    report = json.loads(capsys.readouterr().out)
    rows = {c["name"]: c for c in report["checks"]}
    assert rc == 0 and rows["sha256 model.safetensors"]["status"] == "pass"
    assert "Hugging Face cache" in rows["sha256 model.safetensors"]["detail"]
    assert rows["git sha1 config.json"]["status"] == "pass"
    if Path(tiny_checkpoint.tokenizer_path).stat().st_size == 54_528:  # the real tokenizer
        assert "(release)" in rows["sha256 tokenizer.json"]["detail"]
    # A damaged download still loads (the 284 MB file is not hashed on every load),
    # but verify refuses it.
    blob = (snapshot / "model.safetensors").resolve()
    raw = bytearray(blob.read_bytes())
    raw[-3] ^= 0x01
    blob.write_bytes(bytes(raw))
    rc = main(["verify", str(snapshot), "--no-golden"])
    out = capsys.readouterr().out
    assert rc == 1 and "FAIL" in out and "does not match the Hugging Face cache's" in out


def test_verify_report_serves_the_app(released, tiny_checkpoint):
    """The library call the app will make: structured, with progress and a stop."""
    from flyviz.model.verify import verify_checkpoint

    ckpt = load_folder(released / "models" / "web", dataset_dir=released / "data" / "connectome")
    seen = []
    report = verify_checkpoint(ckpt, progress=lambda label, f: seen.append(f))
    assert report.passed and report.summary().startswith("verified:")
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    polls: list[int] = []
    stopped = verify_checkpoint(ckpt, should_stop=lambda: (polls.append(1), len(polls) > 2)[1])
    assert stopped.cancelled and not stopped.passed and "stopped" in stopped.summary()


def test_check_dataset_skips_what_is_absent_and_fails_what_is_wrong(released):
    root = released / "data" / "connectome"
    shutil.rmtree(root / "neurons")
    (root / "graph" / "edges_weight.i16").unlink()
    results = {r.name: r for r in check_dataset(DatasetFiles.open(root), hash_files=True,
                                                quantised=True)}
    assert results["sha256 graph/edges_weight.i16"].status == "skip"
    assert results["int16 weights error"].status == "skip"
    assert results["body ids unique"].status == "skip"
    assert results["frozen digest brain.w_values"].status == "pass"
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["frozen_buffers_sha256"]["brain.in_index"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(manifest))
    results = {r.name: r for r in check_dataset(DatasetFiles.open(root))}
    assert results["frozen digest brain.in_index"].status == "fail"
    with pytest.raises(CheckpointError, match="brain.in_index"):
        load_folder(released / "models" / "web", dataset_dir=root)


def test_other_models_graph_is_not_this_ones(tiny_checkpoint, tmp_path):
    other = make_random_checkpoint(neurons=523, edges=7001, d_embed=16, seed=99,
                                   vocabulary=tiny_checkpoint.config.vocabulary, readout_rank=12)
    write_connectome_dataset(other, tmp_path / "other")
    write_wordbrain(tiny_checkpoint, tmp_path / "wb")
    with pytest.raises(CheckpointError, match="different graph"):
        load_folder(tmp_path / "wb", dataset_dir=tmp_path / "other")


def test_gui_joins_only_its_own_model_to_dataset(released):
    from flyviz.commands.gui import _loader_with_dataset

    web = released / "models" / "web"
    shutil.copytree(web, released / "lonely" / "web")  # no dataset anywhere near it
    load = _loader_with_dataset(str(web), released / "data" / "connectome")
    assert load(str(web), None).metadata["dataset"] == str(released / "data" / "connectome")
    with pytest.raises(CheckpointError, match="no connectome dataset was found"):
        load(str(released / "lonely" / "web"), None)


def test_verify_checks_that_an_hf_checkpoints_anatomy_belongs_to_its_graph(tiny_checkpoint,
                                                                          tmp_path, capsys):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "hf")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "same")
    rc = main(["verify", str(tmp_path / "hf"), "--dataset", str(tmp_path / "same"),
               "--no-golden", "--json"])
    report = json.loads(capsys.readouterr().out)
    binding = [c for c in report["checks"] if c["group"] == "binding"]
    assert rc == 0 and len(binding) == 5 and all(c["status"] == "pass" for c in binding)
    # Same neurons, another graph: the positions would be drawn for the wrong neurons.
    other = make_random_checkpoint(neurons=523, edges=7001, d_embed=16, seed=99,
                                   vocabulary=tiny_checkpoint.config.vocabulary, readout_rank=12)
    write_connectome_dataset(other, tmp_path / "other")
    rc = main(["verify", str(tmp_path / "hf"), "--dataset", str(tmp_path / "other"),
               "--no-golden"])
    out = capsys.readouterr().out
    assert rc == 1 and "anatomy belongs to another graph" in out
