"""A neuron's strongest partners, from either kind's wiring (no Qt).

The Fly LLM's graph comes grouped by postsynaptic neuron, the spiking brain's by
presynaptic neuron; both must answer inputs, outputs and degrees as the dense matrix does.
"""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.app.brain.connectivity import Connectivity
from flyviz.kinds import LANGUAGE, Wiring


def _random_graph(n: int = 30, synapses: int = 200, seed: int = 4):
    """A dense signed matrix ``dense[post, pre]`` of whole numbers, and its rows as tables
    grouped by post and by pre."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((n, n))
    pre, post = rng.integers(0, n, (2, synapses))
    dense[post, pre] = rng.integers(1, 40, synapses) * rng.choice([-1, 1], synapses)

    def rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        owner, other = np.nonzero(matrix)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
        return offsets, other.astype(np.int32), matrix[owner, other]

    return dense, rows(dense), rows(dense.T)


def _expected(weights_by_partner: np.ndarray, limit: int) -> list[tuple[int, float]]:
    partners = np.flatnonzero(weights_by_partner)
    order = sorted(partners, key=lambda p: (-abs(weights_by_partner[p]), p))[:limit]
    return [(int(p), float(weights_by_partner[p])) for p in order]


def _got(partners) -> list[tuple[int, float]]:
    return [(p.neuron, p.weight) for p in partners]


@pytest.mark.parametrize("grouped_by", ["post", "pre"])
def test_partners_and_degrees_are_the_dense_matrixs_whichever_end_the_rows_are_by(grouped_by):
    dense, by_post, by_pre = _random_graph()
    n = dense.shape[0]
    offsets, partners, weights = by_post if grouped_by == "post" else by_pre
    graph = Connectivity(Wiring(n, offsets, partners, weights, grouped_by=grouped_by,
                                weight_name="Synapses", whole=True))
    given, other = ("inputs", "outputs") if grouped_by == "post" else ("outputs", "inputs")
    assert graph.has(given) and not graph.has(other) and not graph.ready
    assert graph.prepare() is graph and graph.has(other) and graph.ready
    assert graph.weight_name == "Synapses" and graph.whole
    for neuron in range(n):
        assert _got(graph.inputs(neuron, 5)) == _expected(dense[neuron], 5)
        assert _got(graph.outputs(neuron, 5)) == _expected(dense[:, neuron], 5)
        assert graph.in_degree(neuron) == np.count_nonzero(dense[neuron])
        assert graph.out_degree(neuron) == np.count_nonzero(dense[:, neuron])
    with pytest.raises(IndexError, match="out of range 0..29"):
        graph.outputs(n)


def test_a_direction_not_indexed_yet_is_built_by_its_first_lookup():
    dense, _by_post, by_pre = _random_graph(seed=9)
    graph = Connectivity(Wiring(dense.shape[0], *by_pre, grouped_by="pre"))
    assert not graph.has("inputs")
    assert _got(graph.inputs(3, 40)) == _expected(dense[3], 40)
    assert graph.has("inputs")


def test_the_language_models_wiring_is_its_checkpoints_csr_rows(tiny_checkpoint):
    ck = tiny_checkpoint
    wiring = LANGUAGE.wiring(ck)
    assert wiring is not None and wiring.grouped_by == "post" and not wiring.whole
    assert wiring.partners is ck.w_indices or np.shares_memory(wiring.partners, ck.w_indices)
    graph = Connectivity.of_checkpoint(ck)
    neuron = int(np.argmax(np.diff(ck.w_offsets)))
    lo, hi = int(ck.w_offsets[neuron]), int(ck.w_offsets[neuron + 1])
    strongest = np.argmax(np.abs(ck.w_values[lo:hi]))
    assert graph.inputs(neuron, 1)[0].neuron == int(ck.w_indices[lo + strongest])


def test_a_wiring_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="offsets must have 4 entries"):
        Wiring(3, np.zeros(3, np.int64), np.zeros(0, np.int32), np.zeros(0))
    with pytest.raises(ValueError, match="offsets\\[-1\\] entries"):
        Wiring(2, np.array([0, 1, 2]), np.zeros(1, np.int32), np.zeros(1))
    with pytest.raises(ValueError, match="grouped_by"):
        Wiring(0, np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0), grouped_by="x")
