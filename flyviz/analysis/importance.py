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

Modules
-------
This module is the public API and the run (:func:`run_importance`, the groups, the
rows and their :class:`Agreement` with an exact lesion map), and re-exports the
public names of the three it builds on, as the atlas is split:
:mod:`~flyviz.analysis.importance_compute` (the gradient maths of one window),
:mod:`~flyviz.analysis.importance_tasks` (settings, chunks, the Dask tasks and their
merge) and :mod:`~flyviz.analysis.importance_file` (the CSV, Parquet and Zarr files).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster, runs
from flyviz.analysis.corpus import Corpus
from flyviz.analysis.importance_compute import self_weights, window_scores
from flyviz.analysis.importance_file import (METHOD, NEURONS_CSV_PREFIX, NEURONS_PARQUET_KEY,
                                             companion_paths, neuron_columns,
                                             read_neuron_table, require_xarray, to_xarray,
                                             write_neuron_table, write_outputs, write_zarr)
from flyviz.analysis.importance_tasks import (ImportanceSettings, InProcessTask, chunk_partial,
                                              importance_task, merge_partials, plan_chunks,
                                              release_engines)
from flyviz.analysis.sweep import FORMAT, FORMAT_VERSION, Group, GroupResult, check_output
from flyviz.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.engine import Engine


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


def _store_key(identity: dict[str, Any], corpus: Corpus, settings: ImportanceSettings,
               tasks: int) -> dict[str, Any]:
    return {"format": "flyviz-importance", "model": runs.model_key(identity),
            "text": corpus.digest(), "settings": settings.run_key(), "tasks": tasks}


def run_importance(spec: str | None, ckpt: "Checkpoint", corpus: Corpus, groups: list[Group],
                   out: str | Path | None,
                   settings: ImportanceSettings = ImportanceSettings(),  # noqa: B008 - frozen
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
                            in_process=InProcessTask(ckpt, settings, engines),
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
        write_outputs(paths, rows, ckpt, estimate, info, kind)
        store.remove()
    return ImportanceRun(estimate=estimate, rows=rows, baseline_cross_entropy=baseline,
                         positions=positions, tokens=corpus.n_tokens, tasks=len(chunks),
                         seconds=result.seconds, workers=result.workers,
                         resumed_tasks=result.resumed_chunks,
                         compute_seconds=result.compute_seconds, paths=paths, info=info)


__all__ = ["METHOD", "NEURONS_CSV_PREFIX", "NEURONS_PARQUET_KEY", "Agreement", "ImportanceRun",
           "ImportanceSettings", "InProcessTask", "agreement", "chunk_partial", "companion_paths",
           "estimate_rows", "importance_groups", "importance_task", "merge_partials",
           "neuron_columns", "plan_chunks", "read_neuron_table", "release_engines",
           "require_xarray", "run_importance", "self_weights", "to_xarray", "window_scores",
           "write_neuron_table", "write_outputs", "write_zarr"]
