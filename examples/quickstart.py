"""flyviz from Python: run the demo brain, find its most active neurons, plot one, export.

Run it from a checkout (it needs ``pip install 'flyviz[data]'`` for xarray and Zarr)::

    python examples/quickstart.py [OUTPUT_FOLDER]

It writes ``trace.png`` (one neuron's activity, token by token) and
``run.zarr`` (the whole run as a labelled xarray dataset) into OUTPUT_FOLDER
(default ``quickstart-output``). The plot is drawn with matplotlib when it is
installed, else with pyqtgraph, which flyviz already depends on.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

import flyviz

out = Path(sys.argv[1] if len(sys.argv) > 1 else "quickstart-output")
out.mkdir(parents=True, exist_ok=True)

# 1. Load the demo brain (synthetic wiring, real sizes) and run a prompt, greedily.
model = flyviz.load("demo")
recording = flyviz.run(model, "Once upon a time", max_new_tokens=12)
print(f"{model.name}: {model.neurons:,} neurons")
print(f"prompt: {recording.prompt!r} -> {recording.text!r}")

# 2. The states: one row per consumed token, one column per neuron.
states = recording.states()
print(f"states: {states.shape[0]} tokens x {states.shape[1]:,} neurons")

# 3. The most active neurons while the model writes: mean |state| over generated tokens.
writing = np.array([phase == "generation" for phase in recording.phases])
activity = np.abs(states[writing]).mean(axis=0)
top = np.argsort(activity)[::-1][:5]
anatomy = model.anatomy
print("most active neurons while writing:")
for neuron in top:
    print(f"  neuron {neuron:>5}  mean |x| {activity[neuron]:.3f}  "
          f"{anatomy.superclass[neuron]:<18} {anatomy.cell_type[neuron]}")

# 4. Plot the most active neuron's trace, token by token.
neuron = int(top[0])
trace = recording.neuron_trace(neuron)
tokens = [text.replace("\n", "\\n") for text in recording.token_texts]
title = f"neuron {neuron} ({anatomy.cell_type[neuron]})"
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3), dpi=100)
    axes.plot(trace, marker="o")
    axes.set_xticks(range(len(tokens)), tokens, rotation=60, fontsize=7)
    axes.set_ylabel("state x")
    axes.set_title(title)
    figure.tight_layout()
    figure.savefig(out / "trace.png")
except ImportError:
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    from pyqtgraph.exporters import ImageExporter

    app = pg.mkQApp()
    plot = pg.PlotWidget(title=title, background="w")
    plot.plot(np.arange(len(trace)), trace, pen=pg.mkPen("b", width=2), symbol="o",
              symbolBrush="b")
    plot.getAxis("bottom").setTicks([list(enumerate(tokens))])
    plot.setLabel("left", "state x")
    plot.resize(800, 300)
    exporter = ImageExporter(plot.plotItem)
    exporter.parameters()["width"] = 800
    exporter.export(str(out / "trace.png"))
print(f"wrote {out / 'trace.png'}")

# 5. The run as a labelled xarray dataset: token x neuron, with the neurons' labels.
dataset = recording.to_xarray(model)
by_superclass = abs(dataset["state"]).groupby("superclass").mean()
print("mean |x| per superclass and token (first generated token):")
first = int(np.flatnonzero(writing)[0])
for superclass, value in zip(by_superclass["superclass"].values,
                             by_superclass.isel(token=first).values):
    print(f"  {superclass:<18} {float(value):.4f}")
recording.to_zarr(out / "run.zarr", model)
print(f"wrote {out / 'run.zarr'}")
