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
