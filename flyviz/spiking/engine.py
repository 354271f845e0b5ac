"""The clock-driven leaky integrate-and-fire engine, tick for tick as Brian2 runs it.

Shiu et al.'s whole-brain model (philshiu/Drosophila_brain_model, ``model.py``) in Brian2:

    dv/dt = (v_0 - v + g) / t_mbr : volt (unless refractory)
    dg/dt = -g / tau              : volt (unless refractory)
    threshold v > v_th; reset v = v_rst; g = 0; refractory rfc; method 'linear'
    Synapses on_pre 'g += w', delay t_dly; PoissonInput(target_var='v', N=1) per excited neuron

What Brian2 2.9 does each tick ``k`` (read from its generated code, ``tests/oracle/brian2_lif.py``
prints it), and what this engine does in the same order:

1. ``groups`` (state update): ``not_refractory = timestep(t - lastspike) >= timestep(rfc)``, i.e.
   ``k - k_last >= round(rfc / dt)`` (22 ticks for 2.2 ms, 0 for a Poisson target); where it
   holds, the exact ('linear') propagator ``g' = e^(-dt/tau) g``,
   ``v' = C0 + ((Cg * g) + (Cv * v))`` with Brian2's own constants (:func:`propagator`), in
   float64 SI units (volts, seconds) so that every operation rounds as Brian2's does; while
   refractory both variables are frozen.
2. ``thresholds``: ``v > v_th and not_refractory`` (never tested while refractory).
3. ``synapses``: the spikes of tick ``k - D`` (``D = round(t_dly / dt)``, 18) add ``w`` to the
   targets' ``g``, spike by spike in index order and synapse by synapse in the connectivity
   table's order (``numpy.add.at``); then the Poisson events (``v += w_syn * f_poi``). Both
   writes are *conditional*: Brian2 drops a write to an ``(unless refractory)`` variable of a
   refractory neuron, so input reaching a refractory neuron is lost, not deferred.
4. ``resets``: ``v = v_rst; g = 0`` for the neurons that spiked at 2. (Done at 2 here: nothing
   in 3 reads a spiking neuron's state, and its writes to it are dropped.)

Speed (one core): the state is updated densely, in blocks of 512 or 1,024 neurons (by the
CPU's L1 data cache: :func:`block_shift_here`) with branch-free vector code; after any input a
neuron takes thousands of ticks to return exactly to rest, so under sustained input nearly
every neuron is away from it. No spike reaches a synapse sooner than ``D`` ticks, so time runs
in windows of ``D`` ticks and each block is stepped through a whole window while its state
sits in the L1 cache, taking the input that reaches it at each tick. Before a window, the
synaptic events of its arriving spikes are sorted once by target block, in arrival order, each
tick's place in each block's chain marked (:func:`_stage`, chains of chunks, one pass, rows
prefetched a few spikes ahead): each spike's row is read once, whatever the number of blocks
it reaches, and each block then reads only its own events, tick by tick. The sort is stable
(spikes by tick, then index, each row in table order), so each target still sums its inputs
in Brian2's order. The dense update is vectorised with the CPU's widest registers
(:func:`_widest_vectors`: 8 neurons at a time with AVX-512), on state that begins on a cache
line (:func:`line_aligned`).
A synapse is one word of 4 bytes (:func:`pack_synapses`: target and the index of its weight
among the distinct weights), a third of the bytes of a target and a float64 weight: at high
activity delivery is bound by the memory that rows are read from. Rest is the propagator's
fixed point ``(v_rest, 0)`` (``v_rest`` is ``v_0`` unless rounding moves it), which the
update leaves exactly unchanged: so a block at rest that nothing reaches in a window is
skipped, and a block with few neurons away from rest (:data:`SPARSE_MOST`) updates only
those, one by one, listing each neuron that input reaches. Where the reset is that fixed
point too (the authors' constants), a refractory neuron needs no test of its clock either.
``g`` decays forever without reaching 0; once ``v`` is at rest and ``|g|`` is below
:data:`G_FLUSH` (far below half an ulp of any weight and of ``v``), ``g`` is set to 0: every
later sum and product then rounds to what Brian2 gets with the tiny ``g`` it keeps. (Both
hold while rest is below the threshold; with a threshold below rest every block is updated
whole, every tick.) No ``fastmath``: each operation rounds as Brian2's numpy code does.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numba
import numpy as np
from numba.extending import intrinsic

__all__ = ["EngineTrial", "LIFParams", "Propagator", "flush_threshold", "group_rows",
           "next_chunk", "pack_synapses", "propagator", "simulate_ticks", "ticks"]

#: Neurons per block of the update (a power of two): a block's state stays in the L1 cache
#: while it is stepped through a window of ticks. The narrowest block; rows are grouped by
#: it (:func:`group_rows`), which groups them by any wider block too.
BLOCK_SHIFT = 9
#: Blocks of twice as many neurons where the CPU's L1 data cache holds at least
#: :data:`WIDE_BLOCK_L1` bytes (a block's state is 24 bytes a neuron): half the blocks, so
#: half the chains the sort writes to and half the work that each block-tick costs, whatever
#: its neurons (:func:`block_shift_here`).
WIDE_BLOCK_SHIFT = 10
WIDE_BLOCK_L1 = 48 * 1024

#: A block with at most this many neurons away from rest for each 512 of its neurons updates
#: only those, one by one, until input has reached more; others are updated whole, in vector
#: code (:func:`_window`). Under weak input most neurons sit exactly at rest (about 20 of each
#: 512 with 21 neurons excited). The two ways cost about the same near 30 (measured side by
#: side against 24, 48 and 64 with 21, 60, 150 and 500 neurons excited, in blocks of 512).
SPARSE_MOST = 32

#: Most ticks in one window (the synaptic delay sets it: 18 at 1.8 ms).
MAX_WINDOW = 32

#: Synaptic events a trial's stage holds at first (it grows to the most a window delivers).
STAGE_START = 1 << 16
#: Events in one chunk of the stage (:func:`_stage`).
STAGE_CHUNK = 1 << 13
#: A chain's chunk is replaced at a check when it has room for fewer events than this.
STAGE_REFILL = 2048
#: Chunk ``c`` begins at stage position ``c * (STAGE_CHUNK + STAGE_SKEW)``: chunks are 41
#: cache lines of 16 words apart. Were they a power of two apart, their first lines (a
#: window's events onto a block are often fewer than a chunk holds) would all fall in a few
#: sets of the caches (which index lines by the low bits of their addresses), and the
#: window's events would not stay in the L2 cache between the sort and the delivery.
STAGE_SKEW = 41 * 16

#: Below this ``|g|`` (volts) a neuron at rest has ``g`` set to 0 (see the module notes).
G_FLUSH = 1e-30

#: The most ticks a trial runs between two returns to Python (1 s at 0.1 ms): a stopped
#: run (Ctrl+C) ends within one chunk's compute (about 0.3 s on the full brain at rest),
#: not after the whole trial. Each return costs a few ms of set-up: chunks of 200 ms made a
#: full-brain trial 15 % slower (0.281 against 0.242 s per biological second, bench_spiking).
CHUNK_TICKS = 10_000
#: A trial's first chunk, and the fewest ticks of any: a run whose ticks are slow (a screen
#: driving thousands of neurons) learns their pace from it.
FIRST_CHUNK_TICKS = 1_000
MIN_CHUNK_TICKS = 100
#: Wall seconds a chunk aims at: after each, the next is sized from its pace (at most
#: :data:`CHUNK_TICKS`), so a heavy run answers Ctrl+C and reports progress about this
#: often (a full second of a busy brain once took 17 s in one chunk).
CHUNK_SECONDS = 0.5
#: The clock chunks are timed by.
_clock = time.perf_counter
#: Numbers the thread pools of :func:`simulate_ticks` (their threads' names tell runs apart).
_POOL_NUMBERS = itertools.count(1)

_MV = 0.001  # Brian2's mV and ms are float 10**-3: quantities are built as value * 0.001
_MS = 0.001


@dataclass(frozen=True)
class LIFParams:
    """The model's constants, in the units the authors write them (mV, ms, Hz).

    The defaults are ``default_params`` of the authors' ``model.py``. ``w_syn`` is the weight
    of one synapse; ``f_poi`` scales it for a Poisson event; ``rate`` is the Poisson rate.
    """

    v_0: float = -52.0
    v_rst: float = -52.0
    v_th: float = -45.0
    t_mbr: float = 20.0
    tau: float = 5.0
    t_rfc: float = 2.2
    t_dly: float = 1.8
    w_syn: float = 0.275
    rate: float = 150.0
    f_poi: float = 250.0
    dt: float = 0.1

    def with_(self, **changes: float) -> LIFParams:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    @property
    def dt_s(self) -> float:
        """The tick in seconds, as Brian2 holds ``0.1*ms``."""
        return self.dt * _MS

    @property
    def delay_ticks(self) -> int:
        """Synaptic delay in ticks (Brian2 rounds ``t_dly / dt``: 1.8 ms is 18)."""
        return int(round(self.t_dly / self.dt))

    @property
    def refractory_ticks(self) -> int:
        """Refractory period in ticks, Brian2's ``timestep(rfc, dt)`` (2.2 ms is 22)."""
        return ticks(self.t_rfc * _MS, self.dt_s)

    @property
    def poisson_weight(self) -> float:
        """One Poisson event's jump of ``v``, volts: Brian2 writes the weight as its repr in mV
        (``68.75 * mvolt``) into the generated code, so the value is rebuilt the same way."""
        return float(repr(self.w_syn * self.f_poi)) * _MV


def ticks(seconds: float, dt_s: float) -> int:
    """Brian2's ``timestep(t, dt)``: ``int((t + 1e-3 dt) / dt)`` (whole ticks, rounding-safe)."""
    return int((seconds + 1e-3 * dt_s) / dt_s)


@dataclass(frozen=True)
class Propagator:
    """The exact one-tick update of Brian2's ``method='linear'`` code, in volts.

    ``g' = gg * g`` and ``v' = c0 + ((gv * g) + (vv * v))``; ``v_rest`` is its fixed point for
    ``g = 0`` (``v_0`` itself unless rounding moves it by an ulp).
    """

    gg: float
    gv: float
    vv: float
    c0: float
    v_rest: float


def propagator(params: LIFParams) -> Propagator:
    """The constants Brian2 2.9 computes for the model's state update (its ``_lio_*``):

    ``_lio_2 = exp(-dt/tau)``, ``_lio_10 = exp(-dt/t_mbr)``, ``_lio_8 = v_0 - v_0*exp(-dt/t_mbr)``,
    ``_lio_9 = ((tau/(t_mbr-tau)) * (-exp(dt/t_mbr) + exp(dt/tau))) * exp(-dt/t_mbr) * exp(-dt/tau)``,
    each with the same operations in the same order, with numpy's ``exp`` as Brian2's numpy and
    Cython targets call it for scalars."""
    exp = np.exp
    dt = np.float64(params.dt * _MS)
    tau = np.float64(params.tau * _MS)
    t_mbr = np.float64(params.t_mbr * _MS)
    v_0 = np.float64(params.v_0 * _MV)
    if math.isclose(float(tau), float(t_mbr)):
        raise ValueError("tau equal to t_mbr needs another propagator")
    lio_1 = (-dt) / tau
    lio_2 = exp(lio_1)
    lio_3 = tau / (t_mbr - tau)
    lio_4 = dt / t_mbr
    lio_5 = dt / tau
    lio_6 = (-dt) / t_mbr
    lio_8 = v_0 - (v_0 * exp(lio_6))
    lio_9 = ((lio_3 * ((-exp(lio_4)) + exp(lio_5))) * exp(lio_6)) * exp(lio_1)
    lio_10 = exp(lio_6)
    v = float(v_0)
    for _ in range(64):  # the rounding fixed point next to v_0 (reached in a step or two)
        nxt = float(lio_8 + ((lio_9 * 0.0) + (lio_10 * v)))
        if nxt == v:
            break
        v = nxt
    return Propagator(float(lio_2), float(lio_9), float(lio_10), float(lio_8), v)


@intrinsic
def _widest_vectors(typingctx: object) -> tuple[object, Callable[..., object]]:
    """Let LLVM vectorise the calling function with the CPU's widest registers.

    On CPUs with AVX-512 LLVM keeps to 256-bit vectors unless told otherwise (wider ones
    once lowered the clock of older CPUs); the dense update of a block then runs 4 neurons
    at a time instead of 8. The same operations in the same order, so the same rounding."""
    def codegen(context: object, builder: object, signature: object, args: object) -> object:
        # a string attribute that llvmlite's attribute set does not list: added as the
        # set it is (written into the function's definition as it stands). An llvmlite
        # whose attribute set is something else keeps LLVM's default width: the same
        # results, only the narrower vectors.
        try:
            set.add(builder.function.attributes,  # type: ignore[attr-defined]
                    '"prefer-vector-width"="512"')
        except (TypeError, AttributeError):
            pass
        return context.get_dummy_value()  # type: ignore[attr-defined]

    return numba.types.void(), codegen


@intrinsic
def _prefetch(typingctx: object, array: object, index: object
              ) -> tuple[object, Callable[..., object]]:
    """Ask the CPU to bring ``array[index]``'s cache line in, without waiting for it (LLVM's
    ``llvm.prefetch``: a read, kept in every level of cache). Changes nothing but timing;
    ``index`` is not checked (a prefetch never faults: the callers keep it inside the array)."""
    def codegen(context: object, builder: object, signature: object, args: object) -> object:
        from llvmlite import ir
        from numba.core import cgutils

        data = context.make_array(signature.args[0])(  # type: ignore[attr-defined]
            context, builder, args[0]).data  # type: ignore[index]
        byte = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        fetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, word, word, word]),  # type: ignore[attr-defined]
            "llvm.prefetch.p0i8")
        line = builder.bitcast(builder.gep(data, [args[1]]), byte)  # type: ignore[attr-defined,index]
        # read (0), keep in all caches (3), data (1)
        builder.call(fetch, [line, word(0), word(3), word(1)])  # type: ignore[attr-defined]
        return context.get_dummy_value()  # type: ignore[attr-defined]

    return numba.types.void(array, numba.types.int64), codegen  # type: ignore[call-overload]


@intrinsic
def _trailing_zeros(typingctx: object, word: object) -> tuple[object, Callable[..., object]]:
    """The number of 0 bits below the lowest 1 bit of a 64-bit ``word`` (not 0): LLVM's
    ``llvm.cttz``, one instruction."""
    def codegen(context: object, builder: object, signature: object, args: object) -> object:
        from llvmlite import ir
        from numba.core import cgutils

        word_type = ir.IntType(64)
        count = cgutils.get_or_insert_function(
            builder.module,  # type: ignore[attr-defined]
            ir.FunctionType(word_type, [word_type, ir.IntType(1)]), "llvm.cttz.i64")
        # 0 is never asked: "poison at 0" (1) lets LLVM use the plain instruction
        return builder.call(count, [args[0], ir.IntType(1)(1)])  # type: ignore[attr-defined,index]

    return numba.types.int64(numba.types.uint64), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _over_threshold(v_b: np.ndarray, first: int, v_th: float) -> np.uint64:
    """Which of the 64 neurons ``first ..`` of a block have ``v`` over the threshold: bit ``i``
    for neuron ``first + i`` (compiled to vector compares; as a fixed-length view, so that
    LLVM reads the neurons as one run)."""
    group = v_b[first:first + 64]
    over = np.uint64(0)
    for i in range(64):
        over |= np.uint64(group[i] > v_th) << np.uint64(i)
    return over


@numba.njit(cache=True, nogil=True, inline="always")
def _next_chunk(b: int, n_blocks: int, fill: np.ndarray, link: np.ndarray, used: int,
                stride: int) -> int:
    """Block ``b``'s chain goes on in a new chunk, number ``used``: its last chunk's end is
    recorded where the chain is walked from (:func:`_stage`); returns the chunks now used."""
    chunk = fill[n_blocks + b]
    link[2 * chunk] = used
    link[2 * chunk + 1] = fill[b]
    fill[b] = used * stride
    fill[n_blocks + b] = used
    return used + 1


#: The sort fetches the row of the spike this many spikes ahead (and its row's place twice as
#: far ahead) while it sorts one (:func:`_stage`), and at most this many cache lines of it.
PREFETCH_AHEAD = 16
PREFETCH_LINES = 8


@numba.njit(cache=True, nogil=True)
def _stage(first: int, span: int, arrive_at: np.ndarray, spikes: np.ndarray,
           indptr: np.ndarray, codes: np.ndarray, target_mask: int, silenced: np.ndarray,
           n_blocks: int, fill: np.ndarray, marks: np.ndarray, link: np.ndarray,
           stage: np.ndarray, chunk_size: int, refill: int, stride: int,
           block_shift: int) -> int:
    """Sort the window's synaptic events by target block, in arrival order, in one pass.

    Spike ``first + x`` arrives at window tick ``t`` for ``arrive_at[t] <= x <
    arrive_at[t + 1]``. The events onto block ``b`` (of ``2 ** block_shift`` neurons) go to a
    chain of chunks of the stage
    (chunk ``c`` is ``stage[c * stride:][:chunk_size]``), beginning with chunk ``b``:
    ``fill[b]`` is the stage position after the chain's last event and ``fill[n_blocks + b]``
    its last chunk; ``link[2 * c]`` is the chunk after chunk ``c``, ``link[2 * c + 1]`` the
    position after its last event (a later chunk of a chain lies further on in the stage).
    ``marks[t * n_blocks + b]`` is ``fill[b]`` as window tick ``t`` begins (for ``t`` up to
    ``span``): the events of tick ``t`` are those between two marks (:func:`_window` reads
    them). Spikes are taken in arrival order (by tick, then index), each row in table order,
    and each event goes to the end of its chain: so a target still receives its inputs in
    Brian2's order. Each spike's row is read once, whatever the number of blocks it reaches,
    and the chains being written are one per block (their ends stay in the L1 cache).

    A row is sorted without a test of room at each event while every chain's chunk has
    room for the whole row (``room``, a lower bound kept as rows are sorted): when one may
    not, the chunks with room for fewer than ``refill`` events are replaced (their unused
    ends left), and a row longer than that is sorted event by event. Returns the number of
    chunks used: at most ``n_blocks`` and one for each ``chunk_size - refill`` of the
    window's events, all of which the stage must hold (:data:`STAGE_CHUNK`,
    :data:`STAGE_REFILL`, :data:`STAGE_SKEW`).
    """
    for b in range(n_blocks):
        fill[b] = b * stride
        fill[n_blocks + b] = b
    used = n_blocks
    room = chunk_size
    # the loop over the events indexes with unsigned integers: a signed index costs numba's
    # test for a negative one (counted from the end) at every array read and write
    u_mask, u_block_shift = np.uint64(target_mask), np.uint64(block_shift)
    n_spikes = arrive_at[span]
    per_line = 64 // codes.itemsize
    for t in range(span):
        marks[t * n_blocks:(t + 1) * n_blocks] = fill[:n_blocks]
        for x in range(arrive_at[t], arrive_at[t + 1]):
            # the first line of a row is a miss in every cache (rows are read in the order
            # their neurons fired, all over the table); while this spike's events are sorted,
            # the CPU brings in the lines of a spike's row further on, and the place of a row
            # further on still
            if x + PREFETCH_AHEAD < n_spikes:
                ahead = spikes[first + x + PREFETCH_AHEAD]
                row_end = indptr[ahead + 1]
                at_line = indptr[ahead]
                for _ in range(PREFETCH_LINES):
                    if at_line >= row_end:
                        break
                    _prefetch(codes, at_line)  # type: ignore[call-arg]
                    at_line += per_line
                if x + 2 * PREFETCH_AHEAD < n_spikes:
                    _prefetch(indptr,  # type: ignore[call-arg]
                              np.int64(spikes[first + x + 2 * PREFETCH_AHEAD]))
            pre = spikes[first + x]
            if silenced[pre]:
                continue
            row_start, row_stop = indptr[pre], indptr[pre + 1]
            n_row = row_stop - row_start
            if n_row > room:
                # replace the chunks with little room left; the least room of any is the bound
                room = chunk_size
                for b in range(n_blocks):
                    left = fill[n_blocks + b] * stride + chunk_size - fill[b]
                    if left < refill:
                        used = _next_chunk(b, n_blocks, fill, link, used, stride)
                        left = chunk_size
                    room = min(room, left)
            if n_row <= room:
                # two events at a time, both chain ends read before either is written: where
                # both go to one block (a row is grouped by block: 38 % of events follow one
                # onto the same block), the second's place is the first's plus one, not read
                # back from the first's store
                pos, u_row_stop = np.uint64(row_start), np.uint64(row_stop)
                while pos + np.uint64(1) < u_row_stop:
                    code, code_2 = codes[pos], codes[pos + np.uint64(1)]
                    at = (np.uint64(code) & u_mask) >> u_block_shift
                    at_2 = (np.uint64(code_2) & u_mask) >> u_block_shift
                    p = np.uint64(fill[at])
                    p_2 = np.uint64(fill[at_2]) + np.uint64(at == at_2)
                    stage[p] = code
                    stage[p_2] = code_2
                    fill[at] = p + np.uint64(1)
                    fill[at_2] = p_2 + np.uint64(1)
                    pos += np.uint64(2)
                if pos < u_row_stop:
                    code = codes[pos]
                    at = (np.uint64(code) & u_mask) >> u_block_shift
                    p = np.uint64(fill[at])
                    stage[p] = code
                    fill[at] = p + np.uint64(1)
                room -= n_row
            else:  # a row longer than the room of every chunk: event by event
                for e in range(np.uint64(row_start), np.uint64(row_stop)):
                    code = codes[e]
                    block = int((np.uint64(code) & u_mask) >> u_block_shift)
                    if fill[block] == fill[n_blocks + block] * stride + chunk_size:  # full
                        used = _next_chunk(block, n_blocks, fill, link, used, stride)
                    stage[np.uint64(fill[block])] = code
                    fill[block] += 1
                room = 0
    marks[span * n_blocks:(span + 1) * n_blocks] = fill[:n_blocks]
    for b in range(n_blocks):
        link[2 * fill[n_blocks + b] + 1] = fill[b]
    return used


@numba.njit(cache=True, nogil=True, inline="always")
def _v_next(g: float, v: float, gv: float, vv: float, c0: float) -> float:
    """A free neuron's ``v`` after one tick, in Brian2's operations and order (its 'linear'
    propagator, :func:`propagator`): every update of ``v`` computes it here, so all round
    alike."""
    return c0 + ((gv * g) + (vv * v))


@numba.njit(cache=True, nogil=True)
def _refractory_state_is_fixed(gv: float, vv: float, c0: float, v_rst: float) -> bool:
    """Whether the update leaves a refractory neuron's state ``(v_rst, +0)`` as it is.

    A refractory neuron sits at ``(v_rst, +0)`` all through its refractory period: the reset
    writes it and every input to it is dropped. Its update would write ``gg * 0``, which is
    +0 (``gg``, an exponential, is not negative), and ``c0 + ((gv * 0) + (vv * v_rst))``. Where
    that is ``v_rst`` itself, bit for bit (with the authors' constants the reset is the rest
    state, the update's fixed point), updating a refractory neuron as if it were free changes
    nothing, and the update need not test the refractory clock. ``v_rst = 0`` is left out:
    a sum of zeros could give -0 where ``v`` is +0.
    """
    return _v_next(0.0, v_rst, gv, vv, c0) == v_rst and v_rst != 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def _update_group(v_b: np.ndarray, g_b: np.ndarray, until_b: np.ndarray, first: int, k: int,
                  gg: float, gv: float, vv: float, c0: float, v_th: float, v_rst: float,
                  test_refractory: bool) -> np.int64:
    """Tick ``k``'s update and threshold of the 64 neurons ``first ..`` of a block; non-zero
    if one may have crossed (the caller finds which, testing the refractory clock).

    Branch-free, so that LLVM compiles it to vector code (it is inlined into
    :func:`_update_block`, once with ``test_refractory`` and once without, each a constant
    there). A refractory neuron's state is ``(v_rst, +0)`` (:func:`_refractory_state_is_fixed`),
    so its update need not read it: ``gg * 0`` is +0 and ``v`` is written ``v_rst``, without a
    select of the ``g`` and ``v`` read (on CPUs with AVX2 alone those selects and the spike
    flags were a third of the loop's instructions). Without the test (where the update leaves that state as it is)
    the loop does not read the refractory clock at all: on a CPU with AVX-512 the compare and
    select were a quarter of its vector operations.
    """
    crossed = np.int64(0)
    for i in range(first, first + 64):
        gi = g_b[i]
        v_new = _v_next(gi, v_b[i], gv, vv, c0)
        if test_refractory:
            v_new = v_new if k >= until_b[i] else v_rst
        crossed |= np.int64(v_new > v_th)
        v_b[i] = v_new
        g_b[i] = gg * gi
    return crossed


@numba.njit(cache=True, nogil=True)
def _update_block(v_b: np.ndarray, g_b: np.ndarray, until_b: np.ndarray, k: int, gg: float,
                  gv: float, vv: float, c0: float, v_th: float, v_rst: float,
                  reset_is_fixed: bool, fired: np.ndarray) -> bool:
    """Tick ``k``'s update and threshold of a whole block, in vector code: in groups of 64
    neurons (:func:`_update_group`, with the refractory test only where the reset is not the
    update's fixed point), each group's "one may have crossed" kept in ``fired``; True if
    one may have. (A function of its own: written inside :func:`_window`, LLVM compiled it
    worse, its constants reloaded from the stack at every step, and the window took 1.0-1.4
    CPU s per biological second at 500 neurons excited instead of 0.41.)"""
    _widest_vectors()  # type: ignore[call-arg]  # numba supplies the typing context
    over = 0
    for w in range(v_b.shape[0] >> 6):
        if reset_is_fixed:
            crossed = _update_group(v_b, g_b, until_b, w << 6, k, gg, gv, vv, c0, v_th, v_rst,
                                    False)
        else:
            crossed = _update_group(v_b, g_b, until_b, w << 6, k, gg, gv, vv, c0, v_th, v_rst,
                                    True)
        fired[w] = crossed
        over |= crossed
    return over != 0


@numba.njit(cache=True, nogil=True)
def _update_listed(v_b: np.ndarray, g_b: np.ndarray, until_b: np.ndarray, busy_b: np.ndarray,
                   n_busy: int, k: int, gg: float, gv: float, vv: float, c0: float, v_th: float,
                   v_rst: float, reset_is_fixed: bool, crossing: np.ndarray) -> int:
    """Tick ``k``'s update and threshold of a block's listed neurons ``busy_b[:n_busy]``, one
    by one (the same operations as :func:`_update_group`, so the same rounding); writes
    the neurons that cross to ``crossing``, in index order, and returns their number."""
    n_crossing = 0
    for x in range(n_busy):
        i = busy_b[x]
        gi = g_b[i]
        v_new = _v_next(gi, v_b[i], gv, vv, c0)
        if not reset_is_fixed and k < until_b[i]:
            v_new = v_rst
        v_b[i] = v_new
        g_b[i] = gg * gi
        if v_new > v_th and k >= until_b[i]:
            # in index order (the list is in the order its neurons were listed)
            y = n_crossing
            while y > 0 and crossing[y - 1] > i:
                crossing[y] = crossing[y - 1]
                y -= 1
            crossing[y] = i
            n_crossing += 1
    return n_crossing


@numba.njit(cache=True, nogil=True, inline="always")
def _spike(i: int, lo: int, t: int, k: int, hold: np.ndarray, until_b: np.ndarray,
           v_b: np.ndarray, g_b: np.ndarray, v_rst: float, win_tick: np.ndarray,
           win_neuron: np.ndarray, n_win: int) -> int:
    """Neuron ``lo + i`` spikes at tick ``k`` (window tick ``t``): recorded as the window's
    spike ``n_win``, refractory for its hold, and reset (4: nothing in 3 reads it, its writes
    are dropped); returns the window's new number of spikes."""
    win_tick[n_win] = t
    win_neuron[n_win] = lo + i
    until_b[i] = k + hold[lo + i]
    v_b[i] = v_rst
    g_b[i] = 0.0
    return n_win + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _list_neuron(j: int, listed: np.ndarray, busy_b: np.ndarray, n_busy: int) -> int:
    """Add neuron ``j`` of a block, which input has just moved from rest, to the block's list
    ``busy_b[:n_busy]`` (flagged in ``listed``); returns the list's new length."""
    listed[j] = 1
    busy_b[n_busy] = j
    return n_busy + 1


@intrinsic
def _out_of_line(typingctx: object) -> tuple[object, Callable[..., object]]:
    """Keep the calling function a function of its own: LLVM does not inline it into its
    callers, whose registers it would then share."""
    def codegen(context: object, builder: object, signature: object, args: object) -> object:
        try:
            builder.function.attributes.add("noinline")  # type: ignore[attr-defined]
        except (TypeError, AttributeError, ValueError):  # an llvmlite without it: inlined
            pass
        return context.get_dummy_value()  # type: ignore[attr-defined]

    return numba.types.void(), codegen


@numba.njit(cache=True, nogil=True)
def _deliver(stage: np.ndarray, mark: int, stop: int, target_mask: int, lo: int,
             weight_shift: int, weights: np.ndarray, k: int, until_b: np.ndarray,
             g_b: np.ndarray, sparse: bool, listed: np.ndarray, busy_b: np.ndarray,
             n_busy: int) -> int:
    """3: the synaptic events ``stage[mark:stop]`` of tick ``k`` onto the block of neurons
    ``lo ..`` (``until_b``, ``g_b``), in their order, each dropped where its target is
    refractory (:func:`pack_synapses`: target and weight); where the block is updated one by
    one (``sparse``), each target not yet listed is listed (:func:`_list_neuron`). Returns
    the list's length. Out of line: inlined into :func:`_window`, its loop kept three of its
    values on the stack, reloaded at every event (about 0.02 CPU s per biological second at
    5,000 neurons excited)."""
    _out_of_line()  # type: ignore[call-arg]  # numba supplies the typing context
    # unsigned indices, as in _stage (and why)
    u_mask, u_weight_shift = np.uint64(target_mask), np.uint64(weight_shift)
    u_lo = np.uint64(lo)
    for x in range(np.uint64(mark), np.uint64(stop)):
        code = np.uint64(stage[x])
        j = (code & u_mask) - u_lo
        if k >= until_b[j]:
            g_b[j] += weights[code >> u_weight_shift]
            if sparse and listed[j] == 0:
                n_busy = _list_neuron(j, listed, busy_b, n_busy)
    return n_busy


@numba.njit(cache=True, nogil=True)
def _window(k0: int, span: int, v: np.ndarray, g: np.ndarray, until: np.ndarray,
            hold: np.ndarray, busy_n: np.ndarray, busy: np.ndarray, sparse_most: int,
            gg: float, gv: float, vv: float, c0: float,
            v_rest: float, v_th: float, v_rst: float, g_flush: float,
            marks: np.ndarray, link: np.ndarray, stage: np.ndarray, stride: int,
            target_mask: int, weight_shift: int, weights: np.ndarray, ev_at: np.ndarray,
            ev_stop: np.ndarray, ev_neuron: np.ndarray, ev_weight: float, fired: np.ndarray,
            listed: np.ndarray, crossing: np.ndarray,
            win_tick: np.ndarray, win_neuron: np.ndarray, block_shift: int) -> int:
    """Ticks ``k0 .. k0 + span`` of every block of neurons, one block at a time.

    No spike of the window reaches a synapse inside it (``span`` is at most the delay), so each
    block is stepped through the whole window while its state sits in the L1 cache. The
    synaptic events onto block ``b`` are the chain of stage chunks from chunk ``b``, those
    of window tick ``t`` from the chain's position ``marks[t * n_blocks + b]`` to the next
    tick's, chunk after chunk as ``link`` says (:func:`_stage`): packed synapses
    (:func:`pack_synapses`: target and the index of the weight in ``weights``). Input events
    of window tick ``t`` are
    ``ev_neuron[ev_at[t] .. ev_stop[t]]`` (by neuron; ``ev_at`` is their cursor).

    ``busy_n[b]`` is the number of block ``b``'s neurons away from rest, ``busy[b, :busy_n[b]]``
    their offsets in the block (0: the block is at rest; more than the block's neurons: not
    listed).
    Rest is the update's fixed point, so a neuron at rest needs no update until input reaches
    it: a block with at most ``sparse_most`` such neurons updates only those, one by one,
    listing each neuron that input reaches (:data:`SPARSE_MOST`); any other block is updated
    whole, in vector code. Either way the block's list is made again at the window's end.
    ``fired`` (a flag per 64 neurons), ``listed`` (a flag per neuron, all 0 between blocks)
    and ``crossing`` (a block's spiking neurons of one tick) are scratch. Writes the window's
    spikes, block by block, to ``win_tick`` (offset in the window) and ``win_neuron`` and
    returns their number.
    """
    _widest_vectors()  # type: ignore[call-arg]  # numba supplies the typing context
    width = 1 << block_shift
    reset_is_fixed = _refractory_state_is_fixed(gv, vv, c0, v_rst)
    # a neuron at rest cannot cross the threshold (else, a threshold below rest, every block
    # is updated whole, every tick)
    rest_is_quiet = not v_rest > v_th
    n_win = 0
    n_blocks = busy_n.shape[0]
    for b in range(n_blocks):
        lo = b << block_shift
        hi = lo + width
        n_busy = busy_n[b]
        if n_busy == 0 and rest_is_quiet:
            # at rest: the update leaves it unchanged unless input arrives
            reached = marks[b] != marks[span * n_blocks + b]
            for t in range(span):
                if ev_at[t] < ev_stop[t] and ev_neuron[ev_at[t]] < hi:
                    reached = True
            if not reached:
                continue
        # the block as fixed-length views: so LLVM compiles the update below to vector code
        # (indexed through the whole arrays it stays scalar)
        v_b = v[lo:hi]
        g_b = g[lo:hi]
        until_b = until[lo:hi]
        busy_b = busy[b]
        sparse = rest_is_quiet and n_busy <= sparse_most
        flagged = sparse  # whether `listed` holds flags to clear at the window's end
        if sparse:
            for x in range(n_busy):
                listed[busy_b[x]] = 1
        chunk = b  # the first of the block's chain of synaptic events
        for t in range(span):
            k = k0 + t
            if sparse and n_busy > sparse_most:
                # input has reached too many for one by one: the whole block from now on (the
                # flags of those listed are cleared at the window's end)
                sparse = False
            # 1-2: state update and threshold; 4: the spiking neurons' reset, in index order
            # (nothing in 3 reads it: its writes are dropped)
            if sparse:
                n_crossing = _update_listed(v_b, g_b, until_b, busy_b, n_busy, k, gg, gv, vv,
                                            c0, v_th, v_rst, reset_is_fixed, crossing)
                for y in range(n_crossing):
                    n_win = _spike(crossing[y], lo, t, k, hold, until_b, v_b, g_b, v_rst,
                                   win_tick, win_neuron, n_win)
            elif _update_block(v_b, g_b, until_b, k, gg, gv, vv, c0, v_th, v_rst,
                               reset_is_fixed, fired):
                # handled as found (collecting them into `crossing` first, as the one-by-one
                # path does, measured 0.400 CPU s per biological second at 500 excited against
                # 0.361, 0.970 against 0.943 at 5,000)
                for w in range(width >> 6):
                    if fired[w] != 0:
                        # the group's neurons over the threshold as the bits of one word (in
                        # vector code), taken lowest first: in index order
                        over = _over_threshold(v_b, w << 6, v_th)
                        while over != 0:
                            i = (w << 6) + _trailing_zeros(over)
                            if k >= until_b[i]:
                                n_win = _spike(i, lo, t, k, hold, until_b, v_b, g_b, v_rst,
                                               win_tick, win_neuron, n_win)
                            over &= over - np.uint64(1)
            # 3: synaptic input onto g, then events onto v, dropped where refractory (Brian2's
            # conditional write on an "unless refractory" variable). A target gets its inputs
            # in Brian2's order: spikes by index, each spike's synapses in table order.
            mark = marks[t * n_blocks + b]
            end = marks[(t + 1) * n_blocks + b]
            # the chain's events from one mark to the next, chunk by chunk (a later chunk's
            # positions are further on: `chunk` is the one the last tick's events ended in)
            while mark != end:
                stop = min(end, link[2 * chunk + 1])
                n_busy = _deliver(stage, mark, stop, target_mask, lo, weight_shift, weights, k,
                                  until_b, g_b, sparse, listed, busy_b, n_busy)
                if stop == end:
                    break
                chunk = link[2 * chunk]
                mark = chunk * stride
            x = ev_at[t]
            while x < ev_stop[t] and ev_neuron[x] < hi:
                j = ev_neuron[x] - lo
                if k >= until_b[j]:
                    v_b[j] += ev_weight
                    if sparse and listed[j] == 0:
                        n_busy = _list_neuron(j, listed, busy_b, n_busy)
                x += 1
            ev_at[t] = x
        if flagged:
            for x in range(n_busy):
                listed[busy_b[x]] = 0
        # the block's neurons away from rest, for the next window: counted, then listed if
        # they are few enough to be updated one by one
        n_busy = 0
        for i in range(width):
            gi = g_b[i]
            at_rest = v_b[i] == v_rest
            if at_rest and gi < g_flush and gi > -g_flush:
                g_b[i] = 0.0
                gi = 0.0
            n_busy += (not at_rest) | (gi != 0.0)
        if 0 < n_busy <= sparse_most:
            n_busy = 0
            for i in range(width):
                if v_b[i] != v_rest or g_b[i] != 0.0:
                    busy_b[n_busy] = i
                    n_busy += 1
        busy_n[b] = n_busy
    return n_win


@numba.njit(cache=True, nogil=True)
def _advance(k_start: int, k_stop: int, base: int, indptr: np.ndarray, codes: np.ndarray,
             weight_shift: int, weights: np.ndarray, silenced: np.ndarray, v: np.ndarray, g: np.ndarray,
             until: np.ndarray, hold: np.ndarray, busy_n: np.ndarray, busy: np.ndarray,
             sparse_most: int, gg: float, gv: float,
             vv: float, c0: float, v_rest: float, v_th: float, v_rst: float, g_flush: float,
             delay: int, window: int, ev_tick: np.ndarray, ev_neuron: np.ndarray,
             ev_weight: float, win_tick: np.ndarray, win_neuron: np.ndarray,
             fill: np.ndarray, marks: np.ndarray, fired: np.ndarray,
             listed: np.ndarray, crossing: np.ndarray, link: np.ndarray,
             stage: np.ndarray, chunk_size: int, refill: int, stride: int, block_shift: int,
             arrive_at: np.ndarray, ev_at: np.ndarray, ev_stop: np.ndarray,
             per_tick: np.ndarray, tick_start: np.ndarray, spikes: np.ndarray, count: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Ticks ``k_start .. k_stop`` of one trial, continuing the state it is given.

    ``spikes[tick_start[k - base] .. tick_start[k - base + 1]]`` are the spikes of tick ``k``
    (those of at least the ``delay`` ticks before ``k_start`` must be there: they are still
    on their way); ``tick_start`` has room up to ``k_stop - base`` and its entry for
    ``k_start`` is ``count``. Events are those of ticks ``k_start .. k_stop``, sorted by
    tick, then neuron. Returns ``spikes``, the stage (either may have grown) and the new
    ``count``. (The loops that run often are in :func:`_stage` and :func:`_window`, whose
    arrays are never reassigned: where a loop reads an array that its function reallocates,
    numba counts references on every iteration.)
    """
    n_blocks = busy_n.shape[0]
    target_mask = (1 << weight_shift) - 1
    ev = 0
    n_ev = ev_tick.shape[0]
    for k0 in range(k_start, k_stop, window):
        span = min(window, k_stop - k0)
        # the spikes whose synapses act in this window (all from before it), by arrival tick
        first = tick_start[max(k0 - delay, 0) - base]
        for t in range(span + 1):
            arrive_at[t] = tick_start[max(k0 + t - delay, 0) - base] - first \
                if delay > 0 else 0
        staged = 0
        for x in range(arrive_at[span]):
            pre = spikes[first + x]
            if not silenced[pre]:
                staged += indptr[pre + 1] - indptr[pre]
        # the chunks the window's events can use (see _stage)
        chunks = n_blocks + staged // (chunk_size - refill) + 1
        if 2 * chunks > link.shape[0]:
            link = np.empty(max(2 * chunks, 2 * link.shape[0]), dtype=np.int64)
        room = chunks * stride
        if room > stage.shape[0]:
            stage = np.empty(max(room, 2 * stage.shape[0]), dtype=stage.dtype)
        _stage(first, span, arrive_at, spikes, indptr, codes, target_mask, silenced, n_blocks,
               fill, marks, link, stage, chunk_size, refill, stride, block_shift)
        for t in range(span):
            ev_at[t] = ev
            while ev < n_ev and ev_tick[ev] == k0 + t:
                ev += 1
            ev_stop[t] = ev
        n_win = _window(k0, span, v, g, until, hold, busy_n, busy, sparse_most, gg, gv, vv,
                        c0, v_rest, v_th, v_rst, g_flush, marks, link, stage, stride,
                        target_mask, weight_shift, weights, ev_at, ev_stop, ev_neuron,
                        ev_weight, fired, listed, crossing, win_tick, win_neuron, block_shift)
        # the window's spikes (block by block) into Brian2's order: by tick, then index
        if count + n_win > spikes.shape[0]:
            grown = np.empty(max(2 * spikes.shape[0], count + n_win), dtype=np.int32)
            grown[:count] = spikes[:count]
            spikes = grown
        per_tick[:] = 0
        for x in range(n_win):
            per_tick[win_tick[x] + 1] += 1
        for t in range(span):
            per_tick[t + 1] += per_tick[t]
            tick_start[k0 + t - base] = count + per_tick[t]
        for x in range(n_win):
            t = win_tick[x]
            spikes[count + per_tick[t]] = win_neuron[x]
            per_tick[t] += 1
        count += n_win
        tick_start[k0 + span - base] = count  # read by the next window before it is final
        if delay == 0:  # no delay: this tick's spikes reach their targets at once
            for s in range(tick_start[k0 - base], count):
                pre = spikes[s]
                if silenced[pre]:
                    continue
                for e in range(indptr[pre], indptr[pre + 1]):
                    code = np.int64(codes[e])
                    j = code & target_mask
                    if k0 >= until[j]:
                        g[j] += weights[code >> weight_shift]
                        busy_n[j >> block_shift] = (1 << block_shift) + 1  # not listed
    return spikes, link, stage, count


#: Where Linux says the size of the first CPU's first cache (its L1 data cache), as "48K".
_L1_SIZE_FILE = "/sys/devices/system/cpu/cpu0/cache/index0/size"


def l1_data_cache_bytes() -> int | None:
    """The L1 data cache of one core of this CPU, in bytes, where the system says (Linux and
    others with ``sysconf``, then Linux's ``/sys``, then macOS's ``sysctl``); else None."""
    try:
        found = os.sysconf("SC_LEVEL1_DCACHE_SIZE")
        if found > 0:
            return int(found)
    except (AttributeError, ValueError, OSError):
        pass
    try:
        text = Path(_L1_SIZE_FILE).read_text().strip()
        if text[-1:] in "KM" and text[:-1].isdigit():
            return int(text[:-1]) << (10 if text[-1] == "K" else 20)
    except (OSError, IndexError):
        pass
    if sys.platform == "darwin":
        import subprocess
        try:
            out = subprocess.run(["sysctl", "-n", "hw.l1dcachesize"], capture_output=True,
                                 text=True, timeout=5).stdout.strip()
            return int(out) if out.isdigit() and int(out) > 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


#: Bytes of a cache line: the state arrays the vector update reads begin on one.
CACHE_LINE = 64


def line_aligned(size: int, dtype: type, fill: float | int) -> np.ndarray:
    """A 1-D array of ``size`` elements filled with ``fill``, its data beginning on a cache
    line (:data:`CACHE_LINE` bytes).

    numpy aligns an array's data to 16 bytes only. The block update reads and writes ``v`` and
    ``g`` in vectors as wide as a cache line on a CPU with AVX-512; where they do not begin on
    a line, every vector load and store spans two lines, and a run with 5,000 neurons excited
    took 5-15 % longer, by where the allocator happened to put them.
    """
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(size * itemsize + CACHE_LINE, dtype=np.uint8)
    skip = -raw.ctypes.data % CACHE_LINE
    array: np.ndarray = raw[skip:skip + size * itemsize].view(dtype)
    array[:] = fill
    return array


@functools.cache
def block_shift_here() -> int:
    """The block of the update for this CPU: :data:`WIDE_BLOCK_SHIFT` where its L1 data cache
    holds :data:`WIDE_BLOCK_L1` bytes or more, else :data:`BLOCK_SHIFT` (and where it is not
    known)."""
    l1 = l1_data_cache_bytes()
    return WIDE_BLOCK_SHIFT if l1 is not None and l1 >= WIDE_BLOCK_L1 else BLOCK_SHIFT


class EngineTrial:
    """One trial's state between calls: ``v``, ``g``, the refractory clocks, the spikes still
    on their way to their synapses, and the engine's buffers. :meth:`advance` runs the next
    ticks; any cut of a run into calls gives the same spikes and state as one call.

    Parameters
    ----------
    indptr, post, weight_v
        The graph, ``post`` and ``weight_v`` grouped by :func:`group_rows`.
    rfc_ticks, silenced
        As :func:`simulate_ticks` takes them.
    params
        The model's constants.
    g_flush
        The flush threshold (:func:`flush_threshold`).
    v_start
        Every neuron's ``v`` at the start, volts (default: ``v_0``, Brian2's initial value;
        the benchmark starts every neuron away from rest to time the dense update).
    block_shift
        Neurons per block of the update, as a power of two: :data:`BLOCK_SHIFT` or
        :data:`WIDE_BLOCK_SHIFT` (default: :func:`block_shift_here`). The same results either
        way.
    """

    def __init__(self, indptr: np.ndarray, post: np.ndarray, weight_v: np.ndarray,
                 rfc_ticks: np.ndarray, silenced: np.ndarray, params: LIFParams,
                 g_flush: float, v_start: float | None = None,
                 block_shift: int | None = None) -> None:
        prop = propagator(params)
        codes, weight_shift, weights = pack_synapses(post, weight_v)
        self._graph = (np.ascontiguousarray(indptr, dtype=np.int64), codes, weight_shift,
                       weights, np.ascontiguousarray(silenced, dtype=np.bool_))
        self._constants = (prop.gg, prop.gv, prop.vv, prop.c0, prop.v_rest,
                           params.v_th * _MV, params.v_rst * _MV, float(g_flush))
        self.delay = params.delay_ticks
        self.ev_weight = params.poisson_weight
        rfc = np.asarray(rfc_ticks, dtype=np.int64)
        n = int(rfc.shape[0])
        self.n = n
        self.block_shift = block_shift_here() if block_shift is None else int(block_shift)
        if self.block_shift not in (BLOCK_SHIFT, WIDE_BLOCK_SHIFT):
            raise ValueError(f"blocks of 2**{self.block_shift} neurons: not one of the engine's")
        width = 1 << self.block_shift
        n_blocks = (n + width - 1) >> self.block_shift
        # padded to whole blocks with neurons at rest that nothing reaches, so that the inner
        # loop has a fixed length
        padded = n_blocks * width
        v_start = params.v_0 * _MV if v_start is None else float(v_start)
        self._v = line_aligned(padded, np.float64, prop.v_rest)
        self._v[:n] = v_start
        self._g = line_aligned(padded, np.float64, 0.0)
        # until[i]: the first tick at which neuron i is not refractory; a spike at tick k sets
        # it to k + max(rfc, 1) (Brian2's not_refractory is False at the spike's own tick even
        # for rfc = 0, so input arriving then is dropped)
        self._until = line_aligned(padded, np.int64, 0)
        # the padding is refractory for ever: with a threshold below rest it would fire
        self._until[n:] = np.iinfo(np.int64).max
        self._hold = line_aligned(padded, np.int64, 1)
        self._hold[:n] = np.maximum(rfc, 1)
        # each block's neurons away from rest (_window): none, or not yet listed
        self._busy_n = np.full(n_blocks, 0 if v_start == prop.v_rest else width + 1,
                               dtype=np.int64)
        self._busy = np.zeros((n_blocks, width), dtype=np.uint16)
        # a window of ticks in which no spike reaches a synapse (see _window)
        self.window = min(self.delay, MAX_WINDOW) if self.delay > 0 else 1
        # the most spikes a window can hold: neuron i fires once per hold[i] ticks
        most = int(((self.window + self._hold[:n] - 1) // self._hold[:n]).sum())
        self._buffers = (np.empty(most, dtype=np.int64), np.empty(most, dtype=np.int32))
        # the window's chains of synaptic events by target block and tick (_stage), and one
        # block's flags of its groups of 64 neurons that may have spiked, of its listed
        # neurons, and its spiking neurons of a tick (_window)
        self._buckets = (np.zeros(2 * n_blocks, dtype=np.int64),
                         np.zeros(n_blocks * (self.window + 1), dtype=np.int64),
                         np.zeros(width >> 6, dtype=np.uint8), np.zeros(width, dtype=np.uint8),
                         np.zeros(width, dtype=np.int64))
        self._link = np.empty(STAGE_START, dtype=np.int64)
        self._stage = np.empty(STAGE_START, dtype=codes.dtype)
        self._scratch = (np.zeros(self.window + 1, dtype=np.int64),
                         np.zeros(self.window, dtype=np.int64),
                         np.zeros(self.window, dtype=np.int64),
                         np.zeros(self.window + 1, dtype=np.int64))
        self.tick = 0  # the next tick to run
        self._base = 0  # tick_start[k - base]: the spikes of tick k still kept
        self._tick_start = np.zeros(1, dtype=np.int64)
        self._spikes = np.empty(1024, dtype=np.int32)
        self._count = 0
        self._fired = 0  # spikes so far

    @property
    def v(self) -> np.ndarray:
        """``(n,)`` membrane potentials now, volts (a copy)."""
        return self._v[:self.n].copy()

    @property
    def g(self) -> np.ndarray:
        """``(n,)`` synaptic conductances now, volts (a copy; see the module notes on the
        flush)."""
        return self._g[:self.n].copy()

    def threshold_margin(self, neuron: int) -> tuple[float, bool]:
        """``(v - v_th, tested)`` of ``neuron`` at the threshold test of tick :attr:`tick` (the
        next to run): its ``v`` after that tick's state update, computed as the update does
        (the same operations, so the same rounding), less ``v_th``, in volts; ``tested`` is
        False while it is refractory (its ``v`` is frozen and not tested). For a report of
        why a spike happened or not; the run itself never calls it."""
        gg, gv, vv, c0, v_rest, v_th, v_rst, g_flush = self._constants
        v, g = float(self._v[neuron]), float(self._g[neuron])
        tested = self.tick >= int(self._until[neuron])
        v_new = c0 + ((gv * g) + (vv * v)) if tested else v
        return v_new - v_th, tested

    def advance(self, n_ticks: int, ev_tick: np.ndarray | None = None,
                ev_neuron: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Run the next ``n_ticks`` ticks with the input events given (absolute ticks inside
        them, sorted by tick then neuron, as :func:`simulate_ticks` sorts them); returns
        their spikes as ``(ticks, neurons)`` (absolute ticks, Brian2's order)."""
        k_start = self.tick
        per_tick, neurons = self.advance_counted(n_ticks, ev_tick, ev_neuron)
        ticks = np.repeat(np.arange(k_start, self.tick, dtype=np.int64), per_tick)
        return ticks, neurons.astype(np.int64)

    def advance_counted(self, n_ticks: int, ev_tick: np.ndarray | None = None,
                        ev_neuron: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`advance`, its spikes as ``(per_tick, neurons)``: the number of spikes of
        each of the ``n_ticks`` ticks and the neurons (``int32``, by tick, then index).

        ``neurons`` is a view of the trial's spike buffer, which no later call writes to
        (each call fills a new one): a caller that collects a long run's spikes copies them
        once, at its end, instead of once a call and again to join the calls' arrays (at
        5,000 neurons excited a second holds 1.2 M spikes, 10 MB in ``int64``).
        """
        n_ticks = int(n_ticks)
        if n_ticks < 0:
            raise ValueError(f"cannot run {n_ticks} ticks")
        k_start, k_stop = self.tick, self.tick + n_ticks
        # keep only the spikes still on their way: those of the last `delay` ticks
        keep_from = max(k_start - self.delay, 0)
        cut = int(self._tick_start[keep_from - self._base])
        kept = self._tick_start[keep_from - self._base:k_start - self._base + 1] - cut
        tick_start = np.zeros(k_stop - keep_from + 1, dtype=np.int64)
        tick_start[:kept.shape[0]] = kept
        spikes = self._spikes[cut:self._count]
        count = int(spikes.shape[0])
        # room for this call's spikes at the pace of those before it (growing it as it fills,
        # by doubling, copied and faulted in a fresh array each time)
        pace = self._fired / self.tick if self.tick else 0.0
        room = np.empty(max(1024, 2 * count, count + int(1.25 * pace * n_ticks)),
                        dtype=np.int32)
        room[:count] = spikes
        if ev_tick is None or ev_neuron is None:
            ev_tick, ev_neuron = np.empty(0, np.int64), np.empty(0, np.int32)
        ev_tick = np.ascontiguousarray(ev_tick, dtype=np.int64)
        ev_neuron = np.ascontiguousarray(ev_neuron, dtype=np.int32)
        indptr, codes, weight_shift, weights, silenced = self._graph
        gg, gv, vv, c0, v_rest, v_th, v_rst, g_flush = self._constants
        win_tick, win_neuron = self._buffers
        fill, marks, fired, listed, crossing = self._buckets
        arrive_at, ev_at, ev_stop, per_tick = self._scratch
        room, self._link, self._stage, count = _advance(
            k_start, k_stop, keep_from, indptr, codes, weight_shift, weights, silenced,
            self._v, self._g,
            self._until, self._hold, self._busy_n, self._busy,
            min(SPARSE_MOST << (self.block_shift - BLOCK_SHIFT), 1 << self.block_shift),
            gg, gv, vv, c0, v_rest, v_th, v_rst,
            g_flush, self.delay, self.window, ev_tick, ev_neuron, self.ev_weight, win_tick,
            win_neuron, fill, marks, fired, listed, crossing, self._link, self._stage,
            STAGE_CHUNK, max(1, min(STAGE_REFILL, STAGE_CHUNK - 1)), STAGE_CHUNK + STAGE_SKEW,
            self.block_shift,
            arrive_at, ev_at, ev_stop, per_tick, tick_start, room, count)
        first = int(tick_start[k_start - keep_from])
        self._fired += count - first
        self._spikes, self._count = room, count
        self._tick_start, self._base, self.tick = tick_start, keep_from, k_stop
        return np.diff(tick_start[k_start - keep_from:]), room[first:count]


#: Graphs packed lately (:func:`pack_synapses`), by the identity of their target and weight
#: arrays; an entry goes when either array does.
_PACKED: dict[tuple[int, int], tuple[weakref.ref, weakref.ref, np.ndarray, int, np.ndarray]] = {}
_PACKED_LOCK = threading.Lock()
#: The most packed graphs kept.
_PACKED_KEPT = 4


def pack_synapses(post: np.ndarray, weight_v: np.ndarray, word: type | None = None
                  ) -> tuple[np.ndarray, int, np.ndarray]:
    """Each synapse as one word: its target in the low ``shift`` bits and, above them, the
    index of its weight in ``weights``, the distinct weights (told apart by their bits, so a
    weight read back is the same float64).

    The engine then reads a third of the bytes it read as target and weight: 4 bytes a
    synapse (``uint32``) where the targets' bits and the weights' indices fit in 32 bits, as
    on the whole FlyWire brain with its few thousand distinct synapse counts; else 8
    (``uint64``). ``word`` asks for one of the two.

    Returns ``(codes, shift, weights)``. Packing a full brain takes about half a second, so
    the result is kept for the same two arrays (the same objects, while both live: arrays
    are replaced, not edited in place, as :meth:`SpikingBrain.grouped_rows
    <flyviz.spiking.brain.SpikingBrain.grouped_rows>` keeps them).
    """
    key = (id(post), id(weight_v))
    with _PACKED_LOCK:
        kept = _PACKED.get(key)
        if kept is not None and kept[0]() is post and kept[1]() is weight_v \
                and (word is None or kept[2].dtype == word):
            return kept[2], kept[3], kept[4]
    targets = np.ascontiguousarray(post, dtype=np.int64)
    bits = np.ascontiguousarray(weight_v, dtype=np.float64).view(np.int64)
    distinct = np.unique(bits)
    index = np.searchsorted(distinct, bits)
    shift = max(int(targets.max(initial=0)).bit_length(), 1)
    fits = distinct.shape[0] <= 1 << (32 - shift)
    if word is None:
        word = np.uint32 if fits else np.uint64
    elif word is np.uint32 and not fits:
        raise ValueError("these synapses do not fit in 32-bit words")
    codes = (index.astype(word) << word(shift)) | targets.astype(word)
    weights = distinct.view(np.float64)

    def forget(_: object, key: tuple[int, int] = key) -> None:
        with _PACKED_LOCK:
            _PACKED.pop(key, None)

    try:
        refs = (weakref.ref(post, forget), weakref.ref(weight_v, forget))
    except TypeError:  # not an array (a list): nothing to keep it by
        return codes, shift, weights
    with _PACKED_LOCK:
        while len(_PACKED) >= _PACKED_KEPT:
            _PACKED.pop(next(iter(_PACKED)))
        _PACKED[key] = refs + (codes, shift, weights)
    return codes, shift, weights


def flush_threshold(smallest_weight: float) -> float:
    """The ``|g|`` below which a neuron at rest has ``g`` set to 0: far below half an ulp of
    the smallest nonzero weight (see the module notes)."""
    smallest = float(smallest_weight)
    return min(G_FLUSH, smallest * 2.0 ** -60) if math.isfinite(smallest) else G_FLUSH


@numba.njit(cache=True, nogil=True)
def _block_order(indptr: np.ndarray, post: np.ndarray, shift: int) -> np.ndarray:
    """The permutation that sorts each row's synapses by target block (``post >> shift``),
    stably: synapses onto one target keep their order (a counting sort per row)."""
    n_blocks = (int(post.max()) >> shift) + 1 if post.shape[0] else 1
    order = np.empty(post.shape[0], dtype=np.int64)
    at = np.zeros(n_blocks + 1, dtype=np.int64)
    for row in range(indptr.shape[0] - 1):
        lo, hi = indptr[row], indptr[row + 1]
        if hi - lo < 2:
            for e in range(lo, hi):
                order[e] = e
            continue
        first_b, last_b = n_blocks, 0
        for e in range(lo, hi):
            blk = post[e] >> shift
            at[blk + 1] += 1
            first_b = min(first_b, blk)
            last_b = max(last_b, blk)
        at[first_b] = lo
        for blk in range(first_b, last_b + 1):
            at[blk + 1] += at[blk]
        for e in range(lo, hi):
            blk = post[e] >> shift
            order[at[blk]] = e
            at[blk] += 1
        at[first_b:last_b + 2] = 0
    return order


def group_rows(indptr: np.ndarray, post: np.ndarray) -> np.ndarray:
    """The order :func:`simulate_ticks` wants the synapses in (``rows_grouped``): each row by
    target block of the engine, synapses onto one target in their original order (so each
    target still sums its inputs in Brian2's order). Returns the permutation of the synapses."""
    return _block_order(np.ascontiguousarray(indptr, dtype=np.int64),
                        np.ascontiguousarray(post, dtype=np.int32), BLOCK_SHIFT)


def simulate_ticks(indptr: np.ndarray, post: np.ndarray, weight_v: np.ndarray,
                   rfc_ticks: np.ndarray, silenced: np.ndarray, params: LIFParams,
                   n_steps: int, events: list[tuple[np.ndarray, np.ndarray]],
                   threads: int | None = None, rows_grouped: bool = False,
                   with_state: bool = False, smallest_weight: float | None = None,
                   progress: Callable[[int, int], None] | None = None
                   ) -> list[tuple[np.ndarray, ...]]:
    """Run ``len(events)`` trials of ``n_steps`` ticks on a CSR graph (row = presynaptic).

    Parameters
    ----------
    indptr, post, weight_v
        Outgoing synapses of neuron ``i``: ``post[indptr[i]:indptr[i+1]]`` with weights in
        volts, in the order Brian2 would deliver them (the connectivity table's order).
    rfc_ticks
        ``(n,)`` refractory period of each neuron in ticks (0 for Poisson targets).
    silenced
        ``(n,)`` bool: neurons whose outgoing synapses are zeroed.
    events
        Per trial, ``(tick, neuron)`` of every input event, each adding
        ``params.poisson_weight`` to ``v`` (events onto one neuron in one tick in their order).
    threads
        Trials run side by side on this many threads (default: one per core).
    rows_grouped
        True when ``post`` and ``weight_v`` are already permuted by :func:`group_rows` (a
        caller that runs one graph often keeps them so).
    smallest_weight
        The smallest nonzero ``|weight_v|``, where the caller knows it (else computed).
    with_state
        Also return each trial's final ``v`` and ``g`` (volts; ``g`` is 0 where the engine
        flushed a vanishing ``g`` of a neuron at rest, see the module notes).
    progress
        Called as ``progress(trial, ticks_done)`` after each chunk of a trial's ticks
        (about :data:`CHUNK_SECONDS` of compute, at most :data:`CHUNK_TICKS` ticks: see
        :func:`next_chunk`), from the thread that runs it.

    Returns
    -------
    list of (ticks, neurons) or (ticks, neurons, v, g)
        Per trial, every spike's tick and neuron, in Brian2's order (by tick, then index).
    """
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    post = np.ascontiguousarray(post, dtype=np.int32)
    weight_v = np.ascontiguousarray(weight_v, dtype=np.float64)
    if not rows_grouped:
        order = group_rows(indptr, post)
        post, weight_v = post[order], weight_v[order]
    if smallest_weight is None:
        magnitude = np.abs(weight_v)
        smallest_weight = float(magnitude.min(initial=np.inf, where=magnitude > 0))
    g_flush = flush_threshold(smallest_weight)
    events = [_by_tick_then_neuron(tk, nr) for tk, nr in events]

    n_steps = int(n_steps)
    stop = threading.Event()
    pack_synapses(post, weight_v)  # once, before the trials' threads ask for it

    def one(trial: int) -> tuple[np.ndarray, ...]:
        state = EngineTrial(indptr, post, weight_v, rfc_ticks, silenced, params, g_flush)
        tk, nr = events[trial]
        # In chunks (cut anywhere, a trial's spikes are the same): a stopped run's trials
        # end at the next chunk. Each chunk's events are a slice of the trial's, which are by
        # tick: events before the run or at or after its end are in no chunk's slice.
        per_tick, neurons = [], []
        start, chunk = 0, FIRST_CHUNK_TICKS
        while start < n_steps:
            if stop.is_set():
                raise KeyboardInterrupt
            end = min(start + chunk, n_steps)
            a, b = np.searchsorted(tk, (start, end))
            began = _clock()
            counted, fired = state.advance_counted(end - start, tk[a:b], nr[a:b])
            took = _clock() - began
            per_tick.append(counted)
            neurons.append(fired)
            if progress is not None:
                progress(trial, end)
            chunk = next_chunk(end - start, took)
            start = end
        # the trial's spikes written once, in int64 (each chunk's are views of the trial's
        # buffers, see EngineTrial.advance_counted); no chunk at all when n_steps is 0
        counts = np.concatenate(per_tick) if per_tick else np.zeros(0, np.int64)
        found = (np.repeat(np.arange(n_steps, dtype=np.int64), counts),
                 np.concatenate(neurons, dtype=np.int64) if neurons else np.empty(0, np.int64))
        return found + (state.v, state.g) if with_state else found

    workers = max(1, min(len(events), threads or os.cpu_count() or 1))
    # The compiled trial releases the GIL: trials run side by side on threads. One trial
    # runs on a thread too: the main thread only waits, so a Ctrl+C is raised there, in
    # Python, and never while a compiled call returns (numba then fails with SystemError).
    prefix = f"flyviz-spiking-{next(_POOL_NUMBERS)}"
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix=prefix) as pool:
            try:
                return list(pool.map(one, range(len(events))))
            except BaseException:
                stop.set()  # the threads stop at their next chunk; the pool's exit waits
                raise
    except BaseException:
        # A Ctrl+C landing while the pool starts a thread (Thread.start has returned, the
        # pool has not yet listed the thread) leaves that thread out of what the pool's exit
        # waits for: wait for this run's threads by name too (each stops at its next chunk).
        for thread in threading.enumerate():
            if thread.name.startswith(prefix + "_"):
                thread.join()
        raise


def next_chunk(ticks: int, seconds: float) -> int:
    """The ticks of a trial's next chunk, after one of ``ticks`` took ``seconds``: about
    :data:`CHUNK_SECONDS` at that pace, between :data:`MIN_CHUNK_TICKS` and
    :data:`CHUNK_TICKS`."""
    if not seconds > 0:
        return CHUNK_TICKS
    return int(min(CHUNK_TICKS, max(MIN_CHUNK_TICKS, ticks * CHUNK_SECONDS / seconds)))


def _by_tick_then_neuron(tick: np.ndarray, neuron: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events in the order the engine reads them (stable: repeated events keep their order)."""
    tick = np.asarray(tick, dtype=np.int64)
    neuron = np.asarray(neuron, dtype=np.int64)
    if tick.size > 1 and not np.all(
            (tick[1:] > tick[:-1]) | ((tick[1:] == tick[:-1]) & (neuron[1:] >= neuron[:-1]))):
        order = np.lexsort((neuron, tick))
        tick, neuron = tick[order], neuron[order]
    return tick, neuron
