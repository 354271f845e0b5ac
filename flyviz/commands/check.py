"""``flyviz check BRAIN --battery FILE``: experiments on the spiking brain, with controls.

Each line of the battery is one experiment (what is excited or silenced, which neurons are
read, what is expected); each is run on the brain, on degree-preserving shuffles of it and
with class-matched random stimulus sets, and gets a permutation p-value, Holm-corrected
over the battery (see :mod:`flyviz.spiking.check`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flyviz.commands.simulate import duration_arg
from flyviz.fileio import KEPT_RESULT_HELP

EPILOG = """\
the battery: one check a line, 'NAME: FIELD VALUE ; FIELD VALUE ; ...' with the fields
  excite QUERY     the stimulus: Poisson input at --rate Hz
  silence QUERY    (optional) neurons whose outgoing synapses are zeroed
  read QUERY       the neurons whose mean rate is read out
  expect E         increase | decrease | above HZ | below HZ
blank lines and lines starting with # are skipped; QUERY is the selection language
(type:MN9, superclass:sensory & side:right, id:3,17, body:ROOT,... or bare root ids).
  # my-battery.txt
  sugar->MN9: excite type:GRN* & side:right ; read type:MN9 ; expect increase
  MN9 needs GRNs: excite type:GRN* ; silence type:GRN* & side:left ; read type:MN9 ; expect decrease

the statistic (Hz): the read neurons' mean rate under the stimulus; with silence, its
change when the set is silenced. Controls: --shuffles degree-preserving shuffles of the
brain (each neuron keeps its in- and out-degree and its outgoing signed counts) and
--random-sets stimulus sets (or silenced sets) of as many neurons of each --match class,
drawn outside the set and the read neurons. p = (1 + #controls at least as extreme in the
expected direction) / (1 + n) per control; a check's p is the larger of the two, Holm's
correction runs over the battery, and a check passes when it holds and p_holm <= --alpha.
Every run uses the same --seed input; the same seed gives the same table, in this process
(--workers 0) or on Dask (each shuffle and each check's random sets a task; every worker
loads BRAIN itself).

examples (from a clone's root, where assets/ and examples/ are):
  flyviz check demo --battery examples/checks-demo.txt --shuffles 9 --random-sets 9 \\
      --duration 100ms --workers 0 --out checks.csv --figure checks.png
  flyviz check ./shiu --battery sugar.txt --duration 1s --trials 5 --workers 8 --json
docs/spiking-checks.md describes the format and the numbers.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz check``."""
    from flyviz.commands._options import add_cluster_options, add_spiking_brain_options

    parser.add_argument("brain", metavar="BRAIN",
                        help="authors' folder, completeness CSV, ConnecTorch .ct brain, flyviz "
                             "model or 'demo' (as "
                             "'flyviz simulate' takes it)")
    parser.add_argument("--battery", metavar="FILE", type=Path, required=True,
                        help="the checks, one a line (see below)")
    parser.add_argument("--shuffles", metavar="N", type=int, default=99,
                        help="degree-preserving shuffles of the brain per check (default 99: "
                             "p down to 0.01)")
    parser.add_argument("--random-sets", metavar="N", type=int, default=99,
                        help="class-matched random stimulus sets per check (default 99)")
    parser.add_argument("--match", choices=("superclass", "cell_type", "none"),
                        default="superclass",
                        help="the label random sets match (default superclass)")
    parser.add_argument("--rate", metavar="HZ", type=float, default=150.0,
                        help="Poisson rate of the excited neurons (default 150)")
    parser.add_argument("--trials", metavar="N", type=int, default=1,
                        help="trials per run (default 1)")
    parser.add_argument("--duration", metavar="T", type=duration_arg, default=0.25,
                        help="biological time per trial: 1s, 250ms (default 250ms)")
    parser.add_argument("--seed", metavar="S", type=int, default=0,
                        help="seed of the runs' input, the shuffles and the random sets "
                             "(default 0)")
    parser.add_argument("--alpha", metavar="A", type=float, default=0.05,
                        help="a check passes at a Holm-adjusted p of at most A (default 0.05)")
    add_spiking_brain_options(parser)
    parser.add_argument("--out", metavar="FILE.csv", type=Path, default=None,
                        help="also write the table as CSV; " + KEPT_RESULT_HELP)
    parser.add_argument("--figure", metavar="FILE.png", type=Path, default=None,
                        help="also draw each check beside its controls (.png, .svg, .pdf; an "
                             "earlier one of the name is replaced, and the line says so)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (the table and every control's value)")
    add_cluster_options(parser, "", resume=False)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check the options and the battery, load the brain, run, print (and write)."""
    from flyviz.analysis.cluster import ProgressBar, require_dask
    from flyviz.commands._options import (check_cluster_options, spiking_brain_from_args,
                                          spiking_brain_spec)
    from flyviz.errors import InputError
    from flyviz.fileio import (check_new_result, check_not_input, check_output_path,
                               earlier_output, replaced_note)
    from flyviz.spiking.check import (CheckSettings, check_queries, printed_table, read_battery, run_battery,
                                      write_figure, write_table)

    settings = CheckSettings(shuffles=args.shuffles, random_sets=args.random_sets,
                             rate=args.rate, trials=args.trials, duration_s=args.duration,
                             seed=args.seed, w_syn=args.w_syn, match=args.match,
                             alpha=args.alpha).validate()
    checks = read_battery(args.battery)
    require_dask("flyviz check", args.workers, args.scheduler)
    check_cluster_options(args)
    if args.out is not None:
        if args.out.suffix.lower() != ".csv":
            raise InputError(f"--out {args.out} should end in .csv")
        check_output_path(args.out, "--out")
        check_not_input(args.out, {"--battery": args.battery}, "--out")
        check_new_result(args.out, "check table")
    if args.figure is not None:
        from flyviz.figures import check_output

        check_output(args.figure)
        check_not_input(args.figure, {"--battery": args.battery}, "--figure")
    brain = spiking_brain_from_args(args)
    check_queries(brain, checks)  # one line for a query that selects nothing, before a bar
    bar = None if args.json else ProgressBar(1, label="runs")
    try:
        result = run_battery(brain, checks, settings, spec=spiking_brain_spec(args),
                             workers=args.workers, scheduler=args.scheduler, progress=bar,
                             log=lambda line: print(f"flyviz check: {line}", file=sys.stderr))
    finally:
        if bar is not None:
            bar.close()
    if args.out is not None:
        write_table(result, args.out)
        print(f"flyviz: wrote the table to {args.out}", file=sys.stderr)
    if args.figure is not None:
        # A figure is drawn again from its table: like savefig, one of the same name is
        # replaced (unlike --out, a finished result), and the line says so.
        replaced = earlier_output(args.figure)
        write_figure(result, args.figure)
        print(f"flyviz: wrote the figure to {args.figure}"
              f"{replaced_note(replaced)}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(printed_table(result))
    return 0
