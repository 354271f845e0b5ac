"""Causal tracing: where, and when, a prompt keeps what makes the answer.

``flyviz patch`` runs the *corrupted* prompt again and again, each time with one
group of neurons (a superclass, a cell type, a side, or a named query)
restored, at one position (or a window of positions), to the state it had in
the *clean* run, and records how much of the clean answer comes back
(ROME's causal trace, TransformerLens's activation patching; see
``explain.md`` section 3). Every (position, group) is a *cell*.

What is measured
----------------
At the corrupted prompt's last position (the one that predicts the next
token), with ``z`` the logits and ``q = softmax(z)`` in float64::

    p_answer   = q[answer]
    logit_diff = z[answer] - z[versus]       versus: --versus, or the corrupted run's top token

and each normalised as ``(m - m_corrupt) / (m_clean - m_corrupt)``: 0 is the
corrupted run, 1 the clean one (NaN when the two runs agree on ``m``). The
clean and corrupted references are single-stream runs of the untouched model.
A cell's run equals ``flyviz generate --prompt CORRUPT --patch
'QUERY@P:P+W' --source-prompt CLEAN`` (``tests/test_analysis_patch.py`` checks
it to 1e-6).

How it runs
-----------
Each cell is one column of the batched engine
(:class:`~flyviz.model.batch.BatchEngine`), all columns reading the corrupted
prompt; :class:`~flyviz.model.batch.PatchHooks` copies the clean run's states
into each column's group after the steps of its window. A *task* is one block
of ``--batch`` cells; the tasks run on Dask through the lesion map's plumbing
(:func:`flyviz.analysis.cluster.run_tree`: ``--workers``, ``--scheduler``,
``--resume``), and their partials are merged by the union of their cells,
sorted: exact and order-free, so 1 worker, 2 workers and a resumed run give
the same bits.

Result file
-----------
CSV or Parquet (by the extension of ``--out``), one row per cell, positions
first, with the columns of :data:`COLUMNS`; the prompts, the answer, the
references, the settings and the model's identity are one JSON object: the CSV's
first line ``# flyviz-patch {...}`` (``pandas.read_csv(path, skiprows=1)``), or
the Parquet schema metadata key ``flyviz_patch``. :class:`CausalTrace` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster, runs
from flyviz.analysis.causal_file import (COLUMNS, FORMAT, FORMAT_VERSION, METRICS, CausalTrace,
                                         TraceCell, TraceError, open_causal_trace, write_trace)
from flyviz.analysis.sweep.groups import Group, groups_digest
from flyviz.analysis.sweep.tasks import cached_engine, release_engines
from flyviz.analysis.table_file import check_output
from flyviz.arguments import shown
from flyviz.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

@dataclass(frozen=True)
class TraceSettings(cluster.RunSettings):
    """How a causal trace runs.

    Attributes
    ----------
    streams
        Cells per pass of the batched engine (``--batch``).
    window
        Positions restored per cell, from its position on (``--window``).
    kernel, threads
        Sparse kernel and threads per task (the same results for every choice).
    """

    streams: int = 64
    window: int = 1
    kernel: str | None = None
    threads: int = 1

    def validate(self) -> "TraceSettings":
        """Raise :class:`InputError` for out-of-range values; return ``self``."""
        self.check_ranges((("--batch", self.streams, 1, 4096), ("--window", self.window, 1, 1 << 20),
                           ("threads", self.threads, 1, 64)))
        return self


# ----------------------------------------------------------------- the prompts
@dataclass(frozen=True)
class TracePrompts:
    """The two prompts, tokenized (BOS first), and how their positions line up.

    Attributes
    ----------
    clean, corrupt
        Token ids of the clean and the corrupted prompt.
    answer
        The answer token's id; ``versus`` the token it is measured against (by
        default, -1 until :func:`references` sets it, the corrupted run's most
        likely token).
    shift
        Clean position = corrupted position + shift (0 unless aligned from the end).
    """

    clean: tuple[int, ...]
    corrupt: tuple[int, ...]
    answer: int
    shift: int = 0
    versus: int = -1

    @property
    def covered(self) -> tuple[int, int]:
        """The corrupted positions ``[lo, hi)`` that have a clean counterpart."""
        return max(0, -self.shift), min(len(self.corrupt), len(self.clean) - self.shift)


def _one_token(tokenizer: Any, text: str, option: str) -> int:
    if not isinstance(text, str):
        raise InputError(f"{option} must be one token's text (a str), e.g. {option} ' She', "
                         f"not {shown(text)}")
    if text == "":
        raise InputError(f"{option} is empty: give one token, e.g. {option} ' She'")
    ids = tokenizer.encode(text, what=option)
    if len(ids) != 1:
        pieces = " + ".join(repr(tokenizer.token_text(i)) for i in ids) or "nothing"
        raise InputError(f"{option} {text!r} is {len(ids)} tokens ({pieces}), not one; "
                         "give a single token (mind the leading space, e.g. ' She')")
    return int(ids[0])


def encode_prompts(tokenizer: Any, bos: int, clean: str, corrupt: str, answer: str,
                   align: str = "start", versus: str | None = None) -> TracePrompts:
    """Tokenize and check the prompts and the answer.

    Raises
    ------
    InputError
        One line: an empty prompt, prompts of different lengths aligned from the
        start, an answer that is not exactly one token.
    """
    from flyviz.model.patching import ALIGNS

    if align not in ALIGNS:
        raise InputError(f"--align {align!r}: expected one of {', '.join(ALIGNS)}")
    for name, text in (("--clean", clean), ("--corrupt", corrupt)):
        if not isinstance(text, str):
            raise InputError(f"{name} must be the prompt's text (a str), not {shown(text)}")
        if not text.strip():
            raise InputError(f"{name} is empty: give the prompt's text")
    answer_id = _one_token(tokenizer, answer, "--answer")
    versus_id = -1 if versus is None else _one_token(tokenizer, versus, "--versus")
    if versus_id == answer_id:
        # z[answer] - z[answer] is 0 in every cell: a heatmap of NaN, not a measurement.
        raise InputError(f"--versus {versus!r} is the answer itself, so the logit difference "
                         "is 0 in every cell; give another token, or leave --versus out")
    from flyviz.model.tokenizer import start_ids

    start = tuple(start_ids(tokenizer, bos))     # no BOS for a tokenizer without one (FlyGPT)
    a = start + tuple(int(i) for i in tokenizer.encode(clean, what="--clean"))
    b = start + tuple(int(i) for i in tokenizer.encode(corrupt, what="--corrupt"))
    if a == b:
        raise InputError("--clean and --corrupt are the same tokens, so restoring the clean "
                         "run changes nothing and every cell would be NaN; give a corrupted "
                         "prompt that differs from the clean one")
    if align == "start" and len(a) != len(b):
        raise InputError(f"the clean prompt is {len(a)} tokens long and the corrupted one "
                         f"{len(b)} (BOS included); a causal trace aligns positions from the start "
                         "and needs the same length: give prompts of equal length, or --align end")
    shift = len(a) - len(b) if align == "end" else 0
    return TracePrompts(a, b, answer_id, shift, versus_id)


def parse_positions(text: str | tuple[int, int] | None, prompts: TracePrompts
                    ) -> tuple[int, int]:
    """The corrupted positions ``[lo, hi)`` of ``--positions A:B`` or a library caller's
    ``(A, B)`` (either end of the text may be left out; default: every position that has a
    clean counterpart)."""
    from flyviz.arguments import span

    lo, hi = prompts.covered
    if text is None:
        return lo, hi
    if not isinstance(text, str):
        return span("positions", text, lo, hi)
    a, colon, b = str(text).partition(":")
    try:
        start = int(a) if a.strip() else lo
        stop = int(b) if b.strip() else hi
    except ValueError:
        start = stop = -1
    if not colon or start < 0 or stop < 0:
        raise InputError(f"--positions {text!r} must look like A:B (positions, 0 is the "
                         "first token read, BOS where the model reads one; half-open), e.g. --positions 5:13")
    if not lo <= start < stop <= hi:
        raise InputError(f"--positions {text!r}: the prompts have positions {lo}..{hi - 1} to "
                         "patch (0 is the first token read); keep A < B inside them")
    return start, stop


# ----------------------------------------------------------------------- tasks
@dataclass
class TraceTask:
    """One block of cells: a leaf of the merge tree.

    Attributes
    ----------
    index
        The task's number (its leaf).
    cells
        Global cell numbers (``position_index * groups + group_index``).
    neurons, offsets
        The cells' groups' neurons back to back; cell ``i`` restores
        ``neurons[offsets[i]:offsets[i + 1]]``.
    windows
        ``(cells, 2)`` corrupted positions ``[lo, hi)`` each cell restores.
    steps
        Positions the corrupted prompt is run for.
    width
        Columns of the engine the task runs on: the plan's widest task, so that
        a narrower last task reuses the engine its worker laid out for the
        others (laying out a full-size graph costs about a second of CPU per
        width) and leaves the spare columns untouched; 0: one per cell.
    """

    index: int
    cells: np.ndarray
    neurons: np.ndarray
    offsets: np.ndarray
    windows: np.ndarray
    steps: int
    width: int = 0

    @property
    def n_tokens(self) -> int:
        """The work: cells x steps (what progress counts)."""
        return int(self.cells.size) * self.steps

    def groups(self) -> list[np.ndarray]:
        """Each cell's neurons."""
        return [self.neurons[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:])]


def plan_tasks(groups: list[Group], positions: tuple[int, int], prompts: TracePrompts,
               settings: TraceSettings) -> list[TraceTask]:
    """The tasks: cells in order (positions, then groups), ``settings.streams`` per task,
    each run on an engine as wide as the widest."""
    lo, hi = positions
    cover_hi = prompts.covered[1]
    count = (hi - lo) * len(groups)
    width = min(settings.streams, count)
    tasks = []
    for index, start in enumerate(range(0, count, settings.streams)):
        cells = np.arange(start, min(count, start + settings.streams), dtype=np.int64)
        members = [groups[int(c) % len(groups)] for c in cells]
        first = lo + cells // len(groups)
        windows = np.stack([first, np.minimum(first + settings.window, cover_hi)], axis=1)
        tasks.append(TraceTask(
            index=index, cells=cells,
            neurons=np.concatenate([g.neurons for g in members]).astype(np.int32),
            offsets=np.concatenate([[0], np.cumsum([g.size for g in members])]).astype(np.int64),
            windows=windows.astype(np.int64), steps=len(prompts.corrupt), width=width))
    return tasks


_CLEAN: dict[tuple[int, tuple[int, ...], str | None], tuple[Any, np.ndarray]] = {}


def _clean_states(ckpt: "Checkpoint", ids: tuple[int, ...], kernel: str | None) -> np.ndarray:
    """The clean run's states, once per worker process, model and prompt."""
    from flyviz.model.patching import source_states

    key = (id(ckpt), tuple(ids), kernel)
    entry = _CLEAN.get(key)
    if entry is not None and entry[0] is ckpt:
        return entry[1]
    while len(_CLEAN) >= 4:
        _CLEAN.pop(next(iter(_CLEAN)))
    states = source_states(ckpt, ids, kernel=kernel, threads=1)
    _CLEAN[key] = (ckpt, states)
    return states


def _measures(logits: np.ndarray, answer: int, versus: int) -> tuple[np.ndarray, np.ndarray]:
    """``p(answer)`` and ``z[answer] - z[versus]`` of each row of logits, float64."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max(axis=1, keepdims=True)
    log_total = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    return np.exp(z[:, answer] - log_total), z[:, answer] - z[:, versus]


def trace_partial(ckpt: "Checkpoint", settings: TraceSettings, prompts: TracePrompts,
                  task: TraceTask) -> cluster.Partial:
    """Run one task: its cells, one per column, over the corrupted prompt."""
    from flyviz.model.batch import PatchHooks
    from flyviz.model.engine import SINGLE_THREADED_BLAS

    groups = task.groups()
    k = len(groups)
    source = _clean_states(ckpt, prompts.clean, settings.kernel)
    # cached_engine reads only the kernel and threads of the settings (hence the ignore).
    engine = cached_engine(ckpt, max(k, task.width), settings)  # type: ignore[arg-type]
    hooks = PatchHooks(ckpt.config.neurons, engine.columns, source, groups, np.arange(k),
                       task.windows, prompts.shift)
    engine.hooks = hooks
    logits = None
    try:
        with SINGLE_THREADED_BLAS:
            engine.reset()
            hooks.rewind()
            last = len(prompts.corrupt) - 1
            for p, token in enumerate(prompts.corrupt):
                logits = engine.step(token, logits=p == last)
                cluster.report_progress(k)
    finally:
        engine.hooks = None
    assert logits is not None
    p_answer, logit_diff = _measures(logits[:k], prompts.answer, prompts.versus)
    return {"cell": np.asarray(task.cells, dtype=np.int64), "p_answer": p_answer,
            "logit_diff": logit_diff}


def trace_task(spec: str, dataset: str | None, weights_sha256: str, settings: dict[str, Any],
               prompts: dict[str, Any], task: TraceTask) -> cluster.Partial:
    """One task on a worker: the model comes from ``spec`` (loaded once per process) and
    must have the client's weights."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    trace = TracePrompts(tuple(prompts["clean"]), tuple(prompts["corrupt"]), prompts["answer"],
                         prompts["shift"], prompts["versus"])
    return trace_partial(ckpt, TraceSettings(**settings), trace, task)


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """The union of two partials' cells, sorted: exact and the same for either order."""
    out = {name: np.concatenate([a[name], b[name]]) for name in ("cell", "p_answer", "logit_diff")}
    order = np.argsort(out["cell"], kind="stable")
    return {name: value[order] for name, value in out.items()}


# ------------------------------------------------------------------ references
@dataclass(frozen=True)
class References:
    """The untouched clean and corrupted runs' measures (single-stream engine)."""

    p_clean: float
    p_corrupt: float
    logit_diff_clean: float
    logit_diff_corrupt: float
    versus: int

    def normalised(self, p: np.ndarray, logit_diff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(m - m_corrupt) / (m_clean - m_corrupt)`` of both measures (NaN where the
        references agree)."""
        def scale(m: np.ndarray, clean: float, corrupt: float) -> np.ndarray:
            span = clean - corrupt
            if span == 0.0:
                return np.full(np.shape(m), np.nan)
            return (np.asarray(m, dtype=np.float64) - corrupt) / span
        return (scale(p, self.p_clean, self.p_corrupt),
                scale(logit_diff, self.logit_diff_clean, self.logit_diff_corrupt))


def references(ckpt: "Checkpoint", prompts: TracePrompts, kernel: str | None = None
               ) -> tuple[References, TracePrompts]:
    """The references, and the prompts with ``versus`` set (when not given: the corrupted
    run's top token)."""
    from dataclasses import replace

    from flyviz.model.engine import Engine

    finals = []
    for ids in (prompts.clean, prompts.corrupt):
        engine = Engine(ckpt, kernel=kernel, overlap=False)
        try:
            engine.reset()
            for token in ids:
                logits = engine.step(token)
            finals.append(np.array(logits, dtype=np.float32))
        finally:
            engine.close()
    versus = int(np.argmax(finals[1])) if prompts.versus < 0 else prompts.versus
    if versus == prompts.answer:
        raise InputError("the corrupted prompt's most likely next token is the answer itself, "
                         "so the logit difference against it is 0 in every cell; give the "
                         "token to measure it against, e.g. --versus ' He'")
    p, d = _measures(np.stack(finals), prompts.answer, versus)
    refs = References(float(p[0]), float(p[1]), float(d[0]), float(d[1]), versus)
    if refs.p_clean == refs.p_corrupt and refs.logit_diff_clean == refs.logit_diff_corrupt:
        # Normalised by clean - corrupt = 0: every cell would be NaN.
        raise InputError("the clean and the corrupted prompt give the answer the same "
                         "probability and logits, so there is nothing to restore; give a "
                         "corrupted prompt that changes the answer")
    return refs, replace(prompts, versus=versus)


# --------------------------------------------------------------------- results
@dataclass
class TraceRun:
    """What :func:`run_causal_trace` did."""

    path: Path
    trace: "CausalTrace"
    tasks: int
    seconds: float
    workers: int
    resumed_tasks: int
    compute_seconds: float = 0.0


def _rows(partial: cluster.Partial, groups: list[Group], positions: tuple[int, int],
          refs: References, labels: list[str], settings: TraceSettings,
          cover_hi: int) -> list[TraceCell]:
    count = (positions[1] - positions[0]) * len(groups)
    if not np.array_equal(partial["cell"], np.arange(count)):
        raise RuntimeError("the merged causal trace does not hold every cell once")
    p_norm, d_norm = refs.normalised(partial["p_answer"], partial["logit_diff"])
    rows = []
    for cell in range(count):
        position = positions[0] + cell // len(groups)
        group = groups[cell % len(groups)]
        rows.append(TraceCell(
            position=position, token=labels[position], group=group.name, query=group.query,
            neurons=group.size, window=min(settings.window, cover_hi - position),
            p_answer=float(partial["p_answer"][cell]),
            logit_diff=float(partial["logit_diff"][cell]),
            p_normalised=float(p_norm[cell]), logit_diff_normalised=float(d_norm[cell])))
    return rows


def _store_key(identity: dict[str, Any], prompts: TracePrompts, groups: list[Group],
               positions: tuple[int, int], settings: TraceSettings, tasks: int) -> dict[str, Any]:
    # versus too: a saved cell holds its logit difference against it, so cells of another
    # --versus cannot be resumed into this table.
    return {"format": FORMAT, "model": runs.model_key(identity),
            "prompts": {"clean": list(prompts.clean), "corrupt": list(prompts.corrupt),
                        "answer": prompts.answer, "shift": prompts.shift,
                        "versus": prompts.versus},
            "groups": groups_digest(groups), "positions": list(positions),
            "settings": settings.run_key(), "tasks": tasks}


def _release() -> None:
    """Close what an in-process trace kept: the engines and the clean runs' states."""
    release_engines()
    _CLEAN.clear()


def run_causal_trace(spec: str, ckpt: "Checkpoint", clean: str, corrupt: str, answer: str,
                     groups: list[Group], out: str | Path,
                     settings: TraceSettings = TraceSettings(), *,
                     positions: str | tuple[int, int] | None = None, align: str = "start",
                     versus: str | None = None, by: str = "", dataset: str | Path | None = None,
                     workers: int | None = None, scheduler: str | None = None,
                     resume: bool = False, progress: cluster.ProgressBar | None = None,
                     log: Callable[[str], None] | None = None) -> TraceRun:
    """Trace ``groups`` of ``ckpt`` (loaded from ``spec``) between two prompts; write ``out``.

    Parameters
    ----------
    spec, dataset
        How workers load the model (each checks that its weights are ``ckpt``'s).
    ckpt
        The same model, loaded here.
    clean, corrupt, answer
        The prompts and the answer token's text (see :func:`encode_prompts`).
    groups
        The groups (:func:`flyviz.analysis.sweep.sweep_groups`); none may be empty.
    out
        ``.csv`` or ``.parquet`` (replaced if it exists).
    settings
        See :class:`TraceSettings`.
    positions
        ``"A:B"`` or ``(A, B)``: the corrupted positions to restore at (default all).
    align
        ``"start"`` (same lengths) or ``"end"``.
    versus
        The token the logit difference is taken against (one token); default
        the corrupted run's most likely token.
    by
        What the groups are, stored with the result.
    workers, scheduler, resume, progress
        As for :func:`flyviz.analysis.sweep.run_sweep`; ``progress`` counts
        cell-steps.
    log
        ``log(line)`` for status lines.
    """
    from flyviz.model.identity import model_identity
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.render.overlay import display_token

    settings = settings.validate()
    if not groups:
        raise InputError("there are no groups to patch")
    empty = [g.name for g in groups if g.size == 0]
    if empty:
        raise InputError(f"the group {empty[0]!r} holds no neuron; every group needs at least one")
    out = Path(out).expanduser()
    kind = check_output(out)
    tokenizer = tokenizer_for(ckpt)
    prompts = encode_prompts(tokenizer, ckpt.config.bos_token_id, clean, corrupt, answer, align,
                             versus)
    span = parse_positions(positions, prompts)
    refs, prompts = references(ckpt, prompts, settings.kernel)
    identity = model_identity(ckpt)
    tasks = plan_tasks(groups, span, prompts, settings)
    store = cluster.open_store(out, _store_key(identity, prompts, groups, span, settings,
                                               len(tasks)), resume)
    if log is not None:
        log(f"{len(groups):,} groups x {span[1] - span[0]} positions = "
            f"{len(groups) * (span[1] - span[0]):,} cells in {len(tasks):,} pass(es) of up to "
            f"{settings.streams}; p(answer) clean {refs.p_clean:.4f}, corrupted {refs.p_corrupt:.4f}")
    shipped = {"clean": list(prompts.clean), "corrupt": list(prompts.corrupt),
               "answer": prompts.answer, "shift": prompts.shift, "versus": prompts.versus}
    result = runs.run_tasks(trace_task, tasks, merge_partials, spec=spec, dataset=dataset,
                            identity=identity, settings=settings, extra=(shipped,),
                            # In this process the model is at hand: nothing loads it from spec.
                            in_process=lambda task: trace_partial(ckpt, settings, prompts, task),
                            release=_release, workers=workers, scheduler=scheduler,
                            store=store, resume=resume, progress=progress)
    from flyviz.model.tokenizer import start_ids

    bos_first = bool(start_ids(tokenizer, ckpt.config.bos_token_id))
    labels = ["<s>" if p == 0 and bos_first else display_token(tokenizer.token_text(i))
              for p, i in enumerate(prompts.corrupt)]
    rows = _rows(result.partial, groups, span, refs, labels, settings, prompts.covered[1])
    info = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        **runs.groups_info(by),
        "groups": [g.name for g in groups], "positions": list(span),
        "clean": clean, "corrupt": corrupt, "answer": answer, "align": align,
        "clean_ids": list(prompts.clean), "corrupt_ids": list(prompts.corrupt),
        "answer_id": prompts.answer, "versus_id": refs.versus,
        "versus": tokenizer.token_text(refs.versus), "shift": prompts.shift,
        "tokens": labels,
        "references": asdict(refs),
        **runs.model_info(identity, settings),
    }
    write_trace(out, rows, info, kind)
    store.remove()
    return TraceRun(path=out, trace=CausalTrace.from_rows(rows, info, out), tasks=len(tasks),
                    seconds=result.seconds, workers=result.workers,
                    resumed_tasks=result.resumed_chunks, compute_seconds=result.compute_seconds)


__all__ = ["COLUMNS", "CausalTrace", "METRICS", "References", "TraceCell", "TraceError",
           "TracePrompts", "TraceRun", "TraceSettings", "TraceTask", "encode_prompts",
           "merge_partials", "open_causal_trace", "parse_positions", "plan_tasks",
           "references", "run_causal_trace", "trace_partial", "write_trace"]
