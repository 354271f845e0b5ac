"""The worked example runs end to end on the demo brain, and what it prints is what the
data it wrote says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_quickstart_runs_and_its_findings_match_the_data_it_wrote(tmp_path):
    pytest.importorskip("xarray")
    pytest.importorskip("zarr")
    iio = pytest.importorskip("imageio.v3")
    done = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "49,393 neurons" in out and "Traceback" not in done.stderr
    printed = [int(n) for n in re.findall(r"^  neuron\s+(\d+)", out, flags=re.MULTILINE)]
    assert len(printed) == 5

    # The store holds the run; the neurons the example named are its most active ones.
    from flyviz.record.convert import open_zarr

    ds = open_zarr(tmp_path / "run.zarr").load()
    assert ds.attrs["prompt"] == "Once upon a time" and ds.attrs["model"] == "demo"
    writing = ds["phase"].values == "generation"
    activity = np.abs(ds["state"].values[writing].astype(np.float32)).mean(axis=0)
    assert printed == [int(i) for i in np.argsort(activity)[::-1][:5]]
    assert f"-> {ds.attrs['text']!r}" in out
    for neuron in printed:
        assert f"{ds['cell_type'].values[neuron]}" in out

    # The plot is a real picture: a light background with a dark trace across it.
    image = iio.imread(tmp_path / "trace.png")
    assert image.shape[1] >= 600 and image.shape[0] >= 250
    rgb = image[..., :3].astype(int)
    light = (rgb.min(axis=-1) > 200).mean()
    assert light > 0.5
    trace_columns = np.flatnonzero(((rgb[..., 2] > 150) & (rgb[..., 0] < 100)).any(axis=0))
    assert trace_columns.size > 0.5 * image.shape[1]
