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

What is drawn comes from :class:`flyviz.brain_source.BrainSource`.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
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


class BrainWidget(RemoteFrameBuffer):
    """The brain of one recording, in a notebook cell, at a chosen token.

    Parameters
    ----------
    recording
        A :class:`~flyviz.record.recording.Recording` or the path of a ``.flyrec``.
    model
        The model it was made with (its anatomy places the neurons); by default
        the one the recording names, when it loads without a download.
    size
        ``(width, height)`` of the frames, in pixels.
    quantity
        The colour quantity: ``"signed"`` (default), ``"abs"``, or ``"delta"``
        for a comparison.
    gl
        The offscreen OpenGL (``"egl"``, ``"default"``, ``"osmesa"``; default: the first
        that works). Without any, one :class:`~flyviz.errors.ExportError` line says so.
    """

    def __init__(self, recording: Any, model: Any = None, *, size: tuple[int, int] = (640, 400),
                 quantity: str = "signed", gl: str | None = None, **kwargs: Any) -> None:
        require_notebook()
        from flyviz.brain_source import BrainSource
        from flyviz.render.offscreen import check_size, offscreen_app

        super().__init__(**kwargs)
        if isinstance(recording, (str, Path)):
            self.source = BrainSource.open(recording, model=model)
        else:
            if model is None:
                from flyviz.brain_source import resolve_model

                model = resolve_model(str(recording.metadata.get("model", "")))
            if model is not None:
                anatomy = model.drawing_anatomy()
            else:
                from flyviz.model.layout import ball_layout

                anatomy = ball_layout(recording.neurons)
            self.source = BrainSource(anatomy, recording, name="run")
        self.size = check_size(size)
        self.css_width, self.css_height = f"{self.size[0]}px", f"{self.size[1]}px"
        self._app, _ = offscreen_app(backend=gl)
        self._lock = threading.RLock()
        self._renderer: Any = None
        self._camera: dict[str, float] = {}
        self._drag: tuple[float, float] | None = None
        self._thread: threading.Thread | None = None
        self._model = model
        self._emphasis: np.ndarray | None = None
        self.token = max(self.source.tokens - 1, 0)
        self.quantity = self.source.layer(quantity).name and quantity

        self.slider = ipywidgets.IntSlider(value=self.token, min=0, max=max(self.source.tokens - 1, 0),
                                           description="token", continuous_update=True)
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

    def _text_html(self) -> str:
        import html

        return f"<pre style='white-space:pre-wrap'>{html.escape(self.source.token_text(self.token))}</pre>"

    def show_token(self, token: int) -> None:
        """Show ``token`` (clipped to the recording)."""
        self.token = int(np.clip(token, 0, max(self.source.tokens - 1, 0)))
        if self.slider.value != self.token:
            self.slider.value = self.token
        self.text.value = self._text_html()
        self.request_draw()

    def set_quantity(self, quantity: str) -> None:
        """Colour by another quantity (one of ``source.quantities``)."""
        self.source.layer(quantity)
        with self._lock:
            self.quantity = quantity
            self._close_renderer()
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

        if not query:
            self._emphasis = None
            picked = None
        else:
            if self._model is None:
                raise InputError("highlighting needs the model: BrainWidget(recording, model)")
            from flyviz.model.selection import select

            picked = select(self._model.checkpoint, query)
            self._emphasis = np.zeros(self.source.anatomy.positions.shape[0], dtype=bool)
            self._emphasis[picked] = True
        with self._lock:
            if self._renderer is not None:
                self._renderer.cloud.set_emphasis(self._emphasis)
        self.request_draw()
        return picked

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
        """Offer per-neuron ``values`` (the same at every token) as a colour quantity.

        E.g. a trace's flows summed over positions,
        ``widget.add_quantity("flow", why.node_flows().sum(0), colormap="difference")``;
        ``show`` colours by it now.
        """
        self.source.add_quantity(name, values, colormap=colormap, label=label)
        self.quantity_control.options = list(self.source.quantities)
        if show:
            self.quantity_control.value = name

    @property
    def camera(self) -> dict[str, float]:
        """The camera: ``azimuth``, ``elevation`` (degrees) and ``scale_factor`` (zoom)."""
        renderer = self._ensure_renderer()
        cam = renderer.view.camera
        return {"azimuth": float(self._camera.get("azimuth", renderer.base_azimuth)),
                "elevation": float(cam.elevation), "scale_factor": float(cam.scale_factor)}

    def _ensure_renderer(self) -> Any:
        with self._lock:
            if self._renderer is None:
                from flyviz.render.offscreen import FrameRenderer
                from flyviz.render.style import CloudStyle

                layer = self.source.layer(self.quantity)
                anatomy = self.source.anatomy
                # The brightness gain from 16 frames, as a movie of the recording sets it,
                # so the cell and the movie have the same exposure.
                sample = (layer.sample(self.source.recording, 0, None, 16)
                          if self.source.recording is not None else np.zeros((0, 1), np.float32))
                self._renderer = FrameRenderer(
                    anatomy.positions_um(), anatomy.valid, self.size, style=CloudStyle(layer=layer),
                    value_range=self.source.value_range(self.quantity), overlays=False,
                    activity_sample=sample if sample.size else None, app=self._app)
                if self._emphasis is not None:
                    self._renderer.cloud.set_emphasis(self._emphasis)
                cam = self._renderer.view.camera
                if "elevation" in self._camera:
                    cam.elevation = self._camera["elevation"]
                    cam.scale_factor = self._camera["scale_factor"]
            return self._renderer

    def _values(self, token: int) -> np.ndarray:
        layer = self.source.layer(self.quantity)
        values = None if self.source.recording is None else layer.values(self.source.recording, token)
        n = self.source.anatomy.positions.shape[0]
        return np.zeros(n, np.float32) if values is None else np.asarray(values, np.float32)

    def get_frame(self) -> np.ndarray:
        """The frame at the shown token: ``(height, width, 3)`` uint8 RGB (jupyter_rfb calls it)."""
        with self._lock:
            renderer = self._ensure_renderer()
            if self.source.tokens == 0:
                values = np.zeros(self.source.anatomy.positions.shape[0], np.float32)
            else:
                values = self._values(self.token)
            return renderer.render_state(values, azimuth=self._camera.get("azimuth"))

    def snapshot(self, pixel_ratio: float | None = None) -> np.ndarray:
        """The current frame as an array, ``(height, width, 3)`` uint8 (what the cell shows)."""
        return np.array(self.get_frame())

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
        with self._lock:
            self._camera = {"azimuth": azimuth, "elevation": elevation, "scale_factor": scale_factor}
            cam = self._ensure_renderer().view.camera
            cam.elevation = elevation
            cam.scale_factor = scale_factor
        self.request_draw()

    # ------------------------------------------------------------ live runs
    @classmethod
    def live(cls, model: Any, prompt: str, *, max_new_tokens: int = 40, background: bool = True,
             **kwargs: Any) -> "BrainWidget":
        """A widget over a new run of ``prompt`` that fills in, token by token, as the model runs.

        The run goes on a worker thread (``background=False``: before this returns);
        :meth:`wait` waits for its end and ``widget.source.recording`` is the run. In a
        notebook (a running event loop) the widget follows on the loop, after each token.
        """
        require_notebook()
        from flyviz.record.run import GenerationSettings

        settings = GenerationSettings(max_new_tokens=max_new_tokens).validate()
        recording = model.new_recording(prompt, settings, model.resolve_interventions(()))
        widget = cls(recording, model, **kwargs)

        try:
            # In a notebook the kernel's event loop runs the cell: the widget is updated,
            # and drawn, there (jupyter_rfb schedules draws on the running loop only).
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None

        def grew(count: int) -> None:
            widget.slider.max = max(count - 1, 0)
            widget.show_token(count - 1)

        def run() -> None:
            for _frame in model.frames(prompt, settings, recording=recording):
                if loop is not None and background:
                    loop.call_soon_threadsafe(grew, len(recording))
                else:
                    grew(len(recording))

        if background:
            widget._thread = threading.Thread(target=run, name="flyviz-live", daemon=True)
            widget._thread.start()
        else:
            run()
        return widget

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a :meth:`live` run to end."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _close_renderer(self) -> None:
        if self._renderer is not None:
            renderer, self._renderer = self._renderer, None
            try:
                renderer.close()
            except RuntimeError:
                # At interpreter exit (a widget's __del__) EGL may already be torn down.
                pass

    def close(self, *args: Any, **kwargs: Any) -> None:
        """Release the renderer and close the widget."""
        with self._lock:
            self._close_renderer()
        super().close(*args, **kwargs)
