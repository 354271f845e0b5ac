"""Benchmark: the lesion map on Dask (not a test; run by hand, under the shared lock).

    python tests/bench_sweep.py superclass [--tokens 2000] [--workers 2] [--rounds 1]
    python tests/bench_sweep.py scaling [--tokens 500] [--groups 252] [--rounds 1]
    python tests/bench_sweep.py batch [--tokens 150] [--batches 33,48,64,65]

``superclass``
    ``flyviz sweep demo --by superclass`` over the first ``--tokens`` tokens of
    the demo brain's held-out stories on a LocalCluster of ``--workers``
    processes, as a user runs it (a fresh interpreter: imports, model load and
    the cluster's start included); wall time (median over ``--rounds``), and
    the table it prints.
``scaling``
    The cell-type sweep of the first ``--groups`` cell types over the first
    ``--tokens`` held-out tokens on a LocalCluster of 1 worker, then of 2
    (``--rounds`` times, alternating); group-tokens/s of each while computing
    (the cluster's start excluded) and their ratio (medians over the rounds).
``batch``
    Group-tokens/s of one pass in this process for each ``--batches`` width
    (columns: groups + the untouched model), cell types, one core.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "assets" / "demo" / "heldout.txt"


def superclass(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-sweep-"))
    command = [sys.executable, "-m", "flyviz", "sweep", "demo", "--by", "superclass", "--text",
               str(HELDOUT), "--max-tokens", str(args.tokens), "--out",
               str(folder / "superclass.csv"), "--workers", str(args.workers)]
    times = []
    try:
        for round_ in range(args.rounds):
            (folder / "superclass.csv").unlink(missing_ok=True)
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(done.stderr)
            times.append(seconds)
            print(f"round {round_ + 1}: {seconds:.1f} s wall", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(done.stdout, file=sys.stderr)
    median = statistics.median(times)
    print(f"superclass sweep, {args.tokens} tokens, {args.workers} workers: median {median:.1f} s "
          f"wall over {args.rounds} round(s)", file=sys.stderr)
    return {"tokens": args.tokens, "workers": args.workers, "rounds": args.rounds,
            "seconds": [round(t, 1) for t in times], "median_seconds": round(median, 1),
            "table": done.stdout.splitlines()}


def _types(args):
    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.sweep import sweep_groups
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    ckpt = load_model("demo")
    corpus = build_corpus([HELDOUT], tokenizer_for(ckpt), max_tokens=args.tokens)
    return ckpt, corpus, sweep_groups(ckpt, "type")[:args.groups]


def scaling(args) -> dict:
    from flyviz.analysis.sweep import SweepSettings, run_sweep

    ckpt, corpus, groups = _types(args)
    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-sweep-"))
    rates: dict[int, list[float]] = {1: [], 2: []}
    tasks = 0
    try:
        for round_ in range(args.rounds):
            for workers in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                run = run_sweep("demo", ckpt, corpus, groups, folder / f"w{workers}.csv",
                                SweepSettings(), by="type", workers=workers)
                tasks = run.tasks
                rates[workers].append(run.group_tokens_per_second)
                print(f"{workers} worker(s): {run.compute_seconds:.1f} s computing "
                      f"({run.seconds:.1f} s with the cluster's start), "
                      f"{run.group_tokens_per_second:,.0f} group-tokens/s", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    return {"groups": len(groups), "tokens": corpus.n_tokens, "positions": corpus.counted_tokens,
            "tasks": tasks, "rounds": args.rounds,
            "group_tokens_per_s": {"1": round(one), "2": round(two)},
            "ratio": round(two / one, 2)}


def batch(args) -> dict:
    from flyviz.analysis import sweep as sweep_module
    from flyviz.analysis.sweep import SweepSettings, pass_partial, plan_tasks

    args.groups = max(int(b) for b in args.batches.split(",")) - 1
    ckpt, corpus, groups = _types(args)
    result = {}
    for width in (int(b) for b in args.batches.split(",")):
        settings = SweepSettings(streams=width, chunk_tokens=1 << 30, min_tasks=1)
        task = plan_tasks(groups[:width - 1], corpus, settings)[0][0]
        pass_partial(ckpt, settings, task)  # lays the graph out
        started = time.perf_counter()
        pass_partial(ckpt, settings, task)
        rate = task.n_tokens / (time.perf_counter() - started)
        sweep_module.release_engines()
        result[str(width)] = round(rate)
        print(f"--batch {width}: {rate:,.0f} group-tokens/s", file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("superclass", "scaling", "batch"))
    parser.add_argument("--tokens", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--groups", type=int, default=252)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batches", default="33,48,64,65")
    args = parser.parse_args()
    if args.tokens is None:
        args.tokens = {"superclass": 2000, "scaling": 500, "batch": 150}[args.what]
    result = {"superclass": superclass, "scaling": scaling, "batch": batch}[args.what](args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
