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

Speed: only blocks of 64 neurons holding a neuron away from rest are updated. Rest is the
propagator's fixed point ``(v_rest, 0)`` (``v_rest`` is ``v_0`` unless rounding moves it), which
the update leaves exactly unchanged, so skipping it changes nothing. ``g`` decays forever
without reaching 0; once ``v`` is at rest and ``|g|`` is below :data:`G_FLUSH` (far below half
an ulp of any weight and of ``v``), ``g`` is set to 0: every later sum and product then rounds
to what Brian2 gets with the tiny ``g`` it keeps.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numba
import numpy as np

__all__ = ["LIFParams", "Propagator", "propagator", "simulate_ticks", "ticks"]

#: Neurons per block of the skip-at-rest update (a power of two).
BLOCK_SHIFT = 6

#: Below this ``|g|`` (volts) a neuron at rest has ``g`` set to 0 (see the module notes).
G_FLUSH = 1e-30

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


@numba.njit(cache=True, nogil=True)
def _run_trial(n_steps: int, indptr: np.ndarray, post: np.ndarray, weight: np.ndarray,
               silenced: np.ndarray, rfc: np.ndarray, gg: float, gv: float, vv: float,
               c0: float, v_rest: float, v_start: float, v_th: float, v_rst: float,
               g_flush: float, delay: int, ev_tick: np.ndarray, ev_neuron: np.ndarray,
               ev_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """One trial: the spikes as (tick offsets ``(n_steps + 1,)``, neuron indices)."""
    n = rfc.shape[0]
    width = 1 << BLOCK_SHIFT
    n_blocks = (n + width - 1) >> BLOCK_SHIFT
    # padded to whole blocks with neurons at rest that nothing reaches, so that the inner loop
    # has a fixed length (and compiles to vector code)
    padded = n_blocks * width
    v = np.full(padded, v_rest)
    v[:n] = v_start
    g = np.zeros(padded)
    last = np.full(padded, -(1 << 40), dtype=np.int64)
    rfc_p = np.zeros(padded, dtype=np.int64)
    rfc_p[:n] = rfc
    active = np.zeros(n_blocks, dtype=np.uint8)
    if v_start != v_rest:
        active[:] = 1
    tick_start = np.zeros(n_steps + 1, dtype=np.int64)
    spikes = np.empty(1024, dtype=np.int32)
    count = 0
    ev = 0
    n_ev = ev_tick.shape[0]
    for k in range(n_steps):
        tick_start[k] = count
        # 1-2, 4: state update, threshold and reset, block by block where not at rest
        for b in range(n_blocks):
            if active[b] == 0:
                continue
            lo = b << BLOCK_SHIFT
            over = False
            busy = False
            for i in range(lo, lo + width):
                gi = g[i]
                vi = v[i]
                free = (k - last[i]) >= rfc_p[i]
                g_new = gg * gi
                v_new = c0 + ((gv * gi) + (vv * vi))
                g_new = g_new if free else gi
                v_new = v_new if free else vi
                g_new = 0.0 if ((v_new == v_rest) & (g_new < g_flush) & (g_new > -g_flush)) \
                    else g_new
                over |= free & (v_new > v_th)
                busy |= (v_new != v_rest) | (g_new != 0.0)
                v[i] = v_new
                g[i] = g_new
            if over:  # rare: a second pass finds the spiking neurons, in index order
                for i in range(lo, lo + width):
                    if v[i] > v_th and (k - last[i]) >= rfc_p[i]:
                        if count == spikes.shape[0]:
                            grown = np.empty(2 * count, dtype=np.int32)
                            grown[:count] = spikes
                            spikes = grown
                        spikes[count] = i
                        count += 1
                        last[i] = k
                        v[i] = v_rst
                        g[i] = 0.0
                busy = True
            if not busy:
                active[b] = 0
        # 3: spikes of tick k - delay reach g (dropped where the target is refractory or has
        # just spiked: Brian2's conditional write on an "unless refractory" variable)
        if k >= delay:
            for s in range(tick_start[k - delay], tick_start[k - delay + 1]):
                pre = spikes[s]
                if silenced[pre]:
                    continue
                for e in range(indptr[pre], indptr[pre + 1]):
                    j = post[e]
                    if k - last[j] >= rfc_p[j] and last[j] != k:
                        g[j] += weight[e]
                        active[j >> BLOCK_SHIFT] = 1
        # 3: Poisson (or replayed) events onto v, in PoissonInput's slot
        while ev < n_ev and ev_tick[ev] == k:
            j = ev_neuron[ev]
            ev += 1
            if k - last[j] >= rfc_p[j] and last[j] != k:
                v[j] += ev_weight
                active[j >> BLOCK_SHIFT] = 1
    tick_start[n_steps] = count
    return tick_start, spikes[:count].copy()


def simulate_ticks(indptr: np.ndarray, post: np.ndarray, weight_v: np.ndarray,
                   rfc_ticks: np.ndarray, silenced: np.ndarray, params: LIFParams,
                   n_steps: int, events: list[tuple[np.ndarray, np.ndarray]],
                   threads: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
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
        Per trial, ``(tick, neuron)`` of every input event (sorted by tick), each adding
        ``params.poisson_weight`` to ``v``.
    threads
        Trials run side by side on this many threads (default: one per core).

    Returns
    -------
    list of (ticks, neurons)
        Per trial, every spike's tick and neuron, in Brian2's order (by tick, then index).
    """
    prop = propagator(params)
    nonzero = np.abs(weight_v[weight_v != 0])
    # the flush must stay far below half an ulp of the smallest weight (see the module notes)
    g_flush = min(G_FLUSH, float(nonzero.min()) * 2.0 ** -60) if nonzero.size else G_FLUSH
    offsets = np.zeros(len(events) + 1, dtype=np.int64)
    for t, (tk, _) in enumerate(events):
        offsets[t + 1] = offsets[t] + tk.shape[0]
    ev_tick = np.concatenate([e[0] for e in events]).astype(np.int64) if events else \
        np.empty(0, np.int64)
    ev_neuron = np.concatenate([e[1] for e in events]).astype(np.int32) if events else \
        np.empty(0, np.int32)
    args = (indptr, post, weight_v, silenced, rfc_ticks.astype(np.int64), prop.gg, prop.gv,
            prop.vv, prop.c0, prop.v_rest, params.v_0 * _MV, params.v_th * _MV,
            params.v_rst * _MV, g_flush, params.delay_ticks)

    def one(trial: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = offsets[trial], offsets[trial + 1]
        starts, spikes = _run_trial(int(n_steps), *args, ev_tick[lo:hi], ev_neuron[lo:hi],
                                    params.poisson_weight)
        return (np.repeat(np.arange(n_steps, dtype=np.int64), np.diff(starts)),
                spikes.astype(np.int64))

    workers = max(1, min(len(events), threads or os.cpu_count() or 1))
    if workers == 1:
        return [one(t) for t in range(len(events))]
    # the compiled trial releases the GIL: trials run side by side on threads
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(len(events))))
