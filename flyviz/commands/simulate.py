"""``flyviz simulate BRAIN``: run Shiu et al.'s whole-brain spiking model and write its spikes."""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from flyviz.fileio import (KEPT_RECORDING_HELP, KEPT_RESULT_HELP, check_new_result,
                           check_output_path)

EPILOG = """\
BRAIN is a folder in the authors' layout (Completeness_783.csv + Connectivity_783.parquet, or
the 630 names), their completeness CSV (with --connectivity), a ConnecTorch brain (a .ct
folder: synapse_count x sign per edge, its digests checked), a flyviz model (its MaleCNS graph,
w_syn 0.192 mV) or 'demo'. QUERY is flyviz's selection language (see 'flyviz select --help')
where the brain has labels; body:ROOT,... (or id: with root ids) names neurons by root id.

examples:
  flyviz simulate demo --out spikes.parquet
  flyviz simulate ./shiu --excite-file sugar_ids.txt --rate 150 --trials 30 --out sugar.parquet
  flyviz simulate ./shiu --excite 'body:720575940624963786' --silence 'type:MN9' --out s.parquet
  flyviz simulate ./shiu --input-spikes replay.csv --duration 400ms --out replay.parquet
  flyviz simulate demo --duration 500ms --record spikes.flyrec && flyviz export spikes.flyrec --out m.mp4
  flyviz simulate demo --duration 200ms --compare brian2_spikes.parquet
  flyviz simulate demo --input-until 100ms --duration 300ms --out after.parquet

--compare OTHER: another simulator's or another run's spikes in the authors' layout (t,
trial, flywire_id, exp_name; Parquet or CSV), against this run: prints 'identical, N
spikes' (exit 0) or the first spike one side has and the other not (trial, tick, neuron,
and how far this run's membrane potential was from the threshold then; exit 1).
--input-until T: the Poisson input stops at T; the summary (and --record) says how many
neurons keep firing after it and for how long (self-sustained activity).
"""


#: A duration given without a unit at or above this many seconds gets a note that it is seconds.
UNITLESS_NOTE_S = 10.0


def duration_arg(text: str) -> float:
    """``1s``, ``400ms`` or plain seconds, as seconds (NaN and negatives fail later, as one
    line)."""
    match = re.fullmatch(r"\s*([-+0-9.eEinfaINFA]+)\s*(ms|s)?\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 1s, 400ms)")
    try:
        value = float(match.group(1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 1s, 400ms)") \
            from None
    if match.group(2) is None and math.isfinite(value) and value >= UNITLESS_NOTE_S:
        # 100 typed for 100 ms would run the fly for 100 s (minutes of work): say so at once.
        print(f"flyviz: note: {text.strip()} is read as {value:g} s of the fly's time; write "
              f"{text.strip()}ms for milliseconds", file=sys.stderr)
    return value / 1000.0 if match.group(2) == "ms" else value


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz simulate``."""
    from flyviz.commands._options import add_spiking_brain_options

    parser.add_argument("brain", metavar="BRAIN",
                        help="authors' folder, ConnecTorch .ct brain, model or 'demo'")
    add_spiking_brain_options(parser)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--excite", metavar="QUERY", default=None,
                       help="neurons given Poisson input (default: the brain's own set, "
                            "the demo's 21 sensory neurons)")
    group.add_argument("--excite-file", metavar="FILE", type=Path, default=None,
                       help="root ids to excite, one a line")
    parser.add_argument("--rate", metavar="HZ", type=float, default=150.0,
                        help="Poisson rate of the excited neurons (default 150)")
    parser.add_argument("--silence", metavar="QUERY", default=None,
                        help="neurons whose outgoing synapses are zeroed")
    parser.add_argument("--input-spikes", metavar="FILE", type=Path, default=None,
                        help="explicit input events (CSV or Parquet: t in seconds, "
                             "flywire_id), each adding w_syn x f_poi to v, in every trial")
    parser.add_argument("--duration", metavar="T", type=duration_arg, default=1.0,
                        help="biological time per trial: 1s, 400ms (default 1s)")
    parser.add_argument("--trials", metavar="N", type=int, default=1,
                        help="independent trials (default 1; the authors run 30)")
    parser.add_argument("--seed", metavar="S", type=int, default=0,
                        help="seed of the Poisson input (default 0)")
    parser.add_argument("--exp-name", metavar="NAME", default=None,
                        help="the exp_name column (default: the output file's stem)")
    parser.add_argument("--out", metavar="FILE", type=Path, default=None,
                        help="spikes in the authors' layout (t, trial, flywire_id, exp_name): "
                             "Parquet (.parquet) or CSV (.csv, .csv.gz), by the suffix; "
                             + KEPT_RESULT_HELP)
    parser.add_argument("--record", metavar="FILE", type=Path, default=None,
                        help="also (or instead) save each neuron's rate per bin, and every "
                             "spike at its time, as a .flyrec recording, for 'flyviz export', "
                             "'figure' and 'gui'; " + KEPT_RECORDING_HELP)
    parser.add_argument("--input-until", metavar="T", type=duration_arg, default=None,
                        help="the Poisson input stops at T (e.g. 500ms); the summary says what "
                             "keeps firing after it")
    parser.add_argument("--compare", metavar="OTHER", type=Path, default=None,
                        help="spikes of another simulator or run in the authors' layout (t, "
                             "trial, flywire_id, exp_name): identical (exit 0), or the first "
                             "spike that differs (exit 1)")
    parser.add_argument("--bin", metavar="MS", type=float, default=10.0,
                        help="bin length of --record, ms (default 10)")
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


#: ``--out``'s suffixes and the table each writes.
OUT_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".csv.gz": "csv"}


def _out_format(path: Path) -> tuple[str, str]:
    """``("parquet" or "csv", the name without its suffix)`` by ``--out``'s suffix
    (:data:`OUT_FORMATS`), which the readers of the spikes (``--compare``,
    ``--input-spikes``, pandas) go by; any other is one line before any work."""
    from flyviz.errors import InputError

    name = path.name
    for suffix, table in OUT_FORMATS.items():
        if name.lower().endswith(suffix):
            if len(name) == len(suffix):
                # "--out .csv" would write a hidden file named by its suffix alone.
                raise InputError(f"--out {path}: the file has no name before {suffix}; give "
                                 f"one, e.g. --out spikes{suffix}")
            return table, name[:-len(suffix)]
    raise InputError(f"--out {path}: give a .parquet file (the authors' layout) or a .csv "
                     "(or .csv.gz); the suffix says which is written")


def run(args: argparse.Namespace) -> int:
    """Check everything, load the brain, run and write."""
    import numpy as np

    from flyviz.errors import InputError
    from flyviz.extras import require
    from flyviz.commands._options import spiking_brain_from_args
    from flyviz.spiking.run import check_run_size, input_until_ticks
    from flyviz.spiking import LIFParams, read_input_spikes, select, simulate

    if args.out is None and args.record is None and args.compare is None:
        raise InputError("give --out FILE (the spikes), --record FILE (rates per bin) and/or "
                         "--compare OTHER (another run's spikes)")
    out_format, out_stem = _out_format(args.out) if args.out is not None else ("", "")
    if out_format == "parquet":
        require("parquet", "flyviz simulate --out")  # before any work
    if not math.isfinite(args.rate) or args.rate < 0:
        raise InputError(f"--rate must be a non-negative number, not {args.rate}")
    if not math.isfinite(args.duration) or args.duration <= 0:
        raise InputError(f"--duration must be a positive number of seconds (e.g. 1s, 400ms), "
                         f"not {args.duration:g}")
    check_run_size(args.duration, args.trials, args.seed, ("--duration", "--trials", "--seed"))
    if args.input_until is not None:
        input_until_ticks(args.input_until, args.duration, LIFParams().dt_s,
                          int(round(args.duration / LIFParams().dt_s)), "--input-until")
    if args.compare is not None:
        from flyviz.fileio import check_regular

        if not args.compare.exists():
            raise InputError(f"--compare file not found: {args.compare}")
        check_regular(args.compare, "--compare file")
    from flyviz.kinds.spiking import BinSettings

    # --bin is judged with or without --record: replay's command carries it, and a run
    # rerun without --record keeps it, but 0, NaN or a negative bin is never a bin
    try:
        BinSettings(bin_ms=args.bin).validate()
    except InputError as exc:
        raise InputError(f"--bin {args.bin:g}: {exc}") from None
    if args.record is not None:
        if args.bin > args.duration * 1000.0 + 1e-9:
            raise InputError(f"--bin {args.bin:g} ms is longer than the run "
                             f"({args.duration * 1000:g} ms): its one bin's rates would count "
                             "time the run did not have")
    # Each file can be written (its folder made if missing, as export and generate --record
    # do), or one line naming the option and why not. A spike table already at --out is
    # refused, as a recording at --record is (check_command_paths): either may be the only
    # copy of a long run, and the same command typed again must not throw it away.
    if args.out is not None:
        check_output_path(args.out, "--out", probe=True)
        check_new_result(args.out, "spike table")
    if args.record is not None:
        check_output_path(args.record, "--record", probe=True)
    if args.excite is not None or args.silence is not None:
        from flyviz.model.selection import parse

        for query in (args.excite, args.silence):
            if query is not None:
                parse(query)  # a malformed query fails before the brain loads
    excite_ids = None
    if args.excite_file is not None:
        from flyviz.spiking.tables import read_id_list

        excite_ids = read_id_list(args.excite_file)
        excite_ids = np.unique(excite_ids)      # an id twice is one neuron excited

    brain = spiking_brain_from_args(args)
    params = LIFParams(w_syn=brain.w_syn if args.w_syn is None else args.w_syn,
                       rate=args.rate)
    events = read_input_spikes(args.input_spikes, brain, params.dt_s, args.duration) \
        if args.input_spikes is not None else None
    if events is not None:
        from flyviz.spiking.run import run_ticks

        late = int((events[0] >= run_ticks(args.duration, params.dt_s)).sum())
        if late:  # a run takes the events of its ticks: say what it leaves
            print(f"flyviz: note: {late:,} of the {events[0].size:,} input events in "
                  f"{args.input_spikes.name} come at or after the run's end "
                  f"({args.duration:g} s) and are not used", file=sys.stderr)
    if excite_ids is not None:
        excite = brain.indices_of(excite_ids, f"{args.excite_file.name}: root id")
    elif args.excite is not None:
        excite = select(brain, args.excite)
    elif events is None:
        if brain.default_excite is None:
            raise InputError("nothing to excite: give --excite, --excite-file or "
                             "--input-spikes")
        excite = brain.default_excite
    else:
        excite = np.empty(0, np.int64)
    silence = select(brain, args.silence) if args.silence is not None else None
    # What a recording says drove the run, read now: the files the run reads, as they are.
    sources = _sources(args) if args.record is not None else {}

    other = None
    if args.compare is not None:   # before the run: a file in another layout fails at once
        from flyviz.spiking.diagnose import read_spikes

        other = read_spikes(args.compare, brain, params.dt_s, args.trials,
                            int(round(args.duration / params.dt_s)))
    start = time.perf_counter()
    result = simulate(brain, excite=excite, silence=silence, duration_s=args.duration,
                      trials=args.trials, seed=args.seed, input_events=events, params=params,
                      input_until_s=args.input_until)
    wall = time.perf_counter() - start
    if other is not None:   # a file of fewer trials, before anything is written
        from flyviz.spiking.diagnose import check_trials

        check_trials(result, other, args.compare.name)
    after = None
    if args.input_until is not None:
        from flyviz.spiking.diagnose import sustained_activity

        after = sustained_activity(result, args.input_until)
    if args.out is not None:
        from flyviz.fileio import atomic_write, os_error

        exp_name = args.exp_name if args.exp_name is not None else out_stem
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_error(exc, args.out, "write") from None
        # Through a temporary beside it: a full disk leaves no part of the table behind.
        with atomic_write(args.out, "wb") as handle:
            if out_format == "csv":
                result.write_csv(handle, exp_name,
                                 gzipped=args.out.name.lower().endswith(".gz"))
            else:
                result.to_frame(exp_name).to_parquet(handle, compression="brotli", index=False)
    if args.record is not None:
        from flyviz.errors import FlyvizError

        try:
            _save_recording(args, brain, result, excite, silence, after, sources)
        except FlyvizError as exc:
            if args.out is None:
                raise
            # One of the two outputs exists: say which, so that no one takes it for none.
            raise type(exc)(f"{exc}; --out {args.out} was written, --record "
                            f"{args.record} was not") from None

    rates = result.rates()
    bio = result.duration_s * result.trials
    print(f"{brain.name}: {brain.neurons:,} neurons, {brain.synapses:,} synapses; "
          f"{excite.size} excited at {params.rate:g} Hz"
          + (f", {silence.size} silenced" if silence is not None else "")
          + (f", {events[0].size:,} input events" if events is not None else ""))
    print(f"{result.trials} trial(s) x {result.duration_s:g} s: {result.neuron.size:,} spikes, "
          f"{int((rates > 0).sum()):,} neurons fired; {wall:.2f} s "
          f"({wall / bio if bio else 0:.3f} s per biological second)"
          + (" -> " + " and ".join(str(p) for p in (args.out, args.record) if p is not None)
             if args.out is not None or args.record is not None else ""))
    if after is not None:
        print(after.describe())
    top = [int(i) for i in np.argsort(-rates, kind="stable")[:10] if rates[i] > 0]
    if top:
        print(f"the {len(top)} neurons that fired most (mean rate over the trials):")
        print(f"  {'neuron id':>20}  {'rate':>11}  cell type")
    for i in top:
        label = brain.cell_type[i] if brain.cell_type is not None and brain.cell_type[i] \
            else ""
        print(f"  {brain.root_ids[i]:>20}  {rates[i]:8.1f} Hz  {label}")
    if other is not None:
        from flyviz.spiking.diagnose import first_divergence

        rerun = {"excite": excite, "silence": silence, "seed": args.seed,
                 "input_events": events, "params": params, "input_until_s": args.input_until}
        found = first_divergence(result, other, rerun)
        if found is None:
            print(f"compared with {args.compare.name}: identical, {result.neuron.size:,} spikes")
            return 0
        print(f"compared with {args.compare.name}: "
              f"{found.describe(params.dt, args.compare.name)}")
        return 1
    return 0


#: An ``--excite-file`` of at most this many neurons is recorded as the query of their root
#: ids (``body:ID,...``), which runs it again without the file; a longer one by its path and
#: SHA-256 (its ids would make the recording's header and the command to run it unwieldy).
EXCITE_IDS_RECORDED = 100


def _file_source(path: Path) -> dict[str, Any]:
    """How a recording names a file its run read: its absolute path and SHA-256."""
    from flyviz.model.formats.common import sha256_file
    from flyviz.spiking.brain import brain_spec

    return {"path": brain_spec(str(path)), "sha256": sha256_file(Path(path).expanduser())}


def _sources(args: argparse.Namespace) -> dict[str, Any]:
    """The files a run read besides the brain, as ``--record`` keeps them (``excite_file``,
    ``input_spikes``: :func:`_file_source`; ``brain_files``: the brain's own files given
    by option, by absolute path)."""
    from flyviz.spiking.brain import brain_spec

    sources: dict[str, Any] = {}
    if args.excite_file is not None:
        sources["excite_file"] = _file_source(args.excite_file)
    if args.input_spikes is not None:
        sources["input_spikes"] = _file_source(args.input_spikes)
    files = {name: brain_spec(str(getattr(args, name)))
             for name in ("connectivity", "coordinates", "classification")
             if getattr(args, name) is not None}
    if files:
        sources["brain_files"] = files
    return sources


def _save_recording(args: argparse.Namespace, brain: Any, result: Any, excite: Any,
                    silence: Any, after: Any = None,
                    sources: dict[str, Any] | None = None) -> None:
    """Write ``--record``: each neuron's rate per ``--bin`` ms bin (Hz), as the spiking kind's
    frames (:mod:`flyviz.kinds.spiking`), its metadata naming the kind, the brain and what
    drove the run (the excited neurons' query, the files read: ``sources`` of
    :func:`_sources`, the synapse weight, when the input stopped), and every spike at its
    tick beside them; with ``--input-until``, what keeps firing after the input stops
    (``spiking.after_input``)."""
    import numpy as np

    from flyviz.kinds import state_frame
    from flyviz.kinds.spiking import SPIKING, BinSettings, SpikingModel, Stimulus
    from flyviz.record.recording import Recording

    bin_ticks = max(1, int(round(args.bin / result.params.dt)))
    counts = result.bin_counts(bin_ticks)
    bins = BinSettings(bins=counts.shape[0], bin_ms=bin_ticks * result.params.dt,
                       trials=result.trials)
    query = args.excite
    if args.excite_file is not None and excite.size <= EXCITE_IDS_RECORDED:
        # The ids as a query every brain takes: the recording says which neurons, and the
        # command that runs it again needs no file (a run sorts its excited neurons, so the
        # query gives the same Poisson streams).
        query = "body:" + ",".join(str(int(i)) for i in np.sort(brain.root_ids[excite]))
    stimulus = Stimulus(excite=query, rate=args.rate, silence=args.silence, seed=args.seed)
    metadata = SPIKING.metadata(SpikingModel(brain, args.brain), stimulus, bins,
                                counts.sum(axis=1).tolist(), excite, silence)
    metadata["spiking"].update(sources or {})
    metadata["spiking"]["w_syn"] = float(result.params.w_syn)
    metadata["spiking"]["input_until_s"] = None if args.input_until is None else \
        float(args.input_until)
    if after is not None:   # what fires after the input stops (--input-until)
        from dataclasses import asdict

        metadata["spiking"]["after_input"] = {**asdict(after), "summary": after.describe()}
    # The run's length, where its last bin is short (--bin 7 over 50 ms: 1 ms): that bin's
    # rates are over its own length, and a reader checks the spikes against it.
    metadata["spiking"]["run_ticks"] = int(result.n_steps)
    recording = Recording(brain.neurons, metadata, states_dtype="float32")
    for i, row in enumerate(counts):
        ticks = min(bin_ticks, result.n_steps - i * bin_ticks)
        recording.append(state_frame(i, row / (ticks * result.params.dt_s * result.trials)))
    recording.spikes = result.spike_log(bin_ticks)
    recording.save(args.record)
    short = result.n_steps - (counts.shape[0] - 1) * bin_ticks
    if short < bin_ticks:
        # One spike in a 1 ms bin is 1,000 Hz: a reader of the last frame should know why.
        dt_ms = result.params.dt
        print(f"flyviz: note: {args.record.name}'s last bin is {short * dt_ms:g} ms (the run's "
              f"{result.n_steps * dt_ms:g} ms in bins of {bin_ticks * dt_ms:g} ms): its rates "
              f"are over those {short * dt_ms:g} ms", file=sys.stderr)

