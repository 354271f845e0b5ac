"""What rebuilding shuffled-10k's rewired graph costs at full size.

Loading the graph-control release (``fly-family-2026.md`` §1.6) rebuilds its
presynaptic indices from the 49k graph and the recorded seed
(:func:`flyviz.model.graph_control.control_indices`). The real dataset is not
here, so this times the rebuild on a random simple graph of the same size
(49,393 neurons, 9,050,172 edges, uniform sources: its shuffle needs fewer
repairs than the real graph's 59,116) and prints the median of the rounds::

    PYTHONPATH=$PWD python tests/bench_graph_control.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from flyviz.model.graph_control import control_indices
from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, random_csr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1729, help="the control seed")
    args = parser.parse_args()
    offsets, indices, _ = random_csr(FULL_NEURONS, FULL_EDGES, np.random.default_rng(0))
    seconds, repaired = [], 0
    for _ in range(args.rounds):
        start = time.perf_counter()
        rebuilt = control_indices(offsets, indices, "shuffle", args.seed)
        seconds.append(time.perf_counter() - start)
        repaired = rebuilt.repaired_slots
    print(f"control graph rebuild, {FULL_NEURONS:,} neurons, {FULL_EDGES:,} edges: median "
          f"{statistics.median(seconds):.2f} s over {args.rounds} rounds "
          f"({', '.join(f'{s:.2f}' for s in seconds)}); {repaired:,} repaired slots")


if __name__ == "__main__":
    main()
