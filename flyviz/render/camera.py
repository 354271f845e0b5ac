"""Named views of the brain for a vispy ``TurntableCamera``.

Positions are in micrometres with dorsal up (:meth:`Anatomy.positions_um`):
x left-right, y ventral-to-dorsal, z anterior-posterior. The camera's up axis
is ``+y`` so that turning the view (mouse drag, movie orbit) spins the brain
about its dorsal-ventral axis, the way people turn a specimen.
"""

from __future__ import annotations

import numpy as np

#: name -> (azimuth, elevation) in degrees for a camera with ``up="+y"``.
#: front: looking along the anterior-posterior axis, x to the right, dorsal up
#: (the familiar frontal picture of the central brain);
#: top: looking down from the dorsal side, x to the right;
#: side: looking along the left-right axis, dorsal up.
VIEW_PRESETS: dict[str, tuple[float, float]] = {
    "front": (90.0, 0.0),
    "top": (90.0, 90.0),
    "side": (0.0, 0.0),
}

#: Vertical field of view used by flyviz views (degrees): mild perspective.
DEFAULT_FOV = 30.0


def positions_bounds(positions: np.ndarray, visible: np.ndarray | None = None,
                     percentile: float = 0.0) -> np.ndarray:
    """``(2, 3)`` array of the lowest and highest drawn coordinate on each axis.

    Parameters
    ----------
    positions, visible
        Neuron positions and the drawn mask (``None`` for all).
    percentile
        Ignore this percentage of neurons at each end of each axis, so that a
        few outlying somata (some ascending and descending neurons sit far
        outside the brain) do not shrink the brain to a dot when framing it.

    Falls back to a unit cube around the origin when nothing is drawn.
    """
    pos = np.asarray(positions, dtype=np.float64)
    if visible is not None:
        pos = pos[np.asarray(visible, dtype=bool)]
    pos = pos[np.isfinite(pos).all(axis=1)]
    if pos.size == 0:
        return np.array([[-1.0] * 3, [1.0] * 3])
    if percentile > 0.0:
        return np.percentile(pos, [percentile, 100.0 - percentile], axis=0)
    return np.stack([pos.min(axis=0), pos.max(axis=0)])


#: Which axes of the positions run across and up the screen in each view.
_SCREEN_AXES = {"front": (0, 1), "top": (0, 2), "side": (2, 1)}


def apply_view(camera, name: str, bounds: np.ndarray, margin: float = 1.08,
               aspect: float = 1.0, orbit: bool = False) -> None:
    """Point ``camera`` at the brain from a named direction and fit it in view.

    Parameters
    ----------
    camera
        A ``vispy.scene.TurntableCamera``.
    name
        A key of :data:`VIEW_PRESETS`.
    bounds
        ``(2, 3)`` lowest and highest coordinates (see :func:`positions_bounds`).
    margin
        Extra room around the brain (1.0 fits tightly).
    aspect
        Width / height of the view, so that a wide brain fills a wide canvas.
    orbit
        Fit the brain at every azimuth (for a turning movie), not only this one.
    """
    if name not in VIEW_PRESETS:
        raise ValueError(f"unknown view {name!r}; choose one of {', '.join(VIEW_PRESETS)}")
    lo, hi = np.asarray(bounds, dtype=np.float64)
    extent = np.maximum(hi - lo, 1e-6)
    if camera.fov == 0:
        camera.fov = DEFAULT_FOV
    camera.up = "+y"
    azimuth, elevation = VIEW_PRESETS[name]
    camera.azimuth = azimuth
    camera.elevation = elevation
    camera.center = tuple(float(c) for c in (lo + hi) / 2.0)
    across_axis, up_axis = _SCREEN_AXES[name]
    across, up = extent[across_axis], extent[up_axis]
    if orbit:
        # Turning about the dorsal axis sweeps the x-z diagonal across the screen.
        across = float(np.hypot(extent[0], extent[2]))
        if name == "top":
            up = across
    # vispy fits scale_factor to the shorter side of the view.
    aspect = float(aspect) if aspect > 0 else 1.0
    fit = max(up, across / aspect) if aspect >= 1.0 else max(up * aspect, across)
    camera.scale_factor = float(fit) * float(margin)
    camera.distance = None
