"""Benchmark: the Spiking populations dock through a long live run (not a test; run by hand).

    python tests/bench_spiking_raster.py [--bins 3000] [--neurons 2000] [--rate 20]

Bins of random spikes (``--rate`` Hz in every neuron, each at a random tick of its bin) are
appended to a recording and its spike log as a live run appends them, and the dock is redrawn
every 10 bins (it redraws at most every 100 ms, so about every 10 bins of a run at real
time). Prints the spike log's size and cost per bin, and medians of a redraw (the rate traces
and the spike raster of two groups of 40 cells, picked out of the new bins only) and of a
paint of the raster, early in the run and at its end. Runs with Qt's offscreen platform unless
``QT_QPA_PLATFORM`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bins", type=int, default=3000)
    parser.add_argument("--neurons", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    from flyviz.app.spiking.spiking_population import SpikingPopulationPanel
    from flyviz.kinds import state_frame
    from flyviz.kinds.spiking import SPIKING_KEY, SpikingModel
    from flyviz.record.recording import Recording
    from flyviz.record.spikes import SpikeLog
    from flyviz.spiking import SpikingBrain
    from flyviz.viewer.state import ViewerState

    n, half = args.neurons, args.neurons // 2
    brain = SpikingBrain(name="bench", root_ids=np.arange(n, dtype=np.int64),
                         indptr=np.zeros(n + 1, np.int64), post=np.zeros(0, np.int32),
                         counts=np.zeros(0), superclass=["a"] * half + ["b"] * (n - half),
                         cell_type=["A"] * half + ["B"] * (n - half))
    model = SpikingModel(brain)
    state = ViewerState()
    state.set_model(model, model.drawing_anatomy())
    recording = Recording(n, {"kind": SPIKING_KEY, "spiking": {"bin_ms": 10.0}},
                          states_dtype="float32")
    log = recording.spikes = SpikeLog(0.1)
    state.set_recording(recording)
    panel = SpikingPopulationPanel(state)
    panel.resize(900, 600)
    panel.show()
    panel.set_brain(brain)
    rng = np.random.default_rng(0)
    per_bin = int(n * args.rate * 0.01)
    append_s, redraws, paints = 0.0, [], []
    for i in range(args.bins):
        tick = np.sort(rng.integers(100 * i, 100 * (i + 1), per_bin))
        neuron = rng.integers(0, n, per_bin)
        start = time.perf_counter()
        log.append(tick, neuron)
        append_s += time.perf_counter() - start
        recording.append(state_frame(i, np.bincount(neuron, minlength=n) / 0.01))
        if i % 10 == 9:
            start = time.perf_counter()
            panel.redraw()
            middle = time.perf_counter()
            panel.raster_plot.grab()
            redraws.append(middle - start)
            paints.append(time.perf_counter() - middle)
    app.processEvents()
    early = slice(0, max(1, len(redraws) // 10))
    late = slice(-max(1, len(redraws) // 10), None)
    ms = lambda values: 1e3 * float(np.median(values))  # noqa: E731
    print(f"{args.bins:,} bins of {n:,} neurons at {args.rate:g} Hz: {log.count:,} spikes, "
          f"{panel.raster_marks[0].size:,} raster marks; the spike log {log.nbytes() / 1e6:.1f} "
          f"MB ({log.nbytes() / max(1, log.count):.1f} bytes a spike), "
          f"{1e6 * append_s / args.bins:.0f} us a bin to append")
    print(f"redraw: {ms(redraws[early]):.1f} ms early, {ms(redraws[late]):.1f} ms at the end; "
          f"raster paint: {ms(paints[early]):.1f} ms early, {ms(paints[late]):.1f} ms at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
