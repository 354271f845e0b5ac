"""``flyviz trace SPEC --prompt TEXT``: why the model chose a token, split exactly by source."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_intervention_options,
                                      add_kernel_option, interventions_from_args,
                                      model_from_args, patch_source_from_args,
                                      recording_model)
from flyviz.errors import InputError
from flyviz.render.gl_backend import BACKENDS, GL_HELP

#: Steps swept back by default: flyviz.model.explain.DEFAULT_WINDOW, spelled out (the parser
#: does not load the model code); over longer windows the demo brain's flows stop adding up.
DEFAULT_WINDOW = 128

EPILOG = """\
The explained value is L = logit[target] - mean(logits) at the position (or
logit[target] - logit[versus] with --versus). Each neuron's tanh gain and the
LayerNorm scale are frozen at the run's values, which makes L an exact sum of
what every input token, the padding and the biases brought, carried by neurons
and synapses step by step; the completeness error says how exactly they add up.
--mode gradient gives dL/dx instead (a sensitivity; flows do not add up).

The sweep goes back --window K steps (default 128); what the state before them
carries is one more source. Over long windows the frozen steps' product grows:
the flows become huge terms that cancel, and float32 rounding swamps L (on the
demo brain from 250-500 steps back). When the completeness error exceeds
1e-3 x max(1, |L|) the result is still printed, marked ("complete": false in
--json), with one line on stderr naming the error and the longest --window
that adds up.

exit status: 0 the flows add up to L (or --mode gradient), 1 they do not (see
above: trace again with the --window it names), 2 bad input (one line), and
a trace that would not fit in the memory available (it names a --window that
does).

examples:
  flyviz trace demo --prompt "there was a little girl named"
  flyviz trace demo --prompt "there was a little girl named" --target " Lily" --versus " Tom"
  flyviz trace demo --prompt "Tom and his dog" --window 4 --json > why.json
  flyviz trace demo --prompt "Tom and his dog" --graph graph.json   (Neuronpedia's viewer)
  flyviz trace demo --prompt "Once upon a time" --silence 'sign:inhibitory'
  flyviz trace --recording run.flyrec --position 12
  flyviz trace --recording patched.flyrec --source source.flyrec   (its patch's source)
  flyviz trace demo --prompt "there was a little girl named" --window 12 --movie why.mp4

--movie writes the flow view as a movie: one frame per step of the window, from the
explained position back (--reverse: from the window's first step forward), every
neuron coloured by its flow at that step over +- the step's largest |flow| (as the
app's Why? view; --flow-scale window: one range for all), the target, L, the step
shown and the input tokens carrying most in the overlay. Formats as flyviz export
(.mp4, .webm, .gif, or a folder for PNG frames). --movie-size, --movie-fps,
--reverse, --flow-scale, --view and --gl are its settings: without --movie they
are refused. A missing folder of --movie or --graph is made, as export makes
its --out's; one that cannot take the file is refused before the model loads.
An earlier --movie or --graph of the same name (or a folder's earlier frames) is
replaced, as export replaces its --out, and the line that says it was written
says so.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz trace``."""
    parser.add_argument("spec", metavar="SPEC", nargs="?", default=None,
                        help="model folder, hub repo id or 'demo' (with --recording: default "
                             "the model the recording names)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", default=None,
                        help="text to read (BOS is added once where the model's "
                             "tokenizer has one; FlyGPT's has none)")
    source.add_argument("--recording", metavar="REC", type=Path, default=None,
                        help="a saved run (.flyrec) to trace on its own tokens, with its "
                             "interventions")
    parser.add_argument("--position", type=int, default=None, metavar="P",
                        help="the step to explain, 0 is BOS (default: the last prompt token, "
                             "whose prediction is the first generated token)")
    parser.add_argument("--target", default=None, metavar="TOKEN",
                        help="the token to explain, as text that is one token (often with its "
                             "leading space, e.g. ' Lily') or as id:N; default: the token "
                             "chosen there")
    parser.add_argument("--versus", default=None, metavar="TOKEN",
                        help="explain logit[target] - logit[versus] instead of target - mean")
    parser.add_argument("--window", type=int, default=None, metavar="K",
                        help=f"sweep back K steps (default {DEFAULT_WINDOW}; a K longer than "
                             "the run sweeps all of it). Over longer windows the flows stop "
                             "adding up to L (exit status 1 says so)")
    parser.add_argument("--nodes", type=int, default=500, metavar="N",
                        help="node cap of the pruned graph (default 500)")
    parser.add_argument("--mode", choices=("decomposition", "gradient"), default="decomposition",
                        help="decomposition (exact flows that add up to L, default) or "
                             "gradient (dL/dx with the true tanh slope)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: target and value, token flows, the kept "
                             "nodes and edges, group flows")
    parser.add_argument("--graph", metavar="OUT.json", type=Path, default=None,
                        help="also write the pruned graph as circuit-tracer / Neuronpedia "
                             "graph JSON")
    movie = parser.add_argument_group("flow movie")
    movie.add_argument("--movie", metavar="OUT", default=None,
                       help="also write the lag sweep of the flow view as a movie: .mp4, "
                            ".webm, .gif, or a folder for PNG frames")
    movie.add_argument("--movie-size", default=None, metavar="WxH",
                       help="the movie's frame size in pixels (default 1280x720)")
    movie.add_argument("--movie-fps", type=float, default=None, metavar="F",
                       help="steps shown per second (default 4)")
    movie.add_argument("--reverse", action="store_true",
                       help="sweep from the window's first step forward to the explained one "
                            "(default: from the explained one back)")
    # flyviz.export.flow.FLOW_SCALES, spelled out: the parser does not load the exporter.
    movie.add_argument("--flow-scale", choices=("step", "window"), default=None,
                       help="colour each step over its own largest |flow| (step, default, as "
                            "the app) or every step over the window's (window)")
    movie.add_argument("--view", choices=("front", "top", "side"), default=None,
                       help="camera direction of the movie (default front)")
    movie.add_argument("--gl", choices=("auto",) + BACKENDS, default=None, help=GL_HELP)
    add_dataset_option(parser)
    add_kernel_option(parser)
    add_intervention_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _check(args: argparse.Namespace) -> None:
    """Options that are wrong whatever the model (before it loads)."""
    if args.prompt is not None and not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to read")
    if args.window is not None and args.window < 1:
        raise InputError(f"--window {args.window} is empty: give at least 1 step back (or "
                         f"leave it out for the default, {DEFAULT_WINDOW})")
    if args.position is not None and args.position < 0:
        raise InputError(f"--position {args.position} is negative; positions count from 0 "
                         "(BOS)")
    if args.nodes < 1:
        raise InputError(f"--nodes {args.nodes} must be at least 1")
    if args.recording is not None and getattr(args, "interventions", None):
        raise InputError("--recording is traced with the interventions it was made with; "
                         "leave out --silence/--clamp/--stimulate/--cut/--scale/--patch "
                         "(--source REC gives back the source of its patches)")
    if args.spec is None and args.recording is None:
        raise InputError("give a model SPEC with --prompt, e.g. flyviz trace demo --prompt "
                         "'Tom and his dog'")
    _movie_settings(args)
    args.movie_options = _movie_options(args) if args.movie is not None else None
    _check_outputs(args)


def _check_outputs(args: argparse.Namespace) -> None:
    """The graph's and the movie's paths can be written (a name too long, a folder or a
    file in the way, a folder that takes no file): one line before the model loads. A
    missing folder is made when they are written, as export makes its --out's."""
    from flyviz.fileio import check_not_input, check_output_path

    inputs = {"--recording": args.recording, "--source": getattr(args, "source", None)}
    if args.graph is not None:
        if args.graph.suffix.lower() != ".json":
            raise InputError(f"--graph {args.graph} should end in .json")
        check_output_path(args.graph, "--graph", probe=True)
        check_not_input(args.graph, inputs, "--graph")
    if args.movie is not None:
        from flyviz.export import movie_format

        frames = movie_format(args.movie) == "png"
        check_output_path(args.movie, "--movie", probe=True, folder=frames)
        if frames:  # the user's files there: refused now, not after the trace
            from flyviz.export.encoders import check_frames_folder

            check_frames_folder(args.movie)
        check_not_input(args.movie, inputs, "--movie")


#: The flow movie's settings and their defaults (the parser leaves them None, so that one
#: given without --movie is seen: it would be ignored, a mistake such as --movie-fps 0 too).
MOVIE_DEFAULTS = {"movie_size": "1280x720", "movie_fps": 4.0, "reverse": False,
                  "flow_scale": "step", "view": "front", "gl": "auto"}


def _movie_settings(args: argparse.Namespace) -> None:
    """Refuse a movie setting without ``--movie``; fill in the defaults of the others."""
    # "is", not "in": --movie-fps 0 equals False.
    given = [name for name in MOVIE_DEFAULTS
             if getattr(args, name, None) is not None and getattr(args, name) is not False]
    if args.movie is None and given:
        option = "--" + given[0].replace("_", "-")
        raise InputError(f"{option} is a setting of the flow movie: add --movie OUT (.mp4, "
                         f".webm, .gif or a folder), or leave {option} out")
    for name, default in MOVIE_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def _movie_options(args: argparse.Namespace) -> Any:
    """The flow movie's settings, checked (with the OpenGL asked for) before the model loads."""
    from flyviz.export import ExportOptions, movie_format
    from flyviz.render.gl_backend import requested_backend
    from flyviz.render.offscreen import parse_size

    requested_backend(args.gl)
    options = ExportOptions(size=parse_size(args.movie_size), fps=args.movie_fps,
                            view=args.view).validate()
    options.crf(movie_format(args.movie))
    return options


def _summary(att: Any, top: int = 10) -> str:
    versus = f" - logit[{att.versus_text!r}]" if att.versus is not None else " - mean(logits)"
    lines = [f"{att.model_name}: position {att.position}, target {att.target_text!r} "
             f"(id {att.target}), {att.mode}",
             f"L = logit[{att.target_text!r}]{versus} = {att.value:+.4f}",
             "", f"{'pos':>4}  {'token':<16} {'flow':>10}"]
    for p in range(att.position + 1):
        lines.append(f"{p:>4}  {att.token_texts[p]!r:<16} {att.token_flows[p]:+10.4f}")
    lines.append(f"      {'(padding)':<16} {att.pad_flow:+10.4f}")
    lines.append(f"      {'(biases)':<16} {att.bias_flow:+10.4f}")
    for name, value in (("(stimulation)", att.stimulation_flow), ("(clamps)", att.clamp_flow),
                        ("(before window)", att.earlier_flow)):
        if value:
            lines.append(f"      {name:<16} {value:+10.4f}")
    lines.append(f"      {'(constant)':<16} {att.constant:+10.4f}")
    anatomy = att.checkpoint.anatomy
    for t in (att.position, att.position - 1):
        if t < att.window_start:
            continue
        f = att.node_flow(t)
        lines.append("")
        lines.append(f"neurons carrying most at position {t} ({att.token_texts[t]!r}):")
        for i in att.top_neurons(t, top):
            label = ""
            if anatomy is not None and anatomy.cell_type is not None:
                label = f"{anatomy.cell_type[i]}"
                if anatomy.superclass is not None:
                    label += f" / {anatomy.superclass[i]}"
            lines.append(f"  #{i:<7} {f[i]:+10.4f}  {label}")
        names, flows = att.group_flows("cell_type")
        row = flows[t - att.window_start]
        order = sorted(range(len(names)), key=lambda g: -abs(row[g]))[:top]
        lines.append(f"cell types carrying most at position {t}:")
        lines.extend(f"  {names[g]:<20} {row[g]:+10.4f}" for g in order)
    lines.append("")
    if att.completeness_error is None:
        lines.append("gradient mode: flows are gradient x activation and do not add up to L")
    else:
        lines.append(f"completeness error: {att.completeness_error:+.2e} (L minus the sum of "
                     "all sources and the constant)")
        if att.complete is False:
            lines.append(f"NOT EXACT: that is more than {att.tolerance:.2g} (1e-3 x max(1, |L|)): "
                         "over this window the flows are huge terms that cancel, not what "
                         f"carried L; they add up over the last {att.holding_window()} steps")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Load the model, trace, print (and write the graph)."""
    from flyviz.record.trace import trace_for_command

    _check(args)
    source: Any = args.prompt
    spec = args.spec
    patch_source = None
    if args.recording is None:
        interventions = interventions_from_args(args)
    else:
        from flyviz.kinds import refuse_without_tokens
        from flyviz.record.recording import Recording

        # A recording's own patches: --source/--source-prompt give back a source it does
        # not store (another recording's states).
        interventions = []
        patch_source = patch_source_from_args(args)
        source = Recording.load(args.recording)
        refuse_without_tokens(source, args.recording.name,
                              "trace explains a language model's choice of a token")
        spec, args.dataset = recording_model(source, args.spec, args.dataset)
        if spec is None:
            raise InputError(f"{args.recording.name} names no model; give one as SPEC")
    recorded = "SPEC" if args.recording is not None and not args.spec else None
    with model_from_args(args, spec, recorded=recorded) as model:
        # An incomplete sum is said below in one line with the option that helps (exit 1).
        att, note = trace_for_command(model, source, window=args.window,
                                      position=args.position, target=args.target,
                                      versus=args.versus, mode=args.mode,
                                      interventions=interventions, patch_source=patch_source)
        if args.graph is not None:
            graph = att.to_circuit_tracer_json(nodes=args.nodes)
            from flyviz.fileio import earlier_output, replaced_note, write_text_atomically

            # A missing folder is made, as export makes its --out's (checked before the
            # model loaded: the nearest folder that exists takes files). A graph is made
            # again from its trace: one of the same name is replaced, and the line says so.
            args.graph.expanduser().parent.mkdir(parents=True, exist_ok=True)
            replaced = earlier_output(args.graph)
            write_text_atomically(args.graph.expanduser(), json.dumps(graph))
            print(f"flyviz: wrote the graph ({len(graph['nodes'])} nodes, "
                  f"{len(graph['links'])} links) to {args.graph}"
                  f"{replaced_note(replaced)}", file=sys.stderr)
        if args.json:
            print(json.dumps(att.to_json(nodes=args.nodes)))
        else:
            print(_summary(att))
        if args.movie_options is not None:
            _write_movie(args, att, model)
    if note is not None:
        print(f"flyviz trace: {note}", file=sys.stderr)
        return 1
    return 0


def _write_movie(args: argparse.Namespace, att: Any, model: Any) -> None:
    """The lag sweep of the flow view, with a progress line on stderr."""
    from flyviz.commands.export import ProgressLine, anatomy_for
    from flyviz.export.encoders import FRAME_FILES
    from flyviz.export.flow import export_flow, flow_frame_count
    from flyviz.fileio import earlier_output, replaced_note
    from flyviz.render.offscreen import offscreen_app

    options = args.movie_options
    anatomy = anatomy_for(model)
    _, backend = offscreen_app(backend=args.gl)
    progress = ProgressLine(f"exporting {Path(args.movie).name}")
    # A movie is made again from its trace: as export's, an earlier one (or a folder's
    # earlier frames) is replaced, and the last line says so.
    replaced = earlier_output(args.movie, folder="frames", holding=FRAME_FILES)
    try:
        out = export_flow(att, anatomy, args.movie, options, progress=progress,
                          reverse=args.reverse, scale=args.flow_scale, gl=args.gl)
    finally:
        progress.end_line()
    print(f"flyviz: wrote {out} ({flow_frame_count(att, options)} frames: one per step of "
          f"the window {att.window_start}..{att.position}, {options.size[0]}x"
          f"{options.size[1]}, {options.fps:g} fps, OpenGL: {backend}"
          f"{replaced_note(replaced, inside=True)})", file=sys.stderr)
