"""Reading a spiking run for what it is: where two runs part, and what fires with no input.

* :func:`first_divergence`: another simulator's (or another run's) spikes, in the authors'
  layout (``t, trial, flywire_id, exp_name``, one row per spike, as Shiu et al.'s
  ``model.py`` and ``flyviz simulate --out`` write them; :func:`read_spikes`), against a
  run of flyviz: identical, or the first spike (by trial, tick, neuron index) that one side
  has and the other has not, with how far flyviz's membrane potential was from the threshold
  at that tick (:func:`threshold_margin`: the trial is run again up to that tick and the
  state read; the run itself is not slowed by it).
* :func:`sustained_activity`: after the Poisson input stops (``input_until_s`` of
  :func:`flyviz.spiking.run.simulate`), how many neurons keep firing and for how long.
  Under strong drive parts of a brain (Kenyon cells, the antennal lobe) can excite
  themselves; a user should see that, not take it for a response.

Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError
from flyviz.spiking.brain import SpikingBrain
from flyviz.spiking.run import SpikeRun, SpikingSimulation
from flyviz.spiking.tables import spike_keys

__all__ = ["AUTHORS_COLUMNS", "Divergence", "SustainedActivity", "check_trials",
           "first_divergence", "read_spikes", "sustained_activity", "threshold_margin"]

#: The columns of the authors' spike tables, one row per spike.
AUTHORS_COLUMNS = ("t", "trial", "flywire_id", "exp_name")

#: A trial "still fires at the end" when it has a spike in the run's last this many seconds.
END_WINDOW_S = 0.010


# ---------------------------------------------------------------- another run's spikes
def read_spikes(path: str | Path, brain: SpikingBrain, dt_s: float, trials: int,
                n_steps: int, what: str = "--compare") -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]:
    """The spikes of a table in the authors' layout as ``(trial, tick, neuron)``, sorted by
    trial, tick, then neuron (``t`` rounded to the nearest tick of ``dt_s``).

    Raises
    ------
    InputError
        One line: a file that is not a table, a column missing (another layout), more than
        one experiment (``exp_name``), a trial or a time outside the run of ``trials`` x
        ``n_steps`` ticks it is compared with, a root id not in the brain, or the same
        spike twice.
    """
    from flyviz.spiking.tables import (first_repeat, id_column, index_column, late_time,
                                       number_column, read_table)

    p = Path(path)
    name = p.name
    table = read_table(p, f"the {what} spikes file")
    missing = [c for c in AUTHORS_COLUMNS[:3] if c not in table.columns]
    if missing:
        raise InputError(f"{what} {name} lacks column(s) {', '.join(missing)}: spikes in the "
                         f"authors' layout have columns {', '.join(AUTHORS_COLUMNS)}")
    if "exp_name" in table.columns:
        names = sorted({str(e) for e in table["exp_name"].unique().tolist()})
        if len(names) > 1:
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            raise InputError(f"{what} {name} holds {len(names)} experiments (exp_name "
                             f"{shown}); give a file of one")
    duration_s = n_steps * dt_s
    t = number_column(table, "t", name, low=0.0, what="seconds from the run's start")
    trial = index_column(table, "trial", name, 2**62) if len(table) else \
        np.empty(0, np.int64)
    neuron = brain.indices_of(id_column(table, "flywire_id", name), f"{name}: flywire_id")
    ticks = np.rint(t / dt_s)  # as floats until checked: 1e300 s is no int64 tick
    if trial.size and int(trial.max()) >= trials:
        raise InputError(f"{what} {name} holds trial {int(trial.max())}, and this run has "
                         f"{trials} trial(s) (0..{trials - 1}); give --trials "
                         f"{int(trial.max()) + 1}")
    if ticks.size and float(ticks.max()) >= n_steps:
        raise InputError(late_time(what, name, "a spike", float(t.max()), duration_s, dt_s))
    tick = ticks.astype(np.int64)
    order = np.lexsort((neuron, tick, trial))
    trial, tick, neuron = trial[order], tick[order], neuron[order]
    at = first_repeat(spike_keys(trial, tick, neuron, n_steps, brain.neurons))
    if at is not None:
        raise InputError(f"{what} {name} holds the spike of {brain.root_ids[neuron[at]]} at "
                         f"trial {trial[at]}, {tick[at] * dt_s * 1000:g} ms twice; a neuron "
                         "spikes at most once a tick")
    return trial, tick, neuron


def check_trials(run: SpikeRun, other: tuple[np.ndarray, np.ndarray, np.ndarray], name: str,
                 what: str = "--compare") -> None:
    """Refuse ``other`` (:func:`read_spikes` of file ``name``) when it looks like a run of
    fewer trials than ``run``: its spikes end at a trial before ``run``'s last, and ``run``
    has spikes in a trial after it. A file of no spikes at all is compared as it is.

    The authors' layout has a row per spike and none for a trial without spikes: a file
    whose last trials were silent cannot be told from a file of fewer trials. So the file's
    trial count alone is no reason to refuse it; where ``run``'s trials after the file's
    last are silent too, the two may well be the same run, and :func:`first_divergence`
    says so. Where they fire, the runs differ there whatever the cause, and the likely one
    (a run of fewer trials) is said rather than the first spike of a trial the file lacks.

    Raises
    ------
    InputError
        One line naming the file's trials, ``run``'s and the ``--trials`` to give.
    """
    trial = other[0]
    if trial.size == 0:
        return
    held = int(trial.max()) + 1
    later = run.trial[run.trial >= held]
    if held >= run.trials or later.size == 0:
        return
    trials = "trial 0" if held == 1 else f"trials 0..{held - 1}"
    raise InputError(f"{what} {name} holds spikes of {trials} only, and this run of "
                     f"{run.trials} trials has spikes in trial {int(later.min())} too: give "
                     f"--trials {held} (or a file of all {run.trials} trials)")


@dataclass(frozen=True)
class Divergence:
    """The first spike (by trial, tick, neuron) that one run has and the other has not.

    Attributes
    ----------
    trial, tick, neuron, root_id
        Where.
    flyviz_spikes, other_spikes
        Whether each side spikes there (one does, the other not).
    margin_mv
        flyviz's ``v`` at that tick's threshold test minus ``v_th``, mV (above 0: it
        spikes); ``None`` where not computed.
    tested
        False where the neuron is refractory then (not tested: its ``v`` is frozen).
    spikes_before
        The spikes both runs share before it.
    """

    trial: int
    tick: int
    neuron: int
    root_id: int
    flyviz_spikes: bool
    other_spikes: bool
    margin_mv: float | None = None
    tested: bool = True
    spikes_before: int = 0

    def describe(self, dt_ms: float, other: str = "the other run") -> str:
        """The report: where, each side, and flyviz's distance to the threshold."""
        side = ("flyviz spikes, " + other + " does not") if self.flyviz_spikes else \
            (other + " spikes, flyviz does not")
        text = (f"first difference at trial {self.trial}, tick {self.tick} "
                f"({self.tick * dt_ms:g} ms), neuron {self.root_id} (index {self.neuron}): "
                f"{side}")
        if self.margin_mv is not None:
            if not self.tested:
                text += (f"; in flyviz's run it is refractory then (not tested; v is "
                         f"{abs(self.margin_mv):.6g} mV {'above' if self.margin_mv > 0 else 'below'}"
                         " threshold)")
            else:
                text += (f"; in flyviz's run its v is {abs(self.margin_mv):.6g} mV "
                         f"{'above' if self.margin_mv > 0 else 'below'} threshold at that tick")
        return text + f" ({self.spikes_before:,} spikes agree before it)"


def first_divergence(run: SpikeRun, other: tuple[np.ndarray, np.ndarray, np.ndarray],
                     rerun: dict[str, Any] | None = None) -> Divergence | None:
    """``None`` when ``other`` (``(trial, tick, neuron)``, as :func:`read_spikes` gives
    them) holds exactly ``run``'s spikes; else the first spike that differs.

    Parameters
    ----------
    rerun
        The keyword arguments of the :class:`~flyviz.spiking.run.SpikingSimulation` that
        replays one of ``run``'s trials (``excite``, ``silence``, ``rate``, ``seed``,
        ``input_events``, ``params``, ``input_until_s``: those ``run`` was made with):
        given, the divergence says flyviz's distance to the threshold there.
    """
    brain = run.brain
    mine = np.sort(spike_keys(run.trial, run.tick, run.neuron, run.n_steps, brain.neurons))
    theirs = np.sort(spike_keys(*other, run.n_steps, brain.neurons))
    if mine.size == theirs.size and np.array_equal(mine, theirs):
        return None
    only = np.setxor1d(mine, theirs, assume_unique=True)
    first = int(only[0])
    per_trial = run.n_steps * brain.neurons
    trial, rest = divmod(first, per_trial)
    tick, neuron = divmod(rest, brain.neurons)
    ours = bool(np.searchsorted(mine, first, side="right") - np.searchsorted(mine, first))
    before = int(np.searchsorted(mine, first))
    margin, tested = (None, True)
    if rerun is not None:
        margin_v, tested = threshold_margin(brain, trial, tick, neuron, **rerun)
        margin = margin_v * 1000.0
    return Divergence(trial, tick, neuron, int(brain.root_ids[neuron]), ours, not ours,
                      margin, tested, before)


def threshold_margin(brain: SpikingBrain, trial: int, tick: int, neuron: int,
                     **run: Any) -> tuple[float, bool]:
    """``(v - v_th, tested)`` of ``neuron`` at the threshold test of ``tick`` in trial
    ``trial`` of the run made with ``run`` (``simulate``'s keyword arguments): the trial is
    run again up to that tick and the state read (volts; ``tested`` False while refractory).
    """
    sim = SpikingSimulation(brain, trial=int(trial), **run)
    sim.advance(int(tick))
    return sim.threshold_margin(int(neuron))


# ---------------------------------------------------------------- after the input
@dataclass(frozen=True)
class SustainedActivity:
    """What fires after the Poisson input stops (:func:`sustained_activity`).

    Attributes
    ----------
    input_until_s
        When the input stops, seconds.
    neurons
        Neurons that spike after it (in any trial).
    spikes
        Their spikes after it, all trials.
    lasted_s
        The longest time from the input's end to a trial's last spike, seconds (0: none).
    firing_at_end
        Trials with a spike in the run's last :data:`END_WINDOW_S` (activity that sustains
        itself to the end of the run, at least).
    trials
        The run's trials.
    """

    input_until_s: float
    neurons: int
    spikes: int
    lasted_s: float
    firing_at_end: int
    trials: int

    def describe(self) -> str:
        """One line for a summary."""
        head = f"after the input stops at {self.input_until_s * 1000:g} ms:"
        if self.neurons == 0:
            return f"{head} no neuron fires"
        text = (f"{head} {self.neurons:,} neuron(s) keep firing ({self.spikes:,} spikes), "
                f"for up to {self.lasted_s * 1000:g} ms")
        if self.firing_at_end:
            text += (f"; still firing at the run's end in {self.firing_at_end} of "
                     f"{self.trials} trial(s): self-sustained activity, not a response")
        return text


def sustained_activity(run: SpikeRun, input_until_s: float) -> SustainedActivity:
    """How many neurons of ``run`` keep firing after ``input_until_s`` and for how long."""
    dt = run.params.dt_s
    until = int(round(float(input_until_s) / dt))
    after = run.tick >= until
    ticks, trials = run.tick[after], run.trial[after]
    last = np.full(run.trials, -1, np.int64)
    if ticks.size:
        np.maximum.at(last, trials, ticks)
    end_from = run.n_steps - max(1, int(round(END_WINDOW_S / dt)))
    lasted = (int(last.max()) - until + 1) * dt if ticks.size else 0.0
    return SustainedActivity(until * dt, int(np.unique(run.neuron[after]).size),
                             int(ticks.size), float(lasted),
                             int(((last >= end_from) & (last >= until)).sum()), int(run.trials))
