"""``flyviz build-demo``: rebuild the embedded demo brain from nothing.

Writes the story corpus, trains the tokenizer, generates the synthetic
connectome, fits the parameters and writes the asset folder (by default the
checkout's ``assets/demo``), showing progress on stderr. ``--scale tiny``
builds a few-thousand-neuron version in seconds; ``--evaluate`` measures the
result against the quality bar afterwards (see :mod:`flyviz.demo.evaluate`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from flyviz.model.errors import InputError


def _default_out() -> Path | None:
    """``assets/demo`` of the source checkout flyviz runs from, if it is one."""
    import flyviz

    root = Path(flyviz.__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "assets").is_dir():
        return root / "assets" / "demo"
    return None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz build-demo``."""
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="asset folder to write (default: assets/demo of this checkout); "
                             "an earlier demo brain there is replaced, a folder holding "
                             "anything else refused")
    parser.add_argument("--scale", choices=("full", "tiny"), default="full",
                        help="full: the real sizes (49,393 neurons, 9,050,172 synapses; "
                             "minutes); tiny: a few thousand neurons (seconds)")
    parser.add_argument("--seed", type=int, default=None, metavar="S",
                        help="seed of every random choice (default: the shipped brain's)")
    parser.add_argument("--atlas-only", action="store_true",
                        help="only (re)compute the demo brain's atlas in an existing asset "
                             "folder (minutes instead of the ~10-minute full build)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="Dask worker processes for the atlas (default: the usable cores; "
                             "0: in this process)")
    parser.add_argument("--evaluate", action="store_true",
                        help="measure the result against the quality bar afterwards")


class _ProgressLine:
    """One self-overwriting progress line on stderr."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.perf_counter()
        self.last = ""
        self.tty = self.stream.isatty()

    def __call__(self, label: str, fraction: float) -> None:
        elapsed = time.perf_counter() - self.started
        line = f"[{fraction:6.1%}] {elapsed:6.1f} s  {label}"
        if self.tty:
            self.stream.write("\r" + line.ljust(78)[:110])
            self.stream.flush()
        elif label != self.last:  # in a log, one line per stage
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last = label

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    """Build the demo brain."""
    from flyviz.demo.build import DEFAULT_SEED, build_demo, check_demo_folder
    from flyviz.fileio import earlier_output, replaced_note

    from flyviz.commands._options import check_cluster_options

    # the atlas, the build's last step, would refuse a bad count only after its minutes
    check_cluster_options(args)
    out = args.out if args.out is not None else _default_out()
    if out is None:
        raise InputError("no source checkout to write assets/demo into; pass --out DIR")
    out = Path(out).expanduser()
    if args.atlas_only:
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {out} is a file; give a folder")
    else:
        # A new or empty folder, or an earlier demo brain holding nothing else: the build
        # replaces it whole, and would take the user's notes put in it along (--atlas-only
        # replaces only its atlas).
        check_demo_folder(out, f"--out {out}")
    from flyviz.analysis.cluster import require_dask

    # the atlas, built last on Dask, would fail only after the minutes of the build
    require_dask("flyviz build-demo", args.workers)
    if args.atlas_only:
        from flyviz.demo.build import build_demo_atlas

        if not (out / "demo.json").is_file():
            raise InputError(f"--atlas-only needs a built demo brain in {out}; run "
                             "'flyviz build-demo' first")
        started = time.perf_counter()
        # The atlas is computed again from the brain: an earlier one is replaced, and the
        # last line says so.
        replaced = earlier_output(out / "atlas", folder="atlas")
        bar = _ProgressLine()
        try:
            atlas = build_demo_atlas(out, workers=args.workers, progress=bar)
        finally:
            bar.close()
        print(f"demo atlas written to {atlas} in {time.perf_counter() - started:.0f} s"
              f"{replaced_note(replaced)}")
        return 0
    seed = DEFAULT_SEED if args.seed is None else int(args.seed)
    if seed < 0:
        raise InputError(f"--seed {seed} must be >= 0")
    # Built again from its seed: an earlier demo brain is replaced, and the line says so.
    replaced = earlier_output(out, folder="demo brain", holding="demo.json")
    bar = _ProgressLine()
    try:
        info = build_demo(out, scale=args.scale, seed=seed, progress=bar,
                          atlas_workers=args.workers)
    finally:
        bar.close()
    q = info["quality"]
    print(f"demo brain written to {out} in {info['build_seconds']:.0f} s "
          f"({info['neurons']:,} neurons, {info['edges']:,} synapses, seed {seed}"
          f"{replaced_note(replaced, inside=True)})")
    print(f"held-out cross-entropy: model {q['cross_entropy_model']:.3f}, unigram "
          f"{q['cross_entropy_unigram']:.3f}, bigram {q['cross_entropy_bigram']:.3f} nats/token")
    if args.evaluate:
        from flyviz.demo.evaluate import evaluate

        result = evaluate(out)
        return 0 if result["pass"] else 1
    return 0
