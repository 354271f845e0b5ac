"""What the dock benchmarks share (imported by tests/bench_*_dock.py; not a benchmark itself).

Each is run by hand as ``python tests/bench_X_dock.py``, so this folder is on the path.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def median_ms(times: list[float]) -> float:
    """The median of ``times`` (seconds) in milliseconds, to 0.01 ms."""
    return round(float(np.median(times)) * 1e3, 2)


def dock_arguments(doc: str | None, size: str, parser: argparse.ArgumentParser | None = None
                   ) -> tuple[argparse.Namespace, int, int]:
    """The command line of a dock benchmark: ``--tokens``, ``--rounds``, ``--size WxH``
    (default ``size``) and what ``parser`` adds; returns it with the width and height.

    Qt's offscreen platform is chosen unless ``QT_QPA_PLATFORM`` says otherwise.
    """
    parser = parser or argparse.ArgumentParser()
    parser.description = doc
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--size", default=size, help="the dock's size, WxH")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    return args, width, height
