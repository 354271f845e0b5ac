"""A third kind of model, from a package that is not flyviz, works in every host unedited.

The package (``flyviz_rate``: :mod:`rate_kind_package` holds its source) is written under
the test's temporary folder as a distribution of its own, a module and a ``*.dist-info``
folder whose entry point registers the kind in ``flyviz.kinds``, and put on ``sys.path``
(and on a command's ``PYTHONPATH``). Its kind is a rate model on the demo brain's graph,
``x_t = tanh(gain W x_{t-1} + input)``, driven in the dorsal half of the brain, drawn at
the demo's somas, with a colour layer of its own. With no edit to flyviz, a recording of
it opens in the window (the brain drawn, lit at the top where the state is high, the docks
that serve every kind, its colour layer in *Colour by*), in the notebook widget and in
napari, exports a movie, a shared page and converts.

It also runs live in each of them (the window's Run, ``BrainWidget.live`` and napari's Run
button), through the one run controller (:mod:`flyviz.runs`), which asks the kind for the
run a state describes and steps the kind's ``frames``.

No host may ask which kind it has: the kind notes every read of its key, comparison,
side-channel question and attribute probe made by flyviz outside ``flyviz.kinds``, and the
tests require none (the commands run with ``FLYVIZ_RATE_STRICT``, which makes asking fail).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rate_kind_package import SOURCE

import flyviz
import flyviz.kinds
from flyviz.kinds import kind_of_recording, registered_kinds, reload_kinds
from flyviz.record.recording import Recording

pytestmark = pytest.mark.slow

STEPS = 12


#: What runs the commands of :meth:`RatePackage.run` in their process: each as ``flyviz ARGS``
#: does (``flyviz.cli.main``), its standard error and exit status written to a JSON file.
_COMMANDS = """
import contextlib, io, json, sys
from flyviz.cli import main
results = []
for args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    results.append({"returncode": code, "stderr": err.getvalue()})
with open(sys.argv[2], "w", encoding="utf-8") as out:
    json.dump(results, out)
"""


class RatePackage:
    """The distribution, its model folder and a recording of it."""

    def __init__(self, root: Path, checkpoint: Any) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "flyviz_rate.py").write_text(SOURCE, encoding="utf-8")
        info = root / "flyviz_rate-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flyviz-rate\n"
                                       "Version: 0.1\n", encoding="utf-8")
        (info / "entry_points.txt").write_text("[flyviz.kinds]\nrate = flyviz_rate:RATE\n",
                                               encoding="utf-8")
        sys.path.insert(0, str(root))
        reload_kinds()
        import flyviz_rate

        self.module: Any = flyviz_rate
        self.kind = registered_kinds()["rate"]
        self.model_dir = flyviz_rate.write_model(root / "model", checkpoint)
        model = self.kind.load(str(self.model_dir))
        self.recording = Recording(model.neurons, {}, states_dtype="float32")
        for _ in self.kind.frames(model, flyviz_rate.Drive(), self.kind.run_settings(steps=STEPS),
                                  recording=self.recording):
            pass
        self.path = self.recording.save(root / "rate.flyrec")
        #: The neurons driven (their state near 1), and those drawn that are not.
        self.driven = flyviz_rate.Drive().driven(model)
        self.quiet = model.anatomy.valid & ~self.driven
        self.anatomy = model.anatomy

    def asked(self) -> list[str]:
        """Where flyviz asked which kind it has since the last call (and forget them)."""
        found = list(self.module.ASKED)
        self.module.ASKED.clear()
        return found

    def run(self, *commands: list[str], cwd: Path) -> list[subprocess.CompletedProcess]:
        """Each of ``commands`` (``flyviz ARGS`` as a list of ARGS), in order, in one new process
        that finds the package through its metadata; one result each, its exit status and its
        standard error (one process for all: each start imports flyviz and loads the demo's
        graph again, seconds of CPU a command)."""
        env = {**os.environ, "FLYVIZ_RATE_STRICT": "1",
               "PYTHONPATH": os.pathsep.join([str(Path(flyviz.__file__).parent.parent),
                                              str(self.root)])}
        results = cwd / "commands.json"
        done = subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(list(commands)),
                               str(results)], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0 and results.is_file(), done.stderr
        return [subprocess.CompletedProcess(["flyviz", *args], result["returncode"], "",
                                            result["stderr"])
                for args, result in zip(commands, json.loads(results.read_text("utf-8")))]

    def remove(self) -> None:
        while str(self.root) in sys.path:
            sys.path.remove(str(self.root))
        sys.modules.pop("flyviz_rate", None)
        reload_kinds()


@pytest.fixture(scope="module")
def rate(demo, tmp_path_factory):
    package = RatePackage(tmp_path_factory.mktemp("site"), demo.checkpoint)
    yield package
    package.remove()


def top_and_bottom(image: np.ndarray) -> tuple[int, int]:
    """How many bright pixels lie in the top and in the bottom 40 % of the rows the brain
    is drawn on (those lighter than the background, read in the image's corner)."""
    light = np.asarray(image)[..., :3].astype(np.int64).sum(axis=-1)
    rows = np.flatnonzero(light.max(axis=1) > light[:4, :4].max() + 20)
    assert rows.size, "nothing is drawn"
    span = (rows[-1] + 1 - rows[0]) * 2 // 5
    bright = light > 300
    return int(bright[rows[0]:rows[0] + span].sum()), int(bright[rows[-1] + 1 - span:].sum())


def lit_at_the_top(image: np.ndarray) -> bool:
    """The dorsal half, driven (state near 1), is lit; the ventral half (near 0) is dark."""
    top, bottom = top_and_bottom(image)
    return top > 200 and top > 10 * bottom


def assert_lit_at_the_top(image: np.ndarray) -> None:
    assert lit_at_the_top(image), top_and_bottom(image)


# ---------------------------------------------------------------- the registry
def test_the_kind_comes_from_a_distribution_outside_flyviz(rate):
    assert not Path(rate.module.__file__).is_relative_to(Path(flyviz.__file__).parent)
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group="flyviz.kinds") if p.name == "rate"]
    assert point.dist.name == "flyviz-rate"
    assert kind_of_recording(Recording.load(rate.path)) is rate.kind
    from flyviz.viewer.layers import LAYERS

    assert LAYERS["rate:change"].title == "Rate model: &change"
    # The recording is what the kind made: driven neurons near 1, the others near 0.
    last = rate.recording.state(STEPS - 1)
    assert last[rate.driven].min() > 0.9 and np.abs(last[rate.quiet]).mean() < 0.05
    assert rate.asked() == []


def test_a_host_that_asks_which_kind_it_has_is_caught(rate, monkeypatch):
    # Planted breaks: code of a flyviz module outside flyviz.kinds that reads the key,
    # compares the kind, asks for a side channel by name or probes for another kind's method.
    host = {"__name__": "flyviz.app.planted", "kind": rate.kind, "LANGUAGE": flyviz.kinds.LANGUAGE}
    exec("a = kind.key == 'spiking'\n"
         "b = kind != LANGUAGE\n"
         "c = kind.has('text')\n"
         "d = hasattr(kind, 'recording_anatomy')\n", host)
    asked = rate.asked()
    assert len(asked) == 4 and all(line.startswith("flyviz.app.planted:") for line in asked)
    assert [line.split(" ", 1)[1] for line in asked] == [
        "read the kind's key", "compared the kind", "asked for the side channel 'text'",
        "looked for 'recording_anatomy'"]
    exec("k = kind.key\n", {"__name__": "flyviz.kinds.planted", "kind": rate.kind})
    assert rate.asked() == []                       # the kinds themselves may
    monkeypatch.setenv("FLYVIZ_RATE_STRICT", "1")   # as the commands run
    with pytest.raises(AssertionError, match="asked which kind it has"):
        exec("kind.key\n", host)
    rate.asked()


# ---------------------------------------------------------------- the command line
def test_export_share_figure_and_convert_of_its_recording(rate, tmp_path):
    from PIL import Image

    exported, shared, drawn, converted = rate.run(
        ["export", str(rate.path), "--out", "frames", "--size", "320x240",
         "--frames-per-token", "1", "--hold", "0", "--tokens", f"{STEPS - 1}:{STEPS}",
         "--no-overlays"],
        ["share", str(rate.path), "--out", "page.html"],
        ["figure", str(rate.path), "--kind", "brain", "--out", "brain.png"],
        ["convert", str(rate.path), "--to", "npz", "out.npz"], cwd=tmp_path)
    if exported.returncode and "OpenGL" in exported.stderr:
        pytest.skip(f"no offscreen OpenGL: {exported.stderr.strip().splitlines()[-1]}")
    assert exported.returncode == 0, exported.stderr
    (frame,) = sorted((tmp_path / "frames").glob("*.png"))
    assert_lit_at_the_top(np.asarray(Image.open(frame)))

    assert shared.returncode == 0, shared.stderr
    assert f"{STEPS} steps" in shared.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    header = json.loads(re.search(r'id="flyviz-data">(.*?)</script>', page, re.S).group(1))
    assert [step["text"] for step in header["tokens"]] == [f" step {i}" for i in
                                                           range(STEPS)]
    blob = re.search(r'data-name="layer-0">([^<]*)<', page).group(1)
    codes = np.frombuffer(zlib.decompress(base64.b64decode(blob)), np.uint8).reshape(STEPS, -1)
    shown = np.flatnonzero(rate.anatomy.valid)
    last = (codes[-1].astype(np.float32) - 128) * header["layers"][0]["scales"][-1]
    driven = rate.driven[shown]
    assert last[driven].min() > 0.9 and np.abs(last[~driven]).mean() < 0.05

    assert drawn.returncode == 0, drawn.stderr
    assert f"{STEPS} steps" in drawn.stderr
    figure = np.asarray(Image.open(tmp_path / "brain.png"))[..., :3]
    # The brain's axes: the rows and columns mostly of the figure's commonest colour (the
    # dark background the neurons glow on).
    colours, counts = np.unique(figure.reshape(-1, 3), axis=0, return_counts=True)
    background = colours[counts.argmax()]
    inside = (figure == background).all(axis=-1)
    rows = np.flatnonzero(inside.mean(axis=1) > 0.3)
    columns = np.flatnonzero(inside.mean(axis=0) > 0.3)
    assert_lit_at_the_top(figure[rows[0]:rows[-1] + 1, columns[0]:columns[-1] + 1])

    assert converted.returncode == 0, converted.stderr
    assert "12 steps" in converted.stderr and "rate model (demo graph)" in converted.stderr
    with np.load(tmp_path / "out.npz", allow_pickle=False) as data:
        np.testing.assert_array_equal(data["state"], rate.recording.states())
        assert list(data["cell_type"][:5]) == rate.anatomy.cell_type[:5]


def test_a_script_exports_its_movie(rate, tmp_path):
    from flyviz.errors import ExportError

    model = rate.kind.load(str(rate.model_dir))
    try:
        out = flyviz.export_movie(rate.recording, tmp_path / "frames", model=model,
                                  size=(320, 240), frames_per_token=1, hold_seconds=0.0,
                                  start=STEPS - 1, stop=STEPS)
    except ExportError as exc:
        pytest.skip(str(exc))
    from PIL import Image

    (frame,) = sorted(Path(out).glob("*.png"))
    assert_lit_at_the_top(np.asarray(Image.open(frame)))
    # The overlays are the kind's: its step counter, no text and no bars.
    from flyviz.render.overlay import iter_overlays

    (overlay,) = iter_overlays(rate.recording, STEPS - 1, STEPS)
    assert overlay.counter == f"step {STEPS - 1} of 0\u2013{STEPS - 1}" and overlay.bars == ()
    assert rate.asked() == []


# ---------------------------------------------------------------- the notebook and napari
def test_the_notebook_widget_shows_it_with_its_colour_layer(rate):
    pytest.importorskip("jupyter_rfb")
    from flyviz.errors import ExportError
    from flyviz.notebook import BrainWidget

    try:
        widget = BrainWidget(rate.path, size=(320, 240))
        image = widget.snapshot()
    except ExportError as exc:
        pytest.skip(str(exc))
    try:
        assert widget.token == STEPS - 1 and widget.slider.description == "step"
        assert_lit_at_the_top(image)
        assert "rate:change" in widget.source.quantities
        # Its own layer: at the first step every driven neuron changed, the others did not.
        widget.set_quantity("rate:change")
        widget.show_token(0)
        assert_lit_at_the_top(widget.snapshot())
        assert f"step 0 of 0\u2013{STEPS - 1}" in widget.text.value
    finally:
        widget.close()
    in_memory = BrainWidget(rate.recording, size=(320, 240))     # a recording object too
    try:
        assert in_memory.source.note is None and in_memory.state.kind is rate.kind
    finally:
        in_memory.close()
    assert rate.asked() == []


def test_it_runs_live_in_the_notebook_widget(rate):
    pytest.importorskip("jupyter_rfb")
    from flyviz.errors import ExportError
    from flyviz.notebook import BrainWidget

    model = rate.kind.load(str(rate.model_dir))
    try:
        widget = BrainWidget.live(model, size=(320, 240))     # the kind's own default run
    except ExportError as exc:
        pytest.skip(str(exc))
    try:
        assert widget.wait(120) is None and widget.runs.end_reason == "done"
        # The kind's run, frame by frame into the widget: the same states as its own frames.
        assert widget.source.tokens == STEPS and widget.slider.max == STEPS - 1
        np.testing.assert_array_equal(widget.source.recording.states(), rate.recording.states())
        assert widget.source.recording.metadata["rate"]["steps"] == STEPS
        assert widget.token == STEPS - 1
        assert_lit_at_the_top(widget.snapshot())
    finally:
        widget.close()
    assert rate.asked() == []


@pytest.mark.gui
def test_napari_opens_it_lit_where_its_state_is_high(rate, request):
    pytest.importorskip("napari")
    npe2 = pytest.importorskip("npe2")
    manager = npe2.PluginManager.instance()
    if "flyviz" not in manager._manifests:    # an editable install of another checkout
        manager.register(npe2.PluginManifest.from_file(
            Path(flyviz.__file__).parent / "napari" / "napari.yaml"))
    import napari

    viewer = napari.Viewer(show=False)
    request.addfinalizer(viewer.close)
    viewer.open(str(rate.path), plugin=None)   # napari picks flyviz's reader by itself
    points = [layer for layer in viewer.layers if layer.__class__.__name__ == "Points"]
    assert len(points) == 1 and viewer.dims.nsteps[0] == STEPS
    step = list(viewer.dims.current_step)
    step[0] = STEPS - 1
    viewer.dims.current_step = tuple(step)
    # The points are the somas; the driven ones glow (alpha is the brightness), the others
    # are dark.
    alpha = np.asarray(points[0].face_color)[:, 3]
    driven = rate.driven[np.flatnonzero(rate.anatomy.valid)]
    assert alpha.size == driven.size and alpha[driven].mean() > 4 * alpha[~driven].mean()
    overlay = viewer.canvas.overlays.text if hasattr(viewer, "canvas") else viewer.text_overlay
    assert f"step {STEPS - 1} of 0\u2013{STEPS - 1}" in overlay.text
    assert rate.asked() == []


@pytest.mark.gui
def test_napari_runs_it_live_from_the_run_button(rate, qtbot, request):
    pytest.importorskip("napari")
    from qtpy.QtCore import Qt

    import napari
    from flyviz.napari._widget import FlyvizWidget

    viewer = napari.Viewer(show=False)
    request.addfinalizer(viewer.close)
    widget = FlyvizWidget(viewer)
    widget.set_model(rate.kind.load(str(rate.model_dir)))
    qtbot.mouseClick(widget.run_button, Qt.MouseButton.LeftButton)
    points = lambda: [layer for layer in viewer.layers                          # noqa: E731
                      if layer.__class__.__name__ == "Points"]
    qtbot.waitUntil(lambda: len(points()) == 1, timeout=60_000)
    qtbot.waitUntil(lambda: not widget.runs.active, timeout=10_000)
    assert widget.runs.end_reason == "done"
    np.testing.assert_array_equal(widget.runs.run.recording.states(), rate.recording.states())
    assert viewer.dims.nsteps[0] == STEPS and widget.status.text().endswith(f"{STEPS} steps")
    alpha = np.asarray(points()[0].face_color)[:, 3]
    driven = rate.driven[np.flatnonzero(rate.anatomy.valid)]
    assert alpha[driven].mean() > 4 * alpha[~driven].mean()
    assert rate.asked() == []


# ---------------------------------------------------------------- the window
@pytest.mark.gui
def test_the_window_opens_it_on_its_own_model(rate, qtbot, tmp_path):
    pytest.importorskip("pytestqt")
    from app_conftest import make_window

    win = make_window(qtbot, None, tmp_path)
    try:
        win.files.open_recording(rate.path)
        state = win.state
        assert state.kind is rate.kind and state.model.spec == str(rate.model_dir)
        assert len(state.recording) == STEPS and state.index == STEPS - 1
        # The display draws the shown step at its next tick.
        qtbot.waitUntil(lambda: lit_at_the_top(win.brain.canvas.render()), timeout=20000)
        # Its docks: those that serve every kind; the Fly LLM's text and bars are put away.
        for key in ("text", "topk", "why"):
            assert win.docks[key].isHidden(), key
        assert not win.docks["inspector"].isHidden()
        qtbot.waitUntil(lambda: win.timeline.counter.text().startswith(
            f"step {STEPS - 1} / {STEPS - 1}"), timeout=10000)
        assert not win._prompt_action.isVisible()
        # Its colour layer is offered in Colour by, and drawn when chosen.
        assert win.colour_by.actions["rate:change"].isEnabled()
        assert win.colour_by.choose("rate:change")
        assert state.layer.name == "rate:change"
        # The Neuron dock reads its synapses.
        assert win.inspector.connectivity is not None
        # It runs live: Space starts the run its state describes, through the window's runs,
        # into a new recording the views follow frame by frame.
        opened = state.recording
        frames: list[int] = []
        win.runs.frame_recorded.connect(frames.append)
        with qtbot.waitSignal(win.run_ended, timeout=60_000) as ended:
            win.toggle_play()
        assert ended.args == ["done", STEPS]
        assert state.recording is not opened and len(state.recording) == STEPS
        assert frames and frames[-1] == STEPS and state.index == STEPS - 1
        np.testing.assert_array_equal(state.recording.states(), rate.recording.states())
        assert state.recording.metadata["rate"]["model"] == str(rate.model_dir)
        from flyviz.viewer.layers import STATE

        assert win.colour_by.choose(STATE)         # its state, high where it is driven
        qtbot.waitUntil(lambda: lit_at_the_top(win.brain.canvas.render()), timeout=20000)
    finally:
        win.close()
    assert rate.asked() == []
