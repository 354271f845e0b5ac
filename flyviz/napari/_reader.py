"""The napari reader (npe2 command ``flyviz.read_flyviz``): ``.flyrec`` files and atlas stores."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flyviz.brain_source import BrainSource, is_atlas_dir
from flyviz.napari._layers import bind, layer_data
from flyviz.record.recording import FILE_SUFFIX

LayerData = tuple[Any, dict[str, Any], str]


def get_reader(path: str | list[str]) -> Callable[[Any], list[LayerData]] | None:
    """npe2 reader: a function for a ``.flyrec`` file or a flyviz atlas folder, else ``None``."""
    if isinstance(path, list):
        if len(path) != 1:
            return None
        path = path[0]
    p = Path(path)
    if p.suffix.lower() == FILE_SUFFIX or is_atlas_dir(p):
        return read
    return None


def read(path: str | list[str]) -> list[LayerData]:
    """The layers of one recording or atlas (see :mod:`flyviz.napari._layers`).

    A damaged recording raises :class:`~flyviz.errors.RecordingError` (one
    line), which napari reports as its reader error.
    """
    if isinstance(path, list):
        path = path[0]
    source = BrainSource.open(path)
    _bind_current_viewer()
    return layer_data(source)


def _bind_current_viewer() -> None:
    # The reader gets no viewer; the one opening the file is napari's current viewer.
    try:
        import napari

        viewer = napari.current_viewer()
    except ImportError:  # pragma: no cover - called by napari itself
        return
    if viewer is not None:
        bind(viewer)
