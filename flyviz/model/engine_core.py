"""The Fly LLM forward pass: one recurrent step per token, vectorised.

Per input token ``t`` (fly-formats.md section 1.5)::

    drive = concat_j( wte[token(t - j)] @ in_proj[j] )        j = 0..delay_k-1
    pre   = rec_gain * (W @ x)          ;  pre[in_index] += drive
    x     = (1 - leak) * x + leak * tanh(gain * pre + bias)
    logits = head( LayerNorm(x[out_index]) )

Missing history reads the PAD embedding. The recurrent product uses the
*previous* state. The head is one dense matrix or two factors.

The same operator, generalised once, runs the rest of the family (FlyGPT,
``fly-family-2026.md`` section 3.3): ``leak`` may be one value per neuron
(``Checkpoint.leak_vector``); ``W`` holds each edge's effective weight;
the drive may carry a bias (``Checkpoint.in_bias``: a biased linear map of
one embedding, ``delay_k = 1``); the update may repeat ``microsteps`` times
per token with the drive held (each repeat with a new ``W @ x``); and the
readout may skip the LayerNorm and add a bias (``ModelConfig.layer_norm``,
``Checkpoint.head_bias``). With none of these the step is the code above,
bit for bit. All arithmetic stays float32.

Interventions (:mod:`flyviz.model.interventions`, see there for the exact
step) are checked and precomputed by
:meth:`flyviz.model.engine.Engine.set_interventions`: a stimulation adds to ``pre`` before ``gain * pre + bias``, silences and clamps
overwrite ``x`` after the update, and cuts and scales switch ``W`` to a copy
with edited weights laid out once. A :class:`~flyviz.model.attribution.Tape`
attached as :attr:`Engine.tape` is told every step's ``u`` and ``x`` (what a
backward sweep reads, ``flyviz trace``). Measured on the full-size demo brain
(``flyviz bench --interventions``), a silence of 16,677 neurons, a
stimulation of 14,064 and a cut of 1.04M synapses cost ~30 us per step
together, within the noise of a 4 ms step. Without interventions the step
is the plain forward pass, bit for bit.

Speed notes (full size, 2 cores; ``flyviz bench`` measures them): ``W @ x``
reads 72 MB of CSR indices and weights and dominates the step. scipy's
sparsetools kernel (it releases the GIL) runs one scalar multiply-add chain
per row, about 1 ns per edge per thread, so it is bound by that chain rather
than by memory bandwidth: rows are split over threads (~7.8 ms on one
thread, ~5 ms on two). ``W @ x_t`` needs only the new state, not the next
token, so with ``overlap`` it starts in the background as soon as the state
is updated, alongside the readout of ``x_t`` and the caller's work; and BLAS
stays in the stepping thread (see :class:`_SingleThreadedBlas`). Together
they took a full-size step from ~9.2 to ~6.0 ms (rank-64) and from ~17 to
~11.5 ms (dense). Everything stays float32: a float64 vector would silently
upcast the whole matrix.

Compiled kernels for ``W @ x`` (``kernel=``, ``flyviz bench --kernel both``;
medians of 200 steps each, scipy and the other engine interleaved in one
process, 2 threads, on a machine another job kept about one core busy):

- numba 0.68 (numpy 2.4 works): a plain loop or 4-8 explicit partial sums
  with fastmath off is not vectorised and ran 0-15% faster than scipy per
  edge (signed indices were slower than scipy: numba wraps negative indices
  on every load). ``fastmath`` reassociation vectorises it (~25% faster
  step) but changes the rounding, so multi-threaded-BLAS logits no longer
  stayed within the 1e-6 that the option test allows; not adopted.
- llvm (:mod:`flyviz.model.kernels`): SELL-8 layout, one vector gather per
  8 edges, each lane summing its row in CSR order: bit-identical to scipy.
  ``W @ x`` ~30% faster; whole rank-64 step in five runs 9.85 -> 7.75,
  8.88 -> 6.63, 8.97 -> 5.87, 7.82 -> 6.07 and 15.66 -> 11.58 ms (21-35%
  faster, median 25%); dense 0-7% faster (its 202 MB head dominates). The
  floor falls with it (70.6 instead of 88.3 MB: 16-bit indices), so the
  step/floor ratio stays ~2.1-2.6 for both. Compiles in ~50 ms; laying out a
  full-size graph takes ~0.3 s and 54 MB. Opt-in (``FLYVIZ_KERNEL=llvm``):
  see :data:`~flyviz.model.kernels.DEFAULT_KERNEL`.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from flyviz.model import kernels
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import InputError
from flyviz.model.intervention_types import ResolvedInterventions


def as_f32(array: np.ndarray) -> np.ndarray:
    """Float32, C-contiguous; no copy when it already is (memory maps stay mapped)."""
    return np.ascontiguousarray(array, dtype=np.float32)


def default_threads() -> int:
    """Worker threads for the sparse product: the usable cores, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class _SingleThreadedBlas:
    """While any engine steps, BLAS runs in the calling thread only.

    OpenBLAS's own worker threads keep spinning for a while after every
    multi-threaded call. On a small machine they then take the cores from the
    engine's sparse-product threads: measured on 2 cores, a full-size rank-64
    step went from ~11 ms to ~6 ms, and the memory floor from ~5 ms to ~2 ms,
    once BLAS stayed in one thread. The engine's BLAS work (input projection,
    readout) is small next to ``W @ x``, which has its own threads.

    The limit is process-wide, so nested and concurrent engines share one
    reference count and the original setting is restored when the last
    step ends.

    The BLAS libraries are listed again whenever modules were imported since
    the last listing: scipy's own OpenBLAS (what ARPACK and ``scipy.linalg``
    call) loads with ``scipy.linalg``, often after the first step, and a
    listing made before it left ARPACK's products of
    :mod:`flyviz.analysis.dynamics` on two spinning threads (measured: 20 ms
    of CPU per Jacobian product instead of 6 on the full-size model).
    """

    _lock = threading.Lock()
    _depth = 0
    _limiter: Any = None
    _controller: Any = None
    _modules = 0  # len(sys.modules) when the libraries were last listed

    def __enter__(self) -> None:
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                try:
                    if cls._controller is None or cls._modules != len(sys.modules):
                        from threadpoolctl import ThreadpoolController

                        cls._controller = ThreadpoolController()
                        cls._modules = len(sys.modules)
                    cls._limiter = cls._controller.limit(limits=1, user_api="blas")
                except Exception:  # no threadpoolctl or an unknown BLAS: run as is
                    cls._limiter = None
            cls._depth += 1

    def __exit__(self, *exc: object) -> None:
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0 and cls._limiter is not None:
                cls._limiter.restore_original_limits()
                cls._limiter = None


#: Hold this (``with SINGLE_THREADED_BLAS:``) around any stepping loop that calls BLAS
#: beside threads of its own (engines, batches, sweeps): BLAS then runs in the calling
#: thread only, restored when the last holder lets go (see :class:`_SingleThreadedBlas`).
SINGLE_THREADED_BLAS = _SingleThreadedBlas()


class CsrRowBlock:
    """A contiguous block of CSR rows whose product one thread computes (what
    :func:`split_rows` makes; the engine, the batch and the backward pass use them).

    ``layout`` is the block laid out for the chosen kernel, made on first
    use (:meth:`Engine.prepare`); the CSR slices are then dropped.
    """

    __slots__ = ("start", "stop", "indptr", "indices", "data", "layout")

    def __init__(self, start: int, stop: int, offsets: np.ndarray,
                 indices: np.ndarray, data: np.ndarray) -> None:
        lo, hi = int(offsets[start]), int(offsets[stop])
        self.start, self.stop = start, stop
        index_dtype = np.int32 if hi - lo < 2**31 else np.int64
        self.indptr = (offsets[start:stop + 1].astype(np.int64) - lo).astype(index_dtype)
        self.indices: np.ndarray | None = indices[lo:hi]
        self.data: np.ndarray | None = data[lo:hi]
        self.layout: kernels.RowBlock | None = None

    def with_values(self, values: np.ndarray, offsets: np.ndarray) -> "CsrRowBlock":
        """This block (laid out) with its weights taken from the full edge array ``values``."""
        assert self.layout is not None
        lo, hi = int(offsets[self.start]), int(offsets[self.stop])
        other = CsrRowBlock.__new__(CsrRowBlock)
        other.start, other.stop, other.indptr = self.start, self.stop, self.indptr
        other.indices = other.data = None
        other.layout = self.layout.with_values(values[lo:hi])
        return other


def split_rows(offsets: np.ndarray, indices: np.ndarray, values: np.ndarray,
               parts: int) -> list[CsrRowBlock]:
    """Split the rows of a CSR matrix into ``parts`` blocks of about equal edge count.

    Parameters
    ----------
    offsets, indices, values
        The CSR arrays (row offsets, column indices, float32 weights).
    parts
        How many blocks to aim for; fewer come back where rows cannot be split so
        finely (never an empty block).
    """
    n = offsets.shape[0] - 1
    nnz = int(offsets[-1])
    cuts = [0]
    for p in range(1, parts):
        cuts.append(int(np.searchsorted(offsets, nnz * p // parts, side="left")))
    cuts.append(n)
    cuts = sorted(set(min(max(c, 0), n) for c in cuts))
    return [CsrRowBlock(a, b, offsets, indices, values) for a, b in zip(cuts, cuts[1:]) if b > a]


class EngineCore:
    """Runs a :class:`~flyviz.model.checkpoint.Checkpoint` one token at a time, with
    interventions already resolved.

    :class:`~flyviz.model.engine.Engine` is this core that also takes interventions
    as they are written (a ``Silence``, a ``Patch`` whose source is a prompt, ...) and
    resolves them: resolving a patch from a source prompt runs that prompt on a core
    (:func:`~flyviz.model.patching.source_states`), so the core knows nothing of
    how interventions are written, and the import graph has no circle. Use
    :class:`~flyviz.model.engine.Engine`; this class is for the code below it.

    Parameters
    ----------
    checkpoint
        A validated checkpoint.
    threads
        Threads for the sparse product; default: the usable cores (max 4).
    overlap
        Start ``W @ x`` for the *next* step in the background as soon as a
        step has updated the state: it depends only on that state, not on the
        next token, so it runs while the readout and the caller's own work
        (sampling, drawing) go on. Same arithmetic, same results. Default: on
        when more than one thread is used.
    blocks_per_thread
        Row blocks per thread for the sparse product. More blocks let an idle
        thread take over work when another is held up by a busy machine, at
        a small cost per block.
    single_threaded_blas
        Keep BLAS (input projection, readout) in the stepping thread during
        a step, see :class:`_SingleThreadedBlas`. Same results, except that
        multi-threaded BLAS may round the last bit of a dense-head logit
        differently.
    interventions
        :class:`~flyviz.model.intervention_types.ResolvedInterventions` to apply
        on every step, or ``None``; see :meth:`set_interventions`
        (:class:`~flyviz.model.engine.Engine` also takes them unresolved).
    kernel
        Sparse kernel: ``"scipy"``, ``"llvm"`` or ``None`` (``FLYVIZ_KERNEL``,
        else :data:`~flyviz.model.kernels.DEFAULT_KERNEL`), see
        :mod:`flyviz.model.kernels`; llvm falls back to scipy where it
        cannot compile. It is
        chosen, compiled and the graph laid out for it on the first step (or
        :meth:`prepare`), in the stepping thread; :attr:`kernel` then says
        which one runs. Both give bit-identical results.

    Notes
    -----
    :attr:`state` is overwritten in place by every :meth:`step` and is read
    by the background product between steps: treat it as read-only, and copy
    it to keep it (a recording, another thread).
    """

    def __init__(self, checkpoint: Checkpoint, threads: int | None = None, *,
                 overlap: bool | None = None, blocks_per_thread: int = 1,
                 single_threaded_blas: bool = True, kernel: str | None = None,
                 interventions: Any = None) -> None:
        ck = checkpoint
        cfg = ck.config
        self.checkpoint = ck
        self.config = cfg
        n = cfg.neurons
        self.wte = as_f32(ck.wte)
        self.in_proj = as_f32(ck.in_proj)
        self.gain = as_f32(ck.gain)
        self.rec_gain = as_f32(ck.rec_gain)
        self.bias = as_f32(ck.bias)
        self.ln_weight = as_f32(ck.ln_weight)
        self.ln_bias = as_f32(ck.ln_bias)
        self.in_index = np.ascontiguousarray(ck.in_index, dtype=np.intp)
        self.out_index = None if ck.out_index_is_identity() else np.ascontiguousarray(
            ck.out_index, dtype=np.intp)
        if ck.head is not None:
            self.head: np.ndarray | None = as_f32(ck.head)
            self.head_a: np.ndarray | None = None
            self.head_b: np.ndarray | None = None
        else:
            assert ck.head_a is not None and ck.head_b is not None  # validate_checkpoint's rule
            self.head = None
            self.head_a = as_f32(ck.head_a)
            self.head_b = as_f32(ck.head_b)

        # Graph: float32 weights; laid out for the kernel on first use (prepare()).
        if kernel is not None and kernel not in kernels.KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; expected one of "
                             f"{', '.join(kernels.KERNELS)}")
        self._kernel_request = kernel
        self.kernel: str | None = None
        self._kernel_lock = threading.Lock()
        indices = np.asarray(ck.w_indices)
        values = as_f32(ck.w_values)
        offsets = np.asarray(ck.w_offsets)
        self.threads = max(1, threads if threads is not None else default_threads())
        self._blocks = split_rows(offsets, indices, values,
                                  self.threads * max(1, int(blocks_per_thread)))
        self.overlap = (self.threads > 1) if overlap is None else bool(overlap)
        self.single_threaded_blas = bool(single_threaded_blas)
        workers = self.threads if len(self._blocks) > 1 else (1 if self.overlap else 0)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="flyviz-spmv") \
            if workers else None
        # Futures of the background W @ x for the current state (overlap mode), and
        # whether the product buffer already holds W @ x for the current state.
        self._pending: list[Future] | None = None
        self._ready = False

        self.state = np.zeros(n, dtype=np.float32)
        self._recurrent = np.zeros(n, dtype=np.float32)
        self._leak: np.float32 | np.ndarray = np.float32(cfg.leak)
        self._keep: np.float32 | np.ndarray = np.float32(1.0 - cfg.leak)
        if ck.leak_vector is not None:
            # 1 - leak rounded once to float32 from the leak as given: for FlyGPT's float32
            # leak the float32 subtraction's bits, for a float64 leak of 0.9 the scalar's.
            leak64 = np.asarray(ck.leak_vector, dtype=np.float64)
            self._leak = leak64.astype(np.float32)
            self._keep = (1.0 - leak64).astype(np.float32)
        self.in_bias = None if ck.in_bias is None else as_f32(ck.in_bias)
        self.head_bias = None if ck.head_bias is None else as_f32(ck.head_bias)
        self._microsteps = int(cfg.microsteps)
        #: What this model adds to the Fly LLM's operator (empty for the Fly LLM).
        self.extensions = ck.operator_extensions()
        self.recent = np.full(cfg.delay_k, cfg.pad_token_id, dtype=np.int64)
        self.tokens_seen = 0
        self.mean_abs_state = 0.0
        self.logits = np.zeros(cfg.vocabulary, dtype=np.float32)
        #: A :class:`~flyviz.model.attribution.Tape` (or anything with its two
        #: ``record_*`` methods) that every step reports to, or ``None``.
        self.tape: Any = None

        # Interventions: None when there are none, so that the step takes the plain path.
        self.interventions: ResolvedInterventions = ResolvedInterventions(neurons=n)
        self._plan: ResolvedInterventions | None = None
        self._pre_scratch: list[np.ndarray] = []
        self._state_values: list[np.float32 | None] = []
        self._variants: dict[tuple[int, ...], list[CsrRowBlock]] = {}
        if interventions is not None:
            self.set_interventions(interventions)

    @property
    def row_blocks(self) -> list[CsrRowBlock]:
        """The blocks of rows of ``W`` the threads compute, in order (laid out for the
        kernel once :meth:`prepare` ran); read them, do not change them."""
        return self._blocks

    def prepare(self) -> str:
        """Choose the sparse kernel and lay the graph out for it now; return its name.

        :meth:`step` does this itself the first time (the llvm kernel: ~50 ms
        to compile once per process, ~0.3 s to lay out a full-size graph);
        call it to pay that up front, in a thread of your choice.
        """
        if self.kernel is None:
            with self._kernel_lock:
                if self.kernel is None:
                    name = kernels.resolve(self._kernel_request)
                    n = self.config.neurons
                    for block in self._blocks:
                        assert block.indices is not None and block.data is not None
                        block.layout = kernels.make_block(name, block.indptr, block.indices,
                                                          block.data, n)
                        # The layout holds what it reads; the CSR slices may be copies.
                        block.indices = block.data = None
                    self.kernel = name
                    self._layout_variants()
        return self.kernel

    # ---------------------------------------------------------- interventions
    def set_interventions(self, interventions: Any) -> ResolvedInterventions:
        """Apply resolved ``interventions`` from the next step on; return them.

        Parameters
        ----------
        interventions
            :class:`~flyviz.model.intervention_types.ResolvedInterventions` for
            this engine's checkpoint, or an empty sequence / ``None`` for none.
            With none, a step is exactly the plain forward pass (the same code,
            bit for bit). :meth:`flyviz.model.engine.Engine.set_interventions`
            resolves written ones first.

        Call it between runs or from the thread that steps the engine (a
        worker thread, say), not while another thread is in :meth:`step`.
        Everything is precomputed here: for cuts and scales one copy of the
        graph's weights per combination of edits that is active at some
        token (laid out for the sparse kernel once), so that a step only
        switches between them.

        Raises
        ------
        InputError
            When ``interventions`` are not resolved, or were resolved for
            another model (nothing is changed then).
        """
        if not interventions:
            resolved = ResolvedInterventions(neurons=self.config.neurons)
        elif not isinstance(interventions, ResolvedInterventions):
            raise InputError(f"{type(self).__name__} takes resolved interventions; resolve "
                             "them first (flyviz.model.interventions.resolve), or use "
                             "flyviz.model.engine.Engine, which does")
        else:
            resolved = interventions.checked_for(self.config.neurons)
        # A background product may be computing W @ x with the old graph.
        self.wait_background()
        self._ready = False
        with self._kernel_lock:
            self.interventions = resolved
            self._pre_scratch = [np.empty(op.indices.size, dtype=np.float32)
                                 for op in resolved.pre_add]
            # None for a patch: its values change with the position (StatePatch.values_at).
            self._state_values = [np.float32(op.value) if hasattr(op, "value") else None
                                  for op in resolved.post_state]
            self._variants = {}
            if self.kernel is not None:
                self._layout_variants()
            self._plan = resolved if resolved else None
        return resolved

    def _layout_variants(self) -> None:
        """One laid-out graph per combination of cuts/scales (the kernel's lock is held)."""
        ck = self.checkpoint
        keys = self.interventions.graph_keys()
        if not keys:
            return
        base = as_f32(ck.w_values)
        offsets = np.asarray(ck.w_offsets)
        for key in keys:
            values = self.interventions.edited_values(base, key)
            self._variants[key] = [block.with_values(values, offsets) for block in self._blocks]

    def _blocks_at(self, position: int) -> list[CsrRowBlock]:
        """The graph's row blocks for the step at ``position`` (cut/scaled where active)."""
        if not self._variants:
            return self._blocks
        return self._variants.get(self.interventions.graph_key(position), self._blocks)

    def _stimulate(self, pre: np.ndarray, position: int) -> None:
        """``pre[S] += amount`` for every stimulation active at ``position`` (no allocation)."""
        for op, scratch in zip(self.interventions.pre_add, self._pre_scratch):
            if (op.start is None or position >= op.start) and (op.stop is None or position < op.stop):
                np.take(pre, op.indices, out=scratch)
                scratch += np.float32(op.amount)
                pre[op.indices] = scratch

    def _set_state(self, x: np.ndarray, position: int) -> None:
        """``x[S] = value`` for every silence/clamp active at ``position``, in order."""
        for op, value in zip(self.interventions.post_state, self._state_values):
            if (op.start is None or position >= op.start) and (op.stop is None or position < op.stop):
                if value is None:  # a patch: the source's values at this position, if any
                    values = op.values_at(position)  # type: ignore[attr-defined]
                    if values is not None:
                        x[op.indices] = values
                    continue
                x[op.indices] = value

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Zero the state and fill the delay line with PAD."""
        self.wait_background()
        self._ready = False
        self.state.fill(0.0)
        self.recent.fill(self.config.pad_token_id)
        self.tokens_seen = 0
        self.mean_abs_state = 0.0

    def close(self) -> None:
        """Stop the worker threads (the engine is unusable afterwards)."""
        self.wait_background()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------- step
    def _block_matvec(self, block: CsrRowBlock) -> None:
        assert block.layout is not None
        block.layout.matvec(self.state, self._recurrent[block.start:block.stop])

    def _start_recurrent(self) -> None:
        """Begin ``W @ x`` for the current state (and the next step's graph) on the workers."""
        assert self._pool is not None
        self._pending = [self._pool.submit(self._block_matvec, b)
                         for b in self._blocks_at(self.tokens_seen)]

    def wait_background(self) -> None:
        """Block until the background ``W @ x`` (overlap mode) has finished.

        Its result is kept for the next :meth:`step`. ``flyviz bench`` calls
        this after each step so that a step's time includes all of its work.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return
        for future in pending:
            future.result()
        self._ready = True

    def recurrent_input(self) -> np.ndarray:
        """``W @ x`` for the current state, into an internal buffer."""
        self.wait_background()
        if self._ready:
            self._ready = False
            return self._recurrent
        self.prepare()
        blocks = self._blocks_at(self.tokens_seen)
        if self._pool is None:
            for block in blocks:
                self._block_matvec(block)
        else:
            for _ in self._pool.map(self._block_matvec, blocks):
                pass
        return self._recurrent

    def drive(self, token: int) -> np.ndarray:
        """Input drive for ``token`` given the delay line, shape ``(delay_k * slot,)``."""
        k = self.config.delay_k
        # Slot 0 is the incoming token, slot j the token j back (recent is oldest first).
        history = np.empty(k, dtype=np.int64)
        history[0] = token
        history[1:] = self.recent[::-1][: k - 1]
        embeddings = self.wte[history]                       # (k, d)
        drive = np.matmul(embeddings[:, None, :], self.in_proj)[:, 0, :].reshape(-1)
        if self.in_bias is not None:
            drive += self.in_bias
        return drive

    def step(self, token: int) -> np.ndarray:
        """Feed one token; update the state; return the next-token logits.

        Parameters
        ----------
        token
            Input token id, ``0 <= token < vocabulary``.

        Returns
        -------
        numpy.ndarray
            ``(vocabulary,)`` float32 logits (an internal buffer: copy to keep).
        """
        cfg = self.config
        token = int(token)
        if not 0 <= token < cfg.vocabulary:
            raise InputError(f"token id {token} is outside the vocabulary 0..{cfg.vocabulary - 1}")
        # A huge (float32-finite) scale or stimulation overflows to inf, which tanh takes to
        # +-1: no warning for that; a state that is not finite is an error (in _step).
        with np.errstate(over="ignore", invalid="ignore"):
            if not self.single_threaded_blas:
                return self._step(token)
            with SINGLE_THREADED_BLAS:
                return self._step(token)

    def _step(self, token: int) -> np.ndarray:
        plan = self._plan                      # None without interventions
        position = self.tokens_seen
        drive = self.drive(token)
        tape = self.tape
        if tape is not None and self.extensions:
            raise InputError("attribution follows the Fly LLM's one update per token; this "
                             f"model has {', '.join(self.extensions)}, which it does not "
                             "follow yet")
        for _ in range(self._microsteps - 1):  # FlyGPT: extra updates with the drive held
            self._update(drive, plan, position, None)
        x = self._update(drive, plan, position, tape)
        self.recent[:-1] = self.recent[1:]
        self.recent[-1] = token
        self.tokens_seen += 1
        if self.overlap:
            # The product buffer is no longer needed: refill it for the next step.
            self._start_recurrent()
        self.mean_abs_state = float(np.abs(x).mean(dtype=np.float64))
        if not math.isfinite(self.mean_abs_state):
            # One NaN or inf anywhere makes the mean so (a check that costs nothing): say so
            # rather than run on with NaN logits and token 0 forever.
            raise InputError(f"the state is no longer finite after position {position} "
                             "(NaN or infinity, in float32): an intervention's value is too "
                             "large for this model; use a smaller one")
        self.logits = self.readout(x)
        if tape is not None:
            tape.record_state(position, x, self.logits)
        return self.logits

    def _update(self, drive: np.ndarray, plan: ResolvedInterventions | None, position: int,
                tape: Any) -> np.ndarray:
        """One update of the state with ``drive`` held; return the state (updated in place)."""
        pre = self.recurrent_input()           # W @ x_prev (cut/scaled where active)
        pre *= self.rec_gain
        pre[self.in_index] += drive            # in_index is unique: a plain add scatters
        if plan is not None:
            self._stimulate(pre, position)
        pre *= self.gain
        pre += self.bias
        if tape is not None:  # the backward sweep needs u_t (a copy: pre is reused)
            tape.record_input(position, pre)
        np.tanh(pre, out=pre)
        pre *= self._leak
        x = self.state
        x *= self._keep
        x += pre
        if plan is not None:
            self._set_state(x, position)
        return x

    def readout(self, x: np.ndarray) -> np.ndarray:
        """Logits for a state: LayerNorm over the read-out neurons, then the head (or, without
        LayerNorm, the head and its bias over the read-out neurons' states as they are)."""
        h = x if self.out_index is None else x[self.out_index]
        if not self.config.layer_norm:
            return self._head(h)
        mean = h.mean(dtype=np.float64)
        var = np.square(h - np.float32(mean), dtype=np.float32).mean(dtype=np.float64)
        inv = np.float32(1.0 / np.sqrt(var + self.config.layer_norm_eps))
        normed = (h - np.float32(mean)) * inv
        normed *= self.ln_weight
        normed += self.ln_bias
        return self._head(normed)

    def _head(self, h: np.ndarray) -> np.ndarray:
        """The dense or rank-r head applied to ``h``, plus the readout bias if there is one."""
        if self.head is not None:
            logits = self.head @ h
        else:
            assert self.head_a is not None and self.head_b is not None
            logits = self.head_b @ (self.head_a @ h)
        if self.head_bias is not None:
            logits += self.head_bias
        return logits


def softmax(logits: np.ndarray) -> np.ndarray:
    """Plain softmax in float64 (the reference's ``probabilities``)."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def top_k(probabilities: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids and probabilities of the ``k`` most likely tokens, most likely first.

    Ties keep the lower id first, like the reference's argmax.
    """
    k = max(1, min(int(k), probabilities.shape[0]))
    order = np.argsort(-probabilities, kind="stable")[:k]
    return order, probabilities[order]
