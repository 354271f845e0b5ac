"""Options shared by the subcommands that run a model (``generate``, ``export``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_generation_options(group: Any) -> None:
    """Add ``--max-new-tokens``, ``--temperature``, ``--top-p`` and ``--seed``."""
    group.add_argument("--max-new-tokens", type=int, default=80, metavar="N",
                       help="stop after N generated tokens (default 80; EOS stops earlier)")
    group.add_argument("--temperature", type=float, default=0.0, metavar="T",
                       help="0 = greedy (default); otherwise sample at temperature T")
    group.add_argument("--top-p", type=float, default=1.0, metavar="P",
                       help="nucleus sampling mass in (0, 1] (default 1)")
    group.add_argument("--seed", type=int, default=None, metavar="S",
                       help="random seed for sampling (reproducible runs)")


def generation_settings(args: argparse.Namespace) -> Any:
    """The validated :class:`~flyviz.record.run.GenerationSettings` of parsed options."""
    from flyviz.record.run import GenerationSettings

    return GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              top_p=args.top_p, seed=args.seed).validate()


class _AppendIntervention(argparse.Action):
    """Collect every intervention option into one list, in command-line order (the
    order decides which of two overlapping silences/clamps wins)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest, None) or [])
        items.append((self.const, values))
        setattr(namespace, self.dest, items)


INTERVENTIONS_HELP = """\
each repeatable, applied in the order given; QUERY selects neurons:
  QUERY terms: id:3,17,100-199  body:ID,...  superclass:NAME  type:GLOB (KC*)
  side:left|right|center  sign:excitatory|inhibitory  input  all
  combined with & | ! and parentheses, e.g. 'superclass:cb_sensory & !side:left'
  (quote the whole value for the shell; 'flyviz select SPEC QUERY' counts a query).
  A token window @FROM:TO ends any of them: positions as in the run (0 is BOS),
  half-open like a Python slice: @10:20 acts on tokens 10..19, @10: from 10 on,
  @:5 on the first five.
  Silences and clamps act after each step (the later option wins on a shared
  neuron); a stimulation is added to the neuron's input after the recurrent
  gain and the input drive, before gain * pre + bias; cuts and scales change
  the synapses W @ x uses (several on one synapse multiply).
"""


def add_intervention_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--silence``, ``--clamp``, ``--stimulate``, ``--cut`` and ``--scale``."""
    group = parser.add_argument_group("interventions", INTERVENTIONS_HELP)
    options = (
        ("silence", "QUERY[@FROM:TO]", "set these neurons' state to 0 after every step, "
         "e.g. --silence 'sign:inhibitory'"),
        ("clamp", "QUERY=VALUE[@FROM:TO]", "hold these neurons' state at VALUE, |VALUE| < 1, "
         "e.g. --clamp 'type:KC*=0.5@10:20'"),
        ("stimulate", "QUERY=VALUE[@FROM:TO]", "add VALUE to these neurons' input before the "
         "tanh, e.g. --stimulate 'input=0.8@10:15'"),
        ("cut", "QUERY->QUERY[@FROM:TO]", "remove every synapse from the first selection "
         "onto the second, e.g. --cut 'superclass:visual_projection->all'"),
        ("scale", "QUERY->QUERY=FACTOR[@FROM:TO]", "multiply those synapses by FACTOR, "
         "e.g. --scale 'superclass:cb_sensory->superclass:cb_intrinsic=0.5'"),
    )
    for kind, metavar, help_text in options:
        group.add_argument(f"--{kind}", action=_AppendIntervention, const=kind,
                           dest="interventions", default=[], metavar=metavar, help=help_text)


def interventions_from_args(args: argparse.Namespace) -> list[Any]:
    """The interventions the options name, in order, checked for form (queries are
    checked against the model when it is loaded)."""
    from flyviz.model.interventions import parse_intervention

    return [parse_intervention(kind, text) for kind, text in getattr(args, "interventions", [])]


def warn_idle_interventions(applied: list[dict[str, Any]]) -> None:
    """Say on stderr which interventions never acted (their token window lies past the run)."""
    import sys

    for item in applied:
        if item.get("steps") == 0:
            window = f"@{item.get('from', '')}:{item.get('to', '')}"
            print(f"flyviz: note: the {item['kind']} with window {window} never acted: the run "
                  f"has only positions before {item.get('from', 0)}", file=sys.stderr)
