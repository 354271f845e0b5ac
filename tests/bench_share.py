"""Benchmark: a shared web page of a full-size brain (not a test; run by hand).

    python tests/bench_share.py [--tokens 200] [--size 1280x720] [--frames 40]

Measures, in one run:

1. the page's size for ``--tokens`` tokens of the full-size brain (49,393
   synthetic neurons, as ``tests/bench_export.py`` makes them: smooth activity
   with travelling hot spots), against the 15 MB target, and how long building
   it takes;
2. how long headless Chromium takes to open it (navigation to the page ready:
   inflated, uploaded, first frame drawn), against the 3 s target;
3. its frame time in Chromium's software WebGL2 (SwiftShader): each frame
   drawn and read back before the next, median over ``--frames``.

Needs Debian's ``chromium``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _chromium import Browser, chromium_path  # noqa: E402
from bench_export import FULL, make_recording, positions  # noqa: E402

#: The issue's targets.
SIZE_TARGET_MB = 15.0
OPEN_TARGET_S = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--size", default="1280x720", help="the page's canvas in CSS pixels")
    parser.add_argument("--frames", type=int, default=40)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))

    from flyviz.export.share import share
    from flyviz.model.checkpoint import Anatomy
    from flyviz.viewer import ViewerState

    rng = np.random.default_rng(0)
    pos_vox, valid, where = positions(rng)
    anatomy = Anatomy(positions=pos_vox, valid=valid, kind="synthetic")
    t0 = time.perf_counter()
    recording = make_recording(args.tokens, rng, pos_vox)
    print(f"positions: {where}; {int(valid.sum()):,} drawn; {args.tokens} tokens made in "
          f"{time.perf_counter() - t0:.1f} s")
    state = ViewerState()
    state.set_model(None, anatomy=anatomy, name="benchmark-49k", neurons=FULL)
    state.set_recording(recording)
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        page = share(state, Path(folder) / "bench.html")
        built = time.perf_counter() - t0
        mb = page.stat().st_size / 1e6
        verdict = "within" if mb <= SIZE_TARGET_MB else "OVER"
        print(f"page: {mb:.2f} MB for {args.tokens} tokens of {FULL:,} neurons ({verdict} the "
              f"{SIZE_TARGET_MB:g} MB target); built in {built:.1f} s")
        if chromium_path() is None:
            print("chromium is not installed: no open or frame time")
            return 1
        with Browser((width + 300, height + 200)) as browser:
            opens = []
            for _ in range(3):
                browser.call("Page.navigate", session=True, url="about:blank")
                opens.append(browser.open(page, f"size={width}x{height}", timeout_s=60))
            inside = browser.evaluate("window.flyviz.info()")
            times = browser.evaluate(f"window.flyviz.frameTimes({args.frames})")
            assert browser.requests and all(u.startswith("file:") for u in browser.requests)
        opened = statistics.median(opens)
        verdict = "within" if opened <= OPEN_TARGET_S else "OVER"
        print(f"open: {opened:.2f} s median of 3 from navigation to ready ({verdict} the "
              f"{OPEN_TARGET_S:g} s target; the page's own decode and upload "
              f"{inside['openMs'] / 1000:.2f} s in the last); {inside['renderer']}")
        frame = statistics.median(times[3:])
        print(f"frame: {frame:.1f} ms median of {len(times) - 3} at {width}x{height} "
              f"({1000 / frame:.1f} fps) in headless Chromium's software WebGL2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
