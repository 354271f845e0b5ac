"""Cost of the dynamical portrait at full size: the demo brain (49,393 neurons, 9,050,172
synapses), a prompt of 50 positions (BOS included), 20 eigenvalues per position.

Times :func:`flyviz.analysis.dynamics.portrait` (the eigenvalues of every step Jacobian by
ARPACK on ``J v``, the memory and spread products, the driving modes) after the run is
recorded, and prints the median over ``--repeats`` runs, the Jacobian-vector products per
position and the time of one product; per position, the wall and CPU time so far (CPU
seconds of all the process's threads, less sensitive to other jobs than wall time). The
target is 5 minutes on the development VM. The machine's other load changes the numbers:
run it alone, e.g.::

    flock /tmp/flyviz-heavy.lock .venv/bin/python tests/bench_dynamics.py --repeats 1

``--products`` times one ``J v`` product's sparse part instead, in one run: ``W' v`` in
float32 (scipy's and the compiled kernel, one and two threads) and in float64 (scipy), and
the multi-column products the lockstep eigenvalues use (per column); then the eigenvalues
of ``--compare`` positions one at a time (``at_once=1``) and in lockstep, in CPU seconds
per product. Medians of interleaved rounds, with ratios to float32 scipy on one thread.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=50, help="positions, BOS included")
    parser.add_argument("--eigenvalues", type=int, default=20, help="eigenvalues per position")
    parser.add_argument("--repeats", type=int, default=1, help="runs to take the median of")
    parser.add_argument("--kernel", default=None, help="scipy or llvm (default: as flyviz)")
    parser.add_argument("--products", action="store_true",
                        help="time one product's ways instead of the portrait")
    parser.add_argument("--compare", type=int, default=6, metavar="P",
                        help="with --products: positions whose eigenvalues are found one at "
                             "a time and in lockstep (0: skip)")
    args = parser.parse_args()

    from flyviz.analysis.dynamics import DynamicsSettings, portrait
    from flyviz.model.attribution import BackwardEngine, record_tape
    from flyviz.model.engine import Engine
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    checkpoint = load_model("demo")
    tokenizer = tokenizer_for(checkpoint)
    text = ("Once upon a time, there was a little girl named Lily. She loved to play in the "
            "park with her dog. One day, she saw a big red ball under a tree and ran to get "
            "it, but the ball rolled away into the grass and she laughed.")
    ids = [checkpoint.config.bos_token_id] + tokenizer.encode(text)
    if len(ids) < args.positions:
        raise SystemExit(f"the bench's text has only {len(ids)} positions")
    ids = ids[:args.positions]
    print(f"demo brain: {checkpoint.config.neurons:,} neurons, {checkpoint.n_edges:,} synapses; "
          f"{len(ids)} positions, {args.eigenvalues} eigenvalues each")
    engine = Engine(checkpoint, kernel=args.kernel)
    tape = record_tape(engine, ids, slopes=True)
    engine.close()
    if args.products:
        return products(checkpoint, tape, args)
    settings = DynamicsSettings(eigenvalues=args.eigenvalues)
    totals, per_product = [], []
    with BackwardEngine(checkpoint, kernel=args.kernel) as backward:
        for repeat in range(args.repeats):
            started, cpu = time.perf_counter(), time.process_time()

            def progress(done: int, total: int, started: float = started,
                         cpu: float = cpu) -> None:
                print(f"  eigenvalues of {done}/{total} positions: "
                      f"{time.perf_counter() - started:.1f} s wall, "
                      f"{time.process_time() - cpu:.1f} CPU s", flush=True)

            found = portrait(backward, tape, settings, cell_types=checkpoint.anatomy.cell_type
                             if checkpoint.anatomy is not None else None, progress=progress)
            seconds = time.perf_counter() - started
            cpu_seconds = time.process_time() - cpu
            totals.append(seconds)
            per_product.append(seconds / max(1, found.products))
            print(f"run {repeat + 1}: {seconds:.1f} s ({cpu_seconds:.1f} CPU s), "
                  f"{found.products} J.v products "
                  f"({found.products / len(ids):.0f} per position), spectral radius "
                  f"{found.spectral_radius.min():.4f}..{found.spectral_radius.max():.4f}, "
                  f"half-life {found.half_life_tokens} tokens", flush=True)
    median = statistics.median(totals)
    print(f"portrait median {median:.1f} s ({median / 60:.2f} min; target 5 min, ratio "
          f"{median / 300:.2f}); {statistics.median(per_product) * 1e3:.1f} ms per product "
          f"(all work included), kernel {backward.kernel}")
    return 0


def products(checkpoint, tape, args) -> int:
    """Medians of the ways to compute ``W' v`` (ms per column), and the eigenvalues of a few
    positions one at a time against in lockstep."""
    import numpy as np
    import scipy.sparse.linalg  # noqa: F401  (ARPACK's BLAS loaded before the limits below)
    from scipy.sparse import csr_matrix
    from threadpoolctl import threadpool_limits

    from flyviz.analysis.dynamics import StepJacobians, eigenvalues_in_lockstep, leading_eigen
    from flyviz.model import kernels
    from flyviz.model.attribution import BackwardEngine

    n = checkpoint.config.neurons
    rng = np.random.default_rng(0)
    v32 = rng.standard_normal(n).astype(np.float32)
    blocks = rng.standard_normal((n, 16)).astype(np.float32)
    w64 = csr_matrix((np.asarray(checkpoint.w_values, np.float64),
                      np.asarray(checkpoint.w_indices), np.asarray(checkpoint.w_offsets)),
                     shape=(n, n))
    v64 = v32.astype(np.float64)
    engines = {(kernel, threads): BackwardEngine(checkpoint, threads=threads, kernel=kernel)
               for kernel in ("scipy", "llvm") for threads in (1, 2)}
    ways = {}
    for (_, threads), backward in engines.items():
        ways[f"W'v float32, {backward.kernel}, {threads} thread(s)"] = (
            1, lambda b=backward: b.forward_product(tape.interventions, 0, v32))
    ways["W'v float64, scipy, 1 thread"] = (1, lambda: w64 @ v64)
    for kernel in ("scipy", "llvm"):
        for columns in (8, 16):
            ways[f"W'V float32, {kernels.resolve_multi(kernel, columns)}, {columns} columns, "
                 f"1 thread"] = (columns, lambda c=columns, b=engines[(kernel, 1)]:
                                 b.forward_products(tape.interventions, 0,
                                                    np.ascontiguousarray(blocks[:, :c])))
    wall: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    with threadpool_limits(1):
        for _, run in ways.values():
            run()  # lay out, compile
        for _ in range(max(5, 5 * args.repeats)):
            for name, (columns, run) in ways.items():
                started, clock = time.perf_counter(), time.process_time()
                run()
                wall[name].append((time.perf_counter() - started) / columns)
                cpu[name].append((time.process_time() - clock) / columns)
    base = statistics.median(cpu["W'v float32, scipy, 1 thread(s)"])
    print(f"{'W v of one J v product, per column':<46} {'wall ms':>8} {'CPU ms':>8} {'CPU ratio':>9}")
    for name in ways:
        c = statistics.median(cpu[name])
        print(f"{name:<46} {statistics.median(wall[name]) * 1e3:8.2f} {c * 1e3:8.2f} "
              f"{c / base:9.2f}")
    for backward in engines.values():
        backward.close()
    if args.compare:
        from flyviz.model.engine import SINGLE_THREADED_BLAS

        positions = list(range(min(args.compare, tape.steps)))
        with BackwardEngine(checkpoint, kernel=args.kernel) as backward, SINGLE_THREADED_BLAS:
            rows = []
            for label in ("one at a time", "in lockstep"):
                jac = StepJacobians(backward, tape)
                started, clock = time.perf_counter(), time.process_time()
                if label == "in lockstep":
                    eigenvalues_in_lockstep(jac, positions, args.eigenvalues, seed=0,
                                            tolerance=1e-9)
                else:
                    for t in positions:
                        leading_eigen(jac.operator(t), n, args.eigenvalues, seed=0, t=t,
                                      tolerance=1e-9)
                rows.append((label, jac.products, time.perf_counter() - started,
                             time.process_time() - clock))
        print(f"\neigenvalues of {len(positions)} positions ({args.eigenvalues} each):")
        for label, count, seconds, cpu_seconds in rows:
            print(f"  {label:<14} {count} products, {seconds:.1f} s wall, {cpu_seconds:.1f} CPU s,"
                  f" {cpu_seconds / count * 1e3:.2f} CPU ms per product"
                  f" (ratio {cpu_seconds / rows[0][3]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
