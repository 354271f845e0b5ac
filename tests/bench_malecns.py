"""Time and memory of the whole MaleCNS dataset in flyviz, on a synthetic set of its size.

Writes a fly-connectome-malecns-166k-layout folder of the published size (166,700 neurons,
25,582,938 edges; random graph, weights ``sign x count x 0.275``) with flyviz's writer, then
measures, each in a fresh process, median of ``--rounds``: ``flyviz verify`` (the 17 checks,
every file hashed), loading it (the checks with the loader's hashing), and loading it as a
spiking brain (which re-sorts the edges by presynaptic neuron); wall seconds and the peak
resident memory of the process.

    PYTHONPATH=$PWD python tests/bench_malecns.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

NEURONS = 166_700
EDGES = 25_582_938

_STEP = r"""
import json, resource, sys, time
t = time.perf_counter()
what, folder = sys.argv[1], sys.argv[2]
if what == "verify":
    from flyviz.model.formats.malecns import check_malecns
    assert all(r.status == "pass" for r in check_malecns(folder))
elif what == "load":
    from flyviz.model.formats.malecns import load_malecns
    load_malecns(folder)
else:
    from flyviz.spiking import load_brain
    load_brain(folder)
print(json.dumps({"s": time.perf_counter() - t,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_full_size(folder: Path, seed: int = 0) -> None:
    """A dataset of the published size in the published layout."""
    from flyviz.model.synthetic import MALECNS_SUPERCLASSES
    from flyviz.model.writers import write_malecns_dataset

    rng = np.random.default_rng(seed)
    degree = rng.multinomial(EDGES, rng.dirichlet(np.full(NEURONS, 2.0)))
    offsets = np.concatenate([[0], np.cumsum(degree)]).astype(np.int32)
    source = rng.integers(0, NEURONS, EDGES, dtype=np.int32)
    for start in range(0, NEURONS, 20_000):  # ascending inside each row, as published
        lo, hi = offsets[start], offsets[min(start + 20_000, NEURONS)]
        rows = np.repeat(np.arange(start, min(start + 20_000, NEURONS)), degree[start:start + 20_000])
        order = np.lexsort((source[lo:hi], rows))
        source[lo:hi] = source[lo:hi][order]
    sign = np.where(rng.random(NEURONS) < 0.38, -1.0, 1.0).astype(np.float32)
    weight = sign[source] * rng.integers(1, 40, EDGES).astype(np.float32) * np.float32(0.275)
    superclass = [MALECNS_SUPERCLASSES[i] for i in rng.integers(0, 8, NEURONS)]
    cell_type = [f"T{i}" if i else "" for i in rng.integers(0, 11_752, NEURONS)]
    order = rng.permutation(NEURONS)
    populations = {"retina": np.sort(order[:3335]), "lamina": np.sort(order[3335:10449]),
                   "descending": np.sort(order[10449:11763]), "sugar": np.sort(order[11763:11786])}
    write_malecns_dataset(folder, offsets=offsets, source=source, weight=weight,
                          body_id=np.arange(NEURONS, dtype=np.int64) * 7 + 10_000,
                          superclass=superclass, cell_type=cell_type, populations=populations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "malecns-166k"
        write_full_size(folder)
        results: dict[str, list[dict]] = {"verify": [], "load": [], "brain": []}
        for _ in range(args.rounds):
            for what in results:
                done = subprocess.run([sys.executable, "-c", _STEP, what, str(folder)],
                                      capture_output=True, text=True, check=True)
                results[what].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for what, runs in results.items():
        print(f"{what:<7} median {statistics.median(r['s'] for r in runs):6.2f} s, "
              f"peak {statistics.median(r['peak_mb'] for r in runs):7.0f} MB "
              f"({len(runs)} rounds)")


if __name__ == "__main__":
    main()
