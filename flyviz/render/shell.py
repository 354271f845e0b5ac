"""Translucent meshes behind the neuron cloud: the brain's outline, neuropils.

A composable visual for the app's brain view and the offscreen renderer alike
(no Qt here). Each mesh is a vispy ``Mesh`` with smooth shading, drawn before
the cloud (``order``), with depth testing and depth writes off so the neurons
behind its front surface stay lit, and ordinary alpha blending so the shell
reads as a faint glass around the glowing points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from vispy import scene

from flyviz.analysis.outline import Mesh

#: The shell's default colour (a cool grey that neither colormap uses for activity).
SHELL_COLOUR = (0.62, 0.68, 0.78)
#: Draw order: before the neuron cloud (order 0).
SHELL_ORDER = -10


class BrainShell:
    """Meshes drawn behind the cloud in a view's scene.

    Parameters
    ----------
    parent
        The scene node to draw in (the cloud's view scene).
    meshes
        What to draw (see :mod:`flyviz.analysis.outline`).
    opacity
        Alpha of each mesh's surface, 0 to 1.
    colour
        RGB of the surface.
    """

    def __init__(self, parent: Any, meshes: Sequence[Mesh] = (), opacity: float = 0.12,
                 colour: tuple[float, float, float] = SHELL_COLOUR) -> None:
        self.parent = parent
        self.opacity = float(opacity)
        self.colour = tuple(float(c) for c in colour)
        self.visuals: list[Any] = []
        self.set_meshes(meshes)

    def set_meshes(self, meshes: Sequence[Mesh]) -> None:
        """Draw ``meshes`` instead of what was drawn."""
        for visual in self.visuals:
            visual.parent = None
        self.visuals = []
        for mesh in meshes:
            visual = scene.visuals.Mesh(vertices=np.asarray(mesh.vertices, np.float32),
                                        faces=np.asarray(mesh.faces, np.uint32),
                                        color=(*self.colour, self.opacity), shading="smooth",
                                        parent=self.parent)
            visual.set_gl_state("translucent", depth_test=False, depth_mask=False,
                                cull_face=False)
            visual.order = SHELL_ORDER
            self.visuals.append(visual)

    def set_opacity(self, opacity: float) -> None:
        """Change every mesh's alpha (0 hides them)."""
        self.opacity = float(np.clip(opacity, 0.0, 1.0))
        for visual in self.visuals:
            visual.color = (*self.colour, self.opacity)
            visual.visible = self.opacity > 0

    @property
    def shown(self) -> bool:
        """True when at least one mesh is drawn."""
        return any(v.visible for v in self.visuals)
