"""A spiking run of several trials in the window: the Stimulus dock's status line counts a
bin's spikes per trial (the brain shows the trials' mean)."""

from __future__ import annotations

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
