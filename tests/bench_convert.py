"""Export a large recording to xarray, Zarr, NWB and .npz: time and memory.

Writes a recording of full-size states (49,393 neurons, float16) of about
``--gb`` GB, then, each in a fresh process and in turn for ``--rounds``
rounds, opens it and makes its xarray dataset, or writes it as Zarr, NWB or
``.npz`` (without a model: the labels add a few MB whatever the run's
length). Reports medians of the time and of the anonymous memory the step
added (``RssAnon``: the process's own memory, not the file's pages the
memory map brings into the page cache), at the end and at its peak (sampled
every 10 ms)::

    flock /tmp/flyviz-heavy.lock .venv/bin/python tests/bench_convert.py --gb 1 --rounds 3

The file is in the page cache (just written): this measures flyviz, not the disk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

# The large recording is written as bench_recording writes it (same folder: on sys.path).
from bench_recording import NEURONS, ROOT, WRITE, _python

STEPS = ("xarray", "zarr", "nwb", "npz")

STEP = r"""
import json, sys, threading, time
from pathlib import Path


def anon_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


import numpy as np
import xarray, zarr, pynwb  # imported before the baseline: their code is not the recording's
from flyviz.record.recording import Recording

path, step, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
peak = [0.0]
done = threading.Event()


def sample():
    while not done.is_set():
        peak[0] = max(peak[0], anon_mb())
        time.sleep(0.01)


before = anon_mb()
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
rec = Recording.load(path, verify=False)
if step == "xarray":
    ds = rec.to_xarray()
    assert isinstance(ds["state"].variable._data, np.memmap)
    float(ds["state"][len(rec) // 2, 1000])
elif step == "zarr":
    rec.to_zarr(out / "run.zarr")
elif step == "nwb":
    rec.to_nwb(out / "run.nwb")
else:
    rec.to_npz(out / "run.npz")
seconds = time.perf_counter() - start
done.set()
after = anon_mb()
print(json.dumps({"s": seconds, "anon_added_mb": after - before,
                  "anon_peak_added_mb": max(peak[0], after) - before, "frames": len(rec)}))
"""

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="recording size (default 1)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flyviz-bench-convert-", dir=args.workdir))
    try:
        path = work / "big.flyrec"
        frames = int(args.gb * 1e9 / (NEURONS * 2))
        print(f"writing {path.name}: {frames:,} frames", file=sys.stderr)
        _python(ROOT, WRITE, str(path), str(frames))
        results: dict[str, list[dict]] = {step: [] for step in STEPS}
        for r in range(args.rounds):
            for step in (STEPS if r % 2 == 0 else tuple(reversed(STEPS))):
                out = work / f"out-{step}"
                out.mkdir()
                results[step].append(_python(ROOT, STEP, str(path), step, str(out)))
                shutil.rmtree(out)
        summary = {"file_gb": path.stat().st_size / 1e9, "frames": frames}
        for step, rows in results.items():
            summary[step] = {
                "s_median": statistics.median(r["s"] for r in rows),
                "anon_added_mb_median": statistics.median(r["anon_added_mb"] for r in rows),
                "anon_peak_added_mb_median": statistics.median(r["anon_peak_added_mb"]
                                                               for r in rows),
                "rounds": len(rows)}
        print(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
