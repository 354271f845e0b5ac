"""What a feature may use of the window: the :class:`WindowHost` protocol.

A feature (the atlas, lesion maps, interventions, and the trace, patching and
flow docks to come) is installed with ``install(host) -> feature`` and reaches
the window only through these ten members: the viewer state (the bus: the
highlights, the selection and the picks, the shown token and recording, the
interventions and comparison runs start from, the text's shading, the lines and
rings over the brain, the open atlas, the camera and the docks' own choices: a
feature writes there and the window's widgets show it), the loaded model, and the
shared services (settings, background calls, actions, colourings, docks, messages,
the runs: :class:`flyviz.runs.Runs`, which starts the run the state describes whatever
the kind of model). None of them is a widget of the window: a feature never drives
the brain view, the inspector, the text or the timeline itself.
Nothing else of :class:`~flyviz.app.window.main_window.MainWindow` is a feature's
business; a feature never looks another feature up: the window wires them
together (:meth:`~flyviz.app.window.main_window.MainWindow._wire_features`).

Adding a feature is one line in :data:`~flyviz.app.window.main_window.FEATURES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QWidget

    from flyviz.app.base.actions import ActionRegistry
    from flyviz.app.base.background import BackgroundCalls
    from flyviz.app.base.docks import Docks
    from flyviz.app.brain.colouring import ColourBy
    from flyviz.app.runs.model_control import ModelController
    from flyviz.runs import Runs
    from flyviz.viewer.state import ViewerState

__all__ = ["WindowHost"]


class WindowHost(Protocol):
    """The window as a feature sees it (:class:`~flyviz.app.window.main_window.MainWindow` is one)."""

    #: What is shown and what runs start from; features write here and listen here (the
    #: window's widgets are views of it).
    state: "ViewerState"
    #: Where features keep their folders and options between sessions.
    settings: "QSettings"
    #: Slow calls off the UI thread (see :mod:`flyviz.app.base.background`).
    background: "BackgroundCalls"
    #: Commands, shortcuts and menus.
    actions_registry: "ActionRegistry"
    #: View → Colour by (entries live in the state).
    colour_by: "ColourBy"
    #: The docks by key: ``add``, ``tabify`` (beside another) and ``show``.
    docks: "Docks"
    #: The shown model as the state holds it (``state.model``, its one owner): ``bundle``
    #: (with its tokenizer, anatomy and connectivity) and ``checkpoint`` (None without a
    #: language model shown), and ``ready(name)`` (a Qt signal) once every view shows a new
    #: one the window loaded.
    models: "ModelController"
    #: Runs of the shown model, of any kind (:class:`flyviz.runs.Runs`): ``start()`` the run
    #: the state describes (the model's kind reads it), ``pause``, ``resume``, ``stop``, and
    #: ``events`` (a frame recorded, a run ended) reported on the window's thread.
    runner: "Runs"

    def widget(self) -> "QWidget":
        """The window as a widget: the parent of a feature's dialogs and Qt objects."""

    def show_message(self, message: str, error: bool = False, dialog: bool = False) -> None:
        """Tell the user something (status bar; a dialog for errors if asked)."""
