"""View → Colour by: the live state, or one per-neuron value that other features offer.

The brain is coloured by the recorded state unless the user picks another
colouring here: an atlas statistic (mean, density, selectivity...) or a lesion
map's importance. Each feature registers its entries with :meth:`ColourBy.add`
(a title and a function that builds a :class:`~flyviz.render.style.ColourLayer`)
and enables them while it has the data; choosing one hands its layer to
:meth:`~flyviz.app.display.DisplayController.set_colour_layer`, which also
shows its colourbar. *Live state* goes back to the recorded activation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup

from flyviz.model.errors import FlyvizError
from flyviz.render.style import ColourLayer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.main_window import MainWindow

#: The key of the recorded state (always available).
STATE = "state"

#: ``build() -> layer``: the layer of an entry, built when it is chosen (``None``: the state).
LayerBuilder = Callable[[], "ColourLayer | None"]


class ColourBy(QObject):
    """The View → Colour by menu and what the brain is coloured by now.

    Parameters
    ----------
    window
        The main window (its View menu, display controller and messages).

    Signals
    -------
    changed(key)
        The brain is coloured by entry ``key`` now (:data:`STATE`: the live state).
    """

    changed = Signal(str)

    def __init__(self, window: "MainWindow") -> None:
        super().__init__(window)
        self.window = window
        view = window.actions_registry.menu("View")
        self.menu = view.addMenu("Colour &by")
        self.menu.setToolTipsVisible(True)
        view.insertMenu(window.actions_registry["clear_selection"], self.menu)
        self.group = QActionGroup(self)
        self.group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        self._builders: dict[str, LayerBuilder] = {}
        #: The entry shown now.
        self.current = STATE
        self.add(STATE, "&Live state (activation h)", lambda: None,
                 "The recorded activation at the shown token (the Settings' colours)")
        self.actions[STATE].setChecked(True)
        self.menu.addSeparator()

    def add(self, key: str, title: str, build: LayerBuilder, tip: str = "",
            enabled: bool = True) -> QAction:
        """A new entry ``key`` whose layer ``build()`` makes when it is chosen."""
        if key in self.actions:
            raise ValueError(f"a colouring named {key!r} already exists")
        action = QAction(title, self.menu)
        action.setCheckable(True)
        action.setEnabled(enabled)
        if tip:
            action.setToolTip(tip)
            action.setStatusTip(tip)
        action.triggered.connect(lambda _checked=False, k=key: self.choose(k))
        self.group.addAction(action)
        self.menu.addAction(action)
        self.actions[key] = action
        self._builders[key] = build
        return action

    def set_enabled(self, keys: list[str] | tuple[str, ...], enabled: bool) -> None:
        """Offer ``keys`` or not; a withdrawn entry that is shown goes back to the live state."""
        for key in keys:
            self.actions[key].setEnabled(enabled)
        if not enabled and self.current in keys:
            self.choose(STATE)

    def choose(self, key: str) -> bool:
        """Colour the brain by entry ``key``; False (and a message) if its layer cannot be made."""
        layer = None
        if key != STATE:
            try:
                layer = self._builders[key]()
            except FlyvizError as exc:
                self.window.show_message(f"cannot colour by {self._plain(key)}: {exc}", error=True)
                self.actions[self.current].setChecked(True)
                self.changed.emit(self.current)
                return False
        self.current = key
        self.actions[key].setChecked(True)
        self.window.display.set_colour_layer(layer)
        if layer is not None:
            self.window.show_message(f"colouring the brain by {layer.caption}; "
                                     "View → Colour by → Live state goes back")
        self.changed.emit(key)
        return True

    def refresh(self, key: str) -> None:
        """Build entry ``key``'s layer again if it is shown (its values changed)."""
        if self.current == key:
            self.choose(key)

    def _plain(self, key: str) -> str:
        return self.actions[key].text().replace("&", "")
