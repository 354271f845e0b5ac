"""The window is bound to its viewer state: widgets show it and write to it, the brain draws it.

Tests and scripts drive the app by setting ``window.state``; a user turning a
spin box or dragging the camera changes the state; a feature is one
registration against the :class:`~flyviz.app.base.host.WindowHost` protocol.
"""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.app._testing import make_frame
from flyviz.record.recording import Recording
from flyviz.render.camera import CameraPose
from flyviz.render.style import ColourLayer, ColourScale
from flyviz.viewer import ViewerError

pytestmark = pytest.mark.gui


def test_settings_set_on_the_state_show_in_the_dock_and_the_brain(window):
    win = window
    win.state.display.mode = "abs"
    win.state.display.point_size = 6.5
    win.state.display.glow = 1.4
    win.state.run.max_new_tokens = 12
    assert win.controls.mode.currentData() == "abs" and win.brain.mode == "abs"
    assert win.controls.point_size.value() == 6.5 and win.brain.point_size == 6.5
    assert win.controls.glow.value() == 140 and win.brain.glow == pytest.approx(1.4)
    assert win.controls.max_new_tokens.value() == 12
    with pytest.raises(ViewerError, match="glow"):
        win.state.display.glow = 5.0
    assert win.brain.glow == pytest.approx(1.4)


def test_a_user_turning_a_widget_writes_the_state(window):
    win = window
    win.controls.point_size.setValue(7.0)
    win.controls.auto_scale.setChecked(False)
    win.controls.fixed_limit.setValue(0.4)
    win.controls.speed_cap.setValue(12.0)
    d = win.state.display
    assert (d.point_size, d.auto_scale, d.limit) == (7.0, False, pytest.approx(0.4))
    assert win.state.run.speed_cap == 12.0
    assert win.brain.auto is False and win.brain.value_range == pytest.approx((-0.4, 0.4))
    win.toggle_colour_mode()                       # the M key
    assert d.mode == "abs" and win.controls.mode.currentData() == "abs"
    superclass = win.controls.superclass.itemData(1)
    win.controls.superclass.setCurrentIndex(1)     # the highlight filter, too
    assert win.state.filter_superclass == superclass and win.brain.emphasis is not None
    win.controls.cell_type.setText("no-such-type")
    assert win.state.filter_cell_type == "no-such-type"


def test_the_highlight_filter_set_on_the_state_shows_in_the_dock_and_lights_its_neurons(window):
    win = window
    superclass = win.controls.superclass.itemData(2)
    win.state.set_filter(superclass)
    assert win.controls.superclass.currentData() == superclass
    members = np.asarray(win.anatomy.superclass) == superclass
    np.testing.assert_array_equal(win.brain.emphasis, members)
    assert "match" in win.controls.filter_note.text()
    with pytest.raises(ViewerError, match="unknown superclass 'dragons'"):
        win.state.set_filter("dragons")
    win.state.set_filter("")
    assert win.brain.emphasis is None and win.controls.superclass.currentIndex() == 0


def test_token_selection_view_and_camera_follow_the_state(window, qtbot, app_checkpoint):
    win = window
    n = app_checkpoint.config.neurons
    recording = Recording(n)
    for i in range(3):
        recording.append(make_frame(i, np.full(n, 0.1 * (i + 1), np.float32)))
    win.state.set_recording(recording)
    win.state.index = 1
    qtbot.waitUntil(lambda: win.display.showing(1), timeout=3000)
    assert win.timeline.slider.value() == 1
    win.state.selected = 5
    assert win.brain.selected == 5 and win.selected_neuron == 5
    win.state.view = "top"
    assert win.brain.view_name == "top"
    pose = CameraPose(azimuth=33.0, elevation=12.0, center=(1.0, 2.0, 3.0), scale_factor=500.0)
    win.state.camera = pose
    assert win.brain.camera_pose().azimuth == pytest.approx(33.0)
    # The user moves the camera: the state hears where it went once the drag ends.
    win.brain.view.camera.azimuth = 71.0
    win.brain.camera_moved.emit()
    assert win.state.camera is not None and win.state.camera.azimuth == pytest.approx(71.0)


def test_colour_layers_chosen_on_the_state_show_in_the_menu_and_the_brain(window):
    win = window
    n = win.state.neurons
    layer = ColourLayer.static("ramp", np.linspace(0, 1, n), colormap="sequential",
                               label="ramp", scale=ColourScale.given(0.0, 1.0))
    win.colour_by.add("ramp", "&Ramp", lambda: layer)
    win.state.colour_by = "ramp"
    assert win.colour_by.actions["ramp"].isChecked() and win.brain.colormap == "sequential"
    assert win.display.layer is layer and "ramp" in win.brain.colorbar_caption.text()
    with pytest.raises(ViewerError, match="unknown colour layer"):
        win.state.colour_by = "nothing"
    win.colour_by.actions["state"].trigger()      # the menu writes the state
    assert win.state.colour_by == "state" and win.brain.colormap == win.brain.mode


def test_a_feature_is_one_registration_against_the_host(window):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QLabel

    win = window

    class Feature:
        def __init__(self, host):
            self.dock = host.docks.add("toy", "Toy", QLabel("toy"),
                                       Qt.DockWidgetArea.RightDockWidgetArea)
            host.docks.tabify("text", self.dock)
            host.colour_by.add("toy", "&Toy", lambda: None)
            host.state.highlights.set_neurons("toy", [1, 2])

    feature = win.register_feature("toy", Feature)
    assert win.features["toy"] is feature and "toy" in win.docks
    assert "toy" in win.state.colour_layers and win.brain.emphasis is not None
    with pytest.raises(ValueError, match="already"):
        win.register_feature("toy", Feature)
    assert set(win.features) >= {"atlas", "lesions", "interventions", "toy"}


def test_interventions_comparison_and_picks_set_on_the_state_show_in_the_dock(window):
    from flyviz.model.interventions import Silence

    win = window
    panel = win.interventions.panel
    superclass = win.controls.superclass.itemData(1)
    win.state.interventions = [Silence(f"superclass:{superclass}")]
    assert panel.enabled() == [Silence(f"superclass:{superclass}")]
    assert win.runs.interventions is not None and len(win.runs.interventions.post_state) == 1
    win.state.set_comparing(True, "free")
    assert panel.compare_box.isChecked() and panel.mode.currentData() == "free"
    assert (win.runs.comparing, win.runs.mode) == (True, "free")
    win.state.picked = [3, 4]
    assert panel.pick_button.text() == "Pick (2)"
    # And the other way: the dock's list writes the state.
    panel.clear()
    assert win.state.interventions == ()
