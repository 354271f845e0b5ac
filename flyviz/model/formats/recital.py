"""The Fly Recital web export: ``.f32`` parameter files and ``manifest.json``.

``fly-formats.md`` section 4. The parameters are raw little-endian float32
arrays named in ``manifest["files"]``; the graph, interface and anatomy come
from a connectome dataset folder (:mod:`flyviz.model.formats.dataset`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint, validate_checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import (check_sha256, compare_frozen_digests, find_tokenizer,
                                          prefixed, read_json, read_raw, real_number,
                                          whole_number)
from flyviz.model.formats.dataset import ConnectomeDataset, load_connectome_dataset

_CONFIG_KEYS = ("neurons", "delay_k", "vocabulary", "d_embed", "neurons_per_slot")


def _config_from_manifest(manifest: dict[str, Any], source: Path) -> ModelConfig:
    cfg = manifest.get("config")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{source}: manifest.json has no 'config' block; this is not a "
                              "Fly Recital web export")
    missing = [k for k in _CONFIG_KEYS if k not in cfg]
    if missing:
        raise CheckpointError(f"{source}: manifest config lacks {', '.join(missing)}; the "
                              "manifest is incomplete, download it again")
    where = f"{source / 'manifest.json'}: config"

    def whole(key: str, default: int | None = None) -> int:
        return whole_number(cfg.get(key, default), f"{where}.{key}")

    def real(key: str, default: float) -> float:
        return real_number(cfg.get(key, default), f"{where}.{key}")

    return ModelConfig(
        neurons=whole("neurons"), delay_k=whole("delay_k"),
        neurons_per_slot=whole("neurons_per_slot"), d_embed=whole("d_embed"),
        vocabulary=whole("vocabulary"),
        readout_rank=None if cfg.get("readout_rank") is None else whole("readout_rank"),
        leak=real("leak", 0.9), layer_norm_eps=real("layer_norm_eps", 1e-5),
        pad_token_id=whole("pad_token_id", 0), bos_token_id=whole("bos_token_id", 1),
        eos_token_id=whole("eos_token_id", 2))


def checkpoint_from_parts(params: dict[str, np.ndarray], config: ModelConfig,
                          dataset: ConnectomeDataset, *, name: str, layout: str,
                          tokenizer_path: Path | None, source: Path,
                          model_digests: dict[str, str] | None,
                          metadata: dict[str, Any],
                          tensor_names: dict[str, str] | None = None) -> Checkpoint:
    """Join parameters with a dataset's graph, refusing weights from another graph.

    The weights' frozen-buffer digests are compared with the digests
    recomputed from the dataset's arrays (which the dataset's own manifest
    digests were checked against on load), so a graph edited after its
    manifest was written is refused too. ``tensor_names`` names the file each parameter
    was read from (:attr:`Checkpoint.tensor_names`), for the refusals.
    """
    compare_frozen_digests(model_digests, dataset.graph_digests)
    if dataset.neurons != config.neurons:
        raise CheckpointError(f"the weights are for {config.neurons:,} neurons but the dataset "
                              f"{dataset.path} has {dataset.neurons:,}; use the dataset these "
                              "weights were released with")
    digests = prefixed("model", model_digests)
    digests.update(prefixed("dataset", dataset.frozen_digests))
    digests.update(prefixed("graph", dataset.graph_digests))
    metadata = dict(metadata)
    metadata["dataset"] = str(dataset.path)
    if dataset.n_in_declared is not None:
        metadata["n_in_declared"] = dataset.n_in_declared
    arrays: dict[str, Any] = dict(params)  # parameter arrays by Checkpoint field
    ckpt = Checkpoint(config=config, w_offsets=dataset.offsets, w_indices=dataset.indices,
                      w_values=dataset.values, in_index=dataset.in_index,
                      out_index=dataset.out_index, name=name, layout=layout,
                      tokenizer_path=tokenizer_path, anatomy=dataset.anatomy, digests=digests,
                      metadata=metadata, source=source, tensor_names=dict(tensor_names or {}),
                      **arrays)
    return validate_checkpoint(ckpt)


def load_recital_web(model_dir: str | Path, dataset_dir: str | Path,
                     tokenizer_path: str | Path | None = None,
                     name: str | None = None, *, verify: bool | None = None) -> Checkpoint:
    """Load a Fly Recital web export with its connectome dataset.

    Parameters
    ----------
    model_dir
        Folder with ``manifest.json`` and the ``.f32`` files.
    dataset_dir
        The connectome dataset folder the export was made against.
    tokenizer_path
        ``tokenizer.json``; default: one found in ``model_dir`` or ``dataset_dir``.
    name
        Display name; default: the manifest's experiment, else the folder name.
    verify
        SHA-256 policy (see :func:`~flyviz.model.formats.dataset.load_connectome_dataset`).

    Returns
    -------
    Checkpoint
        Validated, with layout ``"recital-web"``; large arrays are memory maps.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model folder not found: {model_dir}")
    manifest = read_json(model_dir / "manifest.json", "the web export's manifest.json")
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{model_dir / 'manifest.json'} is not a JSON object")
    config = _config_from_manifest(manifest, model_dir)
    files = manifest.get("files") or {}
    if not isinstance(files, dict):
        raise CheckpointError(f"{model_dir}: manifest 'files' is not an object; download the "
                              "manifest again")
    n, d, k, slot, v = (config.neurons, config.d_embed, config.delay_k, config.neurons_per_slot,
                        config.vocabulary)
    shapes: dict[str, tuple[int, ...]] = {
        "wte": (v, d), "in_proj": (k, d, slot), "gain": (n,), "rec_gain": (n,), "bias": (n,),
        "ln_weight": (n,), "ln_bias": (n,)}
    if config.readout_rank is None:
        shapes["head"] = (v, n)
    else:
        shapes["head_a"] = (config.readout_rank, n)
        shapes["head_b"] = (v, config.readout_rank)
    params: dict[str, np.ndarray] = {}
    names: dict[str, str] = {}
    file_digests: dict[str, str] = {}
    for key, shape in shapes.items():
        entry = files.get(key) or {}
        if not isinstance(entry, dict):
            raise CheckpointError(f"{model_dir / 'manifest.json'}: files.{key} is "
                                  f"{entry!r:.60}, expected an object with its file, shape and "
                                  "digest; the manifest is damaged, download it again")
        path = model_dir / str(entry.get("file", f"{key}.f32"))
        if "shape" in entry and entry["shape"] != list(shape):
            raise CheckpointError(f"{path.name}: manifest shape {entry['shape']!r:.60} does not "
                                  f"match the config's {list(shape)}; the manifest is damaged")
        if str(entry.get("dtype", "float32")) != "float32":
            raise CheckpointError(f"{path.name}: dtype {entry['dtype']} is not float32; flyviz "
                                  "reads the float32 web export")
        params[key] = read_raw(path, "float32", shape)
        names[key] = path.name
        check_sha256(path, entry.get("sha256"), verify)
        if entry.get("sha256"):
            file_digests[path.name] = str(entry["sha256"])

    dataset = load_connectome_dataset(dataset_dir, verify=verify)
    graph = manifest.get("graph") or {}
    model_frozen = graph.get("frozen_buffers_sha256") if isinstance(graph, dict) else None
    if not isinstance(model_frozen, dict) or not set(model_frozen) & set(dataset.graph_digests):
        # The export holds parameters only: without these digests nothing says which graph
        # they were trained on, and any graph of the same size would run them.
        raise CheckpointError(f"{model_dir / 'manifest.json'} records no frozen-buffer digests "
                              "of the graph (graph.frozen_buffers_sha256), so nothing binds "
                              f"these weights to {dataset.path}; download the whole web export "
                              "again, or load it by its hub id")
    tok = Path(tokenizer_path) if tokenizer_path is not None else find_tokenizer(
        model_dir, Path(dataset_dir))
    metadata = {key: manifest[key] for key in ("experiment", "selector", "updates",
                                               "checkpoint_sha256", "trainable_parameters",
                                               "created_at_utc") if key in manifest}
    ckpt = checkpoint_from_parts(
        params, config, dataset, name=name or str(manifest.get("experiment") or model_dir.name),
        layout="recital-web", tokenizer_path=tok, source=model_dir,
        model_digests=model_frozen,
        metadata=metadata, tensor_names=names)
    ckpt.digests.update(prefixed("file", file_digests))
    return ckpt
