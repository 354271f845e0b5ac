"""fly-wordbrain's graph-control arm: the rewired graph its weights were trained on.

The shuffled-10k release (``K32rank64shuffled10k``, ``fly-family-2026.md`` §1.6)
was trained on a graph that exists in no dataset: the fly-connectome-49k
graph with its presynaptic index array permuted from a recorded seed, then
repaired to a simple graph. Row offsets and the weight array are unchanged,
so each weight stays in its CSR slot while the slot's presynaptic neuron
moves, and the columns inside a row are no longer sorted.

:func:`control_indices` rebuilds that array as the authors' trainer does
(``scripts/train_connectorch_control.py`` @ ``8383c8f6``), call for call on
the same NumPy random streams:

1. ``g = numpy.random.default_rng(seed)``; the measured indices, as int32,
   are shuffled whole with ``g.shuffle``.
2. Up to 8 repair rounds. A round lists the bad slots: self-loops, and every
   slot repeating a (destination, source) pair but the first, all in the
   stable sort order of ``destination * n + source``. For each bad slot it
   draws up to 64 partners ``g.integers(0, E)`` and swaps the two slots'
   sources when the partner is another slot, neither new pair is a self-loop
   or already present, and the two new pairs differ; the set of present pairs
   then drops the partner's old pair and gains both new ones (the bad slot's
   own old pair stays in it). ``repaired_slots`` counts the swaps.
3. A graph that still has bad slots after 8 rounds is refused.

NumPy does not promise its random streams across versions, so a rebuild is
only trusted when its digest (:func:`~flyviz.model.formats.common.array_digest`
of the int32 array) equals the one the release records; the loader
(:mod:`flyviz.model.formats.wordbrain`) stops otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import array_digest

__all__ = ["CONTROL_MODES", "ControlGraph", "REPAIR_ATTEMPTS", "REPAIR_ROUNDS",
           "control_indices", "control_receipt"]

#: The rewiring modes of the authors' trainer flyviz rebuilds (``zero`` keeps the
#: wiring and zeroes the weights; no release of it exists).
CONTROL_MODES = ("shuffle",)
#: Partners tried per bad slot, and repair rounds, as the authors' trainer has them.
REPAIR_ATTEMPTS = 64
REPAIR_ROUNDS = 8


@dataclass(frozen=True)
class ControlGraph:
    """A rebuilt control graph's presynaptic indices and what the rebuild did.

    Attributes
    ----------
    indices
        int32, one per CSR slot, in the measured graph's slot order.
    repaired_slots
        Swaps the repair made.
    digest
        :func:`~flyviz.model.formats.common.array_digest` of ``indices`` as int32.
    """

    indices: np.ndarray
    repaired_slots: int
    digest: str


class _PresentPairs:
    """The set of (destination, source) keys present, as a sorted array plus edits.

    The authors keep a Python set of every pair (9 million on the real graph);
    this answers the same membership questions from the sorted unique keys of
    the round and the few keys the repair has added or dropped since.
    """

    def __init__(self, keys: np.ndarray) -> None:
        self._base = keys
        self._added: set[int] = set()
        self._dropped: set[int] = set()

    def __contains__(self, key: int) -> bool:
        if key in self._added:
            return True
        if key in self._dropped:
            return False
        at = int(np.searchsorted(self._base, key))
        return at < self._base.size and int(self._base[at]) == key

    def add(self, key: int) -> None:
        self._dropped.discard(key)
        self._added.add(key)

    def discard(self, key: int) -> None:
        self._added.discard(key)
        self._dropped.add(key)


def _bad_slots(source: np.ndarray, destination: np.ndarray,
               neurons: int) -> tuple[np.ndarray, _PresentPairs]:
    """Self-loops and repeated pairs (all but the first in a stable sort of the keys).

    Returns the bad slots in that sort order, and the pairs present: every key
    whose first slot is not a self-loop.
    """
    keys = destination * neurons + source.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.ones(sorted_keys.size, dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    loop = (source == destination)[order]
    bad = order[loop | ~first]
    present = _PresentPairs(sorted_keys[first & ~loop])
    return bad, present


def _repair(source: np.ndarray, destination: np.ndarray, neurons: int,
            generator: np.random.Generator) -> int:
    """Swap sources between slots until no self-loop or repeated pair is left (in place)."""
    edges = int(source.size)
    repaired = 0
    for _ in range(REPAIR_ROUNDS):
        bad, present = _bad_slots(source, destination, neurons)
        if bad.size == 0:
            return repaired
        for slot in bad.tolist():
            for _ in range(REPAIR_ATTEMPTS):
                other = int(generator.integers(0, edges))
                if other == slot:
                    continue
                dst_slot, dst_other = int(destination[slot]), int(destination[other])
                src_slot, src_other = int(source[slot]), int(source[other])
                if dst_slot == src_other or dst_other == src_slot:
                    continue  # a swap that makes a self-loop
                key_slot = dst_slot * neurons + src_other
                key_other = dst_other * neurons + src_slot
                if key_slot in present or key_other in present or key_slot == key_other:
                    continue
                present.discard(dst_other * neurons + src_other)
                source[slot], source[other] = src_other, src_slot
                present.add(key_slot)
                present.add(key_other)
                repaired += 1
                break
    left, _ = _bad_slots(source, destination, neurons)
    if left.size:
        raise CheckpointError(f"the control graph cannot be made simple: {left.size:,} slots "
                              f"still repeat an edge or make a self-loop after "
                              f"{REPAIR_ROUNDS} repair rounds; this graph and seed cannot give "
                              "the release's control graph")
    return repaired


def control_indices(offsets: np.ndarray, source: np.ndarray, mode: str,
                    seed: int) -> ControlGraph:
    """Rebuild a graph-control arm's presynaptic indices from the measured graph.

    Parameters
    ----------
    offsets
        The measured graph's CSR row offsets (row = postsynaptic neuron).
    source
        Its presynaptic indices (any integer dtype; cast to int32 as the
        trainer read them).
    mode
        The release's ``graph_control.mode``; only ``"shuffle"`` is rebuilt.
    seed
        The release's ``graph_control.seed`` (1729 for shuffled-10k).

    Returns
    -------
    ControlGraph

    Raises
    ------
    CheckpointError
        For another mode, a seed that is not a whole number >= 0, or a graph the repair
        cannot make simple.
    """
    if mode not in CONTROL_MODES:
        raise CheckpointError(f"graph control mode {mode!r} is not one flyviz rebuilds "
                              f"({', '.join(CONTROL_MODES)}); these weights cannot be run")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise CheckpointError(f"graph control seed {seed!r} is not a whole number >= 0; "
                              "NumPy's generator takes no other")
    offsets = np.asarray(offsets, dtype=np.int64)
    neurons = int(offsets.shape[0]) - 1
    generator = np.random.default_rng(int(seed))
    destination = np.repeat(np.arange(neurons, dtype=np.int64), np.diff(offsets))
    shuffled = np.array(source, dtype=np.int32, copy=True)
    generator.shuffle(shuffled)
    repaired = _repair(shuffled, destination, neurons, generator)
    return ControlGraph(shuffled, repaired, array_digest(shuffled, "int32"))


def control_receipt(offsets: np.ndarray, measured: np.ndarray, values: np.ndarray,
                    control: np.ndarray, *, mode: str, seed: int,
                    repaired_slots: int) -> dict[str, Any]:
    """The trainer's ``graph-control.json`` receipt for a control graph.

    Every key the authors' receipt has, computed as their trainer does:
    ``preserved`` (degrees, weights, offsets), ``changed`` (repaired slots,
    slots keeping their source, fraction rewired, self-loops, repeated
    pairs) and the int32 index / float32 weight digests before and after.
    ``created_at_utc``, ``control_source_sha256`` and
    ``frozen_buffers_sha256`` are the writer's to add.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    neurons = int(offsets.shape[0]) - 1
    measured = np.asarray(measured, dtype=np.int32)
    control = np.asarray(control, dtype=np.int32)
    destination = np.repeat(np.arange(neurons, dtype=np.int64), np.diff(offsets))
    unchanged = int((control == measured).sum())
    pairs = destination * neurons + control.astype(np.int64)
    values_digest = array_digest(np.asarray(values, dtype=np.float32), "float32")
    return {
        "mode": mode, "seed": int(seed), "neurons": neurons, "edges": int(measured.size),
        "preserved": {
            "in_degree_identical": True,
            "out_degree_identical": bool(np.array_equal(
                np.bincount(measured, minlength=neurons), np.bincount(control, minlength=neurons))),
            "weight_multiset_identical": True,
            "row_offsets_untouched": True,
        },
        "changed": {
            "repaired_slots": int(repaired_slots),
            "edges_landing_on_their_original_source": unchanged,
            "fraction_rewired": 1 - unchanged / measured.size if measured.size else 0.0,
            "self_loops_created": int((control == destination).sum()),
            "duplicate_edges_created": int(pairs.size - np.unique(pairs).size),
        },
        "original_graph_sha256": {"w_indices": array_digest(measured, "int32"),
                                  "w_values": values_digest},
        "control_graph_sha256": {"w_indices": array_digest(control, "int32"),
                                 "w_values": values_digest},
    }
