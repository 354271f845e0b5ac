"""The window opens a fly-connectome-malecns-166k folder as a spiking brain: its neurons on a
generic ball (the set has no somata), its populations in the Stimulus dock's queries, a live
run lighting the brain; a damaged folder is said as a model that does not load (its line
in the status bar and a dialog) while the brain shown stays."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow, pytest.mark.usefixtures("spiking_kernels")]


def _flashing(image: np.ndarray) -> int:
    """Pixels in the flash scale's bright (yellow) end: green well above blue, which the grey
    resting brain and the dark background never are."""
    rgb = image[..., :3].astype(int)
    return int(((rgb[..., 1] - rgb[..., 2]) > 60).sum())


def test_the_window_opens_the_whole_malecns_as_a_spiking_brain(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import lit_count, make_window, settled_render
    from PySide6.QtWidgets import QApplication

    from flyviz.kinds.spiking import SPIKING
    from flyviz.model.synthetic import make_malecns_arrays
    from flyviz.model.writers import write_malecns_dataset

    arrays = make_malecns_arrays(neurons=300, edges=3000, seed=3)
    root = write_malecns_dataset(tmp_path / "malecns-166k", **arrays)
    win = make_window(qtbot, None, tmp_path)
    try:
        feature = win.features["spiking"]
        win.load_model(str(root))                 # File → Open folder, or `flyviz gui DIR`
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=30_000)
        model = feature.model
        assert model is not None and model.neurons == 300 and win.state.neurons == 300
        assert model.spec == str(root.resolve())  # what its recordings name
        assert np.array_equal(model.brain.root_ids, arrays["body_id"])
        assert win.state.anatomy.kind == "layout" and win.state.anatomy.valid.all()
        assert not win.docks["stimulus"].isHidden()
        win.refresh_panels()
        QApplication.processEvents()
        rest = settled_render(qtbot, win)
        assert lit_count(rest) > 0 and _flashing(rest) == 0   # 300 grey points on the ball, at rest

        panel = feature.panel
        panel.excite.setText("population:sugar")
        panel.rate.setValue(400.0)
        panel.bins.setValue(6)
        panel.speed.setValue(0.0)
        panel.display.setCurrentIndex(1)          # spikes flash and fade
        assert feature.run()
        qtbot.waitUntil(lambda: feature.finished, timeout=30_000)
        recording = feature.recording
        sugar = arrays["populations"]["sugar"]
        assert len(recording) == 6 and recording.metadata["spiking"]["excited"] == sugar.size
        rates = recording.states()
        assert rates[:, sugar].sum() > 0
        win.state.index = 5
        win.refresh_panels()
        # The sugar neurons' spikes flash in the scale's yellow (the rest of the brain goes dark
        # in the flash layer, so fewer pixels are lit than at rest: colour, not count).
        assert _flashing(settled_render(qtbot, win)) > 5
        keep = os.environ.get("FLYVIZ_SCREENSHOTS")
        if keep:
            import imageio.v3 as iio

            iio.imwrite(os.path.join(keep, "malecns-brain.png"), win.brain.canvas.render())

        # A damaged folder: one line in the status bar; the brain shown stays.
        broken = write_malecns_dataset(tmp_path / "broken", **arrays)
        (broken / "populations" / "sugar.i32").unlink()
        win.load_model(str(broken))
        qtbot.waitUntil(lambda: "populations/sugar.i32 is missing"
                        in win.statusBar().currentMessage(), timeout=30_000)
        assert feature.model is model and win.state.kind is SPIKING
    finally:
        win.close()
