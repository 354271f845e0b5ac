"""``flyviz circuit SPEC --task FILE``: the smallest part of the brain that carries a task.

Scores every unit (neurons, cell types, superclasses or synapses) with the
exact backward engine summed over the task's prompts (on Dask), then measures
the faithfulness of the top ``k`` units by running the model with everything
else ablated, over a curve of sizes (see :mod:`flyviz.analysis.circuit`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_kernel_option,
                                      add_null_options, kernel_from_args, load_model_from_args,
                                      null_seeds_from_args,
                                      run_nulls_from_args)
from flyviz.errors import InputError
from flyviz.fileio import KEPT_RESULT_HELP, check_new_result, shipped_example_hint

EPILOG = """\
the task (--task FILE):
  JSON Lines, one prompt a line:
    {"prompt": "there was a little girl named", "target": " Lily", "versus": " Tom"}
    {"prompt": "...", "target_id": 766}          (no versus: target - mean logit)
  metric m = logit[target] - logit[versus] at the prompt's last position, averaged;
  any other file is a text: m = its mean next-token log-probability (minus the
  cross-entropy), so that for both a higher m is a better-kept task.

faithfulness (measured by running, as the MIB benchmark defines it):
  f(C) = (m(C) - m(none)) / (m(whole model) - m(none))
  C keeps the top k units by |score|; every other neuron's state is held, at
  every step, at its mean over the task's prompts and positions (--ablation
  mean, the default), at 0 (zero), or at its state at the same step of the next
  prompt's untouched run (resample); with --edges every other synapse carries
  its mean current (mean) or is removed (zero).
  The curve runs from k = 0 (f = 0) over --points sizes log-spaced from 10 to
  all N units (f = 1); CPR = area under f over k/N, CMD = area under |1 - f|.
  Every point is run, never estimated from the scores.

the circuit (faithful means close to the whole model, both ways):
  the smallest measured k with |1 - f| <= --tolerance (0.1) on the task and on
  at least --prompt-share (0.9) of its prompts one by one: the first such curve
  point, refined by bisection; where the curve jumps over the band between two
  points the sizes between are searched too. A circuit that overshoots (f of
  1.69: the part does more than the whole) is not faithful. When no circuit
  below the whole brain is faithful the command says so instead of naming one.

scores (--score): flow (exact node and edge flows of 'flyviz trace'),
gradient (gradient x state), ig (the gradient averaged over scaled inputs).

examples (from a clone's root, where assets/ and examples/ are):
  flyviz circuit demo --task examples/names.jsonl
  flyviz circuit demo --task examples/names.jsonl --nodes types --ablation mean --json
  flyviz circuit demo --task examples/names.jsonl --edges --tolerance 0.05 --out names-circuit
  flyviz circuit demo --task examples/names.jsonl --nulls 3    (real vs 3 degree nulls)
  flyviz circuit demo --task examples/names.jsonl --nulls degree-sign:3
  flyviz circuit demo --task examples/names.jsonl --figure curve.png   (f against k, drawn)
"""

#: The headline numbers of :meth:`~flyviz.analysis.circuit.CircuitResult.headline`, as
#: printed, and which way is "more" (a null at least as extreme counts against the real
#: model): a higher CPR and faithfulness, a lower CMD and a smaller circuit.
HEADLINES = {"cpr": ("CPR", True), "cmd": ("CMD", False),
             "circuit_size": ("circuit size", False),
             "circuit_fraction": ("circuit fraction", False),
             "faithful_circuit": ("faithful circuit", True)}
#: The rows compared only among the searches that found a faithful circuit: a search that
#: found none records the whole model as its size, which is no circuit, not a large one.
SIZE_ROWS = ("circuit_size", "circuit_fraction")
#: What each row's p counts, printed beside it.
ROW_NOTES = {"faithful_circuit": "1 = a faithful circuit below the whole model, 0 = none; "
                                 "one-sided: p = (1 + #nulls that find one too) / (1 + N)"}
#: The ``faithful_circuit`` row's note where the real search found none: every null counts
#: as at least as extreme as "none", so its p is 1 whatever the nulls found.
NOTE_NONE_FOUND = ("1 = a faithful circuit below the whole model, 0 = none; one-sided: the "
                   "real search found none, so every null counts and p = (1 + N) / (1 + N) "
                   "= 1")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz circuit``."""
    from flyviz.analysis.circuit import ABLATIONS, NODE_UNITS, SCORES, CircuitSettings

    d = CircuitSettings()
    parser.add_argument("spec", metavar="SPEC",
                        help="model: a folder, a hub repo id or 'demo' (Dask workers load it "
                             "from the same spec)")
    parser.add_argument("--task", required=True, type=Path, metavar="FILE",
                        help="the task: JSON Lines of prompts and targets, or a text")
    parser.add_argument("--nodes", choices=NODE_UNITS, default=d.nodes,
                        help="what a circuit keeps: neurons (default), every neuron of the "
                             "top cell types, or of the top superclasses")
    parser.add_argument("--edges", action="store_true",
                        help="keep the top synapses instead (every neuron runs)")
    parser.add_argument("--ablation", choices=ABLATIONS, default=d.ablation,
                        help="what the rest is held at: its mean state over the task's "
                             "prompts and positions (default), 0, or its state in another "
                             "prompt's run (resample)")
    parser.add_argument("--tolerance", type=float, default=d.tolerance, metavar="T",
                        help=f"a circuit is faithful when |1 - f| <= T, in (0, 1) (default "
                             f"{d.tolerance:g})")
    parser.add_argument("--prompt-share", type=float, default=d.prompt_share, metavar="S",
                        help=f"and when that holds on at least this share of the prompts one "
                             f"by one, in (0, 1] (default {d.prompt_share:g})")
    parser.add_argument("--score", choices=SCORES, default=d.score,
                        help="how units are ranked: flow (default), gradient or ig")
    parser.add_argument("--points", type=int, default=d.points, metavar="N",
                        help=f"circuit sizes on the curve, log-spaced (default {d.points})")
    parser.add_argument("--ig-steps", type=int, default=d.ig_steps, metavar="M",
                        help=f"scaled inputs the ig score averages (default {d.ig_steps})")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="Dask worker processes for the scores (default: the usable "
                             "cores); 0 computes in this process")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: curve, circuit, cpr, cmd, settings")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write scores.csv, curve.csv and circuit.json into DIR; "
                             + KEPT_RESULT_HELP)
    parser.add_argument("--figure", type=Path, default=None, metavar="FILE",
                        help="draw the faithfulness curve (f against k, the tolerance band, "
                             "the overshoots, the circuit, CPR and CMD) into FILE (.png or .svg; needs "
                             "flyviz[figures]; an earlier FILE is replaced, and the line says so)")
    parser.add_argument("--show", type=int, default=10, metavar="N",
                        help="circuit units to print (default 10)")
    parser.add_argument("--context", type=int, default=None, metavar="T",
                        help="a text task's longest window, BOS included (default 128)")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="read at most N tokens of a text task, BOS tokens included")
    add_dataset_option(parser)
    add_kernel_option(parser)
    add_null_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def settings_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~flyviz.analysis.circuit.CircuitSettings` the options name, checked."""
    from flyviz.analysis.circuit import CircuitSettings

    return CircuitSettings(nodes=args.nodes, edges=bool(args.edges), ablation=args.ablation,
                           tolerance=args.tolerance, prompt_share=args.prompt_share,
                           score=args.score, points=args.points,
                           ig_steps=args.ig_steps, kernel=kernel_from_args(args)).validate()


def _table(result: Any, ckpt: Any, show: int, workers: int | None = None) -> str:
    from flyviz.analysis.circuit import neuron_labels
    from flyviz.analysis.cluster import IN_THIS_PROCESS, where_it_ran

    units, s, task = result.units, result.settings, result.task
    where = where_it_ran(result.workers, workers)
    where = where if where == IN_THIS_PROCESS else f"on {where}"
    kind = units.kind
    ablated = "synapse" if kind == "edges" else "neuron"
    lines = [f"circuit of {ckpt.name} for {task.source or 'the task'}: {len(task.prompts):,} "
             f"prompts, metric {task.metric_text()}",
             f"m(M) = {result.full_metric:+.4f} (whole model), m(∅) = {result.empty_metric:+.4f} "
             f"(every {ablated} {s.ablation}-ablated); scores: {s.score}, {units.count:,} "
             f"{kind}, {result.seconds.get('scores', 0):.1f} s {where}",
             "", f"{kind:>10}  {'fraction':>9}  {'metric':>10}  {'faithfulness':>12}  "
             f"{'prompts within':>14}  judged"]
    for p in result.curve:
        within = result.spread(p)["within"]
        lines.append(f"{p.size:>10,}  {p.size / units.count:>9.4f}  {p.metric:>+10.4f}  "
                     f"{p.faithfulness:>12.4f}  {within:>14.0%}  {_judged(result, p)}")
    lines.append("")
    lines.append(f"CPR {result.cpr:.4f}   CMD {result.cmd:.4f}   (areas under f and |1 - f| "
                 "over the circuit fraction k/N)")
    lines.extend(verdict_lines(result))
    if not result.faithful or show <= 0:   # --show 0: no unit lists, not empty headers
        return "\n".join(lines)
    types, classes = neuron_labels(ckpt, "cell_type"), neuron_labels(ckpt, "superclass")
    kept = result.kept_units[:show]
    if kind == "neurons":
        lines.append("its top neurons:")
        lines.extend(f"  #{int(i):<7} {result.scores[i]:+12.4g}  {types[i]} / {classes[i]}"
                     for i in kept)
    elif kind == "edges":
        pre, post, score = result.circuit_edges(ckpt, limit=show)
        lines.append("its top synapses:")
        lines.extend(f"  #{int(a)} ({types[a]}) -> #{int(b)} ({types[b]})  {v:+12.4g}"
                     for a, b, v in zip(pre, post, score))
    else:
        lines.append(f"its {kind}:")
        assert units.members is not None
        for g in kept:
            lines.append(f"  {units.names[g]:<24} {result.scores[g]:+12.4g}  "
                         f"({int((units.members == g).sum()):,} neurons)")
        order = result.neuron_scores[result.circuit_neurons(ckpt)]
        top = result.circuit_neurons(ckpt)[(-abs(order)).argsort(kind="stable")[:show]]
        lines.append("its top neurons:")
        lines.extend(f"  #{int(i):<7} {result.neuron_scores[i]:+12.4g}  {types[i]} / "
                     f"{classes[i]}" for i in top)
    return "\n".join(lines)


def _judged(result: Any, point: Any) -> str:
    if point.size in (0, result.units.count):
        return ""
    judged = result.judge(point)
    if judged == "overshoots":
        return f"overshoots: {point.faithfulness:.0%}"
    return {"prompts": "too few prompts within"}.get(judged, judged)


def verdict_lines(result: Any) -> list[str]:
    """What the search found, in words: the faithful circuit with its per-prompt spread, or
    that there is none; and the largest overshoot, named as such."""
    s, kind, count = result.settings, result.units.kind, result.units.count
    band = (f"|1 - f| <= {s.tolerance:g} on the task and on {s.prompt_share:.0%} of its "
            f"{len(result.task.prompts):,} prompts")
    refined = f", {len(result.refinement)} bisection steps" if result.refinement else ""
    if result.faithful:
        spread = result.spread()
        lines = [f"faithful circuit: {result.size:,} {kind} ({result.size / count:.2%}) with "
                 f"measured f = {result.faithfulness:.4f} ({band}{refined})",
                 f"  per prompt: f from {spread['min']:.3f} to {spread['max']:.3f} (quartiles "
                 f"{spread['q25']:.3f}, {spread['median']:.3f}, {spread['q75']:.3f}), "
                 f"{spread['within']:.0%} of the prompts within {s.tolerance:g}"]
    else:
        measured = len(result.measured_below_whole)
        lines = [f"no circuit below the whole brain is faithful: none of the {measured:,} "
                 f"measured sizes smaller than all {count:,} {kind} has {band}{refined}"]
        miss = result.near_miss
        if miss is not None:
            lines.append(f"closest: {miss.size:,} {kind} with f = {miss.faithfulness:.4f} on "
                         f"the task, but {result.spread(miss)['within']:.0%} of the prompts "
                         f"within {s.tolerance:g}")
    over = result.overshoot
    if over is not None:
        lines.append(f"overshoots: {over.faithfulness:.0%} at {over.size:,} {kind} (more than "
                     "the whole model: not faithful, not kept)")
    return lines


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model and the task, find the circuit, print, write."""
    from flyviz.analysis.circuit import check_resample, find_circuit
    from flyviz.analysis.circuit_file import check_out_dir, write_circuit_folder
    from flyviz.analysis.circuit_tasks import TEXT_CONTEXT, load_task
    from flyviz.analysis.cluster import command_log, ProgressBar, require_dask
    from flyviz.commands._options import worker_spec
    from flyviz.model.tokenizer import tokenizer_for

    settings = settings_from_args(args)
    if args.workers is not None and not 0 <= args.workers <= 1024:
        raise InputError(f"--workers {args.workers} must be between 0 and 1024")
    if args.show < 0:
        raise InputError(f"--show {args.show} must be 0 or more")
    context = TEXT_CONTEXT if args.context is None else args.context
    if context < 2:
        raise InputError(f"--context {context} must be at least 2 tokens")
    # checked whatever the task is (a JSON Lines task does not read it, a text task would
    # refuse it only after the model loads)
    if args.max_tokens is not None and args.max_tokens < 2:
        raise InputError(f"--max-tokens {args.max_tokens} must be at least 2")
    seeds = null_seeds_from_args(args)
    require_dask("flyviz circuit", args.workers)
    out = None if args.out is None else check_new_result(check_out_dir(args.out), "circuit")
    figure = None
    if args.figure is not None:
        from flyviz.analysis.circuit_figure import check_figure_path
        from flyviz.extras import require

        figure = check_figure_path(args.figure)
        require("figures", "flyviz circuit --figure")
    task_path = args.task.expanduser()
    if not task_path.is_file():
        raise InputError(f"the task file {task_path} does not exist{shipped_example_hint(task_path)}"
                         if not task_path.exists()
                         else f"the task {task_path} is not a file")
    ckpt = load_model_from_args(args)
    task = load_task(task_path, tokenizer_for(ckpt), ckpt.config.vocabulary,
                     ckpt.config.bos_token_id, context=context, max_tokens=args.max_tokens)
    if settings.ablation == "resample":   # before the progress line: the refusal is one line
        check_resample(ckpt, task)

    log = command_log("circuit")

    dataset = None if args.dataset is None else str(Path(args.dataset).expanduser().resolve())
    bar = ProgressBar(task.n_tokens, label="tokens")
    try:
        result = find_circuit(worker_spec(args.spec), ckpt, task, settings, dataset=dataset,
                              workers=args.workers, progress=bar, log=log)
    finally:
        bar.close()
    document = result.to_json(ckpt)
    found: list[dict[str, tuple[float, bool]]] = []
    if seeds:
        found = _nulls(args, task, settings, ckpt, out, log)
        document["nulls"] = {"kind": args.null_kind, "seeds": seeds,
                             **_comparisons(_headlines(result), found)}
    if out is not None:
        write_circuit_folder(out, result, ckpt, document)
        log(f"wrote {out}/scores.csv, curve.csv and circuit.json")
    if figure is not None:
        from flyviz.analysis.circuit_figure import circuit_curve_figure
        from flyviz.fileio import earlier_output, replaced_note

        # A figure is drawn again from its curve: like savefig, one of the same name is
        # replaced (unlike --out, a finished result), and the line says so.
        replaced = earlier_output(figure)
        circuit_curve_figure(result, figure)
        log(f"wrote {figure}{replaced_note(replaced)}")
    if args.json:
        print(json.dumps(document))
        return 0
    print(_table(result, ckpt, args.show, args.workers))
    if seeds:
        _print_comparisons(document["nulls"], args,
                           unit=f"circuits of {result.units.kind} at --tolerance "
                                f"{settings.tolerance:g}")
    return 0


def _headlines(result: Any) -> dict[str, tuple[float, bool]]:
    """The headline numbers of a circuit search compared with nulls: name -> (value,
    higher_is_more). Faithfulness itself is not one (a search that finds nothing records
    f = 1, as faithful as can be): whether a faithful circuit was found is."""
    numbers = dict(result.headline())
    numbers.pop("faithfulness", None)
    numbers["faithful_circuit"] = 1.0 if result.faithful else 0.0
    return {name: (value, HEADLINES[name][1]) for name, value in numbers.items()}


def _comparisons(real: dict[str, tuple[float, bool]],
                 nulls: list[dict[str, tuple[float, bool]]]) -> dict[str, Any]:
    """Each headline row real vs the nulls (JSON values): the size rows only among the
    nulls with a faithful circuit, and only when the real search found one (else
    ``real`` and ``p`` are ``None`` and ``note`` says why)."""
    from flyviz.analysis.nulls import compare_to_nulls

    with_circuit = [n for n in nulls if n["faithful_circuit"][0] == 1.0]
    real_found = real["faithful_circuit"][0] == 1.0
    rows: dict[str, Any] = {}
    for name, (value, higher) in real.items():
        pool, note = nulls, ROW_NOTES.get(name)
        if name == "faithful_circuit" and not real_found:
            note = NOTE_NONE_FOUND
        if name in SIZE_ROWS:
            note = (f"among the {len(with_circuit)} of {len(nulls)} nulls with a faithful "
                    "circuit")
            if not real_found or not with_circuit:
                why = ("the real search found no faithful circuit" if not real_found
                       else f"no null's search found a faithful circuit (0 of {len(nulls)})")
                rows[name] = {"real": value if real_found else None,
                              "p": None, "n": len(with_circuit), "higher_is_more": higher,
                              "note": why,
                              "nulls": [n[name][0] for n in with_circuit]}
                continue
            pool = with_circuit
        comparison = compare_to_nulls(value, [n[name][0] for n in pool], higher_is_more=higher)
        rows[name] = {**comparison.to_dict(), "note": note}
    return rows


def _print_comparisons(rows: dict[str, Any], args: argparse.Namespace, unit: str) -> None:
    """One printed row per headline number, real vs nulls, with its note."""
    from flyviz.analysis.nulls import NullComparison

    seeds = rows["seeds"]
    span = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"
    print(f"\nreal vs {len(seeds)} {args.null_kind} null(s) ({span}), {unit}:")
    width = max(len(label) for label, _ in HEADLINES.values())
    for name, (label, _) in HEADLINES.items():
        row = rows[name]
        if row["p"] is None:
            print(f"  {label:<{width}}  {row['note']}")
            continue

        def number(key: str, row: dict[str, Any] = row) -> float:
            return float("nan") if row[key] is None else float(row[key])

        line = NullComparison(real=number("real"), mean=number("mean"), sd=number("sd"),
                              z=number("z"), p=float(row["p"]), n=int(row["n"]),
                              higher_is_more=bool(row["higher_is_more"])).line()
        print(f"  {label:<{width}}  {line}" + (f" ({row['note']})" if row["note"] else ""))


def _nulls(args: argparse.Namespace, task: Any, settings: Any, ckpt: Any, out: Path | None,
           log: Any) -> list[dict[str, tuple[float, bool]]]:
    """``--nulls N``: the same circuit search (task, settings, workers) on each null; its
    headline numbers, one dict per null."""
    from flyviz.analysis.circuit import find_circuit

    def work(null: Any) -> dict[str, tuple[float, bool]]:
        found = find_circuit(null.spec, null.checkpoint, task, settings, workers=args.workers)
        circuit = (f"circuit {found.size:,} {found.units.kind}" if found.faithful
                   else "no faithful circuit")
        log(f"null seed {null.seed}: CPR {found.cpr:.4f}, {circuit}")
        return _headlines(found)

    # The nulls are written beside --out (else in the system's temporary folder).
    workdir = None if out is None else out.expanduser().resolve().parent
    return run_nulls_from_args(args, ckpt, work, workdir, log)
