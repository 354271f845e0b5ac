"""Estimated lesions: what silencing every single neuron would cost a text, to first order.

Silencing a set ``S`` of neurons (their state 0 after every step) raises the
text's mean next-token cross-entropy by ``ΔCE(S)``; ``flyviz sweep`` measures
it exactly, one batched column per group. To first order (attribution
patching, ``explain.md`` section 2)::

    ΔCE_est(i) = sum_t (0 - x_i(t)) * dCE/dx_i(t)          ΔCE_est(S) = sum_{i in S} ΔCE_est(i)

with the true gradient (``sech^2``, nothing frozen), where ``dCE/dx_i(t)`` is
the derivative a silence needs: every ``x_i(t)`` is set, so each is a variable
of its own and the derivative holds the neuron's *later* states fixed. The
sweep's cotangent ``v_i(t)`` is the total derivative instead; it also runs
through the neuron's own next state (``x_i(t+1) = (1 - lam) x_i(t) + ...``,
with ``lam = 0.9`` a tenth of every cotangent comes back this way) and would
count the later silences twice. So the one-step self-path is taken out:
``dCE/dx_i(t) = v_i(t) - J_ii(t+1) v_i(t+1)`` with ``J_ii`` the neuron's own
Jacobian entry (its leak and any self-synapse through the tanh); longer loops
back to the neuron (through others) stay in, a small error of the graph's
loop gains. Measured against the exact silence of one quiet neuron (the
tests), the plain total derivative was 15% off, this one within the second-
order term. One teacher-forced pass
of the single-stream engine over a window (recording its
:class:`~flyviz.model.attribution.Tape`) and one backward sweep of
:class:`~flyviz.model.attribution.BackwardEngine` in the ``"gradient"`` mode,
seeded at every counted position ``p`` with the cotangent of that position's
cross-entropy term (``softmax(logits_p) - one_hot(t_{p+1})`` through the
readout, :func:`flyviz.model.explain.logit_cotangent`), give every neuron's
``sum_t x_i(t) v_i(t)``. The estimate of all 49,393 neurons costs one forward
and one backward pass of one column; any grouping is a sum over the neurons.

The text is read exactly as the lesion map reads it (:mod:`flyviz.analysis.sweep`:
windows of at most ``context - 1`` tokens fed from the zero state as ``BOS
t_1 ..``, positions ``0 .. L-2`` counted, CE the mean over every counted
position of the text), so the two are measured on the same positions.

How it runs
-----------
The windows are cut into chunks (about ``chunk_tokens`` tokens, finer so
that ``min_tasks`` tasks exist); each chunk is one task on Dask, run and
merged by :func:`flyviz.analysis.cluster.run_tree` (``--workers``,
``--scheduler``, ``--resume``) like the lesion map's. A task's partial holds
float64 sums per neuron. The merge adds two partials; the tree's shape depends
only on the number of chunks and float addition is commutative, so the sums
are added in one fixed order whatever the workers do: 1 worker, 2 workers and
a resumed run give the same bits. The partials do not depend on the groups,
so a resumed run may even regroup.

Files
-----
``RESULT`` (``.csv`` or ``.parquet``): the lesion-map file format
(:func:`flyviz.analysis.sweep.write_result`, readable by
:class:`~flyviz.analysis.sweep.LesionMap`), one row per group, ``delta_ce``
the estimate, ``cross_entropy`` the untouched CE plus it, ``kl`` and
``top1_agreement`` NaN (a first-order estimate says nothing about them); the
metadata has ``"estimate": true`` and the model's digests and settings.
Beside it ``RESULT.neurons.csv`` (or ``.parquet``): one row per neuron
(``neuron``, its labels, ``delta_ce_est``), its metadata as in ``RESULT``;
and ``RESULT.zarr``: an xarray Dataset with ``delta_ce_est[neuron]`` and the
neurons' labels as coordinates (texts as integer codes, read back with
:func:`flyviz.record.convert.open_zarr`).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster, runs
from flyviz.analysis.corpus import DEFAULT_CONTEXT, Corpus, CorpusChunk
from flyviz.analysis.sweep import (FORMAT, FORMAT_VERSION, LOG_FLOOR, Group,
                                   GroupResult, check_output, write_result)
from flyviz.analysis.table_file import write_table_file
from flyviz.errors import InputError, MissingDependencyError
from flyviz.model.kernels import ENV_VAR

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.engine import Engine

#: The per-neuron table's metadata: the CSV's first line starts with this, the Parquet
#: schema metadata key is :data:`NEURONS_PARQUET_KEY`.
NEURONS_CSV_PREFIX = "# flyviz-importance "
NEURONS_PARQUET_KEY = b"flyviz_importance"
METHOD = "attribution patching: sum_t (0 - x_i(t)) dCE/dx_i(t), true gradient"


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


# ------------------------------------------------------------------- one window
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


def _head_cotangents(ckpt: "Checkpoint", weights: np.ndarray, scratch: dict[str, Any]
                     ) -> np.ndarray:
    """``(T, readout)`` float64: ``head^T e`` for each row ``e`` of ``weights`` (what
    :func:`~flyviz.model.explain.logit_cotangent` computes first, for all positions of a
    window in one product)."""
    if ckpt.head is not None:
        return (weights.astype(np.float32) @ np.asarray(ckpt.head)).astype(np.float64)
    if "head_a" not in scratch:  # float64 copies, once per engine
        scratch["head_a"] = np.asarray(ckpt.head_a, dtype=np.float64)
        scratch["head_b"] = np.asarray(ckpt.head_b, dtype=np.float64)
    return (weights @ scratch["head_b"]) @ scratch["head_a"]


#: Positions whose seeds are computed together (float64 blocks of this many states).
_SEED_ROWS = 32


def _layer_norm_cotangents(ckpt: "Checkpoint", states: np.ndarray, heads: np.ndarray,
                           scratch: dict[str, Any]) -> np.ndarray:
    """``(rows, neurons)`` float32: ``d(a_t . LayerNorm(x_t[out]))/dx_t`` for each row, the
    LayerNorm's scale differentiated too (what :func:`flyviz.model.explain.logit_cotangent`
    gives in the gradient mode, for a block of positions at once; the scale is computed
    as the engine's readout computes it)."""
    cfg = ckpt.config
    if "out_index" not in scratch:
        out = None if ckpt.out_index_is_identity() else np.asarray(ckpt.out_index, np.intp)
        unique = out is None or np.unique(out).size == out.size
        scratch["out_index"] = (out, unique, np.asarray(ckpt.ln_weight, dtype=np.float64))
    out, unique, ln_weight = scratch["out_index"]
    h = states if out is None else states[:, out]
    mean = h.mean(axis=1, dtype=np.float64)
    var = np.square(h - mean.astype(np.float32)[:, None], dtype=np.float32).mean(
        axis=1, dtype=np.float64)
    inv = (1.0 / np.sqrt(var + cfg.layer_norm_eps)).astype(np.float32).astype(np.float64)
    q = heads * ln_weight
    q -= q.mean(axis=1, keepdims=True)
    normed = (h.astype(np.float64) - mean[:, None]) * inv[:, None]
    # mean(q * normed) is the same with q centred: normed sums to 0 along each row.
    c_h = q - normed * np.mean(q * normed, axis=1, keepdims=True)
    c_h *= inv[:, None]
    if out is None:
        return c_h.astype(np.float32)
    c = np.zeros((states.shape[0], cfg.neurons), dtype=np.float64)
    if unique:
        c[:, out] = c_h
    else:
        for row in range(states.shape[0]):
            np.add.at(c[row], out, c_h[row])
    return c.astype(np.float32)


def self_weights(ckpt: "Checkpoint") -> np.ndarray:
    """``(neurons,)`` float64: each neuron's synapse onto itself (0 where it has none)."""
    offsets = np.asarray(ckpt.w_offsets, dtype=np.int64)
    rows = np.repeat(np.arange(ckpt.config.neurons), np.diff(offsets))
    pre = np.asarray(ckpt.w_indices)
    out = np.zeros(ckpt.config.neurons)
    hit = rows == pre
    out[rows[hit]] = np.asarray(ckpt.w_values, dtype=np.float64)[hit]
    return out


def window_scores(ckpt: "Checkpoint", engine: "Engine", backward: "BackwardEngine",
                  ids: Sequence[int] | np.ndarray, scratch: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, float, int]:
    """One window (BOS first): ``(sum_t x_i(t) dCE_sum/dx_i(t) per neuron, CE sum, positions)``.

    ``CE_sum`` is the sum of the cross-entropies of positions ``0 .. len(ids)-2``
    (position ``p`` predicts ``ids[p + 1]``); ``ΔCE_est`` of the window's sum is
    minus the first value. One forward pass (tape) and one gradient sweep.

    The derivative is the one the silence needs (see the module documentation):
    ``sum_t x_i(t) (v_i(t) - J_ii(t+1) v_i(t+1)) = sum_t v_i(t) (x_i(t) - J_ii(t)
    x_i(t-1))``, computed as the second form while the sweep passes.
    """
    from flyviz.model.attribution import GRADIENT, record_tape

    scratch = {} if scratch is None else scratch
    ids = [int(t) for t in ids]
    n = int(ckpt.config.neurons)
    total = np.zeros(n, dtype=np.float64)
    counted = len(ids) - 1
    if counted < 1:
        return total, 0.0, 0
    tape = record_tape(engine, ids, slopes=True, interventions=())
    logits = np.stack([tape.logits(t) for t in range(counted)]).astype(np.float64)
    targets = np.asarray(ids[1:], dtype=np.int64)
    rows = np.arange(counted)
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ce_sum = float(-np.maximum(log_p[rows, targets], LOG_FLOOR).sum())
    # d CE_p / d logits_p = softmax - one_hot(target): every position's term is a seed.
    weights = np.exp(log_p)
    weights[rows, targets] -= 1.0
    heads = _head_cotangents(ckpt, weights, scratch)
    seeds: dict[int, np.ndarray] = {}
    for start in range(0, counted, _SEED_ROWS):
        rows_here = range(start, min(counted, start + _SEED_ROWS))
        block = _layer_norm_cotangents(ckpt, np.stack([tape.x(t) for t in rows_here]),
                                       heads[start:start + len(rows_here)], scratch)
        seeds.update(zip(rows_here, block))

    if "self_weight" not in scratch:
        scratch["self_weight"] = self_weights(ckpt)
    # J_ii(t) = dx_i(t)/dx_i(t-1) along the neuron's own one-step path: its leak, and its
    # self-synapse (if any) through the tanh.
    leak = float(ckpt.config.leak)
    own = leak * np.asarray(ckpt.gain, np.float64) * np.asarray(ckpt.rec_gain, np.float64) \
        * scratch["self_weight"]

    def gather(t: int, v: np.ndarray, m: np.ndarray, w: np.ndarray) -> None:
        x = tape.x(t).astype(np.float64)
        held = (1.0 - leak) + own * tape.slope(t).astype(np.float64)
        injected = x - held * tape.x(t - 1).astype(np.float64)
        np.add(total, injected * v, out=total)

    backward.sweep(tape, seeds, mode=GRADIENT, keep=False, on_step=gather)
    return total, ce_sum, counted


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


class _InProcess:
    """The task function of a run in this process: the client's own model, no loading."""

    def __init__(self, ckpt: "Checkpoint", settings: ImportanceSettings,
                 engines: tuple["Engine", "BackwardEngine"] | None) -> None:
        self.ckpt, self.settings, self.engines = ckpt, settings, engines

    def __call__(self, chunk: CorpusChunk) -> cluster.Partial:
        return chunk_partial(self.ckpt, self.settings, chunk, self.engines)


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """Two partials added (float64). Addition is commutative, so ``merge(a, b)`` and
    ``merge(b, a)`` are the same bits; the fixed merge tree fixes the rest of the order."""
    return {name: a[name] + b[name] for name in ("score", "ce", "positions", "chunks")}


# ---------------------------------------------------------------------- groups
def importance_groups(ckpt: "Checkpoint", by: "str | Path | dict[str, str] | None"
                      ) -> list[Group]:
    """The groups ``by`` names: a label kind (``superclass``, ``type``, ``side``), a groups
    file, a ``{name: query}`` mapping, or ``None`` (no groups: per-neuron only).

    Raises
    ------
    InputError
        (a :class:`~flyviz.errors.SelectionError` for a query) for a bad kind, file or
        query, or a query that selects no neuron.
    """
    from flyviz.analysis.sweep import sweep_groups
    from flyviz.errors import SelectionError
    from flyviz.model.selection import neuron_index

    if by is None:
        return []
    if not isinstance(by, (dict, str, os.PathLike)):
        from flyviz.arguments import shown

        raise InputError(f"by must be superclass, type, side, a groups file's path or "
                         f"{{name: query, ...}}, not {shown(by)}")
    if not isinstance(by, dict):
        return sweep_groups(ckpt, by)
    index = neuron_index(ckpt)
    groups = []
    for name, query in by.items():
        members = index.select(str(query)).astype(np.int64)
        if members.size == 0:
            raise SelectionError(f"the group {name!r} ({query}) selects no neuron")
        members.setflags(write=False)
        groups.append(Group(str(name), str(query), members))
    if not groups:
        raise InputError("by= names no group; give {name: query, ...} with at least one "
                         "group, or a label kind")
    return groups


# --------------------------------------------------------------------- results
def estimate_rows(estimate: np.ndarray, groups: list[Group], baseline: float,
                  positions: int) -> list[GroupResult]:
    """Lesion-map rows for ``groups`` from the per-neuron estimate: each group's ``delta_ce``
    the float64 sum over its (sorted) neurons; sorted largest first, ties in group order."""
    values = np.array([float(np.sum(estimate[np.sort(g.neurons)])) for g in groups])
    order = np.lexsort((np.arange(len(groups)), -values))
    nan = float("nan")
    return [GroupResult(rank=rank, group=groups[i].name, query=groups[i].query,
                        neurons=groups[i].size, delta_ce=float(values[i]), kl=nan,
                        top1_agreement=nan, cross_entropy=baseline + float(values[i]),
                        positions=positions)
            for rank, i in enumerate(order, start=1)]


@dataclass(frozen=True)
class Agreement:
    """How well the estimate ranks and signs the groups the exact lesion map measured.

    Attributes
    ----------
    groups
        Groups compared (those in both).
    spearman
        Spearman's rank correlation of ``ΔCE_est`` and ``ΔCE`` over them
        (:func:`scipy.stats.spearmanr`; NaN for fewer than 2 or constant values).
    sign_agreement
        Fraction of the groups where both have the same sign (0 counts as a sign).
    """

    groups: int
    spearman: float
    sign_agreement: float

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (NaN as ``None``)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}

    def line(self) -> str:
        """One line for a terminal."""
        return (f"estimate vs exact over {self.groups:,} groups: Spearman rank correlation "
                f"{self.spearman:+.3f}, same sign {self.sign_agreement:.1%}")


def agreement(exact: Sequence[GroupResult], estimate: Sequence[GroupResult]) -> Agreement:
    """Compare estimated and exact rows by group name."""
    from scipy.stats import spearmanr

    by_name = {r.group: r.delta_ce for r in estimate}
    pairs = [(r.delta_ce, by_name[r.group]) for r in exact if r.group in by_name]
    if not pairs:
        raise InputError("the estimate and the lesion map share no group to compare")
    true, est = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    rho = float("nan")
    if len(pairs) >= 2 and np.ptp(true) > 0 and np.ptp(est) > 0:
        rho = float(spearmanr(true, est).statistic)
    same = float(np.mean(np.sign(true) == np.sign(est)))
    return Agreement(len(pairs), rho, same)


# ------------------------------------------------------------------ the run
@dataclass
class ImportanceRun:
    """What :func:`run_importance` did.

    Attributes
    ----------
    estimate
        ``(neurons,)`` float64: ``ΔCE_est`` of silencing each neuron alone, nats/token.
    rows
        The groups' estimates, largest first.
    baseline_cross_entropy
        The untouched model's mean cross-entropy over the counted positions.
    positions, tokens, tasks, seconds, workers, resumed_tasks, compute_seconds
        As for the lesion map.
    paths
        The files written: ``{"groups": ..., "neurons": ..., "zarr": ...}``.
    info
        The metadata stored in them.
    """

    estimate: np.ndarray
    rows: list[GroupResult]
    baseline_cross_entropy: float
    positions: int
    tokens: int
    tasks: int
    seconds: float
    workers: int
    resumed_tasks: int
    compute_seconds: float = 0.0
    paths: dict[str, Path] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> Path | None:
        """The groups file (``RESULT``), if one was written."""
        return self.paths.get("groups")


def companion_paths(out: Path) -> dict[str, Path]:
    """The files a run writing ``out`` makes: ``out``, ``OUT.neurons.EXT`` and ``OUT.zarr``
    (``lesions.csv`` → ``lesions.neurons.csv``, ``lesions.zarr``)."""
    return {"groups": out, "neurons": out.with_name(f"{out.stem}.neurons{out.suffix}"),
            "zarr": out.with_name(f"{out.stem}.zarr")}


def _store_key(identity: dict[str, Any], corpus: Corpus, settings: ImportanceSettings,
               tasks: int) -> dict[str, Any]:
    return {"format": "flyviz-importance", "model": runs.model_key(identity),
            "text": corpus.digest(), "settings": settings.run_key(), "tasks": tasks}


def require_xarray() -> None:
    """Check that xarray and zarr, which write the estimates, are installed (before any work).

    Raises
    ------
    MissingDependencyError
        One line naming the extra to install (``flyviz[data]``).
    """
    try:
        import xarray  # noqa: F401
        import zarr  # noqa: F401
    except ImportError:
        raise MissingDependencyError.for_feature("writing the estimates as Zarr", "xarray",
                                                 "data") from None


def run_importance(spec: str | None, ckpt: "Checkpoint", corpus: Corpus, groups: list[Group],
                   out: str | Path | None, settings: ImportanceSettings = ImportanceSettings(),
                   *, by: str = "", dataset: str | Path | None = None,
                   workers: int | None = None, scheduler: str | None = None,
                   resume: bool = False, progress: cluster.ProgressBar | None = None,
                   log: Callable[[str], None] | None = None,
                   exact: Sequence[GroupResult] | None = None,
                   engines: tuple["Engine", "BackwardEngine"] | None = None) -> ImportanceRun:
    """Estimate the silencing of every neuron of ``ckpt`` over ``corpus``; write ``out``.

    Parameters
    ----------
    spec, dataset
        How workers load the model (each checks that its weights are ``ckpt``'s);
        ``spec=None`` runs in this process on ``ckpt`` itself (``workers`` 0).
    ckpt
        The model, loaded here.
    corpus
        The tokenized text (windows of at most ``settings.context`` tokens).
    groups
        The groups to sum the estimate over (:func:`flyviz.analysis.sweep.sweep_groups`);
        may be empty (per-neuron files only).
    out
        ``RESULT`` (``.csv`` or ``.parquet``); its companions are
        :func:`companion_paths`. ``None``: write nothing, run in this
        process's memory only (no ``--resume``).
    settings, by, workers, scheduler, resume, progress, log
        As for :func:`flyviz.analysis.sweep.run_sweep` (``progress`` counts tokens).
    exact
        The exact lesion map's rows for the same groups: their :class:`Agreement`
        with the estimate is stored in the metadata (``"agreement"``).
    engines
        In this process (``workers=0``): the forward and backward engines to
        use (a :class:`~flyviz.record.runner.Model`'s), else new ones.
    """
    from flyviz.model.identity import model_identity

    settings = settings.validate()
    paths: dict[str, Path] = {}
    kind = None
    if out is not None:
        out = Path(out).expanduser()
        kind = check_output(out)
        require_xarray()
        paths = companion_paths(out)
    identity = model_identity(ckpt)
    chunks = plan_chunks(corpus, settings)
    store = None
    if out is not None:
        store = cluster.open_store(out, _store_key(identity, corpus, settings, len(chunks)),
                                   resume)
    elif resume:
        raise InputError("resuming needs an output file (out=...) to keep the finished tasks")
    if log is not None:
        log(f"estimating {ckpt.config.neurons:,} single-neuron lesions over "
            f"{corpus.counted_tokens:,} positions ({corpus.n_windows:,} windows); "
            f"{len(chunks):,} tasks")
    if spec is None and not runs.in_this_process(workers, scheduler):
        raise InputError("running on Dask workers needs a model spec they can load (a folder "
                         "or 'demo'); give one, or use workers=0")
    result = runs.run_tasks(importance_task, chunks, merge_partials, spec=spec, dataset=dataset,
                            identity=identity, settings=settings,
                            in_process=_InProcess(ckpt, settings, engines),
                            release=release_engines, workers=workers, scheduler=scheduler,
                            store=store, resume=resume, progress=progress)
    partial = result.partial
    positions = int(partial["positions"][0])
    if int(partial["chunks"][0]) != len(chunks):
        raise RuntimeError("the merged estimate does not hold every chunk")
    baseline = float(partial["ce"][0]) / max(positions, 1)
    estimate = -partial["score"] / max(positions, 1)
    rows = estimate_rows(estimate, groups, baseline, positions)
    info: dict[str, Any] = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "estimate": True, "method": METHOD,
        **runs.groups_info(by), "mode": "silence", "groups": len(groups),
        "baseline_cross_entropy": baseline, "text": runs.text_info(corpus, positions),
        **runs.model_info(identity, settings),
    }
    if exact is not None and rows:
        info["agreement"] = agreement(exact, rows).to_dict()
    if out is not None:
        assert kind is not None and store is not None
        _write_outputs(paths, rows, ckpt, estimate, info, kind)
        store.remove()
    return ImportanceRun(estimate=estimate, rows=rows, baseline_cross_entropy=baseline,
                         positions=positions, tokens=corpus.n_tokens, tasks=len(chunks),
                         seconds=result.seconds, workers=result.workers,
                         resumed_tasks=result.resumed_chunks,
                         compute_seconds=result.compute_seconds, paths=paths, info=info)


# ----------------------------------------------------------------------- files
def _write_outputs(paths: dict[str, Path], rows: list[Any], ckpt: "Checkpoint",
                   estimate: np.ndarray, info: dict[str, Any], kind: str) -> None:
    """Write the result, the per-neuron table and the Zarr array into a folder beside them,
    then move all three into place: a full disk leaves none of them half-written (and
    the finished tasks kept for ``--resume``), never a result without its companions."""
    import shutil
    import tempfile

    from flyviz.fileio import os_error

    out = paths["groups"]
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name[:80]}.", suffix=".writing",
                                        dir=out.parent))
    except OSError as exc:
        raise os_error(exc, out, "write") from None
    try:
        staged = {name: staging / path.name for name, path in paths.items()}
        if rows:
            write_result(staged["groups"], rows, info, kind)
        write_neuron_table(staged["neurons"], ckpt, estimate, info, kind)
        write_zarr(staged["zarr"], ckpt, estimate, info)
        for name, path in paths.items():
            if not staged[name].exists():
                continue
            if name == "zarr" and path.is_dir():
                shutil.rmtree(path)
            os.replace(staged[name], path)
    except OSError as exc:
        raise os_error(exc, out, "write") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def neuron_columns(ckpt: "Checkpoint", estimate: np.ndarray) -> dict[str, np.ndarray]:
    """The per-neuron table: ``neuron``, the anatomy's labels, ``delta_ce_est``."""
    from flyviz.record.convert import neuron_table

    table = neuron_table(ckpt.anatomy, int(ckpt.config.neurons))
    table = {k: v for k, v in table.items() if k not in ("x", "y", "z")}
    table["delta_ce_est"] = np.asarray(estimate, dtype=np.float64)
    return table


def write_neuron_table(path: Path, ckpt: "Checkpoint", estimate: np.ndarray,
                       info: dict[str, Any], kind: str) -> None:
    """Write the per-neuron table as CSV (metadata on the first line) or Parquet."""
    write_table_file(path, neuron_columns(ckpt, estimate), info, kind,
                     csv_prefix=NEURONS_CSV_PREFIX, parquet_key=NEURONS_PARQUET_KEY,
                     what="per-neuron estimate")


def to_xarray(ckpt: "Checkpoint", estimate: np.ndarray, info: dict[str, Any] | None = None
              ) -> Any:
    """``delta_ce_est[neuron]`` as an :class:`xarray.Dataset` with the neurons' labels."""
    import xarray as xr

    table = neuron_columns(ckpt, estimate)
    values = table.pop("delta_ce_est")
    coords: dict[str, Any] = {"neuron": table.pop("neuron")}
    coords.update({name: ("neuron", column) for name, column in table.items()})
    attrs = {"method": METHOD, "units": "nats/token"}
    if info is not None:
        attrs["flyviz_importance"] = json.dumps(info, sort_keys=True, separators=(",", ":"))
    return xr.Dataset({"delta_ce_est": (("neuron",), values,
                                        {"long_name": "estimated rise in mean cross-entropy "
                                                      "when the neuron is silenced",
                                         "units": "nats/token"})},
                      coords=coords, attrs=attrs)


def write_zarr(path: Path, ckpt: "Checkpoint", estimate: np.ndarray,
               info: dict[str, Any]) -> Path:
    """Write :func:`to_xarray` as a Zarr store (texts as codes, as recordings are)."""
    from flyviz.record.convert import encode_texts, is_zarr_store, write_folder_atomically

    encoded = encode_texts(to_xarray(ckpt, estimate, info))

    def write(tmp: Path) -> None:
        encoded.to_zarr(tmp, mode="w", consolidated=False)

    return write_folder_atomically(path, write, is_zarr_store)


def read_neuron_table(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(info, columns)`` of a per-neuron table (CSV or Parquet).

    Raises
    ------
    InputError
        One line when the file is missing, is not a per-neuron estimate, or is truncated or
        damaged (:func:`~flyviz.analysis.table_file.read_table_file`'s checks, then each
        column's values).
    """
    from flyviz.analysis.table_file import result_format, read_table_file

    path = Path(path)
    if not path.is_file():
        raise InputError(f"no per-neuron estimate at {path}: the file does not exist")

    def damaged(why: str) -> InputError:
        return InputError(f"{path.name} is a damaged per-neuron estimate ({why})")

    info, rows = read_table_file(path, result_format(path), csv_prefix=NEURONS_CSV_PREFIX,
                                 parquet_key=NEURONS_PARQUET_KEY, what="flyviz per-neuron estimate",
                                 error=InputError, damaged=damaged)
    if not isinstance(info, dict):
        raise damaged("its metadata is not a JSON object")
    model = info.get("model")
    neurons = model.get("neurons") if isinstance(model, dict) else None
    if isinstance(neurons, int) and len(rows) != neurons:  # a table cut short, or padded
        raise damaged(f"it has {len(rows):,} rows, not one for each of its model's "
                      f"{neurons:,} neurons")
    columns: dict[str, np.ndarray] = {}
    try:
        for name in (rows[0] if rows else {}):
            raw = [r[name] for r in rows]
            if name == "delta_ce_est":
                columns[name] = np.array([float(v) for v in raw])
            elif name in ("neuron", "body_id"):
                columns[name] = np.array([int(v) for v in raw], dtype=np.int64)
            else:
                columns[name] = np.array(raw)
    except (TypeError, ValueError, KeyError):
        # A truncated last row (None) or a value that is not a number.
        raise damaged(f"a value of its {name!r} column is not what the column holds"
                      ) from None
    return info, columns


__all__ = ["Agreement", "ImportanceRun", "ImportanceSettings", "agreement", "chunk_partial",
           "companion_paths", "estimate_rows", "importance_groups", "importance_task",
           "merge_partials",
           "plan_chunks", "read_neuron_table", "run_importance", "to_xarray", "window_scores",
           "write_neuron_table", "write_zarr"]
