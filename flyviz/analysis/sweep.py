"""The lesion map: which groups of neurons a text depends on, each group lesioned in turn.

A sweep lesions every group of neurons of a model in turn (every superclass,
every cell type, each side, or named queries) and measures, teacher-forced
over a text, how much worse the model predicts it. ``flyviz sweep`` is the
command; :class:`LesionMap` reads its result (for the app and for scripts).

Groups
------
``superclass``, ``type``, ``side``
    One group per label of the model's anatomy (neurons without a label form
    the group ``(unlabelled)``), in the order of the labels' first neuron.
``FILE``
    One group per line ``NAME: QUERY`` (the query language of
    :mod:`flyviz.model.selection`; blank lines and lines starting with ``#``
    are skipped). A query that does not parse or selects nothing is an error
    naming its line. Groups may overlap.

Every group has a query that selects exactly its neurons (for a cell type
whose name holds glob characters they are escaped: ``type:"A[*]"``), which
``flyviz compare`` and :class:`~flyviz.model.interventions.Silence` take as is.

Lesions (``--mode``)
--------------------
``silence``
    the group's state is 0 after every step: ``Silence(group)``;
``cut-out``
    every synapse from the group removed: ``Cut(group, "all")``;
``cut-in``
    every synapse onto the group removed: ``Cut("all", group)``.

What is measured
----------------
The text is read as the atlas reads a corpus (:mod:`flyviz.analysis.corpus`):
each document is cut into windows of at most ``context - 1`` tokens, each fed
from the zero state as ``BOS t_1 .. t_{L-1}``. Position ``p`` (0 is the BOS)
has read ``t_0 .. t_p`` and predicts ``t_{p+1}``; the positions ``0 .. L-2``
of every window count (every token of the text but the BOS is predicted once;
the last token of a window predicts nothing). At each counted position, with
``p`` the untouched model's next-token distribution and ``q`` the lesioned
one's (softmax of the logits in float64)::

    CE_u = -ln max(p[t], 1e-300)        CE_g = -ln max(q[t], 1e-300)      t = t_{p+1}
    KL   = sum_v p_v (ln p_v - ln max(q_v, 1e-300))                       (nats)
    agree = argmax p == argmax q

and per group, over all ``N`` counted positions: ``delta_ce`` = mean of
``CE_g - CE_u`` (nats/token), ``kl`` = mean KL, ``top1_agreement`` = mean of
``agree``, ``cross_entropy`` = mean ``CE_g``; the untouched model's mean
``CE_u`` is the result's ``baseline_cross_entropy``. These are exactly the
numbers :func:`flyviz.record.compare.forced_on_text` (``flyviz compare``'s
runner) gives for one window and one intervention, averaged over the text
(``tests/test_analysis_sweep.py`` checks them to 1e-6).

How it runs
-----------
One pass of the batched engine (:class:`~flyviz.model.batch.BatchEngine`)
carries ``B - 1`` groups (``--batch B``, default 64: 63 groups) and one
untouched column, all reading the same tokens; each group's lesion acts on
its own column through :class:`~flyviz.model.batch.LesionHooks`. The work is
*tasks* of one block of groups over one chunk of the text (whole windows):
blocks x chunks, run on Dask by :func:`flyviz.analysis.cluster.run_tree`.
The text is cut into chunks of about ``--chunk-tokens`` tokens, or finer
(down to one window) when there are too few blocks to make
:attr:`SweepSettings.min_tasks` tasks. The plan depends only on the text,
the groups and the settings, never on the workers.

A task's partial holds, per (group, chunk), float64 sums of the measures
and integer counts. The merge is the union of two partials' entries, sorted
by (group, chunk): exact, and the same whatever the order, so 1 worker, 2
workers and a resumed run give the same bits. The final sums add each
group's chunks in chunk order.

Result file
-----------
CSV or Parquet, by the extension of ``--out``, one row per group sorted by
``delta_ce`` (largest first; ties in group order), with the columns of
:data:`COLUMNS`. The settings, the text, the untouched cross-entropy and the
model's identity (weight and graph digests, :mod:`flyviz.model.identity`)
are one JSON object: in a Parquet file the schema metadata key
``flyviz_sweep``; in a CSV file its first line, ``# flyviz-sweep {...}``
(read the table with ``pandas.read_csv(path, skiprows=1)``). One file
holds everything, so the identity cannot be separated from the numbers.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster
from flyviz.analysis.corpus import Corpus, CorpusChunk
from flyviz.errors import FlyvizError, InputError, MissingDependencyError, SelectionError
from flyviz.model.batch import LESION_MODES, LesionHooks
from flyviz.record.compare import PROBABILITY_FLOOR

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.batch import BatchEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.interventions import Intervention

FORMAT = "flyviz-sweep"
FORMAT_VERSION = 1
MODES = LESION_MODES
#: ``--by`` values that sweep the anatomy's labels (anything else names a file).
BY_LABELS = ("superclass", "type", "side")
#: The name of the group of neurons without a label.
UNLABELLED = "(unlabelled)"
#: The columns of a result file, in order.
COLUMNS = ("rank", "group", "query", "neurons", "delta_ce", "kl", "top1_agreement",
           "cross_entropy", "positions")
#: The measures a :class:`LesionMap` can colour neurons by.
METRICS = ("delta_ce", "kl", "top1_agreement", "cross_entropy")
CSV_PREFIX = "# flyviz-sweep "
PARQUET_KEY = b"flyviz_sweep"
CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
#: The log of the floor of a probability, as in :func:`flyviz.record.compare.kl_divergence`.
LOG_FLOOR = math.log(PROBABILITY_FLOOR)
_GROUP_FIELDS = ("group", "chunk", "delta_ce", "cross_entropy", "kl", "agree", "positions")
_BASE_FIELDS = ("base_chunk", "base_ce", "base_positions")
_LABEL_KEYS = {"superclass": ("superclass", "superclass"), "type": ("cell_type", "cell type"),
               "side": ("side", "side")}


class SweepError(FlyvizError):
    """A lesion map file is missing, damaged, or belongs to another model."""


# ---------------------------------------------------------------------- groups
@dataclass(frozen=True)
class Group:
    """A group of neurons to lesion: its name, a query that selects exactly it, its neurons."""

    name: str
    query: str
    neurons: np.ndarray

    @property
    def size(self) -> int:
        """Number of neurons."""
        return int(self.neurons.size)


def _label_query(by: str, name: str) -> str:
    """An exact query for one label: ``superclass:NAME``, ``side:NAME`` or ``type:NAME`` with
    the glob characters of a type name escaped (``[*]``, ``[?]``, ``[[]``)."""
    from flyviz.model.selection import Term

    value = name
    if by == "type":
        value = "".join(f"[{c}]" if c in "*?[" else c for c in name)
    return str(Term(by, (value,)))


def label_groups(checkpoint: "Checkpoint", by: str) -> list[Group]:
    """One group per ``superclass``, cell ``type`` or ``side`` label of ``checkpoint``.

    Raises
    ------
    SelectionError
        When the model has no such labels.
    """
    from flyviz.model.interventions import _target_text
    from flyviz.model.selection import neuron_index

    if by not in BY_LABELS:
        raise InputError(f"--by {by!r}: expected one of {', '.join(BY_LABELS)} or a file")
    index = neuron_index(checkpoint)
    attribute, what = _LABEL_KEYS[by]
    labels = getattr(index, attribute)
    if labels is None:
        raise SelectionError(f"{checkpoint.name} has no {what} labels to sweep; name the groups "
                             "in a file of 'NAME: QUERY' lines and pass it to --by")
    order = np.argsort(labels.codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(labels.counts)])
    groups = []
    for code, name in enumerate(labels.names):
        members = np.sort(order[bounds[code]:bounds[code + 1]]).astype(np.int64)
        if members.size == 0:
            continue
        query = _label_query(by, name) if name and '"' not in name else ""
        # Superclasses match without regard to case: two names that differ only in case
        # cannot be told apart by a query (a handful of groups: checked, not assumed).
        if query and by != "type" and index.count(query) != members.size:
            query = ""
        if not query:  # no label, or one a query cannot name: the neurons themselves
            query = _target_text(tuple(members.tolist()))
        members.setflags(write=False)
        groups.append(Group(name or UNLABELLED, query, members))
    return groups


def file_groups(checkpoint: "Checkpoint", path: str | Path) -> list[Group]:
    """The groups of a file of ``NAME: QUERY`` lines (see the module documentation).

    Raises
    ------
    InputError
        (a :class:`SelectionError` for a query) with one line naming the file and line
        that is wrong: unreadable, no ``NAME:``, a repeated name, a bad query, a
        query that selects nothing, or no group at all.
    """
    from flyviz.model.selection import neuron_index, parse

    path = Path(path).expanduser()
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the groups file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"the groups file {path} is not UTF-8 text (undecodable byte at "
                         f"offset {exc.start})") from None
    index = neuron_index(checkpoint)
    groups: list[Group] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path.name}, line {number}"
        name, colon, query = line.partition(":")
        name, query = name.strip(), query.strip()
        if not colon or not name or not query:
            raise InputError(f"{where}: expected 'NAME: QUERY', e.g. 'sensory: "
                             f"superclass:cb_sensory', not {line[:60]!r}")
        if name in seen:
            raise InputError(f"{where}: the group name {name!r} is used on line {seen[name]} "
                             "too; give each group its own name")
        try:
            members = index.select(query).astype(np.int64)
        except SelectionError as exc:
            hint = ""
            try:
                parse(line)
                hint = " (start the line with a name: 'NAME: QUERY')"
            except SelectionError:
                pass
            raise SelectionError(f"{where} ({name}): {exc}{hint}") from None
        seen[name] = number
        members.setflags(write=False)
        groups.append(Group(name, query, members))
    if not groups:
        raise InputError(f"the groups file {path} holds no 'NAME: QUERY' line")
    return groups


def sweep_groups(checkpoint: "Checkpoint", by: str | Path) -> list[Group]:
    """The groups ``--by`` names: a label kind of :data:`BY_LABELS`, or a groups file.

    Raises
    ------
    InputError
        When ``by`` is neither a label kind nor an existing file, or as
        :func:`label_groups` and :func:`file_groups` do.
    """
    check_by(by)
    if str(by) in BY_LABELS:
        return label_groups(checkpoint, str(by))
    return file_groups(checkpoint, by)


def check_by(by: str | Path) -> None:
    """Raise a one-line :class:`InputError` unless ``by`` is a label kind or an existing file."""
    if str(by) in BY_LABELS:
        return
    path = Path(by).expanduser()
    if not path.is_file():
        raise InputError(f"--by {str(by)!r} is neither {', '.join(BY_LABELS)} nor a file of "
                         "'NAME: QUERY' lines")


def groups_digest(groups: list[Group]) -> str:
    """SHA-256 of the groups' names, queries and neurons (what a resumed run must share)."""
    h = hashlib.sha256()
    for group in groups:
        h.update(f"{group.name}\0{group.query}\0{group.size}\0".encode())
        h.update(np.ascontiguousarray(group.neurons, dtype=np.int64).tobytes())
    return h.hexdigest()


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


def _engine(ckpt: "Checkpoint", streams: int, settings: SweepSettings) -> "BatchEngine":
    """A laid-out batched engine for ``streams`` columns, kept for the next task of this
    thread (laying a full-size graph out takes about a second; the last block of a
    sweep is narrower, so two are kept)."""
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
    from flyviz.model.engine import _SINGLE_THREADED_BLAS

    groups = task.group_neurons()
    k = len(groups)
    engine = _engine(ckpt, k + 1, settings)
    engine.hooks = LesionHooks(settings.mode, ckpt.config.neurons, engine.columns, groups,
                               np.arange(1, k + 1))
    scores = _Scores(k)
    chunk = task.chunk
    reported = 0
    last = time.perf_counter()
    try:
        # BLAS (readout, scores) stays in this thread, as in a step.
        with _SINGLE_THREADED_BLAS:
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


# --------------------------------------------------------------------- results
@dataclass(frozen=True)
class GroupResult:
    """One row of a lesion map: a group and what lesioning it did to the text's prediction.

    Attributes
    ----------
    rank
        1 for the largest ``delta_ce``.
    group, query, neurons
        The group's name, a query that selects exactly its neurons, their number.
    delta_ce
        Mean increase in cross-entropy over the untouched model, nats/token.
    kl
        Mean KL(p_untouched ‖ p_lesioned), nats/token.
    top1_agreement
        Fraction of positions where both models' most likely next token is the same.
    cross_entropy
        The lesioned model's mean cross-entropy, nats/token.
    positions
        Positions counted.
    """

    rank: int
    group: str
    query: str
    neurons: int
    delta_ce: float
    kl: float
    top1_agreement: float
    cross_entropy: float
    positions: int

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


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


# ------------------------------------------------------------------ the run
@dataclass
class SweepRun:
    """What :func:`run_sweep` did."""

    path: Path
    rows: list[GroupResult]
    baseline_cross_entropy: float
    positions: int
    tokens: int
    tasks: int
    passes: int
    seconds: float
    workers: int
    resumed_tasks: int
    compute_seconds: float = 0.0

    @property
    def group_tokens_per_second(self) -> float:
        """Throughput while computing: groups x counted positions per second."""
        work = len(self.rows) * self.positions
        return work / self.compute_seconds if self.compute_seconds > 0 else 0.0


def result_format(out: Path) -> str:
    """``"csv"`` or ``"parquet"`` by the extension of ``out``.

    Raises
    ------
    InputError
        For any other extension.
    """
    suffix = out.suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    raise InputError(f"--out {out}: give a file name ending in .csv or .parquet, e.g. "
                     "lesions.csv")


def check_output(out: Path) -> str:
    """Refuse an output path that cannot be written; return its format."""
    kind = result_format(out)
    if out.is_dir():
        raise InputError(f"--out {out} is a folder; give a file name ending in .{kind}")
    if not out.parent.is_dir():
        raise InputError(f"--out {out}: the folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK):
        raise InputError(f"--out {out}: the folder {out.parent} is not writable")
    if kind == "parquet":
        _pyarrow("writing a Parquet lesion map")
    return kind


def _pyarrow(feature: str):
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependencyError.for_feature(feature, "pyarrow", "atlas") from None
    return pyarrow


def _store_key(identity: dict[str, Any], corpus: Corpus, groups: list[Group],
               settings: SweepSettings, tasks: int) -> dict[str, Any]:
    model = {"weights_sha256": identity["weights_sha256"], "graph_sha256": identity["graph_sha256"]}
    return {"format": FORMAT, "model": model, "text": corpus.digest(),
            "groups": groups_digest(groups), "settings": settings.run_key(), "tasks": tasks}


def run_sweep(spec: str, ckpt: "Checkpoint", corpus: Corpus, groups: list[Group],
              out: str | Path, settings: SweepSettings = SweepSettings(), *, by: str = "",
              dataset: str | Path | None = None, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False,
              progress: cluster.ProgressBar | None = None,
              log: Callable[[str], None] | None = None) -> SweepRun:
    """Sweep ``groups`` of ``ckpt`` (loaded from ``spec``) over ``corpus``; write ``out``.

    Parameters
    ----------
    spec, dataset
        How workers load the model (each loads it itself, once, and checks
        that its weights are ``ckpt``'s).
    ckpt
        The same model, loaded here (identity).
    corpus
        The tokenized text (windows of at most ``settings.context`` tokens).
    groups
        The groups (:func:`sweep_groups`).
    out
        The result file, ``.csv`` or ``.parquet`` (replaced if it exists).
    settings
        See :class:`SweepSettings`.
    by
        What the groups are (``superclass``, ``type``, ``side`` or a file
        name), stored with the result.
    workers, scheduler, resume, progress
        See :func:`flyviz.analysis.cluster.run_tree`; ``progress`` counts
        group-tokens (groups x counted positions).
    log
        ``log(line)`` for status lines.
    """
    from flyviz.model.identity import model_identity

    cluster.require_dask("flyviz sweep", workers, scheduler)
    settings = settings.validate()
    if not groups:
        raise InputError("there are no groups to sweep")
    out = Path(out).expanduser()
    kind = check_output(out)
    identity = model_identity(ckpt)
    tasks, chunks = plan_tasks(groups, corpus, settings)
    blocks = len(tasks) // chunks
    store = cluster.open_store(out, _store_key(identity, corpus, groups, settings, len(tasks)),
                               resume)
    if log is not None:
        log(f"{len(groups):,} groups in {blocks:,} pass(es) of up to {settings.streams - 1} over "
            f"{corpus.counted_tokens:,} positions ({corpus.n_windows:,} windows); "
            f"{len(tasks):,} tasks")
    args = (spec, None if dataset is None else str(dataset), identity["weights_sha256"],
            asdict(settings))
    try:
        result = cluster.run_tree(sweep_task, args, tasks, merge_partials, workers=workers,
                                  scheduler=scheduler, store=store, resume=resume,
                                  progress=progress, log=log)
    finally:
        if workers == 0 and scheduler is None:
            release_engines()
    rows, baseline, positions = finish(result.partial, groups, chunks)
    info = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "by": str(by) if str(by) in BY_LABELS else "file",
        **({"groups_file": Path(by).name} if by and str(by) not in BY_LABELS else {}),
        "mode": settings.mode, "groups": len(groups),
        "baseline_cross_entropy": baseline,
        # The model's identity (flyviz.model.identity), less the machine's dataset folder.
        "model": {k: v for k, v in identity.items() if k != "dataset"},
        "settings": settings.run_key(),
        "text": {"tokens": corpus.n_tokens, "positions": positions, "windows": corpus.n_windows,
                 "documents": corpus.n_documents, "context": corpus.context,
                 "sources": [Path(s).name for s in corpus.sources[:1000]],
                 "sha256": corpus.digest()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_result(out, rows, info, kind)
    store.remove()
    return SweepRun(path=out, rows=rows, baseline_cross_entropy=baseline, positions=positions,
                    tokens=corpus.n_tokens, tasks=len(tasks), passes=blocks,
                    seconds=result.seconds, workers=result.workers,
                    resumed_tasks=result.resumed_chunks, compute_seconds=result.compute_seconds)


# ----------------------------------------------------------------------- files
def rows_digest(rows: list[GroupResult]) -> str:
    """SHA-256 of the rows' values in column order (floats as their shortest exact text),
    kept in the metadata as ``rows_sha256``: a reader refuses a lesion map whose rows were
    edited, cut short or damaged."""
    import hashlib

    table = [[getattr(row, c) for c in COLUMNS] for row in rows]
    return hashlib.sha256(json.dumps(table, separators=(",", ":")).encode("utf-8")).hexdigest()


def write_result(out: Path, rows: list[GroupResult], info: dict[str, Any],
                 kind: str | None = None) -> None:
    """Write the rows and ``info`` (with the rows' digest, ``rows_sha256``) as CSV or
    Parquet (see the module documentation)."""
    kind = kind or result_format(out)
    tmp = out.with_name(out.name + ".writing")
    info = {**info, "rows_sha256": rows_digest(rows)}
    meta = json.dumps(info, sort_keys=True, separators=(",", ":"))
    try:
        if kind == "csv":
            with open(tmp, "w", encoding="utf-8", newline="") as handle:
                handle.write(CSV_PREFIX + meta + "\n")
                writer = csv.writer(handle, lineterminator="\n")
                writer.writerow(COLUMNS)
                for row in rows:
                    # repr: the shortest text that reads back as the same float.
                    writer.writerow([repr(v) if isinstance(v, float) else v
                                     for v in (getattr(row, c) for c in COLUMNS)])
        else:
            pa = _pyarrow("writing a Parquet lesion map")
            import pyarrow.parquet as pq

            types = {"rank": pa.int32(), "group": pa.string(), "query": pa.string(),
                     "neurons": pa.int64(), "positions": pa.int64()}
            table = pa.table({c: pa.array([getattr(r, c) for r in rows],
                                           type=types.get(c, pa.float64())) for c in COLUMNS})
            table = table.replace_schema_metadata({PARQUET_KEY: meta.encode("utf-8")})
            pq.write_table(table, tmp)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None


def format_table(rows: list[GroupResult], limit: int | None = 30) -> str:
    """The rows as an aligned text table (the first ``limit``; ``None`` or 0 for all)."""
    shown = rows if not limit else rows[:limit]
    width = min(32, max([5] + [len(r.group) for r in shown]))
    lines = [f"{'rank':>5}  {'group':<{width}}  {'neurons':>8}  {'dCE nats/tok':>12}  "
             f"{'KL nats/tok':>11}  {'top-1 same':>10}"]
    for r in shown:
        name = r.group if len(r.group) <= width else r.group[:width - 1] + "~"
        lines.append(f"{r.rank:>5}  {name:<{width}}  {r.neurons:>8,}  {r.delta_ce:>12.4f}  "
                     f"{r.kl:>11.4f}  {r.top1_agreement:>10.1%}")
    if len(shown) < len(rows):
        lines.append(f"  ... {len(rows) - len(shown):,} more groups")
    return "\n".join(lines)


# ---------------------------------------------------------------------- reader
def _checkpoint_of(model: Any) -> "Checkpoint":
    """The checkpoint of a :class:`~flyviz.record.runner.Model` (``flyviz.load``), or the
    checkpoint itself."""
    return getattr(model, "checkpoint", model)


class LesionMap:
    """A lesion map file (CSV or Parquet), read: its groups, their measures, the settings.

    Everything is read when it is opened (one row per group). Resolving groups
    to neurons needs the model (a checkpoint, or a :class:`~flyviz.record.runner.Model`
    from ``flyviz.load``): :meth:`check_model` first, then :meth:`neurons_of`
    and :meth:`importance`.

    Parameters
    ----------
    path
        The ``.csv`` or ``.parquet`` file ``flyviz sweep`` wrote.

    Raises
    ------
    SweepError
        When the file is missing, not a lesion map, or damaged.

    Examples
    --------
    >>> lesions = LesionMap("lesions.csv")                       # doctest: +SKIP
    >>> lesions.check_model(checkpoint)                          # doctest: +SKIP
    >>> colour = lesions.importance(checkpoint)                  # one value per neuron
    >>> top = lesions.rows[0]; lesions.neurons_of(top, checkpoint)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise SweepError(f"no lesion map at {self.path}: the file does not exist")
        try:
            kind = result_format(self.path)
        except InputError:
            raise SweepError(f"{self.path.name} is not a lesion map (expected a .csv or "
                             ".parquet file from 'flyviz sweep')") from None
        info, records = self._read(kind)
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise SweepError(f"{self.path.name} is not a flyviz lesion map (no flyviz-sweep "
                             "metadata)")
        if int(info.get("format_version", 0)) > FORMAT_VERSION:
            raise SweepError(f"{self.path.name} was written by a newer flyviz (lesion map "
                             f"format {info.get('format_version')}); update flyviz")
        self.info: dict[str, Any] = info
        self.rows: list[GroupResult] = self._rows(records)
        expected = info.get("rows_sha256")
        #: One line for the user when the file cannot be checked (no digest), else None.
        self.integrity_note: str | None = None
        if expected is None:
            self.integrity_note = (f"the lesion map {self.path.name} carries no digest of its "
                                   "rows (written before flyviz kept one), so damage to it "
                                   "cannot be detected")
        elif expected != rows_digest(self.rows):
            raise self._damaged("its rows do not match their rows_sha256 digest: edited, cut "
                                "short or corrupted")
        self._resolved: tuple[Any, list[np.ndarray]] | None = None

    # --------------------------------------------------------------- reading
    def _damaged(self, why: str) -> SweepError:
        return SweepError(f"{self.path.name} is damaged ({why}); run 'flyviz sweep' again")

    def _read(self, kind: str) -> tuple[Any, list[dict[str, Any]]]:
        from flyviz.analysis.table_file import read_table_file

        return read_table_file(self.path, kind, csv_prefix=CSV_PREFIX, parquet_key=PARQUET_KEY,
                               what="flyviz lesion map", error=SweepError, damaged=self._damaged)

    def _rows(self, records: list[dict[str, Any]]) -> list[GroupResult]:
        kinds = {f.name: f.type for f in fields(GroupResult)}
        rows = []
        for number, record in enumerate(records, start=1):
            missing = [c for c in COLUMNS if record.get(c) in (None, "")]
            if missing:
                raise self._damaged(f"row {number} has no {missing[0]}")
            try:
                values = {c: (int(record[c]) if kinds[c] == "int" else
                              float(record[c]) if kinds[c] == "float" else str(record[c] or ""))
                          for c in COLUMNS}
            except (TypeError, ValueError):
                raise self._damaged(f"row {number} holds a value that is not a number") from None
            rows.append(GroupResult(**values))  # type: ignore[arg-type]  # typed per column above
        if not rows:
            raise self._damaged("it holds no group")
        return rows

    # ------------------------------------------------------------ properties
    @property
    def by(self) -> str:
        """What the groups are: ``superclass``, ``type``, ``side`` or ``file``."""
        return str(self.info.get("by", "file"))

    @property
    def mode(self) -> str:
        """The lesion: ``silence``, ``cut-out`` or ``cut-in``."""
        return str(self.info.get("mode", "silence"))

    @property
    def baseline_cross_entropy(self) -> float:
        """The untouched model's mean cross-entropy on the text, nats/token."""
        return float(self.info.get("baseline_cross_entropy", float("nan")))

    @property
    def model(self) -> dict[str, Any]:
        """The identity of the model it was made with (:func:`~flyviz.model.identity.model_identity`)."""
        model = self.info.get("model")
        return dict(model) if isinstance(model, dict) else {}

    @property
    def settings(self) -> dict[str, Any]:
        """The settings it was computed with."""
        return dict(self.info.get("settings", {}))

    def row(self, group: str | int) -> GroupResult:
        """A row by group name, or by position in :attr:`rows` (0 is the largest ΔCE)."""
        if isinstance(group, (int, np.integer)):
            return self.rows[int(group)]
        for row in self.rows:
            if row.group == group:
                return row
        raise InputError(f"the lesion map {self.path.name} has no group {group!r}")

    def values(self, metric: str = "delta_ce") -> np.ndarray:
        """One measure of every row, in row order."""
        if metric not in METRICS:
            raise InputError(f"unknown measure {metric!r}; choose one of {', '.join(METRICS)}")
        return np.array([getattr(r, metric) for r in self.rows], dtype=np.float64)

    # ----------------------------------------------------------------- model
    def mismatch(self, model: Any) -> str | None:
        """``None`` when the map was made with ``model`` (same weight and graph digests),
        else one line saying what differs."""
        from flyviz.model.identity import identity_mismatch

        checkpoint = _checkpoint_of(model)
        if not self.model.get("weights_sha256") or not self.model.get("graph_sha256"):
            return (f"the lesion map {self.path.name} does not name its model (no digests); "
                    "run 'flyviz sweep' again")
        return identity_mismatch(self.model, checkpoint, f"the lesion map {self.path.name}")

    def matches(self, model: Any) -> bool:
        """True when the map was made with ``model``."""
        return self.mismatch(model) is None

    def check_model(self, model: Any) -> None:
        """Raise :class:`SweepError` (one line) unless the map was made with ``model``."""
        note = self.mismatch(model)
        if note is not None:
            raise SweepError(note)

    def _neurons(self, model: Any) -> list[np.ndarray]:
        """Every row's neurons in ``model`` (resolved once per model)."""
        from flyviz.model.selection import neuron_index

        checkpoint = _checkpoint_of(model)
        if self._resolved is not None and self._resolved[0] is checkpoint:
            return self._resolved[1]
        found: list[np.ndarray | None]
        if self.by in BY_LABELS:
            # By label: one pass over the labels instead of thousands of queries.
            try:
                by_name = {g.name: g.neurons for g in label_groups(checkpoint, self.by)}
            except SelectionError as exc:
                raise SweepError(f"{self.path.name}: {exc}") from None
            found = [by_name.get(r.group) for r in self.rows]
        else:
            index = neuron_index(checkpoint)
            found = []
            for r in self.rows:
                try:
                    found.append(index.select(r.query))
                except SelectionError:
                    found.append(None)
        for r, neurons in zip(self.rows, found):
            if neurons is None or neurons.size != r.neurons:
                got = "nothing" if neurons is None else f"{neurons.size:,} neurons"
                raise SweepError(f"the group {r.group!r} of {self.path.name} ({r.neurons:,} "
                                 f"neurons) selects {got} of {checkpoint.name}; open the map "
                                 "with the model it was made with")
        resolved = [np.asarray(n) for n in found if n is not None]
        self._resolved = (checkpoint, resolved)
        return resolved

    def neurons_of(self, group: "GroupResult | str | int", model: Any) -> np.ndarray:
        """Sorted neuron indices of a group (a row, its name, or its position)."""
        row = group if isinstance(group, GroupResult) else self.row(group)
        return self._neurons(model)[self.rows.index(row)]

    def importance(self, model: Any, metric: str = "delta_ce") -> np.ndarray:
        """``(neurons,)`` float32: each neuron's group's measure, for colouring.

        A neuron in several groups (a groups file may overlap) takes the
        largest value among them; a neuron in none is NaN.
        """
        values = self.values(metric)
        out = np.full(_checkpoint_of(model).config.neurons, -np.inf, dtype=np.float64)
        for neurons, value in zip(self._neurons(model), values):
            out[neurons] = np.maximum(out[neurons], value)
        out[out == -np.inf] = np.nan
        return out.astype(np.float32)

    def intervention(self, group: "GroupResult | str | int", mode: str | None = None
                     ) -> "Intervention":
        """The intervention the sweep applied to a group, or the lesion ``mode`` of it (to
        replay it with ``flyviz compare`` or :class:`~flyviz.record.compare.Comparison`)."""
        from flyviz.model.interventions import Cut, Silence

        row = group if isinstance(group, GroupResult) else self.row(group)
        mode = self.mode if mode is None else mode
        if mode not in MODES:
            raise InputError(f"unknown lesion {mode!r}; expected one of {', '.join(MODES)}")
        if mode == "cut-out":
            return Cut(row.query, "all")
        if mode == "cut-in":
            return Cut("all", row.query)
        return Silence(row.query)


def open_lesion_map(path: str | Path) -> LesionMap:
    """Open a lesion map (see :class:`LesionMap`)."""
    return LesionMap(path)


__all__ = ["BY_LABELS", "COLUMNS", "Group", "GroupResult", "LesionMap", "METRICS", "MODES",
           "SweepError", "SweepRun", "SweepSettings", "SweepTask", "file_groups", "finish",
           "format_table", "label_groups", "merge_partials", "open_lesion_map", "pass_partial",
           "plan_tasks", "run_sweep", "sweep_groups", "write_result"]
