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


if __name__ == "__main__":
    raise SystemExit(main())
