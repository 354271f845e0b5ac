"""The app's model: the recording being shown and which frame of it is shown.

Both live in the window's :class:`~flyviz.viewer.state.ViewerState`; the
:class:`Session` is its Qt adapter (signals for widgets, input clamped to range).

Every view in the window reads ``session.recording[session.index]``; none of
them keeps its own copy of the run. Live mode follows the newest frame;
scrubbing picks any frame and leaves live mode; jumping to the end returns to it.
This is the single place where "what moment is on screen" is decided, so the
cloud, the text, the bars, the raster and the traces can never disagree.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from flyviz.record.frame import Frame
from flyviz.record.recording import Recording
from flyviz.viewer.parts import RECORDING
from flyviz.viewer.state import ViewerState


class Session(QObject):
    """The Qt face of a :class:`~flyviz.viewer.state.ViewerState`'s recording and token.

    The state holds the recording and the shown index; the session forwards its
    changes as Qt signals (for widgets and queued connections) and clamps what
    user input asks for (a slider, a key) into range before setting it.

    Parameters
    ----------
    neurons
        State length of the empty recording (without ``state``).
    state
        The viewer state to show (default: a new one).

    Signals
    -------
    recording_replaced()
        A different recording is now shown (new run, opened file, reset).
    frames_appended(length)
        Frames were added to the current recording.
    index_changed(index)
        The shown frame changed (``-1`` when the recording is empty).
    live_changed(live)
        Live mode (follow the newest frame) was switched on or off.
    """

    recording_replaced = Signal()
    frames_appended = Signal(int)
    index_changed = Signal(int)
    live_changed = Signal(bool)

    def __init__(self, neurons: int = 1, parent: QObject | None = None,
                 state: ViewerState | None = None) -> None:
        super().__init__(parent)
        if state is None:
            state = ViewerState()
            state.set_recording(Recording(max(1, int(neurons))))
        self.state = state
        events = state.events
        events.recording.connect(self.recording_replaced.emit)
        events.frames_appended.connect(self.frames_appended.emit)
        events.index.connect(self.index_changed.emit)
        events.live.connect(self.live_changed.emit)

    # ------------------------------------------------------------ properties
    @property
    def recording(self) -> Recording:
        """The recording every view reads."""
        return self.state.recording

    @property
    def index(self) -> int:
        """Index of the shown frame, ``-1`` when there is none."""
        return self.state.index

    @property
    def live(self) -> bool:
        """True while the view follows the newest frame."""
        return self.state.live

    def __len__(self) -> int:
        return len(self.state.recording)

    def current_frame(self) -> Frame | None:
        """The shown frame, or None."""
        return self.state.frame()

    # ------------------------------------------------------------ mutation
    def new_recording(self, neurons: int, metadata: dict[str, Any] | None = None, *,
                      cause: str | None = None) -> Recording:
        """Start an empty recording (live mode on) and return it; ``cause``: why (see
        :meth:`replace`; default none, a model's empty recording)."""
        return self.replace(Recording(int(neurons), metadata), cause=cause)

    def replace(self, recording: Recording, index: int | None = None, *,
                cause: str | None = RECORDING) -> Recording:
        """Show ``recording``; at ``index`` (clamped) or, by default, its last frame in live mode.

        ``cause``: a new run, Reset or an opened recording (the default), which the state's
        parts answer as their lifetimes say (:meth:`~flyviz.viewer.state.ViewerState.set_recording`).
        """
        n = len(recording)
        if index is not None:
            index = max(0, min(int(index), n - 1)) if n else None
        return self.state.set_recording(recording, index, cause=cause)

    def append(self, frame: Frame) -> int:
        """Add a frame; in live mode it becomes the shown one. Returns its index."""
        return self.state.append(frame)

    def set_index(self, index: int) -> None:
        """Show frame ``index`` (clamped); live mode is on only at the last frame."""
        n = len(self.state.recording)
        self.state.index = max(0, min(int(index), n - 1)) if n else -1

    def step(self, delta: int) -> None:
        """Move the shown frame by ``delta`` tokens."""
        if len(self.state.recording):
            self.set_index(self.state.index + int(delta))

    def go_live(self) -> None:
        """Follow the newest frame again."""
        self.state.go_live()
