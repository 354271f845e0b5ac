"""Colouring the brain by an atlas statistic or a lesion map's importance, and the groups' table."""

from __future__ import annotations

import numpy as np
import pytest
from app_conftest import (assert_only_lit, brightness, centre_colour, disc_max, drawn, expected_colour,
                          isolated_neurons, make_window, plain_display, screen_positions)
from PySide6.QtCore import Qt

from flyviz.analysis.sweep import LesionMap
from flyviz.app._testing import (make_app_atlas, make_app_checkpoint, make_app_lesion_map,
                                 make_frame)
from flyviz.model.interventions import Silence
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui

#: Per channel, how far a drawn pixel may be from the colour computed here (8-bit rounding
#: of the framebuffer, the colormap's table against the shader's exact ramp).
TOLERANCE = 10


@pytest.fixture(scope="module")
def app_atlas(app_checkpoint, tmp_path_factory):  # noqa: F811
    """An atlas of the test model over a few random stories."""
    return make_app_atlas(app_checkpoint, tmp_path_factory.mktemp("app-atlas"))


@pytest.fixture(scope="module")
def lesion_map(app_checkpoint, tmp_path_factory):  # noqa: F811
    """A superclass lesion map of the test model (each superclass silenced in turn)."""
    return make_app_lesion_map(app_checkpoint, tmp_path_factory.mktemp("app-lesions"))






def _all_lit(win, qtbot, neurons: int) -> None:
    """Show a frame with every neuron at 1 (the live state lights the whole brain)."""
    rec = Recording(neurons)
    rec.append(make_frame(0, np.ones(neurons, np.float32)))
    win.session.replace(rec)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)


def _open_lesions(win, qtbot, path, importance: bool = False) -> LesionMap:
    win.last_error = ""
    win.lesions.open(path, importance=importance)
    qtbot.waitUntil(lambda: win.lesions.lesions is not None or bool(win.last_error),
                    timeout=10_000)
    assert win.lesions.lesions is not None, win.last_error
    return win.lesions.lesions


def test_importance_colours_each_silenced_groups_neurons_by_its_delta_ce(
        window, qtbot, app_checkpoint, lesion_map):
    """Pixel facts: a group's lone neurons are drawn in the sequential colormap's colour of
    the group's ΔCE over [0, largest ΔCE]; a group whose lesion did not raise the
    cross-entropy stays at the bottom of the bar; the colourbar says so."""
    win = window
    plain_display(win)
    win.lesions.panel.log_scale.setChecked(False)          # ΔCE from 0 to the largest
    lesions = _open_lesions(win, qtbot, lesion_map, importance=True)
    assert win.colour_by.current == "importance" and win.brain.colormap == "sequential"
    rows = lesions.rows
    top = rows[0].delta_ce
    assert top > 0 and len(rows) >= 3
    assert win.brain.value_range == pytest.approx((0.0, top))
    assert win.brain.colorbar_caption.text() == "ΔCE, group silenced (nats/token)"
    assert win.brain.colorbar_high.text() == f"{top:.2f}"
    image = drawn(win, qtbot)
    xy = screen_positions(win)
    checked = {}
    for row in rows:
        members = lesions.neurons_of(row, app_checkpoint)
        for neuron in isolated_neurons(win, members, 2):
            want = expected_colour("sequential", row.delta_ce, 0.0, top)
            got = centre_colour(image, xy[neuron])
            assert np.abs(got - want).max() <= TOLERANCE, (row.group, neuron, got, want)
            checked[row.group] = row.delta_ce
    # The most important group is bright yellow-green, a middling one teal, a harmless one dim.
    assert rows[0].group in checked and len(checked) >= 3
    assert any(v <= 0 for v in checked.values()) or any(0 < v < top for v in checked.values())
    bright = expected_colour("sequential", top, 0.0, top)
    assert bright[1] > 200 and bright[2] < 120
    # On the log scale (the default): log10 ΔCE from a third of the smallest positive ΔCE.
    win.lesions.panel.log_scale.setChecked(True)
    floor = min(r.delta_ce for r in rows if r.delta_ce > 0) / 3
    low, high = np.log10(floor), np.log10(top)
    assert win.brain.value_range == pytest.approx((low, high))
    assert win.brain.colorbar_caption.text() == "log10 ΔCE, group silenced (nats/token)"
    image = drawn(win, qtbot)
    for row in rows:
        for neuron in isolated_neurons(win, lesions.neurons_of(row, app_checkpoint), 2):
            want = expected_colour("sequential", np.log10(max(row.delta_ce, floor)), low, high)
            got = centre_colour(image, xy[neuron])
            assert np.abs(got - want).max() <= TOLERANCE, (row.group, neuron, got, want)
    # Live state again: the state's colours and colourbar.
    win.lesions.show_importance(False)
    assert win.colour_by.current == "state" and win.brain.colormap == win.brain.mode
    assert "activation x" in win.brain.colorbar_caption.text()


def test_the_groups_table_sorts_lights_the_selected_group_and_sets_up_its_silence(
        window, qtbot, app_checkpoint, lesion_map):
    win = window
    plain_display(win)
    lesions = _open_lesions(win, qtbot, lesion_map)
    panel = win.lesions.panel
    assert win.lesions.dock.isVisible()
    # Sorted by ΔCE, largest first; sorting by another column reorders the rows.
    assert panel.shown_groups() == [r.group for r in lesions.rows]
    by_size = sorted(lesions.rows, key=lambda r: r.neurons)
    panel.table.sortItems(1, Qt.SortOrder.AscendingOrder)
    assert [int(panel.table.item(r, 1).text().replace(",", ""))
            for r in range(len(by_size))] == [r.neurons for r in by_size]
    cells = [panel.table.item(0, c).text() for c in range(5)]
    small = by_size[0]
    assert cells == [small.group, f"{small.neurons:,}", f"{small.delta_ce:+.4f}",
                     f"{small.kl:.4f}", f"{small.top1_agreement:.1%}"]

    # Selecting a row lights exactly that group in the view.
    n = app_checkpoint.config.neurons
    # A group with a lone neuron on screen (not the largest: the rest must show too).
    group = next(r for r in lesions.rows if r.neurons < n // 2 and isolated_neurons(
        win, lesions.neurons_of(r, app_checkpoint), 1))
    members = lesions.neurons_of(group, app_checkpoint)
    _all_lit(win, qtbot, n)
    before = brightness(drawn(win, qtbot))
    assert not panel.compare_button.isEnabled()
    assert panel.select_group(group.group)
    mask = win.brain.emphasis
    assert mask is not None and np.array_equal(np.flatnonzero(mask), members)
    assert_only_lit(win, before, members)

    # Compare with untouched: the lesion feature lends the group's silencing to the state's
    # run configuration and starts the comparison the state describes itself (no channel to
    # the Interventions dock, which shows what the state holds).
    assert win.lesions.compare is None
    requests = []
    win.lesions.compare_requested.connect(lambda ivs, text: requests.append((ivs, text)))
    win.state.run.max_new_tokens = 6                # short runs, at full speed
    win.state.run.speed_cap = 0
    win.state.docks.prompt = "Tom and his dog"
    assert panel.compare_button.isEnabled()
    qtbot.mouseClick(panel.compare_button, Qt.MouseButton.LeftButton)
    assert requests and requests[0][0] == (Silence(group.query),)
    assert tuple(win.state.interventions) == (Silence(group.query),) and win.state.comparing
    assert win.runs.next_interventions == () and not panel.next_label.isVisible()
    qtbot.waitUntil(lambda: win.runs.end_reason != "", timeout=20_000)
    recording = win.session.recording
    assert win.runs.end_reason == "done" and len(recording) > 0
    assert recording.baseline is not None and len(recording.baseline) > 0
    # The silenced group's neurons stayed at zero through the run; untouched, they did not.
    states = np.stack([recording.state(i) for i in range(len(recording))])
    assert np.all(states[:, members] == 0) and np.any(states != 0)
    untouched = np.stack([recording.baseline.state(i) for i in range(len(recording.baseline))])
    assert np.any(untouched[:, members] != 0)
    # Reset ends the loan: the list and Compare are as they were before it.
    win.reset_run()
    assert tuple(win.state.interventions) == () and not win.state.comparing


def test_a_lesion_map_of_another_model_is_refused_in_one_line(qtbot, tmp_path, lesion_map):
    other = make_app_checkpoint(tmp_path / "other", seed=3, name="other-brain")
    win = make_window(qtbot, other, tmp_path)
    try:
        win.last_error = ""
        win.lesions.open(lesion_map)
        qtbot.waitUntil(lambda: bool(win.last_error), timeout=10_000)
        assert win.lesions.lesions is None
        assert "lesion map" in win.last_error and "\n" not in win.last_error
        assert not win.colour_by.actions["importance"].isEnabled()
        # Not a lesion map at all: also one line.
        bad = tmp_path / "notes.csv"
        bad.write_text("a,b\n1,2\n", encoding="utf-8")
        win.last_error = ""
        win.lesions.open(bad)
        qtbot.waitUntil(lambda: bool(win.last_error), timeout=10_000)
        assert "not a flyviz lesion map" in win.last_error
    finally:
        win.close()


def test_atlas_statistic_colouring_lights_the_neurons_the_statistic_says(
        window, qtbot, app_checkpoint, app_atlas):
    """Pixel facts: coloured by the atlas's density, the densest lone neurons are bright and
    drawn in the colormap's colour of their density, the least dense are dim; the colourbar
    is the statistic's; Live state goes back; closing the atlas withdraws the entries."""
    import zarr

    win = window
    plain_display(win)
    win.atlas.open(app_atlas)
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=10_000)
    assert win.atlas.atlas is not None, win.last_error
    action = win.colour_by.actions["atlas:density"]
    assert action.isEnabled()
    action.trigger()
    assert win.colour_by.current == "atlas:density"
    density = np.asarray(zarr.open_group(str(app_atlas), mode="r")["density"][...], np.float64)
    image = drawn(win, qtbot)
    low, high = win.brain.value_range          # automatic: the 99th percentile of the drawn
    assert low == 0.0 and high == pytest.approx(np.percentile(density[win.brain.visible], 99),
                                                rel=1e-5)
    assert win.brain.colormap == "sequential"
    assert win.brain.colorbar_caption.text().startswith("atlas density")
    lum = brightness(image)
    xy = screen_positions(win)
    order = np.argsort(density)
    densest = isolated_neurons(win, order[-len(order) // 5:], 3)
    sparsest = isolated_neurons(win, order[:len(order) // 5], 3)
    assert densest and sparsest
    for neuron in densest + sparsest:
        want = expected_colour("sequential", density[neuron], low, high)
        got = centre_colour(image, xy[neuron])
        assert np.abs(got - want).max() <= TOLERANCE, (neuron, got, want)
    assert max(density[sparsest]) < 0.5 * min(density[densest])
    assert min(disc_max(lum, xy[n]) for n in densest) > 1.4 * max(disc_max(lum, xy[n])
                                                                  for n in sparsest)
    # The mean, on the signed activation colours and a symmetric scale.
    win.atlas.colour_by("mean")
    drawn(win, qtbot)
    lo, hi = win.brain.value_range
    assert win.brain.colormap == "signed" and lo == -hi
    assert win.atlas.panel.colour.currentData() == "mean"       # the dock follows the menu
    # The Atlas dock's Colour by box does the same as the menu.
    box = win.atlas.panel.colour
    box.activated.emit(box.findData("selectivity"))
    assert win.colour_by.current == "atlas:selectivity"
    assert win.colour_by.actions["atlas:selectivity"].isChecked()
    # Live state again, then closing the atlas withdraws its colourings.
    box.activated.emit(box.findData(""))
    assert win.colour_by.current == "state" and "activation x" in win.brain.colorbar_caption.text()
    assert win.colour_by.actions["state"].isChecked()
    win.atlas.colour_by("density")
    win.atlas.controller.close("closed for the test")
    assert win.colour_by.current == "state" and not action.isEnabled()


def test_a_parquet_lesion_map_opens_like_its_csv(window, qtbot, app_checkpoint, lesion_map):
    pytest.importorskip("pyarrow")
    parquet = make_app_lesion_map(app_checkpoint, lesion_map.parent, name="lesions.parquet")
    lesions = _open_lesions(window, qtbot, parquet)
    assert lesions.path == parquet
    assert window.lesions.panel.shown_groups() == [r.group for r in LesionMap(lesion_map).rows]
    assert window.colour_by.actions["importance"].isEnabled()


def test_gui_refuses_a_missing_or_damaged_lesion_map_before_the_window(capsys, tmp_path):
    from flyviz.cli import main

    assert main(["gui", "--lesion-map", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flyviz: error:") and "does not exist" in err and "\n" not in err
    bad = tmp_path / "bad.csv"
    bad.write_text("group,delta_ce\nT4,0.1\n", encoding="utf-8")
    assert main(["gui", "--lesion-map", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.csv" in err and "not a flyviz lesion map" in err and "\n" not in err


def test_another_model_closes_the_map_and_its_colours(window, qtbot, lesion_map, tmp_path):
    win = window
    _open_lesions(win, qtbot, lesion_map, importance=True)
    win.lesions.select_group(win.lesions.lesions.rows[0].group)
    assert win.colour_by.current == "importance" and win.brain.emphasis is not None
    other = make_app_checkpoint(tmp_path / "other", neurons=300, seed=4, name="other-brain")
    win.set_checkpoint(other)
    assert win.lesions.lesions is None and win.colour_by.current == "state"
    assert not win.colour_by.actions["importance"].isEnabled()
    assert win.brain.emphasis is None and "activation x" in win.brain.colorbar_caption.text()
    assert "previous model" in win.lesions.panel.status.text()
    qtbot.waitUntil(lambda: win.display.brain_at is not None, timeout=3000)
    assert win.brain.render_image().shape[2] == 4


def test_compare_goes_to_the_interventions_dock_when_the_window_has_one(
        window, qtbot, app_checkpoint, lesion_map):
    """With a host's own comparison (``lesions.compare``: an Interventions dock's
    ``compare_with``), the group's lesion goes there and nothing is left over for the next
    plain run."""
    win = window
    lesions = _open_lesions(win, qtbot, lesion_map)
    asked = []

    class Interventions:
        def compare_with(self, interventions, mode=None, prompt=None):
            asked.append(interventions)
            return True

    win.lesions.compare = Interventions().compare_with
    group = lesions.rows[0]
    assert win.lesions.select_group(group.group)
    win.lesions.panel.compare_button.click()
    assert asked == [(Silence(group.query),)]
    assert win.runs.next_interventions == () and not win.lesions.panel.next_label.isVisible()
    win.lesions.compare_with_silenced("superclass:cb_intrinsic")
    assert asked[-1] == (Silence("superclass:cb_intrinsic"),)


def test_compare_from_the_lesion_table_runs_the_interventions_docks_comparison(
        window, qtbot, app_checkpoint, lesion_map):
    """The real Interventions dock: a row's *Compare with untouched* runs the prompt beside
    the untouched model with exactly that group silenced (its states 0 at every step, the
    untouched run's not), and the dock lists the lesion."""
    from flyviz.model.selection import neuron_index

    win = window
    lesions = _open_lesions(win, qtbot, lesion_map)
    win.state.run.temperature = 0.0
    win.state.run.max_new_tokens = 6
    win.state.run.speed_cap = 0
    win.prompt_bar.set_text("Tom and his dog")
    group = max(lesions.rows, key=lambda row: row.neurons)
    assert win.lesions.select_group(group.group)
    with qtbot.waitSignal(win.run_ended, timeout=20_000) as ended:
        win.lesions.panel.compare_button.click()
    assert ended.args[0] == "done", win.last_error
    rec = win.session.recording
    assert rec.baseline is not None and len(rec.baseline) == len(rec) > 1
    silenced = neuron_index(app_checkpoint).select(group.query)
    intervened = np.stack([rec.state(i) for i in range(len(rec))])
    untouched = np.stack([rec.baseline.state(i) for i in range(len(rec))])
    assert np.all(intervened[:, silenced] == 0)
    assert np.abs(untouched[:, silenced]).max() > 0.01
    assert win.interventions.panel.enabled() == [Silence(group.query)]
    assert win.runs.next_interventions == ()


def test_the_open_dialog_starts_in_the_last_folder_and_keeps_the_picked_ones(
        window, qtbot, lesion_map, monkeypatch):
    """File → Open lesion map asks in the folder kept last time, keeps the picked file's
    folder and opens it; a cancelled dialog opens nothing and keeps the folder."""
    from PySide6.QtWidgets import QFileDialog

    win = window
    asked: list[str] = []
    answer = [str(lesion_map)]

    def ask(parent, title, folder, filters):
        asked.append(folder)
        return answer[0], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", ask)
    win.settings.setValue("paths/lesion_maps", "/nowhere")
    win.lesions.open_dialog()
    qtbot.waitUntil(lambda: win.lesions.lesions is not None, timeout=10_000)
    assert asked == ["/nowhere"]
    assert win.settings.value("paths/lesion_maps") == str(lesion_map.parent)
    answer[0] = ""
    win.lesions.open_estimate_dialog()
    assert asked[-1] == str(lesion_map.parent)
    assert win.settings.value("paths/lesion_maps") == str(lesion_map.parent)
