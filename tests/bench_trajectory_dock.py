"""Benchmark: the app's Trajectory dock at full size (not a test; run by hand).

    python tests/bench_trajectory_dock.py [--tokens 500] [--rounds 20] [--size 640x320]

On a run of ``--tokens`` random states of the demo brain's 49,393 neurons (what
the costs measured here do not depend on the values), medians of:

- the fit (off the UI thread): the run's three principal axes and its path,
  :func:`~flyviz.app.population.trajectory_panel.fit_trajectory` on a snapshot;
- what a new token costs the UI thread while a run streams: its projection on
  the axes fitted so far, the path handed to the view and the view painted;
- moving the token marker (the view painted again).

Runs with Qt's offscreen platform unless ``QT_QPA_PLATFORM`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from _bench_docks import dock_arguments, median_ms


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fits", type=int, default=3)
    parser.add_argument("--neurons", type=int, default=49_393)
    args, width, height = dock_arguments(__doc__, "640x320", parser)

    from PySide6.QtWidgets import QApplication

    from flyviz.app._testing import make_frame
    from flyviz.app.population.trajectory_panel import (PATH_COLOURS, PathView, TrajectoryPath,
                                             fit_trajectory, project_frames)
    from flyviz.record.recording import Recording

    app = QApplication.instance() or QApplication([])
    n = args.neurons
    rng = np.random.default_rng(0)
    total = args.tokens + args.rounds
    recording = Recording(n)
    for i in range(args.tokens):
        recording.append(make_frame(i, rng.normal(0.0, 0.3, n).astype(np.float32)))
    first = recording.snapshot()
    streamed = rng.normal(0.0, 0.3, (args.rounds, n)).astype(np.float32)

    fit_times = []
    for _ in range(args.fits):
        start = time.perf_counter()
        fit = fit_trajectory(first)
        fit_times.append(time.perf_counter() - start)

    view = PathView()
    view.resize(width, height)
    view.show()
    coordinates = fit.coordinates[0]
    view.set_paths([TrajectoryPath("run", PATH_COLOURS["run"], coordinates)])
    view.repaint()
    app.processEvents()
    token_times, marker_times = [], []
    for i in range(args.tokens, total):
        recording.append(make_frame(i, streamed[i - args.tokens]))
        start = time.perf_counter()
        new = project_frames(fit.trajectory, recording, i, i + 1)
        coordinates = np.concatenate([coordinates, new])
        view.set_paths([TrajectoryPath("run", PATH_COLOURS["run"], coordinates)])
        view.set_marker(i)
        view.repaint()
        token_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        view.set_marker(i - 7)
        view.repaint()
        marker_times.append(time.perf_counter() - start)
    print(json.dumps({
        "neurons": n, "tokens": args.tokens, "size": [width, height],
        "fit_ms": median_ms(fit_times),
        "new_token_ms": median_ms(token_times),
        "marker_move_ms": median_ms(marker_times),
    }))
    view.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
