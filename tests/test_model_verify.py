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
    from flyviz.model.formats._common import array_digest

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
    assert np.abs(codes * quant["scale"] - values).max() <= quant["max_absolute_error"]
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
class NumpyFly:
    """The forward pass of fly-formats.md 1.5, written out with NumPy alone."""

    def __init__(self, ckpt) -> None:
        cfg = ckpt.config
        self.cfg = cfg
        f64 = np.float64
        self.wte, self.in_proj = np.asarray(ckpt.wte, f64), np.asarray(ckpt.in_proj, f64)
        self.gain, self.rec_gain = np.asarray(ckpt.gain, f64), np.asarray(ckpt.rec_gain, f64)
        self.bias = np.asarray(ckpt.bias, f64)
        self.ln_w, self.ln_b = np.asarray(ckpt.ln_weight, f64), np.asarray(ckpt.ln_bias, f64)
        self.head_a, self.head_b = np.asarray(ckpt.head_a, f64), np.asarray(ckpt.head_b, f64)
        offsets = np.asarray(ckpt.w_offsets, np.int64)
        self.rows = np.repeat(np.arange(cfg.neurons), np.diff(offsets))
        self.cols = np.asarray(ckpt.w_indices, np.int64)
        self.values = np.asarray(ckpt.w_values, f64)
        self.in_index = np.asarray(ckpt.in_index, np.int64)

    def run(self, prompt_ids: list[int], max_new: int) -> dict:
        cfg = self.cfg
        x = np.zeros(cfg.neurons)
        recent = [cfg.pad_token_id] * cfg.delay_k          # oldest first

        def step(token: int) -> np.ndarray:
            nonlocal x, recent
            history = [token] + recent[::-1][:cfg.delay_k - 1]
            drive = np.concatenate([self.wte[history[j]] @ self.in_proj[j]
                                    for j in range(cfg.delay_k)])
            pre = self.rec_gain * np.bincount(self.rows, self.values * x[self.cols],
                                              minlength=cfg.neurons)
            pre[self.in_index] += drive
            x = (1 - cfg.leak) * x + cfg.leak * np.tanh(self.gain * pre + self.bias)
            recent = recent[1:] + [token]
            normed = (x - x.mean()) / np.sqrt(x.var() + cfg.layer_norm_eps) * self.ln_w + self.ln_b
            return self.head_b @ (self.head_a @ normed)

        for token in prompt_ids:
            logits = step(token)
        steps = []
        for _ in range(max_new):
            p = np.exp(logits - logits.max())
            p /= p.sum()
            token = int(np.argmax(logits))
            steps.append({"token": token, "top1_probability": float(p[token]),
                          "mean_abs_state": float(np.abs(x).mean())})
            if token == cfg.eos_token_id or len(steps) == max_new:
                break
            logits = step(token)
        return {"prompt_ids": prompt_ids, "tokens": [s["token"] for s in steps], "steps": steps,
                "final_state_mean_abs": float(np.abs(x).mean())}


def _golden(ckpt, max_new: int = 10) -> list[dict]:
    from flyviz.model.tokenizer import FlyTokenizer

    tokenizer = FlyTokenizer(ckpt.tokenizer_path)
    reference = NumpyFly(ckpt)
    return [{"prompt": prompt, **reference.run([1] + tokenizer.encode(prompt), max_new)}
            for prompt in GOLDEN_PROMPTS]


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
    expected = [_first_failure(t, NumpyFly(changed).run(t["prompt_ids"], len(t["steps"])))
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
