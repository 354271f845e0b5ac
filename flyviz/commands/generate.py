"""``flyviz generate SPEC --prompt TEXT``: continue a prompt on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import add_generation_options, generation_settings
from flyviz.model.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz generate``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True, help="text to continue (BOS is added once)")
    add_generation_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with ids, text and per-step statistics")
    parser.epilog = ('examples:\n  flyviz generate demo --prompt "Once upon a time, there was a"\n'
                     '  flyviz generate ./fly-llm-hf --prompt "Tom and his dog" --temperature 0.7 '
                     "--top-p 0.9 --seed 1 --json")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def generate(ckpt: Any, prompt: str, settings: Any) -> dict[str, Any]:
    """Run ``prompt`` through ``ckpt`` and collect what ``--json`` prints."""
    from flyviz.model.engine import Engine
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.record.run import encode_prompt, iter_frames

    tokenizer = tokenizer_for(ckpt)
    prompt_ids = encode_prompt(tokenizer, prompt, ckpt.config.bos_token_id)
    engine = Engine(ckpt)
    tokens: list[int] = []
    steps: list[dict[str, Any]] = []
    try:
        for frame in iter_frames(engine, tokenizer, prompt, settings, prompt_ids=prompt_ids):
            if frame.is_generation:
                tokens.append(frame.predicted_token_id)
                steps.append({"token": frame.predicted_token_id,
                              "top1_probability": frame.top1_probability,
                              "mean_abs_state": frame.mean_abs_state})
    finally:
        engine.close()
    return {"prompt": prompt, "prompt_ids": prompt_ids, "tokens": tokens,
            "text": tokenizer.decode(tokens), "steps": steps}


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, generate and print."""
    from flyviz.model.resolve import load_model

    # Bad options fail before a (possibly long) model load.
    if not args.prompt or not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    settings = generation_settings(args)
    result = generate(load_model(args.spec), args.prompt, settings)
    if args.json:
        print(json.dumps(result))
    else:
        sys.stdout.write(result["text"] + "\n")
    return 0
