"""Parts of the viewer state that features own (see :mod:`flyviz.viewer.parts`).

* :class:`FeaturePart`: what a feature draws over the brain under its own name
  (an emphasis mask among the highlights, synapse lines), gone when its lifetime
  says (the circuit's emphasis is the run's; a lesion map's selected group the model's).
* :class:`ScreenPart` (``"screen"``): a spiking screen's effect on its target,
  drawn by the *Screen* colour layer; the model's.
* :class:`AtlasPart` (``"atlas"``): the open atlas and what *Find* lit in it; the model's.
* :class:`WhyPart` (``"why"``): *Why?*'s shading of the running text and its synapse
  lines; the run's (a trace explains one token of one run).

A feature adds its part when it is installed (``state.add_part(FeaturePart("circuit",
PER_RUN))``) and reaches it as ``state.parts["circuit"]``; a part every state has
(the screen, the atlas, *Why?*'s shading) is made by the state. No Qt here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from flyviz.viewer.flow import FLOW
from flyviz.viewer.parts import PER_MODEL, PER_RUN, Lifetime, StatePart
from flyviz.viewer.settings import ViewerError

__all__ = ["AtlasPart", "FeaturePart", "ScreenPart", "WhyPart"]


class FeaturePart(StatePart):
    """What a feature draws over the brain under its name: an emphasis and lines.

    Parameters
    ----------
    name
        The feature's name: its part's, its highlight source's and its lines' source.
    lifetime
        When they go (default: with the model).
    layers
        The *Colour by* entries the feature offers for what it holds (a lesion map's
        importance, an estimate): withdrawn when the part is cleared.
    """

    def __init__(self, name: str, lifetime: Lifetime = PER_MODEL,
                 layers: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.name = name            # type: ignore[misc]   # one class, a part per feature
        self.lifetime = lifetime    # type: ignore[misc]
        self.layers = tuple(layers)

    def emphasise(self, neurons: Iterable[int] | np.ndarray | None) -> None:
        """Light exactly ``neurons`` (the newest emphasis is shown); ``None`` clears."""
        self.state.highlights.set_neurons(self.name, None if neurons is None
                                          else np.asarray(list(neurons) if not isinstance(
                                              neurons, np.ndarray) else neurons, np.int64))

    def draw_lines(self, points: Any = None, colours: Any = None) -> None:
        """Draw synapses as lines (see :meth:`~flyviz.viewer.state.ViewerState.set_lines`);
        ``None`` clears them."""
        self.state.set_lines(self.name, points, colours)

    @property
    def emphasis(self) -> np.ndarray | None:
        """The feature's emphasis mask, or ``None``."""
        return self.state.highlights.mask(self.name)

    @property
    def lines(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The feature's lines ``(points, colours)``, or ``None``."""
        return self.state.lines(self.name)

    def clear(self) -> None:
        state = self.state
        if state.highlights.mask(self.name) is not None:
            state.highlights.set(self.name, None)
        if state.lines(self.name) is not None:
            state.set_lines(self.name, None)
        offered = [key for key in self.layers if key in state.colour_layers]
        if offered:
            state.set_available(offered, False)


class ScreenPart(StatePart):
    """A spiking screen's effect (:class:`~flyviz.viewer.layers.ScreenEffect`) or ``None``."""

    name = "screen"
    lifetime = PER_MODEL

    def __init__(self) -> None:
        super().__init__()
        self.effect: Any = None

    def on_model(self) -> None:
        # A screen is of one brain: the state asks again for any model (same size or not).
        self.clear()

    def clear(self) -> None:
        if self.effect is not None:
            self.state.screen = None


class AtlasPart(FeaturePart):
    """The open atlas (whose statistics are colour layers and whose cards the inspector
    shows) and what *Find* lit in it; both the model's."""

    def __init__(self) -> None:
        super().__init__("atlas", PER_MODEL)
        self.atlas: Any = None

    def clear(self) -> None:
        super().clear()
        self.state.atlas = None


class WhyPart(FeaturePart):
    """*Why?*'s trace on screen: the attribution and the lag shown (the *Flow* colour
    layer), the running text's shading and the synapse lines; a trace explains one token
    of one run, so every event clears it."""

    def __init__(self) -> None:
        super().__init__("why", PER_RUN, layers=(FLOW,))
        self.token_flows: tuple[float, ...] | None = None
        self.attribution: Any = None
        self.lag = 0

    def show(self, attribution: Any, lag: int = 0) -> None:
        """Show ``attribution`` (a :class:`~flyviz.model.attribution.Attribution`): its flow
        layer offered, the text shaded by its token flows."""
        self.attribution, self.lag = attribution, int(lag)
        self.set_token_flows(attribution.token_flows)
        self.state.set_available((FLOW,), True)
        self.state.refresh_layer(FLOW)

    def set_lag(self, lag: int) -> None:
        """Show the flows ``lag`` steps before the traced token (the layer is drawn again)."""
        if int(lag) != self.lag:
            self.lag = int(lag)
            self.state.refresh_layer(FLOW)

    def flow_layer(self) -> Any:
        """The flow layer at the lag shown (:func:`flyviz.viewer.flow.flow_layer`)."""
        if self.attribution is None:
            raise ViewerError("trace a token first (Run → Why this token?)")
        from flyviz.viewer.flow import flow_layer

        return flow_layer(self.attribution, self.lag)

    def set_token_flows(self, flows: Iterable[float] | None) -> None:
        shaded = None if flows is None else tuple(float(f) for f in flows)
        if shaded is not None and not all(np.isfinite(shaded)):
            raise ViewerError("token flows must be finite numbers")
        if shaded != self.token_flows:
            self.token_flows = shaded
            self.state.events.token_flows.emit(shaded)

    def clear(self) -> None:
        self.attribution, self.lag = None, 0
        super().clear()
        self.set_token_flows(None)
