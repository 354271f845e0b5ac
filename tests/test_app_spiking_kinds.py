"""The window describes the spiking brain it shows, and offers what applies to it: a brain
opened from a folder is drawn and labelled as itself (not as the model loaded before it, of
the same size); the title, status bar, Model dock and About name it; a brain that does not
load says so as a model that does not load does; the language model's actions step aside."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow, pytest.mark.usefixtures("spiking_kernels")]


def _malecns(folder, neurons: int):
    """A small fly-connectome-malecns-166k folder of ``neurons`` neurons."""
    from flyviz.model.synthetic import make_malecns_arrays
    from flyviz.model.writers import write_malecns_dataset

    arrays = make_malecns_arrays(neurons=neurons, edges=10 * neurons, seed=3)
    return write_malecns_dataset(folder / "malecns-166k", **arrays), arrays


def test_a_brain_folder_of_the_models_size_is_drawn_as_itself(qtbot, tmp_path):
    """A MaleCNS folder of as many neurons as the loaded model is drawn on its own layout with
    its own labels: it was drawn on the model's somata with the model's cell types."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING

    checkpoint = make_app_checkpoint(tmp_path / "model", neurons=300, edges=3000)
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        model_anatomy = win.state.anatomy
        root, arrays = _malecns(tmp_path, 300)
        win.load_model(str(root))
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=30_000)
        anatomy = win.state.anatomy
        assert anatomy is not model_anatomy
        assert anatomy.kind == "layout"                 # the set has no somata: a ball
        assert anatomy is win.features["spiking"].model.drawing_anatomy()
        assert not np.array_equal(anatomy.positions, model_anatomy.positions)
        # and a second brain of the same size after it is drawn as itself too
        first = anatomy
        other, _ = _malecns(tmp_path / "other", 300)
        win.load_model(str(other))
        qtbot.waitUntil(lambda: win.state.anatomy is not first, timeout=30_000)
        assert win.state.anatomy is win.features["spiking"].model.drawing_anatomy()
    finally:
        win.close()


def test_the_loaded_models_graph_as_a_spiking_brain_keeps_its_anatomy(qtbot, tmp_path,
                                                                       monkeypatch):
    """File → Open as spiking brain draws the model's graph where the model's neurons are."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from test_spiking_app import _two_sided_brain

    import flyviz.spiking
    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
    brain.default_excite = np.arange(4)
    # the random test model's weights are not synapse counts: its graph, as counts
    monkeypatch.setattr(flyviz.spiking, "brain_from_checkpoint", lambda _checkpoint: brain)
    try:
        model_anatomy = win.state.anatomy
        assert win.features["spiking"].open_loaded()
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=10_000)
        assert win.state.anatomy is model_anatomy
    finally:
        win.close()


def test_the_model_box_opens_a_folder_in_the_authors_layout_as_a_spiking_brain(qtbot,
                                                                                 tmp_path):
    """The authors' two tables typed into the Model box open as a spiking brain, by the rule
    napari's Model box follows too (flyviz.spiking.brain.is_brain_folder): the folder was
    tried as a Fly LLM ("holds no Fly LLM checkpoint")."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    pytest.importorskip("pyarrow")
    from app_conftest import make_window
    from test_spiking_kind import HALF, write_brain

    from flyviz.kinds.spiking import SPIKING

    brain = write_brain(tmp_path / "brain")
    win = make_window(qtbot, None, tmp_path)
    try:
        win.load_model(str(brain))
        qtbot.waitUntil(lambda: win.state.kind is SPIKING
                        or "could not load" in win.model_panel.label.text(), timeout=30_000)
        assert win.state.kind is SPIKING, win.model_panel.label.text()
        assert win.state.neurons == 2 * HALF
    finally:
        win.close()


def test_the_window_names_the_spiking_brain_it_shows(qtbot, tmp_path):
    """Title, status bar, Model dock and About name the brain (they said "flyviz", "no
    model", "no model loaded" for a brain opened alone, and kept the previous model's name
    after a model)."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING

    root, _ = _malecns(tmp_path, 200)
    win = make_window(qtbot, None, tmp_path)
    try:
        win.load_model(str(root))
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=30_000)
        name = win.features["spiking"].model.name
        assert name and name in win.windowTitle()
        assert win.status_model.text() == name
        dock = win.model_panel.label.text()
        assert name in dock and "200 neurons" in dock and "synapses" in dock
        assert f"source: {root.resolve()}" in dock or str(root) in dock
        about = win.about_text()
        assert "No model loaded" not in about and name in about and "200 neurons" in about
        assert "Shiu" in about
    finally:
        win.close()

    checkpoint = make_app_checkpoint(tmp_path / "model", name="the-llm")
    win = make_window(qtbot, checkpoint, tmp_path, name="second.ini")
    try:
        assert "the-llm" in win.windowTitle()
        win.load_model(str(root))
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=30_000)
        for text in (win.windowTitle(), win.status_model.text(), win.model_panel.label.text(),
                     win.about_text()):
            assert "the-llm" not in text and name in text, text
    finally:
        win.close()


def test_a_damaged_spiking_brain_says_it_did_not_load(qtbot, tmp_path):
    """A brain that does not load gets a dialog and the Model dock's "could not load" line,
    as a model that does not load does (a status-bar line alone vanished after 20 s)."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from PySide6.QtWidgets import QApplication, QMessageBox

    root, _ = _malecns(tmp_path, 200)
    (root / "populations" / "sugar.i32").unlink()
    win = make_window(qtbot, None, tmp_path)
    try:
        win.load_model(str(root))
        qtbot.waitUntil(lambda: "could not load" in win.model_panel.label.text(),
                        timeout=30_000)
        assert str(root) in win.model_panel.label.text()
        boxes = [w for w in QApplication.topLevelWidgets()
                 if isinstance(w, QMessageBox) and w.isVisible()]
        assert any("sugar.i32" in box.text() for box in boxes), [b.text() for b in boxes]
        assert win.state.model is None
    finally:
        win.close()


def test_the_language_models_actions_step_aside_for_a_spiking_brain(qtbot, tmp_path):
    """Run prompt, Go to prompt, Compare with untouched, Why this token?, Open atlas and the
    lesion maps leave the menus for a spiking brain ("Compare with untouched" started a plain
    spiking run), and come back with the language model."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    names = ("run", "focus_prompt", "compare", "why", "open_atlas", "open_lesion_map",
             "open_estimate")
    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        registry = win.actions_registry
        assert all(registry[name].isVisible() for name in names)
        feature = win.features["spiking"]
        feature.open(SpikingModel(_two_sided_brain(checkpoint.config.neurons,
                                                   win.state.anatomy.positions)))
        assert not any(registry[name].isVisible() for name in names)
        titles = {a.text() for menu in registry.menus.values() for a in menu.actions()
                  if a.isVisible()}
        assert not titles & {registry[name].text() for name in names}
        assert feature.open_action.isVisible() and registry["quit"].isVisible()
        win.set_checkpoint(checkpoint)
        assert all(registry[name].isVisible() for name in names)
    finally:
        win.close()


def test_ctrl_return_runs_what_the_shown_kind_runs(qtbot, tmp_path):
    """Ctrl+Return runs the prompt for a Fly LLM and, for a spiking brain, starts the
    simulation the Stimulus dock's Run starts (it did nothing there: the prompt's action steps
    aside); the Run menu and Help → Keyboard shortcuts list both, each action for its kind."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QTableWidget
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, None, tmp_path)
    try:
        registry = win.actions_registry
        # With nothing shown yet, one action holds the keys (two would be ambiguous to Qt,
        # which then triggers neither).
        held = [a for a in registry.by_name.values()
                if a.shortcut().toString() == "Ctrl+Return" and a.isVisible()]
        assert len(held) == 1
        win.set_checkpoint(checkpoint)
        feature, panel = win.features["spiking"], win.features["spiking"].panel
        feature.open(SpikingModel(_two_sided_brain(checkpoint.config.neurons,
                                                   win.state.anatomy.positions)))
        panel.excite.setText("side:left")
        panel.bins.setValue(3)
        panel.speed.setValue(0.0)
        assert panel.run_button.text() == "Run" and not len(feature.recording)
        qtbot.keyClick(win, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        # Started ("Run again"), then ended: the run's bins are in the shown recording.
        qtbot.waitUntil(lambda: panel.run_button.text() == "Run again" and feature.finished,
                        timeout=10_000)
        assert len(feature.recording) == 3 and win.state.recording is feature.recording
        # The Run menu offers the simulation, and Help lists its keys, not the prompt's (which
        # do nothing while a spiking brain is shown).
        run_menu = [a.text() for a in registry.menu("Run").actions() if a.isVisible()]
        assert registry["run_spiking"].text() in run_menu
        assert registry["run"].text() not in run_menu
        rows = registry.shortcut_rows()
        assert ("Ctrl+Return", registry["run"].statusTip()) not in rows
        assert ("Ctrl+Return", registry["run_spiking"].statusTip()) in rows
        dialog = win.show_shortcuts()
        table = dialog.findChild(QTableWidget, "shortcutTable")
        assert registry["run_spiking"].statusTip() in {table.item(r, 1).text()
                                                       for r in range(table.rowCount())}
        dialog.close()
        # The Fly LLM again: the keys run its prompt.
        win.reset_run()
        win.set_checkpoint(checkpoint)
        win.state.run.max_new_tokens = 2
        win.state.docks.prompt = "Tom"
        win.activateWindow()
        qtbot.waitUntil(win.isActiveWindow, timeout=3000)
        with qtbot.waitSignal(win.run_ended, timeout=30_000):
            qtbot.keyClick(win, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        assert win.session.recording is not None and len(win.session.recording) >= 2
    finally:
        win.close()


#: The Fly LLM's menu entries (their titles as shown): each acts on a language model's
#: checkpoint, tokens or runs, or shows what they made (a lesion map, an atlas, a trace).
LANGUAGE_ENTRIES = ("Open atlas…", "Open lesion map…", "Open estimated lesions…",
                    "Compare with untouched", "Why this token?", "Run prompt", "Go to prompt",
                    "Δx: intervened − untouched", "Flow (Why?)", "Lesion importance (ΔCE)",
                    "Estimated lesions (ΔCE_est, every neuron)", "Atlas: mean activation",
                    "Atlas: standard deviation", "Atlas: density", "Atlas: maximum",
                    "Atlas: selectivity")


def _menu_entries(menu) -> dict[str, object]:
    """Every entry shown in ``menu`` and its submenus, by its title without the ``&``."""
    entries: dict[str, object] = {}
    for action in menu.actions():
        if action.isSeparator() or not action.isVisible():
            continue
        if action.menu() is not None:
            entries.update(_menu_entries(action.menu()))
        else:
            entries[action.text().replace("&", "")] = action
    return entries


def _shown_entries(win) -> dict[str, object]:
    entries: dict[str, object] = {}
    for top in win.menuBar().actions():
        if top.isVisible() and top.menu() is not None:
            entries.update(_menu_entries(top.menu()))
    return entries


def _listed_shortcuts(qtbot, win) -> set[str]:
    """The descriptions Help → Keyboard shortcuts lists."""
    from PySide6.QtWidgets import QTableWidget

    win.actions_registry["shortcuts"].trigger()
    qtbot.waitUntil(lambda: win.findChild(QTableWidget, "shortcutTable") is not None)
    table = win.findChild(QTableWidget, "shortcutTable")
    listed = {table.item(row, 1).text() for row in range(table.rowCount())}
    table.window().close()
    table.setObjectName("closed")                # the next look finds the next table
    return listed


def test_a_spiking_brain_lists_none_of_the_language_models_entries(qtbot, tmp_path):
    """With a spiking brain shown, the menus list none of the Fly LLM's entries (View →
    Colour by listed its lesion importance, estimated lesions, Δx, flow and atlas
    statistics, kept enabled by a map opened on the Fly LLM) and Help → Keyboard shortcuts
    none of their keys; back on the Fly LLM they all are."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        language = _shown_entries(win)
        assert set(LANGUAGE_ENTRIES) <= set(language), set(LANGUAGE_ENTRIES) - set(language)
        tips = {language[title].statusTip() for title in LANGUAGE_ENTRIES
                if not language[title].shortcut().isEmpty()}
        assert tips and tips <= _listed_shortcuts(qtbot, win)
        # a lesion importance the Fly LLM had on offer (an opened map) stays its own
        win.colour_by.set_enabled(("importance",), True)

        brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
        win.features["spiking"].open(SpikingModel(brain))
        assert win.state.kind.shows((SPIKING_KEY,))
        spiking = _shown_entries(win)
        assert "Spikes (flash and fade)" in spiking          # its own are there
        assert set(spiking) & set(LANGUAGE_ENTRIES) == set()
        assert not tips & _listed_shortcuts(qtbot, win)

        win.set_checkpoint(checkpoint)
        qtbot.waitUntil(lambda: not win.state.kind.shows((SPIKING_KEY,)), timeout=10_000)
        assert set(LANGUAGE_ENTRIES) <= set(_shown_entries(win))
        assert tips <= _listed_shortcuts(qtbot, win)
    finally:
        win.close()


def test_a_spiking_brains_view_menu_gives_each_dock_its_own_letter(qtbot, tmp_path):
    """With a spiking brain shown, the View menu's entries (its docks' among them) have
    distinct Alt letters, and each dock's entry one where a letter is left."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from test_app_keyboard import _dock_entries_without_a_letter_left, _mnemonic
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
        win.features["spiking"].open(SpikingModel(brain))
        assert win.state.kind.shows((SPIKING_KEY,))
        shown = [a for a in win.actions_registry.menu("View").actions()
                 if not a.isSeparator() and a.isVisible()]
        assert win.docks["spiking_population"].toggleViewAction() in shown
        letters = [_mnemonic(a.text()) for a in shown if _mnemonic(a.text()) is not None]
        assert len(set(letters)) == len(letters), letters
        assert _dock_entries_without_a_letter_left(win) == []
    finally:
        win.close()
