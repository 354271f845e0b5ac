"""The Inspector's *Currents now* uses the synapses as the run used them (cuts and scales)."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.model.interventions import Cut, Scale

pytestmark = pytest.mark.gui


def _run(win, qtbot, prompt: str = "Tom and his dog", tokens: int = 6):
    win.controls.temperature.setValue(0.0)
    win.controls.max_new_tokens.setValue(tokens)
    win.controls.speed_cap.setValue(0)
    with qtbot.waitSignal(win.run_ended, timeout=20_000) as ended:
        assert win.run_prompt(prompt)
    assert ended.args[0] == "done"
    return win.session.recording


def _shown(table):
    return [(int(table.item(r, 0).text()[1:]), float(table.item(r, 1).text()),
             float(table.item(r, 3).text())) for r in range(table.rowCount())]


def test_currents_now_reflect_an_active_cut_and_scale(window, qtbot, app_checkpoint):
    win = window
    ck = app_checkpoint
    offsets, indices = np.asarray(ck.w_offsets), np.asarray(ck.w_indices)
    values = np.asarray(ck.w_values, np.float32)
    neuron = int(np.argmax(np.diff(offsets)))              # the neuron with most inputs
    lo, hi = offsets[neuron], offsets[neuron + 1]
    pre = indices[lo:hi]
    index = 4
    plain = _run(win, qtbot)
    flows = values[lo:hi] * plain.state(index - 1)[pre]
    strongest = [int(j) for j in pre[np.argsort(-np.abs(flows), kind="stable")][:3]]
    # Cut the three strongest inputs from token 2 on; halve one more synapse.
    scaled = int(pre[np.argsort(-np.abs(flows), kind="stable")][3])
    panel = win.interventions.panel
    panel.add(Cut(strongest, [neuron], start=2))
    panel.add(Scale([scaled], [neuron], 0.5))
    run = _run(win, qtbot)
    assert [item["kind"] for item in run.metadata["interventions"]] == ["cut", "scale"]
    win.select_neuron(neuron)
    win.show_token(index)
    qtbot.waitUntil(lambda: win.display.showing(index), timeout=3000)
    shown = _shown(win.inspector.currents_table)
    assert shown, "no currents listed"
    for j, weight, current in shown:
        assert j not in strongest or (weight == 0 and current == 0)
        if j == scaled:
            w = float(values[lo:hi][pre == j][0])
            assert weight == pytest.approx(0.5 * w, abs=1e-3)
    # The listed currents are the edited weights times the run's own previous state.
    edited = values[lo:hi].copy()
    edited[np.isin(pre, strongest)] = 0
    edited[pre == scaled] *= 0.5
    expected = edited * run.state(index - 1)[pre]
    order = pre[np.argsort(-np.abs(expected), kind="stable")][:len(shown)]
    assert [j for j, _, _ in shown] == [int(j) for j in order]
    # Before the cut's window (token 1) only the scale acts: the cut synapses count again.
    win.show_token(1)
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    before = _shown(win.inspector.currents_table)
    scaled_only = values[lo:hi].copy()
    scaled_only[pre == scaled] *= 0.5
    expected = scaled_only * run.state(0)[pre]
    order = pre[np.argsort(-np.abs(expected), kind="stable")][:len(before)]
    assert [j for j, _, _ in before] == [int(j) for j in order]
