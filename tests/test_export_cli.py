"""``flyviz export`` end to end: run a model or a saved recording into a movie."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vispy")
imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
iio = pytest.importorskip("imageio.v3")

from flyviz.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small random model in the fly-llm-hf layout (no anatomy: export lays it out)."""
    from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.model.writers import write_fly_llm_hf

    root = tmp_path_factory.mktemp("model")
    tok = write_tokenizer(root / "tokenizer-src.json", vocab_size=300)
    ckpt = make_random_checkpoint(neurons=400, edges=5000, vocabulary=FlyTokenizer(tok).vocab_size,
                                  tokenizer_path=tok, seed=5, name="tiny-400")
    return write_fly_llm_hf(ckpt, root / "tiny-400")


def expected_frames(model_dir, prompt: str, new_tokens: int) -> int:
    """Frames the same greedy run yields (one per consumed token)."""
    from flyviz.model.engine import Engine
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.run import GenerationSettings, iter_frames

    ckpt = load_model(str(model_dir))
    engine = Engine(ckpt)
    n = sum(1 for _ in iter_frames(engine, FlyTokenizer(ckpt.tokenizer_path), prompt,
                                   GenerationSettings(max_new_tokens=new_tokens)))
    engine.close()
    return n


def count_frames(path) -> tuple[tuple[int, int], int]:
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    return tuple(meta["size"]), sum(1 for _ in reader)


def test_export_runs_the_model_into_a_movie(model_dir, tmp_path, capsys):
    out = tmp_path / "run.mp4"
    rc = main(["export", str(model_dir), "--prompt", "the cat", "--max-new-tokens", "3",
               "--out", str(out), "--size", "160x90", "--frames-per-token", "2", "--fps", "10",
               "--hold", "0.3", "--orbit", "30"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "graph layout" in err and "frames" in err  # told about the layout; progress shown
    tokens = expected_frames(model_dir, "the cat", 3)
    assert count_frames(out) == ((160, 90), tokens * 2 + 3)


def test_export_renders_a_saved_recording(model_dir, tmp_path, capsys):
    from flyviz.model.resolve import load_model
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import record_prompt

    ckpt = load_model(str(model_dir))
    rec = record_prompt(ckpt, "a dog", GenerationSettings(max_new_tokens=2), spec=str(model_dir))
    rec.save(tmp_path / "run.flyrec")
    rc = main(["export", "--recording", str(tmp_path / "run.flyrec"), "--out",
               str(tmp_path / "frames"), "--size", "96x64", "--frames-per-token", "1",
               "--hold", "0", "--tokens", "1:3", "--mode", "abs"])
    assert rc == 0
    frames = sorted((tmp_path / "frames").glob("frame_*.png"))
    assert len(frames) == 2
    assert iio.imread(frames[0]).shape == (64, 96, 3)
    # --tokens reads as a Python slice: the last two, or a stop past the end (the end);
    # a range that holds no token names the recording's.
    for given, count in (("-2:", 2), ("1:99", len(rec) - 1)):
        out = tmp_path / f"frames{given.replace(':', '_')}"
        assert main(["export", "--recording", str(tmp_path / "run.flyrec"), "--out", str(out),
                     "--size", "96x64", "--frames-per-token", "1", "--hold", "0",
                     f"--tokens={given}"]) == 0
        assert len(list(out.glob("frame_*.png"))) == count
    assert main(["export", "--recording", str(tmp_path / "run.flyrec"), "--out",
                 str(tmp_path / "none"), "--tokens", "20:"]) == 2
    assert f"holds none of the recording's {len(rec)} tokens (0 to {len(rec) - 1}" in \
        capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--size", "huge"], "WIDTHxHEIGHT"),
    (["--fps", "0"], "fps"),
    (["--quality", "80"], "quality"),
    (["--tokens", "x:y"], "A:B"),
    # One number was read as "3:" (token 3 to the end) without a word.
    (["--tokens", "3"], "--tokens 3 names one bound; give a range A:B: 3:4 for token 3 alone"),
    (["--tokens=-1"], "-1: for the last token"),
])
def test_bad_options_fail_with_one_line_and_status_2(model_dir, tmp_path, capsys, args, message):
    rc = main(["export", str(model_dir), "--prompt", "the cat", "--out", str(tmp_path / "x.mp4"),
               *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_an_empty_out_is_refused_before_the_model_runs(model_dir, tmp_path, capsys,
                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("flyviz.model.resolve.load_model", lambda *a, **k: pytest.fail("ran"))
    rc = main(["export", str(model_dir), "--prompt", "the cat", "--out", ""])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--out is empty" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_and_mismatched_recording(model_dir, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    rc = main(["export", str(model_dir), "--prompt", "the cat", "--max-new-tokens", "1",
               "--out", str(tmp_path / "file" / "x.mp4"), "--size", "96x64"])
    assert rc == 2 and "cannot write" in capsys.readouterr().err
    from flyviz.record.recording import Recording

    other = Recording(7, {"model": str(model_dir)})
    other.save(tmp_path / "other.flyrec")
    rc = main(["export", "--recording", str(tmp_path / "other.flyrec"), "--out",
               str(tmp_path / "y.mp4")])
    err = capsys.readouterr().err
    assert rc == 2 and ("neurons" in err or "no frames" in err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "other.flyrec"]


def test_progress_line_reports_frames_and_time_left():
    import io

    from flyviz.commands.export import ProgressLine

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    line = ProgressLine("exporting run.mp4", out)
    line.last = -1.0  # let the first update through at once
    line(30, 120)
    line(120, 120)
    text = out.getvalue().replace("\x1b[K", "")
    assert "30/120 frames" in text and "left" in text
    assert text.rstrip().endswith("fps)") and "120/120 frames in" in text
    log = io.StringIO()  # not a terminal: plain lines, the first at once, then every 10 s
    quiet = ProgressLine("exporting", log)
    quiet(1, 50)
    quiet(50, 50)
    assert "\r" not in log.getvalue() and log.getvalue().count("\n") == 2


def test_a_recording_named_first_with_a_prompt_is_refused_as_a_recording(tmp_path, capsys):
    """``flyviz export run.flyrec --prompt hi`` read run.flyrec as a model folder ("'.' holds
    no Fly LLM checkpoint"); it is the recording the docs name first, refused beside
    --prompt in the user's words."""
    from cli_checks import cli_run, one_error_line

    code, _, err = cli_run(capsys, "export", str(tmp_path / "run.flyrec"), "--out",
                           str(tmp_path / "m.mp4"), "--prompt", "hi")
    one_error_line(code, err, "give either --prompt (run the model) or a recording (run.flyrec)")
    assert "Fly LLM checkpoint" not in err and "--recording" not in err


def test_the_time_left_is_counted_from_the_first_frame_not_the_set_up(monkeypatch):
    """The first estimates divided the frames by a time that held the set-up (renderer,
    encoder, the first frame's shaders): 20 s of set-up and 10 fps read "2:40 left" for 20
    s of work. The rate is now counted from the first report."""
    import io

    from flyviz.commands import export as export_command

    clock = [100.0]
    monkeypatch.setattr(export_command.time, "perf_counter", lambda: clock[0])

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    line = export_command.ProgressLine("exporting", out)
    clock[0] += 20.0                     # set-up, then the first frame
    line(1, 201)
    assert "1/201 frames, --:-- left" in out.getvalue()
    clock[0] += 10.0                     # 100 frames in 10 s: 10 fps, 100 frames to go
    line(101, 201)
    text = out.getvalue().replace("\x1b[K", "").split("\r")[-1]
    assert "101/201 frames, 10.0 fps, 0:10 left" in text
    clock[0] += 10.0
    line(201, 201)                       # the summary is over the whole time
    assert out.getvalue().replace("\x1b[K", "").rstrip().endswith(
        "201/201 frames in 40.0 s (5.0 fps)")


def test_gl_option_chooses_the_offscreen_opengl_and_the_variable_still_works(
        model_dir, tmp_path, capsys, monkeypatch):
    """--gl names the OpenGL the export reports; FLYVIZ_OFFSCREEN_GL still chooses without it,
    and --gl wins over it."""
    common = ["export", str(model_dir), "--prompt", "the cat", "--max-new-tokens", "1",
              "--size", "64x48", "--frames-per-token", "1", "--no-overlays"]
    assert main([*common, "--out", str(tmp_path / "qt"), "--gl", "default"]) == 0
    assert "OpenGL: PySide6" in capsys.readouterr().err  # Qt under the test's Xvfb
    assert main([*common, "--out", str(tmp_path / "egl"), "--gl", "egl"]) == 0
    assert "OpenGL: egl" in capsys.readouterr().err
    monkeypatch.setenv("FLYVIZ_OFFSCREEN_GL", "default")
    assert main([*common, "--out", str(tmp_path / "env")]) == 0
    assert "OpenGL: PySide6" in capsys.readouterr().err
    assert main([*common, "--out", str(tmp_path / "both"), "--gl", "egl"]) == 0
    assert "OpenGL: egl" in capsys.readouterr().err
    # The same frame whichever OpenGL drew it (both are Mesa's llvmpipe here).
    qt, egl = (iio.imread(next((tmp_path / d).glob("*.png"))).astype(int) for d in ("qt", "egl"))
    assert np.abs(qt - egl).max() <= 8


def test_bad_gl_is_one_line_before_the_model_loads(model_dir, tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exc:
        main(["export", str(model_dir), "--prompt", "x", "--out", str(tmp_path / "x.mp4"),
              "--gl", "vulkan"])
    assert exc.value.code == 2 and "--gl" in capsys.readouterr().err
    monkeypatch.setenv("FLYVIZ_OFFSCREEN_GL", "vulkan")
    rc = main(["export", str(tmp_path / "no-such-model"), "--prompt", "x",
               "--out", str(tmp_path / "x.mp4")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "FLYVIZ_OFFSCREEN_GL='vulkan'" in err and len(err.splitlines()) == 1


def test_outline_and_meshes_are_drawn_behind_the_movies_neurons(model_dir, tmp_path, capsys):
    def frames(*extra):
        out = tmp_path / f"frames{len(list(tmp_path.iterdir()))}"
        rc = main(["export", str(model_dir), "--prompt", "a dog", "--max-new-tokens", "1",
                   "--out", str(out), "--size", "160x120", "--frames-per-token", "1",
                   "--hold", "0", "--no-overlays", "--seed", "0", *extra])
        assert rc == 0, capsys.readouterr().err
        return [iio.imread(p).astype(int).sum(axis=2) for p in sorted(out.glob("frame_*.png"))]

    bare, shelled = frames()[-1], frames("--outline")[-1]
    lighter = shelled - bare > 6
    assert lighter[45:75, 60:100].mean() > 0.5          # a shell around the brain's centre
    assert not lighter[:8, :8].any() and not lighter[-8:, -8:].any()
    # A mesh file that cannot be read is one line, before the model runs or anything is written.
    broken = tmp_path / "broken.ply"
    broken.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 3\nend_header\n1 2\n")
    capsys.readouterr()
    rc = main(["export", str(model_dir), "--prompt", "a dog", "--out", str(tmp_path / "m.mp4"),
               "--mesh", str(broken)])
    err = capsys.readouterr().err
    assert rc == 2 and "broken.ply" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.mp4").exists()


@pytest.fixture(scope="module")
def saved_recording(model_dir, tmp_path_factory):
    """A short greedy run of the small model, saved."""
    from flyviz.model.resolve import load_model
    from flyviz.record.run import GenerationSettings
    from flyviz.record.runner import record_prompt

    rec = record_prompt(load_model(str(model_dir)), "a dog", GenerationSettings(max_new_tokens=2),
                        spec=str(model_dir))
    return rec.save(tmp_path_factory.mktemp("saved") / "run.flyrec")


@pytest.mark.parametrize("given,named", [
    (["--temperature", "0.5"], "--temperature shapes"),
    (["--seed", "3"], "--seed shapes"),
    (["--max-new-tokens", "4"], "--max-new-tokens shapes"),
    (["--min-new-tokens", "1"], "--min-new-tokens shapes"),
    (["--top-p", "0.9"], "--top-p shapes"),
    (["--states", "float32"], "--states shapes"),
    (["--kernel", "scipy"], "--kernel shapes"),
    (["--seed", "1", "--top-p", "0.5"], "--top-p and --seed shape"),
])
def test_options_of_a_run_are_refused_beside_a_recording(saved_recording, tmp_path, capsys,
                                                          given, named):
    """With --recording there is no run: the sampler, --states and --kernel would be
    ignored without a word (exit 0), so they are refused in one line, as --prompt is."""
    from cli_checks import cli_run, one_error_line

    out = tmp_path / "x.mp4"
    code, _, err = cli_run(capsys, "export", "--recording", str(saved_recording), "--out",
                           str(out), *given)
    one_error_line(code, err, named)
    assert "with --recording (run.flyrec) there is none" in err
    assert not out.exists()


@pytest.mark.parametrize("fps", ["240", "60", "50.5"])
def test_a_gif_faster_than_it_can_play_is_refused(saved_recording, tmp_path, capsys, fps):
    """A GIF's delays are whole centiseconds and browsers play one under 20 ms as 100 ms:
    --fps 240 wrote 10 ms delays (played ten times too slow) while saying 240 fps."""
    from cli_checks import cli_run, one_error_line

    out = tmp_path / "g.gif"
    code, _, err = cli_run(capsys, "export", "--recording", str(saved_recording), "--out",
                           str(out), "--fps", fps)
    one_error_line(code, err, f"fps {float(fps):g} is faster than a GIF plays",
                   "100/n plays exactly", ".mp4 or .webm")
    assert not out.exists()


def test_a_gif_plays_at_its_fps(saved_recording, tmp_path, capsys):
    """50 fps (100/2) gives every frame 20 ms; 30 fps alternates 30 and 40 ms delays so that
    the movie lasts as long as 30 fps says."""
    from PIL import Image

    def delays(fps):
        out = tmp_path / f"g{fps}.gif"
        assert main(["export", "--recording", str(saved_recording), "--out", str(out),
                     "--fps", fps, "--size", "96x64", "--frames-per-token", "3",
                     "--hold", "0"]) == 0, capsys.readouterr().err
        found = []
        with Image.open(out) as image:
            for i in range(image.n_frames):
                image.seek(i)
                found.append(image.info["duration"])
        return found

    assert set(delays("50")) == {20}
    thirty = delays("30")
    assert set(thirty) <= {30, 40} and abs(sum(thirty) - len(thirty) * 1000 / 30) <= 10


def test_a_folder_named_as_a_movie_is_refused_not_filled_with_frames(saved_recording, tmp_path,
                                                                     capsys):
    """--out d.mp4, where d.mp4 is a folder, wrote PNG frames into it: the movie's suffix
    wins, and the folder is refused in one line; d.mp4/ (a trailing slash) asks for frames
    in it and gets them."""
    from cli_checks import cli_run, one_error_line

    folder = tmp_path / "d.mp4"
    folder.mkdir()
    code, _, err = cli_run(capsys, "export", "--recording", str(saved_recording), "--out",
                           str(folder), "--size", "96x64")
    one_error_line(code, err, f"{folder} is a folder; give a file name for the MP4")
    assert list(folder.iterdir()) == []
    assert main(["export", "--recording", str(saved_recording), "--out", f"{folder}/",
                 "--size", "96x64", "--frames-per-token", "1", "--hold", "0",
                 "--tokens", "0:1"]) == 0
    assert [p.name for p in folder.iterdir()] == ["frame_000000.png"]
