"""Benchmark: the population views at full size (not a test; run by hand).

    python tests/bench_population.py [--tokens 500] [--rounds 3]

Times, as medians over ``--rounds``, on a run of the demo brain (49,393
neurons; ``--tokens`` states of its held-out stories read as a prompt):

- the similarity sort of every neuron (target: <= 10 s on 2 cores);
- the raster pooled to 1,000 pixel rows, whole run and one new token (the
  redraw when the token advances; target <= 30 ms);
- the cell-type time courses and the three-axis trajectory.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def _median(function, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import flyviz
    from flyviz.analysis.population import (RasterPooler, group_time_courses,
                                            principal_trajectory, similarity_order)

    from flyviz.resources import assets_dir

    model = flyviz.load("demo")
    # The held-out stories as the prompt: a run of --tokens tokens that EOS does not cut short.
    text = (assets_dir() / "demo" / "heldout.txt").read_text(encoding="utf-8")
    ids = model.tokenizer.encode(text[: 8 * args.tokens])[: args.tokens]
    recording = flyviz.run(model, model.tokenizer.decode(ids), max_new_tokens=1,
                           states_dtype="float32")
    states = recording.states()[: args.tokens]
    print(f"{states.shape[0]} tokens x {states.shape[1]:,} neurons", file=sys.stderr)
    sort_s, order = _median(lambda: similarity_order(states), args.rounds)
    pooler = RasterPooler(order, rows=1000)
    pool_s, _ = _median(lambda: pooler.pool(states), args.rounds)
    column_s, _ = _median(lambda: pooler.pool_one(states[-1]), max(args.rounds, 20))
    anatomy = model.anatomy
    types_s, _ = _median(lambda: group_time_courses(states, anatomy.cell_type,
                                                    anatomy.superclass), args.rounds)
    trajectory_s, trajectory = _median(lambda: principal_trajectory(states), args.rounds)
    result = {"tokens": int(states.shape[0]), "neurons": int(states.shape[1]),
              "similarity_sort_s": round(sort_s, 2), "raster_whole_run_ms": round(pool_s * 1e3, 1),
              "raster_one_token_ms": round(column_s * 1e3, 2),
              "cell_type_courses_ms": round(types_s * 1e3, 1),
              "trajectory_ms": round(trajectory_s * 1e3, 1),
              "trajectory_explained": [round(float(v), 3) for v in trajectory.explained]}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
