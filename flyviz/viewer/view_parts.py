"""The parts of the viewer state every view reads: the shown recording, the camera, the
colour layers and the meshes (see :mod:`flyviz.viewer.parts` for lifetimes).

The :class:`~flyviz.viewer.state.ViewerState` validates and announces changes to
them (its properties and setters are their one public face); these hold the values
and say how long they live and how a frozen copy takes them. No Qt here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import ColourLayer
from flyviz.viewer.layers import STATE
from flyviz.viewer.parts import ALWAYS, PER_MODEL, StatePart

__all__ = ["CameraPart", "ColourLayerEntry", "ColoursPart", "LayerBuilder", "MeshesPart",
           "RANGE_SCOPES", "ShownPart"]

#: How a state's colour range is taken: from the shown token's values (the window's),
#: or once over the whole recording (a movie's, the notebook's and napari's), so that a
#: colour means the same value at every token.
RANGE_SCOPES = ("token", "recording")

#: ``build() -> layer``: an entry's colour layer, built when it is chosen (``None``: the state).
LayerBuilder = Callable[[], "ColourLayer | None"]


@dataclass(frozen=True)
class ColourLayerEntry:
    """One *Colour by* entry: its key, menu title, builder, tooltip and whether it is offered."""

    key: str
    title: str
    build: LayerBuilder
    tip: str = ""
    available: bool = True


class ShownPart(StatePart):
    """The recording shown, the shown frame and whether it follows the newest frame.

    The four lifecycle events are what replace it, so its lifetime keeps: the state
    sets the recording each event brings.
    """

    name = "shown"
    lifetime = ALWAYS

    def __init__(self) -> None:
        super().__init__()
        self.recording = Recording(1)
        self.index = -1
        self.live = True

    def frozen(self) -> StatePart:
        twin = ShownPart()
        twin.recording = self.recording.snapshot()
        twin.index, twin.live = self.index, self.live
        return twin


class CameraPart(StatePart):
    """The view preset and, once the user moved it, the camera pose; a model frames its
    brain afresh (the pose is dropped, the preset kept)."""

    name = "camera"
    lifetime = PER_MODEL

    def __init__(self) -> None:
        super().__init__()
        self.view = "front"
        self.pose: CameraPose | None = None

    def clear(self) -> None:
        # Silently: the views frame the new model's brain when they draw it.
        self.pose = None


class ColoursPart(StatePart):
    """The *Colour by* entries, the chosen one and its layer, and the range scope.

    The entries are offered by features for the model shown and stay through runs;
    what each offers is theirs to withdraw.
    """

    name = "colours"
    lifetime = ALWAYS

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, ColourLayerEntry] = {}
        self.colour_by = STATE
        self.override: ColourLayer | None = None
        self.range_scope = RANGE_SCOPES[0]
        self.range_cache: dict[Any, tuple[tuple[float, float], Any, Any]] = {}

    def frozen(self) -> StatePart:
        twin = ColoursPart()
        twin.entries = {STATE: self.entries[STATE]} if STATE in self.entries else {}
        if self.colour_by != STATE:
            # The layer built now: a frozen picture never asks a live feature again.
            layer, entry = self.override, self.entries[self.colour_by]
            twin.entries[self.colour_by] = ColourLayerEntry(entry.key, entry.title,
                                                            lambda: layer, entry.tip)
        twin.colour_by, twin.override = self.colour_by, self.override
        twin.range_scope = self.range_scope
        return twin


class MeshesPart(StatePart):
    """The mesh files shown behind the cloud and the model's cached soma outline."""

    name = "meshes"
    lifetime = ALWAYS

    def __init__(self) -> None:
        super().__init__()
        self.files: list[Any] = []
        self.outline: tuple[int, Any] | None = None     # (id of the anatomy, its outline)

    def frozen(self) -> StatePart:
        twin = MeshesPart()
        twin.files, twin.outline = list(self.files), self.outline
        return twin
