"""Running a lesion map: the tasks on Dask (or in this process), ``--resume``'s part files,
and the result file written, with the terminal's table.

See :mod:`flyviz.analysis.sweep` ("How it runs", "Result file").
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyviz.analysis import cluster, runs
from flyviz.analysis.corpus import Corpus
from flyviz.analysis.sweep.groups import Group, groups_digest
from flyviz.analysis.sweep.lesion_map import (COLUMNS, CSV_PREFIX, FORMAT, FORMAT_VERSION,
                                              PARQUET_KEY, GroupResult, rows_digest)
from flyviz.analysis.sweep.tasks import (SweepSettings, finish, merge_partials, plan_tasks,
                                         release_engines, sweep_task)
from flyviz.analysis.table_file import check_output, result_format, write_table_file
from flyviz.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

#: The settings of a sweep given none.
_DEFAULTS = SweepSettings()


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


def _store_key(identity: dict[str, Any], corpus: Corpus, groups: list[Group],
               settings: SweepSettings, tasks: int) -> dict[str, Any]:
    return {"format": FORMAT, "model": runs.model_key(identity), "text": corpus.digest(),
            "groups": groups_digest(groups), "settings": settings.run_key(), "tasks": tasks}


def run_sweep(spec: str, ckpt: "Checkpoint", corpus: Corpus, groups: list[Group],
              out: str | Path, settings: SweepSettings = _DEFAULTS, *, by: str = "",
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
    result = runs.run_tasks(sweep_task, tasks, merge_partials, spec=spec, dataset=dataset,
                            identity=identity, settings=settings, release=release_engines,
                            model=ckpt, workers=workers, scheduler=scheduler, store=store, resume=resume,
                            progress=progress, log=log)
    rows, baseline, positions = finish(result.partial, groups, chunks)
    info = {
        "format": FORMAT, "format_version": FORMAT_VERSION, **runs.groups_info(by),
        "mode": settings.mode, "groups": len(groups),
        "baseline_cross_entropy": baseline,
        "text": runs.text_info(corpus, positions),
        # The model's identity (flyviz.model.identity), less the machine's dataset folder.
        **runs.model_info(identity, settings),
    }
    write_result(out, rows, info, kind)
    store.remove()
    return SweepRun(path=out, rows=rows, baseline_cross_entropy=baseline, positions=positions,
                    tokens=corpus.n_tokens, tasks=len(tasks), passes=blocks,
                    seconds=result.seconds, workers=result.workers,
                    resumed_tasks=result.resumed_chunks, compute_seconds=result.compute_seconds)


def write_result(out: Path, rows: list[GroupResult], info: dict[str, Any],
                 kind: str | None = None) -> None:
    """Write the rows and ``info`` (with the rows' digest, ``rows_sha256``) as CSV or
    Parquet (see :mod:`flyviz.analysis.sweep`, "Result file")."""
    write_table_file(out, {c: [getattr(r, c) for r in rows] for c in COLUMNS},
                     {**info, "rows_sha256": rows_digest(rows)}, kind or result_format(out),
                     csv_prefix=CSV_PREFIX, parquet_key=PARQUET_KEY, what="lesion map",
                     types=_ARROW_TYPES)


#: The Arrow types of a lesion map's columns that are not float64.
_ARROW_TYPES = {"rank": "int32", "group": "string", "query": "string", "neurons": "int64",
                "positions": "int64"}


def format_table(rows: list[GroupResult], limit: int | None = 30) -> str:
    """The rows as an aligned text table (the first ``limit``; ``None`` or 0 for all).

    The KL and top-1 columns are left out, with a line saying so, where no row has them
    (an estimate, ``flyviz importance``, gives the change of cross-entropy only; its file
    holds NaN there): a column of ``nan`` read as a failure.
    """
    shown = rows if not limit else rows[:limit]
    width = min(32, max([5] + [len(r.group) for r in shown]))
    measured = any(math.isfinite(r.kl) or math.isfinite(r.top1_agreement) for r in rows)
    head = f"{'rank':>5}  {'group':<{width}}  {'neurons':>8}  {'dCE nats/tok':>12}"
    lines = [head + (f"  {'KL nats/tok':>11}  {'top-1 same':>10}" if measured else "")]
    for r in shown:
        name = r.group if len(r.group) <= width else r.group[:width - 1] + "~"
        line = f"{r.rank:>5}  {name:<{width}}  {r.neurons:>8,}  {r.delta_ce:>12.4f}"
        if measured:
            kl = f"{r.kl:>11.4f}" if math.isfinite(r.kl) else f"{'-':>11}"
            top1 = f"{r.top1_agreement:>10.1%}" if math.isfinite(r.top1_agreement) \
                else f"{'-':>10}"
            line += f"  {kl}  {top1}"
        lines.append(line)
    if len(shown) < len(rows):
        lines.append(f"  ... {len(rows) - len(shown):,} more groups")
    if not measured and rows:
        lines.append("  (an estimate gives dCE only; flyviz sweep measures the KL and the top-1 "
                     "agreement of each lesion)")
    return "\n".join(lines)


__all__ = ["SweepRun", "format_table", "run_sweep", "write_result"]
