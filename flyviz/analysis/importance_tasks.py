"""Estimated lesions, the tasks: settings, chunks of the text, and what one task computes.

The text is cut into chunks (:func:`plan_chunks`); each is one task
(:func:`importance_task` on a Dask worker, :class:`InProcessTask` in this process)
whose partial holds float64 sums per neuron (:func:`chunk_partial`, over
:func:`~flyviz.analysis.importance_compute.window_scores` of each window), and two
partials merge by addition (:func:`merge_partials`). The engines a thread lays out
are kept for its next task (:func:`release_engines` closes them). The run that
drives them is :func:`flyviz.analysis.importance.run_importance`.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster
from flyviz.analysis.corpus import DEFAULT_CONTEXT, Corpus, CorpusChunk
from flyviz.analysis.importance_compute import window_scores
from flyviz.model.kernels import ENV_VAR

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.engine import Engine


# -------------------------------------------------------------------- settings
@dataclass(frozen=True)
class ImportanceSettings(cluster.RunSettings):
    """How an estimate runs.

    Attributes
    ----------
    context
        Longest window, BOS included (the lesion map's ``--context``).
    chunk_tokens
        Tokens per chunk (one task, the unit of ``--resume``).
    min_tasks
        The text is cut finer when fewer chunks would result.
    kernel, threads
        Sparse kernel and threads per task (results do not depend on them).
    """

    context: int = DEFAULT_CONTEXT
    chunk_tokens: int = 2048
    min_tasks: int = 16
    kernel: str | None = None
    threads: int = 1

    def validate(self) -> "ImportanceSettings":
        """Raise :class:`InputError` for out-of-range values; return ``self``."""
        self.check_ranges((("--context", self.context, 2, 1 << 20),
                           ("--chunk-tokens", self.chunk_tokens, 16, 1 << 30),
                           ("min tasks", self.min_tasks, 1, 1 << 20),
                           ("threads", self.threads, 1, 64)))
        return self


def plan_chunks(corpus: Corpus, settings: ImportanceSettings) -> list[CorpusChunk]:
    """The tasks: chunks of about ``chunk_tokens`` tokens, at least ``min_tasks`` of them
    where the text has that many windows. Depends only on the text and the settings."""
    wanted = max(math.ceil(corpus.n_tokens / settings.chunk_tokens), settings.min_tasks)
    return corpus.chunks(max(1, corpus.n_tokens // wanted))


# ------------------------------------------------------------------- one task
_local = threading.local()


def _engines(ckpt: "Checkpoint", settings: ImportanceSettings
             ) -> tuple["Engine", "BackwardEngine", dict[str, Any]]:
    """A forward and a backward engine for ``ckpt``, kept for this thread's next task."""
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.engine import Engine

    cache: OrderedDict = getattr(_local, "engines", None) or OrderedDict()
    _local.engines = cache
    key = (id(ckpt), settings.kernel, settings.threads)
    entry = cache.get(key)
    if entry is not None and entry[0] is ckpt:
        return entry[1], entry[2], entry[3]
    # As the lesion map's batched engine: the compiled kernel unless FLYVIZ_KERNEL or the
    # settings say otherwise (scipy where it cannot compile; the same bits either way).
    kernel = settings.kernel or os.environ.get(ENV_VAR, "").strip().lower() or "llvm"
    engine = Engine(ckpt, settings.threads, kernel=kernel)
    backward = BackwardEngine(ckpt, threads=settings.threads, kernel=kernel)
    scratch: dict[str, Any] = {}
    cache[key] = (ckpt, engine, backward, scratch)
    while len(cache) > 1:
        _, (_, old_engine, old_backward, _) = cache.popitem(last=False)
        old_backward.close()
        close = getattr(old_engine, "close", None)
        if close is not None:
            close()
    return engine, backward, scratch


def release_engines() -> None:
    """Close the engines this thread keeps between tasks."""
    cache = getattr(_local, "engines", None)
    while cache:
        _, (_, engine, backward, _) = cache.popitem()
        backward.close()
        close = getattr(engine, "close", None)
        if close is not None:
            close()


def chunk_partial(ckpt: "Checkpoint", settings: ImportanceSettings, chunk: CorpusChunk,
                  engines: tuple["Engine", "BackwardEngine"] | None = None) -> cluster.Partial:
    """Run one task: every window of ``chunk``; its per-neuron sums (float64).

    ``engines``: a forward and a backward engine of ``ckpt`` to use (a loaded
    :class:`~flyviz.record.runner.Model`'s); default: this thread's own.
    """
    if engines is None:
        engine, backward, scratch = _engines(ckpt, settings)
    else:
        (engine, backward), scratch = engines, {}
    n = int(ckpt.config.neurons)
    score = np.zeros(n, dtype=np.float64)
    ce = 0.0
    positions = 0
    for lo, hi in zip(chunk.offsets[:-1], chunk.offsets[1:]):
        ids = chunk.tokens[int(lo):int(hi)]
        window, window_ce, counted = window_scores(ckpt, engine, backward, ids, scratch)
        score += window
        ce += window_ce
        positions += counted
        cluster.report_progress(int(hi - lo))
    return {"score": score, "ce": np.array([ce]), "positions": np.array([positions], np.int64),
            "chunks": np.array([1], np.int64)}


def importance_task(spec: str, dataset: str | None, weights_sha256: str,
                    settings: dict[str, Any], chunk: CorpusChunk) -> cluster.Partial:
    """One task on a worker: the model comes from ``spec`` (loaded once per process) and
    must have the client's weights."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    return chunk_partial(ckpt, ImportanceSettings(**settings), chunk)


class InProcessTask:
    """The task function of a run in this process: the client's own model, no loading
    (what :func:`flyviz.analysis.runs.run_tasks` calls for each chunk when
    ``workers=0``)."""

    def __init__(self, ckpt: "Checkpoint", settings: ImportanceSettings,
                 engines: tuple["Engine", "BackwardEngine"] | None) -> None:
        self.ckpt, self.settings, self.engines = ckpt, settings, engines

    def __call__(self, chunk: CorpusChunk) -> cluster.Partial:
        return chunk_partial(self.ckpt, self.settings, chunk, self.engines)


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """Two partials added (float64). Addition is commutative, so ``merge(a, b)`` and
    ``merge(b, a)`` are the same bits; the fixed merge tree fixes the rest of the order."""
    return {name: a[name] + b[name] for name in ("score", "ce", "positions", "chunks")}


__all__ = ["ImportanceSettings", "InProcessTask", "chunk_partial", "importance_task",
           "merge_partials", "plan_chunks", "release_engines"]
