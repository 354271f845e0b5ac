"""Open a large recording: time and memory, checked and lazy, this tree against another.

Writes a recording of full-size states (49,393 neurons, float16) of about
``--gb`` GB, then opens it in fresh processes, alternately with the full
check (every row's CRC-32 and finiteness, streamed) and lazily
(``verify=False``), and reports the median open time, the resident memory
the open added and the process's peak resident memory. With ``--base``,
another flyviz tree (e.g. an export of ``main``) opens a recording of
``--base-gb`` GB written in its own format, for comparison::

    git archive main flyviz | tar -x -C /tmp/flyviz-main
    flock /tmp/flyviz-heavy.lock .venv/bin/python tests/bench_recording.py --gb 2 \\
        --base /tmp/flyviz-main --base-gb 0.5

The file is in the page cache (just written): this measures flyviz, not the disk.
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
NEURONS = 49_393

WRITE = r"""
import sys
import numpy as np
from flyviz.record.frame import Frame
from flyviz.record.recording import Recording
path, frames = sys.argv[1], int(sys.argv[2])
rec = Recording(49_393, {"model_name": "benchmark"})
state = np.random.default_rng(0).uniform(-1, 1, 49_393).astype(np.float32)
for i in range(frames):
    state = np.roll(state, 1)
    rec.append(Frame(i, "generation", 3, "a", 4, " b", 0.5, np.arange(10), np.full(10, 0.05),
                     tuple("abcdefghij"), state, 0.5, " b" * (i + 1), i))
rec.save(path)
"""

OPEN = r"""
import json, resource, sys, time
import numpy as np, psutil
import flyviz.record.recording
try:
    import flyviz.model.safetensors_io
    import safetensors.numpy
except ImportError:
    pass
from flyviz.record.recording import Recording
process = psutil.Process()
before = process.memory_info().rss
start = time.perf_counter()
kwargs = {} if sys.argv[2] == "base" else {"verify": sys.argv[2] == "checked"}
rec = Recording.load(sys.argv[1], **kwargs)
opened = time.perf_counter() - start
after = process.memory_info().rss
start = time.perf_counter()
state = rec.state(len(rec) // 2)
first_state = time.perf_counter() - start
print(json.dumps({"open_s": opened, "rss_added_mb": (after - before) / 2**20,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "baseline_rss_mb": before / 2**20, "frames": len(rec),
                  "state_ms": 1e3 * first_state}))
"""


def _python(tree: Path, code: str, *args: str) -> dict | None:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    code = f"import flyviz; assert flyviz.__file__.startswith({str(tree)!r})\n" + code
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True, cwd=tree,
                         capture_output=True, text=True).stdout
    return json.loads(out) if out.strip() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="recording size (default 2)")
    parser.add_argument("--base", type=Path, default=None, help="another flyviz tree")
    parser.add_argument("--base-gb", type=float, default=0.5,
                        help="size of the base tree's recording (default 0.5: it reads it whole)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flyviz-bench-rec-", dir=args.workdir))
    try:
        runs = {"checked": (ROOT, work / "big.flyrec", args.gb),
                "lazy": (ROOT, work / "big.flyrec", args.gb)}
        if args.base is not None:
            runs["base"] = (args.base.resolve(), work / "base.flyrec", args.base_gb)
        written = set()
        for tree, path, gb in runs.values():
            if path not in written:
                frames = int(gb * 1e9 / (NEURONS * 2))
                print(f"writing {path.name}: {frames:,} frames", file=sys.stderr)
                _python(tree, WRITE, str(path), str(frames))
                written.add(path)
        results: dict[str, list[dict]] = {name: [] for name in runs}
        for r in range(args.rounds):
            for name in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                tree, path, _ = runs[name]
                results[name].append(_python(tree, OPEN, str(path), name))
        summary = {}
        for name, rows in results.items():
            path = runs[name][1]
            summary[name] = {
                "file_gb": path.stat().st_size / 1e9, "frames": rows[0]["frames"],
                "open_s_median": statistics.median(r["open_s"] for r in rows),
                "rss_added_mb_median": statistics.median(r["rss_added_mb"] for r in rows),
                "peak_rss_mb_median": statistics.median(r["peak_rss_mb"] for r in rows),
                "baseline_rss_mb": statistics.median(r["baseline_rss_mb"] for r in rows),
                "first_state_ms_median": statistics.median(r["state_ms"] for r in rows),
                "rounds": len(rows)}
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
