"""Signed synapse counts from a graph's weights (:func:`flyviz.spiking.brain.synapse_counts`):
what every spiking brain read from a model's graph (the demo's, a Fly LLM's, the 166k set)
is built on, for every synapse at once."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from flyviz.spiking.brain import synapse_counts


def test_whole_multiples_of_the_smallest_weight_are_counts_of_it():
    weights = np.array([0.55, -0.275, 0.0, 2.75, -1.1], np.float32)
    counts, unit, whole = synapse_counts(weights)
    assert whole and unit == pytest.approx(0.275)
    assert counts.dtype == np.float64 and counts.tolist() == [2.0, -1.0, 0.0, 10.0, -4.0]


@pytest.mark.parametrize("weights", [np.array([1.0, 1.5, -0.4]), np.zeros(3), np.zeros(0)])
def test_weights_that_are_no_counts_come_back_as_an_own_copy(weights):
    counts, unit, whole = synapse_counts(weights)
    assert unit == 1.0 and whole == (not weights.any())
    assert np.array_equal(counts, weights) and counts.dtype == np.float64
    assert not np.shares_memory(counts, weights)   # the caller's array stays the caller's


def test_the_counts_of_a_large_graph_need_at_most_three_arrays_of_its_size():
    """Every step of the old arithmetic made a new float64 array of the edges' size, six at
    the peak: 2.4 GB of temporaries for a brain of 50 million synapses (and seconds of page
    faults). Now the result, its float64 copy of the weights and one array of scratch."""
    edges = 2_000_000
    weights = (np.random.default_rng(1).integers(-40, 40, edges) * 0.275).astype(np.float32)
    tracemalloc.start()
    try:
        counts, _, whole = synapse_counts(weights)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert whole and counts.shape == (edges,)
    assert peak <= 3.25 * 8 * edges, peak / (8 * edges)
