"""``flyviz generate SPEC --prompt TEXT``: continue a prompt on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_generation_options,
                                      add_intervention_options, add_recording_options,
                                      generation_settings, interventions_from_args,
                                      load_model_from_args, warn_idle_interventions)
from flyviz.model.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz generate``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True, help="text to continue (BOS is added once)")
    add_dataset_option(parser)
    add_generation_options(parser)
    add_recording_options(parser)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with ids, text, per-step statistics, the "
                             "seed and the interventions applied")
    add_intervention_options(parser)
    parser.epilog = ('examples:\n  flyviz generate demo --prompt "Once upon a time, there was a"\n'
                     '  flyviz generate ./fly-llm-hf --prompt "Tom and his dog" --temperature 0.7 '
                     "--top-p 0.9 --seed 1 --json\n"
                     '  flyviz generate ./web --dataset ./dataset --prompt "Tom and his dog" '
                     "--temperature 0.8 --record run.flyrec --states float32\n"
                     '  flyviz generate demo --prompt "Once upon a time" --silence '
                     "'sign:inhibitory'\n"
                     '  flyviz generate demo --prompt "Once upon a time" --stimulate '
                     "'input=0.5@8:13' --cut 'superclass:visual_projection->all'")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def generate(ckpt: Any, prompt: str, settings: Any, *, record: Any = None,
             states_dtype: str = "float16", interventions: Any = ()) -> dict[str, Any]:
    """Run ``prompt`` through ``ckpt`` (with ``interventions``) and collect what ``--json``
    prints (:class:`~flyviz.record.run.RunSummary`).

    With ``record`` (a path), the run is also saved there as a recording, with
    its interventions.
    """
    from flyviz.model.interventions import resolve
    from flyviz.model.tokenizer import tokenizer_for
    from flyviz.record.recording import Recording
    from flyviz.record.run import RunSummary, encode_prompt, run_frames, run_metadata

    settings = settings.validate()
    tokenizer = tokenizer_for(ckpt)
    resolved = resolve(ckpt, interventions)
    recording = None if record is None else Recording(
        ckpt.config.neurons, run_metadata(ckpt, prompt, settings, interventions=resolved),
        states_dtype=states_dtype)
    summary = RunSummary(prompt, encode_prompt(tokenizer, prompt, ckpt.config.bos_token_id),
                         tokenizer, settings.seed, resolved)
    for frame in run_frames(ckpt, prompt, settings, recording, resolved):
        summary.add(frame)
    result = summary.to_json()
    if recording is not None:
        result["recording"] = str(recording.save(record))
    return result


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, generate and print."""
    # Bad options fail before a (possibly long) model load.
    if not args.prompt or not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    settings = generation_settings(args)
    interventions = interventions_from_args(args)
    result = generate(load_model_from_args(args), args.prompt, settings, record=args.record,
                      states_dtype=args.states, interventions=interventions)
    warn_idle_interventions(result["interventions"])
    if args.json:
        print(json.dumps(result))
    else:
        sys.stdout.write(result["text"] + "\n")
        if args.record is not None:
            print(f"flyviz: saved {result['recording']} (seed {result['seed']})", file=sys.stderr)
    return 0
