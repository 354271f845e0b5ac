"""``flyviz replay REC``: re-run a recording's prompt with its settings and seed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flyviz.commands._options import (add_dataset_option, add_kernel_option, model_from_args,
                                      patch_source_from_args, recording_model)
from flyviz.errors import InputError

EPILOG = """\
The model is the one the recording names (its folder, hub id or 'demo');
--model loads another. The prompt ids, temperature, top-p and the seed the
sampler used (stored even when it was drawn at random) are the recording's,
and the run generates as many tokens as the recording did.

exit status: 0 every token matches, 1 a token differs (the first one is
named), 2 bad input (a damaged recording, no model, a sampled run without a
stored seed, a recording of a spiking brain: run 'flyviz simulate' again with
its seed instead, as the refusal says).

examples:
  flyviz generate demo --prompt "Tom and his dog" --temperature 0.8 --record run.flyrec
  flyviz replay run.flyrec
  flyviz replay patched.flyrec --source source.flyrec   (the states it patched in)
  flyviz replay run.flyrec --model ~/fly-models/web --dataset ~/fly-models/dataset --json
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz replay``."""
    parser.add_argument("recording", metavar="REC", type=Path, help="a .flyrec recording")
    parser.add_argument("--model", metavar="SPEC", default=None,
                        help="model to replay on (default: the one the recording names), "
                             "e.g. --model ngxson/fly-llm-hf")
    add_dataset_option(parser, selector=False)  # the recording names its model
    add_kernel_option(parser)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--source", type=Path, default=None, metavar="REC",
                        help="the recording a patched run copied its states from (a "
                             "recording's states are not stored in the patched one)")
    source.add_argument("--source-prompt", default=None, metavar="TEXT",
                        help="the prompt a patched run copied its states from")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


#: The run of a comparison a replay re-ran (:attr:`ReplayResult.run
#: <flyviz.record.replay.ReplayResult.run>`), as the report names it.
RUNS = {"untouched": "untouched run (the intervened one read its tokens)",
        "intervened": "intervened run (free-running)"}


def run(args: argparse.Namespace) -> int:
    """Load the recording and its model, replay, compare and report."""
    from flyviz.kinds import kind_of_recording
    from flyviz.record.recording import Recording
    from flyviz.record.replay import replay_recording, replay_settings

    recording = Recording.load(args.recording)
    # A kind whose runs are not replayed (a spiking brain's) says what to do instead.
    refusal = kind_of_recording(recording).replay_refusal(recording)
    if refusal:
        raise InputError(f"{args.recording.name}: {refusal}")
    replay_settings(recording)  # a recording that cannot be replayed fails before the model loads
    spec, args.dataset = recording_model(recording, args.model, args.dataset)
    if spec is None:
        raise InputError(f"{args.recording.name} names no model; give one with --model SPEC")
    with model_from_args(args, spec,
                         recorded=None if args.model else "--model SPEC") as model:
        result = replay_recording(recording, model, patch_source=patch_source_from_args(args))
    ckpt = model.checkpoint
    if result.identity_note:
        print(f"flyviz: note: {result.identity_note}", file=sys.stderr)
    if args.json:
        out = {"recording": str(args.recording), "model": ckpt.name, **result.to_dict()}
        print(json.dumps(out, indent=2))
    else:
        s = result.settings
        how = "greedy" if s.temperature <= 0 else \
            f"temperature {s.temperature:g}, top-p {s.top_p:g}, seed {s.seed}"
        # A comparison holds two runs; say which one these tokens are.
        which = "" if result.run is None else f" of its {RUNS[result.run]}"
        if result.matched:
            print(f"{args.recording.name}: all {len(result.recorded)} generated tokens"
                  f"{which} match on {ckpt.name} ({how})")
        else:
            i = result.first_mismatch
            assert i is not None
            recorded = result.recorded[i] if i < len(result.recorded) else "(end)"
            replayed = result.replayed[i] if i < len(result.replayed) else "(end)"
            print(f"{args.recording.name}: MISMATCH at generated token {i}{which} (frame "
                  f"{result.frame}):"
                  f" recorded {recorded}, replayed {replayed}; {i} of {len(result.recorded)} "
                  f"tokens matched before it on {ckpt.name} ({how})")
    return 0 if result.matched else 1
