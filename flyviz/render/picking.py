"""Find the neuron under the mouse by projecting neurons to the screen on the CPU.

As napari's ``_get_value_3d`` does for points: every drawn neuron is mapped to
canvas pixels, the ones within a pixel radius of the click are candidates, and
the candidate nearest to the camera wins (the one the user sees in front).
Projecting the points costs a few multiply-adds per point, column by column and
a cache-sized slice of points at a time (about a millisecond of NumPy at 166,700
points), cheap enough for a click
and free of a GPU picking pass. It is not one ``(N, 4) @ (4, 4)`` matrix
product: above roughly 50,000 rows OpenBLAS splits that product over threads,
and on a loaded two-core machine the threads wait on each other (124 ms at
166,700 rows against 0.12 ms at 49,393).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def project_points(positions: np.ndarray, transform: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Map points to canvas pixels.

    Parameters
    ----------
    positions
        ``(N, 3)`` points in the cloud's coordinates.
    transform
        A vispy transform from the cloud's coordinates to canvas pixels whose
        third output is normalised depth (``node.get_transform("visual",
        "canvas")`` or ``view.scene.node_transform(canvas.scene)``), or a
        ``(4, 4)`` matrix in vispy's row-vector convention (``p @ M``).

    Returns
    -------
    xy, depth, in_front
        ``(N, 2)`` pixel coordinates (origin top-left), ``(N,)`` depth
        (smaller is nearer) and ``(N,)`` bool, False for points behind the
        camera or outside the depth range.
    """
    count = len(positions)
    xy, depth, in_front = np.empty((count, 2)), np.empty(count), np.empty(count, dtype=bool)
    for rows, (x, y, z, w) in _mapped_chunks(positions, transform, (0, 1, 2, 3)):
        ok = in_front[rows]
        np.greater(w, 0, out=ok)
        w[~ok] = 1.0
        np.divide(x, w, out=xy[rows, 0])
        np.divide(y, w, out=xy[rows, 1])
        np.divide(z, w, out=depth[rows])
        ok &= np.isfinite(xy[rows, 0]) & np.isfinite(xy[rows, 1])
        ok &= (depth[rows] >= -1.0) & (depth[rows] <= 1.0)
    return xy, depth, in_front


#: Points projected at a time: a few float64 columns of this many rows stay in the CPU's
#: cache, so the work per point does not grow with the number of points (whole columns of
#: 166,700 points do not fit, and cost three times as much a point as 49,393 do).
CHUNK_ROWS = 16_384


def _mapped_chunks(positions: np.ndarray, transform: Any, outputs: tuple[int, ...]):
    """``(rows, columns)`` of ``positions`` mapped by ``transform``, a slice of rows at a time.

    ``columns`` holds the homogeneous outputs ``outputs`` (0-3: x, y, z, w) of the
    rows in ``rows``, as float64 arrays the caller may overwrite. Each one is three
    multiply-adds per point (``p @ M`` written out, in the same order), so the cost
    grows with the number of points and nothing waits on BLAS's threads. A
    transform that is not linear maps the points through its chain instead.
    """
    pos = np.asarray(positions).reshape(-1, 3)
    matrix = transform_matrix(transform) if hasattr(transform, "map") else transform
    if matrix is None:
        homogeneous = np.concatenate([pos.astype(np.float64), np.ones((pos.shape[0], 1))], axis=1)
        mapped = np.asarray(transform.map(homogeneous), dtype=np.float64)
        yield slice(0, len(pos)), [np.ascontiguousarray(mapped[:, j]) for j in outputs]
        return
    matrix = np.asarray(matrix, dtype=np.float64)
    for start in range(0, len(pos), CHUNK_ROWS):
        rows = slice(start, min(start + CHUNK_ROWS, len(pos)))
        # astype on a column of the positions is a fast strided copy (a float64 view's is not)
        xs, ys, zs = (pos[rows, k].astype(np.float64) for k in range(3))
        term = np.empty_like(xs)
        columns = []
        for j in outputs:
            out = np.multiply(xs, matrix[0, j])
            out += np.multiply(ys, matrix[1, j], out=term)
            out += np.multiply(zs, matrix[2, j], out=term)
            out += matrix[3, j]
            columns.append(out)
        yield rows, columns


def transform_matrix(transform: Any) -> np.ndarray | None:
    """The ``(4, 4)`` matrix of a vispy transform chain, or None if it is not one.

    A camera's chain (matrices, scales, translations, the perspective) is linear
    in homogeneous coordinates, so mapping the four unit vectors gives its matrix,
    and one matrix product then projects every neuron: about ten times faster
    than mapping the points through each transform of the chain. The matrix is
    checked against the chain on a few points; a chain that is not linear
    (a non-linear transform in it) gives None.
    """
    probe = np.array([[1.0, 2.0, 3.0, 1.0], [-40.0, 7.0, 250.0, 1.0], [500.0, -300.0, -20.0, 1.0]])
    with np.errstate(all="ignore"):   # a non-linear transform may not take the unit vectors
        matrix = np.asarray(transform.map(np.eye(4)), dtype=np.float64)
        if matrix.shape != (4, 4) or not np.isfinite(matrix).all():
            return None
        expected = np.asarray(transform.map(probe), dtype=np.float64)
    if not np.allclose(probe @ matrix, expected, rtol=1e-6, atol=1e-9 * np.abs(expected).max()):
        return None
    return matrix


def pick_neuron(positions: np.ndarray, visible: np.ndarray | None, transform: Any,
                click_xy: tuple[float, float], radius_px: float = 6.0) -> int | None:
    """The neuron drawn under a click, nearest to the camera, or ``None``.

    Parameters
    ----------
    positions
        ``(N, 3)`` neuron positions (as given to the cloud).
    visible
        ``(N,)`` bool of drawn neurons, or ``None`` for all.
    transform
        Cloud coordinates to canvas pixels (see :func:`project_points`).
    click_xy
        Click position in canvas (logical) pixels, origin top-left, as in a
        vispy mouse event's ``pos``.
    radius_px
        How far from a neuron's centre a click still hits it.
    """
    # Only the points near the click need a depth: x, y and w for all, z for those.
    shown = None if visible is None else np.asarray(visible, dtype=bool)
    click_x, click_y, r2 = float(click_xy[0]), float(click_xy[1]), float(radius_px) ** 2
    found = []
    for rows, (x, y, w) in _mapped_chunks(positions, transform, (0, 1, 3)):
        near = w > 0
        if shown is not None:
            near &= shown[rows]
        w[~near] = 1.0
        dx = np.divide(x, w, out=x)
        dx -= click_x
        dy = np.divide(y, w, out=y)
        dy -= click_y
        d2 = np.multiply(dx, dx, out=dx)
        d2 += np.multiply(dy, dy, out=dy)
        near &= d2 <= r2                # NaN and infinity are never near
        found.append(np.flatnonzero(near) + rows.start)
    candidates = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    if candidates.size == 0:
        return None
    xy, depth, ok = project_points(np.asarray(positions)[candidates], transform)
    hits = candidates[ok]
    if hits.size == 0:
        return None
    d2 = np.sum((xy[ok] - [click_x, click_y]) ** 2, axis=1)
    depth = depth[ok]
    # Nearest to the camera; ties (same depth) go to the one nearest the click.
    order = np.lexsort((d2, depth))
    return int(hits[order[0]])


def pick_in_view(node: Any, positions: np.ndarray, visible: np.ndarray | None,
                 click_xy: tuple[float, float], radius_px: float = 6.0) -> int | None:
    """:func:`pick_neuron` for a cloud ``node`` in a vispy scene (uses its current camera)."""
    return pick_neuron(positions, visible, node.get_transform("visual", "canvas"),
                       click_xy, radius_px)
