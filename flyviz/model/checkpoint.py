"""The in-memory checkpoint every loader produces, and its validation.

A :class:`Checkpoint` holds everything the engine and the viewer need: the
config, the trained parameters, the frozen CSR graph, the input/output neuron
index, the tokenizer file and (when the checkpoint carries it) anatomy. Large
arrays may be read-only memory maps; nothing here copies them.

:func:`validate_checkpoint` runs before any use, so that a corrupt or
inconsistent checkpoint fails with one clear line instead of a wrong answer or
a crash deep inside the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError, InputError

#: Superclass names used in the fly-connectome-49k dataset, in display order.
SUPERCLASSES = (
    "cb_intrinsic",
    "cb_sensory",
    "visual_projection",
    "ascending_neuron",
    "descending_neuron",
)

#: Most updates per token a checkpoint may ask for (every published FlyGPT takes 2): each
#: one is a pass over every synapse, so a damaged ``microsteps`` of billions would make
#: a single token run for hours.
MAX_MICROSTEPS = 64

#: Size of one MaleCNS voxel in micrometres (positions are stored in 8 nm voxels).
VOXEL_UM = 0.008


@dataclass
class Anatomy:
    """Per-neuron anatomy: soma positions and labels.

    Parameters
    ----------
    positions
        ``(N, 3)`` float32 soma positions in 8 nm voxels (x left-right,
        y dorsal-ventral growing downward, z anterior-posterior). Rows where
        ``valid`` is False carry no information and must not be drawn as if
        measured.
    valid
        ``(N,)`` bool: True where the soma position is known.
    kind
        ``"measured"`` (a real connectome's somata), ``"synthetic"`` (the demo
        brain's generated somata) or ``"layout"`` (computed from the graph).
    body_id, superclass, side, cell_type
        Optional per-neuron labels; ``None`` when the checkpoint has none.
    populations
        Optional named sets of neuron indices (``population:NAME`` in a query), e.g.
        fly-connectome-malecns-166k's ``retina``, ``lamina``, ``descending``, ``sugar``.
    """

    positions: np.ndarray
    valid: np.ndarray
    kind: str = "measured"
    body_id: np.ndarray | None = None
    superclass: list[str] | None = None
    side: list[str] | None = None
    cell_type: list[str] | None = None
    populations: dict[str, np.ndarray] | None = None

    @property
    def n_valid(self) -> int:
        """Number of neurons with a known position."""
        return int(np.count_nonzero(self.valid))

    def positions_um(self) -> np.ndarray:
        """Positions in micrometres with y flipped so that dorsal is up."""
        um = np.asarray(self.positions, dtype=np.float32) * np.float32(VOXEL_UM)
        um[:, 1] *= -1.0
        return um


@dataclass
class Checkpoint:
    """One Fly LLM, in memory, independent of the layout it was stored in.

    Parameters
    ----------
    config
        Sizes and constants.
    wte
        ``(vocabulary, d_embed)`` token embeddings.
    in_proj
        ``(delay_k, d_embed, neurons_per_slot)`` input projections.
    gain, rec_gain, bias
        ``(neurons,)`` per-neuron parameters.
    ln_weight, ln_bias
        ``(n_out,)`` LayerNorm affine parameters.
    head
        ``(vocabulary, n_out)`` dense readout, or ``None`` for a factored one.
    head_a, head_b
        ``(rank, n_out)`` and ``(vocabulary, rank)`` readout factors, or ``None``.
    w_offsets, w_indices, w_values
        CSR graph, row = postsynaptic neuron: ``W[i, w_indices[e]] = w_values[e]``
        for ``e`` in ``w_offsets[i]:w_offsets[i+1]``.
    in_index
        ``(delay_k * neurons_per_slot,)`` input neurons, slot-major.
    out_index
        ``(n_out,)`` neurons read out (the identity in every released model).
    name
        Human-readable model name (a hub id, a folder name, ``"demo"``).
    layout
        ``"fly-llm-hf"``, ``"wordbrain"`` or ``"recital-web"``.
    tokenizer_path
        The byte-level BPE ``tokenizer.json`` to use, if known.
    anatomy
        Soma positions and labels, or ``None``.
    digests
        SHA-256 digests recorded with the checkpoint (file or frozen-buffer
        digests), for ``flyviz info``.
    metadata
        Anything else worth showing (experiment, selector, provenance, licence).
    source
        Where the files were read from.
    leak_vector
        ``(neurons,)`` leak per neuron (FlyGPT's float32 ``sigmoid(raw_leak)``, or a
        float64 :func:`~flyviz.model.operator.trainable_leak`), or ``None`` for the
        config's one leak. The engine rounds ``leak`` and ``1 - leak`` to float32 once each.
    in_bias
        ``(delay_k * neurons_per_slot,)`` bias of the input map (FlyGPT's
        ``input_proj.bias``), or ``None``.
    head_bias
        ``(vocabulary,)`` bias of the readout (FlyGPT's ``lm_head.bias``), or ``None``.
    trainable_tensors
        ``{tensor name in the file: values}`` of the trainable tensors as published, when
        the loader knows them (FlyGPT, fly-wordbrain), or ``None``. The arrays above are
        not enough to count them: FlyGPT's gain, rec_gain and LayerNorm are placeholders
        the loader fills, and its learned edge values sit in ``w_values``, which is the
        frozen graph in every other family.
    tensor_names
        ``{field: "file: tensor"}`` naming where a field was read from (FlyGPT's
        ``w_values`` is ``model.safetensors: recurrent.edge_values``), so that a refusal
        names what the user has on disk, not flyviz's field; fields not named are
        shown by their own names.
    """

    config: ModelConfig
    wte: np.ndarray
    in_proj: np.ndarray
    gain: np.ndarray
    rec_gain: np.ndarray
    bias: np.ndarray
    ln_weight: np.ndarray
    ln_bias: np.ndarray
    w_offsets: np.ndarray
    w_indices: np.ndarray
    w_values: np.ndarray
    in_index: np.ndarray
    out_index: np.ndarray
    head: np.ndarray | None = None
    head_a: np.ndarray | None = None
    head_b: np.ndarray | None = None
    name: str = "model"
    layout: str = "unknown"
    tokenizer_path: Path | None = None
    anatomy: Anatomy | None = None
    digests: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None
    leak_vector: np.ndarray | None = None
    in_bias: np.ndarray | None = None
    head_bias: np.ndarray | None = None
    trainable_tensors: dict[str, int] | None = None
    tensor_names: dict[str, str] = field(default_factory=dict)

    @property
    def n_edges(self) -> int:
        """Number of stored synapses (CSR non-zeros)."""
        return int(self.w_values.shape[0])

    def parameter_count(self) -> int:
        """Number of trainable parameters as published (the frozen graph excluded).

        The sum of :attr:`trainable_tensors` when the loader recorded them, else of the
        parameter arrays (the Fly LLM's: its graph is frozen and it has no placeholders).
        """
        if self.trainable_tensors is not None:
            return int(sum(self.trainable_tensors.values()))
        arrays = [self.wte, self.in_proj, self.gain, self.rec_gain, self.bias,
                  self.ln_weight, self.ln_bias, self.head, self.head_a, self.head_b,
                  self.leak_vector, self.in_bias, self.head_bias]
        return int(sum(a.size for a in arrays if a is not None))

    def operator_extensions(self) -> list[str]:
        """What of the generalised leaky-tanh operator this model uses beyond the Fly
        LLM's (empty for the Fly LLM): a per-neuron leak, an input bias, several
        microsteps, a readout without LayerNorm or with a bias."""
        cfg = self.config
        found = []
        if self.leak_vector is not None:
            found.append("a leak per neuron")
        if self.in_bias is not None:
            found.append("an input bias")
        if cfg.microsteps != 1:
            found.append(f"{cfg.microsteps} microsteps per token")
        if not cfg.layer_norm or self.head_bias is not None:
            found.append("a biased linear readout")
        return found

    def out_index_is_identity(self) -> bool:
        """True when the readout sees every neuron in index order."""
        n = self.config.neurons
        idx = self.out_index
        return idx.shape[0] == n and bool(np.array_equal(idx, np.arange(n, dtype=idx.dtype)))


def require_fly_llm_operator(ckpt: Checkpoint, what: str) -> None:
    """Refuse, in one line, a model whose operator ``what`` does not follow yet.

    Raises
    ------
    InputError
        When the model uses any of :meth:`Checkpoint.operator_extensions`.
    """
    extensions = ckpt.operator_extensions()
    if extensions:
        raise InputError(f"{what} follows the Fly LLM's operator only (one update per token, "
                         f"one leak, a LayerNorm readout); {ckpt.name!r} has "
                         f"{', '.join(extensions)}, which it does not follow yet")


def _fail(name: str, problem: str) -> NoReturn:
    raise CheckpointError(f"{name}: {problem}")


def _check_shape(name: str, array: np.ndarray | None, shape: tuple[int, ...]) -> None:
    if array is None:
        _fail(name, f"missing (expected shape {list(shape)})")
    if tuple(array.shape) != tuple(shape):
        _fail(name, f"has shape {list(array.shape)} but the config needs {list(shape)}; "
                    "the checkpoint files do not belong together or are damaged")


def _check_finite(name: str, array: np.ndarray) -> None:
    if array.dtype.kind == "f" and array.size:
        # Chunked so that memory-mapped arrays are streamed, not copied whole.
        flat = array.reshape(-1)
        step = 1 << 22
        for start in range(0, flat.size, step):
            if not np.isfinite(flat[start:start + step]).all():
                bad = start + int(np.flatnonzero(~np.isfinite(flat[start:start + step]))[0])
                _fail(name, f"contains a non-finite value (NaN or inf) at flat index {bad}; "
                            "the checkpoint is corrupt")


def _check_index(name: str, array: np.ndarray, upper: int) -> None:
    if array.dtype.kind not in "iu":
        _fail(name, f"has dtype {array.dtype}, expected an integer type")
    if array.size == 0:
        return
    lo, hi = int(array.min()), int(array.max())
    if lo < 0 or hi >= upper:
        bad = lo if lo < 0 else hi
        _fail(name, f"holds index {bad}, outside 0..{upper - 1}; the graph is corrupt")


def validate_checkpoint(ckpt: Checkpoint) -> Checkpoint:
    """Check every shape, index and value before the checkpoint is used.

    Parameters
    ----------
    ckpt
        The checkpoint to check.

    Returns
    -------
    Checkpoint
        The same object, for chaining.

    Raises
    ------
    CheckpointError
        With a one-line message naming the first problem found.
    """
    cfg = ckpt.config

    def named(attr: str, shown: str | None = None) -> str:
        """The file's name of a field when the loader recorded it."""
        return ckpt.tensor_names.get(attr, shown or attr)

    n, v, d = cfg.neurons, cfg.vocabulary, cfg.d_embed
    if min(n, v, d, cfg.delay_k, cfg.neurons_per_slot) <= 0:
        _fail("config", "sizes must be positive")
    if not 0.0 < cfg.leak <= 1.0:
        _fail("config", f"leak {cfg.leak} is outside (0, 1]")
    if not (cfg.layer_norm_eps > 0 and np.isfinite(cfg.layer_norm_eps)):
        _fail("config", f"layer_norm_eps {cfg.layer_norm_eps} must be a positive number")
    for tok_name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        tok = getattr(cfg, tok_name)
        if tok is None and tok_name == "eos_token_id":
            continue  # a model with no end-of-sequence token (FlyGPT)
        if not 0 <= tok < v:
            _fail("config", f"{tok_name} {tok} is outside the vocabulary 0..{v - 1}")
    if not 1 <= cfg.microsteps <= MAX_MICROSTEPS:
        _fail("config", f"microsteps {cfg.microsteps} is outside 1..{MAX_MICROSTEPS} (updates "
                        "per token; published models take 1 or 2); the config is damaged")
    if cfg.n_inputs > n:
        _fail("config", f"{cfg.delay_k} slots x {cfg.neurons_per_slot} input neurons "
                        f"exceed the {n} neurons")

    n_out = int(ckpt.out_index.shape[0]) if ckpt.out_index is not None else -1
    _check_shape(named("wte"), ckpt.wte, (v, d))
    _check_shape(named("in_proj"), ckpt.in_proj, (cfg.delay_k, d, cfg.neurons_per_slot))
    for name in ("gain", "rec_gain", "bias"):
        _check_shape(named(name), getattr(ckpt, name), (n,))
    _check_shape(named("in_index"), ckpt.in_index, (cfg.n_inputs,))
    if ckpt.out_index is None or ckpt.out_index.ndim != 1 or n_out <= 0:
        _fail(named("out_index"), "missing or not a vector")
    _check_shape(named("ln_weight"), ckpt.ln_weight, (n_out,))
    _check_shape(named("ln_bias"), ckpt.ln_bias, (n_out,))
    if ckpt.head is not None:
        if ckpt.head_a is not None or ckpt.head_b is not None:
            _fail("readout", "has both a dense head and readout factors")
        _check_shape(named("head", "lm_head"), ckpt.head, (v, n_out))
        if cfg.readout_rank is not None:
            _fail("config", "names a readout rank but the checkpoint has a dense head")
    else:
        if ckpt.head_a is None or ckpt.head_b is None:
            _fail("readout", "needs either lm_head or both readout factors")
        r = int(ckpt.head_a.shape[0])
        _check_shape(named("head_a"), ckpt.head_a, (r, n_out))
        _check_shape(named("head_b"), ckpt.head_b, (v, r))
        if cfg.readout_rank is not None and cfg.readout_rank != r:
            _fail("config", f"readout_rank {cfg.readout_rank} does not match head_a's {r} rows")

    # CSR graph.
    off, idx, val = ckpt.w_offsets, ckpt.w_indices, ckpt.w_values
    if off.ndim != 1 or off.shape[0] != n + 1:
        _fail(named("w_offsets"), f"has {off.shape[0] if off.ndim == 1 else off.shape} entries, "
                           f"expected neurons + 1 = {n + 1}")
    if off.dtype.kind not in "iu":
        _fail(named("w_offsets"), f"has dtype {off.dtype}, expected an integer type")
    if idx.ndim != 1 or val.ndim != 1 or idx.shape[0] != val.shape[0]:
        _fail("graph", f"{idx.shape[0]} presynaptic indices but {val.shape[0]} weights")
    nnz = int(val.shape[0])
    if int(off[0]) != 0 or int(off[-1]) != nnz:
        _fail(named("w_offsets"), f"must run from 0 to the edge count {nnz}, "
                           f"runs from {int(off[0])} to {int(off[-1])}")
    if np.any(np.diff(off.astype(np.int64)) < 0):
        _fail(named("w_offsets"), "is not monotone; the graph is corrupt")
    _check_index(named("w_indices"), idx, n)
    _check_index(named("in_index"), ckpt.in_index, n)
    _check_index(named("out_index"), ckpt.out_index, n)
    if np.unique(ckpt.in_index).size != ckpt.in_index.size:
        _fail(named("in_index"), "holds repeated neurons; input neurons must be unique")

    if ckpt.leak_vector is not None:
        _check_shape(named("leak_vector", "leak"), ckpt.leak_vector, (n,))
        lam = np.asarray(ckpt.leak_vector)
        if lam.size and not bool(((lam > 0) & (lam <= 1)).all()):
            _fail(named("leak_vector", "leak"), "holds a value outside (0, 1]")
    if ckpt.in_bias is not None:
        _check_shape(named("in_bias", "input bias"), ckpt.in_bias, (cfg.n_inputs,))
    if ckpt.head_bias is not None:
        _check_shape(named("head_bias", "readout bias"), ckpt.head_bias, (v,))
    for name in ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias",
                 "head", "head_a", "head_b", "w_values", "in_bias", "head_bias"):
        array = getattr(ckpt, name)
        if array is not None:
            _check_finite(named(name), array)

    if ckpt.anatomy is not None:
        anat = ckpt.anatomy
        _check_shape("anatomy positions", anat.positions, (n, 3))
        _check_shape("anatomy valid", anat.valid, (n,))
        for label in ("superclass", "side", "cell_type"):
            values = getattr(anat, label)
            if values is not None and len(values) != n:
                _fail(f"anatomy {label}", f"has {len(values)} entries, expected {n}")
        if anat.body_id is not None:
            _check_shape("anatomy body_id", anat.body_id, (n,))
        _check_finite("anatomy positions", np.asarray(anat.positions, dtype=np.float32))
    return ckpt
