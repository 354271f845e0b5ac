"""``flyviz importance SPEC --text PATH... --out RESULT [--by ...]``: estimated lesions.

One teacher-forced forward pass and one gradient sweep per window of the text
estimate, to first order, how much silencing each of the model's neurons would
raise the text's cross-entropy, and any grouping's sum (see
:mod:`flyviz.analysis.importance`). Runs on Dask like ``flyviz sweep``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from flyviz.commands._options import (add_cluster_options, add_dataset_option,
                                      add_kernel_option, add_null_options,
                                      check_cluster_options, kernel_from_args,
                                      lesion_headlines, load_model_from_args,
                                      null_seeds_from_args, print_null_comparisons,
                                      run_nulls_from_args)
from flyviz.errors import InputError
from flyviz.fileio import KEPT_RESUMABLE_RESULT_HELP

EPILOG = """\
what it estimates (attribution patching, first order):
  delta_ce_est(i) = sum_t (0 - x_i(t)) * dCE/dx_i(t)    (nats/token)
the rise in the text's mean next-token cross-entropy if neuron i were silenced
(state 0 after every step), with the true gradient of one backward sweep per
window; a group's estimate is the sum over its neurons. The text is read as
'flyviz sweep' reads it (same windows, same positions); 'flyviz sweep --estimate'
measures the estimate against the exact lesions.

files written (RESULT is .csv or .parquet):
  RESULT              one row per group, the lesion-map format (delta_ce is the estimate)
  RESULT.neurons.EXT  one row per neuron: its labels and delta_ce_est
  RESULT.zarr         delta_ce_est[neuron] as an xarray Dataset (flyviz.record.convert.open_zarr)

examples (from a clone's root, where assets/ and examples/ are):
  flyviz importance demo --text assets/demo/heldout.txt --max-tokens 2000 --out est.csv
  flyviz importance demo --text stories/ --by type --out types.parquet --workers 4
  flyviz importance demo --text story.txt --by groups.txt --out mine.csv --resume
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz importance``."""
    from flyviz.analysis.importance import ImportanceSettings

    d = ImportanceSettings()
    parser.add_argument("spec", metavar="SPEC",
                        help="model: a folder, a hub repo id or 'demo' (on a cluster every "
                             "worker must be able to load it from the same spec)")
    parser.add_argument("--text", nargs="+", required=True, metavar="PATH", type=Path,
                        help="the text: files (documents separated by blank lines), JSON Lines "
                             "with a 'text' field, Parquet with a 'text' column, or folders")
    parser.add_argument("--by", default="superclass", metavar="superclass|type|side|FILE",
                        help="the groups to sum the estimate over (default superclass), or the "
                             "named queries of FILE (one 'NAME: QUERY' per line)")
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="read at most N tokens of the text, BOS tokens included")
    parser.add_argument("--out", required=True, type=Path, metavar="RESULT",
                        help="the groups' result, .csv or .parquet; the per-neuron table and "
                             "the Zarr array are written beside it; " + KEPT_RESUMABLE_RESULT_HELP)
    add_dataset_option(parser)
    add_kernel_option(parser, "sparse kernel for W @ x and W^T v: auto (default: the "
                      "FLYVIZ_KERNEL environment variable, else llvm, the compiled kernel, "
                      "where it compiles, else scipy), scipy, or llvm; all give the same "
                      "results. Example: --kernel scipy")
    add_cluster_options(parser, "RESULT.parts")
    parser.add_argument("--context", type=int, default=d.context, metavar="T",
                        help=f"longest window fed from the zero state, BOS included (default "
                             f"{d.context}, as flyviz sweep)")
    parser.add_argument("--chunk-tokens", type=int, default=d.chunk_tokens, metavar="N",
                        help=f"tokens per task (default {d.chunk_tokens:,})")
    parser.add_argument("--show", type=int, default=30, metavar="N",
                        help="rows of the sorted table to print (default 30; 0 prints all)")
    add_null_options(parser)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model and the text, estimate, write and print."""
    from flyviz.analysis.cluster import (check_new_run, command_log, Interrupted, ProgressBar,
                                         require_dask, where_it_ran)
    from flyviz.analysis.corpus import build_corpus, corpus_files
    from flyviz.analysis.importance import (ImportanceSettings, require_xarray,
                                            run_importance)
    from flyviz.analysis.importance_file import check_companions
    from flyviz.analysis.sweep import check_by, check_output, format_table, sweep_groups
    from flyviz.commands._options import worker_spec
    from flyviz.model.tokenizer import tokenizer_for

    if args.show < 0:
        raise InputError(f"--show {args.show} must be 0 (all rows) or more")
    settings = ImportanceSettings(context=args.context, chunk_tokens=args.chunk_tokens,
                                  kernel=kernel_from_args(args)).validate()
    check_by(args.by)
    null_seeds = null_seeds_from_args(args)
    require_dask("flyviz importance", args.workers, args.scheduler)  # before any work
    check_cluster_options(args)
    out = args.out.expanduser()
    check_output(out)          # RESULT and RESULT.parts: a folder that takes files
    check_companions(out)      # RESULT.neurons.EXT and RESULT.zarr beside it
    require_xarray()
    check_new_run(out, args.resume, "importance estimate")
    corpus_files(args.text)  # missing files, and Parquet without pyarrow: before the model

    log = command_log("importance")

    ckpt = load_model_from_args(args)
    groups = sweep_groups(ckpt, args.by)
    corpus = build_corpus(args.text, tokenizer_for(ckpt), context=settings.context,
                          max_tokens=args.max_tokens, bos_token_id=ckpt.config.bos_token_id)
    bar = ProgressBar(corpus.n_tokens, label="tokens")
    dataset = None if args.dataset is None else str(Path(args.dataset).expanduser().resolve())
    try:
        result = run_importance(worker_spec(args.spec), ckpt, corpus, groups, out, settings,
                                by=str(args.by), dataset=dataset, workers=args.workers,
                                scheduler=args.scheduler, resume=args.resume, progress=bar,
                                log=log)
    except Interrupted as exc:
        bar.close()
        print(f"flyviz importance: {exc}", file=sys.stderr)
        return 130
    bar.close()
    print(f"estimated lesions of {ckpt.name}: silencing each neuron, summed per "
          f"{args.by if args.by in ('superclass', 'type', 'side') else 'group of ' + str(args.by)}"
          f"; {result.positions:,} positions; untouched cross-entropy "
          f"{result.baseline_cross_entropy:.4f} nats/token")
    print(format_table(result.rows, args.show or None))
    paths = ", ".join(str(p) for p in result.paths.values())
    print(f"written to {paths}: {ckpt.config.neurons:,} neurons, {len(result.rows):,} groups, "
          f"{result.seconds:.1f} s ({where_it_ran(result.workers, args.workers, args.scheduler)})")
    if null_seeds:
        def work(null: Any) -> dict[str, tuple[float, bool]]:
            # The groups again on the null: a query such as sign:inhibitory reads the graph.
            run = run_importance(null.spec, null.checkpoint, corpus,
                                 sweep_groups(null.checkpoint, args.by),
                                 Path(null.spec).with_suffix(".csv"), settings, by=str(args.by),
                                 workers=args.workers, scheduler=args.scheduler)
            return lesion_headlines(run.rows, run.baseline_cross_entropy)

        found = run_nulls_from_args(args, ckpt, work, out.parent, log)
        print_null_comparisons(lesion_headlines(result.rows, result.baseline_cross_entropy),
                               found, args)
    return 0
