"""``flyviz dynamics SPEC --prompt TEXT``: the model as a dynamical system, real vs nulls.

Per position the eigenvalues of the step Jacobian of largest modulus and its spectral
radius; how long the state remembers a perturbation (beside the leak-only bound); how far
a one-token drive spreads; the leading driving modes by cell type; each against null
wirings with ``--nulls`` (see :mod:`flyviz.analysis.dynamics`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from flyviz.commands._options import (add_cluster_options, add_dataset_option,
                                      add_intervention_options, add_kernel_option,
                                      add_null_options, check_cluster_options,
                                      NULLS_HELP_TWO_SIDED,
                                      interventions_from_args, model_from_args,
                                      null_seeds_from_args, worker_spec)
from flyviz.errors import InputError

EPILOG = """\
The step that reads token t is x_t = (1 - lam) x_{t-1} + lam tanh(u_t); its Jacobian
J_t = (1 - lam) I + diag(lam sech^2(u_t) g r) W is applied, never formed (one sparse
product per J.v), and ARPACK finds its eigenvalues of largest modulus. A spectral radius
near or above 1 means slow or amplifying directions. The memory half-life is measured on
the run itself: --directions random unit perturbations of the state at --perturb-at
carried by the product of the following step Jacobians (the linear response under the
same input), the tokens until their norm (geometric mean over the directions; quartiles
beside it) halves; the leak-only bound ln 0.5 / ln(1 - lam) ignores W.

examples:
  flyviz dynamics demo --prompt "Once upon a time, there was a little girl named Lily"
  flyviz dynamics demo --prompt "Tom and his dog" --eigenvalues 10 --json > dyn.json
  flyviz dynamics demo --prompt "Tom and his dog" --nulls degree:3 --workers 2
  flyviz dynamics demo --prompt "Tom and his dog" --silence 'superclass:cb_intrinsic'

docs/dynamics.md describes every number.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz dynamics``."""
    parser.add_argument("spec", metavar="SPEC", help="model folder, hub repo id or 'demo'")
    parser.add_argument("--prompt", required=True,
                        help="text to read (BOS is added once where the model's "
                             "tokenizer has one; FlyGPT's has none)")
    parser.add_argument("--eigenvalues", type=int, default=20, metavar="K",
                        help="eigenvalues of largest modulus per position (default 20)")
    parser.add_argument("--perturb-at", type=int, default=1, metavar="P",
                        help="the position whose state is perturbed (memory) and driven "
                             "(spread); 0 is BOS (default 1)")
    parser.add_argument("--spread-steps", type=int, default=5, metavar="K",
                        help="steps a one-token drive is followed (default 5)")
    parser.add_argument("--spread-threshold", type=float, default=0.01, metavar="F",
                        help="a neuron is reached when its response is at least F times the "
                             "largest (default 0.01)")
    parser.add_argument("--driving-modes", type=int, default=3, metavar="M",
                        help="leading driving (left) modes summarised by cell type (default 3)")
    parser.add_argument("--modes-at", type=int, default=None, metavar="P",
                        help="the position of the driving modes (default the last)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the perturbations and of ARPACK's start (default 0)")
    parser.add_argument("--directions", type=int, default=16, metavar="K",
                        help="random perturbation directions whose memory is measured; the "
                             "geometric mean is reported with the quartiles (default 16)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: positions, memory, spread, driving modes, "
                             "nulls")
    add_dataset_option(parser)
    add_kernel_option(parser)
    add_intervention_options(parser)
    add_null_options(parser, NULLS_HELP_TWO_SIDED)
    add_cluster_options(parser, "", resume=False)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _settings(args: argparse.Namespace) -> Any:
    from flyviz.analysis.dynamics import DynamicsSettings

    return DynamicsSettings(eigenvalues=args.eigenvalues, perturb_at=args.perturb_at,
                            spread_steps=args.spread_steps,
                            spread_threshold=args.spread_threshold,
                            driving_modes=args.driving_modes, modes_at=args.modes_at,
                            seed=args.seed, directions=args.directions).validate()


def _complex(values: Any, count: int = 3) -> str:
    return ", ".join(f"{z.real:+.4f}{z.imag:+.4f}i" if abs(z.imag) > 1e-12 else f"{z.real:+.4f}"
                     for z in list(values)[:count])


def summary(found: Any, model_name: str) -> str:
    """The printed portrait."""
    lines = [f"{model_name}: {len(found.tokens)} positions, {found.settings.eigenvalues} "
             f"eigenvalues each ({found.products} J.v products, {found.seconds:.1f} s)", "",
             f"{'pos':>4}  {'token':<16} {'radius':>8}  leading eigenvalues"]
    for i, values in enumerate(found.eigenvalues):
        lines.append(f"{i:>4}  {found.token_texts[i]!r:<16} {found.spectral_radius[i]:8.4f}  "
                     f"{_complex(values)}")
    if found.unconverged:
        lines += ["", f"note: at position(s) {', '.join(map(str, found.unconverged))} ARPACK "
                  f"stopped before it converged on all {found.settings.eigenvalues} eigenvalues "
                  "(its restarts ran out): their eigenvalues are those that converged and the "
                  "radius the largest of them (nan where none did), which may not be the "
                  "largest there is"]
    half = found.half_life_tokens
    followed = found.memory_norms.size - 1
    quartiles = found.memory_quartiles()
    directions = 1 if found.memory_curves is None else found.memory_curves.shape[0]

    def spread(key: str, unit: str = "", digits: str = ".2f") -> str:
        if directions < 2:
            return ""
        low, high = (f"{q:{digits}}" if q is not None else "longer" for q in quartiles[key])
        return f" (quartiles {low}-{high}{unit})"

    half_text = f"{half:.2f} tokens" if half is not None else \
        f"more than {followed} tokens (the prompt ends first)"
    tail = found.tail_half_life_tokens
    lines += ["", f"memory: a perturbation at position {found.perturb_at} halves in {half_text}"
              f"{spread('half_life_tokens')}; leak only: "
              f"{found.leak_only_half_life_tokens:.2f} tokens"
              + (f"\n  (the geometric mean over {directions} random directions; in parentheses "
                 "the quartiles over them)" if directions > 1 else ""),
              f"  after {followed} tokens {found.memory_norms[-1]:.3g}"
              f"{spread('remaining_at_end', digits='.3g')} of it remains (leak only: "
              f"{(1 - found.leak) ** followed:.3g}); its slow tail halves in "
              + ("(none left: the step Jacobians take it to zero)"
                 if found.memory_norms[-1] == 0 else
                 (f"{tail:.2f} tokens" if tail is not None else "(no decay)")
                 + spread("tail_half_life_tokens")),
              "  norm per token: " + " ".join(f"{v:.3g}" for v in found.memory_norms[:12])
              + (" ..." if found.memory_norms.size > 12 else ""),
              f"spread: a one-token drive at position {found.perturb_at} reaches (>= "
              f"{found.spread_threshold:g} of the largest response) "
              + ", ".join(f"{100 * v:.1f} %" for v in found.spread_fraction)
              + " of the neurons after 0.. steps"]
    driving = found.driving
    if not driving.get("converged", True) and not driving["eigenvalues"]:
        lines.append(f"driving modes at position {driving['position']}: none found (ARPACK "
                     "stopped before it converged on any)")
    elif not driving["eigenvalues"]:
        lines.append(f"driving modes at position {driving['position']}: none (every neuron is "
                     "set there by a silence or clamp, so the step Jacobian is zero)")
    elif driving.get("diagonal"):
        lines.append(f"driving modes at position {driving['position']} "
                     f"({_complex([complex(*z) for z in driving['eigenvalues']])}): none single "
                     "out neurons (the step Jacobian is diagonal: no neuron drives another, so "
                     "its eigenvalues are its diagonal)")
    else:
        lines.append(f"driving modes at position {driving['position']} "
                     f"({_complex([complex(*z) for z in driving['eigenvalues']])}): "
                     f"participation {100 * driving['participation']:.1f} % of the neurons"
                     + ("" if driving.get("converged", True) else
                        f" (only {len(driving['eigenvalues'])} of the "
                        f"{found.settings.driving_modes} modes converged)"))
    for row in driving["cell_types"][:5]:
        lines.append(f"  {row['cell_type']:<20} {100 * row['share']:5.1f} % of the weight, "
                     f"{100 * row['neuron_share']:5.1f} % of the neurons "
                     f"(x{row['enrichment']:.2f})")
    nulls = found.nulls
    if nulls:
        from flyviz.analysis.nulls import NullComparison

        lines += ["", f"real vs {len(nulls['seeds'])} {nulls['kind']} null(s):"]
        width = max(len(key) for key in nulls["properties"])
        for key, row in nulls["properties"].items():
            def number(key: str, row: dict[str, Any] = row) -> float:
                return float("nan") if row[key] is None else float(row[key])

            comparison = NullComparison(real=number("real"), mean=number("mean"),
                                        sd=number("sd"), z=number("z"), p=float(row["p"]),
                                        n=int(row["n"]), higher_is_more=True,
                                        two_sided=bool(row.get("two_sided", False)))
            lines.append(f"  {key:<{width}}  {comparison.line()}")
        for seed, count in nulls.get("unconverged", {}).items():
            lines.append(f"  note: on the null of seed {seed} ARPACK stopped before it "
                         f"converged in {count} eigen-solve(s): its radius or driving modes "
                         "are from the eigenvalues that converged")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Check the options, load the model, measure, print."""
    from flyviz.analysis.cluster import ProgressBar, require_dask, say
    from flyviz.analysis.dynamics import compare_with_nulls, portrait
    from flyviz.model.attribution import record_tape
    from flyviz.record.run import encode_prompt

    if not args.prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to read")
    settings = _settings(args)
    seeds = null_seeds_from_args(args)
    if seeds:   # only the nulls run on Dask, after the portrait: say so before it
        require_dask("flyviz dynamics --nulls", args.workers, args.scheduler)
    check_cluster_options(args)
    interventions = interventions_from_args(args)
    if seeds and interventions:
        raise InputError("--nulls compares the untouched wiring; leave out the interventions "
                         "(or run without --nulls)")
    with model_from_args(args) as model:
        ckpt = model.checkpoint
        ids = encode_prompt(model.tokenizer, args.prompt, ckpt.config.bos_token_id)
        if settings.eigenvalues > ckpt.config.neurons:
            raise InputError(f"--eigenvalues {settings.eigenvalues} is more than the model's "
                             f"{ckpt.config.neurons} neurons")
        engine = model.engine
        engine.set_interventions(interventions)
        try:
            tape = record_tape(engine, ids, slopes=True)
        finally:
            engine.set_interventions(None)
        texts = [model.tokenizer.token_text(t) for t in ids]
        anatomy = ckpt.anatomy
        # the shared progress line: redrawn on a terminal, whole lines (only when the count
        # changes) in a log
        bar = None if args.json else ProgressBar(tape.steps, label="positions")
        try:
            found = portrait(model.backward, tape, settings, token_texts=texts,
                             cell_types=None if anatomy is None else anatomy.cell_type,
                             progress=None if bar is None else
                             (lambda done, total: bar.update(done)))
        except BaseException:
            # bad input is one line: no progress written for it; a terminal's open line ends
            if bar is not None and bar.tty and bar.initial is not None:
                print(file=sys.stderr)
            raise
        if bar is not None:
            bar.close()
        if seeds:
            workers = args.workers if args.workers is not None or args.scheduler else None
            bars: dict[int, Any] = {}

            def close_bars() -> None:
                for null_bar in bars.values():
                    null_bar.close()
                bars.clear()

            def null_log(line: str) -> None:
                close_bars()   # "null 2 of 2" ends null 1's line
                say(f"flyviz: {line}")

            def null_progress(where: Any) -> None:
                # a line per null, as the real portrait's: its positions and, since one
                # position may take thousands of products, the products so far
                null_bar = bars.get(where.index)
                if null_bar is None:
                    close_bars()
                    null_bar = bars[where.index] = ProgressBar(where.total, label="positions")
                null_bar.note = f"{where.products:,} J.v products" + (
                    " (then its memory, spread and driving modes)"
                    if where.done == where.total else "")
                null_bar.update(where.done)

            try:
                compare_with_nulls(found, ckpt, args.null_kind, seeds,
                                   spec=worker_spec(args.spec),
                                   dataset=None if args.dataset is None else str(args.dataset),
                                   workers=workers, scheduler=args.scheduler,
                                   kernel=model.kernel_request,
                                   log=null_log,
                                   progress=None if args.json else null_progress)
            finally:
                close_bars()
    if args.json:
        print(json.dumps(found.to_json()))
    else:
        print(summary(found, ckpt.name))
    return 0

