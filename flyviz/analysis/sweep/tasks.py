"""The lesion map's work: its settings, the task list (blocks of groups x chunks of the text),
one task's pass of the batched engine, and the exact merge of the tasks' partials.

See :mod:`flyviz.analysis.sweep` ("What is measured", "How it runs").
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster
from flyviz.analysis.corpus import Corpus, CorpusChunk
from flyviz.analysis.sweep.groups import Group
from flyviz.analysis.sweep.lesion_map import GroupResult
from flyviz.errors import InputError
from flyviz.model.batch import LESION_MODES, LesionHooks
from flyviz.record.compare import PROBABILITY_FLOOR

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.batch import BatchEngine
    from flyviz.model.checkpoint import Checkpoint

MODES = LESION_MODES
#: The log of the floor of a probability, as in :func:`flyviz.record.compare.kl_divergence`.
LOG_FLOOR = math.log(PROBABILITY_FLOOR)
_GROUP_FIELDS = ("group", "chunk", "delta_ce", "cross_entropy", "kl", "agree", "positions")
_BASE_FIELDS = ("base_chunk", "base_ce", "base_positions")


# -------------------------------------------------------------------- settings
@dataclass(frozen=True)
class SweepSettings(cluster.RunSettings):
    """How a sweep runs.

    Attributes
    ----------
    mode
        The lesion: one of :data:`MODES`.
    streams
        Columns per pass (``--batch``): ``streams - 1`` groups and the untouched model.
    context
        Longest window, BOS included.
    chunk_tokens
        Tokens per chunk of the text (with a block of groups, the unit of work
        and of ``--resume``).
    min_tasks
        The text is cut finer when fewer tasks would result, so that this many
        workers can be kept busy.
    kernel, threads
        Sparse kernel and threads per task (the same results for every choice).
    """

    mode: str = "silence"
    streams: int = 64
    context: int = 512
    chunk_tokens: int = 2048
    min_tasks: int = 16
    kernel: str | None = None
    threads: int = 1

    def validate(self) -> "SweepSettings":
        """Raise :class:`InputError` for out-of-range values; return ``self``."""
        if self.mode not in MODES:
            raise InputError(f"--mode {self.mode!r}: expected one of {', '.join(MODES)}")
        checks = (("--batch", self.streams, 2, 4096), ("--context", self.context, 2, 1 << 20),
                  ("--chunk-tokens", self.chunk_tokens, 16, 1 << 30),
                  ("min tasks", self.min_tasks, 1, 1 << 20), ("threads", self.threads, 1, 64))
        self.check_ranges(checks)
        return self


# ----------------------------------------------------------------------- tasks
@dataclass
class SweepTask:
    """One block of groups over one chunk of the text: a leaf of the merge tree.

    Attributes
    ----------
    index
        The task's number (its leaf of the merge tree; see :func:`plan_tasks`).
    block
        The block of groups.
    chunk
        The chunk of the text.
    groups
        Global numbers of the block's groups.
    neurons, offsets
        Their neurons back to back; group ``i`` is ``neurons[offsets[i]:offsets[i + 1]]``.
    """

    index: int
    block: int
    chunk: CorpusChunk
    groups: np.ndarray
    neurons: np.ndarray
    offsets: np.ndarray

    @property
    def positions(self) -> int:
        """Counted positions of the chunk: every token but each window's BOS."""
        return self.chunk.n_tokens - self.chunk.n_windows

    @property
    def n_tokens(self) -> int:
        """The work, in group-tokens: counted positions x groups (what progress counts)."""
        return self.positions * int(self.groups.size)

    def group_neurons(self) -> list[np.ndarray]:
        """Each group's neurons."""
        return [self.neurons[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]


def plan_chunks(corpus: Corpus, blocks: int, settings: SweepSettings) -> list[CorpusChunk]:
    """The text's chunks: about ``chunk_tokens`` tokens each, more when ``blocks`` blocks
    would make fewer than ``min_tasks`` tasks (never below one window per chunk)."""
    wanted = max(math.ceil(corpus.n_tokens / settings.chunk_tokens),
                 math.ceil(settings.min_tasks / max(1, blocks)))
    return corpus.chunks(max(1, corpus.n_tokens // wanted))


def plan_tasks(groups: list[Group], corpus: Corpus, settings: SweepSettings
               ) -> tuple[list[SweepTask], int]:
    """The tasks of a sweep, and the number of chunks the text is cut into.

    Groups ``0 .. B-2`` form block 0, the next ``B - 1`` block 1, and so on.
    The tasks are numbered largest first (group-tokens; ties by block, then
    chunk), the order they are handed to the workers in, so that no large
    task is left to run alone at the end.
    """
    per_pass = settings.streams - 1
    starts = range(0, len(groups), per_pass)
    chunks = plan_chunks(corpus, len(starts), settings)
    blocks = []
    for start in starts:
        members = groups[start:start + per_pass]
        blocks.append((np.arange(start, start + len(members), dtype=np.int64),
                       np.concatenate([g.neurons for g in members]).astype(np.int32),
                       np.concatenate([[0], np.cumsum([g.size for g in members])]
                                      ).astype(np.int64)))
    pairs = sorted(((b, c) for b in range(len(blocks)) for c in range(len(chunks))),
                   key=lambda bc: (-blocks[bc[0]][0].size * (chunks[bc[1]].n_tokens
                                                             - chunks[bc[1]].n_windows),
                                   bc[0], bc[1]))
    tasks = [SweepTask(index=index, block=b, chunk=chunks[c], groups=blocks[b][0],
                       neurons=blocks[b][1], offsets=blocks[b][2])
             for index, (b, c) in enumerate(pairs)]
    return tasks, len(chunks)


# ------------------------------------------------------------------- one pass
class _Scores:
    """The sums of one task: per group ΔCE, CE, KL, top-1 agreement; the untouched CE."""

    def __init__(self, groups: int) -> None:
        self._work: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.delta_ce = np.zeros(groups, dtype=np.float64)
        self.cross_entropy = np.zeros(groups, dtype=np.float64)
        self.kl = np.zeros(groups, dtype=np.float64)
        self.agree = np.zeros(groups, dtype=np.int64)
        self.base_ce = 0.0
        self.positions = 0

    def add(self, logits: np.ndarray, target: int) -> None:
        """One position: ``logits`` ``(1 + groups, vocabulary)`` (row 0 untouched) predicting
        ``target``."""
        if self._work is None:  # kept between positions (see BatchEngine's scratch)
            rows, vocabulary = logits.shape
            self._work = (np.empty((rows, vocabulary)), np.empty((rows, vocabulary)),
                          np.empty((rows - 1, vocabulary)))
        z, e, gap = self._work
        np.copyto(z, logits)                                   # float64
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=e)
        total = e.sum(axis=1)
        z -= np.log(total)[:, None]                            # log-softmax of every column
        log_p = z
        ce = -np.maximum(log_p[:, target], LOG_FLOOR)
        untouched = e[0] / total[0]
        # KL(p || q) = sum_v p_v (ln p_v - ln q_v); where p_v underflows to 0 its term is 0.
        np.maximum(log_p[1:], LOG_FLOOR, out=gap)
        np.subtract(log_p[0], gap, out=gap)
        kl = gap @ untouched
        top = logits.argmax(axis=1)
        self.delta_ce += ce[1:] - ce[0]
        self.cross_entropy += ce[1:]
        self.kl += kl
        self.agree += top[1:] == top[0]
        self.base_ce += float(ce[0])
        self.positions += 1


_local = threading.local()


def cached_engine(ckpt: "Checkpoint", streams: int, settings: SweepSettings) -> "BatchEngine":
    """A laid-out batched engine for ``streams`` columns, kept for the next task of this
    thread (laying a full-size graph out takes about a second; the last block of a
    sweep is narrower, so two are kept). Only ``settings.kernel`` and
    ``settings.threads`` are read; :func:`release_engines` closes them."""
    from flyviz.model.batch import BatchEngine

    cache: OrderedDict = getattr(_local, "engines", None) or OrderedDict()
    _local.engines = cache
    key = (id(ckpt), streams, settings.kernel, settings.threads)
    entry = cache.get(key)
    if entry is not None and entry[0] is ckpt:
        cache.move_to_end(key)
        return entry[1]
    engine = BatchEngine(ckpt, streams, threads=settings.threads, kernel=settings.kernel)
    engine.prepare()
    cache[key] = (ckpt, engine)
    while len(cache) > 2:
        _, (_, old) = cache.popitem(last=False)
        old.close()
    return engine


def release_engines() -> None:
    """Close the engines this thread keeps between tasks."""
    cache = getattr(_local, "engines", None)
    while cache:
        _, (_, engine) = cache.popitem()
        engine.close()


def pass_partial(ckpt: "Checkpoint", settings: SweepSettings, task: SweepTask) -> cluster.Partial:
    """Run one task: the block's groups, lesioned one per column, and the untouched model
    teacher-forced over the chunk's windows; return its partial sums."""
    from flyviz.model.engine import SINGLE_THREADED_BLAS

    groups = task.group_neurons()
    k = len(groups)
    engine = cached_engine(ckpt, k + 1, settings)
    engine.hooks = LesionHooks(settings.mode, ckpt.config.neurons, engine.columns, groups,
                               np.arange(1, k + 1))
    scores = _Scores(k)
    chunk = task.chunk
    reported = 0
    last = time.perf_counter()
    try:
        # BLAS (readout, scores) stays in this thread, as in a step.
        with SINGLE_THREADED_BLAS:
            for lo, hi in zip(chunk.offsets[:-1], chunk.offsets[1:]):
                ids = chunk.tokens[int(lo):int(hi)]
                engine.reset()
                for p in range(ids.size - 1):
                    logits = engine.step(int(ids[p]), logits=True)
                    assert logits is not None  # asked for
                    scores.add(logits, int(ids[p + 1]))
                    now = time.perf_counter()
                    if now - last > 1.0:  # progress about once a second
                        cluster.report_progress((scores.positions - reported) * k)
                        reported, last = scores.positions, now
    finally:
        engine.hooks = None
    cluster.report_progress((scores.positions - reported) * k)
    base = task.block == 0  # the untouched CE is taken from the first block's passes
    return {
        "group": np.asarray(task.groups, dtype=np.int64),
        "chunk": np.full(k, chunk.index, dtype=np.int64),
        "delta_ce": scores.delta_ce, "cross_entropy": scores.cross_entropy,
        "kl": scores.kl, "agree": scores.agree,
        "positions": np.full(k, scores.positions, dtype=np.int64),
        "base_chunk": np.array([chunk.index] if base else [], dtype=np.int64),
        "base_ce": np.array([scores.base_ce] if base else [], dtype=np.float64),
        "base_positions": np.array([scores.positions] if base else [], dtype=np.int64),
    }


def sweep_task(spec: str, dataset: str | None, weights_sha256: str, settings: dict[str, Any],
               task: SweepTask) -> cluster.Partial:
    """One task on a worker: the model comes from ``spec`` (loaded once per process) and
    must have the client's weights."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    return pass_partial(ckpt, SweepSettings(**settings), task)


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """The union of two partials' entries, sorted by (group, chunk): exact, and the same
    for either order (the tasks' entries never overlap)."""
    out = {name: np.concatenate([a[name], b[name]]) for name in _GROUP_FIELDS + _BASE_FIELDS}
    order = np.lexsort((out["chunk"], out["group"]))
    for name in _GROUP_FIELDS:
        out[name] = out[name][order]
    order = np.argsort(out["base_chunk"], kind="stable")
    for name in _BASE_FIELDS:
        out[name] = out[name][order]
    return out


def finish(partial: cluster.Partial, groups: list[Group], chunks: int
           ) -> tuple[list[GroupResult], float, int]:
    """The rows, sorted by ``delta_ce``, the untouched cross-entropy and the positions
    counted, from the merged partial."""
    count = len(groups)
    group = partial["group"]
    if group.size != count * chunks or not np.array_equal(
            group, np.repeat(np.arange(count), chunks)):
        raise RuntimeError("the merged sweep does not hold every group's every chunk")
    starts = np.arange(count) * chunks
    sums = {name: np.add.reduceat(partial[name], starts)
            for name in ("delta_ce", "cross_entropy", "kl", "agree", "positions")}
    positions = sums["positions"]
    base_positions = int(partial["base_positions"].sum())
    baseline = float(partial["base_ce"].sum()) / max(base_positions, 1)
    order = np.lexsort((np.arange(count), -(sums["delta_ce"] / positions)))
    rows = []
    for rank, i in enumerate(order, start=1):
        n = int(positions[i])
        rows.append(GroupResult(
            rank=rank, group=groups[i].name, query=groups[i].query, neurons=groups[i].size,
            delta_ce=float(sums["delta_ce"][i]) / n, kl=float(sums["kl"][i]) / n,
            top1_agreement=float(sums["agree"][i]) / n,
            cross_entropy=float(sums["cross_entropy"][i]) / n, positions=n))
    return rows, baseline, base_positions


__all__ = ["LOG_FLOOR", "MODES", "SweepSettings", "SweepTask", "cached_engine", "finish",
           "merge_partials", "pass_partial", "plan_chunks", "plan_tasks", "release_engines", "sweep_task"]
