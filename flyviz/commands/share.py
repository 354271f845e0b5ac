"""``flyviz share REC --out run.html``: a recording as one web page that plays it, offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import (add_colour_mode_option, add_dataset_option,
                                      colour_mode_for, kernel_from_args,
                                      note_recording_mismatch)
from flyviz.errors import InputError
from flyviz.fileio import earlier_output, missing_folder, replaced_note

EPILOG = """\
The page is one HTML file with everything in it (no network, no server): the brain
as a WebGL2 point cloud in the app's look (drag: turn, wheel: zoom, shift-drag:
pan, hover: a neuron's id, cell type, superclass and value), a token slider and
play at the app's replay rate, the text with the shown token marked and the top-k
candidates. The address's #token=K&layer=...&cam=... keeps the view: a link
points at it. Layers (--layer, the first is shown on opening): state (the
activation x), delta (a comparison's intervened - untouched) and flow (with
--trace: the flows of the explained logit, a lag slider and the words shaded by
their flow). Default: flow with --trace (the page opens on it at step P), state,
delta for a comparison.

A spiking brain's recording (flyviz simulate ... --record) is shared the same way: its
state layer is each neuron's firing rate in Hz, coloured from 0, the slider runs over
its bins, and there is no text, no top-k and no --trace.

The neurons' positions and labels come from the model the recording names
(--model picks another). A language model's recording whose model is not found
is refused (give it with --model); a recording that names no model, a spiking
run whose brain does not load and a recording of a kind not installed here are
placed on a generic layout.

examples:
  flyviz share run.flyrec --out run.html
  flyviz share compared.flyrec --out compared.html --layer delta --layer state
  flyviz share run.flyrec --out why.html --trace 7 --window 8
  flyviz share run.flyrec --out run.html --token 12 --view top --mode abs
  flyviz share sugar.flyrec --out sugar.html --range run
"""

#: The layers ``--layer`` can name.
LAYER_CHOICES = ("state", "delta", "flow")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz share``."""
    parser.add_argument("recording", metavar="REC", type=Path, help="a .flyrec recording")
    parser.add_argument("--out", required=True, type=Path, metavar="PAGE",
                        help="the web page to write, e.g. --out run.html")
    parser.add_argument("--layer", action="append", choices=LAYER_CHOICES, default=None,
                        help="a colour layer of the page, repeatable, the first shown on "
                             "opening (default: flow with --trace, state, delta for a "
                             "comparison; --trace adds flow after the layers named)")
    parser.add_argument("--trace", type=int, default=None, metavar="P",
                        help="add the flow layer: why the token chosen at step P (0 is BOS) "
                             "was chosen (needs the recording's model)")
    parser.add_argument("--window", type=int, default=None, metavar="K",
                        help="with --trace: sweep back K steps (default 128, as flyviz trace; "
                             "over longer windows the flows stop adding up, and exit status "
                             "1 says so)")
    parser.add_argument("--token", type=int, default=None, metavar="K",
                        help="the token shown on opening, from 0 as #token=K and the page's "
                             "label count (--token 0 reads 'token 0 / N'; default: the traced "
                             "step with --trace, else the last)")
    parser.add_argument("--view", choices=("front", "top", "side"), default="front",
                        help="camera direction on opening (default front)")
    add_colour_mode_option(parser)
    parser.add_argument("--range", choices=("token", "run"), default="token", dest="range_scope",
                        help="the colour range: each token's own, as the app shows it "
                             "(token, the default), or one over the whole run, as a movie "
                             "keeps it, so that a colour means one value on every token (run)")
    parser.add_argument("--title", default=None, help="the page's title (default: the model "
                                                      "and the prompt)")
    parser.add_argument("--model", metavar="SPEC", default=None,
                        help="the model whose neuron positions and labels to use (default: the "
                             "one the recording names)")
    add_dataset_option(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _check_output(out: Path) -> Path:
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"--out {out} should end in .html")
    if out.is_dir():
        raise InputError(f"--out {out} is a folder; give the page's file name, e.g. run.html")
    if not out.parent.is_dir():
        raise InputError(f"--out {out}: {missing_folder(out.parent)}")
    return out


def _check_layers(args: argparse.Namespace, recording: Any) -> None:
    from flyviz.kinds import kind_of_recording

    for key in args.layer or ():
        if key == "delta" and recording.baseline is None:
            # How a comparison is made is the recording's kind's: a spiking run has no
            # 'flyviz compare'.
            hint = kind_of_recording(recording).comparison_hint
            raise InputError(f"--layer delta needs a comparison; {args.recording.name} is a "
                             f"single run" + (f" ({hint})" if hint else ""))
        if key == "flow" and args.trace is None:
            raise InputError("--layer flow needs --trace P (the step whose choice to explain)")
    if args.window is not None and args.trace is None:
        raise InputError(f"--window {args.window} needs --trace P (it sets how far back the "
                         "trace of step P sweeps)")
    n = len(recording)
    if args.token is not None and not 0 <= args.token < n:
        raise InputError(f"--token {args.token} is out of range: the recording has {n:,} "
                         f"tokens (0 to {n - 1:,})")
    if args.trace is not None and not 0 <= args.trace < n:
        raise InputError(f"--trace {args.trace} is out of range: the recording has {n:,} "
                         f"tokens (0 to {n - 1:,})")
    if args.window is not None and args.window < 1:
        raise InputError(f"--window {args.window} is empty: give at least 1 step back")


def run(args: argparse.Namespace) -> int:
    """Check the request, load the recording (and its model), build the state, write the page."""
    from flyviz.errors import RecordingError
    from flyviz.export.share import share
    from flyviz.kinds import kind_of_recording, refuse_without_tokens
    from flyviz.record.recording import Recording
    from flyviz.viewer import ViewerState
    from flyviz.viewer.layers import drawing_anatomy

    out = _check_output(args.out)
    # A page is a render, made again from its recording: like savefig, one of the same
    # name is replaced, and the last line says so (earlier_output is the rule).
    replaced = earlier_output(out)
    recording = Recording.load(args.recording)
    if not len(recording):
        raise RecordingError(f"{args.recording.name} has no frames: nothing to share")
    _check_layers(args, recording)
    kind = kind_of_recording(recording)
    mode = colour_mode_for(args.mode, kind, args.recording.name)
    if args.trace is not None:
        refuse_without_tokens(recording, args.recording.name,
                              "--trace explains a language model's choice of a token")
    # The recording's kind loads the model it was made with (--model wins).
    model, why = kind.recording_model(recording, args.model, instead="--model SPEC",
                                      dataset=args.dataset, kernel=kernel_from_args(args))
    if model is None and args.trace is not None:
        raise InputError(f"--trace needs the recording's model; {args.recording.name}: {why}: "
                         "give it as --model SPEC")
    if model is not None:
        note_recording_mismatch(kind, recording, model, args.recording.name)
    placement = drawing_anatomy(model, recording.neurons, args.recording.name, missing=(
        f"{why} (give --model to use the model's anatomy)"))
    if placement.note is not None:
        print(f"flyviz: {placement.note}", file=sys.stderr)
    state = ViewerState()
    state.display.mode = mode
    state.range_scope = "recording" if args.range_scope == "run" else "token"
    state.set_model(model, placement.anatomy, name=str(recording.metadata.get("model_name", "")
                                                        or getattr(model, "name", "") or ""),
                    neurons=recording.neurons, kind=kind)
    # The page opens where it was asked to, else at the traced step, else at the last frame.
    index = args.token if args.token is not None else args.trace
    state.set_recording(recording, index=index)         # a comparison's Δ comes with it
    state.view = args.view
    attribution, note = None, None
    if args.trace is not None:
        assert model is not None
        from flyviz.record.trace import trace_for_command

        # An incomplete sum is said below in one line with the option that helps (exit 1).
        attribution, note = trace_for_command(model, recording, window=args.window,
                                              position=args.trace)
    try:
        page = share(state, out, attribution=attribution, layers=args.layer, title=args.title)
    finally:
        if model is not None:
            model.close()
    size = page.stat().st_size
    print(f"wrote {page} ({size / 1e6:.1f} MB, {len(recording):,} "
          f"{kind.recording_axis(recording).names}, "
          f"{state.anatomy.n_valid if state.anatomy else 0:,} neurons drawn"
          f"{replaced_note(replaced, inside=True)})", file=sys.stderr)
    if note is not None:
        print(f"flyviz share: {note}", file=sys.stderr)
        return 1
    return 0
