"""ngxson/fly-llm-hf: ``config.json`` plus one ``model.safetensors`` with the graph inside.

``fly-formats.md`` section 1. Tensor dtypes are read from the safetensors
header (the release is F32 with I32 CSR indices and I64 in/out indices; BF16
copies are widened to float32). The repository also ships
``modeling_fly.py`` for ``trust_remote_code``: flyviz never imports or runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from flyviz.model.checkpoint import Checkpoint, validate_checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import (READOUT_TENSORS, find_tokenizer, read_json,
                                         read_readout, real_number, whole_number)
from flyviz.model.safetensors_io import SafetensorsFile

_TENSORS = {"brain.wte.weight": "wte", "brain.in_proj": "in_proj", "brain.gain": "gain",
            "brain.rec_gain": "rec_gain", "brain.bias": "bias", "ln.weight": "ln_weight",
            "ln.bias": "ln_bias", "brain.w_offsets": "w_offsets", "brain.w_indices": "w_indices",
            "brain.w_values": "w_values", "brain.in_index": "in_index",
            "brain.out_index": "out_index"}
_REQUIRED_CONFIG = ("n_neurons", "delay_k", "d_embed", "vocab_size")


def _int(config: dict[str, Any], key: str, default: int | None = None) -> int:
    return whole_number(config.get(key, default), f"config.json: {key}")


def _float(config: dict[str, Any], key: str, default: float) -> float:
    return real_number(config.get(key, default), f"config.json: {key}")


def refuse_model_without_its_config(model_dir: Path, config: dict[str, Any] | None) -> None:
    """Say so when ``model_dir/model.safetensors`` holds FlyGPT's tensors (or, with no
    ``config.json`` at all, ngxson/fly-llm-hf's) but its ``config.json`` is missing
    (``config=None``) or lacks (or misspells) ``model_type``, which is what tells the
    layouts apart; return when the tensors are neither.

    Raises
    ------
    CheckpointError
        One line: what is wrong with config.json, whose tensors the folder holds, and
        where to download config.json again.
    """
    from flyviz.model.formats.flygpt import HUB_REPO, MODEL_TYPE, TENSORS

    path = model_dir / "model.safetensors"
    if not path.is_file():
        return
    try:
        st = SafetensorsFile(path)
    except CheckpointError:
        return  # the file's own problem is reported once the layout is known
    if config is None:
        what = "is missing"
    else:
        have = config.get("model_type")
        what = "lacks model_type" if have is None else f"has model_type {have!r:.40}"
    if all(tensor in st for tensor in TENSORS):
        raise CheckpointError(f"{model_dir / 'config.json'} {what}, but model.safetensors holds "
                              f"FlyGPT's tensors: a FlyGPT config says \"model_type\": "
                              f"\"{MODEL_TYPE}\"; download config.json again ({HUB_REPO})")
    # The graph buffers among them (brain.w_offsets ...) are ngxson's alone: fly-wordbrain's
    # weights files hold parameters only.
    if config is None and all(tensor in st for tensor in _TENSORS):
        raise CheckpointError(f"{model_dir / 'config.json'} {what}, but model.safetensors holds "
                              "ngxson/fly-llm-hf's tensors (the graph inside): its config.json "
                              "gives the sizes and constants; download config.json again "
                              "(ngxson/fly-llm-hf)")


def load_fly_llm_hf(model_dir: str | Path, *, tokenizer_path: str | Path | None = None,
                    name: str | None = None, dataset_dir: str | Path | None = None) -> Checkpoint:
    """Load an ngxson/fly-llm-hf folder.

    Parameters
    ----------
    model_dir
        Folder with ``config.json`` and ``model.safetensors`` (``*.py`` files
        there are ignored).
    tokenizer_path
        ``tokenizer.json``; default: the one in ``model_dir``.
    name
        Display name; default: the folder name.
    dataset_dir
        Optional fly-connectome dataset whose ``neurons/`` anatomy (soma
        positions, labels) to attach; only ``manifest.json`` and ``neurons/``
        are read, the checkpoint's own graph is used.

    Returns
    -------
    Checkpoint
        Validated, layout ``"fly-llm-hf"``; F32 tensors are memory maps.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model folder not found: {model_dir}")
    config = read_json(model_dir / "config.json", "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{model_dir / 'config.json'} is not a JSON object")
    missing = [k for k in _REQUIRED_CONFIG if k not in config]
    if missing:
        refuse_model_without_its_config(model_dir, config)
        raise CheckpointError(f"config.json lacks {', '.join(missing)}; this is not a Fly LLM "
                              "config, or it is damaged")
    st = SafetensorsFile(model_dir / "model.safetensors")
    arrays: dict[str, Any] = {attr: st.get(tensor) for tensor, attr in _TENSORS.items()}
    readout, rank = read_readout(st, "model.safetensors")
    arrays.update(readout)

    neurons = _int(config, "n_neurons")
    delay_k = _int(config, "delay_k")
    if delay_k <= 0:
        raise CheckpointError(f"config.json: delay_k is {delay_k}, must be positive")
    n_in_declared = _int(config, "n_in", arrays["in_index"].shape[0])
    # Slot width is n_in // delay_k: the release declares 14,069 and drives 14,064.
    cfg = ModelConfig(
        neurons=neurons, delay_k=delay_k, neurons_per_slot=n_in_declared // delay_k,
        d_embed=_int(config, "d_embed"), vocabulary=_int(config, "vocab_size"),
        readout_rank=rank, leak=_float(config, "leak", 0.9),
        layer_norm_eps=_float(config, "layer_norm_eps", 1e-5),
        pad_token_id=_int(config, "pad_token_id", 0), bos_token_id=_int(config, "bos_token_id", 1),
        eos_token_id=_int(config, "eos_token_id", 2))
    n_edges = _int(config, "n_edges") if config.get("n_edges") is not None else None
    if n_edges is not None and n_edges != int(arrays["w_values"].shape[0]):
        raise CheckpointError(f"config.json declares {n_edges:,} edges but model.safetensors "
                              f"holds {int(arrays['w_values'].shape[0]):,}; the files do not "
                              "belong together")
    anatomy = None
    metadata: dict[str, Any] = {"n_in_declared": n_in_declared,
                                "dtypes": {t: st.dtype(t) for t in st.keys()}}
    if dataset_dir is not None:
        from flyviz.model.formats.dataset import load_dataset_anatomy

        from flyviz.model.formats.malecns import is_malecns_dataset, load_malecns

        if is_malecns_dataset(dataset_dir):
            # The whole MaleCNS labels the Fly LLM's neurons through its central-brain subset
            # (fly-family-2026.md §2.5: five superclasses, in body-id order); no positions.
            anatomy = load_malecns(dataset_dir).central_brain_anatomy()
            metadata["body_ids"] = (f"labels, body ids and populations of the "
                                    f"{anatomy.positions.shape[0]:,} central-brain neurons of "
                                    "fly-connectome-malecns-166k, in its body-id order; no "
                                    "soma positions, so the graph is laid out")
        else:
            anatomy = load_dataset_anatomy(dataset_dir)
        if anatomy is not None and anatomy.positions.shape[0] != neurons:
            raise CheckpointError(f"the dataset {dataset_dir} describes "
                                  f"{anatomy.positions.shape[0]:,} neurons, the checkpoint "
                                  f"{neurons:,}; they do not belong together")
        metadata["dataset"] = str(dataset_dir)
    tok = Path(tokenizer_path) if tokenizer_path is not None else find_tokenizer(model_dir)
    ckpt = Checkpoint(config=cfg, name=name or model_dir.name, layout="fly-llm-hf",
                      tokenizer_path=tok, anatomy=anatomy, metadata=metadata, source=model_dir,
                      tensor_names={attr: f"model.safetensors: {tensor}" for tensor, attr in
                                    (*_TENSORS.items(),
                                     *((t, a) for a, t in READOUT_TENSORS.items()))},
                      **arrays)
    return validate_checkpoint(ckpt)
