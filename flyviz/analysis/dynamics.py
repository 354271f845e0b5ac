"""The Fly LLM as a dynamical system: step Jacobians, memory, spread and driving modes.

The step that reads token ``t`` (:mod:`flyviz.model.engine`) is
``x_t = (1 - lam) x_{t-1} + lam tanh(u_t)`` with ``u_t = g (r (W' x_{t-1}) + D_t) + b``,
then the neurons a silence or clamp sets are overwritten. Its Jacobian is ::

    J_t = dx_t / dx_{t-1} = (1 - lam) I + diag(lam sech^2(u_t) g r) W'

with the rows of the neurons set at step ``t`` zeroed. The released models take one step
per token (no microsteps); a model with several would multiply their Jacobians in
:meth:`StepJacobians.matvec`. ``J_t`` is never formed: one ``J_t v`` is one sparse product
with ``W'`` (the :class:`~flyviz.model.attribution.BackwardEngine`'s forward layout) and one
``J_t^T v`` one with ``W'^T`` (its backward layout), both float32 like the engine, over the
tape of the run (:func:`~flyviz.model.attribution.record_tape` with slopes).

What :func:`portrait` measures on one prompt:

* per position, the ``K`` eigenvalues of ``J_t`` of largest modulus (ARPACK,
  :func:`scipy.sparse.linalg.eigs` on a :class:`~scipy.sparse.linalg.LinearOperator`) and
  the spectral radius;
* the memory of the state: ``directions`` seeded random unit perturbations of ``x_p``
  carried forward under the same input by the product of the following step Jacobians (the
  linear response), their norms per token summarised by the geometric mean (with the
  quartiles over directions beside it), and the tokens until that falls to half
  (log-linear between tokens), beside the leak-only bound ``ln 0.5 / ln(1 - lam)`` (0.30
  tokens at lam = 0.9). One direction is not enough: how much of it lies in the few slow
  directions varies so much that its slow tail's half-life moves severalfold with the seed;
  the mean log norm over 16 moves by a fraction;
* how far sparse input spreads: a one-token drive (the linearised effect of a unit drive on
  the input neurons of slot 0 at step ``p``) carried ``k`` steps, and the fraction of neurons
  whose response is at least ``threshold`` times the largest one after each step;
* the leading driving modes: the left eigenvectors of ``J`` at one position (eigenvectors of
  ``J^T``, what a perturbation must have to excite the slowest directions), summarised by
  cell type: each type's share of the modes' squared weight beside its share of the neurons,
  and the modes' participation ratio (the fraction of neurons that effectively carry them).

:func:`compare_with_nulls` measures the same properties on null wirings
(:mod:`flyviz.analysis.nulls`; in this process or on Dask through
:func:`flyviz.analysis.cluster.run_each`) and reports each real value against them as
``z = (real - mean) / sd`` with the nulls' spread and the empirical two-sided p. Of a null
only the spectral radius is found, not its other eigenvalues, which are not compared
(:func:`null_settings`).

Qt-free.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine, Tape
    from flyviz.model.checkpoint import Checkpoint

__all__ = ["DRIVING_BASIS", "DynamicsSettings", "LOCKSTEP_POSITIONS", "NULL_PROPERTIES",
           "NullProgress", "Portrait", "StepJacobians", "compare_with_nulls",
           "eigenvalues_in_lockstep", "leak_only_half_life", "null_property_values",
           "null_settings", "portrait", "portrait_of_checkpoint"]

#: The properties compared with nulls: (key, what it is), in the printed order.
NULL_PROPERTIES: tuple[tuple[str, str], ...] = (
    ("spectral_radius_mean", "spectral radius, mean over positions"),
    ("spectral_radius_max", "spectral radius, largest over positions"),
    ("half_life_tokens", "memory half-life, tokens (capped at the tokens that follow)"),
    ("spread_fraction", "fraction of neurons a one-token drive reaches"),
    ("driving_participation", "driving modes' participation (fraction of neurons)"),
    ("driving_top_type_share", "driving modes' largest cell-type share"),
)


@dataclass(frozen=True)
class DynamicsSettings:
    """What :func:`portrait` measures and how.

    Attributes
    ----------
    eigenvalues
        Eigenvalues of largest modulus per position (``K``).
    perturb_at
        The position whose state is perturbed (memory) and driven (spread); the following
        positions carry it. Default 1, the first token after BOS.
    spread_steps
        Steps a one-token drive is carried (fewer where the prompt ends sooner).
    spread_threshold
        A neuron is reached when its response is at least this fraction of the largest.
    driving_modes
        Leading left eigenvectors summarised by cell type.
    modes_at
        The position whose driving modes are found (``None``: the last).
    seed
        The seed of the perturbations' directions and of ARPACK's start vectors.
    directions
        Random perturbation directions whose memory curves are summarised (their
        geometric mean per token, with the quartiles).
    tolerance
        ARPACK's relative accuracy of an eigenvalue (0: machine precision).
    """

    eigenvalues: int = 20
    perturb_at: int = 1
    spread_steps: int = 5
    spread_threshold: float = 0.01
    driving_modes: int = 3
    modes_at: int | None = None
    seed: int = 0
    tolerance: float = 1e-9
    directions: int = 16

    def validate(self) -> "DynamicsSettings":
        """Raise :class:`InputError` for a value out of range; return ``self``."""
        from flyviz.arguments import whole_number

        whole_number("--eigenvalues", self.eigenvalues, 1, 1000)
        whole_number("--perturb-at", self.perturb_at, 0, None)
        whole_number("--spread-steps", self.spread_steps, 1, 1000)
        whole_number("--driving-modes", self.driving_modes, 1, 100)
        whole_number("--seed", self.seed, 0, 2**32 - 1)
        whole_number("--directions", self.directions, 1, 1024)
        if self.modes_at is not None:
            whole_number("--modes-at", self.modes_at, 0, None)
        for name, value, lo, hi in (("--spread-threshold", self.spread_threshold, 0.0, 1.0),
                                    ("tolerance", self.tolerance, 0.0, 1.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or not lo <= value < hi \
                    or (name == "--spread-threshold" and value <= 0):
                raise InputError(f"{name} {value!r} must be a number in "
                                 f"{'(' if name == '--spread-threshold' else '['}{lo:g}, {hi:g})")
        return self


def leak_only_half_life(leak: float) -> float:
    """Tokens for a perturbation to halve with ``W`` ignored: ``ln 0.5 / ln(1 - leak)``
    (``inf`` without a leak, 0 with a full one)."""
    keep = 1.0 - float(leak)
    if keep <= 0.0:
        return 0.0
    if keep >= 1.0:
        return math.inf
    return math.log(0.5) / math.log(keep)


# ---------------------------------------------------------------- the Jacobians
class StepJacobians:
    """The step Jacobians ``J_t`` of one recorded run, matrix-free.

    Parameters
    ----------
    backward
        The model's :class:`~flyviz.model.attribution.BackwardEngine` (its forward and
        transposed layouts of ``W`` are what the products use).
    tape
        The run, recorded with ``slopes=True``.
    """

    def __init__(self, backward: "BackwardEngine", tape: "Tape") -> None:
        if not tape.keeps_slopes:
            raise ValueError("step Jacobians need a tape recorded with slopes=True")
        self.backward = backward
        self.tape = tape
        self.neurons = backward.neurons
        self.steps = tape.steps
        self.keep = np.float32(backward.keep)
        #: by position: the row scale in float32 and float64, and the set neurons' mask
        self._scales: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: by graph (its key): the rows of ``W'`` with a weight on another neuron, and each
        #: row's weight on its own neuron (float64)
        self._couplings: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.products = 0
        #: ``listener(products)`` after every product or batch of them: the work within a
        #: slow eigen-solve, where a position may take thousands (a place to cancel too)
        self.listener: Callable[[int], None] | None = None

    def _count(self, products: int) -> None:
        self.products += products
        if self.listener is not None:
            self.listener(self.products)

    def scale(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(lam sech^2(u_t) g r, mask)`` of the step at ``t``: the row scale of ``W'`` in
        ``J_t`` and the neurons a silence or clamp sets there (their rows are zero)."""
        a, _, mask = self._held_scale(t)
        return a, mask

    def _held_scale(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The row scale of the step at ``t`` in float32 and in float64 (what each product
        multiplies by), and the mask: computed once, held for the lockstep positions."""
        held = self._scales.get(t)
        if held is None:
            b = self.backward
            a = (self.tape.slope(t) * b.leak * b.gain * b.rec_gain).astype(np.float32)
            mask = np.zeros(self.neurons, dtype=bool)
            if self.tape.interventions.post_state:
                mask, _ = b.set_at(self.tape.interventions, t)
            a[mask] = 0.0
            held = (a, a.astype(np.float64), mask)
            if len(self._scales) >= 64:  # lockstep positions (at most 64) stay held
                self._scales.clear()
            self._scales[t] = held
        return held

    def is_zero(self, t: int) -> bool:
        """Whether ``J_t`` is zero: a silence or clamp sets every neuron at ``t`` (ARPACK
        cannot start there, every vector it is given goes to zero; the radius is 0)."""
        return bool(self._held_scale(t)[2].all())

    def _coupling(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``W'`` at ``t`` that weigh another neuron (a bool mask) and each row's
        weight on its own neuron: read once per graph (a cut or scale makes another)."""
        interventions = self.tape.interventions
        key = interventions.graph_key(t) if interventions.graph_edits else ()
        held = self._couplings.get(key)
        if held is None:
            ck = self.backward.checkpoint
            weights = np.asarray(self.backward.weights(interventions, t), dtype=np.float64)
            offsets = np.asarray(ck.w_offsets, dtype=np.int64)
            rows = np.repeat(np.arange(self.neurons), np.diff(offsets))
            own = rows == np.asarray(ck.w_indices, dtype=np.int64)
            coupled = np.zeros(self.neurons, dtype=bool)
            coupled[rows[~own & (weights != 0.0)]] = True
            loops = np.bincount(rows[own], weights=weights[own], minlength=self.neurons)
            held = (coupled, loops)
            if len(self._couplings) >= 64:
                self._couplings.clear()
            self._couplings[key] = held
        return held

    def diagonal(self, t: int) -> np.ndarray | None:
        """The diagonal of ``J_t`` (float64) where ``J_t`` is diagonal, else ``None``.

        ``J_t`` is diagonal where no neuron's row reaches another neuron: no recurrent weight
        acts at ``t`` (a model whose recurrent weights are all zero, or cut to zero) or the
        neurons it would act on are set by a silence or clamp. Its eigenvalues are then its
        diagonal, ``1 - lam`` (plus a self-synapse's part) and 0 where a neuron is set, and
        ARPACK is not asked: its Krylov basis of a diagonal matrix collapses (a zero ``J_t``,
        a full leak with no weights, hands it a zero vector: "starting vector is zero").
        """
        _, a64, mask = self._held_scale(t)
        coupled, loops = self._coupling(t)
        if np.any(a64[coupled] != 0.0):
            return None
        diagonal = np.full(self.neurons, float(self.keep)) + a64 * loops
        diagonal[mask] = 0.0
        return diagonal

    def matvec(self, t: int, v: np.ndarray) -> np.ndarray:
        """``J_t v`` (float64 in and out; the product itself runs in float32)."""
        v32 = np.ascontiguousarray(v, dtype=np.float32)
        wv = self.backward.forward_product(self.tape.interventions, t, v32)
        self._count(1)
        return self._step(t, v32, wv)

    def _step(self, t: int, v32: np.ndarray, wv: np.ndarray) -> np.ndarray:
        """``J_t v`` from ``v`` (float32) and ``W' v``: the one formula of every product."""
        _, a64, mask = self._held_scale(t)
        out = v32.astype(np.float64) * float(self.keep)
        out += a64 * wv
        out[mask] = 0.0
        return out

    def matvecs(self, positions: Sequence[int], vectors: Sequence[np.ndarray],
                columns: int | None = None) -> list[np.ndarray]:
        """``J_t v`` for ``t = positions[j]``, ``v = vectors[j]`` (float64 in and out), with
        one multi-column product per graph
        (:meth:`~flyviz.model.attribution.BackwardEngine.forward_products`) for the positions
        that share it. Each result equals :meth:`matvec` of it bit for bit.

        ``columns`` is the width of the products (padded with zero columns; a multiple of
        :data:`~flyviz.model.kernels.MULTI_LANES`, at least ``len(positions)``; default the
        smallest): keeping it fixed keeps one layout of the graph.
        """
        from flyviz.model.kernels import MULTI_LANES, padded_columns

        interventions = self.tape.interventions
        count = len(positions)
        width = padded_columns(count) if columns is None else int(columns)
        if len(vectors) != count or width < count or width % MULTI_LANES:
            raise ValueError(f"matvecs needs one vector per position and a width of at least "
                             f"{count} columns, a multiple of {MULTI_LANES}")
        groups: dict[Any, list[int]] = {}
        for j, t in enumerate(positions):
            key = interventions.graph_key(t) if interventions.graph_edits else ()
            groups.setdefault(key, []).append(j)
        out: list[np.ndarray] = [np.empty(0)] * count
        x = np.zeros((self.neurons, width), dtype=np.float32)
        for members in groups.values():
            v32 = [np.ascontiguousarray(vectors[j], dtype=np.float32) for j in members]
            for i, v in enumerate(v32):
                x[:, i] = v
            x[:, len(members):] = 0.0
            wx = self.backward.forward_products(interventions, positions[members[0]], x)
            rows = np.ascontiguousarray(wx.T[:len(members)])  # one column of W'X per row
            for i, j in enumerate(members):
                out[j] = self._step(positions[j], v32[i], rows[i])
        self._count(count)
        return out

    def rmatvec(self, t: int, y: np.ndarray) -> np.ndarray:
        """``J_t^T y`` (float64 in and out)."""
        a, mask = self.scale(t)
        m = np.array(y, dtype=np.float64)
        m[mask] = 0.0
        scaled = (a.astype(np.float64) * m).astype(np.float32)
        wt = self.backward.transposed_product(self.tape.interventions, t, scaled)
        self._count(1)
        return m * float(self.keep) + wt

    def operator(self, t: int, transpose: bool = False) -> Any:
        """``J_t`` (or ``J_t^T``) as a :class:`scipy.sparse.linalg.LinearOperator`."""
        from scipy.sparse.linalg import LinearOperator

        n = self.neurons

        def forward(v: np.ndarray) -> np.ndarray:
            return self.matvec(t, np.ravel(v))

        def backward(v: np.ndarray) -> np.ndarray:
            return self.rmatvec(t, np.ravel(v))

        if transpose:
            return LinearOperator((n, n), matvec=backward, rmatvec=forward, dtype=np.float64)
        return LinearOperator((n, n), matvec=forward, rmatvec=backward, dtype=np.float64)

    def dense(self, t: int) -> np.ndarray:
        """``J_t`` as a dense float64 matrix (small models: tests and checks)."""
        ck = self.backward.checkpoint
        n = self.neurons
        a, mask = self.scale(t)
        weights = self.backward.weights(self.tape.interventions, t).astype(np.float64)
        offsets = np.asarray(ck.w_offsets, dtype=np.int64)
        rows = np.repeat(np.arange(n), np.diff(offsets))
        w = np.zeros((n, n))
        np.add.at(w, (rows, np.asarray(ck.w_indices, dtype=np.int64)), weights)
        jac = np.eye(n) * float(self.keep) + a.astype(np.float64)[:, None] * w
        jac[mask] = 0.0
        return jac


def diagonal_eigenvalues(diagonal: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` eigenvalues of largest modulus (largest first, complex) of a diagonal
    matrix: its diagonal's entries of largest modulus (:meth:`StepJacobians.diagonal`)."""
    order = np.argsort(-np.abs(diagonal), kind="stable")[:k]
    return np.asarray(diagonal, dtype=np.float64)[order].astype(complex)


def _known_spectrum(jac: "StepJacobians", t: int, k: int) -> np.ndarray | None:
    """The ``k`` leading eigenvalues of ``J_t`` where they are known without ARPACK: none
    (an empty array) where every neuron is set there (``J_t = 0`` has no modes to find), the
    diagonal's where ``J_t`` is diagonal; ``None`` where ARPACK must find them."""
    if jac.is_zero(t):
        return np.zeros(0, complex)
    diagonal = jac.diagonal(t)
    return None if diagonal is None else diagonal_eigenvalues(diagonal, k)


def _start_vector(n: int, seed: int, t: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([seed, t, 7]))
    return rng.standard_normal(n)


def _arpack_ncv(n: int, k: int, least: int = 20) -> int:
    """ARPACK's basis size for ``k`` eigenvalues (at least ``2k + 1`` and ``least``)."""
    return min(n, max(2 * k + 1, least))


#: The least basis of the driving modes' ARPACK run. Their few modes (3 by default) are the
#: leading one and, on a null wiring, modes on the edge of the bulk of the spectrum, where
#: many eigenvalues share nearly one modulus: on a degree null of the demo brain a basis of
#: 20 took 7,281 products, one of 40 took 985 (60: 831); on the real model 86 and 113
#: (docs/dynamics.md, "Accuracy and cost").
DRIVING_BASIS = 40


def leading_eigen(op: Any, n: int, k: int, *, seed: int, t: int, tolerance: float,
                  vectors: bool = False, dense: Callable[[], np.ndarray] | None = None,
                  basis: int = 20) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``k`` eigenvalues of largest modulus of ``op`` (largest first), and with
    ``vectors`` their eigenvectors as columns. ARPACK where ``k < n - 1`` (a basis of at
    least ``basis`` vectors); a dense decomposition of ``dense()`` otherwise (a model too
    small for ARPACK's ``k``). Where ARPACK stops before converging, fewer than ``k``
    (those that converged) come back: the caller says so."""
    from scipy.sparse.linalg import ArpackNoConvergence, eigs

    if k >= n - 1:
        if dense is None:
            raise InputError(f"{k} eigenvalues of a {n}-neuron model: ask for at most {n - 2}")
        matrix = dense()
        if vectors:
            values, vecs = np.linalg.eig(matrix)
        else:
            values, vecs = np.linalg.eigvals(matrix), None
    else:
        try:
            found = eigs(op, k=k, which="LM", tol=tolerance, ncv=_arpack_ncv(n, k, basis),
                         maxiter=max(1000, 10 * n),
                         v0=_start_vector(n, seed, t), return_eigenvectors=vectors)
        except ArpackNoConvergence as exc:  # keep what converged; say so in the count
            found = (exc.eigenvalues, exc.eigenvectors) if vectors else exc.eigenvalues
        values, vecs = (found if vectors else (found, None))
    order = np.argsort(-np.abs(values), kind="stable")[:k]
    values = np.asarray(values)[order]
    return values, (None if vecs is None else np.asarray(vecs)[:, order])


#: The most positions whose ARPACK runs advance in lockstep, sharing each round's
#: products (:func:`eigenvalues_in_lockstep`), and the most memory their Krylov bases
#: may take together (each ``8 * neurons * ncv`` bytes: 16 MB at full size, K = 20).
LOCKSTEP_POSITIONS = 16
LOCKSTEP_BYTES = 256 * 2**20


def _arpack_run(n: int, k: int, *, tolerance: float, v0: np.ndarray) -> Any | None:
    """One run of ARPACK (``dnaupd``, largest modulus) that asks for its products instead of
    computing them, as :func:`scipy.sparse.linalg.eigs` sets it up; ``None`` where this
    scipy's ARPACK keeps its state in the process (the Fortran one before scipy 1.16, whose
    runs cannot be interleaved) or its interface differs."""
    try:
        from scipy.sparse.linalg._eigen.arpack.arpack import _UnsymmetricArpackParams

        run = _UnsymmetricArpackParams(n, k, "d", _no_product, mode=1, ncv=_arpack_ncv(n, k),
                                       v0=v0, maxiter=max(1000, 10 * n), which="LM",
                                       tol=tolerance)
    except Exception:  # an older or newer scipy: the positions run one at a time
        return None
    needed = ("arpack_dict", "ipntr", "workd", "iterate", "extract", "converged", "OP")
    return run if all(hasattr(run, name) for name in needed) else None


def _no_product(v: np.ndarray) -> np.ndarray:  # pragma: no cover - replaced before use
    raise RuntimeError("an ARPACK run in lockstep computed a product itself")


def eigenvalues_in_lockstep(jac: StepJacobians, positions: Sequence[int], k: int, *,
                            seed: int, tolerance: float, at_once: int = LOCKSTEP_POSITIONS,
                            progress: Callable[[int], None] | None = None
                            ) -> list[np.ndarray] | None:
    """The ``k`` eigenvalues of largest modulus of ``J_t`` for every ``t`` in ``positions``
    (largest first), the same as :func:`leading_eigen` gives position by position.

    Up to ``at_once`` ARPACK runs (one per position, each with its own start vector) advance
    in lockstep: each round, every run that asks for a product ``J_t v`` gets it from one
    multi-column product with ``W'`` per graph (:meth:`StepJacobians.matvecs`), which reads
    the graph once for all of them; a finished run's place goes to the next position. Each
    run sees exactly the products it would see alone, so the eigenvalues are those of
    :func:`leading_eigen` (bit for bit where the kernels' products are); a product costs
    far less per position (docs/dynamics.md, "Accuracy and cost").

    Returns ``None`` (nothing computed) where the runs cannot be interleaved (see
    :func:`_arpack_run`) or ``k`` needs the dense path; ``progress(done)`` is told how
    many positions are finished now and then (at least every 25 rounds).
    """
    from scipy.sparse.linalg import ArpackNoConvergence

    from flyviz.model.kernels import padded_columns

    n = jac.neurons
    if k >= n - 1 or not positions:
        return None
    at_once = max(1, min(int(at_once), LOCKSTEP_BYTES // (8 * n * _arpack_ncv(n, k))))
    width = padded_columns(at_once)  # fixed: one layout of each graph
    # a zero J_t has no modes to find (radius 0) and a diagonal one's are its diagonal:
    # ARPACK would stop at a zero vector
    found: dict[int, np.ndarray] = {}
    for t in positions:
        known = _known_spectrum(jac, t, k)
        if known is not None:
            found[t] = known
    waiting = [t for t in positions if t not in found]
    runs: dict[int, Any] = {}
    asked: dict[int, np.ndarray] = {}
    placeholder = np.zeros(n)

    def ask(t: int) -> Callable[[np.ndarray], np.ndarray]:
        def product(v: np.ndarray) -> np.ndarray:
            asked[t] = np.array(v, dtype=np.float64, copy=True)
            return placeholder  # overwritten with the product before the run goes on
        return product

    rounds = 0
    while waiting or runs:
        while waiting and len(runs) < at_once:
            t = waiting.pop(0)
            run = _arpack_run(n, k, tolerance=tolerance, v0=_start_vector(n, seed, t))
            if run is None:
                return None
            run.OP = ask(t)
            runs[t] = run
        asked.clear()
        done_before = len(found)
        for t in list(runs):
            run = runs[t]
            try:
                run.iterate()
            except ArpackNoConvergence as exc:  # keep what converged, as leading_eigen
                found[t] = np.asarray(exc.eigenvalues)
                del runs[t]
                continue
            if run.converged:
                found[t] = np.asarray(run.extract(False))
                del runs[t]
        ready = [t for t in runs if t in asked]
        if len(ready) > 2:
            products = jac.matvecs(ready, [asked[t] for t in ready], width)
        else:  # the last few: one-column products cost less than a padded batch
            products = [jac.matvec(t, asked[t]) for t in ready]
        for t, product in zip(ready, products):
            start = int(runs[t].ipntr[1])  # where the run reads its product (y)
            runs[t].workd[start:start + n] = product
        rounds += 1
        if progress is not None and (len(found) != done_before or rounds % 25 == 0):
            progress(len(found))
    result = []
    for t in positions:
        values = found[t]
        order = np.argsort(-np.abs(values), kind="stable")[:k]
        result.append(values[order])
    return result


# ---------------------------------------------------------------- the portrait
@dataclass
class Portrait:
    """What :func:`portrait` measured on one prompt (see the module notes).

    Attributes
    ----------
    tokens, token_texts
        The ids read (BOS first) and their texts.
    eigenvalues
        Per position, the ``K`` eigenvalues of largest modulus (complex, largest first).
    spectral_radius
        ``(positions,)`` the largest modulus per position.
    perturb_at
        The position perturbed and driven.
    memory_norms
        ``||J_{p+k} ... J_{p+1} d|| / ||d||`` for ``k = 0 ..`` (1 at ``k = 0``): the
        geometric mean over the random directions ``d``.
    memory_curves
        ``(directions, tokens)`` the same norm of each direction.
    half_life_tokens
        Tokens until ``memory_norms`` first falls to 0.5 (log-linear between tokens; a norm
        that falls to 0 halved as it left the token before: 0 for a perturbation gone after
        one step), or ``None`` when it stays above for every following token.
    leak_only_half_life_tokens
        ``ln 0.5 / ln(1 - lam)``.
    leak
        The model's ``lam``.
    spread_fraction
        Per step ``0 .. k``, the fraction of neurons a one-token drive reaches.
    driving
        The leading driving modes: position, eigenvalues, participation, cell types;
        ``diagonal`` True where ``J`` is diagonal (no neuron drives another: its
        eigenvalues are its diagonal, and no mode singles out neurons, participation NaN).
    products, seconds
        Jacobian-vector products used and wall time.
    unconverged
        The positions where ARPACK stopped before it converged on all ``K`` eigenvalues
        (its restarts ran out): their eigenvalues are those that converged, their radius
        the largest of them (NaN with none). Empty unless ARPACK's restarts ran out.
    """

    tokens: list[int]
    token_texts: list[str]
    eigenvalues: list[np.ndarray]
    spectral_radius: np.ndarray
    perturb_at: int
    memory_norms: np.ndarray
    half_life_tokens: float | None
    leak_only_half_life_tokens: float
    spread_fraction: np.ndarray
    spread_threshold: float
    driving: dict[str, Any]
    settings: DynamicsSettings
    leak: float = 0.9
    products: int = 0
    seconds: float = 0.0
    nulls: dict[str, Any] = field(default_factory=dict)
    memory_curves: np.ndarray | None = None
    unconverged: list[int] = field(default_factory=list)

    @property
    def tail_half_life_tokens(self) -> float | None:
        """The half-life of the perturbation's slow tail: ``ln 0.5`` over its mean log decay
        per token in the second half of the tokens followed (``None``: no decay there, or
        fewer than two tokens), on :attr:`memory_norms`."""
        return _tail_half_life(self.memory_norms)

    def memory_quartiles(self) -> dict[str, list[float | None]]:
        """The first and third quartiles over the directions of each direction's half-life,
        slow tail's half-life and remaining norm at the end (a half-life not reached or a
        tail without decay counts as longer than any: ``None`` where a quartile is one)."""
        curves = self.memory_curves if self.memory_curves is not None \
            else self.memory_norms[None, :]

        return {"half_life_tokens": _quartiles([_half_life(c) for c in curves]),
                "tail_half_life_tokens": _quartiles([_tail_half_life(c) for c in curves]),
                "remaining_at_end": _quartiles([float(c[-1]) for c in curves])}

    def property_values(self) -> dict[str, float]:
        """The scalar properties :data:`NULL_PROPERTIES` names (a half-life that outlasts the
        prompt counts as the tokens that follow, its lower bound)."""
        half = self.half_life_tokens
        if half is None:
            half = float(self.memory_norms.size - 1)
        # NaN where a position's eigen-solve converged on nothing (see unconverged): the
        # comparison then refuses it rather than count a missing radius as 0
        return {"spectral_radius_mean": float(self.spectral_radius.mean()),
                "spectral_radius_max": float(self.spectral_radius.max()),
                "half_life_tokens": float(half),
                "spread_fraction": float(self.spread_fraction[-1]),
                "driving_participation": float(self.driving["participation"]),
                "driving_top_type_share": float(self.driving["top_type_share"])}

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values (what ``flyviz dynamics --json`` prints)."""
        def number(value: float | None) -> float | None:
            return None if value is None or not math.isfinite(value) else float(value)

        positions = [{"index": i, "token": self.token_texts[i], "token_id": int(self.tokens[i]),
                      "spectral_radius": number(float(self.spectral_radius[i])),
                      "converged": i not in self.unconverged,
                      "eigenvalues": [[float(z.real), float(z.imag)] for z in values]}
                     for i, values in enumerate(self.eigenvalues)]
        directions = 1 if self.memory_curves is None else int(self.memory_curves.shape[0])
        return {"positions": positions,
                "memory": {"half_life_tokens": number(self.half_life_tokens),
                           "leak_only_half_life_tokens": number(self.leak_only_half_life_tokens),
                           "perturbed_at": self.perturb_at,
                           "tokens_followed": int(self.memory_norms.size - 1),
                           "norms": [float(v) for v in self.memory_norms],
                           "tail_half_life_tokens": number(self.tail_half_life_tokens),
                           "remaining_at_end": float(self.memory_norms[-1]),
                           "leak_only_remaining_at_end":
                               float((1.0 - self.leak) ** (self.memory_norms.size - 1)),
                           "directions": directions, "summary": "geometric mean",
                           "quartiles": self.memory_quartiles()},
                "spread": {"from": self.perturb_at, "threshold": self.spread_threshold,
                           "fraction": [float(v) for v in self.spread_fraction]},
                "driving_modes": {key: number(value) if isinstance(value, float) else value
                                  for key, value in self.driving.items()},
                "unconverged_positions": list(self.unconverged),
                "settings": asdict(self.settings),
                "products": self.products, "seconds": self.seconds,
                "nulls": self.nulls}


def _tail_half_life(norms: np.ndarray) -> float | None:
    """``ln 0.5`` over the mean log decay per token of ``norms`` in its second half."""
    half = norms.size // 2
    if norms.size - half < 2 or norms[-1] <= 0 or norms[half] <= 0:
        return None
    rate = (math.log(norms[-1]) - math.log(norms[half])) / (norms.size - 1 - half)
    return math.log(0.5) / rate if rate < 0 else None


def _geometric_mean(curves: np.ndarray) -> np.ndarray:
    """Per column, the geometric mean of ``curves`` (0 where any is 0): the typical
    direction's norm, which a few directions that happen to lie in the slow modes do not
    pull up as they pull up the arithmetic mean."""
    with np.errstate(divide="ignore"):
        logs = np.log(np.asarray(curves, np.float64))
    return np.exp(logs.mean(axis=0))


def _quartiles(values: Sequence[float | None]) -> list[float | None]:
    """The first and third quartiles (numpy's default, linear rule) of ``values``, where
    ``None`` is longer than any value; ``None`` where a quartile is one.

    Written out rather than ``np.percentile`` over infinities: that interpolates ``inf - inf``
    and ``0 * inf`` into NaN, so a quartile that falls exactly on a finite value beside an
    infinite one (the 75th of 1, 2, 3, 4, None is 4) came out as NaN, read as "longer than
    any", with a RuntimeWarning on the way.
    """
    ordered = np.sort(np.array([math.inf if v is None else v for v in values], np.float64))
    if ordered.size == 0:
        return [None, None]
    found: list[float | None] = []
    for q in (0.25, 0.75):
        position = q * (ordered.size - 1)
        low = math.floor(position)
        fraction = position - low
        below = float(ordered[low])
        if fraction == 0.0:
            value = below
        else:
            above = float(ordered[low + 1])
            value = math.inf if math.isinf(above) else below + (above - below) * fraction
        found.append(value if math.isfinite(value) else None)
    return found


def _half_life(norms: np.ndarray) -> float | None:
    """The first ``k`` (log-linear between tokens) where ``norms`` falls to 0.5.

    A norm that falls to 0 at token ``k`` halved as it left token ``k - 1``: the limit of
    the log-linear rule as that norm goes to 0, so a perturbation gone after one step has
    a half-life of 0, as :func:`leak_only_half_life` gives a full leak (not ``k``, which
    would say it held for a token)."""
    below = np.flatnonzero(norms <= 0.5)
    if below.size == 0:
        return None
    k = int(below[0])
    if k == 0:
        return 0.0
    hi, lo = float(norms[k - 1]), float(norms[k])
    if lo <= 0.0:
        return float(k - 1)
    return (k - 1) + (math.log(hi) - math.log(0.5)) / (math.log(hi) - math.log(lo))


def _driving_summary(jac: StepJacobians, t: int, settings: DynamicsSettings,
                     cell_types: Sequence[str] | None) -> dict[str, Any]:
    """The leading left eigenvectors of ``J_t`` summarised by cell type."""
    n = jac.neurons
    if jac.is_zero(t):  # every neuron set there: J_t = 0 has no driving modes
        return {"position": t, "eigenvalues": [], "participation": 0.0, "top_type_share": 0.0,
                "cell_types": [], "converged": True}
    k = min(settings.driving_modes, max(1, n - 2))
    diagonal = jac.diagonal(t)
    if diagonal is not None:
        # No neuron drives another: each neuron is its own mode (all of them one mode where
        # the diagonal is one number), so no mode singles out neurons or cell types.
        values = diagonal_eigenvalues(diagonal, k)
        return {"position": t, "eigenvalues": [[float(z.real), float(z.imag)] for z in values],
                "participation": math.nan, "top_type_share": math.nan, "cell_types": [],
                "converged": True, "diagonal": True}
    values, vectors = leading_eigen(jac.operator(t, transpose=True), n, k, seed=settings.seed,
                                    t=t + 10_000, tolerance=settings.tolerance, vectors=True,
                                    dense=lambda: jac.dense(t).T, basis=DRIVING_BASIS)
    assert vectors is not None
    if values.size == 0:   # ARPACK converged on none of them: no modes to summarise
        return {"position": t, "eigenvalues": [], "participation": math.nan,
                "top_type_share": math.nan, "cell_types": [], "converged": False}
    weight = np.abs(vectors) ** 2
    weight /= np.maximum(weight.sum(axis=0, keepdims=True), 1e-300)
    total = weight.mean(axis=1)                       # each mode counts the same
    participation = float(total.sum() ** 2 / max(float((total ** 2).sum()), 1e-300)) / n
    types: list[dict[str, Any]] = []
    top_share = 0.0
    if cell_types is not None and len(cell_types) == n:
        names, inverse = np.unique(np.asarray(cell_types, dtype=object).astype(str),
                                   return_inverse=True)
        share = np.bincount(inverse, weights=total, minlength=names.size)
        count = np.bincount(inverse, minlength=names.size)
        order = np.argsort(-share, kind="stable")[:10]
        types = [{"cell_type": str(names[g]), "share": float(share[g]),
                  "neurons": int(count[g]), "neuron_share": float(count[g] / n),
                  "enrichment": float(share[g] / (count[g] / n))} for g in order]
        top_share = float(share[order[0]]) if order.size else 0.0
    return {"position": t, "eigenvalues": [[float(z.real), float(z.imag)] for z in values],
            "participation": participation, "top_type_share": top_share, "cell_types": types,
            "converged": bool(values.size >= k)}


def portrait(backward: "BackwardEngine", tape: "Tape", settings: DynamicsSettings, *,
             token_texts: Sequence[str] | None = None, cell_types: Sequence[str] | None = None,
             progress: Callable[[int, int], None] | None = None,
             at_once: int = LOCKSTEP_POSITIONS,
             products: Callable[[int], None] | None = None) -> Portrait:
    """The dynamical portrait of one recorded run (see the module notes).

    Parameters
    ----------
    backward
        The model's :class:`~flyviz.model.attribution.BackwardEngine`.
    tape
        The run (:func:`~flyviz.model.attribution.record_tape` with ``slopes=True``).
    settings
        What to measure.
    token_texts
        The tokens as text (default: their ids).
    cell_types
        One label per neuron for the driving modes (default: none, no cell-type summary).
    progress
        ``progress(done, total)`` as positions' eigenvalues are found (also between, with
        the same ``done``: a place to cancel).
    at_once
        Positions whose eigenvalues are found together (:func:`eigenvalues_in_lockstep`;
        the same values, faster); 1: one at a time with :func:`scipy.sparse.linalg.eigs`.
    products
        ``products(count)`` with the ``J v`` products used so far, after each product or
        batch of them: the work within one slow position (an exception it raises ends the
        measurement there).
    """
    import scipy.sparse.linalg  # noqa: F401  (its BLAS loaded before the limit below)

    from flyviz.model.engine import SINGLE_THREADED_BLAS

    settings = settings.validate()
    steps = tape.steps
    if settings.perturb_at >= steps - 1:
        raise InputError(f"--perturb-at {settings.perturb_at} leaves no token after it in a "
                         f"prompt of {steps} positions (BOS included); give a longer prompt "
                         "or an earlier position")
    modes_at = steps - 1 if settings.modes_at is None else settings.modes_at
    if modes_at >= steps:
        raise InputError(f"--modes-at {modes_at} is past the prompt's last position "
                         f"({steps - 1}, BOS is 0)")
    started = time.perf_counter()
    jac = StepJacobians(backward, tape)
    jac.listener = products
    n = jac.neurons
    k = min(settings.eigenvalues, n)
    with SINGLE_THREADED_BLAS:
        together = None if at_once <= 1 else eigenvalues_in_lockstep(
            jac, range(steps), k, seed=settings.seed, tolerance=settings.tolerance,
            at_once=at_once, progress=None if progress is None else
            (lambda done: progress(done, steps)))
        if together is not None:
            eigenvalues = together
        else:
            eigenvalues = []
            for t in range(steps):
                known = _known_spectrum(jac, t, k)
                values = known if known is not None else leading_eigen(
                    jac.operator(t), n, k, seed=settings.seed, t=t,
                    tolerance=settings.tolerance, dense=functools.partial(jac.dense, t))[0]
                eigenvalues.append(values)
                if progress is not None:
                    progress(t + 1, steps)
        # Where ARPACK stopped before converging (fewer than K came back) the radius is the
        # largest modulus of those that did, NaN where none did; never a silent 0, which is
        # what a zero Jacobian (every neuron set) has.
        unconverged = [t for t, v in enumerate(eigenvalues)
                       if v.size < k and not jac.is_zero(t)]
        radius = np.array([float(np.abs(v).max()) if v.size else
                           (0.0 if jac.is_zero(t) else math.nan)
                           for t, v in enumerate(eigenvalues)])

        p = settings.perturb_at
        rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 1]))
        count = settings.directions
        deltas = list(rng.standard_normal((count, n)))  # the first is one direction's draw
        deltas = [d / np.linalg.norm(d) for d in deltas]
        norms = [np.ones(count)]
        for t in range(p + 1, steps):
            # all directions in one multi-column product per step (one read of the graph)
            deltas = jac.matvecs([t] * count, deltas) if count > 2 \
                else [jac.matvec(t, d) for d in deltas]
            norms.append(np.array([np.linalg.norm(d) for d in deltas]))
        curves = np.array(norms).T
        memory = _geometric_mean(curves)

        cfg = backward.config
        slot = backward.in_index[:cfg.neurons_per_slot]
        lam_g = (tape.slope(p) * backward.leak * backward.gain).astype(np.float64)
        drive = np.zeros(n)
        drive[slot] = lam_g[slot]
        a_mask = jac.scale(p)[1]
        drive[a_mask] = 0.0
        spread = [_reached(drive, settings.spread_threshold)]
        for t in range(p + 1, min(steps, p + 1 + settings.spread_steps)):
            drive = jac.matvec(t, drive)
            spread.append(_reached(drive, settings.spread_threshold))
        driving = _driving_summary(jac, modes_at, settings, cell_types)
    texts = list(token_texts) if token_texts is not None else [str(i) for i in tape.tokens]
    return Portrait(tokens=list(tape.tokens), token_texts=texts, eigenvalues=eigenvalues,
                    spectral_radius=radius, perturb_at=p, memory_norms=memory,
                    memory_curves=curves,
                    half_life_tokens=_half_life(memory),
                    leak_only_half_life_tokens=leak_only_half_life(cfg.leak),
                    spread_fraction=np.array(spread), spread_threshold=settings.spread_threshold,
                    driving=driving, settings=settings, leak=float(cfg.leak), products=jac.products,
                    seconds=time.perf_counter() - started, unconverged=unconverged)


def _reached(response: np.ndarray, threshold: float) -> float:
    """The fraction of neurons whose ``|response|`` is at least ``threshold`` of the largest."""
    size = np.abs(response)
    top = float(size.max()) if size.size else 0.0
    if top <= 0.0:
        return 0.0
    return float(np.count_nonzero(size >= threshold * top)) / size.size


def portrait_of_checkpoint(checkpoint: "Checkpoint", ids: Sequence[int],
                           settings: DynamicsSettings, *, kernel: str | None = None,
                           token_texts: Sequence[str] | None = None,
                           progress: Callable[[int, int], None] | None = None,
                           products: Callable[[int], None] | None = None) -> Portrait:
    """Record ``ids`` on ``checkpoint`` and measure its portrait (engines made and closed
    here: what a null's run needs); ``progress`` and ``products`` as for :func:`portrait`."""
    from flyviz.model.attribution import BackwardEngine, record_tape
    from flyviz.model.engine import Engine

    engine = Engine(checkpoint, kernel=kernel)
    try:
        tape = record_tape(engine, ids, slopes=True)
    finally:
        engine.close()
    anatomy = checkpoint.anatomy
    with BackwardEngine(checkpoint, kernel=kernel) as backward:
        return portrait(backward, tape, settings, token_texts=token_texts,
                        cell_types=None if anatomy is None else anatomy.cell_type,
                        progress=progress, products=products)


# ---------------------------------------------------------------- real vs nulls
@dataclass
class _NullItem:
    """One null of a comparison, as :func:`flyviz.analysis.cluster.run_each` runs it."""

    index: int
    seed: int

    @property
    def n_tokens(self) -> int:
        return 1


def null_settings(settings: DynamicsSettings) -> DynamicsSettings:
    """What a null's portrait measures: ``settings`` with one eigenvalue per position.

    Only the spectral radius of a null is compared, never its other eigenvalues, and
    those are what made a null cost 25 times the real portrait: on a random wiring the
    leading eigenvalue stands alone but the next ones lie on the edge of the bulk of the
    spectrum, many with nearly one modulus, where ARPACK converges slowly (a degree null
    of the demo brain, 7 positions: 221 products for the radius alone at the same
    tolerance, about 8,800 with 3 eigenvalues; docs/dynamics.md).
    """
    from dataclasses import replace

    return replace(settings, eigenvalues=1)


def null_property_values(checkpoint: "Checkpoint", kind: str, seed: int, ids: Sequence[int],
                         settings: DynamicsSettings, kernel: str | None = None, *,
                         progress: Callable[[int, int, int], None] | None = None
                         ) -> dict[str, float]:
    """The properties :data:`NULL_PROPERTIES` names on one null of ``checkpoint`` (measured
    with :func:`null_settings`), and ``"unconverged"``: the eigen-solves ARPACK stopped
    before converging (positions, and 1 for the driving modes; 0 unless ARPACK's restarts
    ran out).

    ``progress(done, total, products)``: the positions whose radius is found, of all, and
    the ``J v`` products used so far on this null (told after every product; an exception
    it raises ends the work).
    """
    from flyviz.analysis.nulls import make_null

    null = make_null(checkpoint, kind, seed)
    state = {"done": 0, "total": len(ids), "products": 0}

    def positions(finished: int, total: int) -> None:
        state.update(done=finished, total=total)
        if progress is not None:
            progress(finished, total, state["products"])

    def products(count: int) -> None:
        state["products"] = count
        if progress is not None:
            progress(state["done"], state["total"], count)

    found = portrait_of_checkpoint(null, ids, null_settings(settings), kernel=kernel,
                                   progress=None if progress is None else positions,
                                   products=None if progress is None else products)
    values = found.property_values()
    values["unconverged"] = float(len(found.unconverged)
                                  + (not found.driving.get("converged", True)))
    return values


def dynamics_null_task(spec: str, dataset: str | None, digest: str, kind: str,
                       ids: list[int], settings: dict[str, Any], item: _NullItem
                       ) -> dict[str, np.ndarray]:
    """One null on a Dask worker: the model is loaded from ``spec`` once per process and must
    be the client's (``digest``)."""
    from flyviz.analysis.cluster import worker_model

    checkpoint = worker_model(spec, dataset, digest)
    values = null_property_values(checkpoint, kind, item.seed, ids, DynamicsSettings(**settings))
    return _null_partial(values)


def _null_partial(values: dict[str, float]) -> dict[str, np.ndarray]:
    """One null's :func:`null_property_values` as the arrays a screen's deliver step takes
    (in this process or from a Dask worker)."""
    return {"values": np.array([values[key] for key, _ in NULL_PROPERTIES], np.float64),
            "unconverged": np.array([values["unconverged"]], np.float64)}


@dataclass(frozen=True)
class NullProgress:
    """Where one null of :func:`compare_with_nulls` stands (in this process).

    Attributes
    ----------
    index, count
        The null (from 0) and how many there are.
    seed
        Its seed.
    done, total
        Positions whose spectral radius is found, and all of them.
    products
        ``J v`` products used on this null so far (the work within a slow position).
    """

    index: int
    count: int
    seed: int
    done: int
    total: int
    products: int


def compare_with_nulls(real: Portrait, checkpoint: "Checkpoint", kind: str,
                       seeds: Sequence[int], *, spec: str | None = None,
                       dataset: str | None = None, workers: int | None = 0,
                       scheduler: str | None = None, kernel: str | None = None,
                       log: Callable[[str], None] | None = None,
                       progress: Callable[[NullProgress], None] | None = None
                       ) -> dict[str, Any]:
    """Each property of ``real`` against the same property on the nulls ``kind`` and
    ``seeds`` name; the result is also kept as ``real.nulls``.

    Parameters
    ----------
    real
        The real model's portrait.
    checkpoint
        The real model.
    kind, seeds
        The null family and the draws.
    spec, dataset
        How a Dask worker loads the model (needed unless ``workers=0`` and no scheduler).
    workers, scheduler
        As for :func:`flyviz.analysis.cluster.run_each` (``workers=0``: in this process).
    kernel
        The sparse kernel of the runs in this process.
    log
        Told which null runs (in this process) and when the workers are ready.
    progress
        Told, for a null run in this process, its positions done and its ``J v`` products
        so far, after every product (a null's eigen-solves may take minutes; an exception
        it raises ends the comparison). Nulls on Dask workers report only when each ends.

    Returns
    -------
    dict
        ``{"kind", "seeds", "properties": {key: NullComparison.to_dict() + "what"}}``, and
        ``"unconverged": {seed: count}`` for the nulls where ARPACK stopped before it
        converged (their radius is the largest that converged; absent where none did).
    """
    from flyviz.analysis import cluster
    from flyviz.analysis.nulls import check_kind, check_seed, compare_to_nulls

    check_kind(kind)
    seeds = [check_seed(s) for s in seeds]
    if not seeds:
        raise InputError("comparing with nulls needs at least one null")
    ids = list(real.tokens)
    settings = real.settings
    items = [_NullItem(i, s) for i, s in enumerate(seeds)]
    found: dict[int, np.ndarray] = {}
    unconverged: dict[int, int] = {}

    def deliver(item: _NullItem, partial: dict[str, np.ndarray]) -> None:
        found[item.index] = np.asarray(partial["values"], np.float64)
        stopped = int(np.asarray(partial.get("unconverged", [0]))[0])
        if stopped:
            unconverged[item.seed] = stopped

    local = workers == 0 and scheduler is None
    if local:
        def function(item: _NullItem) -> dict[str, np.ndarray]:
            if log is not None:
                log(f"null {item.index + 1} of {len(items)}: {kind}, seed {item.seed}")

            def tell(done: int, total: int, products: int) -> None:
                assert progress is not None
                progress(NullProgress(item.index, len(items), item.seed, done, total,
                                      products))

            values = null_property_values(checkpoint, kind, item.seed, ids, settings, kernel,
                                          progress=None if progress is None else tell)
            return _null_partial(values)
        cluster.run_each(function, (), items, deliver, workers=0, log=log)
    else:
        if spec is None:
            raise InputError("nulls on Dask need the model's spec (how the workers load it)")
        from flyviz.model.identity import weights_digest

        cluster.run_each(dynamics_null_task,
                         (spec, dataset, weights_digest(checkpoint), kind, ids, asdict(settings)),
                         items, deliver, workers=workers, scheduler=scheduler, log=log)
    values = real.property_values()
    properties = {}
    for column, (key, what) in enumerate(NULL_PROPERTIES):
        # two-sided: no property has a direction that is the hypothesis (a radius or a
        # half-life far below every null's is as telling as one far above)
        comparison = compare_to_nulls(values[key], [found[i][column] for i in range(len(items))],
                                      two_sided=True)
        properties[key] = {"what": what, **comparison.to_dict()}
    result: dict[str, Any] = {"kind": kind, "seeds": seeds, "properties": properties}
    if unconverged:
        result["unconverged"] = {str(seed): count for seed, count in sorted(unconverged.items())}
    real.nulls = result
    return result
