"""What is on screen follows the session, at display rate: the brain and every frame view.

Data flow, in one direction:

* the run controller appends frames to the :class:`~flyviz.app.base.session.Session`
  and moves its shown index (cheap: no drawing happens there);
* a display-rate timer (:class:`DisplayController`) notices that the shown
  frame changed and hands it to the brain view and to every registered view
  (``view.show_frame(recording, index)``); while a run streams in, the 2-D
  views are refreshed at most :data:`PANEL_HZ` times a second, since each of
  their repaints costs the UI thread real time;
* the brain view eases toward its target and draws only while something moves.

So the engine never waits for drawing, drawing never queues one redraw per
token, and scrubbing a recording is the same code path as watching live. A new
view (a dock, a comparison) is one :meth:`DisplayController.add_view` call; a
new colouring of the brain is one :meth:`DisplayController.set_colour_layer`
(values, colormap, colourbar and scale policy: a
:class:`~flyviz.render.style.ColourLayer`; the window hands it the viewer
state's layer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
from PySide6.QtCore import QObject, QTimer

from flyviz.app.base.session import Session
from flyviz.record.recording import Recording
from flyviz.render.style import ColourLayer, recorded_state

#: Rate of the display timer (Hz). The brain draws at most this often, and only
#: while something changes; the engine's token rate is independent.
DISPLAY_HZ = 60

#: Most refreshes per second of the 2-D views while a run streams in.
PANEL_HZ = 4

#: ``source(recording, index) -> state``: the values the brain is coloured by.
BrainSource = Callable[[Recording, int], "np.ndarray | None"]

#: Frames of the shown recording sampled for the brain's automatic brightness gain.
GAIN_SAMPLES = 16


class FrameView(Protocol):
    """Anything that shows one moment of a recording."""

    def show_frame(self, recording: Recording, index: int) -> None:
        """Show frame ``index`` of ``recording`` (``-1``: nothing yet)."""


class BrainTarget(Protocol):
    """What the display needs of the brain view."""

    def set_target(self, state: np.ndarray | None) -> None:
        """The activity to ease toward."""

    def snap(self) -> None:
        """Show the target at once, skipping the easing."""

    def tick(self) -> None:
        """Called every display tick: draw again if something still moves."""

    def set_layer(self, layer: ColourLayer | None) -> None:
        """Colour by ``layer``'s colormap, range and colourbar (``None``: the state's)."""

    def update_gain(self) -> None:
        """Set the automatic brightness gain again (the values to be shown changed)."""

    #: ``activity_sample() -> values``: some of the values to be shown, for the automatic
    #: gain (the display controller sets it).
    activity_sample: Callable[[], "np.ndarray | None"] | None


class DisplayController(QObject):
    """Keeps the brain and the frame views on the session's shown frame.

    Parameters
    ----------
    session
        Whose recording and index are shown.
    brain
        The 3-D view.
    streaming
        ``streaming() -> bool``: True while frames stream in live (views are throttled).
    hz
        Display timer rate.
    """

    def __init__(self, session: Session, brain: BrainTarget, streaming: Callable[[], bool],
                 parent: QObject | None = None, hz: float = DISPLAY_HZ) -> None:
        super().__init__(parent)
        self.session = session
        self.brain = brain
        self.views: list[FrameView] = []
        #: The views cheap enough to follow every tick, streaming or not (the timeline).
        self.tick_views: list[FrameView] = []
        self._streaming = streaming
        self._brain_source: BrainSource = recorded_state
        #: The colour layer shown instead of the recorded state, or None.
        self.layer: ColourLayer | None = None
        self._dirty = True
        self._brain_key: tuple[int, int] | None = None
        #: ``(id(recording), index)`` the frame views last showed (None: not yet).
        self.views_at: tuple[int, int] | None = None
        self._last_views = 0.0
        session.index_changed.connect(lambda _index: self.mark_dirty())
        session.recording_replaced.connect(self._on_recording_replaced)
        session.frames_appended.connect(lambda _n: self.mark_dirty())
        session.live_changed.connect(lambda _live: self.mark_dirty())
        brain.activity_sample = self.activity_sample
        self.timer = QTimer(self)
        self.timer.setInterval(max(1, int(round(1000.0 / hz))))
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    # ------------------------------------------------------------ wiring
    def add_view(self, view: FrameView, every_tick: bool = False) -> None:
        """Show every shown frame in ``view`` too (it is refreshed at once).

        ``every_tick``: a view cheap to refresh (a counter) follows each display tick even
        while a run streams in, when the others wait for their :data:`PANEL_HZ` turn; the
        timeline's counter lagged a quarter of a second behind a run (25 bins of a spiking
        brain), saying the previous run's "done" as the next one began.
        """
        self.views.append(view)
        if every_tick:
            self.tick_views.append(view)
        self.mark_dirty()

    def set_colour_layer(self, layer: ColourLayer | None) -> None:
        """Colour the brain by ``layer``: its values at the shown frame, colormap, colourbar, scale.

        ``None`` shows the recorded state again, as the display settings say.
        Example: ``display.set_colour_layer(ColourLayer(name="delta",
        colormap="difference", label="Δx", source=lambda rec, i: ...))``.
        """
        self.layer = layer
        self._brain_source = layer.values if layer is not None else recorded_state
        self.brain.set_layer(layer)
        # Another quantity is shown at once, not eased into from the old one's values: on
        # the new one's scale those read as a dark brain for the easing's length (spike
        # flashes of 0..1 on a rate scale in Hz).
        self.redraw_brain()                 # the frame views follow at the next tick
        self._refresh_brain()
        self.brain.snap()

    def activity_sample(self) -> np.ndarray | None:
        """Up to :data:`GAIN_SAMPLES` frames of the shown recording as the brain colours them."""
        recording = self.session.recording
        n = len(recording)
        if n == 0:
            return None
        picks = np.unique(np.linspace(0, n - 1, min(GAIN_SAMPLES, n)).round().astype(int))
        sources = [self._brain_source(recording, int(i)) for i in picks]
        rows = [np.asarray(r, np.float32) for r in sources if r is not None]
        return np.stack(rows) if rows else None

    def mark_dirty(self) -> None:
        """Something shown changed: refresh at the next tick."""
        self._dirty = True

    def redraw_brain(self) -> None:
        """Give the brain its target again at the next tick (e.g. after a display setting changed)."""
        self._brain_key = None
        self._dirty = True

    def stop(self) -> None:
        """Stop the display timer."""
        self.timer.stop()

    # ------------------------------------------------------------ ticks
    def tick(self) -> None:
        """One display tick: hand the shown frame on where it changed, then let the brain draw."""
        if self._dirty:
            now = time.perf_counter()
            if not self._streaming() or now - self._last_views >= 1.0 / PANEL_HZ:
                self._last_views = now
                self.refresh()
            else:
                self._refresh_brain()
                recording, index = self.session.recording, self.session.index
                for view in self.tick_views:
                    view.show_frame(recording, index)
        self.brain.tick()

    def refresh(self) -> None:
        """Show the session's current frame in the brain and every view, now."""
        self._dirty = False
        self._refresh_brain()
        recording, index = self.session.recording, self.session.index
        for view in self.views:
            view.show_frame(recording, index)
        self.views_at = (id(recording), index)

    @property
    def brain_at(self) -> tuple[int, int] | None:
        """``(id(recording), index)`` whose state the brain shows or eases toward."""
        return self._brain_key

    def showing(self, index: int) -> bool:
        """True once the brain and every view show frame ``index`` of the session's recording."""
        key = (id(self.session.recording), index)
        return self._brain_key == key and self.views_at == key

    def _refresh_brain(self) -> None:
        recording, index = self.session.recording, self.session.index
        key = (id(recording), index)
        if key != self._brain_key:
            self._brain_key = key
            self.brain.set_target(self._brain_source(recording, index))

    def _on_recording_replaced(self) -> None:
        self._brain_key = None
        self._dirty = True
        self.brain.update_gain()
