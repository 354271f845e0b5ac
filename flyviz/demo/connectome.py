"""A synthetic, fly-like connectome for the demo brain.

The demo brain cannot ship the MaleCNS connectome (flyviz downloads the real
one from the Hugging Face Hub), so it carries a graph generated here with the
same sizes and the same *kind* of structure:

* 49,393 neurons and exactly 9,050,172 directed edges at full scale, stored
  as CSR with row = postsynaptic neuron, rows in order and strictly increasing
  columns (no duplicate edges, no autapses);
* neurons grouped into mirrored regions (two hemispheres, lateral
  optic-lobe-facing regions, an unpaired central core and a neck tail where
  ascending neurons have their somata); connection probability falls with the
  distance between regions and is highest inside a region;
* heavy-tailed in- and out-degrees (log-normal propensities) and synapse
  counts; a per-neuron transmitter sets the sign of every outgoing synapse
  (about two thirds excitatory, acetylcholine; GABA and glutamate inhibitory);
* weights = synapse count x sign x one global scale chosen so that the
  spectral radius is 0.99, as in the real model;
* soma positions in 8 nm voxels in the real data's frame (x left-right,
  y dorsal-ventral growing downward, z anterior-posterior), about 10 % of
  somata missing (zero position, ``soma_valid`` 0) as in the real dataset;
* superclass, side and cell-type labels, and ``delay_k x neurons_per_slot``
  input neurons drawn from the sensory neurons.

Everything is deterministic from a seed. The shipped asset stores the graph
compactly (:func:`pack_connectome`), so a NumPy version with different random
streams cannot change the demo brain.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flyviz.model.checkpoint import SUPERCLASSES

#: Transmitters in the order their codes use; the first is excitatory.
TRANSMITTERS = ("acetylcholine", "gaba", "glutamate")
#: Sign of each transmitter's synapses.
TRANSMITTER_SIGN = np.array([1.0, -1.0, -1.0], dtype=np.float32)
#: Side labels in code order.
SIDES = ("left", "right", "center")

#: Superclass fractions (cb_intrinsic gets the rest). Sensory neurons must
#: outnumber the input neurons (8 x 1,758 = 14,064 at full scale).
_SUPERCLASS_FRACTION = {"cb_sensory": 0.31, "visual_projection": 0.09,
                        "ascending_neuron": 0.035, "descending_neuron": 0.025}
#: Fraction of somata missing, per superclass (sensory and ascending somata lie
#: outside the imaged brain more often).
_MISSING_FRACTION = {"cb_intrinsic": 0.05, "cb_sensory": 0.17, "visual_projection": 0.08,
                     "ascending_neuron": 0.35, "descending_neuron": 0.1}

# The real sample's frame, in 8 nm voxels: midline and brain envelope.
_MIDLINE_X = 48_500.0
_CENTRE = np.array([_MIDLINE_X, 21_500.0, 28_500.0])
_SEMI_AXES = np.array([30_000.0, 20_000.0, 19_500.0])
_LOWER = np.array([5_340.0, 4_758.0, 10_293.0])
_UPPER = np.array([91_660.0, 66_949.0, 134_088.0])


@dataclass
class SyntheticConnectome:
    """A generated graph with its anatomy and input interface.

    Attributes
    ----------
    offsets
        ``(N + 1,)`` int32 CSR row pointer (row = postsynaptic neuron).
    sources
        ``(E,)`` int32 presynaptic neuron of each edge, strictly increasing per row.
    counts
        ``(E,)`` uint16 synapse count of each edge (>= 1).
    transmitter
        ``(N,)`` uint8 code into :data:`TRANSMITTERS`.
    weight_scale
        Global factor: ``weight = count * sign(transmitter[source]) * weight_scale``.
    positions
        ``(N, 3)`` int32 soma positions in 8 nm voxels, zero where missing.
    valid
        ``(N,)`` bool soma-present mask.
    superclass, side
        ``(N,)`` uint8 codes into :data:`~flyviz.model.checkpoint.SUPERCLASSES`
        and :data:`SIDES`.
    region
        ``(N,)`` int16 region of each neuron.
    type_index
        ``(N,)`` int32 cell-type group; ``type_labels[type_index[i]]`` names it.
    type_labels
        Names of the cell-type groups.
    body_id
        ``(N,)`` int64 sorted synthetic body ids.
    in_index
        ``(delay_k * neurons_per_slot,)`` int32 input neurons, slot-major.
    """

    offsets: np.ndarray
    sources: np.ndarray
    counts: np.ndarray
    transmitter: np.ndarray
    weight_scale: float
    positions: np.ndarray
    valid: np.ndarray
    superclass: np.ndarray
    side: np.ndarray
    region: np.ndarray
    type_index: np.ndarray
    type_labels: list[str]
    body_id: np.ndarray
    in_index: np.ndarray

    @property
    def neurons(self) -> int:
        """Number of neurons."""
        return int(self.offsets.shape[0] - 1)

    @property
    def edges(self) -> int:
        """Number of edges."""
        return int(self.sources.shape[0])

    def signed_counts(self) -> np.ndarray:
        """``(E,)`` float32 synapse count times the presynaptic transmitter's sign."""
        sign = TRANSMITTER_SIGN[self.transmitter][self.sources]
        return self.counts.astype(np.float32) * sign

    def weights(self) -> np.ndarray:
        """``(E,)`` float32 signed, scaled weights, bit-identical on every platform.

        One float32 multiply per edge (count x sign, then x scale) so that the
        rounding never depends on the BLAS or the NumPy version.
        """
        return self.signed_counts() * np.float32(self.weight_scale)

    def superclass_names(self) -> list[str]:
        """Superclass label of each neuron."""
        return [SUPERCLASSES[i] for i in self.superclass]

    def side_names(self) -> list[str]:
        """Side label of each neuron."""
        return [SIDES[i] for i in self.side]

    def cell_type_names(self) -> list[str]:
        """Cell-type label of each neuron."""
        labels = self.type_labels
        return [labels[i] for i in self.type_index]


# --------------------------------------------------------------------- regions
@dataclass
class _Regions:
    centre: np.ndarray       # (R, 3) voxels
    spread: np.ndarray       # (R, 3) voxels (std of somata around the centre)
    kind: np.ndarray         # (R,) 0 paired, 1 central core, 2 optic-facing, 3 neck tail
    side: np.ndarray         # (R,) code into SIDES


def _make_regions(rng: np.random.Generator, paired: int = 18, core: int = 6) -> _Regions:
    """Region centres: mirrored pairs in the hemispheres, a central core, lateral
    optic-lobe-facing regions and the neck tail."""
    centres: list[np.ndarray] = []
    spreads: list[np.ndarray] = []
    kinds: list[int] = []
    sides: list[int] = []
    # Paired regions: one hemisphere's centres inside the half-ellipsoid, mirrored.
    half: list[np.ndarray] = []
    while len(half) < paired:
        u = rng.uniform(-1.0, 1.0, 3)
        u[0] = rng.uniform(0.3, 0.85)
        if np.sum(u * u) <= 0.8:
            half.append(u)
    for u in half:
        spread = _SEMI_AXES * rng.uniform(0.09, 0.16, 3)
        for sign, side in ((-1.0, 0), (1.0, 1)):
            c = _CENTRE + _SEMI_AXES * u * np.array([sign, 1.0, 1.0])
            centres.append(c)
            spreads.append(spread)
            kinds.append(0)
            sides.append(side)
    # Central core: unpaired, near the midline, deep.
    for _ in range(core):
        u = rng.uniform(-0.35, 0.35, 3)
        u[0] = rng.uniform(-0.08, 0.08)
        centres.append(_CENTRE + _SEMI_AXES * u)
        spreads.append(_SEMI_AXES * np.array([0.07, 0.11, 0.11]))
        kinds.append(1)
        sides.append(2)
    # Optic-lobe-facing regions at the lateral edges.
    for sign, side in ((-1.0, 0), (1.0, 1)):
        for dy in (-0.1, 0.35):
            c = _CENTRE + np.array([sign * 40_500.0, dy * _SEMI_AXES[1], -0.1 * _SEMI_AXES[2]])
            centres.append(c)
            spreads.append(np.array([2_500.0, 7_000.0, 5_000.0]))
            kinds.append(2)
            sides.append(side)
    # Neck tail (somata of ascending neurons, outside the brain).
    centres.append(np.array([_MIDLINE_X, 56_000.0, 90_000.0]))
    spreads.append(np.array([3_500.0, 4_000.0, 22_000.0]))
    kinds.append(3)
    sides.append(2)
    return _Regions(np.array(centres), np.array(spreads), np.array(kinds), np.array(sides))


def _superclass_codes(n: int, rng: np.random.Generator) -> np.ndarray:
    counts = {name: int(round(frac * n)) for name, frac in _SUPERCLASS_FRACTION.items()}
    counts["cb_intrinsic"] = n - sum(counts.values())
    codes = np.concatenate([np.full(counts[name], SUPERCLASSES.index(name), dtype=np.uint8)
                            for name in SUPERCLASSES])
    return rng.permutation(codes)


def _home_regions(superclass: np.ndarray, regions: _Regions,
                  rng: np.random.Generator) -> np.ndarray:
    """A region for every neuron; which regions depends on the superclass."""
    kind = regions.kind
    centre = regions.centre
    anterior_ventral = ((centre[:, 1] - _CENTRE[1]) / _SEMI_AXES[1]
                        - (centre[:, 2] - _CENTRE[2]) / _SEMI_AXES[2])
    lateral = np.abs(centre[:, 0] - _MIDLINE_X) / _SEMI_AXES[0]
    posterior_ventral = ((centre[:, 1] - _CENTRE[1]) / _SEMI_AXES[1]
                         + (centre[:, 2] - _CENTRE[2]) / _SEMI_AXES[2])
    weights = {
        # The dense central core takes a large share of the intrinsic neurons.
        "cb_intrinsic": np.where(kind == 0, 1.0, 0.0) + np.where(kind == 1, 4.0, 0.0),
        "cb_sensory": np.where(kind == 0, np.exp(1.5 * anterior_ventral), 0.0),
        "visual_projection": np.where(kind == 2, 6.0, 0.0)
        + np.where(kind == 0, np.exp(3.0 * (lateral - 0.8)), 0.0),
        "ascending_neuron": np.where(kind == 3, 5.0, 0.0)
        + np.where(kind == 0, 0.3 * np.exp(posterior_ventral), 0.0),
        "descending_neuron": np.where(kind == 0, np.exp(2.0 * posterior_ventral), 0.0)
        + np.where(kind == 1, 0.5, 0.0),
    }
    home = np.empty(superclass.shape[0], dtype=np.int16)
    for code, name in enumerate(SUPERCLASSES):
        members = np.flatnonzero(superclass == code)
        p = weights[name] / weights[name].sum()
        home[members] = rng.choice(len(p), size=members.size, p=p)
    return home


def _sample_in_groups(group_of_neuron_sorted: np.ndarray,
                      order: np.ndarray, mass: np.ndarray, draws_per_group: np.ndarray,
                      rng: np.random.Generator) -> np.ndarray:
    """For each draw in group g, a neuron of group g chosen in proportion to ``mass``."""
    cum = np.cumsum(mass[order], dtype=np.float64)
    bounds = np.searchsorted(group_of_neuron_sorted, np.arange(draws_per_group.size + 1))
    lo = np.where(bounds[:-1] > 0, cum[np.maximum(bounds[:-1] - 1, 0)], 0.0)
    hi = cum[np.maximum(bounds[1:] - 1, 0)]
    group_of_draw = np.repeat(np.arange(draws_per_group.size), draws_per_group)
    u = lo[group_of_draw] + rng.random(group_of_draw.size) * (hi - lo)[group_of_draw]
    pick = np.searchsorted(cum, u, side="right")
    pick = np.minimum(pick, bounds[1:][group_of_draw] - 1)
    return order[pick]


def _sample_edges(n: int, edges: int, region: np.ndarray, regions: _Regions,
                  out_mass: np.ndarray, in_mass: np.ndarray,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw exactly ``edges`` distinct (post, pre) pairs, and each pair's multiplicity."""
    r_count = regions.centre.shape[0]
    # Region affinity: falls with distance (in units of the brain's size), a
    # strong bonus inside a region, a penalty for crossing the midline.
    d = np.linalg.norm((regions.centre[:, None, :] - regions.centre[None, :, :])
                       / _SEMI_AXES, axis=-1)
    affinity = np.exp(-d / 0.35)
    affinity[np.arange(r_count), np.arange(r_count)] *= 6.0
    crossing = (regions.side[:, None] != regions.side[None, :]) \
        & (regions.side[:, None] != 2) & (regions.side[None, :] != 2)
    affinity[crossing] *= 0.35
    region_in = np.bincount(region, weights=in_mass, minlength=r_count)
    target_p = affinity * region_in[None, :]
    target_p /= target_p.sum(axis=1, keepdims=True)

    order = np.argsort(region, kind="stable")
    region_sorted = region[order]
    pre_p = out_mass / out_mass.sum()
    pre_cum = np.cumsum(pre_p)

    flat_keys: list[np.ndarray] = []
    have = 0
    want = int(edges * 1.3) + 1000
    flat = np.empty(0, dtype=np.int64)
    mult = np.empty(0, dtype=np.int64)
    while have < edges:
        pre = np.minimum(np.searchsorted(pre_cum, rng.random(want) * pre_cum[-1]), n - 1)
        # Target region per draw (by source region), then a postsynaptic neuron in it.
        src_region = region[pre]
        tgt_region = np.empty(want, dtype=np.int64)
        for r in np.unique(src_region):
            members = np.flatnonzero(src_region == r)
            tgt_region[members] = rng.choice(r_count, size=members.size, p=target_p[r])
        by_region = np.argsort(tgt_region, kind="stable")
        draws = np.bincount(tgt_region, minlength=r_count)
        post_sorted = _sample_in_groups(region_sorted, order, in_mass, draws, rng)
        post = np.empty(want, dtype=np.int64)
        post[by_region] = post_sorted
        keep = post != pre
        key = post[keep].astype(np.int64) * n + pre[keep]
        flat_keys.append(key)
        flat, mult = np.unique(np.concatenate(flat_keys), return_counts=True)
        have = flat.size
        want = int((edges - have) * 1.5) + 1000
    if flat.size > edges:
        drop = rng.choice(flat.size, size=flat.size - edges, replace=False)
        keep_mask = np.ones(flat.size, dtype=bool)
        keep_mask[drop] = False
        flat, mult = flat[keep_mask], mult[keep_mask]
    return flat, mult


def spectral_radius(offsets: np.ndarray, sources: np.ndarray, values: np.ndarray,
                    tol: float = 1e-4) -> float:
    """Largest eigenvalue modulus of the CSR matrix (ARPACK, a few hundred products)."""
    import scipy.sparse as sp
    from scipy.sparse.linalg import eigs

    n = offsets.shape[0] - 1
    w = sp.csr_matrix((values.astype(np.float64), sources, offsets), shape=(n, n))
    vals = eigs(w, k=1, which="LM", tol=tol, return_eigenvectors=False,
                v0=np.ones(n) / np.sqrt(n), maxiter=5000)
    return float(np.abs(vals).max())


def make_connectome(neurons: int, edges: int, delay_k: int, neurons_per_slot: int,
                    seed: int, target_radius: float = 0.99) -> SyntheticConnectome:
    """Generate the demo brain's graph, anatomy and input interface.

    Parameters
    ----------
    neurons, edges
        Graph size (49,393 and 9,050,172 at full scale).
    delay_k, neurons_per_slot
        Input interface: ``delay_k * neurons_per_slot`` sensory neurons.
    seed
        Everything is deterministic from it.
    target_radius
        Spectral radius of the scaled weight matrix.
    """
    rng = np.random.default_rng(seed)
    regions = _make_regions(rng)
    superclass = _superclass_codes(neurons, rng)
    home = _home_regions(superclass, regions, rng)
    # Neuron order follows the region (as body ids loosely follow lineage in the
    # real data); it also keeps presynaptic indices of a row close together,
    # which helps both the cache and the shipped compression.
    order = np.lexsort((rng.random(neurons), home))
    superclass, home = superclass[order], home[order]

    # Heavy-tailed connection propensities, shaped by superclass: sensory and
    # visual projection neurons mostly send, descending neurons mostly receive.
    out_mass = rng.lognormal(0.0, 1.0, neurons)
    in_mass = rng.lognormal(0.0, 1.0, neurons)
    sc = np.array(SUPERCLASSES)[superclass]
    out_mass *= np.select([sc == "cb_sensory", sc == "visual_projection",
                           sc == "descending_neuron"], [1.6, 1.8, 0.3], 1.0)
    in_mass *= np.select([sc == "cb_sensory", sc == "visual_projection",
                          sc == "descending_neuron", sc == "ascending_neuron"],
                         [0.25, 0.6, 1.8, 0.8], 1.0)

    flat, multiplicity = _sample_edges(neurons, edges, home.astype(np.int64), regions,
                                       out_mass, in_mass, rng)
    post = flat // neurons
    pre = (flat % neurons).astype(np.int32)
    offsets = np.zeros(neurons + 1, dtype=np.int64)
    np.add.at(offsets, post + 1, 1)
    offsets = np.cumsum(offsets).astype(np.int32)
    # Synapse counts: log-normal per connection, more for pairs drawn repeatedly.
    base = np.floor(rng.lognormal(0.7, 0.9, flat.size)).astype(np.int64) + 1
    counts = np.minimum(base * multiplicity, 255).astype(np.uint16)

    # Transmitters: about two thirds of neurons (and of synapses) cholinergic.
    transmitter = rng.choice(3, size=neurons, p=[0.66, 0.22, 0.12]).astype(np.uint8)
    signed = counts.astype(np.float32) * TRANSMITTER_SIGN[transmitter][pre]
    radius = spectral_radius(offsets, pre, signed)
    weight_scale = float(np.float32(target_radius / radius))

    positions, valid = _somata(home, superclass, regions, rng)
    side = np.where(np.abs(positions[:, 0] - _MIDLINE_X) < 1_500, 2,
                    np.where(positions[:, 0] < _MIDLINE_X, 0, 1)).astype(np.uint8)
    # Neurons without a soma: side from their region.
    side[~valid] = regions.side[home[~valid]].astype(np.uint8)
    type_index, type_labels = _cell_types(home, superclass, regions, rng)
    body_id = np.sort(rng.choice(10**10, size=neurons, replace=False)).astype(np.int64) \
        + 700_000_000_000
    sensory = np.flatnonzero(superclass == SUPERCLASSES.index("cb_sensory"))
    n_inputs = delay_k * neurons_per_slot
    if sensory.size < n_inputs:
        raise ValueError(f"{sensory.size} sensory neurons cannot fill {n_inputs} input slots")
    in_index = rng.choice(sensory, size=n_inputs, replace=False).astype(np.int32)
    return SyntheticConnectome(
        offsets=offsets, sources=pre, counts=counts, transmitter=transmitter,
        weight_scale=weight_scale, positions=positions, valid=valid, superclass=superclass,
        side=side, region=home, type_index=type_index, type_labels=type_labels,
        body_id=body_id, in_index=in_index)


def _somata(home: np.ndarray, superclass: np.ndarray, regions: _Regions,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = home.shape[0]
    pos = regions.centre[home] + rng.standard_normal((n, 3)) * regions.spread[home]
    # Somata sit in the cortex: push points of brain regions a little outward,
    # towards the envelope, as the real sample's shell-like shape shows.
    brain = regions.kind[home] != 3
    rel = (pos[brain] - _CENTRE) / _SEMI_AXES
    radius = np.linalg.norm(rel, axis=1, keepdims=True)
    rel = rel / np.maximum(radius, 1e-6) * (0.35 * radius + 0.65 * np.minimum(
        np.sqrt(radius), 1.02))
    pos[brain] = _CENTRE + rel * _SEMI_AXES
    pos = np.clip(pos, _LOWER, _UPPER)
    missing_p = np.array([_MISSING_FRACTION[name] for name in SUPERCLASSES])[superclass]
    valid = rng.random(n) >= missing_p
    positions = np.rint(pos).astype(np.int32)
    positions[~valid] = 0
    return positions, valid


def _cell_types(home: np.ndarray, superclass: np.ndarray, regions: _Regions,
                rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """Cell-type groups: runs of neurons of one superclass in one region, heavy-tailed sizes."""
    n = home.shape[0]
    key = home.astype(np.int64) * 8 + superclass
    order = np.lexsort((rng.random(n), key))
    type_index = np.empty(n, dtype=np.int32)
    labels: list[str] = []
    prefix = {"cb_intrinsic": "CB", "cb_sensory": "SN", "visual_projection": "VP",
              "ascending_neuron": "AN", "descending_neuron": "DN"}
    start = 0
    sorted_key = key[order]
    while start < n:
        stop = start + int(np.searchsorted(sorted_key[start:], sorted_key[start], side="right"))
        pos = start
        while pos < stop:
            size = min(stop - pos, 1 + int(rng.pareto(1.3) * 2))
            r = int(home[order[pos]])
            name = SUPERCLASSES[int(superclass[order[pos]])]
            side = "LR"[int(regions.side[r])] if regions.side[r] < 2 else "C"
            type_index[order[pos:pos + size]] = len(labels)
            labels.append(f"{prefix[name]}{r:02d}{side}-{len(labels):05d}")
            pos += size
        start = stop
    return type_index, labels


# ----------------------------------------------------------------- packing
def pack_connectome(conn: SyntheticConnectome, path: str | Path) -> Path:
    """Store the connectome compactly as a compressed ``.npz`` (no pickled objects).

    Presynaptic indices are delta-coded within each row (small, repetitive
    numbers that compress well); synapse counts are small integers.
    """
    path = Path(path)
    deltas = np.diff(conn.sources.astype(np.int64), prepend=0)
    first = np.zeros(conn.edges, dtype=bool)
    first[conn.offsets[:-1][np.diff(conn.offsets) > 0]] = True
    deltas[first] = conn.sources[first]
    delta_dtype = np.uint16 if deltas.max(initial=0) < 2**16 else np.uint32
    count_dtype = np.uint8 if conn.counts.max(initial=0) < 256 else np.uint16
    np.savez_compressed(
        path,
        row_lengths=np.diff(conn.offsets).astype(np.uint16 if np.diff(conn.offsets).max() < 2**16
                                                  else np.uint32),
        source_deltas=deltas.astype(delta_dtype),
        counts=conn.counts.astype(count_dtype),
        transmitter=conn.transmitter,
        weight_scale=np.array([conn.weight_scale], dtype=np.float64),
        positions=conn.positions.astype(np.int32),
        valid=conn.valid.astype(np.uint8),
        superclass=conn.superclass,
        side=conn.side,
        region=conn.region,
        type_index=conn.type_index,
        type_labels=np.array(conn.type_labels, dtype=str),
        body_id=conn.body_id,
        in_index=conn.in_index,
    )
    return path


def unpack_connectome(path: str | Path) -> SyntheticConnectome:
    """Read a connectome written by :func:`pack_connectome` (``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as data:
        lengths = data["row_lengths"].astype(np.int64)
        offsets = np.zeros(lengths.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        deltas = data["source_deltas"].astype(np.int32)
        # Undo the per-row delta code: a running sum restarted at each row start.
        total = np.cumsum(deltas, dtype=np.int64)
        starts = offsets[:-1][lengths > 0]
        before = np.zeros(deltas.size, dtype=np.int64)
        base = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0)
        before[starts] = np.diff(base, prepend=0)
        sources = (total - np.cumsum(before)).astype(np.int32)
        return SyntheticConnectome(
            offsets=offsets.astype(np.int32), sources=sources,
            counts=data["counts"].astype(np.uint16), transmitter=data["transmitter"],
            weight_scale=float(data["weight_scale"][0]),
            positions=data["positions"], valid=data["valid"].astype(bool),
            superclass=data["superclass"], side=data["side"], region=data["region"],
            type_index=data["type_index"], type_labels=[str(s) for s in data["type_labels"]],
            body_id=data["body_id"], in_index=data["in_index"])
