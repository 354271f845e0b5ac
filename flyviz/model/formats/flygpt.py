"""QuixiAI/FlyGPT: ``config.json`` plus one ``model.safetensors`` (``fly-family-2026.md`` §3).

A FlyGPT folder (the hub root, ``scrambled/``, ``init/``, ``full-cns/``) is the Fly LLM's
leaky-tanh operator with other parameters (§3.3)::

    d = 0 ; d[input_nodes] = input_proj(embed[x])            (a Linear with bias)
    W[dst, src] = float32(edge_values) / sqrt(max(1, indeg(dst)))   (indeg over all edges)
    repeat microsteps times:  h = (1 - lam) h + lam tanh(W h + d + b),  lam = sigmoid(raw_leak)
    logits = lm_head(h[output_nodes])                          (a Linear with bias, no LayerNorm)

so it loads as a :class:`~flyviz.model.checkpoint.Checkpoint` of the language kind with one
delay slot, an input bias, a leak per neuron, ``microsteps`` and a biased linear readout.
``graph.edge_index`` is ``[source; destination]`` in training order; the CSR is built
destination-major (edges keep their training order inside a row). bf16 tensors are upcast
exactly; all arithmetic is float32 (the card's documented path). ``config.json``'s
``auto_map`` names the folder's ``modeling_flygpt.py``: flyviz never imports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Anatomy, Checkpoint, validate_checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import find_tokenizer, read_json, true_or_false
from flyviz.model.safetensors_io import SafetensorsFile

#: ``config.json``'s ``model_type`` of a FlyGPT folder.
MODEL_TYPE = "flygpt"

#: The hub repository, and the sub-folders of its variants (root = the cb5k real wiring).
HUB_REPO = "QuixiAI/FlyGPT"
VARIANTS = ("", "scrambled", "init", "full-cns")

#: The 65 characters of the tokenizer, in id order (``data/shakespeare/split.json``).
VOCABULARY = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

_INDEX_DTYPES = ("I32", "I64")
_FLOAT_DTYPES = ("BF16", "F32")

#: tensor -> (allowed stored dtypes, shape in terms of the config's sizes).
TENSORS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "graph.edge_index": (_INDEX_DTYPES, ("2", "E")),
    "graph.synapse_count": (_INDEX_DTYPES, ("E",)),
    "graph.node_id": (_INDEX_DTYPES, ("N",)),
    "graph.input_nodes": (_INDEX_DTYPES, ("I",)),
    "graph.output_nodes": (_INDEX_DTYPES, ("O",)),
    "recurrent.edge_values": (_FLOAT_DTYPES, ("E",)),
    "recurrent.bias": (_FLOAT_DTYPES, ("N",)),
    "recurrent.raw_leak": (_FLOAT_DTYPES, ("N",)),
    "embed.weight": (_FLOAT_DTYPES, ("V", "D")),
    "input_proj.weight": (_FLOAT_DTYPES, ("I", "D")),
    "input_proj.bias": (_FLOAT_DTYPES, ("I",)),
    "lm_head.weight": (_FLOAT_DTYPES, ("V", "O")),
    "lm_head.bias": (_FLOAT_DTYPES, ("V",)),
}

#: The tensors training updates (every float tensor; ``recurrent.raw_leak`` only while
#: ``learned_leak`` is true, else it holds its initial ``logit(leak_init)``, §3.4 (e)).
TRAINABLE = ("embed.weight", "input_proj.weight", "input_proj.bias", "recurrent.edge_values",
             "recurrent.bias", "recurrent.raw_leak", "lm_head.weight", "lm_head.bias")

#: ``config.json`` keys giving the sizes (letters of :data:`TENSORS`).
_SIZES = {"N": "num_neurons", "E": "num_edges", "I": "num_input_neurons",
          "O": "num_output_neurons", "D": "embedding_dim", "V": "vocab_size"}


def is_flygpt_config(folder: Path) -> bool:
    """Whether ``folder/config.json`` declares ``model_type "flygpt"`` (False if unreadable)."""
    try:
        config = read_json(folder / "config.json", "config.json")
    except CheckpointError:
        return False
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def _size(config: dict[str, Any], key: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CheckpointError(f"config.json: {key} is {value!r}, expected a positive integer; "
                              "this FlyGPT config is damaged")
    return value


def _unique_in_range(name: str, array: np.ndarray, neurons: int) -> np.ndarray:
    index = np.asarray(array, dtype=np.int64)
    if index.size and (int(index.min()) < 0 or int(index.max()) >= neurons):
        bad = int(index.min()) if int(index.min()) < 0 else int(index.max())
        raise CheckpointError(f"model.safetensors: {name} holds neuron {bad}, outside "
                              f"0..{neurons - 1}; the file is damaged")
    if np.unique(index).size != index.size:
        raise CheckpointError(f"model.safetensors: {name} repeats a neuron; the file is damaged")
    return index


def degree_scale(destination: np.ndarray, neurons: int) -> np.ndarray:
    """``1/sqrt(max(1, indeg))`` per neuron in float32, the in-degree counted over all edges."""
    indegree = np.bincount(destination, minlength=neurons).astype(np.float64)
    return (1.0 / np.sqrt(np.maximum(indegree, 1.0))).astype(np.float32)


def anatomy_by_body_id(body_ids: np.ndarray, dataset_dir: str | Path) -> Anatomy:
    """Soma positions and labels for ``body_ids`` (MaleCNS body ids) from a connectome
    dataset's ``neurons/`` table, joined by body id; a neuron the table lacks has no position.

    Raises
    ------
    CheckpointError
        When the dataset has no neurons table or no body ids, or shares none of them.
    """
    from flyviz.model.formats.dataset import load_dataset_anatomy

    table = load_dataset_anatomy(dataset_dir)
    if table is None or table.body_id is None:
        raise CheckpointError(f"{dataset_dir} has no neurons table with body ids to place "
                              "FlyGPT's neurons by; pass a dataset with neurons/body_id")
    known = np.asarray(table.body_id, dtype=np.int64)
    order = np.argsort(known, kind="stable")
    wanted = np.asarray(body_ids, dtype=np.int64)
    slot = np.clip(np.searchsorted(known[order], wanted), 0, max(known.size - 1, 0))
    found = known[order][slot] == wanted if known.size else np.zeros(wanted.size, bool)
    rows = order[slot]
    if not found.any():
        raise CheckpointError(f"none of the model's {wanted.size:,} body ids is in {dataset_dir}; "
                              "they do not belong together")
    valid = found & np.asarray(table.valid)[rows]
    positions = np.where(valid[:, None], np.asarray(table.positions, np.float32)[rows], 0.0)

    def labels(values: list[str] | None) -> list[str] | None:
        return None if values is None else [values[r] if f else "" for r, f in zip(rows, found)]

    populations = None
    if table.populations:  # the table's rows -> the model's neurons (those it has)
        model_of_row = np.full(known.size, -1, dtype=np.int64)
        model_of_row[rows[found]] = np.flatnonzero(found)
        populations = {}
        for name, members in table.populations.items():
            mapped = model_of_row[np.asarray(members, np.int64)]
            populations[name] = np.sort(mapped[mapped >= 0])
    return Anatomy(positions=positions.astype(np.float32), valid=valid, kind=table.kind,
                   body_id=wanted, superclass=labels(table.superclass), side=labels(table.side),
                   cell_type=labels(table.cell_type), populations=populations)


def load_flygpt(model_dir: str | Path, *, tokenizer_path: str | Path | None = None,
                name: str | None = None, dataset_dir: str | Path | None = None) -> Checkpoint:
    """Load a QuixiAI/FlyGPT folder without importing any of its Python.

    Parameters
    ----------
    model_dir
        Folder with ``config.json`` (``model_type "flygpt"``) and ``model.safetensors``.
    tokenizer_path
        ``tokenizer.json``; default: the one in ``model_dir``.
    name
        Display name; default: the folder name.
    dataset_dir
        A connectome dataset whose ``neurons/`` table places the neurons by their MaleCNS
        body ids (:func:`anatomy_by_body_id`); without it the viewer lays the graph out.

    Returns
    -------
    Checkpoint
        Validated, layout ``"flygpt"``.

    Raises
    ------
    CheckpointError
        One line naming the first problem: a missing tensor or config key, a wrong dtype
        or shape, an edge or neuron index out of range.
    """
    model_dir = Path(model_dir)
    config = read_json(model_dir / "config.json", "config.json")
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{model_dir / 'config.json'} is not a FlyGPT config "
                              f"(model_type {MODEL_TYPE!r})")
    sizes = {letter: _size(config, key) for letter, key in _SIZES.items()}
    microsteps = _size(config, "microsteps")
    if config.get("activation", "tanh") != "tanh":
        raise CheckpointError(f"config.json: activation {config.get('activation')!r} is not "
                              "tanh; flyviz runs FlyGPT's tanh operator only")
    st = SafetensorsFile(model_dir / "model.safetensors")
    arrays: dict[str, np.ndarray] = {}
    for tensor, (dtypes, dims) in TENSORS.items():
        if tensor not in st:
            raise CheckpointError(f"model.safetensors lacks {tensor}; the file is incomplete "
                                  "or not a FlyGPT export")
        if st.dtype(tensor) not in dtypes:
            raise CheckpointError(f"model.safetensors: {tensor} is {st.dtype(tensor)}, expected "
                                  f"{' or '.join(dtypes)}; the file is damaged")
        shape = tuple(int(d) if d.isdigit() else sizes[d] for d in dims)
        if tuple(st.shape(tensor)) != shape:
            raise CheckpointError(f"model.safetensors: {tensor} has shape "
                                  f"{list(st.shape(tensor))}, config.json needs {list(shape)}; "
                                  "the files do not belong together")
        arrays[tensor] = st.get(tensor)

    # Non-finite values are found here, in the file's own order and names: the engine's
    # arrays are reordered (the CSR) and renamed (embed.weight is wte).
    for tensor, (dtypes, _dims) in TENSORS.items():
        if dtypes is _FLOAT_DTYPES:
            flat = np.asarray(arrays[tensor], dtype=np.float32).reshape(-1)
            nonfinite = np.flatnonzero(~np.isfinite(flat))
            if nonfinite.size:
                raise CheckpointError(f"model.safetensors: {tensor} holds a non-finite value "
                                      f"(NaN or inf) at flat index {int(nonfinite[0])}; the file is "
                                      "damaged, download it again")

    n, n_in, n_out = sizes["N"], sizes["I"], sizes["O"]
    edge_index = np.asarray(arrays["graph.edge_index"], dtype=np.int64)
    source, destination = edge_index[0], edge_index[1]
    for row, what in ((source, "source"), (destination, "destination")):
        if row.size and (int(row.min()) < 0 or int(row.max()) >= n):
            bad = int(row.min()) if int(row.min()) < 0 else int(row.max())
            raise CheckpointError(f"model.safetensors: graph.edge_index has {what} neuron {bad}, "
                                  f"outside 0..{n - 1}; the file is damaged")
    inputs = _unique_in_range("graph.input_nodes", arrays["graph.input_nodes"], n)
    outputs = _unique_in_range("graph.output_nodes", arrays["graph.output_nodes"], n)

    # Destination-major CSR; edges keep their training order inside a row.
    order = np.argsort(destination, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(destination, minlength=n), out=offsets[1:])
    normalised = true_or_false(config.get("degree_normalization", True),
                               "config.json: degree_normalization")
    values = np.asarray(arrays["recurrent.edge_values"], dtype=np.float32)[order]
    if normalised:
        values *= degree_scale(destination, n)[destination[order]]
    index_dtype = np.int32 if n < 2**31 else np.int64
    raw_leak = np.asarray(arrays["recurrent.raw_leak"], dtype=np.float32)
    with np.errstate(over="ignore"):
        leak = (np.float32(1.0) / (np.float32(1.0) + np.exp(-raw_leak))).astype(np.float32)

    leak_init = config.get("leak_init", 0.9)
    scalar_leak = float(leak_init) if isinstance(leak_init, (int, float)) \
        and 0.0 < float(leak_init) <= 1.0 else 0.9
    cfg = ModelConfig(neurons=n, delay_k=1, neurons_per_slot=n_in, d_embed=sizes["D"],
                      vocabulary=sizes["V"], readout_rank=None, leak=scalar_leak,
                      # No special tokens (§3.1): id 0 is '\n', which must neither end the
                      # text nor be masked by --min-new-tokens.
                      pad_token_id=0, bos_token_id=0, eos_token_id=None, microsteps=microsteps,
                      layer_norm=False, bos_prepended=False)
    graph = config.get("graph") if isinstance(config.get("graph"), dict) else {}
    training = config.get("training_state") if isinstance(config.get("training_state"),
                                                          dict) else {}
    metadata: dict[str, Any] = {
        "family": "QuixiAI/FlyGPT",
        "dtypes": {t: st.dtype(t) for t in st.keys()},
        "graph": graph, "training_state": training,
        "degree_normalization": normalised,
        "precision": "float32 upcast of the stored tensors, float32 arithmetic",
    }
    anatomy = None
    if dataset_dir is not None:
        anatomy = anatomy_by_body_id(arrays["graph.node_id"], dataset_dir)
        metadata["dataset"] = str(dataset_dir)
        labelled = sum(1 for label in (anatomy.superclass or ()) if label)
        metadata["body_ids"] = (
            f"{anatomy.n_valid:,} of {n:,} neurons placed by MaleCNS body id from the dataset's "
            "neurons table" if anatomy.n_valid else
            f"{labelled:,} of {n:,} neurons labelled by MaleCNS body id from the dataset, which "
            "has no soma positions, so the graph is laid out")
    else:
        # No positions or labels, but the graph names every neuron by its MaleCNS body id:
        # kept, so the layout drawn instead carries them (napari's body_id feature, the
        # inspector, `body:` queries) rather than no ids at all.
        anatomy = Anatomy(positions=np.zeros((n, 3), np.float32), valid=np.zeros(n, bool),
                          body_id=np.asarray(arrays["graph.node_id"], dtype=np.int64))
        metadata["body_ids"] = ("MaleCNS body ids in graph.node_id; no coordinates table given "
                                "(--dataset), so the graph is laid out instead")
    if config.get("auto_map"):
        metadata["remote_code_ignored"] = ("config.json's auto_map names Python files; flyviz "
                                           "does not import them")
    learned_leak = true_or_false(config.get("learned_leak", True), "config.json: learned_leak")
    trainable = {t: int(np.prod(st.shape(t))) for t in TRAINABLE
                 if learned_leak or t != "recurrent.raw_leak"}
    f32 = np.float32
    tok = Path(tokenizer_path) if tokenizer_path is not None else find_tokenizer(model_dir)
    ckpt = Checkpoint(
        config=cfg,
        wte=np.ascontiguousarray(arrays["embed.weight"], dtype=f32),
        in_proj=np.ascontiguousarray(np.asarray(arrays["input_proj.weight"], dtype=f32).T)[None],
        gain=np.ones(n, dtype=f32), rec_gain=np.ones(n, dtype=f32),
        bias=np.ascontiguousarray(arrays["recurrent.bias"], dtype=f32),
        ln_weight=np.ones(n_out, dtype=f32), ln_bias=np.zeros(n_out, dtype=f32),
        w_offsets=offsets, w_indices=source[order].astype(index_dtype), w_values=values,
        in_index=inputs, out_index=outputs,
        head=np.ascontiguousarray(arrays["lm_head.weight"], dtype=f32),
        name=name or model_dir.name, layout="flygpt", tokenizer_path=tok, metadata=metadata,
        source=model_dir, leak_vector=leak, anatomy=anatomy,
        in_bias=np.ascontiguousarray(arrays["input_proj.bias"], dtype=f32),
        head_bias=np.ascontiguousarray(arrays["lm_head.bias"], dtype=f32),
        trainable_tensors=trainable, tensor_names={
            attr: f"model.safetensors: {tensor}" for attr, tensor in (
                ("wte", "embed.weight"), ("in_proj", "input_proj.weight"),
                ("in_bias", "input_proj.bias"), ("bias", "recurrent.bias"),
                ("w_values", "recurrent.edge_values"), ("w_indices", "graph.edge_index"),
                ("leak_vector", "recurrent.raw_leak"), ("in_index", "graph.input_nodes"),
                ("out_index", "graph.output_nodes"), ("head", "lm_head.weight"),
                ("head_bias", "lm_head.bias"))})
    return validate_checkpoint(ckpt)
