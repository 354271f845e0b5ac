"""Benchmark: the spiking engine on a synthetic brain of the full size (FlyWire 783).

138,639 neurons and about 15 M synapses with the real release's out-degree spread (lognormal,
mean ~108, median ~50, max 9,615) and a heavy-tailed in-degree; weights like the real
``Connectivity`` column: signed synapse counts, most 1-5 (Zipf, exponent 2) with a tail to a
few thousand; 60 % excitatory neurons.

At each activity level of ``--levels`` (how many neurons are excited at 150 Hz: 21, the
authors' default stimulation of their right-hemisphere sugar GRNs in number, then 500 and
5,000, as screens of whole cell types drive) it prints the spikes per second, the neurons that
fired, the synaptic events per second and flyviz's process CPU seconds per biological second
(one trial, one thread, median of ``--repeats``). With ``--brian2 PYTHON`` (a Python with Brian2
2.9, e.g. ``/tmp/brian2-venv/bin/python``, see ``tests/oracle/brian2_lif.py``) Brian2 runs the
same brain with the same input distribution in the same run, each over ``--brian2-duration``
(a whole biological second), timed in turn with flyviz, the order rotating: its Cython runtime
target (process CPU of ``Network.run``) and its C++ standalone binary (process CPU of the
simulation loop), as ratios of the medians, each with the range of its repeats' own ratios;
building (code generation, compiling, and the standalone binary's set-up of 15 M synapses) is
reported apart.

    PYTHONPATH=$PWD python tests/bench_spiking.py [--levels 21,500,5000] [--repeats 3]
        [--brian2 /tmp/brian2-venv/bin/python [--brian2-targets cython,standalone]]
        [--trials 30] [--duration 1.0] [--brain demo]

Then, at the first level, it times ``--trials`` trials on every core, one trial stepped in 10 ms
bins as the window runs it live (``SpikingSimulation.advance(100)``, checking it fires as many
spikes as the whole run) and what the parts of a trial cost (``--trials 0`` skips them);
``--brain demo`` times the demo's spiking brain (its 21 sensory neurons) instead.

With ``--base TREE`` it times the engine alone instead (``EngineTrial.advance`` over
``--duration``, the same input) of this tree and of another flyviz tree (e.g. an export of an
earlier commit), in turn, the order alternating, medians of ``--repeats`` after an untimed
round that compiles both, and checks that both give the same spikes, ``v`` and ``g`` (exit 1
if not)::

    git archive 3751b07 flyviz | tar -x -C /tmp/flyviz-base
    PYTHONPATH=$PWD python tests/bench_spiking.py --base /tmp/flyviz-base --repeats 7
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np

from flyviz import spiking
from flyviz.spiking import engine

NEURONS = 138_639
MAX_DEGREE = 9_615

# Brian2's side: the authors' model (tests/oracle/brian2_lif.py) on the saved brain, its input one
# PoissonGroup feeding the excited neurons through one-to-one synapses without delay (the same
# per-tick Bernoulli input as one PoissonInput(N=1) per neuron, for which the Cython target would
# compile one module per excited neuron). ``cython SAVED``: built once, then each line of stdin
# (a duration in seconds) restores the state after the build and times a run that long.
# ``standalone SAVED FOLDER DURATION``: a C++ project built in FOLDER whose binary prints the
# process CPU seconds of its simulation loop (its set-up and the writing of results apart).
BRIAN2_SCRIPT = r"""
import json, resource, sys, time
import numpy as np
import brian2
from brian2 import (Hz, Network, NeuronGroup, PoissonGroup, SpikeMonitor, Synapses, mV, ms,
                    prefs, second)


def cpu():
    own, kids = (resource.getrusage(resource.RUSAGE_SELF),
                 resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def network(saved):
    n = int(saved["n"])
    excite = saved["excite"]
    eqs = '''
    dv/dt = (v_0 - v + g) / t_mbr : volt (unless refractory)
    dg/dt = -g / tau : volt (unless refractory)
    rfc : second
    '''
    space = {"v_0": -52 * mV, "v_rst": -52 * mV, "v_th": -45 * mV, "t_mbr": 20 * ms,
             "tau": 5 * ms}
    neu = NeuronGroup(n, eqs, method="linear", threshold="v > v_th",
                      reset="v = v_rst; g = 0 * mV", refractory="rfc", namespace=space)
    neu.v = -52 * mV
    neu.g = 0 * mV
    rfc = np.full(n, 2.2)
    rfc[excite] = 0.0
    neu.rfc = rfc * ms
    syn = Synapses(neu, neu, "w : volt", on_pre="g += w", delay=1.8 * ms)
    syn.connect(i=np.repeat(np.arange(n), np.diff(saved["indptr"])), j=saved["post"])
    syn.w = saved["counts"] * float(saved["w_syn"]) * mV
    poisson = PoissonGroup(excite.size, rates=150 * Hz)
    drive = Synapses(poisson, neu, on_pre="v += w_poi", namespace={"w_poi": float(saved["w_syn"]) * 250 * mV})
    drive.connect(i=np.arange(excite.size), j=excite)
    monitor = SpikeMonitor(neu)
    return Network(neu, syn, poisson, drive, monitor), monitor


saved = np.load(sys.argv[2])
c0, w0 = cpu(), time.perf_counter()
if sys.argv[1] == "cython":
    prefs.codegen.target = "cython"
    net, monitor = network(saved)
    net.run(0.5 * ms)  # code generation, compiling, the spike queue's set-up
    net.store()
    print(json.dumps({"built_cpu": cpu() - c0, "built_wall": time.perf_counter() - w0}),
          flush=True)
    for line in sys.stdin:
        net.restore()
        before = monitor.num_spikes
        cpu_at, wall_at = time.process_time(), time.perf_counter()
        net.run(float(line) * second)
        print(json.dumps({"cpu": time.process_time() - cpu_at,
                          "wall": time.perf_counter() - wall_at,
                          "spikes": int(monitor.num_spikes - before)}), flush=True)
else:
    folder, duration = sys.argv[3], float(sys.argv[4])
    brian2.set_device("cpp_standalone", directory=folder, build_on_run=False)
    prefs.codegen.cpp.headers += ["<ctime>", "<cstdio>"]
    net, monitor = network(saved)
    brian2.device.insert_code("main", "std::clock_t flyviz_clock = std::clock();")
    net.run(duration * second)
    brian2.device.insert_code("main", 'std::printf("loop-cpu %.6f\\n", '
                                      'double(std::clock() - flyviz_clock) / CLOCKS_PER_SEC);')
    brian2.device.build(directory=folder, compile=True, run=False)
    spikes = brian2.device.get_array_filename(monitor.variables["i"])
    print(json.dumps({"built_cpu": cpu() - c0, "built_wall": time.perf_counter() - w0,
                      "spikes_file": spikes}), flush=True)
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
    engine.pack_synapses(post, weight)
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
          f"{full:.3f}; Poisson draws {c1 / duration:.4f}; once per graph: grouping and "
          f"packing the synapses {c0:.2f} s")


def stepped(brain: spiking.SpikingBrain, excite: np.ndarray, duration: float) -> int:
    """One trial run as the window runs it live: 10 ms at a time; returns its spikes."""
    sim = spiking.SpikingSimulation(brain, excite=excite)
    bins = int(round(duration / 0.01))
    return sum(sim.advance(100)[1].size for _ in range(bins))


class Brian2Runtime:
    """Brian2's runtime (``cython`` or ``numpy`` target) on a saved brain, in a subprocess of
    ``python`` that builds the network once and then times one run per :meth:`run`."""

    def __init__(self, python: str, script: Path, saved: Path, target: str, log: Path) -> None:
        self.target = target
        self._log = log.open("w")
        self._process = subprocess.Popen([python, str(script), target, str(saved)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log, text=True)
        self.built = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"Brian2 ({self.target}) stopped; see {self._log.name}")
        return dict(json.loads(line))

    def run(self, duration: float) -> dict[str, Any]:
        """CPU and wall seconds of one run of ``duration`` biological seconds, and its spikes."""
        assert self._process.stdin is not None
        self._process.stdin.write(f"{duration}\n")
        self._process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=600)
        self._log.close()


class Brian2Standalone:
    """Brian2's C++ standalone project of one run of ``duration`` seconds, built in ``folder``;
    each :meth:`run` runs its binary once."""

    target = "C++ standalone"

    def __init__(self, python: str, script: Path, saved: Path, folder: Path,
                 duration: float, log: Path) -> None:
        self.folder = folder
        with log.open("w") as err:
            done = subprocess.run([python, str(script), "standalone", str(saved), str(folder),
                                   str(duration)], stdout=subprocess.PIPE, stderr=err,
                                  text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"Brian2's standalone build failed; see {log}")
        self.built = dict(json.loads(done.stdout.strip().splitlines()[-1]))
        self._spikes = folder / "results" / Path(self.built["spikes_file"]).name

    def run(self, duration: float) -> dict[str, Any]:
        """The binary's simulation loop (process CPU) and its whole run (set-up, loop, results)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter()
        done = subprocess.run(["./main"], cwd=self.folder, capture_output=True, text=True,
                              timeout=3600)
        wall = time.perf_counter() - wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"Brian2's standalone binary failed: {done.stderr.strip()[-300:]}")
        loop = float(next(line.split()[1] for line in done.stdout.splitlines()
                          if line.startswith("loop-cpu")))
        whole = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        return {"cpu": loop, "whole_cpu": whole, "wall": wall,
                "spikes": self._spikes.stat().st_size // 4}

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def flyviz_run(brain: spiking.SpikingBrain, excite: np.ndarray, duration: float
               ) -> dict[str, Any]:
    """One trial on one thread: process CPU and wall seconds, spikes, neurons fired, events."""
    cpu, wall = time.process_time(), time.perf_counter()
    run = spiking.simulate(brain, excite=excite, duration_s=duration, threads=1)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    events = int(np.diff(brain.indptr)[run.neuron].sum())
    return {"cpu": cpu, "wall": wall, "spikes": int(run.neuron.size),
            "fired": int(np.unique(run.neuron).size), "events": events}


def level(brain: spiking.SpikingBrain, excite: np.ndarray, args: argparse.Namespace,
          folder: Path) -> dict[str, Any]:
    """flyviz and the Brian2 targets asked for at one activity level, timed in turn (the order
    rotating from one repeat to the next); medians of ``args.repeats``."""
    d, d_b2 = args.duration, args.brian2_duration
    systems: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("flyviz", lambda: flyviz_run(brain, excite, d))]
    opened: list[Any] = []
    built: dict[str, dict[str, Any]] = {}
    if args.brian2:
        saved = folder / "brain.npz"
        np.savez(saved, n=brain.neurons, indptr=brain.indptr, post=brain.post,
                 counts=brain.counts, excite=excite, w_syn=brain.w_syn)
        script = folder / "brian2_run.py"
        script.write_text(BRIAN2_SCRIPT)
        # the standalone project first: its build holds a second copy of the brain in memory
        for target in sorted(args.brian2_targets.split(","), key=lambda t: t != "standalone"):
            log = folder / f"brian2-{target}.log"
            sim: Any
            if target == "standalone":
                sim = Brian2Standalone(args.brian2, script, saved, folder / "standalone", d_b2,
                                       log)
            else:
                sim = Brian2Runtime(args.brian2, script, saved, target, log)
            opened.append(sim)
            built[sim.target] = sim.built
            systems.append((sim.target, lambda sim=sim: sim.run(d_b2)))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in systems}
    try:
        for r in range(args.repeats):
            for name, run in systems[r % len(systems):] + systems[:r % len(systems)]:
                runs[name].append(run())
    finally:
        for sim in opened:
            sim.close()
    durations = {name: (d if name == "flyviz" else d_b2) for name in runs}
    out = {name: {key: statistics.median(x[key] for x in got) / durations[name]
                  for key in got[0] if key not in ("fired", "spikes_file")}
           for name, got in runs.items()}
    out["flyviz"]["fired"] = statistics.median(x["fired"] for x in runs["flyviz"])
    # each repeat's ratio, of runs timed one after the other: how far the ratio moves
    # within the run (the medians' ratio is what the table gives)
    for name in built:
        ratios = [(theirs["cpu"] / d_b2) / (ours["cpu"] / d)
                  for theirs, ours in zip(runs[name], runs["flyviz"])]
        out[name]["ratio_min"], out[name]["ratio_max"] = min(ratios), max(ratios)
    out["built"] = built
    return out


def print_levels(results: list[tuple[int, dict[str, Any]]], targets: list[str]) -> None:
    """The table of every level: activity, flyviz's CPU s per biological second, Brian2's and
    the ratios."""
    head = ["excited at 150 Hz", "spikes/s", "neurons fired", "synaptic events/s", "flyviz"]
    head += [f"Brian2 {t}" for t in targets]
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for excited, got in results:
        ours = got["flyviz"]
        row = [f"{excited:,}", f"{ours['spikes']:,.0f}", f"{ours['fired']:,.0f}",
               f"{ours['events'] / 1e6:.2f} M", f"{ours['cpu']:.3f}"]
        for t in targets:
            theirs = got[t]
            row.append(f"{theirs['cpu']:.2f} ({theirs['cpu'] / ours['cpu']:.1f}x, repeats "
                       f"{theirs['ratio_min']:.1f}-{theirs['ratio_max']:.1f}x; "
                       f"{theirs['spikes']:,.0f} spikes/s)")
        print("| " + " | ".join(row) + " |")
    print("\nCPU s per biological second (process CPU, one trial, one thread, medians); "
          "(Nx): Brian2's CPU time over flyviz's, the medians' and (repeats) the least and "
          "most of each repeat's, the simulators timed one after the other; Brian2's own "
          "spikes/s beside it.")
    for excited, got in results:
        for t, b in got["built"].items():
            extra = ""
            if t == "C++ standalone":
                extra = (f"; its binary's set-up and writing of results "
                         f"{got[t]['whole_cpu'] - got[t]['cpu']:.1f} CPU s a run")
            print(f"built, {excited:,} excited, Brian2 {t}: {b['built_cpu']:.1f} CPU s, "
                  f"{b['built_wall']:.1f} wall s{extra}")


def engine_of(tree: Path) -> ModuleType:
    """``tree``'s ``flyviz/spiking/engine.py``, imported beside this tree's under a name of
    its own (its kernels compiled and cached apart)."""
    path = tree / "flyviz" / "spiking" / "engine.py"
    spec = importlib.util.spec_from_file_location("flyviz.spiking._base_engine", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def engines_side_by_side(brain: spiking.SpikingBrain, sets: list[np.ndarray], base: Path,
                         duration: float, repeats: int) -> bool:
    """The engine alone of ``base`` and of this tree at each level, in turn; True if both
    gave the same spikes, ``v`` and ``g`` at every level."""
    engines = {"base": engine_of(base), "this tree": engine}
    p = engine.LIFParams(w_syn=brain.w_syn)
    post, weight, _ = brain.grouped_rows(p.w_syn * 0.001)
    n_steps = engine.ticks(duration, p.dt_s)
    silenced = np.zeros(brain.neurons, dtype=bool)
    print("the engine alone (EngineTrial.advance), CPU s per biological second, "
          f"medians of {repeats} [range]")
    all_same = True
    for excite in sets:
        tk, nr = spiking.poisson_events(excite, p.rate, n_steps, p.dt_s,
                                        np.random.default_rng(0))
        rfc = np.full(brain.neurons, p.refractory_ticks, dtype=np.int64)
        rfc[excite] = 0
        times: dict[str, list[float]] = {name: [] for name in engines}
        state: dict[str, tuple[np.ndarray, ...]] = {}
        for round_ in range(repeats + 1):  # round 0 compiles or loads the kernels
            order = list(engines) if round_ % 2 == 0 else list(reversed(engines))
            for name in order:
                module = engines[name]
                trial = module.EngineTrial(brain.indptr, post, weight, rfc, silenced, p,
                                           module.G_FLUSH)
                c = time.process_time()
                ticks_out, neurons = trial.advance(n_steps, tk, nr)
                c = time.process_time() - c
                if round_:
                    times[name].append(c / duration)
                state[name] = (ticks_out, neurons, trial.v, trial.g)
        same = all(np.array_equal(a, b) for a, b in zip(state["base"], state["this tree"]))
        all_same &= same
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{excite.size:,} excited, {state['this tree'][1].size:,} spikes: " + "; ".join(
            f"{name} {med[name]:.3f} [{min(t):.3f}-{max(t):.3f}]" for name, t in times.items())
            + f"; base / this tree {med['base'] / med['this tree']:.2f}; spikes, v and g "
            + ("identical" if same else "DIFFERENT") + f" (load average {os.getloadavg()[0]:.1f})",
            flush=True)
    return all_same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="21,500,5000",
                        help="how many neurons are excited at 150 Hz at each activity level "
                             "(comma-separated; the first also gets the other timings)")
    parser.add_argument("--trials", type=int, default=30,
                        help="trials of the multi-trial timing (0: skip the other timings)")
    parser.add_argument("--duration", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--brian2", metavar="PYTHON", help="a Python with Brian2 installed")
    parser.add_argument("--brian2-duration", type=float, default=1.0,
                        help="biological seconds of each Brian2 run (default: a whole one)")
    parser.add_argument("--brian2-targets", default="cython,standalone",
                        help="comma-separated: cython, standalone, numpy")
    parser.add_argument("--base", type=Path, metavar="TREE",
                        help="time the engine alone against another flyviz tree's instead")
    parser.add_argument("--brain", choices=("synthetic", "demo"), default="synthetic",
                        help="the synthetic full-size brain, or the demo's (what `flyviz gui "
                             "demo` opens as a spiking brain: its own excited set)")
    args = parser.parse_args()
    if args.base is not None and not (args.base / "flyviz" / "spiking" / "engine.py").is_file():
        parser.error(f"--base {args.base}: no flyviz/spiking/engine.py there; give a flyviz tree")
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
    if brain.default_excite is not None:
        sets = [np.asarray(brain.default_excite)]
    else:
        sets = [np.sort(np.random.default_rng(1).choice(brain.neurons, int(k), replace=False))
                for k in args.levels.split(",")]
    if args.base is not None:
        same = engines_side_by_side(brain, sets, args.base, args.duration, args.repeats)
        raise SystemExit(0 if same else 1)
    c0 = time.process_time()
    spiking.simulate(brain, excite=sets[0], duration_s=0.01, threads=1)  # compile, group rows
    print(f"flyviz once per brain (grouping the synapses, compiling or loading the kernels): "
          f"{time.process_time() - c0:.1f} CPU s")
    targets = [{"standalone": "C++ standalone"}.get(t, t)
               for t in args.brian2_targets.split(",")] if args.brian2 else []
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for excite in sets:
            got = level(brain, excite, args, Path(tmp))
            results.append((int(excite.size), got))
            print(f"{excite.size:,} excited: flyviz {got['flyviz']['cpu']:.3f} CPU s per "
                  f"biological second; " + "; ".join(
                      f"Brian2 {t} {got[t]['cpu']:.2f} ({got[t]['cpu'] / got['flyviz']['cpu']:.1f}x)"
                      for t in targets) + f" (load average {os.getloadavg()[0]:.1f})",
                  flush=True)
    print_levels(results, targets)
    if args.trials <= 0:
        return
    excite, d = sets[0], args.duration
    run = spiking.simulate(brain, excite=excite, duration_s=d, threads=1)
    cpu, wall, _ = timed(lambda: spiking.simulate(brain, excite=excite, duration_s=d,
                                                  trials=args.trials), args.repeats)
    print(f"\n{excite.size:,} excited, {args.trials} trials, {os.cpu_count()} threads: "
          f"{wall:.2f} wall s, {cpu:.2f} CPU s for {d:g} biological s each "
          f"(median of {args.repeats})")
    stepped_cpu, stepped_wall, count = timed(lambda: stepped(brain, excite, d), args.repeats)
    same = "the same" if count == run.neuron.size else "NOT the same"
    print(f"1 trial stepped live in 10 ms bins (SpikingSimulation.advance(100)): "
          f"{stepped_cpu / d:.3f} CPU s, {stepped_wall / d:.3f} wall s per biological second "
          f"(median of {args.repeats}); {count:,} spikes, {same} number as the whole run")
    parts(brain, excite, min(d, 0.5))


if __name__ == "__main__":
    main()
