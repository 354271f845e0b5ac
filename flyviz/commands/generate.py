"""``flyviz generate SPEC --prompt TEXT``: continue a prompt on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_generation_options, add_intervention_options,
                                      generation_settings, interventions_from_args,
                                      warn_idle_interventions)
from flyviz.model.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz generate``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True, help="text to continue (BOS is added once)")
    add_generation_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with ids, text, per-step statistics and "
                             "the interventions applied")
    add_intervention_options(parser)
    parser.epilog = ('examples:\n  flyviz generate demo --prompt "Once upon a time, there was a"\n'
                     '  flyviz generate ./fly-llm-hf --prompt "Tom and his dog" --temperature 0.7 '
                     "--top-p 0.9 --seed 1 --json\n"
                     '  flyviz generate demo --prompt "Once upon a time" --silence '
                     "'sign:inhibitory'\n"
                     '  flyviz generate demo --prompt "Once upon a time" --stimulate '
                     "'input=0.5@8:13' --cut 'superclass:visual_projection->all'")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def generate(ckpt: Any, prompt: str, settings: Any, interventions: Any = ()) -> dict[str, Any]:
    """Run ``prompt`` through ``ckpt`` (with ``interventions``) and collect what ``--json``
    prints (:class:`~flyviz.record.run.RunSummary`)."""
    from flyviz.model.engine import Engine
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.record.run import RunSummary, encode_prompt, iter_frames

    tokenizer = tokenizer_for(ckpt)
    prompt_ids = encode_prompt(tokenizer, prompt, ckpt.config.bos_token_id)
    engine = Engine(ckpt, interventions=interventions)
    summary = RunSummary(prompt, prompt_ids, tokenizer, engine.interventions)
    try:
        for frame in iter_frames(engine, tokenizer, prompt, settings, prompt_ids=prompt_ids):
            summary.add(frame)
    finally:
        engine.close()
    return summary.to_json()


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, generate and print."""
    from flyviz.model.resolve import load_model

    # Bad options fail before a (possibly long) model load.
    if not args.prompt or not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    settings = generation_settings(args)
    interventions = interventions_from_args(args)
    result = generate(load_model(args.spec), args.prompt, settings, interventions)
    warn_idle_interventions(result["interventions"])
    if args.json:
        print(json.dumps(result))
    else:
        sys.stdout.write(result["text"] + "\n")
    return 0
