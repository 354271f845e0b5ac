"""``flyviz compare SPEC --prompt TEXT [interventions]``: the untouched and the intervened
model on one prompt, free-running and teacher-forced."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_generation_options,
                                      add_intervention_options, add_kernel_option,
                                      add_recording_options, generation_settings, interventions_from_args,
                                      kernel_from_args, load_model_from_args,
                                      warn_idle_interventions)
from flyviz.errors import InputError

EPILOG = """\
what it runs:
  free-running   the untouched and the intervened model each continue the prompt
                 with the same sampler settings and seed; the text shows where
                 they part ([[...]] marks the rest of each text).
  teacher-forced the intervened model reads the untouched run's tokens, so each
                 generated position compares like with like: KL(p_untouched ||
                 p_intervened) in nats, both top-1 tokens, and the mean |dx| over
                 all neurons (intervened minus untouched state).

--json prints one object: {"prompt", "interventions", "baseline", "intervened",
"parted_at", "forced": {"steps": [{"token", "kl", "baseline_top1",
"intervened_top1", "mean_abs_delta"}]}}; baseline and intervened have exactly
the fields of 'flyviz generate --json' (the same seed); parted_at is the index of the first
generated token where the free-running texts differ (null if never); with --record,
"recording" is the file written.

--record FILE saves the teacher-forced comparison as one recording: the intervened
run with the untouched one inside it, so every token has both states. 'flyviz share
FILE --layer delta', 'flyviz figure FILE --quantity dx' and the app show its dx.

examples:
  flyviz compare demo --prompt "Once upon a time" --silence 'sign:inhibitory'
  flyviz compare demo --prompt "Tom and his dog" --cut 'superclass:cb_sensory->all' --json
  flyviz compare demo --prompt "Once upon a time" --stimulate 'input=0.5@5:10' \\
      --temperature 0.8 --seed 3
  flyviz compare demo --prompt "Once upon a time" --silence 'sign:inhibitory' \\
      --record cmp.flyrec && flyviz share cmp.flyrec --out cmp.html --layer delta
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz compare``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True,
                        help="text to continue (BOS is added once where the model's "
                             "tokenizer has one; FlyGPT's has none)")
    add_dataset_option(parser)
    add_kernel_option(parser)
    add_generation_options(parser.add_argument_group("generation (both runs)"))
    add_recording_options(parser.add_argument_group("recording (the teacher-forced comparison)"))
    parser.add_argument("--json", action="store_true", help="print one JSON object (see below)")
    add_intervention_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _token(tokenizer: Any, token_id: int) -> str:
    return repr(tokenizer.token_text(token_id))


def format_comparison(result: dict[str, Any], tokenizer: Any) -> str:
    """The text report: the interventions, both texts with the divergence marked, and a
    per-token table of the teacher-forced comparison."""
    from flyviz.model.interventions import describe_applied

    lines = ["interventions:"]
    lines.extend(f"  {describe_applied(item)}" for item in result["interventions"])
    base, other = result["baseline"]["tokens"], result["intervened"]["tokens"]
    parted = result["parted_at"]
    lines.append("")
    lines.append(f"prompt:     {result['prompt']}")
    if parted is None:
        lines.append(f"untouched:  {result['baseline']['text']}")
        lines.append(f"intervened: {result['intervened']['text']}")
        lines.append(f"the two continuations are identical ({len(base)} tokens)")
    else:
        common = tokenizer.decode(base[:parted])
        for label, tokens in (("untouched: ", base), ("intervened:", other)):
            lines.append(f"{label} {common}[[{tokenizer.decode(tokens[parted:])}]]")
        first = (_token(tokenizer, base[parted]) if parted < len(base) else "the end",
                 _token(tokenizer, other[parted]) if parted < len(other) else "the end")
        lines.append(f"they part at generated token {parted}: {first[0]} (untouched) vs "
                     f"{first[1]} (intervened)")
    steps = result["forced"]["steps"]
    lines.append("")
    lines.append("teacher-forced on the untouched text, per generated token:")
    lines.append(f"  {'#':>4}  {'token':<16} {'KL nats':>9}  {'top-1 untouched':<16} "
                 f"{'top-1 intervened':<16} {'mean |dx|':>9}")
    for i, step in enumerate(steps):
        mark = " " if step["baseline_top1"] == step["intervened_top1"] else "*"
        lines.append(f"  {i:>4}  {_token(tokenizer, step['token'])[:16]:<16} {step['kl']:>9.4f}  "
                     f"{_token(tokenizer, step['baseline_top1'])[:16]:<16} "
                     f"{_token(tokenizer, step['intervened_top1'])[:16]:<16}"
                     f"{mark}{step['mean_abs_delta']:>9.4f}")
    if steps:
        kls = [s["kl"] for s in steps]
        changed = sum(s["baseline_top1"] != s["intervened_top1"] for s in steps)
        lines.append(f"  mean KL {sum(kls) / len(kls):.4f} nats, max {max(kls):.4f}; top-1 "
                     f"differs at {changed} of {len(steps)} tokens (*)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, run both and print."""
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.record.compare import compare

    if not args.prompt or not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    settings = generation_settings(args)
    interventions = interventions_from_args(args)
    if not interventions:
        raise InputError("give at least one intervention (--silence, --clamp, --stimulate, "
                         "--cut, --scale, or --patch with --source-prompt or --source) to "
                         "compare with the untouched run")
    kernel = kernel_from_args(args)
    ckpt = load_model_from_args(args)
    result = compare(ckpt, args.prompt, interventions, settings, kernel=kernel,
                     record=args.record, spec=args.spec, states_dtype=args.states)
    warn_idle_interventions(result["interventions"])
    if args.json:
        print(json.dumps(result))
    else:
        sys.stdout.write(format_comparison(result, tokenizer_for(ckpt)) + "\n")
    if args.record is not None:
        print(f"flyviz: saved {result['recording']} (the teacher-forced comparison, seed "
              f"{result['baseline']['seed']})", file=sys.stderr)
    return 0
