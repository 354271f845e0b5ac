"""View → Colour by: the live state, or one per-neuron value that other features offer.

The brain is coloured by the recorded state unless the user picks another
colouring here: an atlas statistic (mean, density, selectivity...) or a lesion
map's importance. Each feature registers its entries with :meth:`ColourBy.add`
(a title and a function that builds a :class:`~flyviz.render.style.ColourLayer`)
and enables them while it has the data. The entries and the chosen one live
in the :class:`~flyviz.viewer.state.ViewerState`; the window hands the state's
layer to :meth:`~flyviz.app.window.display.DisplayController.set_colour_layer`, which
also shows its colourbar. *Live state* goes back to the recorded activation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QActionGroup

from flyviz.app.base.actions import ActionRegistry
from flyviz.model.errors import FlyvizError
from flyviz.viewer.state import STATE, LayerBuilder, ViewerState

__all__ = ["STATE", "ColourBy", "LayerBuilder"]


class ColourBy(QObject):
    """The View → Colour by menu, showing and choosing the viewer state's colour layer.

    The entries and the chosen one live in the state
    (:meth:`~flyviz.viewer.state.ViewerState.add_colour_layer`,
    :attr:`~flyviz.viewer.state.ViewerState.colour_by`); this is their menu.

    Parameters
    ----------
    state
        The viewer state.
    registry
        The window's actions (the View menu).
    tell
        ``tell(message, error)``: a line for the user.

    Signals
    -------
    changed(key)
        The brain is coloured by entry ``key`` now (:data:`STATE`: the live state).
    """

    changed = Signal(str)

    def __init__(self, state: ViewerState, registry: ActionRegistry,
                 tell: Callable[..., None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._tell = tell
        self._registry = registry
        view = registry.menu("View")
        self.menu = view.addMenu("Colour &by")
        self.menu.setToolTipsVisible(True)
        view.insertMenu(registry["clear_selection"], self.menu)
        self.group = QActionGroup(self)
        self.group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for key in state.colour_layers:
            self._on_entry(key)
        self.actions[state.colour_by].setChecked(True)
        self.menu.addSeparator()
        state.events.colour_layers.connect(self._on_entry)
        state.events.colour_by.connect(self._on_chosen)

    @property
    def current(self) -> str:
        """The entry shown now (the state's)."""
        return self.state.colour_by

    def add(self, key: str, title: str, build: LayerBuilder, tip: str = "",
            enabled: bool = True) -> QAction:
        """A new entry ``key`` whose layer ``build()`` makes when it is chosen."""
        self.state.add_colour_layer(key, title, build, tip, enabled)
        self.claim((key,))
        return self.actions[key]

    def offer(self, key: str, build: LayerBuilder, enabled: bool = True) -> QAction:
        """The entry of the colour layer kind ``key`` (its title and tooltip from the
        registry, :data:`flyviz.viewer.layers.LAYERS`), whose layer ``build()`` makes."""
        self.state.offer_layer(key, build, enabled)
        self.claim((key,))
        return self.actions[key]

    def claim(self, keys: Iterable[str]) -> None:
        """List the entries ``keys`` among the window's named actions (as ``colour_by_KEY``):
        claimed by a feature as it installs (an entry it offers is claimed already), they
        serve the feature's model kinds, and a model of another kind does not list them (a
        spiking brain listed the Fly LLM's lesion importance and atlas statistics).

        An entry no feature claims serves every kind."""
        for key in keys:
            self._registry.adopt(f"colour_by_{key}", self.actions[key])

    def set_enabled(self, keys: list[str] | tuple[str, ...], enabled: bool) -> None:
        """Offer ``keys`` or not; a withdrawn entry that is shown goes back to the live state."""
        self.state.set_available(keys, enabled)

    def choose(self, key: str) -> bool:
        """Colour the brain by entry ``key``; False (and a message) if its layer cannot be made."""
        try:
            self.state.colour_by = key
        except FlyvizError as exc:
            self._tell(f"cannot colour by {self._plain(key)}: {exc}", error=True)
            self.actions[self.current].setChecked(True)
            self.changed.emit(self.current)
            return False
        layer = self.state.layer_override
        if layer is not None:
            self._tell(f"colouring the brain by {layer.caption}; "
                       "View → Colour by → Live state goes back")
        return True

    def refresh(self, key: str) -> None:
        """Build entry ``key``'s layer again if it is shown (its values changed)."""
        if self.current == key:
            self.choose(key)

    # ------------------------------------------------------------ the state
    def _on_entry(self, key: str) -> None:
        entry = self.state.colour_layers[key]
        action = self.actions.get(key)
        if action is None:
            action = QAction(entry.title, self.menu)
            action.setCheckable(True)
            if entry.tip:
                action.setToolTip(entry.tip)
                action.setStatusTip(entry.tip)
            action.triggered.connect(lambda _checked=False, k=key: self.choose(k))
            self.group.addAction(action)
            self.menu.addAction(action)
            self.actions[key] = action
        action.setEnabled(entry.available)

    def _on_chosen(self, key: str) -> None:
        self.actions[key].setChecked(True)
        self.changed.emit(key)

    def _plain(self, key: str) -> str:
        action = self.actions.get(key)
        return key if action is None else action.text().replace("&", "")
