"""What the corpus runs set up alike: the lesion map, estimated lesions and the causal trace.

Each run plans its tasks, then hands them to :func:`run_tasks`: on Dask every
task is called as ``task(spec, dataset, weights_sha256, settings, *extra, item)``
(small arguments: each worker loads the model from its spec once and refuses
other weights, :func:`flyviz.analysis.cluster.worker_model`); with
``workers=0`` and no scheduler it runs in this process, on the client's own
model where the run gives an ``in_process`` function, and the engines this
process kept between tasks are closed afterwards; without one, the tasks there are lent
the client's ``model`` (:func:`flyviz.analysis.cluster.client_model`), so that
the model is loaded once. :func:`model_key` is the
model's part of a run's ``--resume`` key, :func:`model_info` and
:func:`groups_info` the parts of a result's metadata the runs share.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from flyviz.analysis import cluster


def in_this_process(workers: int | None, scheduler: str | None) -> bool:
    """True when a run computes in this process, without Dask (``workers=0``, no scheduler)."""
    return workers == 0 and scheduler is None


def run_tasks(task: Callable[..., cluster.Partial], items: Sequence[cluster.Chunk],
              merge: cluster.Merge, *, spec: str | None, dataset: str | Path | None,
              identity: dict[str, Any], settings: Any, extra: tuple = (),
              in_process: Callable[[Any], cluster.Partial] | None = None,
              release: Callable[[], None] | None = None, model: Any = None,
              workers: int | None = None,
              scheduler: str | None = None, store: cluster.PartialStore | None = None,
              resume: bool = False, progress: cluster.ProgressBar | None = None,
              log: Callable[[str], None] | None = None) -> cluster.RunResult:
    """Run a corpus analysis's tasks and merge their partials (:func:`~flyviz.analysis.cluster.run_tree`).

    Parameters
    ----------
    task
        The module-level task function the workers call (see the module documentation).
    items, merge
        The tasks' work items (item ``i`` is leaf ``i`` of the merge tree) and the merge.
    spec, dataset, identity, settings, extra
        What the workers are given: the model's spec and dataset folder, its
        weights' digest (``identity["weights_sha256"]``), the settings dataclass
        (as a ``dict``) and any further small arguments.
    in_process
        ``in_process(item)`` computes an item in this process on the client's
        model (``workers=0``); ``None``: ``task`` itself, on ``model``.
    release
        Closes the engines this process kept between tasks (after an
        in-process run, however it ends).
    model
        The model the client loaded from ``spec``: ``task`` run in this process
        (``workers=0``, no ``in_process``) uses it instead of loading ``spec`` again.
        ``None``: such tasks load ``spec`` themselves.
    workers, scheduler, store, resume, progress, log
        As for :func:`~flyviz.analysis.cluster.run_tree`.
    """
    local = in_this_process(workers, scheduler)
    function: Callable[..., cluster.Partial] = task
    args: tuple[Any, ...] = (spec, None if dataset is None else str(dataset),
                             identity["weights_sha256"], asdict(settings), *extra)
    if local and in_process is not None:
        function, args = in_process, ()
    lent: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if local and model is not None and spec is not None:
        # The tasks run here: the model the client holds, not a second load of the spec.
        lent = cluster.client_model(spec, None if dataset is None else str(dataset), model)
    try:
        with lent:
            return cluster.run_tree(function, args, items, merge, workers=workers,
                                    scheduler=scheduler, store=store, resume=resume,
                                    progress=progress, log=log)
    finally:
        if local and release is not None:
            release()


def model_key(identity: dict[str, Any]) -> dict[str, str]:
    """The model's part of a ``--resume`` key: its weight and graph digests."""
    return {"weights_sha256": identity["weights_sha256"],
            "graph_sha256": identity["graph_sha256"]}


def model_info(identity: dict[str, Any], settings: Any) -> dict[str, Any]:
    """The result metadata's ``model`` (its identity, less the machine's dataset folder),
    ``settings`` (those the results depend on) and ``created``."""
    return {"model": {k: v for k, v in identity.items() if k != "dataset"},
            "settings": settings.run_key(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def groups_info(by: str | Path) -> dict[str, Any]:
    """The result metadata's ``by`` (a label kind, or ``"file"``) and ``groups_file``."""
    from flyviz.analysis.sweep.groups import BY_LABELS

    if str(by) in BY_LABELS:
        return {"by": str(by)}
    return {"by": "file", **({"groups_file": Path(by).name} if by else {})}


def text_info(corpus: Any, positions: int) -> dict[str, Any]:
    """The result metadata's ``text``: the corpus read, its digest and the positions counted."""
    return {"tokens": corpus.n_tokens, "positions": positions, "windows": corpus.n_windows,
            "documents": corpus.n_documents, "context": corpus.context,
            "sources": [Path(s).name for s in corpus.sources[:1000]], "sha256": corpus.digest()}


__all__ = ["groups_info", "in_this_process", "model_info", "model_key", "run_tasks",
           "text_info"]
