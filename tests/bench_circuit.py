"""Benchmark: a circuit of the demo brain for a 100-prompt task, scores and a 12-point curve.

The task: a name after "named" (``flyviz trace demo --prompt "there was a little girl
named"`` in the README): prompts from templates, ``" Lily"`` versus ``" Tom"`` after a
girl and the other way round after a boy. Run as a script::

    PYTHONPATH=$PWD python tests/bench_circuit.py [--prompts 100] [--workers 1 2]

It prints the wall time of the scores, of the faithfulness curve and in all, per
worker count, and checks that the scores of every worker count are the same bits.
Target: at most 5 minutes with 2 workers on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

OPENINGS = ("Once upon a time", "One day", "Long ago", "One sunny morning", "In a small town")
KINDS = ("little", "happy", "kind", "shy", "brave", "small", "curious", "good", "sweet", "funny")
PLACES = ("", " who lived in a big house", " who loved to play", " with a red ball")


GIRLS = (" Lily", " Mia", " Jenny", " Sue", " Anna", " Lucy")
BOYS = (" Tom", " Ben", " Max", " Tim", " Jack", " Sam")


def names_task(count: int = 100) -> list[dict[str, str]]:
    """``count`` prompts ending in "named", each with a name as its target (the metric:
    its logit minus the mean logit, as ``flyviz trace`` explains by default); girls and
    boys, openings and words interleaved so that any prefix mixes them."""
    rows = []
    for n, (opening, kind, place, child) in enumerate(itertools.product(
            OPENINGS, KINDS, PLACES, ("girl", "boy"))):
        names = GIRLS if child == "girl" else BOYS
        rows.append({"prompt": f"{opening}, there was a {kind} {child}{place} named",
                     "target": names[(n // 2) % len(names)]})
    step = 37  # coprime with the 400 combinations: a permutation
    order = [(i * step) % len(rows) for i in range(len(rows))]
    return [rows[i] for i in order[:count]]


def write_task(path: Path, count: int = 100) -> Path:
    """Write :func:`names_task` as JSON Lines."""
    path.write_text("".join(json.dumps(r) + "\n" for r in names_task(count)), encoding="utf-8")
    return path


def main() -> None:
    import numpy as np

    from flyviz.analysis.circuit import CircuitSettings, find_circuit
    from flyviz.analysis.circuit_tasks import load_task
    from flyviz.demo.loader import load_demo
    from flyviz.model.tokenizer import tokenizer_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--score", default="flow")
    parser.add_argument("--points", type=int, default=12)
    parser.add_argument("--task", type=Path, default=Path("/tmp/flyviz-bench-names.jsonl"))
    args = parser.parse_args()
    ckpt = load_demo()
    task = load_task(write_task(args.task, args.prompts), tokenizer_for(ckpt),
                     ckpt.config.vocabulary, ckpt.config.bos_token_id)
    print(f"demo brain, {len(task.prompts)} prompts ({task.n_tokens:,} tokens), "
          f"score {args.score}, {args.points} points")
    scores = {}
    for workers in args.workers:
        start = time.perf_counter()
        result = find_circuit("demo", ckpt, task, CircuitSettings(score=args.score,
                                                                  points=args.points),
                              workers=workers)
        total = time.perf_counter() - start
        scores[workers] = result.scores
        s = result.seconds
        print(f"workers {workers}: total {total:6.1f} s  (m(M), m(∅) {s['baseline']:.1f} s, "
              f"scores {s['scores']:.1f} s, curve + bisection {s['faithfulness']:.1f} s, "
              f"{result.runs} circuits measured)  CPR {result.cpr:.4f}  CMD {result.cmd:.4f}  "
              + (f"faithful circuit {result.size:,} neurons f {result.faithfulness:.3f}"
                 if result.faithful else "no circuit below the whole brain is faithful"))
    first = next(iter(scores.values()))
    same = all(np.array_equal(first, other) for other in scores.values())
    print(f"scores identical across worker counts: {same}")


if __name__ == "__main__":
    main()
