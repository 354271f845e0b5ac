"""Population views: row orders, the pooled raster, group time courses, trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.analysis.population import (RasterPooler, RowOrder, anatomy_order,
                                        group_time_courses, importance_order,
                                        principal_trajectory, similarity_order)
from flyviz.errors import InputError


def _planted(seed: int = 0, neurons: int = 900, tokens: int = 150, group: int = 25):
    """Noise, plus a group of neurons (scattered indices) that share one signal."""
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((tokens, neurons)).astype(np.float32)
    members = rng.choice(neurons, size=group, replace=False)
    signal = np.sin(np.linspace(0, 9, tokens)) + 0.5 * rng.standard_normal(tokens)
    states[:, members] = (signal[:, None] * 2.0
                          + 0.3 * rng.standard_normal((tokens, group))).astype(np.float32)
    return states, members


def test_the_similarity_order_puts_a_planted_correlated_group_in_adjacent_rows():
    states, members = _planted()
    order = similarity_order(states, seed=3)
    assert sorted(order.order.tolist()) == list(range(states.shape[1]))   # a permutation
    rows = np.sort(order.rank[members])
    assert rows[-1] - rows[0] < 2 * members.size, rows   # together, out of 900 rows
    # The index order scatters them: the sort is what brought them together.
    assert np.ptp(np.sort(members)) > 10 * members.size
    # Same seed, same order; silent neurons go last as their own band.
    again = similarity_order(states, seed=3)
    np.testing.assert_array_equal(again.order, order.order)
    states[:, [5, 7]] = 0.25
    with_silent = similarity_order(states, seed=3)
    assert with_silent.order[-2:].tolist() == [5, 7]
    assert with_silent.bands[-1].label == "silent" and with_silent.bands[-1].start == 898


def test_the_raster_keeps_each_cells_largest_magnitude_and_says_which_neurons_a_row_holds():
    rng = np.random.default_rng(1)
    states = rng.standard_normal((7, 103)).astype(np.float32)
    states[3, 40] = -9.0               # one strongly negative neuron
    order = RowOrder(rng.permutation(103), "test")
    pooler = RasterPooler(order, rows=10)
    image = pooler.pool(states)
    assert image.shape == (10, 7)
    covered = np.concatenate([pooler.neurons_in_row(r) for r in range(10)])
    np.testing.assert_array_equal(covered, order.order)   # every neuron in exactly one row
    for r in range(10):
        neurons = pooler.neurons_in_row(r)
        for t in range(7):
            values = states[t, neurons]
            want = values[np.argmax(np.abs(values))]
            assert image[r, t] == want
    assert image[pooler.row_of_neuron(40), 3] == -9.0   # not averaged away
    np.testing.assert_array_equal(pooler.pool_one(states[5]), image[:, 5])
    # More rows than neurons: one neuron a row, in order.
    full = RasterPooler(order, rows=500)
    assert full.rows == 103
    np.testing.assert_array_equal(full.pool(states), states[:, order.order].T)


def test_the_anatomical_order_bands_superclasses_and_sorts_cell_types_within():
    sup = ["b", "a", "b", "a", "c", "a"]
    typ = ["t2", "t9", "t1", "t3", "t0", "t3"]
    order = anatomy_order(sup, typ)
    assert order.order.tolist() == [3, 5, 1, 2, 0, 4]
    assert [(b.label, b.start, b.stop) for b in order.bands] == [("a", 0, 3), ("b", 3, 5),
                                                                 ("c", 5, 6)]
    assert importance_order(np.array([0.1, -3.0, np.nan, 2.0])).order.tolist() == [1, 3, 0, 2]
    with pytest.raises(InputError, match="labels for"):
        anatomy_order(["a"], ["t1", "t2"], n=2)


@pytest.mark.parametrize("labelled", ["both", "superclass only", "cell type only", "neither"])
def test_the_anatomy_order_is_superclass_then_cell_type_then_index(labelled):
    """The order and bands equal sorting the neurons by (superclass, cell type, index) and
    cutting at each new superclass, on labels that compare awkwardly (a prefix of another,
    case, accents, empty or missing for "unlabelled", repeated across superclasses)."""
    rng = np.random.default_rng(4)
    pool = ["a", "ab", "A", "b", "", None, "\u00e9t\u00e9", "unlabelled", "Z9", "z"]
    n = 3000
    sup = [pool[i] for i in rng.integers(0, len(pool), n)]
    typ = [pool[i] for i in rng.integers(0, len(pool), n)]
    given_sup = sup if labelled in ("both", "superclass only") else None
    given_typ = typ if labelled in ("both", "cell type only") else None
    found = anatomy_order(given_sup, given_typ, n=n)

    def label(values, i):
        return "unlabelled" if values is None or not values[i] else str(values[i])

    expected = sorted(range(n), key=lambda i: (label(given_sup, i), label(given_typ, i), i))
    assert found.order.dtype == np.int64 and found.order.tolist() == expected
    bands = []
    for row, i in enumerate(expected):
        if not bands or bands[-1][0] != label(given_sup, i):
            bands.append([label(given_sup, i), row, row])
        bands[-1][2] = row + 1
    assert [(b.label, b.start, b.stop) for b in found.bands] == [tuple(b) for b in bands]
    assert anatomy_order([], [], n=0).order.size == 0 and anatomy_order([], []).bands == ()


def test_group_time_courses_are_the_groupby_means():
    rng = np.random.default_rng(2)
    states = rng.standard_normal((9, 60)).astype(np.float32)
    labels = [f"type{i % 7}" for i in range(60)]
    parents = ["sup_even" if (i % 7) % 2 == 0 else "sup_odd" for i in range(60)]
    for quantity in ("mean", "abs"):
        courses = group_time_courses(states, labels, parents, quantity=quantity)
        assert sorted(courses.names) == sorted(set(labels))
        for name, values, size, parent in zip(courses.names, courses.values, courses.sizes,
                                              courses.parents):
            members = [i for i, label in enumerate(labels) if label == name]
            source = np.abs(states) if quantity == "abs" else states
            np.testing.assert_allclose(values, source[:, members].mean(axis=1), rtol=1e-5,
                                       atol=1e-6)
            assert size == len(members)
            assert parent == ("sup_even" if int(name[-1]) % 2 == 0 else "sup_odd")
    named = group_time_courses(states, labels, order="name")
    assert named.names == sorted(set(labels)) and named.row("type3") == 3
    with pytest.raises(InputError, match="no group"):
        named.row("nope")
    with pytest.raises(InputError, match="do not match"):
        group_time_courses(states[:, :10], labels)


def test_the_trajectory_is_numpys_svd():
    rng = np.random.default_rng(4)
    states = (rng.standard_normal((40, 3)) @ rng.standard_normal((3, 250))
              + 0.05 * rng.standard_normal((40, 250))).astype(np.float32)
    trajectory = principal_trajectory(states, components=3)
    centred = states.astype(np.float64) - states.astype(np.float64).mean(axis=0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    for k in range(3):
        sign = np.sign(vt[k] @ trajectory.axes[k])
        np.testing.assert_allclose(trajectory.axes[k], sign * vt[k], atol=1e-5)
        np.testing.assert_allclose(trajectory.coordinates[:, k], sign * u[:, k] * s[k],
                                   atol=1e-5 * s[0])
    np.testing.assert_allclose(trajectory.explained, s[:3] ** 2 / (s ** 2).sum(), rtol=1e-6)
    assert trajectory.explained.sum() > 0.95            # three planted dimensions
    # Another run on the same axes; the run itself projects onto its own coordinates.
    np.testing.assert_allclose(trajectory.project(states), trajectory.coordinates, atol=1e-6)
    with pytest.raises(InputError, match="at least two tokens"):
        principal_trajectory(states[:1])


def test_the_variance_another_run_keeps_on_fixed_axes():
    rng = np.random.default_rng(6)
    planted = rng.standard_normal((3, 120))
    states = rng.standard_normal((30, 3)) @ planted + 0.01 * rng.standard_normal((30, 120))
    trajectory = principal_trajectory(states, components=3)
    # On its own axes a run keeps exactly what its PCA explains.
    np.testing.assert_allclose(trajectory.captured(states), trajectory.explained, rtol=1e-9)
    # A run in the same three dimensions keeps nearly all of its variance on them, one in
    # other dimensions nearly none; the sum of squares is computed here directly.
    other = rng.standard_normal((25, 120))
    centred = other - other.mean(axis=0)
    expected = ((centred @ trajectory.axes.T) ** 2).sum(axis=0) / (centred ** 2).sum()
    np.testing.assert_allclose(trajectory.captured(other), expected, rtol=1e-9)
    assert trajectory.captured(other).sum() < 0.2
    assert trajectory.captured(rng.standard_normal((25, 3)) @ planted).sum() > 0.99
    with pytest.raises(InputError, match="do not match"):
        trajectory.captured(other[:, :10])


def test_a_run_with_fewer_dimensions_than_components_has_zero_axes_beyond_them():
    """Three tokens on one line (a patched run that moved along one direction): the second
    and third components have no variance, and their axes are zero, not rounding noise
    divided by 1e-300 (axes of norm 1e280 whose squares overflowed in ``captured``)."""
    import warnings

    rng = np.random.default_rng(8)
    start, step = rng.standard_normal(200), rng.standard_normal(200)
    states = np.stack([start + k * step for k in range(3)]).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trajectory = principal_trajectory(states, components=3)
        captured = trajectory.captured(rng.standard_normal((5, 200)))
    norms = np.linalg.norm(trajectory.axes, axis=1)
    np.testing.assert_allclose(norms[0], 1.0, rtol=1e-6)
    np.testing.assert_array_equal(norms[1:], 0.0)
    np.testing.assert_allclose(trajectory.explained, [1.0, 0.0, 0.0], atol=1e-9)
    assert np.isfinite(captured).all() and captured[1:].sum() == 0.0
    np.testing.assert_allclose(trajectory.coordinates[:, 1:], 0.0)


def test_thousands_of_groups_are_ordered_by_similarity_too():
    """Above the optimal-leaf limit the groups are sorted like neurons: the two families of
    time courses end up as two runs of rows."""
    rng = np.random.default_rng(5)
    tokens, groups = 80, 400
    family = rng.integers(0, 2, groups)
    signals = np.stack([np.sin(np.linspace(0, 6, tokens)), np.cos(np.linspace(0, 11, tokens))])
    labels = [f"g{i}" for i in range(groups) for _ in range(3)]
    states = np.repeat(signals[family].T, 3, axis=1) + 0.2 * rng.standard_normal(
        (tokens, groups * 3))
    courses = group_time_courses(states.astype(np.float32), labels)
    assert sorted(courses.names) == sorted(set(labels))
    shown = family[[int(name[1:]) for name in courses.names]]
    assert np.count_nonzero(np.diff(shown)) <= 3        # families stay together
