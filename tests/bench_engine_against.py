"""The engine and the batch engine of this tree against those of another revision, in one run.

``flyviz bench`` on a shared machine moves by tens of percent from run to run, more than a
change to the step can; this times both versions of the step on the same full-size
synthetic rank-64 model in one process, rounds alternating (the other revision's
``engine.py``/``batch.py`` are read with ``git show``; the rest of flyviz is this tree's),
and checks that they give the same logits. It prints medians and their ratio::

    PYTHONPATH=$PWD python tests/bench_engine_against.py --revision 5e0a681 --steps 40

With ``--kernel llvm`` both engines run the compiled sparse kernel, the revision's
engine laid out by that revision's ``kernels.py``, so that a change to the kernel is
timed against the kernel before it::

    PYTHONPATH=$PWD python tests/bench_engine_against.py --revision 97ed0c8 --kernel llvm --no-batch
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

from flyviz.model import batch as batch_now
from flyviz.model import engine as engine_now
from flyviz.model import engine_core
from flyviz.model.synthetic import FULL_EDGES, FULL_NEURONS, FULL_SLOT, make_random_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def module_at(revision: str, path: str, folder: Path) -> ModuleType:
    """``path`` as it was at ``revision``, imported under a name of its own."""
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    file = folder / (Path(path).stem + "_at_revision.py")
    file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(engines: dict[str, object], tokens: np.ndarray, rounds: int) -> dict[str, list[float]]:
    """Step times of each engine over ``tokens``, rounds alternating which goes first."""
    times: dict[str, list[float]] = {name: [] for name in engines}
    for number in range(rounds):
        order = list(engines.items())
        for name, engine in (order if number % 2 == 0 else order[::-1]):
            engine.reset()  # type: ignore[attr-defined]
            for token in tokens:
                start = time.perf_counter()
                engine.step(token)  # type: ignore[attr-defined]
                if hasattr(engine, "wait_background"):
                    engine.wait_background()
                times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", required=True, help="git revision to compare with")
    parser.add_argument("--steps", type=int, default=40, help="tokens per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--streams", type=int, default=16, help="columns of the batch engine")
    parser.add_argument("--kernel", choices=("scipy", "llvm"), default=None,
                        help="sparse kernel of both single-stream engines (default: the "
                             "default one); llvm lays the revision's engine out with the "
                             "revision's kernels.py")
    parser.add_argument("--no-batch", action="store_true", help="skip the batch engines")
    args = parser.parse_args()
    ck = make_random_checkpoint(FULL_NEURONS, FULL_EDGES, d_embed=32, delay_k=8,
                                neurons_per_slot=FULL_SLOT, vocabulary=1024, readout_rank=64,
                                seed=0, with_anatomy=False)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as scratch:
        engine_then = module_at(args.revision, "flyviz/model/engine.py", Path(scratch))
        batch_then = module_at(args.revision, "flyviz/model/batch.py", Path(scratch))
        tokens = rng.integers(3, 1024, args.steps)
        single = {"then": engine_then.Engine(ck, threads=2, kernel=args.kernel),
                  "now": engine_now.Engine(ck, threads=2, kernel=args.kernel)}
        if args.kernel == "llvm":
            kernels_then = module_at(args.revision, "flyviz/model/kernels.py", Path(scratch))
            kernels_now = engine_core.kernels
            engine_core.kernels = kernels_then  # type: ignore[assignment]
            try:
                single["then"].prepare()  # laid out by the revision's kernel
            finally:
                engine_core.kernels = kernels_now  # type: ignore[assignment]
            single["now"].prepare()
            print("kernels: " + ", ".join(f"{name} {type(e.row_blocks[0].layout).__module__}"
                                          for name, e in single.items()))
        times = timed(single, tokens, args.rounds)
        for engine in single.values():
            engine.reset()
        same = all(np.array_equal(single["then"].step(int(t)).copy(), single["now"].step(int(t)))
                   for t in tokens)
        report("engine, ms/token", times, same)
        if args.no_batch:
            return
        columns = rng.integers(3, 1024, (max(1, args.steps // 2), args.streams))
        batches = {"then": batch_then.BatchEngine(ck, args.streams, threads=2),
                   "now": batch_now.BatchEngine(ck, args.streams, threads=2)}
        times = timed(batches, columns, args.rounds)
        for engine in batches.values():
            engine.reset()
        same = all(np.array_equal(batches["then"].step(t, logits=True),
                                  batches["now"].step(t, logits=True)) for t in columns)
        report(f"batch of {args.streams}, ms/step", times, same)


def report(what: str, times: dict[str, list[float]], same: bool) -> None:
    then, now = (float(np.median(times[k])) * 1000 for k in ("then", "now"))
    print(f"{what}: revision {then:.2f}, this tree {now:.2f} (medians of {len(times['now'])}); "
          f"ratio {now / then:.3f}; logits {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
