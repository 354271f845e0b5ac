"""Null models of the connectome: the same model on a randomised graph, and real vs null.

A claim about the fly's wiring ("this group carries the name", "the lesion map
has this shape") needs a control: does a brain with the same readout and
embeddings but shuffled wiring do the same? This module makes such brains and
compares a measurement on the real one with the same measurement on several.

Kinds (:data:`NULL_KINDS`, a ladder from the most kept to the least; each
one's promise is :data:`KIND_KEEPS`), all seeded and deterministic:

``degree``
    The targets permuted uniformly over the synapses, then the few
    self-loops and duplicates this makes repaired by double edge swaps
    (a->b, c->d  =>  a->d, c->b; see :func:`degree_rewire`): every neuron
    keeps its in- and out-degree, and every synapse keeps its presynaptic
    neuron and its weight, so each neuron's outgoing signs (Dale's law) and
    the counts of excitatory and inhibitory synapses are unchanged. The
    result is a simple graph drawn (up to the repair) uniformly among those
    with these degrees, as a long chain of double edge swaps would give.
``degree-sign``
    As ``degree``, the targets permuted and the swaps made only among
    synapses of the same sign: every neuron also keeps its excitatory and
    its inhibitory in-degree (and out-degree), not only their sums.
``type-pairs``
    As ``degree``, the targets permuted and the swaps made only among
    synapses between the same (presynaptic cell type, postsynaptic cell
    type) pair: every neuron keeps its in- and out-degree per partner type,
    and the number of synapses between any two types is unchanged. Needs
    the neurons' cell types (a neuron without one counts as the type ``""``).
    A type pair wired so completely that no swap rearranges it keeps its own
    synapses (the null's record counts them: ``kept_classes``, ``kept_edges``).
``weights``
    The same synapses, the weights permuted over them.
``sign``
    The same synapses and magnitudes, the signs shuffled over the edges
    (zero weights stay zero, so the sign counts are kept).
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

Public API (used by ``flyviz null`` and ``--nulls [KIND:]N`` of the analyses):
:data:`NULL_KINDS` and :data:`KIND_KEEPS` (the registry), :func:`make_null`
(``make_null(checkpoint, kind, seed)``), :func:`null_graph`,
:func:`parse_nulls` (``"degree-sign:5"``), :func:`null_seeds`,
:func:`write_null`, :func:`run_on_nulls`, :func:`compare_to_nulls` and
:class:`NullComparison`.
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
    from flyviz.model.formats.connectorch import ConnecTorchBrain

#: The kinds of null model, in the order ``--kind`` lists them: a ladder from the one that
#: keeps the most of the real wiring to the one that keeps the least.
NULL_KINDS: tuple[str, ...] = ("degree", "degree-sign", "type-pairs", "weights", "sign", "erdos")

#: What each kind keeps, in one line (``--help``, the documentation); the tests check each.
KIND_KEEPS = {
    "degree": "every neuron's in- and out-degree; each synapse keeps its presynaptic neuron "
              "and weight (so each neuron's outgoing weights and signs, and the sign counts)",
    "degree-sign": "as degree, and every neuron's in- and out-degree per sign (its "
                   "excitatory and inhibitory inputs and outputs counted apart)",
    "type-pairs": "as degree, and the synapses between each (presynaptic, postsynaptic) "
                  "cell-type pair: every neuron's in- and out-degree per partner type",
    "weights": "the synapses (the topology); the weights permuted over them",
    "sign": "the synapses and their magnitudes; the signs shuffled over the edges "
            "(the sign counts kept)",
    "erdos": "the number of neurons and synapses and the weights' multiset; the endpoints "
             "uniformly random (no self-loops or duplicates)",
}

#: The most nulls one ``--nulls`` may ask for: each is a whole run of the analysis, and a
#: larger number is a typing slip (a billion would be refused only after hours).
MAX_NULLS = 1000

#: The random stream of each kind: fixed numbers, so that a kind added to the ladder never
#: changes the nulls the others draw for a seed.
_STREAMS = {"degree": 0, "sign": 1, "weights": 2, "erdos": 3, "degree-sign": 4,
            "type-pairs": 5}

#: A degree null gives up after this many rounds of repair swaps (a graph whose degrees
#: admit almost no other simple graph; the demo brain needs a handful).
MAX_REPAIR_ROUNDS = 200
#: Rounds without fewer offences after which a rewiring within classes gives the classes
#: that hold them their own synapses back (see :func:`degree_rewire`).
_STALLED_ROUNDS = 20
#: Swaps a repair round proposes in all, spread over the offending edges (1 to 256 each:
#: one for each of many, more for the last few, which sit at the hubs).
_REPAIR_PROPOSALS = 1 << 16

#: The key under which a null's record is kept, in the checkpoint's metadata and in the
#: written checkpoint's manifest (``config.json`` for ngxson's layout).
RECORD_KEY = "null_model"
#: The manifest key of the record in the written files.
FILE_RECORD_KEY = "flyviz_null"

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
    return np.random.default_rng(np.random.SeedSequence([seed, _STREAMS[kind]]))


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


def _sort_order(keys: np.ndarray, limit: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for int64 keys in ``[0, limit)``.

    Where key and position fit in 64 bits together (any graph up to a million
    neurons and 16 M edges), they are packed into one word and sorted as plain
    integers: several times faster than an argsort of 9 M keys. Equal keys
    keep their order.
    """
    index_bits = max(1, int(keys.size - 1).bit_length())
    if int(limit - 1).bit_length() + index_bits > 63:
        return np.argsort(keys, kind="stable")
    packed = (keys << np.int64(index_bits)) | np.arange(keys.size, dtype=np.int64)
    packed.sort()
    return packed & np.int64((1 << index_bits) - 1)


def _in_sorted(keys: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """Mask of the entries of ``keys`` that occur in the sorted array ``ordered``."""
    if ordered.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    # Searching in key order walks ``ordered`` forwards (cache-friendly): several times
    # faster than random probes into 9 M keys.
    order = np.argsort(keys)
    sorted_keys = keys[order]
    where = np.minimum(np.searchsorted(ordered, sorted_keys), ordered.size - 1)
    found = np.empty(keys.shape, dtype=bool)
    found[order] = ordered[where] == sorted_keys
    return found


def _replace_keys(ordered: np.ndarray, removed: np.ndarray, added: np.ndarray) -> np.ndarray:
    """The sorted multiset ``ordered`` less one copy of each of ``removed`` (all present,
    with multiplicity), plus ``added``."""
    removed = np.sort(removed)
    position = np.searchsorted(ordered, removed, side="left")
    if removed.size > 1:  # a key removed twice loses its first two copies
        start = np.r_[True, removed[1:] != removed[:-1]]
        steps = np.arange(removed.size)
        position += steps - np.maximum.accumulate(np.where(start, steps, 0))
    keep = np.ones(ordered.size, dtype=bool)
    keep[position] = False
    kept = ordered[keep]
    added = np.sort(added)
    return np.insert(kept, np.searchsorted(kept, added), added)


def _offending(edges: np.ndarray, source: np.ndarray, target: np.ndarray, n: int,
               ordered: np.ndarray) -> np.ndarray:
    """Which of ``edges`` (sorted, distinct) are self-loops or surplus copies of a synapse.

    ``ordered`` is the sorted multiset of every edge's key ``source * n +
    target``. Of the ``c`` copies of a key, ``c - 1`` are surplus: those
    among ``edges`` (the edges outside it hold distinct keys); where all of
    them are among ``edges``, the first stays as the synapse.
    """
    loop = source[edges] == target[edges]
    others = edges[~loop]
    keys = source[others] * n + target[others]
    order = np.argsort(keys, kind="stable")
    others, keys = others[order], keys[order]
    unique, first, among = np.unique(keys, return_index=True, return_counts=True)
    copies = (np.searchsorted(ordered, unique, side="right")
              - np.searchsorted(ordered, unique, side="left"))
    surplus = np.ones(others.size, dtype=bool)
    surplus[first[copies == among]] = False
    return np.sort(np.concatenate([edges[loop], others[surplus]]))


def degree_rewire(n: int, source: np.ndarray, target: np.ndarray, rng: np.random.Generator,
                  classes: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """New targets for the edges that keep every in- and out-degree: a simple random graph.

    Parameters
    ----------
    n
        Number of neurons.
    source, target
        The edges (int64), the real graph's.
    rng
        The random stream.
    classes
        One whole number per edge (its sign, its cell-type pair), or ``None``
        for one class: the targets are permuted, and the repair swaps made,
        only among edges of the same class, so that every neuron also keeps
        its in- and out-degree within each class.

    Returns
    -------
    tuple
        The new targets (``source[e]`` keeps edge ``e``'s presynaptic neuron,
        so its weight and sign) and what the rewiring did: ``self_loops`` and
        ``duplicates`` (surplus copies) the permutation made, ``repair_swaps``
        and ``repair_rounds``.

    Raises
    ------
    InputError
        When :data:`MAX_REPAIR_ROUNDS` rounds leave offending edges: degrees
        that admit (almost) no other simple graph, such as a complete one.
        With ``classes``, after 20 rounds that repair nothing more, the
        classes that still hold offences keep their real synapses instead
        (``kept_classes`` and ``kept_edges`` in the returned facts): a class
        between two small, almost completely wired cell types has no other
        arrangement. The error is raised only where that leaves offences.

    Notes
    -----
    The targets are permuted uniformly over all edges. Each neuron keeps its
    count as a target (its in-degree) and every edge its source (out-degrees,
    weights, signs). This is the directed configuration model's stub matching
    (each in-stub matched to a uniformly random out-stub), and every simple
    graph with these degrees (and each assignment of a neuron's synapses to
    its targets) comes from the same number of matchings: conditioned on being
    simple, the matching is uniform over the simple graphs with these degrees,
    the distribution a long chain of double edge swaps mixes towards.

    The matching makes some self-loops and second copies of a synapse (on the
    demo brain about 160 self-loops and 99,000 copies, 1.1 % of its 9 M
    synapses). Drawing whole matchings until one is
    simple would never end at this size, so only the offending edges are
    repaired, the standard fix: each round proposes, for every offending edge
    a->b, a double edge swap with a uniformly random partner c->d (to a->d,
    c->b) that makes neither a self-loop nor an existing edge, the partner not
    offending itself (each edge tries several partners and takes the first
    that passes). Where none passes, a swap making exactly one existing edge
    moves the offence to another place instead, to be repaired there (a copy
    between two hubs that each reach most of the brain may have no repair in
    its own place). Proposals that make the same edge or share a partner are
    dropped, and the rest are applied together; the demo brain needs three
    rounds.

    The result is uniform over the simple graphs with these degrees up to the
    repair, whose bias is confined to the repaired edges: small where they
    are few, as on the demo brain, but measurable on a dense toy graph: in
    20,000 draws for a 9-synapse, 6-neuron graph, its 1,050 simple
    realisations came out 3 to 42 times each, where uniform sampling gives
    19 +- 4.4 (chi-square p < 1e-100).
    """
    edges = source.size
    if classes is None:
        target = target[rng.permutation(edges)]
    else:
        # Edges grouped by class, in random order within each: the targets of a group handed
        # back to the same group's places are a uniform permutation within every class.
        _, class_of = np.unique(np.asarray(classes), return_inverse=True)
        class_of = class_of.astype(np.int64).ravel()
        members = np.argsort(class_of, kind="stable")
        shuffled = np.lexsort((rng.random(edges), class_of))
        original = target
        target = target.copy()
        target[members] = target[shuffled]
        class_size = np.bincount(class_of).astype(np.int64)
        class_start = np.concatenate([[0], np.cumsum(class_size)[:-1]]).astype(np.int64)
    keys = source * n + target
    order = _sort_order(keys, n * n)
    ordered = keys[order]
    surplus = order[1:][ordered[1:] == ordered[:-1]]  # all but the first copy of each key
    loops = np.flatnonzero(source == target)
    facts = {"self_loops": int(loops.size), "duplicates": int(surplus.size),
             "repair_swaps": 0, "repair_rounds": 0}
    bad = np.union1d(loops, surplus)
    del keys, order
    fewest, stalled = bad.size, 0
    while bad.size:
        if classes is not None and stalled == _STALLED_ROUNDS:
            return _keep_stuck_classes(n, source, target, original, class_of, bad, facts)
        if facts["repair_rounds"] == MAX_REPAIR_ROUNDS:
            raise InputError(f"a degree null of this graph cannot be made: after "
                             f"{MAX_REPAIR_ROUNDS} rounds {bad.size:,} edges are still "
                             "self-loops or duplicates (its degrees leave almost no other "
                             "simple graph)")
        facts["repair_rounds"] += 1
        # Several random partners per offending edge a->b, the first that works taken
        # (uniform among those that work): an edge between hubs finds one.
        tries = int(np.clip(_REPAIR_PROPOSALS // bad.size, 1, 256))
        sa, sb = np.repeat(source[bad], tries), np.repeat(target[bad], tries)
        if classes is None:
            partner = rng.integers(0, edges, size=bad.size * tries)
        else:  # a partner of the same class
            own = np.repeat(class_of[bad], tries)
            partner = members[class_start[own] + rng.integers(0, class_size[own])]
        sc, sd = source[partner], target[partner]
        made_first, made_second = sa * n + sd, sc * n + sb
        allowed = (sa != sd) & (sc != sb) & ~_in_sorted(partner, bad)
        first_exists = _in_sorted(made_first, ordered)
        second_exists = _in_sorted(made_second, ordered)
        # A repair makes two new edges. Where none is found, a move makes one new edge and
        # one copy, so that the offence moves elsewhere (to a->d, or to the partner's c->b)
        # and keeps looking: a duplicate between two hubs that reach most of the brain may
        # have no repair at all in its place.
        repairs = (allowed & ~first_exists & ~second_exists).reshape(bad.size, tries)
        moves = (allowed & (first_exists != second_exists)).reshape(bad.size, tries)
        rows = np.arange(bad.size) * tries
        pick = np.where(repairs.any(axis=1), rows + repairs.argmax(axis=1),
                        rows + moves.argmax(axis=1))
        found = repairs.any(axis=1) | moves.any(axis=1)
        sa, sb, sc, sd = sa[pick], sb[pick], sc[pick], sd[pick]
        partner, made_first, made_second = partner[pick], made_first[pick], made_second[pick]
        chosen = np.flatnonzero(found)
        chosen = chosen[np.unique(partner[chosen], return_index=True)[1]]  # a partner once
        made = np.concatenate([made_first[chosen], made_second[chosen]])
        made.sort()
        clashing = made[1:][made[1:] == made[:-1]]
        if clashing.size:  # two proposals of this round making the same edge
            clash = np.isin(made_first[chosen], clashing) | np.isin(made_second[chosen],
                                                                     clashing)
            chosen = chosen[~clash]
            made = np.sort(np.concatenate([made_first[chosen], made_second[chosen]]))
        removed = np.concatenate([sa[chosen] * n + sb[chosen], sc[chosen] * n + sd[chosen]])
        target[bad[chosen]] = sd[chosen]
        target[partner[chosen]] = sb[chosen]
        ordered = _replace_keys(ordered, removed, made)
        facts["repair_swaps"] += int(chosen.size)
        # The offences left: among the offending edges and the partners of this round (a
        # move's partner may now be the copy); no other edge changed.
        bad = _offending(np.union1d(bad, partner[chosen]), source, target, n, ordered)
        fewest, stalled = min(fewest, bad.size), 0 if bad.size < fewest else stalled + 1
    return target, facts


def _keep_stuck_classes(n: int, source: np.ndarray, target: np.ndarray, original: np.ndarray,
                        class_of: np.ndarray, bad: np.ndarray, facts: dict[str, int]
                        ) -> tuple[np.ndarray, dict[str, int]]:
    """Give the classes whose offences no swap repairs their own synapses back.

    A cell-type pair between two small types that are wired almost completely
    admits (almost) no other simple arrangement. Its synapses keep their real
    targets; where a synapse's two ends fix its class (cell-type pairs) that
    cannot clash with another class, so the graph is simple. The record
    counts what stayed (``kept_classes``, ``kept_edges``).
    """
    stuck = np.unique(class_of[bad])
    back = np.isin(class_of, stuck)
    target = target.copy()
    target[back] = original[back]
    keys = np.sort(source * n + target)
    if np.any(source == target) or np.any(keys[1:] == keys[:-1]):
        raise InputError(f"a degree null of this graph cannot be made: {bad.size:,} edges stay "
                         "self-loops or duplicates (its degrees leave almost no other simple "
                         "graph)")
    facts.update(kept_classes=int(stuck.size), kept_edges=int(np.count_nonzero(back)))
    return target, facts


def _erdos_edges(n: int, edges: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``edges`` distinct (source, target) pairs, uniform over the n(n-1) off-diagonal ones."""
    pairs = n * (n - 1)
    if edges > pairs:
        raise InputError(f"an Erdős–Rényi null of {edges:,} edges does not fit on {n:,} neurons "
                         "without self-loops")
    from flyviz.model.synthetic import sorted_unique

    flat = sorted_unique(rng.integers(0, pairs, size=int(edges * 1.02) + 16, dtype=np.int64))
    while flat.size < edges:
        more = rng.integers(0, pairs, size=edges - flat.size + 16, dtype=np.int64)
        flat = sorted_unique(np.concatenate([flat, more]))
    if flat.size > edges:
        flat = flat[np.sort(rng.choice(flat.size, size=edges, replace=False))]
    target = flat // (n - 1)
    column = flat % (n - 1)
    source = column + (column >= target)  # skip the diagonal
    return source.astype(np.int64), target.astype(np.int64)


def _type_codes(ckpt: "Checkpoint") -> np.ndarray:
    """Each neuron's cell type as a whole number (int64); a type-pairs null needs them."""
    anatomy = ckpt.anatomy
    types = None if anatomy is None else anatomy.cell_type
    if types is None:
        raise InputError("a type-pairs null needs the neurons' cell types, and this model has "
                         "none (no anatomy with cell_type); choose another --kind, e.g. degree")
    return _codes(types)


def _codes(types: Any) -> np.ndarray:
    """Each neuron's cell type as a whole number (int64); no type counts as the type ``""``."""
    _, codes = np.unique(np.asarray([str(t or "") for t in types], dtype=object).astype(str),
                         return_inverse=True)
    return codes.astype(np.int64).ravel()


def _pair_classes(types: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each edge's (presynaptic type, postsynaptic type) pair as one whole number."""
    return types[source] * (int(types.max()) + 1) + types[target]


def check_null_fits(ckpt: "Checkpoint", kind: str) -> None:
    """Raise :class:`InputError` where a null of ``kind`` cannot be made of ``ckpt`` for want
    of what it keeps (a type-pairs null of a model without cell types), before any work."""
    check_kind(kind)
    if kind == "type-pairs":
        _type_codes(ckpt)


def null_graph(ckpt: "Checkpoint", kind: str, seed: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The null graph of ``ckpt``: ``(w_offsets, w_indices, w_values, facts)``.

    ``facts`` holds what the randomisation did (for a degree null the
    self-loops and duplicates the permutation made and the swaps that
    repaired them), stored in the null's record.
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
    if kind in ("degree", "degree-sign", "type-pairs"):
        classes = None
        if kind == "degree-sign":
            classes = np.sign(weight).astype(np.int8)
        elif kind == "type-pairs":
            classes = _pair_classes(_type_codes(ckpt), source, target)
        target, rewired = degree_rewire(n, source, target, rng, classes)
        within = {"degree-sign": " within each sign",
                  "type-pairs": " within each cell-type pair"}.get(kind, "")
        facts.update(method=f"target permutation{within}, repaired by double edge swaps",
                     **rewired)
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
    if isinstance(record.get("repair_swaps"), int):
        swaps = f", targets permuted, {record['repair_swaps']:,} repair swaps"
        if isinstance(record.get("kept_edges"), int) and isinstance(record.get("kept_classes"),
                                                                   int):
            classes = record["kept_classes"]
            swaps += (f", {record['kept_edges']:,} synapses of {classes:,} "
                      f"class{'es' if classes != 1 else ''} no swap rearranges kept")
    elif isinstance(record.get("swaps"), int):  # a null written by the earlier swap chain
        swaps = f", {record['swaps']:,} swaps"
    else:
        swaps = ""
    return (f"{record['kind']} null, seed {record.get('seed')}{swaps}, of {name}"
            + (f" (weights {weights}...)" if weights else ""))


# ------------------------------------------------------------------ writing
def check_output_folder(out: str | Path, source: str | Path | None = None) -> Path:
    """Refuse an ``--out`` folder that exists, cannot be made, or is the model's own. A
    missing parent folder is no reason: it is made when the null is written
    (:func:`flyviz.fileio.new_folder`), as other commands make their output's."""
    from flyviz.fileio import check_output_path

    out = Path(out).expanduser()
    if source is not None:
        local = Path(source).expanduser()
        if local.exists() and local.resolve() == out.resolve():
            raise InputError(f"--out {out} is the model's own folder; give a new folder")
    if out.exists():
        raise InputError(f"--out {out} exists; give a new folder (a null is never written "
                         "over anything)")
    # the nearest folder that exists must be one and take files
    return check_output_path(out, "--out")


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
    extensions = checkpoint.operator_extensions()
    if extensions:
        # The layouts a null is written in carry the Fly LLM's operator only: a web export
        # of a FlyGPT model would lose its per-neuron leak and microsteps, or fail halfway.
        raise InputError(f"a null of {checkpoint.name!r} cannot be written yet: nulls are "
                         "written in the Fly LLM's layouts, which cannot hold what its "
                         f"operator adds ({', '.join(extensions)}); in memory, make_null "
                         "makes one")
    from flyviz.fileio import new_folder

    null = make_null(checkpoint, kind, seed)
    with new_folder(out, f"--out {out}") as scratch:
        _write_checkpoint(null, scratch, _source_layout(checkpoint), golden)
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


# ------------------------------------------------------------------ ConnecTorch brains
def _connectorch_sign_null(brain: "ConnecTorchBrain", rng: np.random.Generator
                           ) -> dict[str, np.ndarray]:
    """The edge columns with the nonzero signs shuffled over the edges that carry one: the
    ``sign`` column's (a 0, unknown, stays), else the ``weight`` column's (magnitudes kept)."""
    from flyviz.model.formats.connectorch import SIGN, WEIGHT

    columns = dict(brain.edge_columns)
    if SIGN in columns:
        signs = columns[SIGN].copy()
        signed = np.flatnonzero(signs)
        signs[signed] = signs[signed][rng.permutation(signed.size)]
        columns[SIGN] = signs
        return columns
    weight = columns.get(WEIGHT)
    if weight is not None and weight.dtype.kind in "if" and (weight < 0).any():
        values = weight.copy()
        signed = np.flatnonzero(values)
        signs = np.sign(values[signed])[rng.permutation(signed.size)]
        values[signed] = np.abs(values[signed]) * signs
        columns[WEIGHT] = values
        return columns
    raise InputError("a sign null needs signed edges (a sign column or negative weights); "
                     "this brain has neither: choose another --kind, e.g. degree")


def connectorch_null(brain: "ConnecTorchBrain", kind: str, seed: int) -> "ConnecTorchBrain":
    """A null of a ConnecTorch brain (:mod:`flyviz.model.formats.connectorch`), in memory.

    The nodes and their columns are the brain's own. ``degree``, ``degree-sign`` and
    ``type-pairs`` rewire the targets as :func:`degree_rewire` does, every edge keeping its
    source and all its attribute columns (``synapse_count``, ``weight``, ``sign``, ...); the
    classes are the sign of each edge's signed weight
    (:func:`~flyviz.model.formats.connectorch.signed_weights`) or the (source, target) pair of
    the node column ``cell_type``. ``weights`` permutes the edges' attribute rows over the
    same edges; ``sign`` shuffles the nonzero signs (of ``sign``, else of ``weight``); ``erdos``
    draws uniform endpoints and permutes the attribute rows over them. The edges come back in
    ConnecTorch's order; the provenance's ``history`` gains the null's record, which
    ``null_model`` also holds (kind, seed, what the rewiring did, the source's name and
    fingerprint).

    Raises
    ------
    InputError
        An unknown kind, a negative seed, a type-pairs null without ``cell_type``, a sign null
        of an unsigned graph, degrees that admit no other simple graph.
    """
    from flyviz.model.formats.connectorch import (ConnecTorchBrain, canonical_edges,
                                                  fingerprint, signed_weights)

    check_kind(kind)
    seed = check_seed(seed)
    rng = _rng(kind, seed)
    n = brain.num_nodes
    source, target = brain.source_index, brain.target_index
    columns = dict(brain.edge_columns)
    facts: dict[str, Any] = {}
    if kind == "sign":
        columns = _connectorch_sign_null(brain, rng)
    elif kind in ("weights", "erdos"):
        rows = rng.permutation(brain.num_edges)
        columns = {name: values[rows] for name, values in columns.items()}
        if kind == "erdos":
            source, target = _erdos_edges(n, brain.num_edges, rng)
    else:
        classes = None
        if kind == "degree-sign":
            classes = np.sign(signed_weights(brain)[0]).astype(np.int8)
        elif kind == "type-pairs":
            types = brain.node_columns.get("cell_type")
            if types is None:
                raise InputError("a type-pairs null needs the nodes' cell types (a cell_type "
                                 "node column), and this brain has none; choose another "
                                 "--kind, e.g. degree")
            classes = _pair_classes(_codes(types.tolist()), source, target)
        target, rewired = degree_rewire(n, source, target, rng, classes)
        within = {"degree-sign": " within each sign",
                  "type-pairs": " within each cell-type pair"}.get(kind, "")
        facts.update(method=f"target permutation{within}, repaired by double edge swaps",
                     **rewired)
    source, target, columns, _ = canonical_edges(source, target, columns, aggregate=False)
    folder = brain.path
    record = {"kind": kind, "seed": seed, **facts,
              "source": {"name": folder.name if folder is not None else "a ConnecTorch brain",
                         "spec": str(folder) if folder is not None else None,
                         "fingerprint": fingerprint(brain)}}
    provenance = dict(brain.provenance)
    provenance["history"] = [*list(provenance.get("history") or []),
                             {"op": "flyviz null", **record}]
    provenance[RECORD_KEY] = record
    return ConnecTorchBrain(brain.node_ids, dict(brain.node_columns), source, target, columns,
                            provenance)


def write_connectorch_null(path: str | Path, kind: str, seed: int, out: str | Path) -> Path:
    """Read the ConnecTorch brain at ``path`` (both digests checked), make its null
    (:func:`connectorch_null`) and write it as a new ``.ct`` folder ``out`` with its own
    fingerprint and content hash; ``flyviz simulate`` and ``flyviz null`` take it as any
    ``.ct`` brain."""
    from flyviz.model.formats.connectorch import read_brain, write_brain

    check_kind(kind)
    seed = check_seed(seed)
    out = check_output_folder(out, path)
    return write_brain(connectorch_null(read_brain(path), kind, seed), out)


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


def check_null_count(count: Any) -> int:
    """``count`` if it is a whole number from 0 to :data:`MAX_NULLS`, else an
    :class:`InputError` (before any work: each null is a whole run)."""
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise InputError(f"--nulls {count!r} must be a whole number >= 0")
    if count > MAX_NULLS:
        raise InputError(f"--nulls {count} is more than {MAX_NULLS:,}, the most one run takes "
                         "(each null is a whole run of the analysis); ask for fewer")
    return int(count)


def parse_nulls(text: str) -> tuple[str | None, int]:
    """``--nulls``'s value: ``"N"`` -> ``(None, N)``, ``"KIND:N"`` -> ``(KIND, N)``, checked.

    ``None`` leaves the kind to ``--null-kind`` (default ``degree``).

    Raises
    ------
    InputError
        For an unknown kind, a count that is not a whole number from 0 to
        :data:`MAX_NULLS`, or another shape.
    """
    given = str(text).strip()
    kind: str | None = None
    number = given
    if ":" in given:
        kind, number = (part.strip() for part in given.split(":", 1))
        if kind not in NULL_KINDS:
            raise InputError(f"--nulls {given!r}: unknown null kind {kind!r}; write KIND:N with "
                             f"KIND one of {', '.join(NULL_KINDS)}, e.g. degree-sign:5")
    if not number.lstrip("-").isdigit():
        raise InputError(f"--nulls {given!r} must be N or KIND:N with N a whole number, "
                         "e.g. --nulls 5 or --nulls degree-sign:5")
    return kind, check_null_count(int(number))


def null_seeds(count: int, start: int = 0) -> list[int]:
    """``count`` seeds from ``start`` (``--nulls N --null-seed S``), checked."""
    count = check_null_count(count)
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
    # The nulls' folders carry this call's own prefix, so that an interrupt (Ctrl+C, or
    # SIGTERM turned into one) arriving anywhere, even between a folder's creation and the
    # context that would remove it, still finds and removes every one of them.
    parent = Path(tempfile.gettempdir() if workdir is None else workdir)
    prefix = f"flyviz-null-{os.getpid()}-{id(results):x}-"
    try:
        for number, seed in enumerate(seeds, 1):
            if log is not None:
                log(f"null {number} of {len(seeds)}: {kind}, seed {seed}")
            if in_memory:
                results.append(work(NullModel(kind, seed, make_null(real, kind, seed))))
                continue
            with tempfile.TemporaryDirectory(prefix=prefix, dir=str(parent)) as tmp:
                folder = write_checkpoint_null(real, kind, seed, Path(tmp) / f"{kind}-{seed}",
                                               golden=False)
                from flyviz.model.resolve import load_model

                loaded = load_model(str(folder))
                results.append(work(NullModel(kind, seed, loaded, str(folder))))
                del loaded
    finally:
        if not in_memory:
            for left in parent.glob(f"{prefix}*"):
                shutil.rmtree(left, ignore_errors=True)
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
        Two-sided: ``(1 + #{|null - mean| >= |real - mean|}) / (1 + n)``, the chance
        that a null lies at least as far from the nulls' mean, either way.
    n
        The number of nulls.
    higher_is_more
        Which way counts as "at least as extreme as the real one" (one-sided).
    nulls
        The null values, in seed order.
    two_sided
        Whether ``p`` counts both ways (no direction is the hypothesis).
    """

    real: float
    mean: float
    sd: float
    z: float
    p: float
    n: int
    higher_is_more: bool = True
    nulls: tuple[float, ...] = ()
    two_sided: bool = False

    def line(self) -> str:
        """The printed row: ``real R | nulls mean ± sd (n=N) | z Z | p P``; without the
        ``z`` part where it is undefined (one null, or every value the same: NaN)."""
        z = _number(self.z) if not math.isfinite(self.z) else f"{self.z:+.2f}"
        return (f"real {_number(self.real)} | nulls {_number(self.mean)} ± {_number(self.sd)} "
                f"(n={self.n}) | " + ("" if math.isnan(self.z) else f"z {z} | ")
                + f"p {self.p:.3g}" + (" two-sided" if self.two_sided else ""))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (NaN and inf as ``None``)."""
        def clean(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        return {"real": clean(self.real), "mean": clean(self.mean), "sd": clean(self.sd),
                "z": clean(self.z), "p": float(self.p), "n": self.n,
                "higher_is_more": self.higher_is_more, "two_sided": self.two_sided,
                "nulls": [clean(v) for v in self.nulls]}


def compare_to_nulls(real: float, nulls: Sequence[float], *,
                     higher_is_more: bool = True, two_sided: bool = False) -> NullComparison:
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
    two_sided
        Count the nulls at least as far from their mean as the real value, either way
        (``higher_is_more`` is then ignored): for a property where no direction is the
        hypothesis, so that a real value far below every null is as extreme as one far
        above.

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
    if two_sided:
        # a null equal to the real value counts, whatever rounding left in the distances
        far = np.abs(values - mean) >= abs(real - mean) * (1 - 1e-12)
        reached = int(np.count_nonzero(far | (values == real)))
    else:
        reached = int(np.count_nonzero(values >= real if higher_is_more else values <= real))
    p = (1 + reached) / (1 + values.size)
    return NullComparison(real=real, mean=mean, sd=sd, z=z, p=p, n=int(values.size),
                          higher_is_more=higher_is_more, nulls=tuple(float(v) for v in values),
                          two_sided=two_sided)


__all__ = ["FILE_RECORD_KEY", "KIND_KEEPS", "MAX_NULLS", "MAX_REPAIR_ROUNDS", "NULL_KINDS",
           "NullComparison", "NullModel", "RECORD_KEY", "check_kind", "check_null_count",
           "check_null_fits",
           "check_output_folder", "check_seed", "compare_to_nulls", "connectorch_null",
           "degree_rewire",
           "describe_record", "make_null", "null_graph", "null_seeds", "parse_nulls",
           "run_on_nulls", "write_checkpoint_null", "write_connectorch_null", "write_null"]
