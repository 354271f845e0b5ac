"""The flow colour layer of a traced token, for every view: the app's *Why?*, movies of it.

A neuron's node flow ``f_i(t) = v_t(i) x_i(t)`` (:class:`~flyviz.model.explain.Attribution`)
is the part of the explained logit ``L`` it carries at step ``t``. The layer colours
``f(P - lag)`` on the diverging ``difference`` colormap, symmetric about 0 over the
largest ``|f|`` at that step, so the neurons that carry most are the brightest whichever
step is shown. The app's brain view and :func:`flyviz.export.flow.export_flow` both take
their colours from here. No Qt, no vispy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flyviz.render.style import ColourLayer, ColourScale

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain import Attribution

#: The flow layer's name (the app's View → Colour by entry).
FLOW = "flow"

#: The flow layer's colormap (diverging: red adds to L, blue takes from it).
FLOW_COLORMAP = "difference"

#: The colour limit of a step without any flow (a range must not be empty).
EMPTY_LIMIT = 1e-6


def flow_limit(flows: np.ndarray) -> float:
    """The end of the flow layer's colour range for ``flows``: the largest ``|f|``."""
    flows = np.asarray(flows)
    limit = float(np.max(np.abs(flows))) if flows.size else 0.0
    return limit if limit > 0.0 else EMPTY_LIMIT


def flow_layer(attribution: "Attribution", lag: int = 0,
               limit: float | None = None) -> ColourLayer:
    """Every neuron's node flow ``f(P - lag)``, diverging about 0 over ``±limit``.

    ``limit`` defaults to the largest ``|f|`` at that step (:func:`flow_limit`).
    """
    flows = attribution.node_flow(attribution.position - int(lag))
    return ColourLayer.static(FLOW, flows, colormap=FLOW_COLORMAP, label="flow",
                              units="units of L",
                              scale=ColourScale.fixed(flow_limit(flows) if limit is None
                                                      else float(limit)))


__all__ = ["EMPTY_LIMIT", "FLOW", "FLOW_COLORMAP", "flow_layer", "flow_limit"]
