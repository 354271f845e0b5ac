"""``flyviz verify SPEC``: check every file, the graph and the golden traces of a model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_kernel_option, kernel_from_args,
                                      load_model_from_args)

EPILOG = """\
what is checked (the origin column says "authors N" for check N of the dataset
authors' own verifier, verify_connectome_package.py, and "flyviz" for flyviz's own):
  files        every file's size and SHA-256 against its manifest (ngxson's
               model.safetensors against the release's digest or the Hugging
               Face cache's), whatever its size
  dataset      the 18 checks of the dataset authors' own verifier, computed as
               theirs: hashes, counts, offsets, index ranges, finite weights,
               sign counts, frozen-buffer digests recomputed from the arrays,
               the int16 copy (in float32, within the recorded error x
               1.000001), cell-type index, somata, unique body ids
  binding      the weights' frozen-buffer digests against the graph they run on
  checkpoint   shapes, index ranges, finite values
  release      a wordbrain release's selector name (older flyviz names such as
               min-ce are read with a note, never failed)
  golden       a replay of every golden trace the manifest (or a release's
               web/) carries: tokens identical, top-1 probability within 2e-4,
               mean |x| within 2e-5 (as parity.mjs); then, stricter on purpose,
               the final state (after the last token fed, unless it is EOS)

flyviz's own checks only add to the authors': a dataset their verifier passes,
flyviz's dataset checks pass too (what flyviz does not need is skipped).

exit status: 0 every check passed (skipped ones say why), 1 a check failed,
2 the model could not be loaded (the first problem found is printed).

examples:
  flyviz verify fernandofernandes/fly-wordbrain-rank64
  flyviz verify ~/fly-models/web --dataset ~/fly-models/dataset --json
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz verify``."""
    parser.add_argument("spec", metavar="SPEC",
                        help="model folder, hub repo id or 'demo'")
    add_dataset_option(parser)
    add_kernel_option(parser)
    parser.add_argument("--no-golden", action="store_true",
                        help="skip the golden-trace replays (the slow part)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def table(report: Any) -> str:
    """The report as a text table, one check per line, then the summary.

    Each row names its origin: ``authors N`` for check N of the dataset
    authors' 18, ``flyviz`` for flyviz's own.
    """
    lines = [f"model    {report.model} ({report.layout})"]
    if report.source:
        lines.append(f"source   {report.source}")
    if report.dataset:
        lines.append(f"dataset  {report.dataset}")
    lines.append("")
    width = max((len(c.name) for c in report.checks), default=10)
    width = min(width, 44)
    lines.append(f"{'group':<11} {'origin':<10} {'check':<{width}}  {'result':<6}  detail")
    for check in report.checks:
        lines.append(f"{check.group:<11} {check.origin:<10} {check.name[:width]:<{width}}  "
                     f"{check.status.upper() if check.status == 'fail' else check.status:<6}  "
                     f"{check.detail}")
    lines.append("")
    lines.append(report.summary())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Load the model, verify it and print the table (or JSON)."""
    from flyviz.model.verify import verify_checkpoint

    kernel = kernel_from_args(args)
    ckpt = load_model_from_args(args)
    tty = sys.stderr.isatty()

    def progress(label: str, fraction: float) -> None:
        if tty:
            sys.stderr.write(f"\rverifying: {label} {100 * fraction:3.0f}%\x1b[K")
            if fraction >= 1.0:
                sys.stderr.write("\r\x1b[K")

    report = verify_checkpoint(ckpt, golden=not args.no_golden, progress=progress,
                               kernel=kernel)
    print(json.dumps(report.to_dict(), indent=2) if args.json else table(report))
    return 0 if report.passed else 1
