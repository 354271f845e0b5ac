"""Automatic circuits: which part of the brain carries a task, and proof by running it alone.

A task (:mod:`flyviz.analysis.circuit_tasks`) is prompts and a metric ``m``
(a logit difference at the last position, or a text's log-probability). A
*circuit* ``C`` is a set of units (neurons, all neurons of some cell types or
superclasses, or synapses) kept as they are while everything else is
ablated; its faithfulness is measured by running the model that way over the
whole task (the MIB benchmark's definition, ``circuits.md``)::

    f(C) = (m(C) - m(∅)) / (m(M) - m(∅))        M: the whole model, ∅: everything ablated

Scores (which units to keep first)
----------------------------------
One forward pass (a :class:`~flyviz.model.attribution.Tape`) and one backward
sweep (:class:`~flyviz.model.attribution.BackwardEngine`) per prompt, seeded
with the metric's cotangent at its position(s), give every step's cotangent
``v_t`` and the edge factor ``λ d_t g r m_t`` of ``explain.md`` section 1;
summed over the task's prompts and steps:

``flow``
    frozen ``s_t`` (``"decomposition"``): the node flow ``f_i = Σ_t v_t(i) x_i(t)``
    of ``flyviz trace`` and the edge flow ``Σ_t v_t(i) λ s_i g_i r_i W_ij x_j(t-1)``;
``gradient``
    the true ``sech²`` (``"gradient"``): gradient × state, ``Σ_t x_i(t) ∂m/∂x_i(t)``
    (attribution patching);
``ig``
    integrated-gradients-like: the gradient averaged over ``ig_steps`` runs
    with the token embeddings scaled by ``α = 1/m, 2/m, .., 1`` (the input
    interpolated from none to the real one), times the real run's states.

With mean ablation a unit's baseline is its mean state ``μ_i``, and the
scores use ``x_i(t) - μ_i`` in place of ``x_i(t)`` (both sums are kept, so
this is exact for any ``μ``). A group's score is the sum of its neurons'.
Units are ranked by ``|score|`` (ties by index). Text tasks seed every
counted position with the cotangent of its log-probability (the flow mode
then splits the metric's linearisation). The prompts run on Dask in
chunks (:func:`flyviz.analysis.runs.run_tasks`); the partials (float64 sums)
are merged in the fixed tree, so 1 and 2 workers give the same bits.

Faithfulness (measured, not estimated)
--------------------------------------
Every (circuit, prompt) pair is one column of a
:class:`~flyviz.model.batch.BatchEngine`; :class:`KeepOnlyHooks` holds the
ablated neurons of each column at 0 (zero) or at their mean over the task's
prompts and positions (mean) after every step, as ``Silence``/``Clamp`` do
(the readout sees the held state); with resample ablation each ablated
neuron takes its state at the same step of the next prompt's untouched run
(:class:`ResampleHooks`). Edge circuits run one engine per circuit
on the graph with only the kept synapses; with mean ablation an ablated
synapse carries ``W_ij μ_j`` (a constant added to ``W x``, :class:`EdgeMeanHooks`).
The curve starts at the empty circuit (``k = 0``, ``f = 0`` by definition)
and has ``points`` sizes log-spaced from 10 (or 1) to all ``N`` units
(``f = 1`` by definition); ``CPR`` is the area under ``f`` over the circuit
fraction ``k / N`` (trapezoids), ``CMD`` the area under ``|1 - f|``.

Faithful means close to the whole model both ways: ``|1 - f| <= tolerance``
(0.1) on the task, and on at least ``prompt_share`` (90 %) of its prompts
one by one (a task mean of 1 made of prompts at -2 and 4 explains nothing:
on a random model the task mean passes through 1 by chance). A circuit that
overshoots (``f`` of 1.69: the part does more than the whole) is not
faithful. The circuit is the smallest faithful one: the first faithful curve
point, refined by bisection on ``k`` against the point before; where the
curve jumps over the band between two points, the sizes between them are
searched first. Every step is run, never estimated from the scores. Where no
circuit below the whole brain is faithful, :attr:`CircuitResult.faithful` is
False and the result says so instead of naming one.

:func:`find_circuit` is the whole computation of one model: its headline
numbers (:meth:`CircuitResult.headline`) can be computed again on another
model (a null) from the same task and settings.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import cluster, runs
from flyviz.analysis.circuit_tasks import CircuitTask, PromptChunk, TaskPrompt, chunks
from flyviz.errors import InputError
from flyviz.model.batch import StepHooks

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.batch import BatchEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.engine import Engine

SCORES = ("flow", "gradient", "ig")
NODE_UNITS = ("neurons", "types", "superclasses")
#: What an ablated unit is held at: its mean state over the task (the default: the readout
#: keeps its statistics), 0, or its state at the same step of another prompt's untouched run.
ABLATIONS = ("mean", "zero", "resample")
#: The default tolerance: a circuit is faithful when ``|1 - f| <= TOLERANCE``.
TOLERANCE = 0.1
#: The default share of the task's prompts that must be faithful on their own too.
PROMPT_SHARE = 0.9
#: A resample ablation keeps every prompt's untouched states: refused above this many bytes.
RESAMPLE_BYTES = 2 << 30
#: The smallest circuit size of the curve (or 1 for fewer units).
FIRST_SIZE = 10
#: A text position's log-probability is floored here (as the lesion map's cross-entropy).
LOG_FLOOR = math.log(1e-30)
#: Edges listed in a circuit's JSON at most (the strongest first).
MAX_LISTED_EDGES = 100_000


@dataclass(frozen=True)
class CircuitSettings(cluster.RunSettings):
    """How a circuit is found.

    Attributes
    ----------
    nodes
        ``"neurons"``, ``"types"`` (cell types) or ``"superclasses"``: the units kept.
    edges
        Keep synapses instead (the top ``k`` edges; every neuron stays).
    ablation
        ``"mean"`` (default), ``"zero"`` or ``"resample"``: what an ablated
        unit's state is held at (its mean over the task's prompts and
        positions; 0; its state at the same step of the untouched run of the
        next prompt of the task, cyclically).
    tolerance
        A circuit is faithful when ``|1 - f| <= tolerance`` on the task (in
        ``(0, 1)``): closeness to the whole model both ways, so a circuit
        that overshoots (``f`` of 1.69) is no more faithful than one at 0.31.
    prompt_share
        And when at least this share of the prompts is within the tolerance
        on its own (``(0, 1]``): a task mean of 1 made of prompts at -2 and
        4 is no circuit.
    score
        ``"flow"``, ``"gradient"`` or ``"ig"`` (see the module documentation).
    points
        Log-spaced circuit sizes of the curve (at least 2).
    ig_steps
        Scaled inputs averaged by the ``ig`` score.
    min_tasks
        Chunks of prompts the scores are cut into (at most one per prompt).
    streams
        Columns of the batched engine that measures faithfulness.
    refine
        Most bisection steps between two curve points.
    kernel, threads
        Sparse kernel and threads per task (results do not depend on them).
    """

    nodes: str = "neurons"
    edges: bool = False
    ablation: str = "mean"
    tolerance: float = TOLERANCE
    prompt_share: float = PROMPT_SHARE
    score: str = "flow"
    points: int = 12
    ig_steps: int = 5
    min_tasks: int = 16
    streams: int = 64
    refine: int = 32
    kernel: str | None = None
    threads: int = 1

    def validate(self) -> "CircuitSettings":
        """Raise :class:`InputError` for a value out of range; return ``self``."""
        for name, value, choices in (("--nodes", self.nodes, NODE_UNITS),
                                     ("--ablation", self.ablation, ABLATIONS),
                                     ("--score", self.score, SCORES)):
            if value not in choices:
                raise InputError(f"{name} {value!r} is not one of {', '.join(choices)}")
        tolerance = float(self.tolerance)
        if not (math.isfinite(tolerance) and 0.0 < tolerance < 1.0):
            raise InputError(f"--tolerance {self.tolerance} must lie in (0, 1): a circuit is "
                             "faithful when |1 - f| is at most this (default 0.1)")
        share = float(self.prompt_share)
        if not (math.isfinite(share) and 0.0 < share <= 1.0):
            raise InputError(f"--prompt-share {self.prompt_share} must lie in (0, 1]: the share "
                             "of the prompts that must be faithful on their own (default 0.9)")
        if self.edges and self.ablation == "resample":
            raise InputError("--ablation resample holds neurons at another prompt's states; "
                             "with --edges use mean or zero")
        if self.edges and self.nodes != "neurons":
            raise InputError("--edges keeps synapses: leave out --nodes (or give --nodes "
                             "neurons)")
        self.check_ranges((("--points", self.points, 2, 1000),
                           ("IG steps", self.ig_steps, 1, 100),
                           ("min tasks", self.min_tasks, 1, 1 << 20),
                           ("streams", self.streams, 1, 1024),
                           ("refine steps", self.refine, 0, 64),
                           ("threads", self.threads, 1, 64)))
        return self

    @property
    def units(self) -> str:
        """What a circuit is made of: ``"edges"`` or :attr:`nodes`."""
        return "edges" if self.edges else self.nodes


# ------------------------------------------------------------------- the engines
_local = threading.local()


def _engines(ckpt: "Checkpoint", settings: CircuitSettings
             ) -> tuple["Engine", "BackwardEngine", dict[str, Any]]:
    """A forward and a backward engine of ``ckpt``, kept for this thread's next task."""
    import os

    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.engine import Engine
    from flyviz.model.kernels import ENV_VAR

    key = (id(ckpt), settings.kernel, settings.threads)
    entry = getattr(_local, "engines", None)
    if entry is not None and entry[0] == key and entry[1] is ckpt:
        return entry[2], entry[3], entry[4]
    release_engines()
    kernel = settings.kernel or os.environ.get(ENV_VAR, "").strip().lower() or "llvm"
    engine = Engine(ckpt, settings.threads, kernel=kernel)
    backward = BackwardEngine(ckpt, threads=settings.threads, kernel=kernel)
    scratch: dict[str, Any] = {}
    _local.engines = (key, ckpt, engine, backward, scratch)
    return engine, backward, scratch


def release_engines() -> None:
    """Close the engines this thread keeps between tasks."""
    entry = getattr(_local, "engines", None)
    _local.engines = None
    if entry is not None:
        entry[3].close()
        entry[2].close()


# -------------------------------------------------------------------- one prompt
def _seeds(ckpt: "Checkpoint", tape: Any, prompt: TaskPrompt, mode: str
           ) -> tuple[dict[int, np.ndarray], float]:
    """The sweep's seeds of one prompt's metric and the metric's sum on this run."""
    from flyviz.model.explain import explained_value, logit_cotangent, readout_cotangent

    if prompt.target is not None:
        p = len(prompt.ids) - 1
        c, _ = readout_cotangent(ckpt, tape.x(p), prompt.target, prompt.versus, mode)
        return {p: c}, explained_value(tape.logits(p), prompt.target, prompt.versus)
    seeds: dict[int, np.ndarray] = {}
    total = 0.0
    for p in range(len(prompt.ids) - 1):
        z = tape.logits(p).astype(np.float64)
        z = z - z.max()
        log_p = z - math.log(float(np.exp(z).sum()))
        nxt = prompt.ids[p + 1]
        total += max(float(log_p[nxt]), LOG_FLOOR)
        weights = -np.exp(log_p)
        weights[nxt] += 1.0  # d log p(next) / d logits = one_hot - softmax
        seeds[p], _ = logit_cotangent(ckpt, tape.x(p), weights, mode)
    return seeds, total


def prompt_flows(ckpt: "Checkpoint", engine: "Engine", backward: "BackwardEngine",
                 prompt: TaskPrompt, score: str, ig_steps: int = 5
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One prompt: ``(X, V, F, metric)``.

    ``X`` ``(steps, neurons)`` float32: the untouched run's states; ``V`` float64:
    the cotangents ``v_t`` (for ``ig`` averaged over the scaled runs); ``F``
    float64: the edge factors ``λ d_t g r m_t`` (an edge flow into step ``t`` is
    ``F[t, i] W_ij X[t-1, j]``); ``metric``: the metric's sum on the real run.
    """
    from flyviz.model.attribution import DECOMPOSITION, GRADIENT, record_tape

    mode = DECOMPOSITION if score == "flow" else GRADIENT
    alphas = [1.0] if score != "ig" else [(k + 1) / ig_steps for k in range(ig_steps)]
    steps, n = len(prompt.ids), int(ckpt.config.neurons)
    V = np.zeros((steps, n))
    F = np.zeros((steps, n))
    rec_gain = backward.rec_gain.astype(np.float64)
    weight = 1.0 / len(alphas)
    original = engine.wte
    X = np.zeros((steps, n), dtype=np.float32)
    metric = 0.0
    try:
        for alpha in alphas:
            if alpha != 1.0:
                # The drive reads the engine's embeddings: scaling them scales the input.
                engine.wte = (original * np.float32(alpha)).astype(np.float32)
            else:
                engine.wte = original
            tape = record_tape(engine, prompt.ids, slopes=mode == GRADIENT, interventions=())
            seeds, value = _seeds(ckpt, tape, prompt, mode)

            def gather(t: int, v: np.ndarray, m: np.ndarray, w: np.ndarray) -> None:
                V[t] += weight * v.astype(np.float64)
                F[t] += weight * (w.astype(np.float64) * rec_gain)

            backward.sweep(tape, seeds, mode=mode, keep=False, on_step=gather)
            if alpha == 1.0:
                X = tape.states()
                metric = value
    finally:
        engine.wte = original
    return X, V, F, metric


def _edge_rows(ckpt: "Checkpoint", scratch: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each synapse's post- and pre-synaptic neuron (CSR order), kept per engine."""
    if "edge_rows" not in scratch:
        offsets = np.asarray(ckpt.w_offsets, dtype=np.int64)
        rows = np.repeat(np.arange(ckpt.config.neurons, dtype=np.int32), np.diff(offsets))
        scratch["edge_rows"] = (rows, np.asarray(ckpt.w_indices, dtype=np.intp))
    return scratch["edge_rows"]


def chunk_partial(ckpt: "Checkpoint", settings: CircuitSettings, chunk: PromptChunk,
                  engines: tuple["Engine", "BackwardEngine"] | None = None) -> cluster.Partial:
    """One task: the float64 sums of every prompt of ``chunk``.

    ``node_vx = Σ V X`` and ``node_v = Σ V`` per neuron; with edges
    ``edge_fx[e] = Σ_t F[t, post] X[t-1, pre]`` per synapse and ``edge_f = Σ F``;
    the metric's sum and its terms.
    """
    if engines is None:
        engine, backward, scratch = _engines(ckpt, settings)
    else:
        (engine, backward), scratch = engines, {}
    n = int(ckpt.config.neurons)
    out: cluster.Partial = {"node_vx": np.zeros(n), "node_v": np.zeros(n),
                            "metric": np.zeros(1), "terms": np.zeros(1, np.int64),
                            "prompts": np.zeros(1, np.int64)}
    if settings.edges:
        nnz = int(np.asarray(ckpt.w_offsets)[-1])
        out["edge_fx"] = np.zeros(nnz)
        out["edge_f"] = np.zeros(n)
        rows, cols = _edge_rows(ckpt, scratch)
    for prompt in chunk.prompts:
        X, V, F, metric = prompt_flows(ckpt, engine, backward, prompt, settings.score,
                                       settings.ig_steps)
        out["node_vx"] += np.einsum("tn,tn->n", V, X.astype(np.float64))
        out["node_v"] += V.sum(axis=0)
        if settings.edges:
            out["edge_f"] += F.sum(axis=0)
            acc = out["edge_fx"]
            for t in range(1, len(prompt.ids)):  # x_{-1} = 0: step 0 adds nothing
                acc += F[t][rows] * X[t - 1][cols].astype(np.float64)
        out["metric"][0] += metric
        out["terms"][0] += prompt.terms
        out["prompts"][0] += 1
        cluster.report_progress(prompt.n_tokens)
    return out


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """Two partials added (commutative; the fixed tree fixes the order)."""
    return {name: a[name] + b[name] for name in a}


def circuit_task(spec: str, dataset: str | None, weights_sha256: str,
                 settings: dict[str, Any], chunk: PromptChunk) -> cluster.Partial:
    """One task on a Dask worker (the model loaded from ``spec`` once per process)."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    return chunk_partial(ckpt, CircuitSettings(**settings), chunk)


class _InProcess:
    """The task function of a run in this process: the client's own model."""

    def __init__(self, ckpt: "Checkpoint", settings: CircuitSettings,
                 engines: tuple["Engine", "BackwardEngine"] | None) -> None:
        self.ckpt, self.settings, self.engines = ckpt, settings, engines

    def __call__(self, chunk: PromptChunk) -> cluster.Partial:
        return chunk_partial(self.ckpt, self.settings, chunk, self.engines)


# ------------------------------------------------------------------- the units
def neuron_labels(ckpt: "Checkpoint", kind: str) -> list[str]:
    """Every neuron's ``cell_type`` or ``superclass`` (``"unlabelled"`` where missing)."""
    anatomy = ckpt.anatomy
    values = None if anatomy is None else getattr(anatomy, kind)
    n = int(ckpt.config.neurons)
    if values is None:
        return ["unlabelled"] * n
    return [str(v) if str(v).strip() else "unlabelled" for v in values]


@dataclass(frozen=True)
class Units:
    """What a circuit is made of, and how a set of units becomes neurons or synapses.

    Attributes
    ----------
    kind
        ``"neurons"``, ``"types"``, ``"superclasses"`` or ``"edges"``.
    names
        A name per unit (groups: the label; neurons: ``"#i"``; edges: ``"pre->post"``
        made on demand, so empty here).
    members
        For groups, ``(neurons,)`` int: each neuron's group.
    count
        ``N``, the number of units.
    """

    kind: str
    names: tuple[str, ...]
    members: np.ndarray | None
    count: int


def make_units(ckpt: "Checkpoint", kind: str) -> Units:
    """The units of ``kind`` for ``ckpt``."""
    n = int(ckpt.config.neurons)
    if kind == "edges":
        return Units(kind, (), None, int(np.asarray(ckpt.w_offsets)[-1]))
    if kind == "neurons":
        return Units(kind, (), None, n)
    labels = neuron_labels(ckpt, "cell_type" if kind == "types" else "superclass")
    names, inverse = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    return Units(kind, tuple(str(s) for s in names), inverse.astype(np.int64), int(names.size))


def unit_scores(ckpt: "Checkpoint", units: Units, partial: cluster.Partial,
                baseline: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``(unit scores, neuron scores)`` float64 from the merged sums; ``baseline`` is the
    ablated state ``μ`` (``None``: zero)."""
    neuron = np.array(partial["node_vx"], dtype=np.float64)
    if baseline is not None:
        neuron -= baseline.astype(np.float64) * partial["node_v"]
    if units.kind == "neurons":
        return neuron, neuron
    if units.kind == "edges":
        rows = np.repeat(np.arange(ckpt.config.neurons), np.diff(np.asarray(ckpt.w_offsets)))
        edge = np.array(partial["edge_fx"], dtype=np.float64)
        if baseline is not None:
            cols = np.asarray(ckpt.w_indices, dtype=np.intp)
            edge -= baseline.astype(np.float64)[cols] * partial["edge_f"][rows]
        edge *= np.asarray(ckpt.w_values, dtype=np.float64)
        return edge, neuron
    assert units.members is not None
    return np.bincount(units.members, weights=neuron, minlength=units.count), neuron


def ranking(scores: np.ndarray) -> np.ndarray:
    """Units by ``|score|``, largest first, ties by index (int64)."""
    return np.argsort(-np.abs(scores), kind="stable").astype(np.int64)


def curve_sizes(count: int, points: int) -> list[int]:
    """``points`` circuit sizes log-spaced from :data:`FIRST_SIZE` (1 for fewer units) to
    ``count``, all distinct, ``count`` included (fewer where there are fewer sizes)."""
    first = FIRST_SIZE if count > FIRST_SIZE else 1
    wanted = min(int(points), count - first + 1)
    sizes = set(int(round(v)) for v in np.geomspace(first, count, wanted))
    sizes.update((first, count))
    # Rounding can merge small sizes: fill the widest gaps (in log) until there are enough.
    while len(sizes) < wanted:
        ordered = sorted(sizes)
        gaps = [(math.log(b) - math.log(a), a, b) for a, b in zip(ordered, ordered[1:])
                if b - a > 1]
        _, a, b = max(gaps)
        sizes.add(int(round(math.sqrt(a * b))) if a < round(math.sqrt(a * b)) < b
                  else (a + b) // 2)
    return sorted(sizes)


def area(fractions: Sequence[float], values: Sequence[float]) -> float:
    """The trapezoid rule's area under ``values`` over ``fractions``."""
    x = np.asarray(fractions, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2.0))


# ---------------------------------------------------------------- running circuits
class KeepOnlyHooks(StepHooks):
    """Per column, only the kept neurons run; every other one is held at its baseline.

    After every step ``x = keep * x + (1 - keep) * baseline`` column by column:
    the batched form of a ``Silence`` of every ablated neuron (baseline 0) or a
    ``Clamp`` of each to its own value (baseline ``μ``), applied where those are
    (after the update, before the readout).

    Parameters
    ----------
    keep
        ``(neurons, columns)`` float32 of 0 and 1.
    fill
        ``(neurons, columns)`` float32 ``(1 - keep) * baseline``, or ``None`` for 0.
    """

    def __init__(self, keep: np.ndarray, fill: np.ndarray | None = None) -> None:
        self.keep = keep
        self.fill = fill

    def after_update(self, x: np.ndarray) -> None:
        x *= self.keep
        if self.fill is not None:
            x += self.fill


class ResampleHooks(StepHooks):
    """Per column, only the kept neurons run; every other one takes, at each step, its
    state at the same step of another prompt's untouched run (resample ablation).

    Parameters
    ----------
    keep
        ``(neurons, columns)`` float32 of 0 and 1.
    sources
        One ``(steps, neurons)`` float32 array per column: the untouched states
        the column's ablated neurons read (past its last step, its last state).
    """

    def __init__(self, keep: np.ndarray, sources: Sequence[np.ndarray]) -> None:
        self.keep = keep
        self.sources = list(sources)
        self.steps = 0
        self._fill = np.zeros_like(keep)

    def after_update(self, x: np.ndarray) -> None:
        for column, source in enumerate(self.sources):
            self._fill[:, column] = source[min(self.steps, source.shape[0] - 1)]
        self._fill *= 1.0 - self.keep
        x *= self.keep
        x += self._fill
        self.steps += 1


class EdgeMeanHooks(StepHooks):
    """Every ablated synapse carries ``W_ij μ_j``: the constant ``W_ablated @ μ`` is added to
    ``W_kept @ x`` at every step (the graph of the engine holds only the kept synapses)."""

    def __init__(self, constant: np.ndarray) -> None:
        self.constant = np.ascontiguousarray(constant, dtype=np.float32)[:, None]

    def product_output(self, recurrent: np.ndarray) -> None:
        recurrent += self.constant


@dataclass
class _Job:
    prompt: int
    circuit: int


def _run_jobs(engine: "BatchEngine", task: CircuitTask, jobs: list[_Job],
              hooks_for: Callable[[list[_Job]], StepHooks | None], sums: np.ndarray,
              states: np.ndarray | None = None,
              tick: Callable[[], None] | None = None,
              record: dict[int, list[np.ndarray]] | None = None) -> None:
    """Run ``jobs`` (one column each) in batches of the engine's streams, adding each
    (circuit, prompt)'s metric sum into ``sums[circuit, prompt]`` (and every counted
    step's state into ``states``; each job's states, step by step, to
    ``record[prompt]``); ``tick()`` after each batch (it may raise to stop)."""
    from flyviz.model.explain import explained_value

    width = engine.streams
    pad = engine.config.pad_token_id
    # Longest prompts first, so that a batch holds prompts of about one length.
    jobs = sorted(jobs, key=lambda j: (-task.prompts[j.prompt].n_tokens, j.prompt, j.circuit))
    for start in range(0, len(jobs), width):
        batch = jobs[start:start + width]
        prompts = [task.prompts[j.prompt] for j in batch]
        engine.hooks = hooks_for(batch)
        engine.reset()
        length = max(p.n_tokens for p in prompts)
        tokens = np.full(width, pad, dtype=np.int64)
        for s in range(length):
            for c, p in enumerate(prompts):
                tokens[c] = p.ids[s] if s < p.n_tokens else pad
            wanted = any((p.target is not None and s == p.n_tokens - 1)
                         or (p.target is None and s < p.n_tokens - 1) for p in prompts)
            logits = engine.step(tokens, logits=wanted)
            if states is not None:
                live = [c for c, p in enumerate(prompts) if s < p.n_tokens]
                states += engine.state[:, live].sum(axis=1, dtype=np.float64)
            if record is not None:
                for c, (job, p) in enumerate(zip(batch, prompts)):
                    if s < p.n_tokens:
                        record.setdefault(job.prompt, []).append(engine.state[:, c].copy())
            if logits is None:
                continue
            for c, (job, p) in enumerate(zip(batch, prompts)):
                if p.target is not None:
                    if s == p.n_tokens - 1:
                        sums[job.circuit, job.prompt] += explained_value(logits[c], p.target,
                                                                         p.versus)
                elif s < p.n_tokens - 1:
                    z = logits[c].astype(np.float64)
                    z -= z.max()
                    value = z[p.ids[s + 1]] - math.log(float(np.exp(z).sum()))
                    sums[job.circuit, job.prompt] += max(float(value), LOG_FLOOR)
        if tick is not None:
            tick()
    engine.hooks = None


class Runner:
    """Measures the task's mean metric with circuits kept (in this process, batched).

    Parameters
    ----------
    ckpt
        The model.
    task
        The prompts and the metric.
    settings
        The units, the ablation, the engine's streams and kernel.
    units
        :func:`make_units` of the settings' units.
    """

    def __init__(self, ckpt: "Checkpoint", task: CircuitTask, settings: CircuitSettings,
                 units: Units) -> None:
        self.ckpt, self.task, self.settings, self.units = ckpt, task, settings, units
        self.neurons = int(ckpt.config.neurons)
        self.order: np.ndarray | None = None
        self.baseline: np.ndarray | None = None  # μ (float32) with mean ablation
        #: With resample ablation, each prompt's untouched states ``(steps, neurons)``.
        self.resample_states: list[np.ndarray] | None = None
        self.runs = 0
        #: Each measured circuit size's per-prompt metrics (``{k: (prompts,) float64}``,
        #: a prompt's mean over its terms), filled by :meth:`full_model` and :meth:`measure`.
        self.prompt_metrics: dict[int, np.ndarray] = {}
        self._terms = np.array([p.terms for p in task.prompts], dtype=np.float64)
        #: Called after every batch of measured runs (a progress report; it may raise to stop).
        self.tick: Callable[[], None] | None = None
        self._engine: BatchEngine | None = None

    def _batch_engine(self, ckpt: "Checkpoint | None" = None) -> "BatchEngine":
        from flyviz.model.batch import BatchEngine

        streams = min(self.settings.streams, len(self.task.prompts) * (
            1 if self.units.kind == "edges" else max(1, self.settings.points + 2)))
        if ckpt is not None:
            return BatchEngine(ckpt, streams, self.settings.threads, kernel=self._kernel())
        if self._engine is None:
            self._engine = BatchEngine(self.ckpt, streams, self.settings.threads,
                                       kernel=self._kernel())
        return self._engine

    def _kernel(self) -> str | None:
        import os

        from flyviz.model.kernels import ENV_VAR

        return self.settings.kernel or os.environ.get(ENV_VAR, "").strip().lower() or "llvm"

    def _means(self, sums: np.ndarray) -> np.ndarray:
        """The task's mean metric of each row of ``(circuits, prompts)`` metric sums."""
        return sums.sum(axis=1) / self.task.terms

    def close(self) -> None:
        """Stop the engine's threads."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def full_model(self) -> float:
        """``m(M)``; with mean ablation also sets :attr:`baseline` (the mean state over every
        prompt and position of the untouched runs)."""
        engine = self._batch_engine()
        sums = np.zeros((1, len(self.task.prompts)))
        ablation = self.settings.ablation
        # The resample ablation's scores rank by the deviation from the task's mean too.
        states = np.zeros(self.neurons) if ablation in ("mean", "resample") else None
        record: dict[int, list[np.ndarray]] | None = {} if ablation == "resample" else None
        jobs = [_Job(p, 0) for p in range(len(self.task.prompts))]
        _run_jobs(engine, self.task, jobs, lambda batch: None, sums, states, self.tick,
                  record)
        self.runs += 1
        if states is not None:
            self.baseline = (states / self.task.n_tokens).astype(np.float32)
        if record is not None:
            self.resample_states = [np.stack(record[p]) for p in range(len(self.task.prompts))]
        self.prompt_metrics[self.units.count] = sums[0] / self._terms
        return float(self._means(sums)[0])

    def kept(self, k: int) -> np.ndarray:
        """The top ``k`` units (by :attr:`order`; ``k`` of 0 or ``N`` need no order)."""
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if k >= self.units.count:
            return np.arange(self.units.count, dtype=np.int64)
        if self.order is None:
            raise RuntimeError("the units are not ranked yet")
        return self.order[:k]

    def neuron_mask(self, k: int) -> np.ndarray:
        """``(neurons,)`` bool: the neurons a circuit of the top ``k`` node units keeps."""
        units = self.kept(k)
        if self.units.kind == "neurons":
            mask = np.zeros(self.neurons, dtype=bool)
            mask[units] = True
            return mask
        assert self.units.members is not None
        chosen = np.zeros(self.units.count, dtype=bool)
        chosen[units] = True
        return chosen[self.units.members]

    def measure(self, sizes: Sequence[int]) -> np.ndarray:
        """The task's mean metric for each circuit size (float64)."""
        if self.units.kind == "edges":
            rows = np.stack([self._measure_edges(int(k)) for k in sizes])
        else:
            rows = self.prompt_sums(np.stack([self.neuron_mask(int(k)) for k in sizes]))
        for k, row in zip(sizes, rows):
            self.prompt_metrics[int(k)] = row / self._terms
        return self._means(rows)

    def measure_neurons(self, kept: np.ndarray) -> np.ndarray:
        """The task's mean metric for each row of ``kept`` (``(circuits, neurons)`` bool:
        the neurons kept, any set), everything else ablated (float64)."""
        return self._means(self.prompt_sums(kept))

    def prompt_sums(self, kept: np.ndarray) -> np.ndarray:
        """``(circuits, prompts)`` float64: each prompt's metric sum for each row of ``kept``
        (as :meth:`measure_neurons`)."""
        engine = self._batch_engine()
        masks = np.asarray(kept, dtype=bool).reshape(-1, self.neurons).astype(np.float32)
        base = self.baseline

        sources = self.resample_states
        count = len(self.task.prompts)

        def hooks_for(batch: list[_Job]) -> StepHooks:
            keep = np.ones((self.neurons, engine.columns), dtype=np.float32)
            for c, job in enumerate(batch):
                keep[:, c] = masks[job.circuit]
            if sources is not None:  # each prompt reads the next prompt's untouched run
                return ResampleHooks(keep, [sources[(job.prompt + 1) % count]
                                            for job in batch])
            fill = None if base is None else (1.0 - keep) * base[:, None]
            return KeepOnlyHooks(keep, fill)

        sums = np.zeros((masks.shape[0], len(self.task.prompts)))
        jobs = [_Job(p, c) for c in range(masks.shape[0]) for p in range(len(self.task.prompts))]
        _run_jobs(engine, self.task, jobs, hooks_for, sums, tick=self.tick)
        self.runs += masks.shape[0]
        return sums

    def _measure_edges(self, k: int) -> np.ndarray:
        """One edge circuit: the graph with only the top ``k`` synapses (and, with mean
        ablation, the others' mean current); each prompt's metric sum."""
        values = np.asarray(self.ckpt.w_values, dtype=np.float32)
        kept = np.zeros(values.size, dtype=bool)
        kept[self.kept(k)] = True
        graph = np.where(kept, values, np.float32(0.0)).astype(np.float32)
        ckpt = dataclasses.replace(self.ckpt, w_values=graph)
        hooks: StepHooks | None = None
        if self.baseline is not None and k < self.units.count:
            from scipy.sparse import csr_matrix

            n = self.neurons
            ablated = csr_matrix((np.where(kept, 0.0, values.astype(np.float64)),
                                  np.asarray(self.ckpt.w_indices),
                                  np.asarray(self.ckpt.w_offsets)), shape=(n, n))
            hooks = EdgeMeanHooks(ablated @ self.baseline.astype(np.float64))
        engine = self._batch_engine(ckpt) if k < self.units.count else self._batch_engine()
        try:
            sums = np.zeros((1, len(self.task.prompts)))
            jobs = [_Job(p, 0) for p in range(len(self.task.prompts))]
            _run_jobs(engine, self.task, jobs, lambda batch: hooks, sums, tick=self.tick)
        finally:
            if engine is not self._engine:
                engine.close()
        self.runs += 1
        return sums[0]


# ------------------------------------------------------------------- the result
@dataclass
class CurvePoint:
    """One measured circuit: its size ``k``, its mean metric and faithfulness, and each
    prompt's metric (its mean over its terms; empty where not measured)."""

    size: int
    metric: float
    faithfulness: float
    prompts: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)


@dataclass
class CircuitResult:
    """What :func:`find_circuit` found.

    Attributes
    ----------
    settings
        As run.
    units
        What the circuit is made of.
    scores
        ``(N,)`` float64: each unit's score (signed).
    neuron_scores
        ``(neurons,)`` float64: each neuron's score (the groups' parts).
    order
        Units by ``|score|``, strongest first.
    full_metric, empty_metric
        ``m(M)`` and ``m(∅)``.
    curve
        The empty circuit and the log-spaced sizes, measured.
    refinement
        The bisection's measured sizes (in the order measured).
    size, faithfulness
        The smallest faithful circuit found and its ``f`` (see :attr:`faithful`).
    faithful
        Whether a circuit below the whole brain is faithful: ``|1 - f| <=
        tolerance`` on the task and on ``prompt_share`` of its prompts. Where
        none is, :attr:`size` is every unit (the whole model, ``f = 1``).
    cpr, cmd
        Areas under ``f`` and ``|1 - f|`` over ``k / N``.
    task
        The task.
    seconds
        ``{"scores": ..., "faithfulness": ...}`` wall time.
    workers
        Dask workers the scores ran on (1 in this process).
    baseline
        With mean ablation, the state ``μ`` ablated units are held at (float32).
    """

    settings: CircuitSettings
    units: Units
    scores: np.ndarray
    neuron_scores: np.ndarray
    order: np.ndarray
    full_metric: float
    empty_metric: float
    curve: list[CurvePoint]
    refinement: list[CurvePoint]
    size: int
    faithfulness: float
    cpr: float
    cmd: float
    task: CircuitTask
    seconds: dict[str, float] = field(default_factory=dict)
    workers: int = 1
    runs: int = 0
    baseline: np.ndarray | None = field(default=None, repr=False)
    faithful: bool = True

    @property
    def kept_units(self) -> np.ndarray:
        """The circuit's units, strongest first."""
        return self.order[:self.size]

    def prompt_faithfulness(self, point: CurvePoint) -> np.ndarray:
        """Each prompt's faithfulness at ``point``: ``(m_p(C) - m_p(∅)) / (m_p(M) - m_p(∅))``
        from the prompt's own metrics (NaN where the ablation does not move it)."""
        return prompt_faithfulness(point.prompts, self.curve[-1].prompts,
                                   self.curve[0].prompts)

    @property
    def points(self) -> list[CurvePoint]:
        """Every measured circuit, the curve's and the refinement's, by size (one per
        size)."""
        points = {p.size: p for p in self.curve}
        for p in self.refinement:
            points.setdefault(p.size, p)
        return [points[k] for k in sorted(points)]

    @property
    def chosen(self) -> CurvePoint:
        """The measured point of the circuit (the whole model where none is faithful)."""
        return next(p for p in self.points if p.size == self.size)

    def judge(self, point: CurvePoint) -> str:
        """``"faithful"`` (within the tolerance on the task and on enough prompts),
        ``"overshoots"`` (``f > 1 + tolerance``), ``"undershoots"`` (``f < 1 - tolerance``)
        or ``"prompts"`` (within on the task, not on enough prompts)."""
        tolerance = float(self.settings.tolerance)
        if point.faithfulness > 1.0 + tolerance:
            return "overshoots"
        if point.faithfulness < 1.0 - tolerance:
            return "undershoots"
        share = within_share(self.prompt_faithfulness(point), tolerance)
        return "faithful" if share >= float(self.settings.prompt_share) - 1e-12 else "prompts"

    def spread(self, point: CurvePoint | None = None) -> dict[str, float]:
        """The per-prompt faithfulness at ``point`` (default: the circuit): ``min``,
        ``q25``, ``median``, ``q75``, ``max`` and ``within`` (the share within the
        tolerance); NaN where no prompt's is defined."""
        values = self.prompt_faithfulness(self.chosen if point is None else point)
        defined = values[np.isfinite(values)]
        if not defined.size:
            nan = float("nan")
            return {"min": nan, "q25": nan, "median": nan, "q75": nan, "max": nan,
                    "within": nan}
        q = np.quantile(defined, [0.0, 0.25, 0.5, 0.75, 1.0])
        return {"min": float(q[0]), "q25": float(q[1]), "median": float(q[2]),
                "q75": float(q[3]), "max": float(q[4]),
                "within": within_share(defined, float(self.settings.tolerance))}

    @property
    def measured_below_whole(self) -> list[CurvePoint]:
        """The measured circuits between nothing and the whole model, by size."""
        return [p for p in self.points if 0 < p.size < self.units.count]

    @property
    def near_miss(self) -> CurvePoint | None:
        """Where no circuit is faithful, the measured one closest to being so: within the
        tolerance on the task but not on enough prompts (the most prompts within, then the
        smallest); ``None`` when there is a circuit or no such point."""
        if self.faithful:
            return None
        close = [p for p in self.measured_below_whole if self.judge(p) == "prompts"]
        if not close:
            return None

        def rank(point: CurvePoint) -> tuple[float, int]:
            within = self.spread(point)["within"]
            return (within if math.isfinite(within) else -1.0, -point.size)

        return max(close, key=rank)

    @property
    def overshoot(self) -> CurvePoint | None:
        """The measured circuit with the highest ``f`` above ``1 + tolerance`` (a part of the
        brain that does more than the whole model), or ``None``."""
        above = [p for p in self.points if p.faithfulness > 1.0 + float(self.settings.tolerance)]
        return max(above, key=lambda p: p.faithfulness) if above else None

    def headline(self) -> dict[str, float]:
        """The numbers compared across models: CPR, CMD, the circuit's size and fraction."""
        return {"cpr": self.cpr, "cmd": self.cmd, "circuit_size": float(self.size),
                "circuit_fraction": self.size / self.units.count,
                "faithfulness": self.faithfulness}

    def circuit_neurons(self, ckpt: "Checkpoint") -> np.ndarray:
        """The neurons of the circuit: by rank (neurons), group by group in rank order
        (types, superclasses), or the kept synapses' endpoints (edges, sorted)."""
        kept = self.kept_units
        if self.units.kind == "neurons":
            return kept
        if self.units.kind == "edges":
            rows = np.searchsorted(np.asarray(ckpt.w_offsets), kept, side="right") - 1
            cols = np.asarray(ckpt.w_indices)[kept]
            return np.unique(np.concatenate([rows, cols]).astype(np.int64))
        assert self.units.members is not None
        return np.concatenate([np.flatnonzero(self.units.members == g) for g in kept]
                              ).astype(np.int64)

    def circuit_edges(self, ckpt: "Checkpoint", limit: int = MAX_LISTED_EDGES
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pre, post, score)`` of the kept synapses, strongest first (at most ``limit``)."""
        kept = self.kept_units[:limit]
        post = np.searchsorted(np.asarray(ckpt.w_offsets), kept, side="right") - 1
        return (np.asarray(ckpt.w_indices)[kept].astype(np.int64), post.astype(np.int64),
                self.scores[kept])

    def to_json(self, ckpt: "Checkpoint") -> dict[str, Any]:
        """The object ``flyviz circuit --json`` prints. Where no circuit below the whole
        model is faithful, the circuit is empty (no size, no neurons, types, groups or
        edges: the whole brain is no circuit) and ``verdict`` says so."""
        neurons = self.circuit_neurons(ckpt) if self.faithful else np.zeros(0, np.int64)
        types = neuron_labels(ckpt, "cell_type")
        seen: dict[str, int] = {}
        for i in neurons:
            seen[types[int(i)]] = seen.get(types[int(i)], 0) + 1
        def clean(value: float) -> float | None:
            return float(value) if math.isfinite(value) else None

        # A search without a circuit keeps the whole model, whose f is 1 by definition (and
        # every prompt's too): those numbers are not a finding, so they are not reported.
        circuit: dict[str, Any] = {
            "faithful": self.faithful,
            "size": self.size if self.faithful else None, "units": self.units.kind,
            "fraction": self.size / self.units.count if self.faithful else None,
            "faithfulness": self.faithfulness if self.faithful else None,
            "prompt_faithfulness": {k: clean(v) for k, v in self.spread().items()}
            if self.faithful else None,
            "neurons": [int(i) for i in neurons],
            "types": [{"type": t, "neurons": c} for t, c in seen.items()]}
        overshoot = self.overshoot
        if self.units.kind in ("types", "superclasses"):
            circuit["groups"] = [self.units.names[int(g)] for g in self.kept_units] \
                if self.faithful else []
        if self.units.kind == "edges":
            pre, post, score = self.circuit_edges(ckpt, limit=MAX_LISTED_EDGES
                                                  if self.faithful else 0)
            circuit["edges"] = [{"pre": int(a), "post": int(b), "score": float(s)}
                                for a, b, s in zip(pre, post, score)]
            circuit["edges_listed"] = int(pre.size)
        s = self.settings
        if not self.faithful:
            miss = self.near_miss
            circuit["verdict"] = "no circuit below the whole model is faithful"
            circuit["measured_below_whole"] = len(self.measured_below_whole)
            circuit["near_miss"] = None if miss is None else {
                "nodes": miss.size, "faithfulness": miss.faithfulness,
                "prompts_within": clean(self.spread(miss)["within"])}

        def row(p: CurvePoint) -> dict[str, Any]:
            return {"nodes": p.size, "faithfulness": p.faithfulness, "metric": p.metric,
                    "prompts_within": clean(self.spread(p)["within"])}

        return {
            "curve": [row(p) for p in self.curve],
            "refinement": [row(p) for p in self.refinement],
            "circuit": circuit, "cpr": self.cpr, "cmd": self.cmd,
            "overshoot": None if overshoot is None else {
                "nodes": overshoot.size, "faithfulness": overshoot.faithfulness},
            "full_metric": self.full_metric, "empty_metric": self.empty_metric,
            "units_total": self.units.count,
            "settings": {"nodes": s.nodes, "edges": s.edges, "units": s.units,
                         "ablation": s.ablation, "tolerance": s.tolerance,
                         "prompt_share": s.prompt_share, "score": s.score,
                         "points": s.points, "ig_steps": s.ig_steps},
            "task": {"source": self.task.source, "kind": self.task.kind,
                     "prompts": len(self.task.prompts), "terms": self.task.terms,
                     "metric": self.task.metric_text(), "sha256": self.task.digest()},
            "model": ckpt.name, "seconds": self.seconds, "workers": self.workers,
            "runs": self.runs,
        }


# ------------------------------------------------------------------- the search
def _faithfulness(metric: float, full: float, empty: float) -> float:
    return float((metric - empty) / (full - empty))


def check_explainable(full: float, empty: float, task: CircuitTask, ablation: str) -> None:
    """Refuse a task whose metric the ablation does not move (``m(M) == m(∅)``)."""
    if not (math.isfinite(full) and math.isfinite(empty)) or \
            abs(full - empty) <= 1e-9 * max(1.0, abs(full), abs(empty)):
        raise InputError(f"nothing to explain: the task's metric is {full:+.6g} with the "
                         f"whole model and {empty:+.6g} with every unit {ablation}-ablated "
                         "(m(M) == m(∅)); choose a task the model does")


def check_resample(ckpt: "Checkpoint", task: CircuitTask) -> None:
    """Refuse a resample ablation of a one-prompt task (it would read its own run) or of a
    task whose untouched states would not fit in :data:`RESAMPLE_BYTES`."""
    if len(task.prompts) < 2:
        raise InputError("--ablation resample holds each prompt's ablated neurons at another "
                         "prompt's states: give a task of two prompts or more, or use mean")
    needed = task.n_tokens * int(ckpt.config.neurons) * 4
    if needed > RESAMPLE_BYTES:
        raise InputError(f"--ablation resample keeps every prompt's states ({needed / 2**30:.1f} "
                         f"GiB for {task.n_tokens:,} tokens, more than "
                         f"{RESAMPLE_BYTES / 2**30:.0f} GiB); use a shorter task or mean")


def find_circuit(spec: str | None, ckpt: "Checkpoint", task: CircuitTask,
                 settings: CircuitSettings = CircuitSettings(), *,
                 dataset: str | None = None, workers: int | None = None,
                 scheduler: str | None = None, progress: cluster.ProgressBar | None = None,
                 log: Callable[[str], None] | None = None,
                 engines: tuple["Engine", "BackwardEngine"] | None = None,
                 on_batch: Callable[[], None] | None = None) -> CircuitResult:
    """Score every unit over the task, measure the faithfulness curve, find the circuit.

    Parameters
    ----------
    spec, dataset
        How Dask workers load the model (``None``: in this process only,
        ``workers=0``).
    ckpt
        The model, loaded here.
    task
        The prompts and the metric.
    settings
        See :class:`CircuitSettings`.
    workers, scheduler, progress, log
        As for the other corpus runs (``progress`` counts the scored tokens).
    engines
        In this process: a forward and a backward engine of ``ckpt`` to score with.
    on_batch
        Called after every batch of faithfulness runs (a progress report; an
        exception it raises ends the search there).

    Raises
    ------
    InputError
        For bad settings, or when the ablation does not move the metric
        (``m(M) == m(∅)``: nothing to explain), found before the scores.
    """
    from flyviz.model.identity import model_identity

    settings = settings.validate()
    if spec is None and not runs.in_this_process(workers, scheduler):
        raise InputError("running on Dask workers needs a model spec they can load (a folder "
                         "or 'demo'); give one, or use workers=0")
    cluster.require_dask("flyviz circuit", workers, scheduler)
    units = make_units(ckpt, settings.units)
    if settings.ablation == "resample":
        check_resample(ckpt, task)
    runner = Runner(ckpt, task, settings, units)
    runner.tick = on_batch
    try:
        started = time.perf_counter()
        full = runner.full_model()
        empty = float(runner.measure([0])[0])
        check_explainable(full, empty, task, settings.ablation)
        if log is not None:
            log(f"m(M) = {full:+.4f} with the whole model, m(∅) = {empty:+.4f} with every "
                f"{'synapse' if units.kind == 'edges' else 'neuron'} {settings.ablation}-"
                f"ablated; scoring {units.count:,} {units.kind} over {len(task.prompts):,} "
                "prompts")
        scored = time.perf_counter()
        identity = model_identity(ckpt)
        items = chunks(task, settings.min_tasks)
        result = runs.run_tasks(circuit_task, items, merge_partials, spec=spec,
                                dataset=dataset, identity=identity, settings=settings,
                                in_process=_InProcess(ckpt, settings, engines),
                                release=release_engines, workers=workers,
                                scheduler=scheduler, progress=progress, log=log)
        partial = result.partial
        if int(partial["prompts"][0]) != len(task.prompts):
            raise RuntimeError("the merged scores do not hold every prompt")
        scores, neuron_scores = unit_scores(ckpt, units, partial, runner.baseline)
        runner.order = ranking(scores)
        measured = time.perf_counter()
        sizes = curve_sizes(units.count, settings.points)
        inner = [k for k in sizes if k < units.count]
        metrics = dict(zip(inner, runner.measure(inner))) if inner else {}
        metrics[0], metrics[units.count] = empty, full
        curve = [CurvePoint(k, float(metrics[k]), _faithfulness(metrics[k], full, empty),
                            runner.prompt_metrics[k]) for k in [0, *sizes]]
        curve[0].faithfulness, curve[-1].faithfulness = 0.0, 1.0
        refinement: list[CurvePoint] = []
        chosen = _smallest(runner, curve, refinement, settings, full, empty)
        faithful = chosen is not None
        size, faith = (chosen.size, chosen.faithfulness) if chosen is not None else \
            (units.count, 1.0)
        fractions = [p.size / units.count for p in curve]
        values = [p.faithfulness for p in curve]
        done = time.perf_counter()
    finally:
        runner.close()
    return CircuitResult(
        settings=settings, units=units, scores=scores, neuron_scores=neuron_scores,
        order=runner.order, full_metric=full, empty_metric=empty, curve=curve,
        refinement=refinement, size=size, faithfulness=faith, faithful=faithful,
        cpr=area(fractions, values), cmd=area(fractions, [abs(1.0 - v) for v in values]),
        task=task, workers=result.workers, runs=runner.runs, baseline=runner.baseline,
        seconds={"baseline": scored - started, "scores": measured - scored,
                 "faithfulness": done - measured, "total": done - started})


def prompt_faithfulness(prompts: np.ndarray, full: np.ndarray, empty: np.ndarray
                        ) -> np.ndarray:
    """Each prompt's ``(m_p(C) - m_p(∅)) / (m_p(M) - m_p(∅))`` (NaN where the ablation does
    not move the prompt's metric)."""
    span = full - empty
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.abs(span) > 1e-12, (prompts - empty) / span, np.nan)


def within_share(values: np.ndarray, tolerance: float) -> float:
    """The share of the prompts (with a defined faithfulness) within ``tolerance`` of 1."""
    defined = values[np.isfinite(values)]
    return float(np.mean(np.abs(1.0 - defined) <= tolerance)) if defined.size else 1.0


class _Search:
    """The search for the smallest faithful circuit over the measured curve (see
    :func:`_smallest`); every size it looks at is run, never estimated."""

    def __init__(self, runner: Runner, refinement: list[CurvePoint], settings: CircuitSettings,
                 full: float, empty: float) -> None:
        self.runner, self.refinement, self.settings = runner, refinement, settings
        self.full, self.empty = full, empty
        self.tolerance = float(settings.tolerance)
        self.budget = int(settings.refine)
        count = runner.units.count
        self.full_prompts = runner.prompt_metrics[count]
        self.empty_prompts = runner.prompt_metrics[0]

    def measure(self, k: int) -> CurvePoint:
        metric = float(self.runner.measure([k])[0])
        point = CurvePoint(k, metric, _faithfulness(metric, self.full, self.empty),
                           self.runner.prompt_metrics[k])
        self.refinement.append(point)
        self.budget -= 1
        return point

    def side(self, point: CurvePoint) -> int:
        """-1 below the tolerance band, 0 in it, +1 above it (an overshoot)."""
        if point.faithfulness < 1.0 - self.tolerance:
            return -1
        return 1 if point.faithfulness > 1.0 + self.tolerance else 0

    def faithful(self, point: CurvePoint) -> bool:
        """``|1 - f| <= tolerance`` on the task and on :attr:`prompt_share` of its prompts."""
        if self.side(point) != 0:
            return False
        each = prompt_faithfulness(point.prompts, self.full_prompts, self.empty_prompts)
        return within_share(each, self.tolerance) >= float(self.settings.prompt_share) - 1e-12

    def first(self, lo: int, hi: CurvePoint) -> CurvePoint:
        """Bisect between size ``lo`` (not faithful) and the faithful ``hi`` for the smallest
        faithful size the steps reach."""
        while hi.size - lo > 1 and self.budget > 0:
            point = self.measure((lo + hi.size) // 2)
            if self.faithful(point):
                hi = point
            else:
                lo = point.size
        return hi

    def across(self, before: CurvePoint, after: CurvePoint) -> CurvePoint | None:
        """Look for a faithful size between two points on opposite sides of the band (the
        curve jumps over it between them)."""
        lo, hi, below = before.size, after.size, self.side(before)
        while hi - lo > 1 and self.budget > 0:
            point = self.measure((lo + hi) // 2)
            side = self.side(point)
            if side == 0:
                return self.first(lo, point) if self.faithful(point) else None
            if side == below:
                lo = point.size
            else:
                hi = point.size
        return None


def _smallest(runner: Runner, curve: list[CurvePoint], refinement: list[CurvePoint],
              settings: CircuitSettings, full: float, empty: float) -> CurvePoint | None:
    """The smallest faithful circuit below the whole brain, or ``None`` when there is none.

    Faithful means ``|1 - f| <= tolerance`` on the task and on ``prompt_share``
    of its prompts. The curve's points are taken in order of size: the first
    faithful one is refined by bisection against the point before it; where
    the curve jumps over the tolerance band between two points (from below
    ``1 - tolerance`` to above ``1 + tolerance`` or back), the sizes between
    them are bisected for one inside it first. Every step is run, at most
    ``settings.refine`` in all. The whole brain (``f = 1`` by definition) is
    no answer: without a faithful point below it there is no circuit.
    """
    search = _Search(runner, refinement, settings, full, empty)
    count = runner.units.count
    for before, point in zip(curve, curve[1:]):
        if point.size >= count:
            break
        if search.faithful(point):
            return search.first(before.size, point)
        if search.side(before) * search.side(point) == -1:
            found = search.across(before, point)
            if found is not None:
                return found
    return None


__all__ = ["ABLATIONS", "CircuitResult", "CircuitSettings", "CurvePoint", "EdgeMeanHooks",
           "KeepOnlyHooks", "NODE_UNITS", "PROMPT_SHARE", "ResampleHooks", "Runner", "SCORES",
           "TOLERANCE", "Units", "area", "check_explainable", "check_resample",
           "chunk_partial", "circuit_task", "curve_sizes", "find_circuit", "make_units",
           "merge_partials", "neuron_labels", "prompt_faithfulness", "prompt_flows",
           "ranking", "release_engines", "unit_scores", "within_share"]
