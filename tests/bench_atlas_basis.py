"""Benchmark: the atlas's principal axes on the demo brain (not a test; run by hand).

    python tests/bench_atlas_basis.py [--tokens 800] [--window 100] [--columns 24,48,96]

Runs the demo brain (49,393 neurons, one thread) over the first ``--tokens``
tokens of its held-out text, in windows of ``--window`` tokens that start from
a fresh state with BOS (as the atlas's windows do; the BOS is not counted), and
compares the covariance sketch's axes (:mod:`flyviz.analysis.atlas_basis`, with
each number of columns in ``--columns``; the atlas uses 24) with the exact
principal axes of the same states (their Gram matrix):

- the share of the states' variance the exact three axes hold, and the sketch's;
- the sketch's variances over the exact ones (the Nyström estimate is low);
- the principal angles between the two subspaces;
- what the sketch costs per 64-stream step (``CovarianceSketch.add``, median).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=800)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--columns", default="24,48,96")
    args = parser.parse_args()

    import threadpoolctl
    from scipy.linalg import subspace_angles

    from flyviz.analysis import atlas_basis
    from flyviz.model.engine import Engine
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.resources import asset_path

    ckpt = load_model("demo")
    tokenizer = FlyTokenizer(ckpt.tokenizer_path)
    text = asset_path("demo", "heldout.txt").read_text(encoding="utf-8")
    ids = tokenizer.encode_batch([text])[0][:args.tokens]
    report: dict[str, object] = {}
    with threadpoolctl.threadpool_limits(1):
        engine = Engine(ckpt, threads=1)
        states = []
        for start in range(0, len(ids), args.window - 1):
            engine.reset()
            engine.step(ckpt.config.bos_token_id)
            for token in ids[start:start + args.window - 1]:
                engine.step(int(token))
                states.append(engine.state.astype(np.float32).copy())
        engine.close()
        x = np.array(states, dtype=np.float64)
        centred = x - x.mean(axis=0)
        total = float(np.einsum("ij,ij->", centred, centred))
        values, vectors = np.linalg.eigh(centred @ centred.T)
        top = np.argsort(values)[::-1][:3]
        exact = (vectors[:, top].T @ centred) / np.sqrt(values[top])[:, None]
        exact_variance = values[top] / len(x)
        report["states"] = len(x)
        report["exact_share"] = float((values[top].sum()) / total)
        report["exact_first_share"] = float(values[top[0]] / total)
        for columns in (int(c) for c in args.columns.split(",")):
            atlas_basis.SKETCH_COLUMNS = columns
            sketch = atlas_basis.CovarianceSketch(x.shape[1])
            for first in range(0, len(x), 64):
                sketch.add(np.ascontiguousarray(x[first:first + 64].T.astype(np.float32)))
            basis = atlas_basis.finish_basis(sketch.sketch, sketch.total, len(x),
                                             total / len(x))
            held = float(((centred @ basis.axes.T) ** 2).sum() / total)
            block = np.ascontiguousarray(x[:64].T.astype(np.float32))
            times = []
            for _ in range(15):
                begin = time.perf_counter()
                sketch.add(block)
                times.append(time.perf_counter() - begin)
            report[f"k={columns}"] = {
                "share": round(held, 4),
                "variance_over_exact": [round(float(v), 3)
                                        for v in basis.variance / exact_variance],
                "angles_rad": [round(float(a), 3)
                               for a in subspace_angles(basis.axes.T, exact.T)],
                "ms_per_64_stream_step": round(1e3 * float(np.median(times)), 1)}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
