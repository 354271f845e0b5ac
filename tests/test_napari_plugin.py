"""The napari plugin: npe2 finds the reader, its layers are the brain, the slider colours them.

Needs napari (the ``napari`` extra, in the ``test`` extra); skipped without it.
Runs on the demo brain (offline) under Xvfb with napari's ``make_napari_viewer``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from qt_barriers import deferred_deletes_delivered, settle

pytest.importorskip("napari")
npe2 = pytest.importorskip("npe2")

# napari's pytest plugin is off for the suite (pyproject.toml's addopts say why); its viewer
# fixture and the fixtures that fixture stands on come from it by name, for this module only
# (the options it reads and the reports it looks at are tests/conftest.py's).
from napari.utils._testsupport import (  # noqa: E402, F401
    _clean_themes, _disable_qt_warnings, make_napari_viewer, mock_app_model)

import flyviz  # noqa: E402
from flyviz.render.colormaps import lut  # noqa: E402
from flyviz.render.style import ColourLayer  # noqa: E402

pytestmark = [pytest.mark.gui, pytest.mark.slow]

MANIFEST = Path(flyviz.__file__).parent / "napari" / "napari.yaml"


@pytest.fixture(scope="module")
def recording_path(demo, tmp_path_factory) -> Path:
    rec = flyviz.run(demo, "Once upon a time", max_new_tokens=4)
    return rec.save(tmp_path_factory.mktemp("napari") / "run.flyrec")


@pytest.fixture(autouse=True)
def plugin():
    """The flyviz manifest registered with npe2 (an editable install of another checkout may
    not carry its entry point; the wheel test checks the entry point itself)."""
    pm = npe2.PluginManager.instance()
    if "flyviz" not in pm._manifests:
        pm.register(npe2.PluginManifest.from_file(MANIFEST))
    return pm


def expected_rgba(values: np.ndarray, colormap: str, value_range: tuple[float, float]) -> np.ndarray:
    """flyviz's colormap table at each value's place in the range, as the cloud's shader places it."""
    low, high = value_range
    v = np.abs(values) if colormap == "abs" else values
    index = np.rint(np.clip((v - low) / (high - low), 0, 1) * 255).astype(int)
    return lut(colormap)[index]


def set_token(viewer, token: int) -> None:
    step = list(viewer.dims.current_step)
    step[0] = token
    viewer.dims.current_step = tuple(step)


def points_layers(viewer):
    return [layer for layer in viewer.layers if layer._type_string == "points"]


def test_npe2_finds_the_reader_for_a_recording(plugin, recording_path, tmp_path):
    readers = [r.command for r in plugin.iter_compatible_readers([str(recording_path)])]
    assert "flyviz.read_flyviz" in readers
    from flyviz.napari._reader import get_reader

    assert get_reader(str(recording_path)) is not None
    other = tmp_path / "image.tif"
    other.write_bytes(b"II*\x00")
    assert get_reader(str(other)) is None
    assert "flyviz.read_flyviz" not in [r.command for r in plugin.iter_compatible_readers([str(other)])]


def test_reader_layer_is_the_brain_coloured_at_the_slider_token(make_napari_viewer, demo,
                                                                 recording_path):
    from flyviz.record.recording import Recording

    viewer = make_napari_viewer()
    viewer.open(str(recording_path), plugin=None)  # napari picks flyviz's reader by itself
    rec = Recording.load(recording_path)
    anatomy = demo.drawing_anatomy()
    shown = np.flatnonzero(anatomy.valid)
    (points,) = points_layers(viewer)

    # Data: the somas in napari's (z, y, x), dorsal up; features: the labels.
    um = anatomy.positions_um()[shown]
    np.testing.assert_allclose(points.data, np.stack([um[:, 2], -um[:, 1], um[:, 0]], 1), rtol=1e-6)
    assert list(points.features["superclass"]) == [anatomy.superclass[i] for i in shown]
    assert list(points.features["cell_type"]) == [anatomy.cell_type[i] for i in shown]
    assert list(points.features["side"]) == [anatomy.side[i] for i in shown]
    np.testing.assert_array_equal(points.features["body_id"].to_numpy(), anatomy.body_id[shown])

    # The token axis is napari's dims slider, as long as the recording.
    assert viewer.dims.ndim == 4 and viewer.dims.nsteps[0] == len(rec)
    assert viewer.dims.ndisplay == 3
    value_range = ColourLayer().recording_range(rec)
    seen = []
    for token in (1, len(rec) - 1):
        set_token(viewer, token)
        want = expected_rgba(rec.state(token)[shown], "signed", value_range)
        np.testing.assert_allclose(points.face_color, want, atol=1e-6)
        seen.append(points.face_color.copy())
        assert repr(rec.token_texts[token]) in viewer.canvas.overlays.text.text
    assert not np.allclose(seen[0], seen[1]), "the slider must change the colours"
    # The layer's recording is the file, memory-mapped, not a copy of its states.
    assert isinstance(points.metadata["flyviz"]["source"].recording._stored, np.memmap)


def test_damaged_recording_is_napari_reader_error(make_napari_viewer, recording_path, tmp_path):
    from napari.errors import ReaderPluginError

    from flyviz.errors import RecordingError

    damaged = tmp_path / "damaged.flyrec"
    data = bytearray(recording_path.read_bytes())
    damaged.write_bytes(bytes(data[: len(data) // 2]))
    viewer = make_napari_viewer()
    with pytest.raises(ReaderPluginError) as info:
        viewer.open(str(damaged), plugin=None)  # as File > Open does: napari picks the reader
    assert isinstance(info.value.__cause__, RecordingError)
    assert "damaged" in str(info.value.__cause__) or "truncated" in str(info.value.__cause__)
    assert len(viewer.layers) == 0


def test_comparison_adds_the_delta_layer(make_napari_viewer, demo, tmp_path):
    from flyviz.model.interventions import as_interventions
    from flyviz.record.compare import Comparison
    from flyviz.record.recording import Recording
    from flyviz.record.run import GenerationSettings

    comparison = Comparison.for_checkpoint(demo.checkpoint, as_interventions("silence sign:inhibitory"))
    try:
        rec = comparison.record("Once upon a time", GenerationSettings(max_new_tokens=3), spec="demo")
    finally:
        comparison.close()
    path = rec.save(tmp_path / "compare.flyrec")
    rec = Recording.load(path)
    viewer = make_napari_viewer()
    viewer.open(str(path), plugin="flyviz")
    state, delta = points_layers(viewer)
    assert delta.name.endswith("Δx")
    shown = np.flatnonzero(demo.drawing_anatomy().valid)
    token = len(rec) - 1
    set_token(viewer, token)
    dx = rec.state(token) - rec.baseline.state(token)
    layer = ColourLayer(colormap="difference",
                        source=lambda r, i: r.state(i) - r.baseline.state(i))
    want = expected_rgba(dx[shown], "difference", layer.recording_range(rec))
    np.testing.assert_allclose(delta.face_color, want, atol=1e-6)
    assert np.abs(dx).max() > 0


def test_atlas_statistics_become_features(make_napari_viewer, demo):
    from flyviz.analysis.atlas import Atlas
    from flyviz.resources import assets_dir

    path = assets_dir() / "demo" / "atlas"
    atlas = Atlas(path)
    viewer = make_napari_viewer()
    viewer.open(str(path), plugin="flyviz")
    (points,) = points_layers(viewer)
    shown = np.flatnonzero(demo.drawing_anatomy().valid)
    for stat in ("mean", "density", "selectivity"):
        np.testing.assert_allclose(points.features[stat].to_numpy(), atlas.statistic(stat)[shown])
    # Coloured by the atlas's first statistic (the mean), in flyviz's colormap.
    mean = atlas.statistic("mean")
    want = expected_rgba(mean[shown], "signed", ColourLayer.static("m", mean, colormap="signed")
                         .value_range(mean[shown]))
    np.testing.assert_allclose(points.face_color, want, atol=1e-6)


def test_widget_runs_a_prompt_into_a_new_layer(make_napari_viewer, demo, qtbot):
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    widget.set_model(demo)
    runs = widget.run_prompt("Once upon a time", max_new_tokens=3)
    qtbot.waitUntil(lambda: len(points_layers(viewer)) == 1, timeout=60_000)
    qtbot.waitUntil(lambda: not runs.active, timeout=10_000)
    (points,) = points_layers(viewer)
    source = points.metadata["flyviz"]["source"]
    # The run the API makes of the same prompt, the slider at its last token.
    reference = flyviz.run(demo, "Once upon a time", max_new_tokens=3)
    last = len(reference) - 1
    assert source.tokens == len(reference) and viewer.dims.current_step[0] == last
    np.testing.assert_array_equal(source.recording.state(last), reference.state(last))
    assert repr(reference.token_texts[last]) in widget.token_label.text()
    # Colour by |x|, chosen in the widget.
    viewer.layers.selection.active = points
    assert widget.quantity.count() >= 2
    widget.quantity.setCurrentText("abs")
    want = expected_rgba(source.recording.state(last)[source.shown], "abs",
                         ColourLayer(colormap="abs").recording_range(source.recording))
    np.testing.assert_allclose(points.face_color, want, atol=1e-6)


def test_the_words_at_the_slider_are_the_selected_recordings(make_napari_viewer, demo,
                                                              recording_path, tmp_path):
    """Two recordings of different lengths: the canvas's corner and the widget say the words
    of the one selected (the one added last, as napari selects it), at the slider's token.
    The first layer's were said whatever was selected: the slider at the longer run's last
    token read the shorter one's last."""
    from flyviz.napari._widget import FlyvizWidget
    from flyviz.record.recording import Recording

    short = Recording.load(recording_path)
    longer = flyviz.run(demo, "There was a little girl", max_new_tokens=9)
    assert len(longer) > len(short)
    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    viewer.open(str(recording_path), plugin=None)
    viewer.open(str(longer.save(tmp_path / "longer.flyrec")), plugin=None)
    first, second = points_layers(viewer)
    assert viewer.layers.selection.active is second
    last = len(longer) - 1
    set_token(viewer, last)
    said = repr(longer.token_texts[last])
    assert said in viewer.canvas.overlays.text.text and said in widget.token_label.text()
    # The shorter one selected: its words, at its last token (where its colours stay).
    viewer.layers.selection.active = first
    said = repr(short.token_texts[len(short) - 1])
    assert said in viewer.canvas.overlays.text.text and said in widget.token_label.text()
    # Hidden, it speaks no more: the shown one reaching the token does.
    viewer.layers.selection.active = None
    first.visible = False
    set_token(viewer, 1)
    assert repr(longer.token_texts[1]) in viewer.canvas.overlays.text.text


def test_the_layer_is_named_for_the_colour_chosen(make_napari_viewer, recording_path):
    """*Colour by* renames the layer for what its points now show (it kept the name of the
    first colouring); a name the user gave it stays."""
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    viewer.open(str(recording_path), plugin=None)
    (points,) = points_layers(viewer)
    viewer.layers.selection.active = points
    assert points.name == "run state"
    widget.quantity.setCurrentText("abs")
    assert points.name == "run |state|"
    points.name = "my run"
    widget.quantity.setCurrentText("signed")
    assert points.name == "my run" and points.metadata["flyviz"]["quantity"] == "signed"


def test_widget_refuses_a_bad_token_count_and_a_prompt_for_a_spiking_brain(
        make_napari_viewer, demo, tmp_path):
    from test_spiking_kind import write_brain

    from flyviz.kinds.spiking import SpikingModel
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    widget.set_model(demo)
    # Only None means the New tokens box: 0, 2.5 and "3" are refused, not rounded or read.
    for count, said in [(0, "max new tokens 0 is out of range"),
                        (2.5, "max new tokens must be a whole number, got 2.5"),
                        ("3", "max new tokens must be a whole number, got '3'")]:
        assert widget.run_prompt("Once upon a time", max_new_tokens=count) is None
        assert widget.status.text().startswith("flyviz: error: ")
        assert re.search(said, widget.status.text()), widget.status.text()
    # A spiking brain reads no prompt: one given is said, not run as the default stimulus.
    widget.set_model(SpikingModel.load(str(write_brain(tmp_path / "brain"))))
    assert not widget.prompt.isEnabled()
    assert widget.run_prompt("Once upon a time") is None
    assert "the spiking brain reads no prompt" in widget.status.text()
    # The Run button gives it no prompt: its kind's own run (this brain has nothing to
    # excite by default, which is what it says).
    widget.run_button.click()
    assert "nothing to excite" in widget.status.text()
    assert not points_layers(viewer)


def test_missing_napari_names_the_extra(monkeypatch):
    from flyviz.errors import MissingDependencyError
    from flyviz.napari import require_napari

    monkeypatch.setitem(sys.modules, "napari", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[napari\]'"):
        require_napari()


def save_screenshot(image: np.ndarray, name: str) -> None:
    """Keep a screenshot for the README when ``FLYVIZ_SCREENSHOTS`` names a folder."""
    import os

    folder = os.environ.get("FLYVIZ_SCREENSHOTS")
    if folder:
        import imageio.v3 as iio

        Path(folder).mkdir(parents=True, exist_ok=True)
        iio.imwrite(Path(folder) / name, image)


def test_screenshot_shows_the_lit_brain_and_the_token_text(make_napari_viewer, recording_path,
                                                           qtbot):
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1400, 760)
    # The window at its size before the reader frames the brain: napari frames it for the
    # canvas size it has been told of, and a resize still queued frames it for another.
    settle(qtbot, viewer.window._qt_window)
    viewer.open(str(recording_path), plugin=None)
    widget = FlyvizWidget(viewer)
    viewer.window.add_dock_widget(widget, name="flyviz", area="right")
    set_token(viewer, 5)
    (points,) = points_layers(viewer)
    viewer.layers.selection.active = points
    # The dock laid out before the canvas is photographed: until its layout runs the canvas
    # is still as wide as without it (1063 px here, 749 px after), so the picture would be
    # of whichever width the event loop had reached.
    settle(qtbot, viewer.window._qt_window)
    canvas = np.asarray(viewer.screenshot(canvas_only=True, flash=False))
    h, w = canvas.shape[:2]
    bright = canvas[..., :3].max(axis=-1) > 40
    # The brain fills the middle of the canvas; the corners are napari's background.
    middle = bright[h // 4: 3 * h // 4, w // 4: 3 * w // 4]
    assert middle.mean() > 0.05
    assert bright[: h // 10, : w // 10].mean() < middle.mean() / 4
    assert "t=5" in widget.token_label.text()
    assert widget.quantity.count() == 2  # signed and abs, for the active layer
    save_screenshot(np.asarray(viewer.screenshot(canvas_only=False, flash=False)), "napari.png")


def test_napari_frames_the_brain_not_the_ascending_somata_below_it(make_napari_viewer,
                                                                   recording_path, qtbot):
    """napari framed the box around every soma: some 300 ascending neurons' somata lie half a
    millimetre below the demo brain (a faint cloud under it), so after opening a recording,
    and after napari's home button, the brain filled only the top half of the canvas (its
    lit pixels' middle row a third of the way down). It is framed as flyviz's window frames
    it: the lit brain sits in the middle of the canvas."""
    viewer = make_napari_viewer(show=True)
    viewer.window.resize(1000, 760)
    settle(qtbot, viewer.window._qt_window)
    viewer.open(str(recording_path), plugin=None)
    set_token(viewer, 2)
    for framed in ("opened", "home"):
        if framed == "home":
            viewer.reset_view()
        settle(qtbot, viewer.window._qt_window)
        canvas = np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3]
        h, w = canvas.shape[:2]
        lit = canvas.max(axis=-1) > 40
        lit[int(0.9 * h):, w // 3:] = False     # the token's words in the corner
        rows, cols = np.nonzero(lit)
        assert rows.size > 0.02 * h * w, framed
        assert abs(np.median(rows) / h - 0.5) < 0.06, (framed, np.median(rows) / h)
        assert abs(np.median(cols) / w - 0.5) < 0.06, (framed, np.median(cols) / w)


def test_dock_widget_contribution_and_view(make_napari_viewer, recording_path, monkeypatch):
    import napari

    import flyviz.napari
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    _dock, widget = viewer.window.add_plugin_dock_widget("flyviz", "flyviz brain")
    assert isinstance(widget, FlyvizWidget)

    monkeypatch.setattr(napari, "Viewer", lambda: make_napari_viewer())
    shown = flyviz.napari.view(str(recording_path))
    assert sorted(layer._type_string for layer in shown.layers) == ["image", "points"]
    assert shown.dims.ndisplay == 3


def test_napari_animation_keyframes_over_the_token_slider_make_a_movie(make_napari_viewer,
                                                                       recording_path, tmp_path,
                                                                       qtbot):
    animation = pytest.importorskip("napari_animation")
    import imageio.v3 as iio

    viewer = make_napari_viewer(show=True)  # a hidden canvas renders black frames
    # The shown window at its size before the reader frames the brain, and the layer
    # controls the new layers bring laid out before the first keyframe: a resize landing
    # between keyframes would change the frames for a reason other than the token or the
    # camera (or their size, that the comparisons below need the same).
    settle(qtbot, viewer.window._qt_window)
    viewer.open(str(recording_path), plugin=None)
    settle(qtbot, viewer.window._qt_window)
    movie = animation.Animation(viewer)
    set_token(viewer, 0)
    movie.capture_keyframe()
    set_token(viewer, viewer.dims.nsteps[0] - 1)  # the same camera: only the colours change
    movie.capture_keyframe(steps=3)
    viewer.camera.angles = (0.0, 40.0, 90.0)  # the same token: only the camera moves
    movie.capture_keyframe(steps=3)
    # At the canvas's own size: a scale_factor has napari-animation resample every frame
    # with a cubic spline (scipy.ndimage.zoom), seconds of CPU that no flyviz code runs.
    movie.animate(str(tmp_path / "tokens"), canvas_only=True, fps=6)
    # The brain, above the token text in the bottom corner (the canvas's top 300 rows).
    frames = [iio.imread(p)[: 300, :, :3].astype(int) for p in sorted(tmp_path.glob("tokens/*.png"))]
    assert len(frames) == 7
    assert np.abs(frames[0] - frames[3]).mean() > 0.5   # recoloured at the slider's token
    assert np.abs(frames[3] - frames[6]).mean() > 0.5   # turned
    assert viewer.dims.current_step[0] == viewer.dims.nsteps[0] - 1


def test_napari_follows_the_states_token_selection_and_camera(make_napari_viewer, demo):
    """napari shows what the viewer state shows: its token (and its slider moves the
    state's), its selected and picked neurons as the selected points, and its camera: the
    same point, field of view and direction as a vispy turntable camera given the pose."""
    from vispy import scene

    from flyviz.brain_source import state_for
    from flyviz.napari._layers import napari_coordinates, napari_direction, shown_token
    from flyviz.napari._widget import add_source
    from flyviz.render.camera import CameraPose

    rec = flyviz.run(demo, "Once upon a time", max_new_tokens=4)
    anatomy = demo.drawing_anatomy()
    state = state_for(anatomy, rec, model=demo)
    viewer = make_napari_viewer()
    (points,) = [layer for layer in add_source(viewer, state) if layer.__class__.__name__ ==
                 "Points"]
    source = points.metadata["flyviz"]["source"]
    assert shown_token(viewer) == state.index == len(rec) - 1
    state.index = 1
    assert shown_token(viewer) == 1
    np.testing.assert_allclose(points.face_color, source.rgba(source.quantity, 1), atol=1e-6)
    set_token(viewer, 2)
    assert state.index == 2

    shown = np.flatnonzero(anatomy.valid)
    state.selected = int(shown[5])
    state.picked = shown[[7, 9]]
    assert set(points.selected_data) == {5, 7, 9}
    state.picked = []
    assert set(points.selected_data) == {5}

    um = anatomy.positions_um()[shown]
    pose = CameraPose(azimuth=35.0, elevation=20.0, center=tuple(map(float, um.mean(0))),
                      scale_factor=float(np.ptp(um[:, 0])), fov=30.0)
    state.camera = pose
    canvas = scene.SceneCanvas(size=(200, 100), show=False)
    turntable = canvas.central_widget.add_view().camera = scene.TurntableCamera()
    pose.apply(turntable)
    turntable.view_changed()
    eye, ahead, up = (np.asarray(turntable.transform.map(p)[:3]) for p in
                      ([0, 0, 0], [0, 0, -1], [0, 1, 0]))
    camera = viewer.camera
    np.testing.assert_allclose(camera.center, napari_coordinates(np.array([pose.center]))[0],
                               rtol=1e-5, atol=1e-3)
    assert camera.perspective == pytest.approx(30.0)
    np.testing.assert_allclose(camera.view_direction,
                               napari_direction((ahead - eye) / np.linalg.norm(ahead - eye)),
                               atol=1e-4)
    np.testing.assert_allclose(camera.up_direction,
                               napari_direction((up - eye) / np.linalg.norm(up - eye)),
                               atol=1e-4)
    canvas.close()


def test_widget_loads_a_spiking_brain_folder_and_runs_it_into_a_layer(make_napari_viewer,
                                                                    qtbot, tmp_path):
    """The 166k MaleCNS folder typed into the widget's Model box loads as a spiking brain,
    as the window's model box opens it (it was refused as no language model); Run runs its
    own stimulus into a layer of rates, and the status says its neurons are on a generic
    layout (the set has no somata)."""
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.model.synthetic import make_malecns_arrays
    from flyviz.model.writers import write_malecns_dataset
    from flyviz.napari._widget import FlyvizWidget

    root = write_malecns_dataset(tmp_path / "malecns-166k",
                                 **make_malecns_arrays(neurons=300, edges=3000, seed=3))
    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    widget.model_spec.setText(str(root))
    widget.load_button.click()
    qtbot.waitUntil(lambda: widget.model is not None or "error" in widget.status.text(),
                    timeout=60_000)
    assert isinstance(widget.model, SpikingModel), widget.status.text()
    assert widget.model.neurons == 300 and not widget.prompt.isEnabled()
    runs = widget.run_prompt(None)
    assert runs is not None, widget.status.text()
    qtbot.waitUntil(lambda: len(points_layers(viewer)) == 1, timeout=60_000)
    (points,) = points_layers(viewer)
    source = points.metadata["flyviz"]["source"]
    assert points.name == "run rate" and source.quantities == ("spike_rate", "spike_flash")
    assert viewer.dims.nsteps[0] == source.tokens > 0
    assert "fly-connectome-malecns-166k has no neuron positions" in widget.status.text()
    assert source.note is not None and "generic layout" in source.note


def test_the_states_camera_zoom_and_angles_reach_napari(make_napari_viewer, demo, qtbot):
    """The state's camera zooms napari's as it turns it: the pose's scale_factor (the scene's
    size across the view's shorter side) spans the canvas's shorter side. The zoom was never
    set (it read a canvas size napari 0.9 no longer keeps on the viewer): twice the
    scale_factor drew the brain as large as before."""
    from flyviz.brain_source import state_for
    from flyviz.napari._layers import napari_direction
    from flyviz.napari._widget import add_source
    from flyviz.render.camera import CameraPose

    viewer = make_napari_viewer(show=True)      # a hidden canvas renders black frames
    viewer.window.resize(1000, 700)
    settle(qtbot, viewer.window._qt_window)
    rec = flyviz.run(demo, "Once upon a time", max_new_tokens=2)
    anatomy = demo.drawing_anatomy()
    state = state_for(anatomy, rec, model=demo)
    add_source(viewer, state)
    settle(qtbot, viewer.window._qt_window)
    um = anatomy.positions_um()[anatomy.valid]
    span = float(np.ptp(um, axis=0).max())
    camera = viewer.scene.camera

    def lit_columns(scale: float, azimuth: float) -> int:
        """How many of the canvas's columns the brain lights at ``scale`` (orthographic)."""
        pose = CameraPose(azimuth=azimuth, elevation=10.0, center=tuple(map(float, um.mean(0))),
                          scale_factor=scale, fov=0.0)
        state.camera = pose
        # napari's camera is the pose's: its zoom and direction.
        assert camera.zoom == pytest.approx(min(viewer.canvas.size) / scale, rel=1e-6)
        view, _up = pose.directions()
        np.testing.assert_allclose(camera.view_direction, napari_direction(view), atol=1e-4)
        settle(qtbot, viewer.window._qt_window)
        image = np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3]
        h = image.shape[0]
        lit = image[h // 8: 5 * h // 8].max(axis=-1) > 40    # above the words in the corner
        columns = np.flatnonzero(lit.any(axis=0))
        assert columns.size, "the brain must be drawn"
        return int(columns[-1] - columns[0])

    near, far = lit_columns(1.5 * span, 30.0), lit_columns(3.0 * span, 30.0)
    assert far == pytest.approx(near / 2, rel=0.15), (near, far)


def _demo_state(demo, tokens: int = 3):
    from flyviz.brain_source import state_for

    rec = flyviz.run(demo, "Once upon a time", max_new_tokens=tokens)
    return state_for(demo.drawing_anatomy(), rec, model=demo)


def test_a_removed_layer_is_not_kept_and_its_state_follows_a_new_one(make_napari_viewer, demo):
    """A flyviz layer removed from napari is let go (flyviz kept every layer it had followed,
    for good), and its viewer state, added again, is followed afresh in the new layer."""
    import gc
    import weakref

    import flyviz.napari._layers as napari_layers
    from flyviz.napari._widget import add_source

    state = _demo_state(demo)
    shown = np.flatnonzero(demo.drawing_anatomy().valid)
    viewer = make_napari_viewer()
    add_source(viewer, state)
    (points,) = points_layers(viewer)
    gone = weakref.ref(points)
    viewer.layers.remove(points)
    state.selected = int(shown[4])      # the state's events reach no removed layer
    # Added again (napari keeps the removed layer as its "current" one until another is).
    add_source(viewer, state)
    del points
    deferred_deletes_delivered()        # napari's controls of the removed layer, deleted
    gc.collect()
    assert gone() is None, "a removed layer must not be kept alive"
    (again,) = points_layers(viewer)
    viewer.layers.remove(again)
    assert napari_layers.followed_layers(viewer) == []
    viewer.layers.append(again)
    assert napari_layers.followed_layers(viewer) == [again]
    assert set(again.selected_data) == {4}
    state.selected = int(shown[6])
    assert set(again.selected_data) == {6}


def test_a_viewer_collected_is_forgotten_and_a_new_one_is_bound(demo):
    """A viewer without a window (napari's ViewerModel), once collected, is not kept alive by
    the state it followed (the state's callbacks held it) nor remembered as bound by its
    ``id()`` (a new viewer at that address was never hooked to recolour); a new viewer of the
    same state is bound and recoloured at its slider."""
    import gc
    import weakref

    from napari.components import ViewerModel

    import flyviz.napari._layers as napari_layers
    from flyviz.napari._widget import add_source

    state = _demo_state(demo)       # a script's state, that outlives its viewers
    viewer = ViewerModel()
    add_source(viewer, state)
    gone = weakref.ref(viewer)
    del viewer
    gc.collect()
    assert gone() is None, "a viewer let go must not be kept alive by its state"
    state.index = 1                 # the state's events reach no collected viewer
    fresh = ViewerModel()
    assert not napari_layers.is_bound(fresh)
    add_source(fresh, state)
    assert napari_layers.is_bound(fresh)
    (points,) = points_layers(fresh)
    source = points.metadata["flyviz"]["source"]
    set_token(fresh, 2)
    assert state.index == 2
    np.testing.assert_allclose(points.face_color, source.rgba(source.quantity, 2), atol=1e-6)
    state.index = 1
    assert fresh.dims.current_step[0] == 1
    np.testing.assert_allclose(points.face_color, source.rgba(source.quantity, 1), atol=1e-6)


def test_a_flygpt_without_its_dataset_shows_its_graphs_body_ids(tmp_path):
    """A FlyGPT model loaded without its connectome dataset is drawn on a graph layout, and
    its points' ``body_id`` feature is the MaleCNS body id its graph names each neuron by
    (``graph.node_id``): it was -1 for every neuron, as if the model did not know them."""
    from flyviz.brain_source import BrainSource
    from flyviz.model.synthetic import make_flygpt_tensors
    from flyviz.model.writers import write_flygpt
    from flyviz.napari._layers import layer_data

    tensors = make_flygpt_tensors(seed=11)
    model = flyviz.load(str(write_flygpt(tensors, tmp_path / "FlyGPT")))
    rec = flyviz.run(model, "ROMEO:", max_new_tokens=2)
    source = BrainSource.of_recording(rec, model, "flygpt")
    assert source.anatomy.kind == "layout" and source.shown.size == model.neurons
    (_points, kwargs, kind), = [d for d in layer_data(source) if d[2] == "points"]
    np.testing.assert_array_equal(kwargs["features"]["body_id"].astype(np.int64),
                                  np.asarray(tensors["graph.node_id"], np.int64)[source.shown])


@pytest.fixture(scope="module")
def bursty_spiking_path(spiking_kernels, tmp_path_factory) -> Path:
    """A spiking recording of the two-sided test brain whose bins 0-3 hold two of the left
    neurons' single spikes (100 Hz in a 10 ms bin) and whose bin 4 is a burst of every left
    neuron at 600 Hz: the sparse rates and bursts a real brain's run has."""
    import dataclasses

    from test_spiking_kind import write_brain

    from flyviz.cli import main
    from flyviz.record.recording import Recording

    folder = tmp_path_factory.mktemp("napari_spiking")
    brain = write_brain(folder / "brain")
    ran = folder / "ran.flyrec"
    assert main(["simulate", str(brain), "--excite", "superclass:sensory", "--rate", "300",
                 "--duration", "50ms", "--record", str(ran)]) == 0
    run = Recording.load(ran)
    metadata = run.metadata
    metadata["spiking"]["bin_spikes"] = [2, 2, 2, 2, 240]     # what the rates below say
    bursty = Recording(run.neurons, metadata)
    for index, frame in enumerate(run):
        rates = np.zeros(run.neurons, np.float32)
        if index < 4:
            rates[[3, 7]] = 100.0
        else:
            rates[:40] = 600.0
        bursty.append(dataclasses.replace(frame, state=rates))
    return bursty.save(folder / "bursty.flyrec")


def test_a_spiking_recording_is_as_bright_in_napari_as_in_the_window(
        make_napari_viewer, bursty_spiking_path, qtbot):
    """napari drew a spiking recording nearly black: its colours were ranged once over the
    whole run (600 Hz, the burst's), so a bin's single spikes (100 Hz) sat at a sixth of the
    colourbar, dim and dark blue. Each bin is ranged over its own rates, as the window's
    brain view ranges the frame it shows: the spikes light their neurons fully."""
    from flyviz.brain_source import colours

    viewer = make_napari_viewer(show=True)
    viewer.window.resize(900, 700)
    settle(qtbot, viewer.window._qt_window)
    viewer.open(str(bursty_spiking_path), plugin=None)
    (points,) = points_layers(viewer)
    source = points.metadata["flyviz"]["source"]
    assert source.quantity == "spike_rate"
    set_token(viewer, 1)
    # The window's colours of that bin: the kind's layer of the recorded state (what its
    # brain view shows) over the range it resolves for the drawn neurons' values.
    layer = source.state.kind.state_layer("signed", None)
    rates = source.state.recording.state(1)
    window = colours(rates[source.shown], layer.colormap,
                     layer.value_range(rates[source.state.anatomy.valid]))
    np.testing.assert_allclose(points.face_color, window, atol=1e-6)
    # This brain's 80 neurons spread over a millimetre: close up on one of the two that
    # spiked, its disc some 20 pixels wide.
    viewer.scene.camera.center = tuple(float(c) for c in points.data[3])
    viewer.scene.camera.zoom = 5.0
    settle(qtbot, viewer.window._qt_window)
    canvas = np.asarray(viewer.screenshot(canvas_only=True, flash=False))[..., :3].astype(int)
    # The two spiking neurons glow at the top of the sequential colours (pale yellow: red
    # and green high, blue low), not a dim blue.
    yellow = (canvas[..., 0] > 180) & (canvas[..., 1] > 160) & (canvas[..., 2] < 120)
    assert yellow.sum() >= 10, (yellow.sum(), canvas.reshape(-1, 3).max(axis=0))


def test_widget_runs_a_spiking_brain_on_the_stimulus_it_is_given(make_napari_viewer, qtbot,
                                                                 spiking_kernels, tmp_path):
    """A spiking brain loaded, the widget offers what the window's Stimulus dock does in its
    simplest form: which neurons to excite (a selection query) and for how long. Run runs
    that stimulus (the run the dock's settings describe) into a layer of rates: only the
    neurons excited, and the ones they drive, fire. Bad fields are one line in the status."""
    from test_spiking_kind import write_brain

    from flyviz.kinds.spiking import SpikingModel
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    assert not widget.excite.isEnabled() and not widget.duration.isEnabled()
    widget.set_model(SpikingModel.load(str(write_brain(tmp_path / "brain"))))
    assert widget.excite.isEnabled() and widget.duration.isEnabled()
    assert not widget.prompt.isEnabled()
    for excite, duration, said in [("superclass:", 50.0, "flyviz: error: "),
                                   ("superclass:nothing_here", 50.0, "flyviz: error: "),
                                   ("superclass:central", 15.0,
                                    "not a whole number of 10 ms bins"),
                                   ("superclass:central", 0.0, "positive number")]:
        widget.excite.setText(excite)
        assert widget.run_stimulus(excite, duration) is None, excite
        assert said in widget.status.text(), widget.status.text()
    assert not points_layers(viewer)
    # The right half ("central") is excited: it fires; the left half gets nothing.
    widget.excite.setText("superclass:central")
    widget.duration.setValue(50.0)
    widget.run_button.click()
    runs = widget.runs
    assert runs is not None, widget.status.text()
    qtbot.waitUntil(lambda: len(points_layers(viewer)) == 1, timeout=60_000)
    (points,) = points_layers(viewer)
    source = points.metadata["flyviz"]["source"]
    assert points.name == "superclass:central rate"
    assert source.tokens == 5 == viewer.dims.nsteps[0]
    rates = source.recording.states()
    assert rates[:, 40:].sum() > 0 and rates[:, :40].sum() == 0
    assert source.recording.metadata["spiking"]["excite"] == "superclass:central"
    # A language model has no stimulus: the fields are off again.
    widget.set_model(flyviz.load("demo"))
    assert not widget.excite.isEnabled() and widget.prompt.isEnabled()


def test_widget_runs_the_stimulus_docks_rate_silence_and_trials(make_napari_viewer, qtbot,
                                                                spiking_kernels, tmp_path):
    """The widget's stimulus has the rest of the window's Stimulus dock: the rate, the
    neurons silenced and the trials pooled, set as the dock sets them (the same settings,
    checked by them). A silenced neuron drives nothing: the neuron it alone drives stays
    dark, where the same run without the silence lights it; the trials are the recording's.
    A rate the settings refuse (0 Hz drives nothing, a negative one means nothing) or trials
    that are not a whole number are one line in the status, nothing run."""
    from test_spiking_kind import IDS, write_brain

    from flyviz.kinds.spiking import SpikingModel
    from flyviz.napari._widget import FlyvizWidget

    viewer = make_napari_viewer()
    widget = FlyvizWidget(viewer)
    fields = (widget.rate, widget.silence, widget.trials)
    assert not any(field.isEnabled() for field in fields)
    widget.set_model(SpikingModel.load(str(write_brain(tmp_path / "brain"))))
    assert all(field.isEnabled() for field in fields)
    first = f"id:{IDS[40]}"         # the right chain's first neuron, which drives the second
    for rate, silence, trials in [(0.0, "", 1), (-5.0, "", 1), (0, "", 1),
                                  (5000.0, "superclass:nothing_here", 1),
                                  (5000.0, "", 2.5), (5000.0, "", 0)]:
        assert widget.run_stimulus(first, 200.0, rate=rate, silence=silence,
                                   trials=trials) is None, (rate, silence, trials)
        said = widget.status.text()
        assert said.startswith("flyviz: error: ") and "\n" not in said, said
        assert ("above 0 Hz" in said) == (rate != 5000.0), said
    assert not points_layers(viewer)
    # The fields, as a user sets them: 5 kHz into the first neuron, two trials.
    widget.excite.setText(first)
    widget.rate.setValue(5000.0)
    widget.duration.setValue(200.0)
    widget.trials.setValue(2)
    recordings = []
    for layers, silence in enumerate(("", first), start=1):
        widget.silence.setText(silence)
        widget.run_button.click()
        assert widget.runs is not None, widget.status.text()
        qtbot.waitUntil(lambda n=layers: len(points_layers(viewer)) == n, timeout=60_000)
        recordings.append(points_layers(viewer)[-1].metadata["flyviz"]["source"].recording)
    for recording, silenced in zip(recordings, ("", first)):
        meta = recording.metadata["spiking"]
        assert (meta["rate"], meta["trials"], meta["silence"] or "") == (5000.0, 2, silenced)
        assert len(recording) == 20
    driven, silenced_run = (recording.states() for recording in recordings)
    assert driven[:, 41].sum() > 0                  # the first neuron drives the second...
    assert silenced_run[:, 41].sum() == 0           # ...until it is silenced
    assert silenced_run[:, 40].sum() > 0            # (it still fires: its synapses are cut)
