"""Neuron positions computed from the graph, for models that carry no anatomy.

A spectral embedding places strongly connected neurons near each other: the
three leading non-trivial eigenvectors of the symmetrised, degree-normalised
adjacency ``D^-1/2 (|W| + |W|^T) D^-1/2`` become x, y and z. The result is
marked ``kind="layout"`` so that no view mistakes it for measured somata.

Pure NumPy/SciPy; at full size (49,393 neurons, 9.05M synapses) it takes a
few seconds (``python -m flyviz.model.layout --bench``).
"""

from __future__ import annotations

import numpy as np

from flyviz.model.checkpoint import VOXEL_UM, Anatomy, Checkpoint

#: Spread of a layout along each axis, in micrometres (about a fly brain's size).
LAYOUT_SPREAD_UM = 160.0

#: Where layouts are centred, in 8 nm voxels (inside the MaleCNS bounding box).
_CENTRE_VOXELS = np.array([48_000.0, 36_000.0, 72_000.0])


def _to_voxels(coords: np.ndarray) -> np.ndarray:
    """Scale ``(N, 3)`` coordinates robustly to the layout spread, in voxels.

    Spectral coordinates are heavy-tailed (a few weakly attached neurons far
    out); squashing beyond the 2nd-98th percentile keeps the bulk readable.
    """
    out = np.empty_like(coords, dtype=np.float64)
    for axis in range(3):
        c = coords[:, axis].astype(np.float64)
        lo, mid, hi = np.percentile(c, [2.0, 50.0, 98.0])
        half = max((hi - lo) / 2.0, 1e-12)
        out[:, axis] = np.tanh((c - mid) / half * 1.2) / np.tanh(1.2)
    return np.ascontiguousarray(out * (LAYOUT_SPREAD_UM / VOXEL_UM) + _CENTRE_VOXELS,
                                dtype=np.float32)


def ball_layout(neurons: int, seed: int = 0) -> Anatomy:
    """Neurons spread evenly through a ball: a last resort when not even the graph is known.

    Positions mean nothing anatomically; the anatomy is marked ``kind="layout"``.
    """
    n = int(neurons)
    i = np.arange(n, dtype=np.float64) + 0.5
    golden = np.pi * (3.0 - np.sqrt(5.0))
    z = 1.0 - 2.0 * i / n
    r_sphere = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    theta = golden * i
    radius = np.random.default_rng(seed).random(n) ** (1.0 / 3.0)
    pts = np.stack([np.cos(theta) * r_sphere, z, np.sin(theta) * r_sphere], axis=1) * radius[:, None]
    positions = (pts * (LAYOUT_SPREAD_UM / VOXEL_UM) + _CENTRE_VOXELS).astype(np.float32)
    return Anatomy(positions=positions, valid=np.ones(n, dtype=bool), kind="layout")


def _leading_vectors(matrix, trivial: np.ndarray, count: int, iterations: int,
                     seed: int) -> np.ndarray:
    """The ``count`` leading eigenvectors of a symmetric ``matrix`` orthogonal to ``trivial``.

    Block subspace iteration on the lazy operator ``(I + M) / 2`` (eigenvalues
    in [0, 1], so the structural ones lead), then Rayleigh-Ritz. A layout needs
    only the broad shape of these vectors: a dozen sparse products of a thin
    block cost about a second at full size, where ARPACK needs tens of seconds
    on graphs whose leading eigenvalues lie close together.
    """
    n = matrix.shape[0]
    block = min(n - 1, count + 5)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, block)).astype(np.float32)
    u = (trivial / np.linalg.norm(trivial)).astype(np.float32)[:, None]
    for _ in range(iterations):
        q -= u @ (u.T @ q)
        q, _ = np.linalg.qr(q)
        q = 0.5 * (q + np.asarray(matrix @ q, dtype=np.float32))
    q -= u @ (u.T @ q)
    q, _ = np.linalg.qr(q)
    small = q.T @ np.asarray(matrix @ q, dtype=np.float32)
    vals, vecs = np.linalg.eigh(0.5 * (small + small.T).astype(np.float64))
    order = np.argsort(vals)[::-1][:count]
    return q.astype(np.float64) @ vecs[:, order]


def graph_layout(checkpoint: Checkpoint, seed: int = 0, iterations: int = 12) -> Anatomy:
    """3-D positions from a spectral embedding of the model's synapse graph.

    Parameters
    ----------
    checkpoint
        Any checkpoint (its CSR graph is used; its anatomy, if any, is ignored).
    seed
        Seed of the start block (the layout is deterministic for a seed).
    iterations
        Subspace iterations; more sharpens the embedding, linearly slower.

    Returns
    -------
    Anatomy
        ``kind="layout"``, every neuron valid, positions in 8 nm voxels like a
        measured anatomy. Labels are copied from the checkpoint's anatomy when
        it has some.
    """
    import scipy.sparse as sp

    n = int(checkpoint.config.neurons)
    weights = np.abs(np.asarray(checkpoint.w_values, dtype=np.float32))
    adjacency = sp.csr_matrix((weights, np.asarray(checkpoint.w_indices),
                               np.asarray(checkpoint.w_offsets)), shape=(n, n))
    sym = (adjacency + adjacency.T).tocsr()
    degree = np.asarray(sym.sum(axis=1)).ravel().astype(np.float64)
    isolated = degree <= 0
    inv_sqrt = np.where(isolated, 0.0, 1.0 / np.sqrt(np.where(isolated, 1.0, degree)))
    # D^-1/2 S D^-1/2 by scaling the stored values in place (two sparse products cost more).
    normalised = sym.astype(np.float32)
    rows = np.repeat(np.arange(n), np.diff(normalised.indptr))
    normalised.data *= (inv_sqrt[rows] * inv_sqrt[normalised.indices]).astype(np.float32)

    if n < 8:
        coords = np.random.default_rng(seed).standard_normal((n, 3))
    else:
        # The leading eigenvector is sqrt(degree): it says nothing about structure.
        vecs = _leading_vectors(normalised, np.sqrt(np.maximum(degree, 0.0)), 3,
                                int(iterations), seed)
        coords = vecs * inv_sqrt[:, None]
        # Fix each axis's sign so the layout does not flip between runs.
        for axis in range(3):
            col = coords[:, axis]
            if col[np.argmax(np.abs(col))] < 0:
                coords[:, axis] = -col
    if isolated.any() and not isolated.all():
        positions = np.empty((n, 3), dtype=np.float32)
        positions[~isolated] = _to_voxels(coords[~isolated])
        # Unconnected neurons go on a shell around the rest, not on top of each other.
        shell = ball_layout(int(isolated.sum()), seed).positions.astype(np.float64)
        shell -= _CENTRE_VOXELS
        shell /= np.linalg.norm(shell, axis=1, keepdims=True).clip(1e-9)
        reach = np.linalg.norm(positions[~isolated] - _CENTRE_VOXELS, axis=1).max()
        positions[isolated] = (shell * reach * 1.1 + _CENTRE_VOXELS).astype(np.float32)
    else:
        positions = _to_voxels(coords)
    src = checkpoint.anatomy
    return Anatomy(positions=positions, valid=np.ones(n, dtype=bool), kind="layout",
                   body_id=None if src is None else src.body_id,
                   superclass=None if src is None else src.superclass,
                   side=None if src is None else src.side,
                   cell_type=None if src is None else src.cell_type,
                   populations=None if src is None else src.populations)


def _bench() -> None:  # pragma: no cover - a measurement, run by hand
    import time

    from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, make_random_checkpoint

    t0 = time.perf_counter()
    ckpt = make_random_checkpoint(FULL_NEURONS, FULL_EDGES, with_anatomy=False, vocabulary=64,
                                  d_embed=8)
    t1 = time.perf_counter()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        graph_layout(ckpt)
        times.append(time.perf_counter() - start)
    print(f"graph_layout at {FULL_NEURONS:,} neurons / {FULL_EDGES:,} synapses: "
          f"median {np.median(times):.2f} s over 3 runs (checkpoint built in {t1 - t0:.1f} s)")


if __name__ == "__main__":  # pragma: no cover
    import sys

    if "--bench" in sys.argv:
        _bench()
