"""The neuron atlas in the app: the Inspector's card, Find neurons, opening and refusing atlases."""

from __future__ import annotations

import html

import numpy as np
import pytest
from app_conftest import brightness, disc_max, fixed_display, isolated_neurons, make_window, screen_positions
from PySide6.QtCore import QPoint, Qt

from flyviz.app._testing import make_app_atlas, make_app_checkpoint, make_frame
from flyviz.app.atlas.atlas_card import TOKEN_HIGHLIGHT
from flyviz.record.recording import Recording

pytestmark = pytest.mark.gui


@pytest.fixture(scope="module")
def app_atlas(app_checkpoint, tmp_path_factory):  # noqa: F811
    """An atlas of the test model over a few random stories."""
    return make_app_atlas(app_checkpoint, tmp_path_factory.mktemp("app-atlas"))


def _stored(path) -> dict[str, np.ndarray]:
    """The atlas's arrays, read straight from the store (the tests' oracle)."""
    import zarr

    group = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(group[name][...]) for name in
            ("top_window", "top_position", "top_value", "driving_token", "corpus_tokens",
             "corpus_offsets")}


def _open(win, qtbot, path) -> None:
    win.last_error = ""
    win.atlas.open(path)
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=10_000)
    assert win.atlas.atlas is not None, win.last_error


def _highlight_pixels(widget) -> int:
    """Pixels of ``widget`` painted in the activating token's highlight colour."""
    from PySide6.QtGui import QColor, QImage

    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGBA8888)
    w, h = image.width(), image.height()
    rgba = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * h)
    rgb = rgba.reshape(h, image.bytesPerLine())[:, :4 * w].reshape(h, w, 4)[..., :3].astype(int)
    want = QColor(TOKEN_HIGHLIGHT)
    return int((np.abs(rgb - [want.red(), want.green(), want.blue()]).sum(axis=-1) < 30).sum())


def test_the_card_shows_the_picked_neurons_top_context(window, qtbot, app_checkpoint, app_atlas):
    win = window
    fixed_display(win)
    _open(win, qtbot, app_atlas)
    stored = _stored(app_atlas)
    tokenizer = win.tokenizer
    # A neuron on its own on screen, clicked in the brain view.
    neuron = isolated_neurons(win, np.flatnonzero(stored["top_window"][:, 0] >= 0), 1)[0]
    x, y = win.brain.project(neuron)
    qtbot.mouseClick(win.brain.canvas.native, Qt.MouseButton.LeftButton,
                     pos=QPoint(int(round(x)), int(round(y))))
    card = win.inspector.atlas_card
    qtbot.waitUntil(lambda: card.card is not None and card.card.neuron == neuron, timeout=3000)
    assert win.selected_neuron == neuron
    assert card.card is not None and card.card.neuron == neuron
    assert card.contexts.isVisible() and not card.note.isVisible()
    # Its best context, from the store: the window, the position, the token read there.
    w, p = int(stored["top_window"][neuron, 0]), int(stored["top_position"][neuron, 0])
    token_id = int(stored["corpus_tokens"][int(stored["corpus_offsets"][w]) + p])
    token = tokenizer.decode([token_id]).replace("\n", "⏎ ")
    first_row = card.contexts.text().split("<tr>")[1]
    assert f"{float(stored['top_value'][neuron, 0]):+.3f}" in first_row
    assert f"{html.escape(token)}</span>" in first_row            # the activating token, marked
    assert f"background-color:{TOKEN_HIGHLIGHT}" in first_row
    text_before = tokenizer.decode(stored["corpus_tokens"][int(stored["corpus_offsets"][w]) + 1:
                                                           int(stored["corpus_offsets"][w]) + p]
                                   .tolist())[-12:]
    assert html.escape(text_before.replace("\n", "⏎ ")) in first_row
    # The highlight is painted; statistics, histogram and token lists are there too.
    qtbot.waitUntil(lambda: _highlight_pixels(card.contexts) > 20, timeout=3000)
    assert card.summary.text().startswith(f"mean {card.card.mean:+.3f}")
    assert card.bars.opts["height"].sum() == card.card.histogram.sum() > 0
    assert "Driving tokens" in card.tokens.text() and "Promotes" in card.tokens.text()
    assert "Samples by quantile" in card.samples.text()
    # Another neuron: its own context replaces the first.
    other = next(n for n in range(app_checkpoint.config.neurons)
                 if n != neuron and stored["top_window"][n, 0] >= 0
                 and (stored["top_window"][n, 0], stored["top_position"][n, 0]) != (w, p))
    win.select_neuron(other)
    qtbot.waitUntil(lambda: card.card.neuron == other, timeout=3000)
    assert f"{float(stored['top_value'][other, 0]):+.3f}" in card.contexts.text().split("<tr>")[1]
    # Clearing the selection leaves a hint, not a stale card.
    win.select_neuron(None)
    assert card.card is None and not card.isVisible()


def _all_lit(win, qtbot, neurons: int) -> None:
    rec = Recording(neurons)
    rec.append(make_frame(0, np.ones(neurons, np.float32)))
    win.session.replace(rec)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)


def test_find_neurons_lists_and_lights_exactly_the_driven_neurons(window, qtbot, app_checkpoint,
                                                                  app_atlas):
    win = window
    fixed_display(win)
    _open(win, qtbot, app_atlas)
    n = app_checkpoint.config.neurons
    _all_lit(win, qtbot, n)
    stored = _stored(app_atlas)
    word = "rain"
    # The oracle: every neuron with a token of the word (alone, with and without a leading
    # space) among its driving tokens, straight from the stored table.
    ids = {i for variant in (word, " " + word) for i in win.tokenizer.encode(variant)}
    want = np.flatnonzero(np.isin(stored["driving_token"], list(ids)).any(axis=1))
    assert 0 < want.size < n
    xy = screen_positions(win)
    before = brightness(win.brain.render_image())

    panel = win.atlas.panel
    panel.search.setText(word)
    qtbot.keyClick(panel.search, Qt.Key.Key_Return)
    assert panel.listed_neurons() == want.tolist()
    assert panel.result.text().startswith(f"{want.size:,} neuron")
    mask = win.brain.emphasis
    assert mask is not None and np.array_equal(np.flatnonzero(mask), want)
    after = brightness(win.brain.render_image())
    found = isolated_neurons(win, want, 3)
    others = isolated_neurons(win, np.setdiff1d(np.arange(n), want), 3)
    assert found and others, "the test layout has too few isolated neurons"
    for neuron in found:
        assert disc_max(after, xy[neuron]) >= 0.9 * disc_max(before, xy[neuron]) > 150
    for neuron in others:
        assert disc_max(after, xy[neuron]) < 0.5 * disc_max(before, xy[neuron])

    # A listed neuron, clicked, is inspected.
    panel.neurons.itemClicked.emit(panel.neurons.item(0))
    assert win.selected_neuron == want[0]
    # Clear lights every neuron again.
    panel.clear_button.click()
    assert win.brain.emphasis is None and panel.neurons.count() == 0
    cleared = brightness(win.brain.render_image())
    for neuron in others:
        assert disc_max(cleared, xy[neuron]) >= 0.9 * disc_max(before, xy[neuron])


def test_a_driving_token_in_the_card_finds_its_neurons(window, qtbot, app_atlas):
    win = window
    _open(win, qtbot, app_atlas)
    stored = _stored(app_atlas)
    win.select_neuron(7)
    card = win.inspector.atlas_card
    qtbot.waitUntil(lambda: card.card is not None, timeout=3000)
    token = card.card.driving_tokens[0].token_id
    card.tokens.linkActivated.emit(f"token:{token}")
    want = np.flatnonzero((stored["driving_token"] == token).any(axis=1))
    assert 7 in want
    assert win.atlas.panel.listed_neurons() == want.tolist()
    assert np.array_equal(np.flatnonzero(win.brain.emphasis), want)
    assert win.atlas.panel.search.text() == f"id:{token}"


def test_search_and_filter_share_the_highlight(window, qtbot, app_checkpoint, app_atlas):
    win = window
    _open(win, qtbot, app_atlas)
    superclass = app_checkpoint.anatomy.superclass[0]
    win.state.set_filter(superclass)
    by_class = win.brain.emphasis.copy()
    assert by_class[0]
    found = win.atlas.find("dog")
    assert np.array_equal(np.flatnonzero(win.brain.emphasis), found.neurons)
    win.atlas.panel.clear_button.click()
    assert np.array_equal(win.brain.emphasis, by_class)           # the filter is back
    win.atlas.panel.search.setText("   ")
    win.atlas.panel.find_button.click()
    assert "type a token or word" in win.atlas.panel.result.text()
    # A token no neuron is driven by: said so, and nothing stays dimmed by the search.
    stored = _stored(app_atlas)
    unused = next(t for t in range(win.tokenizer.vocab_size) if t not in stored["driving_token"])
    found = win.atlas.find(unused)
    assert found.neurons.size == 0 and "no neuron has" in win.atlas.panel.result.text()
    assert np.array_equal(win.brain.emphasis, by_class)


def test_an_atlas_of_another_model_is_refused_and_the_open_one_stays(qtbot, app_checkpoint,
                                                                     app_atlas, tmp_path):
    win = make_window(qtbot, app_checkpoint, tmp_path)
    _open(win, qtbot, app_atlas)
    other = make_app_checkpoint(tmp_path / "other", seed=3, name="other-brain")
    win.set_checkpoint(other)
    # A new model closes the atlas of the old one.
    qtbot.waitUntil(lambda: win.atlas.atlas is None, timeout=3000)
    assert "previous model" in win.atlas.panel.status.text()
    assert not win.inspector.atlas_card.isVisible()
    win.atlas.open(app_atlas)
    qtbot.waitUntil(lambda: "cannot open the atlas" in win.last_error, timeout=10_000)
    assert "another model" in win.last_error and "flyviz atlas" in win.last_error
    assert win.atlas.atlas is None and "\n" not in win.last_error
    # A damaged atlas is refused in one line, and does not close an open one.
    win.set_checkpoint(app_checkpoint)
    _open(win, qtbot, app_atlas)
    broken = tmp_path / "broken.atlas"
    broken.mkdir()
    (broken / ".zattrs").write_text("{not json")
    win.last_error = ""
    win.atlas.open(broken)
    qtbot.waitUntil(lambda: bool(win.last_error), timeout=10_000)
    assert "broken.atlas" in win.last_error
    assert win.atlas.atlas is not None and win.atlas.atlas.path == app_atlas
    win.close()


def test_the_demo_brain_opens_its_own_atlas(qtbot, tmp_path, monkeypatch, demo_cache):
    from PySide6.QtCore import QSettings

    from flyviz.app.atlas.atlas_panel import demo_atlas_path
    from flyviz.app.window.main_window import MainWindow

    if demo_atlas_path() is None:
        pytest.skip("this installation has no demo atlas")
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    win = MainWindow(model_spec="demo",
                     settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.atlas.atlas is not None or bool(win.last_error), timeout=60_000)
    assert win.atlas.atlas is not None and win.atlas.atlas.path == demo_atlas_path()
    win.select_neuron(123)
    card = win.inspector.atlas_card
    qtbot.waitUntil(lambda: card.card is not None, timeout=3000)
    assert card.card.neuron == 123 and len(card.card.top_contexts) == 10
    assert card.card.top_contexts[0].text[:20] in html.unescape(card.contexts.text())
    # The shipped atlas keeps its corpus's principal axes: the Trajectory dock offers them.
    enabled, _why = win.features["trajectory"].panel.atlas_axes_offered()
    assert win.atlas.atlas.has_principal_axes and enabled
    win.close()


def test_gui_refuses_a_missing_or_damaged_atlas_before_the_window(capsys, tmp_path):
    from flyviz.cli import main

    assert main(["gui", "--atlas", str(tmp_path / "none.atlas")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flyviz: error:") and "does not exist" in err and "\n" not in err
    (tmp_path / "bad.atlas").mkdir()
    (tmp_path / "bad.atlas" / ".zattrs").write_text("{}")
    assert main(["gui", "--atlas", str(tmp_path / "bad.atlas")]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.atlas" in err and "\n" not in err


def test_highlights_show_the_newest_mask_and_drop_stale_ones():
    from flyviz.viewer.highlight import Highlights

    shown = []
    size = [5]
    marks = Highlights(shown.append, lambda: size[0])
    marks.set("filter", np.array([1, 1, 0, 0, 0], bool))
    marks.set_neurons("find", [4])
    assert marks.shown == "find" and np.flatnonzero(shown[-1]).tolist() == [4]
    marks.set("filter", np.array([0, 0, 1, 0, 0], bool))          # set again: newest
    assert np.flatnonzero(shown[-1]).tolist() == [2]
    marks.set("filter", None)
    assert np.flatnonzero(shown[-1]).tolist() == [4]
    size[0] = 7                                                   # another model
    marks.set("other", None)
    assert shown[-1] is None and marks.shown is None
