"""Which OpenGL renders frames offscreen, and how it shares a thread with Qt's OpenGL.

OpenGL without a window comes from the first backend that works, in the
order of :data:`BACKENDS`: EGL with Mesa's surfaceless platform (no X server
needed), the default vispy backend (Qt, needs a display such as Xvfb), then
OSMesa. ``flyviz export --gl NAME`` (or the environment variable
``FLYVIZ_OFFSCREEN_GL``) names one backend to use instead;
:func:`offscreen_app` reports which one was chosen.

One thread can have only one current OpenGL context, whatever API it comes
from: with libglvnd (every current Linux), ``eglMakeCurrent`` fails with
``EGL_BAD_ACCESS`` while a GLX context (any Qt OpenGL widget's, left current
after it painted) is current on the thread, and the other way round. So
every use of an EGL canvas is bracketed by :func:`egl_current`: it releases
a Qt context that is current first, and releases the EGL context after, so
Qt's views keep working and later exports in the same process do too.

vispy is imported on first use: the command line reads the names here
(``--gl``'s choices and help) without loading it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flyviz.model.errors import ExportError

log = logging.getLogger(__name__)

#: Offscreen OpenGL backends, tried in this order.
BACKENDS = ("egl", "default", "osmesa")

#: Environment variable naming the backend (what ``--gl`` sets).
GL_ENVIRONMENT = "FLYVIZ_OFFSCREEN_GL"

#: ``--gl`` help, shared by every command that renders offscreen.
GL_HELP = ("OpenGL for rendering frames without a window: egl (no display needed), default "
           "(vispy's usual backend, Qt, needs a display such as xvfb-run), osmesa, or auto (the "
           f"first that works, in that order; default; {GL_ENVIRONMENT} sets it too), "
           "e.g. --gl default")

#: How the error for "no offscreen OpenGL works here" begins (what callers, and the tests
#: that skip on a machine without one, recognise it by).
NO_OFFSCREEN_GL = "no OpenGL available for offscreen rendering"

#: Renderer names of OpenGL implementations that draw on the CPU.
SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "swiftshader", "software rasterizer",
                      "basic render")

_apps: dict[str, Any] = {}

#: The screen DPI vispy reported, per X display (``$DISPLAY``): see :func:`screen_dpi`.
_screen_dpis: dict[str | None, float] = {}


def screen_dpi() -> float:
    """The screen's DPI as vispy gives it to a canvas made without one, asked once per
    display (``$DISPLAY``) in a process.

    vispy asks for it at every canvas it makes by running ``xdpyinfo`` (or ``xrandr``) as a
    child process: each brain view of each window, each probe, started a program and
    waited for it (tens of ms, more from a process holding a large brain, which the fork
    copies the page tables of). The X server's resolution does not change while it runs, so
    the first answer serves every later canvas on the same display. A DPI set in vispy's
    configuration (``vispy.config["dpi"]``) is taken as vispy would take it.
    """
    from vispy import config

    if config["dpi"] is not None:       # the user's vispy configuration names it
        return float(config["dpi"])
    display = os.environ.get("DISPLAY")
    dpi = _screen_dpis.get(display)
    if dpi is None:
        from vispy.util.dpi import get_dpi

        dpi = _screen_dpis[display] = float(get_dpi(raise_error=False))
    return dpi


def current_renderer() -> str:
    """The ``GL_RENDERER`` string of the OpenGL context current now (``""`` if none)."""
    try:
        from vispy.gloo import gl

        return str(gl.glGetParameter(gl.GL_RENDERER) or "")
    except Exception:  # noqa: BLE001 - a driver that refuses the query must not stop the app
        log.warning("cannot ask OpenGL which renderer draws", exc_info=True)
        return ""


def is_software_renderer(renderer: str) -> bool:
    """True when ``renderer`` names an OpenGL that draws on the CPU."""
    name = renderer.lower()
    return any(word in name for word in SOFTWARE_RENDERERS)


def _make_app(name: str) -> Any:
    import vispy.app

    if name == "egl":
        # Surfaceless: an EGL context with no window system at all.
        os.environ.setdefault("EGL_PLATFORM", "surfaceless")
        return vispy.app.Application("egl")
    if name == "default":
        if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                     or os.environ.get("WAYLAND_DISPLAY")):
            raise RuntimeError("no display")
        return vispy.app.use_app()
    if name == "osmesa":
        return vispy.app.Application("osmesa")
    raise ValueError(f"unknown backend {name!r}")


def is_egl(app: Any) -> bool:
    """True when ``app`` is vispy's EGL application."""
    return getattr(app, "backend_name", "").lower() == "egl"


def release_egl(app: Any) -> None:
    """Leave no EGL context current on this thread.

    vispy's EGL canvases never release their context, not even when closed;
    a context left current keeps GL calls pointed at EGL and stops any Qt
    OpenGL widget the same thread draws later (the app, or tests) from
    making its own context current.
    """
    if not is_egl(app):
        return
    from flyviz.render.vispy_compat import release_egl_context

    release_egl_context()


def release_qt_context() -> None:
    """Release the Qt OpenGL context current on this thread, if any.

    A Qt OpenGL widget leaves its (GLX) context current after it painted;
    while it is, this thread cannot make an EGL context current. Qt makes its
    context current again itself before its next paint.
    """
    gui = sys.modules.get("PySide6.QtGui")
    if gui is None:
        return
    context = gui.QOpenGLContext.currentContext()
    if context is not None:
        context.doneCurrent()


@contextmanager
def egl_current(app: Any) -> Iterator[None]:
    """Bracket OpenGL work on a canvas of ``app``: the thread is EGL's only inside.

    Inside, vispy calls OpenGL through its own ``gl2`` functions (see
    :func:`_vispy_gl_functions`). For other backends nothing is done: their contexts are the toolkit's own.
    """
    if not is_egl(app):
        yield
        return
    release_qt_context()
    try:
        with _vispy_gl_functions():
            yield
    finally:
        release_egl(app)


@contextmanager
def _vispy_gl_functions() -> Iterator[None]:
    """Call OpenGL through vispy's own ctypes functions (``gl2``) inside.

    Importing napari switches vispy, process-wide, to PyOpenGL's functions
    (``gl+``, for its instanced markers); PyOpenGL looks them up through GLX
    unless ``PYOPENGL_PLATFORM=egl`` was set before it was imported, so every
    call on an EGL context then fails ("Attempt to call an undefined
    function glGenFramebuffers"). vispy looks the functions up at each call,
    so switching for the EGL work and back afterwards leaves napari's own
    drawing as it was.
    """
    from vispy.gloo import gl

    previous = getattr(gl.current_backend, "__name__", "").rsplit(".", 1)[-1]
    if previous in ("", "gl2"):
        yield
        return
    gl.use_gl("gl2")
    try:
        yield
    finally:
        gl.use_gl({"glplus": "gl+"}.get(previous, previous))


def initialise_hidden_qt_canvas(canvas: Any) -> None:
    """Give a hidden Qt canvas an OpenGL context of its own.

    A QOpenGLWidget that was never shown has no context: its ``makeCurrent``
    does nothing and GL calls land in whichever context is current, so its
    draws fail ("Shader compilation error") once the app's brain view exists.
    Showing it with ``WA_DontShowOnScreen`` creates the context without
    putting a window on screen.
    """
    native = getattr(canvas, "native", None)
    if native is None or not hasattr(native, "setAttribute"):
        return  # EGL or OSMesa: the canvas has its own context already
    from flyviz.render.vispy_compat import vispy_qt_core

    QtCore = vispy_qt_core()
    native.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
    native.show()


def _probe(app: Any) -> None:
    from vispy import scene

    with egl_current(app):
        canvas = scene.SceneCanvas(size=(8, 8), show=False, app=app, dpi=screen_dpi())
        try:
            image = canvas.render(alpha=False)
            if image.shape[:2] != (8, 8):
                raise RuntimeError(f"rendered {image.shape[1]}x{image.shape[0]} instead of 8x8")
        finally:
            canvas.close()


def requested_backend(name: str | None = None) -> str | None:
    """The backend asked for: ``name`` (from ``--gl``), else ``FLYVIZ_OFFSCREEN_GL``; None for auto.

    Raises
    ------
    ExportError
        For a name that is not one of :data:`BACKENDS` or ``"auto"``.
    """
    source = "--gl"
    if name is None or name == "auto":
        name, source = os.environ.get(GL_ENVIRONMENT, "").strip().lower(), GL_ENVIRONMENT
        if name == "auto":
            name = ""
    if not name:
        return None
    if name not in BACKENDS:
        shown = f"OpenGL {name!r}" if source == "--gl" else f"{GL_ENVIRONMENT}={name!r}"
        raise ExportError(f"{shown}: the offscreen OpenGL must be one of auto, "
                          f"{', '.join(BACKENDS)}")
    return name


def offscreen_app(order: tuple[str, ...] = BACKENDS,
                  backend: str | None = None) -> tuple[Any, str]:
    """A vispy application that can render offscreen, and the name of its backend.

    Parameters
    ----------
    order
        Backends to try: ``"egl"``, ``"default"`` (vispy's usual choice,
        normally Qt) and ``"osmesa"``. The first that renders a test frame
        wins and is remembered for the process.
    backend
        One backend to use instead (``--gl``); ``None`` or ``"auto"`` leaves
        the choice to the environment variable ``FLYVIZ_OFFSCREEN_GL``, then
        to ``order``.

    Raises
    ------
    ExportError
        When none works, naming each backend's problem, or for an unknown name.
    """
    forced = requested_backend(backend)
    if forced:
        order = (forced,)
    problems = []
    for name in order:
        if name in _apps:
            return _apps[name], _apps[name].backend_name
        try:
            app = _make_app(name)
            _probe(app)
        except (RuntimeError, OSError, ImportError, ValueError) as exc:
            # vispy reports a backend it cannot load or use as one of these; try the next.
            problems.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        _apps[name] = app
        return app, app.backend_name
    hint = ("install Mesa's EGL (libegl1) or run under a display, e.g. xvfb-run" if not forced
            else "try --gl auto")
    raise ExportError(f"{NO_OFFSCREEN_GL} (" + "; ".join(problems) + f"); {hint}")
