"""View → Layout: the window's dock arrangements (Default, Analysis, Presentation), and
keeping the user's arrangement between sessions.

The docks are keyed by their :attr:`~flyviz.app.window.main_window.MainWindow.docks`
keys. Each preset starts from the default arrangement (captured once every
feature has put its docks in place) and then moves, shows or hides the docks it
knows; a dock it does not know (a feature added later) keeps its default place
in Default, joins the analysis docks' tabs in Analysis and is hidden in
Presentation. Sizes are fractions of the window, so a preset suits a laptop
screen as well as a large one.

The arrangement the user leaves (a preset, then moved and resized docks) is
saved with :meth:`QMainWindow.saveState` under ``window/state`` and restored at
the next start; ``window/layout`` says which preset it started from,
``window/state_size`` the window's size then, and ``window/dock_sizes`` the sizes the
docks swapped between model kinds are to be given back as they are shown (Qt restores a
hidden dock squeezed; see :mod:`~flyviz.app.window.dock_kinds`), and ``window/closed_docks``
the docks the user closed, which stay closed (whatever kind of model opens) until the
user opens them from View or applies a preset. A window that opens at another size
(another screen, a saved size that no longer fits) keeps the arrangement but takes
its preset's sizes for the new size: the saved columns are pixels, and a state saved
with wide side columns left the brain view, the point of the window, the narrowest part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from PySide6.QtCore import QByteArray, QEvent, QObject, QSettings, QSize, Qt
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabBar, QTabWidget

from flyviz.app.base.actions import ActionRegistry
from flyviz.app.base.docks import FIT_HEIGHT, fit_height, hide_stale_tab_bars
from flyviz.app.window.dock_kinds import DockKinds

__all__ = ["KNOWN_DOCKS", "LAYOUT_VERSION", "PRESETS", "LayoutPresets", "prepare_window"]

#: Version stamped on saved window states: a state saved by an older flyviz (the Model
#: dock above the tabs, a short Traces plot) is not restored; the window starts from
#: the default layout instead.
LAYOUT_VERSION = 2

#: The settings group of the sizes docks swapped between model kinds are given back.
DOCK_SIZES = "window/dock_sizes"

#: The settings group of the docks the user closed (each key: true).
CLOSED_DOCKS = "window/closed_docks"

#: The presets: name → (menu title, what it is for).
PRESETS: dict[str, tuple[str, str]] = {
    "default": ("&Default", "Every panel in its first place: controls left, text right, "
                            "plots below the brain"),
    "analysis": ("&Analysis", "The whole-brain raster, cell types and graph large; "
                              "the brain smaller"),
    "presentation": ("&Presentation", "The brain large with the text and the next token; "
                                      "other panels hidden"),
}

#: The docks the presets place by name; any other dock is placed as the module says.
#: (Patching keeps its default place in Analysis: a tab of the left column, whose full
#: height its heatmap's rows need. The spiking brain's Stimulus, Spiking populations and Screen
#: docks keep theirs: they are not analysis views of a language model's run.)
KNOWN_DOCKS = frozenset({"text", "topk", "model", "controls", "inspector", "raster", "traces",
                         "atlas", "lesions", "interventions", "population", "cell_types", "why",
                         "graph", "trajectory", "patching", "stimulus", "spiking_population",
                         "screen"})

#: Docks left visible (and large) in Presentation (those that serve the kind shown:
#: the text and the next token of the Fly LLM, a spiking brain's population rates).
PRESENTATION_DOCKS = ("text", "topk", "spiking_population")

#: The analysis docks in front in Analysis, bottom row left to right.
ANALYSIS_DOCKS = ("population", "cell_types", "graph")

Area = Qt.DockWidgetArea


def prepare_window(window: QMainWindow) -> None:
    """Window-wide dock settings of every layout (not part of a saved state).

    The left column reaches down to the timeline (the bottom row starts right of it)
    so its tabs have the height for their forms, and its tabs run down its side so
    their titles fit in a column a quarter of a laptop screen wide (whole, the bar
    scrolling where the window is too short for all nine: :class:`WholeTabTitles`).
    """
    window.setCorner(Qt.Corner.BottomLeftCorner, Area.LeftDockWidgetArea)
    window.setTabPosition(Area.LeftDockWidgetArea, QTabWidget.TabPosition.West)
    WholeTabTitles(window)
    # The user may arrange docks as the presets do: in tabs, and side by side within an area.
    window.setDockOptions(window.dockOptions() | QMainWindow.DockOption.AllowTabbedDocks
                          | QMainWindow.DockOption.AllowNestedDocks)


class WholeTabTitles(QObject):
    """Every dock tab bar of ``window`` shows its titles whole, with arrows to scroll when
    they do not all fit, never abridged.

    Qt abridges every title of a bar a little when they do not fit: in a window 720 px tall
    (a 1366×768 laptop screen) the left column's nine read "Mo…", "Setti…", "At…",
    "W…", whose names the user had to find by pointing at each. Qt makes a window's tab
    bars as it first needs each one, and sets a new one to abridge once it is made: so each
    is set once it is polished (before it is first shown).
    """

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        for bar in window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
            _whole_titles(bar)
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if event.type() == QEvent.Type.ChildPolished:
            child = event.child()  # type: ignore[attr-defined]
            if isinstance(child, QTabBar):
                _whole_titles(child)
        return False


def _whole_titles(bar: QTabBar) -> None:
    bar.setElideMode(Qt.TextElideMode.ElideNone)
    bar.setUsesScrollButtons(True)


def _clamp(value: float, low: int, high: int) -> int:
    return int(max(low, min(high, value)))


class LayoutPresets(QObject):
    """The View → Layout menu and the saved arrangement of ``window``'s docks.

    Parameters
    ----------
    window
        The main window, its docks in their default places.
    docks
        The window's docks by key (new docks added later are placed too).
    settings
        Where the arrangement persists.
    registry
        The window's actions; the presets are ``layout_<name>`` there.
    kinds
        The model kinds the docks serve: a preset shows only the shown kind's docks.
    """

    def __init__(self, window: QMainWindow, docks: dict[str, QDockWidget], settings: QSettings,
                 registry: ActionRegistry, kinds: DockKinds | None = None) -> None:
        super().__init__(window)
        self.window = window
        self.docks = docks
        self.kinds = kinds
        self.settings = settings
        self.default_state = window.saveState(LAYOUT_VERSION)
        #: The preset the arrangement started from.
        self.current = "default"
        self.restored = False
        #: The window's size when the restored arrangement was saved (``None``: not known).
        self.restored_size: QSize | None = None
        self.actions: dict[str, QAction] = {}
        group = QActionGroup(self)
        group.setExclusive(True)
        menu = registry.menu("View").addMenu("&Layout")
        menu.setObjectName("layoutMenu")
        for name, (title, description) in PRESETS.items():
            action = registry.add(f"layout_{name}", title, self._applier(name), "", description)
            action.setCheckable(True)
            group.addAction(action)
            menu.addAction(action)
            self.actions[name] = action
        self.actions["default"].setChecked(True)

    def _applier(self, name: str) -> Callable[[], None]:
        return lambda: self.apply(name)

    # ------------------------------------------------------------ persistence
    def restore(self) -> bool:
        """Restore the arrangement saved at the end of the last session; False if none fits."""
        saved = self.settings.value("window/state")
        name = str(self.settings.value("window/layout", "default"))
        if isinstance(saved, (bytes, bytearray, QByteArray)) \
                and self.window.restoreState(saved, LAYOUT_VERSION):
            self.restored = True
            size = self.settings.value("window/state_size")
            self.restored_size = size if isinstance(size, QSize) else None
            self._mark(name if name in PRESETS else "default")
            if self.kinds is not None:
                # What is not a size is passed over; a closed dock is its key alone.
                sizes = self._saved_group(DOCK_SIZES)
                self.kinds.remember_sizes({key: size for key, size in sizes.items()
                                           if isinstance(size, QSize)})
                self.kinds.remember_closed(list(self._saved_group(CLOSED_DOCKS)))
        # The tab bars of the arrangement replaced, or of the one the window was built in
        # (every kind's docks declared, the other kinds' put away), are left drawn where
        # they were while something pumps events itself, as a script loading a model does.
        hide_stale_tab_bars(self.window)
        return self.restored

    def _saved_group(self, group: str) -> dict[str, Any]:
        """The entries the settings group ``group`` holds, by key, in the settings' order."""
        self.settings.beginGroup(group)
        try:
            return {key: self.settings.value(key) for key in self.settings.childKeys()}
        finally:
            self.settings.endGroup()

    def save(self) -> None:
        """Remember the arrangement, its preset, the window's size, the sizes still to give
        back and the docks the user closed, for the next session."""
        self.settings.setValue("window/state", self.window.saveState(LAYOUT_VERSION))
        self.settings.setValue("window/layout", self.current)
        self.settings.setValue("window/state_size", self.window.size())
        self.settings.remove(DOCK_SIZES)
        self.settings.remove(CLOSED_DOCKS)
        if self.kinds is not None:
            for key, size in self.kinds.sizes_to_give_back().items():
                self.settings.setValue(f"{DOCK_SIZES}/{key}", size)
            for key in self.kinds.closed_keys():
                self.settings.setValue(f"{CLOSED_DOCKS}/{key}", True)

    def first_shown(self) -> None:
        """Once the window has its size: the default sizes, unless a layout was restored;
        a restored one saved at another window size (or at one not recorded) takes its
        preset's sizes for this one, the docks staying where they were."""
        if not self.restored:
            self.default_sizes()
        elif self.restored_size != self.window.size():
            self.preset_sizes(self.current)
            if self.kinds is not None:
                # The sizes to give back were for the other size too.
                self.kinds.forget_sizes()

    def preset_sizes(self, name: str) -> None:
        """The column widths and row heights preset ``name`` gives for the window's size."""
        if name == "analysis":
            self._analysis_sizes()
        elif name == "presentation":
            self._presentation_sizes()
        else:
            self.default_sizes()

    # ------------------------------------------------------------ presets
    def apply(self, name: str) -> None:
        """Arrange the docks as preset ``name`` says (see :data:`PRESETS`)."""
        if name not in PRESETS:
            raise ValueError(f"no layout preset named {name!r}; presets: {', '.join(PRESETS)}")
        window = self.window
        window.restoreState(self.default_state, LAYOUT_VERSION)
        if name == "default":
            self.default_sizes()
        elif name == "analysis":
            self._analysis()
        else:
            self._presentation()
        if self.kinds is not None:
            # Presentation keeps a kind's own docks to those it names; the others show them.
            self.kinds.rearranged(lambda key: name != "presentation" or key in PRESENTATION_DOCKS)
        if name != "presentation":
            for dock in self.docks.values():
                if dock.property(FIT_HEIGHT) and dock.isVisible() and not dock.isFloating():
                    fit_height(window, dock)
        hide_stale_tab_bars(window)     # those of the arrangement replaced
        self._mark(name)

    def default_sizes(self) -> None:
        """Column widths and row heights of the default layout for the window's size."""
        width, height = self.window.width(), self.window.height()
        self._resize(("controls", "model"), _clamp(0.24 * width, 300, 380), Qt.Orientation.Horizontal)
        self._resize(("text", "topk"), _clamp(0.27 * width, 330, 440), Qt.Orientation.Horizontal)
        # The bottom row is tall enough for the traces' axis labels to be read.
        self._resize(("raster", "traces"), _clamp(0.26 * height, 190, 300), Qt.Orientation.Vertical)
        self._split_column(("text", "topk"), 0.5)
        # The traces' legend (three curves in a comparison) needs the wider half.
        self._split_row(("raster", "traces"), 0.45)

    def _analysis(self) -> None:
        """Whole brain over cell types (trajectory and traces behind) under the brain; the
        text over the graph on the right."""
        window, docks = self.window, self.docks
        window.setCorner(Qt.Corner.BottomRightCorner, Area.RightDockWidgetArea)
        # The middle column under the brain: (dock in front, docks in tabs behind it).
        middle = [("population", ["raster"]), ("cell_types", ["traces", "trajectory"])]
        stacks = [[docks[k] for k in (front, *behind) if k in docks] for front, behind in middle]
        stacks = [stack for stack in stacks if stack]
        unknown = [docks[k] for k in self._unknown()]
        if unknown:
            # A dock the presets do not know is an analysis view: a tab of the lowest stack.
            if not stacks:
                stacks.append([])
            stacks[-1].extend(unknown)
        stacks = [stack for stack in stacks if stack]
        graph, topk = docks.get("graph"), docks.get("topk")
        for dock in [*(d for stack in stacks for d in stack), graph]:
            if dock is not None:
                window.removeDockWidget(dock)
                dock.setFloating(False)
        for i, stack in enumerate(stacks):
            if i == 0:
                window.addDockWidget(Area.BottomDockWidgetArea, stack[0])
            else:
                window.splitDockWidget(stacks[i - 1][0], stack[0], Qt.Orientation.Vertical)
            stack[0].show()
        for stack in stacks:
            for dock in stack[1:]:
                window.tabifyDockWidget(stack[0], dock)
                dock.show()
        if graph is not None:
            if topk is not None:
                # The graph's rows need the height: it takes the right column under the
                # text, the next token in a tab behind it.
                window.splitDockWidget(topk, graph, Qt.Orientation.Vertical)
                window.tabifyDockWidget(graph, topk)
            else:
                window.addDockWidget(Area.RightDockWidgetArea, graph)
            graph.show()
        for front in [*(stack[0] for stack in stacks), graph]:
            if front is not None:
                front.raise_()
        self._analysis_sizes([stack[0].objectName().removeprefix("dock_") for stack in stacks])

    def _analysis_sizes(self, heads: Iterable[str] = ("population", "cell_types")) -> None:
        """The analysis layout's columns and rows; ``heads`` are the docks in front of the
        stacks under the brain."""
        width, height = self.window.width(), self.window.height()
        self._resize(("controls", "model"), _clamp(0.24 * width, 300, 380), Qt.Orientation.Horizontal)
        self._resize(("text", "graph"), _clamp(0.3 * width, 360, 520), Qt.Orientation.Horizontal)
        shown = self._present(heads)
        if shown:
            # The brain keeps a fifth of the height (its least); the population views share
            # the rest (Qt grows a nested column only when all its docks are sized at once).
            share = int(0.78 * height / len(shown))
            self.window.resizeDocks(shown, [share] * len(shown), Qt.Orientation.Vertical)
        self._split_column(("text", "graph"), 0.3)

    def _presentation(self) -> None:
        docks = self.docks
        for key, dock in docks.items():
            if key not in PRESENTATION_DOCKS:
                dock.hide()
        for key in PRESENTATION_DOCKS:
            if key in docks:
                docks[key].show()
                docks[key].raise_()
        self._presentation_sizes()

    def _presentation_sizes(self) -> None:
        # The Fly LLM's text over its next token in the right column.
        self._resize(("text", "topk"), _clamp(0.26 * self.window.width(), 320, 480),
                     Qt.Orientation.Horizontal)
        self._split_column(("text", "topk"), 0.6)

    # ------------------------------------------------------------ helpers
    def _unknown(self) -> list[str]:
        return [key for key in self.docks if key not in KNOWN_DOCKS]

    def _mark(self, name: str) -> None:
        self.current = name
        self.actions[name].setChecked(True)

    def _present(self, keys: Iterable[str]) -> list[QDockWidget]:
        return [self.docks[k] for k in keys if k in self.docks and self.docks[k].isVisible()
                and not self.docks[k].isFloating()]

    def _resize(self, keys: Iterable[str], size: int, orientation: Qt.Orientation) -> None:
        """The first shown dock of ``keys`` (and its column or row) ``size`` pixels across.

        Qt resizes a dock area's depth only through its first dock, so ``keys``
        name the area's first (left or top) dock first.
        """
        docks = self._present(keys)
        if docks:
            self.window.resizeDocks(docks[:1], [size], orientation)

    def _split_column(self, keys: tuple[str, str], top: float) -> None:
        """Two docks above each other: the first takes ``top`` of their height."""
        self._split(keys, top, Qt.Orientation.Vertical)

    def _split_row(self, keys: tuple[str, str], left: float) -> None:
        """Two docks side by side: the first takes ``left`` of their width."""
        self._split(keys, left, Qt.Orientation.Horizontal)

    def _split(self, keys: tuple[str, str], first: float, orientation: Qt.Orientation) -> None:
        docks = self._present(keys)
        if len(docks) != 2:
            return
        vertical = orientation == Qt.Orientation.Vertical
        total = sum(d.height() if vertical else d.width() for d in docks)
        size = int(total * first)
        self.window.resizeDocks(docks, [size, total - size], orientation)
