"""What bounds a full-size rank-64 step from below on this machine: CPU time, not memory.

``flyviz bench`` compares a step with the *memory floor*, the time to stream the bytes it
reads. A step cannot beat a second bound either: the CPU time its parts need, shared
among the cores. This measures both on the full-size synthetic rank-64 model, in one run,
rounds alternating, medians::

    PYTHONPATH=$PWD python tests/bench_kernel_bound.py --rounds 15

- ``W @ x``, one thread per row block, each block timed alone on one thread (its CPU
  time), then the same blocks with every source index folded into the first 4,096
  neurons (the same layout and bytes, but ``x`` then sits in the L1 cache): if the
  folded product is not much faster, the kernel is bound by its gathers themselves, not
  by where ``x`` lives;
- the rest of a step on one thread (the update, the mean ``|x|`` and the readout);
- the memory floor of the engine's bytes on the engine's threads (as ``flyviz bench``).

It prints the CPU bound of a step, ``(product CPU + rest) / threads``, and its ratio to
the floor: a step that overlapped everything perfectly would still take that long.
"""

from __future__ import annotations

import argparse
import copy
import time

import numpy as np

from flyviz.model.bench import StreamFloor, full_size_checkpoint, step_buffers
from flyviz.model.engine import Engine
from flyviz.model.engine_core import SINGLE_THREADED_BLAS


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _product_cpu(layouts: list, x: np.ndarray, outputs: list[np.ndarray]) -> float:
    """Seconds of ``W @ x`` with every row block run on this one thread in turn."""
    start = time.perf_counter()
    for layout, out in zip(layouts, outputs):
        layout.matvec(x, out)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of each measurement")
    parser.add_argument("--kernel", default="llvm", choices=("llvm", "scipy"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    ckpt = full_size_checkpoint(64)
    engine = Engine(ckpt, threads=args.threads, kernel=args.kernel)
    engine.prepare()
    for token in (5, 6, 7):
        engine.step(token)
    engine.wait_background()
    x = engine.state.copy()
    layouts = [block.layout for block in engine.row_blocks]
    outputs = [np.zeros(block.stop - block.start, dtype=np.float32) for block in engine.row_blocks]
    folded = []
    for layout in layouts:
        other = copy.copy(layout)
        if hasattr(layout, "sidx"):        # the compiled kernel's SELL-8 copy of the graph
            other.sidx = layout.sidx % layout.sidx.dtype.type(4096)
        else:                              # scipy's CSR rows
            other.indices = layout.indices % layout.indices.dtype.type(4096)
        folded.append(other)
    drive = engine.drive(5)
    floor = StreamFloor(list(step_buffers(engine).values()), args.threads)

    def rest() -> None:
        engine._ready = True               # the product is taken as done: time the rest alone
        with SINGLE_THREADED_BLAS:         # as in a step
            state = engine._update(drive, None, engine.tokens_seen, None)
            float(np.abs(state).mean(dtype=np.float64))
            engine.readout(state)

    times: dict[str, list[float]] = {"product": [], "product, x in L1": [], "rest": [],
                                     "step": [], "floor": []}
    try:
        for _ in range(args.rounds):
            times["product"].append(_product_cpu(layouts, x, outputs))
            times["product, x in L1"].append(_product_cpu(folded, x, outputs))
            engine.state[:] = x
            times["rest"].append(_timed(rest))
            engine.state[:] = x
            engine.step(5)
            engine.wait_background()
            times["step"].append(_timed(lambda: (engine.step(6), engine.wait_background())))
            floor.run()
            times["floor"].append(float(np.median([floor.run() for _ in range(3)])))
    finally:
        engine.close()
        floor.close()
    ms = {name: 1e3 * float(np.median(values)) for name, values in times.items()}
    edges = ckpt.n_edges
    print(f"kernel {engine.kernel}, {args.threads} threads, {edges:,} edges, "
          f"medians of {args.rounds} rounds")
    print(f"  W @ x, CPU on one thread:   {ms['product']:7.2f} ms  "
          f"({1e6 * ms['product'] / edges:.2f} ns an edge)")
    print(f"  the same, x in L1:          {ms['product, x in L1']:7.2f} ms  "
          f"({1e6 * ms['product, x in L1'] / edges:.2f} ns an edge)")
    print(f"  rest of a step, one thread: {ms['rest']:7.2f} ms")
    bound = (ms["product"] + ms["rest"]) / args.threads
    print(f"  CPU bound of a step:        {bound:7.2f} ms  = (W @ x + rest) / {args.threads}")
    print(f"  memory floor:               {ms['floor']:7.2f} ms  "
          f"({floor.nbytes / 1e6:.1f} MB)")
    print(f"  a step:                     {ms['step']:7.2f} ms")
    print(f"  CPU bound / floor {bound / ms['floor']:.2f}; step / floor "
          f"{ms['step'] / ms['floor']:.2f}; step / CPU bound {ms['step'] / bound:.2f}")


if __name__ == "__main__":
    main()
