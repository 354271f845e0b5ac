"""What a fresh window says and where its menus put things, before the user has done anything."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gui


def test_a_fresh_launch_does_not_say_a_new_model_is_loaded(window, qtbot):
    """The first model is not a "new" one: the Patching and Circuit docks have nothing to
    forget, and said "a new model is loaded" on every launch."""
    win = window
    qtbot.waitUntil(lambda: win.bundle is not None, timeout=30_000)
    for key in ("patching", "circuit"):
        text = win.features[key].panel.message.text()
        assert "new model" not in text, (key, text)


def test_open_as_spiking_brain_sits_above_quit_in_the_file_menu(window):
    """Quit is the File menu's last item (the spiking entry was added below it)."""
    menu = window.actions_registry.menu("File")
    shown = [a for a in menu.actions() if not a.isSeparator()]
    texts = [a.text().replace("&", "") for a in shown]
    assert texts[-1] == "Quit", texts
    assert "Open as spiking brain" in texts
