"""The atlas's principal axes: a randomized sketch of the corpus's state covariance.

An atlas keeps the first three principal axes of all the states of its corpus,
so that every run of a model can be drawn in the same space (the Trajectory
dock's *The atlas's axes*, :meth:`flyviz.analysis.atlas.Atlas.principal_axes`).
The covariance of 49,393 neurons (9.8 GB in float64) is never formed; in the
atlas's single pass each chunk keeps a Nyström sketch of it that merges across
Dask workers by summation:

``G = sum_t x_t (x_t^T Omega)``  (``N x k``, float64) and ``s = sum_t x_t``

with ``Omega`` a fixed ``N x k`` Gaussian test matrix (``k = min(N, 24)``)
regenerated from :data:`SKETCH_SEED` on every worker (never shipped). With the
count ``n`` the atlas keeps anyway (:mod:`flyviz.analysis.atlas_stats`) and
``mu = s / n``, ``Y = G / n - mu (mu^T Omega) = C Omega`` for the population
covariance ``C`` (``s`` is summed in float64 here rather than taken from the
atlas's mean, whose float32 step sums would be amplified by the cancellation).
The Nyström approximation ``C ~ Y (Omega^T Y)^+ Y^T`` is exact when the
states' rank is at most ``k``; otherwise it approximates the leading axes,
closely when their variance decays fast and roughly when the spectrum is flat,
as the brain's is (the README gives the figures). :func:`finish_basis` computes its top axes through
``Y = QR`` and a small symmetric ``k x k`` eigenproblem, with the stabilising
shift of Tropp et al. (2017, "Fixed-rank approximation of a positive-semidefinite
matrix from streaming data"), in float64.

This module has one job: the sketch (:class:`CovarianceSketch`, its merge
:func:`merge_sketches`) and the axes from it (:func:`finish_basis`). It is
Qt-free and NumPy-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: The seed of the test matrix ``Omega`` (part of the atlas's run key: one seed, one basis).
SKETCH_SEED = 0x19_5EED
#: Columns of the sketch (at most the neurons): 8x the three axes kept.
SKETCH_COLUMNS = 24
#: Principal axes an atlas keeps.
COMPONENTS = 3
#: The arrays an atlas keeps them in (an atlas written before flyviz kept axes has none).
AXES_ARRAYS = ("pca_axes", "pca_mean", "pca_variance", "pca_total_variance")
#: An axis is kept when its variance is above this share of the total (below is roundoff).
RELATIVE_FLOOR = 1e-12


def sketch_columns(neurons: int) -> int:
    """``k``: the sketch's columns for ``neurons`` neurons."""
    return max(1, min(int(neurons), SKETCH_COLUMNS))


@lru_cache(maxsize=4)
def probe_matrix(neurons: int, columns: int, seed: int = SKETCH_SEED) -> np.ndarray:
    """The read-only ``(neurons, columns)`` float64 Gaussian test matrix ``Omega``.

    The same on every worker and every run (NumPy's PCG64 stream of ``seed``).
    """
    omega = np.random.default_rng(seed).standard_normal((neurons, columns))
    omega.flags.writeable = False
    return omega


@lru_cache(maxsize=4)
def _probe_rows(neurons: int, columns: int, seed: int) -> np.ndarray:
    """``Omega^T``, C-contiguous (the product with the states is fastest this way)."""
    rows = np.ascontiguousarray(probe_matrix(neurons, columns, seed).T)
    rows.flags.writeable = False
    return rows


class CovarianceSketch:
    """One chunk's sketch ``G = sum_t x_t x_t^T Omega`` of the states' second moments, and
    their sum ``s``.

    Parameters
    ----------
    neurons
        ``N``.
    seed
        The test matrix's seed.
    """

    def __init__(self, neurons: int, seed: int = SKETCH_SEED) -> None:
        self.neurons = int(neurons)
        self.omega = probe_matrix(self.neurons, sketch_columns(self.neurons), seed)
        k = self.omega.shape[1]
        self._omega_rows = _probe_rows(self.neurons, k, seed)
        # [G | s] in one array: the sum is the product with a column of ones, so one
        # matrix product updates both.
        self._acc = np.zeros((self.neurons, k + 1), dtype=np.float64)
        self._scratch: np.ndarray | None = None

    @property
    def sketch(self) -> np.ndarray:
        """``G``, ``(neurons, k)`` float64 (a copy)."""
        return np.ascontiguousarray(self._acc[:, :-1])

    @property
    def total(self) -> np.ndarray:
        """``s``, the states' sum, ``(neurons,)`` float64 (a copy)."""
        return self._acc[:, -1].copy()

    def add(self, xs: np.ndarray) -> None:
        """Add the states ``xs`` (``(neurons, m)``, one state a column, as the engine keeps them).

        The products are float64: ``Y`` is ``G / n`` less the mean's part, and
        float32 roundoff, amplified by that cancellation, moved the axes of a
        test corpus by 1e-4 rad and more.
        """
        m = xs.shape[1]
        if m == 0:
            return
        if self._scratch is None or self._scratch.shape[1] < m:
            self._scratch = np.empty((self.neurons, m), dtype=np.float64)
        x = self._scratch[:, :m]
        np.copyto(x, xs)
        k = self.omega.shape[1]
        probe = np.empty((m, k + 1), dtype=np.float64)
        probe[:, :k] = (self._omega_rows @ x).T          # X Omega (Omega^T x: BLAS's fast layout)
        probe[:, k] = 1.0
        self._acc += x @ probe


def merge_sketches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two chunks' sketches (or state sums) merged: their sum (both are sums over states)."""
    return a + b


@dataclass(frozen=True)
class Basis:
    """Principal axes of an atlas's corpus, from the sketch.

    Attributes
    ----------
    axes
        ``(c, N)`` float64 orthonormal axes, ``c <= 3`` (fewer when the states
        vary in fewer directions); each axis's largest loading is positive.
    mean
        ``(N,)`` the corpus's mean state.
    variance
        ``(c,)`` the (population) variance of the corpus's states along each
        axis, as the Nyström approximation has it: exact when the states span
        at most ``k`` directions, low otherwise.
    total_variance
        The corpus's total variance (the trace of the covariance).
    """

    axes: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    total_variance: float


def finish_basis(sketch: np.ndarray, total: np.ndarray, count: int, total_variance: float,
                 components: int = COMPONENTS, seed: int = SKETCH_SEED) -> Basis:
    """The top principal axes from the merged sketch.

    Parameters
    ----------
    sketch
        ``G``: the summed ``(N, k)`` sketch of ``count`` states.
    total
        ``(N,)`` their sum ``s``.
    count
        ``n``: how many states.
    total_variance
        The trace of their covariance (the per-neuron variances summed, from
        the atlas's moments).
    components
        Axes wanted (at most ``k``).
    seed
        The test matrix's seed (the one the sketch was made with).

    Returns
    -------
    Basis
        Up to ``components`` axes; none when the states do not vary. Never NaN.
    """
    g = np.asarray(sketch, dtype=np.float64)
    n_neurons, k = g.shape
    mu = np.asarray(total, dtype=np.float64) / max(int(count), 1)
    omega = probe_matrix(n_neurons, k, seed)
    empty = Basis(np.zeros((0, n_neurons)), mu, np.zeros(0), max(float(total_variance), 0.0))
    if count < 2 or not np.isfinite(g).all() or total_variance <= 0:
        return empty
    y = g / count - np.outer(mu, mu @ omega)                   # C Omega
    # The shift nu I keeps Omega^T Y + nu Omega^T Omega positive definite despite roundoff
    # (Tropp et al. 2017, alg. 3); it is taken off the eigenvalues again at the end.
    nu = np.sqrt(n_neurons) * np.finfo(np.float64).eps * max(np.linalg.norm(y), 1e-300)
    for _attempt in range(8):
        shifted = y + nu * omega
        small = omega.T @ shifted
        small = 0.5 * (small + small.T)
        try:
            lower = np.linalg.cholesky(small)
            break
        except np.linalg.LinAlgError:
            nu *= 100.0
    else:
        return empty
    q, r = np.linalg.qr(shifted)                                # Y_nu = Q R
    # C ~ Q R (Omega^T Y_nu)^-1 R^T Q^T = Q (R L^-T)(R L^-T)^T Q^T: a k x k eigenproblem.
    half = np.linalg.solve(lower, r.T).T                        # R L^-T
    values, vectors = np.linalg.eigh(half @ half.T)
    order = np.argsort(values)[::-1]
    values = np.maximum(values[order] - nu, 0.0)
    vectors = vectors[:, order]
    floor = RELATIVE_FLOOR * float(total_variance)
    keep = min(int(components), int(np.count_nonzero(values > floor)))
    axes = (q @ vectors[:, :keep]).T
    # The sign convention of flyviz.analysis.population.principal_trajectory.
    if keep:
        flip = np.sign(axes[np.arange(keep), np.argmax(np.abs(axes), axis=1)])
        flip[flip == 0] = 1.0
        axes = axes * flip[:, None]
    return Basis(np.ascontiguousarray(axes), mu, values[:keep].copy(), float(total_variance))


__all__ = ["AXES_ARRAYS", "Basis", "COMPONENTS", "CovarianceSketch", "RELATIVE_FLOOR", "SKETCH_COLUMNS",
           "SKETCH_SEED", "finish_basis", "merge_sketches", "sketch_columns", "probe_matrix"]
