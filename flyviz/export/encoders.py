"""Stream RGB frames into a movie file or a folder of PNGs, atomically.

Frames go straight down a pipe to the ffmpeg that ships with imageio-ffmpeg
(no system ffmpeg needed), so memory stays flat however long the movie is
and encoding runs in parallel with rendering. Frames are passed at their
exact size: nothing pads 1080 to 1088.

Output is written under a temporary name in the target's folder (inside an
existing folder of PNG frames) and moved into place only once the encoder has
finished without error; a cancel, an encoder failure or a full disk leaves
nothing under the target name.

:func:`encode_movie` is that lifecycle around one export's frames (each
movie kind says only which frames it draws).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import ExportCancelled, ExportError
from flyviz.fileio import folder_refusal

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.export.options import ExportOptions

#: ``emit(values, overlay, *more)``: draw one frame (``more`` goes on to the renderer's
#: ``render_state``) and encode it.
EmitFrame = Callable[..., None]

#: File name pattern of PNG frames inside an output folder: ``frame_000000.png`` is movie
#: frame 0 (a token gives ``frames_per_token`` of them), numbered from 0 as every frame and
#: token in flyviz is (:data:`PNG_START`).
PNG_PATTERN = "frame_%06d.png"
#: The number of the first PNG frame; ffmpeg's image2 writer starts at 1 unless told.
PNG_START = 0


def ffmpeg_exe() -> str:
    """Path of the ffmpeg binary bundled with imageio-ffmpeg."""
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError, OSError) as exc:  # not installed, or no binary in it
        raise ExportError(f"no ffmpeg available ({exc}); reinstall flyviz's imageio-ffmpeg "
                          "dependency") from None


def _codec_args(fmt: str, crf: int | None, fps: float, speed: str) -> list[str]:
    if fmt == "mp4":
        return ["-c:v", "libx264", "-preset", speed, "-crf", str(crf), "-pix_fmt", "yuv420p",
                "-movflags", "+faststart"]
    if fmt == "webm":
        # realtime + high cpu-used keeps VP9 near x264 veryfast speed; CRF with -b:v 0
        # is constant quality.
        return ["-c:v", "libvpx-vp9", "-crf", str(crf), "-b:v", "0", "-pix_fmt", "yuv420p",
                "-deadline", "realtime", "-cpu-used", "8", "-row-mt", "1"]
    if fmt == "gif":
        # A palette per frame: streams (no whole-movie buffering) and keeps the
        # colours of each frame right.
        return ["-filter_complex",
                "split[a][b];[a]palettegen=stats_mode=single:reserve_transparent=0[p];"
                "[b][p]paletteuse=new=1:dither=bayer:bayer_scale=4",
                "-loop", "0"]
    if fmt == "png":
        return ["-c:v", "png", "-pix_fmt", "rgb24", "-start_number", str(PNG_START)]
    raise ExportError(f"unknown format {fmt}")


#: The names of the PNG frames an export writes (:data:`PNG_PATTERN`), as a glob: a frames
#: folder may hold earlier ones, which a new export replaces (what
#: :func:`~flyviz.fileio.earlier_output` looks for, as ``holding``).
FRAME_FILES = "frame_*.png"


def _is_frame(path: Path) -> bool:
    """True for a PNG frame an export writes (:data:`FRAME_FILES`)."""
    return path.match(FRAME_FILES)


def check_frames_folder(out: str | Path) -> None:
    """Refuse ``out``, an existing folder named for PNG frames, where it holds anything but
    earlier frames: those are the user's, and the frames would be mixed in with them.

    Raises
    ------
    ExportError
        ``"notes holds other files (todo.txt); choose an empty folder or one with only
        earlier frames"``.
    """
    out = Path(out)
    if not out.is_dir():
        return
    other = sorted(p.name for p in out.iterdir() if not _is_frame(p))
    if other:
        raise ExportError(f"{out} holds other files ({other[0]}); choose an empty "
                          "folder or one with only earlier frames")


class AtomicTarget:
    """A temporary file or folder next to ``out`` (inside ``out``, an existing folder of
    frames) that takes its place only on commit.

    Parameters
    ----------
    out
        The final path.
    folder
        True for a folder of frames, False for a single file.
    """

    def __init__(self, out: Path, folder: bool) -> None:
        self.out = Path(out)
        self.folder = folder
        if str(out) == "":
            raise ExportError("the output name is empty; give a file name such as run.mp4, "
                              "or a folder name for PNG frames")
        if folder and self.out.exists() and not self.out.is_dir():
            raise ExportError(f"{self.out} is a file; give a folder name for PNG frames")
        if not folder and self.out.is_dir():
            raise ExportError(f"{self.out} is a folder; give a file name for the movie")
        #: An existing folder keeps its place (it may be the working folder, ``--out .``, or
        #: one whose parent is not writable): the frames are written into a hidden folder
        #: inside it and moved into it on commit. A new folder or a file is written beside
        #: the target and renamed into place.
        self.inside = folder and self.out.is_dir()
        if self.inside:
            check_frames_folder(self.out)
        # Path(".").parent is "." itself: the names come from the absolute path.
        parent = self.out if self.inside else Path(os.path.abspath(self.out)).parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = self._create_temporary(parent)
        except OSError as exc:
            raise ExportError(f"cannot write to {parent}: {folder_refusal(exc, parent)}; "
                              "choose another folder") from None

    def _create_temporary(self, parent: Path) -> Path:
        # Not tempfile.mkstemp: its 0600 mode would stick to the finished movie;
        # a plain create honours the user's umask like any other saved file.
        for _ in range(100):
            name = Path(os.path.abspath(self.out)).name
            tmp = parent / f".{name}.{secrets.token_hex(4)}.part{self.out.suffix}"
            try:
                if self.folder:
                    tmp.mkdir()
                else:
                    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
                return tmp
            except FileExistsError:
                continue
        raise OSError("no free temporary name")

    def commit(self) -> Path:
        """Move the finished output into place."""
        try:
            if self.inside:
                self._fill_folder(self.tmp)
            else:
                os.replace(self.tmp, self.out)
        except OSError as exc:
            self.discard()
            raise ExportError(f"cannot move the finished export to {self.out}: "
                              f"{exc.strerror or exc}") from None
        return self.out

    def _fill_folder(self, tmp: Path) -> None:
        # Only a folder of earlier frames is refilled; anything else is the user's.
        others = self._other_files()
        if others:
            raise OSError(f"the folder holds other files ({others[0]}); choose an empty folder")
        new = sorted(p.name for p in tmp.iterdir())
        for name in new:
            os.replace(tmp / name, self.out / name)
        keep = set(new)
        for old in self._frame_files():
            if old not in keep:     # earlier frames past the new movie's end
                (self.out / old).unlink()
        tmp.rmdir()

    def _frame_files(self) -> list[str]:
        return sorted(p.name for p in self.out.iterdir() if _is_frame(p))

    def _other_files(self) -> list[str]:
        # The export's own temporary folder, inside the target, is not the user's.
        return sorted(p.name for p in self.out.iterdir()
                      if p.name != self.tmp.name and not _is_frame(p))

    def discard(self) -> None:
        """Remove the temporary output."""
        if self.folder:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            try:
                self.tmp.unlink()
            except FileNotFoundError:
                pass


class FrameEncoder:
    """Feed ``(height, width, 3)`` uint8 frames to ffmpeg.

    Parameters
    ----------
    path
        Output file, or output folder for ``fmt == "png"``.
    fmt
        ``"mp4"``, ``"webm"``, ``"gif"`` or ``"png"``.
    size
        ``(width, height)`` of every frame.
    fps
        Frame rate.
    crf
        Quality for MP4/WebM.
    speed
        x264 preset.
    """

    def __init__(self, path: Path, fmt: str, size: tuple[int, int], fps: float,
                 crf: int | None = None, speed: str = "veryfast") -> None:
        self.size = (int(size[0]), int(size[1]))
        self.frames = 0
        w, h = self.size
        if fmt in ("mp4", "webm") and (w % 2 or h % 2):
            raise ExportError(f"size {w}x{h}: {fmt.upper()} needs an even width and height, "
                              f"e.g. {w + w % 2}x{h + h % 2}")
        target = str(Path(path) / PNG_PATTERN) if fmt == "png" else str(path)
        cmd = [ffmpeg_exe(), "-y", "-hide_banner", "-loglevel", "error", "-nostdin",
               "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", f"{fps:g}",
               "-i", "-", "-an", *_codec_args(fmt, crf, fps, speed)]
        if fmt == "png":
            cmd += ["-f", "image2"]
        cmd.append(target)
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=self._stderr)
        except OSError as exc:
            self._stderr.close()
            raise ExportError(f"cannot start the encoder: {exc.strerror or exc}") from None

    def _failure(self, what: str) -> ExportError:
        self._proc.wait()
        self._stderr.seek(0)
        lines = [ln.strip() for ln in self._stderr.read().decode("utf-8", "replace").splitlines()
                 if ln.strip()]
        detail = lines[-1] if lines else f"exit status {self._proc.returncode}"
        if "No space left" in detail:
            detail += "; free some disk space"
        return ExportError(f"the encoder failed {what}: {detail}")

    def write(self, frame: np.ndarray) -> None:
        """Send one frame (exactly ``size``, uint8 RGB)."""
        w, h = self.size
        if frame.shape != (h, w, 3) or frame.dtype != np.uint8:
            raise ValueError(f"frame of shape {frame.shape} {frame.dtype}, expected ({h}, {w}, 3) uint8")
        assert self._proc.stdin is not None  # opened with stdin=PIPE
        try:
            self._proc.stdin.write(np.ascontiguousarray(frame).data)
        except (BrokenPipeError, OSError):
            raise self._failure(f"at frame {self.frames}") from None     # counted from 0
        self.frames += 1

    def close(self) -> None:
        """Finish the file; raise :class:`ExportError` if ffmpeg reports a failure."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        rc = self._proc.wait()
        try:
            if rc != 0:
                raise self._failure("while finishing the file")
        finally:
            self._stderr.close()

    def abort(self) -> None:
        """Stop ffmpeg at once (the output is left incomplete for the caller to remove)."""
        if self._proc.poll() is None:
            self._proc.kill()
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        self._proc.wait()
        self._stderr.close()


def encode_movie(out: Path, fmt: str, crf: int | None, options: "ExportOptions", renderer: Any,
                 frames: Callable[[EmitFrame], None], total: int,
                 progress: Callable[[int, int], None] | None,
                 cancelled: Callable[[], bool] | None, close_renderer: bool) -> Path:
    """Encode the frames ``frames(emit)`` draws into ``out`` (format ``fmt``), all or nothing.

    Each ``emit(values, overlay, *more)`` first asks ``cancelled()``, then encodes
    ``renderer.render_state(values, overlay, azimuth, *more)``, the camera turned
    ``options.orbit`` degrees per second of movie time from ``renderer.base_azimuth``,
    and reports ``progress(frames_done, total)``. The file appears at ``out`` only
    once the encoder finished (:class:`AtomicTarget`); ``close_renderer``: close
    ``renderer`` at the end, whatever happened.

    Raises
    ------
    ExportCancelled
        When ``cancelled()`` returned True; nothing is left at ``out``.
    ExportError
        For an unwritable path (an :class:`OSError` in one line) or an encoder
        failure; nothing is left at ``out``. What ``frames`` raises passes through,
        likewise leaving nothing.
    """
    target: AtomicTarget | None = None
    encoder: FrameEncoder | None = None
    try:
        target = AtomicTarget(out, folder=(fmt == "png"))
        encoder = FrameEncoder(target.tmp, fmt, options.size, options.fps, crf, options.speed)
        base = float(renderer.base_azimuth)
        done = 0

        def emit(values: np.ndarray, overlay: Any, *more: Any) -> None:
            nonlocal done
            if cancelled is not None and cancelled():
                raise ExportCancelled("export cancelled; nothing was written")
            azimuth = base + options.orbit * done / options.fps
            assert encoder is not None
            encoder.write(renderer.render_state(values, overlay, azimuth, *more))
            done += 1
            if progress is not None:
                progress(done, total)

        frames(emit)
        encoder.close()
        encoder = None
        return target.commit()
    except BaseException as exc:
        if encoder is not None:
            encoder.abort()
        if target is not None:
            target.discard()
        if isinstance(exc, OSError):
            raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
        raise
    finally:
        if close_renderer:
            renderer.close()
