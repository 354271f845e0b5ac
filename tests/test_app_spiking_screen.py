"""The Screen dock (flyviz.app.spiking.spiking_screen_panel): on the demo spiking brain it silences each
neuron of a query in the background, and the Screen colour layer colours every neuron by the
change in the selected neuron's rate; a script that sets the state draws the same."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow, pytest.mark.usefixtures("spiking_kernels")]


def test_the_dock_screens_the_demo_brain_and_colours_by_the_targets_change(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz import spiking
    from flyviz.app.spiking.spiking_screen_panel import EACH_NEURON
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking.demo import demo_brain
    from flyviz.viewer.layers import SCREEN
    from flyviz.viewer.state import ViewerState

    brain = demo_brain()
    excited = np.asarray(brain.default_excite)
    # The target: the neuron the sensory stimulus drives hardest, bar the stimulated ones.
    baseline = spiking.simulate(brain, excite=excited, duration_s=0.1, trials=1).rates()
    driven = baseline.copy()
    driven[excited] = -1
    target = int(np.argmax(driven))
    assert baseline[target] > 0

    win = make_window(qtbot, None, tmp_path)
    try:
        assert win.dock_kinds.serves("screen") == ("spiking",)
        assert win.docks["screen"].isHidden()
        model = SpikingModel(brain, "demo")
        win.features["spiking"].open(model)
        feature = win.features["screen"]
        assert not win.docks["screen"].isHidden()
        p = feature.panel
        assert not feature.run()                        # no target yet
        assert "select the target neuron" in p.status.text()
        win.state.selected = target
        assert str(brain.root_ids[target]) in p.target.text()
        p.source.setCurrentText(EACH_NEURON)
        p.sets.setText("id:" + ",".join(str(i) for i in excited))
        p.mode.setCurrentText("silence")
        p.duration.setValue(100)
        assert feature.run()
        qtbot.waitUntil(lambda: feature.outcome is not None, timeout=60000)
        outcome = feature.outcome
        assert [s.members.tolist() for s in outcome.result.sets] == [[i] for i in excited]

        # State facts: the Screen layer is drawn, its values the target's change per neuron.
        state = win.state
        assert state.colour_by == SCREEN and state.screen is outcome.effect
        assert win.colour_by.actions[SCREEN].isChecked()     # View → Colour by → Screen
        values = np.asarray(state.values(), np.float64)
        change = outcome.result.change_of(target)
        assert np.allclose(values[excited], change, atol=1e-4)
        rest = np.setdiff1d(np.arange(brain.neurons), excited)
        assert not values[rest].any()                   # in no set: the neutral middle
        assert np.abs(change).max() > 0                 # silencing a driver moves the target
        top = int(np.argmax(np.abs(change)))
        alone = spiking.simulate(brain, excite=excited, silence=[excited[top]],
                                 duration_s=0.1).rates()
        assert change[top] == alone[target] - baseline[target]
        low, high = state.value_range()
        assert high == pytest.approx(np.abs(change).max()) and low == -high
        assert "Δ rate of" in state.layer.caption and "(Hz)" in state.layer.caption
        assert "largest change" in p.status.text()

        # A script that sets the state fields draws the same layer.
        script = ViewerState()
        script.set_model(model)
        script.screen = outcome.effect
        script.colour_by = SCREEN
        assert np.array_equal(script.values(), state.values())
        assert script.value_range() == state.value_range()
        assert script.layer.caption == state.layer.caption

        # Cancel: a long screen stops, the last one stays shown.
        p.sets.setText("superclass:cb_sensory & side:left")
        assert feature.run()
        qtbot.waitUntil(lambda: p.status.text().startswith("screening"), timeout=30000)
        p.cancel_button.click()
        qtbot.waitUntil(lambda: not feature.job.running.is_set(), timeout=30000)
        assert p.status.text() == "screen cancelled" and feature.outcome is outcome
        assert state.screen is outcome.effect
    finally:
        win.close()


def test_the_dock_shows_single_effects_and_the_pair_matrix(qtbot, tmp_path):
    """Pairs of the top 3: the dock lists the single effects with p and q, and draws the pair
    matrix, each cell the colour of its pair's effect (the singles' on the diagonal)."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window
    from PySide6.QtGui import QImage

    from flyviz import spiking
    from flyviz.app.population.population_plots import colour_table
    from flyviz.app.spiking.spiking_screen_panel import EACH_NEURON
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking.demo import demo_brain

    brain = demo_brain()
    excited = np.asarray(brain.default_excite)
    baseline = spiking.simulate(brain, excite=excited, duration_s=0.05, trials=2).rates()
    driven = baseline.copy()
    driven[excited] = -1
    target = int(np.argmax(driven))

    win = make_window(qtbot, None, tmp_path)
    try:
        win.features["spiking"].open(SpikingModel(brain, "demo"))
        feature = win.features["screen"]
        p = feature.panel
        win.state.selected = target
        p.source.setCurrentText(EACH_NEURON)
        p.sets.setText("id:" + ",".join(str(i) for i in excited))
        p.mode.setCurrentText("silence")
        p.duration.setValue(50)
        p.trials.setValue(2)
        p.pairs.setValue(len(excited) + 1)                 # more than the sets: refused
        assert not feature.run()
        assert f"more than the screen's {len(excited)} set(s)" in p.status.text()
        p.pairs.setValue(3)
        assert feature.run()
        qtbot.waitUntil(lambda: feature.outcome is not None, timeout=90000)
        result = feature.outcome.result
        assert len(result.sets) == len(excited) + 3 and len(result.top) == 3
        names, matrix = result.pair_matrix(target)
        effect = result.effects(target)[0]
        assert "and 3 pairs" in p.status.text()
        strongest = result.sets[result.top[0]].name
        assert strongest in p.effects.text().splitlines()[1]
        assert "Benjamini-Hochberg" in p.effects.text()
        # the pairs' q-values are their own family's, counted on a line of their own
        q = result.effects(target)[2]
        found = int((q[len(excited):] <= 0.05).sum())
        assert f"{found} of 3 pair(s) with q <= 0.05 (over the pairs alone" in p.effects.text()

        # Pixel facts of the matrix as the dock shows it.
        image = p.matrix.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
        cell = image.width() // 3
        assert image.width() == image.height() == 3 * cell and cell >= 4
        table = colour_table("difference")
        limit = np.abs(matrix).max()
        assert limit > 0 and np.isfinite(matrix).all()
        for a in range(3):
            for b in range(3):
                colour = image.pixelColor(b * cell + cell // 2, a * cell + cell // 2)
                shown = (colour.red(), colour.green(), colour.blue())
                index = int(np.clip(np.round((matrix[a, b] / limit + 1) * 127.5), 0, 255))
                assert shown == tuple(int(c) for c in table[index]), (a, b)
                if matrix[a, b] < -0.2 * limit:
                    assert colour.blue() > colour.red()     # less: blue
                elif matrix[a, b] > 0.2 * limit:
                    assert colour.red() > colour.blue()     # more: crimson
        assert np.array_equal(np.diag(matrix), effect[result.top])
        p.grab().save(str(tmp_path / "screen-dock.png"))
    finally:
        win.close()


def test_a_silencing_screen_without_a_stimulus_is_refused_before_it_starts(
        qtbot, tmp_path, monkeypatch):
    """On a brain with no stimulus of its own, a silencing screen with an empty Stimulus field
    is refused before any job starts, in the dock's words (its Stimulus field, not the
    command line's --excite); so is a Stimulus that selects nothing. A screen that fails
    once started says "screen" once in the status bar."""
    pytest.importorskip("pytestqt")
    from app_conftest import make_window

    from flyviz.app.spiking.spiking_screen_panel import EACH_NEURON
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking import screen as screen_module
    from flyviz.spiking.demo import demo_brain
    from flyviz.spiking.screen import ScreenError

    brain = demo_brain()
    # A brain without a stimulus of its own; the demo brain is built once per process, so
    # its own stimulus is put back for the tests after this one.
    monkeypatch.setattr(brain, "default_excite", None)
    win = make_window(qtbot, None, tmp_path)
    try:
        win.features["spiking"].open(SpikingModel(brain, "demo"))
        feature = win.features["screen"]
        p = feature.panel
        win.state.selected = 0
        p.source.setCurrentText(EACH_NEURON)
        p.sets.setText("id:1,2")
        p.mode.setCurrentText("silence")
        p.duration.setValue(20)
        p.excite.setText("")
        assert not feature.run()
        assert not feature.job.busy                     # nothing started
        said = p.status.text()
        assert "Stimulus field" in said and "--excite" not in said
        assert win.statusBar().currentMessage() == f"screen: {said}"
        p.excite.setText("type:no-such-type")
        assert not feature.run() and not feature.job.busy
        assert "Stimulus" in p.status.text() and "--excite" not in p.status.text()
        # An activation screen needs no stimulus.
        p.mode.setCurrentText("activate")
        p.excite.setText("")

        def fails(*_args, **_kwargs):
            raise ScreenError("the disk is full")
        monkeypatch.setattr(screen_module, "run_screen", fails)
        assert feature.run()
        qtbot.waitUntil(lambda: not feature.job.busy, timeout=30_000)
        qtbot.waitUntil(lambda: "failed" in p.status.text(), timeout=5_000)
        assert win.statusBar().currentMessage() == "screen failed: the disk is full"
    finally:
        win.close()


@pytest.mark.parametrize("own_stimulus", [True, False])
def test_the_dock_checks_a_stimulus_as_the_command_does_in_its_own_words(monkeypatch,
                                                                        own_stimulus):
    """The dock's check before a screen starts and the screen's own base stimulus were two
    copies of one rule (they disagreed on a blank query: the dock refused it, the screen
    used the brain's own stimulus). One rule now: the dock refuses exactly what the command
    refuses, in its Stimulus field's words, and accepts exactly what it accepts."""
    from flyviz.app.spiking.spiking_screen_panel import stimulus_field_words
    from flyviz.spiking.demo import demo_brain
    from flyviz.spiking.screen import ScreenError, ScreenSettings, base_stimulus

    brain = demo_brain()
    if not own_stimulus:        # built once per process: put back by monkeypatch
        monkeypatch.setattr(brain, "default_excite", None)

    def outcome(settings, *words):
        try:
            return np.asarray(base_stimulus(brain, settings, *words)).tolist()
        except ScreenError as exc:
            return str(exc)

    for mode, excite in [("activate", None), ("silence", None), ("silence", "   "),
                         ("silence", "superclass:sensory"), ("silence", "id:1,2"),
                         ("silence", "input & !input"), ("silence", "type:(((")]:
        settings = ScreenSettings(mode=mode, excite=excite, duration_s=0.02).validate()
        command, dock = outcome(settings), outcome(settings, stimulus_field_words())
        assert isinstance(command, str) == isinstance(dock, str), (excite, command, dock)
        if isinstance(command, str):
            assert "--excite" in command and "--excite" not in dock and "Stimulus" in dock
        else:
            assert dock == command
    # On the brain with no stimulus of its own, a silencing screen needs one typed.
    refused = outcome(ScreenSettings(mode="silence").validate(), stimulus_field_words())
    assert isinstance(refused, str) != own_stimulus
    if not own_stimulus:
        assert f"{brain.name} has none of its own" in refused and "Stimulus field" in refused
