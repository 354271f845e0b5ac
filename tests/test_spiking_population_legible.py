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


def test_with_no_groups_named_the_largest_superclasses_are_plotted_ties_by_name():
    """An empty groups field plots the brain's five largest superclasses, largest first and
    equal ones by name, never the unlabelled neurons (an empty superclass)."""
    from flyviz.app.spiking.spiking_population import DEFAULT_GROUPS, resolve_groups
    from flyviz.spiking import SpikingBrain

    sizes = {"b_mid": 4, "a_mid": 4, "": 9, "huge": 7, "z_small": 1, "c_mid": 4, "tiny": 1,
             "d_small": 2}
    superclass = [name for name, size in sizes.items() for _ in range(size)]
    np.random.default_rng(1).shuffle(superclass)
    n = len(superclass)
    brain = SpikingBrain(name="groups", root_ids=np.arange(n, dtype=np.int64),
                         indptr=np.zeros(n + 1, np.int64), post=np.zeros(0, np.int32),
                         counts=np.zeros(0), superclass=superclass, cell_type=superclass)
    groups = resolve_groups(brain, "  ")
    assert DEFAULT_GROUPS == 5
    assert [name for name, _ in groups] == ["superclass:huge", "superclass:a_mid",
                                            "superclass:b_mid", "superclass:c_mid",
                                            "superclass:d_small"]
    for name, members in groups:
        label = name.split(":", 1)[1]
        assert members.tolist() == [i for i, s in enumerate(superclass) if s == label]
