"""flyviz's uses of vispy's private API still hold: on a vispy it was not written for, fail.

:mod:`flyviz.render.vispy_compat` is the only module that touches vispy's
private names. A vispy upgrade must be checked against it by hand, then
added to :data:`~flyviz.render.vispy_compat.TESTED_VISPY`; until then this
test fails loudly instead of the app drawing a movie without a brain.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

vispy = pytest.importorskip("vispy")

from flyviz.render import vispy_compat  # noqa: E402


def test_the_installed_vispy_is_one_the_compat_module_was_written_for():
    assert vispy_compat.is_tested_vispy(), (
        f"vispy {vispy.__version__} is not one flyviz.render.vispy_compat was checked against "
        f"({', '.join(vispy_compat.TESTED_VISPY)}): check every function there against this "
        "vispy, then add its version to TESTED_VISPY")
    assert not vispy_compat.is_tested_vispy("0.13.0")
    assert not vispy_compat.is_tested_vispy("1.0.0")
    assert vispy_compat.is_tested_vispy(vispy_compat.TESTED_VISPY[-1] + ".2")


def test_the_private_names_it_uses_exist_in_this_vispy():
    from vispy.scene.widgets import ViewBox
    from vispy.visuals import TextVisual

    assert callable(ViewBox._update_scene_clipper) and callable(ViewBox._update_clipper)
    text = TextVisual("flyviz", font_size=12, face="OpenSans")
    font = vispy_compat.text_font(text)
    assert font is not None and float(font._lowres_size) > 0 and font.ratio > 0
    assert 0.2 < vispy_compat.glyph_advance(font, "m") < 2.0    # about an em wide
    # A scene node hidden and shown again quietly says so, and asks for no frame.
    from vispy.scene import Node

    node = Node()
    asked: list[object] = []
    node.events.update.connect(asked.append)
    vispy_compat.set_visible_quietly(node, False)
    assert node.visible is False
    vispy_compat.set_visible_quietly(node, True)
    assert node.visible is True and asked == []


@pytest.mark.parametrize("backend, names", [("_egl", ("_EGL_DISPLAY", "egl.eglMakeCurrent")),
                                            ("_qt", ("QtCore", "_vispy_update"))])
def test_the_backend_modules_still_define_what_it_reads(backend, names):
    spec = importlib.util.find_spec(f"vispy.app.backends.{backend}")
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text(encoding="utf-8")
    for name in names:
        assert name.split(".")[-1] in source, f"vispy.app.backends.{backend} has no {name}"
