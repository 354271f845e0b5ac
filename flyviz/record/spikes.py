"""The exact spikes of a recorded run, frame by frame: a recording's spike log.

A spiking run's frames are bins of rates (:mod:`flyviz.kinds.spiking`); the spikes behind
them, each at its tick (0.1 ms), are what a spike raster draws. :class:`SpikeLog` keeps them
beside a :class:`~flyviz.record.recording.Recording` (its :attr:`spikes
<flyviz.record.recording.Recording.spikes>`): for every frame, the spikes of its bin as
three parallel integer arrays, ``tick`` (from the run's start), ``neuron`` (model index)
and ``trial``, appended as each bin arrives. They grow in place (the buffers double when
full, never a Python object per spike), so a long live run costs 16 bytes a spike (and
at most as much again of room to grow); a
snapshot shares them, as a recording's snapshot shares its states. The ``.flyrec`` codec
writes them as four tensors (``spike_tick``, ``spike_neuron``, ``spike_trial``,
``spike_frame_end``; format 1.4, ``docs/recording-format.md``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["RUN_TICK_MS", "SpikeLog", "spiking_run_problem"]

#: Spikes a new log has room for before it first grows.
_FIRST_CAPACITY = 4096


class SpikeLog:
    """The spikes of a run, frame by frame (see the module).

    Parameters
    ----------
    tick_ms
        The length of one tick, ms (the engine's step: 0.1).

    Within a frame the spikes are in the order they are given (a spiking run gives them
    by trial, then tick, then neuron); frame ``i``'s are ``ends[i - 1]:ends[i]`` of the
    arrays (:meth:`frame_ends`).
    """

    def __init__(self, tick_ms: float = 0.1) -> None:
        tick_ms = float(tick_ms)
        if not math.isfinite(tick_ms) or tick_ms <= 0:
            raise ValueError(f"a tick must be a positive number of ms, not {tick_ms}")
        self.tick_ms = tick_ms
        self._tick = np.empty(_FIRST_CAPACITY, np.int64)
        self._neuron = np.empty(_FIRST_CAPACITY, np.int32)
        self._trial = np.empty(_FIRST_CAPACITY, np.int32)
        self._ends = np.empty(64, np.int64)
        self._count = 0      # spikes held
        self._frames = 0     # frames covered
        self._frozen = False

    @classmethod
    def from_arrays(cls, tick: np.ndarray, neuron: np.ndarray, trial: np.ndarray | None,
                    frame_ends: np.ndarray, tick_ms: float = 0.1) -> "SpikeLog":
        """A log of spikes already gathered: every spike's ``tick``, ``neuron`` and ``trial``
        (``None``: all trial 0) in frame order, and each frame's end (the spikes up to and
        including it).

        Raises
        ------
        ValueError
            If the arrays differ in length, the ends are not non-decreasing up to the
            number of spikes, or a tick, neuron or trial is negative.
        """
        tick = np.asarray(tick)
        neuron = np.asarray(neuron)
        trial = np.zeros(tick.shape, np.int32) if trial is None else np.asarray(trial)
        ends = np.asarray(frame_ends)
        if tick.ndim != 1 or neuron.shape != tick.shape or trial.shape != tick.shape:
            raise ValueError(f"the spikes' ticks, neurons and trials differ in shape "
                             f"({list(tick.shape)}, {list(neuron.shape)}, {list(trial.shape)})")
        if ends.ndim != 1:
            raise ValueError("the frames' spike ends are not one number per frame")
        if ends.size and (int(ends.min()) < 0 or (np.diff(ends) < 0).any()
                          or int(ends[-1]) != tick.size):
            raise ValueError(f"the frames' spike ends do not rise to the {tick.size:,} spikes")
        if not ends.size and tick.size:
            raise ValueError(f"{tick.size:,} spikes belong to no frame")
        for name, values in (("tick", tick), ("neuron", neuron), ("trial", trial)):
            if values.size and int(values.min()) < 0:
                raise ValueError(f"a spike's {name} is negative")
        log = cls(tick_ms)
        log._tick = tick.astype(np.int64, copy=True)
        log._neuron = neuron.astype(np.int32, copy=True)
        log._trial = trial.astype(np.int32, copy=True)
        log._ends = ends.astype(np.int64, copy=True)
        log._count, log._frames = int(tick.size), int(ends.size)
        return log

    # ------------------------------------------------------------ growing
    def append(self, tick: np.ndarray, neuron: np.ndarray, trial: np.ndarray | None = None
               ) -> int:
        """Add the next frame's spikes (``trial``: ``None`` for all trial 0); returns the
        frame's index."""
        return self.append_frames(tick, neuron, trial, [np.size(tick)])

    def append_frames(self, tick: np.ndarray, neuron: np.ndarray, trial: np.ndarray | None,
                      frame_ends: "np.ndarray | list[int]") -> int:
        """Add the spikes of the next frames at once: ``frame_ends[j]`` is the spikes of the
        first ``j + 1`` of them (from these arrays' start); returns the last frame's index."""
        if self._frozen:
            raise ValueError("this spike log is a frozen snapshot; append to the original")
        tick = np.asarray(tick).reshape(-1)
        neuron = np.asarray(neuron).reshape(-1)
        ends = np.asarray(frame_ends, np.int64).reshape(-1)
        k = tick.size
        if neuron.size != k or (trial is not None and np.size(trial) != k):
            raise ValueError("a frame's spikes need as many neurons and trials as ticks")
        if (ends.size and (int(ends[0]) < 0 or (np.diff(ends) < 0).any()
                           or int(ends[-1]) != k)) or (not ends.size and k):
            raise ValueError(f"the frames' spike ends do not rise to the {k:,} spikes")
        if self._count + k > self._tick.size:
            size = max(self._count + k, 2 * self._tick.size)
            self._tick = _grown(self._tick, self._count, size)
            self._neuron = _grown(self._neuron, self._count, size)
            self._trial = _grown(self._trial, self._count, size)
        if self._frames + ends.size > self._ends.size:
            self._ends = _grown(self._ends, self._frames,
                                max(self._frames + ends.size, 2 * self._ends.size))
        stop = self._count + k
        self._tick[self._count:stop] = tick
        self._neuron[self._count:stop] = neuron
        self._trial[self._count:stop] = 0 if trial is None else np.asarray(trial).reshape(-1)
        self._ends[self._frames:self._frames + ends.size] = ends + self._count
        self._count = stop
        self._frames += ends.size
        return self._frames - 1

    def clear(self) -> None:
        """Drop every frame's spikes (new buffers: a snapshot keeps the old ones)."""
        self.__init__(self.tick_ms)  # type: ignore[misc]

    def snapshot(self) -> "SpikeLog":
        """A frozen copy of the spikes so far, sharing their buffers (a spike is written
        once; growing writes new buffers), safe to read while this log grows."""
        frozen = SpikeLog.__new__(SpikeLog)
        frozen.__dict__.update(self.__dict__)
        frozen._frozen = True
        return frozen

    # ------------------------------------------------------------ reading
    def __len__(self) -> int:
        """Frames covered."""
        return self._frames

    @property
    def count(self) -> int:
        """Spikes held, all frames."""
        return self._count

    def frame_ends(self) -> np.ndarray:
        """``(frames,)`` int64: the spikes up to and including each frame (read-only view)."""
        return _view(self._ends, self._frames)

    def frame_counts(self) -> np.ndarray:
        """``(frames,)`` int64: how many spikes each frame holds."""
        return np.diff(self.frame_ends(), prepend=0)

    def span(self, start: int = 0, stop: int | None = None) -> tuple[int, int]:
        """The spikes ``first:last`` of frames ``start:stop`` (clipped to the frames)."""
        stop = self._frames if stop is None else max(0, min(int(stop), self._frames))
        start = max(0, min(int(start), stop))
        first = int(self._ends[start - 1]) if start else 0
        last = int(self._ends[stop - 1]) if stop else 0
        return first, last

    def arrays(self, start: int = 0, stop: int | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(tick, neuron, trial)`` of the spikes of frames ``start:stop``: int64, int32,
        int32 read-only views (no copy)."""
        first, last = self.span(start, stop)
        return (_view(self._tick, last)[first:], _view(self._neuron, last)[first:],
                _view(self._trial, last)[first:])

    def times_ms(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The spikes' times of frames ``start:stop``, ms from the run's start (float64)."""
        return self.arrays(start, stop)[0] * self.tick_ms

    @property
    def trials(self) -> int:
        """Trials the spikes come from (the largest trial index + 1; 1 for none)."""
        return int(_view(self._trial, self._count).max(initial=0)) + 1

    def nbytes(self) -> int:
        """Bytes of the buffers held (room to grow included)."""
        return int(self._tick.nbytes + self._neuron.nbytes + self._trial.nbytes
                   + self._ends.nbytes)


def _grown(array: np.ndarray, used: int, size: int) -> np.ndarray:
    out = np.empty(size, array.dtype)
    out[:used] = array[:used]
    return out


def _view(array: np.ndarray, stop: int) -> np.ndarray:
    view = array[:stop]
    view.flags.writeable = False
    return view


#: The tick a spiking run steps by, ms (the engine's ``LIFParams.dt``): every recording of
#: a run (``flyviz simulate --record``, a live run) keeps its spikes in these.
RUN_TICK_MS = 0.1
#: The longest bin and the most trials a recorded run could have had (an hour of the fly's
#: time; :data:`flyviz.spiking.run.MAX_TRIALS`).
MAX_RUN_BIN_MS = 3_600_000.0
MAX_RUN_TRIALS = 100_000


def spiking_run_problem(metadata: dict, frames: int, spikes: "SpikeLog | None",
                        rates: "Any" = None) -> str | None:
    """What a recording of a spiking run holds that its run could not have made, or ``None``.

    The one check of a recording's spike table against its run table, made where every
    recording is read (:func:`flyviz.record.flyrec_codec.read_recording`, so ``convert``,
    ``figure``, ``share``, ``export`` and the app see it alike): a bin of a whole number of
    ticks, a tick of the engine's length, trials within bounds, every spike of frame ``i``
    in trial ``< trials`` and at a tick inside bin ``i`` and inside the run
    (``spiking.run_ticks``, where a run's last bin is short), the per-bin counts
    (``spiking.bin_spikes``) equal to the spikes kept, and each frame's rates (``rates``:
    a callable giving frame ``i``'s float32 state, or ``None`` not to read them) finite, at
    least 0 and equal to its spikes over the bin's own length and the trials.

    Parameters
    ----------
    metadata
        The recording's metadata (its ``spiking`` table is read).
    frames
        How many frames (bins) it holds.
    spikes
        Its spike log, or ``None`` (a recording of format 1.3 or older).
    rates
        ``rates(i)``: frame ``i``'s rates, Hz; ``None`` skips them.
    """
    meta = metadata.get("spiking")
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        return (f"its spiking metadata is a {type(meta).__name__}, not a table of the run's "
                "settings")
    bin_ms = meta.get("bin_ms", 10.0)
    if isinstance(bin_ms, bool) or not isinstance(bin_ms, (int, float)) or \
            not math.isfinite(bin_ms) or not 0 < bin_ms <= MAX_RUN_BIN_MS:
        return (f"its bin length (spiking.bin_ms) is {bin_ms!r}, not a number of ms above 0 "
                f"and at most {MAX_RUN_BIN_MS:g}")
    bin_ticks = round(bin_ms / RUN_TICK_MS)
    if bin_ticks < 1 or abs(bin_ticks * RUN_TICK_MS - bin_ms) > 1e-6 * max(1.0, bin_ms):
        return (f"its bin length {bin_ms:g} ms is not a whole number of the run's "
                f"{RUN_TICK_MS:g} ms ticks")
    trials = meta.get("trials", 1)
    if isinstance(trials, bool) or not isinstance(trials, int) or \
            not 1 <= trials <= MAX_RUN_TRIALS:
        return (f"its trial count (spiking.trials) is {trials!r}, not a whole number "
                f"1..{MAX_RUN_TRIALS:,}")
    bins = meta.get("bins")
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, int)
                             or bins < frames):
        return f"its run had {bins!r} bins (spiking.bins) but it holds {frames:,}"
    counts = meta.get("bin_spikes")
    if counts is not None:
        if not isinstance(counts, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            return "its spike counts (spiking.bin_spikes) are not whole numbers of 0 or more"
        if len(counts) != frames:
            return f"it counts the spikes of {len(counts):,} bins (spiking.bin_spikes) " \
                   f"but holds {frames:,}"
    run_ticks = meta.get("run_ticks", frames * bin_ticks)
    if isinstance(run_ticks, bool) or not isinstance(run_ticks, int) or \
            not (frames - 1) * bin_ticks < run_ticks <= frames * bin_ticks and frames:
        return (f"its run of {run_ticks!r} ticks (spiking.run_ticks) does not fill its "
                f"{frames:,} bins of {bin_ticks:,} ticks")
    per_frame = None
    if spikes is not None:
        if abs(spikes.tick_ms - RUN_TICK_MS) > 1e-9:
            return (f"its spikes' tick is {spikes.tick_ms:g} ms; a run steps by "
                    f"{RUN_TICK_MS:g} ms")
        if len(spikes) != frames:
            return f"its spikes cover {len(spikes):,} of its {frames:,} bins"
        tick, _neuron, trial = spikes.arrays()
        if trial.size and int(trial.max()) >= trials:
            return (f"a spike is in trial {int(trial.max())} of a {trials}-trial run")
        per_frame = spikes.frame_counts()
        frame_of = np.repeat(np.arange(frames, dtype=np.int64), per_frame)
        outside = ((tick // bin_ticks) != frame_of) | (tick >= run_ticks)
        if outside.any():
            at = int(np.flatnonzero(outside)[0])
            if tick[at] >= run_ticks:
                return (f"a spike at tick {int(tick[at]):,} is after the run's end (its "
                        f"{run_ticks:,} ticks)")
            return (f"a spike at tick {int(tick[at]):,} is kept in bin {int(frame_of[at])}, "
                    f"whose ticks are {int(frame_of[at]) * bin_ticks:,}.."
                    f"{(int(frame_of[at]) + 1) * bin_ticks - 1:,}")
        if counts is not None and per_frame.tolist() != counts:
            bad = int(np.flatnonzero(per_frame != np.asarray(counts))[0])
            return (f"bin {bad} counts {counts[bad]:,} spikes (spiking.bin_spikes) but keeps "
                    f"{int(per_frame[bad]):,}")
    if rates is not None:
        highest = 1000.0 / RUN_TICK_MS          # one spike a tick in every trial
        for i in range(frames):
            # the last bin of a run that is not a whole number of bins is short
            seconds = min(bin_ticks, run_ticks - i * bin_ticks) * RUN_TICK_MS / 1000.0 * trials
            row = np.asarray(rates(i), np.float64)
            if not np.isfinite(row).all() or (row.size and (row.min() < 0
                                                            or row.max() > highest)):
                return (f"bin {i}'s rates are not finite numbers of 0..{highest:g} Hz")
            if spikes is not None:
                _t, neuron, _tr = spikes.arrays(i, i + 1)
                expected = np.bincount(neuron, minlength=row.size) / seconds
                if not np.allclose(row, expected, rtol=2e-3, atol=1e-3):
                    at = int(np.flatnonzero(~np.isclose(row, expected, rtol=2e-3,
                                                        atol=1e-3))[0])
                    return (f"bin {i}'s rate of neuron {at} is {row[at]:g} Hz but its spikes "
                            f"make {expected[at]:g} Hz")
    return None
