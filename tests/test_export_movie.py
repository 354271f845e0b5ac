"""Movie export writes what it promises: decoded frame counts, exact sizes, live content, atomicity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("vispy")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
iio = pytest.importorskip("imageio.v3")

from flyviz.export import ExportCancelled, ExportOptions, export_recording, movie_format  # noqa: E402
from flyviz.model.errors import ExportError  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A short real run of a small random model: (recording, anatomy)."""
    from flyviz.model.engine import Engine
    from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.recording import Recording
    from flyviz.record.run import GenerationSettings, iter_frames

    tok_path = write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=300)
    tokenizer = FlyTokenizer(tok_path)
    ckpt = make_random_checkpoint(neurons=600, edges=9000, vocabulary=tokenizer.vocab_size,
                                  tokenizer_path=tok_path, seed=4, name="tiny-600")
    engine = Engine(ckpt)
    rec = Recording(600, {"model_name": "tiny-600"})
    for frame in iter_frames(engine, tokenizer, "the cat saw a dog",
                             GenerationSettings(max_new_tokens=3)):
        rec.append(frame)
    engine.close()
    assert len(rec) >= 4
    return rec, ckpt.anatomy


def decode(path: Path) -> tuple[tuple[int, int], list[np.ndarray]]:
    """Every frame of a movie, decoded with the bundled ffmpeg."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    w, h = meta["size"]
    frames = [np.frombuffer(b, np.uint8).reshape(h, w, 3) for b in reader]
    return (w, h), frames


def changes(frames: list[np.ndarray]) -> list[float]:
    return [float(np.abs(a.astype(int) - b.astype(int)).mean()) for a, b in zip(frames, frames[1:])]


def leftovers(folder: Path, keep: set[str] = frozenset()) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def test_mp4_has_one_frame_per_token_step_at_the_exact_size(run, tmp_path):
    rec, anatomy = run
    opts = ExportOptions(size=(192, 108), fps=10, frames_per_token=2, stop=4)
    out = export_recording(rec, anatomy, tmp_path / "run.mp4", opts)
    size, frames = decode(out)
    assert size == (192, 108)
    assert len(frames) == 4 * 2
    assert all(f.mean() > 3 for f in frames)  # never blank: overlays and brain drawn
    assert max(changes(frames)) > 0.3  # the picture follows the activity
    assert leftovers(tmp_path) == ["run.mp4"]


def test_1080p_stays_1080_lines(run, tmp_path):
    rec, anatomy = run
    opts = ExportOptions(size=(1920, 1080), frames_per_token=1, stop=2, overlays=False)
    size, frames = decode(export_recording(rec, anatomy, tmp_path / "hd.mp4", opts))
    assert size == (1920, 1080) and len(frames) == 2
    assert frames[0].shape == (1080, 1920, 3)


def test_webm_and_gif_decode_to_the_promised_frames(run, tmp_path):
    rec, anatomy = run
    opts = ExportOptions(size=(160, 96), fps=8, frames_per_token=1, stop=3, hold_seconds=0.25)
    webm_size, webm = decode(export_recording(rec, anatomy, tmp_path / "run.webm", opts))
    assert webm_size == (160, 96) and len(webm) == 3 + 2
    gif = iio.imread(export_recording(rec, anatomy, tmp_path / "run.gif", opts), index=None)
    assert gif.shape[:3] == (5, 96, 160)
    assert gif[..., :3].mean() > 3 and max(changes(list(gif[:3, ..., :3]))) > 0.3


def test_png_frames_ease_between_token_states(run, tmp_path):
    rec, anatomy = run
    base = dict(size=(128, 80), stop=3, overlays=True)
    one = export_recording(rec, anatomy, tmp_path / "k1", ExportOptions(frames_per_token=1, **base))
    three = export_recording(rec, anatomy, tmp_path / "k3/", ExportOptions(frames_per_token=3, **base))
    k1 = [iio.imread(p) for p in sorted(one.glob("frame_*.png"))]
    k3 = [iio.imread(p) for p in sorted(three.glob("frame_*.png"))]
    assert len(k1) == 3 and len(k3) == 9
    assert k3[0].shape == (80, 128, 3)
    # The last eased frame of every token shows exactly that token's state.
    for token in range(3):
        np.testing.assert_array_equal(k3[3 * token + 2], k1[token])
    # In-between frames differ from the token frames they lead to.
    assert np.abs(k3[3].astype(int) - k3[5].astype(int)).mean() > 0.05


def test_hold_frames_repeat_the_last_token_and_orbit_turns(run, tmp_path):
    rec, anatomy = run
    still = ExportOptions(size=(96, 64), fps=4, frames_per_token=1, stop=2, hold_seconds=0.5,
                          overlays=False)
    frames = [iio.imread(p) for p in sorted(export_recording(rec, anatomy, tmp_path / "a",
                                                             still).glob("*.png"))]
    assert len(frames) == still.frame_count(2) == 4
    np.testing.assert_array_equal(frames[1], frames[3])
    turning = ExportOptions(size=(96, 64), fps=4, frames_per_token=1, stop=2, hold_seconds=0.5,
                            overlays=False, orbit=90.0)
    frames = [iio.imread(p) for p in sorted(export_recording(rec, anatomy, tmp_path / "b",
                                                             turning).glob("*.png"))]
    assert np.abs(frames[2].astype(int) - frames[3].astype(int)).mean() > 0.05


def test_cancel_leaves_nothing_behind(run, tmp_path):
    rec, anatomy = run
    seen = []

    def cancelled() -> bool:
        return len(seen) >= 3

    for name in ("run.mp4", "frames"):
        with pytest.raises(ExportCancelled):
            export_recording(rec, anatomy, tmp_path / name,
                             ExportOptions(size=(96, 64), frames_per_token=2),
                             progress=lambda done, total: seen.append(done), cancelled=cancelled)
        seen.clear()
    assert leftovers(tmp_path) == []


def test_errors_leave_nothing_behind(run, tmp_path):
    rec, anatomy = run
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(ExportError, match="cannot write"):
        export_recording(rec, anatomy, blocker / "run.mp4", ExportOptions(size=(96, 64)))
    # The message says which part is a file, not mkdir's bare "File exists", also from
    # deeper inside it (where the system says "Not a directory").
    for out in (blocker / "run.mp4", blocker / "deeper" / "run.mp4"):
        with pytest.raises(ExportError) as err:
            export_recording(rec, anatomy, out, ExportOptions(size=(96, 64)))
        assert f"{blocker} is a file, not a folder" in str(err.value)
        assert "File exists" not in str(err.value) and "Not a directory" not in str(err.value)

    class Failing:
        """A renderer that breaks after two frames, like a lost GPU context."""

        base_azimuth = 0.0
        calls = 0

        def render_state(self, state, overlay, azimuth):
            self.calls += 1
            if self.calls > 2:
                raise RuntimeError("context lost")
            return np.zeros((64, 96, 3), np.uint8)

    for name in ("run.webm", "frames"):
        with pytest.raises(RuntimeError):
            export_recording(rec, anatomy, tmp_path / name, ExportOptions(size=(96, 64)),
                             renderer=Failing())
    # An existing movie is untouched by a failed re-export.
    (tmp_path / "keep.mp4").write_bytes(b"old movie")
    with pytest.raises(RuntimeError):
        export_recording(rec, anatomy, tmp_path / "keep.mp4", ExportOptions(size=(96, 64)),
                         renderer=Failing())
    assert (tmp_path / "keep.mp4").read_bytes() == b"old movie"
    assert leftovers(tmp_path) == ["blocker", "keep.mp4"]


def test_bad_requests_fail_before_writing(run, tmp_path):
    rec, anatomy = run
    with pytest.raises(ExportError, match="even"):
        export_recording(rec, anatomy, tmp_path / "odd.mp4", ExportOptions(size=(97, 64)))
    with pytest.raises(ExportError, match=r"\.avi"):
        export_recording(rec, anatomy, tmp_path / "x.avi", ExportOptions(size=(96, 64)))
    with pytest.raises(ExportError, match="neurons"):
        from flyviz.model.layout import ball_layout

        export_recording(rec, ball_layout(10), tmp_path / "x.mp4", ExportOptions(size=(96, 64)))
    with pytest.raises(ExportError, match="quality"):
        export_recording(rec, anatomy, tmp_path / "x.mp4", ExportOptions(size=(96, 64), quality=99))
    with pytest.raises(ExportError, match="token range"):
        export_recording(rec, anatomy, tmp_path / "x.mp4", ExportOptions(size=(96, 64), start=500))
    assert leftovers(tmp_path) == []


def test_format_follows_the_output_name(tmp_path):
    assert movie_format("a/run.MP4") == "mp4"
    assert movie_format("run.webm") == "webm"
    assert movie_format("run.gif") == "gif"
    assert movie_format("frames") == "png"
    assert movie_format("frames.d/") == "png"
    (tmp_path / "existing.dir").mkdir()
    assert movie_format(tmp_path / "existing.dir") == "png"


def test_png_folder_is_replaced_whole_but_never_over_other_files(run, tmp_path):
    rec, anatomy = run
    out = tmp_path / "frames"
    export_recording(rec, anatomy, out, ExportOptions(size=(64, 48), frames_per_token=2, stop=3))
    # Numbered from 0, as every frame and token in flyviz is (ffmpeg's image2 starts at 1).
    assert sorted(p.name for p in out.glob("frame_*.png")) == [f"frame_{i:06d}.png"
                                                                for i in range(6)]
    export_recording(rec, anatomy, out, ExportOptions(size=(64, 48), frames_per_token=1, stop=2))
    assert sorted(p.name for p in out.iterdir()) == ["frame_000000.png", "frame_000001.png"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="other files"):
        export_recording(rec, anatomy, out, ExportOptions(size=(64, 48), frames_per_token=1, stop=2))
    assert (out / "notes.txt").read_text() == "mine" and len(list(out.glob("*.png"))) == 2
    assert leftovers(tmp_path) == ["frames"]


def test_png_frames_go_into_the_working_folder_given_as_dot(run, tmp_path, monkeypatch):
    """``--out .``: Path(".").parent is "." itself, so the temporary folder was made inside
    the target and then counted as one of the user's files, after the whole movie."""
    rec, anatomy = run
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    out = export_recording(rec, anatomy, ".", ExportOptions(size=(64, 48), frames_per_token=1,
                                                             stop=2))
    assert str(out) == "."
    assert sorted(p.name for p in here.iterdir()) == ["frame_000000.png", "frame_000001.png"]
    assert Path.cwd() == here and here.is_dir()    # the folder itself kept its place
    assert leftovers(tmp_path) == ["here"]
    (here / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="other files"):
        export_recording(rec, anatomy, ".", ExportOptions(size=(64, 48), frames_per_token=1))
    assert leftovers(here) == ["frame_000000.png", "frame_000001.png", "notes.txt"]
    with pytest.raises(ExportError, match="empty"):
        export_recording(rec, anatomy, "", ExportOptions(size=(64, 48)))


def test_encoder_dying_midway_is_an_export_error_and_leaves_nothing(run, tmp_path, monkeypatch):
    """Like a full disk: ffmpeg exits while frames are still coming."""
    from flyviz.export import encoders

    rec, anatomy = run
    original = encoders.FrameEncoder.write

    def write(self, frame):
        if self.frames == 2:
            self._proc.kill()
            self._proc.wait()
        original(self, frame)

    monkeypatch.setattr(encoders.FrameEncoder, "write", write)
    with pytest.raises(ExportError, match="encoder failed"):
        export_recording(rec, anatomy, tmp_path / "run.mp4",
                         ExportOptions(size=(96, 64), frames_per_token=4))
    assert leftovers(tmp_path) == []
