"""EGL movie frames and Qt's OpenGL views take turns on one thread, as in a notebook or the app.

With libglvnd a thread has one current OpenGL context whatever API made it:
while a Qt view's (GLX) context is current, EGL cannot make its own current
("Could not make the context current"), and an EGL context left current
stops Qt's next paint. The offscreen renderer releases both around its work.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")
pytest.importorskip("vispy")

from flyviz.app._testing import make_app_checkpoint  # noqa: E402
from gl_skip import offscreen_gl_or_skip  # noqa: E402

pytestmark = pytest.mark.gui


def _lit(rgb: np.ndarray) -> int:
    """Pixels clearly brighter than the dark background."""
    return int((rgb[..., :3].astype(int).max(axis=-1) > 60).sum())


def _widget_pixels(view) -> np.ndarray:
    """What Qt paints for the view (its own paint path, its own context)."""
    from PySide6.QtGui import QImage

    image = view.canvas.native.grabFramebuffer().convertToFormat(QImage.Format.Format_RGBA8888)
    buffer = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
    return buffer.reshape(image.height(), image.bytesPerLine() // 4, 4)[:, :image.width()]


def test_egl_frames_and_a_qt_view_alternate_on_one_thread(qtbot, tmp_path):
    from flyviz.app.brain.brain_view import BrainView
    from flyviz.render.offscreen import FrameRenderer, offscreen_app

    with offscreen_gl_or_skip():
        egl, _ = offscreen_app(backend="egl")  # before any Qt context is current
    checkpoint = make_app_checkpoint(tmp_path / "model")
    anatomy, n = checkpoint.anatomy, checkpoint.config.neurons
    state = np.full(n, 0.9, np.float32)
    view = BrainView()
    qtbot.addWidget(view)
    view.resize(320, 240)
    view.show()
    qtbot.waitExposed(view)
    view.set_anatomy(anatomy, n)
    view.set_target(state)
    view.snap()
    assert _lit(_widget_pixels(view)) > 50  # Qt painted: its context is now current

    for _ in range(2):
        with FrameRenderer(anatomy.positions_um(), anatomy.valid, (160, 120), overlays=False,
                           app=egl) as renderer:
            frame = renderer.render_state(state)
        assert _lit(frame) > 50
        view.set_target(-state)
        view.snap()
        assert _lit(_widget_pixels(view)) > 50
        assert _lit(view.render_image()) > 50
