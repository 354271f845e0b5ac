"""``flyviz bench [SPEC]``: engine speed against the memory-bandwidth floor, and load time."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_dataset_option, add_intervention_options,
                                      interventions_from_args)
from flyviz.model.errors import InputError


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz bench``."""
    parser.add_argument("spec", metavar="SPEC", nargs="?", default=None,
                        help="model to measure (default: synthetic full-size models, rank-64 "
                             "and dense, plus the load time of a full-size checkpoint)")
    add_dataset_option(parser)
    parser.add_argument("--steps", type=int, default=60, metavar="N",
                        help="timed steps per model (default 60; the median is reported)")
    parser.add_argument("--threads", type=int, default=None, metavar="T",
                        help="threads for the sparse product (default: usable cores, max 4)")
    parser.add_argument("--kernel", choices=("auto", "scipy", "llvm", "both"), default="auto",
                        help="sparse kernel for W @ x: auto (as the app: FLYVIZ_KERNEL, else "
                             "the default, scipy), one of them, or both, measured "
                             "interleaved in this process")
    parser.add_argument("--batch", type=int, default=None, metavar="B",
                        help="measure the batched engine with B streams against the "
                             "single-stream engine, interleaved in this run (tokens/s and "
                             "their ratio), instead of the floor comparison")
    parser.add_argument("--engine-js", metavar="FILE", default=None,
                        help="also time the reference engine (engine.js, under node) on the "
                             "same rank-r model, in the same rounds, and report flyviz's "
                             "speed-up over it, e.g. --engine-js ../shared/reference/engine.js")
    parser.add_argument("--no-load", action="store_true",
                        help="skip the load-time measurement")
    parser.add_argument("--interventions", action="store_true", dest="measure_interventions",
                        help="measure the step with interventions against the step without, "
                             "token by token in one run, on SPEC (default: the demo brain); the "
                             "interventions are the options below, by default --silence "
                             "'sign:inhibitory' --stimulate 'input=0.5' --cut "
                             "'superclass:visual_projection->all'")
    parser.add_argument("--trace", type=int, nargs="?", const=64, default=None, metavar="K",
                        help="measure one trace (the taped forward run and the backward "
                             "sweep) over a K-token window (default 64) against K forward "
                             "steps, in one run, on SPEC (default: the demo brain), and the "
                             "memory of its tape")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_intervention_options(parser)
    parser.epilog = ("examples:\n  flyviz bench\n  flyviz bench ./fly-llm-hf --steps 100 --json\n"
                     "  flyviz bench --kernel both --steps 200 --no-load\n"
                     "  flyviz bench demo --engine-js ../shared/reference/engine.js\n"
                     "  flyviz bench --interventions --steps 300\n"
                     "  flyviz bench ./fly-llm-hf --interventions --silence 'id:0-9999'\n"
                     "  flyviz bench --batch 64 --steps 40\n"
                     "  flyviz bench --trace\n"
                     "  flyviz bench --trace 32 --kernel both")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _table(results: dict[str, Any]) -> str:
    lines = [f"threads: {results['threads']}"]
    if "model" in results:
        lines.append(f"model: {results['model']} (loaded in {results['model_load_s']:.2f} s)")
    lines.append(f"{'readout':<10} {'kernel':<6} {'ms/token':>9} {'(p10)':>7} {'tokens/s':>9} "
                 f"{'floor ms':>9} {'(p10)':>7} {'floor MB':>9} {'GB/s':>6} {'ratio':>6}")
    for e in results["engines"]:
        lines.append(f"{e['readout']:<10} {e['kernel']:<6} {e['step_ms']:9.2f} "
                     f"{e['step_ms_p10']:7.2f} {e['tokens_per_s']:9.1f} {e['floor_ms']:9.2f} {e['floor_ms_p10']:7.2f} "
                     f"{e['floor_bytes'] / 1e6:9.1f} {e['floor_gb_per_s']:6.1f} {e['ratio']:6.2f}")
    lines.append("medians over the steps; floor = time to stream the same bytes (graph, readout, "
                 "input projections, per-neuron vectors) once with the same threads, measured "
                 "in rounds alternating with the steps of this run (and with the other kernel's, "
                 "if any); ratio = median ms/token / median floor")
    llvm = results.get("llvm_kernel") or {}
    if llvm.get("compile_s") is not None:
        lines.append(f"llvm kernel: compiled in {1e3 * llvm['compile_s']:.0f} ms on first use")
    elif llvm.get("error"):
        lines.append(f"llvm kernel unavailable, scipy ran instead: {llvm['error']}")
    for e in results["engines"]:
        if "engine_js_ms" in e:
            lines.append(f"{e['readout']} {e['kernel']}: engine.js {e['engine_js_ms']:.2f} ms/token "
                         f"(p10 {e['engine_js_ms_p10']:.2f}, same rounds): flyviz "
                         f"{e['engine_js_speedup']:.2f}x faster")
    for e in results["engines"]:
        lines.append(f"{e['readout']} {e['kernel']}: first-use preparation (kernel choice, "
                     f"graph layout) {e['prepare_s']:.2f} s")
    for load in results.get("loads", []):
        lines.append(f"load, full-size {load['readout']} {load['layout']} "
                     f"({load['bytes_on_disk'] / 1e6:.0f} MB on disk, page cache warm): "
                     f"{load['load_s']:.2f} s (median of {len(load['load_s_all'])})")
    if "synthetic_build_s" in results:
        built = ", ".join(f"{k} {v:.1f} s" for k, v in results["synthetic_build_s"].items())
        lines.append(f"synthetic model build: {built}")
    return "\n".join(lines)


def _intervention_table(results: dict[str, Any]) -> str:
    from flyviz.model.interventions import describe_applied

    lines = [f"threads: {results['threads']}",
             f"model: {results['model']} (loaded in {results['model_load_s']:.2f} s)",
             "interventions:"]
    lines.extend(f"  {describe_applied(item)}" for item in results["interventions"])
    lines.append(f"{'kernel':<7} {'plain ms':>9} {'(p10-p90)':>13} {'intervened ms':>14} "
                 f"{'(p10-p90)':>13} {'ratio':>7}")
    for k in results["kernels"]:
        lines.append(f"{k['kernel']:<7} {k['plain_ms']:9.2f} "
                     f"{k['plain_ms_p10']:6.2f}-{k['plain_ms_p90']:<6.2f} {k['intervened_ms']:14.2f} "
                     f"{k['intervened_ms_p10']:6.2f}-{k['intervened_ms_p90']:<6.2f} {k['ratio']:7.3f}")
    lines.append("medians over the steps; the two engines took turns token by token on the same "
                 "tokens in this run; ratio = median intervened / median plain")
    for k in results["kernels"]:
        lines.append(f"{k['kernel']}: laying out the graph and its cut/scaled copies took "
                     f"{k['prepare_s']:.2f} s once")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print the table (or JSON)."""
    from flyviz.model.bench import run_bench

    if not 1 <= args.steps <= 100_000:
        raise InputError(f"--steps {args.steps} must be between 1 and 100,000")
    if args.threads is not None and not 1 <= args.threads <= 64:
        raise InputError(f"--threads {args.threads} must be between 1 and 64")
    if args.dataset is not None and args.spec is None:
        raise InputError("--dataset goes with a model SPEC; without one, bench measures "
                         "synthetic models")
    if args.engine_js is not None and (args.batch is not None or args.trace is not None
                                       or args.measure_interventions):
        raise InputError("--engine-js goes with the plain engine measurement, not with "
                         "--batch, --trace or --interventions")
    if args.engine_js is not None:
        from flyviz.model.bench_reference import check_engine_js

        check_engine_js(args.engine_js)

    def log(line: str) -> None:
        print(f"flyviz bench: {line}", file=sys.stderr, flush=True)

    if args.batch is not None:
        return _run_batch(args, log)
    if args.trace is not None:
        return _run_trace(args, log)
    kernels = {"auto": (None,), "both": ("scipy", "llvm")}.get(args.kernel, (args.kernel,))
    interventions = interventions_from_args(args)
    if interventions and not args.measure_interventions:
        raise InputError("intervention options need --interventions (measure the step with "
                         "them against the plain step)")
    if args.measure_interventions:
        from flyviz.model.bench import run_intervention_bench

        results = run_intervention_bench(args.spec, steps=args.steps, threads=args.threads,
                                         log=log, kernels=kernels, interventions=interventions,
                                         dataset_dir=args.dataset)
    else:
        results = run_bench(args.spec, steps=args.steps, threads=args.threads,
                            load=not args.no_load, log=log, kernels=kernels,
                            dataset_dir=args.dataset, engine_js=args.engine_js)
    table = _intervention_table if args.measure_interventions else _table
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


def _run_batch(args: argparse.Namespace, log) -> int:
    """``--batch B``: batched against single-stream tokens/s on one model."""
    from flyviz.model.bench import bench_batch, full_size_checkpoint

    if not 1 <= args.batch <= 4096:
        raise InputError(f"--batch {args.batch} must be between 1 and 4096")
    kernel = None if args.kernel in ("auto", "both") else args.kernel
    if args.spec is not None:
        from flyviz.model.resolve import load_model

        log(f"loading {args.spec}")
        ckpt = load_model(args.spec)
    else:
        log("building a full-size synthetic model (rank-64)")
        ckpt = full_size_checkpoint(64)
    log(f"measuring: single-stream and {args.batch} streams, interleaved")
    result = bench_batch(ckpt, args.batch, steps=args.steps, threads=args.threads, kernel=kernel)
    result["model"] = ckpt.name
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"model: {result['model']} ({result['readout']}), threads: {result['threads']}\n"
              f"single-stream ({result['single_kernel']}): {result['single_ms']:.2f} ms/token, "
              f"{result['single_tokens_per_s']:,.0f} tokens/s\n"
              f"batched, {result['streams']} streams ({result['batch_kernel']}): "
              f"{result['batch_ms']:.1f} ms/step, {result['batch_tokens_per_s']:,.0f} tokens/s\n"
              f"speed-up: {result['speedup']:.1f}x (medians; rounds of both interleaved)")
    return 0


def _run_trace(args: argparse.Namespace, log) -> int:
    """``--trace K``: one trace over K tokens against K forward steps."""
    from flyviz.model.bench import run_trace_bench

    if not 2 <= args.trace <= 4096:
        raise InputError(f"--trace {args.trace} must be between 2 and 4,096 tokens")
    kernels = {"auto": (None,), "both": ("scipy", "llvm")}.get(args.kernel, (args.kernel,))
    results = run_trace_bench(args.spec, window=args.trace, threads=args.threads, log=log,
                              kernels=kernels, dataset_dir=args.dataset)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    k = results["window"]
    lines = [f"threads: {results['threads']}",
             f"model: {results['model']} (loaded in {results['model_load_s']:.2f} s)",
             f"{'kernel':<7} {f'{k} fwd ms':>10} {'tape ms':>9} {'sweep ms':>9} {'trace ms':>9} "
             f"{'sweep/fwd':>10} {'trace/fwd':>10}"]
    for e in results["kernels"]:
        lines.append(f"{e['kernel']:<7} {e['forward_ms']:10.1f} {e['tape_ms']:9.1f} "
                     f"{e['sweep_ms']:9.1f} {e['trace_ms']:9.1f} {e['sweep_ratio']:10.2f} "
                     f"{e['trace_ratio']:10.2f}")
    lines.append(f"medians of rounds alternating {k} forward steps with one trace of the same "
                 "tokens; trace = the forward run recording the tape + the backward sweep")
    for e in results["kernels"]:
        lines.append(f"{e['kernel']}: tape {e['tape_bytes'] / 1e6:.1f} MB (x and s; "
                     f"{e['tape_bytes_gradient'] / 1e6:.1f} MB with the gradient's slopes), "
                     f"cotangents {e['cotangent_bytes'] / 1e6:.1f} MB; W^T laid out in "
                     f"{e['prepare_s']:.2f} s once; pruned graph {e['graph_s']:.2f} s; "
                     f"completeness error {e['completeness_error']:+.1e}")
    print("\n".join(lines))
    return 0
