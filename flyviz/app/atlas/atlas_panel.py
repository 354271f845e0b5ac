"""The neuron atlas in the app: opening one, *Find neurons*, and the Atlas dock.

:class:`AtlasController` opens an :class:`~flyviz.analysis.atlas.Atlas` off the
UI thread (reading its metadata, checking that it was made with the loaded
model, reading its tokenizer and indexing its driving tokens take a few hundred
milliseconds) and refuses, in one line, an atlas made with another model. The
demo brain ships its atlas, which opens by itself whenever the demo brain is
loaded, so its cards work offline on first launch.

:class:`AtlasPanel` is the Atlas dock: which atlas is open, and *Find neurons*:
the neurons whose driving tokens include a token or word, listed (click one
to inspect it) and lit in the brain view while the rest is dimmed.

:func:`statistic_layer` colours the cloud by one of the atlas's per-neuron
statistics (mean, standard deviation, density, maximum, selectivity), with its
colourbar; the View → Colour by menu offers them while an atlas is open.

:func:`install` wires both into the main window (File → Open atlas…, the
Inspector's atlas card, the highlight, the Colour by entries).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QComboBox, QFileDialog, QGroupBox, QHBoxLayout, QLabel, QLineEdit,
                               QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget)

from flyviz.analysis.atlas import Atlas, AtlasError
from flyviz.app.atlas.atlas_card import atlas_name
from flyviz.app.base.background import ModelFileController
from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.errors import FlyvizError, InputError
from flyviz.render.style import ColourLayer
from flyviz.viewer.layers import ATLAS_STATISTICS, atlas_key, atlas_layer

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.app.base.host import WindowHost

#: Most neurons listed after a search (all of them are highlighted).
MAX_LISTED = 2000

#: The highlight source name of *Find neurons* (see :class:`~flyviz.viewer.highlight.Highlights`).
HIGHLIGHT = "find"

#: Per statistic: its menu title, colormap and colourbar caption (the registry's).
STATISTIC_LAYERS = ATLAS_STATISTICS

_TOKEN_ID = re.compile(r"(?:id|token)\s*[:=#]?\s*(\d+)", re.IGNORECASE)


def demo_atlas_path() -> Path | None:
    """The demo brain's shipped atlas, or ``None`` when this installation has none."""
    try:
        from flyviz.resources import asset_path

        path = asset_path("demo", "atlas")
    except (ImportError, FileNotFoundError):
        return None
    return path if path.is_dir() else None


def _read_lookups(atlas: Atlas) -> Atlas:
    """Read the tokenizer and index the driving tokens now, so that neither a card nor a
    search pays for them later; a damaged store is an :class:`AtlasError` (one line)."""
    try:
        _ = atlas.tokenizer  # read now: a damaged tokenizer fails here, not in a card
        atlas.neurons_driven_by(0)       # builds the token -> neurons index once
    except FlyvizError as exc:
        raise AtlasError(f"{atlas.path.name} is damaged: {exc}") from None
    except Exception as exc:  # a damaged store: say which, in one line
        raise AtlasError(f"{atlas.path.name} is damaged ({type(exc).__name__}: "
                         f"{str(exc)[:100]}); build it again with 'flyviz atlas'") from None
    return atlas


def check_atlas(path: str | Path) -> Atlas:
    """The atlas at ``path`` with its lookups read; :class:`AtlasError` when it is missing
    or damaged (the model is not checked)."""
    return _read_lookups(Atlas(path))


def open_checked(path: str | Path, checkpoint: Checkpoint) -> Atlas:
    """The atlas at ``path``, ready for the UI thread, if it was made with ``checkpoint``.

    Raises :class:`AtlasError` (one line) when it is missing, damaged or was
    made with another model.
    """
    atlas = Atlas(path)
    atlas.check_model(checkpoint)
    return _read_lookups(atlas)


def statistic_layer(atlas: Atlas, name: str) -> ColourLayer:
    """A colour layer of the atlas statistic ``name`` (the registry's rule:
    :func:`flyviz.viewer.layers.atlas_layer`)."""
    return atlas_layer(atlas, name)


def parse_search(text: str) -> int | str:
    """A search term: ``id:603`` / ``token 603`` is a token id, anything else a word."""
    match = _TOKEN_ID.fullmatch(text.strip())
    if match:
        return int(match.group(1))
    if not text.strip():
        raise InputError("type a token or word to find the neurons it drives, e.g. dog")
    return text


@dataclass(frozen=True)
class FoundNeurons:
    """The answer to *Find neurons*: what was asked, the tokens it stands for, the neurons."""

    term: int | str
    token_ids: tuple[int, ...]
    token_texts: tuple[str, ...]
    neurons: np.ndarray

    def describe(self) -> str:
        """One line: how many neurons, driven by which tokens."""
        tokens = " or ".join(repr(t) for t in self.token_texts) or repr(self.term)
        count = self.neurons.size
        if not count:
            return f"no neuron has {tokens} among its driving tokens"
        return f"{count:,} neuron{'s' if count != 1 else ''} driven by {tokens}"


class AtlasController(ModelFileController):
    """The open atlas of the window: opened off the UI thread, checked against the model.

    Parameters
    ----------
    calls
        Where the opening runs (off the UI thread).
    checkpoint
        ``checkpoint()``: the loaded model (``None`` before one is loaded).

    Signals
    -------
    opened(atlas)
        An atlas is open (it was made with the loaded model).
    closed(note)
        No atlas is open any more (``note``: why, or ``""``).
    failed(message, quiet)
        An atlas could not be opened (one line); ``quiet`` when the user did
        not ask for it (the demo brain's own), so no dialog is wanted.
    """

    failed = Signal(str, bool)

    PURPOSE = "atlas"
    NO_MODEL = "load the model the atlas was made with first, then open the atlas"

    @property
    def atlas(self) -> Atlas | None:
        """The open atlas, or ``None``."""
        return self.current

    def read(self, path: str | Path, checkpoint: Checkpoint) -> Atlas:
        return open_checked(path, checkpoint)

    def open(self, path: str | Path, quiet: bool = False) -> None:
        """Open the atlas at ``path`` for the loaded model; :attr:`opened` or :attr:`failed`."""
        self.open_file(path, lambda message: self.failed.emit(message, quiet))

    def model_changed(self, is_demo: bool) -> None:
        """A new model is loaded: its atlas, if it ships one; otherwise none."""
        self.close("the atlas belonged to the previous model" if self.atlas is not None else "")
        demo = demo_atlas_path() if is_demo else None
        if demo is not None:
            self.open(demo, quiet=True)

    def find(self, term: int | str) -> FoundNeurons:
        """The neurons whose driving tokens include ``term`` (a token id or a word)."""
        atlas = self.atlas
        if atlas is None:
            raise InputError("open an atlas first (File → Open atlas…)")
        ids = atlas.token_ids_for(term)
        tokenizer = atlas.tokenizer
        return FoundNeurons(term, tuple(ids), tuple(tokenizer.token_text(i) for i in ids),
                            atlas.neurons_driven_by(term))


class AtlasPanel(QWidget):
    """The Atlas dock: the open atlas, an Open button, and *Find neurons*.

    Signals
    -------
    open_requested()
        The user wants to pick an atlas.
    search_requested(term)
        Find the neurons driven by ``term`` (a token id or a word).
    cleared()
        The user cleared the search.
    neuron_requested(index)
        The user clicked a listed neuron.
    colour_requested(name)
        Colour the brain by the atlas statistic ``name`` (``None``: the live state).
    """

    open_requested = Signal()
    search_requested = Signal(object)
    cleared = Signal()
    neuron_requested = Signal(int)
    colour_requested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.open_button = QPushButton("Open atlas…")
        self.open_button.setToolTip("Open an atlas made with 'flyviz atlas' for this model")
        self.open_button.clicked.connect(self.open_requested.emit)
        row = QHBoxLayout()
        row.addWidget(self.open_button)
        row.addStretch(1)
        layout.addLayout(row)
        colour_row = QHBoxLayout()
        colour_row.addWidget(QLabel("Colour by"))
        self.colour = QComboBox()
        self.colour.addItem("live state", "")
        for name, (title, _map, _caption) in STATISTIC_LAYERS.items():
            self.colour.addItem(title.replace("Atlas: ", "atlas ").replace("&", ""), name)
        self.colour.setToolTip("Colour the brain by a statistic of the atlas, or by the live "
                               "state (also View → Colour by)")
        self.colour.activated.connect(
            lambda i: self.colour_requested.emit(self.colour.itemData(i) or None))
        colour_row.addWidget(self.colour, 1)
        layout.addLayout(colour_row)

        box = QGroupBox("Find neurons")
        inner = QVBoxLayout(box)
        self.search = QLineEdit()
        self.search.setPlaceholderText("token or word, e.g. dog")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Neurons whose driving tokens include this token, or any token "
                               "of this word (with and without a leading space); "
                               "id:603 searches for token id 603")
        self.search.returnPressed.connect(self._submit)
        inner.addWidget(self.search)
        self.find_button = QPushButton("Find")
        self.find_button.clicked.connect(self._submit)
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("Clear the search and light every neuron again")
        self.clear_button.clicked.connect(self._clear)
        buttons = QHBoxLayout()
        buttons.addWidget(self.find_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        inner.addLayout(buttons)
        self.result = QLabel("")
        self.result.setObjectName("hint")
        self.result.setWordWrap(True)
        inner.addWidget(self.result)
        self.neurons = QListWidget()
        self.neurons.setToolTip("Click a neuron to inspect it")
        self.neurons.itemClicked.connect(self._on_item)
        self.neurons.itemActivated.connect(self._on_item)
        inner.addWidget(self.neurons, 1)
        layout.addWidget(box, 1)
        self.anatomy: Anatomy | None = None
        self.found: FoundNeurons | None = None
        self.set_atlas(None)

    # ------------------------------------------------------------ state
    def set_model(self, anatomy: Anatomy | None) -> None:
        """Label listed neurons with this model's superclasses and cell types."""
        self.anatomy = anatomy

    def set_atlas(self, atlas: Atlas | None, note: str = "") -> None:
        """Show which atlas is open (``None``: none, and ``note`` why)."""
        if atlas is None:
            self.status.setText(note or "No atlas open. The demo brain opens its own; for "
                                        "another model, open one made with 'flyviz atlas'.")
        else:
            corpus = atlas.info.get("corpus", {})
            tokens = corpus.get("tokens") if isinstance(corpus, dict) else None
            size = f", {int(tokens):,} corpus tokens" if isinstance(tokens, int) else ""
            self.status.setText(f"Atlas {atlas_name(atlas)}: {atlas.neurons:,} neurons{size}")
        for widget in (self.search, self.find_button, self.colour):
            widget.setEnabled(atlas is not None)
        self.show_found(None)

    def show_colouring(self, key: str) -> None:
        """Show which colouring the brain has (``"atlas:NAME"``, or anything else: live state
        or another feature's)."""
        name = key.split(":", 1)[1] if key.startswith("atlas:") else ""
        index = self.colour.findData(name)
        self.colour.setCurrentIndex(max(0, index))

    def show_found(self, found: FoundNeurons | None, message: str = "") -> None:
        """List ``found`` (``None``: clear the list; ``message``: say why)."""
        self.found = found
        self.neurons.clear()
        self.clear_button.setEnabled(found is not None)
        if found is None:
            self.result.setText(message)
            return
        listed = found.neurons[:MAX_LISTED]
        more = (f"; the first {MAX_LISTED:,} are listed, all are lit"
                if found.neurons.size > MAX_LISTED else "")
        self.result.setText(found.describe() + more)
        for neuron in listed:
            item = QListWidgetItem(self._describe(int(neuron)))
            item.setData(Qt.ItemDataRole.UserRole, int(neuron))
            self.neurons.addItem(item)

    def listed_neurons(self) -> list[int]:
        """The neurons in the list, in order."""
        return [int(self.neurons.item(r).data(Qt.ItemDataRole.UserRole))
                for r in range(self.neurons.count())]

    def _describe(self, neuron: int) -> str:
        anat = self.anatomy
        parts = [f"#{neuron}"]
        if anat is not None:
            for labels in (anat.superclass, anat.cell_type):
                if labels is not None and neuron < len(labels) and str(labels[neuron]).strip():
                    parts.append(str(labels[neuron]).strip())
        return " · ".join(parts)

    # ------------------------------------------------------------ input
    def _submit(self) -> None:
        try:
            term = parse_search(self.search.text())
        except InputError as exc:
            self.show_found(None, str(exc))
            return
        self.search_requested.emit(term)

    def _clear(self) -> None:
        self.search.clear()
        self.show_found(None)
        self.cleared.emit()

    def _on_item(self, item: QListWidgetItem) -> None:
        self.neuron_requested.emit(int(item.data(Qt.ItemDataRole.UserRole)))


class AtlasFeature:
    """The atlas wired into the main window: controller, dock, File menu entry, card, highlight.

    Parameters
    ----------
    host
        The window (its state, whose open atlas the Neuron dock's card shows, messages,
        docks and background calls).
    """

    def __init__(self, host: "WindowHost") -> None:
        self.host = host
        self.controller = AtlasController(host.background, lambda: host.models.checkpoint,
                                          host.widget())
        self.panel = AtlasPanel()
        self.dock = host.docks.add("atlas", "Atlas", self.panel,
                                   Qt.DockWidgetArea.LeftDockWidgetArea, scroll=True)
        host.docks.tabify("inspector", self.dock, keep_front=False)
        registry = host.actions_registry
        self.action = registry.add("open_atlas", "Open &atlas…", self.open_dialog,
                                   description="Open a neuron atlas of this model "
                                               "(made with 'flyviz atlas')")
        registry.menu("File").insertAction(registry["open_recording"], self.action)

        c = self.controller
        c.opened.connect(self._on_opened)
        c.closed.connect(self._on_closed)
        c.failed.connect(self._on_failed)
        self.panel.open_requested.connect(self.open_dialog)
        self.panel.search_requested.connect(self.find)
        self.panel.cleared.connect(lambda: host.state.highlights.set(HIGHLIGHT, None))
        self.panel.neuron_requested.connect(host.state.select)
        host.models.ready.connect(self._on_model_ready)
        # The View → Colour by entries of the atlas statistics are the state's, offered
        # while its atlas part holds one (state.atlas); their menu entries are this
        # feature's, for its model kinds (an atlas is of a Fly LLM's activations).
        colour_by = host.colour_by
        colour_by.claim(atlas_key(statistic) for statistic in ATLAS_STATISTICS)
        colour_by.changed.connect(self.panel.show_colouring)
        self.panel.colour_requested.connect(self.colour_by)

    @property
    def atlas(self) -> Atlas | None:
        """The open atlas, or ``None``."""
        return self.controller.atlas

    def open(self, path: str | Path) -> None:
        """Open the atlas at ``path`` (refused with a message when it is another model's)."""
        self.host.show_message(f"opening the atlas {Path(path).name}…")
        self.controller.open(path)

    def open_dialog(self) -> None:
        """File → Open atlas: pick an atlas folder."""
        settings = self.host.settings
        folder = QFileDialog.getExistingDirectory(self.host.widget(), "Open a neuron atlas",
                                                  str(settings.value("paths/atlases", "")))
        if folder:
            settings.setValue("paths/atlases", str(Path(folder).parent))
            self.open(folder)

    def find(self, term: int | str) -> FoundNeurons | None:
        """*Find neurons*: list and light the neurons ``term`` drives."""
        try:
            found = self.controller.find(term)
        except FlyvizError as exc:
            self.panel.show_found(None, str(exc))
            self.host.state.highlights.set(HIGHLIGHT, None)
            return None
        self.panel.show_found(found)
        self.host.state.highlights.set_neurons(HIGHLIGHT, found.neurons if found.neurons.size
                                           else None)
        self.host.show_message(found.describe())
        return found

    def statistic_layer(self, name: str) -> ColourLayer:
        """The open atlas's statistic ``name`` as a colour layer (see :func:`statistic_layer`)."""
        if self.atlas is None:
            raise InputError("open an atlas first (File → Open atlas…)")
        return statistic_layer(self.atlas, name)

    def colour_by(self, name: str | None) -> bool:
        """Colour the brain by the atlas statistic ``name`` (``None``: the live state again)."""
        from flyviz.app.brain.colouring import STATE

        return self.host.colour_by.choose(STATE if name is None else f"atlas:{name}")

    def find_token(self, token_id: int) -> None:
        """List and light the neurons token ``token_id`` drives, in the Atlas dock (a
        token clicked in the Neuron dock's atlas card)."""
        self.panel.search.setText(f"id:{token_id}")
        self.find(token_id)
        self.host.docks.show(self.dock)

    # ------------------------------------------------------------ controller
    def _on_model_ready(self, _name: str) -> None:
        bundle = self.host.models.bundle
        self.host.state.highlights.set(HIGHLIGHT, None)
        self.panel.set_model(None if bundle is None else bundle.anatomy)
        self.controller.model_changed(bundle is not None and bundle.is_demo)

    def _on_opened(self, atlas: Atlas) -> None:
        self.host.state.highlights.set(HIGHLIGHT, None)
        self.panel.set_atlas(atlas)
        self.host.state.atlas = atlas        # its card in the Neuron dock, its colourings
        self.host.show_message(f"atlas {atlas_name(atlas)} open: click a neuron for its card")

    def _on_closed(self, note: str) -> None:
        self.host.state.highlights.set(HIGHLIGHT, None)
        self.panel.set_atlas(None, note)
        self.host.state.atlas = None
        if note:
            self.host.show_message(f"atlas closed: {note}")

    def _on_failed(self, message: str, quiet: bool) -> None:
        self.host.show_message(f"cannot open the atlas: {message}", error=True,
                                 dialog=not quiet)


def install(host: "WindowHost") -> AtlasFeature:
    """Add the atlas to the window ``host`` (see :class:`AtlasFeature`)."""
    return AtlasFeature(host)
