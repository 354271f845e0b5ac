"""Benchmark: the app's population docks at full size (not a test; run by hand).

    python tests/bench_population_dock.py [--tokens 500] [--rounds 20] [--size 1280x320]

On the demo brain's anatomy (49,393 neurons, its 9,143 cell types) and a run of
``--tokens`` random states (what the redraw costs does not depend on the values),
times as medians:

- the whole-brain raster's first drawing of the run (every token pooled);
- its redraw when the token advances: one frame appended, its column pooled
  (``pool_one``), the image replaced and the plot painted (target <= 30 ms);
- its redraw after zooming in on 1,000 neurons (the rows in view pooled again);
- the cell-type heatmap's first drawing and its redraw when the token advances.

Runs with Qt's offscreen platform unless ``QT_QPA_PLATFORM`` says otherwise.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from _bench_docks import dock_arguments, median_ms


def main() -> int:
    args, width, height = dock_arguments(__doc__, "1280x320")

    from PySide6.QtWidgets import QApplication

    import flyviz
    from flyviz.analysis.population import anatomy_order
    from flyviz.app._testing import make_frame
    from flyviz.app.population.population_panel import CellTypePanel, WholeBrainRaster
    from flyviz.record.recording import Recording

    app = QApplication.instance() or QApplication([])
    anatomy = flyviz.load("demo").anatomy
    n = anatomy.positions.shape[0]
    rng = np.random.default_rng(0)
    total = args.tokens + args.rounds
    states = rng.normal(0.0, 0.3, (total, n)).astype(np.float32)
    recording = Recording(n)
    for i in range(args.tokens):
        recording.append(make_frame(i, states[i]))

    raster, cell_types = WholeBrainRaster(), CellTypePanel()
    for widget in (raster, cell_types):
        widget.resize(width, height)
        widget.show()
    app.processEvents()
    raster.set_order(anatomy_order(anatomy.superclass, anatomy.cell_type, n=n))
    start = time.perf_counter()
    raster.show_frame(recording, args.tokens - 1)
    raster.plot.viewport().repaint()
    raster_first = time.perf_counter() - start
    start = time.perf_counter()
    cell_types.set_anatomy(anatomy.cell_type, anatomy.superclass)
    cell_types.show_frame(recording, args.tokens - 1)
    cell_types.plot.viewport().repaint()
    types_first = time.perf_counter() - start

    raster_times, type_times = [], []
    for i in range(args.tokens, total):
        recording.append(make_frame(i, states[i]))
        start = time.perf_counter()
        raster.show_frame(recording, i)
        raster.plot.viewport().repaint()
        raster_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        cell_types.show_frame(recording, i)
        cell_types.plot.viewport().repaint()
        type_times.append(time.perf_counter() - start)
    # Zoomed in on 1,000 of the ordered neurons: the rows in view pooled again.
    zoom_times = []
    for k in range(3):
        raster.plot.setYRange(10_000 + k, 11_000 + k, padding=0)
        start = time.perf_counter()
        raster._follow_zoom()
        raster.plot.viewport().repaint()
        zoom_times.append(time.perf_counter() - start)
    assert raster.pooler is not None
    result = {"neurons": n, "tokens": args.tokens, "size": f"{width}x{height}",
              "raster_rows": raster.pooler.rows, "cell_types": len(cell_types.names),
              "raster_first_draw_ms": round(raster_first * 1e3, 1),
              "raster_token_advance_ms": median_ms(raster_times),
              "raster_zoom_to_1000_neurons_ms": median_ms(zoom_times),
              "cell_types_first_draw_ms": round(types_first * 1e3, 1),
              "cell_types_token_advance_ms": median_ms(type_times)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
