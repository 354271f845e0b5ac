"""flyviz.notebook.BrainWidget: frames with the lit neurons where they are, mouse, slider, live runs.

Needs the ``notebook`` extra (jupyter_rfb, ipywidgets; in the ``test`` extra) and an
offscreen OpenGL (EGL, else Xvfb); skipped without the extra.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jupyter_rfb")
pytest.importorskip("ipywidgets")

import flyviz  # noqa: E402

SIZE = (320, 200)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def halves(demo):
    """A recording of the demo brain whose token 1 lights the neurons left of the midline
    (x below the median) and token 2 those right of it; token 0 is at rest."""
    from flyviz.record.recording import Recording

    run = flyviz.run(demo, "Once upon a time", max_new_tokens=2)
    anatomy = demo.drawing_anatomy()
    x = anatomy.positions_um()[:, 0]
    middle = float(np.median(x[anatomy.valid]))
    states = [np.zeros(run.neurons, np.float32),
              np.where(x < middle, 0.9, 0.0).astype(np.float32),
              np.where(x >= middle, 0.9, 0.0).astype(np.float32)]
    rec = Recording(run.neurons, run.metadata)
    for frame, state in zip(run, states):
        rec.append(dataclasses.replace(frame, state=state))
    return rec


def lit(image: np.ndarray, level: int = 60) -> np.ndarray:
    return image.max(axis=-1) > level


def test_lit_pixels_are_where_the_lit_neurons_are_and_match_a_movie_frame(demo, halves, tmp_path):
    from flyviz.export import ExportOptions, export_recording
    from flyviz.notebook import BrainWidget

    widget = BrainWidget(halves, demo, size=SIZE)
    frames = {}
    for token in (1, 2):
        widget.show_token(token)
        frames[token] = widget.snapshot()
        assert frames[token].shape == (SIZE[1], SIZE[0], 3) and frames[token].dtype == np.uint8
    left, right = (np.nonzero(lit(frames[t]))[1].mean() for t in (1, 2))
    # One half of the brain lights one side of the picture, the other half the other side.
    assert lit(frames[1]).sum() > 500 and lit(frames[2]).sum() > 500
    assert abs(left - right) > SIZE[0] / 4

    # The same token in a movie of the recording (PNG frames, one per token).
    out = export_recording(halves, demo.drawing_anatomy(), tmp_path / "frames",
                           ExportOptions(size=SIZE, frames_per_token=1, overlays=False))
    import imageio.v3 as iio

    movie = iio.imread(sorted(out.glob("frame_*.png"))[2])[..., :3]  # frame k: token k
    a, b = lit(frames[2]), lit(movie)
    assert (a & b).sum() / (a | b).sum() > 0.98
    widget.close()


def test_drag_orbits_and_wheel_zooms(demo, halves):
    from flyviz.notebook import BrainWidget

    widget = BrainWidget(halves, demo, size=SIZE)
    widget.show_token(1)
    before, camera = widget.snapshot(), widget.camera
    widget.handle_event({"event_type": "pointer_down", "x": 100, "y": 100, "button": 1})
    widget.handle_event({"event_type": "pointer_move", "x": 150, "y": 110, "button": 1})
    widget.handle_event({"event_type": "pointer_up", "x": 150, "y": 110, "button": 1})
    turned = widget.camera
    assert turned["azimuth"] == pytest.approx(camera["azimuth"] - 50 * 0.4)
    assert turned["elevation"] == pytest.approx(camera["elevation"] + 10 * 0.4)
    after = widget.snapshot()
    assert np.abs(after.astype(int) - before).mean() > 1.0
    # A move without a button held does nothing.
    widget.handle_event({"event_type": "pointer_move", "x": 300, "y": 10})
    assert widget.camera == turned
    widget.handle_event({"event_type": "wheel", "dx": 0, "dy": 200, "x": 10, "y": 10})
    assert widget.camera["scale_factor"] == pytest.approx(turned["scale_factor"] * 1.21)
    zoomed = widget.snapshot()
    assert lit(zoomed).sum() < lit(after).sum()  # zoomed out: the brain covers fewer pixels
    widget.close()


def test_slider_and_quantity_change_the_frame_and_the_text(demo, halves):
    from flyviz.notebook import BrainWidget

    widget = BrainWidget(halves, demo, size=SIZE)
    assert widget.slider.max == len(halves) - 1 and widget.token == len(halves) - 1
    widget.slider.value = 0
    assert widget.token == 0
    rest = widget.snapshot()
    widget.slider.value = 1
    assert html.escape(repr(halves.token_texts[1])) in widget.text.value
    assert lit(widget.snapshot()).sum() > 10 * max(1, lit(rest).sum())
    assert list(widget.quantity_control.options) == ["signed", "abs"]
    widget.quantity_control.value = "abs"
    assert widget.quantity == "abs" and widget.snapshot().shape == (SIZE[1], SIZE[0], 3)
    # A token is a whole number (clipped to the recording); anything else is one line.
    from flyviz.errors import InputError

    widget.show_token(np.int64(1))
    assert widget.token == widget.slider.value == 1
    widget.show_token(99)
    assert widget.token == len(halves) - 1
    for wrong in (float("nan"), "1", None, 2.5):
        with pytest.raises(InputError, match="token must be a whole number"):
            widget.show_token(wrong)
    assert widget.token == len(halves) - 1
    widget.close()


def test_wrong_arguments_are_one_line_and_a_half_built_widget_goes_quietly(demo, halves):
    import gc

    from flyviz.errors import FlyvizError, InputError
    from flyviz.notebook import BrainWidget

    unraisable: list = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for args, said in [
                ((None,), "BrainWidget shows a Recording, the path of a .flyrec or a "
                          "ViewerState, not None"),
                ((5,), "not 5 \\(int\\)"),
                ((halves, "demo"), "model must be a loaded model .*; load it first: "
                                   "model=flyviz.load\\('demo'\\)")]:
            with pytest.raises(InputError, match=said):
                BrainWidget(*args, size=SIZE)
        for model in (None, "demo"):
            with pytest.raises(InputError, match="model must be a loaded model"):
                BrainWidget.live(model, "Once upon a time")
        # Refused after the widget's own construction began, before its lock was made: its
        # collection closed it and printed "Exception ignored ... no attribute '_lock'".
        for size in ((float("nan"), 400), (640,)):
            with pytest.raises(FlyvizError, match="must be \\(width, height\\) in pixels"):
                BrainWidget(halves, demo, size=size)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not unraisable, [str(u.exc_value) for u in unraisable]
    # A size written WxH, as export_movie takes it.
    widget = BrainWidget(halves, demo, size="320x200")
    assert widget.size == (320, 200) and widget.snapshot().shape == (200, 320, 3)
    widget.close()


def test_live_fills_the_widget_as_the_model_runs(demo):
    from flyviz.notebook import BrainWidget

    widget = BrainWidget.live(demo, "Once upon a time", max_new_tokens=3, size=SIZE)
    widget.wait(120)
    reference = flyviz.run(demo, "Once upon a time", max_new_tokens=3)
    assert widget.source.tokens == len(reference)
    assert widget.token == widget.slider.max == len(reference) - 1
    np.testing.assert_array_equal(widget.source.recording.state(widget.token),
                                  reference.state(widget.token))
    frame = widget.snapshot()
    assert frame.shape == (SIZE[1], SIZE[0], 3) and lit(frame).mean() > 0.05
    folder = os.environ.get("FLYVIZ_SCREENSHOTS")
    if folder:  # for the README
        import imageio.v3 as iio

        Path(folder).mkdir(parents=True, exist_ok=True)
        iio.imwrite(Path(folder) / "notebook.png", frame)
    widget.close()


def test_a_live_run_ended_is_coloured_as_its_recording_is(demo, monkeypatch):
    """Drawn while it ran, a live widget kept the colour range of its first frames; at its
    end it is drawn over the whole run's, the frame the widget of its recording (and its
    movie) shows."""
    from flyviz.notebook import BrainWidget

    show = BrainWidget.show_token
    early = []

    def drawn_as_it_runs(self, token):
        show(self, token)
        if not early:
            early.append(self.snapshot())      # a notebook draws each frame as it comes

    monkeypatch.setattr(BrainWidget, "show_token", drawn_as_it_runs)
    widget = BrainWidget.live(demo, "Once upon a time", max_new_tokens=6, size=SIZE,
                              background=False)
    monkeypatch.setattr(BrainWidget, "show_token", show)
    assert early and widget.runs.end_reason == "done"
    recorded = BrainWidget(widget.source.recording, demo, size=SIZE)
    try:
        np.testing.assert_array_equal(widget.snapshot(), recorded.snapshot())
    finally:
        recorded.close()
        widget.close()


def test_without_the_extra_one_line_names_it(tmp_path):
    code = ("import sys; sys.modules['jupyter_rfb'] = None\n"
            "from flyviz.errors import MissingDependencyError\n"
            "from flyviz.notebook import BrainWidget\n"
            "try:\n    BrainWidget(None)\nexcept MissingDependencyError as exc:\n    print(exc)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'flyviz[notebook]'" in out.stdout


@pytest.mark.slow
def test_example_notebook_executes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(REPO / "examples" / "notebook.ipynb", as_version=4)
    os.environ.setdefault("PYTHONPATH", str(REPO))
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    shapes = [json.loads(o["text"]) for o in outputs
              if o.get("output_type") == "stream" and o["text"].startswith("[")]
    assert [200, 320, 3] in shapes
    texts = [o.get("text", "") for o in outputs if o.get("output_type") == "stream"]
    assert len(texts) >= 2  # the shape, and the trace's target and value


def test_comparison_and_added_quantities_colour_the_widget(demo):
    from flyviz.errors import InputError
    from flyviz.model.interventions import as_interventions
    from flyviz.notebook import BrainWidget
    from flyviz.record.compare import Comparison
    from flyviz.record.run import GenerationSettings

    comparison = Comparison.for_checkpoint(demo.checkpoint, as_interventions("silence sign:inhibitory"))
    try:
        rec = comparison.record("Once upon a time", GenerationSettings(max_new_tokens=3), spec="demo")
    finally:
        comparison.close()
    widget = BrainWidget(rec, demo, size=SIZE, quantity="delta")
    assert "delta" in widget.quantity_control.options
    delta = widget.snapshot()
    widget.quantity_control.value = "signed"
    assert np.abs(widget.snapshot().astype(int) - delta).mean() > 1.0
    # A per-neuron amount: only the first thousand neurons carry it.
    values = np.zeros(rec.neurons, np.float32)
    values[:1000] = 1.0
    widget.add_quantity("first thousand", values)
    assert widget.quantity == "first thousand" and "first thousand" in widget.quantity_control.options
    few = lit(widget.snapshot())
    assert 0 < few.sum() < lit(delta).sum()
    with pytest.raises(InputError, match="one per neuron"):
        widget.add_quantity("wrong", np.zeros(3))
    with pytest.raises(InputError, match="must be numbers, one per neuron"):
        widget.add_quantity("x", "abc")
    # The built-in quantities' names are the recording's: refused, not listed twice.
    for name in ("signed", "delta"):
        with pytest.raises(InputError, match=f"'{name}' is one of the recording's own"):
            widget.add_quantity(name, np.ones(rec.neurons))
    assert len(set(widget.quantity_control.options)) == len(widget.quantity_control.options)
    widget.close()


def test_live_in_an_event_loop_updates_the_widget_on_the_loop(demo, monkeypatch):
    import asyncio
    import threading

    from flyviz.notebook import BrainWidget

    threads = []
    show = BrainWidget.show_token

    def spy(self, token):
        threads.append(threading.current_thread())
        show(self, token)

    monkeypatch.setattr(BrainWidget, "show_token", spy)

    async def notebook_cell():
        widget = BrainWidget.live(demo, "Once upon a time", max_new_tokens=3, size=SIZE)
        # Until the run has ended and the loop has shown its last token (the update is
        # queued on this loop: awaiting hands the loop to it). The count only ends a
        # broken run instead of hanging.
        for _ in range(20_000):
            if not widget._thread.is_alive() and \
                    widget.token == widget.source.tokens - 1 == widget.slider.max:
                break
            await asyncio.sleep(0.005)
        return widget

    widget = asyncio.run(notebook_cell())
    assert threads and all(t is threading.main_thread() for t in threads)
    assert widget.token == widget.slider.max == widget.source.tokens - 1 > 0
    widget.close()


def test_the_embedding_modules_import_neither_qt_nor_vispy():
    code = ("import sys, flyviz.brain_source, flyviz.napari, flyviz.napari._reader, flyviz.notebook\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'vispy', 'PySide6', 'qtpy', 'napari', 'OpenGL'}))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_highlight_keeps_the_selected_neurons_lit(demo, halves):
    from flyviz.errors import SelectionError
    from flyviz.notebook import BrainWidget

    widget = BrainWidget(halves, demo, size=SIZE)
    widget.show_token(1)
    full = lit(widget.snapshot()).sum()
    superclass = demo.drawing_anatomy().superclass[0]
    picked = widget.highlight(f"superclass:{superclass}")
    assert picked is not None and 0 < picked.size < halves.neurons
    some = lit(widget.snapshot()).sum()
    assert 0 < some < full
    widget.quantity_control.value = "abs"  # a new renderer keeps the highlight
    assert lit(widget.snapshot()).sum() < full
    widget.highlight_control.value = "superclass:no_such_thing"
    assert "flyviz: error:" in widget.text.value
    with pytest.raises(SelectionError):
        widget.highlight("superclass:no_such_thing")
    for wrong in (5, 0):
        with pytest.raises(SelectionError, match="a query must be text"):
            widget.highlight(wrong)
    widget.highlight("")
    widget.quantity_control.value = "signed"
    assert lit(widget.snapshot()).sum() == full
    widget.close()


def test_a_live_run_still_going_when_a_script_ends_ends_quietly(demo_cache):
    """A plain script that starts ``BrainWidget.live`` and ends: the run is stopped at
    exit, not failed ("the model stopped with an unexpected error" and a RuntimeError
    from the shut-down thread pool), and the widgets' renderers leave no traceback."""
    code = ("import flyviz\n"
            "from flyviz.notebook import BrainWidget\n"
            "model = flyviz.load('demo')\n"
            "recording = flyviz.run(model, 'Once upon a time', max_new_tokens=2)\n"
            f"widget = BrainWidget(recording, model, size={SIZE!r})\n"
            "print(widget.snapshot().shape)\n"
            "live = BrainWidget.live(model, 'there was a little girl', max_new_tokens=200,\n"
            f"                       size={SIZE!r})\n"
            "print('started', live._thread.is_alive())\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "FLYVIZ_CACHE_DIR": str(demo_cache)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "started True" in out.stdout  # still running when the script ended
    for noise in ("Traceback", "Exception ignored", "unexpected error", "Error"):
        assert noise not in out.stderr, out.stderr


def test_a_live_widget_ranges_its_frames_as_the_run_grows(demo, halves):
    """A live widget (frames arriving as the run makes them, as :meth:`BrainWidget.live`
    shows them) kept the colour range of the frames it had at its first draw: a quiet first
    frame set a small range, and the run's later, stronger frames were all saturated while
    the first stayed at the top. Each frame drawn is ranged as the state takes it now (the
    run so far), so the first frame, drawn again after a far stronger one, is dimmer."""
    import dataclasses

    from flyviz.notebook import BrainWidget
    from flyviz.record.recording import Recording

    quiet = dataclasses.replace(halves[1], state=halves.state(1) * (0.1 / 0.9))
    strong = halves[2]                              # the other half, nine times as strong
    widget = BrainWidget(Recording(halves.neurons, halves.metadata), demo, size=SIZE)
    try:
        drawn = []
        for frame in (quiet, strong):               # what the run's frame events do
            count = widget.state.append(frame) + 1
            widget.slider.max = count - 1
            widget.show_token(count - 1)
            drawn.append(widget.snapshot())
        widget.show_token(0)
        again = widget.snapshot()
        left = lit(drawn[0])
        assert left.sum() > 500
        # The quiet frame at its first draw was the top of its own range; beside the strong
        # one it is a ninth of the range: dimmer where it is lit.
        assert again[left].astype(int).sum() < 0.8 * drawn[0][left].astype(int).sum()
        # The strong frame lights its half as the quiet one lit its own when it was alone.
        assert lit(drawn[1]).sum() > 500
    finally:
        widget.close()
