"""Graph layouts put connected neurons together, deterministically, and say they are layouts."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from flyviz.model.layout import ball_layout, graph_layout
from flyviz.model.synthetic import make_random_checkpoint


def with_graph(ckpt, matrix: sp.csr_matrix):
    matrix = matrix.tocsr()
    matrix.sum_duplicates()
    matrix.sort_indices()
    ckpt.w_offsets = matrix.indptr.astype(np.int32)
    ckpt.w_indices = matrix.indices.astype(np.int32)
    ckpt.w_values = matrix.data.astype(np.float32)
    return ckpt


def communities(n_groups: int = 3, size: int = 200, inside: int = 10, seed: int = 0):
    """A graph of dense groups with a few links between them; signs mixed like a connectome."""
    rng = np.random.default_rng(seed)
    n = n_groups * size
    group = np.repeat(np.arange(n_groups), size)
    rows, cols = [], []
    for i in range(n):
        mates = rng.choice(np.flatnonzero(group == group[i]), inside, replace=False)
        rows += [i] * (inside + 1)
        cols += list(mates) + [int(rng.integers(n))]
    values = np.where(rng.random(len(rows)) < 0.3, -1.0, 1.0)
    matrix = sp.csr_matrix((values, (rows, cols)), shape=(n, n))
    return with_graph(make_random_checkpoint(n, 10, seed=seed), matrix), group


def test_connected_groups_land_apart():
    ckpt, group = communities()
    anatomy = graph_layout(ckpt)
    assert anatomy.kind == "layout" and anatomy.valid.all()
    assert anatomy.positions.shape == (600, 3) and anatomy.positions.dtype == np.float32
    pos = anatomy.positions_um()
    centres = np.array([pos[group == g].mean(axis=0) for g in range(3)])
    spread = max(np.linalg.norm(pos[group == g] - centres[g], axis=1).mean() for g in range(3))
    gaps = [np.linalg.norm(centres[a] - centres[b]) for a, b in ((0, 1), (0, 2), (1, 2))]
    assert min(gaps) > 2 * spread


def test_layout_is_deterministic_and_brain_sized():
    ckpt, _ = communities(seed=1)
    a, b = graph_layout(ckpt), graph_layout(ckpt)
    np.testing.assert_array_equal(a.positions, b.positions)
    extent = np.ptp(a.positions_um(), axis=0)
    assert np.all(extent > 100) and np.all(extent < 1000)  # micrometres, like a fly brain


def test_unconnected_neurons_are_not_stacked_on_one_point():
    ckpt, _ = communities(seed=2)
    matrix = sp.csr_matrix((ckpt.w_values, ckpt.w_indices, ckpt.w_offsets), shape=(600, 600)).tolil()
    matrix[:20, :] = 0
    matrix[:, :20] = 0
    anatomy = graph_layout(with_graph(ckpt, matrix.tocsr()))
    assert np.isfinite(anatomy.positions).all()
    assert len(np.unique(anatomy.positions[:20].round(1), axis=0)) == 20


def test_ball_layout():
    anatomy = ball_layout(1000)
    assert anatomy.kind == "layout" and anatomy.positions.shape == (1000, 3)
    assert len(np.unique(anatomy.positions.round(2), axis=0)) == 1000
