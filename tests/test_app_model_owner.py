"""The viewer state is the one owner of the shown model: the window's model controller reads
it from there, so a model given to the state is the one every dock and the brain view see."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import brightness, make_window, plain_display, shown_picture

from flyviz.app._testing import make_app_checkpoint
from flyviz.record.runner import Model

pytestmark = pytest.mark.gui


def _lit_picture(win, qtbot, neurons: int) -> np.ndarray:
    """The brain view's pixels of one frame lighting ``neurons`` neurons."""
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    rec = Recording(neurons)
    rec.append(make_frame(0, np.linspace(0.4, 1.0, neurons, dtype=np.float32)))
    return shown_picture(win, qtbot, rec)


def _lit(picture: np.ndarray) -> int:
    """Pixels clearly brighter than the background."""
    lum = brightness(picture)
    return int((lum > np.median(lum) + 40).sum())


def test_a_model_given_to_the_state_is_the_one_every_dock_sees(qtbot, tmp_path):
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking.brain import brain_from_checkpoint

    first = make_app_checkpoint(tmp_path / "first")
    win = make_window(qtbot, first, tmp_path)
    try:
        plain_display(win)
        loaded = win.models.bundle
        assert loaded is not None and loaded.model is win.state.model
        assert win.checkpoint is first and win.anatomy is loaded.anatomy

        # A script gives the state another language model, of another size.
        second = Model(make_app_checkpoint(tmp_path / "second", neurons=300, seed=3,
                                           name="second-brain"))
        win.state.set_model(second, second.checkpoint.anatomy, "second-brain")
        bundle = win.models.bundle
        assert bundle is not None and bundle.model is second
        assert win.checkpoint is second.checkpoint and win.tokenizer is second.tokenizer
        assert win.model_name == "second-brain" and win.anatomy is second.checkpoint.anatomy
        # The docks' reads of the model go through the same controller.
        for feature in ("lesions", "atlas"):
            assert win.features[feature].controller._checkpoint() is second.checkpoint
        # The brain view draws the second model's 300 neurons.
        assert _lit(_lit_picture(win, qtbot, 300)) > 200

        # Another kind's model: no language model is shown, and no dock reads the first.
        counts = make_app_checkpoint(tmp_path / "counts", neurons=300, seed=4)
        counts.w_values[:] = np.arange(counts.w_values.size) % 5 + 1     # synapse counts
        win.features["spiking"].open(SpikingModel(brain_from_checkpoint(counts), "counts"))
        assert win.state.model is not None and win.models.bundle is None
        assert win.checkpoint is None and win.anatomy is None
        assert win.features["lesions"].controller._checkpoint() is None

        # The first model, given back to the state, brings back what was loaded with it.
        win.state.set_model(loaded.model, loaded.anatomy, loaded.name)
        assert win.models.bundle is loaded and win.checkpoint is first
        assert _lit(_lit_picture(win, qtbot, first.config.neurons)) > 200
    finally:
        win.close()
        second.close()
