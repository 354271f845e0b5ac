"""Every use of vispy's private API, in one place, for the vispy versions it was written for.

flyviz needs eight things vispy does not offer publicly:

* a view's clipping rectangle computed now (:func:`update_view_clipper`): vispy
  computes it when the view moves, not when a Qt canvas's framebuffer transform
  settles, which left a 1x1 pixel rectangle (movies without a brain);
* a font's glyph advances (:func:`glyph_advance`), to wrap overlay text before drawing it;
* the EGL display of vispy's EGL backend (:func:`release_egl_context`), to leave no
  EGL context current on a thread that Qt draws on next;
* the rectangle a view clips its scene to (:func:`scene_clip_bounds`), and a
  draw event without the scene's drawing (:func:`run_draw_handlers`), for the
  cloud painted on the CPU;
* the Qt module vispy's Qt backend uses (:func:`vispy_qt_core`), to show a hidden
  canvas off screen with the same binding.
* a node shown or hidden without asking for a frame (:func:`set_visible_quietly`), for
  the frame the raster canvas is drawing (:mod:`flyviz.app.brain.raster_canvas`);
* a Qt canvas's repaint requests sent elsewhere (:func:`redirect_repaint`), to the
  canvas that draws its frames off screen.

Each relies on names vispy may rename in any release. :data:`TESTED_VISPY`
lists the versions these were written and checked against;
``tests/testvispy_compat.py`` fails on any other version, so an upgrade
is a conscious step: check each function here against the new vispy, then
add its version.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["TESTED_VISPY", "glyph_advance", "is_tested_vispy", "redirect_repaint",
           "release_egl_context", "run_draw_handlers", "scene_clip_bounds",
           "set_visible_quietly", "update_view_clipper", "vispy_qt_core"]

#: The vispy ``major.minor`` versions whose private names are used here as they are.
TESTED_VISPY = ("0.14", "0.15", "0.16", "0.17")


def is_tested_vispy(version: str | None = None) -> bool:
    """True when vispy ``version`` (default: the installed one) is one of :data:`TESTED_VISPY`."""
    if version is None:
        import vispy

        version = str(vispy.__version__)
    return ".".join(version.split(".")[:2]) in TESTED_VISPY


def update_view_clipper(view: Any) -> None:
    """Compute a ``ViewBox``'s clipping rectangle in framebuffer pixels now."""
    view._update_scene_clipper()
    view._update_clipper()


def scene_clip_bounds(node: Any) -> tuple[float, float, float, float] | None:
    """The rectangle a view clips ``node``'s fragments to: ``(left, right, top, bottom)``
    in framebuffer pixels (rows counted from the top), or None when nothing clips it.

    A ``ViewBox`` clips its scene to its inner rectangle (inside its border, which
    is there even when not drawn) with a fragment filter; the CPU painter of the
    cloud (:mod:`flyviz.render.splat`) clips to the same pixels.
    """
    parent = node.parent
    while parent is not None:
        clipper = getattr(parent, "_clipper", None)
        if clipper is not None and getattr(parent, "clip_children", False):
            b = clipper.bounds
            return (float(b.left), float(b.right), float(b.bottom), float(b.top))
        parent = parent.parent
    return None


def run_draw_handlers(canvas: Any) -> None:
    """Emit a ``SceneCanvas``'s draw event without drawing its scene.

    The handlers connected to the event run (a view that eases its values
    there); the scene is not drawn, and the canvas takes update requests again
    as after a draw (vispy drops them while one is pending).
    """
    with canvas.events.draw.blocker(canvas.on_draw):
        canvas.events.draw(region=None)
    canvas._update_pending = False


def set_visible_quietly(node: Any, shown: bool) -> None:
    """Show or hide a scene ``node`` without the redraw request its ``visible`` setter
    makes: for a frame being drawn now, whose redraw that request would be."""
    node._visible = bool(shown)


def redirect_repaint(native: Any, request: Callable[[], None]) -> None:
    """Call ``request()`` where vispy asks the Qt widget ``native`` of a canvas to repaint
    (its Qt backend calls the widget's ``_vispy_update``)."""
    native._vispy_update = request


def text_font(text_visual: Any) -> Any:
    """The font object of a ``TextVisual`` (its glyph table)."""
    return text_visual._font


def glyph_advance(font: Any, ch: str) -> float:
    """The advance of glyph ``ch`` in ems of ``font`` (vispy stores advances at its
    low-resolution size, an em of 64 units)."""
    glyph = font[ch]
    return float(glyph["advance"]) / font.ratio / float(font._lowres_size)


def release_egl_context() -> None:
    """Make no EGL context current on this thread (vispy's EGL canvases never release theirs)."""
    module = sys.modules.get("vispy.app.backends._egl")
    display = None if module is None else getattr(module, "_EGL_DISPLAY", None)
    if module is None or display is None:
        return
    egl = module.egl
    egl.eglMakeCurrent(display, egl.EGL_NO_SURFACE, egl.EGL_NO_SURFACE, egl.EGL_NO_CONTEXT)


def vispy_qt_core() -> Any:
    """The ``QtCore`` module of the Qt binding vispy's Qt backend uses."""
    from vispy.app.backends._qt import QtCore

    return QtCore
