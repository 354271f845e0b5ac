"""The window's actions: every command with its title, shortcut and help line, and the menus.

Actions live in one :class:`ActionRegistry`, so that the menus, the keyboard
shortcuts and the shortcut list in Help cannot disagree, and a new feature adds
its command with one :meth:`ActionRegistry.add` call and puts it in a menu by
name (``registry.menu("View").addAction(...)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

#: The shortcuts' words for the frame they step through, ``{frame}`` where the shown kind's
#: frame goes (:attr:`flyviz.kinds.TimeAxis.name`: a Fly LLM's token, a spiking brain's bin);
#: :meth:`ActionRegistry.apply` says them as the kind shown calls its frames.
SHORTCUT_WORDS: tuple[tuple[str, str, str], ...] = (
    ("run", "Ctrl+Return", "Run the prompt (Enter in the prompt box)"),
    ("play", "Space", "Play / pause (replays a finished recording)"),
    ("step_back", "Left", "One {frame} back"),
    ("step_forward", "Right", "One {frame} forward (steps the model at the newest {frame})"),
    ("first", "Home", "First {frame}"),
    ("last", "End", "Newest {frame} (live)"),
    ("stop", "Esc", "Stop the run and cancel what a dock computes"),
    ("reset", "Ctrl+R", "Reset: stop and clear the recording"),
    ("view_front", "1", "Front view"),
    ("view_top", "2", "Top view"),
    ("view_side", "3", "Side view"),
    ("toggle_mode", "M", "Switch colours: signed x / |x|"),
    ("pick_neuron", "Ctrl+K", "Pick a neuron by its index (inspect it, as a click does)"),
    ("clear_selection", "Ctrl+D", "Clear the selected neuron"),
    ("focus_prompt", "Ctrl+L", "Go to the prompt box"),
    ("open_model", "Ctrl+O", "Open a model folder (or the connectome dataset it asks for)"),
    ("open_recording", "Ctrl+Shift+O", "Open a recording (.flyrec)"),
    ("save_recording", "Ctrl+S", "Save the recording"),
    ("export_movie", "Ctrl+E", "Export a movie"),
    ("screenshot", "Alt+S", "Save a screenshot"),
    ("shortcuts", "F1", "This list"),
    ("quit", "Ctrl+Q", "Quit"),
)

#: Menu titles of the actions above (``{frame}`` as in :data:`SHORTCUT_WORDS`).
TITLE_WORDS = {
    "run": "&Run prompt", "play": "&Play / pause", "step_back": "Step &back",
    "step_forward": "Step &forward", "first": "F&irst {frame}", "last": "&Newest {frame} (live)",
    "stop": "&Stop", "reset": "R&eset", "view_front": "&Front view", "view_top": "&Top view",
    "view_side": "&Side view", "toggle_mode": "Toggle &colours (x / |x|)",
    "pick_neuron": "&Pick neuron…", "clear_selection": "Clear selecte&d neuron",
    "focus_prompt": "&Go to prompt",
    "open_model": "Open &model folder…", "open_recording": "&Open recording…",
    "save_recording": "&Save recording…", "export_movie": "&Export movie…",
    "screenshot": "Save scree&nshot…", "shortcuts": "&Keyboard shortcuts", "quit": "&Quit",
}

#: The frame the window names before a model is shown: the Fly LLM's.
FIRST_FRAME_WORD = "token"

#: (action name, shortcut, description): the app's shortcuts, in the order the help lists
#: them, in the words of the Fly LLM (:data:`FIRST_FRAME_WORD`).
SHORTCUTS: tuple[tuple[str, str, str], ...] = tuple(
    (name, keys, words.format(frame=FIRST_FRAME_WORD)) for name, keys, words in SHORTCUT_WORDS)

#: Menu titles of the actions above, in the Fly LLM's words.
TITLES = {name: words.format(frame=FIRST_FRAME_WORD) for name, words in TITLE_WORDS.items()}

#: The menus, left to right, and which actions they start with.
MENUS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("&File", ("open_model", "open_hub", "open_demo", "-", "open_recording", "save_recording",
               "-", "export_movie", "share_page", "screenshot", "-", "quit")),
    ("&Run", ("run", "play", "step_back", "step_forward", "first", "last", "stop", "reset",
              "focus_prompt")),
    ("&View", ("view_front", "view_top", "view_side", "toggle_mode", "pick_neuron",
               "clear_selection")),
    ("&Help", ("shortcuts", "about")),
)


def with_letter(title: str, letter: str) -> str:
    """``title`` as a menu item's text chosen by Alt+``letter``: an ``&`` before the first
    ``letter`` in it (any case), an ``&`` of the title doubled so that it shows as itself;
    ``title`` without a letter if it has no ``letter``."""
    text = title.replace("&", "&&")
    at = text.lower().find(letter.lower()) if letter and letter != "&" else -1
    return text if at < 0 else f"{text[:at]}&{text[at:]}"


class ActionRegistry:
    """Named window actions and the menus that hold them.

    Parameters
    ----------
    window
        The window the actions belong to (shortcuts work anywhere in it).
    """

    def __init__(self, window: QMainWindow) -> None:
        self.window = window
        self.by_name: dict[str, QAction] = {}
        self.menus: dict[str, QMenu] = {}
        #: The model kinds each action serves, by name (an action not named serves every
        #: kind): :meth:`apply` shows only those of the kind shown.
        self.kinds: dict[str, tuple[str, ...]] = {}

    def declare(self, name: str, kinds: tuple[str, ...]) -> None:
        """Action ``name`` serves the models of ``kinds`` (:mod:`flyviz.kinds` keys, or
        :data:`~flyviz.kinds.EVERY_KIND`)."""
        self.kinds[name] = tuple(kinds)

    def apply(self, kind: Any) -> None:
        """Show the actions that serve ``kind`` (a :class:`~flyviz.kinds.ModelKind`) and hide
        the others: a hidden action leaves its menu and its shortcut does nothing (the
        language model's *Compare with untouched* started a plain spiking run)."""
        for name, kinds in self.kinds.items():
            action = self.by_name.get(name)
            if action is not None:
                action.setVisible(bool(kind.shows(kinds)))
        self.name_frames(kind.time_axis.name)

    def name_frames(self, frame: str) -> None:
        """Say the frame the actions step through as ``frame`` (``"token"``, ``"bin"``): in
        their menu titles, F1's list, tooltips and status tips ("One bin back" for a spiking
        brain, where the Fly LLM's words would say a token). The actions are those
        :meth:`add_shortcuts` added."""
        for name, _keys, description in SHORTCUT_WORDS:
            title = TITLE_WORDS[name]
            if "{frame}" not in description + title:
                continue
            action = self.by_name[name]
            action.setText(title.format(frame=frame))
            action.setStatusTip(description.format(frame=frame))
            action.setToolTip(description.format(frame=frame))

    def add(self, name: str, title: str, handler: Callable[[], object], keys: str = "",
            description: str = "") -> QAction:
        """A new action ``name`` calling ``handler()``, with optional shortcut and help line."""
        if name in self.by_name:
            raise ValueError(f"an action named {name!r} already exists")
        action = QAction(title, self.window)
        if keys:
            action.setShortcut(QKeySequence(keys))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if description:
            action.setStatusTip(description)
            action.setToolTip(description)
        action.triggered.connect(lambda _checked=False, f=handler: f())
        self.window.addAction(action)
        self.by_name[name] = action
        return action

    def adopt(self, name: str, action: QAction) -> QAction:
        """List ``action``, made elsewhere (a View → Colour by entry), as action ``name``:
        :meth:`apply` shows it for the kinds declared for it, and a feature's adopted while
        it installs serve the feature's kinds, as those it adds do."""
        if self.by_name.get(name, action) is not action:
            raise ValueError(f"an action named {name!r} already exists")
        self.by_name[name] = action
        return action

    def add_shortcuts(self, handlers: dict[str, Callable[[], object]]) -> None:
        """Add every action of :data:`SHORTCUTS` with its handler from ``handlers``."""
        for name, keys, description in SHORTCUTS:
            self.add(name, TITLES[name], handlers[name], keys, description)

    def __getitem__(self, name: str) -> QAction:
        return self.by_name[name]

    def build_menus(self) -> None:
        """Create the menu bar from :data:`MENUS` (actions named there must exist)."""
        bar = self.window.menuBar()
        for title, names in MENUS:
            menu = bar.addMenu(title)
            self.menus[title.replace("&", "")] = menu
            for name in names:
                if name == "-":
                    menu.addSeparator()
                else:
                    menu.addAction(self.by_name[name])

    def menu(self, title: str) -> QMenu:
        """The menu called ``title`` ("File", "Run", "View", "Help")."""
        return self.menus[title]

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """(keys, description) of every action shown with a shortcut, in the order they were
        added: a hidden one's keys do nothing (:meth:`apply` hides the actions of the other
        model kinds), and listed it put a second Ctrl+Return, a spiking brain's, beside the
        prompt's."""
        from PySide6.QtGui import QKeySequence as Keys

        return [(action.shortcut().toString(Keys.SequenceFormat.NativeText), action.statusTip())
                for action in self.by_name.values()
                if not action.shortcut().isEmpty() and action.isVisible()]
