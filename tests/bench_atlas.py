"""Benchmark: the neuron atlas on Dask (not a test; run by hand, under the shared lock).

    python tests/bench_atlas.py scaling [--tokens 65536] [--chunk-tokens 16384]
    python tests/bench_atlas.py memory [--sizes 100000,400000]
    python tests/bench_atlas.py demo
    python tests/bench_atlas.py cards [--rounds 20]
    python tests/bench_atlas.py narrow [--tokens 2000] [--rounds 3]

``scaling``
    The demo brain's atlas over the first ``--tokens`` tokens of its story
    corpus with a LocalCluster of 1 worker process, then of 2; tokens/s of
    each (the cluster's start-up excluded) and their ratio.
``memory``
    Peak resident memory of each worker process (sampled every 0.2 s) for
    corpora of each of ``--sizes`` tokens with 2 workers: it should not grow
    with the corpus (run the sizes one at a time to keep each locked run short).
``demo``
    ``flyviz build-demo --atlas-only`` on a copy of ``assets/demo``: the
    whole story corpus, the usable cores.
``cards``
    The shipped demo atlas opened, then the Inspector's card of ``--rounds``
    random neurons read from it: the first (cold) card's time and the median
    of the others (the app reads one per click; target well under 100 ms).
``narrow``
    One chunk of a corpus with fewer windows than ``--batch`` (the first
    ``--tokens`` of the demo's held-out stories, windows of 512): its statistics
    stepped on as many columns as it has windows (rounded up to whole vectors), as
    the atlas does, and on the default 64; process CPU seconds of each, medians of
    ``--rounds``, the two in turn in one process, and whether their bits agree.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ASSET = Path(__file__).resolve().parents[1] / "assets" / "demo"


def _demo_corpus(tokens: int):
    from flyviz.analysis.corpus import build_corpus
    from flyviz.demo.corpus import join_stories, make_corpus
    from flyviz.demo.loader import read_demo_info
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    info = read_demo_info(ASSET)
    train, held_out = make_corpus(int(info["sizes"]["corpus_chars"]), seed=int(info["seed"]))
    ckpt = load_model("demo")
    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-atlas-"))
    text = folder / "stories.txt"
    # Repeated as needed, so that any size can be asked for.
    stories = train + held_out
    text.write_text(join_stories(stories * (1 + tokens // 300_000)), encoding="utf-8")
    corpus = build_corpus([text], tokenizer_for(ckpt), max_tokens=tokens)
    return ckpt, corpus, folder


class _PeakMemory:
    """Peak RSS of every descendant process, sampled in a thread."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for child in self.me.children(recursive=True):
                try:
                    rss = child.memory_info().rss
                    if "spawn_main" in " ".join(child.cmdline()):
                        self.peak[child.pid] = max(self.peak.get(child.pid, 0), rss)
                except Exception:
                    continue
            self._stop.wait(0.2)

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join()
        return self.peak


def _run(ckpt, corpus, workers: int, chunk_tokens: int | None
         ) -> tuple[float, float, dict[int, int]]:
    from flyviz.analysis.atlas import AtlasSettings, build_atlas

    chunk_tokens = chunk_tokens or AtlasSettings.chunk_tokens
    out = Path(tempfile.mkdtemp(prefix="flyviz-bench-out-")) / "a.atlas"
    memory = _PeakMemory()
    try:
        run = build_atlas("demo", ckpt, corpus, out, AtlasSettings(chunk_tokens=chunk_tokens,
                                                                    top_k=10, samples_per_band=0),
                          workers=workers, compact=True)
    finally:
        peak = memory.stop()
        shutil.rmtree(out.parent, ignore_errors=True)
    return run.seconds, run.compute_seconds, peak


def scaling(args) -> dict:
    ckpt, corpus, folder = _demo_corpus(args.tokens)
    try:
        result = {"tokens": corpus.n_tokens, "chunk_tokens": args.chunk_tokens or 16_384}
        for workers in (1, 2):
            total, compute, _ = _run(ckpt, corpus, workers, args.chunk_tokens or 16_384)
            result[f"workers_{workers}"] = {"seconds": round(total, 1),
                                            "compute_seconds": round(compute, 1),
                                            "tokens_per_s": round(corpus.n_tokens / compute)}
            print(f"{workers} worker(s): {compute:.1f} s computing ({total:.1f} s with the "
                  f"cluster's start), {corpus.n_tokens / compute:,.0f} tokens/s", file=sys.stderr)
        result["ratio"] = round(result["workers_2"]["tokens_per_s"]
                                / result["workers_1"]["tokens_per_s"], 2)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def memory(args) -> dict:
    result = {}
    for tokens in (int(t) for t in args.sizes.split(",")):
        ckpt, corpus, folder = _demo_corpus(tokens)
        try:
            total, _, peak = _run(ckpt, corpus, 2, args.chunk_tokens)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        mb = sorted(round(v / 2**20) for v in peak.values())
        result[str(corpus.n_tokens)] = {"seconds": round(total, 1), "peak_worker_mb": mb}
        print(f"{corpus.n_tokens:,} tokens: peak RSS per worker {mb} MB", file=sys.stderr)
    return result


def demo(args) -> dict:
    from flyviz.demo.build import build_demo_atlas

    folder = Path(tempfile.mkdtemp(prefix="flyviz-bench-demo-")) / "demo"
    shutil.copytree(ASSET, folder, ignore=shutil.ignore_patterns("atlas"))
    try:
        start = time.perf_counter()
        build_demo_atlas(folder)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    print(f"demo atlas: {seconds:.0f} s", file=sys.stderr)
    return {"seconds": round(seconds, 1)}


def cards(args) -> dict:
    import numpy as np

    from flyviz.analysis.atlas import Atlas

    started = time.perf_counter()
    atlas = Atlas(ASSET / "atlas")
    opened = time.perf_counter() - started
    neurons = np.random.default_rng(0).choice(49_393, size=args.rounds + 1, replace=False)
    seconds = []
    for neuron in neurons:
        started = time.perf_counter()
        atlas.card(int(neuron))
        seconds.append(time.perf_counter() - started)
    warm = float(np.median(seconds[1:]))
    print(f"atlas open {opened * 1e3:.0f} ms, first card {seconds[0] * 1e3:.0f} ms, "
          f"median card {warm * 1e3:.1f} ms over {args.rounds}", file=sys.stderr)
    return {"open_ms": round(opened * 1e3, 1), "first_card_ms": round(seconds[0] * 1e3, 1),
            "median_card_ms": round(warm * 1e3, 2), "cards": args.rounds}


def narrow(args) -> dict:
    import os
    import statistics

    import numpy as np

    from flyviz.analysis import atlas_stats
    from flyviz.analysis.corpus import build_corpus
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    ckpt = load_model("demo")
    settings = atlas_stats.AtlasSettings()
    corpus = build_corpus([ASSET / "heldout.txt"], tokenizer_for(ckpt), context=settings.context,
                          max_tokens=args.tokens, bos_token_id=ckpt.config.bos_token_id)
    chunk = corpus.chunks(settings.chunk_tokens)[0]
    fitted = atlas_stats.streams_for
    ways = {"fitted": fitted, "64 columns": lambda _chunk, streams: streams}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    parts: dict[str, dict] = {}
    try:
        for r in range(args.rounds):
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                atlas_stats.streams_for = ways[name]
                started = time.process_time()
                parts[name] = atlas_stats.chunk_statistics(ckpt, settings, chunk)
                cpu[name].append(time.process_time() - started)
    finally:
        atlas_stats.streams_for = fitted
    same = all(np.array_equal(parts["fitted"][k], parts["64 columns"][k], equal_nan=True)
               for k in parts["fitted"])
    medians = {name: round(statistics.median(v), 3) for name, v in cpu.items()}
    print(f"{chunk.offsets.size - 1} windows, {chunk.n_tokens:,} tokens: "
          f"{fitted(chunk, settings.streams)} columns {medians['fitted']} CPU s, 64 columns "
          f"{medians['64 columns']} CPU s ({medians['64 columns'] / medians['fitted']:.2f}x); "
          f"bits {'the same' if same else 'DIFFER'}; load {os.getloadavg()[0]:.1f}",
          file=sys.stderr)
    return {"windows": int(chunk.offsets.size - 1), "tokens": int(chunk.n_tokens),
            "cpu_s": medians, "rounds": args.rounds, "same_bits": bool(same)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("scaling", "memory", "demo", "cards", "narrow"))
    parser.add_argument("--tokens", type=int, default=65_536)
    parser.add_argument("--chunk-tokens", type=int, default=None,
                        help="tokens per task (default: 16,384 for scaling, the atlas "
                             "default for memory)")
    parser.add_argument("--sizes", default="100000,400000")
    parser.add_argument("--rounds", type=int, default=None,
                        help="cards to read (cards, default 20); repeats (narrow, default 3)")
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 3 if args.what == "narrow" else 20
    if args.what == "narrow" and args.tokens == parser.get_default("tokens"):
        args.tokens = 2000
    result = {"scaling": scaling, "memory": memory, "demo": demo, "cards": cards,
              "narrow": narrow}[args.what](args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
