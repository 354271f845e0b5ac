"""The optional extras of flyviz, and the one check a feature makes before it needs one.

A feature that needs an optional package calls :func:`require` *before any
work* (no model loaded, no progress bar, no ``OUT.parts`` left behind), so a
plain ``pip install flyviz`` gets one line that names the fix::

    flyviz: error: flyviz atlas needs Dask; install it with pip install 'flyviz[atlas]'

The check looks the modules up without importing them (``importlib.util.find_spec``),
so it costs microseconds; a module hidden from the import system (``sys.modules[name]
= None``, or a finder that refuses it) counts as missing.

This module imports nothing but the standard library and :mod:`flyviz.errors`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from flyviz.errors import MissingDependencyError

__all__ = ["EXTRAS", "Extra", "available", "missing_module", "require"]


@dataclass(frozen=True)
class Extra:
    """One optional extra: the modules it brings and the name users know it by."""

    name: str
    modules: tuple[str, ...]
    package: str


#: What each need stands for: the extra of pyproject.toml that installs it.
EXTRAS: dict[str, Extra] = {
    # flyviz atlas / flyviz sweep on a cluster (LocalCluster or --scheduler).
    "dask": Extra("atlas", ("dask", "distributed"), "Dask"),
    # Parquet corpora and Parquet lesion maps.
    "parquet": Extra("atlas", ("pyarrow",), "pyarrow"),
    # CSV and Parquet tables of the spiking brain (the authors' folder, spike tables).
    "tables": Extra("atlas", ("pandas",), "pandas"),
    # Recording.to_xarray / to_zarr / open_zarr, flyviz convert --to zarr.
    "xarray": Extra("data", ("xarray",), "xarray"),
    "zarr": Extra("data", ("xarray", "zarr"), "xarray and zarr"),
    # Recording.to_nwb, flyviz convert --to nwb.
    "nwb": Extra("nwb", ("pynwb",), "pynwb"),
    # --kernel llvm: the compiled sparse kernel.
    "llvm": Extra("fast", ("llvmlite",), "llvmlite"),
    # Mesh files (.obj, .ply, .stl) for the brain's outline and neuropils.
    "meshes": Extra("meshes", ("trimesh",), "trimesh"),
    # flyviz figure: figures with axes, labels and colour bars.
    "figures": Extra("figures", ("matplotlib",), "matplotlib"),
}


def missing_module(modules: tuple[str, ...]) -> str | None:
    """The first of ``modules`` that cannot be imported (looked up, not imported), or None."""
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):  # hidden (sys.modules[name] = None) or refused
            return name
    return None


def available(need: str) -> bool:
    """True when the modules of ``need`` (a key of :data:`EXTRAS`) are installed."""
    return missing_module(EXTRAS[need].modules) is None


def require(need: str, feature: str, hint: str = "") -> None:
    """Raise :class:`~flyviz.errors.MissingDependencyError` unless ``need`` is installed.

    Parameters
    ----------
    need
        A key of :data:`EXTRAS` (``"dask"``, ``"parquet"``, ``"xarray"``,
        ``"zarr"``, ``"nwb"``, ``"llvm"``).
    feature
        What needs it, as the user called it (``"flyviz atlas"``,
        ``"Recording.to_nwb"``).
    hint
        Another way out, appended in parentheses (e.g. ``--workers 0``).
    """
    extra = EXTRAS[need]
    if missing_module(extra.modules) is None:
        return
    tail = f" ({hint})" if hint else ""
    raise MissingDependencyError(f"{feature} needs {extra.package}; install it with "
                                 f"pip install 'flyviz[{extra.name}]'{tail}")
