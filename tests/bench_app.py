"""Benchmark of the desktop app at full size: redraw rate, token rate, and event-loop stalls.

Run under a display (a desktop, or ``xvfb-run -s "-screen 0 1920x1200x24"``)::

    python -m tests.bench_app [--tokens 150] [--size 1280x720] [--repeat 3] [--json]
    python -m tests.bench_app --stalls [--tokens 300]   # worst event-loop stall under use
    python -m tests.bench_app --stalls --demo           # the same on the demo brain and its atlas
    python -m tests.bench_app --startup demo            # time to a usable window / to the model
    python -m tests.bench_app --windows 8               # CPU to build, show and load a window
    python -m tests.bench_app --compare [--repeat 3]    # comparison mode against a single run
    python -m tests.bench_app --brain-cost [--repeat 3] [--outline]  # CPU per brain redraw, 2 paths
    python -m tests.bench_app --points [--repeat 3]    # 166,700 points beside 49,393

It builds a synthetic model with the real sizes (49,393 neurons with somata,
9,050,172 synapses, rank-64 readout), then in one process:

1. runs :func:`~flyviz.record.run.iter_frames` with no window (the engine
   alone, producing the same frames the app gets) and times each token;
2. opens the main window with the brain view at ``--size``, runs the same
   prompt (no speed cap unless ``--speed-cap``) and records when each frame
   arrives and when the canvas redraws;
3. scrubs through the finished run, one token per tick of a ``--scrub-hz``
   timer, and records the redraws again (the drawing cost with no engine working).

Steps 2 and 3 are repeated ``--repeat`` times; it prints the median of each
figure and its range over the repeats.

``--stalls`` instead runs the prompt in a window of ``--window`` size while
clicking neurons, scrubbing the timeline, going live and resizing the window,
and measures how long the event loop was blocked: a 5 ms heartbeat timer
records its own lateness. It prints the worst and the 99th-percentile stall and
the actions during the worst ones. With ``--demo`` it uses the demo brain
instead of the synthetic model, and the actions also open the demo brain's
atlas again and run *Find neurons* (the atlas card shows on every click).

``--compare`` instead runs the prompt in the window (after one warm-up run of
each) alternately as a single untouched run and as *Compare with untouched* (two engines in lockstep, the
intervened one with ``--compare-query`` silenced (``superclass:cb_sensory``), teacher-forced), ``--repeat``
times each, and prints the median token rate of each and their ratio.

``--brain-cost`` instead measures what one redraw of the brain view costs the
CPU, side by side in one process: two brain views at ``--size`` on the same
brain, one on the path a GPU gets (an OpenGL widget composed by Qt, the
original shaders: before software OpenGL had a path of its own) and one as
the app chooses for this OpenGL (with Mesa llvmpipe: frames shown as pixels,
the cloud painted on the CPU by :mod:`flyviz.render.splat`); where that paints
the cloud, a third view on the software path with the cloud drawn by OpenGL's
lean shaders (``lean_gl_path``) runs beside them for reference. Each redraw shows another state of a run of the synthetic
brain; the two take turns, ``--repeat`` rounds of ``--redraws`` redraws each,
and it prints the median CPU time per redraw of each (``time.process_time``:
every thread of the process, llvmpipe's rasteriser threads included; and the
UI thread's alone), wall time, and their ratio. ``--outline`` draws the brain's
outline behind the neurons in both.

``--points`` instead puts the whole MaleCNS (166,700 neurons, fly-connectome-malecns-166k's
size) in the brain view beside the 49,393 of the Fly LLM, in one process, the two taking
turns ``--repeat`` rounds: the time to load the points into a new brain view up to its
first frame drawn (wall), the CPU per redraw on the path the app chooses here (as
``--brain-cost`` times it) and the time to pick the neuron under a click (median of 30
neurons a round); then the whole-brain raster (the CPU of drawing a run of 120 tokens, every
token pooled, and of advancing one token) and a movie frame (the CPU, every thread, of one
1280x720 frame rendered offscreen with its overlays, as ``flyviz export`` renders it), each
with its ratio to the 49,393-neuron figure. Both brains
are synthetic (somata at random in the real brain's box, a tenth missing, states
``tanh`` of normal noise), so the two differ only in size.

Nothing here is a test: figures depend on the machine, so they are reported,
not asserted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

_PROCESS_START = time.perf_counter()

#: Interval of the stall monitor's heartbeat (ms).
HEARTBEAT_MS = 5


def _median_rate(times: list[float]) -> float:
    """Events per second from the median interval between consecutive timestamps."""
    if len(times) < 3:
        return 0.0
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return 1.0 / statistics.median(gaps) if gaps else 0.0


def _overall_rate(start: float, times: list[float]) -> float:
    """Events per second from ``start`` to the last event (robust to bursty delivery)."""
    return len(times) / (times[-1] - start) if times and times[-1] > start else 0.0


def _mean_rate(times: list[float]) -> float:
    """Events per second from the first to the last event."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else 0.0


def _engine_alone(checkpoint, tokenizer, prompt, settings, threads: int) -> tuple[float, float, int]:
    """(overall tokens/s, median tokens/s, frames) of iter_frames with no window."""
    from flyviz.model.engine import Engine
    from flyviz.record.run import iter_frames

    engine = Engine(checkpoint, threads=threads)
    start = time.perf_counter()
    stamps = [time.perf_counter() for _ in iter_frames(engine, tokenizer, prompt, settings)]
    engine.close()
    return _overall_rate(start, stamps), _median_rate(stamps), len(stamps)


def _app():
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from flyviz.app.base.theme import apply_dark_theme

    apply_dark_theme(app)
    return app


def _run_loop(app, seconds: float) -> None:
    """Run the real event loop for ``seconds`` (or until something calls ``app.exit``)."""
    from PySide6.QtCore import QTimer

    # exit(), not quit(): since Qt 6, quit() first closes every window.
    QTimer.singleShot(int(seconds * 1000), lambda: app.exit(0))
    app.exec()


def startup(spec: str) -> dict[str, float | str]:
    """Seconds from the start of this process until the window is up and until ``spec`` is ready.

    The model loads in the background, so the window is usable before it is.
    """
    from PySide6.QtCore import QSettings, QTimer

    app = _app()
    from flyviz.app.window.main_window import MainWindow

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


def window_cost(count: int) -> dict[str, float | str]:
    """CPU seconds to build, show and load a model into each of ``count`` windows in turn, in
    one process (each closed and deleted before the next, as a test's window is): the
    median, the first and the last. A cost that grows from one window to the next is
    something a closed window left behind."""
    from PySide6.QtCore import QSettings

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.app.window.main_window import MainWindow

    app = _app()
    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-"))
    checkpoint = make_app_checkpoint(folder)
    costs: list[float] = []
    for i in range(count + 1):                      # the first builds caches: not counted
        start = time.process_time()
        settings = QSettings(str(folder / f"settings{i}.ini"), QSettings.Format.IniFormat)
        window = MainWindow(model_spec=None, settings=settings)
        window.resize(1200, 800)
        window.show()
        for _ in range(5):
            app.processEvents()
        window.set_checkpoint(checkpoint)
        for _ in range(5):
            app.processEvents()
        if i:
            costs.append(time.process_time() - start)
        window.close()
        window.deleteLater()
        app.processEvents()
    return {"windows": count, "cpu_s_per_window_median": round(statistics.median(costs), 3),
            "first_cpu_s": round(costs[0], 3), "last_cpu_s": round(costs[-1], 3),
            "model": "the tests' 400-neuron app model (flyviz.app._testing)"}


def _full_size_model(tokens: int):
    """(checkpoint, tokenizer, prompt, settings, seconds to build) of the synthetic full brain."""
    from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, make_random_checkpoint, write_tokenizer
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.record.run import GenerationSettings

    prompt = "Once upon a time, there was a"
    settings = GenerationSettings(max_new_tokens=tokens, temperature=0.0, top_k=20)
    tmp = Path(tempfile.mkdtemp(prefix="flyviz-bench-"))
    tokenizer_path = write_tokenizer(tmp / "tokenizer.json", vocab_size=1024)
    vocabulary = FlyTokenizer(tokenizer_path).vocab_size
    t0 = time.perf_counter()
    checkpoint = make_random_checkpoint(FULL_NEURONS, FULL_EDGES, readout_rank=64,
                                        vocabulary=vocabulary, tokenizer_path=tokenizer_path,
                                        name="synthetic full size")
    return checkpoint, FlyTokenizer(tokenizer_path), prompt, settings, time.perf_counter() - t0


def _window(app, checkpoint, tokens: int, speed_cap: float):
    """A shown main window on ``checkpoint`` with greedy settings and user settings kept apart."""
    from PySide6.QtCore import QSettings

    from flyviz.app.window.main_window import MainWindow

    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-"))
    window = MainWindow(model_spec=None,
                        settings=QSettings(str(folder / "settings.ini"), QSettings.Format.IniFormat))
    window.show()
    window.set_checkpoint(checkpoint)
    window.state.run.speed_cap = speed_cap
    window.state.run.temperature = 0.0
    window.state.run.max_new_tokens = tokens
    return window


def _measure_run_and_scrub(app, window, prompt: str, scrub_hz: float,
                           scrub_s: float) -> dict[str, float]:
    """One run in the window and one scrubbing pass: token and redraw rates."""
    from PySide6.QtCore import QTimer

    arrivals: list[float] = []
    drawn: list[float] = []
    on_frame = lambda _n: arrivals.append(time.perf_counter())  # noqa: E731
    on_end = lambda _reason, _n: app.exit(0)  # noqa: E731
    on_draw = lambda _event: drawn.append(time.perf_counter())  # noqa: E731
    window.session.frames_appended.connect(on_frame)
    window.run_ended.connect(on_end)
    window.brain.canvas.events.draw.connect(on_draw)
    QTimer.singleShot(600_000, lambda: app.exit(0))
    start = time.perf_counter()
    window.run_prompt(prompt)
    app.exec()                                # the real event loop, as in the app
    end = time.perf_counter()
    window.session.frames_appended.disconnect(on_frame)
    window.run_ended.disconnect(on_end)
    draws = [t for t in drawn if start <= t <= end]

    # Scrubbing the finished run (no engine working): one token per scrub tick.
    scrub = QTimer()
    scrub.timeout.connect(lambda: window.show_token((window.session.index + 1)
                                                    % len(window.session)))
    scrub.start(max(1, int(round(1000.0 / scrub_hz))))
    scrub_start = time.perf_counter()
    cpu_start, ui_cpu_start = time.process_time(), time.thread_time()
    _run_loop(app, scrub_s)
    cpu, ui_cpu = time.process_time() - cpu_start, time.thread_time() - ui_cpu_start
    scrub.stop()
    window.brain.canvas.events.draw.disconnect(on_draw)
    scrub_draws = [t for t in drawn if t >= scrub_start]
    per_draw = 1000.0 / max(1, len(scrub_draws))
    return {
        "frames_in_window": len(arrivals),
        "window_tokens_per_s": _overall_rate(start, arrivals),
        "redraws_per_s_median": _median_rate(draws),
        "redraws_per_s_mean": _mean_rate(draws),
        "run_wall_s": end - start,
        "scrubbing_redraws_per_s_median": _median_rate(scrub_draws),
        "scrubbing_redraws_per_s_mean": _mean_rate(scrub_draws),
        # CPU time per redraw while scrubbing (no engine): the cost of a frame, whatever
        # else the machine is doing; all threads (llvmpipe's too), and the UI thread alone.
        "scrubbing_cpu_ms_per_redraw": cpu * per_draw,
        "scrubbing_ui_thread_cpu_ms_per_redraw": ui_cpu * per_draw,
    }


def frame_rates(args: argparse.Namespace) -> dict:
    """Steps 1-3 of the module docstring; medians and ranges over ``args.repeat`` repeats."""
    width, height = (int(v) for v in args.size.lower().split("x"))
    checkpoint, tokenizer, prompt, settings, build_s = _full_size_model(args.tokens)
    from flyviz.app.runs.worker import engine_threads
    from flyviz.model.engine import default_threads

    result: dict = {"neurons": checkpoint.config.neurons, "synapses": checkpoint.n_edges,
                    "shown_neurons": int(checkpoint.anatomy.n_valid),
                    "model_build_s": round(build_s, 2)}
    engine_rate = 0.0
    if not args.skip_engine:
        engine_rate, engine_median, frames = _engine_alone(checkpoint, tokenizer, prompt, settings,
                                                           default_threads())
        app_threads_rate, _, _ = _engine_alone(checkpoint, tokenizer, prompt, settings,
                                               engine_threads())
        result.update(frames=frames, engine_threads=default_threads(),
                      app_engine_threads=engine_threads(),
                      engine_alone_tokens_per_s=round(engine_rate, 1),
                      engine_alone_median_tokens_per_s=round(engine_median, 1),
                      engine_alone_app_threads_tokens_per_s=round(app_threads_rate, 1))

    app = _app()
    window = _window(app, checkpoint, args.tokens, args.speed_cap)
    window.brain.setFixedSize(width, height)
    window.adjustSize()
    _run_loop(app, 2.0)                       # let the window settle
    runs = [_measure_run_and_scrub(app, window, prompt, args.scrub_hz, args.scrub_seconds)
            for _ in range(max(1, args.repeat))]
    result.update(canvas_px=[int(v) for v in window.brain.canvas.physical_size],
                  window_px=[window.width(), window.height()], window_speed_cap=args.speed_cap,
                  repeats=len(runs), scrub_hz=args.scrub_hz)
    window.close()
    for key in runs[0]:
        values = [run[key] for run in runs]
        result[key] = round(statistics.median(values), 1)
        if len(values) > 1:
            result[key + "_range"] = [round(min(values), 1), round(max(values), 1)]
    if engine_rate:
        result["window_vs_engine"] = round(result["window_tokens_per_s"] / engine_rate, 2)
    return result


# ---------------------------------------------------------------- comparison mode
def _time_run(app, window, prompt: str) -> tuple[float, int]:
    """(tokens per second, frames) of one run of ``prompt`` in the window, as it arrives."""
    from PySide6.QtCore import QTimer

    arrivals: list[float] = []
    on_frame = lambda _n: arrivals.append(time.perf_counter())  # noqa: E731
    on_end = lambda _reason, _n: app.exit(0)  # noqa: E731
    window.session.frames_appended.connect(on_frame)
    window.run_ended.connect(on_end)
    QTimer.singleShot(600_000, lambda: app.exit(0))
    start = time.perf_counter()
    if not window.run_prompt(prompt):
        raise RuntimeError(f"the run did not start: {window.last_error}")
    app.exec()
    window.session.frames_appended.disconnect(on_frame)
    window.run_ended.disconnect(on_end)
    return _overall_rate(start, arrivals), len(arrivals)


def compare_rates(args: argparse.Namespace) -> dict:
    """The window's token rate comparing with the untouched run against a single run."""
    from flyviz.model.interventions import Silence

    width, height = (int(v) for v in args.size.lower().split("x"))
    checkpoint, _tokenizer, prompt, _settings, build_s = _full_size_model(args.tokens)
    app = _app()
    window = _window(app, checkpoint, args.tokens, args.speed_cap)
    window.brain.setFixedSize(width, height)
    window.adjustSize()
    _run_loop(app, 2.0)
    feature, panel = window.interventions, window.interventions.panel
    panel.set_interventions([Silence(args.compare_query)])

    def use(comparing: bool) -> None:
        # The same interventions throughout: a plain run leaves them switched off.
        panel.set_enabled(0, comparing)
        panel.compare_box.setChecked(comparing)
        if not feature.apply():
            raise RuntimeError(f"the interventions are not valid: {window.last_error}")

    single: list[float] = []
    compared: list[float] = []
    frames = {}
    # One run of each first: the comparison builds its two engines on its first run.
    for comparing in (False, True):
        use(comparing)
        _time_run(app, window, prompt)
    for _ in range(max(1, args.repeat)):
        use(False)
        rate, frames["single"] = _time_run(app, window, prompt)
        single.append(rate)
        use(True)
        rate, frames["compare"] = _time_run(app, window, prompt)
        compared.append(rate)
        _run_loop(app, 0.5)
    window.close()
    result = {"neurons": checkpoint.config.neurons, "synapses": checkpoint.n_edges,
              "model_build_s": round(build_s, 2), "tokens": args.tokens,
              "repeats": len(single), "intervention": f"silence {args.compare_query}",
              "mode": "forced", "frames_single": frames["single"],
              "frames_compare": frames["compare"],
              "single_tokens_per_s": round(statistics.median(single), 2),
              "compare_tokens_per_s": round(statistics.median(compared), 2),
              "single_range": [round(min(single), 2), round(max(single), 2)],
              "compare_range": [round(min(compared), 2), round(max(compared), 2)]}
    result["compare_vs_single"] = round(result["compare_tokens_per_s"]
                                        / max(result["single_tokens_per_s"], 1e-9), 2)
    return result


# ---------------------------------------------------------------- brain redraw cost
def _run_states(checkpoint, tokenizer, prompt, settings) -> list:
    """The states of one run of the engine (what the brain view is handed)."""
    import numpy as np

    from flyviz.model.engine import Engine
    from flyviz.record.run import iter_frames

    engine = Engine(checkpoint)
    try:
        return [np.asarray(f.state, np.float32).copy()
                for f in iter_frames(engine, tokenizer, prompt, settings)]
    finally:
        engine.close()


def _brain_view(checkpoint, width: int, height: int, software_path: bool | None, states,
                cpu_cloud: bool | None = None):
    """A shown top-level brain view of ``checkpoint`` at ``width x height``."""
    import numpy as np

    from flyviz.app.brain.brain_view import BrainView

    view = BrainView(software_path=software_path, cpu_cloud=cpu_cloud)
    view.setFixedSize(width, height)
    view.show()
    view.set_anatomy(checkpoint.anatomy, checkpoint.config.neurons)
    sample = np.stack(states[:: max(1, len(states) // 16)])
    view.activity_sample = lambda: sample
    view.update_gain()
    view.smoothing_s = 0.0
    return view


def _timed_redraws(app, view, states, count: int) -> dict[str, float]:
    """CPU (all threads, UI thread) and wall time per redraw over ``count`` redraws."""
    from vispy.gloo import gl

    def redraw(i: int) -> None:
        before = len(view.draw_times)
        view.set_target(states[i % len(states)])
        view.tick()                       # what the display timer does when the frame changed
        deadline = time.perf_counter() + 10.0
        while len(view.draw_times) == before and time.perf_counter() < deadline:
            app.processEvents()
        app.processEvents()               # the compose and flush that follow the paint

    for i in range(3):
        redraw(i)
    view.canvas.set_current()
    gl.glFinish()
    cpu, ui, wall = time.process_time(), time.thread_time(), time.perf_counter()
    for i in range(count):
        redraw(i)
    view.canvas.set_current()
    gl.glFinish()                         # llvmpipe's threads have finished every frame
    return {"cpu_ms": 1000.0 * (time.process_time() - cpu) / count,
            "ui_thread_cpu_ms": 1000.0 * (time.thread_time() - ui) / count,
            "wall_ms": 1000.0 * (time.perf_counter() - wall) / count}


def brain_cost(args: argparse.Namespace) -> dict:
    """CPU per brain redraw on the GPU path and on the path chosen here, taking turns."""
    width, height = (int(v) for v in args.size.lower().split("x"))
    if args.demo:           # the embedded default model: the states a user first sees
        from flyviz.model.resolve import load_model
        from flyviz.model.tokenizer import FlyTokenizer
        from flyviz.record.run import GenerationSettings

        checkpoint = load_model("demo")
        assert checkpoint.tokenizer_path is not None
        tokenizer = FlyTokenizer(checkpoint.tokenizer_path)
        prompt = "Once upon a time, there was a"
        settings = GenerationSettings(max_new_tokens=args.tokens, temperature=0.0, top_k=20)
    else:
        checkpoint, tokenizer, prompt, settings, _build_s = _full_size_model(args.tokens)
    states = _run_states(checkpoint, tokenizer, prompt, settings)
    app = _app()
    from flyviz.render import splat

    views = {"gpu_path": _brain_view(checkpoint, width, height, False, states),
             "chosen_path": _brain_view(checkpoint, width, height, None, states)}
    if views["chosen_path"].cpu_cloud:
        # The software path with the cloud drawn by OpenGL (its lean shaders), for reference.
        views["lean_gl_path"] = _brain_view(checkpoint, width, height, None, states,
                                            cpu_cloud=False)
        splat.warm_up(background=False)
    if args.outline:
        import numpy as np

        from flyviz.analysis.outline import soma_outline

        anatomy = checkpoint.anatomy
        outline = soma_outline(anatomy.positions_um()[np.asarray(anatomy.valid)])
        for view in views.values():
            view.set_meshes([outline], 0.12)
    _run_loop(app, 1.0)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in views}
    for _ in range(max(1, args.repeat)):
        for name, view in views.items():
            figures[name].append(_timed_redraws(app, view, states, args.redraws))
    chosen = views["chosen_path"]
    result: dict = {"neurons": checkpoint.config.neurons,
                    "shown_neurons": int(checkpoint.anatomy.n_valid),
                    "renderer": chosen.renderer, "software_gl": chosen.software_gl,
                    "chosen_is_software_path": chosen.software_path,
                    "chosen_paints_cloud_on_cpu": chosen.cpu_cloud and splat.splat_available(),
                    "canvas_px": [int(v) for v in chosen.canvas.physical_size],
                    "states": len(states), "redraws": args.redraws, "repeats": args.repeat,
                    "outline": bool(args.outline), "model": checkpoint.name,
                    "demo": bool(args.demo)}
    for name, runs in figures.items():
        for key in runs[0]:
            values = [run[key] for run in runs]
            result[f"{name}_{key}"] = round(statistics.median(values), 1)
            result[f"{name}_{key}_range"] = [round(min(values), 1), round(max(values), 1)]
    result["cpu_ratio_chosen_vs_gpu_path"] = round(result["chosen_path_cpu_ms"]
                                                   / max(result["gpu_path_cpu_ms"], 1e-9), 3)
    if "lean_gl_path_cpu_ms" in result:
        result["cpu_ratio_lean_gl_vs_gpu_path"] = round(
            result["lean_gl_path_cpu_ms"] / max(result["gpu_path_cpu_ms"], 1e-9), 3)
    result["cpu_frames_of_chosen_path"] = (chosen.raster_screen.cpu_frames
                                           if chosen.raster_screen is not None else 0)
    for view in views.values():
        view.close()
    return result


#: The neuron counts ``--points`` compares: the Fly LLM's and the whole MaleCNS's.
POINT_SIZES = (49_393, 166_700)


def points_cost(args: argparse.Namespace) -> dict:
    """Load time and CPU per redraw of the brain view at 49,393 and 166,700 neurons."""
    import numpy as np

    from flyviz.app.brain.brain_view import BrainView
    from flyviz.model.synthetic import make_random_checkpoint

    width, height = (int(v) for v in args.size.lower().split("x"))
    app = _app()
    rng = np.random.default_rng(0)
    models, states = {}, {}
    for n in POINT_SIZES:
        models[n] = make_random_checkpoint(n, 2 * n, d_embed=4, delay_k=2, vocabulary=16,
                                           readout_rank=None, seed=1)
        states[n] = [np.tanh(rng.standard_normal(n)).astype(np.float32) for _ in range(24)]

    def load(n: int) -> tuple[float, object]:
        """Wall ms from a new view to its first frame with the points, and the view."""
        start = time.perf_counter()
        view = BrainView()
        view.setFixedSize(width, height)
        view.show()
        view.set_anatomy(models[n].anatomy, n)
        view.set_target(states[n][0])
        view.tick()
        deadline = time.perf_counter() + 60.0
        while not view.draw_times and time.perf_counter() < deadline:
            app.processEvents()
        return 1000.0 * (time.perf_counter() - start), view

    loads: dict[int, list[float]] = {n: [] for n in POINT_SIZES}
    redraws: dict[int, list[dict[str, float]]] = {n: [] for n in POINT_SIZES}
    _ms, warm = load(POINT_SIZES[0])  # one-time costs (shaders, the CPU painter) apart
    warm.close()
    warm.deleteLater()
    for _ in range(max(1, args.repeat)):
        for n in POINT_SIZES:
            ms, view = load(n)
            loads[n].append(ms)
            view.close()
            view.deleteLater()
            app.processEvents()
    views = {n: _brain_view(models[n], width, height, None, states[n]) for n in POINT_SIZES}
    _run_loop(app, 1.0)
    picks: dict[int, list[float]] = {n: [] for n in POINT_SIZES}
    for _ in range(max(1, args.repeat)):
        for n in POINT_SIZES:
            redraws[n].append(_timed_redraws(app, views[n], states[n], args.redraws))
            # A click on a neuron: where it is drawn, back to the neuron (the nearest to the
            # camera within 8 px), as the brain view answers a click.
            view = views[n]
            shown = np.flatnonzero(np.asarray(view.visible))
            spent = []
            for neuron in rng.choice(shown, 30, replace=False):
                x, y = view.project(int(neuron))
                start = time.perf_counter()
                view.pick(x, y)
                spent.append(1000.0 * (time.perf_counter() - start))
            picks[n].append(statistics.median(spent))
    for view in views.values():
        view.close()
    rasters = {n: _raster_cost(app, models[n], states[n], args.repeat) for n in POINT_SIZES}
    movies = {n: _movie_frame_cost(models[n], states[n], (width, height), args.repeat)
              for n in POINT_SIZES}
    small, large = POINT_SIZES
    result: dict = {"canvas_px": [int(v) for v in views[small].canvas.physical_size],
                    "renderer": views[small].renderer,
                    "software_path": views[small].software_path,
                    "repeats": args.repeat, "redraws": args.redraws}
    for n in POINT_SIZES:
        result[f"load_ms_{n}"] = round(statistics.median(loads[n]), 1)
        result[f"pick_ms_{n}"] = round(statistics.median(picks[n]), 2)
        for key in redraws[n][0]:
            result[f"redraw_{key}_{n}"] = round(statistics.median(r[key] for r in redraws[n]), 2)
    result["load_ratio"] = round(result[f"load_ms_{large}"] / result[f"load_ms_{small}"], 2)
    result["pick_ratio"] = round(result[f"pick_ms_{large}"] / result[f"pick_ms_{small}"], 2)
    result["redraw_cpu_ratio"] = round(result[f"redraw_cpu_ms_{large}"]
                                       / max(result[f"redraw_cpu_ms_{small}"], 1e-9), 2)
    for name, figures in (("raster", rasters), ("movie", movies)):
        for key in figures[small]:
            for n in POINT_SIZES:
                result[f"{name}_{key}_{n}"] = round(figures[n][key], 2)
            result[f"{name}_{key}_ratio"] = round(figures[large][key]
                                                  / max(figures[small][key], 1e-9), 2)
    return result


#: Tokens of the run the whole-brain raster and the movie of ``--points`` show.
POINT_TOKENS = 120


def _raster_cost(app, checkpoint, states, repeat: int) -> dict[str, float]:
    """CPU ms of the whole-brain raster: drawing a run of :data:`POINT_TOKENS` tokens
    (every token pooled) and advancing by one token (its column pooled and painted)."""
    from flyviz.analysis.population import anatomy_order
    from flyviz.app._testing import make_frame
    from flyviz.app.population.population_panel import WholeBrainRaster
    from flyviz.record.recording import Recording

    anatomy, n = checkpoint.anatomy, checkpoint.config.neurons
    raster = WholeBrainRaster()
    raster.resize(1280, 320)
    raster.show()
    app.processEvents()
    raster.set_order(anatomy_order(anatomy.superclass, anatomy.cell_type, n=n))
    first, advance = [], []
    for _ in range(max(1, repeat)):
        recording = Recording(n)
        for i in range(POINT_TOKENS):
            recording.append(make_frame(i, states[i % len(states)]))
        start = time.process_time()
        raster.show_frame(recording, POINT_TOKENS - 1)
        raster.plot.viewport().repaint()
        first.append(1000.0 * (time.process_time() - start))
        for i in range(POINT_TOKENS, POINT_TOKENS + 10):
            recording.append(make_frame(i, states[i % len(states)]))
            start = time.process_time()
            raster.show_frame(recording, i)
            raster.plot.viewport().repaint()
            advance.append(1000.0 * (time.process_time() - start))
    raster.close()
    return {"first_draw_cpu_ms": statistics.median(first),
            "token_cpu_ms": statistics.median(advance)}


def _movie_frame_cost(checkpoint, states, size: tuple[int, int], repeat: int) -> dict[str, float]:
    """CPU ms (every thread: OpenGL's too) of a movie frame rendered offscreen at ``size``,
    with the overlays, as ``flyviz export`` renders it; and of building the renderer."""
    import numpy as np

    from flyviz.render.offscreen import FrameRenderer

    anatomy = checkpoint.anatomy
    start = time.process_time()
    renderer = FrameRenderer(anatomy.positions_um(), anatomy.valid, size,
                             activity_sample=np.stack(states[:8]))
    setup = 1000.0 * (time.process_time() - start)
    renderer.render_state(states[0])
    frames = []
    for _ in range(max(1, repeat)):
        start = time.process_time()
        for state in states[:10]:
            renderer.render_state(state)
        frames.append(100.0 * (time.process_time() - start))
    renderer.close()
    return {"frame_cpu_ms": statistics.median(frames), "renderer_setup_cpu_ms": setup}


# ---------------------------------------------------------------- stalls
class StallMonitor:
    """How late a fast heartbeat timer on the UI thread fires: the event loop's stalls.

    Each heartbeat records when it ran; a gap longer than the interval means the
    event loop was busy (an event handler, a paint, a relayout) for that long.
    """

    def __init__(self, interval_ms: int = HEARTBEAT_MS) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.interval_s = interval_ms / 1000.0
        self.beats: list[float] = []
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(lambda: self.beats.append(time.perf_counter()))

    def start(self) -> None:
        self.beats.clear()
        self.beats.append(time.perf_counter())
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def stalls(self) -> list[tuple[float, float]]:
        """``(end time, stall seconds)`` for every heartbeat: its gap beyond the interval."""
        return [(b, max(0.0, b - a - self.interval_s)) for a, b in zip(self.beats, self.beats[1:])]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


def stalls(args: argparse.Namespace) -> dict:
    """Run the prompt while clicking, scrubbing and resizing; report the event loop's stalls."""
    from PySide6.QtCore import QPoint, Qt, QTimer
    from PySide6.QtTest import QTest

    width, height = (int(v) for v in args.window.lower().split("x"))
    if args.demo:
        from flyviz.model.resolve import load_model

        checkpoint, prompt = load_model("demo"), "Once upon a time, there was a"
    else:
        checkpoint, _tokenizer, prompt, _settings, _build_s = _full_size_model(args.tokens)
    app = _app()
    window = _window(app, checkpoint, args.tokens, args.speed_cap)
    window.resize(width, height)
    _run_loop(app, 2.0)
    rng = random.Random(0)
    visible = [int(i) for i in range(len(window.brain.visible)) if window.brain.visible[i]]
    actions: list[tuple[float, float, str]] = []     # (start, end, name)

    def click_neuron() -> None:
        canvas = window.brain.canvas.native
        for _ in range(20):
            x, y = window.brain.project(rng.choice(visible))
            if 5 <= x < canvas.width() - 5 and 5 <= y < canvas.height() - 5:
                QTest.mouseClick(canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0),
                                 QPoint(int(x), int(y)))
                return

    def scrub() -> None:
        slider = window.timeline.slider
        if slider.maximum() > 0:
            slider.setValue(rng.randint(0, slider.maximum()))

    sizes = [(width, height), (width - 160, height - 120)]

    def resize() -> None:
        sizes.reverse()
        window.resize(*sizes[0])

    cycle = [("click", click_neuron), ("scrub", scrub), ("scrub", scrub), ("scrub", scrub),
             ("live", window.go_live), ("resize", resize), ("scrub", scrub), ("live", window.go_live)]
    if args.demo:
        from flyviz.app.atlas.atlas_panel import demo_atlas_path

        words = ["dog", "cat", "rain", "happy", "the", "tree", "ball", "Lily"]
        cycle += [("find", lambda: window.atlas.find(rng.choice(words))), ("click", click_neuron),
                  ("open_atlas", lambda: window.atlas.open(demo_atlas_path()))]
        for _ in range(200):                  # the demo brain's own atlas opens by itself
            if window.atlas.atlas is not None:
                break
            _run_loop(app, 0.1)
    step = {"i": 0}

    def act() -> None:
        name, action = cycle[step["i"] % len(cycle)]
        step["i"] += 1
        t0 = time.perf_counter()
        action()
        actions.append((t0, time.perf_counter(), name))

    monitor = StallMonitor()
    driver = QTimer()
    driver.timeout.connect(act)
    ended: dict[str, float | None] = {"run": None}
    window.run_ended.connect(lambda reason, n: ended.update(run=time.perf_counter()))
    monitor.start()
    start = time.perf_counter()
    window.run_prompt(prompt)
    driver.start(args.action_ms)
    # During the run, then as long again on the finished recording (scrubbing, no engine).
    deadline = time.perf_counter() + 600
    while ended["run"] is None and time.perf_counter() < deadline:
        _run_loop(app, 0.25)
    run_s = time.perf_counter() - start
    _run_loop(app, max(2.0, min(run_s, 10.0)))
    driver.stop()
    monitor.stop()
    frames = len(window.session)
    window.close()

    events = monitor.stalls()
    values = [s for _, s in events]
    worst = sorted(events, key=lambda e: -e[1])[:5]

    def during(end: float, stall: float) -> str:
        begun = [name for a, b, name in actions if a <= end and b >= end - stall - 0.05]
        return "+".join(sorted(set(begun))) or "(drawing, no action)"

    per_action: dict[str, float] = {}
    for a, b, name in actions:
        per_action[name] = max(per_action.get(name, 0.0), b - a)
    return {
        "window_px": [width, height], "frames": frames, "run_s": round(run_s, 2),
        "actions": len(actions), "heartbeats": len(values),
        "worst_stall_ms": round(1000 * max(values, default=0.0), 1),
        "p99_stall_ms": round(1000 * _percentile(values, 99), 1),
        "p50_stall_ms": round(1000 * _percentile(values, 50), 1),
        "stalls_over_100ms": sum(v > 0.1 for v in values),
        "worst_stalls": [[round(1000 * s, 1), during(t, s)] for t, s in worst],
        "longest_action_handler_ms": {k: round(1000 * v, 1) for k, v in sorted(per_action.items())},
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.bench_app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=150, help="new tokens per run (default 150)")
    parser.add_argument("--size", default="1280x720", help="brain view size WxH (default 1280x720)")
    parser.add_argument("--speed-cap", type=float, default=0.0,
                        help="the window's speed cap in tokens/s (default 0: none)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs and scrubbing passes in the window (default 1)")
    parser.add_argument("--scrub-hz", type=float, default=30.0,
                        help="tokens per second while scrubbing (default 30)")
    parser.add_argument("--scrub-seconds", type=float, default=5.0,
                        help="how long each scrubbing pass lasts (default 5)")
    parser.add_argument("--skip-engine", action="store_true",
                        help="do not time the engine alone first")
    parser.add_argument("--stalls", action="store_true",
                        help="measure event-loop stalls while clicking, scrubbing and resizing")
    parser.add_argument("--window", default="1600x1000",
                        help="window size WxH for --stalls (default 1600x1000)")
    parser.add_argument("--action-ms", type=int, default=150,
                        help="one user action every this many ms for --stalls (default 150)")
    parser.add_argument("--demo", action="store_true",
                        help="--stalls (or --brain-cost) on the demo brain; --stalls also opens its "
                             "atlas and finds neurons")
    parser.add_argument("--compare", action="store_true",
                        help="token rate comparing with the untouched run against a single run")
    parser.add_argument("--compare-query", default="superclass:cb_sensory",
                        help="neurons silenced in --compare (default superclass:cb_sensory; "
                             "the synthetic full-size brain has no inhibitory neurons)")
    parser.add_argument("--brain-cost", action="store_true",
                        help="CPU per brain redraw: the GPU path against the path chosen here")
    parser.add_argument("--outline", action="store_true",
                        help="--brain-cost with the brain's outline drawn behind the neurons")
    parser.add_argument("--points", action="store_true",
                        help="load time and CPU per redraw at 166,700 neurons beside 49,393")
    parser.add_argument("--redraws", type=int, default=40,
                        help="redraws per path and round for --brain-cost (default 40)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--startup", metavar="SPEC",
                        help="only measure the time to an interactive window and to SPEC loaded")
    parser.add_argument("--windows", type=int, metavar="N",
                        help="only measure the CPU to build, show and load N windows in turn")
    args = parser.parse_args(argv)
    if args.startup:
        result = startup(args.startup)
    elif args.windows:
        result = window_cost(args.windows)
    elif args.stalls:
        result = stalls(args)
    elif args.compare:
        result = compare_rates(args)
    elif args.brain_cost:
        result = brain_cost(args)
    elif args.points:
        result = points_cost(args)
    else:
        result = frame_rates(args)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:34s} {value}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
