"""Small random Fly LLMs for tests, benchmarks and development.

These are *not* the demo brain (see :mod:`flyviz.demo`): they have random
parameters and write gibberish. They exist so that loaders, the engine, the
app and export can be exercised at any size, including the real one
(49,393 neurons, 9,050,172 edges) for ``flyviz bench``, without a download.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flyviz.model.checkpoint import SUPERCLASSES, Anatomy, Checkpoint
from flyviz.model.config import ModelConfig

#: Sizes of the released models.
FULL_NEURONS = 49_393
FULL_EDGES = 9_050_172
FULL_SLOT = 1_758

#: The words of the generated stories (a tokenizer's training text, tests' corpora).
WORDS = ("the cat dog bird girl boy mom dad sun rain tree park ball box red big little happy "
         "sad went saw said played ran jumped found looked wanted was were and but so then "
         "once upon a time there day lily tom ben sara friend home play together smiled").split()
_WORDS = WORDS  # the former name, which tests import


def make_tokenizer_json(vocab_size: int = 512, seed: int = 0) -> str:
    """Train a byte-level BPE tokenizer like the Fly LLM's on generated text.

    Special tokens are ``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2, then the 256
    byte symbols, then merges, as in the real tokenizer.

    Returns
    -------
    str
        The tokenizer's JSON text (the vocabulary may come out smaller than
        ``vocab_size`` if the text runs out of merges; read it back).
    """
    from flyviz.model.tokenizer import train_byte_level_bpe

    rng = np.random.default_rng(seed)
    lines = [" ".join(rng.choice(WORDS, size=rng.integers(4, 14))).capitalize() + "."
             for _ in range(3000)]
    return train_byte_level_bpe(lines, vocab_size)


def write_tokenizer(path: str | Path, vocab_size: int = 512, seed: int = 0) -> Path:
    """Write :func:`make_tokenizer_json` to ``path``."""
    path = Path(path)
    path.write_text(make_tokenizer_json(vocab_size, seed), encoding="utf-8")
    return path


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting in place: the same result, several times faster for
    millions of int64 (NumPy 2's hash-based unique takes 8 s at full size)."""
    values = np.sort(values)
    if values.size == 0:
        return values
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def random_csr(neurons: int, edges: int, rng: np.random.Generator,
               scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random CSR graph with sorted, unique columns per row and exactly ``edges`` edges.

    Returns ``(offsets int32, indices int32, values float32)``; row = postsynaptic.
    """
    if edges > neurons * neurons:
        raise ValueError("more edges than neuron pairs")
    # Draw unique flat indices row * n + col, then sort: rows and columns come out ordered.
    flat = sorted_unique(rng.integers(0, neurons * neurons, size=int(edges * 1.05) + 16,
                                       dtype=np.int64))
    while flat.size < edges:
        more = rng.integers(0, neurons * neurons, size=edges - flat.size + 16, dtype=np.int64)
        flat = sorted_unique(np.concatenate([flat, more]))
    flat = np.sort(rng.choice(flat, size=edges, replace=False))
    rows = (flat // neurons).astype(np.int64)
    cols = (flat % neurons).astype(np.int32)
    offsets = np.zeros(neurons + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(rows, minlength=neurons))
    offsets = offsets.astype(np.int32)
    degree = np.maximum(np.diff(offsets), 1).astype(np.float32)
    sign = np.where(rng.random(edges) < 2 / 3, 1.0, -1.0).astype(np.float32)
    values = sign * rng.uniform(0.2, 1.0, edges).astype(np.float32)
    values *= np.float32(scale) / np.repeat(np.sqrt(degree), np.diff(offsets))
    return offsets, cols, values.astype(np.float32)


def make_random_checkpoint(neurons: int = 301, edges: int = 3000, *, d_embed: int = 16,
                           delay_k: int = 8, neurons_per_slot: int | None = None,
                           vocabulary: int = 1024, readout_rank: int | None = 12,
                           seed: int = 0, with_anatomy: bool = True,
                           missing_fraction: float = 0.1,
                           tokenizer_path: Path | None = None,
                           name: str = "synthetic") -> Checkpoint:
    """A random but well-formed checkpoint.

    Parameters
    ----------
    neurons, edges
        Graph size (use :data:`FULL_NEURONS`, :data:`FULL_EDGES` for the real one).
    d_embed, delay_k, neurons_per_slot, vocabulary
        Interface sizes; ``neurons_per_slot`` defaults to a fifth of
        ``neurons // delay_k`` (1,758 at full size).
    readout_rank
        Rank of the factored readout, or ``None`` for a dense head.
    seed
        Everything is deterministic from the seed.
    with_anatomy, missing_fraction
        Add random soma positions (8 nm voxels, in the real brain's bounding
        box) with this fraction marked missing, and random labels.
    tokenizer_path
        Stored on the checkpoint as is.
    """
    rng = np.random.default_rng(seed)
    if neurons_per_slot is None:
        neurons_per_slot = FULL_SLOT if neurons == FULL_NEURONS else max(1, neurons // delay_k // 5)
    cfg = ModelConfig(neurons=neurons, delay_k=delay_k, neurons_per_slot=neurons_per_slot,
                      d_embed=d_embed, vocabulary=vocabulary, readout_rank=readout_rank)
    offsets, indices, values = random_csr(neurons, edges, rng, scale=1.2)
    f32 = np.float32
    params = dict(
        wte=rng.standard_normal((vocabulary, d_embed)).astype(f32),
        in_proj=(rng.standard_normal((delay_k, d_embed, neurons_per_slot)) / np.sqrt(d_embed)).astype(f32),
        gain=rng.uniform(0.6, 1.6, neurons).astype(f32),
        rec_gain=rng.uniform(0.5, 2.0, neurons).astype(f32),
        bias=(0.1 * rng.standard_normal(neurons)).astype(f32),
        ln_weight=rng.uniform(0.5, 1.5, neurons).astype(f32),
        ln_bias=(0.05 * rng.standard_normal(neurons)).astype(f32),
    )
    if readout_rank is None:
        params["head"] = (rng.standard_normal((vocabulary, neurons)) / np.sqrt(neurons) * 8).astype(f32)
    else:
        params["head_a"] = (rng.standard_normal((readout_rank, neurons)) / np.sqrt(neurons) * 4).astype(f32)
        params["head_b"] = (rng.standard_normal((vocabulary, readout_rank)) / np.sqrt(readout_rank) * 4).astype(f32)
    in_index = np.sort(rng.choice(neurons, delay_k * neurons_per_slot, replace=False)).astype(np.int64)
    rng.shuffle(in_index)
    anatomy = None
    if with_anatomy:
        lo = np.array([5_340, 4_758, 10_293], dtype=np.float32)
        hi = np.array([91_660, 66_949, 134_088], dtype=np.float32)
        positions = (lo + rng.random((neurons, 3)).astype(f32) * (hi - lo)).astype(f32)
        valid = rng.random(neurons) >= missing_fraction
        positions[~valid] = 0.0
        anatomy = Anatomy(
            positions=positions, valid=valid, kind="synthetic",
            body_id=np.sort(rng.choice(10**9, neurons, replace=False)).astype(np.int64) + 10**9,
            superclass=[SUPERCLASSES[i] for i in rng.choice(len(SUPERCLASSES), neurons,
                                                            p=[0.6, 0.15, 0.15, 0.05, 0.05])],
            side=[("left", "right", "center")[i] for i in rng.integers(0, 3, neurons)],
            cell_type=[f"T{i}" for i in rng.integers(0, max(1, neurons // 20), neurons)])
    return Checkpoint(config=cfg, w_offsets=offsets, w_indices=indices, w_values=values,
                      in_index=in_index, out_index=np.arange(neurons, dtype=np.int64),
                      name=name, layout="synthetic", tokenizer_path=tokenizer_path,
                      anatomy=anatomy, **params)


#: The superclasses of MaleCNS the 166k fixtures draw from (the five central-brain ones first).
MALECNS_SUPERCLASSES = ("cb_sensory", "visual_projection", "cb_intrinsic", "ascending_neuron",
                        "descending_neuron", "ol_intrinsic", "vnc_intrinsic", "motor")


def make_malecns_arrays(neurons: int = 300, edges: int = 3000, *, seed: int = 0,
                        unit: float = 0.275) -> dict[str, object]:
    """Arrays of a small graph in the fly-connectome-malecns-166k layout, for
    :func:`flyviz.model.writers.write_malecns_dataset`.

    Asymmetric (an edge one way rarely has its reverse), a tenth of the neurons with no
    inputs, weights ``sign x synapse count x unit`` (float32; as the published magnitudes
    read), ascending body ids, labels from :data:`MALECNS_SUPERCLASSES` with a fifth of
    the neurons untyped (``""``), and the four named populations.
    """
    rng = np.random.default_rng(seed)
    offsets, source, _ = random_csr(neurons, edges, rng)
    # Empty every tenth row: neurons with no inputs (the CSR keeps its other edges).
    degree: np.ndarray = np.diff(offsets.astype(np.int64))
    empty = np.arange(0, neurons, 10)
    keep = ~np.isin(np.repeat(np.arange(neurons), degree), empty)
    source = source[keep]
    degree[empty] = 0
    offsets = np.concatenate([[0], np.cumsum(degree)]).astype(np.int32)
    count = rng.integers(1, 40, source.shape[0])
    # One sign per presynaptic neuron (its transmitter), a third inhibitory.
    sign = np.where(rng.random(neurons) < 1 / 3, -1.0, 1.0)
    weight = (sign[source] * count * unit).astype(np.float32)
    superclass = [MALECNS_SUPERCLASSES[i] for i in rng.choice(
        len(MALECNS_SUPERCLASSES), neurons, p=[0.1, 0.1, 0.25, 0.05, 0.05, 0.3, 0.1, 0.05])]
    cell_type = ["" if rng.random() < 0.2 else f"{superclass[i][:2].upper()}{rng.integers(0, 30)}"
                 for i in range(neurons)]
    order = rng.permutation(neurons)
    populations = {"retina": np.sort(order[:20]), "lamina": np.sort(order[20:45]),
                   "descending": np.flatnonzero([s == "descending_neuron" for s in superclass]),
                   "sugar": np.sort(order[45:51])}
    body_id = np.sort(rng.choice(10**6, neurons, replace=False)).astype(np.int64) + 10_000
    return {"offsets": offsets, "source": source.astype(np.int32), "weight": weight,
            "body_id": body_id, "superclass": superclass, "cell_type": cell_type,
            "populations": {k: np.asarray(v, np.int32) for k, v in populations.items()}}


def make_flygpt_tensors(neurons: int = 40, edges: int = 300, *, inputs: int = 8,
                        outputs: int = 12, embed: int = 32, vocabulary: int = 65,
                        isolated: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """The 13 tensors of a small QuixiAI/FlyGPT export, in the published dtypes.

    The graph is asymmetric (so that a transposed ``edge_index`` gives other logits),
    in random (training) order, without repeated edges, and its last ``isolated``
    neurons receive no edge (their in-degree clamps to 1). Parameters are bf16
    (``ml_dtypes.bfloat16``), the leak varies per neuron.
    """
    import ml_dtypes

    rng = np.random.default_rng(seed)
    receivers = neurons - isolated
    pairs = rng.choice(receivers * neurons, size=edges, replace=False)
    destination, source = pairs // neurons, pairs % neurons
    bf16 = ml_dtypes.bfloat16

    def param(*shape: int, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
        return (rng.normal(offset, scale, shape)).astype(np.float32).astype(bf16)

    return {
        "graph.edge_index": np.stack([source, destination]).astype(np.int32),
        "graph.synapse_count": rng.integers(1, 50, edges).astype(np.int32),
        "graph.node_id": np.sort(rng.choice(10**11, neurons, replace=False)).astype(np.int64),
        "graph.input_nodes": rng.choice(neurons, inputs, replace=False).astype(np.int64),
        "graph.output_nodes": rng.choice(neurons, outputs, replace=False).astype(np.int64),
        "recurrent.edge_values": param(edges, scale=1.5),
        "recurrent.bias": param(neurons, scale=0.3),
        "recurrent.raw_leak": param(neurons, scale=1.0, offset=2.0),
        "embed.weight": param(vocabulary, embed),
        "input_proj.weight": param(inputs, embed, scale=0.4),
        "input_proj.bias": param(inputs, scale=0.2),
        "lm_head.weight": param(vocabulary, outputs),
        "lm_head.bias": param(vocabulary, scale=0.2),
    }
