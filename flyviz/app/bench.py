"""Benchmark of the desktop app at full size: redraw rate and token rate, window vs engine.

Run under a display (a desktop, or ``xvfb-run -s "-screen 0 1920x1200x24"``)::

    python -m flyviz.app.bench [--tokens 150] [--size 1280x720] [--speed-cap 0] [--json]
    python -m flyviz.app.bench --startup demo     # time to a usable window / to the model

It builds a synthetic model with the real sizes (49,393 neurons with somata,
9,050,172 synapses, rank-64 readout), then in one process:

1. runs :func:`~flyviz.record.run.iter_frames` with no window (the engine
   alone, producing the same frames the app gets) and times each token;
2. opens the main window with the brain view at ``--size``, runs the same
   prompt (no speed cap unless ``--speed-cap``) and records when each frame
   arrives and when the canvas redraws;
3. scrubs through the finished run, one token per display tick, and records
   the redraws again (the drawing cost with no engine working).

It prints medians (per-token and per-redraw intervals) and the ratio of the
window's token rate to the engine's. Nothing here is a test: figures depend on
the machine, so they are reported, not asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

_PROCESS_START = time.perf_counter()


def _median_rate(times: list[float]) -> float:
    """Events per second from the median interval between consecutive timestamps."""
    if len(times) < 3:
        return 0.0
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return 1.0 / statistics.median(gaps) if gaps else 0.0


def _overall_rate(start: float, times: list[float]) -> float:
    """Events per second from ``start`` to the last event (robust to bursty delivery)."""
    return len(times) / (times[-1] - start) if times and times[-1] > start else 0.0


def _engine_alone(checkpoint, tokenizer, prompt, settings, threads: int) -> tuple[float, float, int]:
    """(overall tokens/s, median tokens/s, frames) of iter_frames with no window."""
    from flyviz.model.engine import Engine
    from flyviz.record.run import iter_frames

    engine = Engine(checkpoint, threads=threads)
    start = time.perf_counter()
    stamps = [time.perf_counter() for _ in iter_frames(engine, tokenizer, prompt, settings)]
    engine.close()
    return _overall_rate(start, stamps), _median_rate(stamps), len(stamps)


def startup(spec: str) -> dict[str, float | str]:
    """Seconds from the start of this process until the window is up and until ``spec`` is ready.

    The model loads in the background, so the window is usable before it is.
    """
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from flyviz.app.main_window import MainWindow
    from flyviz.app.theme import apply_dark_theme

    apply_dark_theme(app)
    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="flyviz-bench-")) / "settings.ini"),
                         QSettings.Format.IniFormat)
    window = MainWindow(model_spec=spec, settings=settings)
    times: dict[str, float | str] = {"model": spec}

    def shown() -> None:
        times["window_interactive_s"] = round(time.perf_counter() - _PROCESS_START, 2)

    def ready(_name: str) -> None:
        times["model_ready_s"] = round(time.perf_counter() - _PROCESS_START, 2)
        app.exit(0)

    window.model_ready.connect(ready)
    window.message_shown.connect(lambda text: times.update(message=text)
                                 if window.last_error == text else None)
    window.show()
    QTimer.singleShot(0, shown)          # runs once the first events (the paint) are handled
    QTimer.singleShot(120_000, lambda: app.exit(0))
    app.exec()
    window.close()
    return times


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m flyviz.app.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=150, help="new tokens per run (default 150)")
    parser.add_argument("--size", default="1280x720", help="brain view size WxH (default 1280x720)")
    parser.add_argument("--speed-cap", type=float, default=0.0,
                        help="the window's speed cap in tokens/s (default 0: none)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--startup", metavar="SPEC",
                        help="only measure the time to an interactive window and to SPEC loaded")
    args = parser.parse_args(argv)
    if args.startup:
        result = startup(args.startup)
        print(json.dumps(result) if args.json else
              "\n".join(f"{key:28s} {value}" for key, value in result.items()))
        return 0
    width, height = (int(v) for v in args.size.lower().split("x"))

    from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, make_random_checkpoint, write_tokenizer
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.run import GenerationSettings

    prompt = "Once upon a time, there was a"
    settings = GenerationSettings(max_new_tokens=args.tokens, temperature=0.0, top_k=20)
    tmp = Path(tempfile.mkdtemp(prefix="flyviz-bench-"))
    tokenizer_path = write_tokenizer(tmp / "tokenizer.json", vocab_size=1024)
    vocabulary = FlyTokenizer(tokenizer_path).vocab_size
    t0 = time.perf_counter()
    checkpoint = make_random_checkpoint(FULL_NEURONS, FULL_EDGES, readout_rank=64,
                                        vocabulary=vocabulary, tokenizer_path=tokenizer_path,
                                        name="synthetic full size")
    build_s = time.perf_counter() - t0

    # 1. The engine alone, producing frames exactly as the app's worker does: with
    #    every core (as `flyviz bench`) and with the app's thread count.
    from flyviz.app.worker import engine_threads
    from flyviz.model.engine import default_threads

    tokenizer = FlyTokenizer(tokenizer_path)
    engine_rate, engine_median, frames_expected = _engine_alone(
        checkpoint, tokenizer, prompt, settings, default_threads())
    app_threads_rate, _, _ = _engine_alone(checkpoint, tokenizer, prompt, settings,
                                           engine_threads())

    # 2. The same run in the window.
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from flyviz.app.main_window import MainWindow
    from flyviz.app.theme import apply_dark_theme

    apply_dark_theme(app)
    window = MainWindow(model_spec=None,
                        settings=QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat))
    window.show()
    window.set_checkpoint(checkpoint)
    window.brain.setFixedSize(width, height)
    window.adjustSize()
    window.controls.speed_cap.setValue(args.speed_cap)
    window.controls.temperature.setValue(0.0)
    window.controls.max_new_tokens.setValue(args.tokens)
    from PySide6.QtCore import QTimer

    # exit(), not quit(): since Qt 6, quit() first closes every window.
    QTimer.singleShot(2000, lambda: app.exit(0))   # let the window settle
    app.exec()
    arrivals: list[float] = []
    window.session.frames_appended.connect(lambda _n: arrivals.append(time.perf_counter()))
    window.run_ended.connect(lambda _reason, _n: app.exit(0))
    QTimer.singleShot(600_000, lambda: app.exit(0))
    draws_before = len(window.brain.draw_times)
    start = time.perf_counter()
    window.run_prompt(prompt)
    app.exec()                                # the real event loop, as in the app
    end = time.perf_counter()
    draws = [t for t in list(window.brain.draw_times)[draws_before:] if start <= t <= end]
    canvas_size = tuple(int(v) for v in window.brain.canvas.physical_size)

    # 3. Scrubbing the finished run (no engine working): one token per display tick.
    scrub = QTimer()
    scrub.timeout.connect(lambda: window.show_token((window.session.index + 1) % len(window.session)))
    scrub.start(33)
    scrub_start = time.perf_counter()
    scrub_before = len(window.brain.draw_times)
    QTimer.singleShot(5000, lambda: app.exit(0))
    app.exec()
    scrub.stop()
    scrub_draws = [t for t in list(window.brain.draw_times)[scrub_before:] if t >= scrub_start]
    window.close()

    window_rate = _overall_rate(start, arrivals)
    result = {
        "neurons": FULL_NEURONS, "synapses": FULL_EDGES,
        "shown_neurons": int(checkpoint.anatomy.n_valid), "canvas_px": list(canvas_size),
        "window_px": [window.width(), window.height()],
        "model_build_s": round(build_s, 2), "frames": frames_expected,
        "frames_in_window": len(arrivals),
        "engine_threads": default_threads(), "app_engine_threads": engine_threads(),
        "engine_alone_tokens_per_s": round(engine_rate, 1),
        "engine_alone_median_tokens_per_s": round(engine_median, 1),
        "engine_alone_app_threads_tokens_per_s": round(app_threads_rate, 1),
        "window_speed_cap": args.speed_cap,
        "window_tokens_per_s": round(window_rate, 1),
        "window_vs_engine": round(window_rate / engine_rate, 2) if engine_rate else None,
        "redraws_per_s_median": round(_median_rate(draws), 1),
        "redraws_per_s_mean": round((len(draws) - 1) / (draws[-1] - draws[0]), 1)
        if len(draws) > 2 else 0.0,
        "run_wall_s": round(end - start, 2),
        "scrubbing_redraws_per_s_median": round(_median_rate(scrub_draws), 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
