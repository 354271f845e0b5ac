"""The spiking brain in the window (flyviz.app.spiking.spiking_panel): File → Open as spiking brain
runs the loaded model's graph as Shiu et al.'s LIF model, hides the language model's docks,
and runs it live: each bin is simulated on the engine's worker and lights the brain as it
arrives; the populations dock draws rates and a raster of chosen cells; a spiking recording
opened from a file is shown the same way."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.gui, pytest.mark.slow, pytest.mark.usefixtures("spiking_kernels")]

#: The language model's docks, none of which a spiking brain has a use for.
LANGUAGE_DOCKS = ("text", "topk", "why", "patching", "population")


def _two_sided_brain(n: int, positions: np.ndarray) -> "object":
    """A brain of ``n`` neurons at ``positions``: the left half sensory (``L``), the right
    half central (``R``), each left neuron driving the next one (so runs have a graph)."""
    from flyviz.spiking import SpikingBrain

    half = n // 2
    pre = np.arange(half - 1)
    return SpikingBrain(name="spiking test", root_ids=np.arange(n, dtype=np.int64),
                        indptr=np.concatenate([[0], np.cumsum(np.isin(np.arange(n), pre))]
                                              ).astype(np.int64),
                        post=(pre + 1).astype(np.int32), counts=np.full(pre.size, 3.0),
                        w_syn=0.275, positions=np.asarray(positions, np.float64),
                        positions_valid=np.ones(n, bool),
                        superclass=["sensory"] * half + ["central"] * (n - half),
                        cell_type=["L"] * half + ["R"] * (n - half),
                        side=["left"] * half + ["right"] * (n - half))


def _marks(population) -> list[tuple[float, int]]:
    """The raster's marks as drawn, ``(ms, row)``, sorted."""
    times, rows = population.raster_marks
    return sorted(zip(np.round(times, 6).tolist(), rows.astype(int).tolist()))


def _expected_marks(log, raster_neurons: np.ndarray, bins: int) -> list[tuple[float, int]]:
    """A mark at ``tick * 0.1`` ms in every row of a neuron, for each spike of the first
    ``bins`` bins: what the raster should draw."""
    tick, neuron, _trial = log.arrays(0, bins)
    return sorted((round(float(t) * 0.1, 6), int(r)) for t, nr in zip(tick, neuron)
                  for r in np.flatnonzero(raster_neurons == nr))


def _show_population(qtbot, win) -> None:
    """The Spiking populations dock, large enough to read marks off."""
    from qt_barriers import settle

    for key in ("controls", "traces"):
        if key in win.docks:
            win.docks[key].hide()
    from PySide6.QtCore import Qt

    dock = win.docks["spiking_population"]
    dock.show()
    win.resize(1400, 1000)
    win.resizeDocks([dock], [700], Qt.Orientation.Vertical)
    settle(qtbot, win)


def _raster_image(population):
    """The raster plot grabbed, and how a point of its data (ms, row) maps to a pixel."""
    from PySide6.QtCore import QPointF
    from PySide6.QtGui import QImage

    plot = population.raster_plot
    plot.getViewBox().setRange(yRange=(-1, population.raster_neurons.size), padding=0)
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    image = plot.grab().toImage().convertToFormat(QImage.Format.Format_RGBA8888)
    ratio = image.devicePixelRatio()
    width, height, line = image.width(), image.height(), image.bytesPerLine()
    raw = np.frombuffer(image.constBits(), np.uint8, count=line * height)
    pixels = raw.reshape(height, line)[:, :4 * width].reshape(height, width, 4)[..., :3].copy()
    box = plot.getViewBox()

    def to_pixel(x: float, y: float) -> tuple[int, int]:
        point = plot.mapFromScene(box.mapViewToScene(QPointF(float(x), float(y))))
        return int(round(point.x() * ratio)), int(round(point.y() * ratio))

    return pixels, to_pixel


def _near(image: np.ndarray, x: int | None, y: int | None, colour: str, *,
          columns: slice | None = None, reach: int = 3) -> bool:
    """Whether ``colour`` is drawn within ``reach`` pixels of ``(x, y)`` (or anywhere in
    ``columns``)."""
    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    if columns is not None:
        region = image[:, columns]
    else:
        assert x is not None and y is not None
        region = image[max(0, y - reach):y + reach + 1, max(0, x - reach):x + reach + 1]
    return bool((np.abs(region.astype(int) - want).max(axis=-1) < 30).any())


def test_the_window_runs_a_spiking_brain_live(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import lit_count, make_window, settled_render
    from PySide6.QtWidgets import QApplication

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING, BinSettings, SpikingModel, record_run
    from flyviz.viewer.layers import FLASH
    from flyviz.viewer.state import STATE

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        feature = win.features["spiking"]
        dock = win.docks["stimulus"]
        assert dock.isHidden()                     # the Fly LLM: no stimulus dock
        assert not win.controls.mode.isHidden()    # and signed x or |x|
        # The test model's weights are not synapse counts: it cannot be a spiking brain.
        assert feature.open_loaded()               # opening starts off the UI thread
        qtbot.waitUntil(lambda: not feature.opening_busy, timeout=30_000)
        assert win.state.kind is not SPIKING
        assert "not whole multiples of one synapse" in win.statusBar().currentMessage()
        assert not feature.opening_bar.isVisible() and feature.open_action.isEnabled()
        # A spiking brain of the model's own neurons (as Open as spiking brain makes one) is
        # drawn where the model's are: the anatomy is handed over, never matched by size.
        n = checkpoint.config.neurons
        anatomy = win.state.anatomy
        brain = _two_sided_brain(n, anatomy.positions)
        feature.open(SpikingModel(brain), anatomy=anatomy)
        assert win.state.anatomy is anatomy and win.state.kind is SPIKING
        # Open as spiking brain again: the brain shown is not a model, and the line says so.
        assert not feature.open_loaded()
        assert "is shown: open a model" in win.statusBar().currentMessage()
        # Drawn where the model's neurons are, but inspected by its own synapses.
        graph = win.inspector.connectivity
        assert graph is not None and graph.weight_name == "Synapses"
        first = slice(int(brain.indptr[0]), int(brain.indptr[1]))
        assert sorted((p.neuron, p.weight) for p in graph.outputs(0, 1000)) == sorted(
            zip(brain.post[first].tolist(), brain.counts[first].tolist()))
        win.refresh_panels()
        for key in LANGUAGE_DOCKS:
            assert win.docks[key].isHidden(), key
            assert not win.dock_kinds.applies(key), key
        assert not dock.isHidden() and not win.docks["spiking_population"].isHidden()
        dark = lit_count(settled_render(qtbot, win))      # the resting brain, fully eased

        # Excite neuron 0 by clicking it (selected on the brain) and the rest of the left half
        # by query; silence one by selection too.
        panel = feature.panel
        assert not panel.excite_selected.isEnabled()
        win.state.selected = 0
        assert feature.add_selected("excite") and panel.excite.text() == "id:0"
        panel.excite.setText(panel.excite.text() + " | side:left")
        win.state.selected = n - 1
        assert feature.add_selected("silence") and panel.silence.text() == f"id:{n - 1}"
        panel.rate.setValue(400.0)
        panel.bins.setValue(12)
        panel.speed.setValue(0.0)                  # as fast as it runs
        panel.display.setCurrentIndex(1)           # spikes flash and fade
        assert feature.run()
        recording = feature.recording
        assert win.state.recording is recording    # the live run's bins go into the shown one
        qtbot.waitUntil(lambda: feature.finished, timeout=30000)
        QApplication.processEvents()
        assert len(recording) == 12 and win.state.colour_by == FLASH
        assert recording.metadata["spiking"]["silenced"] == 1
        spikes = recording.metadata["spiking"]["bin_spikes"]
        assert len(spikes) == 12 and sum(spikes) > 0
        rates = recording.states()
        assert rates[:, :n // 2].sum() > 0 and rates[:, n // 2:].sum() == 0
        assert re.search(r"\n[0-9.]+x real time \(uncapped\), engine [0-9.]+x",
                         panel.status.text()), panel.status.text()
        # Saved, it reads back as the spiking kind with every bin and its spike count.
        from flyviz.kinds import kind_of_recording
        from flyviz.record.recording import Recording

        saved = Recording.load(win.save_recording(tmp_path / "live.flyrec"))
        assert kind_of_recording(saved) is SPIKING and len(saved) == 12
        assert saved.metadata["spiking"]["bin_spikes"] == spikes
        np.testing.assert_array_equal(saved.states(), rates)
        # Scrubbing afterwards: the timeline counts bins of ms.
        win.state.index = 4
        win.refresh_panels()
        # A bin is neither prompt nor generated: the counter says "bin 4 / 11 · 50 ms" alone
        # (it added the language model's "· generated"); bins count from 0.
        assert win.timeline.counter.text() == "bin 4 / 11 · 50 ms"
        # The lit brain: the flash of the bin shown.
        win.state.index = 11
        win.refresh_panels()
        qtbot.waitUntil(lambda: lit_count(win.brain.canvas.render()) > dark + 30, timeout=5000)
        assert win.brain.colorbar_caption.text() == "spikes, fading (τ 15 ms)"
        panel.display.setCurrentIndex(0)           # or each neuron's rate in the bin
        win.refresh_panels()
        assert win.state.colour_by == STATE        # the rate is the recorded state
        assert win.brain.colorbar_caption.text() == "firing rate in the bin (Hz)"
        # the brain eases to the new colours at display rate
        qtbot.waitUntil(lambda: lit_count(win.brain.canvas.render()) > dark + 30, timeout=5000)

        # A rate has no sign: the Settings dock offers no "signed x / |x|" for it.
        assert win.controls.mode.isHidden()
        # The populations dock: each group's rate per bin, and a raster of its cells.
        population = feature.population
        population.set_groups("L, superclass:central")
        # the groups' key is a line above the plots, each name in its trace's colour
        assert "&#9632; L (" in population.key.text() and "central (" in population.key.text()
        times, left = population.traces["L"]
        assert times.tolist() == [10.0 * (i + 1) for i in range(12)]
        np.testing.assert_allclose(left, rates[:, :n // 2].mean(axis=1), rtol=1e-5)
        assert population.traces["superclass:central"][1].max() == 0
        marks_t, rows = population.raster_marks
        assert rows.size and population.raster_neurons[rows.astype(int)].max() < n // 2
        # Its marks are the run's spikes of those cells, each at its time, up to the bin shown.
        log = recording.spikes
        assert log is not None and len(log) == 12 and log.count == sum(spikes)
        offline = record_run(SpikingModel(brain), panel.stimulus(), BinSettings(bins=12))
        assert offline.spikes is not None
        for got, want in zip(log.arrays(), offline.spikes.arrays()):
            np.testing.assert_array_equal(got, want)     # the live run's spikes, exactly
        for got, want in zip(saved.spikes.arrays(), log.arrays()):
            np.testing.assert_array_equal(got, want)     # and the saved file's
        assert population.raster_exact
        assert population.raster_caption.text().startswith("raster: each spike")
        for shown in (11, 4):
            win.state.index = shown
            QApplication.processEvents()
            assert _marks(population) == _expected_marks(log, population.raster_neurons,
                                                         shown + 1)
        marks_t, rows = population.raster_marks
        assert marks_t.max() < 50.0 and np.any(np.abs(marks_t / 10 - np.rint(marks_t / 10))
                                               > 0.01)    # not at bin ends: at their ticks
        # On the screen: the marks' colour at the first one's place, none after the bin shown.
        _show_population(qtbot, win)
        image, to_pixel = _raster_image(population)
        first = int(np.argmin(marks_t))
        x, y = to_pixel(marks_t[first], rows[first])
        assert _near(image, x, y, "#f28e2b"), (x, y)
        cursor_x, _ = to_pixel(50.0, 0.0)
        assert _near(image, None, None, "#f28e2b", columns=slice(0, cursor_x))
        assert not _near(image, None, None, "#f28e2b", columns=slice(cursor_x + 4, None))

        # Pausing holds the simulation itself; a paused run makes no more bins.
        panel.speed.setValue(0.2)                  # 50 ms of wall time per bin
        panel.bins.setValue(400)
        assert feature.run()
        qtbot.waitUntil(lambda: len(feature.recording) >= 2, timeout=10000)
        feature.toggle_play()
        qtbot.waitUntil(lambda: not feature.stepping(), timeout=5000)
        QApplication.processEvents()
        held = len(feature.recording)
        assert "(paused)" in panel.status.text()
        assert not feature.stepping()
        QApplication.processEvents()
        assert len(feature.recording) == held < 400
        feature.toggle_play()                      # resume, then stop: the bins stay
        qtbot.waitUntil(lambda: len(feature.recording) > held, timeout=10000)
        feature.stop()
        qtbot.waitUntil(lambda: feature.finished, timeout=5000)
        assert "(stopped)" in panel.status.text()
        # The cap, 0.2x, kept to: never faster (how close a run gets to it depends on how
        # busy the machine is, so only the cap is asserted).
        assert 0 < feature.realtime_factor < 0.6

        # Back to the Fly LLM: its docks return, the spiking ones and the flash colours go.
        win.set_checkpoint(checkpoint)
        qtbot.waitUntil(lambda: win.state.kind is not SPIKING, timeout=10000)
        win.refresh_panels()
        assert not win.state.colour_layers[FLASH].available and win.state.colour_by != FLASH
        assert all(not win.docks[k].isHidden() for k in ("text", "topk"))
        assert dock.isHidden() and win.docks["spiking_population"].isHidden()
    finally:
        win.close()


def test_a_spiking_recording_opened_in_the_window_is_shown_by_bin(qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    pytest.importorskip("pyarrow")
    from app_conftest import make_window
    from test_spiking_kind import write_brain

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.cli import main
    from flyviz.kinds.spiking import SPIKING

    brain = write_brain(tmp_path / "brain")
    rec = tmp_path / "spikes.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--duration",
                 "40ms", "--record", str(rec)]) == 0
    win = make_window(qtbot, make_app_checkpoint(tmp_path / "model"), tmp_path)
    try:
        win.open_recording(rec)
        assert win.state.kind is SPIKING and len(win.state.recording) == 4
        assert win.state.neurons == 80             # the brain it names, not the model's
        win.refresh_panels()
        for key in LANGUAGE_DOCKS:
            assert win.docks[key].isHidden(), key
        assert not win.docks["stimulus"].isHidden()
        win.state.index = 1
        win.refresh_panels()
        assert win.timeline.counter.text().startswith("bin 1 / 3 · 20 ms")
        # The window's shared views speak in bins too, and no prompt is asked for.
        assert win.raster_panel.plot.getAxis("bottom").labelText == "bin"
        assert "last 96 bins (rates, not spikes)" in win.raster_panel.caption.text()
        assert win.inspector.trace.getAxis("left").labelText == "rate (Hz)"
        assert not win.inspector.tabs.isTabVisible(2)   # no "Currents now" of LLM weights
        assert not win._prompt_action.isVisible() and "bins/s" in win.status_rate.text()
        assert win.controls.generation.isHidden()   # no temperature or top-p for spikes
        population = win.features["spiking"].population
        assert set(population.traces) == {"superclass:sensory", "superclass:central"}
        # flyviz simulate --record kept the spikes: the raster draws them at their times.
        recording = win.state.recording
        assert recording.spikes is not None and population.raster_exact
        assert _marks(population) == _expected_marks(recording.spikes,
                                                     population.raster_neurons, 2)
        assert population.raster_caption.text().startswith("raster: each spike")
        # The Neuron dock ranks its partners by the brain's own synapse counts (a chain:
        # neuron 78 hears 77 and drives 79, 3 synapses each), not by the LLM's weights.
        inspector = win.inspector
        win.select_neuron(78)
        qtbot.waitUntil(lambda: inspector.tabs.tabText(1) == "Outputs", timeout=5000)
        for table, partner in ((inspector.inputs_table, "#77"), (inspector.outputs_table, "#79")):
            assert table.horizontalHeaderItem(1).text() == "Synapses"
            assert [(table.item(r, 0).text(), table.item(r, 1).text())
                    for r in range(table.rowCount())] == [(partner, "+3")]
        assert inspector.fields["degree"].text() == "1 in · 1 out"
        # Its neurons are the ones picked and inspected (80 of them, not the model's 400).
        win.select_neuron(79)
        win.refresh_panels()
        assert win.state.selected == 79
        assert win.inspector.fields["activation"].text().endswith("at bin 1 · 20 ms")
        feature = win.features["spiking"]
        assert feature.add_selected("silence") and feature.panel.silence.text() == "id:79"

        # A recording made before spikes were kept (format 1.3, no spike tensors) still
        # opens; its raster marks the bins in which a cell fired, and the caption says so.
        from test_recording_format import rewrite

        from flyviz.app.spiking.spiking_population import BIN_RASTER_CAPTION

        old = rewrite(rec, tmp_path / "old.flyrec", reseal=True,
                      meta={"format_version": "1.3", "spike_tick_ms": None},
                      tensors={name: None for name in ("spike_tick", "spike_neuron",
                                                       "spike_trial", "spike_frame_end")})
        win.open_recording(old)
        assert win.state.kind is SPIKING and win.state.recording.spikes is None
        win.state.index = 3
        win.refresh_panels()
        assert not population.raster_exact
        assert population.raster_caption.text() == BIN_RASTER_CAPTION
        times, rows = population.raster_marks
        fired = win.state.recording.states(population.raster_neurons) > 0
        assert rows.size == fired.sum() > 0                      # one mark per bin fired
        assert set(np.round(times, 6).tolist()) <= {10.0, 20.0, 30.0, 40.0}
    finally:
        win.close()


def test_the_demo_brain_lit_live_in_the_window(qtbot, tmp_path, dark_theme):
    """The demo's spiking brain run live in the whole window, coloured by spikes flashing and
    fading; ``FLYVIZ_SCREENSHOTS=docs/images`` writes the README's ``spiking.png``."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    iio = pytest.importorskip("imageio.v3")
    from app_conftest import lit_count, make_window
    from qt_barriers import settle

    from flyviz.kinds.spiking import SPIKING
    from flyviz.viewer.layers import FLASH

    win = make_window(qtbot, None, tmp_path)
    try:
        win.resize(1500, 950)
        with qtbot.waitSignal(win.model_ready, timeout=120_000):
            win.load_model("demo")
        feature = win.features["spiking"]
        assert feature.open_loaded()
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=60_000)
        panel = feature.panel
        panel.bins.setValue(20)                    # 200 ms of the demo's 21 sensory neurons
        panel.speed.setValue(0.0)
        panel.display.setCurrentIndex(1)
        assert feature.run()
        qtbot.waitUntil(lambda: feature.finished, timeout=60_000)
        recording = feature.recording
        assert len(recording) == 20 and win.state.colour_by == FLASH
        fired = np.count_nonzero(recording.states().sum(axis=0))
        assert fired > 21                          # beyond the excited neurons
        feature.population.set_groups("")
        win.state.index = 19
        for key in ("controls", "traces"):          # room for the spiking docks
            win.docks[key].hide()
        settle(qtbot, win)
        qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                        timeout=5000)
        path = win.save_screenshot(tmp_path / "spiking.png", target="window")
        image = iio.imread(path)[..., :3]
        brain = win.brain.canvas.native
        top_left = brain.mapTo(win, brain.rect().topLeft())
        ratio = image.shape[1] / win.width()
        x, y = int(top_left.x() * ratio), int(top_left.y() * ratio)
        region = image[y:y + int(brain.height() * ratio), x:x + int(brain.width() * ratio)]
        assert lit_count(region) > 200
        print(f"\nspiking demo: {fired:,} neurons fired in 200 ms, "
              f"{sum(recording.metadata['spiking']['bin_spikes']):,} spikes; real-time factor "
              f"{feature.realtime_factor:.2f}x, engine {feature.engine_factor:.2f}x")
        folder = os.environ.get("FLYVIZ_SCREENSHOTS")
        if folder:                                 # the README's picture
            Path(folder).mkdir(parents=True, exist_ok=True)
            iio.imwrite(Path(folder) / "spiking.png", image)
    finally:
        win.close()


def test_a_layout_preset_keeps_to_the_docks_of_the_kind_shown(qtbot, tmp_path):
    """View → Layout under a spiking brain arranges its docks, not the Fly LLM's (the presets
    restore an arrangement made for the Fly LLM: it brought back Text, Why?, Patching... and
    hid the Stimulus dock); the Fly LLM's come back as the last preset placed them."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING, SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        def shown() -> set[str]:
            return {key for key, dock in win.docks.items() if not dock.isHidden()}

        language = shown()
        assert {"text", "topk", "traces", "why", "patching"} <= language
        brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
        win.features["spiking"].open(SpikingModel(brain))
        assert win.state.kind is SPIKING
        spiking = shown()
        assert {"stimulus", "spiking_population"} <= spiking and not spiking & set(LANGUAGE_DOCKS)
        assert "traces" not in spiking           # top-1 probability and mean |x| per token
        for preset in ("presentation", "analysis", "default"):
            win.layouts.apply(preset)
            now = shown()
            assert not now & {"text", "topk", "traces", *LANGUAGE_DOCKS}, (preset, now)
            assert all(win.dock_kinds.applies(key) for key in now), preset
            if preset == "presentation":
                assert now == {"spiking_population"}    # the brain large, the rates below
            else:
                assert {"stimulus", "spiking_population", "inspector"} <= now, preset
        assert win.layouts.current == "default"
        win.set_checkpoint(checkpoint)
        qtbot.waitUntil(lambda: win.state.kind is not SPIKING, timeout=10000)
        assert shown() == language               # as Default places them
    finally:
        win.close()


def test_opening_a_spiking_brain_leaves_the_window_responsive(qtbot, tmp_path, monkeypatch):
    """File → Open as spiking brain reads the model's graph off the UI thread (it froze the
    window about 13 s on a full brain): while it is read, the status bar says so with a busy
    bar, the action is held, and an event queued on the UI thread is handled; once read, the
    brain is shown."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    import threading

    from app_conftest import make_window
    from PySide6.QtCore import QTimer

    import flyviz.spiking
    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    release, reading = threading.Event(), threading.Event()
    brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
    brain.default_excite = np.arange(4)

    def slow_read(_checkpoint):
        reading.set()
        release.wait(10)           # on the UI thread (the defect) this only delays the test
        return brain

    monkeypatch.setattr(flyviz.spiking, "brain_from_checkpoint", slow_read)
    try:
        feature = win.features["spiking"]
        win.show()
        assert feature.open_loaded()
        assert reading.wait(10)
        handled: list[bool] = []
        QTimer.singleShot(0, lambda: handled.append(True))
        qtbot.waitUntil(lambda: bool(handled), timeout=10_000)
        assert not release.is_set() and feature.opening_busy
        assert win.state.kind is not SPIKING
        assert feature.opening_bar.isVisible() and not feature.open_action.isEnabled()
        assert "opening" in win.statusBar().currentMessage()
        release.set()
        qtbot.waitUntil(lambda: win.state.kind is SPIKING, timeout=30_000)
        assert not feature.opening_bar.isVisible() and feature.open_action.isEnabled()
        assert not win.docks["stimulus"].isHidden()
    finally:
        release.set()
        win.close()


def _demo_run(qtbot, tmp_path, bins: int):
    """A window that opened the demo's spiking brain and ran ``bins`` bins live (paced at
    real time) to the end.

    The brain is the process's :func:`~flyviz.spiking.brain.demo_brain` (the demo model's
    graph, as File → Open as spiking brain reads it), opened at once: loading the demo model
    in the window and reading its graph there, seconds a test, is
    :func:`test_the_demo_brain_lit_live_in_the_window`'s to check."""
    from app_conftest import make_window

    from flyviz.kinds.spiking import SPIKING, SpikingModel
    from flyviz.spiking.brain import demo_brain

    win = make_window(qtbot, None, tmp_path)
    feature = win.features["spiking"]
    feature.open(SpikingModel(demo_brain(), "demo"))
    assert win.state.kind is SPIKING and win.state.neurons == 49_393
    feature.panel.bins.setValue(bins)
    assert feature.run()
    qtbot.waitUntil(lambda: feature.finished, timeout=60_000)
    assert len(feature.recording) == bins
    return win, feature


def _small_run(qtbot, tmp_path, bins: int):
    """A window showing the two-sided test brain (the test model's neurons and places) after
    a live run of ``bins`` bins, as fast as it runs: what a view of any spiking run needs,
    without the demo's 49,393 neurons to load and draw."""
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    feature = win.features["spiking"]
    feature.open(SpikingModel(_two_sided_brain(checkpoint.config.neurons,
                                               win.state.anatomy.positions)))
    feature.panel.excite.setText("side:left")
    feature.panel.rate.setValue(400.0)
    feature.panel.bins.setValue(bins)
    feature.panel.speed.setValue(0.0)
    assert feature.run(), win.statusBar().currentMessage()
    qtbot.waitUntil(lambda: feature.finished, timeout=60_000)
    assert len(feature.recording) == bins
    return win, feature


def test_the_populations_plot_follows_a_live_run_to_its_end(qtbot, tmp_path):
    """A live run of the demo's spiking brain: once it is done the populations dock's rates
    and raster are framed on the whole recording, every bin drawn (the plot had stopped at
    70 ms of a 1,000 ms run), and the timeline counts the recording's bins."""
    pytest.importorskip("pytestqt")
    from qt_barriers import settle

    bins = 30                                      # 300 ms
    win, feature = _demo_run(qtbot, tmp_path, bins)
    try:
        population = feature.population
        end_ms = bins * 10.0
        qtbot.waitUntil(lambda: all(times.size == bins for times, _ in
                                    population.traces.values()), timeout=5000)
        settle(qtbot, win)
        for times, rates in population.traces.values():
            np.testing.assert_allclose(times, np.arange(1, bins + 1) * 10.0)
            assert rates.shape == (bins,)
        for plot in (population.rates_plot, population.raster_plot):
            low, high = plot.getViewBox().viewRange()[0]
            assert low <= 0.0 + 1e-6 and end_ms - 1e-6 <= high <= end_ms * 1.05, (low, high)
        assert win.timeline.counter.text().startswith(f"bin {bins - 1} / {bins - 1} ")
    finally:
        win.close()


@pytest.mark.parametrize("bins", [1, 12])
def test_the_neuron_trace_of_a_spiking_run_reads_bins_over_the_run(qtbot, tmp_path, bins):
    """The Neuron dock's trace of a spiking run: its time axis says "bin", unscaled (a run of
    one bin read "bin (x0.001)" from -500 to 500), and spans the run's bins."""
    pytest.importorskip("pytestqt")
    from qt_barriers import settle

    win, _feature = _small_run(qtbot, tmp_path, bins)
    try:
        win.docks["inspector"].show()
        win.docks["inspector"].raise_()
        win.state.selected = 3
        win.state.index = bins - 1
        win.refresh_panels()
        settle(qtbot, win)
        trace = win.inspector.trace
        axis = trace.getAxis("bottom")
        label = re.sub(r"<[^>]+>", "", axis.labelString()).strip()
        assert label == "bin", label              # no "(x0.001)" SI scaling
        assert axis.autoSIPrefixScale == 1.0
        low, high = trace.getViewBox().viewRange()[0]
        assert -0.5 <= low <= 0.0 and bins - 1 <= high <= max(bins - 1, 1) + 0.5, (low, high)
        xs, _ys = win.inspector.trace_curve.getData()
        assert xs is not None and len(xs) == bins
        # The value beside the trace is a rate in Hz (it read "Activation +100.0000").
        field = win.inspector.fields["activation"]
        assert win.inspector._form.labelForField(field).text() == "Rate"
        assert re.fullmatch(r"[0-9.e+]+ Hz at bin .+", field.text()), field.text()
    finally:
        win.close()


def test_the_timeline_counts_the_bins_of_a_run_as_they_arrive(qtbot, tmp_path, monkeypatch):
    """While a run streams in, the timeline's counter follows each display tick, not the 2-D
    panels' few refreshes a second: as the next run began it still said the previous one's
    "bin 9 / 9 · done" (here the panels are held back the whole run to show it)."""
    pytest.importorskip("pytestqt")
    from flyviz.app.window import display

    win, feature = _demo_run(qtbot, tmp_path, 10)
    try:
        assert win.timeline.counter.text().startswith("bin 9 / 9 ")
        monkeypatch.setattr(display, "PANEL_HZ", 1e-6)     # no panel refresh while streaming
        feature.panel.bins.setValue(40)
        assert feature.run()

        def counting() -> bool:
            words = win.timeline.counter.text().split()
            return not feature.finished and "running" in words and int(words[1]) >= 3 \
                and int(words[3]) == int(words[1])
        qtbot.waitUntil(lambda: counting() or feature.finished, timeout=60_000)
        assert counting(), win.timeline.counter.text()
    finally:
        win.close()


def test_the_neuron_docks_partner_tables_show_their_titles_whole(qtbot, tmp_path, dark_theme):
    """At a 1280x800 window under a spiking brain, the Neuron dock's Inputs and Outputs tables
    draw every column title whole, before a neuron is picked and after, and the last column
    reaches the table's edge. The leading columns kept Qt's default 100 pixels each, which left
    "Superclass / type" 87 pixels in the app's theme, drawn cut ("uperclass / typ")."""
    pytest.importorskip("pytestqt")
    from app_conftest import make_window
    from PySide6.QtCore import Qt
    from qt_barriers import settle

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING, SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        win.resize(1280, 800)
        brain = _two_sided_brain(checkpoint.config.neurons, win.state.anatomy.positions)
        win.features["spiking"].open(SpikingModel(brain))
        assert win.state.kind is SPIKING
        win.docks["inspector"].show()
        win.docks["inspector"].raise_()
        inspector = win.inspector

        def check(tab: int, when: str) -> None:
            inspector.tabs.setCurrentIndex(tab)
            settle(qtbot, win)
            table = inspector.tabs.widget(tab)
            header = table.horizontalHeader()
            assert table.isVisible() and header.count() == 3
            titles = [str(table.model().headerData(i, Qt.Orientation.Horizontal))
                      for i in range(header.count())]
            assert titles == ["Neuron", "Synapses", "Superclass / type"]
            metrics = header.fontMetrics()
            for i, title in enumerate(titles):
                size = header.sectionSize(i)
                assert metrics.horizontalAdvance(title) <= size, (when, tab, title, size)
                # ... with the padding the theme draws it with
                assert size >= header.sectionSizeHint(i), (when, tab, title, size)
            assert sum(header.sectionSize(i) for i in range(3)) == table.viewport().width(), \
                (when, tab)

        for tab in (0, 1):
            check(tab, "no neuron")
        win.state.selected = 3
        win.refresh_panels()
        qtbot.waitUntil(lambda: inspector.inputs_table.rowCount() > 0, timeout=10_000)
        for tab in (0, 1):
            check(tab, "neuron 3")
    finally:
        win.close()


def test_the_stimulus_dock_starts_clean_on_another_brain(qtbot, tmp_path):
    """The Stimulus dock's queries name one brain's neurons: a different brain opened after a
    run starts with empty Excite and Silence fields and a Run button (not Run again); the
    same brain opened again (its recording, its run reset) keeps them."""
    pytest.importorskip("pytestqt")
    from app_conftest import make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SpikingModel

    checkpoint = make_app_checkpoint(tmp_path / "model")
    win = make_window(qtbot, checkpoint, tmp_path)
    try:
        feature, panel = win.features["spiking"], win.features["spiking"].panel
        n, positions = checkpoint.config.neurons, win.state.anatomy.positions
        first = _two_sided_brain(n, positions)
        feature.open(SpikingModel(first, "first-brain"))
        panel.excite.setText("side:left")
        panel.silence.setText("id:3")
        panel.bins.setValue(4)
        panel.speed.setValue(0.0)
        assert feature.run(), win.statusBar().currentMessage()
        qtbot.waitUntil(lambda: feature.finished, timeout=60_000)
        assert panel.run_button.text() == "Run again"
        # The same brain again (its run reset, its recording shown): the stimulus stays.
        win.reset_run()
        feature.open(SpikingModel(first, "first-brain"))
        assert (panel.excite.text(), panel.silence.text()) == ("side:left", "id:3")
        assert panel.run_button.text() == "Run again"
        # Another brain: the old brain's queries are gone, from the settings too.
        feature.open(SpikingModel(_two_sided_brain(n, positions), "second-brain"))
        assert (panel.excite.text(), panel.silence.text()) == ("", "")
        assert (feature.settings.excite, feature.settings.silence) == ("", "")
        assert panel.run_button.text() == "Run"
    finally:
        win.close()
