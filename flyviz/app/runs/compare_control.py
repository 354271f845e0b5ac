"""Runs with interventions, and *Compare with untouched*: two engines in lockstep.

:class:`CompareController` is the window's :class:`~flyviz.app.runs.run_control.RunController`
with a second engine thread beside the first. A plain run goes to the first
thread as before, with the interventions the user switched on (if any). A
comparison goes to a :class:`CompareWorker` in its own thread, which steps a
:class:`~flyviz.record.compare.Comparison` (the untouched and the intervened
engine on the same checkpoint) one position per tick, with the same pacing,
speed cap and back-pressure as a plain run: it is an
:class:`~flyviz.app.runs.worker.EngineWorker` whose items are
:class:`~flyviz.record.compare.ComparedStep` objects instead of frames.

Every transport request (pause, step, stop, speed cap) goes to whichever thread
holds the current run, so the window's buttons and keys work the same in both.
A comparison fills one recording (:func:`~flyviz.record.compare.new_comparison_recording`):
the session shows the intervened run, its ``baseline`` is the untouched run,
and ``metadata["comparison"]`` gathers the per-token KL; the views that know
about comparisons read them from there, and saving it saves all of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject

from flyviz.app.runs.run_control import RunController
from flyviz.app.runs.worker import IDLE, EngineThread, EngineWorker, RunRequest, engine_threads
from flyviz.model.errors import FlyvizError, InputError
from flyviz.model.interventions import ResolvedInterventions
from flyviz.record.compare import (MODES, ComparedStep, Comparison, new_comparison_recording,
                                   record_step)
from flyviz.record.run import GenerationSettings, encode_prompt
from flyviz.record.runner import Model
from flyviz.viewer.parts import NEW_RUN

_TITLES = {"forced": "teacher-forced on the untouched text",
           "free": "free-running, both sampling"}
#: What the comparison modes are called in the window, in the order of the one list of
#: them (:data:`flyviz.record.compare.MODES`; a mode without a title fails here, at import).
MODE_TITLES = {mode: _TITLES[mode] for mode in MODES}


@dataclass(frozen=True)
class CompareRequest(RunRequest):
    """A :class:`~flyviz.app.runs.worker.RunRequest` for a comparison, with its ``mode``
    (``"forced"`` or ``"free"``; see :class:`~flyviz.record.compare.Comparison`)."""

    mode: str = "forced"


class CompareWorker(EngineWorker):
    """Steps a :class:`~flyviz.record.compare.Comparison` in the worker thread.

    Its two engines are built on the first comparison (in this thread) and kept
    for the next ones, which only change the intervened engine's interventions;
    a new model closes them. The model itself belongs to the plain runs' worker,
    which closes it. Each item it emits is a
    :class:`~flyviz.record.compare.ComparedStep`.

    Each engine gets half of the app's engine threads (at least one) and
    overlaps its next ``W @ x`` with the other engine's step
    (``overlap=True``, see :meth:`Comparison.for_checkpoint`): stepped one
    after the other without it, the two products queued behind each other and
    a compared token cost three to four plain ones in the window instead of two.
    """

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()
        self._comparison: Comparison | None = None
        self._threads = threads

    def _install(self, model: Model | None) -> None:
        """Compare runs of ``model`` from now on (``None``: release the engines)."""
        self._close_comparison()
        self._model = model

    def _open_run(self, request: RunRequest) -> Iterator[ComparedStep]:
        model = self._model
        if model is None:
            raise InputError("no model is loaded yet; wait for it or open one")
        mode = getattr(request, "mode", "forced")
        if self._comparison is None:
            threads = self._threads if self._threads is not None \
                else max(1, (engine_threads() + 1) // 2)
            self._comparison = Comparison.for_checkpoint(
                model.checkpoint, request.interventions, threads=threads,
                tokenizer=model.tokenizer, overlap=True)
        elif request.interventions is not self._comparison.interventions:
            self._comparison.set_interventions(request.interventions)
        return self._comparison.run(request.prompt, request.settings, mode=mode,
                                    prompt_ids=list(request.prompt_ids))

    def _close_comparison(self) -> None:
        if self._comparison is not None:
            self._comparison.close()
            self._comparison = None


class CompareController(RunController):
    """The window's runs: plain ones (with interventions) and comparisons.

    Parameters
    ----------
    parent, engine_niceness
        As for :class:`~flyviz.app.runs.run_control.RunController`.

    Runs start from the viewer state (the session's): its ``interventions``,
    ``comparing`` and ``compare_mode`` are the one copy, which the Interventions
    dock shows and edits; a script sets them there.

    Attributes
    ----------
    interventions
        The state's interventions resolved for the model (``None``: none).
    comparing
        True when :meth:`start` compares with the untouched run.
    mode
        ``"forced"`` or ``"free"``: how a comparison runs.
    """

    def __init__(self, parent: QObject | None = None, engine_niceness: int = 0,
                 state: Any = None) -> None:
        super().__init__(parent, engine_niceness, state)
        #: The thread of plain runs, and the thread of comparisons.
        self.single_thread = self.engine_thread
        self.compare_thread = self._attach(
            EngineThread(self, CompareWorker(), name="flyviz-compare"), self._on_compared_step,
            self._on_compare_state, engine_niceness)
        self._blas_limit: Any = None
        self._hold_single_threaded_blas(True)   # see there: comparisons ran ~30% slower

    # ------------------------------------------------------------ what runs
    @property
    def is_comparison(self) -> bool:
        """True while the current (or last) run is a comparison."""
        return self.engine_thread is self.compare_thread

    @property
    def interventions(self) -> ResolvedInterventions | None:
        """The state's interventions resolved for the model (``None``: none, or no model)."""
        items = self.session.state.interventions
        if not items or self._model is None:
            return None
        return self._model.resolve_interventions(items) or None

    @property
    def comparing(self) -> bool:
        """True when :meth:`start` compares with the untouched run (the state's)."""
        return bool(self.session.state.comparing)

    @property
    def mode(self) -> str:
        """How a comparison runs, ``"forced"`` or ``"free"`` (the state's)."""
        return str(self.session.state.compare_mode)

    def set_interventions(self, interventions: Any) -> None:
        """Use ``interventions`` (intervention objects; ``None`` or empty: none) from the next
        run on: they are written to the state."""
        self.session.state.interventions = tuple(interventions or ())

    def set_comparing(self, comparing: bool, mode: str | None = None) -> None:
        """Compare the next runs with the untouched run (or not), in ``mode`` (the state's)."""
        if mode is not None and mode not in MODES:
            raise ValueError(f"comparison mode {mode!r} must be one of {', '.join(MODES)}")
        self.session.state.set_comparing(comparing, mode)

    # ------------------------------------------------------------ model and runs
    def set_model(self, model: Model) -> None:
        """A new model: both threads stop (the state's interventions are resolved for it at
        the next run)."""
        self._use(self.single_thread)
        self.compare_thread.set_model(model)
        super().set_model(model)

    def start(self, prompt: str, settings: GenerationSettings, *, interventions: Any = None,
              states_dtype: str = "float16") -> bool:
        """Run ``prompt`` with the interventions, or compare it with the untouched run.

        ``interventions`` default to the state's. Returns False (and says why)
        when the run cannot start.
        """
        if interventions is None:
            interventions = self.session.state.interventions
        if not self.comparing:
            self._use(self.single_thread)
            return super().start(prompt, settings, interventions=interventions or (),
                                 states_dtype=states_dtype)
        model = self._startable_model()
        if model is None:
            return False
        try:
            settings = settings.validate()
            resolved = model.resolve_interventions(interventions or ())
            if not resolved:
                raise InputError("nothing to compare: add an intervention and switch it on")
            prompt_ids = encode_prompt(model.tokenizer, prompt,
                                       model.checkpoint.config.bos_token_id)
            recording = new_comparison_recording(model.checkpoint, prompt, settings, resolved,
                                                 self.mode, spec=model.spec,
                                                 states_dtype=states_dtype)
        except FlyvizError as exc:
            self.message.emit(str(exc), True)
            return False
        self._use(self.compare_thread)
        self.replay_timer.stop()
        self._run_id += 1
        self.end_reason = ""
        self.session.replace(recording, cause=NEW_RUN)
        self.frame_times.clear()
        self.compare_thread.start(CompareRequest(self._run_id, prompt, tuple(prompt_ids),
                                                 settings, interventions=resolved,
                                                 mode=self.mode))
        self.message.emit(f"comparing with the untouched run ({MODE_TITLES[self.mode]}): "
                          f"{len(prompt_ids) - 1} prompt tokens, up to "
                          f"{settings.max_new_tokens} new", False)
        self.run_started.emit(prompt)
        return True

    def set_speed_cap(self, tokens_per_second: float) -> None:
        """Most tokens per second, for plain runs and comparisons alike."""
        super().set_speed_cap(tokens_per_second)
        other = self.compare_thread if self.engine_thread is self.single_thread \
            else self.single_thread
        other.set_speed_cap(tokens_per_second)

    def shutdown(self) -> None:
        """Stop both threads; safe to call twice."""
        if self._closed:
            return
        super().shutdown()
        self.single_thread.close()
        self.compare_thread.close()
        self._hold_single_threaded_blas(False)

    # ------------------------------------------------------------ internals
    def _use(self, thread: EngineThread) -> None:
        """Send transport requests to ``thread`` from now on; the other one's run stops."""
        if self.engine_thread is thread:
            return
        self.engine_thread.stop()
        self.engine_thread = thread
        self.worker_state = IDLE      # until the thread reports otherwise
        self._emit_state()

    def _on_frame(self, run_id: int, frame: Any) -> None:
        if self.engine_thread is self.single_thread:
            super()._on_frame(run_id, frame)
        else:
            self.single_thread.frame_taken()   # a stopped plain run's frame, still queued

    def _on_compared_step(self, run_id: int, step: ComparedStep) -> None:
        self.compare_thread.frame_taken()
        if run_id != self._run_id or self._closed or not self.is_comparison:
            return
        recording = self.session.recording
        if recording.baseline is None:
            return
        if record_step(recording, step, append=self.session.append):
            self.frame_times.append(time.perf_counter())

    def _on_worker_state(self, state: str) -> None:
        if self.engine_thread is self.single_thread:
            super()._on_worker_state(state)

    def _on_compare_state(self, state: str) -> None:
        if self.engine_thread is self.compare_thread:
            super()._on_worker_state(state)

    def _hold_single_threaded_blas(self, hold: bool) -> None:
        """Keep BLAS in one thread in this process while the window's runs exist (or not).

        Each engine limits BLAS to one thread only during its own step; set back
        between steps from the engine threads, OpenBLAS's worker thread kept
        running and spinning during comparisons, taking about a core-second per
        60-token run from the two engines on two cores (``python -m
        tests.bench_app --compare``: ~22 compared tokens/s with it, ~30 without;
        plain runs unchanged). Set once, from the window's thread, for the
        controller's life, the engines' own limits then find one thread and
        leave it so. The window's BLAS work (small matrices) loses nothing.
        """
        if hold == (self._blas_limit is not None):
            return
        if not hold:
            limit, self._blas_limit = self._blas_limit, None
            limit.restore_original_limits()
            return
        try:
            from threadpoolctl import threadpool_limits

            self._blas_limit = threadpool_limits(limits=1, user_api="blas")
        except Exception:  # noqa: BLE001 - no threadpoolctl or an unknown BLAS: run as is
            self._blas_limit = None
