"""The spiking engine against Brian2's own output (tests/oracle/brian2_lif.py made it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flyviz import spiking
from flyviz.spiking.engine import LIFParams, propagator

pytest.importorskip("pyarrow")

ORACLE = Path(__file__).resolve().parent / "oracle" / "spiking"
BRAINS = ("small", "dense")


def _ids(path: Path) -> np.ndarray:
    return np.array([int(w) for w in path.read_text().split()], dtype=np.int64)


def _spike_set(frame: pd.DataFrame) -> set[tuple[int, int, int]]:
    ticks = np.rint(frame["t"].to_numpy() / 1e-4).astype(np.int64)
    return set(zip(frame["trial"].astype(int).tolist(), ticks.tolist(),
                   frame["flywire_id"].astype(np.int64).tolist()))


@pytest.mark.parametrize("label", BRAINS)
@pytest.mark.parametrize("experiment", ("replay", "replay_silenced"))
def test_replayed_input_gives_brian2s_spikes_spike_for_spike(label: str, experiment: str) -> None:
    folder = ORACLE / label
    brain = spiking.load_brain(folder)
    events = spiking.read_input_spikes(folder / "input_spikes.csv", brain, 1e-4)
    silence = brain.indices_of(_ids(folder / "silenced.txt")) \
        if experiment == "replay_silenced" else None
    run = spiking.simulate(brain, input_events=events, silence=silence, duration_s=0.5)
    ours = _spike_set(run.to_frame())
    theirs = _spike_set(pd.read_parquet(folder / f"brian2_{experiment}.parquet"))
    assert len(theirs) > 200  # the recurrent network fires, not only the driven neurons
    driven = set(brain.root_ids[np.unique(events[1])].tolist())
    assert {s[2] for s in theirs} - driven  # and spikes spread beyond them
    # Same tick, same neuron, every spike (the >= 99.9 % of the issue, met exactly: both run
    # the same IEEE float64 operations in the same order)
    assert ours == theirs


def test_silencing_removes_the_silenced_neurons_influence_not_their_spikes() -> None:
    folder = ORACLE / "small"
    brain = spiking.load_brain(folder)
    events = spiking.read_input_spikes(folder / "input_spikes.csv", brain, 1e-4)
    silenced = brain.indices_of(_ids(folder / "silenced.txt"))
    plain = spiking.simulate(brain, input_events=events, duration_s=0.5)
    quiet = spiking.simulate(brain, input_events=events, silence=silenced, duration_s=0.5)
    # as Brian2: the rows of a silenced neuron's synapses are zeroed, it still fires
    assert not np.array_equal(plain.neuron, quiet.neuron)
    assert quiet.rates()[silenced].sum() > 0
    # silencing every neuron leaves only the driven ones firing
    silent = spiking.simulate(brain, input_events=events, duration_s=0.5,
                              silence=np.arange(brain.neurons))
    assert set(np.unique(silent.neuron).tolist()) <= set(np.unique(events[1]).tolist())


@pytest.mark.parametrize("label", BRAINS)
def test_own_poisson_input_gives_brian2s_rates(label: str) -> None:
    folder = ORACLE / label
    brain = spiking.load_brain(folder)
    excited = brain.indices_of(_ids(folder / "excited.txt"))
    run = spiking.simulate(brain, excite=excited, rate=150.0, duration_s=1.0, trials=30,
                           seed=5)
    theirs = pd.read_parquet(folder / "brian2_poisson.parquet")
    assert theirs["trial"].nunique() == 30
    their_rates = np.bincount(brain.indices_of(theirs["flywire_id"].to_numpy()),
                              minlength=brain.neurons) / 30.0
    ours = run.rates()
    fired = (ours > 0) | (their_rates > 0)
    assert fired.sum() > 30
    r = np.corrcoef(ours[fired], their_rates[fired])[0, 1]
    assert r >= 0.99, r
    # the excited neurons fire at about the Poisson rate (each event drives one spike)
    assert np.all(np.abs(ours[excited] - 150.0) < 25.0)


def test_refractory_period_freezes_the_neuron_and_drops_its_input() -> None:
    # one driven neuron (no refractory period, like every Poisson target) onto a follower
    # that one of its spikes makes fire within a few ticks
    brain = _two_neurons(count=2000)
    burst = spiking.simulate(brain, input_events=(np.arange(100, 106), np.zeros(6, np.int64)),
                             duration_s=0.02)
    # an event is felt at the next tick's state update and threshold; an event at the tick
    # the neuron fires is lost (Brian2's not_refractory is False until the next state update)
    assert burst.tick[burst.neuron == 0].tolist() == [101, 103, 105]
    run = spiking.simulate(brain, input_events=(np.array([100, 110]), np.zeros(2, np.int64)),
                           duration_s=0.05)
    assert run.tick[run.neuron == 0].tolist() == [101, 111]
    follow = run.tick[run.neuron == 1]
    # the follower's g jumps 18 ticks after each driver spike (1.8 ms): at 119 it fires, then
    # it is frozen for 22 ticks (2.2 ms), so the input reaching it at 129 is dropped, not kept
    assert follow.size == 1 and 119 < follow[0] < 129
    far = spiking.simulate(brain, input_events=(np.array([100, 140]), np.zeros(2, np.int64)),
                           duration_s=0.05)
    assert np.count_nonzero(far.neuron == 1) == 2  # 40 ticks apart: both get through


def test_brian2s_propagator_constants() -> None:
    info = json.loads((ORACLE / "versions.json").read_text())
    assert "exp(-dt*int(not_refractory)/tau)" in info["state_update"]
    prop = propagator(LIFParams())
    assert prop.gg == np.exp(-1e-4 / 0.005)
    assert prop.v_rest == -52 * 0.001  # the rest state is a fixed point of the update
    assert LIFParams().poisson_weight == info["poisson_weight_mV"] * 0.001
    assert LIFParams().delay_ticks == 18 and LIFParams().refractory_ticks == 22


def _two_neurons(count: int) -> spiking.SpikingBrain:
    return spiking.SpikingBrain(name="pair", root_ids=np.array([11, 22], dtype=np.int64),
                                indptr=np.array([0, 1, 1], dtype=np.int64),
                                post=np.array([1], dtype=np.int32),
                                counts=np.array([float(count)]))


def test_rates_do_not_depend_on_the_thread_count_or_the_rest_skipping() -> None:
    folder = ORACLE / "dense"
    brain = spiking.load_brain(folder)
    excited = brain.indices_of(_ids(folder / "excited.txt"))
    one = spiking.simulate(brain, excite=excited, duration_s=0.3, trials=3, seed=9, threads=1)
    two = spiking.simulate(brain, excite=excited, duration_s=0.3, trials=3, seed=9, threads=2)
    assert np.array_equal(one.tick, two.tick) and np.array_equal(one.neuron, two.neuron)
    assert np.array_equal(one.trial, two.trial)
    other = spiking.simulate(brain, excite=excited, duration_s=0.3, trials=3, seed=10)
    assert not np.array_equal(one.neuron, other.neuron)  # the seed draws new input
