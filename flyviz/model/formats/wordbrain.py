"""fly-wordbrain checkpoints: parameters-only safetensors plus a connectome dataset.

``fly-formats.md`` section 2. The safetensors file holds the trained
parameters (``lm_head.0.weight``/``lm_head.1.weight`` readout factors, or a
dense ``lm_head.weight`` for full-readout arms); ``manifest.json`` records the
frozen-buffer digests of the graph the weights were trained on. Sizes follow
from the tensor shapes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import (check_sha256, find_tokenizer, read_json,
                                          read_readout)
from flyviz.model.formats.dataset import load_connectome_dataset
from flyviz.model.formats.recital import checkpoint_from_parts
from flyviz.model.safetensors_io import SafetensorsFile

#: Selector files in order of preference when none is named.
DEFAULT_SELECTORS = ("min-ce.safetensors", "max-accuracy.safetensors")

_PARAMETERS = {"brain.wte.weight": "wte", "brain.in_proj": "in_proj", "brain.gain": "gain",
               "brain.rec_gain": "rec_gain", "brain.bias": "bias", "ln.weight": "ln_weight",
               "ln.bias": "ln_bias"}


#: Selector names of a release manifest by weights file stem (``package_model_release.py``).
SELECTOR_NAMES = {"min-ce": "minimum_validation_ce",
                  "max-accuracy": "maximum_validation_accuracy"}


def selector_entry(manifest: dict[str, Any], filename: str) -> dict[str, Any]:
    """The ``selectors`` entry of a weights file (``{}`` when the manifest has none).

    Release manifests key ``selectors`` by selector name
    (``minimum_validation_ce``) and name the file in each entry; a list of
    entries, or keys equal to the file stem, are accepted too.
    """
    selectors = manifest.get("selectors")
    stem = Path(filename).stem
    entries: list[tuple[str, Any]] = (list(selectors.items()) if isinstance(selectors, dict)
                                      else [("", e) for e in selectors]
                                      if isinstance(selectors, list) else [])
    for _key, entry in entries:  # the file an entry names decides
        if isinstance(entry, dict) and entry.get("file") \
                and Path(str(entry["file"])).name == filename:
            return entry
    for key, entry in entries:  # else an entry without a file, by name
        if isinstance(entry, dict) and not entry.get("file") \
                and (stem in (key, entry.get("selector")) or key == SELECTOR_NAMES.get(stem)):
            return entry
    return {}


def weights_digest(entry: dict[str, Any]) -> str | None:
    """The SHA-256 a selector entry records for its weights file.

    Release manifests call it ``safetensors_sha256``; flyviz 0.1 wrote ``sha256``.
    """
    value = entry.get("safetensors_sha256") or entry.get("sha256")
    return str(value) if value else None


def pick_selector_file(model_dir: Path, filename: str | None = None) -> Path:
    """The safetensors file to load: ``filename``, else min-CE, else the only one."""
    if filename is not None:
        path = model_dir / filename
        if not path.is_file():
            raise CheckpointError(f"{path} not found; the folder holds "
                                  f"{', '.join(p.name for p in model_dir.glob('*.safetensors')) or 'no safetensors'}")
        return path
    for candidate in DEFAULT_SELECTORS:
        if (model_dir / candidate).is_file():
            return model_dir / candidate
    found = sorted(model_dir.glob("*.safetensors"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(f"{model_dir} holds no .safetensors weights; download "
                              "min-ce.safetensors into it")
    raise CheckpointError(f"{model_dir} holds several weight files ({', '.join(p.name for p in found)}); "
                          "name one")


def load_wordbrain(model_dir: str | Path, dataset_dir: str | Path, *,
                   filename: str | None = None, tokenizer_path: str | Path | None = None,
                   name: str | None = None, verify: bool | None = None) -> Checkpoint:
    """Load a fly-wordbrain checkpoint and join it to its graph dataset.

    Parameters
    ----------
    model_dir
        Folder with ``min-ce.safetensors`` (or another selector) and
        ``manifest.json``.
    dataset_dir
        The fly-connectome dataset folder.
    filename
        Which safetensors file; default ``min-ce.safetensors``.
    tokenizer_path
        ``tokenizer.json``; default: one found in ``model_dir`` or ``dataset_dir``.
    name
        Display name; default: the experiment in the metadata, else the folder.
    verify
        SHA-256 policy for the weights and dataset files (see
        :func:`~flyviz.model.formats.dataset.load_connectome_dataset`).

    Returns
    -------
    Checkpoint
        Validated, layout ``"wordbrain"``.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model folder not found: {model_dir}")
    weights = pick_selector_file(model_dir, filename)
    manifest_path = model_dir / "manifest.json"
    manifest = read_json(manifest_path, "manifest.json") if manifest_path.is_file() else {}
    if not isinstance(manifest, dict):
        manifest = {}
    entry = selector_entry(manifest, weights.name)
    expected_sha256 = weights_digest(entry)
    check_sha256(weights, expected_sha256, verify)
    st = SafetensorsFile(weights)
    params: dict[str, np.ndarray] = {}
    for tensor, attr in _PARAMETERS.items():
        params[attr] = st.get(tensor)
    readout, rank = read_readout(st, weights.name)
    params.update(readout)
    in_proj, wte = params["in_proj"], params["wte"]
    if in_proj.ndim != 3 or wte.ndim != 2:
        raise CheckpointError(f"{weights.name}: brain.in_proj has shape {list(in_proj.shape)} and "
                              f"brain.wte.weight {list(wte.shape)}; expected 3 and 2 dimensions")
    arch: dict[str, Any] = manifest.get("architecture") or {}
    arch = arch if isinstance(arch, dict) else {}
    web_cfg = (manifest.get("web_export") or {}).get("config") if isinstance(
        manifest.get("web_export"), dict) else None
    web_cfg = web_cfg if isinstance(web_cfg, dict) else {}
    assert isinstance(web_cfg, dict)

    def pick(key: str, default: Any) -> Any:
        for source in (web_cfg, arch):
            if source.get(key) is not None:
                return source[key]
        return default

    config = ModelConfig(
        neurons=int(params["gain"].shape[0]), delay_k=int(in_proj.shape[0]),
        neurons_per_slot=int(in_proj.shape[2]), d_embed=int(wte.shape[1]),
        vocabulary=int(wte.shape[0]), readout_rank=rank,
        leak=float(pick("leak", 0.9)), layer_norm_eps=float(pick("layer_norm_eps", 1e-5)),
        pad_token_id=int(pick("pad_token_id", 0)), bos_token_id=int(pick("bos_token_id", 1)),
        eos_token_id=int(pick("eos_token_id", 2)))

    dataset = load_connectome_dataset(dataset_dir, verify=verify)
    if dataset.neurons_per_slot is not None and dataset.neurons_per_slot != config.neurons_per_slot:
        raise CheckpointError(f"the weights drive {config.neurons_per_slot} neurons per slot but the "
                              f"dataset's interface has {dataset.neurons_per_slot}; use the dataset "
                              "these weights were released with")
    frozen = entry.get("frozen_buffers_sha256")
    meta = dict(st.metadata)
    metadata: dict[str, Any] = {k: meta[k] for k in ("experiment", "selector", "updates",
                                                     "source_checkpoint_sha256") if k in meta}
    metadata["weights_file"] = weights.name
    if expected_sha256:
        metadata["weights_sha256_manifest"] = expected_sha256
    tok = Path(tokenizer_path) if tokenizer_path is not None else find_tokenizer(
        model_dir, Path(dataset_dir))
    ckpt = checkpoint_from_parts(
        params, config, dataset, name=name or str(meta.get("experiment") or model_dir.name),
        layout="wordbrain", tokenizer_path=tok, source=model_dir,
        model_digests=frozen if isinstance(frozen, dict) else None, metadata=metadata)
    if expected_sha256:
        ckpt.digests[f"file/{weights.name}"] = expected_sha256
    return ckpt
