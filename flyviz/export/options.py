"""Movie export settings and output formats."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flyviz.model.errors import ExportError

#: Output formats by file extension; anything without an extension is a PNG folder.
MOVIE_EXTENSIONS = {".mp4": "mp4", ".m4v": "mp4", ".webm": "webm", ".gif": "gif"}

#: Default quality (the encoder's constant-rate factor: lower is better, larger).
DEFAULT_QUALITY = {"mp4": 20, "webm": 34}

#: Allowed quality (CRF) range per format.
QUALITY_RANGE = {"mp4": (0, 51), "webm": (0, 63)}

#: The fastest a GIF plays: its frame delays are whole hundredths of a second, and browsers
#: play a delay under 2 (20 ms) as 10 (100 ms), so a faster movie would crawl.
GIF_MAX_FPS = 50.0

COLOR_MODES = ("signed", "abs")
VIEWS = ("front", "top", "side")


def movie_format(out_path: str | Path) -> str:
    """``"mp4"``, ``"webm"``, ``"gif"`` or ``"png"`` (a folder of frames) for an output path.

    A path ending in ``/``, without an extension, or naming an existing folder whose name
    is not a movie's (``frames.v2``) means a folder of PNG frames. A movie's suffix wins
    over a folder of that name, which is refused: writing frames into ``d.mp4/`` would
    leave no movie where the name promises one.

    Raises
    ------
    ExportError
        For an extension flyviz cannot write, or a movie's name that is a folder.
    """
    text = str(out_path)
    path = Path(text)
    if text.endswith(("/", "\\")) or path.suffix == "":
        return "png"
    fmt = MOVIE_EXTENSIONS.get(path.suffix.lower())
    if path.is_dir():
        if fmt is None:
            return "png"
        raise ExportError(f"{path} is a folder; give a file name for the {fmt.upper()}, or "
                          f"write PNG frames into the folder as {path}/")
    if fmt is None:
        raise ExportError(f"cannot write {path.suffix} files; use .mp4, .webm, .gif, "
                          "or a folder name (no extension) for PNG frames")
    return fmt


@dataclass(frozen=True)
class ExportOptions:
    """How to turn a recording into a movie.

    Parameters
    ----------
    size
        ``(width, height)`` of the movie in pixels, independent of any window.
    fps
        Frames per second.
    frames_per_token
        ``K``: each token gets ``K`` frames that ease from the previous state
        to the token's state (the last of them shows the state exactly).
    quality
        Encoder constant-rate factor (lower is better and larger): x264 CRF
        for MP4 (0-51, default 20), VP9 CRF for WebM (0-63, default 34).
        Ignored for GIF and PNG.
    orbit
        Camera turn in degrees per second about the dorsal axis (0: still).
    mode
        ``"signed"`` (diverging colours) or ``"abs"`` (|x|, sequential).
    start, stop
        Range of recording frames (tokens) to export, read as a Python slice: ``stop``
        exclusive, ``None`` runs to the end, a negative bound counts from the end.
    overlays
        Draw the model name, token counter, colourbar, top-k bars and text.
    view
        Camera preset: ``"front"``, ``"top"`` or ``"side"``.
    scale
        Activation at the end of the colour range; ``None`` takes the 99th
        percentile of |x| over the exported frames.
    hold_seconds
        Extra frames at the end that keep showing the last token
        (``round(hold_seconds * fps)`` of them), so a movie does not stop
        abruptly. The frame count is ``tokens * frames_per_token`` plus these.
    speed
        x264 preset for MP4 (``"ultrafast"`` ... ``"veryslow"``); faster
        presets make larger files at the same quality.
    point_size
        Diameter of a quiet neuron in pixels at 720 lines (scaled with the
        movie's height; see :class:`~flyviz.render.style.CloudStyle`).
    glow
        Halo strength of active neurons, 0 to 2.

    ``mode``, ``scale``, ``point_size`` and ``glow`` make the movie's
    :meth:`cloud_style`; an export given a whole style uses that instead.
    """

    size: tuple[int, int] = (1280, 720)
    fps: float = 30.0
    frames_per_token: int = 6
    quality: int | None = None
    orbit: float = 0.0
    mode: str = "signed"
    start: int = 0
    stop: int | None = None
    overlays: bool = True
    view: str = "front"
    scale: float | None = None
    hold_seconds: float = 0.0
    speed: str = "veryfast"
    point_size: float = 3.0
    glow: float = 1.0

    def validate(self) -> "ExportOptions":
        """Raise :class:`ExportError` for an out-of-range value; return self."""
        from flyviz.render.offscreen import check_size

        check_size(self.size)
        if not (math.isfinite(self.fps) and 1.0 <= self.fps <= 240.0):
            raise ExportError(f"fps {self.fps} must be between 1 and 240")
        if not 1 <= int(self.frames_per_token) <= 600:
            raise ExportError(f"frames per token {self.frames_per_token} must be between 1 and 600")
        if not math.isfinite(self.orbit) or abs(self.orbit) > 3600:
            raise ExportError(f"orbit {self.orbit} degrees per second is out of range (-3600..3600)")
        if self.mode not in COLOR_MODES:
            raise ExportError(f"colour mode {self.mode!r} must be 'signed' or 'abs'")
        if self.view not in VIEWS:
            raise ExportError(f"view {self.view!r} must be one of {', '.join(VIEWS)}")
        if self.scale is not None and not (math.isfinite(self.scale) and self.scale > 0):
            raise ExportError(f"colour scale {self.scale} must be a positive number")
        if not (math.isfinite(self.hold_seconds) and 0.0 <= self.hold_seconds <= 60.0):
            raise ExportError(f"hold {self.hold_seconds} s must be between 0 and 60 seconds")
        if self.speed not in ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium",
                              "slow", "slower", "veryslow"):
            raise ExportError(f"speed preset {self.speed!r} is not an x264 preset")
        if not (math.isfinite(self.point_size) and 0.1 <= self.point_size <= 100.0):
            raise ExportError(f"point size {self.point_size} must be between 0.1 and 100 pixels")
        if not (math.isfinite(self.glow) and 0.0 <= self.glow <= 2.0):
            raise ExportError(f"glow {self.glow} must be between 0 and 2")
        if self.stop is not None and (self.start < 0) == (self.stop < 0) and \
                self.stop <= self.start:
            raise ExportError(f"token range {self.start}:{self.stop} is empty")
        return self

    def cloud_style(self, kind: Any = None) -> Any:
        """The :class:`~flyviz.render.style.CloudStyle` these options describe.

        The recorded state in colormap ``mode``, over ``±scale`` (``[0,
        scale]`` for ``"abs"``) or, without a scale, the 99th percentile of
        |x| over the exported frames; automatic brightness gain. ``kind`` (a
        :class:`~flyviz.kinds.ModelKind`) says how its recorded state is coloured
        (:meth:`~flyviz.kinds.ModelKind.recorded_layer`: a spiking brain's rates in Hz).
        """
        from flyviz.render.style import CloudStyle, ColourScale, activation_layer

        scale = ColourScale.fixed(self.scale) if self.scale else ColourScale.auto()
        layer = activation_layer(self.mode, scale) if kind is None else \
            kind.recorded_layer(self.mode, scale)
        return CloudStyle(layer=layer, point_size=self.point_size, glow=self.glow)

    def token_range(self, n_frames: int) -> tuple[int, int]:
        """The ``(start, stop)`` frame range of a recording of ``n_frames``, read as a Python
        slice: a negative bound counts from the end (``-5:``, the last five), and a stop
        past the end is the end. A range that holds no frame is an :class:`ExportError`
        naming the recording's frames."""
        if n_frames <= 0:
            raise ExportError("the recording has no frames; run a prompt first")
        chosen = range(n_frames)[slice(self.start, self.stop)]
        start, stop = chosen.start, chosen.stop
        if start >= stop:
            given = f"{self.start}:{'' if self.stop is None else self.stop}"
            raise ExportError(f"token range {given} holds none of the recording's {n_frames:,} "
                              f"tokens (0 to {n_frames - 1:,}; -5: is the last five)")
        return int(start), int(stop)

    def hold_frames(self) -> int:
        """Number of hold frames at the end."""
        return int(round(self.hold_seconds * self.fps))

    def frame_count(self, n_tokens: int) -> int:
        """Frames written for ``n_tokens`` tokens."""
        return int(n_tokens) * int(self.frames_per_token) + self.hold_frames()

    def check_fps(self, fmt: str) -> None:
        """Refuse a frame rate ``fmt`` cannot play: a GIF above :data:`GIF_MAX_FPS`.

        A GIF's delays are whole hundredths of a second: 100/n fps (50, 33.3, 25, 20...)
        gives every frame the same delay; another rate up to 50 (the default 30) alternates
        two delays (30 and 40 ms) so that the movie lasts as long as it should.
        """
        if fmt == "gif" and self.fps > GIF_MAX_FPS:
            raise ExportError(f"fps {self.fps:g} is faster than a GIF plays (its frame delays "
                              "are whole hundredths of a second, and browsers play one under "
                              f"20 ms as 100 ms): give at most {GIF_MAX_FPS:g} (100/n plays "
                              "exactly: 50, 33.3, 25, 20...), or write .mp4 or .webm")

    def crf(self, fmt: str) -> int | None:
        """The quality value passed to the encoder of ``fmt`` (``None`` when unused), once
        the options are checked against ``fmt`` (:meth:`check_fps`): every exporter asks
        for it before any frame is drawn."""
        self.check_fps(fmt)
        if fmt not in DEFAULT_QUALITY:
            return None
        q = DEFAULT_QUALITY[fmt] if self.quality is None else int(self.quality)
        lo, hi = QUALITY_RANGE[fmt]
        if not lo <= q <= hi:
            raise ExportError(f"quality {q} for {fmt.upper()} must be between {lo} and {hi} "
                              "(lower is better)")
        return q
