"""Running the spiking brain: stimulus, trials, input tables and the authors' output layout."""

from __future__ import annotations

import functools
import itertools
import math
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numba
import numpy as np

from flyviz.arguments import whole_number
from flyviz.errors import InputError
from flyviz.spiking.brain import SpikingBrain
from flyviz.spiking.engine import LIFParams, simulate_ticks

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.spikes import SpikeLog

__all__ = ["POISSON_CHUNK", "PoissonStream", "SpikeRun", "SpikingSimulation", "poisson_events",
           "read_input_spikes", "select", "simulate", "trial_rngs"]


@dataclass
class SpikeRun:
    """The spikes of a run: ``tick``, ``trial`` and model ``neuron`` of each, in Brian2's
    order (trial, then tick, then neuron index)."""

    brain: SpikingBrain
    params: LIFParams
    n_steps: int
    trials: int
    tick: np.ndarray
    trial: np.ndarray
    neuron: np.ndarray

    @property
    def duration_s(self) -> float:
        """Simulated time per trial, seconds."""
        return self.n_steps * self.params.dt_s

    @property
    def t(self) -> np.ndarray:
        """Spike times in seconds, as Brian2's SpikeMonitor gives them (tick * dt)."""
        return self.tick * self.params.dt_s

    def rates(self) -> np.ndarray:
        """``(n,)`` mean rate of each neuron over the trials, Hz."""
        counts = np.bincount(self.neuron, minlength=self.brain.neurons)
        return counts / (self.trials * self.duration_s)

    def bin_counts(self, bin_ticks: int) -> np.ndarray:
        """``(bins, n)`` spikes of each neuron in consecutive bins of ``bin_ticks`` ticks,
        summed over the trials (the last bin may be short when ``n_steps`` is not a
        multiple). What a binned view of the run steps through."""
        bin_ticks = int(bin_ticks)
        if bin_ticks < 1:
            raise InputError(f"a bin must be at least one tick, not {bin_ticks}")
        bins = max(1, -(-self.n_steps // bin_ticks))
        flat = (self.tick // bin_ticks) * self.brain.neurons + self.neuron
        counts = np.bincount(flat, minlength=bins * self.brain.neurons)
        return counts[:bins * self.brain.neurons].reshape(bins, self.brain.neurons)

    def spike_log(self, bin_ticks: int) -> "SpikeLog":
        """The spikes as a recording keeps them beside its bins of ``bin_ticks`` ticks (those
        of :meth:`bin_counts`): a :class:`~flyviz.record.spikes.SpikeLog`, each bin's spikes
        by trial, then tick, then neuron, as a live run of the spiking kind appends them."""
        from flyviz.record.spikes import SpikeLog

        bin_ticks = int(bin_ticks)
        if bin_ticks < 1:
            raise InputError(f"a bin must be at least one tick, not {bin_ticks}")
        bins = max(1, -(-self.n_steps // bin_ticks))
        which = self.tick // bin_ticks
        order = np.argsort(which, kind="stable")    # the run's order within each bin
        ends = np.searchsorted(which[order], np.arange(1, bins + 1), side="left")
        return SpikeLog.from_arrays(self.tick[order], self.neuron[order], self.trial[order],
                                    ends, self.params.dt)

    def write_csv(self, handle: Any, exp_name: str | None = None, *,
                  gzipped: bool = False) -> None:
        """The authors' table (:meth:`to_frame`) as UTF-8 CSV on the binary ``handle``
        (gzip-compressed with ``gzipped``, without a timestamp: the same run, the same
        bytes), without pandas: each ``t`` written as Python's shortest text that reads
        back to the same float. ``handle`` stays open (an atomic write finishes it)."""
        import csv
        import gzip
        import io

        packed = gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) if gzipped else None
        text = io.TextIOWrapper(packed or handle, encoding="utf-8", newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["t", "trial", "flywire_id", "exp_name"])
        name = self.brain.name if exp_name is None else exp_name
        ids = self.brain.root_ids[self.neuron]
        writer.writerows(zip(map(repr, self.t.tolist()), self.trial.tolist(), ids.tolist(),
                             itertools.repeat(name)))
        text.flush()
        text.detach()
        if packed is not None:
            packed.close()

    def to_frame(self, exp_name: str | None = None) -> Any:
        """The authors' table: ``t, trial, flywire_id, exp_name``, one row per spike."""
        import pandas as pd

        return pd.DataFrame({"t": self.t, "trial": self.trial.astype(np.int64),
                             "flywire_id": self.brain.root_ids[self.neuron],
                             "exp_name": self.brain.name if exp_name is None else exp_name})


def _check_value(name: str, value: float, *, positive: bool = False) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InputError(f"{name} must be a {'positive' if positive else 'non-negative'} "
                         f"finite number, not {value}")
    return value


#: Ticks of Poisson input drawn at a time (:class:`PoissonStream`): input is drawn chunk by
#: chunk in order, so a run cut into calls of any length draws the same input as one call.
POISSON_CHUNK = 1000

#: The longest run, in seconds of the fly's time (an hour: the full brain simulates it in
#: about 20 minutes on one core), and the most trials of one call: a longer request is
#: refused at once rather than left to run for days.
MAX_DURATION_S = 3600.0
MAX_TRIALS = 100_000

#: The most of the fly's time one call simulates, its trials together (ten hours: each
#: bound alone let ``--duration 3600s --trials 100000`` start, 3.6e8 s of the fly's time).
MAX_TOTAL_S = 36_000.0

#: The most Poisson input events one call draws: every trial's are drawn before the first
#: tick and held together (two int64 each, 4 GiB at this bound), so a larger request is
#: refused before it fills the memory.
MAX_INPUT_EVENTS = 2**28


def run_ticks(duration_s: float, dt_s: float) -> int:
    """The ticks a run of ``duration_s`` seconds steps (:func:`simulate`), which input
    events at or after it do not reach."""
    return int(round(duration_s / dt_s))


def check_run_size(duration_s: float, trials: Any, seed: Any,
                   names: tuple[str, str, str] = ("the duration", "trials", "seed")) -> int:
    """Refuse a run no one can wait for, or a seed NumPy cannot take; return ``trials`` as an
    int. ``names``: how the caller calls the duration, trials and seed (``--duration``...).
    ``seed`` None (a fresh seed from the operating system) is not checked.

    Raises
    ------
    InputError
        Naming the argument and its bound.
    """
    if duration_s > MAX_DURATION_S:
        raise InputError(f"{names[0]} {duration_s:g} s is longer than a run may be "
                         f"({MAX_DURATION_S:g} s of the fly's time); run it in parts")
    count = whole_number(names[1], trials, 1, MAX_TRIALS)
    if seed is not None:
        whole_number(names[2], seed, 0, 2**63 - 1)
    if duration_s * count > MAX_TOTAL_S:
        raise InputError(f"{names[0]} {duration_s:g} s x {count:,} {names[1]} is "
                         f"{duration_s * count:,.0f} s of the fly's time, more than one run may "
                         f"simulate ({MAX_TOTAL_S:,.0f} s); give fewer {names[1]} or a shorter "
                         f"{names[0]}")
    return count


def check_input_size(targets: int, rate_hz: float, input_s: float, trials: int,
                     replayed: int = 0) -> None:
    """Refuse a run whose Poisson input (every trial's, drawn before the first tick) would
    not fit in memory: about ``targets * rate_hz * input_s`` events a trial, and the
    ``replayed`` events of an input table in each.

    Raises
    ------
    InputError
        Naming the expected count and the bound (:data:`MAX_INPUT_EVENTS`).
    """
    expected = (float(targets) * float(rate_hz) * float(input_s) + float(replayed)) \
        * float(trials)
    if expected > MAX_INPUT_EVENTS:
        raise InputError(f"the input would be about {expected:,.0f} events ({targets:,} "
                         f"neuron(s) at {rate_hz:g} Hz for {input_s:g} s, {trials:,} "
                         f"trial(s)), more than one run may hold ({MAX_INPUT_EVENTS:,}); "
                         "excite fewer neurons, or give a lower rate, a shorter duration or "
                         "fewer trials")


def check_rate(rate: float, dt_s: float, name: str = "a rate of") -> None:
    """Refuse a Poisson rate above one event per tick of ``dt_s`` (the model draws at most
    one a tick).

    Raises
    ------
    InputError
        ``"{name} 1e+09 Hz is above one event per tick (10000 Hz)"``.
    """
    if rate * dt_s > 1:
        raise InputError(f"{name} {rate:g} Hz is above one event per tick ({1 / dt_s:g} Hz)")


#: Below this ``p``, numpy's ``Generator.geometric`` draws by inversion, one standard
#: exponential a number (``ceil(-E / log1p(-p))``); :func:`geometric_gaps` then draws the
#: exponentials itself and inverts them in whole arrays, about three times faster (the
#: gaps of a chunk of 5,000 targets' events in 2.4 against 6.9 ms). Clear of numpy's own
#: ``p >= 1/3`` test.
_INVERSION_BELOW = 0.3


def _invert(exponential: np.ndarray, p: float) -> np.ndarray:
    """numpy's geometric inversion of standard exponential draws (``ceil(-E / log1p(-p))``,
    where that is at least ``2**63`` the largest int64); overwrites ``exponential``."""
    z = np.ceil(np.divide(exponential, -math.log1p(-p), out=exponential), out=exponential)
    over = z >= 9.223372036854776e18
    if not over.any():
        return z.astype(np.int64)
    z[over] = 0.0
    gaps = z.astype(np.int64)
    gaps[over] = np.iinfo(np.int64).max
    return gaps


@functools.cache
def _exponentials_give_geometric() -> bool:
    """Whether this numpy's geometric draws below :data:`_INVERSION_BELOW` are the inversion of
    its standard exponential draws, number for number (checked once, on draws of a fixed
    seed: a numpy that draws them otherwise keeps its own geometric draws)."""
    for p in (1e-25, 0.0015, 0.015, 0.29):
        drawn = np.random.default_rng(7).geometric(p, 256)
        inverted = _invert(np.random.default_rng(7).standard_exponential(256), p)
        if not np.array_equal(drawn, inverted):
            return False
    return True


def _draws_by_inversion(p: float) -> bool:
    """Whether numpy draws geometric gaps of ``p`` by inverting its exponential draws (so that
    flyviz may draw and invert them itself: :data:`_INVERSION_BELOW`)."""
    return p < _INVERSION_BELOW and _exponentials_give_geometric()


@numba.njit(cache=True, nogil=True, inline="always")
def _next_event(at: int, exponential: float, scale: float, size: int) -> int:
    """The tick of a row's next event after tick ``at``, its gap ``ceil(exponential / scale)``
    (numpy's geometric inversion, the same operations); ``size`` where that is past the
    chunk's end. The gap is compared as a float: it may be ``2**63`` or more."""
    gap = np.ceil(exponential / scale)
    return size if gap >= size + 1 else min(at + int(gap), size)


@numba.njit(cache=True, nogil=True)
def _events_of_exponentials(exponential: np.ndarray, scale: float, size: int
                            ) -> tuple[np.ndarray, np.ndarray, bool]:
    """The events of one chunk of ``size`` ticks from each row's standard exponential draws:
    row ``r``'s gaps are ``ceil(exponential[r] / scale)`` (:func:`_next_event`), its events at
    ticks ``gap_1 - 1``, ``gap_1 + gap_2 - 1``, ... below ``size``. Returns ``(tick, row)`` by
    tick, then row, and False (with no events) where a row's draws end before the chunk does
    (the caller then draws more for it).

    Each row's ticks are found once, in row order, and counted by tick; a stable counting
    sort then places them by tick (rows in order within a tick)."""
    rows, draws = exponential.shape
    found = np.empty(rows * draws, dtype=np.int64)  # the rows' ticks, row after row
    row_end = np.empty(rows, dtype=np.int64)
    per_tick = np.zeros(size + 1, dtype=np.int64)
    n = 0
    for r in range(rows):
        at = -1
        for c in range(draws):
            at = _next_event(at, exponential[r, c], scale, size)
            if at == size:
                break
            found[n] = at
            n += 1
            per_tick[at + 1] += 1
        if at < size:
            return np.empty(0, np.int64), np.empty(0, np.int64), False
        row_end[r] = n
    for k in range(size):
        per_tick[k + 1] += per_tick[k]
    tick = np.empty(n, dtype=np.int64)
    row = np.empty(n, dtype=np.int64)
    e = 0
    for r in range(rows):
        while e < row_end[r]:
            at = found[e]
            tick[per_tick[at]] = at
            row[per_tick[at]] = r
            per_tick[at] += 1
            e += 1
    return tick, row, True


def geometric_gaps(rng: np.random.Generator, p: float, shape: tuple[int, ...]) -> np.ndarray:
    """``rng.geometric(p, shape)``: the same numbers from the same stream, faster where numpy
    draws them by inverting exponentials (:data:`_INVERSION_BELOW`)."""
    if _draws_by_inversion(p):
        return _invert(rng.standard_exponential(shape), p)
    return rng.geometric(p, shape)


class PoissonStream:
    """Brian2's ``PoissonInput(N=1)`` as events, drawn as they are needed: every target, every
    tick, one Bernoulli(``p``) draw (the same distribution; not Brian2's random stream).

    Drawn in chunks of :data:`POISSON_CHUNK` ticks, in order, as geometric gaps between events
    from each chunk's start (memoryless: the same as gaps across chunks), so a tick costs
    nothing and the events do not depend on how the ticks are asked for.
    """

    def __init__(self, targets: np.ndarray, p: float, rng: np.random.Generator) -> None:
        self.targets = np.asarray(targets, dtype=np.int64)
        self.p = float(p)
        self.rng = rng
        self._chunks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._drawn = 0  # chunks drawn
        # targets in increasing order (as simulate gives them): their row order is their order
        self._ascending = bool(np.all(self.targets[1:] > self.targets[:-1]))

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        while self._drawn <= c:
            self._chunks[self._drawn] = self._draw(self._drawn * POISSON_CHUNK)
            self._drawn += 1
        return self._chunks[c]

    def _draw(self, k0: int) -> tuple[np.ndarray, np.ndarray]:
        p, size, t = self.p, POISSON_CHUNK, self.targets.size
        if p <= 0 or t == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        expected = p * size
        m = int(expected + 8 * math.sqrt(expected) + 16)
        if self._ascending and _draws_by_inversion(p):
            # the same draws as below, turned into events in one compiled pass (by tick,
            # then target, as the targets are in order): 5,000 targets' second of input in
            # 0.03 instead of 0.06 CPU s
            exponential = self.rng.standard_exponential((t, m))
            tick, row, complete = _events_of_exponentials(exponential, -math.log1p(-p), size)
            if complete:
                return tick + k0, self.targets[row]
            gaps = _invert(exponential, p)  # a row needs more draws (rare): as below
        else:
            gaps = geometric_gaps(self.rng, min(p, 1.0), (t, m))
        # a gap past the chunk's end ends the row's events there (and its sum cannot wrap)
        at = np.cumsum(np.minimum(gaps, size + 1, out=gaps), axis=1) - 1
        while True:  # rows that have not reached the chunk's end draw more (rare)
            short = np.flatnonzero(at[:, -1] < size)
            if short.size == 0:
                break
            more_gaps = geometric_gaps(self.rng, min(p, 1.0), (short.size, m))
            more = at[short, -1:] + np.cumsum(np.minimum(more_gaps, size + 1, out=more_gaps),
                                              axis=1)
            grown = np.full((t, at.shape[1] + m), size, dtype=at.dtype)
            grown[:, :at.shape[1]] = at
            grown[short, at.shape[1]:] = more
            at = grown
        row, col = np.nonzero(at < size)
        tk = at[row, col]
        if self._ascending:
            # by tick, then target, as one sort of whole numbers rather than by two keys (5,000
            # targets' second drawn in 0.06 instead of 0.09 CPU s): one event per target and
            # tick, so each key is distinct
            key = tk * t + row
            key.sort()
            tk, row = np.divmod(key, t)
            return tk + k0, self.targets[row]
        nr = self.targets[row]
        order = np.lexsort((nr, tk))
        return tk[order].astype(np.int64) + k0, nr[order]

    def events(self, k_start: int, k_stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The events of ticks ``k_start .. k_stop``, sorted by tick, then target (chunks
        wholly before ``k_start`` are dropped: ask in order)."""
        if k_stop <= k_start:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        first, last = k_start // POISSON_CHUNK, (k_stop - 1) // POISSON_CHUNK
        parts = [self._chunk(c) for c in range(first, last + 1)]
        for c in [c for c in self._chunks if c < first]:
            del self._chunks[c]
        # a chunk's events are by tick: the ticks asked for are a slice of the first and last
        # chunk, found by bisection (a mask over every event was a tenth of the input's time)
        cut = []
        for c, (tk, nr) in zip(range(first, last + 1), parts):
            lo = np.searchsorted(tk, k_start) if c == first else 0
            hi = np.searchsorted(tk, k_stop) if c == last else tk.size
            cut.append((tk[lo:hi], nr[lo:hi]))
        return (np.concatenate([tk for tk, _ in cut]), np.concatenate([nr for _, nr in cut]))


def poisson_events(targets: np.ndarray, rate_hz: float, n_steps: int, dt_s: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n_steps`` ticks of a :class:`PoissonStream` at ``rate_hz``: every target,
    every tick, one Bernoulli(``rate * dt``) draw. Sorted by tick, then target."""
    return PoissonStream(targets, rate_hz * dt_s, rng).events(0, int(n_steps))


def trial_rngs(seed: int | None, trials: int) -> list[np.random.Generator]:
    """One generator per trial, each its own stream of ``seed``: trial ``t``'s is the
    ``t``-th child of ``SeedSequence(seed)``, the same however many trials run."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(int(trials))]


def read_input_spikes(path: str | Path, brain: SpikingBrain, dt_s: float,
                      duration_s: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An explicit input table (CSV or Parquet, columns ``t`` in seconds and ``flywire_id``)
    as ``(tick, neuron)`` events; ``t`` is rounded to the nearest tick. A run gives these
    events to every one of its trials.

    Raises
    ------
    InputError
        One line: a missing column, a time that is not a number of seconds within the
        longest run (:data:`MAX_DURATION_S`), an id that is not a root id or not in the brain
        (:mod:`flyviz.spiking.tables`: the file, the column and the row); given the run's
        ``duration_s``, times that look like milliseconds (the last one past the run's end,
        within it divided by 1000: :func:`flyviz.spiking.tables.late_time`); a ``trial``
        column holding more than one trial (a spike table of several trials read as one
        input would give every trial all of their events); and two events of one neuron at
        one tick. Brian2's ``SpikeGeneratorGroup``, which drives the authors' model with
        such a table, refuses those too (``ValueError``: some neurons "spike more than once
        during a time step"), where adding the two kicks would give a run the reference
        cannot make.

    Events after the run's end are kept (a run takes those of its ticks).
    """
    from flyviz.spiking.tables import (first_repeat, id_column, in_milliseconds, late_time,
                                       number_column, read_table, spike_keys)

    p = Path(path)
    table = read_table(p, "the input spikes file", strings=True)
    missing = [c for c in ("t", "flywire_id") if c not in table.columns]
    if missing:
        raise InputError(f"{p.name} lacks column(s) {', '.join(missing)} (needs t, flywire_id)")
    if "trial" in table.columns:
        # flyviz simulate --out (the authors' layout) has one: a run's spikes of several
        # trials are several inputs, and this run has one input for all of its trials.
        trials = sorted({str(v) for v in table["trial"].unique().tolist()}, key=_by_number)
        if len(trials) > 1:
            shown = ", ".join(trials[:3]) + (", ..." if len(trials) > 3 else "")
            raise InputError(f"{p.name} holds the events of {len(trials)} trials (trial "
                             f"{shown}), and a run gives one input to every trial: keep the "
                             f"rows of one trial (e.g. trial {trials[0]})")
    t = number_column(table, "t", p.name, low=0.0, high=MAX_DURATION_S,
                      what="seconds from the run's start")
    neuron = brain.indices_of(id_column(table, "flywire_id", p.name),
                              f"{p.name}: flywire_id")
    tick = np.rint(t / dt_s).astype(np.int64)
    if duration_s is not None and t.size:
        # a table in milliseconds would drop every event past the run without a word
        last = float(t.max())
        if int(tick.max()) >= run_ticks(duration_s, dt_s) and \
                in_milliseconds(last, duration_s, dt_s):
            raise InputError(late_time("--input-spikes", p.name, "an input event", last,
                                       duration_s, dt_s))
    order = np.lexsort((neuron, tick))
    tick, neuron = tick[order], neuron[order]
    at = first_repeat(spike_keys(0, tick, neuron, 0, brain.neurons))
    if at is not None:
        raise InputError(f"{p.name} holds two input events of {brain.root_ids[neuron[at]]} in "
                         f"one tick, at {tick[at] * dt_s * 1000:g} ms (t is rounded to ticks of "
                         f"{dt_s * 1000:g} ms); a neuron takes at most one a tick, as in "
                         "Brian2: drop one")
    return tick, neuron


def _by_number(text: str) -> tuple[int, float, str]:
    """How a table's cell sorts: numbers by value (trial 2 before trial 10), then text."""
    try:
        return 0, float(text), ""
    except ValueError:
        return 1, 0.0, text


def select(brain: SpikingBrain, query: str) -> np.ndarray:
    """Model indices a query selects. Brains with labels take the whole query language
    (``superclass:``, ``type:``, ``side:``, ``sign:``, ``population:`` where it has named
    populations...); every brain takes ``body:ROOT,...``
    (root ids) and ``id:`` (model indices, or root ids where the value is too large to be an
    index)."""
    from flyviz.model import selection as sel

    node = sel.parse(query)

    def root_ids_as_body(node: Any) -> Any:
        if isinstance(node, sel.Term):
            if node.key == "id" and node.values and all(
                    v.isdigit() and int(v) >= brain.neurons for v in node.values):
                # Too large for an index, so read as a root id; a value that is not one
                # either (often an index one past the end) is both, not "no body id".
                roots = set(np.asarray(brain.root_ids).tolist())
                value = next((v for v in node.values if int(v) not in roots), None)
                if value is not None:
                    raise sel.SelectionError(
                        f"id:{value} is neither a neuron index (0 to {brain.neurons - 1:,}) "
                        f"nor a root id of {brain.name}")
                return sel.Term("body", node.values)
            return node
        if isinstance(node, sel.Not):
            return sel.Not(root_ids_as_body(node.operand))
        return type(node)(tuple(root_ids_as_body(o) for o in node.operands))

    node = root_ids_as_body(node)
    return np.asarray(brain_index(brain).select(node), np.int64)


#: Each brain's query index with what it was built of (:func:`brain_index`), by ``id`` of
#: the brain while it lives.
_indexes: dict[int, tuple[Any, ...]] = {}
_indexes_lock = threading.Lock()


def brain_index(brain: SpikingBrain) -> Any:
    """The :class:`~flyviz.model.selection.NeuronIndex` of a spiking brain's labels, body
    ids, populations and signed counts (what :func:`select` evaluates a query on).

    Kept while the brain lives, until its name or one of those is replaced (not edited in
    place, as :meth:`SpikingBrain.grouped_rows` keeps its order): on the demo's 49,393
    neurons one takes a tenth of a second to build, and a screen's sets file and the
    populations dock's groups are selected one query at a time."""
    from flyviz.model import selection as sel

    made_of = (brain.name, brain.root_ids, brain.indptr, brain.counts, brain.superclass,
               brain.cell_type, brain.side, brain.populations)
    key = id(brain)
    with _indexes_lock:
        entry = _indexes.get(key)
    if entry is not None and entry[0]() is brain and entry[1][0] == made_of[0] and \
            all(now is then for now, then in zip(made_of[1:], entry[1][1:])):
        return entry[2]
    index = sel.NeuronIndex(cast(Any, _QueryView(brain)))

    def forget(_ref: object, key: int = key) -> None:
        _indexes.pop(key, None)         # no lock: the collector may call it under one

    entry = (weakref.ref(brain, forget), made_of, index)
    with _indexes_lock:
        _indexes[key] = entry
    return index


class _QueryView:
    """What :class:`flyviz.model.selection.NeuronIndex` reads of a model, for a spiking
    brain: sizes, labels, root ids as body ids, and the signed counts' sums for ``sign:``."""

    def __init__(self, brain: SpikingBrain) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(neurons=brain.neurons)
        self.name = brain.name
        self.anatomy = SimpleNamespace(superclass=brain.superclass, cell_type=brain.cell_type,
                                       side=brain.side, body_id=brain.root_ids,
                                       populations=brain.populations)
        self.in_index = np.empty(0, dtype=np.int64)
        self._indptr, self._counts = brain.indptr, brain.counts

    def outgoing_weight(self) -> np.ndarray:
        """Each neuron's summed signed count (its rows are its outgoing synapses): what a
        ``sign:`` query reads, worked out at the first one."""
        from flyviz.model.selection import net_outgoing_weight

        neurons = int(self.config.neurons)
        sources = np.repeat(np.arange(neurons, dtype=np.int32), np.diff(self._indptr))
        return net_outgoing_weight(sources, self._counts, neurons)


def simulate(brain: SpikingBrain, *, excite: Any = None, silence: Any = None,
             rate: float | None = None, duration_s: float = 1.0, trials: int = 1,
             seed: int | None = 0, input_events: tuple[np.ndarray, np.ndarray] | None = None,
             params: LIFParams | None = None, threads: int | None = None,
             progress: Callable[[int, int], None] | None = None,
             input_until_s: float | None = None) -> SpikeRun:
    """Run the LIF model ``trials`` times.

    Parameters
    ----------
    excite
        Model indices given Poisson input at ``rate`` Hz (default ``params.rate``, 150) with no
        refractory period, as the authors' ``poi``.
    silence
        Model indices whose outgoing synapses are zeroed (the authors' ``silence``).
    input_events
        ``(tick, neuron)`` replayed in every trial, each adding ``w_syn * f_poi`` to ``v``;
        these neurons are Poisson targets too (no refractory period).
    params
        The model's constants; ``w_syn`` defaults to the brain's.
    threads
        Trials run side by side on this many threads (default: one per core).
    progress
        Called as ``progress(trial, ticks_done)`` as each trial goes on (from the thread that
        runs it; :func:`flyviz.spiking.engine.simulate_ticks`).
    input_until_s
        The Poisson input stops at this time, seconds (``None``: it lasts the whole run):
        the events before it are those of the whole run, so the run is the same up to it.
    """
    duration_s = _check_value("the duration", duration_s, positive=True)
    trials = check_run_size(duration_s, trials, seed)
    p, excited, silenced, rfc = _prepare(brain, excite, silence, rate, params, input_events)
    n_steps = run_ticks(duration_s, p.dt_s)
    if n_steps < 1:  # no tick at all: every rate would be 0 / 0
        raise InputError(f"the duration {duration_s * 1000:g} ms is shorter than one tick "
                         f"({p.dt_s * 1000:g} ms)")
    input_ticks = input_until_ticks(input_until_s, duration_s, p.dt_s, n_steps)
    check_input_size(excited.size, p.rate, input_ticks * p.dt_s, trials,
                     0 if input_events is None else int(np.asarray(input_events[0]).size))
    events = []
    for rng in trial_rngs(seed, trials):
        tk, nr = poisson_events(excited, p.rate, input_ticks, p.dt_s, rng)
        if input_events is not None:
            tk, nr = _merged((tk, nr), input_events, 0, n_steps)
        events.append((tk, nr))
    # Brian2: counts * (w_syn * mV), volts
    post, weight, smallest = brain.grouped_rows(p.w_syn * 0.001)
    runs = simulate_ticks(brain.indptr, post, weight, rfc, silenced, p, n_steps, events,
                          threads, rows_grouped=True, smallest_weight=smallest,
                          progress=progress)
    # each spike's trial: zeros the kernel gives already zeroed (a repeat wrote every entry,
    # 10 MB for a second at 5,000 excited), then the later trials' stretches
    sizes = [r[0].size for r in runs]
    trial = np.zeros(sum(sizes), dtype=np.int64)
    for t, at in enumerate(np.cumsum(sizes[:-1]), start=1):
        trial[at:at + sizes[t]] = t
    if len(runs) == 1:  # one trial's arrays as they are (a copy of each would be its size)
        return SpikeRun(brain, p, n_steps, trials, runs[0][0], trial, runs[0][1])
    return SpikeRun(brain, p, n_steps, trials, np.concatenate([r[0] for r in runs]), trial,
                    np.concatenate([r[1] for r in runs]))


def input_until_ticks(input_until_s: float | None, duration_s: float, dt_s: float,
                      n_steps: int, name: str = "the input's end") -> int:
    """The ticks of a run of ``n_steps`` that get Poisson input when it stops at
    ``input_until_s`` seconds (``None``: all of them).

    Raises
    ------
    InputError
        For a time that is not a number of seconds from 0 to the run's end.
    """
    if input_until_s is None:
        return int(n_steps)
    until = float(input_until_s)
    if not math.isfinite(until) or until < 0:
        raise InputError(f"{name} must be a non-negative number of seconds, not {until:g}")
    if until > duration_s + 1e-12:
        raise InputError(f"{name} {until * 1000:g} ms is after the run's end "
                         f"({duration_s * 1000:g} ms); give at most the duration")
    ticks = min(int(n_steps), int(round(until / dt_s)))
    if until > 0 and ticks == 0:
        # 0.05 ms rounds to no tick at all: the run would get no input, said as if asked.
        raise InputError(f"{name} {until * 1000:g} ms is shorter than one tick "
                         f"({dt_s * 1000:g} ms); give 0 for no input, or at least one tick")
    return ticks


def neuron_indices(brain: SpikingBrain, which: Any, name: str) -> np.ndarray:
    """The sorted model indices ``which`` names: indices (whole numbers 0..n-1) or a boolean
    mask of one entry per neuron (``excite=np.ones(n, bool)`` is every neuron, not neuron 1).

    Raises
    ------
    InputError
        Naming the argument and what is wrong (a negative or too large index, a mask of
        another length, values that are not whole numbers).
    """
    n = brain.neurons
    array = np.asarray([] if which is None else which)
    if array.dtype.kind == "b":
        if array.shape != (n,):
            raise InputError(f"{name} is a mask of {array.size:,} entries; a mask needs one "
                             f"per neuron ({n:,}), or give model indices")
        return np.flatnonzero(array).astype(np.int64)
    if array.size == 0:
        return np.empty(0, np.int64)
    if array.dtype.kind == "f" and np.isfinite(array).all() and (array == np.rint(array)).all():
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu" or array.ndim > 1:
        raise InputError(f"{name} must be model indices (whole numbers 0..{n - 1}) or a mask "
                         f"of one boolean per neuron, not {array.dtype} of shape "
                         f"{list(array.shape)}")
    bad = (array < 0) | (array >= n) if array.dtype.kind == "i" else array >= n
    if bad.any():
        raise InputError(f"{name} names neuron {int(array[bad].ravel()[0])}, outside the "
                         f"brain's 0..{n - 1} (model indices; root ids go through "
                         "SpikingBrain.indices_of)")
    return np.unique(array.astype(np.int64))


def check_input_events(brain: SpikingBrain, events: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(tick, neuron)`` input events as two int64 arrays of one length, ticks within the
    longest run and neurons within the brain.

    Raises
    ------
    InputError
        Naming what is wrong.
    """
    try:
        tick, neuron = events
    except (TypeError, ValueError):
        raise InputError("input_events must be two arrays: (ticks, neurons)") from None
    tick, neuron = np.asarray(tick), np.asarray(neuron)
    if tick.ndim != 1 or tick.shape != neuron.shape or \
            (tick.size and (tick.dtype.kind not in "iu" or neuron.dtype.kind not in "iu")):
        raise InputError("input_events must be two 1-D arrays of whole numbers of one length: "
                         "(ticks, neurons)")
    longest = int(MAX_DURATION_S / LIFParams().dt_s)
    if tick.size and (int(tick.min()) < 0 or int(tick.max()) > longest):
        worst = int(tick.min()) if int(tick.min()) < 0 else int(tick.max())
        raise InputError(f"input_events hold tick {worst}, outside 0..{longest:,} (the "
                         "longest run)")
    if neuron.size and (int(neuron.min()) < 0 or int(neuron.max()) >= brain.neurons):
        worst = int(neuron.min()) if int(neuron.min()) < 0 else int(neuron.max())
        raise InputError(f"input_events name neuron {worst}, outside the brain's "
                         f"0..{brain.neurons - 1}")
    return tick.astype(np.int64), neuron.astype(np.int64)


#: The model's constants that must be above 0 (time constants and the tick, ms) and those
#: that may be 0 (the refractory period and the delay, ms); the rest must be finite.
_POSITIVE_PARAMS = ("dt", "tau", "t_mbr")
_NON_NEGATIVE_PARAMS = ("t_rfc", "t_dly", "rate", "f_poi")


def check_params(params: LIFParams) -> LIFParams:
    """``params`` when every constant is a finite number and the tick and time constants are
    above 0 and the refractory period, delay and rates at least 0, else :class:`InputError`
    naming it (a tick of 0 divides by zero, a negative delay indexes before the run)."""
    from dataclasses import fields

    for item in fields(params):
        value = getattr(params, item.name)
        bad = isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value)
        if not bad and item.name in _POSITIVE_PARAMS:
            bad = value <= 0
        if not bad and item.name in _NON_NEGATIVE_PARAMS:
            bad = value < 0
        if bad:
            need = "above 0" if item.name in _POSITIVE_PARAMS else \
                "0 or more" if item.name in _NON_NEGATIVE_PARAMS else "a finite number"
            raise InputError(f"LIFParams.{item.name} is {value!r}; it must be {need}")
    return params


def _prepare(brain: SpikingBrain, excite: Any, silence: Any, rate: float | None,
             params: LIFParams | None, input_events: tuple[np.ndarray, np.ndarray] | None
             ) -> tuple[LIFParams, np.ndarray, np.ndarray, np.ndarray]:
    """The checked constants, excited indices, silenced mask and refractory ticks of a run."""
    p = check_params(params or LIFParams(w_syn=brain.w_syn))
    if rate is not None:
        p = p.with_(rate=_check_value("the rate", rate))
    _check_value("the rate", p.rate)
    check_rate(p.rate, p.dt_s)
    excited = neuron_indices(brain, excite, "excite")
    silenced = np.zeros(brain.neurons, dtype=bool)
    if silence is not None:
        silenced[neuron_indices(brain, silence, "silence")] = True
    if input_events is not None:
        input_events = check_input_events(brain, input_events)
    rfc = np.full(brain.neurons, p.refractory_ticks, dtype=np.int64)
    rfc[excited] = 0
    if input_events is not None:
        rfc[np.unique(input_events[1])] = 0
    return p, excited, silenced, rfc


def _merged(events: tuple[np.ndarray, np.ndarray], extra: tuple[np.ndarray, np.ndarray],
            k_start: int, k_stop: int) -> tuple[np.ndarray, np.ndarray]:
    """``events`` with the ``extra`` events of ticks ``k_start .. k_stop``, by tick then
    neuron (stable)."""
    keep = (extra[0] >= k_start) & (extra[0] < k_stop)
    tk = np.concatenate([events[0], np.asarray(extra[0])[keep]])
    nr = np.concatenate([events[1], np.asarray(extra[1])[keep]])
    order = np.lexsort((nr, tk))
    return tk[order], nr[order]


class SpikingSimulation:
    """One trial of the LIF model run as far as asked, call by call (a live view's run).

    It keeps ``v``, ``g``, the refractory clocks, the spikes still on their way (the
    synaptic delay) and the Poisson input's random stream between calls, so
    ``advance(a)`` then ``advance(b)`` gives the spikes of ``advance(a + b)``, and the
    spikes of trial ``trial`` of :func:`simulate` with the same arguments and seed.

    Parameters
    ----------
    brain, excite, silence, rate, seed, input_events, params
        As :func:`simulate` takes them.
    trial
        Which trial of ``seed`` this is: its Poisson input is trial ``trial``'s of
        :func:`simulate` (default: the first).

    Examples
    --------
    >>> sim = SpikingSimulation(brain, excite=brain.default_excite, seed=0)  # doctest: +SKIP
    >>> ticks, neurons = sim.advance(100)   # the first 10 ms               # doctest: +SKIP
    """

    def __init__(self, brain: SpikingBrain, *, excite: Any = None, silence: Any = None,
                 rate: float | None = None, seed: int | None = 0,
                 input_events: tuple[np.ndarray, np.ndarray] | None = None,
                 params: LIFParams | None = None, trial: int = 0,
                 input_until_s: float | None = None) -> None:
        from flyviz.spiking.engine import EngineTrial, flush_threshold

        p, excited, silenced, rfc = _prepare(brain, excite, silence, rate, params,
                                             input_events)
        trial = whole_number("trial", trial, 0, MAX_TRIALS - 1)
        if seed is not None:
            whole_number("seed", seed, 0, 2**63 - 1)
        if input_events is not None:
            input_events = check_input_events(brain, input_events)
        self.brain = brain
        self.params = p
        self.excited = excited
        self.silenced = silenced
        self._input = input_events
        self._poisson = PoissonStream(excited, p.rate * p.dt_s, trial_rngs(seed, int(trial) + 1)[-1])
        longest = int(round(MAX_DURATION_S / p.dt_s))
        #: The first tick without Poisson input (``input_until_s``; the run's longest end).
        self.input_until = longest if input_until_s is None else input_until_ticks(
            input_until_s, MAX_DURATION_S, p.dt_s, longest)
        post, weight, smallest = brain.grouped_rows(p.w_syn * 0.001)
        self._trial = EngineTrial(brain.indptr, post, weight, rfc, silenced, p,
                                  flush_threshold(smallest))

    @property
    def tick(self) -> int:
        """The next tick to run (the ticks run so far)."""
        return self._trial.tick

    @property
    def time_s(self) -> float:
        """Biological time simulated so far, seconds."""
        return self.tick * self.params.dt_s

    @property
    def v(self) -> np.ndarray:
        """``(n,)`` membrane potentials now, volts."""
        return self._trial.v

    @property
    def g(self) -> np.ndarray:
        """``(n,)`` synaptic conductances now, volts."""
        return self._trial.g

    def advance(self, n_ticks: int) -> tuple[np.ndarray, np.ndarray]:
        """Run the next ``n_ticks`` ticks; their spikes as ``(ticks, neurons)`` (ticks
        counted from the start of the run, by tick then neuron index)."""
        from flyviz.arguments import whole_number

        longest = int(round(MAX_DURATION_S / self.params.dt_s))
        n_ticks = whole_number("the ticks to advance", n_ticks, 0, max(0, longest - self.tick))
        k0, k1 = self.tick, self.tick + n_ticks
        events = self._poisson.events(k0, min(k1, max(k0, self.input_until)))
        if self._input is not None:
            events = _merged(events, self._input, k0, k1)
        return self._trial.advance(n_ticks, events[0], events[1])

    def threshold_margin(self, neuron: int) -> tuple[float, bool]:
        """What the threshold test of the next tick sees of ``neuron``: its ``v`` after that
        tick's update minus ``v_th`` (volts; above 0 it spikes) and whether it is tested
        at all (not refractory). Reads the state; runs nothing."""
        return self._trial.threshold_margin(int(neuron))

    def advance_ms(self, ms: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`advance` by ``ms`` milliseconds (rounded to whole ticks)."""
        return self.advance(int(round(float(ms) / self.params.dt)))
