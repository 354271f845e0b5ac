"""What the window computes for a model it opens, this tree against another.

Opening a model, the window orders the State raster's rows by anatomy, indexes the
neurons' labels for selections (the Fly LLM's and a spiking brain's), sets the brain
view's brightness from how crowded the screen is, picks the Spiking populations dock's
largest superclasses, and the Interventions dock resolves its list at every change. This
times each on the demo brains (49,393 neurons) in fresh processes, the trees alternately,
against another flyviz tree (e.g. an export of an earlier commit)::

    git archive e552d99 flyviz assets | tar -x -C /tmp/flyviz-base
    .venv/bin/python tests/bench_open.py --base /tmp/flyviz-base

Prints each tree's median per step (milliseconds, the median of each round's median of
``--repeats`` calls) and the ratio base / candidate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIME = r"""
import json, statistics, sys, time
import numpy as np
import flyviz
from flyviz.analysis.population import anatomy_order
from flyviz.app.spiking.spiking_population import resolve_groups
from flyviz.model.interventions import Silence, resolve
from flyviz.model.selection import NeuronIndex
from flyviz.render.cloud import density_gain
from flyviz.spiking import run
from flyviz.spiking.demo import demo_brain

repeats = int(sys.argv[1])
checkpoint, brain = flyviz.load("demo").checkpoint, demo_brain()
anatomy = checkpoint.anatomy
xy = np.asarray(anatomy.positions, np.float64)[:, :2]
xy = (xy - np.nanmin(xy, axis=0)) / np.nanmax(np.ptp(xy, axis=0)) * 760 + 20  # on a canvas
silences = [Silence([i, i + 5, i + 9]) for i in range(0, 3000, 10)]
steps = {
    "anatomy order (State raster)": lambda: anatomy_order(anatomy.superclass, anatomy.cell_type),
    "neuron index, Fly LLM": lambda: NeuronIndex(checkpoint),
    "neuron index, spiking brain": lambda: NeuronIndex(run._QueryView(brain)),
    "largest superclasses (Spiking populations)": lambda: resolve_groups(brain, ""),
    "brightness gain (brain view)": lambda: density_gain(xy, 2.0),
    "300 silences resolved (Interventions)": lambda: resolve(checkpoint, silences),
}
result = {}
for name, step in steps.items():
    step()                                    # first call apart: caches, imports
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    result[name] = 1e3 * statistics.median(times)
print(json.dumps(result))
"""


def _time(tree: Path, repeats: int) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": str(tree), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", TIME, str(repeats)], cwd=tree, env=environment,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True,
                        help="another flyviz tree (its flyviz/ and assets/) to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the trees alternately")
    parser.add_argument("--repeats", type=int, default=7, help="calls of each step a round")
    args = parser.parse_args(argv)
    trees = {"base": args.base.resolve(), "candidate": ROOT}
    seen: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            seen[name].append(_time(trees[name], args.repeats))
    steps = list(seen["candidate"][0])
    width = max(len(step) for step in steps)
    print(f"{'step':<{width}}  base ms  candidate ms  base/candidate")
    for step in steps:
        base = statistics.median(r[step] for r in seen["base"])
        candidate = statistics.median(r[step] for r in seen["candidate"])
        print(f"{step:<{width}}  {base:7.1f}  {candidate:12.1f}  {base / candidate:14.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
