"""``flyviz convert REC --to zarr|nwb|npz OUT``: a recording as data other tools read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import add_dataset_option, load_model_from_args, recording_model
from flyviz.errors import ModelNotFoundError, RecordingError

EPILOG = """\
formats:
  zarr   a Zarr store (xarray: state[token, neuron] chunked along tokens, token and
         neuron coordinates, the run's settings as attributes); texts are stored as
         integer codes with their table in the attribute 'flyviz_labels', and
         flyviz.record.convert.open_zarr(OUT) reads them back as text. Needs flyviz[data].
  nwb    Neurodata Without Borders (HDF5): the states as a time-first response
         series (one token per second) over a table of the neurons with their
         labels and soma positions; the tokens as an intervals table. Needs flyviz[nwb].
  npz    NumPy arrays in one file: np.load(OUT) reads it without pickles.

The neurons' labels and positions come from the model the recording names
(loaded for them; --model picks another, --no-labels loads none).

examples:
  flyviz convert run.flyrec --to zarr run.zarr
  flyviz convert run.flyrec run.nwb
  flyviz convert run.flyrec --to npz run.npz --no-labels
  flyviz convert run.flyrec run.zarr --model ~/fly-models/web --dataset ~/fly-models/dataset
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz convert``."""
    from flyviz.record.convert import FORMATS

    parser.add_argument("recording", metavar="REC", type=Path, help="a .flyrec recording")
    parser.add_argument("out", metavar="OUT", type=Path,
                        help="what to write, e.g. run.zarr, run.nwb or run.npz")
    parser.add_argument("--to", choices=tuple(FORMATS), default=None,
                        help="output format (default: from OUT's suffix), e.g. --to zarr")
    parser.add_argument("--model", metavar="SPEC", default=None,
                        help="model whose neuron labels and positions to add (default: the "
                             "one the recording names), e.g. --model ngxson/fly-llm-hf")
    add_dataset_option(parser)
    parser.add_argument("--no-labels", action="store_true",
                        help="load no model: the neurons carry only their index")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Load the recording (and its model, for the labels) and write it."""
    from flyviz.errors import InputError
    from flyviz.record.convert import check_output, convert
    from flyviz.record.recording import Recording

    if args.no_labels and (args.model or args.dataset):
        raise InputError("--no-labels loads no model; leave out --model and --dataset")
    # The format, its extra, and an output that is the recording itself: before any work.
    args.to = check_output(args.recording, args.out, args.to)
    recording = Recording.load(args.recording)
    from flyviz.kinds import kind_of_recording

    kind = kind_of_recording(recording)
    model: Any = None
    labelled_by = ""
    if not args.no_labels and kind.key == "spiking" and args.model is None:
        # A spiking run's neurons are its brain's (the one it names), as figure and export
        # draw them; a brain that no longer loads leaves the labels out, with a note.
        from flyviz.kinds.spiking import SPIKING

        brain, why_not = SPIKING.recording_brain(recording)
        if brain is None:
            print(f"flyviz: note: {why_not}; converting without neuron labels",
                  file=sys.stderr)
        else:
            model, labelled_by = brain.drawing_anatomy(), brain.name
    elif not args.no_labels:
        spec, args.dataset = recording_model(recording, args.model, args.dataset)
        if spec is None:
            raise InputError(f"{args.recording.name} names no model; give one with --model SPEC "
                             "or convert with --no-labels")
        try:
            model = load_model_from_args(args, spec)
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(f"{exc} (or convert with --no-labels, without neuron "
                                     "labels)") from None
        if model.config.neurons != recording.neurons:
            raise RecordingError(f"{args.recording.name} has {recording.neurons:,} neurons but "
                                 f"model {spec} has {model.config.neurons:,}; give the model it "
                                 "was recorded with as --model, or use --no-labels")
        from flyviz.model.identity import identity_mismatch

        mismatch = identity_mismatch(recording.metadata.get("model_identity"), model,
                                     args.recording.name)
        if mismatch:
            print(f"flyviz: note: {mismatch}", file=sys.stderr)
    out = convert(recording, args.out, args.to, model)
    labels = "without neuron labels" if model is None else \
        f"with the neurons of {labelled_by or model.name}"
    steps = kind.recording_axis(recording).names
    print(f"flyviz: wrote {out} ({len(recording)} {steps} x {recording.neurons:,} neurons, "
          f"{labels})", file=sys.stderr)
    return 0
