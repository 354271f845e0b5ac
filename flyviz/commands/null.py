"""``flyviz null SPEC --kind KIND --seed S --out DIR``: a null model of a brain.

Writes the model again with only its recurrent graph randomised (see
:mod:`flyviz.analysis.nulls`): the same embeddings, neuron parameters and
readout, in the model's own layout, as a new folder that every command loads
like the real model. ``flyviz info DIR`` says what it is a null of.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from flyviz.commands._options import add_dataset_option

EPILOG_HEAD = """\
what each kind keeps (everything but the recurrent graph is the model's own), from
the most kept to the least:
"""

EPILOG_TAIL = """\
degree, degree-sign and type-pairs permute the synapses' targets (within each sign,
within each cell-type pair) and repair the self-loops and duplicates this makes by
double edge swaps a->b, c->d => a->d, c->b among synapses of the same class.
The same seed writes the identical null. DIR must not exist (its parent folder is made
if missing); it holds the model in its layout with the graph in DIR/dataset. The null of a ConnecTorch brain (a .ct
folder) is a .ct brain: the same nodes, the edges randomised, their columns kept. Analyses take nulls as --nulls KIND:N.

examples (from a clone's root, where assets/ and examples/ are):
  flyviz null demo --kind degree --seed 1 --out nulls/degree-1
  flyviz null demo --kind type-pairs --seed 1 --out nulls/type-pairs-1
  flyviz info nulls/degree-1
  flyviz null brain.ct --kind degree-sign --seed 1 --out nulls/brain-degree-sign-1.ct
  flyviz generate nulls/degree-1 --prompt "Once upon a time"
  flyviz sweep demo --by superclass --text assets/demo/heldout.txt --out l.csv --nulls 5
  flyviz sweep demo --by superclass --text assets/demo/heldout.txt --out l.csv \\
      --nulls degree-sign:5
"""


def kinds_epilog() -> str:
    """The ``--help`` text of what each null kind keeps, from
    :data:`~flyviz.analysis.nulls.KIND_KEEPS`."""
    import textwrap

    from flyviz.analysis.nulls import KIND_KEEPS, NULL_KINDS

    lines = [EPILOG_HEAD.rstrip("\n")]
    for kind in NULL_KINDS:
        wrapped = textwrap.wrap(KIND_KEEPS[kind], width=72)
        lines.append(f"  {kind:<12}{wrapped[0]}")
        lines.extend(f"  {'':<12}{line}" for line in wrapped[1:])
    return "\n".join(lines) + "\n" + EPILOG_TAIL


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz null``."""
    from flyviz.analysis.nulls import NULL_KINDS

    parser.add_argument("spec", metavar="SPEC",
                        help="the real model: a folder, a hub repo id or 'demo'; or a "
                             "ConnecTorch brain (a .ct folder), whose null is a .ct brain")
    parser.add_argument("--kind", choices=NULL_KINDS, default="degree",
                        help="what the null keeps (default degree; the ladder is below)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="the null's seed, a whole number >= 0 (default 0), e.g. --seed 3")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the new folder to write, e.g. --out nulls/degree-3")
    add_dataset_option(parser)
    parser.add_argument("--json", action="store_true",
                        help="print what was written as one JSON object")
    parser.epilog = kinds_epilog()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, write its null and say what was written."""
    from flyviz.analysis.nulls import (check_kind, check_output_folder, check_seed,
                                       describe_record, write_checkpoint_null)
    from flyviz.commands._options import load_model_from_args

    check_kind(args.kind)
    seed = check_seed(args.seed)
    out = check_output_folder(Path(args.out), args.spec)  # before the model loads
    started = time.perf_counter()
    from flyviz.model.formats.connectorch import is_connectorch_brain

    if is_connectorch_brain(args.spec):
        return _connectorch(args, seed, out, started)
    ckpt = load_model_from_args(args)
    written = write_checkpoint_null(ckpt, args.kind, seed, out, source_spec=args.spec)
    seconds = time.perf_counter() - started
    from flyviz.model.resolve import load_model

    record = load_model(str(written)).metadata.get("null_model") or {}
    if args.json:
        print(json.dumps({"out": str(written), "layout": ckpt.layout, "seconds": seconds,
                          "null_model": record}, indent=2))
        return 0
    print(f"wrote {describe_record(record)} to {written} ({ckpt.layout}, "
          f"{ckpt.n_edges:,} synapses, {seconds:.1f} s)")
    return 0


def _connectorch(args: argparse.Namespace, seed: int, out: Path, started: float) -> int:
    """``flyviz null BRAIN.ct``: the null of a ConnecTorch brain, written as a ``.ct`` brain."""
    from flyviz.analysis.nulls import RECORD_KEY, describe_record, write_connectorch_null
    from flyviz.model.formats.connectorch import read_brain

    if args.dataset is not None:
        from flyviz.errors import InputError

        raise InputError(f"{args.spec} is a ConnecTorch brain: its graph is its own; leave out "
                         "--dataset")
    written = write_connectorch_null(args.spec, args.kind, seed, out)
    null = read_brain(written)          # the written brain, read back with both digests
    record = null.provenance.get(RECORD_KEY) or {}
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"out": str(written), "layout": "connectorch", "seconds": seconds,
                          "null_model": record}, indent=2))
        return 0
    print(f"wrote {describe_record(record)} to {written} (connectorch, {null.num_edges:,} "
          f"edges, {seconds:.1f} s)")
    return 0
