"""Writers and loaders for every layout: round trips, detection, integrity checks."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys

import ml_dtypes
import numpy as np
import pytest

from flyviz.model.checkpoint import validate_checkpoint
from flyviz.model.engine import Engine
from flyviz.model.errors import CheckpointError
from flyviz.model.formats import (detect_layout, find_dataset, load_connectome_dataset,
                                  load_fly_llm_hf, load_folder, load_recital_web, load_wordbrain)
from flyviz.model.safetensors_io import SafetensorsFile
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import (frozen_buffer_digests, write_connectome_dataset,
                                  write_fly_llm_hf, write_recital_web, write_wordbrain)
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.record.run import GenerationSettings, iter_frames

PARAMS = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias")


def _write_all(ckpt, root):
    write_fly_llm_hf(ckpt, root / "hf")
    write_connectome_dataset(ckpt, root / "dataset")
    write_wordbrain(ckpt, root / "wordbrain", tokenizer_path=ckpt.tokenizer_path)
    write_recital_web(ckpt, root / "web")
    return root


def _assert_same_model(a, b):
    assert a.config == b.config
    for name in PARAMS + ("head", "head_a", "head_b", "w_values"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)
    for name in ("w_offsets", "w_indices", "in_index", "out_index"):
        np.testing.assert_array_equal(np.asarray(getattr(a, name), dtype=np.int64),
                                      np.asarray(getattr(b, name), dtype=np.int64), err_msg=name)


def _trace(ckpt, prompt="the little dog saw a big red ball", n=12):
    tokenizer = FlyTokenizer(ckpt.tokenizer_path)
    engine = Engine(ckpt, threads=2)
    try:
        return [(f.predicted_token_id, f.top1_probability, f.mean_abs_state)
                for f in iter_frames(engine, tokenizer, prompt, GenerationSettings(max_new_tokens=n))]
    finally:
        engine.close()


def test_layouts_are_detected_and_round_trip_exactly(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    assert detect_layout(root / "hf") == "fly-llm-hf"
    assert detect_layout(root / "wordbrain") == "wordbrain"
    assert detect_layout(root / "web") == "recital-web"
    assert detect_layout(root / "dataset") == "connectome-dataset"
    assert find_dataset(root / "web") == (root / "dataset").resolve()
    for sub, layout in (("hf", "fly-llm-hf"), ("wordbrain", "wordbrain"), ("web", "recital-web")):
        loaded = load_folder(root / sub)
        assert loaded.layout == layout
        assert loaded.tokenizer_path is not None
        _assert_same_model(loaded, tiny_checkpoint)
    with pytest.raises(CheckpointError, match="connectome dataset"):
        load_folder(root / "dataset")
    # The HF checkpoint has its own graph; the dataset beside it adds the soma positions.
    hf = load_folder(root / "hf")
    np.testing.assert_array_equal(hf.anatomy.valid, tiny_checkpoint.anatomy.valid)
    assert hf.anatomy.superclass == tiny_checkpoint.anatomy.superclass
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no Fly LLM checkpoint"):
        detect_layout(tmp_path / "empty")


def test_the_same_model_in_three_layouts_gives_the_same_trace(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    traces = [_trace(load_folder(root / sub)) for sub in ("hf", "wordbrain", "web")]
    assert len(traces[0]) > 12
    assert traces[0] == traces[1] == traces[2]
    assert traces[0] == _trace(tiny_checkpoint)


def test_hf_layout_matches_the_release_names_and_dtypes(tmp_path, tokenizer_path,
                                                        tokenizer_vocabulary):
    ckpt = make_random_checkpoint(neurons=611, edges=9001, d_embed=24, readout_rank=None,
                                  vocabulary=tokenizer_vocabulary, seed=5,
                                  tokenizer_path=tokenizer_path)
    write_fly_llm_hf(ckpt, tmp_path / "m", n_in_declared=ckpt.config.n_inputs + 5)
    file = SafetensorsFile(tmp_path / "m" / "model.safetensors")
    assert file.metadata == {"format": "pt"}
    assert {k: file.dtype(k) for k in file.keys()} == {
        "brain.wte.weight": "F32", "brain.in_proj": "F32", "brain.gain": "F32",
        "brain.rec_gain": "F32", "brain.bias": "F32", "brain.w_offsets": "I32",
        "brain.w_indices": "I32", "brain.w_values": "F32", "brain.in_index": "I64",
        "brain.out_index": "I64", "ln.weight": "F32", "ln.bias": "F32", "lm_head.weight": "F32"}
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["n_in"] == ckpt.config.n_inputs + 5 and config["n_neurons"] == 611
    loaded = load_fly_llm_hf(tmp_path / "m")
    # n_in // delay_k, as in the release (14,069 declared, 1,758 per slot).
    assert loaded.config.neurons_per_slot == ckpt.config.neurons_per_slot
    assert loaded.metadata["n_in_declared"] == ckpt.config.n_inputs + 5
    assert isinstance(loaded.head, np.memmap)  # large tensors are mapped, not read
    _assert_same_model(loaded, ckpt)


def test_bf16_checkpoint_loads_as_the_rounded_float32_model(tiny_checkpoint, tmp_path):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "bf16", dtype="BF16")
    loaded = load_fly_llm_hf(tmp_path / "bf16")
    file = SafetensorsFile(tmp_path / "bf16" / "model.safetensors")
    assert file.dtype("brain.w_values") == "BF16" and file.dtype("brain.w_indices") == "I32"

    def rounded(a):
        return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)

    expected = dataclasses.replace(
        tiny_checkpoint, **{n: rounded(getattr(tiny_checkpoint, n))
                            for n in PARAMS + ("head_a", "head_b", "w_values")})
    assert not np.array_equal(expected.gain, tiny_checkpoint.gain)  # rounding did happen
    _assert_same_model(loaded, expected)
    assert _trace(loaded) == _trace(expected)


def test_shipped_python_code_is_never_executed(tiny_checkpoint, tmp_path):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "m", with_remote_code=True)
    assert (tmp_path / "m" / "modeling_fly.py").is_file()
    load_folder(tmp_path / "m")
    assert not (tmp_path / "m" / "REMOTE_CODE_WAS_EXECUTED").exists()
    assert "modeling_fly" not in sys.modules and "configuration_fly" not in sys.modules


def test_dataset_anatomy_and_labels(tiny_checkpoint, tmp_path):
    write_connectome_dataset(tiny_checkpoint, tmp_path / "d")
    data = load_connectome_dataset(tmp_path / "d", verify=True)
    anat, ref = data.anatomy, tiny_checkpoint.anatomy
    assert anat.kind == "synthetic"  # from the manifest; real datasets say nothing -> measured
    np.testing.assert_array_equal(anat.valid, ref.valid)
    np.testing.assert_array_equal(anat.positions[anat.valid], np.rint(ref.positions[ref.valid]))
    assert not anat.positions[~anat.valid].any()  # missing somata stay zero, never invented
    assert anat.superclass == ref.superclass and anat.side == ref.side
    assert anat.cell_type == ref.cell_type
    np.testing.assert_array_equal(anat.body_id, ref.body_id)
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert data.frozen_digests == frozen_buffer_digests(tiny_checkpoint)
    assert manifest["interface"]["neurons_per_slot"] == tiny_checkpoint.config.neurons_per_slot
    # Without the anatomy block, a dataset is the measured connectome.
    del manifest["anatomy"]
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    assert load_connectome_dataset(tmp_path / "d").anatomy.kind == "measured"
    # Cell types can come from type_index + type_labels alone.
    (tmp_path / "d" / "neurons" / "cell_type.json").unlink()
    assert load_connectome_dataset(tmp_path / "d").anatomy.cell_type == ref.cell_type


def _edit_dataset_manifest(root, edit):
    path = root / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("field, value", [
    ("neurons", 523.7),          # int() would truncate it to the real 523 and load
    ("neurons", "523"),          # int() would read text the packager never writes
    ("neurons", True),
    ("neurons", None),
    ("neurons", float("nan")),
    ("edges", float("inf")),     # int() raised OverflowError: a traceback
    ("interface.delay_slots", "8"),
    ("weights.negative_edges", 12.5),
    ("soma.positioned", "40"),
    ("files.edges_offsets.bytes", "2096"),
])
def test_dataset_counts_follow_the_one_whole_number_rule(tiny_checkpoint, tmp_path, capsys,
                                                         field, value):
    """A 49k dataset manifest's counts are read as formats.common.whole_number reads every
    count: anything but a whole number is refused in one line naming the field and the
    file, never truncated, read from text or skipped."""
    from cli_checks import cli_run, one_error_line

    root = _write_all(tiny_checkpoint, tmp_path)
    *blocks, key = field.split(".")

    def edit(manifest):
        for block in blocks:
            manifest = manifest[block]
        manifest[key] = value

    _edit_dataset_manifest(root / "dataset", edit)
    manifest_path = str(root / "dataset" / "manifest.json")
    with pytest.raises(CheckpointError, match="expected an integer") as caught:
        load_connectome_dataset(root / "dataset")
    assert f"{manifest_path}: {field} is " in str(caught.value)
    code, _, err = cli_run(capsys, "info", str(root / "web"), "--dataset", str(root / "dataset"))
    one_error_line(code, err, f"{manifest_path}: {field} is ")


def test_dataset_whole_counts_still_load(tiny_checkpoint, tmp_path):
    """Counts written as JSON integers (the release), as floats with no fraction, or handed
    in as numpy integers are read; an absent count is still found from the arrays."""
    from flyviz.model.formats.dataset import DatasetFiles

    write_connectome_dataset(tiny_checkpoint, tmp_path / "d")
    data = load_connectome_dataset(tmp_path / "d", verify=True)
    assert (data.neurons, data.delay_slots) == (523, tiny_checkpoint.config.delay_k)
    _edit_dataset_manifest(tmp_path / "d", lambda m: (m.update(neurons=523.0),
                                                      m["interface"].update(delay_slots=8.0)))
    data = load_connectome_dataset(tmp_path / "d")
    assert data.neurons == 523 and data.delay_slots == 8 and type(data.delay_slots) is int
    files = DatasetFiles.open(tmp_path / "d")
    files.manifest.update(neurons=np.int64(523), edges=np.int32(7001))
    assert (files.neurons, files.edges) == (523, 7001)
    del files.manifest["neurons"], files.manifest["edges"]
    assert (files.neurons, files.edges) == (523, 7001)


def test_quantised_weights_are_within_the_documented_error(tiny_checkpoint, tmp_path):
    write_connectome_dataset(tiny_checkpoint, tmp_path / "d")
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    scale = manifest["weights"]["quantised"]["scale"]
    codes = np.fromfile(tmp_path / "d" / "graph" / "edges_weight.i16", dtype="<i2")
    values = np.asarray(tiny_checkpoint.w_values)
    # Half a step, plus the float32 rounding of w / scale the authors' packager has too.
    assert np.abs(codes * scale - values).max() <= scale / 2 + np.abs(values).max() * 2.0 ** -23


def test_weights_from_another_graph_are_refused(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    other = make_random_checkpoint(neurons=523, edges=7001, d_embed=16, seed=99,
                                   vocabulary=tiny_checkpoint.config.vocabulary, readout_rank=12)
    write_connectome_dataset(other, tmp_path / "other")
    with pytest.raises(CheckpointError, match="trained on a different graph"):
        load_wordbrain(root / "wordbrain", tmp_path / "other")
    with pytest.raises(CheckpointError, match="trained on a different graph"):
        load_recital_web(root / "web", tmp_path / "other")
    # Both digests are reported.
    ckpt = load_recital_web(root / "web", root / "dataset")
    assert ckpt.digests["model/brain.w_values"] == ckpt.digests["dataset/brain.w_values"]


def test_damaged_dataset_files_are_caught(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    weights = root / "dataset" / "graph" / "edges_weight.f32"
    raw = bytearray(weights.read_bytes())
    raw[100] ^= 0xFF
    weights.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_recital_web(root / "web", root / "dataset")
    weights.write_bytes(bytes(raw[:-4]))
    with pytest.raises(CheckpointError, match="truncated"):
        load_recital_web(root / "web", root / "dataset")
    (root / "web" / "head_b.f32").write_bytes(b"\0" * 12)
    with pytest.raises(CheckpointError, match="head_b.f32"):
        load_recital_web(root / "web", root / "dataset", verify=False)


def _dataset_with(ckpt, tmp_path, **changes):
    bad = dataclasses.replace(ckpt, **changes)
    write_recital_web(bad, tmp_path / "web")
    write_connectome_dataset(bad, tmp_path / "dataset")
    return tmp_path


def test_non_monotone_offsets_are_refused(tiny_checkpoint, tmp_path):
    offsets = np.array(tiny_checkpoint.w_offsets).copy()
    offsets[10], offsets[11] = offsets[11] + 3, offsets[10]
    root = _dataset_with(tiny_checkpoint, tmp_path, w_offsets=offsets)
    with pytest.raises(CheckpointError, match="edges_offsets.i32 decreases at row 10"):
        load_folder(root / "web")


def test_duplicate_input_neurons_are_refused(tiny_checkpoint, tmp_path):
    in_index = np.array(tiny_checkpoint.in_index).copy()
    in_index[1] = in_index[0]
    root = _dataset_with(tiny_checkpoint, tmp_path, in_index=in_index)
    with pytest.raises(CheckpointError, match="repeated"):
        load_folder(root / "web")


def test_wrong_shapes_are_refused(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    manifest = json.loads((root / "web" / "manifest.json").read_text())
    manifest["config"]["d_embed"] += 1
    (root / "web" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="wte"):
        load_folder(root / "web")
    # A parameter file of a different model: gain has the wrong length.
    short = make_random_checkpoint(neurons=400, edges=3000, d_embed=16, seed=1,
                                   neurons_per_slot=13, vocabulary=tiny_checkpoint.config.vocabulary, readout_rank=12)
    write_wordbrain(short, tmp_path / "wb2")
    with pytest.raises(CheckpointError, match="different graph"):
        load_wordbrain(tmp_path / "wb2", root / "dataset")
    # Without the manifest nothing binds the weights to a graph: refused before any size.
    (tmp_path / "wb2" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="no manifest.json beside it"):
        load_wordbrain(tmp_path / "wb2", root / "dataset")


def test_out_of_range_presynaptic_index_and_nan_are_refused(tiny_checkpoint, tmp_path):
    indices = np.array(tiny_checkpoint.w_indices).copy()
    indices[-1] = tiny_checkpoint.config.neurons
    write_fly_llm_hf(dataclasses.replace(tiny_checkpoint, w_indices=indices), tmp_path / "a")
    with pytest.raises(CheckpointError, match="w_indices"):
        load_folder(tmp_path / "a")
    gain = np.array(tiny_checkpoint.gain).copy()
    gain[7] = np.nan
    write_fly_llm_hf(dataclasses.replace(tiny_checkpoint, gain=gain), tmp_path / "b")
    with pytest.raises(CheckpointError, match="non-finite"):
        load_folder(tmp_path / "b")


def test_wordbrain_selectors_and_manifest(tiny_checkpoint, tmp_path):
    root = _write_all(tiny_checkpoint, tmp_path)
    write_wordbrain(dataclasses.replace(tiny_checkpoint, gain=tiny_checkpoint.gain * 1.5),
                    root / "wordbrain", "max-accuracy.safetensors")
    manifest = json.loads((root / "wordbrain" / "manifest.json").read_text())
    # As a release manifest: keyed by selector name, each entry naming its file.
    assert {k: v["file"] for k, v in manifest["selectors"].items()} == {
        "minimum_validation_ce": "min-ce.safetensors",
        "maximum_validation_accuracy": "max-accuracy.safetensors"}
    assert manifest["architecture"]["readout_rank"] == 12
    default = load_wordbrain(root / "wordbrain", root / "dataset")
    assert default.metadata["selector"] == "minimum_validation_ce"  # the authors' name
    other = load_wordbrain(root / "wordbrain", root / "dataset", filename="max-accuracy.safetensors")
    np.testing.assert_allclose(other.gain, tiny_checkpoint.gain * 1.5)
    validate_checkpoint(other)


def test_dataset_lookup_next_to_a_model(tiny_checkpoint, tmp_path):
    write_recital_web(tiny_checkpoint, tmp_path / "models" / "web")
    # Two datasets beside the model: the one its manifest names wins.
    other = make_random_checkpoint(neurons=523, edges=7001, d_embed=16, seed=5,
                                   vocabulary=tiny_checkpoint.config.vocabulary, readout_rank=12)
    write_connectome_dataset(other, tmp_path / "models" / "a-dataset")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "models" / "fly-connectome")
    assert find_dataset(tmp_path / "models" / "web") == (tmp_path / "models" / "fly-connectome").resolve()
    assert load_folder(tmp_path / "models" / "web").layout == "recital-web"
    # A dataset inside the model folder comes first.
    write_connectome_dataset(tiny_checkpoint, tmp_path / "models" / "web" / "dataset")
    assert find_dataset(tmp_path / "models" / "web") == (tmp_path / "models" / "web" / "dataset").resolve()


def test_dataset_lookup_reads_each_candidates_manifest_once(tiny_checkpoint, tmp_path,
                                                            monkeypatch):
    """A sibling folder with a dataset's files was asked whether it is malecns-166k and
    then whether its manifest has a files block, reading and parsing manifest.json for
    each: a full dataset's manifest, twice per candidate folder, on every model load. It is
    still found, and a damaged sibling's manifest still does not make it one."""
    import pathlib

    models = tmp_path / "shelf" / "models"
    (models / "model").mkdir(parents=True)      # a model folder that names no dataset
    write_connectome_dataset(tiny_checkpoint, models / "sibling")
    damaged = models / "zz-damaged"
    write_connectome_dataset(tiny_checkpoint, damaged)
    (damaged / "manifest.json").write_text("[" * 100_000, encoding="utf-8")  # nests too deep
    reads: dict[str, int] = {}
    real = pathlib.Path.read_text

    def counted(self, *args, **kwargs):
        if self.name == "manifest.json" and self.parent.name != "model":   # candidates'
            reads[self.parent.name] = reads.get(self.parent.name, 0) + 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "read_text", counted)
    assert find_dataset(models / "model") == (models / "sibling").resolve()
    assert reads == {"sibling": 1}
    reads.clear()
    shutil.rmtree(models / "sibling")
    assert find_dataset(models / "model") is None
    assert reads == {"zz-damaged": 1}


def test_hf_positions_from_a_neurons_only_dataset(tiny_checkpoint, tmp_path):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "hf")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "anatomy")
    shutil.rmtree(tmp_path / "anatomy" / "graph")  # only manifest.json and neurons/ remain
    shutil.rmtree(tmp_path / "anatomy" / "interface")
    loaded = load_folder(tmp_path / "hf")
    assert loaded.anatomy is not None and loaded.anatomy.n_valid == tiny_checkpoint.anatomy.n_valid
    small = make_random_checkpoint(neurons=300, edges=2000, seed=1)
    write_connectome_dataset(small, tmp_path / "wrong")
    with pytest.raises(CheckpointError, match="do not belong together"):
        load_fly_llm_hf(tmp_path / "hf", dataset_dir=tmp_path / "wrong")
    # Found by itself, a dataset that does not fit is passed over, not fatal.
    shutil.rmtree(tmp_path / "anatomy")
    assert load_folder(tmp_path / "hf").anatomy is None


def test_hf_folder_without_config_json_says_config_json_is_missing(tiny_checkpoint, tmp_path,
                                                                   capsys):
    """Not taken for fly-wordbrain weights (which would ask for a connectome dataset): the
    graph buffers in model.safetensors are ngxson's."""
    from cli_checks import cli_run, one_error_line

    folder = write_fly_llm_hf(tiny_checkpoint, tmp_path / "hf")
    (folder / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json is missing.*ngxson/fly-llm-hf"):
        detect_layout(folder)
    for argv in (("info",), ("generate", "--prompt", "the dog", "--max-new-tokens", "2")):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, "config.json is missing", "ngxson/fly-llm-hf's tensors",
                       "download config.json again")
        assert "dataset" not in err
    # fly-wordbrain's parameters-only weights are still a release.
    write_wordbrain(tiny_checkpoint, tmp_path / "wordbrain", tokenizer_path=None)
    assert detect_layout(tmp_path / "wordbrain") == "wordbrain"
