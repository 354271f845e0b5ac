"""``flyviz atlas SPEC --corpus PATH... --out ATLAS``: what every neuron responds to over a corpus.

Runs the model over the corpus with the batched engine on Dask (a
LocalCluster of ``--workers`` processes, or an existing cluster with
``--scheduler``) and writes a Zarr store (see :mod:`flyviz.analysis.atlas`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flyviz.commands._options import add_cluster_options, add_dataset_option, check_cluster_options
from flyviz.fileio import KEPT_RESUMABLE_RESULT_HELP


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz atlas``."""
    from flyviz.analysis.atlas import AtlasSettings

    d = AtlasSettings()
    parser.add_argument("spec", metavar="SPEC",
                        help="model: a folder, a hub repo id or 'demo' (on a cluster every "
                             "worker must be able to load it from the same spec)")
    parser.add_argument("--corpus", nargs="+", required=True, metavar="PATH", type=Path,
                        help="text files (documents separated by blank lines), JSON Lines with "
                             "a 'text' field, Parquet with a 'text' column, or folders of them")
    add_dataset_option(parser)
    parser.add_argument("--out", required=True, type=Path, metavar="ATLAS",
                        help="the atlas to write (a Zarr folder, e.g. stories.atlas); "
                             + KEPT_RESUMABLE_RESULT_HELP)
    parser.add_argument("--max-tokens", type=int, default=None, metavar="N",
                        help="read at most N tokens of the corpus, BOS tokens included (default: "
                             "all of it)")
    parser.add_argument("--context", type=int, default=d.context, metavar="T",
                        help=f"longest window fed from the zero state, BOS included (default "
                             f"{d.context}); longer documents are cut into several windows")
    parser.add_argument("--batch", type=int, default=d.streams, metavar="B",
                        help=f"token streams stepped together per worker (default {d.streams})")
    parser.add_argument("--top-k", type=int, default=d.top_k, metavar="K",
                        help=f"top contexts kept per neuron (default {d.top_k})")
    parser.add_argument("--density-threshold", type=float, default=d.density_threshold,
                        metavar="X", help="|x| that counts as active for the density, a "
                                          f"multiple of 0.04 (default {d.density_threshold})")
    parser.add_argument("--compact", action="store_true",
                        help="keep no quantile samples (a smaller atlas, as the demo brain's)")
    parser.add_argument("--chunk-tokens", type=int, default=d.chunk_tokens, metavar="N",
                        help=f"tokens per task, the unit of work and of --resume (default "
                             f"{d.chunk_tokens:,})")
    add_cluster_options(parser, "ATLAS.parts")
    parser.epilog = (
        "examples:\n"
        "  flyviz atlas demo --corpus stories.txt --out stories.atlas\n"
        "  flyviz atlas ./fly-llm-hf --corpus wiki/ --max-tokens 2000000 --out wiki.atlas "
        "--workers 8\n"
        "  flyviz atlas ./fly-llm-hf --corpus wiki/ --out wiki.atlas --scheduler "
        "tcp://10.0.0.5:8786\n"
        "  flyviz atlas demo --corpus stories.txt --out stories.atlas --resume\n"
        "  flyviz neuron stories.atlas 1234")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Build the atlas."""
    from flyviz.analysis.atlas import AtlasSettings, build_atlas, check_output
    from flyviz.analysis.cluster import (check_new_run, command_log, Interrupted, ProgressBar,
                                         require_dask, where_it_ran)
    from flyviz.analysis.corpus import build_corpus, corpus_files
    from flyviz.commands._options import worker_spec
    from flyviz.model.resolve import load_model
    from flyviz.model.tokenizer import tokenizer_for

    settings = AtlasSettings(top_k=args.top_k, context=args.context, streams=args.batch,
                             density_threshold=args.density_threshold,
                             samples_per_band=0 if args.compact else AtlasSettings.samples_per_band,
                             chunk_tokens=args.chunk_tokens).validate()
    require_dask("flyviz atlas", args.workers, args.scheduler)  # before any work
    check_cluster_options(args)  # fail in one line before reading anything
    check_output(args.out.expanduser())   # a folder that is no atlas, one that takes no files
    # A finished atlas (hours of a cluster's work, perhaps) is not replaced: only by
    # continuing, with --resume, an interrupted run that writes there.
    check_new_run(args.out.expanduser(), args.resume, "atlas")
    corpus_files(args.corpus)  # missing files, and Parquet without pyarrow: before the model

    log = command_log("atlas")

    ckpt = load_model(args.spec, dataset_dir=args.dataset)
    corpus = build_corpus(args.corpus, tokenizer_for(ckpt), context=settings.context,
                          max_tokens=args.max_tokens, bos_token_id=ckpt.config.bos_token_id)
    bar = ProgressBar(corpus.n_tokens)
    try:
        result = build_atlas(worker_spec(args.spec), ckpt, corpus, args.out, settings,
                             workers=args.workers, scheduler=args.scheduler, resume=args.resume,
                             progress=bar, compact=args.compact, log=log,
                             dataset=None if args.dataset is None
                             else args.dataset.expanduser().resolve())
    except Interrupted as exc:
        bar.close()
        print(f"flyviz atlas: {exc}", file=sys.stderr)
        return 130
    bar.close()
    rate = result.tokens / result.seconds if result.seconds > 0 else 0.0
    resumed = f", {result.resumed_chunks} of {result.chunks} chunks resumed" \
        if result.resumed_chunks else ""
    print(f"atlas written to {result.path}: {result.counted_tokens:,} positions counted, "
          f"{result.tokens:,} tokens in {result.seconds:.1f} s ({rate:,.0f} tokens/s, "
          f"{where_it_ran(result.workers, args.workers, args.scheduler)}{resumed})")
    from flyviz.analysis.atlas import Atlas

    atlas = Atlas(result.path, verify=False)     # the axes' chunks are checked as they are read
    axes = atlas.principal_axes()
    if axes is None:
        print(f"principal axes: none ({atlas.principal_axes_note()})")
    else:
        shares = " · ".join(f"{100 * v:.1f}" for v in axes.explained)
        print(f"principal axes: PC1–{axes.axes.shape[0]} hold {100 * axes.explained.sum():.1f} % "
              f"of the corpus's variance ({shares})")
    return 0
