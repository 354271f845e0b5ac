"""A spiking run's movie from the command line shows its spikes: by default each spike lights
its neuron (the flash layer), and a rate scale in Hz reads as whole numbers. The movie was
nearly black (an automatic scale to 600 Hz, where one spike in a 10 ms bin is 100 Hz) with
ticks "3e+02"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage

from flyviz import cli
from flyviz.render.overlay_layout import colorbar_labels

pytestmark = pytest.mark.gui


def _luminance(path: Path) -> np.ndarray:
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(),
                                                              image.bytesPerLine())
    rgb = rows[:, :image.width() * 3].reshape(image.height(), image.width(), 3)
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def _frame(tmp_path: Path, name: str, *extra: str) -> np.ndarray:
    out = tmp_path / name
    assert cli.main(["export", "--recording", str(tmp_path / "spikes.flyrec"), "--out", str(out),
                     "--size", "480x270", "--tokens", "10:11", "--frames-per-token", "1",
                     "--hold", "0", "--no-overlays", *extra]) == 0
    (png,) = sorted(out.glob("*.png"))
    return _luminance(png)


def test_the_spikes_of_a_spiking_movie_are_visible(tmp_path):
    assert cli.main(["simulate", "demo", "--duration", "150ms",
                     "--record", str(tmp_path / "spikes.flyrec")]) == 0
    default = _frame(tmp_path, "default")
    # The rates over a 600 Hz scale: what the movie showed before.
    rates = _frame(tmp_path, "rates", "--color-scale", "600")
    background = float(np.median(default))
    bright = int((default > background + 100).sum())
    assert bright > 50, f"{bright} bright pixels: the spikes are not visible"
    assert bright > 3 * int((rates > np.median(rates) + 100).sum())


def test_a_spiking_movie_is_titled_as_a_spiking_brain(tmp_path):
    from flyviz.export.movie import model_name_of
    from flyviz.record.recording import Recording

    assert cli.main(["simulate", "demo", "--duration", "30ms",
                     "--record", str(tmp_path / "spikes.flyrec")]) == 0
    title = model_name_of(Recording.load(tmp_path / "spikes.flyrec"))
    assert title == "demo · spiking brain"


def test_a_rate_scale_reads_in_whole_hertz():
    assert [t for t, _ in colorbar_labels("sequential", (0.0, 300.0))] == ["0", "150", "300"]
    assert [t for t, _ in colorbar_labels("sequential", (0.0, 600.0))] == ["0", "300", "600"]
    assert [t for t, _ in colorbar_labels("sequential", (0.0, 2.5))] == ["0", "1.2", "2.5"]


def test_the_flash_scale_names_its_unit_once():
    """The movie's and the window's colour scale caption of the flash layer (it read
    "spikes, fading (τ 15 ms) (spikes)")."""
    from flyviz.viewer.layers import flash_layer

    assert flash_layer(15.0).caption == "spikes, fading (τ 15 ms)"
