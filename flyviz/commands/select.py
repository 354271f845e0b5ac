"""``flyviz select SPEC QUERY``: how many neurons a selection query picks, by superclass."""

from __future__ import annotations

import argparse
import json
from typing import Any

from flyviz.commands._options import add_dataset_option, load_model_from_args

EPILOG = """\
query terms:
  id:3,17,100-199          neuron indices (inclusive ranges)
  body:ID,...              MaleCNS body ids (where the model has them)
  superclass:NAME,...      e.g. superclass:cb_sensory (case-insensitive)
  type:GLOB,...            cell type with shell wildcards, e.g. type:KC* (case-sensitive)
  side:left|right|center   hemisphere
  sign:excitatory|inhibitory  the sign of the neuron's outgoing synapses
  population:NAME,...      a named population (fly-connectome-malecns-166k's retina,
                           lamina, descending, sugar), e.g. population:sugar
  input                    the input neurons of the delay line
  all                      every neuron
combine with & (and), | (or), ! (not) and parentheses; ! binds tightest, then &.

examples:
  flyviz select demo 'sign:inhibitory'
  flyviz select demo 'superclass:cb_sensory & side:left' --json
  flyviz select demo '(type:SN2* | type:VP*) & !input'
  flyviz select ~/fly-models/malecns-166k 'population:sugar'
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz select``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id, 'demo' or a "
                                                     "fly-connectome-malecns-166k folder")
    parser.add_argument("query", metavar="QUERY", help="selection query (quote it for the shell)")
    add_dataset_option(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with the count, the breakdown by "
                             "superclass and the selected neuron indices")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def describe(checkpoint: Any, query: str, index: Any = None) -> dict[str, Any]:
    """What ``--json`` prints: ``query``, ``model``, ``neurons`` (the model's),
    ``selected``, ``by_superclass`` (largest first) and ``indices``. ``index``: the
    :class:`~flyviz.model.selection.NeuronIndex` to use (default the checkpoint's)."""
    from flyviz.model.selection import neuron_index

    index = index if index is not None else neuron_index(checkpoint)
    indices = index.select(query)
    return {"query": query, "model": index.model_name, "neurons": index.neurons,
            "selected": int(indices.size), "by_superclass": index.breakdown(indices),
            "indices": indices.tolist()}


def run(args: argparse.Namespace) -> int:
    """Parse the query, load the model, select and print."""
    from flyviz.model.selection import parse

    from flyviz.model.resolve import malecns_folder

    parse(args.query)  # a malformed query fails before the model loads
    folder = malecns_folder(args.spec)
    if folder is not None:  # its labels, as a spiking brain's
        from flyviz.spiking import load_brain
        from flyviz.spiking.run import brain_index

        result = describe(None, args.query, brain_index(load_brain(str(folder))))
    else:
        result = describe(load_model_from_args(args), args.query)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.query} selects {result['selected']:,} of {result['neurons']:,} neurons "
          f"of {result['model']}")
    width = max((len(name) for name in result["by_superclass"]), default=0)
    for name, count in result["by_superclass"].items():
        if name:
            print(f"  {name:<{width}}  {count:>7,}")
    return 0
