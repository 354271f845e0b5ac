"""``flyviz generate SPEC --prompt TEXT``: continue a prompt on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_generation_options,
                                      add_intervention_options, add_kernel_option,
                                      add_recording_options, generation_settings,
                                      interventions_from_args, model_from_args,
                                      warn_idle_interventions)
from flyviz.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz generate``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True,
                        help="text to continue (BOS is added once where the model's "
                             "tokenizer has one; FlyGPT's has none)")
    add_dataset_option(parser)
    add_kernel_option(parser)
    add_generation_options(parser)
    add_recording_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with ids, text, per-step statistics, the "
                             "seed and the interventions applied")
    add_intervention_options(parser)
    parser.epilog = ('examples:\n  flyviz generate demo --prompt "Once upon a time, there was a"\n'
                     '  flyviz generate ./fly-llm-hf --prompt "Tom and his dog" --temperature 0.7 '
                     "--top-p 0.9 --seed 1 --json --kernel llvm\n"
                     '  flyviz generate ./web --dataset ./dataset --prompt "Tom and his dog" '
                     "--temperature 0.8 --record run.flyrec --states float32\n"
                     '  flyviz generate demo --prompt "Once upon a time" --silence '
                     "'sign:inhibitory'\n"
                     '  flyviz generate demo --prompt "Once upon a time" --stimulate '
                     "'input=0.5@8:13' --cut 'superclass:visual_projection->all'")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def generate(model: Any, prompt: str, settings: Any, *, record: Any = None,
             states_dtype: str = "float16", interventions: Any = ()) -> dict[str, Any]:
    """Run ``prompt`` through ``model`` (a :class:`~flyviz.record.runner.Model` or a
    checkpoint; with ``interventions``) and collect what ``--json`` prints
    (:class:`~flyviz.record.run.RunSummary`).

    With ``record`` (a path), the run is also saved there as a recording, with
    its interventions.
    """
    from flyviz.record.run import RunSummary, encode_prompt
    from flyviz.record.runner import as_model
    from flyviz.runs import Run, RunRequest

    model, owned = as_model(model)
    try:
        run = Run(model, RunRequest(prompt, settings, interventions, states_dtype=states_dtype))
        ids = encode_prompt(model.tokenizer, prompt, model.checkpoint.config.bos_token_id)
        summary = RunSummary(prompt, ids, model.tokenizer, run.request.settings.seed,
                             run.request.interventions or None)
        recording = run.record(summary.add, keep=record is not None)
    finally:
        if owned:
            model.close()
    result = summary.to_json()
    if record is not None:
        result["recording"] = str(recording.save(record))
    return result


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, generate and print."""
    # Bad options fail before a (possibly long) model load.
    if not args.prompt or not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    settings = generation_settings(args)
    interventions = interventions_from_args(args)
    with model_from_args(args) as model:
        result = generate(model, args.prompt, settings, record=args.record,
                          states_dtype=args.states, interventions=interventions)
    warn_idle_interventions(result["interventions"])
    if args.json:
        print(json.dumps(result))
    else:
        sys.stdout.write(result["text"] + "\n")
        if args.record is not None:
            print(f"flyviz: saved {result['recording']} (seed {result['seed']})", file=sys.stderr)
    return 0
