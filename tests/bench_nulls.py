"""Cost of a null model per seed on the demo brain (49,393 neurons, 9,050,172 synapses).

For each kind, times :func:`flyviz.analysis.nulls.make_null` (the randomised graph
in memory; for ``degree`` a permutation of the targets and the swaps that repair its
self-loops and duplicates) and the whole
``flyviz null`` path, :func:`~flyviz.analysis.nulls.write_null` (load, randomise,
write the checkpoint and its dataset folder), over a few seeds, and prints the
medians. The machine's other load changes the numbers: run it alone, e.g.::

    flock /tmp/flyviz-heavy.lock .venv/bin/python tests/bench_nulls.py --seeds 3

``--kinds degree`` times one kind; ``--no-write`` skips the write.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per kind (default 2)")
    parser.add_argument("--kinds", nargs="+", default=None, help="kinds to time (default all)")
    parser.add_argument("--no-write", action="store_true", help="time make_null only")
    args = parser.parse_args()

    from flyviz.analysis.nulls import NULL_KINDS, make_null, write_null
    from flyviz.model.resolve import load_model

    real = load_model("demo")
    print(f"demo brain: {real.config.neurons:,} neurons, {real.n_edges:,} synapses")
    for kind in args.kinds or NULL_KINDS:
        made, written = [], []
        for seed in range(args.seeds):
            started = time.perf_counter()
            null = make_null(real, kind, seed)
            made.append(time.perf_counter() - started)
            del null
            if not args.no_write:
                with tempfile.TemporaryDirectory() as tmp:
                    started = time.perf_counter()
                    write_null("demo", kind, seed, Path(tmp) / "null")
                    written.append(time.perf_counter() - started)
        line = f"{kind:<8} make_null median {statistics.median(made):7.1f} s"
        if written:
            line += f"   write_null (load + make + write) median {statistics.median(written):7.1f} s"
        print(f"{line}   ({args.seeds} seed(s))", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory {peak:,.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
