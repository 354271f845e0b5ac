"""fly-wordbrain's 2026 releases (fly-family-2026.md §1.3-1.6 and §6).

Fixtures are written by flyviz's own writers in the authors' packager layouts: a release
whose manifest keys its selectors by name, both at one update, with the hard-coded
``architecture`` sizes that disagree with the model; the corpus-10k web export nested in
the rank-64 repository; and the graph-control (shuffled-10k) release, bound to a graph
rewired from the measured one. The small graphs are asymmetric and have neurons with no
inputs. Tokens and logits are checked against a float64 reading of the published forward
pass written out here, from the arrays given to the writers (not from flyviz's reader), and
the rewired graph against a plain-Python transcription of §1.6 written out here too.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import Engine
from flyviz.model.errors import CheckpointError
from flyviz.model.formats import load_folder
from flyviz.model.formats.common import array_digest, sha256_file
from flyviz.model.formats.dataset import load_connectome_dataset
from flyviz.model.graph_control import control_indices, control_receipt
from flyviz.model.resolve import load_model
from flyviz.model.safetensors_io import SafetensorsFile, save_safetensors
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.verify import verify_checkpoint
from flyviz.model.writers import (CONTROL_GRAPH_NOTE, PUBLISHED_ARCHITECTURE,
                                  write_connectome_dataset, write_control_release,
                                  write_recital_web, write_wordbrain)

NEURONS, EDGES = 40, 300
#: Neurons that receive no edge.
EMPTY_ROWS = (5, 19, 33)
SEED = 1729
UPDATES = 16_600
PROMPT_IDS = [1, 417, 261, 368, 14, 370]
MIN_CE, MAX_ACC = "minimum_validation_ce", "maximum_validation_accuracy"


def _measured(tokenizer_path: Path, rank: int, seed: int = 3) -> Checkpoint:
    """A small asymmetric graph with neurons that receive nothing, and its model."""
    ck = make_random_checkpoint(NEURONS, EDGES, d_embed=8, delay_k=8, neurons_per_slot=2,
                                vocabulary=1024, readout_rank=rank, seed=seed,
                                tokenizer_path=tokenizer_path)
    rows = np.repeat(np.arange(NEURONS), np.diff(ck.w_offsets))
    keep = ~np.isin(rows, EMPTY_ROWS)
    offsets = np.zeros(NEURONS + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(np.bincount(rows[keep], minlength=NEURONS))
    return dataclasses.replace(ck, w_offsets=offsets, w_indices=ck.w_indices[keep],
                               w_values=ck.w_values[keep])


def _other_weights(ck: Checkpoint, seed: int) -> Checkpoint:
    """The same graph with other parameters (the other selector's weights)."""
    other = make_random_checkpoint(NEURONS, EDGES, d_embed=8, delay_k=8, neurons_per_slot=2,
                                   vocabulary=1024, readout_rank=ck.config.readout_rank,
                                   seed=seed)
    names = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias", "head_a",
             "head_b")
    return dataclasses.replace(ck, **{name: getattr(other, name) for name in names})


def _reference_float64(ck: Checkpoint, ids: list[int], new_tokens: int = 8,
                       leak: float | np.ndarray = 0.9, eps: float = 1e-5) -> tuple[np.ndarray, list[int]]:
    """fly-formats.md §1.5 and §2.3 in float64: the logits after each prompt token, then
    the greedy continuation's tokens."""
    f = {name: np.asarray(getattr(ck, name), dtype=np.float64) for name in (
        "wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias", "head_a",
        "head_b", "w_values")}
    offsets = np.asarray(ck.w_offsets, dtype=np.int64)
    n = offsets.size - 1
    weights = np.zeros((n, n))
    np.add.at(weights, (np.repeat(np.arange(n), np.diff(offsets)),
                        np.asarray(ck.w_indices, dtype=np.int64)), f["w_values"])
    inputs = np.asarray(ck.in_index, dtype=np.int64)
    x, history = np.zeros(n), [0] * 8  # the PAD row while the history is short

    def step(token: int) -> np.ndarray:
        nonlocal x, history
        window = history + [token]
        drive = np.concatenate([f["wte"][window[8 - j]] @ f["in_proj"][j] for j in range(8)])
        pre = f["rec_gain"] * (weights @ x)
        pre[inputs] += drive
        x = (1 - leak) * x + leak * np.tanh(f["gain"] * pre + f["bias"])
        history = window[1:]
        normed = (x - x.mean()) / np.sqrt(x.var() + eps) * f["ln_weight"] + f["ln_bias"]
        return f["head_b"] @ (f["head_a"] @ normed)

    logits = np.array([step(t) for t in ids])
    tokens, last = [], logits[-1]
    for _ in range(new_tokens):
        tokens.append(int(np.argmax(last)))
        last = step(tokens[-1])
    return logits, tokens


def _engine_run(ck: Checkpoint, ids: list[int], new_tokens: int = 8) -> tuple[np.ndarray, list[int]]:
    engine = Engine(ck, threads=1)
    try:
        logits = np.array([engine.step(t).copy() for t in ids], dtype=np.float64)
        tokens, last = [], logits[-1]
        for _ in range(new_tokens):
            tokens.append(int(np.argmax(last)))
            last = engine.step(tokens[-1])
        return logits, tokens
    finally:
        engine.close()


def _assert_runs_as_published(loaded: Checkpoint, written: Checkpoint) -> None:
    got_logits, got_tokens = _engine_run(loaded, PROMPT_IDS)
    logits, tokens = _reference_float64(written, PROMPT_IDS)
    np.testing.assert_allclose(got_logits, logits, rtol=1e-5, atol=2e-5)
    assert got_tokens == tokens


def _header(path: Path) -> dict:
    size = int.from_bytes(path.read_bytes()[:8], "little")
    return json.loads(path.read_bytes()[8:8 + size])


# ------------------------------------------------------- releases by the authors' packager
@pytest.fixture(params=[32, 128], ids=["rank32", "rank128"])
def release(request, tmp_path, tokenizer_path) -> tuple[Path, Checkpoint, Checkpoint]:
    """A release folder as the packager lays it out (rank 32 as published; rank 128 in the
    same layout, whose weights are not published), and its dataset beside it."""
    rank = request.param
    min_ce = _measured(tokenizer_path, rank)
    max_acc = _other_weights(min_ce, seed=8)
    folder = tmp_path / f"fly-wordbrain-rank{rank}"
    architecture = {**PUBLISHED_ARCHITECTURE, "readout_rank": rank}
    for ck, filename in ((min_ce, "min-ce.safetensors"), (max_acc, "max-accuracy.safetensors")):
        write_wordbrain(ck, folder, filename, experiment=f"H32rank{rank}fixed", updates=UPDATES,
                        web_export=False, architecture=architecture,
                        dataset="fernandofernandes/fly-connectome-49k")
    write_connectome_dataset(min_ce, tmp_path / "fly-connectome-49k")
    shutil.copyfile(tokenizer_path, folder / "tokenizer.json")
    return folder, min_ce, max_acc


def test_release_fixture_is_the_packagers_layout(release) -> None:
    folder, min_ce, _ = release
    rank = int(min_ce.head_a.shape[0])
    manifest = json.loads((folder / "manifest.json").read_text())
    selectors = manifest["selectors"]
    assert set(selectors) == {MIN_CE, MAX_ACC}
    assert selectors[MIN_CE]["file"] == "min-ce.safetensors"
    assert selectors[MIN_CE]["updates"] == selectors[MAX_ACC]["updates"] == UPDATES
    assert selectors[MIN_CE]["safetensors_sha256"] != selectors[MAX_ACC]["safetensors_sha256"]
    # The hard-coded sizes upstream writes whatever the model: they disagree with it.
    assert (manifest["architecture"]["neurons"], manifest["architecture"]["edges"],
            manifest["architecture"]["readout_rank"]) == (49393, 9050172, rank)
    assert manifest["web_export"] is None
    header = _header(folder / "min-ce.safetensors")
    assert header["__metadata__"]["selector"] == MIN_CE
    assert header["__metadata__"]["updates"] == str(UPDATES)
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"F32"}
    assert header["lm_head.0.weight"]["shape"] == [rank, NEURONS]
    assert header["lm_head.1.weight"]["shape"] == [1024, rank]
    assert np.diff(min_ce.w_offsets)[list(EMPTY_ROWS)].tolist() == [0, 0, 0]
    pairs = set(zip(np.repeat(np.arange(NEURONS), np.diff(min_ce.w_offsets)).tolist(),
                    np.asarray(min_ce.w_indices).tolist()))
    assert any((b, a) not in pairs for a, b in pairs)  # asymmetric


def test_release_loads_each_selector_as_published(release) -> None:
    folder, min_ce, max_acc = release
    rank = int(min_ce.head_a.shape[0])
    default = load_model(str(folder))
    assert default.metadata["weights_file"] == "min-ce.safetensors"
    assert (default.config.neurons, default.config.readout_rank) == (NEURONS, rank)  # from shapes
    assert default.n_edges == min_ce.n_edges
    assert default.digests["file/min-ce.safetensors"] == sha256_file(folder / "min-ce.safetensors")
    by_key = load_model(str(folder), selector=MAX_ACC)
    by_file = load_model(str(folder / "max-accuracy.safetensors"))
    for loaded in (by_key, by_file):
        assert loaded.metadata["weights_file"] == "max-accuracy.safetensors"
        assert loaded.metadata["spec"] == str((folder / "max-accuracy.safetensors").resolve())
        np.testing.assert_array_equal(loaded.gain, max_acc.gain)
    _assert_runs_as_published(default, min_ce)
    _assert_runs_as_published(by_key, max_acc)
    with pytest.raises(CheckpointError, match="no selector 'best'.*minimum_validation_ce"):
        load_model(str(folder), selector="best")


def test_selector_option_and_file_spec_from_the_command_line(release, capsys) -> None:
    folder, _, max_acc = release
    code, out, err = cli_run(capsys, "info", str(folder), "--selector", MAX_ACC, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["metadata"]["weights_file"] == "max-accuracy.safetensors"
    assert info["readout_rank"] == int(max_acc.head_a.shape[0])
    code, out, err = cli_run(capsys, "generate", str(folder / "max-accuracy.safetensors"),
                             "--prompt", "Once upon", "--max-new-tokens", "3", "--json")
    assert code == 0, err
    code, _, err = cli_run(capsys, "info", str(folder), "--selector", "best")
    one_error_line(code, err, "no selector 'best'", MIN_CE, MAX_ACC)
    code, _, err = cli_run(capsys, "info", str(folder / "min-ce.safetensors"), "--selector",
                           MAX_ACC)
    one_error_line(code, err, "one weights file already")


def test_info_names_the_selector_and_weights_file_loaded(release, capsys) -> None:
    folder, _, _ = release
    for extra, shown in (((), f"min-ce.safetensors (selector {MIN_CE})"),
                         (("--selector", MAX_ACC), f"max-accuracy.safetensors (selector {MAX_ACC})")):
        code, out, err = cli_run(capsys, "info", str(folder), *extra)
        assert code == 0, err
        rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip()
                for line in out.splitlines() if "  " in line and not line.startswith(" ")}
        assert rows["weights"] == shown


@pytest.mark.parametrize("file", ["manifest.json", "tokenizer.json"])
def test_a_releases_other_files_name_no_weights(release, capsys, file) -> None:
    """Not the folder's default selector loaded without a word: pass the folder or a
    weights file."""
    folder, _, _ = release
    code, _, err = cli_run(capsys, "info", str(folder / file))
    one_error_line(code, err, f"is the release's {file}, not its weights",
                   "pass the release folder", "one of its .safetensors files")


def test_a_missing_min_ce_file_is_not_replaced_by_the_other_selector(release, capsys) -> None:
    """The default is the min-CE selector: without its file, loading stops and says which
    file is missing and which --selector loads the other, rather than running max-accuracy."""
    folder, _, max_acc = release
    (folder / "min-ce.safetensors").unlink()
    for argv in (("info",), ("generate", "--prompt", "Once", "--max-new-tokens", "2")):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, f"{folder / 'min-ce.safetensors'} is missing", MIN_CE,
                       f"--selector {MAX_ACC} to load max-accuracy.safetensors")
    with pytest.raises(CheckpointError, match="min-ce.safetensors is missing"):
        load_model(str(folder))
    # Asked for, the other selector loads.
    loaded = load_model(str(folder), selector=MAX_ACC)
    np.testing.assert_array_equal(loaded.gain, max_acc.gain)


def _rewrite_weights(folder: Path, filename: str, change) -> None:
    """Damage one selector's tensors and record the new file's digest, as a release packaged
    from a bad checkpoint would have it (so that the damage, not the digest, is caught)."""
    path = folder / filename
    st = SafetensorsFile(path)
    tensors = {name: np.array(st.get(name)) for name in st.keys()}
    change(tensors)
    save_safetensors(path, tensors, dict(st.metadata))
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["selectors"].values():
        if entry["file"] == filename:
            entry["safetensors_sha256"] = sha256_file(path)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, expected", [
    (lambda t: t.pop("lm_head.1.weight"), "no readout"),
    (lambda t: t.pop("brain.gain"), "'brain.gain' is missing"),
    (lambda t: t.__setitem__("brain.gain", t["brain.gain"].astype(np.int32)),
     "brain.gain is I32, expected F32 or BF16"),
    (lambda t: t.__setitem__("lm_head.1.weight", t["lm_head.1.weight"][:, :-1]),
     "min-ce.safetensors: lm_head.1.weight: has shape"),
    (lambda t: t["brain.bias"].__setitem__(3, np.nan),
     "min-ce.safetensors: brain.bias: contains a non-finite value"),
    # A tensor left out would run another model than the file's: a multitask arm's readout,
    # half of the bounded arms' multipliers, a leak that is not one per neuron.
    (lambda t: t.update({"unified.trunk.weight": np.zeros((4, NEURONS), np.float32)}),
     "holds tensors that flyviz does not run: unified.trunk.weight (a multitask arm's"),
    (lambda t: t.update({"brain.edge_theta_source": np.zeros(9, np.float32)}),
     "holds brain.edge_theta_source but not brain.edge_theta_destination"),
    (lambda t: t.update({"brain.leak_delta": np.zeros(NEURONS - 1, np.float32)}),
     f"brain.leak_delta has shape [{NEURONS - 1}], expected [{NEURONS}]"),
])
def test_damaged_release_is_refused_in_one_line(release, capsys, change, expected) -> None:
    folder, _, _ = release
    _rewrite_weights(folder, "min-ce.safetensors", change)
    code, _, err = cli_run(capsys, "info", str(folder))
    one_error_line(code, err, expected)


@pytest.mark.parametrize("change, blamed, healthy", [
    # The vocabulary is carried by the embedding and the readout: the manifest says which.
    (lambda t: t.__setitem__("brain.wte.weight", t["brain.wte.weight"][:-1]),
     "brain.wte.weight: has shape [1023, 8] but the model needs [1024, 8]", "lm_head.1.weight"),
    (lambda t: t.__setitem__("lm_head.1.weight", t["lm_head.1.weight"][:-1]),
     "lm_head.1.weight: has shape [1023, ", "brain.wte.weight"),
    # The slot width is the graph's (its digests matched): the weights are damaged.
    (lambda t: t.__setitem__("brain.in_proj", t["brain.in_proj"][:, :, :-1]),
     "brain.in_proj: has shape [8, 8, 1] but the model needs [8, 8, 2]", "dataset"),
    (lambda t: t.__setitem__("brain.in_proj", t["brain.in_proj"][:-1]),
     "brain.in_proj: has shape [7, 8, 2] but the model needs [8, 8, 2]", "dataset"),
    (lambda t: t.__setitem__("ln.weight", t["ln.weight"][:-1]),
     f"ln.weight: has shape [{NEURONS - 1}] but the model needs [{NEURONS}]", "dataset"),
    # The embedding width has no manifest value to side with: both tensors are named.
    (lambda t: t.__setitem__("brain.wte.weight", t["brain.wte.weight"][:, :-1]),
     "the embedding width differs between its tensors (brain.wte.weight 7 but brain.in_proj 8)",
     "use the dataset"),
])
def test_a_damaged_tensor_is_named_not_a_healthy_one(release, capsys, change, blamed,
                                                     healthy) -> None:
    """Each shape is checked against the sizes the graph and the manifest fix, so the
    refusal names the tensor that is wrong, not one a size was read from, nor the dataset
    whose digests matched."""
    folder, _, _ = release
    _rewrite_weights(folder, "min-ce.safetensors", change)
    code, _, err = cli_run(capsys, "info", str(folder))
    one_error_line(code, err, f"min-ce.safetensors: {blamed}")
    assert f"min-ce.safetensors: {healthy}" not in err and "released with" not in err


def test_parameters_are_the_weights_files_tensors(release, capsys) -> None:
    """The count is every tensor of the parameters-only file: the fixed arm's as written,
    and a trainable-leak arm's brain.leak_delta on top."""
    folder, min_ce, _ = release
    manifest = json.loads((folder / "manifest.json").read_text())
    published = manifest["selectors"][MIN_CE]["parameters"]
    assert load_model(str(folder)).parameter_count() == min_ce.parameter_count() == published
    _rewrite_weights(folder, "min-ce.safetensors", lambda t: t.update(
        {"brain.leak_delta": np.zeros(NEURONS, np.float32)}))
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"] == published + NEURONS


def test_the_arms_leak_and_multipliers_run_as_their_formulas(release) -> None:
    """fly-family-2026.md §1.7-1.8: brain.leak_delta gives each neuron the leak
    sigmoid(ln 9 + δ) and brain.edge_theta_source/_destination scale each edge by
    1 + 0.1 tanh(θ_src[type(src)] + θ_dst[type(dst)]); with zeros, the fixed arm's bits."""
    folder, min_ce, _ = release
    from flyviz.model.formats.dataset import DatasetFiles

    types = np.asarray(DatasetFiles.open(folder.parent / "fly-connectome-49k")
                       .array("type_index", NEURONS), dtype=np.int64)
    n_types = int(types.max()) + 1
    # (run before the file is rewritten in place: a loaded model maps its file)
    fixed = {tuple(t): _engine_run(load_model(str(folder)), t)[0]
             for t in (PROMPT_IDS, [1, 7, 7, 9])}
    _rewrite_weights(folder, "min-ce.safetensors", lambda t: t.update({
        "brain.leak_delta": np.zeros(NEURONS, np.float32),
        "brain.edge_theta_source": np.zeros(n_types, np.float32),
        "brain.edge_theta_destination": np.zeros(n_types, np.float32)}))
    zero = load_model(str(folder))
    for tokens in (PROMPT_IDS, [1, 7, 7, 9]):
        assert np.array_equal(_engine_run(zero, tokens)[0], fixed[tuple(tokens)])
    rng = np.random.default_rng(4)
    delta = rng.normal(0, 1.5, NEURONS).astype(np.float32)
    theta_src = rng.normal(0, 2, n_types).astype(np.float32)
    theta_dst = rng.normal(0, 2, n_types).astype(np.float32)
    _rewrite_weights(folder, "min-ce.safetensors", lambda t: t.update({
        "brain.leak_delta": delta, "brain.edge_theta_source": theta_src,
        "brain.edge_theta_destination": theta_dst}))
    arm = load_model(str(folder))
    # The multipliers leave the Fly LLM's step as it is (its analyses apply); the leak
    # per neuron does not.
    assert arm.operator_extensions() == ["a leak per neuron"]
    assert "bounded type-pair multipliers" in arm.metadata["edge_multipliers"]
    # The formulas in float64, written here from the reference.
    leak = 1.0 / (1.0 + np.exp(-(np.log(9.0) + delta.astype(np.float64))))
    offsets = np.asarray(min_ce.w_offsets, dtype=np.int64)
    dst = np.repeat(np.arange(NEURONS), np.diff(offsets))
    src = np.asarray(min_ce.w_indices, dtype=np.int64)
    multiplier = 1.0 + 0.1 * np.tanh(theta_src[types[src]].astype(np.float64)
                                     + theta_dst[types[dst]].astype(np.float64))
    assert 0.9 <= multiplier.min() and multiplier.max() <= 1.1 and multiplier.std() > 0.01
    scaled = dataclasses.replace(min_ce, w_values=np.asarray(min_ce.w_values, np.float64)
                                 * multiplier)
    got_logits, got_tokens = _engine_run(arm, PROMPT_IDS)
    logits, tokens = _reference_float64(scaled, PROMPT_IDS, leak=leak)
    np.testing.assert_allclose(got_logits, logits, rtol=1e-5, atol=2e-5)
    assert got_tokens == tokens
    assert not np.allclose(got_logits, fixed[tuple(PROMPT_IDS)], atol=1e-3)


def test_a_bounded_arm_is_the_fly_llms_step_and_its_analyses_apply(release, capsys) -> None:
    """Multipliers scale the weights and leave the step as it is: info says so, and an
    analysis that follows the Fly LLM's operator only (trace) runs on the arm."""
    from flyviz.model.formats.dataset import DatasetFiles

    folder, _, _ = release
    n_types = int(DatasetFiles.open(folder.parent / "fly-connectome-49k")
                  .array("type_index", NEURONS).max()) + 1
    rng = np.random.default_rng(9)
    _rewrite_weights(folder, "min-ce.safetensors", lambda t: t.update({
        "brain.edge_theta_source": rng.normal(0, 1, n_types).astype(np.float32),
        "brain.edge_theta_destination": rng.normal(0, 1, n_types).astype(np.float32)}))
    code, out, err = cli_run(capsys, "info", str(folder))
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("edge weights"))
    assert f"bounded type-pair multipliers 1 + 0.1 tanh(θ_src + θ_dst) over {n_types:,} " \
        "cell types" in line
    code, out, err = cli_run(capsys, "trace", str(folder), "--prompt", "the cat sat")
    assert code == 0, err


def _drop_manifest(folder: Path) -> None:
    (folder / "manifest.json").unlink()


def _keep_selector(folder: Path, key: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["selectors"] = {key: manifest["selectors"][key]}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _edit_release_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("unbind, expected", [
    (_drop_manifest, "has no manifest.json beside it"),
    (lambda f: _edit_release_manifest(f, lambda m: m.pop("selectors")), "no selectors block"),
    (lambda f: _keep_selector(f, MAX_ACC), "no entry for min-ce.safetensors"),
    (lambda f: _edit_release_manifest(f, lambda m: m["selectors"][MIN_CE].pop(
        "frozen_buffers_sha256")), "records no frozen_buffers_sha256"),
])
def test_weights_that_nothing_binds_to_a_graph_are_refused(release, tmp_path, capsys,
                                                           tokenizer_path, unbind,
                                                           expected) -> None:
    """Parameters-only weights without their selector's frozen digests would run on any
    graph of their size: refused by every command, verify included, on their own dataset
    as on another graph of the same size."""
    folder, _, _ = release
    other = _measured(tokenizer_path, 32, seed=4)
    write_connectome_dataset(other, tmp_path / "other")
    unbind(folder)
    for dataset in (tmp_path / "fly-connectome-49k", tmp_path / "other"):
        for argv in (("info",), ("verify",), ("generate", "--prompt", "Once",
                                               "--max-new-tokens", "2")):
            code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:], "--dataset",
                                   str(dataset))
            one_error_line(code, err, expected, "download the whole release folder")


@pytest.mark.parametrize("value, expected", [
    ("x", "selector minimum_validation_ce is 'x', not an object naming its file"),
    (["min-ce.safetensors"], "selector minimum_validation_ce is ['min-ce.safetensors'], not an"),
    ({"file": "../../../etc/passwd"}, "names the file '../../../etc/passwd', not a file name in "
                                      "the release folder"),
    ({"file": "../min-ce.safetensors"}, "names the file '../min-ce.safetensors', not a file "
                                        "name in the release folder"),
    ({"file": 7}, "names the file 7, not a file name"),
])
def test_a_damaged_selector_entry_is_said_to_be_damaged(release, capsys, value,
                                                        expected) -> None:
    """Not "the selectors have no entry for min-ce.safetensors (they are
    minimum_validation_ce, ...)", which names the very entry it says is not there."""
    folder, _, _ = release

    def damage(manifest: dict) -> None:
        entry = manifest["selectors"][MIN_CE]
        manifest["selectors"][MIN_CE] = {**entry, **value} if isinstance(value, dict) else value

    _edit_release_manifest(folder, damage)
    for argv in (("info",), ("verify",), ("info", "--selector", MIN_CE)):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, expected, "the manifest is damaged")
        assert "no entry" not in err
    # The other selector loads, and verify fails the release's damaged entry.
    code, out, err = cli_run(capsys, "verify", str(folder), "--selector", MAX_ACC,
                             "--no-golden")
    assert code == 1, out + err
    row = next(line for line in out.splitlines() if f"selector {MIN_CE}" in line)
    assert "FAIL" in row and expected in row


@pytest.mark.parametrize("drop", [
    lambda entry: entry.pop("safetensors_sha256"),
    lambda entry: entry.__setitem__("safetensors_sha256", None),
], ids=["missing", "null"])
def test_a_selector_without_its_digest_is_refused(release, capsys, drop) -> None:
    """The packager always records safetensors_sha256: without it the file loaded would
    not be checked against the release. Loading stops; verify fails the other selector."""
    folder, _, _ = release
    _edit_release_manifest(folder, lambda m: drop(m["selectors"][MIN_CE]))
    for argv in (("info",), ("verify",), ("generate", "--prompt", "Once",
                                           "--max-new-tokens", "2")):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, "min-ce.safetensors records no safetensors_sha256",
                       "download it again")
    # The loaded selector has its digest, the other not: verify reports it and fails.
    code, out, err = cli_run(capsys, "verify", str(folder), "--selector", MAX_ACC)
    assert code == 1, err
    row = next(line for line in out.splitlines() if "sha256 min-ce.safetensors" in line)
    assert "FAIL" in row and "records no safetensors_sha256" in row


def test_bf16_weights_are_upcast_exactly(release) -> None:
    import ml_dtypes

    folder, min_ce, _ = release
    _rewrite_weights(folder, "min-ce.safetensors", lambda t: t.update(
        {name: array.astype(ml_dtypes.bfloat16) for name, array in t.items()}))
    loaded = load_model(str(folder))
    rounded = np.asarray(min_ce.head_a).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(loaded.head_a, rounded)
    assert not np.array_equal(loaded.head_a, min_ce.head_a)


def test_verify_checks_every_selector_of_the_release(release) -> None:
    folder, _, _ = release
    report = verify_checkpoint(load_model(str(folder)), golden=False)
    assert report.passed, [c for c in report.checks if c.status == "fail"]
    hashed = {c.name for c in report.checks if c.group == "files" and c.status == "pass"}
    assert {"sha256 min-ce.safetensors", "sha256 max-accuracy.safetensors"} <= hashed
    # The other selector damaged: the release fails, though the loaded weights are sound.
    with open(folder / "max-accuracy.safetensors", "r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x00\x80\x7f")
    report = verify_checkpoint(load_model(str(folder)), golden=False)
    assert [c.name for c in report.checks if c.status == "fail"] == [
        "sha256 max-accuracy.safetensors"]


def test_swapped_selector_files_fail_their_digest(release, capsys) -> None:
    folder, _, _ = release
    (folder / "min-ce.safetensors").rename(folder / "swap")
    (folder / "max-accuracy.safetensors").rename(folder / "min-ce.safetensors")
    (folder / "swap").rename(folder / "max-accuracy.safetensors")
    for extra, other in (((), MAX_ACC), (("--selector", MAX_ACC), MIN_CE)):
        code, _, err = cli_run(capsys, "info", str(folder), *extra)
        one_error_line(code, err, "SHA-256", f"the manifest records for selector {other!r}",
                       "swapped or renamed")
    # A file that is no selector's keeps the plain mismatch.
    with open(folder / "min-ce.safetensors", "r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x00\x80\x3f")
    code, _, err = cli_run(capsys, "info", str(folder))
    one_error_line(code, err, "SHA-256", "does not match the manifest's")


# ------------------------------------------------------------- corpus-10k's web export
def test_corpus_10k_loads_through_its_web_export(tmp_path, tokenizer_path) -> None:
    """The rank-64 repository: the G release at its root, the I (corpus-10k) export in
    ``corpus-10k/web/`` with its golden traces, replayed as parity.mjs does."""
    root_weights = _measured(tokenizer_path, 64)
    corpus_10k = _other_weights(root_weights, seed=21)
    repo = tmp_path / "fly-wordbrain-rank64"
    write_wordbrain(root_weights, repo, web_export=False, updates=UPDATES,
                    architecture={**PUBLISHED_ARCHITECTURE, "readout_rank": 64})
    web = repo / "corpus-10k" / "web"
    write_recital_web(corpus_10k, web, {"experiment": "I32rank64fixed10k", "selector": MIN_CE,
                                        "updates": 16_800}, golden_tokens=6)
    write_connectome_dataset(root_weights, tmp_path / "dataset")
    shutil.copyfile(tokenizer_path, web / "tokenizer.json")
    loaded = load_model(str(web), dataset_dir=tmp_path / "dataset")
    assert loaded.layout == "recital-web" and loaded.config.readout_rank == 64
    assert loaded.metadata["experiment"] == "I32rank64fixed10k"
    _assert_runs_as_published(loaded, corpus_10k)
    report = verify_checkpoint(loaded)
    assert report.passed, [c for c in report.checks if c.status == "fail"]
    assert report.golden and all(g.failure is None for g in report.golden)


# ------------------------------------------------------------------ the graph control
def _transcribed_control(offsets: np.ndarray, measured: np.ndarray,
                         seed: int) -> tuple[np.ndarray, int]:
    """§1.6 step by step with Python lists and sets: one global shuffle, then up to 8
    repair rounds over the bad slots in the sort order of ``dst * n + src``, 64 partners
    each, counting swaps."""
    n = len(offsets) - 1
    dst = [row for row in range(n) for _ in range(int(offsets[row + 1] - offsets[row]))]
    generator = np.random.default_rng(seed)
    shuffled = np.array(measured, dtype=np.int32)
    generator.shuffle(shuffled)
    src = [int(s) for s in shuffled]
    edges, swaps = len(src), 0

    def bad_and_present() -> tuple[list[int], set[int]]:
        present, bad = set(), []
        for e in sorted(range(edges), key=lambda e: dst[e] * n + src[e]):  # a stable sort
            if dst[e] * n + src[e] in present or src[e] == dst[e]:
                bad.append(e)
            else:
                present.add(dst[e] * n + src[e])
        return bad, present

    for _ in range(8):
        bad, present = bad_and_present()
        if not bad:
            break
        for e in bad:
            for _ in range(64):
                o = int(generator.integers(0, edges))
                if o == e or src[o] == dst[e] or src[e] == dst[o]:
                    continue
                new_e, new_o = dst[e] * n + src[o], dst[o] * n + src[e]
                if new_e in present or new_o in present or new_e == new_o:
                    continue
                present.discard(dst[o] * n + src[o])
                src[e], src[o] = src[o], src[e]
                present.update((new_e, new_o))
                swaps += 1
                break
    assert not bad_and_present()[0]
    return np.array(src, dtype=np.int32), swaps


@pytest.mark.parametrize("neurons, edges", [(12, 70), (30, 200), (40, 300)])
def test_control_rebuild_matches_the_transcription(neurons, edges) -> None:
    """Dense small graphs, where the shuffle makes many self-loops and repeated pairs."""
    repaired = []
    for seed in range(12):
        ck = make_random_checkpoint(neurons, edges, d_embed=4, delay_k=2, neurons_per_slot=1,
                                    vocabulary=8, seed=seed + 100 * neurons, with_anatomy=False)
        offsets, indices = np.asarray(ck.w_offsets), np.asarray(ck.w_indices)
        expected, swaps = _transcribed_control(offsets, indices, seed)
        rebuilt = control_indices(offsets, indices, "shuffle", seed)
        np.testing.assert_array_equal(rebuilt.indices, expected)
        assert rebuilt.repaired_slots == swaps
        assert rebuilt.digest == array_digest(expected, "int32")
        repaired.append(swaps)
    assert min(repaired) > 0


def test_a_graph_that_cannot_be_made_simple_is_refused() -> None:
    with pytest.raises(CheckpointError, match="cannot be made simple"):
        control_indices(np.array([0, 1]), np.array([0]), "shuffle", SEED)
    with pytest.raises(CheckpointError, match="mode 'zero'"):
        control_indices(np.array([0, 1]), np.array([0]), "zero", SEED)
    with pytest.raises(CheckpointError, match="seed -5 is not a whole number >= 0"):
        control_indices(np.array([0, 1]), np.array([0]), "shuffle", -5)


@pytest.fixture
def shuffled(tmp_path, tokenizer_path) -> dict:
    """A shuffled-10k release (both selectors) and the measured dataset it derives from."""
    measured = _measured(tokenizer_path, 64)
    control, swaps = _transcribed_control(measured.w_offsets, measured.w_indices, SEED)
    receipt = control_receipt(measured.w_offsets, measured.w_indices, measured.w_values,
                              control, mode="shuffle", seed=SEED, repaired_slots=swaps)
    trained = dataclasses.replace(_other_weights(measured, seed=5), w_indices=control)
    folder = tmp_path / "fly-wordbrain-shuffled-10k"
    for ck, filename in ((trained, "min-ce.safetensors"),
                         (_other_weights(trained, seed=6), "max-accuracy.safetensors")):
        write_control_release(ck, folder, receipt, filename, experiment="K32rank64shuffled10k",
                              updates=16_800,
                              architecture={**PUBLISHED_ARCHITECTURE, "readout_rank": 64})
    write_connectome_dataset(measured, tmp_path / "fly-connectome-49k")
    shutil.copyfile(tokenizer_path, folder / "tokenizer.json")
    return {"folder": folder, "dataset": tmp_path / "fly-connectome-49k", "trained": trained,
            "measured": measured, "control": control, "swaps": swaps, "receipt": receipt}


def test_shuffled_fixture_is_the_control_packagers_layout(shuffled) -> None:
    folder, control = shuffled["folder"], shuffled["control"]
    assert shuffled["swaps"] > 0  # the repair ran
    manifest = json.loads((folder / "manifest.json").read_text())
    block = manifest["graph_control"]
    assert {"WARNING", "mode", "seed", "rebuild_with", "measured_graph_w_indices_sha256",
            "control_graph_w_indices_sha256", "synaptic_weights_unchanged", "preserved",
            "changed"} <= set(block)
    assert block["seed"] == SEED and block["changed"]["repaired_slots"] == shuffled["swaps"]
    assert block["control_graph_w_indices_sha256"] == array_digest(control, "int32")
    assert block["changed"]["self_loops_created"] == block["changed"]["duplicate_edges_created"] == 0
    assert all(block["preserved"].values())
    assert all("selector" not in entry and entry["file"] for entry in manifest["selectors"].values())
    metadata = _header(folder / "min-ce.safetensors")["__metadata__"]
    assert metadata["graph"] == CONTROL_GRAPH_NOTE
    assert metadata["graph_w_indices_sha256"] == block["control_graph_w_indices_sha256"]
    receipt = json.loads((folder / "graph-control.json").read_text())
    assert receipt["control_graph_sha256"]["w_indices"] == block["control_graph_w_indices_sha256"]


def test_shuffled_release_runs_on_its_rebuilt_graph(shuffled) -> None:
    loaded = load_folder(shuffled["folder"], dataset_dir=shuffled["dataset"])
    control = shuffled["control"]
    np.testing.assert_array_equal(np.asarray(loaded.w_indices), control)
    np.testing.assert_array_equal(np.asarray(loaded.w_offsets),
                                  np.asarray(shuffled["measured"].w_offsets))
    graph = loaded.metadata["graph"]
    assert graph["repaired_slots"] == shuffled["swaps"]
    assert graph["w_indices_sha256"] == array_digest(control, "int32")
    offsets = np.asarray(loaded.w_offsets)
    assert any(np.any(np.diff(control[a:b]) < 0) for a, b in zip(offsets[:-1], offsets[1:]))
    _assert_runs_as_published(loaded, shuffled["trained"])
    # The check can fail: the same weights on the measured graph run otherwise.
    on_measured = dataclasses.replace(shuffled["trained"], w_indices=shuffled["measured"].w_indices)
    assert not np.allclose(_engine_run(loaded, PROMPT_IDS)[0],
                           _reference_float64(on_measured, PROMPT_IDS)[0], atol=1e-3)
    report = verify_checkpoint(loaded, golden=False)
    assert report.passed, [c for c in report.checks if c.status == "fail"]
    assert any(c.name == "control graph" and c.status == "pass" for c in report.checks)


def test_unsorted_rows_run_alike_in_the_batch_engine(shuffled) -> None:
    """The rebuilt rows list their sources out of order; the batched kernels take them so."""
    from flyviz.model.batch import BatchEngine

    loaded = load_folder(shuffled["folder"], dataset_dir=shuffled["dataset"])
    prompts = [PROMPT_IDS, PROMPT_IDS[::-1]]
    batch = BatchEngine(loaded, streams=2, threads=1)
    try:
        rows = [batch.step(np.array(pair), logits=True).copy() for pair in zip(*prompts)]
    finally:
        batch.close()
    for stream, ids in enumerate(prompts):
        np.testing.assert_allclose(np.array([r[stream] for r in rows]),
                                   _reference_float64(shuffled["trained"], ids)[0],
                                   rtol=1e-5, atol=2e-5)


def test_info_says_the_graph_is_the_rebuilt_control(shuffled, capsys) -> None:
    code, out, err = cli_run(capsys, "info", str(shuffled["folder"]), "--dataset",
                             str(shuffled["dataset"]), "--selector", MAX_ACC)
    assert code == 0, err
    graph_line = next(line for line in out.splitlines() if line.startswith("graph "))
    assert "NOT the measured connectome" in graph_line and f"seed {SEED}" in graph_line
    assert f"repaired_slots {shuffled['swaps']}" in graph_line
    assert "match the graph's" in out  # the weights' digests against the rebuilt graph


def _edit_manifest(folder: Path, edit) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("edit, expected", [
    # The weights on the measured graph: nothing to rebuild the control graph from.
    (lambda m: m.pop("graph_control"), "randomised control graph"),
    (lambda m: m["graph_control"].pop("seed"), "lacks its seed"),
    # NumPy's generators take no negative seed: one line, not their ValueError.
    (lambda m: m["graph_control"].__setitem__("seed", -1), "seed is -1, not a whole number >= 0"),
    (lambda m: m["graph_control"].__setitem__("control_graph_w_indices_sha256", "0" * 64),
     "the release is inconsistent"),
])
def test_bad_shuffled_release_is_refused_in_one_line(shuffled, capsys, edit, expected) -> None:
    _edit_manifest(shuffled["folder"], edit)
    code, _, err = cli_run(capsys, "info", str(shuffled["folder"]), "--dataset",
                           str(shuffled["dataset"]))
    one_error_line(code, err, expected)


@pytest.mark.parametrize("key, value, expected", [
    # Another seed rebuilds another graph: the digest stops the load.
    ("seed", SEED + 1, f"rebuilt from seed {SEED + 1} has digest"),
    ("mode", "zero", "mode 'zero'"),
])
def test_a_control_graph_flyviz_cannot_rebuild_is_refused(shuffled, capsys, key, value,
                                                          expected) -> None:
    """The manifest and the receipt agree (the release is consistent), but the graph they
    name is not the one the weights were trained on, or not one flyviz rebuilds."""
    _edit_manifest(shuffled["folder"], lambda m: m["graph_control"].__setitem__(key, value))
    _edit_receipt(shuffled["folder"], lambda r: r.__setitem__(key, value))
    code, _, err = cli_run(capsys, "info", str(shuffled["folder"]), "--dataset",
                           str(shuffled["dataset"]))
    one_error_line(code, err, expected)


def test_shuffled_release_without_its_manifest_says_the_manifest_is_missing(shuffled,
                                                                         capsys) -> None:
    (shuffled["folder"] / "manifest.json").unlink()
    code, _, err = cli_run(capsys, "info", str(shuffled["folder"]), "--dataset",
                           str(shuffled["dataset"]))
    one_error_line(code, err, "randomised control graph", "no manifest.json beside it",
                   "fly-wordbrain-shuffled-10k")
    assert "graph_control block" not in err


def test_shuffled_release_on_another_measured_graph_is_refused(shuffled, tmp_path, capsys,
                                                               tokenizer_path) -> None:
    other = _measured(tokenizer_path, 64, seed=4)
    write_connectome_dataset(other, tmp_path / "other")
    code, _, err = cli_run(capsys, "info", str(shuffled["folder"]), "--dataset",
                           str(tmp_path / "other"))
    one_error_line(code, err, "rebuilt from the measured graph")


# ----------------------------------------------------------- the published dataset
#: Where a copy of fernandofernandes/fly-connectome-49k may sit in the reference folder.
REAL_DATASET_PLACES = ("reference/data/fly-connectome-49k", "data/fly-connectome-49k",
                       "fly-connectome-49k")
MEASURED_W_INDICES = "0f17b9563457fbf84404c54227db86b5adcf04a689cdff5e33d32ec5d5e0b771"
CONTROL_W_INDICES = "18972cbea1c8c838fa9b4f368aeed946e4b1e069808968dfa2e0ceb6ad10306f"


@pytest.mark.slow
def test_published_control_graph_is_rebuilt_from_the_real_dataset(shared_dir) -> None:
    """§1.6: seed 1729 on the 49k graph gives 59,116 repaired slots and digest 18972cbe...."""
    found = [shared_dir / p for p in REAL_DATASET_PLACES
             if (shared_dir / p / "graph" / "edges_source.u16").is_file()]
    if not found:
        pytest.skip("the reference folder holds no copy of fly-connectome-49k")
    dataset = load_connectome_dataset(found[0], with_anatomy=False)
    assert dataset.graph_digests["brain.w_indices"] == MEASURED_W_INDICES
    rebuilt = control_indices(dataset.offsets, dataset.indices, "shuffle", SEED)
    assert (rebuilt.repaired_slots, rebuilt.digest) == (59_116, CONTROL_W_INDICES)


def _edit_receipt(folder: Path, edit) -> None:
    receipt = json.loads((folder / "graph-control.json").read_text())
    edit(receipt)
    (folder / "graph-control.json").write_text(json.dumps(receipt))


def _strip_metadata(*keys: str):
    """Drop safetensors metadata keys of min-ce, its new digest recorded in the manifest."""
    def change(folder: Path) -> None:
        path = folder / "min-ce.safetensors"
        st = SafetensorsFile(path)
        tensors = {name: np.array(st.get(name)) for name in st.keys()}
        save_safetensors(path, tensors, {k: v for k, v in st.metadata.items() if k not in keys})
        _edit_manifest(folder, lambda m: m["selectors"][MIN_CE].__setitem__(
            "safetensors_sha256", sha256_file(path)))
    return change


@pytest.mark.parametrize("damage, expected", [
    # What the authors' packager writes into every graph-control release: refused when
    # missing, as the weights would otherwise run on a graph nothing vouches for.
    (lambda f: _edit_manifest(f, lambda m: m["graph_control"].pop(
        "measured_graph_w_indices_sha256")), "records no measured_graph_w_indices_sha256"),
    (lambda f: _edit_manifest(f, lambda m: m["graph_control"]["changed"].__setitem__(
        "repaired_slots", 999)), "graph_control records 999; the release is inconsistent"),
    # Both records agree on another count: the rebuild's own count stops it.
    (lambda f: (_edit_manifest(f, lambda m: m["graph_control"]["changed"].__setitem__(
        "repaired_slots", 999)), _edit_receipt(f, lambda r: r["changed"].__setitem__(
            "repaired_slots", 999))), "has the recorded digest but took"),
    (lambda f: _edit_manifest(f, lambda m: m["graph_control"]["changed"].pop(
        "repaired_slots")), "records no repaired_slots"),
    (lambda f: _edit_manifest(f, lambda m: m["graph_control"]["changed"].__setitem__(
        "repaired_slots", "27")), "records no repaired_slots"),
    (lambda f: (f / "graph-control.json").unlink(), "graph-control.json is missing"),
    (lambda f: (f / "graph-control.json").write_text("[]"), "graph-control.json is not"),
    (lambda f: _edit_receipt(f, lambda r: r["control_graph_sha256"].__setitem__(
        "w_indices", "e" * 64)), "graph-control.json records the control graph eeeeeeeeeeee"),
    (lambda f: _edit_receipt(f, lambda r: r["original_graph_sha256"].__setitem__(
        "w_indices", "e" * 64)), "graph-control.json records the measured graph eeeeeeeeeeee"),
    (lambda f: _edit_receipt(f, lambda r: r["control_graph_sha256"].__setitem__(
        "w_values", "e" * 64)), "graph-control.json records the weights eeeeeeeeeeee"),
    (lambda f: _edit_receipt(f, lambda r: r["frozen_buffers_sha256"].__setitem__(
        "brain.in_index", "e" * 64)), "graph-control.json records brain.in_index eeeeeeeeeeee"),
    (lambda f: _edit_receipt(f, lambda r: r["changed"].__setitem__("repaired_slots", 1)),
     "graph-control.json records 1 repaired slots"),
    (lambda f: _edit_receipt(f, lambda r: r.__setitem__("seed", SEED + 1)),
     f"graph-control.json records seed {SEED + 1}"),
    (_strip_metadata("graph"), "metadata has no graph"),
    (_strip_metadata("graph", "graph_w_indices_sha256"),
     "metadata has no graph or graph_w_indices_sha256"),
])
def test_a_damaged_control_release_is_refused_and_fails_verify(shuffled, capsys, damage,
                                                               expected) -> None:
    """Each damage still loaded and passed verify: loading stops in one line, and verify,
    which cannot load the model, says the same line and exits 2."""
    damage(shuffled["folder"])
    for command in ("info", "verify"):
        code, _, err = cli_run(capsys, command, str(shuffled["folder"]), "--dataset",
                               str(shuffled["dataset"]))
        one_error_line(code, err, expected)


def test_the_control_receipt_may_lack_its_source_digest(shuffled, capsys) -> None:
    """shuffled-10k's receipt has no control_source_sha256 (§1.6): not required."""
    _edit_receipt(shuffled["folder"], lambda r: r.pop("control_source_sha256", None))
    code, out, err = cli_run(capsys, "verify", str(shuffled["folder"]), "--dataset",
                             str(shuffled["dataset"]), "--no-golden")
    assert code == 0, out + err
    row = next(line for line in out.splitlines() if "control graph" in line)
    assert "graph-control.json agrees" in row and f"{shuffled['swaps']} repaired slots" in row


def test_a_control_release_without_its_block_is_known_by_its_receipt(shuffled,
                                                                    capsys) -> None:
    """Without the graph_control block and the weights' metadata, the receipt binding the
    selector's own w_indices digest still says these weights need the rewired graph."""
    folder = shuffled["folder"]
    _strip_metadata("graph", "graph_w_indices_sha256")(folder)
    _edit_manifest(folder, lambda m: m.pop("graph_control"))
    code, _, err = cli_run(capsys, "info", str(folder), "--dataset", str(shuffled["dataset"]))
    one_error_line(code, err, "trained on a randomised control graph",
                   "no graph_control block to rebuild it from")


def test_a_stray_receipt_beside_a_measured_release_is_no_evidence(release, capsys) -> None:
    """A receipt that binds other weights than the selector's says nothing about them."""
    folder, _, _ = release
    (folder / "graph-control.json").write_text(json.dumps(
        {"control_graph_sha256": {"w_indices": "e" * 64}}))
    code, _, err = cli_run(capsys, "info", str(folder))
    assert code == 0, err


def test_a_damaged_other_dataset_beside_a_release_is_not_taken_for_its_dataset(
        release, capsys) -> None:
    """With no fly-connectome-49k beside a release, a sibling that only looks like a dataset
    (a malecns-166k copy whose manifest.json is damaged) is not joined to the weights: info
    says that the release's dataset is missing, in one line with exit status 2, rather than
    blaming the other folder's manifest."""
    folder, _, _ = release
    shutil.rmtree(folder.parent / "fly-connectome-49k")
    other = folder.parent / "malecns-166k"
    (other / "graph").mkdir(parents=True)
    (other / "graph" / "edges_offsets.i32").write_bytes(np.zeros(3, np.int32).tobytes())
    (other / "manifest.json").write_text("{", encoding="utf-8")
    code, _, err = cli_run(capsys, "info", str(folder))
    one_error_line(code, err, "no connectome dataset was found next to it")
    assert "malecns-166k" not in err
