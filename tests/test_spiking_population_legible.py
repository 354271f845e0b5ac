"""The Spiking populations dock at its smallest (the 1280×800 window's bottom right): the
rate and raster plots keep their axis labels whole ("rate (Hz)" was cut to "rate (Hz" in a
plot 35 pixels tall), and no empty line sits above the caption."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gui


def test_the_plots_axis_labels_are_whole_at_the_docks_smallest(qtbot):
    from flyviz.app.spiking.spiking_population import SpikingPopulationPanel
    from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel
    from flyviz.record.recording import Recording
    from flyviz.record.spikes import SpikeLog
    from flyviz.spiking import SpikingBrain
    from flyviz.viewer.state import ViewerState

    names = ["cb_intrinsic", "cb_sensory", "visual_projection", "ascending_neuron",
             "descending_neuron"]
    n = 50
    superclass = [names[i % len(names)] for i in range(n)]
    brain = SpikingBrain(name="small", root_ids=np.arange(n, dtype=np.int64),
                         indptr=np.zeros(n + 1, np.int64), post=np.zeros(0, np.int32),
                         counts=np.zeros(0), superclass=superclass, cell_type=superclass)
    model = SpikingModel(brain)
    state = ViewerState()
    state.set_model(model, model.drawing_anatomy())
    recording = Recording(n, {"kind": SPIKING_KEY, "spiking": {"bin_ms": 10.0}},
                          states_dtype="float32")
    recording.spikes = SpikeLog(0.1)
    state.set_recording(recording)
    panel = SpikingPopulationPanel(state)
    qtbot.addWidget(panel)
    panel.set_brain(brain)
    panel.resize(300, 200)                  # the layout gives it no less than its minimum
    panel.show()
    qtbot.waitExposed(panel)
    qtbot.waitUntil(lambda: panel.key.text() != "", timeout=3000)
    panel.resize(300, panel.minimumSizeHint().height())
    qtbot.waitUntil(lambda: panel.height() == panel.minimumSizeHint().height(), timeout=3000)
    assert not panel.note.isVisible(), "an empty note takes a line"
    for plot, text in ((panel.rates_plot, "rate (Hz)"), (panel.raster_plot, "cells")):
        axis = plot.getAxis("left")
        qtbot.waitUntil(lambda axis=axis: axis.geometry().height() > 0, timeout=3000)
        label = axis.label.boundingRect().width()          # drawn turned a quarter
        assert label <= axis.geometry().height(), \
            f"{text!r} needs {label:.0f} px, the axis is {axis.geometry().height():.0f} px"
