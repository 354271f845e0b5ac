"""``flyviz patch SPEC --clean TEXT --corrupt TEXT --answer TOKEN --by GROUPS --out RESULT``:
the causal trace.

Runs the corrupted prompt once per (position, group), with that group restored
to the clean run's state at that position, and records how much of the clean
answer comes back (see :mod:`flyviz.analysis.causal`); optionally draws the
heatmap (:mod:`flyviz.analysis.heatmap`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flyviz.commands._options import (BATCH_KERNEL_HELP, add_cluster_options,
                                      add_dataset_option, add_kernel_option,
                                      check_cluster_options, kernel_from_args,
                                      load_model_from_args)
from flyviz.errors import InputError
from flyviz.fileio import KEPT_RESUMABLE_RESULT_HELP

EPILOG = """\
what it measures, per cell (position p, group g), at the corrupted prompt's last position:
  p_answer               p(answer) with g restored to its clean state at p (..p+W-1)
  logit_diff             logit(answer) - logit(--versus, else the corrupted run's top token)
  *_normalised           (m - m_corrupt) / (m_clean - m_corrupt): 0 corrupted, 1 clean
Positions count from 0 (BOS; the first character for FlyGPT, which reads no BOS) in the
corrupted prompt; each cell equals
  flyviz generate SPEC --prompt CORRUPT --patch 'QUERY@p:p+W' --source-prompt CLEAN

RESULT is .csv or .parquet (one row per cell; the prompts, the references and the
model's digests in the CSV's first line '# flyviz-patch {...}' or the Parquet
metadata key flyviz_patch). --figure draws the heatmap: positions as rows
(labelled with their tokens), groups as columns, the colour bar from the
corrupted to the clean value.

examples:
  flyviz patch demo --clean "Once upon a time, there was a little girl named Lily" \\
      --corrupt "Once upon a time, there was a little boy named Tom" --answer " She" \\
      --by superclass --out trace.csv --figure trace.png
  flyviz patch demo --clean "..." --corrupt "..." --answer " She" --by type \\
      --positions 9:13 --window 2 --out types.parquet --workers 8
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz patch``."""
    from flyviz.analysis.causal import METRICS, TraceSettings
    from flyviz.analysis.causal_file import DEFAULT_METRIC

    d = TraceSettings()
    parser.add_argument("spec", metavar="SPEC",
                        help="model: a folder, a hub repo id or 'demo' (on a cluster every "
                             "worker must be able to load it from the same spec)")
    parser.add_argument("--clean", required=True, metavar="TEXT",
                        help="the clean prompt, whose states are restored")
    parser.add_argument("--corrupt", required=True, metavar="TEXT",
                        help="the corrupted prompt, run with one group restored at a time")
    parser.add_argument("--answer", required=True, metavar="TOKEN",
                        help="the clean prompt's answer: one token, e.g. --answer ' She'")
    parser.add_argument("--versus", default=None, metavar="TOKEN",
                        help="the token the logit difference is taken against (default: the "
                             "corrupted run's most likely token), e.g. --versus ' He'")
    parser.add_argument("--by", required=True, metavar="superclass|type|side|FILE",
                        help="the groups: every superclass, every cell type, each side, or the "
                             "named queries of FILE (one 'NAME: QUERY' per line)")
    parser.add_argument("--positions", default=None, metavar="A:B",
                        help="the corrupted positions to restore at, half-open, 0 is BOS "
                             "(the first token where the model reads none; default: all), e.g. --positions 9:13")
    parser.add_argument("--window", type=int, default=d.window, metavar="N",
                        help="restore N positions from each cell's position on (default 1)")
    parser.add_argument("--align", choices=("start", "end"), default="start",
                        help="line the prompts up from the start (default; the same length "
                             "in tokens is needed) or from the end")
    parser.add_argument("--out", required=True, type=Path, metavar="RESULT",
                        help="the result, .csv or .parquet (by extension), e.g. trace.csv; "
                             + KEPT_RESUMABLE_RESULT_HELP)
    parser.add_argument("--figure", type=Path, default=None, metavar="OUT",
                        help="also draw the heatmap, .png or .svg, e.g. --figure trace.png (an "
                             "earlier one of the name is replaced, and the line says so)")
    parser.add_argument("--metric", choices=METRICS, default=DEFAULT_METRIC,
                        help="what the heatmap shows and the table is sorted by (default "
                             f"{DEFAULT_METRIC}, as in the window)")
    add_dataset_option(parser)
    add_kernel_option(parser, BATCH_KERNEL_HELP)
    add_cluster_options(parser, "RESULT.parts")
    parser.add_argument("--batch", type=int, default=d.streams, metavar="B",
                        help=f"cells stepped together per pass (default {d.streams})")
    parser.add_argument("--show", type=int, default=15, metavar="N",
                        help="cells of the best-restoring list to print (default 15; 0 none)")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, trace, write and print."""
    from flyviz.analysis.causal import TraceSettings, encode_prompts, parse_positions, \
        run_causal_trace
    from flyviz.analysis.cluster import (check_new_run, command_log, Interrupted, ProgressBar,
                                         require_dask, where_it_ran)
    from flyviz.analysis.heatmap import check_figure, write_heatmap
    from flyviz.analysis.sweep import check_by, check_output, sweep_groups
    from flyviz.commands._options import worker_spec
    from flyviz.fileio import earlier_output, replaced_note
    from flyviz.model.tokenizer import tokenizer_for

    if args.show < 0:
        raise InputError(f"--show {args.show} must be 0 (none) or more")
    settings = TraceSettings(streams=args.batch, window=args.window,
                             kernel=kernel_from_args(args)).validate()
    check_by(args.by)
    out = args.out.expanduser()
    check_output(out)
    # A finished trace is not replaced, and --resume is checked, before the model loads.
    check_new_run(out, args.resume, "causal trace")
    figure = None if args.figure is None else check_figure(args.figure)
    require_dask("flyviz patch", args.workers, args.scheduler)  # before any work
    check_cluster_options(args)

    ckpt = load_model_from_args(args)
    # Bad prompts, answer or positions fail in one line before any group is resolved.
    prompts = encode_prompts(tokenizer_for(ckpt), ckpt.config.bos_token_id, args.clean,
                             args.corrupt, args.answer, args.align, args.versus)
    span = parse_positions(args.positions, prompts)
    groups = sweep_groups(ckpt, args.by)
    bar = ProgressBar(len(groups) * (span[1] - span[0]) * len(prompts.corrupt),
                      label="cell-steps")
    dataset = None if args.dataset is None else str(Path(args.dataset).expanduser().resolve())

    log = command_log("patch")

    try:
        result = run_causal_trace(worker_spec(args.spec), ckpt, args.clean, args.corrupt,
                                  args.answer, groups, out, settings, positions=span,
                                  align=args.align, versus=args.versus, by=str(args.by), dataset=dataset,
                                  workers=args.workers, scheduler=args.scheduler,
                                  resume=args.resume, progress=bar, log=log)
    except Interrupted as exc:
        bar.close()
        print(f"flyviz patch: {exc}", file=sys.stderr)
        return 130
    bar.close()
    trace = result.trace
    refs = trace.references
    print(f"causal trace of {ckpt.name}: answer {args.answer!r} vs {trace.info['versus']!r}; "
          f"p(answer) clean {refs['p_clean']:.4f}, corrupted {refs['p_corrupt']:.4f}; "
          f"logit difference clean {refs['logit_diff_clean']:.4f}, corrupted "
          f"{refs['logit_diff_corrupt']:.4f}")
    if args.show:
        # Sorted by --metric; both measures shown, each with its normalised value, under
        # the names of the file's columns (and of --metric), so no two headers are alike.
        print(f"cells restoring the most {args.metric}:")
        print(f"{'position':>8}  {'token':<14} {'group':<28} {'p_answer':>9} "
              f"{'p_normalised':>12} {'logit_diff':>10} {'logit_diff_normalised':>21}")
        for cell in trace.best(args.metric, args.show):
            print(f"{cell.position:>8}  {cell.token[:14]:<14} {cell.group[:28]:<28} "
                  f"{cell.p_answer:>9.4f} {cell.p_normalised:>12.3f} {cell.logit_diff:>10.4f} "
                  f"{cell.logit_diff_normalised:>21.3f}")
    if figure is not None:
        # A figure is drawn again from its table: like savefig, one of the same name is
        # replaced (unlike the table, a finished result), and the line says so.
        replaced = earlier_output(figure)
        write_heatmap(trace, figure, args.metric)
        print(f"heatmap written to {figure}{replaced_note(replaced)}")
    resumed = f", {result.resumed_tasks} of {result.tasks} tasks resumed" \
        if result.resumed_tasks else ""
    print(f"written to {result.path}: {len(trace.rows):,} cells in {result.tasks:,} pass(es), "
          f"{result.seconds:.1f} s "
          f"({where_it_ran(result.workers, args.workers, args.scheduler)}{resumed})")
    return 0
