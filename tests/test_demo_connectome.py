"""The demo brain's synthetic connectome: structure, scaling, anatomy, packing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flyviz.demo.connectome import (TRANSMITTER_SIGN, make_connectome, pack_connectome,
                                    spectral_radius, unpack_connectome)
from flyviz.model.checkpoint import SUPERCLASSES

NEURONS, EDGES, SLOT = 4_001, 160_000, 120


@pytest.fixture(scope="module")
def conn():
    return make_connectome(NEURONS, EDGES, 8, SLOT, seed=11)


def test_exact_size_sorted_unique_no_autapses(conn):
    assert conn.neurons == NEURONS and conn.edges == EDGES
    assert conn.offsets[0] == 0 and conn.offsets[-1] == EDGES
    rows = np.repeat(np.arange(NEURONS), np.diff(conn.offsets))
    key = rows.astype(np.int64) * NEURONS + conn.sources
    assert np.all(np.diff(key) > 0), "rows in order, columns strictly increasing, no duplicates"
    assert not np.any(rows == conn.sources)
    assert conn.counts.min() >= 1


def test_signs_follow_the_presynaptic_transmitter(conn):
    values = conn.weights()
    sign_of_source = TRANSMITTER_SIGN[conn.transmitter][conn.sources]
    assert np.array_equal(np.sign(values), sign_of_source)
    excitatory = float(np.mean(values > 0))
    assert 0.55 < excitatory < 0.78


def test_spectral_radius_is_scaled_to_0_99(conn):
    assert spectral_radius(conn.offsets, conn.sources, conn.weights(), tol=1e-6) \
        == pytest.approx(0.99, rel=2e-3)


def test_heavy_tailed_degrees_and_counts(conn):
    in_degree = np.diff(conn.offsets)
    out_degree = np.bincount(conn.sources, minlength=NEURONS)
    for degree in (in_degree, out_degree):
        assert degree.max() > 6 * np.median(degree)
    assert np.percentile(conn.counts, 99) > 5 * np.median(conn.counts)


def test_more_connections_within_regions_and_between_near_neurons(conn):
    rows = np.repeat(np.arange(NEURONS), np.diff(conn.offsets))
    within = float(np.mean(conn.region[rows] == conn.region[conn.sources]))
    # Chance level: probability that two random neurons share a region.
    share = np.bincount(conn.region) / NEURONS
    assert within > 5 * float(np.sum(share ** 2))
    both = conn.valid[rows] & conn.valid[conn.sources]
    pos = conn.positions.astype(np.float64)
    connected = np.linalg.norm(pos[rows[both]] - pos[conn.sources[both]], axis=1)
    rng = np.random.default_rng(0)
    ok = np.flatnonzero(conn.valid)
    a, b = rng.choice(ok, 20_000), rng.choice(ok, 20_000)
    random_pairs = np.linalg.norm(pos[a] - pos[b], axis=1)
    assert np.median(connected) < 0.7 * np.median(random_pairs)


def test_anatomy_like_the_real_data(conn):
    missing = 1.0 - conn.valid.mean()
    assert 0.06 < missing < 0.15
    assert not conn.positions[~conn.valid].any(), "missing somata are zeros, never invented"
    pos = conn.positions[conn.valid]
    lo, hi = np.array([5_340, 4_758, 10_293]), np.array([91_660, 66_949, 134_088])
    assert np.all(pos >= lo) and np.all(pos <= hi)
    # Two mirrored hemispheres: as many somata left as right of the midline.
    x = pos[:, 0]
    left, right = np.mean(x < 48_500), np.mean(x > 48_500)
    assert abs(left - right) < 0.06
    labels = set(conn.superclass_names())
    assert labels == set(SUPERCLASSES)
    assert set(conn.side_names()) <= {"left", "right", "center"}
    assert len(conn.type_labels) > NEURONS // 40


def test_positions_span_the_real_sample(conn, shared_dir):
    sample = shared_dir / "reference" / "data" / "neuron-layout-2048.json"
    if not sample.is_file():
        pytest.skip("shared reference data not available")
    real = np.array([n["position"] for n in json.loads(sample.read_text())["neurons"]])
    ours = conn.positions[conn.valid].astype(np.float64)
    # Central 90 % of each axis overlaps the real sample's central 90 %.
    for axis in range(3):
        r5, r95 = np.percentile(real[:, axis], [5, 95])
        o5, o95 = np.percentile(ours[:, axis], [5, 95])
        overlap = min(r95, o95) - max(r5, o5)
        assert overlap > 0.6 * (r95 - r5), f"axis {axis}: {o5:.0f}..{o95:.0f} vs {r5:.0f}..{r95:.0f}"


def test_inputs_are_unique_sensory_neurons(conn):
    assert conn.in_index.size == 8 * SLOT
    assert np.unique(conn.in_index).size == conn.in_index.size
    sensory = SUPERCLASSES.index("cb_sensory")
    assert np.all(conn.superclass[conn.in_index] == sensory)


def test_deterministic_from_the_seed(conn):
    again = make_connectome(NEURONS, EDGES, 8, SLOT, seed=11)
    other = make_connectome(NEURONS, EDGES, 8, SLOT, seed=12)
    assert np.array_equal(again.sources, conn.sources)
    assert np.array_equal(again.positions, conn.positions)
    assert again.weight_scale == conn.weight_scale
    assert not np.array_equal(other.sources, conn.sources)


def test_pack_round_trip_is_exact_and_needs_no_pickle(conn, tmp_path):
    path = pack_connectome(conn, tmp_path / "c.npz")
    with np.load(path, allow_pickle=False) as data:  # would raise on object arrays
        assert all(data[k].dtype != object for k in data.files)
    back = unpack_connectome(path)
    for name in ("offsets", "sources", "counts", "transmitter", "positions", "valid",
                 "superclass", "side", "type_index", "body_id", "in_index"):
        assert np.array_equal(getattr(back, name), getattr(conn, name)), name
    assert back.type_labels == conn.type_labels
    assert np.array_equal(back.weights(), conn.weights())
    assert path.stat().st_size < 0.5 * conn.edges * 6  # smaller than raw u16 + f32
