"""Why this token? The tape of a run and one backward sweep through the connectome.

The step of fly-formats.md section 1.5 (with the interventions of
:mod:`flyviz.model.interventions`) reads, for the step at position ``t``::

    u_t = g * (r * (W' x_{t-1}) + D_t + stim_t) + b      W': the cut/scaled graph of step t
    x_t = (1 - lam) x_{t-1} + lam * tanh(u_t)            then x_t[S] = value (silence, clamp)

Freezing ``s_t = tanh(u_t) / u_t`` (1 where ``u = 0``) makes it *exactly* linear
in ``x_{t-1}`` and in the sources (the delay-line drive ``D_t``, the bias, a
stimulation, a clamp's value), see ``explain.md`` section 1. One backward sweep

    v_P = seed;  m_t = v_t with the neurons set at step t zeroed
    v_{t-1} = (1 - lam) m_t + W'^T (lam * d_t * g * r * m_t)   (+ the seed of step t-1)

with ``d_t = s_t`` (``"decomposition"``: the flows below add up to the
explained value) or ``d_t = sech^2(u_t)`` (``"gradient"``: ``v_t = dL/dx_t``,
a sensitivity) costs one sparse product with ``W'^T`` per step, like a forward
step. :class:`BackwardEngine` holds ``W^T`` (built once per engine, laid out
for the same sparse kernel as the forward pass) and runs :meth:`~BackwardEngine.sweep`
for any per-step seeds: one position's explained logit (:mod:`flyviz.model.explain`),
a sum of per-position terms entering at their own steps (a teacher-forced
loss: estimated lesions), or a cotangent injected anywhere (activation
patching). :class:`Tape` is what the sweep reads: ``x_t`` and ``s_t`` (float32)
of one run of the single-stream :class:`~flyviz.model.engine.Engine`, in any
layout and with any interventions, recorded as the engine steps.

:func:`incoming_currents` is the one computation of a step's incoming
synaptic currents ``W'_ij x_j(t-1)`` with the *edited* weights: the
Inspector's "Currents now" shows it, and an edge flow is it times the
post-synaptic neuron's ``lam * d * g * r * m``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from flyviz.model import kernels
from flyviz.model.checkpoint import Checkpoint, require_fly_llm_operator
from flyviz.model.engine import (SINGLE_THREADED_BLAS, CsrRowBlock, Engine, default_threads,
                                 split_rows)
from flyviz.model.errors import InputError
from flyviz.model.interventions import ResolvedInterventions

DECOMPOSITION = "decomposition"
GRADIENT = "gradient"
MODES = (DECOMPOSITION, GRADIENT)


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`, else an :class:`InputError`."""
    if mode not in MODES:
        raise InputError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    return mode


# ---------------------------------------------------------------------------- the tape
class Tape:
    """What a backward sweep reads of one run: per step ``x_t``, ``s_t`` (float32), the logits.

    Attach it to an engine (``engine.tape = tape``, or :func:`record_tape`);
    every :meth:`~flyviz.model.engine.Engine.step` then reports its ``u_t``
    (before the tanh) and its ``x_t`` (after the interventions) and logits.

    Parameters
    ----------
    interventions
        The engine's resolved interventions during the run (the sweep honours them).
    slopes
        Also keep ``sech^2(u_t)`` (what the ``"gradient"`` mode reads): one
        more float32 vector per step.
    keep_from
        The first step whose vectors are kept (default 0: all): a sweep of a
        window that starts at step ``f`` reads steps ``f - 1`` on, so a long
        run traced over a short window keeps only that window in memory.
    """

    def __init__(self, interventions: ResolvedInterventions, *, slopes: bool = False,
                 keep_from: int = 0) -> None:
        self.interventions = interventions
        self.keeps_slopes = bool(slopes)
        self.keep_from = max(0, int(keep_from))
        self.tokens: list[int] = []
        self._inputs = 0          # steps whose input was reported
        self._states = 0          # steps whose state was reported
        self._neurons = 0
        self._x: list[np.ndarray] = []
        self._s: list[np.ndarray] = []
        self._slope: list[np.ndarray] = []
        self._logits: list[np.ndarray] = []

    # What the engine calls.
    def record_input(self, position: int, u: np.ndarray) -> None:
        """The step at ``position`` computed ``u`` (the argument of its tanh)."""
        if position != self._inputs:
            raise RuntimeError(f"the tape holds {self._inputs} steps; it cannot record step "
                               f"{position} (reset the engine before recording)")
        self._inputs += 1
        if position < self.keep_from:
            return
        tanh = np.tanh(u)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.divide(tanh, u, out=np.ones_like(u), where=u != 0)
        self._s.append(s.astype(np.float32, copy=False))
        if self.keeps_slopes:
            self._slope.append((np.float32(1.0) - tanh * tanh).astype(np.float32, copy=False))

    def record_state(self, position: int, x: np.ndarray, logits: np.ndarray) -> None:
        """The step at ``position`` ended in state ``x`` with ``logits``."""
        self._states += 1
        self._neurons = int(np.shape(x)[0])
        if position < self.keep_from:
            return
        self._x.append(np.array(x, dtype=np.float32, copy=True))
        self._logits.append(np.array(logits, dtype=np.float32, copy=True))

    # What the sweep reads.
    @property
    def steps(self) -> int:
        """Steps recorded (positions ``0 .. steps-1``; those before :attr:`keep_from` are
        not kept)."""
        return self._states

    @property
    def neurons(self) -> int:
        """Length of a state."""
        return self._neurons

    def _kept(self, t: int) -> int:
        """Where step ``t`` is in the kept lists."""
        if t < self.keep_from:
            raise IndexError(f"step {t} is not kept on this tape (it keeps steps "
                             f"{self.keep_from}.. only)")
        return t - self.keep_from

    def x(self, t: int) -> np.ndarray:
        """``x_t`` (zeros for ``t = -1``, the state before BOS)."""
        if t < 0:
            return np.zeros(self.neurons, dtype=np.float32)
        return self._x[self._kept(t)]

    def s(self, t: int) -> np.ndarray:
        """``s_t = tanh(u_t) / u_t``."""
        return self._s[self._kept(t)]

    def slope(self, t: int) -> np.ndarray:
        """``sech^2(u_t)`` (a tape recorded with ``slopes=True``)."""
        if not self.keeps_slopes:
            raise ValueError("this tape was recorded without slopes; record it with "
                             "slopes=True for the gradient mode")
        return self._slope[self._kept(t)]

    def logits(self, t: int) -> np.ndarray:
        """The logits after step ``t``."""
        return self._logits[self._kept(t)]

    def states(self) -> np.ndarray:
        """The kept ``x_t`` as one (steps, neurons) array (a copy)."""
        return np.stack(self._x)

    @property
    def nbytes(self) -> int:
        """Bytes the tape holds (states, gains, slopes, logits)."""
        return sum(int(a.nbytes) for part in (self._x, self._s, self._slope, self._logits)
                   for a in part)


def record_tape(engine: Engine, ids: Sequence[int], *, slopes: bool = False,
                interventions: Any = None, keep_from: int = 0) -> Tape:
    """Reset ``engine``, feed ``ids`` (BOS first) and return the tape of that run.

    Parameters
    ----------
    engine
        The single-stream engine; its interventions apply unless
        ``interventions`` replaces them (see
        :meth:`~flyviz.model.engine.Engine.set_interventions`).
    ids
        Token ids to read, one step each.
    slopes
        Keep ``sech^2(u_t)`` as well (needed by the gradient mode).
    keep_from
        Keep the vectors of steps ``keep_from`` on only (see :class:`Tape`).
    """
    if interventions is not None:
        engine.set_interventions(interventions)
    engine.reset()
    tape = Tape(engine.interventions, slopes=slopes, keep_from=keep_from)
    engine.tape = tape
    try:
        for token in ids:
            engine.step(int(token))
    finally:
        engine.tape = None
    tape.tokens = [int(t) for t in ids]
    return tape


# ---------------------------------------------------------------------- sparse products
class _Product:
    """``out = A @ x`` for a CSR matrix ``A`` split into row blocks (one thread each); with
    ``columns`` (a multiple of :data:`~flyviz.model.kernels.MULTI_LANES`), ``A @ X`` for that
    many columns of ``X`` at once with the multi-column kernel, each column equal to the
    one-column product bit for bit (the kernels' promise)."""

    def __init__(self, offsets: np.ndarray, indices: np.ndarray, values: np.ndarray,
                 neurons: int, kernel: str, parts: int, pool: ThreadPoolExecutor | None,
                 columns: int | None = None) -> None:
        self._blocks = split_rows(offsets, indices, values, parts)
        for block in self._blocks:
            assert block.indices is not None and block.data is not None
            block.layout = kernels.make_block(
                kernel, block.indptr, block.indices, block.data, neurons) if columns is None \
                else kernels.make_multi_block(  # type: ignore[assignment]
                    kernel, block.indptr, block.indices, block.data, neurons, columns)
            block.indices = block.data = None
        self.columns = columns
        self._pool = pool

    def _one(self, block: CsrRowBlock, x: np.ndarray, out: np.ndarray) -> None:
        assert block.layout is not None
        if self.columns is None:
            block.layout.matvec(x, out[block.start:block.stop])
        else:  # a multi-column layout (see __init__)
            block.layout.matmul(x, out[block.start:block.stop])  # type: ignore[attr-defined]

    def matvec(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[:] = A @ x`` (``x`` contiguous float32; ``(neurons, columns)`` with
        ``columns``); returns ``out``."""
        if self._pool is None or len(self._blocks) == 1:
            for block in self._blocks:
                self._one(block, x, out)
        else:
            for _ in self._pool.map(lambda b: self._one(b, x, out), self._blocks):
                pass
        return out


@dataclass
class Sweep:
    """What one backward sweep found, for the steps ``first .. last``.

    Attributes
    ----------
    mode
        ``"decomposition"`` or ``"gradient"``.
    first, last
        The lowest and the highest step swept.
    cotangents
        ``(last - first + 1, neurons)`` float32: ``v_t`` for ``t = first..last``
        (the cotangent of ``x_t``, seeds included), or ``None`` when not kept.
    bias_flow, stimulation_flow, clamp_flow
        Per step (float64): ``m_t . (lam d_t b)``, the stimulations' and the
        clamps' shares.
    slot_flow
        ``(steps, delay_k)`` float64: what the delay slot ``j`` of step ``t``
        brought (the token at position ``t - j``, or the padding where that is
        negative).
    before
        ``v_{first-1} . x_{first-1}``: what the state before the swept steps
        carries (0 when ``first`` is 0).
    before_cotangent
        ``v_{first-1}`` (float32).
    seconds
        Wall time of the sweep.
    """

    mode: str
    first: int
    last: int
    cotangents: np.ndarray | None
    bias_flow: np.ndarray
    stimulation_flow: np.ndarray
    clamp_flow: np.ndarray
    slot_flow: np.ndarray
    before: float
    before_cotangent: np.ndarray
    seconds: float = 0.0

    def cotangent(self, t: int) -> np.ndarray:
        """``v_t`` for a swept step ``t``."""
        if self.cotangents is None:
            raise ValueError("this sweep did not keep its cotangents")
        return self.cotangents[t - self.first]

    def source_total(self) -> float:
        """Everything the swept steps' sources and the state before them brought."""
        return float(self.bias_flow.sum() + self.stimulation_flow.sum() + self.clamp_flow.sum()
                     + self.slot_flow.sum() + self.before)


#: Called by :meth:`BackwardEngine.sweep` at every step as ``on_step(t, v_t, m_t, w_t)``
#: with ``w_t = lam * d_t * g * m_t`` (read-only; copy to keep).
StepCallback = Callable[[int, np.ndarray, np.ndarray, np.ndarray], None]


class BackwardEngine:
    """Backward sweeps through a checkpoint's connectome: ``W^T`` laid out once, reused.

    Parameters
    ----------
    checkpoint
        The model (the same one the tapes were recorded with).
    threads
        Threads for the sparse product (default: usable cores, at most 4).
    kernel
        ``"scipy"``, ``"llvm"`` or ``None`` (``FLYVIZ_KERNEL``, else the
        default), as for the forward :class:`~flyviz.model.engine.Engine`;
        :attr:`kernel` says which one runs.

    Notes
    -----
    Building ``W^T`` (a CSR → CSC transpose keeping every synapse's position
    in the CSR arrays, so that cut/scaled weights transpose by one gather)
    takes about a second at full size and 8 bytes per synapse besides the
    laid-out copy. Cut/scaled variants of ``W^T`` are laid out on first use
    for the interventions of the tape being swept (the last set only is kept).
    Use one engine from one thread at a time.
    """

    def __init__(self, checkpoint: Checkpoint, *, threads: int | None = None,
                 kernel: str | None = None) -> None:
        from scipy.sparse import csr_matrix

        ck = checkpoint
        cfg = ck.config
        require_fly_llm_operator(ck, "attribution")
        self.checkpoint = ck
        self.config = cfg
        n = self.neurons = int(cfg.neurons)
        f32 = np.float32
        self.gain = np.ascontiguousarray(ck.gain, dtype=f32)
        self.rec_gain = np.ascontiguousarray(ck.rec_gain, dtype=f32)
        self.bias = np.ascontiguousarray(ck.bias, dtype=f32)
        # Dot products mix no dtypes: a mixed float64 . float32 dot skips BLAS.
        self._bias64 = self.bias.astype(np.float64)
        self.wte = np.ascontiguousarray(ck.wte, dtype=f32)
        self.in_proj = np.ascontiguousarray(ck.in_proj, dtype=f32)
        self.in_index = np.ascontiguousarray(ck.in_index, dtype=np.intp)
        self.leak = f32(cfg.leak)
        self.keep = f32(1.0 - cfg.leak)
        self.threads = max(1, threads if threads is not None else default_threads())
        self.kernel = kernels.resolve(kernel)
        self._kernel_request = kernel
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="flyviz-backward") \
            if self.threads > 1 else None
        start = time.perf_counter()
        self.w_offsets = np.asarray(ck.w_offsets, dtype=np.int64)
        self.w_indices = np.asarray(ck.w_indices)
        self.w_values = np.ascontiguousarray(ck.w_values, dtype=f32)
        nnz = int(self.w_offsets[-1])
        position = csr_matrix((np.arange(nnz, dtype=np.int64), self.w_indices, self.w_offsets),
                              shape=(n, n)).tocsc()
        #: W^T as CSR: row j lists the post-synaptic neurons of j; _t_edge[e] is the
        #: CSR position of that synapse in W (so edited weights transpose by a gather).
        self._t_offsets = position.indptr.astype(np.int64)
        self._t_indices = position.indices
        self._t_edge = position.data.astype(np.int32) if nnz < 2**31 else position.data
        self.transpose_s = time.perf_counter() - start
        self._transposed: dict[tuple[Any, ...], _Product] = {}
        self._multi: dict[tuple[Any, ...], _Product] = {}
        self._for: ResolvedInterventions | None = None

    def close(self) -> None:
        """Stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "BackwardEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the graphs
    def weights(self, interventions: ResolvedInterventions, position: int) -> np.ndarray:
        """The CSR weights ``W'`` of the step at ``position`` (cut/scaled where active)."""
        key = interventions.graph_key(position) if interventions.graph_edits else ()
        if not key:
            return self.w_values
        return interventions.edited_values(self.w_values, key)

    def _use(self, interventions: ResolvedInterventions) -> None:
        """Make ``interventions`` the set whose edited graphs are kept: the graphs laid out
        for another set's edits go (those of the unedited graph stay)."""
        if interventions is not self._for:
            self._transposed = {k: v for k, v in self._transposed.items() if not k[1]}
            self._multi = {k: v for k, v in self._multi.items() if not k[1]}
            self._for = interventions

    def _product(self, interventions: ResolvedInterventions, position: int,
                 absolute: bool = False) -> _Product:
        """``W'^T`` (or ``|W'|^T``, ``|W'|`` with ``absolute``) of one step, laid out once."""
        self._use(interventions)
        key = interventions.graph_key(position) if interventions.graph_edits else ()
        cache_key = ("abs" if absolute else "t", key)
        product = self._transposed.get(cache_key)
        if product is None:
            values = self.weights(interventions, position)
            if absolute:
                values = np.abs(values)
            transposed = np.ascontiguousarray(values[self._t_edge])
            product = _Product(self._t_offsets, self._t_indices, transposed, self.neurons,
                               self.kernel, self.threads, self._pool)
            self._transposed[cache_key] = product
        return product

    def _forward_abs(self, interventions: ResolvedInterventions, position: int) -> _Product:
        """``|W'|`` (CSR, forward orientation) of one step, laid out once."""
        return self._forward(interventions, position, absolute=True)

    def _forward(self, interventions: ResolvedInterventions, position: int,
                 absolute: bool = False) -> _Product:
        """``W'`` (or ``|W'|``; CSR, forward orientation) of one step, laid out once."""
        key = interventions.graph_key(position) if interventions.graph_edits else ()
        cache_key = ("fabs" if absolute else "f", key)
        self._use(interventions)
        product = self._transposed.get(cache_key)
        if product is None:
            values = self.weights(interventions, position)
            if absolute:
                values = np.abs(values)
            product = _Product(self.w_offsets, self.w_indices, values, self.neurons,
                               self.kernel, self.threads, self._pool)
            self._transposed[cache_key] = product
        return product

    def transposed_product(self, interventions: ResolvedInterventions, position: int,
                           y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``W'^T y`` for the graph of the step at ``position``."""
        out = np.empty(self.neurons, dtype=np.float32) if out is None else out
        return self._product(interventions, position).matvec(
            np.ascontiguousarray(y, dtype=np.float32), out)

    def forward_product(self, interventions: ResolvedInterventions, position: int,
                        x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``W' x`` for the graph of the step at ``position`` (what a step Jacobian applies:
        :mod:`flyviz.analysis.dynamics`)."""
        out = np.empty(self.neurons, dtype=np.float32) if out is None else out
        return self._forward(interventions, position).matvec(
            np.ascontiguousarray(x, dtype=np.float32), out)

    def forward_products(self, interventions: ResolvedInterventions, position: int,
                         x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``W' X`` for the graph of the step at ``position`` and several columns at once
        (``x``: ``(neurons, columns)``, ``columns`` a multiple of
        :data:`~flyviz.model.kernels.MULTI_LANES`). Each column equals
        :meth:`forward_product` of it bit for bit, for a fraction of the cost per column:
        the graph is read once for all of them (the multi-column kernel
        :func:`~flyviz.model.kernels.resolve_multi` chooses)."""
        n = self.neurons
        columns = int(x.shape[1]) if x.ndim == 2 else 0
        if x.ndim != 2 or x.shape[0] != n or columns <= 0 or columns % kernels.MULTI_LANES:
            raise ValueError(f"forward_products needs a ({n}, columns) array with columns a "
                             f"positive multiple of {kernels.MULTI_LANES}")
        key = interventions.graph_key(position) if interventions.graph_edits else ()
        cache_key = (columns, key)
        self._use(interventions)
        product = self._multi.get(cache_key)
        if product is None:
            product = _Product(self.w_offsets, self.w_indices,
                               self.weights(interventions, position), n,
                               kernels.resolve_multi(self._kernel_request, columns),
                               self.threads, self._pool, columns)
            self._multi[cache_key] = product
        out = np.empty((n, columns), dtype=np.float32) if out is None else out
        return product.matvec(np.ascontiguousarray(x, dtype=np.float32), out)

    def abs_products(self, interventions: ResolvedInterventions, position: int,
                     x: np.ndarray | None = None, y: np.ndarray | None = None
                     ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``|W'| x`` and ``|W'|^T y`` (either may be skipped): what influence needs."""
        n = self.neurons
        forward = None if x is None else self._forward_abs(interventions, position).matvec(
            np.ascontiguousarray(x, dtype=np.float32), np.empty(n, np.float32))
        backward = None if y is None else self._product(interventions, position, True).matvec(
            np.ascontiguousarray(y, dtype=np.float32), np.empty(n, np.float32))
        return forward, backward

    # ------------------------------------------------------------ per step
    def set_at(self, interventions: ResolvedInterventions, position: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """``(mask, values)`` of the neurons set after the step at ``position``: ``mask``
        True where a silence, clamp or patch acts (the later one wins), ``values`` their
        value (a patch's: its source's state at that position, as the engine sets it; where
        the source has no state there the patch does not act)."""
        n = self.neurons
        mask = np.zeros(n, dtype=bool)
        values = np.zeros(n, dtype=np.float64)
        for op in interventions.active_state_sets(position):
            if hasattr(op, "values_at"):  # a StatePatch: values change with the position
                row = op.values_at(position)
                if row is None:
                    continue
                mask[op.indices] = True
                values[op.indices] = row
                continue
            mask[op.indices] = True
            values[op.indices] = op.value
        return mask, values

    def stimulation_at(self, interventions: ResolvedInterventions, position: int) -> np.ndarray:
        """The stimulation added to ``pre`` at the step at ``position`` (float32)."""
        stim = np.zeros(self.neurons, dtype=np.float32)
        for op in interventions.pre_add:
            if (op.start is None or position >= op.start) and (op.stop is None or position < op.stop):
                stim[op.indices] += np.float32(op.amount)
        return stim

    def slot_drive(self, tokens: Sequence[int], t: int) -> np.ndarray:
        """``(delay_k, slot)`` float32: slot ``j``'s drive at step ``t`` (the token at
        ``t - j``, PAD before BOS), before the gain."""
        cfg = self.config
        k = cfg.delay_k
        history = [int(tokens[t - j]) if t - j >= 0 else cfg.pad_token_id for j in range(k)]
        embeddings = self.wte[np.asarray(history, dtype=np.int64)]
        return np.matmul(embeddings[:, None, :], self.in_proj)[:, 0, :]

    # ------------------------------------------------------------ the sweep
    def sweep(self, tape: Tape, seeds: Mapping[int, np.ndarray], *, mode: str = DECOMPOSITION,
              first: int = 0, keep: bool = True, on_step: StepCallback | None = None,
              should_stop: Callable[[], bool] | None = None) -> Sweep:
        """One backward sweep from the highest seeded step down to step ``first``.

        Parameters
        ----------
        tape
            The run (:func:`record_tape`).
        seeds
            ``{step: cotangent}``: each is added to ``v_t`` when the sweep
            reaches step ``t``, before that step is taken back, so that terms of
            several positions (a sum of losses, a patched activation) enter at
            their own steps. Each is a float vector of one value per neuron.
        mode
            ``"decomposition"`` (frozen ``s_t``: the flows add up) or
            ``"gradient"`` (``sech^2``: ``v_t = dL/dx_t``; the tape must hold
            slopes).
        first
            The lowest step to take back (the window's first position).
        keep
            Keep every ``v_t`` (``(steps, neurons)`` float32).
        on_step
            Called at every step as ``on_step(t, v_t, m_t, w_t)``.
        should_stop
            Polled between steps; when it returns True the sweep stops with
            an :class:`InterruptedError`.
        """
        check_mode(mode)
        if not seeds:
            raise InputError("a backward sweep needs at least one seed")
        # As in the engine's step: OpenBLAS's spinning threads would take the cores from
        # the sparse product's (a 49,393-value dot product took 15 ms beside them).
        # Over a long window the cotangents may outgrow float32: inf and NaN then say so
        # in the flows (an attribution's completeness check flags them), not in a warning
        # per step.
        with SINGLE_THREADED_BLAS, np.errstate(over="ignore", invalid="ignore"):
            return self._sweep(tape, seeds, mode, first, keep, on_step, should_stop)

    def _sweep(self, tape: Tape, seeds: Mapping[int, np.ndarray], mode: str, first: int,
               keep: bool, on_step: StepCallback | None,
               should_stop: Callable[[], bool] | None) -> Sweep:
        n = self.neurons
        last = max(int(t) for t in seeds)
        # The sweep reads x_{first-1} too: the tape must keep that step.
        if not (0 <= first <= last < tape.steps and tape.keep_from <= max(0, first - 1)):
            raise InputError(f"the sweep's steps {first}..{last} and the state before them "
                             f"must lie within the tape's kept steps {tape.keep_from}.."
                             f"{tape.steps - 1}")
        for t, seed in seeds.items():
            if not first <= int(t) <= last or np.shape(seed) != (n,):
                raise InputError(f"seed at step {t} must be one value per neuron ({n}) at a "
                                 f"step in {first}..{last}")
        start = time.perf_counter()
        steps = last - first + 1
        k = self.config.delay_k
        slot = self.config.neurons_per_slot
        interventions = tape.interventions
        cotangents = np.empty((steps, n), dtype=np.float32) if keep else None
        bias_flow = np.zeros(steps)
        stimulation_flow = np.zeros(steps)
        clamp_flow = np.zeros(steps)
        slot_flow = np.zeros((steps, k))
        v = np.zeros(n, dtype=np.float32)
        scratch = np.empty(n, dtype=np.float32)
        in_index = self.in_index[:k * slot]
        for t in range(last, first - 1, -1):
            if should_stop is not None and should_stop():
                raise InterruptedError("the backward sweep was cancelled")
            if t in seeds:
                v += np.asarray(seeds[t], dtype=np.float32)
            row = t - first
            if cotangents is not None:
                cotangents[row] = v
            m = v.copy()
            if interventions.post_state:
                mask, values = self.set_at(interventions, t)
                if mask.any():
                    clamp_flow[row] = float(np.dot(v[mask].astype(np.float64), values[mask]))
                    m[mask] = 0.0
            d = tape.s(t) if mode == DECOMPOSITION else tape.slope(t)
            w = d * self.leak
            w *= m
            # The bias is added after the gain (u = g * (...) + b); everything else is gained.
            bias_flow[row] = float(np.dot(w.astype(np.float64), self._bias64))
            w *= self.gain
            if interventions.pre_add:
                stim = self.stimulation_at(interventions, t)
                stimulation_flow[row] = float(np.dot(w.astype(np.float64),
                                                     stim.astype(np.float64)))
            z = w[in_index].reshape(k, slot).astype(np.float64)
            drive = self.slot_drive(tape.tokens, t).astype(np.float64)
            slot_flow[row] = np.einsum("js,js->j", z, drive)
            if on_step is not None:
                on_step(t, v, m, w)
            np.multiply(w, self.rec_gain, out=scratch)
            v = self.transposed_product(interventions, t, scratch)
            m *= self.keep
            v += m
        before = float(np.dot(v.astype(np.float64), tape.x(first - 1).astype(np.float64)))
        return Sweep(mode, first, last, cotangents, bias_flow, stimulation_flow, clamp_flow,
                     slot_flow, before, v, time.perf_counter() - start)


# --------------------------------------------------------------------- currents
@dataclass(frozen=True)
class Currents:
    """The synaptic currents into one neuron at one step, strongest first.

    Attributes
    ----------
    neuron
        The post-synaptic neuron.
    pre
        Pre-synaptic neurons (int64).
    weights
        Their synapses' weights as the step used them (cut/scaled), float32.
    activations
        ``x_j(t-1)``, float32.
    currents
        ``weights * activations`` (float32): the neuron's ``W' x`` by synapse.
    """

    neuron: int
    pre: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    currents: np.ndarray


def incoming_currents(checkpoint: Checkpoint, neuron: int, previous_state: np.ndarray, *,
                      interventions: ResolvedInterventions | None = None, position: int = 0,
                      limit: int | None = None) -> Currents:
    """The currents ``W'_ij x_j(t-1)`` into ``neuron`` at the step at ``position``.

    ``W'`` is the graph with the cuts and scales of ``interventions`` active at
    ``position`` (the weights the engine used); without interventions, the
    checkpoint's own. An edge flow of an attribution is this times the
    neuron's ``lam * d * g * r * m`` (:meth:`Attribution.edge_flows`).

    Parameters
    ----------
    checkpoint
        The model.
    neuron
        The post-synaptic neuron.
    previous_state
        ``x_{t-1}`` (zeros before BOS).
    interventions, position
        The run's resolved interventions and the step.
    limit
        Keep the ``limit`` largest ``|current|`` (all, strongest first, when ``None``).
    """
    n = checkpoint.config.neurons
    i = int(neuron)
    if not 0 <= i < n:
        raise InputError(f"neuron {i} is outside 0..{n - 1}")
    offsets = np.asarray(checkpoint.w_offsets)
    lo, hi = int(offsets[i]), int(offsets[i + 1])
    pre = np.asarray(checkpoint.w_indices[lo:hi], dtype=np.int64)
    weights = np.array(checkpoint.w_values[lo:hi], dtype=np.float32)
    if interventions is not None and interventions.graph_edits:
        for k in interventions.graph_key(position):
            op = interventions.graph_edits[k]
            a, b = np.searchsorted(op.edges, [lo, hi])
            hit = np.asarray(op.edges[a:b], dtype=np.int64) - lo
            if op.factor == 0.0:
                weights[hit] = 0.0
            else:
                weights[hit] *= np.float32(op.factor)
    activations = np.asarray(previous_state, dtype=np.float32)[pre]
    currents = weights * activations
    order = np.argsort(-np.abs(currents), kind="stable")
    if limit is not None:
        order = order[:max(0, int(limit))]
    return Currents(i, pre[order], weights[order], activations[order], currents[order])
