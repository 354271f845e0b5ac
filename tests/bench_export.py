"""Benchmark: movie export of a full-size brain (not a test; run by hand).

    python tests/bench_export.py [--frames 1000] [--size 1280x720] [--format mp4]

Measures, in one run, on whatever OpenGL the machine offers (software GL on
a CI box):

1. raw render speed of the neuron cloud (49,393 neurons, no overlays);
2. render speed with overlays (text, bars, colourbar);
3. end-to-end export speed (render + encode, frames/s) over ``--frames``
   frames, and resident memory growth across the export (flat memory is the
   goal: frames are streamed, never cached).

Neuron positions are the 2,048 measured somata of the shared reference
sample tiled (with jitter) to 49,393 when that folder is present, else the
synthetic full-size anatomy. Activity is a smooth random process with a few
travelling hot spots, so the picture changes every frame as in a real run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FULL = 49_393
SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference" / "data" / "neuron-layout-2048.json"


def positions(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """``(positions_voxels, valid, description)`` for 49,393 neurons."""
    if SHARED.is_file():
        sample = np.array([n["position"] for n in json.loads(SHARED.read_text())["neurons"]],
                          dtype=np.float32)
        pos = sample[rng.integers(0, len(sample), FULL)] + rng.normal(0, 600, (FULL, 3)).astype(np.float32)
        valid = rng.random(FULL) > 0.1035  # 5,114 of 49,393 somata are missing in the real data
        return pos, valid, "2,048 measured somata tiled to 49,393"
    from flyviz.model.synthetic import make_random_checkpoint

    anat = make_random_checkpoint(FULL, 1000, vocabulary=32, d_embed=4).anatomy
    return anat.positions, anat.valid, "synthetic full-size anatomy"


def make_recording(tokens: int, rng: np.random.Generator, pos: np.ndarray):
    from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame
    from flyviz.record.recording import Recording

    words = ("Once upon a time there was a little girl named Lily who loved to play in the park "
             "with her dog Max and one day they found a big red ball under a tree").split()
    rec = Recording(FULL, {"model_name": "benchmark-49k"})
    state = np.zeros(FULL, np.float32)
    centres = pos[rng.integers(0, FULL, 5)].astype(np.float64)
    text = ""
    for i in range(tokens):
        centres += rng.normal(0, 3000, centres.shape)
        drive = np.zeros(FULL, np.float64)
        for c in centres:
            drive += np.exp(-np.sum((pos - c) ** 2, axis=1) / (2 * 9000.0 ** 2))
        state = (0.7 * state + 0.3 * np.tanh(rng.normal(0, 0.5, FULL) + 2 * drive * rng.choice([-1, 1]))
                 ).astype(np.float32)
        word = " " + words[i % len(words)]
        prompt = i < 8
        if not prompt:
            text += word
        probs = np.sort(rng.dirichlet(np.ones(10) * 0.3))[::-1].astype(np.float32)
        rec.append(Frame(position=i, phase=PHASE_PROMPT if prompt else PHASE_GENERATION,
                         input_token_id=5, input_text=word, predicted_token_id=6,
                         predicted_text=word, probability=float(probs[0]),
                         top_k_ids=np.arange(10, dtype=np.int32), top_k_probabilities=probs,
                         top_k_text=tuple(words[(i + j) % len(words)] for j in range(10)),
                         state=state, mean_abs_state=float(np.abs(state).mean()),
                         text_so_far=text, generation_index=None if prompt else i - 8))
    return rec


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--size", default="1280x720")
    parser.add_argument("--format", default="mp4", choices=("mp4", "webm", "gif", "png"))
    parser.add_argument("--frames-per-token", type=int, default=6)
    parser.add_argument("--backend", choices=("egl", "default", "osmesa"), default=None,
                        help="OpenGL to render with (default: the first that works)")
    args = parser.parse_args()

    from flyviz.export import ExportOptions, export_recording
    from flyviz.model.checkpoint import Anatomy
    from flyviz.render.offscreen import FrameRenderer, offscreen_app, parse_size
    from flyviz.render.overlay import overlay_contents

    if args.backend:
        import os

        os.environ["FLYVIZ_OFFSCREEN_GL"] = args.backend
    size = parse_size(args.size)
    rng = np.random.default_rng(0)
    pos_vox, valid, where = positions(rng)
    anatomy = Anatomy(positions=pos_vox, valid=valid, kind="measured")
    k = args.frames_per_token
    tokens = -(-args.frames // k)
    t0 = time.perf_counter()
    rec = make_recording(tokens, rng, pos_vox)
    _, backend = offscreen_app()
    print(f"positions: {where}; {int(valid.sum()):,} drawn; OpenGL backend: {backend}")
    print(f"recording: {tokens} tokens made in {time.perf_counter() - t0:.1f} s")

    def timed(renderer, overlays, n=40):
        times = []
        for i in range(n):
            state = rec.state(i % len(rec))
            start = time.perf_counter()
            renderer.render_state(state, overlays[i % len(overlays)] if overlays else None,
                                  renderer.base_azimuth + i)
            times.append(time.perf_counter() - start)
        return statistics.median(times[3:])

    with FrameRenderer(anatomy.positions_um(), valid, size, overlays=False) as r:
        raw = timed(r, None)
    contents = overlay_contents(rec, 0, 40)
    with FrameRenderer(anatomy.positions_um(), valid, size, model_name="benchmark-49k") as r:
        with_text = timed(r, contents)
    print(f"render {size[0]}x{size[1]}, {FULL:,} neurons: cloud only {1000 * raw:.1f} ms/frame "
          f"= {1 / raw:.1f} fps (median of 37); with overlays {1000 * with_text:.1f} ms "
          f"= {1 / with_text:.1f} fps")

    samples: list[tuple[int, float]] = []

    def progress(done: int, total: int) -> None:
        if done % 25 == 0 or done == total:
            samples.append((done, rss_mb()))

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / ("bench" + ("" if args.format == "png" else "." + args.format))
        opts = ExportOptions(size=size, frames_per_token=k, fps=30, orbit=10.0)
        start = time.perf_counter()
        export_recording(rec, anatomy, out, opts, progress=progress)
        elapsed = time.perf_counter() - start
        n_bytes = (sum(p.stat().st_size for p in out.iterdir()) if out.is_dir()
                   else out.stat().st_size)
    frames = opts.frame_count(tokens)
    base = next((m for d, m in samples if d >= 50), samples[0][1])
    print(f"export {args.format} {size[0]}x{size[1]}: {frames} frames in {elapsed:.1f} s = "
          f"{frames / elapsed:.1f} frames/s end to end (render + encode), "
          f"{n_bytes / 2**20:.1f} MB written")
    print(f"memory: RSS {base:.0f} MB at frame 50, {samples[-1][1]:.0f} MB at frame {frames}: "
          f"growth {samples[-1][1] - base:+.1f} MB; peak {max(m for _, m in samples):.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
