"""Benchmark: estimated lesions of every neuron against the exact superclass sweep (not a test).

    python tests/bench_importance.py [--tokens 2000] [--workers 0] [--types 252] [--neurons 31]
                                     [--out FOLDER]

In one run, over the first ``--tokens`` tokens of the demo brain's held-out
stories (the same windows and positions for both):

* the exact lesion map of the 63 superclasses (``flyviz sweep --by superclass``:
  one batched pass of 64 columns per chunk);
* the estimate of all 49,393 single-neuron silences (``flyviz importance``:
  one forward tape and one gradient sweep of one column per window), summed
  per superclass (and per cell type with ``--types``);

on ``--workers`` Dask processes (0: in this process, no Dask). Prints the
seconds of each (computing, and with the cluster's start), their ratio (the
target: the estimate of every neuron in less time than the exact sweep of the
superclasses), and the estimate's agreement with the exact table: Spearman's
rank correlation and the fraction of groups with the same sign. ``--types N``
adds the exact sweep of the demo brain's ``N`` largest cell types (by neurons;
252 groups are four passes; the demo brain has 9,143 types) and the agreement
of the same estimate, summed per type, with it. ``--neurons N`` adds the exact
silence of ``2N`` single neurons (one pass): the ``N`` the estimate ranks
highest by ``|ΔCE_est|`` and ``N`` drawn at random (seed 0), and the agreement
over each half and over all.
``--out`` keeps the result files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "assets" / "demo" / "heldout.txt"


def _single_neurons(args, ckpt, corpus, estimate, folder) -> dict:
    """Exact silences of single neurons against their estimates."""
    import numpy as np

    from flyviz.analysis.importance import agreement, estimate_rows
    from flyviz.analysis.sweep import Group, SweepSettings, run_sweep

    top = np.argsort(-np.abs(estimate.estimate), kind="stable")[:args.neurons]
    rest = np.setdiff1d(np.arange(ckpt.config.neurons), top)
    drawn = np.random.default_rng(0).choice(rest, args.neurons, replace=False)
    picked = {"top": [int(i) for i in top], "random": [int(i) for i in drawn]}
    groups = [Group(f"{kind} #{i}", f"id:{i}", np.array([i], dtype=np.int64))
              for kind, ids in picked.items() for i in ids]
    exact = run_sweep("demo", ckpt, corpus, groups, folder / "neurons.csv", SweepSettings(),
                      by="file", workers=args.workers)
    rows = estimate_rows(estimate.estimate, groups, estimate.baseline_cross_entropy,
                         estimate.positions)
    out = {}
    for kind in ("top", "random", ""):
        part = [r for r in exact.rows if r.group.startswith(kind)]
        found = agreement(part, rows)
        print(f"single neurons {kind or 'all'}: " + found.line(), file=sys.stderr)
        out[f"neurons_{kind or 'all'}"] = found.to_dict()
    by_name = {r.group: r.delta_ce for r in rows}
    out["neuron_rows"] = [(r.group, r.delta_ce, by_name[r.group]) for r in exact.rows[:10]]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--types", type=int, default=0, metavar="N")
    parser.add_argument("--neurons", type=int, default=0, metavar="N")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.importance import (ImportanceSettings, agreement, estimate_rows,
                                            run_importance)
    from flyviz.analysis.sweep import SweepSettings, run_sweep, sweep_groups
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    ckpt = load_model("demo")
    corpus = build_corpus([HELDOUT], tokenizer_for(ckpt), max_tokens=args.tokens)
    folder = args.out or Path(tempfile.mkdtemp(prefix="flyviz-bench-importance-"))
    folder.mkdir(parents=True, exist_ok=True)
    result: dict = {"tokens": corpus.n_tokens, "positions": corpus.counted_tokens,
                    "windows": corpus.n_windows, "workers": args.workers}
    try:
        superclasses = sweep_groups(ckpt, "superclass")
        exact = run_sweep("demo", ckpt, corpus, superclasses, folder / "superclass.csv",
                          SweepSettings(), by="superclass", workers=args.workers)
        print(f"exact superclass sweep: {exact.compute_seconds:.1f} s computing "
              f"({exact.seconds:.1f} s with the cluster's start)", file=sys.stderr)
        estimate = run_importance("demo", ckpt, corpus, superclasses,
                                  folder / "estimate.csv", ImportanceSettings(),
                                  by="superclass", workers=args.workers, exact=exact.rows)
        print(f"estimate of {ckpt.config.neurons:,} neurons: {estimate.compute_seconds:.1f} s "
              f"computing ({estimate.seconds:.1f} s with the cluster's start)", file=sys.stderr)
        found = agreement(exact.rows, estimate.rows)
        print("superclasses: " + found.line(), file=sys.stderr)
        result.update({
            "exact_superclass_seconds": round(exact.compute_seconds, 1),
            "estimate_seconds": round(estimate.compute_seconds, 1),
            "estimate_over_exact": round(estimate.compute_seconds / exact.compute_seconds, 2),
            "baseline_cross_entropy": {"exact": exact.baseline_cross_entropy,
                                       "estimate": estimate.baseline_cross_entropy},
            "superclass": found.to_dict(),
            "superclass_rows": [(r.group, round(r.delta_ce, 5),
                                 round(next(e.delta_ce for e in estimate.rows
                                            if e.group == r.group), 5))
                                for r in exact.rows[:10]]})
        if args.types:
            every = sweep_groups(ckpt, "type")
            order = sorted(range(len(every)), key=lambda i: (-every[i].size, i))[:args.types]
            types = [every[i] for i in sorted(order)]
            exact_types = run_sweep("demo", ckpt, corpus, types, folder / "type.csv",
                                    SweepSettings(), by="type", workers=args.workers)
            rows = estimate_rows(estimate.estimate, types, estimate.baseline_cross_entropy,
                                 estimate.positions)
            found = agreement(exact_types.rows, rows)
            print(f"exact cell-type sweep: {exact_types.compute_seconds:.1f} s computing",
                  file=sys.stderr)
            print("cell types: " + found.line(), file=sys.stderr)
            result.update({"types": len(types),
                           "exact_type_seconds": round(exact_types.compute_seconds, 1),
                           "type": found.to_dict()})
        if args.neurons:
            result.update(_single_neurons(args, ckpt, corpus, estimate, folder))
    finally:
        if args.out is None:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
