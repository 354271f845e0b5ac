"""Benchmark: the spiking engine on a synthetic brain of the full size (FlyWire 783).

138,639 neurons and about 15 M synapses with a heavy-tailed out-degree (mean ~108, max ~9,600,
as in the real release), signed counts drawn heavy-tailed (most pairs 1-3 synapses, a few
hundred), 70 % excitatory neurons; the authors' default stimulation: 21 neurons (the number of
their right-hemisphere sugar GRNs) at 150 Hz, 1 s trials. Prints wall seconds per biological
second for one trial on one thread, and for 30 trials (on every core).

    PYTHONPATH=$PWD python tests/bench_spiking.py [--trials 30] [--duration 1.0]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from flyviz import spiking

NEURONS = 138_639


def synthetic_brain(seed: int = 0) -> spiking.SpikingBrain:
    rng = np.random.default_rng(seed)
    degree = np.minimum(np.rint(rng.lognormal(3.55, 1.25, NEURONS)), 9_615).astype(np.int64)
    degree[np.argmax(degree)] = 9_615
    indptr = np.zeros(NEURONS + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    post = rng.integers(0, NEURONS, int(indptr[-1]), dtype=np.int32)
    sign = np.where(rng.random(NEURONS) < 0.7, 1.0, -1.0)
    counts = np.minimum(rng.zipf(2.0, post.size), 500).astype(np.float64)
    counts *= np.repeat(sign, degree)
    return spiking.SpikingBrain(name="synthetic-783", root_ids=np.arange(NEURONS) + 10**17,
                                indptr=indptr, post=post, counts=counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--duration", type=float, default=1.0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    brain = synthetic_brain()
    deg = np.diff(brain.indptr)
    print(f"brain: {brain.neurons:,} neurons, {brain.synapses:,} synapses, out-degree mean "
          f"{deg.mean():.0f} max {deg.max():,} (built in {time.perf_counter() - t0:.1f} s)")
    excite = np.random.default_rng(1).choice(brain.neurons, 21, replace=False)
    spiking.simulate(brain, excite=excite, duration_s=0.01, threads=1)  # compile
    t0, c0 = time.perf_counter(), time.process_time()
    one = spiking.simulate(brain, excite=excite, duration_s=args.duration, threads=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # CPU seconds too: on a shared machine the wall clock counts other programs' time
    print(f"1 trial, 1 thread: {wall:.2f} s wall, {cpu:.2f} s CPU for {args.duration:g} s "
          f"({cpu / args.duration:.2f} CPU s per biological second); {one.neuron.size:,} spikes, "
          f"{int((one.rates() > 0).sum()):,} neurons fired")
    t0, c0 = time.perf_counter(), time.process_time()
    many = spiking.simulate(brain, excite=excite, duration_s=args.duration,
                            trials=args.trials)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{args.trials} trials, {os.cpu_count()} threads: {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"({wall / args.duration:.2f} s per biological second of all trials); "
          f"{many.neuron.size:,} spikes")


if __name__ == "__main__":
    main()
