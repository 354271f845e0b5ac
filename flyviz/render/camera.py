"""Named views of the brain for a vispy ``TurntableCamera``.

Positions are in micrometres with dorsal up (:meth:`Anatomy.positions_um`):
x left-right, y ventral-to-dorsal, z anterior-posterior. The camera's up axis
is ``+y`` so that turning the view (mouse drag, movie orbit) spins the brain
about its dorsal-ventral axis, the way people turn a specimen.
"""

from __future__ import annotations

from dataclasses import dataclass

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

#: Neurons left out at each end of each axis when framing the brain: some
#: ascending and descending somata sit far outside it and would shrink it.
FRAMING_PERCENTILE = 2.0

#: Room around the brain when a view frames it (1.0 fits tightly).
FRAMING_MARGIN = 1.15


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
    depth = extent[3 - across_axis - up_axis]
    if orbit:
        # Turning about the dorsal axis sweeps the x-z diagonal across the screen, and
        # brings it towards the camera in the front and side views.
        across = float(np.hypot(extent[0], extent[2]))
        if name == "top":
            up = across
        else:
            depth = across
    # vispy fits scale_factor to the shorter side of the view.
    aspect = float(aspect) if aspect > 0 else 1.0
    fit = max(up, across / aspect) if aspect >= 1.0 else max(up * aspect, across)
    camera.scale_factor = float(fit) * float(margin) + \
        perspective_room(float(depth), float(camera.fov), aspect)
    # With no distance of its own the camera stands where scale_factor fills the view
    # in the plane through the centre; the room above moves it back far enough that the
    # box's near face, which perspective draws largest, fills the view with the margin.
    camera.distance = None


def perspective_room(depth: float, fov: float, aspect: float = 1.0) -> float:
    """What a perspective view adds to ``scale_factor`` so that a box ``depth`` deep along
    the line of sight fits by its near face, not only by its middle.

    The camera of a vispy ``TurntableCamera`` without a distance stands
    ``fy / (2 tan(fov / 2))`` from the centre, ``fy`` being the view's height in scene
    units (``scale_factor``, or ``scale_factor / aspect`` on a tall view). The near face
    sits ``depth / 2`` closer, so the camera must stand that much further back for the
    near face to show what the middle did: ``fy`` grows by ``depth · tan(fov / 2)``.

    Parameters
    ----------
    depth
        The box's extent along the line of sight.
    fov
        The vertical field of view in degrees (0: orthographic, no room needed).
    aspect
        Width / height of the view.
    """
    if fov <= 0:
        return 0.0
    return float(depth) * float(np.tan(np.radians(fov) / 2.0)) * min(float(aspect), 1.0)


def brain_bounds(positions: np.ndarray, visible: np.ndarray | None = None) -> np.ndarray:
    """``(2, 3)`` box to frame the brain by: robust to outlying somata.

    The box's size is that of the neurons between the
    :data:`FRAMING_PERCENTILE` and ``100 - FRAMING_PERCENTILE`` percentiles;
    it is centred on the middle of the central 80 %, which outlying somata do
    not pull off the brain as they pull the middle of the whole box.
    """
    bounds = positions_bounds(positions, visible, percentile=FRAMING_PERCENTILE)
    shown = np.ones(len(positions), bool) if visible is None else np.asarray(visible, bool)
    if shown.any():
        centre = positions_bounds(positions, shown, percentile=10.0).mean(axis=0)
        half = (bounds[1] - bounds[0]) / 2.0
        bounds = np.stack([centre - half, centre + half])
    return bounds


def frame_brain(camera, name: str, positions: np.ndarray, visible: np.ndarray | None,
                aspect: float, orbit: bool = False) -> None:
    """Point ``camera`` at the brain from view ``name`` and fit it: the app's and movies' framing.

    See :func:`brain_bounds` and :func:`apply_view`; ``aspect`` is the width
    / height of the area the brain is drawn in.
    """
    apply_view(camera, name, brain_bounds(positions, visible), margin=FRAMING_MARGIN,
               aspect=aspect, orbit=orbit)


@dataclass(frozen=True)
class CameraPose:
    """Where a ``TurntableCamera`` looks from, to show another canvas the same view.

    Parameters
    ----------
    azimuth, elevation
        Degrees.
    center
        The point looked at (micrometres).
    scale_factor
        Size of the scene that fits the shorter side of the view.
    fov
        Vertical field of view in degrees.
    distance
        Camera distance, or ``None`` to derive it from ``scale_factor`` and ``fov``.
    """

    azimuth: float
    elevation: float
    center: tuple[float, float, float]
    scale_factor: float
    fov: float = DEFAULT_FOV
    distance: float | None = None

    @classmethod
    def of(cls, camera) -> "CameraPose":
        """The pose of a vispy ``TurntableCamera``."""
        distance = camera.distance
        x, y, z = (float(c) for c in camera.center)
        return cls(azimuth=float(camera.azimuth), elevation=float(camera.elevation),
                   center=(x, y, z),
                   scale_factor=float(camera.scale_factor), fov=float(camera.fov),
                   distance=None if distance is None else float(distance))

    def directions(self) -> tuple[np.ndarray, np.ndarray]:
        """``(view, up)``: unit vectors, in the scene's coordinates, of where the camera of
        this pose looks and which way is up on screen (as a ``TurntableCamera`` given this
        pose places them: its ``up="+y"`` frame turned by elevation, then azimuth)."""
        from vispy.util import transforms

        up, forward = np.array([0.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0])
        right = np.cross(forward, up)
        # The camera's own frame (looking down its -z, y up) into the scene's, as vispy's
        # PerspectiveCamera._update_camera_pos maps it (row vectors).
        frame = transforms.affine_map(np.array([(0, 0, 0), (0, 0, -1), (1, 0, 0), (0, 1, 0)]),
                                      np.array([(0, 0, 0), forward, right, up])).T
        rotation = transforms.rotate(self.elevation, -right).dot(
            transforms.rotate(self.azimuth, up))
        turn = frame[:3, :3] @ rotation[:3, :3]
        view, screen_up = np.array([0.0, 0.0, -1.0]) @ turn, np.array([0.0, 1.0, 0.0]) @ turn
        return view / np.linalg.norm(view), screen_up / np.linalg.norm(screen_up)

    def apply(self, camera) -> None:
        """Give a vispy ``TurntableCamera`` this pose (dorsal up)."""
        camera.fov = self.fov
        camera.up = "+y"
        camera.azimuth = self.azimuth
        camera.elevation = self.elevation
        camera.center = self.center
        camera.scale_factor = self.scale_factor
        camera.distance = self.distance
