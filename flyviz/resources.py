"""Where flyviz finds the files it ships (the demo brain, icons).

The repository keeps them in the top-level ``assets/`` folder. A wheel carries
the same folder as the ``flyviz._assets`` package (see pyproject.toml), and a
PyInstaller bundle puts it next to the executable. :func:`assets_dir` looks in
that order and returns the first that exists.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def assets_dir() -> Path:
    """The folder holding flyviz's shipped assets.

    Raises
    ------
    FileNotFoundError
        If no assets folder can be found (a broken installation).
    """
    candidates = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        candidates.append(Path(bundle) / "assets")
    here = Path(__file__).resolve().parent
    candidates.append(here.parent / "assets")  # a source checkout
    candidates.append(here / "_assets")        # an installed wheel
    for path in candidates:
        if path.is_dir() and any(path.iterdir()):
            return path
    raise FileNotFoundError("flyviz's assets folder is missing; reinstall flyviz")


def asset_path(*parts: str) -> Path:
    """Path of one shipped asset, e.g. ``asset_path("icons", "flyviz.svg")``."""
    return assets_dir().joinpath(*parts)
