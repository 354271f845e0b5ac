"""The app's model: the recording being shown and which frame of it is shown.

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


class Session(QObject):
    """A :class:`~flyviz.record.recording.Recording` plus the shown frame index.

    Parameters
    ----------
    neurons
        State length of the current model (the empty recording's size).

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

    def __init__(self, neurons: int = 1, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._recording = Recording(max(1, int(neurons)))
        self._index = -1
        self._live = True

    # ------------------------------------------------------------ properties
    @property
    def recording(self) -> Recording:
        """The recording every view reads."""
        return self._recording

    @property
    def index(self) -> int:
        """Index of the shown frame, ``-1`` when there is none."""
        return self._index

    @property
    def live(self) -> bool:
        """True while the view follows the newest frame."""
        return self._live

    def __len__(self) -> int:
        return len(self._recording)

    def current_frame(self) -> Frame | None:
        """The shown frame, or None."""
        if self._index < 0 or self._index >= len(self._recording):
            return None
        return self._recording[self._index]

    # ------------------------------------------------------------ mutation
    def new_recording(self, neurons: int, metadata: dict[str, Any] | None = None) -> Recording:
        """Start an empty recording (live mode on) and return it."""
        return self.replace(Recording(int(neurons), metadata))

    def replace(self, recording: Recording, index: int | None = None) -> Recording:
        """Show ``recording``; at ``index`` or, by default, its last frame in live mode."""
        self._recording = recording
        n = len(recording)
        self._index = n - 1 if index is None else max(-1, min(int(index), n - 1))
        self.recording_replaced.emit()
        self._set_live(self._index == n - 1)
        self.index_changed.emit(self._index)
        return recording

    def append(self, frame: Frame) -> int:
        """Add a frame; in live mode it becomes the shown one. Returns its index."""
        i = self._recording.append(frame)
        self.frames_appended.emit(len(self._recording))
        if self._live:
            self._index = i
            self.index_changed.emit(i)
        return i

    def set_index(self, index: int) -> None:
        """Show frame ``index`` (clamped); live mode is on only at the last frame."""
        n = len(self._recording)
        index = max(0, min(int(index), n - 1)) if n else -1
        self._set_live(index == n - 1)
        if index != self._index:
            self._index = index
            self.index_changed.emit(index)

    def step(self, delta: int) -> None:
        """Move the shown frame by ``delta`` tokens."""
        if len(self._recording):
            self.set_index(self._index + int(delta))

    def go_live(self) -> None:
        """Follow the newest frame again."""
        self.set_index(len(self._recording) - 1)
        self._set_live(True)

    def _set_live(self, live: bool) -> None:
        if live != self._live:
            self._live = live
            self.live_changed.emit(live)
