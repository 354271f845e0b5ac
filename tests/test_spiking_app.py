"""The spiking brain in the window (flyviz.app.spiking_panel): File → Open as spiking brain
runs the loaded model's graph as Shiu et al.'s LIF model, hides the language model's docks,
and plays its bins on the 3-D brain, lighting the neurons that fire."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gui


def _lit(image: np.ndarray) -> int:
    from flyviz.render.style import BACKGROUND

    background = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)
    return int((np.abs(image[..., :3].astype(int) - background).max(axis=-1) > 40).sum())


def test_the_window_runs_the_loaded_model_as_a_spiking_brain(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING, SpikingModel
    from flyviz.spiking import SpikingBrain

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        feature = win.features["spiking"]
        dock = win.docks["stimulus"]
        assert dock.isHidden()                     # the Fly LLM: no stimulus dock
        # The test model's weights are not synapse counts: it cannot be a spiking brain.
        assert not feature.open_loaded() and win.state.kind is not SPIKING
        assert "not multiples of one synapse" in win.statusBar().currentMessage()
        # A spiking brain of the same neurons (no synapses) is drawn where the model's are.
        n = checkpoint.config.neurons
        brain = SpikingBrain(name="spiking test", root_ids=np.arange(n, dtype=np.int64),
                             indptr=np.zeros(n + 1, np.int64), post=np.zeros(0, np.int64),
                             counts=np.zeros(0))
        anatomy = win.state.anatomy
        feature.open(SpikingModel(brain))
        assert win.state.anatomy is anatomy
        assert win.state.kind is SPIKING
        win.refresh_panels()
        for key in ("text", "topk", "why"):
            assert win.docks[key].isHidden(), key
        assert not dock.isHidden()

        # Everything excited, hard: the brain lights up as the bins play.
        win.refresh_panels()
        dark = _lit(win.brain.canvas.render())
        feature.panel.excite.setText(f"id:0-{checkpoint.config.neurons - 1}")
        feature.panel.rate.setValue(400.0)
        feature.panel.bins.setValue(6)
        feature.panel.speed.setValue(1.0)
        assert feature.run()
        qtbot.waitUntil(lambda: feature.recording is not None, timeout=60000)
        recording = feature.recording
        assert len(recording) == 6 and sum(recording.metadata["spiking"]["bin_spikes"]) > 0
        qtbot.waitUntil(lambda: win.state.index >= 2, timeout=5000)
        assert "engine:" in feature.panel.status.text()
        assert "1x real time" in feature.panel.status.text()
        feature.toggle_play()                      # pause
        assert not feature.playing and "(paused)" in feature.panel.status.text()
        shown = win.state.index
        qtbot.wait(150)
        assert win.state.index == shown            # paused: the bin stays
        win.refresh_panels()
        assert win.timeline.counter.text().startswith(f"bin {shown + 1} / 6")
        lit = _lit(win.brain.canvas.render())
        assert lit > dark + 50, (dark, lit)
    finally:
        win.close()
