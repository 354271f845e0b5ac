"""The window's side of the feature protocol: docks, services and the feature registry.

:class:`FeatureWindow` is the part of :class:`~flyviz.app.window.main_window.MainWindow`
that :class:`~flyviz.app.base.host.WindowHost` promises features beyond the shared
objects: its docks (:class:`~flyviz.app.base.docks.Docks`: adding one, putting it beside others, showing
one), installing features (:meth:`FeatureWindow.register_feature`) and wiring them
to each other (:meth:`FeatureWindow._wire_features`); and the window's widgets as
views of what features write to the state (:func:`follow_feature_fields`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

from flyviz.app.base.docks import Docks
from flyviz.app.window.dock_kinds import DockKinds
from flyviz.kinds.language import LANGUAGE_KEY

if TYPE_CHECKING:
    from flyviz.app.base.actions import ActionRegistry  # pragma: no cover
    from flyviz.app.atlas.atlas_panel import AtlasFeature
    from flyviz.app.brain.brain_view import BrainView
    from flyviz.app.brain.inspector import NeuronInspector
    from flyviz.app.base.host import WindowHost
    from flyviz.app.runs.interventions_dock import InterventionsFeature
    from flyviz.app.lesion.lesion_panel import LesionFeature
    from flyviz.app.language.text_panel import TextPanel
    from flyviz.viewer.state import ViewerState

__all__ = ["FeatureWindow", "follow_feature_fields"]


def follow_feature_fields(state: "ViewerState", brain: "BrainView", text_panel: "TextPanel",
                          inspector: "NeuronInspector") -> None:
    """Show in the window's widgets what features write to ``state``: the synapse lines
    over ``brain``, the shading of ``text_panel``'s tokens and the open atlas's card in
    ``inspector`` (the picks and rings: :class:`~flyviz.app.brain.neuron_pick.BrainPicks`)."""
    from flyviz.app.brain.synapse_lines import synapse_lines

    def draw_lines(source: str) -> None:
        points, colours = state.lines(source) or (None, None)
        synapse_lines(brain).set(source, points, colours)

    def show_atlas(atlas: Any) -> None:
        card = inspector.atlas_card
        card.set_atlas(atlas)
        if atlas is not None:
            card.show_neuron(state.selected)

    events = state.events
    events.lines.connect(draw_lines)
    events.token_flows.connect(
        lambda flows: text_panel.set_flows(None if flows is None else list(flows)))
    events.atlas.connect(show_atlas)


class FeatureWindow(QMainWindow):
    """A main window that hosts features (see :class:`~flyviz.app.base.host.WindowHost`)."""

    #: The window's docks by key, with what features do with them (filled by the window).
    docks: Docks
    #: The installed features by name.
    features: dict[str, Any]
    #: The model kinds each installed feature serves, by its name (its FEATURES row's).
    feature_kinds: dict[str, tuple[str, ...]]
    #: The model kinds each dock serves (the window hides the others' docks).
    dock_kinds: DockKinds
    #: The window's named actions (those a feature adds serve the feature's kinds).
    actions_registry: ActionRegistry

    def widget(self) -> QWidget:
        """The window as a widget (the parent of features' dialogs)."""
        return self

    def add_dock(self, key: str, title: str, widget: QWidget, area: Qt.DockWidgetArea,
                 scroll: bool = False, kinds: tuple[str, ...] | None = None) -> QDockWidget:
        """Put ``widget`` in a new dock (how, and where it is listed, is the window's:
        :meth:`MainWindow.add_dock <flyviz.app.window.main_window.MainWindow.add_dock>`)."""
        raise NotImplementedError

    def closed_by_user(self, key: str) -> bool:
        """True when the user closed dock ``key`` (and has not opened it again): see
        :meth:`DockKinds.closed_by_user <flyviz.app.window.dock_kinds.DockKinds.closed_by_user>`."""
        return self.dock_kinds.closed_by_user(key)

    def gives_size_back(self, key: str) -> bool:
        """True when dock ``key`` is given back its size as it is shown again: see
        :meth:`DockKinds.gives_size_back <flyviz.app.window.dock_kinds.DockKinds.gives_size_back>`."""
        return self.dock_kinds.gives_size_back(key)

    def register_feature(self, name: str, install: Callable[[WindowHost], Any],
                         kinds: tuple[str, ...] = (LANGUAGE_KEY,)) -> Any:
        """Install a feature: ``install(host)`` with this window as its
        :class:`~flyviz.app.base.host.WindowHost`; it is then ``window.features[name]``.

        ``kinds``: the model kinds its docks serve (:mod:`flyviz.kinds` keys, or
        :data:`~flyviz.kinds.EVERY_KIND`); by default the Fly LLM's, which every
        feature written before kinds existed assumes.
        """
        if name in self.features:
            raise ValueError(f"a feature named {name!r} is installed already")
        before = set(self.docks)
        actions_before = set(self.actions_registry.by_name)
        # The concrete window (MainWindow) has every member the protocol names.
        feature = install(cast("WindowHost", self))
        self.features[name] = feature
        self.feature_kinds[name] = kinds
        for key in self.docks:
            if key not in before:
                self.dock_kinds.declare(key, kinds)
        # its menu actions serve its kinds too (File → Open atlas serves the language model)
        for action in self.actions_registry.by_name.keys() - actions_before:
            self.actions_registry.declare(action, kinds)
        return feature

    def _wire_features(self) -> None:
        """Connect features to one another: none are. A heatmap cell's patch, "Run with
        only the circuit" and a lesion map's "Compare with untouched" lend their
        interventions to the state's list (their parts give them back at Reset) and start
        the run the state describes; the Trajectory dock follows the state's atlas part."""

    @property
    def atlas(self) -> "AtlasFeature":
        """The atlas feature (:class:`~flyviz.app.atlas.atlas_panel.AtlasFeature`)."""
        return self.features["atlas"]

    @property
    def lesions(self) -> "LesionFeature":
        """The lesion-map feature (:class:`~flyviz.app.lesion.lesion_panel.LesionFeature`)."""
        return self.features["lesions"]

    @property
    def interventions(self) -> "InterventionsFeature":
        """The interventions feature (:class:`~flyviz.app.runs.interventions_dock.InterventionsFeature`)."""
        return self.features["interventions"]
