"""``flyviz figure REC --kind raster|celltypes|trajectory|brain --out FIG``: figures for a paper."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flyviz.commands._options import add_dataset_option, note_recording_mismatch

EPILOG = """\
kinds:
  raster      every neuron x every token as one image (rows pooled to the figure's
              height, keeping each cell's largest |x|); --sort anatomy (superclass
              bands, cell types within; the default) or similarity (neurons with
              similar activity adjacent); a comparison draws untouched, intervened, dx
  celltypes   each cell type's (--by superclass: superclass's) mean activation per
              token (--quantity abs: mean |x|; a comparison: mean dx), rows by similarity
  trajectory  the states on their first three principal axes, as a 3-D path; a
              comparison adds the intervened run on the untouched run's axes
  brain       the 3-D view of one token (--token, default the last), as the app draws it;
              a comparison draws the untouched run, the intervened run and Δx;
              --outline adds the brain's outline computed from the somas

The neurons' labels and positions come from the model the recording names
(--model picks another). The format follows OUT's suffix: .png, .svg or .pdf.
Needs flyviz[figures] (matplotlib).

examples:
  flyviz figure run.flyrec --kind raster --out raster.png
  flyviz figure run.flyrec --kind raster --sort similarity --out raster.svg --size 2400x1400
  flyviz figure compared.flyrec --kind celltypes --by superclass --out dx.pdf
  flyviz figure run.flyrec --kind brain --token 12 --outline --out brain.png
"""


def _size(text: str) -> tuple[int, int]:
    import re

    match = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"size {text!r} must look like 1600x1000")
    return int(match.group(1)), int(match.group(2))


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz figure``."""
    from flyviz.figures import KINDS, QUANTITIES, SORTS

    parser.add_argument("recording", metavar="REC", type=Path, help="a .flyrec recording")
    parser.add_argument("--kind", required=True, choices=KINDS, help="what to draw, e.g. --kind raster")
    parser.add_argument("--out", required=True, type=Path, metavar="FIG",
                        help="the figure to write: .png, .svg or .pdf, e.g. --out raster.png")
    parser.add_argument("--sort", choices=SORTS, default="anatomy",
                        help="a raster's row order (default: anatomy)")
    parser.add_argument("--by", choices=("cell_type", "superclass"), default="cell_type",
                        help="a celltypes figure's groups (default: cell_type)")
    parser.add_argument("--quantity", choices=QUANTITIES, default=None,
                        help="a celltypes figure's value: mean, abs (mean |x|; a spiking "
                             "run's rates have no sign, so the same as mean) or dx (a "
                             "comparison's mean dx; its default)")
    parser.add_argument("--token", type=int, default=None,
                        help="a brain figure's token, counted from 0 as everywhere in flyviz "
                             "(--token 11 of a run of 40 tokens is titled 'token 11 of 0–39'; "
                             "default: the last)")
    parser.add_argument("--size", type=_size, default=(1600, 1000), metavar="WxH",
                        help="figure size in pixels (default: 1600x1000)")
    parser.add_argument("--dpi", type=int, default=100, help="dots per inch (default: 100)")
    parser.add_argument("--outline", action="store_true",
                        help="a brain figure draws the brain's outline (from the somas) behind "
                             "the neurons")
    parser.add_argument("--model", metavar="SPEC", default=None,
                        help="the model whose neuron labels and positions to use (default: the "
                             "one the recording names)")
    add_dataset_option(parser, selector=False)  # the recording names its model
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the request and the output, load the recording and its model, draw."""
    from flyviz.errors import InputError
    from flyviz.extras import require
    from flyviz.fileio import earlier_output, replaced_note
    from flyviz.figures import FigureOptions, check_output, write_figure
    from flyviz.record.recording import Recording

    options = FigureOptions(kind=args.kind, size=args.size, sort=args.sort, by=args.by,
                            quantity=args.quantity, token=args.token, dpi=args.dpi,
                            outline=args.outline).checked()
    check_output(args.out)
    # A figure is a render, drawn again from its recording: like savefig, one of the same
    # name is replaced, and the last line says so (earlier_output is the rule).
    replaced = earlier_output(args.out)
    require("figures", "flyviz figure")
    recording = Recording.load(args.recording)
    needs_labels = args.kind in ("celltypes", "brain") or (args.kind == "raster"
                                                           and args.sort == "anatomy")
    from flyviz.kinds import kind_of_recording

    # The recording's kind loads the model it was made with (--model wins): a Fly LLM's
    # Model, a spiking run's brain...
    kind = kind_of_recording(recording)
    model, why = kind.recording_model(recording, args.model, instead="--model SPEC",
                                      dataset=args.dataset)
    if model is None and needs_labels:
        raise InputError(f"{args.recording.name}: {why}; give its model with --model SPEC")
    if model is not None:
        note_recording_mismatch(kind, recording, model, args.recording.name)
    try:
        out = write_figure(recording, args.out, options, model=model)
    finally:
        if model is not None:
            model.close()
    print(f"flyviz: wrote {out} ({args.kind}, {len(recording)} "
          f"{kind.recording_axis(recording).names} x "
          f"{recording.neurons:,} neurons"
          f"{replaced_note(replaced, inside=True)})", file=sys.stderr)
    return 0
