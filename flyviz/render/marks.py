"""What is drawn over the neuron cloud: rings around picked and intervened neurons, and
synapses as lines between somas.

The window's brain view and every offscreen picture (stills, movie frames, figures) draw
them with these visuals, so a movie shows the marks the window shows. No Qt here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vispy import scene

__all__ = ["INTERVENED_COLOR", "INTERVENED_SIZE", "LINE_WIDTH", "PICK_COLOR", "PICK_SIZE",
           "RINGS_AT_FULL_STRENGTH", "draw_lines", "draw_rings"]

#: Ring colours (RGBA, 0-1): the picked neurons, and the neurons an intervention touches.
PICK_COLOR = (1.0, 0.92, 0.35, 0.95)
INTERVENED_COLOR = (1.0, 0.35, 0.55, 0.85)
#: Ring diameters (pixels of the view, whatever its size).
PICK_SIZE = 11.0
INTERVENED_SIZE = 8.0
#: Up to this many rings are drawn at full strength; more fade (see :func:`draw_rings`).
RINGS_AT_FULL_STRENGTH = 300
#: Synapse line width (pixels).
LINE_WIDTH = 1.5


def draw_rings(markers: Any, parent: Any, positions: np.ndarray, color: tuple[float, ...],
               size: float) -> Any:
    """Ring ``positions`` (``(k, 3)``) in ``color`` at ``size`` pixels over the cloud in
    ``parent``: updates ``markers`` (made on first use when ``None``; hidden when there is
    nothing to ring) and returns it."""
    if not len(positions):
        if markers is not None:
            markers.visible = False
        return markers
    if markers is None:
        markers = scene.visuals.Markers(scaling="fixed", parent=parent)
        # Drawn after the additive cloud, without depth: a ring is never hidden.
        markers.set_gl_state("translucent", depth_test=False)
        markers.order = 10
    # Thousands of full-strength rings would hide the colours they surround (a silenced
    # superclass): rings fade as there are more of them, down to a quarter.
    alpha = color[3] * float(np.clip(np.sqrt(RINGS_AT_FULL_STRENGTH / len(positions)),
                                     0.25, 1.0))
    faded = (*color[:3], alpha)
    markers.set_data(np.asarray(positions, np.float32), symbol="ring", size=size,
                     edge_width=0.0, face_color=faded, edge_color=faded)
    markers.visible = True
    return markers


def draw_lines(visual: Any, parent: Any, points: np.ndarray | None,
               colours: np.ndarray | None) -> Any:
    """Draw segments ``points`` (``(2k, 3)``, pre then post soma) in ``colours`` (RGBA per
    point) over the cloud in ``parent``, light added, no depth test (a line shows where it
    crosses neurons): updates ``visual`` (made on first use; hidden for no points) and
    returns it."""
    if points is None or not len(points):
        if visual is not None:
            visual.visible = False
        return visual
    if visual is None:
        visual = scene.visuals.Line(parent=parent, connect="segments", method="gl")
        visual.set_gl_state("additive", depth_test=False)
    visual.set_data(pos=np.asarray(points, np.float32), color=np.asarray(colours, np.float32),
                    width=LINE_WIDTH)
    visual.visible = True
    return visual
