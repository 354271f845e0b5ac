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
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QDockWidget

from flyviz.kinds import EVERY_KIND, LANGUAGE, ModelKind
from flyviz.kinds.language import LANGUAGE_KEY

__all__ = ["DockKinds", "LANGUAGE_KINDS"]

#: What a dock of the Fly LLM alone serves: the language model kind (its key alone).
LANGUAGE_KINDS = (LANGUAGE_KEY,)


class DockKinds:
    """The kinds each dock of a window serves, and the docks shown for a kind.

    Parameters
    ----------
    docks
        The window's docks by key (the window's own dict: docks added later count).
    presets_kind
        The kind the layout presets arrange the docks for (the Fly LLM's).
    """

    def __init__(self, docks: dict[str, QDockWidget], presets_kind: ModelKind = LANGUAGE
                 ) -> None:
        self._docks = docks
        self.presets_kind = presets_kind
        self._serves: dict[str, tuple[str, ...]] = {}
        #: Docks hidden because they do not serve the kind shown: whether each was shown.
        self._hidden: dict[str, bool] = {}
        self.kind: ModelKind = LANGUAGE

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
        for key, dock in self._docks.items():
            if not kind.shows(self.serves(key)) and key not in self._hidden:
                self._put_away(key, dock)
        for key, dock in self._docks.items():
            if kind.shows(self.serves(key)) and key in self._hidden:
                was_shown = self._hidden.pop(key)
                dock.toggleViewAction().setVisible(True)
                if was_shown:
                    dock.show()

    def _put_away(self, key: str, dock: QDockWidget) -> None:
        """Hide ``dock`` and its View entry, remembering whether it was shown."""
        self._hidden[key] = not dock.isHidden()
        dock.hide()
        dock.toggleViewAction().setVisible(False)

    def rearranged(self, shows_own: Callable[[str], bool] = lambda _key: True) -> None:
        """A layout was just applied to every dock (View → Layout): hide again the docks that
        do not serve the shown kind (remembering whether the layout showed them, for when
        their kind is shown again) and show the docks that serve it and not
        :attr:`presets_kind` (a spiking brain's Stimulus) where ``shows_own`` says so: the
        presets' arrangement, made for the Fly LLM, hides those docks."""
        for key, dock in self._docks.items():
            if not self.applies(key):
                self._put_away(key, dock)   # as the layout left it, for its kind's return
            elif self.serves(key) != EVERY_KIND and not self.applies(key, self.presets_kind) \
                    and shows_own(key):
                dock.show()
