"""``flyviz verify SPEC``: check every file, the graph and the golden traces of a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
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

SPEC may be a fly-connectome-malecns-166k folder: then the 17 checks of the
authors' verifier for that dataset run (every file's SHA-256, counts, offsets,
source range, finite weights, sign counts, both label indices, unique body ids,
the four populations, both hop arrays, raw weights), each reported, and their
closing line is printed; with --dataset naming a fly-connectome-49k folder,
flyviz also joins the two by body id (the 49k neurons are the 166k ones of five
superclasses, in order; each 49k edge is a 166k edge with its sign and its
weight x 9.5299e-4).

exit status: 0 every check passed (skipped ones say why), 1 a check failed,
2 the model could not be loaded (the first problem found is printed).

examples:
  flyviz verify fernandofernandes/fly-wordbrain-rank64
  flyviz verify ~/fly-models/web --dataset ~/fly-models/dataset --json
  flyviz verify ~/fly-models/malecns-166k --dataset ~/fly-models/dataset
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz verify``."""
    parser.add_argument("spec", metavar="SPEC",
                        help="model folder, hub repo id, 'demo', or a "
                             "fly-connectome-malecns-166k dataset folder")
    add_dataset_option(parser)
    add_kernel_option(parser)
    parser.add_argument("--no-golden", action="store_true",
                        help="skip the golden-trace replays (the slow part)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _check_lines(checks: Any) -> list[str]:
    """The header and one line per check: group, origin, name, result, detail."""
    width = max((len(c.name) for c in checks), default=10)
    width = min(width, 44)
    lines = [f"{'group':<11} {'origin':<10} {'check':<{width}}  {'result':<6}  detail"]
    for check in checks:
        lines.append(f"{check.group:<11} {check.origin:<10} {check.name[:width]:<{width}}  "
                     f"{check.status.upper() if check.status == 'fail' else check.status:<6}  "
                     f"{check.detail}")
    return lines


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
    lines.extend(_check_lines(report.checks))
    lines.append("")
    lines.append(report.summary())
    return "\n".join(lines)


def _closing_line(authors_line: str, rows: list[Any], dataset: Path | None) -> str:
    """The line that ends a 166k verification, written after every row (the join's too):
    the authors' closing line when all passed, else what failed first, then that line."""
    from flyviz.model.formats.malecns import GROUP

    failed = [r for r in rows if r.failed]
    authors_failed = [r for r in failed if r.group == GROUP]
    join_failed = [r for r in failed if r.group != GROUP]
    if authors_failed:
        names = "; ".join(f"{r.origin} {r.name}" for r in authors_failed[:3]) + (
            f" and {len(authors_failed) - 3} more" if len(authors_failed) > 3 else "")
        skipped = f"; the join to {dataset} was skipped" if dataset is not None else ""
        return f"{authors_line.rstrip('.')}: {names}{skipped}."
    if join_failed:
        names = "; ".join(r.name for r in join_failed)
        return (f"The join to {dataset} failed ({len(join_failed)} check(s): {names}), "
                f"though the authors' checks passed: {authors_line}")
    if dataset is not None:
        joined = sum(1 for r in rows if r.group != GROUP)
        return f"{authors_line} The join to {dataset} passed ({joined} checks)."
    return authors_line


def _verify_malecns(args: argparse.Namespace, folder: Path) -> int:
    """The 17 checks of a fly-connectome-malecns-166k folder, and with ``--dataset`` its
    join to fly-connectome-49k; 0 when all pass, 1 otherwise."""
    from flyviz.model.checks import SKIP, CheckResult
    from flyviz.model.formats.dataset import DatasetFiles
    from flyviz.model.formats.malecns import (check_malecns, join_central_brain,
                                              load_malecns, summary_line)

    rows = check_malecns(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    authors_line = summary_line(rows, manifest)
    dataset = Path(args.dataset) if args.dataset is not None else None
    if dataset is not None:
        failed = [r for r in rows if r.failed]
        if failed:
            # The join reads the arrays these checks vouch for: not run on a damaged set,
            # and a row says so (else the report reads as if no join was asked for).
            rows.append(CheckResult(
                "join", "joined to the central-brain dataset", SKIP,
                f"not run: {len(failed)} of the authors' checks failed (first: "
                f"{failed[0].name}); the join needs a sound fly-connectome-malecns-166k"))
        else:
            # Hashed just now: the join reads the arrays without hashing them again.
            rows += join_central_brain(load_malecns(folder, verify=False),
                                       DatasetFiles.open(dataset))
    passed = not any(r.failed for r in rows)
    closing = _closing_line(authors_line, rows, dataset)
    if args.json:
        print(json.dumps({"dataset": str(folder), "layout": "malecns-166k",
                          "central_brain": str(dataset) if dataset is not None else None,
                          "passed": passed, "summary": closing,
                          "checks": [r.to_dict() for r in rows]}, indent=2))
    else:
        lines = [f"dataset  {folder} (fly-connectome-malecns-166k)"]
        if dataset is not None:
            lines.append(f"joined   {dataset} (fly-connectome-49k)")
        print("\n".join(lines + [""] + _check_lines(rows) + ["", closing]))
    return 0 if passed else 1


def run(args: argparse.Namespace) -> int:
    """Load the model, verify it and print the table (or JSON)."""
    from flyviz.model.verify import verify_checkpoint

    from flyviz.model.resolve import malecns_folder

    folder = malecns_folder(args.spec)
    if folder is not None:
        return _verify_malecns(args, folder)
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
