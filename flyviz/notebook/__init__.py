"""A live 3-D view of the brain in a Jupyter notebook cell: :class:`BrainWidget`.

Installed with ``pip install 'flyviz[notebook]'`` (jupyter_rfb and ipywidgets)::

    import flyviz
    from flyviz.notebook import BrainWidget

    model = flyviz.load("demo")
    recording = flyviz.run(model, "Once upon a time", max_new_tokens=20)
    BrainWidget(recording, model)                      # drag to orbit, wheel to zoom

    BrainWidget.live(model, "there was a little girl")  # fills in as the model runs

The frames come from flyviz's own offscreen renderer
(:class:`~flyviz.render.offscreen.FrameRenderer`, EGL on a headless server,
as movies are made), sent to the browser by jupyter_rfb's
``RemoteFrameBuffer``; so the cell shows what the app and a movie show. Under
it: a token slider, the colour quantity, and the text at the token.

What is drawn is the widget's :attr:`BrainWidget.state`, a
:class:`~flyviz.viewer.state.ViewerState` (the token, the colour layer, the
highlight, the selection, the camera), rendered by
:meth:`FrameRenderer.for_state <flyviz.render.offscreen.FrameRenderer.for_state>`
as the window's stills and movies are; :class:`flyviz.brain_source.BrainSource`
reads its quantities and text.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any

import numpy as np

from flyviz.errors import MissingDependencyError

__all__ = ["BrainWidget"]

try:
    import ipywidgets
    from jupyter_rfb import RemoteFrameBuffer
except ImportError as _missing:  # pragma: no cover - exercised by a subprocess test
    _MISSING: ImportError | None = _missing
    RemoteFrameBuffer = object
else:
    _MISSING = None


def require_notebook() -> None:
    """Raise :class:`MissingDependencyError` naming ``pip install 'flyviz[notebook]'`` without the extra."""
    if _MISSING is not None:
        package = getattr(_MISSING, "name", None) or "jupyter_rfb"
        raise MissingDependencyError.for_feature("flyviz.notebook.BrainWidget", package, "notebook")


#: Degrees the camera turns per pixel dragged.
DEGREES_PER_PIXEL = 0.4

#: The highlight source of :meth:`BrainWidget.highlight`
#: (see :class:`~flyviz.viewer.highlight.Highlights`).
HIGHLIGHT = "query"


class BrainWidget(RemoteFrameBuffer):
    """The brain of one recording, in a notebook cell, at a chosen token.

    Parameters
    ----------
    recording
        A :class:`~flyviz.record.recording.Recording`, the path of a ``.flyrec``, or a
        :class:`~flyviz.viewer.state.ViewerState` to show as it is (the window's, a
        script's: its token, colour layer, highlight, selection and camera).
    model
        The model it was made with, loaded (its anatomy places the neurons); by default
        the one the recording names, when it loads without a download. One of another kind
        or number of neurons is refused; one of its size that is not the recording's own
        is used, and the line under the widget says how it differs.
    size
        ``(width, height)`` of the frames, in pixels, or ``"640x400"``.
    quantity
        The colour quantity, one of ``source.quantities``: the recorded state's colourings
        as its kind names them (a Fly LLM's activation, ``"signed"`` x or ``"abs"`` |x|, and
        ``"delta"`` for a comparison; a spiking brain's ``"spike_rate"`` in Hz or
        ``"spike_flash"``); default: the recorded state's first (a given state's own
        colour layer).
    gl
        The offscreen OpenGL (``"egl"``, ``"default"``, ``"osmesa"``; default: the first
        that works). Without any, one :class:`~flyviz.errors.ExportError` line says so.

    Raises
    ------
    flyviz.errors.InputError
        For a ``recording`` or ``model`` of another type (a spec such as ``"demo"``:
        ``flyviz.load("demo")`` loads it), or a bad ``size``
        (:class:`~flyviz.errors.ExportError`).
    flyviz.errors.RecordingError
        For a damaged recording, or a ``model`` of another kind or number of neurons than
        the recording's (one line).
    """

    def __init__(self, recording: Any, model: Any = None, *, size: tuple[int, int] | str = (640, 400),
                 quantity: str | None = None, gl: str | None = None, **kwargs: Any) -> None:
        require_notebook()
        from flyviz.arguments import loaded_model, shown
        from flyviz.brain_source import BrainSource
        from flyviz.errors import InputError
        from flyviz.record.recording import Recording
        from flyviz.render.offscreen import check_size, offscreen_app
        from flyviz.viewer.state import ViewerState

        # Checked first: None, 5 or a model spec failed later in a bare AttributeError.
        if not isinstance(recording, (Recording, ViewerState, str, os.PathLike)):
            raise InputError(f"BrainWidget shows a Recording, the path of a .flyrec or a "
                             f"ViewerState, not {shown(recording)}")
        loaded_model("model", model)
        super().__init__(**kwargs)
        self._widget_made = True        # what close() may close from here on
        given_state = isinstance(recording, ViewerState)
        if isinstance(recording, ViewerState):     # (tested again: mypy narrows the type)
            self.source = BrainSource.from_state(recording, recording.model_name or "run")
        elif isinstance(recording, (str, os.PathLike)):
            self.source = BrainSource.open(os.fspath(recording), model=model)
        else:
            self.source = BrainSource.of_recording(
                recording, model, "run", missing="BrainWidget(recording, model) draws its anatomy")
        #: What the widget shows: a :class:`~flyviz.viewer.state.ViewerState`.
        self.state = self.source.state
        self.size = check_size(size)
        self.css_width, self.css_height = f"{self.size[0]}px", f"{self.size[1]}px"
        self._app, _ = offscreen_app(backend=gl)
        self._lock = threading.RLock()
        self._renderer: Any = None
        self._drag: tuple[float, float] | None = None
        self._thread: threading.Thread | None = None
        #: The runs of a :meth:`live` widget (:class:`flyviz.runs.Runs`), else ``None``.
        self.runs: Any = None
        # Set when a live run ends: the renderer's brightness gain came from the frames
        # there were at its first draw, not the whole run's (a movie's).
        self._range_stale = False
        if quantity is not None or not given_state:
            # Default: the recorded state's first colouring (the kind's: "signed", or a
            # spiking brain's "spike_rate").
            self.source.show(quantity or (self.source.quantities or ("signed",))[0])
        if self.source.tokens and not given_state:
            self.state.index = self.source.tokens - 1

        self.slider = ipywidgets.IntSlider(value=self.token, min=0, max=max(self.source.tokens - 1, 0),
                                           # napari's slider's words: "bin (5 ms)" for a
                                           # run in 5 ms bins (it said "bin", of any length).
                                           description=self.source.time_axis.label,
                                           continuous_update=True)
        self.quantity_control = ipywidgets.Dropdown(options=list(self.source.quantities),
                                                    value=self.quantity, description="colour")
        self.highlight_control = ipywidgets.Text(value="", description="highlight",
                                                 placeholder="e.g. superclass:visual_projection",
                                                 continuous_update=False)
        self.text = ipywidgets.HTML(value=self._text_html())
        self.slider.observe(lambda change: self.show_token(int(change["new"])), names="value")
        self.quantity_control.observe(lambda change: self.set_quantity(str(change["new"])),
                                      names="value")
        self.highlight_control.observe(lambda change: self._highlight_typed(str(change["new"])),
                                       names="value")
        #: The widget with its controls under it (what the cell shows).
        self.ui = ipywidgets.VBox([self, ipywidgets.HBox([self.slider, self.quantity_control]),
                                   self.highlight_control, self.text])

    # ------------------------------------------------------------ showing
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.ui._repr_mimebundle_(**kwargs)

    @property
    def token(self) -> int:
        """The token shown (the state's; 0 before the first frame)."""
        return max(self.state.index, 0)

    @property
    def quantity(self) -> str:
        """The colour quantity shown (one of ``source.quantities``)."""
        return self.source.quantity

    def _text_html(self) -> str:
        import html

        note = getattr(self.source, "note", None)
        said = f"<i>{html.escape(note)}</i>" if note else ""
        return (f"<pre style='white-space:pre-wrap'>"
                f"{html.escape(self.source.token_text(self.token))}</pre>{said}")

    def show_token(self, token: int) -> None:
        """Show ``token`` (a whole number, clipped to the recording).

        Raises
        ------
        flyviz.errors.InputError
            For anything but a whole number (NaN, ``"3"`` or ``None`` failed inside NumPy,
            ``2.5`` was rounded down).
        """
        from flyviz.arguments import whole_number

        token = whole_number("token", token)
        token = min(max(token, 0), max(self.source.tokens - 1, 0))
        if self.source.tokens:
            self.state.index = token
        if self.slider.value != token:
            self.slider.value = token
        self.text.value = self._text_html()
        self.request_draw()

    def set_quantity(self, quantity: str) -> None:
        """Colour by another quantity (one of ``source.quantities``)."""
        with self._lock:
            self.source.show(quantity)
            self._close_renderer()
        if self.quantity_control.value != quantity:
            # The menu under the cell says what it shows (it kept the old name when a script
            # chose); its observer comes back here once, to what is shown already.
            self.quantity_control.value = quantity
        self.request_draw()

    def highlight(self, query: str | None) -> np.ndarray | None:
        """Keep the neurons a selection query picks lit and dim the others (``""``/``None``: all).

        ``query`` is flyviz's selection syntax (``"superclass:visual_projection"``,
        ``"type:KC*"``, ``"id:12"``...; see ``flyviz select --help``). Returns the
        neurons' indices.

        Raises
        ------
        flyviz.errors.SelectionError
            For a bad query or one that selects nothing.
        flyviz.errors.InputError
            Without the model (it knows the neurons' names).
        """
        from flyviz.errors import InputError

        if query is None or query == "":
            picked = None
        else:
            from flyviz.model.selection import parse

            # The query's own check first (0 cleared the highlight, 5 failed inside the
            # evaluation): parse refuses what is not text in one SelectionError line.
            parse(query)
            if self.state.model is None:
                raise InputError("highlighting needs the model: BrainWidget(recording, model)")
            # The kind reads the query over its model's labels: a spiking brain has no
            # checkpoint (an AttributeError under the widget's highlight box).
            picked = np.asarray(self.state.kind.select(self.state.model, query), np.int64)
        with self._lock:
            self.state.highlights.set_neurons(HIGHLIGHT, picked)
            if self._renderer is not None:
                self._renderer.cloud.set_emphasis(self.state.highlight)
        self.request_draw()
        return picked

    def select(self, neuron: int | None) -> None:
        """Ring neuron ``neuron`` (``None``: none), as the window shows its selection."""
        with self._lock:
            self.state.selected = neuron
            if self._renderer is not None:
                self._renderer.cloud.set_selected(self.state.selected)
        self.request_draw()

    def _highlight_typed(self, query: str) -> None:
        from flyviz.errors import FlyvizError

        try:
            picked = self.highlight(query.strip())
        except FlyvizError as exc:
            self.text.value = f"<pre>flyviz: error: {exc}</pre>"
            return
        self.text.value = self._text_html() + (f"<i>{picked.size:,} neurons highlighted</i>"
                                               if picked is not None else "")

    def add_quantity(self, name: str, values: np.ndarray, *, colormap: str = "sequential",
                     label: str = "", show: bool = True) -> None:
        """Offer per-neuron ``values`` (the same at every frame: token or bin) as a colour
        quantity, named ``name`` (not one of the recording's own: its kind's colourings of
        its state, a Fly LLM's ``"signed"`` and ``"abs"`` activation or a spiking brain's
        ``"spike_rate"``), on ``colormap``, its colour bar captioned ``label`` (default:
        ``name``).

        E.g. a trace's flows summed over positions,
        ``widget.add_quantity("flow", why.node_flows().sum(0), colormap="difference")``;
        ``show`` colours by it now.

        Raises
        ------
        flyviz.errors.InputError
            For values that are not one number per neuron, an unknown colormap, or one of
            the recording's own quantities' names.
        """
        self.source.add_quantity(name, values, colormap=colormap, label=label)
        self.quantity_control.options = list(self.source.quantities)
        if show:
            self.quantity_control.value = name
            self.set_quantity(name)     # built again if it was shown already

    @property
    def camera(self) -> dict[str, float]:
        """The camera: ``azimuth``, ``elevation`` (degrees) and ``scale_factor`` (zoom)."""
        renderer = self._ensure_renderer()
        cam = renderer.view.camera
        pose = self.state.camera
        return {"azimuth": float(pose.azimuth if pose is not None else renderer.base_azimuth),
                "elevation": float(cam.elevation), "scale_factor": float(cam.scale_factor)}

    def _ensure_renderer(self) -> Any:
        with self._lock:
            if self._renderer is None:
                from flyviz.render.offscreen import FrameRenderer

                # The state's range is one over the recording, and the brightness gain
                # comes from 16 of its frames, as a movie of it sets them: the cell and
                # the movie have the same exposure.
                self._renderer = FrameRenderer.for_state(self.state, self.size, app=self._app)
            return self._renderer

    def _frame(self) -> np.ndarray:
        """The frame at the shown token; a damaged recording raises its one line."""
        with self._lock:
            if self._range_stale:
                # Built again here, on the drawing thread (a run's end may be reported on
                # its worker's), its gain over the whole run.
                self._range_stale = False
                self._close_renderer()
            renderer = self._ensure_renderer()
            pose = self.state.camera
            index = self.state.index
            # The range of each frame drawn, as the state takes it now (its kind's scope:
            # the bin's own rates, as the window ranges the frame it shows; or the run so
            # far, taken again as a live run grows): a live widget kept the range of the
            # frames it had at its first draw, saturating or dimming the later ones.
            return renderer.render_token(self.state, index,
                                         azimuth=None if pose is None else pose.azimuth,
                                         value_range=self.state.value_range(
                                             index, renderer.style.layer))

    def get_frame(self) -> np.ndarray:
        """The frame at the shown token: ``(height, width, 3)`` uint8 RGB (jupyter_rfb calls it).

        What cannot be drawn (a recording damaged in a frame that the opening did not read)
        is said on the line under the widget, ``flyviz: error: ...``, over an empty frame:
        jupyter_rfb draws in its output area, where an exception is a traceback.
        """
        from flyviz.errors import FlyvizError
        from flyviz.render.style import BACKGROUND

        try:
            return self._frame()
        except FlyvizError as exc:
            import html

            self.text.value = f"<pre>flyviz: error: {html.escape(str(exc))}</pre>"
            width, height = self.size
            empty = np.empty((height, width, 3), np.uint8)
            empty[...] = np.round(np.asarray(BACKGROUND[:3]) * 255).astype(np.uint8)
            return empty

    def snapshot(self, pixel_ratio: float | None = None) -> np.ndarray:
        """The current frame as an array, ``(height, width, 3)`` uint8 (what the cell shows).

        Raises
        ------
        flyviz.errors.RecordingError
            For a recording damaged in a frame it reads (one line).
        """
        return np.array(self._frame())

    # ------------------------------------------------------------ the mouse
    def handle_event(self, event: dict[str, Any]) -> None:
        """Orbit with a drag (any button), zoom with the wheel; jupyter_rfb calls it."""
        kind = event.get("event_type")
        if kind == "pointer_down":
            self._drag = (float(event["x"]), float(event["y"]))
        elif kind == "pointer_up":
            self._drag = None
        elif kind == "pointer_move" and self._drag is not None:
            x, y = float(event["x"]), float(event["y"])
            dx, dy = x - self._drag[0], y - self._drag[1]
            self._drag = (x, y)
            camera = self.camera
            self._set_camera(azimuth=camera["azimuth"] - dx * DEGREES_PER_PIXEL,
                             elevation=float(np.clip(camera["elevation"] + dy * DEGREES_PER_PIXEL,
                                                     -90.0, 90.0)),
                             scale_factor=camera["scale_factor"])
        elif kind == "wheel":
            camera = self.camera
            factor = float(1.1 ** (float(event.get("dy", 0.0)) / 100.0))
            self._set_camera(azimuth=camera["azimuth"], elevation=camera["elevation"],
                             scale_factor=camera["scale_factor"] * factor)

    def _set_camera(self, azimuth: float, elevation: float, scale_factor: float) -> None:
        import dataclasses

        from flyviz.render.camera import CameraPose

        with self._lock:
            cam = self._ensure_renderer().view.camera
            cam.elevation = elevation
            cam.scale_factor = scale_factor
            # The state says where the camera looks from: a new renderer starts there.
            self.state.camera = dataclasses.replace(CameraPose.of(cam), azimuth=float(azimuth))
        self.request_draw()

    # ------------------------------------------------------------ live runs
    @classmethod
    def live(cls, model: Any, prompt: Any = None, *, max_new_tokens: int | None = 40,
             request: Any = None, background: bool = True, **kwargs: Any) -> "BrainWidget":
        """A widget over a new run of ``model`` that fills in, frame by frame, as it runs.

        The run is the one a viewer state of ``model`` describes (its kind reads it:
        :meth:`~flyviz.kinds.ModelKind.run_request`), given ``prompt`` (what the run reads:
        the Fly LLM's prompt; ``None``: the kind's default) and, for a kind that reads
        it, ``max_new_tokens``; or ``request``, a :class:`~flyviz.runs.RunRequest` of
        its own. It starts through :class:`flyviz.runs.Runs`, as in every host, on a
        worker thread (``background=False``: before this returns); :meth:`wait` waits
        for its end and ``widget.source.recording`` is the run. In a notebook (a running
        event loop) the widget follows on the loop, after each frame.
        """
        require_notebook()
        from flyviz.arguments import loaded_model
        from flyviz.runs import Run, Runs, ThreadEngine, request_for

        loaded_model("model", model, none=False)    # None or "demo": an AttributeError later
        if request is None:
            request = request_for(model, prompt, max_new_tokens=max_new_tokens)
        run = Run(model, request)                    # a bad request is said here, at once
        widget = cls(run.recording, model, **kwargs)

        try:
            # In a notebook the kernel's event loop runs the cell: the widget is updated,
            # and drawn, there (jupyter_rfb schedules draws on the running loop only).
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None

        def deliver(callback: Any, *args: Any) -> None:
            if loop is not None and background:
                loop.call_soon_threadsafe(callback, *args)
            else:
                callback(*args)

        runs = Runs(widget.state)
        runs.engine = ThreadEngine(runs, deliver)

        def grew(count: int) -> None:
            widget.slider.max = max(count - 1, 0)
            widget.show_token(count - 1)

        def ended(_reason: str, _frames: int) -> None:
            # The run is whole: its brightness gain over the whole run, as its movie and the
            # widget of its recording have it (the colour range follows every frame).
            widget._range_stale = True
            widget.request_draw()

        runs.events.frame.connect(grew)
        runs.events.ended.connect(ended)
        widget.runs = runs
        runs.launch(run)
        widget._thread = runs.engine.thread
        if not background:
            runs.wait()
        return widget

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a :meth:`live` run to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _close_renderer(self) -> None:
        if self._renderer is not None:
            renderer, self._renderer = self._renderer, None
            if sys.is_finalizing():
                return  # a widget's __del__ at exit: imports fail now; the OS frees the GL
            try:
                renderer.close()
            except (RuntimeError, ImportError):
                # At interpreter exit (a widget's __del__) EGL may already be torn down,
                # and an import fail ("sys.meta_path is None").
                pass

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Release the renderer and close the widget."""
        # A widget whose constructor raised is closed too when it is collected (ipywidgets'
        # __del__): it may have no lock or renderer yet, and nothing of its own to release;
        # refused before ipywidgets' own __init__ ran, even its close fails (no traits yet).
        lock = getattr(self, "_lock", None)
        if lock is not None:
            with lock:
                self._close_renderer()
        if getattr(self, "_widget_made", False):
            super().close(*args, **kwargs)
