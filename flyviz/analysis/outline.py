"""The brain's outline: a shell computed from the somas, or a mesh the user has.

A point cloud floating in black gives no sense of where in the brain a neuron
is. :func:`soma_outline` computes a translucent shell from the somas themselves
(an isosurface of their smoothed density, at the level that keeps a chosen
fraction of them inside); :func:`load_mesh` reads a brain outline or neuropil
meshes a user already has (``.obj``, ``.ply``, ``.stl``, e.g. exported from
neuPrint) with a scale and offset into the model's micrometre frame.

No Qt and no GL: the marching cubes are vispy's pure-NumPy ones.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError

#: Mesh file types :func:`load_mesh` reads.
MESH_SUFFIXES = (".obj", ".ply", ".stl")


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh in the model's frame (micrometres, dorsal up, as the brain view).

    Attributes
    ----------
    vertices
        ``(V, 3)`` float32.
    faces
        ``(F, 3)`` int32 vertex indices.
    name
        Where it came from (``"soma outline"`` or the file's name).
    """

    vertices: np.ndarray
    faces: np.ndarray
    name: str

    def __post_init__(self) -> None:
        v, f = np.asarray(self.vertices), np.asarray(self.faces)
        if v.ndim != 2 or v.shape[1] != 3 or len(v) == 0:
            raise InputError(f"{self.name}: a mesh needs (V, 3) vertices, got shape {v.shape}")
        if f.ndim != 2 or f.shape[1] != 3 or len(f) == 0:
            raise InputError(f"{self.name}: a mesh needs (F, 3) triangles, got shape {f.shape}")
        if not np.all(np.isfinite(v)):
            raise InputError(f"{self.name}: the mesh has non-finite vertex coordinates")
        if f.min() < 0 or f.max() >= len(v):
            raise InputError(f"{self.name}: a triangle names vertex {int(f.max())}, but the "
                             f"mesh has {len(v)} vertices")

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest corner of the mesh's box."""
        return self.vertices.min(axis=0), self.vertices.max(axis=0)


def soma_outline(positions: np.ndarray, *, grid: int = 64, smoothing: float = 1.5,
                 inside: float = 0.97, margin: float = 0.08) -> Mesh:
    """A shell around the somas: an isosurface of their smoothed density.

    Parameters
    ----------
    positions
        ``(N, 3)`` soma positions (micrometres), known ones only.
    grid
        Voxels along the longest side of the box the density is computed in.
    smoothing
        Gaussian smoothing of the density, in voxels.
    inside
        The fraction of somas whose smoothed density is at least the surface's
        level (so they lie inside the shell); the rest are outliers it does
        not bulge out for.
    margin
        Space around the somas' box, as a fraction of its longest side.
    """
    from scipy import ndimage
    from vispy.geometry.isosurface import isosurface

    p = np.asarray(positions, dtype=np.float64)
    p = p[np.all(np.isfinite(p), axis=1)] if p.ndim == 2 and p.shape[1:] == (3,) else p
    if p.ndim != 2 or p.shape[1:] != (3,) or len(p) < 10:
        raise InputError("an outline needs the positions of at least 10 somas")
    if not 0.5 <= inside < 1.0:
        raise InputError(f"inside must be in [0.5, 1), got {inside}")
    low, high = p.min(axis=0), p.max(axis=0)
    span = float((high - low).max()) or 1.0
    voxel = span * (1 + 2 * margin) / grid
    origin = low - margin * span
    shape = np.maximum(np.ceil((high - origin + margin * span) / voxel).astype(int), 2)
    index = np.clip(((p - origin) / voxel).astype(int), 0, shape - 1)
    counts = np.zeros(tuple(shape), dtype=np.float64)
    np.add.at(counts, tuple(index.T), 1.0)
    density = ndimage.gaussian_filter(counts, smoothing, mode="constant")
    # The level that keeps `inside` of the somas at or above it, read off at each soma
    # (linear interpolation, as the marching cubes see the field).
    at_somas = ndimage.map_coordinates(density, ((p - origin) / voxel - 0.5).T, order=1,
                                       mode="nearest")
    level = float(np.quantile(at_somas, 1.0 - inside))
    if level <= 0:
        level = float(density[density > 0].min())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # vispy's uint8 index arithmetic
        vertices, faces = isosurface(density.astype(np.float32), level)
    if len(faces) == 0:
        raise InputError("the somas give no outline (they are too few or too spread out)")
    vertices = (np.asarray(vertices, dtype=np.float64) + 0.5) * voxel + origin
    return Mesh(vertices.astype(np.float32), np.asarray(faces, dtype=np.int32), "soma outline")


def load_mesh(path: str | Path, *, scale: float = 1.0,
              offset: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> Mesh:
    """Read an ``.obj``, ``.ply`` or ``.stl`` mesh into the model's frame.

    Parameters
    ----------
    path
        The mesh file (several bodies in one file are joined).
    scale, offset
        ``vertex * scale + offset`` maps the file's coordinates to the brain
        view's micrometres (e.g. ``scale=0.008`` for a mesh in 8 nm voxels;
        remember the view's y axis points dorsal, use a negative scale on y by
        giving the mesh already flipped, or flip it in the tool that made it).
    """
    path = Path(path)
    if path.suffix.lower() not in MESH_SUFFIXES:
        raise InputError(f"{path.name}: a mesh must be one of {', '.join(MESH_SUFFIXES)}")
    if not path.is_file():
        raise InputError(f"{path}: no such mesh file")
    if not np.isfinite(scale) or scale == 0:
        raise InputError(f"the mesh scale must be a finite non-zero number, got {scale}")
    from flyviz.extras import require

    require("meshes", "reading a mesh file")
    import trimesh
    try:
        loaded: Any = trimesh.load(str(path), force="mesh", process=False)
        vertices = np.asarray(loaded.vertices, dtype=np.float64)
        faces = np.asarray(loaded.faces, dtype=np.int64)
    except Exception as exc:  # noqa: BLE001 - trimesh raises many kinds for a damaged file
        raise InputError(f"{path.name}: cannot read the mesh ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else 'damaged file'})") from None
    if vertices.ndim != 2 or len(vertices) == 0 or faces.ndim != 2 or len(faces) == 0:
        raise InputError(f"{path.name}: the file holds no triangles")
    with np.errstate(over="ignore", invalid="ignore"):  # checked just below, in one line
        vertices = vertices * float(scale) + np.asarray(offset, dtype=np.float64)
    largest = float(np.finfo(np.float32).max)
    if not np.all(np.abs(vertices) <= largest):  # NaN and infinity included
        raise InputError(f"{path.name}: the mesh has vertex coordinates that are not finite "
                         f"or beyond float32's range (|x| <= {largest:.3g} after the scale "
                         "and offset); give coordinates in micrometres")
    return Mesh(vertices.astype(np.float32), faces.astype(np.int32), path.name)
