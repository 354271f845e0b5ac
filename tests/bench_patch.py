"""Benchmark: a causal trace on Dask, 2 workers against 1 (not a test; run by hand).

    python tests/bench_patch.py [--positions 20] [--groups 63] [--rounds 2] [--batch 64]

On the full-size demo brain, traces ``--positions`` positions of the 21-position prompt pair
below (BOS is left out) by ``--groups`` groups: the demo brain has five superclasses, so the
groups are its ``--groups`` largest cell types (written as a groups file), the same number of
columns as the real model's 63 superclasses. Each round runs the trace on a LocalCluster of 1
worker, then of 2 (alternating over the rounds); what is compared is the time from the cluster
being ready to the last merge (the cluster's start excluded), cells/s, the ratio of the
medians and each round's ratio, and what the CPU time says where other jobs share the cores:

* ``worker_cpu_N``: the CPU seconds of the N workers (their whole lives: start-up, model
  load, engine layout, tasks), ``client_cpu_N`` those of this process (client, scheduler);
* ``cores_used_N``: worker CPU seconds over the run's wall time, ``efficiency_N`` that over N
  (1.0: every worker had a core of its own all the time; on a shared machine two workers
  may get far less than two cores, and the wall-clock ratio then says nothing of flyviz);
* ``cpu_speed_up``: the medians' ``worker_cpu_1 / (worker_cpu_2 / 2)``, the speed-up two
  workers give on two free cores when the tasks split evenly (what the split costs: work
  done twice per worker, tasks slower side by side); ``cpu_round_speed_ups`` per round.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLEAN = "Once upon a time, there was a little girl named Lily. One day, Lily went to the"
CORRUPT = "Once upon a time, there was a little boy named Tom. One day, Tom went to the"
ANSWER = " park"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", type=int, default=20)
    parser.add_argument("--groups", type=int, default=63)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    import numpy as np

    from flyviz.analysis.causal import TraceSettings, run_causal_trace
    from flyviz.analysis.sweep import file_groups
    from flyviz.demo.loader import load_demo
    from flyviz.model.selection import neuron_index

    ckpt = load_demo()
    index = neuron_index(ckpt)
    types = index.cell_type
    biggest = np.argsort(-np.asarray(types.counts), kind="stable")[:args.groups]
    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-patch-"))
    groups_file = folder / "groups.txt"
    from flyviz.analysis.sweep import label_query

    groups_file.write_text("".join(f"type {i}: {label_query('type', types.names[c])}\n"
                                   for i, c in enumerate(biggest)), encoding="utf-8")
    groups = file_groups(ckpt, groups_file)
    settings = TraceSettings(streams=args.batch)
    span = (1, 1 + args.positions)
    cells = len(groups) * args.positions
    import resource

    def cpu(who: int) -> float:
        usage = resource.getrusage(who)  # RUSAGE_CHILDREN: the workers, once reaped
        return usage.ru_utime + usage.ru_stime

    seconds: dict[int, list[float]] = {1: [], 2: []}
    cores: dict[int, list[float]] = {1: [], 2: []}
    worker_cpu: dict[int, list[float]] = {1: [], 2: []}
    client_cpu: dict[int, list[float]] = {1: [], 2: []}
    tables: dict[int, list] = {}
    for _ in range(args.rounds):
        for workers in (1, 2):
            out = folder / f"trace-{workers}.csv"
            before, before_self = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
            result = run_causal_trace("demo", ckpt, CLEAN, CORRUPT, ANSWER, groups, out, settings,
                                      positions=span, by=str(groups_file), workers=workers)
            seconds[workers].append(result.compute_seconds)
            # The cores the workers had: their CPU seconds over the run's wall time (2 workers
            # on a busy 2-core machine get far less than 2).
            worker_cpu[workers].append(cpu(resource.RUSAGE_CHILDREN) - before)
            client_cpu[workers].append(cpu(resource.RUSAGE_SELF) - before_self)
            cores[workers].append(worker_cpu[workers][-1] / result.seconds)
            tables[workers] = [r.to_dict() for r in result.trace.rows]
            print(f"  {workers} worker(s): {result.compute_seconds:.1f} s "
                  f"({cells / result.compute_seconds:.1f} cells/s, {result.tasks} tasks, "
                  f"{cores[workers][-1]:.2f} cores used, {worker_cpu[workers][-1]:.1f} s worker "
                  f"CPU, {client_cpu[workers][-1]:.1f} s client CPU)",
                  file=sys.stderr, flush=True)
    one, two = statistics.median(seconds[1]), statistics.median(seconds[2])
    print(json.dumps({
        "cells": cells, "positions": args.positions, "groups": len(groups), "batch": args.batch,
        "seconds_1_worker": seconds[1], "seconds_2_workers": seconds[2],
        "median_1": one, "median_2": two, "cells_per_second_1": cells / one,
        "cells_per_second_2": cells / two, "speed_up": one / two,
        # Each round's 1-worker time over its 2-worker time: the two runs of a round are
        # neighbours in time, so a busy machine moves them together more than it moves medians.
        "round_ratios": [a / b for a, b in zip(seconds[1], seconds[2])],
        "cores_used_1": cores[1], "cores_used_2": cores[2],
        "efficiency_1": statistics.median(cores[1]), "efficiency_2": statistics.median(cores[2]) / 2,
        "worker_cpu_1": worker_cpu[1], "worker_cpu_2": worker_cpu[2],
        "client_cpu_1": client_cpu[1], "client_cpu_2": client_cpu[2],
        "cpu_speed_up": statistics.median(worker_cpu[1]) / (statistics.median(worker_cpu[2]) / 2),
        # The same per round (the load moves the CPU seconds too: cache misses, switches).
        "cpu_round_speed_ups": [2 * a / b for a, b in zip(worker_cpu[1], worker_cpu[2])],
        "identical_tables": tables[1] == tables[2]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
