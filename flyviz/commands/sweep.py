"""``flyviz sweep SPEC --by superclass|type|side|FILE --text PATH... --out RESULT``: the lesion map.

Lesions every group in turn (silence, cut-out or cut-in), teacher-forced over a
text, on Dask (a LocalCluster of ``--workers`` processes, or an existing
cluster with ``--scheduler``); writes one row per group to CSV or Parquet and
prints the groups sorted by how much the text's cross-entropy rises (see
:mod:`flyviz.analysis.sweep`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import (BATCH_KERNEL_HELP, add_cluster_options,
                                      add_dataset_option, add_kernel_option, add_null_options,
                                      check_cluster_options, kernel_from_args,
                                      lesion_headlines, load_model_from_args,
                                      null_seeds_from_args, print_null_comparisons,
                                      run_nulls_from_args)
from flyviz.errors import InputError
from flyviz.fileio import KEPT_RESUMABLE_RESULT_HELP

EPILOG = """\
what it measures, per group (teacher-forced: every column reads the text's tokens):
  delta_ce        mean increase in cross-entropy over the untouched model (nats/token)
  kl              mean KL(p_untouched || p_lesioned) of the next-token distributions
  top1_agreement  fraction of positions where both predict the same most likely token
Each window of the text is read as BOS + tokens from the zero state; position p
predicts token p+1 (the BOS predicts the first token; the last predicts nothing).
These are the numbers 'flyviz compare' gives for the same intervention.

a FILE for --by holds one group per line, NAME: QUERY (the query language of
--silence; '#' starts a comment line), e.g.
  sensory left:   superclass:cb_sensory & side:left
  kenyon cells:   type:KC*
  inhibitory:     sign:inhibitory

RESULT is .csv or .parquet; its settings and the model's digests are in the
Parquet metadata (key flyviz_sweep), or in the CSV's first line
('# flyviz-sweep {...}'; pandas.read_csv(RESULT, skiprows=1) reads the table).

examples (from a clone's root, where assets/ and examples/ are):
  flyviz sweep demo --by superclass --text assets/demo/heldout.txt --max-tokens 2000 \\
      --out superclass.csv
  flyviz sweep demo --by type --text stories/ --mode cut-out --out types.parquet --workers 8
  flyviz sweep ./fly-llm-hf --by type --text wiki.jsonl --max-tokens 100000 \\
      --out types.parquet --scheduler tcp://10.0.0.5:8786
  flyviz sweep demo --by groups.txt --text story.txt --out mine.csv --resume
  flyviz sweep demo --by superclass --text assets/demo/heldout.txt --max-tokens 2000 \\
      --out superclass.csv --estimate     # and the first-order estimate beside it
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz sweep``."""
    from flyviz.analysis.sweep import MODES, SweepSettings

    d = SweepSettings()
    parser.add_argument("spec", metavar="SPEC",
                        help="model: a folder, a hub repo id or 'demo' (on a cluster every "
                             "worker must be able to load it from the same spec)")
    parser.add_argument("--by", required=True, metavar="superclass|type|side|FILE",
                        help="the groups: every superclass, every cell type, each side, or the "
                             "named queries of FILE (one 'NAME: QUERY' per line), e.g. --by type")
    parser.add_argument("--text", nargs="+", required=True, metavar="PATH", type=Path,
                        help="the text: files (documents separated by blank lines), JSON Lines "
                             "with a 'text' field, Parquet with a 'text' column, or folders of "
                             "them, e.g. --text assets/demo/heldout.txt")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="read at most N tokens of the text, BOS tokens included (default: "
                             "all of it), e.g. --max-tokens 2000")
    parser.add_argument("--mode", choices=MODES, default=d.mode,
                        help="the lesion: silence (state 0 after every step, the default), "
                             "cut-out (every synapse from the group removed) or cut-in (every "
                             "synapse onto it removed), e.g. --mode cut-out")
    parser.add_argument("--out", required=True, type=Path, metavar="RESULT",
                        help="the result, .csv or .parquet (by extension), e.g. lesions.csv; "
                             + KEPT_RESUMABLE_RESULT_HELP)
    add_dataset_option(parser)
    add_kernel_option(parser, BATCH_KERNEL_HELP)
    add_cluster_options(parser, "RESULT.parts")
    parser.add_argument("--batch", type=int, default=d.streams, metavar="B",
                        help=f"columns stepped together per pass: B-1 groups and the untouched "
                             f"model (default {d.streams}), e.g. --batch 33")
    parser.add_argument("--context", type=int, default=d.context, metavar="T",
                        help=f"longest window fed from the zero state, BOS included (default "
                             f"{d.context}); longer documents are cut into several windows")
    parser.add_argument("--chunk-tokens", type=int, default=d.chunk_tokens, metavar="N",
                        help=f"tokens per chunk of the text; a block of groups over a chunk is "
                             f"one task, the unit of work and of --resume (default "
                             f"{d.chunk_tokens:,}; cut finer when there are few groups)")
    parser.add_argument("--show", type=int, default=30, metavar="N",
                        help="rows of the sorted table to print (default 30; 0 prints all)")
    parser.add_argument("--estimate", action="store_true",
                        help="also estimate every neuron's silencing to first order over the "
                             "same text (as 'flyviz importance'; written beside RESULT as "
                             "RESULT.estimate.EXT, .estimate.neurons.EXT and .estimate.zarr) "
                             "and print the Spearman rank correlation and the sign agreement "
                             "of the estimate with the exact table (silence only)")
    add_null_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model and the text, sweep, write and print."""
    from flyviz.analysis.cluster import (check_new_run, command_log, Interrupted, ProgressBar,
                                         require_dask, where_it_ran)
    from flyviz.analysis.corpus import build_corpus, corpus_files
    from flyviz.analysis.sweep import (SweepSettings, check_by, check_output, format_table,
                                       run_sweep, sweep_groups)
    from flyviz.commands._options import worker_spec
    from flyviz.model.tokenizer import tokenizer_for

    if args.show < 0:
        raise InputError(f"--show {args.show} must be 0 (all rows) or more")
    settings = SweepSettings(mode=args.mode, streams=args.batch, context=args.context,
                             chunk_tokens=args.chunk_tokens,
                             kernel=kernel_from_args(args)).validate()
    check_by(args.by)
    null_seeds = null_seeds_from_args(args)
    require_dask("flyviz sweep", args.workers, args.scheduler)  # before any work
    check_cluster_options(args)  # fail in one line before reading anything
    out = args.out.expanduser()
    check_output(out)
    check_new_run(out, args.resume, "lesion map")
    corpus_files(args.text)  # missing files, and Parquet without pyarrow: before the model
    if args.estimate:
        from flyviz.analysis.importance import require_xarray

        if settings.mode != "silence":
            raise InputError(f"--estimate estimates silencing; it cannot be compared with "
                             f"--mode {settings.mode}")
        require_xarray()

    log = command_log("sweep")

    ckpt = load_model_from_args(args)
    groups = sweep_groups(ckpt, args.by)
    corpus = build_corpus(args.text, tokenizer_for(ckpt), context=settings.context,
                          max_tokens=args.max_tokens, bos_token_id=ckpt.config.bos_token_id)
    bar = ProgressBar(len(groups) * corpus.counted_tokens, label="group-tokens")
    dataset = None if args.dataset is None else str(Path(args.dataset).expanduser().resolve())
    try:
        result = run_sweep(worker_spec(args.spec), ckpt, corpus, groups, out, settings,
                           by=str(args.by), dataset=dataset, workers=args.workers,
                           scheduler=args.scheduler, resume=args.resume, progress=bar, log=log)
    except Interrupted as exc:
        bar.close()
        print(f"flyviz sweep: {exc}", file=sys.stderr)
        return 130
    bar.close()
    what = args.by if args.by in ("superclass", "type", "side") else f"group of {args.by}"
    print(f"lesion map of {ckpt.name}: {settings.mode} each {what}; {result.positions:,} "
          f"positions of {', '.join(Path(s).name for s in corpus.sources[:3])}"
          f"{'...' if len(corpus.sources) > 3 else ''}; untouched cross-entropy "
          f"{result.baseline_cross_entropy:.4f} nats/token")
    print(format_table(result.rows, args.show or None))
    resumed = f", {result.resumed_tasks} of {result.tasks} tasks resumed" \
        if result.resumed_tasks else ""
    print(f"written to {result.path}: {len(result.rows):,} groups in {result.passes:,} pass(es), "
          f"{result.seconds:.1f} s ({result.group_tokens_per_second:,.0f} group-tokens/s, "
          f"{where_it_ran(result.workers, args.workers, args.scheduler)}{resumed})")
    if null_seeds:
        _nulls(args, ckpt, corpus, out, settings, result, log)
    if args.estimate:
        return _estimate(args, ckpt, corpus, groups, out, settings, dataset, result.rows, log)
    return 0


def _nulls(args: argparse.Namespace, ckpt: Any, corpus: Any, out: Path, settings: Any,
           real: Any, log: Any) -> None:
    """``--nulls N``: the same sweep on each null, and the headline numbers real vs nulls."""
    from flyviz.analysis.sweep import run_sweep, sweep_groups

    def work(null: Any) -> dict[str, tuple[float, bool]]:
        # The groups again on the null: a query such as sign:inhibitory reads the graph.
        run = run_sweep(null.spec, null.checkpoint, corpus, sweep_groups(null.checkpoint, args.by),
                        Path(null.spec).with_suffix(".csv"), settings, by=str(args.by),
                        workers=args.workers, scheduler=args.scheduler)
        return lesion_headlines(run.rows, run.baseline_cross_entropy)

    found = run_nulls_from_args(args, ckpt, work, out.parent, log)
    print_null_comparisons(lesion_headlines(real.rows, real.baseline_cross_entropy), found, args)


def _estimate(args: argparse.Namespace, ckpt: Any, corpus: Any, groups: list, out: Path,
              settings: Any, dataset: str | None, exact: list, log: Any) -> int:
    """``--estimate``: the first-order estimate of the same groups, and its agreement."""
    from flyviz.analysis.cluster import Interrupted, ProgressBar, parts_folder
    from flyviz.analysis.importance import ImportanceSettings, agreement, run_importance
    from flyviz.commands._options import worker_spec

    estimate_out = out.with_name(f"{out.stem}.estimate{out.suffix}")
    bar = ProgressBar(corpus.n_tokens, label="tokens")
    try:
        run = run_importance(worker_spec(args.spec), ckpt, corpus, groups, estimate_out,
                             ImportanceSettings(context=settings.context,
                                                chunk_tokens=settings.chunk_tokens,
                                                kernel=settings.kernel),
                             by=str(args.by), dataset=dataset, workers=args.workers,
                             scheduler=args.scheduler,
                             # The sweep may have been the part interrupted: the estimate
                             # resumes only what it kept itself.
                             resume=args.resume and parts_folder(estimate_out).exists(),
                             progress=bar, log=log, exact=exact)
    except Interrupted as exc:
        bar.close()
        print(f"flyviz sweep: {exc}", file=sys.stderr)
        return 130
    bar.close()
    found = agreement(exact, run.rows)
    by_name = {r.group: r.delta_ce for r in run.rows}
    shown = exact if not args.show else exact[:args.show]
    width = min(32, max([5] + [len(r.group) for r in shown]))
    print(f"\nestimated (first order, {run.seconds:.1f} s) beside exact, nats/token:")
    print(f"{'rank':>5}  {'group':<{width}}  {'exact dCE':>10}  {'estimate':>10}")
    for r in shown:
        name = r.group if len(r.group) <= width else r.group[:width - 1] + "~"
        print(f"{r.rank:>5}  {name:<{width}}  {r.delta_ce:>10.4f}  {by_name[r.group]:>10.4f}")
    print(found.line())
    print(f"estimate written to {', '.join(str(p) for p in run.paths.values())}")
    return 0
