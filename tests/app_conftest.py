"""Qt fixtures shared by the app tests (a plugin of tests/conftest.py; the test modules
import its helper functions, never its fixtures).

``app_checkpoint`` is a small random model with anatomy (built once per test
module); ``window`` is a shown :class:`MainWindow` on it with settings in a
temporary file, so tests never read or write the user's settings.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from flyviz.app._testing import make_app_checkpoint  # noqa: E402
from flyviz.model.engine import Engine  # noqa: E402
from flyviz.model.tokenizer import FlyTokenizer  # noqa: E402
from flyviz.record.run import GenerationSettings, iter_frames  # noqa: E402


def focus_by_tab(qtbot, widget: QWidget) -> None:
    """Give ``widget`` the keyboard as Tab would (its focus mark shown), once it has it."""
    widget.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(widget.hasFocus)


def tab_round(qtbot, win) -> list[QWidget]:
    """The widgets Tab reaches from ``win``'s brain view, in order, once round (the brain
    view is clicked to, not tabbed to: the round starts at the first stop after it)."""
    focus_by_tab(qtbot, win.brain)
    reached: list[QWidget] = []
    for _ in range(300):
        widget = QApplication.focusWidget()
        qtbot.keyClick(widget, Qt.Key.Key_Tab)
        qtbot.waitUntil(lambda was=widget: QApplication.focusWidget() is not was)
        now = QApplication.focusWidget()
        if reached and now is reached[0]:
            return reached
        reached.append(now)
    raise AssertionError("Tab never came round")


@pytest.fixture(scope="module")
def app_checkpoint(tmp_path_factory):
    """A 400-neuron model with anatomy and a tokenizer."""
    return make_app_checkpoint(tmp_path_factory.mktemp("app-model"))


@pytest.fixture
def dark_theme(qapp):
    """The app's own theme (as ``flyviz gui`` sets it), put back as it was afterwards."""
    from flyviz.app.base.theme import dark_theme_applied

    with dark_theme_applied(qapp):
        yield


def make_window(qtbot, checkpoint, tmp_path, name: str = "settings.ini"):
    """A shown main window on ``checkpoint`` with settings kept under ``tmp_path``."""
    from flyviz.app.window.main_window import MainWindow

    settings = QSettings(str(tmp_path / name), QSettings.Format.IniFormat)
    win = MainWindow(model_spec=None, settings=settings)
    qtbot.addWidget(win)
    win.resize(1200, 800)
    win.show()
    qtbot.waitExposed(win)
    # Window shortcuts (Space, arrows) only fire in the active window.
    win.activateWindow()
    qtbot.waitUntil(lambda: win.isActiveWindow(), timeout=3000)
    if checkpoint is not None:
        win.set_checkpoint(checkpoint)
    return win


@pytest.fixture
def window(qtbot, app_checkpoint, tmp_path):
    """A main window on ``app_checkpoint``; closed (threads joined) after the test."""
    win = make_window(qtbot, app_checkpoint, tmp_path)
    yield win
    win.close()


def expected_frames(checkpoint, prompt: str, settings: GenerationSettings):
    """The frames the library itself produces for this run (the test oracle)."""
    engine = Engine(checkpoint)
    try:
        return list(iter_frames(engine, FlyTokenizer(checkpoint.tokenizer_path), prompt, settings))
    finally:
        engine.close()


def flyviz_threads(ignore: "set[threading.Thread] | frozenset[threading.Thread]" = frozenset()
                   ) -> list[str]:
    """Names of live threads flyviz started (engine helpers, loaders), but those in
    ``ignore`` (what :func:`live_flyviz_threads` gave before the test: an engine an earlier
    test of the same process left for the collector is not this test's)."""
    return [t.name for t in threading.enumerate()
            if t.name.startswith("flyviz") and t not in ignore]


def live_flyviz_threads() -> frozenset[threading.Thread]:
    """The flyviz threads alive now (see :func:`flyviz_threads`)."""
    return frozenset(t for t in threading.enumerate() if t.name.startswith("flyviz"))


def lit_neurons_far_apart(positions_xy: np.ndarray, visible: np.ndarray, count: int,
                          min_gap: float, size: tuple[float, float], border: float = 40.0):
    """Visible neurons whose screen positions are inside the canvas and far from every other."""
    width, height = size
    chosen: list[int] = []
    idx = np.flatnonzero(visible)
    xy = positions_xy[idx]
    inside = ((xy[:, 0] > border) & (xy[:, 0] < width - border - 60)   # clear of the colourbar
              & (xy[:, 1] > border) & (xy[:, 1] < height - border))
    for k in np.flatnonzero(inside):
        d = np.hypot(*(xy - xy[k]).T)
        d[k] = np.inf
        if d.min() < min_gap:
            continue
        if all(np.hypot(*(xy[k] - positions_xy[c])) > 3 * min_gap for c in chosen):
            chosen.append(int(idx[k]))
        if len(chosen) == count:
            break
    return chosen


def brightness(rgba: np.ndarray) -> np.ndarray:
    """Per-pixel brightness (the largest of R, G, B) of an RGBA image."""
    return rgba[..., :3].astype(np.float32).max(axis=-1)


def disc_max(lum: np.ndarray, xy, radius: int = 4) -> float:
    """The brightest pixel within ``radius`` of ``xy``."""
    x, y = int(round(xy[0])), int(round(xy[1]))
    return float(lum[max(0, y - radius):y + radius + 1, max(0, x - radius):x + radius + 1].max())


def screen_positions(win) -> np.ndarray:
    """Every neuron's position on the brain canvas, in physical pixels."""
    from flyviz.render.picking import project_points

    ratio = win.brain.canvas.native.devicePixelRatioF()
    xy, _, _ = project_points(win.brain.positions, win.brain.canvas_transform())
    return xy * ratio


def fixed_display(win) -> None:
    """Colours on a fixed scale of 1 (|x|), no easing: what is drawn is the frame's state."""
    win.state.display.smoothing_s = 0.0
    win.state.display.auto_scale = False
    win.state.display.limit = 1.0
    win.state.display.mode = "abs"


def isolated_neurons(win, candidates: np.ndarray, count: int, min_gap: float = 14.0) -> list[int]:
    """Up to ``count`` of ``candidates`` drawn inside the canvas and far from every neuron."""
    ratio = win.brain.canvas.native.devicePixelRatioF()
    visible = win.brain.visible.copy()
    keep = np.zeros_like(visible)
    keep[np.asarray(candidates, dtype=np.int64)] = True
    xy = screen_positions(win) / ratio
    # Far from every drawn neuron, not only from the other candidates.
    chosen = lit_neurons_far_apart(xy, visible, int(visible.sum()), min_gap,
                                   tuple(win.brain.canvas.size))
    return [n for n in chosen if keep[n]][:count]


def plain_display(win) -> None:
    """No easing, a fixed gain of 1: a neuron's disc centre is exactly its colour."""
    win.state.display.smoothing_s = 0.0
    win.state.display.point_size = 4.0
    win.brain.set_gain(1.0)


def drawn(win, qtbot) -> np.ndarray:
    """The brain view's image once the shown frame is drawn and settled."""
    qtbot.waitUntil(lambda: win.display.brain_at is not None and not win.brain.animating,
                    timeout=3000)
    return win.brain.render_image()


def settled_render(qtbot, win) -> np.ndarray:
    """The brain view drawn once it has eased all the way to what it shows (each draw eases
    by the time since the last, so a picture taken partway depends on how busy the machine
    is)."""
    last: list[np.ndarray] = []

    def settled() -> bool:
        last[:] = [win.brain.canvas.render()]       # only the latest frame is kept
        return not win.brain.animating

    qtbot.waitUntil(settled, timeout=10_000)
    return last[0]


def shown_picture(win, qtbot, rec) -> np.ndarray:
    """The brain view's RGB pixels (int64) of ``rec``'s first frame, shown again without a
    lifecycle event (:meth:`Session.replace` with no cause)."""
    win.session.replace(rec, cause=None)
    qtbot.waitUntil(lambda: win.display.showing(0), timeout=3000)
    return drawn(win, qtbot)[..., :3].astype(np.int64)


def show_state(view, qtbot, state: np.ndarray, timeout: int = 5000) -> None:
    """Hand a brain view a state and wait until a frame of it is on screen."""
    before = len(view.draw_times)
    view.set_target(state)
    view.tick()
    screen = view.raster_screen
    # Drawn, eased all the way (no easing in these views: one frame) and, on the software
    # path, the frame shown is the one drawn.
    qtbot.waitUntil(lambda: len(view.draw_times) > before and not view.animating
                    and (screen is None or not screen.stale), timeout=timeout)


def qimage_rgb(image) -> np.ndarray:
    """``(H, W, 3)`` uint8 RGB of a QImage."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_RGBA8888)
    buffer = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
    rows = buffer.reshape(image.height(), image.bytesPerLine() // 4, 4)
    return rows[:, :image.width(), :3].copy()


def colour_at(rgb: np.ndarray, xy: tuple[float, float], ratio: float) -> np.ndarray:
    """The mean RGB of the 3x3 pixels at view point ``xy`` scaled by ``ratio`` (device pixels
    per view pixel)."""
    x, y = int(round(xy[0] * ratio)), int(round(xy[1] * ratio))
    return rgb[y - 1:y + 2, x - 1:x + 2].reshape(-1, 3).astype(int).mean(axis=0)


def expected_colour(colormap: str, value: float, low: float, high: float) -> np.ndarray:
    """The RGB (0-255) of a lone neuron's disc centre of ``value`` on ``colormap`` over
    ``[low, high]`` at gain 1: the table's colour at its display brightness, added to the
    background (additive blending)."""
    from flyviz.render.colormaps import lut
    from flyviz.render.style import BACKGROUND

    coord = float(np.clip((value - low) / (high - low), 0.0, 1.0))
    entry = lut(colormap)[int(round(coord * 255))]
    return np.clip(255.0 * (np.array(BACKGROUND[:3]) + entry[:3] * entry[3]), 0, 255)


def centre_colour(image: np.ndarray, xy, radius: int = 2) -> np.ndarray:
    """The brightest pixel's RGB within ``radius`` of ``xy`` (the disc's centre)."""
    x, y = int(round(xy[0])), int(round(xy[1]))
    patch = image[max(0, y - radius):y + radius + 1, max(0, x - radius):x + radius + 1, :3]
    flat = patch.reshape(-1, 3).astype(np.float64)
    # Brightest by the largest channel, then by the others: where that channel saturates
    # (a full activation's red) over the whole disc, its centre is the one the rest agree on.
    return flat[np.lexsort((flat.sum(axis=1), flat.max(axis=1)))[-1]]


def assert_only_lit(win, before: np.ndarray, members: np.ndarray, count: int = 2) -> None:
    """Lone neurons of ``members`` keep their brightness in the brain view now (against the
    brightness ``before``) and lone others are dimmed to under half (a highlight)."""
    after = brightness(win.brain.render_image())
    xy = screen_positions(win)
    n = win.brain.positions.shape[0]
    lit = isolated_neurons(win, members, count)
    dark = isolated_neurons(win, np.setdiff1d(np.arange(n), members), count)
    assert lit and dark, "the test layout has too few isolated neurons"
    for neuron in lit:
        assert disc_max(after, xy[neuron]) >= 0.9 * disc_max(before, xy[neuron])
    for neuron in dark:
        assert disc_max(after, xy[neuron]) < 0.5 * disc_max(before, xy[neuron])


def mixed_recording(n: int, seed: int, model_name: str):
    """Three frames of ``n`` neurons with a third of them active, of both signs (the
    host-agreement tests' recording)."""
    from flyviz.app._testing import make_frame
    from flyviz.record.recording import Recording

    rng = np.random.default_rng(seed)
    rec = Recording(n, {"model_name": model_name})
    for i in range(3):
        state = np.zeros(n, np.float32)
        lit = rng.choice(n, size=n // 3, replace=False)
        state[lit] = rng.uniform(0.3, 1.0, lit.size) * rng.choice([-1.0, 1.0], lit.size)
        rec.append(make_frame(i, state))
    return rec


def lit_pixels(rgb: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Pixels clearly off the background colour."""
    return np.abs(rgb[..., :3].astype(int) - background).max(axis=-1) > 40


def lit_count(image: np.ndarray) -> int:
    """How many of the brain view's pixels are clearly off its background colour."""
    from flyviz.render.style import BACKGROUND

    return int(lit_pixels(image, np.round(np.asarray(BACKGROUND[:3]) * 255).astype(int)).sum())


def lit_iou(a: np.ndarray, b: np.ndarray, background: np.ndarray) -> float:
    """Intersection over union of two pictures' :func:`lit_pixels`."""
    lit_a, lit_b = lit_pixels(a, background), lit_pixels(b, background)
    return float((lit_a & lit_b).sum() / (lit_a | lit_b).sum())
