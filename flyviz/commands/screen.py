"""``flyviz screen BRAIN --sets FILE --mode activate|silence --out DIR``: the authors' screens.

Each neuron set of the sets file is run once on the spiking brain (Shiu et al.'s LIF model,
as ``flyviz simulate`` runs it): excited at ``--rate`` (an activation screen), or silenced
under the base stimulus ``--excite`` (a silencing screen, beside the unsilenced baseline).
The runs are tasks on Dask (``--workers``/``--scheduler``, as ``flyviz sweep``); the rates
go to a folder that a rerun continues (see :mod:`flyviz.spiking.screen`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flyviz.commands.simulate import duration_arg

EPILOG = """\
the sets file: one set a line, 'NAME: QUERY' (a tab may stand for the colon); blank lines
and lines starting with # are skipped. QUERY is flyviz's selection language where the brain
has labels (type:MN9, superclass:sensory & side:right), body:ROOT,... or bare root ids
(720575940624963786, 720575940630233916); on any brain id:3,17,100-199 (model indices):
  # sugar.txt
  sugar GRNs: 720575940624963786, 720575940630233916
  MN9: type:MN9
  left sensory: superclass:sensory & side:left

modes:
  activate   each set given Poisson input at --rate Hz (no refractory period), alone
  silence    the base stimulus --excite (default: the brain's own set, the demo's 21
             sensory neurons) with each set's outgoing synapses zeroed, and the baseline
             with nothing silenced
Every run uses the same --seed: in a silencing screen every run gets the baseline's own
Poisson input, so a change is the silencing's; a set's rates are those of
'flyviz simulate' with the same options. A silencing screen does not run a set none of
whose neurons fires in the baseline: its run is the baseline's, bit for bit (the summary
says 'answered: baseline' and counts them).

effects: each set's change of the --target's rate (or, without --target, of the mean rate
of every neuron), with a p-value over the trials (Wilcoxon signed-rank test of each
trial's change: a trial of a set and of the baseline share their input) and a
Benjamini-Hochberg q-value across the sets; '*' marks q <= 0.05. --pairs N then runs every
pair of the N sets of largest effect (both sets together) and prints their matrix. The
pairs are chosen from the sets' own effects, so their q-values are a family of their own
(Benjamini-Hochberg over the pairs alone): the sets' q-values are those of the screen
without --pairs, and the last line counts the discoveries of each family apart.

files written (DIR):
  screen.json         the settings and the brain's digest (a rerun must match them)
  baseline.csv        the baseline's row per neuron: root_id, rate_hz (mean over the
                      trials) and trial_counts (its spikes in each trial, blank for a
                      neuron that never fired)
  sets/NAME-*.csv     the same per set run (none for a set answered from the baseline)
  summary.csv         one row per set: neurons, fired, mean_rate_hz, changed (neurons whose
                      rate differs from the baseline), largest_change_hz and its root id,
                      kind (single or pair, and the pair's first and second set), answered
                      (run, or baseline), effect_hz, p_value, q_value (Benjamini-Hochberg
                      within its kind: the single sets one family, the pairs another)
Each is a checksummed table, written whole or not at all. Running the same command again
skips the sets already in DIR (Ctrl+C keeps the finished ones, and a rerun always
continues: there is no --resume); other settings in DIR are refused.

examples:
  flyviz screen demo --sets sets.txt --mode activate --duration 200ms --out act/
  flyviz screen demo --each 'superclass:cb_sensory' --mode silence --trials 5 \\
      --duration 200ms --target 'id:120' --pairs 6 --out knockouts/
  flyviz screen ./shiu --sets sets.txt --mode silence --excite 'body:720575940624963786' \\
      --trials 30 --out silenced/ --target 'type:MN9' --workers 8
"""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz screen``."""
    from flyviz.commands._options import add_cluster_options, add_spiking_brain_options

    parser.add_argument("brain", metavar="BRAIN",
                        help="authors' folder, completeness CSV, ConnecTorch .ct brain, flyviz "
                             "model or 'demo' (as "
                             "'flyviz simulate' takes it; every worker must be able to load it)")
    sets = parser.add_mutually_exclusive_group(required=True)
    sets.add_argument("--sets", metavar="FILE", type=Path, default=None,
                      help="the neuron sets, one 'NAME: QUERY' a line")
    sets.add_argument("--each", metavar="QUERY", default=None,
                      help="one set per neuron the query selects (a screen of single neurons)")
    parser.add_argument("--mode", choices=("activate", "silence"), required=True,
                        help="excite each set, or silence each set under --excite")
    parser.add_argument("--excite", metavar="QUERY", default=None,
                        help="the silencing screen's base stimulus (default: the brain's own "
                             "set)")
    parser.add_argument("--rate", metavar="HZ", type=float, default=150.0,
                        help="Poisson rate of the excited neurons (default 150)")
    parser.add_argument("--trials", metavar="N", type=int, default=1,
                        help="trials per run (default 1; the authors run 30)")
    parser.add_argument("--duration", metavar="T", type=duration_arg, default=1.0,
                        help="biological time per trial: 1s, 400ms (default 1s)")
    parser.add_argument("--seed", metavar="S", type=int, default=0,
                        help="seed of every run's Poisson input (default 0)")
    add_spiking_brain_options(parser)
    parser.add_argument("--out", metavar="DIR", type=Path, required=True,
                        help="the screen's folder (made if missing; a rerun continues it)")
    parser.add_argument("--target", metavar="QUERY", default=None,
                        help="one neuron: print each set's change in its rate")
    parser.add_argument("--pairs", metavar="N", type=int, default=0,
                        help="then run every pair of the N sets of largest effect: on the "
                             "--target's rate, or without --target on the mean rate of "
                             "every neuron (default 0: no pairs)")
    parser.add_argument("--show", metavar="N", type=int, default=20,
                        help="rows of the table to print (default 20; 0 prints all)")
    add_cluster_options(parser, "DIR", resume=False)
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    """Check everything, load the brain, run the screen, print the table."""
    import numpy as np

    from flyviz.analysis.cluster import Interrupted, ProgressBar, require_dask, where_it_ran
    from flyviz.commands._options import (check_cluster_options, spiking_brain_from_args,
                                          spiking_brain_spec)
    from flyviz.errors import InputError
    from flyviz.model.selection import parse
    from flyviz.spiking import select
    from flyviz.spiking.screen import (ALPHA, PAIR, ScreenFolder, ScreenSettings, check_pairs,
                                       each_neuron, read_sets_file, resolve_sets, run_screen)

    if args.show < 0:
        raise InputError(f"--show {args.show} must be 0 (all rows) or more")
    check_pairs(args.pairs, sys.maxsize, sys.maxsize)  # 1 or negative, before the brain loads
    settings = ScreenSettings(mode=args.mode, excite=args.excite, rate=args.rate,
                              trials=args.trials, duration_s=args.duration, seed=args.seed,
                              w_syn=args.w_syn).validate()
    named = read_sets_file(args.sets) if args.sets is not None else None
    for query in (args.excite, args.target, args.each):
        if query is not None:
            parse(query)  # a malformed query fails before the brain loads
    require_dask("flyviz screen", args.workers, args.scheduler)
    check_cluster_options(args)
    ScreenFolder.check_writable(args.out)
    ScreenFolder.check_settings(args.out, settings)

    brain = spiking_brain_from_args(args)
    sets = resolve_sets(brain, named) if named is not None else each_neuron(brain, args.each)
    check_pairs(args.pairs, len(sets), brain.neurons)
    target = None
    if args.target is not None:
        found = select(brain, args.target)
        if len(found) != 1:
            raise InputError(f"--target {args.target} must select one neuron, not "
                             f"{len(found)}")
        target = int(found[0])
    spec = spiking_brain_spec(args)

    def log(line: str) -> None:
        print(f"flyviz screen: {line}", file=sys.stderr, flush=True)

    print(f"{brain.name}: {brain.neurons:,} neurons, {brain.synapses:,} synapses; "
          f"{len(sets):,} set(s) to {settings.mode}, {settings.trials:,} trial(s) x "
          f"{settings.duration_s:g} s each"
          + (f"; then the pairs of the top {args.pairs}" if args.pairs else ""), flush=True)
    bar = ProgressBar(len(sets) + 1, label="runs")
    try:
        # only the target's rates are kept: the table needs no other neuron's
        result = run_screen(brain, sets, settings, out=args.out, spec=spec,
                            workers=args.workers, scheduler=args.scheduler, progress=bar,
                            log=log, columns=np.empty(0, np.int64), pairs=args.pairs,
                            target=target)
    except Interrupted as exc:
        bar.close()
        print(f"flyviz screen: {exc}", file=sys.stderr)
        return 130
    bar.close()
    rows = result.summary[1:]
    effect = np.array([row["effect_hz"] for row in rows])
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["kind"] == PAIR, -abs(effect[i])))
    if target is not None:
        print(f"target {brain.root_ids[target]}"
              + (f" ({brain.cell_type[target]})" if brain.cell_type is not None
                 and brain.cell_type[target] else "")
              + f": {result.baseline[target]:.2f} Hz in the baseline")
    shown = order if args.show == 0 else order[:args.show]
    width = max([len("set")] + [len(str(rows[i]["set"])) for i in shown])
    on = "target" if target is not None else "mean"
    head = (f"  {'set':<{width}}  {'neurons':>8}  {'fired':>7}  {'mean Hz':>8}  {'changed':>8}"
            f"  {on + ' Δ Hz':>10}  {'p':>8}  {'q':>8}")
    print(head)
    after_singles = True
    for i in shown:
        row = rows[i]
        if row["kind"] == PAIR and after_singles:   # the pairs follow the singles (order)
            after_singles = False
            print("  pairs (q over the pairs alone: they were chosen from the sets' effects):")
        star = " *" if row["q_value"] <= ALPHA else ""
        note = "  (answered from the baseline)" if row["answered"] == "baseline" else ""
        print(f"  {row['set']:<{width}}  {row['neurons']:>8,}  {row['fired']:>7,}  "
              f"{row['mean_rate_hz']:>8.3f}  {row['changed']:>8,}  {row['effect_hz']:>+10.3f}"
              f"  {row['p_value']:>8.2g}  {row['q_value']:>8.2g}{star}{note}")
    if len(shown) < len(rows):
        print(f"  ... {len(rows) - len(shown):,} more in {args.out / 'summary.csv'}")
    if result.top:
        names, matrix = result.pair_matrix(target)
        print(f"pairs of the top {len(names)} ({on} Δ Hz; the sets alone on the diagonal):")
        label = max(len(n) for n in names)
        for name, line in zip(names, matrix):
            print(f"  {name:<{label}}  " + "  ".join(f"{v:>+9.3g}" for v in line))
    # the pairs are their own Benjamini-Hochberg family (chosen after the fact from the
    # singles' effects), so their discoveries are counted apart from the singles'
    singles = [row for row in rows if row["kind"] != PAIR]
    pairs = [row for row in rows if row["kind"] == PAIR]
    discoveries = f"{sum(row['q_value'] <= ALPHA for row in singles):,} of {len(singles):,} set(s)"
    if pairs:
        discoveries += (f" and {sum(row['q_value'] <= ALPHA for row in pairs):,} of {len(pairs):,} "
                        "pair(s)")
    print(f"{discoveries} with q <= {ALPHA:g}"
          + (" (the pairs a family of their own, chosen from the sets' effects)" if pairs
             else "") + "; "
          f"{result.computed:,} run(s) now, {result.resumed:,} found done, {result.pruned:,} "
          f"answered from the baseline (none of their neurons fires in it); "
          f"{result.seconds:.1f} s ("
          + where_it_ran(result.workers, args.workers, args.scheduler) + f") -> {args.out}")
    return 0
