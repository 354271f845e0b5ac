"""Full-size load time of the layouts that join a dataset, this tree against another.

Loading checks sizes, hashes the files the engine reads, runs the dataset
authors' checks and recomputes the frozen-graph digests; this measures what
that costs at full size (49,393 neurons, 9,050,172 edges, rank-64 readout),
page cache warm, against another flyviz tree (e.g. an export of ``main``)::

    git archive main flyviz assets | tar -x -C /tmp/flyviz-main
    flock /tmp/flyviz-heavy.lock .venv/bin/python tests/bench_load.py --base /tmp/flyviz-main

Each tree writes the model with its own writers (their manifests differ),
then the trees are timed alternately, each round in fresh processes, so that
both see the same machine load. Prints the median load time per tree and
layout, and the ratio candidate / base per round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PREPARE = r"""
import sys
from pathlib import Path
from flyviz.model.bench import full_size_checkpoint
from flyviz.model.writers import write_connectome_dataset, write_recital_web, write_wordbrain
out = Path(sys.argv[1])
ckpt = full_size_checkpoint(64, seed=0)
write_connectome_dataset(ckpt, out / "dataset")
write_recital_web(ckpt, out / "web")
write_wordbrain(ckpt, out / "wordbrain")
"""

TIME = r"""
import json, sys, time
from pathlib import Path
from flyviz.model.formats import load_folder
out, repeats = Path(sys.argv[1]), int(sys.argv[2])
result = {}
for layout in ("web", "wordbrain"):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ckpt = load_folder(out / layout, dataset_dir=out / "dataset")
        times.append(time.perf_counter() - start)
        del ckpt
    result[layout] = times
print(json.dumps(result))
"""


def _python(tree: Path, code: str, *args: str) -> str:
    """Run ``code`` with flyviz imported from ``tree`` (cwd is ``tree`` too: ``python -c``
    puts the working directory first on sys.path)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    code = f"import flyviz; assert flyviz.__file__.startswith({str(tree)!r}), flyviz.__file__\n" \
        + code
    return subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, cwd=tree,
                          capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, required=True,
                        help="another flyviz tree (a folder holding flyviz/)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="loads per process")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    trees = {"candidate": ROOT, "base": args.base.resolve()}
    work = Path(tempfile.mkdtemp(prefix="flyviz-bench-load-", dir=args.workdir))
    try:
        for name, tree in trees.items():
            print(f"writing the full-size model with the {name}'s writers", file=sys.stderr)
            _python(tree, PREPARE, str(work / name))
        times: dict[str, dict[str, list[float]]] = {n: {"web": [], "wordbrain": []} for n in trees}
        ratios: dict[str, list[float]] = {"web": [], "wordbrain": []}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            medians = {}
            for name in order:
                result = json.loads(_python(trees[name], TIME, str(work / name),
                                            str(args.repeats)))
                medians[name] = {k: statistics.median(v) for k, v in result.items()}
                for layout, values in result.items():
                    times[name][layout].extend(values)
            for layout in ratios:
                ratios[layout].append(medians["candidate"][layout] / medians["base"][layout])
            print(f"round {r + 1}: " + ", ".join(
                f"{layout} {medians['base'][layout]:.3f} -> {medians['candidate'][layout]:.3f} s"
                for layout in ratios), file=sys.stderr)
        summary = {name: {layout: {"median_s": statistics.median(v), "loads": len(v)}
                          for layout, v in per.items()} for name, per in times.items()}
        summary["ratio_candidate_over_base"] = {k: statistics.median(v) for k, v in ratios.items()}
        summary["bytes_on_disk"] = {name: sum(p.stat().st_size for p in (work / name).rglob("*")
                                              if p.is_file()) for name in trees}
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
