"""``flyviz export``: render a run, or a saved recording, as MP4/WebM/GIF/PNG frames.

Works without a display (EGL surfaceless, else a display such as Xvfb, else
OSMesa). A progress line on stderr shows frames done and time left.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flyviz.commands._options import (add_colour_mode_option, add_dataset_option,
                                      add_generation_options, add_intervention_options,
                                      add_kernel_option, add_recording_options,
                                      colour_mode_for, generation_settings,
                                      interventions_from_args, kernel_from_args, model_from_args,
                                      note_recording_mismatch, warn_idle_interventions)
from flyviz.errors import InputError
from flyviz.render.gl_backend import BACKENDS, GL_HELP

#: ``--speed`` when not given: ExportOptions' own default (not imported from there, as
#: building the parser must stay cheap); any other value is refused for all but MP4.
SPEED_DEFAULT = "veryfast"

EPILOG = """\
output format (from --out):
  run.mp4     H.264 (yuv420p; --quality is the x264 CRF, default 20, lower is better)
  run.webm    VP9 (plays in web pages; --quality is the VP9 CRF, default 34)
  run.gif     animated GIF
  frames/     a folder of PNG frames (any name without an extension):
              frame_000000.png, frame_000001.png, ..., one a movie frame, numbered
              from 0 as every frame and token in flyviz is

frames: each token gets --frames-per-token frames easing from the previous state
to the token's, plus round(--hold * --fps) hold frames at the end.

OpenGL: EGL without a display is tried first, then the usual display (e.g. under
xvfb-run), then OSMesa; --gl egl|default|osmesa (or FLYVIZ_OFFSCREEN_GL) chooses.

examples:
  flyviz export demo --prompt "Tom and his dog" --out run.mp4
  flyviz export ./fly-llm-hf --prompt "Once upon a time" --out run.webm --size 1920x1080 \\
      --orbit 12 --mode abs
  flyviz export --recording run.flyrec --out frames/ --tokens 10:40
  flyviz export ./web --dataset ./dataset --prompt "Tom and his dog" --out tom.webm \\
      --record tom.flyrec
  flyviz export demo --prompt "Tom and his dog" --silence 'sign:inhibitory@10:' --out silenced.mp4

With interventions, the recording (--record) keeps them in its metadata (JSON,
under "interventions"), so the run can be reopened and replayed with them. The
colour range, once --scale, is --color-scale; --scale scales synapses.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz export``."""
    parser.add_argument("spec", metavar="SPEC", nargs="?", default=None,
                        help="model folder, hub repo id or 'demo' (with --recording: "
                             "default is the model stored in the recording)")
    parser.add_argument("--prompt", help="text to continue (needed without --recording)")
    parser.add_argument("--recording", metavar="FILE", type=Path,
                        help="render this saved .flyrec instead of running the model")
    parser.add_argument("--out", metavar="FILE", required=True,
                        help="output: .mp4, .webm, .gif, or a folder for PNG frames")
    add_dataset_option(parser)
    generation = parser.add_argument_group("generation")
    add_kernel_option(generation)
    add_generation_options(generation)
    add_recording_options(generation)
    movie = parser.add_argument_group("movie")
    movie.add_argument("--size", default="1280x720", metavar="WxH",
                       help="frame size in pixels (default 1280x720)")
    movie.add_argument("--fps", type=float, default=30.0, metavar="F",
                       help="frames per second (default 30); a GIF plays at most 50, and "
                            "exactly at 100/n (50, 25, 20...)")
    movie.add_argument("--frames-per-token", type=int, default=6, metavar="K",
                       help="frames per token, easing between states (default 6)")
    movie.add_argument("--quality", type=int, default=None, metavar="Q",
                       help="encoder CRF: lower is better and larger (MP4 default 20, WebM 34)")
    movie.add_argument("--orbit", type=float, default=0.0, metavar="DEG_PER_SECOND",
                       help="turn the brain this many degrees per second (default 0)")
    add_colour_mode_option(movie)
    movie.add_argument("--view", choices=("front", "top", "side"), default="front",
                       help="camera direction (default front)")
    movie.add_argument("--color-scale", type=float, default=None, metavar="H",
                       help="activation at the end of the colour range (default: automatic)")
    movie.add_argument("--tokens", default=None, metavar="A:B",
                       help="export only tokens A to B-1 of the run (each gives --frames-per-token "
                            "frames), as a Python slice: "
                            "a bound left out is the start or the end, a negative one counts "
                            "from the end (write --tokens=-5: for the last five, 3:4 for token "
                            "3 alone; default all)")
    movie.add_argument("--hold", type=float, default=1.0, metavar="SECONDS",
                       help="keep the last frame on screen this long (default 1)")
    movie.add_argument("--speed", default=SPEED_DEFAULT, metavar="PRESET",
                       help=f"x264 preset for MP4 (default {SPEED_DEFAULT})")
    movie.add_argument("--gl", choices=("auto",) + BACKENDS, default="auto", help=GL_HELP)
    movie.add_argument("--no-overlays", action="store_true",
                       help="draw only the brain (no text, bars or colourbar)")
    movie.add_argument("--outline", action="store_true",
                       help="draw the brain's outline, computed from the somas, behind the "
                            "neurons")
    movie.add_argument("--mesh", action="append", type=Path, metavar="FILE",
                       help="a mesh (.obj, .ply, .stl: a brain outline or neuropils) drawn "
                            "behind the neurons; repeatable; needs flyviz[meshes]")
    # default None, not 1: a --mesh-scale given without --mesh is refused, not ignored
    movie.add_argument("--mesh-scale", type=float, default=None, metavar="S",
                       help="multiply --mesh coordinates by S to get micrometres (e.g. 0.008 "
                            "for 8 nm voxels; default 1)")
    parser.add_argument("--bench", action="store_true",
                        help="also print render and encode speed and memory use")
    add_intervention_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


#: Options that shape a run of the model (SPEC and --prompt), by argparse dest: with
#: --recording there is no run, and they would be ignored without a word.
RUN_OPTIONS = ("max_new_tokens", "min_new_tokens", "temperature", "top_p", "seed", "states",
               "kernel")


def _run_options_given(args: argparse.Namespace) -> list[str]:
    """The :data:`RUN_OPTIONS` the user gave (a value other than the option's default), as
    they are typed (``--top-p``)."""
    defaults = argparse.ArgumentParser(add_help=False)
    configure(defaults)
    return [f"--{dest.replace('_', '-')}" for dest in RUN_OPTIONS
            if getattr(args, dest, None) != defaults.get_default(dest)]


def _token_range(text: str | None) -> tuple[int, int | None]:
    """``--tokens A:B`` as ``(start, stop)`` (``stop`` ``None``: to the end).

    A single number is refused: it was read as ``A:`` (from token A to the end), where a
    user may well mean token A alone; the message says how to write either.
    """
    if not text:
        return 0, None
    a, colon, b = text.partition(":")
    if not colon:
        try:
            k = int(a)
        except ValueError:
            raise InputError(f"--tokens {text!r} must look like A:B, e.g. 10:40") from None
        ways = "-1: for the last token" if k == -1 else \
            f"{k}:{k + 1} for token {k} alone, {k}: from it to the end"
        raise InputError(f"--tokens {text} names one bound; give a range A:B: {ways}")
    try:
        return (int(a) if a else 0), (int(b) if b else None)
    except ValueError:
        raise InputError(f"--tokens {text!r} must look like A:B, e.g. 10:40") from None


class ProgressLine:
    """``exporting [#####.....] 120/480 frames, 9.8 fps, 0:37 left`` on stderr."""

    def __init__(self, label: str, stream: Any = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.last = 0.0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.open_line = False
        #: ``(time, frames done)`` at the first report: the rate that predicts the time left
        #: is counted from there, not from the start, which paid for the set-up (the
        #: renderer, the encoder, the first frame's shaders) and made the first estimates
        #: several times too long.
        self.baseline: tuple[float, int] | None = None

    def end_line(self) -> None:
        """Finish a live line left open (before an error message is printed)."""
        if self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        final = done >= total
        if self.baseline is None:
            self.baseline = (now, done)
        # A terminal gets a live line; a log gets a line every 10 seconds.
        if not final and now - self.last < (0.25 if self.tty else 10.0):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        since, before = self.baseline
        rate = (done - before) / (now - since) if now > since and done > before else 0.0
        left = (total - done) / rate if rate > 0 else math.inf
        if final:
            rate = done / elapsed
        width = 24
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "." * (width - filled)
        eta = "--:--" if not math.isfinite(left) else f"{int(left) // 60}:{int(left) % 60:02d}"
        speed = f"{rate:.1f} fps, " if rate > 0 else ""
        text = (f"{self.label} [{bar}] {done}/{total} frames, {speed}{eta} left" if not final else
                f"{self.label} [{bar}] {done}/{total} frames in {elapsed:.1f} s ({rate:.1f} fps)")
        end = "\n" if final or not self.tty else ""
        self.stream.write(("\r" if self.tty else "") + text + "\x1b[K" * self.tty + end)
        self.stream.flush()
        self.open_line = not end


def _load_progress(label: str, fraction: float) -> None:
    sys.stderr.write(f"\rloading: {label} {100 * fraction:3.0f}%\x1b[K" if sys.stderr.isatty()
                     else "")
    if fraction >= 1.0 and sys.stderr.isatty():
        sys.stderr.write("\n")


def anatomy_for(model: Any) -> Any:
    """Where to draw the model's neurons (:meth:`~flyviz.record.runner.Model.drawing_anatomy`),
    saying so on stderr when it has no positions and a graph layout stands in."""
    from flyviz.viewer.layers import drawing_anatomy

    placement = drawing_anatomy(model, model.neurons)
    if placement.note is not None:
        print(f"flyviz: {placement.note}", file=sys.stderr)
    return placement.anatomy


def check_meshes(args: argparse.Namespace) -> None:
    """Mesh files that cannot be read fail in one line before the model runs; so does a
    ``--mesh-scale`` with no ``--mesh`` to scale (it would be ignored without a word)."""
    from flyviz.analysis.outline import load_mesh

    if args.mesh_scale is not None and not args.mesh:
        raise InputError(f"--mesh-scale {args.mesh_scale:g} scales the --mesh files and none "
                         "was given: add --mesh FILE or leave --mesh-scale out")
    scale = 1.0 if args.mesh_scale is None else args.mesh_scale
    args.loaded_meshes = [load_mesh(path, scale=scale) for path in args.mesh or ()]


#: What each output is, as a refusal names it.
_OUTPUT_NAMES = {"mp4": "an MP4", "webm": "a WebM", "gif": "a GIF",
                 "png": "a folder of PNG frames"}


def check_encoder_options(args: argparse.Namespace, fmt: str, crf: int | None) -> None:
    """Refuse the encoder options that output ``fmt`` would ignore without a word:
    ``--quality`` where there is no CRF (``crf`` is ``None``: a GIF, PNG frames) and a
    ``--speed`` other than the default where there is no x264 (all but MP4)."""
    what = _OUTPUT_NAMES.get(fmt, fmt)
    if args.quality is not None and crf is None:
        raise InputError(f"--quality sets the CRF of an MP4 or WebM encoder; {what} has "
                         "none: leave --quality out")
    if fmt != "mp4" and args.speed != SPEED_DEFAULT:
        raise InputError(f"--speed sets the x264 preset of an MP4; {what} has none: leave "
                         "--speed out")


def movie_meshes(args: argparse.Namespace, anatomy: Any) -> list[Any]:
    """The brain's outline (``--outline``) and the ``--mesh`` files, drawn behind the neurons."""
    meshes = []
    if args.outline:
        from flyviz.analysis.outline import soma_outline

        if anatomy.n_valid < 10:
            raise InputError("--outline needs the neurons' soma positions; this model has none")
        meshes.append(soma_outline(anatomy.positions_um()[anatomy.valid]))
    return meshes + list(getattr(args, "loaded_meshes", []))


def run(args: argparse.Namespace) -> int:
    """Check the options, get a recording (run the model or load one) and export it."""
    from flyviz.export import ExportOptions, export_recording, movie_format
    from flyviz.export.encoders import FRAME_FILES
    from flyviz.fileio import earlier_output, replaced_note
    from flyviz.render.offscreen import parse_size

    from flyviz.render.gl_backend import requested_backend

    requested_backend(args.gl)  # a bad FLYVIZ_OFFSCREEN_GL fails before the model loads
    start, stop = _token_range(args.tokens)
    options = ExportOptions(size=parse_size(args.size), fps=args.fps,
                            frames_per_token=args.frames_per_token, quality=args.quality,
                            orbit=args.orbit, mode=args.mode or "signed", start=start, stop=stop,
                            overlays=not args.no_overlays, view=args.view, scale=args.color_scale,
                            hold_seconds=args.hold, speed=args.speed).validate()
    fmt = movie_format(args.out)
    check_encoder_options(args, fmt, options.crf(fmt))  # a bad --quality fails before any work
    replaced = earlier_output(args.out, folder="frames", holding=FRAME_FILES)
    check_meshes(args)
    t0 = time.perf_counter()
    from flyviz.kinds import LANGUAGE, ModelKind, kind_of_recording

    kind: ModelKind = LANGUAGE
    if args.recording is None and args.spec and str(args.spec).endswith(".flyrec"):
        # flyviz export run.flyrec --out ...: a recording, even beside options it refuses
        # (with --prompt it was read as a model folder: "'.' holds no Fly LLM checkpoint").
        args.recording, args.spec = Path(args.spec), None
    if args.recording is not None:
        from flyviz.record.recording import Recording

        if args.prompt:
            raise InputError(f"give either --prompt (run the model) or a recording "
                             f"({args.recording.name}), not both")
        if args.record is not None:
            raise InputError("--record saves a run of the model; with --recording there is none")
        if args.interventions:
            raise InputError(f"interventions apply when the model runs: give SPEC and --prompt "
                             f"instead of a recording ({args.recording.name})")
        given = _run_options_given(args)
        if given:
            said = " and ".join(given) if len(given) <= 2 else \
                f"{', '.join(given[:-1])} and {given[-1]}"
            one = len(given) == 1
            raise InputError(f"{said} {'shapes' if one else 'shape'} a run of the model; with "
                             f"--recording ({args.recording.name}) there is none: leave "
                             f"{'it' if one else 'them'} out, or give SPEC and --prompt "
                             "instead")
        recording = Recording.load(args.recording)
        kind = kind_of_recording(recording)
        options = dataclasses.replace(options, mode=colour_mode_for(args.mode, kind,
                                                                    args.recording.name))
        # The recording's kind loads the model it was made with (SPEC wins), for its anatomy.
        model, why = kind.recording_model(recording, args.spec, instead="SPEC",
                                          dataset=args.dataset, progress=_load_progress,
                                          kernel=kernel_from_args(args))
        if model is not None:
            note_recording_mismatch(kind, recording, model, args.recording.name)
            anatomy = anatomy_for(model)
        else:
            from flyviz.viewer.layers import drawing_anatomy

            placement = drawing_anatomy(None, recording.neurons, missing=(
                f"{why} (give SPEC to use the model's anatomy)"))
            print(f"flyviz: {placement.note}", file=sys.stderr)
            anatomy = placement.anatomy
    else:
        if args.spec is None:
            raise InputError("give a model SPEC and --prompt, or --recording FILE")
        if not args.prompt or not args.prompt.strip():
            raise InputError("the prompt is empty: give some text for the model to continue")
        settings = generation_settings(args)
        interventions = interventions_from_args(args)
        with model_from_args(args, args.spec, _load_progress) as model:
            from flyviz.model.patching import bind_patches
            from flyviz.record.run import encode_prompt

            # A patch's prompts are checked before the (possibly long) layout.
            ids = encode_prompt(model.tokenizer, args.prompt, model.checkpoint.config.bos_token_id)
            interventions = list(bind_patches(interventions, len(ids), model.checkpoint))
            anatomy = anatomy_for(model)
            recording = model.record(args.prompt, settings, interventions=interventions,
                                     states_dtype=args.states)
        steps = len(recording)
        warn_idle_interventions([{**item, "steps": iv.steps_in(steps)} for item, iv in zip(
            recording.metadata.get("interventions", []), interventions)])
        if args.record is not None:
            recording.save(args.record)
            print(f"flyviz: saved {args.record} (seed {settings.seed})", file=sys.stderr)
    t1 = time.perf_counter()

    from flyviz.render.offscreen import offscreen_app

    meshes = movie_meshes(args, anatomy)
    _, backend = offscreen_app(backend=args.gl)
    progress = ProgressLine(f"exporting {Path(args.out).name or args.out}")
    rss = _Memory() if args.bench else None
    previous = _exit_on_sigterm()
    try:
        out = export_recording(recording, anatomy, args.out, options,
                               progress=rss.wrap(progress) if rss else progress, gl=args.gl,
                               meshes=meshes, kind=kind)
    finally:
        progress.end_line()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    t2 = time.perf_counter()
    a, b = options.token_range(len(recording))
    frames = options.frame_count(b - a)
    print(f"wrote {out} ({frames} frames, {options.size[0]}x{options.size[1]}, "
          f"{options.fps:g} fps, OpenGL: {backend}"
          f"{replaced_note(replaced, inside=True)})", file=sys.stderr)
    if rss is not None:
        print(f"bench: prepare {t1 - t0:.1f} s; export {frames} frames in {t2 - t1:.1f} s = "
              f"{frames / (t2 - t1):.1f} frames/s end to end; RSS grew {rss.growth_mb():.1f} MB "
              f"from frame 10 to the end (peak {rss.peak_mb():.0f} MB)", file=sys.stderr)
    return 0


def _exit_on_sigterm() -> Any:
    """Turn SIGTERM into SystemExit so that an export killed politely cleans up after itself."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


class _Memory:
    """Resident memory sampled during an export (for ``--bench``)."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    @staticmethod
    def _rss_mb() -> float:
        try:
            import psutil

            return psutil.Process().memory_info().rss / 2**20
        except ImportError:  # pragma: no cover - psutil is a test dependency
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def wrap(self, progress: Any) -> Any:
        def inner(done: int, total: int) -> None:
            if done == 10 or done % 25 == 0 or done == total:
                self.samples.append(self._rss_mb())
            progress(done, total)
        return inner

    def growth_mb(self) -> float:
        return self.samples[-1] - self.samples[0] if len(self.samples) > 1 else 0.0

    def peak_mb(self) -> float:
        return max(self.samples, default=0.0)
