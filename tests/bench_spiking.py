"""Benchmark: the spiking engine on a synthetic brain of the full size (FlyWire 783).

138,639 neurons and about 15 M synapses with the real release's out-degree spread (lognormal,
mean ~108, median ~50, max 9,615) and a heavy-tailed in-degree; weights like the real
``Connectivity`` column: signed synapse counts, most 1-5 (Zipf, exponent 2) with a tail to a
few thousand; 60 % excitatory neurons. The authors' default stimulation: 21 neurons (their
right-hemisphere sugar GRNs, in number) at 150 Hz, 1 s trials. Prints CPU and wall seconds per
biological second (median of ``--repeats``) for one trial on one thread and for ``--trials``
trials on every core, what the parts of a run cost, and, with ``--brian2 PYTHON`` (a Python
with Brian2, e.g. the tests' ``/tmp/brian2-venv/bin/python``), Brian2's runtime (numpy)
target on the same brain in the same run, as a ratio.

    PYTHONPATH=$PWD python tests/bench_spiking.py [--trials 30] [--duration 1.0]
        [--brian2 /tmp/brian2-venv/bin/python --brian2-duration 0.05] [--brain demo]

It also times one trial stepped in 10 ms bins as the window runs it live
(``SpikingSimulation.advance(100)``) and checks it fires as many spikes as the whole run;
``--brain demo`` times the demo's spiking brain (its 21 sensory neurons) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from flyviz import spiking
from flyviz.spiking import engine

NEURONS = 138_639
MAX_DEGREE = 9_615

# Brian2's side: the authors' model (tests/oracle/brian2_lif.py) on the saved brain
BRIAN2_SCRIPT = r"""
import json, sys, time
import numpy as np
from brian2 import (Hz, Network, NeuronGroup, PoissonInput, Synapses, mV, ms, prefs, second)
prefs.codegen.target = "numpy"
saved = np.load(sys.argv[1])
duration = float(sys.argv[2])
n = int(saved["n"])
eqs = '''
dv/dt = (v_0 - v + g) / t_mbr : volt (unless refractory)
dg/dt = -g / tau : volt (unless refractory)
rfc : second
'''
space = {"v_0": -52 * mV, "v_rst": -52 * mV, "v_th": -45 * mV, "t_mbr": 20 * ms, "tau": 5 * ms}
t0 = time.perf_counter()
neu = NeuronGroup(n, eqs, method="linear", threshold="v > v_th", reset="v = v_rst; g = 0 * mV",
                  refractory="rfc", namespace=space)
neu.v = -52 * mV
neu.g = 0 * mV
neu.rfc = 2.2 * ms
syn = Synapses(neu, neu, "w : volt", on_pre="g += w", delay=1.8 * ms)
syn.connect(i=np.repeat(np.arange(n), np.diff(saved["indptr"])), j=saved["post"])
syn.w = saved["counts"] * 0.275 * mV
inputs = []
for i in saved["excite"].tolist():
    inputs.append(PoissonInput(target=neu[i:i + 1], target_var="v", N=1, rate=150 * Hz,
                               weight=0.275 * mV * 250))
    neu[i].rfc = 0 * ms
net = Network(neu, syn, *inputs)
net.run(0.5 * ms)  # code generation and the spike queue's set-up, not timed below
built = time.perf_counter() - t0
c0, w0 = time.process_time(), time.perf_counter()
net.run(duration * second)
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0,
                  "built": built, "duration": duration}))
"""


def synthetic_brain(seed: int = 0) -> spiking.SpikingBrain:
    """The full-size synthetic brain described in the module notes."""
    rng = np.random.default_rng(seed)
    degree = np.minimum(np.rint(rng.lognormal(3.91, 1.25, NEURONS)), MAX_DEGREE)
    degree = degree.astype(np.int64)
    degree[np.argmax(degree)] = MAX_DEGREE
    indptr = np.zeros(NEURONS + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    # targets drawn with a lognormal pull each: some neurons take thousands of inputs
    pull = np.cumsum(rng.lognormal(0.0, 1.0, NEURONS))
    post = np.searchsorted(pull / pull[-1], rng.random(int(indptr[-1]))).astype(np.int32)
    post = np.minimum(post, NEURONS - 1)
    sign = np.where(rng.random(NEURONS) < 0.6, 1.0, -1.0)
    counts = np.minimum(rng.zipf(2.0, post.size), 2_400).astype(np.float64)
    counts *= np.repeat(sign, degree)
    return spiking.SpikingBrain(name="synthetic-783", root_ids=np.arange(NEURONS) + 10**17,
                                indptr=indptr, post=post, counts=counts)


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median CPU and wall seconds of ``repeats`` calls of ``run`` (and its last result)."""
    cpu, wall, out = [], [], None
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        out = run()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall), out


def parts(brain: spiking.SpikingBrain, excite: np.ndarray, duration: float) -> None:
    """What the parts of one trial cost, CPU seconds per biological second."""
    p = engine.LIFParams(w_syn=brain.w_syn)
    prop = engine.propagator(p)
    n_steps = int(round(duration / p.dt_s))
    brain._grouped = None
    c0 = time.process_time()
    post, weight, _ = brain.grouped_rows(p.w_syn * 0.001)
    c0 = time.process_time() - c0
    c1 = time.process_time()
    tk, nr = spiking.poisson_events(excite, p.rate, n_steps, p.dt_s, np.random.default_rng(0))
    c1 = time.process_time() - c1
    rfc = np.full(brain.neurons, p.refractory_ticks, dtype=np.int64)
    rfc[excite] = 0

    def kernel(v_start: float, silenced: np.ndarray) -> float:
        trial = engine.EngineTrial(brain.indptr, post, weight, rfc, silenced, p,
                                   engine.G_FLUSH, v_start=v_start)
        c = time.process_time()
        trial.advance(n_steps, tk, nr)
        return (time.process_time() - c) / duration

    everyone = np.ones(brain.neurons, dtype=bool)
    dense = kernel(prop.v_rest + 1e-3, everyone)  # every neuron away from rest, no synapses
    full = kernel(prop.v_rest, np.zeros(brain.neurons, dtype=bool))
    print(f"parts (CPU s per biological s): state update + threshold of every neuron "
          f"{dense:.3f}; the whole kernel (update, spike delivery, Poisson events, resets) "
          f"{full:.3f}; Poisson draws {c1 / duration:.4f}; once per graph: grouping the rows and weights "
          f"{c0:.2f} s")


def stepped(brain: spiking.SpikingBrain, excite: np.ndarray, duration: float) -> int:
    """One trial run as the window runs it live: 10 ms at a time; returns its spikes."""
    sim = spiking.SpikingSimulation(brain, excite=excite)
    bins = int(round(duration / 0.01))
    return sum(sim.advance(100)[1].size for _ in range(bins))


def brian2(python: str, brain: spiking.SpikingBrain, excite: np.ndarray,
           duration: float) -> dict[str, float] | None:
    """Brian2 (runtime numpy target) on the same brain, in a subprocess of ``python``."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "brain.npz"
        np.savez(saved, n=brain.neurons, indptr=brain.indptr, post=brain.post,
                 counts=brain.counts, excite=excite)
        script = Path(tmp) / "brian2_run.py"
        script.write_text(BRIAN2_SCRIPT)
        done = subprocess.run([python, str(script), str(saved), str(duration)],
                              capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        print("brian2 failed:", done.stderr.strip().splitlines()[-1:], file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--duration", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--brian2", metavar="PYTHON", help="a Python with Brian2 installed")
    parser.add_argument("--brian2-duration", type=float, default=0.05)
    parser.add_argument("--brain", choices=("synthetic", "demo"), default="synthetic",
                        help="the synthetic full-size brain, or the demo's (what `flyviz gui "
                             "demo` opens as a spiking brain)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.brain == "demo":
        from flyviz.spiking.demo import demo_brain

        brain = demo_brain()
    else:
        brain = synthetic_brain()
    deg = np.diff(brain.indptr)
    print(f"brain: {brain.neurons:,} neurons, {brain.synapses:,} synapses, out-degree mean "
          f"{deg.mean():.0f} median {np.median(deg):.0f} max {deg.max():,}; counts 1-5: "
          f"{np.mean(np.abs(brain.counts) <= 5):.0%} (built in {time.perf_counter() - t0:.1f} s)")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    excite = np.sort(np.random.default_rng(1).choice(brain.neurons, 21, replace=False)) \
        if brain.default_excite is None else np.asarray(brain.default_excite)
    spiking.simulate(brain, excite=excite, duration_s=0.01, threads=1)  # compile, group rows
    d = args.duration
    cpu, wall, run = timed(lambda: spiking.simulate(brain, excite=excite, duration_s=d,
                                                    threads=1), args.repeats)
    print(f"1 trial, 1 thread: {cpu / d:.3f} CPU s, {wall / d:.3f} wall s per biological "
          f"second (median of {args.repeats}); {run.neuron.size:,} spikes, "
          f"{int((run.rates() > 0).sum()):,} neurons fired")
    one_cpu = cpu / d
    cpu, wall, _ = timed(lambda: spiking.simulate(brain, excite=excite, duration_s=d,
                                                  trials=args.trials), args.repeats)
    print(f"{args.trials} trials, {os.cpu_count()} threads: {wall:.2f} wall s, {cpu:.2f} CPU s "
          f"for {d:g} biological s each (median of {args.repeats})")
    stepped_cpu, stepped_wall, count = timed(lambda: stepped(brain, excite, d), args.repeats)
    same = "the same" if count == run.neuron.size else "NOT the same"
    print(f"1 trial stepped live in 10 ms bins (SpikingSimulation.advance(100)): "
          f"{stepped_cpu / d:.3f} CPU s, {stepped_wall / d:.3f} wall s per biological second "
          f"(median of {args.repeats}); {count:,} spikes, {same} number as the whole run")
    parts(brain, excite, min(d, 0.5))
    if args.brian2:
        theirs = brian2(args.brian2, brain, excite, args.brian2_duration)
        if theirs:
            per = theirs["cpu"] / theirs["duration"]
            print(f"Brian2 (numpy target), {args.brian2_duration:g} biological s: "
                  f"{per:.1f} CPU s per biological second (built in {theirs['built']:.0f} s); "
                  f"flyviz's 1 trial above: {per / one_cpu:.0f}x less CPU time")


if __name__ == "__main__":
    main()
