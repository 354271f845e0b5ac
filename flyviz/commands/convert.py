"""``flyviz convert REC --to zarr|nwb|npz OUT``: a recording as data other tools read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import add_dataset_option, note_recording_mismatch
from flyviz.errors import ModelNotFoundError

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
    add_dataset_option(parser, selector=False)  # the recording names its model
    parser.add_argument("--no-labels", action="store_true",
                        help="load no model: the neurons carry only their index")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Load the recording (and its model, for the labels) and write it."""
    from flyviz.errors import InputError
    from flyviz.fileio import earlier_output, replaced_note
    from flyviz.record.convert import check_output, convert
    from flyviz.record.recording import Recording

    if args.no_labels and (args.model or args.dataset):
        raise InputError("--no-labels loads no model; leave out --model and --dataset")
    # The format, its extra, and an output that is the recording itself: before any work.
    args.to = check_output(args.recording, args.out, args.to)
    # A conversion is made again from its recording: an earlier one of the same format is
    # replaced whole, as savefig replaces a figure (a store is never merged into: arrays
    # of two recordings would be a silent defect; check_output refused a store that holds
    # other files, or a folder that is not one), and the last line says so.
    replaced = earlier_output(args.out, folder="store")
    recording = Recording.load(args.recording)
    from flyviz.kinds import kind_of_recording

    kind = kind_of_recording(recording)
    labels: Any = None          # the anatomy whose labels the neurons get
    labelled_by = ""
    if not args.no_labels:
        # The recording's kind loads the model it was made with (--model wins).
        try:
            model, why = kind.recording_model(recording, args.model, instead="--model SPEC",
                                              dataset=args.dataset)
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(f"{exc} (or convert with --no-labels, without neuron "
                                     "labels)") from None
        if model is None and args.model is None and kind.model_spec(recording)[0]:
            # it names a model that is not there any more: the run converts without labels
            print(f"flyviz: note: {why}; converting without neuron labels", file=sys.stderr)
        elif model is None:
            raise InputError(f"{args.recording.name}: {why}; give its model with --model SPEC "
                             "or convert with --no-labels")
        else:
            note_recording_mismatch(kind, recording, model, args.recording.name)
            labels, labelled_by = kind.neuron_labels(model), model.name
            model.close()
    out = convert(recording, args.out, args.to, labels, timing=kind.frame_timing(recording))
    said = "without neuron labels" if labels is None else f"with the neurons of {labelled_by}"
    steps = kind.recording_axis(recording).names
    print(f"flyviz: wrote {out} ({len(recording)} {steps} x {recording.neurons:,} neurons, "
          f"{said}{replaced_note(replaced, inside=True)})", file=sys.stderr)
    return 0
