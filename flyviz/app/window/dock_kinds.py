"""Which docks the window shows for the loaded model's kind.

Every dock declares the model kinds it serves (:mod:`flyviz.kinds`: their keys,
or :data:`~flyviz.kinds.EVERY_KIND`): the window's own docks where it adds them,
a feature's docks in its :data:`~flyviz.app.window.main_window.FEATURES` row.
:class:`DockKinds` hides the docks that do not serve the shown model's kind,
with their View-menu entries, and brings them back as they were when a model
of a kind they serve is shown again. For the Fly LLM every dock applies, so
nothing changes.

A layout preset arranges every dock as for the Fly LLM (its docks are the ones
the presets place); :meth:`DockKinds.rearranged` then hides again the docks the
shown kind has no use for and shows that kind's own.

A dock put away while shown comes back at the size it had, whoever shows it again. Qt
keeps a hidden dock's size within a session, but not across one: a saved layout restored
with a dock hidden squeezes it (``restoreState`` fits it into its row as if it were shown),
and the window saves its layout as it closes with every dock it has, the Fly LLM's swapped
back in and not yet placed. So each session closed with a spiking brain shown opened its
Spiking populations dock narrower, and the Fly LLM's Traces too. The sizes still to be given
back go with the saved layout (:meth:`DockKinds.sizes_to_give_back`,
:meth:`DockKinds.remember_sizes`).

A dock the user closed (its title bar's close button, its View entry) stays closed until
the user opens it again (its View entry, a layout preset): neither its kind coming back
shows it, nor a feature showing its docks as its model opens (the spiking brain's:
:meth:`~flyviz.app.base.docks.Docks.show_unless_closed`). Which docks the user closed goes
with the saved layout (:meth:`DockKinds.closed_keys`, :meth:`DockKinds.remember_closed`):
the saved layout alone did not keep them closed. Qt restores a dock closed with its close
button (not one hidden) shown again, in a window restored before it is shown; and a dock of
a kind not shown is hidden whether or not the user had closed it, so its feature, opening
its model, showed it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabBar

from flyviz.app.base.docks import FIT_HEIGHT, hide_stale_tab_bars
from flyviz.kinds import EVERY_KIND, LANGUAGE, ModelKind
from flyviz.kinds.language import LANGUAGE_KEY

__all__ = ["DockKinds", "LANGUAGE_KINDS"]

#: What a dock of the Fly LLM alone serves: the language model kind (its key alone).
LANGUAGE_KINDS = (LANGUAGE_KEY,)


class _ClosingWatch(QObject):
    """Tells :class:`DockKinds` of a dock the user closes (its close button and its View
    entry both close it: a Close event; the code hides docks, which sends none) and of a
    dock shown again, by whoever."""

    def __init__(self, closed: Callable[[QDockWidget], None],
                 shown: Callable[[QDockWidget], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._closed, self._shown = closed, shown

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt API
        if isinstance(watched, QDockWidget):
            if event.type() == QEvent.Type.Close \
                    and watched.features() & QDockWidget.DockWidgetFeature.DockWidgetClosable:
                self._closed(watched)
            elif event.type() == QEvent.Type.Show:
                self._shown(watched)
        return False


def _tab_bar_under(window: QMainWindow, dock: QDockWidget) -> int:
    """The height of the tab bar under ``dock`` where it is in a tab group with a dock
    shown, else 0 (the bars' own heights: one may be hidden until the next layout pass)."""
    if not any(not other.isHidden() for other in window.tabifiedDockWidgets(dock)):
        return 0
    across = (QTabBar.Shape.RoundedNorth, QTabBar.Shape.RoundedSouth,
              QTabBar.Shape.TriangularNorth, QTabBar.Shape.TriangularSouth)
    bars = window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
    return max((bar.sizeHint().height() for bar in bars if bar.shape() in across), default=0)


def _span(dock: QDockWidget, horizontal: bool) -> tuple[int, int]:
    """Where ``dock`` lies across its row (``horizontal``: its top and bottom) or its
    column (its left and right): the docks of one row (column) share it."""
    geometry = dock.geometry()
    return (geometry.top(), geometry.bottom()) if horizontal \
        else (geometry.left(), geometry.right())


class DockKinds:
    """The kinds each dock of a window serves, and the docks shown for a kind.

    Parameters
    ----------
    docks
        The window's docks by key (the window's own dict: docks added later count).
    presets_kind
        The kind the layout presets arrange the docks for (the Fly LLM's).
    window
        The window the docks are in: a dock that comes back is given the size it had
        when put away (without a window, Qt's own size for it).
    """

    def __init__(self, docks: dict[str, QDockWidget], presets_kind: ModelKind = LANGUAGE,
                 window: QMainWindow | None = None) -> None:
        self._docks = docks
        self.presets_kind = presets_kind
        self._window = window
        self._serves: dict[str, tuple[str, ...]] = {}
        #: Docks hidden because they do not serve the kind shown: whether each was shown.
        self._hidden: dict[str, bool] = {}
        #: The size each dock put away while shown had then, for its return.
        self._sizes: dict[str, QSize] = {}
        self._watched: set[str] = set()
        #: Docks shown again whose sizes are to be given back (once the window placed them).
        self._due: list[str] = []
        self._give_back_queued = False
        #: Docks the user closed and nobody has shown since, by key.
        self._closed: set[str] = set()
        self._closing = _ClosingWatch(self._user_closed, self._shown_again, window)
        self.kind: ModelKind = LANGUAGE

    def watch(self, key: str) -> None:
        """Follow whether the user closes dock ``key`` (every dock, as the window adds it)."""
        self._docks[key].installEventFilter(self._closing)

    def _key(self, dock: QDockWidget) -> str | None:
        return next((key for key, known in self._docks.items() if known is dock), None)

    def _user_closed(self, dock: QDockWidget) -> None:
        key = self._key(dock)
        if key is not None:
            self._closed.add(key)

    def _shown_again(self, dock: QDockWidget) -> None:
        key = self._key(dock)
        if key is not None:
            self._closed.discard(key)

    def closed_by_user(self, key: str) -> bool:
        """True when the user closed dock ``key`` and nobody has shown it since."""
        dock = self._docks.get(key)
        return key in self._closed and dock is not None and dock.isHidden()

    def gives_size_back(self, key: str) -> bool:
        """True when dock ``key`` has a size to be given back as it is shown again (see
        :meth:`sizes_to_give_back`)."""
        return key in self._sizes

    def closed_keys(self) -> list[str]:
        """The docks the user closed (for the saved layout), in the window's order."""
        return [key for key in self._docks if self.closed_by_user(key)]

    def remember_closed(self, keys: Iterable[str]) -> None:
        """Docks an earlier session's user closed (:meth:`closed_keys`), its layout just
        restored: hidden (Qt restores a dock closed with its close button shown again), and
        kept closed as their kind returns or their feature shows them."""
        for key in keys:
            dock = self._docks.get(key)
            if dock is not None:
                dock.hide()
                self._closed.add(key)

    def declare(self, key: str, kinds: tuple[str, ...]) -> None:
        """Dock ``key`` serves ``kinds`` (kind keys, or :data:`~flyviz.kinds.EVERY_KIND`)."""
        self._serves[key] = tuple(kinds)
        if key in self._docks and not self.kind.shows(self._serves[key]):
            self.apply(self.kind)

    def serves(self, key: str) -> tuple[str, ...]:
        """The kinds dock ``key`` serves (a dock that declared none serves every kind)."""
        return self._serves.get(key, EVERY_KIND)

    def applies(self, key: str, kind: ModelKind | None = None) -> bool:
        """True when dock ``key`` applies to ``kind`` (default: the kind shown)."""
        return (self.kind if kind is None else kind).shows(self.serves(key))

    def shown_keys(self) -> list[str]:
        """The docks that apply to the kind shown, in the window's order."""
        return [key for key in self._docks if self.applies(key)]

    def apply(self, kind: ModelKind) -> None:
        """Show the docks that serve ``kind`` and hide the others (their View entries too)."""
        self.kind = kind
        # The old kind's docks go first, then the new kind's come: shown while the old ones
        # were still there, a dock (the Fly LLM's Traces) squeezed a row's docks to make
        # room, and the one put away next (Spiking populations) kept its squeezed width
        # for its return (~130 px narrower, its groups field and legend cut).
        put_away_shown = False
        for key, dock in self._docks.items():
            if not kind.shows(self.serves(key)) and key not in self._hidden:
                self._put_away(key, dock)
                put_away_shown = put_away_shown or self._hidden[key]
        for key, dock in self._docks.items():
            if kind.shows(self.serves(key)) and key in self._hidden:
                was_shown = self._hidden.pop(key)
                dock.toggleViewAction().setVisible(True)
                if was_shown and not self.closed_by_user(key):
                    dock.show()
        if put_away_shown and self._window is not None:
            # The tab bars of the groups put away (a kind's docks swapped out, not the
            # window's start, where the other kind's docks are declared before any shows).
            hide_stale_tab_bars(self._window)

    def _put_away(self, key: str, dock: QDockWidget, remember: bool = True) -> None:
        """Hide ``dock`` and its View entry, remembering whether it was shown and (where
        ``remember`` says and it was on screen in its place) its size."""
        self._hidden[key] = not dock.isHidden()
        if key in self._due:
            # Shown and put away again before it was given its size: that size still stands.
            self._due.remove(key)
            if not remember:
                self._sizes.pop(key, None)
        elif remember and dock.isVisible() and not dock.isFloating():
            self._sizes[key] = dock.size()
            self._watch(key, dock)
        else:
            # Not laid out (the window not shown yet, a tab behind another): Qt's size stands.
            self._sizes.pop(key, None)
        dock.hide()
        dock.toggleViewAction().setVisible(False)

    def _watch(self, key: str, dock: QDockWidget) -> None:
        """Give ``dock`` its size back when it is shown again, by whoever: :meth:`apply`, or
        a feature that shows its docks itself (the spiking brain's, as it opens)."""
        if key in self._watched or self._window is None:
            return
        self._watched.add(key)

        def shown(visible: bool) -> None:
            if not visible or key in self._hidden or key not in self._sizes \
                    or key in self._due:
                return
            self._due.append(key)
            if not self._give_back_queued and self._window is not None:
                # Once the window has placed the docks shown now (its layout request comes
                # first): resized at once, a dock shown into the old row took the size it was
                # left. All in one go: one at a time, each took from the one before.
                self._give_back_queued = True
                QTimer.singleShot(0, self._window, self._give_back_sizes)

        dock.visibilityChanged.connect(shown)

    def _give_back_sizes(self) -> None:
        """The docks shown again at the sizes they had when put away."""
        window, keys = self._window, self._due
        self._due, self._give_back_queued = [], False
        if window is None:
            return
        # Each along its dock area (a row's widths, a column's heights), where the docks of
        # an area share the room; the area's depth is the shown docks' of every kind (a side
        # column's width takes its tab bar too, and the presets size it for the window).
        lines: dict[tuple[Qt.Orientation, int, int], dict[QDockWidget, int]] = {}
        depths: dict[QDockWidget, int] = {}
        for key in keys:
            size, dock = self._sizes.pop(key, None), self._docks[key]
            if size is None or not self._placed(dock):
                continue
            area = window.dockWidgetArea(dock)
            if area == Qt.DockWidgetArea.NoDockWidgetArea:
                continue
            across = area in (Qt.DockWidgetArea.TopDockWidgetArea,
                              Qt.DockWidgetArea.BottomDockWidgetArea)
            if not across and dock.property(FIT_HEIGHT):
                continue    # as tall as its form asks (its feature fits it as it shows it)
            orientation = Qt.Orientation.Horizontal if across else Qt.Orientation.Vertical
            lines.setdefault((orientation, *_span(dock, across)), {})[dock] = \
                size.width() if across else size.height()
            if across:
                depths[dock] = size.height()
        if depths:
            # First: a row's depth moves the columns beside it (the Text dock's, 61 px
            # shorter after the spiking brain's deeper row without it).
            self._give_back_depths(depths)
        for (orientation, first, last), given in lines.items():
            self._resize_line(orientation, (first, last), given)

    def _give_back_depths(self, depths: dict[QDockWidget, int],
                          asked: dict[QDockWidget, int] | None = None, tries: int = 3) -> None:
        """The top and bottom rows of docks shown again as deep as they were when put away
        (see :meth:`_give_back_sizes`): a row deepened for the other kind's docks (the
        spiking brain's plots) stayed so after the swap back, the brain view ~100 px
        shorter.

        Qt sizes a tab group with its tab bar: a dock in one is asked for its depth and its
        bar's, then measured after the layout pass and asked again for what it still lacks
        or has too much, ``tries`` times at most."""
        window = self._window
        if window is None:
            return
        placed = {dock: depth for dock, depth in depths.items() if self._placed(dock)}
        off = {dock: depth - dock.height() for dock, depth in placed.items()
               if abs(depth - dock.height()) > 1}
        if not off:
            return
        if asked is None:
            asked = {dock: placed[dock] + _tab_bar_under(window, dock) for dock in off}
        else:
            asked = {dock: asked.get(dock, placed[dock]) + off[dock] for dock in off}
        docks = list(asked)
        window.resizeDocks(docks, [asked[dock] for dock in docks], Qt.Orientation.Vertical)
        if tries > 1:
            QTimer.singleShot(0, window,
                              lambda: self._give_back_depths(placed, asked, tries - 1))

    def _placed(self, dock: QDockWidget) -> bool:
        """True when ``dock`` is shown in its dock area (not floating, not a tab behind)."""
        window = self._window
        return window is not None and dock.isVisible() and not dock.isFloating() \
            and window.rect().contains(dock.geometry())

    def _resize_line(self, orientation: Qt.Orientation, span: tuple[int, int],
                     given: dict[QDockWidget, int]) -> None:
        """Give the docks of ``given`` their lengths along their row (or column) ``span``,
        the row's other docks sharing the rest as they share it now.

        Qt takes the lengths it is given as the docks' wishes and scales the whole row to
        fit: given the returning dock's length alone, the row's other docks (which took its
        room while it was squeezed) kept theirs, and the row scaled it down with them.
        """
        window = self._window
        if window is None:
            return
        horizontal = orientation == Qt.Orientation.Horizontal
        area = window.dockWidgetArea(next(iter(given)))

        def length(dock: QDockWidget) -> int:
            return dock.width() if horizontal else dock.height()

        if all(abs(length(dock) - wanted) <= 1 for dock, wanted in given.items()):
            return          # as it was (resized anyway, a column's docks moved a little)
        line = [dock for dock in self._docks.values()
                if self._placed(dock) and window.dockWidgetArea(dock) == area
                and _span(dock, horizontal) == span]
        others = [dock for dock in line if dock not in given]
        total = sum(length(dock) for dock in line)
        rest = total - sum(given.values())
        had = sum(length(dock) for dock in others)
        lengths = dict(given)
        if others and rest > 0 and had > 0:
            for dock in others:
                lengths[dock] = length(dock) * rest // had
            lengths[others[-1]] += rest - sum(lengths[dock] for dock in others)
        docks = [dock for dock in line if dock in lengths]
        if not horizontal:
            # Qt sizes a tab group in a column with its tab bar under it.
            for dock in docks:
                lengths[dock] += _tab_bar_under(window, dock)
        window.resizeDocks(docks, [lengths[dock] for dock in docks], orientation)

    def sizes_to_give_back(self) -> dict[str, QSize]:
        """The sizes still to be given back (for the saved layout): of the docks put away,
        and of those shown again and not yet placed (the Fly LLM's, swapped in as the window
        closes: the layout is saved before the window places them)."""
        return {key: QSize(size) for key, size in self._sizes.items()}

    def remember_sizes(self, sizes: Mapping[str, QSize]) -> None:
        """Sizes an earlier session saved with its layout (:meth:`sizes_to_give_back`): Qt
        restores a dock the layout holds hidden squeezed, and the docks the window swapped in
        as it closed where they were not yet placed; each dock is given its size as it is
        shown (as the window opens, or as its kind's model does)."""
        for key, size in sizes.items():
            if key in self._docks and size.width() > 0 and size.height() > 0:
                self._sizes[key] = QSize(size)
                self._watch(key, self._docks[key])

    def forget_sizes(self) -> None:
        """The docks shown again keep the sizes Qt gives them (a preset's, say)."""
        self._sizes.clear()
        self._due.clear()

    def rearranged(self, shows_own: Callable[[str], bool] = lambda _key: True) -> None:
        """A layout was just applied to every dock (View → Layout): hide again the docks that
        do not serve the shown kind (remembering whether the layout showed them, for when
        their kind is shown again) and show the docks that serve it and not
        :attr:`presets_kind` (a spiking brain's Stimulus) where ``shows_own`` says so: the
        presets' arrangement, made for the Fly LLM, hides those docks. Which docks the user
        had closed is forgotten: the layout says which are shown (every dock of the shown
        kind, but where Presentation hides it)."""
        self._closed.clear()
        for key, dock in self._docks.items():
            if not self.applies(key):
                # As the layout left it, for its kind's return (its size is the layout's:
                # one remembered from before the layout would undo it).
                self._put_away(key, dock, remember=False)
            elif self.serves(key) != EVERY_KIND and not self.applies(key, self.presets_kind) \
                    and shows_own(key):
                dock.show()
