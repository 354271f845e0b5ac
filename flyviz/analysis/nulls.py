"""Null models of the connectome: the same model on a randomised graph, and real vs null.

A claim about the fly's wiring ("this group carries the name", "the lesion map
has this shape") needs a control: does a brain with the same readout and
embeddings but shuffled wiring do the same? This module makes such brains and
compares a measurement on the real one with the same measurement on several.

Kinds (:data:`NULL_KINDS`), all seeded and deterministic:

``degree``
    Double edge swaps (a->b, c->d  =>  a->d, c->b) that swap targets only:
    every neuron keeps its in- and out-degree, and every synapse keeps its
    presynaptic neuron and its weight, so each neuron's outgoing signs (Dale's
    law) and the counts of excitatory and inhibitory synapses are unchanged.
    A swap that would make a self-loop or a second copy of an existing
    synapse is refused. About :data:`SWAPS_PER_EDGE` x edges swaps are made,
    in vectorised rounds that each propose one swap for every pair of a fresh
    random pairing of the edges.
``sign``
    The same synapses and magnitudes, the signs shuffled over the edges
    (zero weights stay zero, so the sign counts are kept).
``weights``
    The same synapses, the weights permuted over them.
``erdos``
    Erdős–Rényi at the same density: as many synapses as the real graph, on
    uniformly random (pre, post) pairs without self-loops or duplicates,
    carrying a permutation of the real weights.

Everything but the recurrent graph (``w_offsets``, ``w_indices``,
``w_values``) is shared with the source: embeddings, input projections,
per-neuron parameters, LayerNorm, readout, interface and anatomy. A null's
``metadata["null_model"]`` says what it is a null of (kind, seed, the source's
:func:`~flyviz.model.identity.model_identity`), and :func:`write_null` stores
that record in the written checkpoint so that ``flyviz info`` shows it.

Public API (used by ``flyviz null`` and ``--nulls N`` of the corpus commands):
:func:`make_null`, :func:`write_null`, :func:`run_on_nulls`,
:func:`compare_to_nulls` and :class:`NullComparison`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from flyviz.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

#: The kinds of null model, in the order ``--kind`` lists them.
NULL_KINDS: tuple[str, ...] = ("degree", "sign", "weights", "erdos")

#: What each kind keeps, in one line (``--help``, the README).
KIND_KEEPS = {
    "degree": "every neuron's in- and out-degree, each synapse's presynaptic neuron and "
              "weight (so the excitatory and inhibitory counts)",
    "sign": "the synapses and their magnitudes; the signs are shuffled over the edges",
    "weights": "the synapses; the weights are permuted over them",
    "erdos": "the number of synapses and the weights' multiset; the endpoints are uniformly "
             "random (no self-loops or duplicates)",
}

#: Degree nulls make about this many swaps per edge (enough to mix a sparse graph).
SWAPS_PER_EDGE = 10

#: The key under which a null's record is kept, in the checkpoint's metadata and in the
#: written checkpoint's manifest (``config.json`` for ngxson's layout).
RECORD_KEY = "null_model"
#: The manifest key of the record in the written files.
FILE_RECORD_KEY = "flyviz_null"

#: A bit set over all neuron pairs is used for the duplicate checks up to this size
#: (bytes); larger graphs check membership by sorting.
_BITSET_LIMIT = 1 << 30

T = TypeVar("T")


# ------------------------------------------------------------------ checks
def check_kind(kind: str) -> str:
    """``kind`` if it is one of :data:`NULL_KINDS`, else an :class:`InputError`."""
    if kind not in NULL_KINDS:
        raise InputError(f"unknown null kind {kind!r}; choose one of {', '.join(NULL_KINDS)}")
    return kind


def check_seed(seed: Any) -> int:
    """``seed`` as an int if it is a whole number >= 0, else an :class:`InputError`."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"null seed {seed!r} must be a whole number >= 0")
    return int(seed)


def _rng(kind: str, seed: int) -> np.random.Generator:
    # One stream per (seed, kind): a degree and a sign null of the same seed are unrelated.
    return np.random.default_rng(np.random.SeedSequence([seed, NULL_KINDS.index(kind)]))


# ------------------------------------------------------------------ the graphs
def _edges(ckpt: "Checkpoint") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source int64, target int64, weight float32) of every synapse, in CSR order."""
    offsets = np.asarray(ckpt.w_offsets).astype(np.int64)
    n = ckpt.config.neurons
    target = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    return (np.asarray(ckpt.w_indices).astype(np.int64), target,
            np.asarray(ckpt.w_values, dtype=np.float32))


def _csr(n: int, source: np.ndarray, target: np.ndarray, weight: np.ndarray,
         index_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (row = target) with sorted columns from an edge list without duplicates."""
    order = _sort_order(target * n + source, n * n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(target, minlength=n), out=offsets[1:])
    return (offsets.astype(np.int32), source[order].astype(index_dtype),
            np.ascontiguousarray(weight[order], dtype=np.float32))


class _PairSet:
    """The set of (source, target) keys ``source * n + target``: membership, add, remove.

    A bit per neuron pair (305 MB at the fly's 49,393 neurons) makes membership
    one gather; updates are sorted first so that keys sharing a byte are
    or-ed together (a plain fancy assignment would lose all but one).
    """

    def __init__(self, n: int, keys: np.ndarray) -> None:
        self.bits = np.zeros((n * n + 7) // 8, dtype=np.uint8)
        self.add(keys)

    @staticmethod
    def _grouped(keys: np.ndarray, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
        keys = keys if presorted else np.sort(keys)
        byte = keys >> 3
        masks = np.left_shift(np.uint8(1), (keys & 7).astype(np.uint8))
        if keys.size == 0:
            return byte, masks
        starts = np.flatnonzero(np.diff(byte, prepend=np.int64(-1)))
        return byte[starts], np.bitwise_or.reduceat(masks, starts)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return ((self.bits[keys >> 3] >> (keys & 7).astype(np.uint8)) & 1).astype(bool)

    def add(self, keys: np.ndarray, presorted: bool = False) -> None:
        byte, masks = self._grouped(keys, presorted)
        self.bits[byte] |= masks

    def remove(self, keys: np.ndarray) -> None:
        byte, masks = self._grouped(keys)
        self.bits[byte] &= ~masks


class _SortedPairSet:
    """:class:`_PairSet` by sorting, for graphs too large for a bit set."""

    def __init__(self, n: int, keys: np.ndarray) -> None:
        self.keys = np.sort(keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return np.isin(keys, self.keys, kind="sort")

    def add(self, keys: np.ndarray, presorted: bool = False) -> None:
        self.keys = np.sort(np.concatenate([self.keys, keys]))

    def remove(self, keys: np.ndarray) -> None:
        self.keys = self.keys[~np.isin(self.keys, keys, kind="sort")]


def _pair_set(n: int, keys: np.ndarray) -> _PairSet | _SortedPairSet:
    return _PairSet(n, keys) if (n * n + 7) // 8 <= _BITSET_LIMIT else _SortedPairSet(n, keys)


def _repeated(ordered: np.ndarray) -> np.ndarray:
    """The values occurring more than once in the sorted int64 array ``ordered``."""
    same = ordered[1:] == ordered[:-1]
    return np.unique(ordered[1:][same]) if same.any() else ordered[:0]


def _among(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mask of the entries of ``keys`` (int64 >= 0) that are in the sorted ``values``."""
    if values.size == 0:
        return np.zeros(keys.size, dtype=bool)
    # The values are few (thousands among millions): a table of their low bits picks the
    # candidates in one gather, and only those are looked up exactly (a binary search of
    # every key costs seconds at full size).
    table_bits = 22
    low = np.int64((1 << table_bits) - 1)
    table = np.zeros(1 << table_bits, dtype=bool)
    table[values & low] = True
    candidates = np.flatnonzero(table[keys & low])
    where = np.minimum(np.searchsorted(values, keys[candidates]), values.size - 1)
    mask = np.zeros(keys.size, dtype=bool)
    mask[candidates[values[where] == keys[candidates]]] = True
    return mask


def _sort_order(keys: np.ndarray, limit: int) -> np.ndarray:
    """``np.argsort(keys)`` for distinct int64 keys in ``[0, limit)``.

    Where key and position fit in 64 bits together (any graph up to a million
    neurons and 16 M edges), they are packed into one word and sorted as plain
    integers: several times faster than an argsort of 9 M keys.
    """
    index_bits = max(1, int(keys.size - 1).bit_length())
    if int(limit - 1).bit_length() + index_bits > 63:
        return np.argsort(keys, kind="stable")
    packed = (keys << np.int64(index_bits)) | np.arange(keys.size, dtype=np.int64)
    packed.sort()
    return packed & np.int64((1 << index_bits) - 1)


def degree_swaps(n: int, source: np.ndarray, target: np.ndarray, rng: np.random.Generator,
                 swaps: int) -> tuple[np.ndarray, int, int]:
    """Double edge swaps that exchange targets, in vectorised rounds.

    Parameters
    ----------
    n
        Number of neurons.
    source, target
        The edges (int64; no self-loops needed, no duplicates assumed).
    rng
        The random stream.
    swaps
        How many accepted swaps to make (the last round may make a few more).

    Returns
    -------
    tuple
        The new targets (``source[e]`` keeps edge ``e``'s presynaptic neuron),
        the number of accepted swaps and the number of rounds.

    Notes
    -----
    Each round pairs the edges by a random permutation and proposes, for every
    pair (a->b, c->d), the swap to (a->d, c->b). A proposal is refused when it
    makes a self-loop, when a new edge already exists before the round, or
    when two proposals of the round would make the same new edge; the rest are
    applied together, so the graph never holds a duplicate. Refusing against
    the graph before the round is conservative (an edge removed by another swap
    of the same round is still counted as present), which costs a few
    proposals and keeps every round exact.
    """
    edges = source.size
    target = target.copy()
    half = edges // 2
    if half == 0 or swaps <= 0:
        return target, 0, 0
    present = _pair_set(n, source * n + target)
    accepted = rounds = 0
    # A graph that admits (almost) no swap (dense, or a star) must not loop for ever.
    max_rounds = 4 * math.ceil(swaps / half) + 8
    while accepted < swaps and rounds < max_rounds:
        rounds += 1
        # A uniformly random pairing: a random half of the edges, in index order (so that
        # its reads and writes stream), each with a partner from a random order of the rest.
        order = rng.permutation(edges)
        first, second = np.sort(order[:half]), order[half:2 * half]
        s1, t1, s2, t2 = source[first], target[first], source[second], target[second]
        new1, new2 = s1 * n + t2, s2 * n + t1
        ok = (s1 != t2) & (s2 != t1)
        ok &= ~present.contains(new1)
        ok &= ~present.contains(new2)
        chosen = np.flatnonzero(ok)
        made = np.sort(np.concatenate([new1[chosen], new2[chosen]]))
        clashing = _repeated(made)  # two proposals of this round making the same edge
        if clashing.size:
            chosen = chosen[~(_among(new1[chosen], clashing) | _among(new2[chosen], clashing))]
            made = made[~_among(made, clashing)]
        if chosen.size == 0:
            break
        present.remove(np.concatenate([s1[chosen] * n + t1[chosen], s2[chosen] * n + t2[chosen]]))
        present.add(made, presorted=True)
        target[first[chosen]] = t2[chosen]
        target[second[chosen]] = t1[chosen]
        accepted += int(chosen.size)
    return target, accepted, rounds


def _erdos_edges(n: int, edges: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``edges`` distinct (source, target) pairs, uniform over the n(n-1) off-diagonal ones."""
    pairs = n * (n - 1)
    if edges > pairs:
        raise InputError(f"an Erdős–Rényi null of {edges:,} edges does not fit on {n:,} neurons "
                         "without self-loops")
    from flyviz.model.synthetic import _sorted_unique

    flat = _sorted_unique(rng.integers(0, pairs, size=int(edges * 1.02) + 16, dtype=np.int64))
    while flat.size < edges:
        more = rng.integers(0, pairs, size=edges - flat.size + 16, dtype=np.int64)
        flat = _sorted_unique(np.concatenate([flat, more]))
    if flat.size > edges:
        flat = flat[np.sort(rng.choice(flat.size, size=edges, replace=False))]
    target = flat // (n - 1)
    column = flat % (n - 1)
    source = column + (column >= target)  # skip the diagonal
    return source.astype(np.int64), target.astype(np.int64)


def null_graph(ckpt: "Checkpoint", kind: str, seed: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The null graph of ``ckpt``: ``(w_offsets, w_indices, w_values, facts)``.

    ``facts`` holds what the randomisation did (for a degree null the swaps
    made and the rounds), stored in the null's record.
    """
    check_kind(kind)
    seed = check_seed(seed)
    rng = _rng(kind, seed)
    n = ckpt.config.neurons
    index_dtype = np.asarray(ckpt.w_indices).dtype
    facts: dict[str, Any] = {}
    if kind in ("sign", "weights"):
        values = np.array(ckpt.w_values, dtype=np.float32)
        if kind == "weights":
            values = values[rng.permutation(values.size)]
        else:
            nonzero = np.flatnonzero(values)
            signs = np.sign(values[nonzero])
            values[nonzero] = np.abs(values[nonzero]) * signs[rng.permutation(nonzero.size)]
        return (np.array(ckpt.w_offsets), np.array(ckpt.w_indices), values, facts)
    source, target, weight = _edges(ckpt)
    if kind == "degree":
        target, accepted, rounds = degree_swaps(n, source, target, rng,
                                                SWAPS_PER_EDGE * source.size)
        facts.update(swaps=accepted, rounds=rounds, swaps_per_edge=accepted / max(1, source.size))
    else:  # erdos
        weight = weight[rng.permutation(weight.size)]
        source, target = _erdos_edges(n, source.size, rng)
        if np.dtype(index_dtype).itemsize < 4 and n > 65_536:
            index_dtype = np.dtype(np.int32)
    offsets, indices, values = _csr(n, source, target, weight, np.dtype(index_dtype))
    return offsets, indices, values, facts


def make_null(checkpoint: "Checkpoint", kind: str, seed: int) -> "Checkpoint":
    """A null model of ``checkpoint``, in memory.

    Parameters
    ----------
    checkpoint
        The real model (any layout; not changed).
    kind
        One of :data:`NULL_KINDS`.
    seed
        Whole number >= 0; the same seed gives the identical null.

    Returns
    -------
    Checkpoint
        Sharing every array but the graph with ``checkpoint``; its
        ``metadata["null_model"]`` records ``kind``, ``seed``, what the
        randomisation did and ``source`` (the real model's identity).

    Raises
    ------
    InputError
        For an unknown kind or a negative seed.
    """
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.identity import model_identity

    check_kind(kind)
    seed = check_seed(seed)
    source_identity = model_identity(checkpoint)
    offsets, indices, values, facts = null_graph(checkpoint, kind, seed)
    record = {"kind": kind, "seed": seed, **facts, "source": source_identity}
    # Not the source's folder, dataset or description (the demo brain's says what *it* is).
    metadata = {k: v for k, v in checkpoint.metadata.items()
                if k not in ("spec", "dataset", "description")}
    metadata[RECORD_KEY] = record
    # Weight digests stay valid (the parameters are shared); graph and file digests do not.
    digests = {k: v for k, v in checkpoint.digests.items() if k == "identity/weights"}
    null = replace(checkpoint, w_offsets=offsets, w_indices=indices, w_values=values,
                   name=f"{kind} null {seed} of {checkpoint.name}", metadata=metadata,
                   digests=digests, source=None)
    return validate_checkpoint(null)


def describe_record(record: Any) -> str | None:
    """One line saying what a null is a null of (``flyviz info``), or ``None``."""
    if not isinstance(record, dict) or record.get("kind") not in NULL_KINDS:
        return None
    given = record.get("source")
    source: dict[str, Any] = given if isinstance(given, dict) else {}
    name = source.get("spec") or source.get("name") or "an unknown model"
    weights = str(source.get("weights_sha256") or "")[:12]
    swaps = f", {record['swaps']:,} swaps" if isinstance(record.get("swaps"), int) else ""
    return (f"{record['kind']} null, seed {record.get('seed')}{swaps}, of {name}"
            + (f" (weights {weights}...)" if weights else ""))


# ------------------------------------------------------------------ writing
def check_output_folder(out: str | Path, source: str | Path | None = None) -> Path:
    """Refuse an ``--out`` folder that exists, cannot be made, or is the model's own."""
    out = Path(out).expanduser()
    if source is not None:
        local = Path(source).expanduser()
        if local.exists() and local.resolve() == out.resolve():
            raise InputError(f"--out {out} is the model's own folder; give a new folder")
    if out.exists():
        raise InputError(f"--out {out} exists; give a new folder (a null is never written "
                         "over anything)")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"--out {out}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"--out {out}: the folder {parent} is not writable")
    return out


def _file_record(null: "Checkpoint") -> dict[str, Any]:
    """The record as stored in the files: the source without the machine's dataset path."""
    record = dict(null.metadata[RECORD_KEY])
    source = dict(record.get("source") or {})
    source.pop("dataset", None)
    record["source"] = source
    return record


def _add_record(path: Path, record: dict[str, Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data[FILE_RECORD_KEY] = record
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _write_checkpoint(null: "Checkpoint", folder: Path, layout: str, golden: bool) -> None:
    """Write ``null`` into ``folder`` in ``layout``, its graph in ``folder/dataset``."""
    from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf,
                                      write_recital_web, write_wordbrain)

    record = _file_record(null)
    description = (f"A {record['kind']} null model (seed {record['seed']}) of "
                   f"{record['source'].get('spec') or record['source'].get('name')}, written by "
                   "flyviz null: the same parameters on a randomised graph")
    n_in = null.metadata.get("n_in_declared")
    n_in_declared = int(n_in) if isinstance(n_in, int) else None
    if layout == "fly-llm-hf":
        dtypes = null.metadata.get("dtypes")
        dtype = "BF16" if isinstance(dtypes, dict) and dtypes.get("brain.wte.weight") == "BF16" \
            else "F32"
        write_fly_llm_hf(null, folder, dtype=dtype, n_in_declared=n_in_declared)
        _add_record(folder / "config.json", record)
        if null.anatomy is None:
            return
    elif layout == "wordbrain":
        filename = str(null.metadata.get("weights_file") or "min-ce.safetensors")
        write_wordbrain(null, folder, filename, tokenizer_path=null.tokenizer_path,
                        web_export=False, dataset="dataset")
        _add_record(folder / "manifest.json", record)
    else:  # the web export: the demo brain's layout, and that of a model only in memory
        extra: dict[str, Any] = {FILE_RECORD_KEY: record}
        if not golden:
            extra["golden"] = []
        write_recital_web(null, folder, extra, dataset="dataset")
    # The graph (and anatomy) as a dataset inside the model folder, where the loaders look
    # first: the null is one self-contained folder.
    dataset = write_connectome_dataset(null, folder / "dataset", n_in_declared=n_in_declared,
                                       name=f"{record['kind']}-null-{record['seed']}",
                                       description=description)
    _add_record(dataset / "manifest.json", record)


def _source_layout(ckpt: "Checkpoint") -> str:
    return ckpt.layout if ckpt.layout in ("fly-llm-hf", "wordbrain", "recital-web") \
        else "recital-web"


def write_checkpoint_null(checkpoint: "Checkpoint", kind: str, seed: int, out: str | Path, *,
                          golden: bool = False, source_spec: str | Path | None = None) -> Path:
    """Make the null of a loaded checkpoint and write it as a new folder ``out``.

    The folder is written under a temporary name beside ``out`` and renamed
    into place, so that an error or an interruption never leaves a
    half-written checkpoint under ``out``.
    """
    check_kind(kind)
    seed = check_seed(seed)
    out = check_output_folder(out, source_spec if source_spec is not None
                              else checkpoint.source)
    if checkpoint.source is not None and Path(checkpoint.source).resolve() == out.resolve():
        raise InputError(f"--out {out} is the model's own folder; give a new folder")
    null = make_null(checkpoint, kind, seed)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}-", suffix=".partial", dir=parent))
    except OSError as exc:
        raise InputError(f"--out {out}: cannot write in {parent} ({exc.strerror})") from None
    try:
        _write_checkpoint(null, scratch, _source_layout(checkpoint), golden)
        os.replace(scratch, out)
    except OSError as exc:
        raise InputError(f"--out {out}: writing failed ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def write_null(spec_or_path: "str | Path | Checkpoint", kind: str, seed: int, out: str | Path,
               *, dataset: str | Path | None = None, golden: bool = False) -> Path:
    """Write a null model of a model as an ordinary checkpoint folder.

    Parameters
    ----------
    spec_or_path
        The real model: a folder, a hub id, ``"demo"`` or a loaded
        :class:`~flyviz.model.checkpoint.Checkpoint`.
    kind, seed
        As for :func:`make_null`.
    out
        A new folder. It holds the checkpoint in the source's layout (the demo
        brain's is the Fly Recital web export; a checkpoint with no layout of
        its own is written as one too) with the graph, interface and anatomy as
        a connectome dataset in ``out/dataset``, so ``flyviz.load(out)`` and
        every command take it as they take the real model. The parameter files
        hold the same bytes as the source's.
    dataset
        The dataset folder to join the source to (``--dataset``).
    golden
        Also compute the golden traces a web export can carry (the null's own
        greedy continuations of the four Fly Recital prompts; a few seconds at
        full size). By default none are written, as the demo brain has none.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    InputError
        Before anything is loaded: an unknown kind, a negative seed, an
        ``out`` that exists, cannot be written or is the source's folder.
    """
    check_kind(kind)
    seed = check_seed(seed)
    from flyviz.model.checkpoint import Checkpoint

    if isinstance(spec_or_path, Checkpoint):
        return write_checkpoint_null(spec_or_path, kind, seed, out, golden=golden)
    check_output_folder(out, spec_or_path)
    from flyviz.model.resolve import load_model

    checkpoint = load_model(str(spec_or_path), dataset_dir=dataset)
    return write_checkpoint_null(checkpoint, kind, seed, out, golden=golden,
                                 source_spec=spec_or_path)


# ------------------------------------------------------------------ running on nulls
@dataclass(frozen=True)
class NullModel:
    """One null, as :func:`run_on_nulls` hands it to the work.

    Attributes
    ----------
    kind, seed
        Which null.
    checkpoint
        The null, loaded (from ``spec`` when it was written).
    spec
        The folder it was written to (what Dask workers load), or ``None`` for
        a null kept in memory; the folder is removed after the work.
    """

    kind: str
    seed: int
    checkpoint: "Checkpoint"
    spec: str | None = None


def null_seeds(count: int, start: int = 0) -> list[int]:
    """``count`` seeds from ``start`` (``--nulls N --null-seed S``), checked."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InputError(f"--nulls {count!r} must be a whole number >= 0")
    check_seed(start)
    return list(range(start, start + count))


def run_on_nulls(spec: "str | Path | Checkpoint", kind: str, seeds: Sequence[int],
                 work: Callable[[NullModel], T], *, dataset: str | Path | None = None,
                 in_memory: bool = False, workdir: str | Path | None = None,
                 log: Callable[[str], None] | None = None) -> list[T]:
    """Make each seeded null of a model and run ``work`` on it.

    Parameters
    ----------
    spec
        The real model (a spec, loaded once, or a loaded checkpoint).
    kind
        One of :data:`NULL_KINDS`.
    seeds
        The nulls' seeds (:func:`null_seeds`).
    work
        ``work(null)`` measures something on one :class:`NullModel` and
        returns it (a float, or anything: the results come back in seed order).
    dataset
        The dataset folder to join ``spec`` to.
    in_memory
        Hand the work the null in memory (``spec`` is ``None``); otherwise each
        null is written as a checkpoint folder (without golden traces) in a
        temporary folder under ``workdir`` (default: the system's), loaded from
        there, and removed after the work, so that Dask workers can load it.
    log
        ``log(line)`` before each null.

    Returns
    -------
    list
        ``work``'s results, one per seed.
    """
    check_kind(kind)
    seeds = [check_seed(s) for s in seeds]
    from flyviz.model.checkpoint import Checkpoint

    if isinstance(spec, Checkpoint):
        real = spec
    else:
        from flyviz.model.resolve import load_model

        real = load_model(str(spec), dataset_dir=dataset)
    results: list[T] = []
    for number, seed in enumerate(seeds, 1):
        if log is not None:
            log(f"null {number} of {len(seeds)}: {kind}, seed {seed}")
        if in_memory:
            results.append(work(NullModel(kind, seed, make_null(real, kind, seed))))
            continue
        with tempfile.TemporaryDirectory(prefix="flyviz-null-",
                                         dir=None if workdir is None else str(workdir)) as tmp:
            folder = write_checkpoint_null(real, kind, seed, Path(tmp) / f"{kind}-{seed}",
                                           golden=False)
            from flyviz.model.resolve import load_model

            loaded = load_model(str(folder))
            results.append(work(NullModel(kind, seed, loaded, str(folder))))
            del loaded
    return results


# ------------------------------------------------------------------ real vs nulls
def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


@dataclass(frozen=True)
class NullComparison:
    """A real measurement against the same measurement on ``n`` nulls.

    Attributes
    ----------
    real
        The real model's value.
    mean, sd
        The nulls' mean and sample standard deviation (``ddof=1``; NaN with
        fewer than two nulls).
    z
        ``(real - mean) / sd`` (NaN where ``sd`` is NaN, or 0 with
        ``real == mean``; +-inf where ``sd`` is 0 and they differ).
    p
        The empirical p-value ``(1 + #nulls >= real) / (1 + n)`` (``<=`` when
        lower values are "more"): the chance that a null reaches the real value.
    n
        The number of nulls.
    higher_is_more
        Which way counts as "at least as extreme as the real one".
    nulls
        The null values, in seed order.
    """

    real: float
    mean: float
    sd: float
    z: float
    p: float
    n: int
    higher_is_more: bool = True
    nulls: tuple[float, ...] = ()

    def line(self) -> str:
        """The printed row: ``real R | nulls mean ± sd (n=N) | z Z | p P``."""
        z = _number(self.z) if not math.isfinite(self.z) else f"{self.z:+.2f}"
        return (f"real {_number(self.real)} | nulls {_number(self.mean)} ± {_number(self.sd)} "
                f"(n={self.n}) | z {z} | p {self.p:.3g}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (NaN and inf as ``None``)."""
        def clean(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        return {"real": clean(self.real), "mean": clean(self.mean), "sd": clean(self.sd),
                "z": clean(self.z), "p": float(self.p), "n": self.n,
                "higher_is_more": self.higher_is_more,
                "nulls": [clean(v) for v in self.nulls]}


def compare_to_nulls(real: float, nulls: Sequence[float], *,
                     higher_is_more: bool = True) -> NullComparison:
    """Compare a real value with the same measurement on nulls.

    Parameters
    ----------
    real
        The real model's value.
    nulls
        One value per null (at least one).
    higher_is_more
        True when a higher value is the more extreme one (the p-value counts
        nulls ``>= real``); False counts nulls ``<= real``.

    Returns
    -------
    NullComparison

    Raises
    ------
    InputError
        With no nulls, or a value that is not a number.
    """
    values = np.asarray([float(v) for v in nulls], dtype=np.float64)
    if values.size == 0:
        raise InputError("comparing with nulls needs at least one null")
    if not math.isfinite(float(real)) or not np.isfinite(values).all():
        raise InputError("a real or null value is not a finite number")
    real = float(real)
    mean = float(values.mean())
    sd = float(values.std(ddof=1)) if values.size > 1 else math.nan
    if math.isnan(sd) or (sd == 0 and real == mean):
        z = math.nan
    elif sd > 0:
        z = (real - mean) / sd
    else:
        z = math.copysign(math.inf, real - mean)
    reached = int(np.count_nonzero(values >= real if higher_is_more else values <= real))
    p = (1 + reached) / (1 + values.size)
    return NullComparison(real=real, mean=mean, sd=sd, z=z, p=p, n=int(values.size),
                          higher_is_more=higher_is_more, nulls=tuple(float(v) for v in values))


__all__ = ["FILE_RECORD_KEY", "KIND_KEEPS", "NULL_KINDS", "NullComparison", "NullModel",
           "RECORD_KEY", "SWAPS_PER_EDGE", "check_kind", "check_output_folder", "check_seed",
           "compare_to_nulls", "degree_swaps", "describe_record", "make_null", "null_graph",
           "null_seeds", "run_on_nulls", "write_checkpoint_null", "write_null"]
