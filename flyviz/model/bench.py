"""Engine and loader benchmarks behind ``flyviz bench``.

A Fly LLM step is memory-bound: per token it must read the whole CSR graph
(72 MB at full size), the readout (12.6 MB for rank 64, 202 MB dense) and the
input projections once. The honest yardstick is therefore the
*memory-bandwidth floor*: the time this machine needs to stream exactly those
bytes once with the same number of threads, measured in the same run. The
report gives the engine's median step time beside that floor and their ratio.

Timings are medians over repeated steps; nothing here asserts a speed (tests
never time anything), it only measures and reports. Engines with different
sparse kernels (:mod:`flyviz.model.kernels`) can be measured side by side,
interleaved, each against the floor of the bytes its own kernel reads.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import Engine, default_threads
from flyviz.model.kernels import status as kernel_status

Log = Callable[[str], None]


def _words(array: np.ndarray) -> list[np.ndarray]:
    """A flat view of ``array``'s bytes as uint64 words (plus a uint8 tail)."""
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    whole = raw.size // 8 * 8
    parts: list[np.ndarray] = [raw[:whole].view(np.uint64)] if whole else []
    if whole < raw.size:
        parts.append(raw[whole:])
    return parts


def step_buffers(engine: Engine) -> dict[str, np.ndarray]:
    """The arrays one step of ``engine`` reads in full, by name, as the engine holds them.

    Taken from the engine itself, so that the graph counts as the sparse
    kernel's own layout reads it (for scipy, a dataset's 16-bit presynaptic
    indices as the 32-bit copy it reads; for llvm, its SELL-8 arrays).
    """
    engine.prepare()
    buffers: dict[str, np.ndarray] = {}
    for i, block in enumerate(engine.row_blocks):
        assert block.layout is not None
        for name, array in block.layout.buffers().items():
            buffers[f"{name}[{i}]"] = array
    for name in ("in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias",
                 "head", "head_a", "head_b"):
        array = getattr(engine, name)
        if array is not None:
            buffers[name] = array
    return {k: np.asarray(v) for k, v in buffers.items()}


class StreamFloor:
    """Reads every byte of some buffers once per :meth:`run`, split over threads.

    Each thread takes a ``max`` reduction over an equal share of the bytes
    (viewed as 64-bit words): a SIMD loop that does nothing but load, so its
    time is the time this machine needs to stream those bytes.
    """

    def __init__(self, buffers: list[np.ndarray], threads: int) -> None:
        words = [w for b in buffers for w in _words(b)]
        self.nbytes = sum(int(w.nbytes) for w in words)
        # Every buffer is cut into `threads` equal pieces, piece i going to thread i,
        # so each thread streams the same number of bytes.
        threads = max(1, threads)
        self._shares: list[list[np.ndarray]] = [[] for _ in range(threads)]
        for w in words:
            for i, piece in enumerate(np.array_split(w, threads)):
                self._shares[i].append(piece)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="flyviz-floor")

    @staticmethod
    def _read(parts: list[np.ndarray]) -> int:
        acc = 0
        for part in parts:
            if part.size:
                acc ^= int(part.max())
        return acc

    def run(self) -> float:
        """Seconds for one pass over all the bytes."""
        start = time.perf_counter()
        list(self._pool.map(self._read, self._shares))
        return time.perf_counter() - start

    def close(self) -> None:
        """Stop the threads."""
        self._pool.shutdown(wait=True)


def time_steps(engine: Engine, steps: int, seed: int = 0) -> np.ndarray:
    """Seconds per token for ``steps`` random tokens, after 3 warm-up steps.

    A token's time covers :meth:`Engine.step` and the background product it
    starts (:meth:`Engine.wait_background`), i.e. all of its work.
    """
    rng = np.random.default_rng(seed)
    vocab = engine.config.vocabulary
    engine.reset()
    for token in rng.integers(3, vocab, 3):
        engine.step(int(token))
    engine.wait_background()
    times = np.empty(steps)
    for i, token in enumerate(rng.integers(3, vocab, steps)):
        start = time.perf_counter()
        engine.step(int(token))
        engine.wait_background()
        times[i] = time.perf_counter() - start
    return times


def bench_engines(ckpt: Checkpoint, steps: int = 60, threads: int | None = None,
                  rounds: int = 10,
                  kernels: Sequence[str | None] = (None,),
                  reference: Any = None) -> list[dict[str, Any]]:
    """Median step times of engines with the given sparse kernels, and their memory floors.

    Steps and floor passes are measured in alternating rounds (a run of
    steps of each engine in turn, each followed by a run of back-to-back
    passes over the bytes that engine reads), so that all see the same
    machine when other programs come and go: with several kernels this is
    an interleaved A/B comparison in one process.

    Parameters
    ----------
    kernels
        One engine per entry: ``"scipy"``, ``"llvm"`` or ``None`` (the
        engine's default choice). The kernel that actually ran is reported.
    reference
        A :class:`~flyviz.model.bench_reference.ReferenceEngine` (engine.js on
        the same checkpoint) to time in the same rounds, or ``None``.

    Returns
    -------
    list of dict
        Per engine: ``readout``, ``kernel``, ``threads``, ``step_ms``
        (median), ``step_ms_p10/p90``, ``tokens_per_s``, ``floor_ms``
        (median), ``floor_bytes``, ``floor_gb_per_s``, ``ratio`` (median
        step / median floor), ``prepare_s`` (:meth:`Engine.prepare`: choosing
        the kernel, compiling it if this process had not yet, laying out the
        graph for it). With ``reference``: ``engine_js_ms`` (its median
        step), ``engine_js_ms_p10`` and ``engine_js_speedup`` (its median /
        this engine's median).
    """
    threads = threads or default_threads()
    engines: list[Engine] = []
    floors: list[StreamFloor] = []
    prepare_s: list[float] = []
    try:
        for kernel in kernels:
            engine = Engine(ckpt, threads=threads, kernel=kernel)
            engines.append(engine)
            start = time.perf_counter()
            # Before the floor is set up: the floor streams the arrays this kernel reads.
            engine.prepare()
            prepare_s.append(time.perf_counter() - start)
            floors.append(StreamFloor(list(step_buffers(engine).values()), threads))
        rounds = max(1, min(rounds, steps))
        times: list[list[np.ndarray]] = [[] for _ in engines]
        floor_times: list[list[float]] = [[] for _ in engines]
        reference_times: list[np.ndarray] = []
        if reference is not None:
            reference.time_steps(3)  # warm-up: node compiles the step on first use
        for r in range(rounds):
            count = steps // rounds + (1 if r < steps % rounds else 0)
            for i, (engine, floor) in enumerate(zip(engines, floors)):
                times[i].append(time_steps(engine, count, seed=r))
                floor.run()  # warm: the first pass after the steps wakes the threads
                floor_times[i].extend(floor.run() for _ in range(4))
            if reference is not None:
                reference_times.append(reference.time_steps(count))
    finally:
        for engine in engines:
            engine.close()
        for floor in floors:
            floor.close()
    results = []
    for engine, floor, step_times, passes, seconds in zip(engines, floors, times,
                                                          floor_times, prepare_s):
        all_times = np.concatenate(step_times)
        median = float(np.median(all_times))
        floor_s = float(np.median(passes))
        results.append({
            "readout": ckpt.config.readout_kind,
            "kernel": engine.kernel,
            "neurons": ckpt.config.neurons,
            "edges": ckpt.n_edges,
            "threads": threads,
            "overlap": engine.overlap,
            "steps": int(all_times.size),
            "step_ms": 1e3 * median,
            "step_ms_p10": 1e3 * float(np.percentile(all_times, 10)),
            "step_ms_p90": 1e3 * float(np.percentile(all_times, 90)),
            "tokens_per_s": 1.0 / median,
            "floor_ms": 1e3 * floor_s,
            "floor_ms_p10": 1e3 * float(np.percentile(passes, 10)),
            "floor_bytes": floor.nbytes,
            "floor_gb_per_s": floor.nbytes / floor_s / 1e9,
            "ratio": median / floor_s,
            "prepare_s": seconds,
        })
        if reference_times:
            js = np.concatenate(reference_times)
            results[-1].update({
                "engine_js_ms": 1e3 * float(np.median(js)),
                "engine_js_ms_p10": 1e3 * float(np.percentile(js, 10)),
                "engine_js_speedup": float(np.median(js)) / median,
            })
    return results


def bench_load(ckpt: Checkpoint, layout: str = "recital-web", repeats: int = 3,
               workdir: str | Path | None = None) -> dict[str, Any]:
    """Write ``ckpt`` to a temporary folder in ``layout`` and time loading it back.

    The files were just written, so they are in the page cache: this measures
    flyviz's parsing, checking and memory mapping, not the disk.
    """
    from flyviz.model.formats import load_folder
    from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf,
                                      write_recital_web, write_wordbrain)

    root = Path(tempfile.mkdtemp(prefix="flyviz-bench-", dir=workdir))
    try:
        model_dir = root / "model"
        if layout == "fly-llm-hf":
            write_fly_llm_hf(ckpt, model_dir)
        else:
            write_connectome_dataset(ckpt, root / "dataset")
            if layout == "wordbrain":
                write_wordbrain(ckpt, model_dir)
            else:
                write_recital_web(ckpt, model_dir)
        nbytes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            loaded = load_folder(model_dir)
            times.append(time.perf_counter() - start)
            del loaded
        return {"layout": layout, "bytes_on_disk": nbytes, "load_s": statistics.median(times),
                "load_s_all": times}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def full_size_checkpoint(readout_rank: int | None, seed: int = 0) -> Checkpoint:
    """A random checkpoint with the released sizes (49,393 neurons, 9,050,172 edges).

    The rank-64 one holds 16-bit presynaptic indices and the dense one 32-bit
    ones, as the released checkpoints do when loaded.
    """
    from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, make_random_checkpoint

    d_embed = 32 if readout_rank is not None else 128
    ckpt = make_random_checkpoint(FULL_NEURONS, FULL_EDGES, d_embed=d_embed,
                                  readout_rank=readout_rank, seed=seed, with_anatomy=True,
                                  name=f"synthetic full size, {'dense' if readout_rank is None else f'rank-{readout_rank}'}")
    if readout_rank is not None:
        # As the released rank-64 models load them: from the connectome dataset's
        # edges_source.u16 (the dense ngxson checkpoint stores int32 indices).
        ckpt = dataclasses.replace(ckpt, w_indices=ckpt.w_indices.astype(np.uint16))
    return ckpt


def run_bench(spec: str | None = None, steps: int = 60, threads: int | None = None,
              load: bool = True, log: Log | None = None,
              kernels: Sequence[str | None] = (None,),
              dataset_dir: str | Path | None = None,
              engine_js: str | Path | None = None) -> dict[str, Any]:
    """Everything ``flyviz bench`` reports.

    Parameters
    ----------
    spec
        A model to measure; ``None`` measures two synthetic full-size models
        (rank-64 readout with d_embed 32, and dense 1,024 x 49,393 with
        d_embed 128) and the load time of a full-size web export.
    steps
        Timed steps per model.
    threads
        Sparse-product threads (default: usable cores, at most 4).
    load
        Also time loading full-size checkpoints from local disk: the rank-64
        model as a web export and as fly-wordbrain weights (each with its
        dataset), the dense one in the ngxson layout.
    log
        Progress lines.
    kernels
        Sparse kernels to measure, one engine each, interleaved (see
        :func:`bench_engines`); ``None`` is the engine's own choice.
    dataset_dir
        The connectome dataset to join ``spec`` to (see
        :func:`flyviz.model.resolve.load_model`).
    engine_js
        The reference engine's ``engine.js``: also time it under node on the
        same model (``spec``, or the synthetic rank-64 one; it has no dense
        readout), in the same rounds (see :func:`bench_engines`).
    """
    log = log or (lambda _line: None)
    results: dict[str, Any] = {"threads": threads or default_threads(), "engines": []}
    if spec is not None:
        from flyviz.model.resolve import load_model

        log(f"loading {spec}")
        start = time.perf_counter()
        ckpt = load_model(spec, dataset_dir=dataset_dir)
        results["model_load_s"] = time.perf_counter() - start
        results["model"] = ckpt.name
        log(f"measuring {ckpt.config.readout_kind} readout")
        results["engines"].extend(_bench_with_reference(ckpt, steps, threads, kernels,
                                                        engine_js, log))
        results["llvm_kernel"] = kernel_status()
        return results
    for rank in (64, None):
        label = "dense" if rank is None else f"rank-{rank}"
        log(f"building a full-size synthetic model ({label})")
        start = time.perf_counter()
        ckpt = full_size_checkpoint(rank)
        results.setdefault("synthetic_build_s", {})[label] = time.perf_counter() - start
        log(f"measuring {label}: {steps} steps per engine")
        results["engines"].extend(_bench_with_reference(
            ckpt, steps, threads, kernels, engine_js if rank is not None else None, log))
        if load:
            layouts = ("recital-web", "wordbrain") if rank is not None else ("fly-llm-hf",)
            for layout in layouts:
                log(f"timing the load of a full-size {layout} checkpoint ({label})")
                results.setdefault("loads", []).append(
                    {"readout": label, **bench_load(ckpt, layout)})
        del ckpt
    results["llvm_kernel"] = kernel_status()
    return results


def _bench_with_reference(ckpt: Checkpoint, steps: int, threads: int | None,
                          kernels: Sequence[str | None], engine_js: str | Path | None,
                          log: Log) -> list[dict[str, Any]]:
    """:func:`bench_engines`, with engine.js on the same model when ``engine_js`` is given."""
    if engine_js is None:
        return bench_engines(ckpt, steps, threads, kernels=kernels)
    from flyviz.model.bench_reference import ReferenceEngine

    log("writing the model for engine.js and starting node")
    reference = ReferenceEngine(engine_js, ckpt)
    try:
        return bench_engines(ckpt, steps, threads, kernels=kernels, reference=reference)
    finally:
        reference.close()


def default_bench_interventions() -> tuple[Any, ...]:
    """What ``flyviz bench --interventions`` applies unless told otherwise: a silence, a
    stimulation and a cut, all acting on every step (on the demo brain: 16,677 silenced
    neurons, 14,064 stimulated, 1,039,345 synapses cut)."""
    from flyviz.model.interventions import Cut, Silence, Stimulate

    return (Silence("sign:inhibitory"), Stimulate("input", 0.5),
            Cut("superclass:visual_projection", "all"))


def time_interleaved(engines: Sequence[Engine], steps: int, seed: int = 0,
                     warmup: int = 5) -> list[np.ndarray]:
    """Seconds per token of each engine, the engines taking turns token by token.

    All read the same random tokens from a reset state; the order of the turn
    alternates from token to token, so that machine load and caches treat all
    alike. A token's time covers :meth:`Engine.step` and the background
    product it starts. The first ``warmup`` tokens are not counted.
    """
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, engines[0].config.vocabulary, steps + warmup)
    times = [np.empty(steps) for _ in engines]
    for engine in engines:
        engine.reset()
    order = list(range(len(engines)))
    for t, token in enumerate(tokens):
        for i in (order if t % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            engines[i].step(int(token))
            engines[i].wait_background()
            if t >= warmup:
                times[i][t - warmup] = time.perf_counter() - start
    return times


def run_intervention_bench(spec: str | None = None, steps: int = 200,
                           threads: int | None = None, log: Log | None = None,
                           kernels: Sequence[str | None] = (None,),
                           interventions: Sequence[Any] | None = None,
                           dataset_dir: str | Path | None = None) -> dict[str, Any]:
    """Per-step cost of an engine with interventions against one without, in one run.

    For each kernel, a plain engine and one with the interventions step in
    turn, token by token (:func:`time_interleaved`).

    Parameters
    ----------
    spec
        The model (default: the demo brain, full size, with labels).
    interventions
        Default: :func:`default_bench_interventions`.
    dataset_dir
        The connectome dataset to join ``spec`` to, if it needs one.

    Returns
    -------
    dict
        ``threads``, ``model``, ``model_load_s``, ``interventions`` (JSON form
        with what each selected), ``kernels``: per kernel ``kernel``,
        ``steps``, ``plain_ms`` and ``intervened_ms`` (medians, with ``_p10``
        and ``_p90``), ``ratio`` (median intervened / median plain) and
        ``prepare_s`` (laying out the graph and its cut/scaled variants) and
        ``mean_abs_state_difference`` (mean |x_plain - x_intervened| after the
        last step: above zero when the interventions acted).
    """
    from flyviz.model.resolve import load_model

    log = log or (lambda _line: None)
    spec = spec or "demo"
    applied = tuple(interventions) if interventions else default_bench_interventions()
    threads = threads or default_threads()
    results: dict[str, Any] = {"threads": threads, "kernels": []}
    log(f"loading {spec}")
    start = time.perf_counter()
    ckpt = load_model(spec, dataset_dir=dataset_dir)
    results["model_load_s"] = time.perf_counter() - start
    results["model"] = ckpt.name
    for kernel in kernels:
        plain = Engine(ckpt, threads=threads, kernel=kernel)
        intervened = Engine(ckpt, threads=threads, kernel=kernel, interventions=applied)
        try:
            results["interventions"] = intervened.interventions.to_json()
            plain.prepare()
            start = time.perf_counter()
            intervened.prepare()
            prepare_s = time.perf_counter() - start
            log(f"{plain.kernel}: {steps} steps without and with {len(applied)} interventions, "
                "taking turns token by token")
            base_times, other_times = time_interleaved([plain, intervened], steps)
            # Both read the same tokens: a difference in state says the interventions acted.
            difference = float(np.abs(plain.state - intervened.state).mean())
        finally:
            plain.close()
            intervened.close()
        entry: dict[str, Any] = {"kernel": plain.kernel, "steps": steps, "prepare_s": prepare_s,
                                 "mean_abs_state_difference": difference}
        for name, times in (("plain", base_times), ("intervened", other_times)):
            entry[f"{name}_ms"] = 1e3 * float(np.median(times))
            entry[f"{name}_ms_p10"] = 1e3 * float(np.percentile(times, 10))
            entry[f"{name}_ms_p90"] = 1e3 * float(np.percentile(times, 90))
        entry["ratio"] = entry["intervened_ms"] / entry["plain_ms"]
        results["kernels"].append(entry)
    results["llvm_kernel"] = kernel_status()
    return results


def bench_batch(ckpt: Checkpoint, streams: int = 64, steps: int = 40,
                threads: int | None = None, rounds: int = 5,
                kernel: str | None = None) -> dict[str, Any]:
    """Tokens/s of the batched engine against the single-stream engine, in one run.

    Rounds alternate: a run of single-stream steps (:func:`time_steps`), then
    a run of batched steps (``streams`` random tokens each), so both see the
    same machine. Both engines use ``threads`` for the sparse product and
    ``kernel`` (single-stream: the default choice when ``None``, as the app;
    batched: :data:`~flyviz.model.kernels.DEFAULT_MULTI_KERNEL`).

    Returns
    -------
    dict
        ``single_ms`` and ``batch_ms`` (median per step), ``single_tokens_per_s``,
        ``batch_tokens_per_s``, ``speedup`` (their ratio), the kernels that ran,
        ``streams``, ``threads``, ``steps``.
    """
    from flyviz.model.batch import BatchEngine

    threads = threads or default_threads()
    single = Engine(ckpt, threads=threads, kernel=kernel)
    batch = BatchEngine(ckpt, streams, threads=threads, kernel=kernel)
    single.prepare()
    batch.prepare()
    rng = np.random.default_rng(0)
    vocab = ckpt.config.vocabulary
    single_times: list[np.ndarray] = []
    batch_times: list[float] = []
    try:
        for _ in range(3):  # warm-up
            batch.step(rng.integers(3, vocab, streams))
        rounds = max(1, min(rounds, steps))
        for r in range(rounds):
            count = steps // rounds + (1 if r < steps % rounds else 0)
            single_times.append(time_steps(single, count * 4, seed=r))
            for _ in range(count):
                tokens = rng.integers(3, vocab, streams)
                start = time.perf_counter()
                batch.step(tokens)
                batch_times.append(time.perf_counter() - start)
    finally:
        single.close()
        batch.close()
    single_s = float(np.median(np.concatenate(single_times)))
    batch_s = float(np.median(batch_times))
    return {
        "readout": ckpt.config.readout_kind, "threads": threads, "streams": streams,
        "steps": len(batch_times), "single_kernel": single.kernel, "batch_kernel": batch.kernel,
        "single_ms": 1e3 * single_s, "batch_ms": 1e3 * batch_s,
        "single_tokens_per_s": 1.0 / single_s, "batch_tokens_per_s": streams / batch_s,
        "speedup": (streams / batch_s) / (1.0 / single_s),
    }


def run_trace_bench(spec: str | None = None, window: int = 64, threads: int | None = None,
                    rounds: int = 5, log: Log | None = None,
                    kernels: Sequence[str | None] = (None,),
                    dataset_dir: str | Path | None = None) -> dict[str, Any]:
    """One trace over a ``window``-token run against ``window`` forward steps, in one run.

    Per kernel, rounds alternate: ``window`` plain forward steps (one run from
    a reset state, the engine as every run uses it), then one trace of the
    same tokens: the forward run that records the tape
    (:func:`~flyviz.model.attribution.record_tape`) and the backward sweep
    over the whole window (:meth:`~flyviz.model.attribution.BackwardEngine.sweep`).
    The pruned graph (two more sparse products per step, once) and the
    ``W^T`` layout are timed once.

    Returns
    -------
    dict
        ``threads``, ``model``, ``window``, ``model_load_s``, and per kernel:
        ``forward_ms`` (the plain steps, median over rounds), ``tape_ms`` (the
        recorded forward run), ``sweep_ms``, ``trace_ms`` (tape + readout +
        sweep), ``sweep_ratio`` (sweep / forward), ``trace_ratio`` (trace /
        forward), ``graph_s``, ``prepare_s`` (laying out ``W^T``), and
        ``tape_bytes`` / ``tape_bytes_gradient`` (x and s; with the slopes too).
    """
    from flyviz.model.attribution import BackwardEngine, record_tape
    from flyviz.model.explain import Attribution, readout_cotangent
    from flyviz.model.resolve import load_model

    log = log or (lambda _line: None)
    spec = spec or "demo"
    threads = threads or default_threads()
    results: dict[str, Any] = {"threads": threads, "window": window, "kernels": []}
    log(f"loading {spec}")
    start = time.perf_counter()
    ckpt = load_model(spec, dataset_dir=dataset_dir)
    results["model_load_s"] = time.perf_counter() - start
    results["model"] = ckpt.name
    rng = np.random.default_rng(0)
    ids = [ckpt.config.bos_token_id] + [int(t) for t in rng.integers(3, ckpt.config.vocabulary,
                                                                     window - 1)]
    position = len(ids) - 1
    for kernel in kernels:
        engine = Engine(ckpt, threads=threads, kernel=kernel)
        start = time.perf_counter()
        backward = BackwardEngine(ckpt, threads=threads, kernel=kernel)
        backward.transposed_product(engine.interventions, 0, np.zeros(ckpt.config.neurons,
                                                                      np.float32))
        prepare_s = time.perf_counter() - start
        engine.prepare()
        forward, tape_times, sweeps, traces = [], [], [], []
        try:
            log(f"{backward.kernel}: {rounds} rounds of {window} forward steps and one trace")
            for _ in range(rounds):
                engine.reset()
                start = time.perf_counter()
                for token in ids:
                    engine.step(token)
                engine.wait_background()
                forward.append(time.perf_counter() - start)
                start = time.perf_counter()
                tape = record_tape(engine, ids)
                engine.wait_background()
                taped = time.perf_counter()
                c, const = readout_cotangent(ckpt, tape.x(position), int(np.argmax(
                    tape.logits(position))))
                sweep = backward.sweep(tape, {position: c})
                done = time.perf_counter()
                tape_times.append(taped - start)
                sweeps.append(done - taped)
                traces.append(done - start)
            target = int(np.argmax(tape.logits(position)))
            attribution = Attribution(
                checkpoint=ckpt, backward=backward, tape=tape, sweep=sweep, mode="decomposition",
                position=position, target=target, versus=None,
                value=float(tape.logits(position)[target] - tape.logits(position).mean()),
                constant=const, token_texts=[str(t) for t in ids], target_text=str(target),
                versus_text=None)
            log(f"{backward.kernel}: pruning the graph once")
            start = time.perf_counter()
            attribution.graph()
            graph_s = time.perf_counter() - start
            slopes = record_tape(engine, ids, slopes=True).nbytes
        finally:
            engine.close()
            backward.close()
        median = {name: 1e3 * float(np.median(values)) for name, values in
                  (("forward_ms", forward), ("tape_ms", tape_times), ("sweep_ms", sweeps),
                   ("trace_ms", traces))}
        results["kernels"].append({
            "kernel": backward.kernel, **median,
            "sweep_ratio": median["sweep_ms"] / median["forward_ms"],
            "trace_ratio": median["trace_ms"] / median["forward_ms"],
            "graph_s": graph_s, "prepare_s": prepare_s, "transpose_s": backward.transpose_s,
            "completeness_error": attribution.completeness_error,
            "tape_bytes": tape.nbytes, "tape_bytes_gradient": slopes,
            "cotangent_bytes": int(sweep.cotangents.nbytes) if sweep.cotangents is not None
            else 0})
    results["llvm_kernel"] = kernel_status()
    return results
