"""A spiking run of several trials in the window: the Stimulus dock's status line counts a
bin's spikes per trial (the brain shows the trials' mean), the Spiking populations raster
keeps each trial's spikes apart (each cell's row split into one lane a trial), and the
Stimulus dock is fitted once when a run of several trials is opened."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from app_conftest import make_window
from qt_barriers import settle

pytestmark = [pytest.mark.gui, pytest.mark.usefixtures("spiking_kernels")]

TRIALS = 3


def _spiking_window(qtbot, tmp_path):
    """A window showing the two-sided test brain; returns it and the brain's model."""
    from test_spiking_app import _two_sided_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    model = SpikingModel(_two_sided_brain(checkpoint.config.neurons,
                                          win.state.anatomy.positions), "two-sided")
    win.features["spiking"].open(model)
    settle(qtbot, win)
    return win, model


def _run_three_trials(qtbot, win):
    """Run 4 bins of the left side, 3 trials, from the Stimulus dock's settings."""
    feature = win.features["spiking"]
    feature.settings.excite = "side:left"
    feature.settings.bins = 4
    feature.settings.trials = TRIALS
    assert feature.run()
    qtbot.waitUntil(lambda: feature.finished and len(feature.recording) == 4, timeout=60_000)
    return feature


def _bin_spikes(recording, index: int) -> int:
    """The spikes of bin ``index``, all trials, counted off the recording's spike log."""
    ends = recording.spikes.frame_ends()
    return int(ends[index] - (ends[index - 1] if index else 0))


def test_the_status_line_counts_a_bins_spikes_per_trial(qtbot, tmp_path):
    """A 3-trial run's status line says the shown bin's spikes per trial (the mean over the
    trials, as the brain shows their mean), not all trials' spikes together, which read as
    three times the activity of a trial."""
    win, _model = _spiking_window(qtbot, tmp_path)
    try:
        feature = _run_three_trials(qtbot, win)
        recording = feature.recording
        index = win.state.index if 0 <= win.state.index < len(recording) else \
            len(recording) - 1
        spikes = _bin_spikes(recording, index)
        assert spikes > 0
        first = feature.panel.status.text().splitlines()[0]
        assert first.endswith(f" · {spikes / TRIALS:,.1f} spikes per trial"), first
        assert f"· {spikes:,} spikes" not in first
        # the trials' line beneath still says what the brain shows
        assert feature.panel.status.text().splitlines()[-1] == \
            f"{TRIALS} trials: the brain shows their mean rate"
    finally:
        win.close()


def _lane(row: float, trial: int, trials: int) -> float:
    """Where the raster draws a spike of trial ``trial`` of ``trials`` in the cell of
    ``row``: lanes packed into 0.8 of the row (the rest a gap between cells), the first
    trial lowest; one trial on the row itself."""
    if trials == 1:
        return row
    return row - 0.4 + (trial + 0.5) * 0.8 / trials


def test_the_raster_draws_each_trials_spikes_in_a_lane_of_its_cells_row(qtbot, tmp_path):
    """Each spike of a 3-trial run is drawn in its cell's row, in the lane of its trial:
    trials of one cell are apart (they were drawn on one row, mixed), cells stay apart, and
    the marks are exactly the recording's spikes of the raster's cells."""
    win, _model = _spiking_window(qtbot, tmp_path)
    try:
        feature = _run_three_trials(qtbot, win)
        population = feature.population
        population.redraw()
        recording = feature.recording
        tick, neuron, trial = recording.spikes.arrays(0, len(recording))
        assert set(np.unique(trial).tolist()) == set(range(TRIALS))
        expected = sorted((round(float(t) * recording.spikes.tick_ms, 6),
                           round(_lane(float(r), int(k), TRIALS), 6))
                          for t, nr, k in zip(tick, neuron, trial)
                          for r in np.flatnonzero(population.raster_neurons == nr))
        drawn = []
        heights = set()
        for item in population.raster_plot.getPlotItem().items:
            if not isinstance(item, pg.PlotCurveItem):
                continue
            x, y = item.getData()
            if x is None or not len(x):
                continue
            low, high = y[0::2], y[1::2]
            drawn += zip(np.round(x[0::2], 6).tolist(), np.round((low + high) / 2, 6).tolist())
            heights |= set(np.round(high - low, 6).tolist())
        assert expected and sorted(drawn) == expected
        # a tick is shorter than its lane: the trials' ticks do not touch
        assert heights and max(heights) < 0.8 / TRIALS
        # a cell that fired in several trials shows them on distinct lanes
        cells = {}
        for _t, nr, k in zip(tick, neuron, trial):
            cells.setdefault(int(nr), set()).add(int(k))
        assert any(len(k) > 1 for nr, k in cells.items() if nr in population.raster_neurons)
        assert population.raster_trials.size == population.raster_marks[0].size
        assert "3 trials" in population.raster_caption.text()
    finally:
        win.close()


def test_a_recording_of_several_trials_fits_the_stimulus_dock_once(qtbot, tmp_path,
                                                                   monkeypatch):
    """Opening a 3-trial recording holds the status line's third line and fits the Stimulus
    dock to its form once (it was fitted twice, each fit asking Qt again over later layout
    passes); the Speed row is in sight."""
    from flyviz.kinds.spiking import BinSettings, Stimulus, record_run

    win, model = _spiking_window(qtbot, tmp_path)
    try:
        feature = win.features["spiking"]
        recording = record_run(model, Stimulus(excite="side:left", rate=150.0),
                               BinSettings(bins=2, trials=TRIALS))
        fitted = []
        docks = feature.host.docks
        real_fit = docks.fit
        monkeypatch.setattr(docks, "fit", lambda dock: (fitted.append(dock), real_fit(dock)))
        feature.open(model, recording)
        assert [d is feature.dock for d in fitted] == [True]
        settle(qtbot, win)
        speed = feature.panel.speed
        shown = speed.visibleRegion().boundingRect()
        assert (shown.height(), shown.width()) == (speed.height(), speed.width())
        assert feature.panel.status.text().splitlines()[-1] == \
            f"{TRIALS} trials: the brain shows their mean rate"
    finally:
        win.close()


def test_the_status_line_follows_the_bin_scrubbed_to_after_the_run(qtbot, tmp_path):
    """Scrubbed to an earlier bin once the run was over, the Stimulus dock's status line
    still counted the last bin's spikes beside the timeline's earlier bin: it says the bin
    shown, and the run's speed and end as before."""
    win, _model = _spiking_window(qtbot, tmp_path)
    try:
        feature = _run_three_trials(qtbot, win)
        recording = feature.recording
        for index in (1, 0, 3):
            win.state.index = index
            first, second = feature.panel.status.text().splitlines()[:2]
            spikes = _bin_spikes(recording, index) / TRIALS
            assert first.startswith(f"bin {index} of 0–3"), first
            assert first.endswith(f"· {spikes:,.1f} spikes per trial"), first
            assert second.endswith("(done)"), second
    finally:
        win.close()
