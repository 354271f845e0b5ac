"""The spiking engine against Brian2's own output (tests/oracle/brian2_lif.py made it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flyviz import spiking
from flyviz.spiking.engine import LIFParams, _refractory_state_is_fixed, propagator

pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

ORACLE = Path(__file__).resolve().parent / "oracle" / "spiking"
BRAINS = ("small", "dense")


def _ids(path: Path) -> np.ndarray:
    return np.array([int(w) for w in path.read_text().split()], dtype=np.int64)


def _spike_set(frame: pd.DataFrame) -> set[tuple[int, int, int]]:
    ticks = np.rint(frame["t"].to_numpy() / 1e-4).astype(np.int64)
    return set(zip(frame["trial"].astype(int).tolist(), ticks.tolist(),
                   frame["flywire_id"].astype(np.int64).tolist()))


@pytest.mark.slow
@pytest.mark.parametrize("label", BRAINS)
@pytest.mark.parametrize("experiment", ("replay", "replay_silenced"))
def test_replayed_input_gives_brian2s_spikes_spike_for_spike(label: str, experiment: str,
                                                            block_shift: int) -> None:
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
    """Our Poisson input gives Brian2's rates, and its targets answer from Brian2's lag on.
    Breaks it catches: a delay one tick longer or shorter than ``t_dly`` (the rates alone
    pass it; the refractory period is the next test's)."""
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
    # The rates alone pass an engine that delays a spike one tick more or less than Brian2:
    # the excited neurons' targets answer their spikes from the same lag on in both.
    their_ticks = np.rint(theirs["t"].to_numpy() / 1e-4).astype(np.int64)
    their_neurons = brain.indices_of(theirs["flywire_id"].to_numpy())
    assert _response_onset(brain, excited, run.tick, run.neuron, run.trial) == \
        _response_onset(brain, excited, their_ticks, their_neurons,
                        theirs["trial"].to_numpy()) == LIFParams().delay_ticks + 1


def _response_onset(brain: spiking.SpikingBrain, excited: np.ndarray, tick: np.ndarray,
                    neuron: np.ndarray, trial: np.ndarray, strongest: int = 5) -> int:
    """The first lag (ticks) at which the ``strongest`` excitatory targets of each excited
    neuron fire well above chance after its spike: the pooled cross-correlogram's step (the
    synaptic delay and the tick the input takes to be felt)."""
    pairs = []
    for i in excited.tolist():
        rows = np.arange(brain.indptr[i], brain.indptr[i + 1])
        rows = rows[~np.isin(brain.post[rows], excited) & (brain.counts[rows] > 0)]
        best = rows[np.argsort(-brain.counts[rows], kind="stable")[:strongest]]
        pairs += [(i, int(j)) for j in brain.post[best]]
    n, span = brain.neurons, int(tick.max(initial=0)) + 64
    post_keys = np.unique((trial.astype(np.int64) * n + neuron) * span + tick)
    base = []
    for i, j in pairs:
        mine = neuron == i
        base.append((trial[mine].astype(np.int64) * n + j) * span + tick[mine])
    queries = np.sort(np.concatenate(base))      # sorted: each search walks the keys once
    counts = []
    for lag in range(41):
        at = np.minimum(np.searchsorted(post_keys, queries + lag), post_keys.size - 1)
        counts.append(int((post_keys[at] == queries + lag).sum()))
    chance = float(np.median(counts[:12]))
    return next(lag for lag, c in enumerate(counts) if c > 1.4 * chance)


def test_a_follower_driven_without_pause_fires_as_often_as_its_refractory_period_allows():
    """A Poisson-driven neuron (2 kHz) onto a follower that each of its spikes makes fire: the
    follower fires again as soon as its refractory period and the time one spike takes to
    make it fire allow, so its shortest interval between spikes is exactly the refractory
    ticks plus that latency. Breaks it catches (that the rates of the test above pass): the
    engine freezing a neuron one tick more or less than ``t_rfc``, or delaying a spike one
    tick more or less than ``t_dly``."""
    params = LIFParams()
    brain = _two_neurons(count=20000)
    single = spiking.simulate(brain, input_events=(np.array([100]), np.zeros(1, np.int64)),
                              duration_s=0.03)
    driver, follower = (single.tick[single.neuron == k] for k in (0, 1))
    latency = int(follower[0] - driver[0]) - params.delay_ticks   # after the delay
    assert latency > 0
    run = spiking.simulate(brain, excite=[0], rate=2000.0, duration_s=1.0, trials=2, seed=1)
    for k in range(2):
        fires = run.tick[(run.neuron == 1) & (run.trial == k)]
        assert np.diff(fires).min() == params.refractory_ticks + latency


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


def _reference_stepping(indptr: np.ndarray, post: np.ndarray, weight: np.ndarray,
                        rfc: np.ndarray, silenced: np.ndarray, params: LIFParams, n_steps: int,
                        ev_tick: np.ndarray, ev_neuron: np.ndarray
                        ) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray]:
    """Brian2's schedule written out tick by tick over every neuron (no blocks, windows,
    skipping or flushing): state update, threshold, synapses (spike by spike, synapse by
    synapse, dropped where refractory), Poisson events, reset."""
    prop = propagator(params)
    n = rfc.shape[0]
    v = np.full(n, params.v_0 * 0.001)
    g = np.zeros(n)
    last = np.full(n, -10**9, dtype=np.int64)
    fired: list[np.ndarray] = []
    out = []
    delay = params.delay_ticks
    for k in range(n_steps):
        free = (k - last) >= rfc
        g_new = prop.gg * g
        v_new = prop.c0 + ((prop.gv * g) + (prop.vv * v))
        g = np.where(free, g_new, g)
        v = np.where(free, v_new, v)
        spiking_now = np.flatnonzero(free & (v > params.v_th * 0.001))
        last[spiking_now] = k
        free[spiking_now] = False
        fired.append(spiking_now)
        if k >= delay:
            for pre in fired[k - delay]:
                if silenced[pre]:
                    continue
                for e in range(indptr[pre], indptr[pre + 1]):
                    if free[post[e]]:
                        g[post[e]] += weight[e]
        for j in ev_neuron[ev_tick == k]:
            if free[j]:
                v[j] += params.poisson_weight
        v[spiking_now] = params.v_rst * 0.001
        g[spiking_now] = 0.0
        out.extend((k, int(i)) for i in spiking_now)
    return out, v, g


@pytest.fixture(params=[9, 10], ids=["blocks of 512", "blocks of 1024"])
def block_shift(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The engine's blocks of the update, both sizes whatever this CPU's L1 cache."""
    from flyviz.spiking import engine

    monkeypatch.setattr(engine, "block_shift_here", lambda: request.param)
    return int(request.param)


def test_the_block_follows_the_l1_data_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from flyviz.spiking import engine

    for l1, shift in [(32 << 10, 9), (48 << 10, 10), (128 << 10, 10), (None, 9)]:
        monkeypatch.setattr(engine, "l1_data_cache_bytes", lambda l1=l1: l1)
        engine.block_shift_here.cache_clear()
        assert engine.block_shift_here() == shift
    engine.block_shift_here.cache_clear()
    with pytest.raises(ValueError, match="not one of"):
        engine.EngineTrial(np.zeros(2, np.int64), np.zeros(0, np.int32), np.zeros(0),
                           np.zeros(1, np.int64), np.zeros(1, bool), LIFParams(), 1e-30,
                           block_shift=8)


def test_the_state_the_vector_update_reads_begins_on_a_cache_line() -> None:
    from flyviz.spiking import engine

    # numpy aligns to 16 bytes: of 40 arrays of odd sizes, some would begin off a line
    for size in range(1, 41):
        for dtype, fill in [(np.float64, -0.052), (np.int64, 7)]:
            array = engine.line_aligned(size * 3, dtype, fill)
            assert array.ctypes.data % engine.CACHE_LINE == 0
            assert array.dtype == dtype and array.shape == (size * 3,)
            assert np.all(array == fill)
    rfc = np.array([0, 3, 5], np.int64)
    trial = engine.EngineTrial(np.zeros(4, np.int64), np.zeros(0, np.int32), np.zeros(0), rfc,
                               np.zeros(3, bool), LIFParams(), 1e-30, v_start=-0.05)
    for name in ("_v", "_g", "_until", "_hold"):
        assert getattr(trial, name).ctypes.data % engine.CACHE_LINE == 0, name
    width = 1 << trial.block_shift
    assert trial._v.shape == (width,) and np.all(trial._v[:3] == -0.05)
    assert np.all(trial._v[3:] == propagator(LIFParams()).v_rest)
    assert np.all(trial._g == 0) and list(trial._hold[:3]) == [1, 3, 5]
    assert np.all(trial._until[3:] == np.iinfo(np.int64).max)


@pytest.mark.parametrize("text, size", [("48K\n", 48 << 10), ("32K", 32 << 10),
                                         ("1M", 1 << 20), ("lots", None), ("", None)])
def test_the_l1_data_cache_is_read_from_sys_where_sysconf_does_not_say(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, size: int | None) -> None:
    from flyviz.spiking import engine

    def no_sysconf(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(engine.os, "sysconf", no_sysconf)
    monkeypatch.setattr(engine.sys, "platform", "linux")
    (tmp_path / "size").write_text(text)
    monkeypatch.setattr(engine, "_L1_SIZE_FILE", str(tmp_path / "size"))
    assert engine.l1_data_cache_bytes() == size
    monkeypatch.setattr(engine, "_L1_SIZE_FILE", str(tmp_path / "missing"))
    assert engine.l1_data_cache_bytes() is None


@pytest.mark.parametrize("case", range(6))
def test_engine_equals_a_plain_tick_by_tick_stepping_on_random_brains(
        case: int, block_shift: int) -> None:
    _check_against_plain_stepping(case)


@pytest.mark.parametrize("v_rst", [-58.0, -47.5])
def test_engine_equals_a_plain_stepping_with_a_reset_away_from_rest(v_rst: float) -> None:
    # with the authors' constants the reset is the rest state, which the update leaves
    # unchanged: a refractory neuron updated by mistake would still sit at v_rst. Reset
    # below rest and between rest and threshold, a neuron left to update while refractory
    # drifts towards v_0, and its next spike, v and g come out different. These resets take
    # the update with the refractory test; the authors' (every other case here, and the
    # stored Brian2 outputs) the update without it.
    params = LIFParams().with_(v_rst=v_rst)
    prop = propagator(params)
    assert not _refractory_state_is_fixed(prop.gv, prop.vv, prop.c0, params.v_rst * 0.001)
    _check_against_plain_stepping(0, v_rst=v_rst)


def test_the_update_skips_the_refractory_test_only_where_the_reset_is_its_fixed_point() -> None:
    # a refractory neuron sits at (v_rst, +0); updated as if free it stays there only where
    # v_rst is the update's fixed point for g = 0: the rest state, as with the authors' constants
    params = LIFParams()
    prop = propagator(params)
    assert params.v_rst == params.v_0 and prop.v_rest == params.v_0 * 0.001
    assert _refractory_state_is_fixed(prop.gv, prop.vv, prop.c0, params.v_rst * 0.001)
    assert _refractory_state_is_fixed(prop.gv, prop.vv, prop.c0, prop.v_rest)
    # what counts is the rounded arithmetic, not equality with rest: a few ulps from rest the
    # update rounds back to the same value (a fixed point too), a mV away it moves
    near = np.nextafter(np.nextafter(prop.v_rest, 0.0), 0.0)
    assert prop.c0 + ((prop.gv * 0.0) + (prop.vv * near)) == near
    assert _refractory_state_is_fixed(prop.gv, prop.vv, prop.c0, near)
    assert not _refractory_state_is_fixed(prop.gv, prop.vv, prop.c0, prop.v_rest - 0.001)
    # with another leak the rest moves, and the authors' reset is no longer it
    leaky = propagator(params.with_(v_0=-60.0))
    assert not _refractory_state_is_fixed(leaky.gv, leaky.vv, leaky.c0, params.v_rst * 0.001)
    assert _refractory_state_is_fixed(leaky.gv, leaky.vv, leaky.c0, leaky.v_rest)


@pytest.mark.parametrize("case", [0, 3, 5])
@pytest.mark.parametrize("sparse_most", [-1, 512])
def test_engine_equals_a_plain_stepping_with_blocks_updated_whole_or_one_by_one(
        monkeypatch, case: int, sparse_most: int, block_shift: int) -> None:
    # a block with few neurons away from rest updates only those, listing each neuron input
    # reaches (the default, SPARSE_MOST, switches between the two as activity moves). Never
    # (-1: not even a block at rest) and always (512 of each 512 neurons: every block, however
    # busy, neuron by neuron from its list) give the same spikes, v and g as the plain
    # stepping, in blocks of either size: so a neuron left off the list, or one updated
    # twice, would show. Case 5 has no delay (windows of one tick, and spikes reach their
    # targets outside them: each block is listed again from its whole state).
    from flyviz.spiking import engine

    monkeypatch.setattr(engine, "SPARSE_MOST", sparse_most)
    _check_against_plain_stepping(case)
    _check_against_plain_stepping(case, v_rst=-47.5)


@pytest.mark.parametrize("case", [0, 3, 5])
@pytest.mark.parametrize("chunk, refill", [(16, 4), (64, 16), (200, 150)])
def test_engine_equals_a_plain_stepping_with_its_events_in_small_chunks(
        monkeypatch, case: int, chunk: int, refill: int) -> None:
    # each window's synaptic events are sorted into chains of chunks, one chain per block;
    # with chunks of a few events, rows (up to 60 events here) take the event-by-event sort
    # (16), both ways (64), or replace chunks at most checks (200, replaced below 150 left),
    # and a tick's events onto a block run on over two or more chunks
    from flyviz.spiking import engine

    monkeypatch.setattr(engine, "STAGE_CHUNK", chunk)
    monkeypatch.setattr(engine, "STAGE_REFILL", refill)
    _check_against_plain_stepping(case)


@pytest.mark.parametrize("chunk, refill", [(16, 4), (64, 16), (200, 150), (1 << 13, 2048)])
def test_the_sort_chains_each_blocks_events_in_arrival_order_in_chunks_it_never_overfills(
        chunk: int, refill: int, block_shift: int) -> None:
    from flyviz.spiking.engine import STAGE_SKEW, _stage, pack_synapses

    rng = np.random.default_rng(9)
    n = 5 << block_shift
    degree = rng.integers(0, 300, n)
    degree[7] = 5000  # a row longer than any chunk
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    post = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    post[indptr[7]:indptr[8]] = rng.integers(0, 1 << block_shift, degree[7])  # onto block 0
    codes, shift, _ = pack_synapses(post, rng.choice([0.25, -0.5, 1.0], post.size))
    silenced = np.zeros(n, dtype=bool)
    silenced[rng.choice(n, 50, replace=False)] = True
    silenced[7] = False
    span, n_blocks, stride = 6, 5, chunk + STAGE_SKEW
    spikes = np.sort(rng.choice(n, 300, replace=False)).astype(np.int32)
    spikes[150] = 7
    arrive_at = np.array([0, 40, 40, 120, 200, 260, 300], dtype=np.int64)
    # each tick's spikes in index order, as the engine keeps them
    for t in range(span):
        spikes[arrive_at[t]:arrive_at[t + 1]].sort()
    fill = np.zeros(2 * n_blocks, dtype=np.int64)
    marks = np.zeros(n_blocks * (span + 1), dtype=np.int64)
    link = np.full(2 * 4000, -7, dtype=np.int64)
    stage = np.zeros(4000 * stride, dtype=codes.dtype)
    used = _stage(0, span, arrive_at, spikes, indptr, codes, (1 << shift) - 1, silenced,
                  n_blocks, fill, marks, link, stage, chunk, refill, stride, block_shift)
    staged = sum(int(degree[s]) for s in spikes if not silenced[s])
    assert used <= n_blocks + staged // (chunk - refill) + 1  # the stage's room, as sized
    assert used > n_blocks or chunk > staged  # chunks were replaced
    for b in range(n_blocks):
        # each tick's events onto block b, walked from mark to mark as the delivery walks them
        c = b
        for t in range(span):
            mark, end, got = marks[t * n_blocks + b], marks[(t + 1) * n_blocks + b], []
            while mark != end:
                stop = min(end, link[2 * c + 1])
                assert c * stride <= mark <= stop <= c * stride + chunk  # inside its chunk
                got.extend(stage[mark:stop].tolist())
                if stop == end:
                    break
                c = int(link[2 * c])
                mark = c * stride
            want = [int(code) for s in spikes[arrive_at[t]:arrive_at[t + 1]] if not silenced[s]
                    for code in codes[indptr[s]:indptr[s + 1]]
                    if (int(code) & ((1 << shift) - 1)) >> block_shift == b]
            assert got == want, (b, t)


def test_a_threshold_below_rest_fires_every_neuron_as_the_plain_stepping_does(
        block_shift: int) -> None:
    # rest is then no quiet state: a block at rest must not be skipped, nor its neurons at
    # rest left out of a one-by-one update; every free neuron fires
    from flyviz.spiking.engine import simulate_ticks

    rng = np.random.default_rng(7)
    n = 1100
    degree = rng.integers(0, 20, n)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    post = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    weight = rng.choice([-1.0, 1.0], post.size) * 0.0004
    params = LIFParams(v_th=-52.5)
    rfc = np.full(n, params.refractory_ticks, dtype=np.int64)
    silenced = np.zeros(n, dtype=bool)
    ev_tick, ev_neuron = np.arange(0, 200, 10), np.arange(20)
    (ticks, neurons, v, g), = simulate_ticks(indptr, post, weight, rfc, silenced, params, 200,
                                             [(ev_tick, ev_neuron)], threads=1,
                                             with_state=True)
    expected, v_ref, g_ref = _reference_stepping(indptr, post, weight, rfc, silenced, params,
                                                 200, ev_tick, ev_neuron)
    assert np.count_nonzero(ticks == 0) == n  # every neuron at its first tick
    assert list(zip(ticks.tolist(), neurons.tolist())) == expected
    assert np.array_equal(v, v_ref) and np.array_equal(g, g_ref)


def test_input_events_outside_the_run_are_left_out_whatever_their_order() -> None:
    from flyviz.spiking.engine import simulate_ticks

    rng = np.random.default_rng(11)
    brain = _random_brain(11, n=300)
    n, indptr, post = brain.neurons, brain.indptr, brain.post
    weight = brain.counts * brain.w_syn * 0.001
    params, n_steps = LIFParams(), 150
    rfc = np.full(n, params.refractory_ticks, dtype=np.int64)
    silenced = np.zeros(n, dtype=bool)
    inside_tick = rng.integers(0, n_steps, 3000)
    inside_neuron = rng.integers(0, 40, 3000)
    inside = np.unique(inside_tick * n + inside_neuron)
    inside_tick, inside_neuron = inside // n, inside % n
    # events before the run and at or after its end, shuffled among those inside it
    tick = np.concatenate([inside_tick, [-5, -1, n_steps, n_steps + 3, 10 ** 6]])
    neuron = np.concatenate([inside_neuron, [1, 2, 3, 4, 5]])
    order = rng.permutation(tick.size)
    (ticks, neurons), (ticks_in, neurons_in) = simulate_ticks(
        indptr, post, weight, rfc, silenced, params, n_steps,
        [(tick[order], neuron[order]), (inside_tick, inside_neuron)], threads=1)
    assert ticks_in.size > 0
    assert np.array_equal(ticks, ticks_in) and np.array_equal(neurons, neurons_in)
    expected, _, _ = _reference_stepping(indptr, post, weight, rfc, silenced, params, n_steps,
                                         inside_tick, inside_neuron)
    assert list(zip(ticks_in.tolist(), neurons_in.tolist())) == expected


def test_each_block_counts_its_neurons_away_from_rest_and_lists_them_where_few(
        block_shift: int) -> None:
    from flyviz.spiking import engine

    # 4 blocks; block 0 takes a steady drive, blocks 1-3 a few inputs
    width = 1 << block_shift
    n = 4 * width
    rng = np.random.default_rng(3)
    degree = np.zeros(n, dtype=np.int64)
    degree[:20] = 200  # the driven neurons onto block 0
    degree[20:40] = 1  # and 20 of block 0's others onto one of blocks 1-3 each
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    post = rng.integers(0, 512, int(indptr[-1])).astype(np.int32)  # block 0, either size
    post[indptr[20]:] = rng.integers(width, n, int(indptr[-1] - indptr[20]))
    weight = np.full(post.size, 0.5e-3)
    params = LIFParams()
    trial = engine.EngineTrial(indptr, post, weight, np.full(n, params.refractory_ticks),
                               np.zeros(n, dtype=bool), params, engine.G_FLUSH)
    ev_tick = np.repeat(np.arange(0, 400, 2), 20)
    ev_neuron = np.tile(np.arange(20), 200)
    trial.advance(400, ev_tick, ev_neuron)
    busy = (trial.v != propagator(params).v_rest) | (trial.g != 0)
    counts = busy.reshape(4, -1).sum(axis=1)
    # the engine's own count of each block, and its list of the quiet ones, are the state's
    assert trial.block_shift == block_shift
    assert counts[0] > engine.SPARSE_MOST * width // 512 >= counts[1:].max() > 0, counts
    assert trial._busy_n.tolist() == counts.tolist()
    for b in range(1, 4):
        listed = np.sort(trial._busy[b, :counts[b]])
        assert listed.tolist() == np.flatnonzero(busy.reshape(4, -1)[b]).tolist()


def test_engine_equals_a_plain_stepping_in_wide_words_and_a_growing_stage(monkeypatch) -> None:
    from functools import partial

    from flyviz.spiking import engine

    # synapses packed in 64-bit words (a graph whose targets and distinct weights need more
    # than 32 bits), and a stage that starts too small for a window's events and grows
    words = []
    monkeypatch.setattr(engine, "pack_synapses", partial(engine.pack_synapses, word=np.uint64))
    monkeypatch.setattr(engine, "STAGE_START", 4)
    real_trial = engine.EngineTrial

    class Watched(real_trial):  # type: ignore[misc, valid-type]
        def advance_counted(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = super().advance_counted(*args, **kwargs)
            words.append((self._graph[1].dtype, self._stage.shape[0]))
            return out

    monkeypatch.setattr(engine, "EngineTrial", Watched)
    _check_against_plain_stepping(0)
    assert words and all(dtype == np.uint64 for dtype, _ in words)
    assert max(size for _, size in words) > 4


def test_packed_synapses_give_back_every_target_and_weight_bit_for_bit() -> None:
    from flyviz.spiking.engine import pack_synapses

    rng = np.random.default_rng(3)
    post = rng.integers(0, 138_639, 20_000).astype(np.int32)
    weight = rng.integers(-40, 40, post.size) * 0.275e-3
    weight[:3] = (0.0, -0.0, 1e-300)  # told apart by their bits, not compared as floats
    codes, shift, table = pack_synapses(post, weight)
    assert codes.dtype == np.uint32  # 18 bits of target, 82 distinct weights in the other 14
    back = table[(codes >> np.uint32(shift)).astype(np.int64)]
    assert np.array_equal((codes & np.uint32((1 << shift) - 1)).astype(np.int64), post)
    assert np.array_equal(back.view(np.int64), weight.view(np.int64))
    assert pack_synapses(post, weight)[0] is codes  # kept for the same arrays
    assert pack_synapses(post, weight.copy())[0] is not codes
    # more distinct weights (20,000) than the 14 bits the targets leave: 64-bit words
    many = rng.random(post.size)
    wide, shift, table = pack_synapses(post, many)
    assert wide.dtype == np.uint64
    assert np.array_equal(table[(wide >> np.uint64(shift)).astype(np.int64)], many)
    with pytest.raises(ValueError, match="32-bit"):
        pack_synapses(post, many.copy(), word=np.uint32)


def _check_against_plain_stepping(case: int, v_rst: float | None = None) -> None:
    from flyviz.spiking.engine import simulate_ticks

    rng = np.random.default_rng(40 + case)
    # more neurons than one block of the engine, so that rows span several blocks; repeated
    # (pre, post) pairs, so that one target takes several inputs from one spike
    n = int(rng.integers(600, 1500))
    degree = rng.integers(0, 60, n)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    post = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    sign = np.where(rng.random(n) < 0.8, 1.0, -1.0)
    weight = np.repeat(sign, degree) * rng.zipf(1.8, post.size).clip(max=80) * 0.00035
    params = LIFParams(t_dly=(1.8, 0.7, 0.1, 2.5, 1.8, 0.0)[case],
                       t_rfc=(2.2, 2.2, 0.5, 3.1, 0.0, 2.2)[case])
    if v_rst is not None:
        params = params.with_(v_rst=v_rst)
    driven = rng.choice(n, 12, replace=False)
    rfc = np.full(n, params.refractory_ticks, dtype=np.int64)
    rfc[driven] = 0
    silenced = rng.random(n) < 0.05
    n_steps = 900
    ev_tick = np.sort(rng.integers(0, n_steps, 500))
    ev_neuron = rng.choice(driven, ev_tick.size)
    ev_tick = np.concatenate([ev_tick, ev_tick[:20]])  # repeated events: one tick, one neuron
    ev_neuron = np.concatenate([ev_neuron, ev_neuron[:20]])
    order = np.lexsort((ev_neuron, ev_tick))
    ev_tick, ev_neuron = ev_tick[order], ev_neuron[order]
    (ticks, neurons, v, g), = simulate_ticks(indptr, post, weight, rfc, silenced, params,
                                             n_steps, [(ev_tick, ev_neuron)], threads=1,
                                             with_state=True)
    expected, v_ref, g_ref = _reference_stepping(indptr, post, weight, rfc, silenced, params,
                                                 n_steps, ev_tick, ev_neuron)
    assert len(expected) > 400  # recurrent activity, not only the driven neurons
    assert len({i for _, i in expected} - set(driven.tolist())) > 20
    assert list(zip(ticks.tolist(), neurons.tolist())) == expected
    # and the state, bit for bit (spikes alone would hide an error in the last bit); the
    # engine sets a vanishing g of a neuron at rest to 0, which changes no later result
    assert np.count_nonzero(v_ref != propagator(params).v_rest) > n // 4
    flushed = (v_ref == propagator(params).v_rest) & (np.abs(g_ref) < 1e-30)
    assert np.array_equal(v, v_ref)
    assert np.array_equal(g, np.where(flushed, 0.0, g_ref))


def _random_brain(seed: int, n: int = 1300) -> spiking.SpikingBrain:
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, 60, n)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    post = rng.integers(0, n, int(indptr[-1])).astype(np.int32)
    sign = np.where(rng.random(n) < 0.8, 1.0, -1.0)
    counts = np.repeat(sign, degree) * rng.zipf(1.8, post.size).clip(max=80)
    return spiking.SpikingBrain(name="random", root_ids=np.arange(n, dtype=np.int64) + 10**6,
                                indptr=indptr, post=post, counts=counts.astype(np.float64),
                                w_syn=1.3)


@pytest.mark.parametrize("cuts", [(1, 17, 18, 19, 100, 745), (100,) * 9 + (100,),
                                  (999, 1, 1000 - 2, 2)])
def test_a_run_stepped_in_pieces_gives_the_spikes_of_one_whole_run(cuts: tuple[int, ...]) -> None:
    from flyviz.spiking import SpikingSimulation

    brain = _random_brain(7)
    excite, silence = np.arange(0, 40, 3), np.arange(500, 560)
    whole = spiking.simulate(brain, excite=excite, silence=silence, rate=300.0, seed=11,
                             duration_s=sum(cuts) * 1e-4, threads=1)
    assert whole.neuron.size > 500 and np.setdiff1d(whole.neuron, excite).size > 50
    sim = SpikingSimulation(brain, excite=excite, silence=silence, rate=300.0, seed=11)
    pieces = [sim.advance(n) for n in cuts]
    # every piece holds the spikes of its own ticks, and together they are the whole run's
    # (the Poisson input, the state and the spikes still on their way all carry over)
    at = 0
    for n, (ticks, _) in zip(cuts, pieces):
        assert ticks.size == 0 or (ticks.min() >= at and ticks.max() < at + n)
        at += n
    assert np.array_equal(np.concatenate([p[0] for p in pieces]), whole.tick)
    assert np.array_equal(np.concatenate([p[1] for p in pieces]), whole.neuron)
    assert sim.tick == sum(cuts) and sim.time_s == pytest.approx(whole.duration_s)
    # and the state too, against one call of the stepping object
    once = SpikingSimulation(brain, excite=excite, silence=silence, rate=300.0, seed=11)
    once.advance(sum(cuts))
    assert np.array_equal(once.v, sim.v)
    other = SpikingSimulation(brain, excite=excite, silence=silence, rate=300.0, seed=12)
    assert not np.array_equal(other.advance(sum(cuts))[1], whole.neuron)


def test_each_calls_counted_spikes_stay_as_returned_through_the_calls_after_it() -> None:
    """simulate_ticks keeps each call's spikes as the view advance_counted returns and copies
    them once, at the run's end: no later call may write where an earlier one's view reads,
    whether its buffer had room left or had to grow."""
    from flyviz.spiking import engine
    from flyviz.spiking.run import poisson_events

    brain = _random_brain(7)
    params = spiking.LIFParams()
    post, weight, smallest = brain.grouped_rows(params.w_syn * 0.001)
    rfc = np.full(brain.neurons, params.refractory_ticks)
    silenced = np.zeros(brain.neurons, bool)
    n_steps = 2_000
    tk, nr = poisson_events(np.arange(0, 40, 3), 300.0, n_steps, params.dt_s,
                            np.random.default_rng(11))
    trial = engine.EngineTrial(brain.indptr, post, weight, rfc, silenced, params,
                               engine.flush_threshold(smallest))
    # calls of a few ticks (room left over) and of many (the buffer grows within the call)
    cuts = [3, 1, 40, 700, 2, 18, 1, 1_235]
    views, copies = [], []
    at = 0
    for n in cuts:
        a, b = np.searchsorted(tk, (at, at + n))
        per_tick, neurons = trial.advance_counted(n, tk[a:b], nr[a:b])
        assert per_tick.shape == (n,) and per_tick.sum() == neurons.size
        views.append((per_tick, neurons))
        copies.append((per_tick.copy(), neurons.copy()))
        at += n
    for (per_tick, neurons), (per_tick_then, neurons_then) in zip(views, copies):
        assert np.array_equal(per_tick, per_tick_then)
        assert np.array_equal(neurons, neurons_then)
    # and they are the run's spikes: advance's, and a whole run's of simulate_ticks
    ticks = np.repeat(np.arange(n_steps), np.concatenate([c[0] for c in copies]))
    neurons = np.concatenate([c[1] for c in copies])
    assert neurons.size > 300
    (whole_ticks, whole_neurons), = engine.simulate_ticks(
        brain.indptr, post, weight, rfc, silenced, params, n_steps, [(tk, nr)], threads=1,
        rows_grouped=True, smallest_weight=smallest)
    assert np.array_equal(ticks, whole_ticks) and np.array_equal(neurons, whole_neurons)
    assert whole_ticks.dtype == whole_neurons.dtype == np.int64


def test_poisson_input_is_the_same_however_its_ticks_are_asked_for() -> None:
    from flyviz.spiking.run import POISSON_CHUNK, PoissonStream

    targets = np.arange(5, 25)
    whole = PoissonStream(targets, 0.3, np.random.default_rng(2)).events(0, 2 * POISSON_CHUNK + 7)
    stream = PoissonStream(targets, 0.3, np.random.default_rng(2))
    cuts = [0, 3, POISSON_CHUNK - 1, POISSON_CHUNK, POISSON_CHUNK + 1, 2 * POISSON_CHUNK,
            2 * POISSON_CHUNK + 7]
    parts = [stream.events(a, b) for a, b in zip(cuts, cuts[1:])]
    for (a, b), (tk, _) in zip(zip(cuts, cuts[1:]), parts):
        assert tk.size and tk.min() >= a and tk.max() < b
    assert np.array_equal(np.concatenate([p[0] for p in parts]), whole[0])
    assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])
    # one Bernoulli(p) draw per target and tick: never two in one tick, about p of them
    pairs = whole[0] * 100 + whole[1]
    assert np.unique(pairs).size == pairs.size
    assert abs(pairs.size / (targets.size * (2 * POISSON_CHUNK + 7)) - 0.3) < 0.02


@pytest.mark.parametrize("p", [1e-25, 1e-6, 0.015, 0.2999, 0.3, 0.5, 1.0])
def test_geometric_gaps_are_numpys_geometric_draws_of_the_same_stream(p: float) -> None:
    from flyviz.spiking.run import geometric_gaps

    # the same numbers, and the stream left where numpy's own draws leave it
    mine, numpys = np.random.default_rng(11), np.random.default_rng(11)
    assert np.array_equal(geometric_gaps(mine, p, (30, 70)), numpys.geometric(p, (30, 70)))
    assert mine.integers(1 << 62) == numpys.integers(1 << 62)


def test_poisson_events_of_a_seed_are_those_of_numpys_geometric_draws(monkeypatch) -> None:
    from flyviz.spiking import run as spiking_run

    # a seed's input events are what they were with numpy's geometric draws: runs made
    # with a seed are made again
    targets = np.arange(0, 5000, 7)
    args = (targets, 150.0, 3 * spiking_run.POISSON_CHUNK, 1e-4)
    fast = spiking_run.poisson_events(*args, np.random.default_rng(3))
    monkeypatch.setattr(spiking_run, "geometric_gaps",
                        lambda rng, p, shape: rng.geometric(p, shape))
    plain = spiking_run.poisson_events(*args, np.random.default_rng(3))
    assert fast[0].size > 1000
    assert np.array_equal(fast[0], plain[0]) and np.array_equal(fast[1], plain[1])


@pytest.mark.parametrize("rate", [1e-21, 150.0, 2900.0, 5000.0])
@pytest.mark.parametrize("ascending", [True, False])
def test_poisson_events_of_a_seed_are_those_of_the_gaps_summed_in_numpy(
        monkeypatch, rate: float, ascending: bool) -> None:
    from flyviz.spiking import run as spiking_run

    # the events drawn as the stream gives them, whichever way they are summed and sorted:
    # the compiled pass over the exponential draws (targets in order, p below 0.3), and
    # numpy's sums of geometric gaps; a rate so low that its gaps pass 2**63 has no events
    # and ends (the sums of its gaps would wrap around)
    targets = np.arange(0, 900, 3) if ascending else np.arange(900, 0, -3)
    args = (targets, rate, 2 * spiking_run.POISSON_CHUNK + 5, 1e-4)
    mine = spiking_run.poisson_events(*args, np.random.default_rng(8))
    monkeypatch.setattr(spiking_run, "_exponentials_give_geometric", lambda: False)
    numpys = spiking_run.poisson_events(*args, np.random.default_rng(8))
    assert np.array_equal(mine[0], numpys[0]) and np.array_equal(mine[1], numpys[1])
    assert (mine[0].size == 0) == (rate < 1)
    if rate >= 1:
        expected = rate * 1e-4 * targets.size * (2 * spiking_run.POISSON_CHUNK + 5)
        assert abs(mine[0].size - expected) < 6 * math.sqrt(expected)


def test_events_of_exponential_draws_say_when_a_row_needs_more() -> None:
    from flyviz.spiking.run import _events_of_exponentials

    exponential = np.random.default_rng(4).standard_exponential((40, 30))
    scale = -math.log1p(-0.2)
    tick, row, complete = _events_of_exponentials(exponential, scale, 50)
    assert complete
    at = np.cumsum(np.ceil(exponential / scale).astype(np.int64), axis=1) - 1
    r, c = np.nonzero(at < 50)
    order = np.lexsort((r, at[r, c]))
    assert np.array_equal(tick, at[r, c][order]) and np.array_equal(row, r[order])
    # 30 draws of mean gap 5 do not reach tick 400: the caller must draw more
    assert not _events_of_exponentials(exponential, scale, 400)[2]


def test_poisson_events_of_targets_in_order_are_sorted_by_one_key_as_by_two() -> None:
    from flyviz.spiking.run import POISSON_CHUNK, PoissonStream

    # targets in increasing order take the one-key sort; the same draws sorted by tick, then
    # target, by the general two-key sort must be the same events in the same order
    targets = np.array([3, 8, 9, 40, 41, 700, 138_638])
    fast = PoissonStream(targets, 0.2, np.random.default_rng(5))
    general = PoissonStream(targets, 0.2, np.random.default_rng(5))
    general._ascending = False
    assert fast._ascending
    ticks = 2 * POISSON_CHUNK + 11
    (tk, nr), (tk2, nr2) = fast.events(0, ticks), general.events(0, ticks)
    assert tk.size > 1000 and tk.dtype == tk2.dtype == np.int64
    assert np.array_equal(tk, tk2) and np.array_equal(nr, nr2)
    assert np.all(np.diff(tk) >= 0) and np.all(np.diff(nr)[np.diff(tk) == 0] > 0)
    # targets out of order (or repeated) take the general sort, ordered by target
    shuffled = PoissonStream(targets[::-1], 0.2, np.random.default_rng(5))
    assert not shuffled._ascending
    tk3, nr3 = shuffled.events(0, ticks)
    assert np.all(np.diff(tk3) >= 0) and np.all(np.diff(nr3)[np.diff(tk3) == 0] > 0)


def test_each_trial_of_a_run_is_a_stepping_simulation_of_its_own() -> None:
    from flyviz.spiking import SpikingSimulation

    brain = _random_brain(3, n=700)
    run = spiking.simulate(brain, excite=np.arange(20), rate=250.0, seed=4, duration_s=0.03,
                           trials=3, threads=1)
    for t in range(3):
        sim = SpikingSimulation(brain, excite=np.arange(20), rate=250.0, seed=4, trial=t)
        ticks, neurons = sim.advance(150)
        more = sim.advance(150)
        mine = run.trial == t
        assert np.array_equal(np.concatenate([ticks, more[0]]), run.tick[mine])
        assert np.array_equal(np.concatenate([neurons, more[1]]), run.neuron[mine])


def test_ctrl_c_as_a_trial_thread_starts_leaves_no_thread_running(monkeypatch) -> None:
    """A Ctrl+C can land just after the pool has started a trial's thread and before the pool
    has listed it (under load the main thread may not run again for tens of ms): that thread
    is then not among those the pool's exit waits for. The run still waits for it."""
    import threading

    from flyviz.spiking.run import poisson_events

    brain = _random_brain(3)
    n_steps = 200_000
    events = poisson_events(np.arange(0, 40, 3), 300.0, n_steps, 1e-4,
                            np.random.default_rng(1))
    start = threading.Thread.start
    tester = threading.current_thread()
    interrupted: list[str] = []

    def start_then_ctrl_c(thread: threading.Thread) -> None:
        start(thread)
        if not interrupted and threading.current_thread() is tester:  # the run's first thread
            interrupted.append(thread.name)
            raise KeyboardInterrupt  # as the signal's handler raises it, in the main thread

    before = set(threading.enumerate())
    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        spiking.simulate(brain, input_events=events, rate=0.0, duration_s=n_steps * 1e-4,
                         seed=None, threads=1)
    monkeypatch.undo()
    assert interrupted
    assert set(threading.enumerate()) - before == set()


def test_ctrl_c_during_a_long_trial_stops_it_as_an_interrupt() -> None:
    """A Ctrl+C while a compiled trial runs is a KeyboardInterrupt in the caller at once (not
    numba's SystemError, not after the whole trial), and no engine thread is left running."""
    import signal
    import threading

    from flyviz.spiking.run import poisson_events

    brain = _random_brain(3)
    excite = np.arange(0, 40, 3)
    n_steps = 400_000  # 40 biological seconds: a few seconds of compute on this brain
    events = poisson_events(excite, 300.0, n_steps, 1e-4, np.random.default_rng(1))
    progress: list[int] = []

    computing = threading.Event()

    def ctrl_c() -> None:  # once the trial computes, as a terminal's Ctrl+C reaches main
        if computing.wait(60):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def chunk_done(trial: int, ticks: int) -> None:
        progress.append(ticks)
        computing.set()

    before = set(threading.enumerate())
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a terminal's
    sender = threading.Thread(target=ctrl_c)
    try:
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            spiking.simulate(brain, input_events=events, rate=0.0, duration_s=n_steps * 1e-4,
                             seed=None, threads=1, progress=chunk_done)
    finally:
        computing.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)
    assert set(threading.enumerate()) - before == set()
    # it stopped within a chunk or two of the signal, far from the trial's end
    from flyviz.spiking.engine import CHUNK_TICKS

    assert 0 < len(progress) < n_steps // CHUNK_TICKS // 4


def test_a_trial_whose_ticks_are_slow_returns_in_chunks_of_about_half_a_second(monkeypatch):
    """A trial's chunks follow its pace: the first is FIRST_CHUNK_TICKS, the next about
    CHUNK_SECONDS of compute at the pace the last one took (never under MIN_CHUNK_TICKS nor
    over CHUNK_TICKS), so a busy run answers Ctrl+C and reports progress that often; the
    spikes are the same however it is cut."""
    from flyviz.spiking import engine
    from flyviz.spiking.run import poisson_events

    assert engine.next_chunk(1000, 0.01) == engine.CHUNK_TICKS          # fast: the longest
    assert engine.next_chunk(1000, 2.0) == 250                          # 2 ms a tick
    assert engine.next_chunk(1000, 100.0) == engine.MIN_CHUNK_TICKS     # never fewer
    assert engine.next_chunk(1000, 0.0) == engine.CHUNK_TICKS
    brain = _random_brain(3)
    n_steps = 4_000
    events = poisson_events(np.arange(0, 40, 3), 300.0, n_steps, 1e-4,
                            np.random.default_rng(1))
    whole = spiking.simulate(brain, input_events=events, rate=0.0, duration_s=n_steps * 1e-4,
                             seed=None, threads=1)
    # Each tick "takes" 2 ms: the clock the engine reads advances by that much per tick.
    clock = [0.0]
    real_advance = engine.EngineTrial.advance_counted

    def slow_advance(self, n, *args):
        clock[0] += 0.002 * n
        return real_advance(self, n, *args)

    monkeypatch.setattr(engine.EngineTrial, "advance_counted", slow_advance)
    monkeypatch.setattr(engine, "_clock", lambda: clock[0])
    done: list[int] = []
    cut = spiking.simulate(brain, input_events=events, rate=0.0, duration_s=n_steps * 1e-4,
                           seed=None, threads=1, progress=lambda _trial, ticks: done.append(ticks))
    assert done == [1000, 1250, 1500, 1750, 2000, 2250, 2500, 2750, 3000, 3250, 3500, 3750,
                    4000]
    assert np.array_equal(cut.tick, whole.tick) and np.array_equal(cut.neuron, whole.neuron)
