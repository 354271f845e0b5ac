"""What a feature may use of the window: the :class:`WindowHost` protocol.

A feature (the atlas, lesion maps, interventions, and the trace, patching and
flow docks to come) is installed with ``install(host) -> feature`` and reaches
the window only through these members: the viewer state (which holds the
highlights, the selection, the interventions and comparison runs start from, and the
docks' own choices: a feature talks to it rather than to another part of the window),
the shared parts (actions, colourings, the brain view, background calls) and a few
window services (docks, messages, selection, running a prompt).
Nothing else of :class:`~flyviz.app.main_window.MainWindow` is a feature's
business; a feature never looks another feature up: the window wires them
together (:meth:`~flyviz.app.main_window.MainWindow._wire_features`).

Adding a feature is one line in :data:`~flyviz.app.main_window.FEATURES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtWidgets import QDockWidget, QWidget

    from flyviz.app.actions import ActionRegistry
    from flyviz.app.background import BackgroundCalls
    from flyviz.app.brain_view import BrainView
    from flyviz.app.colouring import ColourBy
    from flyviz.app.compare_control import CompareController
    from flyviz.app.inspector import NeuronInspector
    from flyviz.app.model_control import ModelBundle
    from flyviz.app.text_panel import TextPanel
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.viewer.state import ViewerState

__all__ = ["WindowHost"]


class WindowHost(Protocol):
    """The window as a feature sees it (:class:`~flyviz.app.main_window.MainWindow` is one)."""

    #: What is shown (model, recording, token, colours, highlight, picks, camera...), the
    #: interventions and comparison runs start from, and the docks' own choices.
    state: "ViewerState"
    #: Where features keep their folders and options between sessions.
    settings: "QSettings"
    #: Slow calls off the UI thread (see :mod:`flyviz.app.background`).
    background: "BackgroundCalls"
    #: Commands, shortcuts and menus.
    actions_registry: "ActionRegistry"
    #: View → Colour by (entries live in the state).
    colour_by: "ColourBy"
    #: The 3-D view (picking and its overlays).
    brain: "BrainView"
    #: The runs' playback (a dock that steps through a recording); what runs start from
    #: (interventions, comparison, prompt) is the state's, never set here.
    runs: "CompareController"
    #: The neuron inspector (its atlas card).
    inspector: "NeuronInspector"
    #: The running text (features shade its tokens).
    text_panel: "TextPanel"
    #: ``model_ready(name)``: a model is ready (a Qt signal).
    model_ready: Any

    @property
    def checkpoint(self) -> "Checkpoint | None":
        """The loaded model's checkpoint, or None."""

    @property
    def bundle(self) -> "ModelBundle | None":
        """The loaded model with its tokenizer, anatomy and connectivity, or None."""

    def widget(self) -> "QWidget":
        """The window as a widget: the parent of a feature's dialogs and Qt objects."""

    def add_dock(self, key: str, title: str, widget: "QWidget", area: "Qt.DockWidgetArea",
                 scroll: bool = False) -> "QDockWidget":
        """A new dock holding ``widget`` (listed in View)."""

    def tabify_dock(self, beside: str, dock: "QDockWidget", keep_front: bool = True) -> None:
        """Put ``dock`` in a tab beside dock ``beside`` (which stays in front if ``keep_front``)."""

    def show_dock(self, dock: "QDockWidget", height_fraction: float | None = None) -> None:
        """Show ``dock`` in front (as tall as ``height_fraction`` of the window if given)."""

    def show_message(self, message: str, error: bool = False, dialog: bool = False) -> None:
        """Tell the user something (status bar; a dialog for errors if asked)."""

    def select_neuron(self, index: int | None) -> None:
        """Select (ring and inspect) neuron ``index``; None clears."""

    def run_prompt(self, text: str | None = None) -> bool:
        """Run ``text`` (default: the prompt box); False if it could not start."""
