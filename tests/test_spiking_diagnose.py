"""Reading a spiking run (flyviz.spiking.diagnose, ``flyviz simulate --compare`` and
``--input-until``): the first spike two runs disagree on, with flyviz's distance to the
threshold; what keeps firing after the input stops; bad input as one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz import spiking
from flyviz.errors import InputError
from flyviz.spiking.diagnose import (check_trials, first_divergence, read_spikes,
                                     sustained_activity, threshold_margin)

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

IDS = 720575940600000000 + 11 * np.arange(6, dtype=np.int64)


def _edges(loop: bool) -> list[tuple[int, int, float]]:
    """0 (excited) drives 1, 1 drives 3; with ``loop`` 1 and 2 excite each other."""
    edges = [(0, 1, 400.0), (1, 3, 400.0), (4, 5, 30.0)]
    return edges + ([(1, 2, 400.0), (2, 1, 400.0)] if loop else [])


def _brain(loop: bool = True) -> spiking.SpikingBrain:
    pre, post, counts = (np.array(c) for c in zip(*_edges(loop)))
    order = np.argsort(pre, kind="stable")
    indptr = np.zeros(IDS.size + 1, np.int64)
    np.cumsum(np.bincount(pre.astype(np.int64), minlength=IDS.size), out=indptr[1:])
    brain = spiking.SpikingBrain(name="loop", root_ids=IDS.copy(), indptr=indptr,
                                 post=post[order].astype(np.int32),
                                 counts=counts[order].astype(float))
    brain.default_excite = np.array([0], np.int64)
    return brain


def _write_brain(folder: Path, loop: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"Completed": True}, index=pd.Index(IDS)).to_csv(
        folder / "Completeness_783.csv")
    pre, post, counts = (np.array(c) for c in zip(*_edges(loop)))
    pd.DataFrame({"Presynaptic_Index": pre, "Postsynaptic_Index": post,
                  "Excitatory x Connectivity": counts.astype(np.int64)}).to_parquet(
        folder / "Connectivity_783.parquet")
    return folder


RUN = dict(excite=[0, 4], duration_s=0.15, trials=2, seed=5)


# ---------------------------------------------------------------- after the input stops
def test_a_self_exciting_loop_keeps_firing_after_the_input_stops():
    looped = spiking.simulate(_brain(True), input_until_s=0.05, **RUN)
    after = sustained_activity(looped, 0.05)
    assert after.neurons == 3                     # 1 and 2 drive each other, 1 drives 3
    assert after.firing_at_end == 2 and after.trials == 2
    assert after.lasted_s == pytest.approx(0.10, abs=0.003)
    assert set(looped.neuron[looped.tick >= 500].tolist()) == {1, 2, 3}
    assert "self-sustained" in after.describe()
    # the same brain without the loop: an echo of the spikes on their way, then nothing
    plain = sustained_activity(spiking.simulate(_brain(False), input_until_s=0.05, **RUN),
                               0.05)
    assert plain.firing_at_end == 0 and plain.lasted_s < 0.01
    # before the input stops, the run is the whole-input run's, spike for spike
    whole = spiking.simulate(_brain(True), **RUN)
    early = whole.tick < 500
    assert np.array_equal(looped.tick[looped.tick < 500], whole.tick[early])
    assert np.array_equal(looped.neuron[looped.tick < 500], whole.neuron[early])
    assert (whole.neuron[whole.tick >= 500] == 0).any()       # the input went on there
    assert not (looped.neuron[looped.tick >= 500] == 0).any()
    # a live run stopped at the same tick is the same
    live = spiking.SpikingSimulation(_brain(True), excite=[0, 4], seed=5, input_until_s=0.05)
    ticks, neurons = live.advance(700)
    ticks2, neurons2 = live.advance(800)
    first = looped.trial == 0
    assert np.array_equal(np.concatenate([ticks, ticks2]), looped.tick[first])
    assert np.array_equal(np.concatenate([neurons, neurons2]), looped.neuron[first])


def test_simulate_says_what_keeps_firing_and_records_it(tmp_path, capsys):
    from flyviz.record.recording import Recording

    folder = _write_brain(tmp_path / "brain")
    record = tmp_path / "run.flyrec"
    code, text, err = cli_run(capsys, "simulate", str(folder), "--excite", "id:0,4",
                              "--duration", "150ms", "--trials", "2", "--seed", "5",
                              "--input-until", "50ms", "--record", str(record))
    assert code == 0, err
    line = next(t for t in text.splitlines() if t.startswith("after the input stops"))
    assert "at 50 ms: 3 neuron(s) keep firing" in line and "2 of 2 trial(s)" in line
    meta = Recording.load(record).metadata["spiking"]["after_input"]
    assert meta["neurons"] == 3 and meta["firing_at_end"] == 2 and meta["summary"] == line


# ---------------------------------------------------------------- the first divergence
def _other(run: spiking.SpikeRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return run.trial.copy(), run.tick.copy(), run.neuron.copy()


def test_the_first_divergence_names_a_planted_one_tick_change():
    brain = _brain(True)
    run = spiking.simulate(brain, **RUN)
    rerun = dict(excite=[0, 4], seed=5)
    assert first_divergence(run, _other(run), rerun) is None
    trial, tick, neuron = _other(run)
    # trial 1's 5th spike of neuron 3 one tick late
    at = int(np.flatnonzero((trial == 1) & (neuron == 3))[4])
    tick[at] += 1
    found = first_divergence(run, (trial, tick, neuron), rerun)
    assert found is not None
    assert (found.trial, found.tick, found.neuron) == (1, int(run.tick[at]), 3)
    assert found.root_id == IDS[3] and found.flyviz_spikes and not found.other_spikes
    assert found.tested and found.margin_mv > 0            # flyviz's v was over the threshold
    assert found.spikes_before == int(((run.trial == 0) | (run.tick < run.tick[at])
                                       | ((run.tick == run.tick[at]) & (run.neuron < 3)))
                                      [run.trial <= 1].sum())
    text = found.describe(0.1, "other.parquet")
    assert f"tick {run.tick[at]}" in text and f"neuron {IDS[3]} (index 3)" in text
    assert "flyviz spikes, other.parquet does not" in text and "above threshold" in text
    # a spike flyviz does not have: the other side's, and flyviz's v below the threshold
    quiet = int(run.tick[at]) - 3
    extra = (np.append(run.trial, 1), np.append(run.tick, quiet), np.append(run.neuron, 5))
    found = first_divergence(run, extra, rerun)
    assert (found.trial, found.tick, found.neuron) == (1, quiet, 5)
    assert found.other_spikes and not found.flyviz_spikes and found.margin_mv < 0


def test_the_threshold_margin_is_what_the_engine_tests():
    brain = _brain(True)
    run = spiking.simulate(brain, **RUN)
    for s in (0, 7, 30):
        trial, tick, neuron = int(run.trial[s]), int(run.tick[s]), int(run.neuron[s])
        margin, tested = threshold_margin(brain, trial, tick, neuron, excite=[0, 4], seed=5)
        assert tested and margin > 0
        sim = spiking.SpikingSimulation(brain, excite=[0, 4], seed=5, trial=trial)
        sim.advance(tick)
        before = float(sim.v[neuron])
        ticks, neurons = sim.advance(1)
        assert neuron in neurons.tolist() and float(sim.v[neuron]) != before
    # a neuron never reached stays at rest, below the threshold by v_th - v_0 = 7 mV
    margin, tested = threshold_margin(brain, 0, 100, 5, excite=[0], seed=5)
    assert tested and margin * 1000 == pytest.approx(-7.0, abs=1e-9)


def test_simulate_compare_says_identical_or_the_first_difference(tmp_path, capsys):
    folder = _write_brain(tmp_path / "brain")
    out = tmp_path / "mine.parquet"
    args = ["simulate", str(folder), "--excite", "id:0,4", "--duration", "150ms",
            "--trials", "2", "--seed", "5"]
    code, _, err = cli_run(capsys, *args, "--out", str(out))
    assert code == 0, err
    code, text, err = cli_run(capsys, *args, "--compare", str(out))
    spikes = len(pd.read_parquet(out))
    assert code == 0, err
    assert f"compared with mine.parquet: identical, {spikes:,} spikes" in text
    table = pd.read_parquet(out)
    row = int(np.flatnonzero((table["trial"] == 0) & (table["flywire_id"] == IDS[1]))[2])
    moved = float(table["t"].iloc[row])
    table.loc[row, "t"] = moved + 0.0001                   # one tick later
    changed = tmp_path / "brian2.parquet"
    table.to_parquet(changed)
    code, text, err = cli_run(capsys, *args, "--compare", str(changed))
    assert code == 1, err
    line = next(t for t in text.splitlines() if t.startswith("compared with brian2.parquet"))
    tick = int(round(moved / 0.0001))
    assert f"trial 0, tick {tick} ({tick * 0.1:g} ms), neuron {IDS[1]} (index 1)" in line
    assert "flyviz spikes, brian2.parquet does not" in line and "above threshold" in line


def test_a_compare_file_of_fewer_trials_says_so_not_a_spike_difference(tmp_path, capsys):
    """A one-trial file compared with a two-trial run said "first difference at trial 1"
    (exit 1). Now one line names the trials (exit 2), before anything is written. A file
    whose last trial has no rows may be of a run whose last trial was silent (the layout
    has no row for it): where this run's trial is silent too, it is compared."""
    folder = _write_brain(tmp_path / "brain")
    one = tmp_path / "one.csv.gz"
    args = ["simulate", str(folder), "--excite", "id:0,4", "--duration", "150ms", "--seed", "5"]
    code, _, err = cli_run(capsys, *args, "--out", str(one))
    assert code == 0, err
    mine = tmp_path / "mine.parquet"
    code, _, err = cli_run(capsys, *args, "--trials", "2", "--compare", str(one), "--out",
                           str(mine))
    one_error_line(code, err, "--compare one.csv.gz holds spikes of trial 0 only, and this run "
                   "of 2 trials has spikes in trial 1 too: give --trials 1 (or a file of all 2 "
                   "trials)")
    assert not mine.exists()
    run = spiking.simulate(_brain(), **RUN)
    first = run.trial == 0
    other = (run.trial[first], run.tick[first], run.neuron[first])
    with pytest.raises(InputError, match="holds spikes of trial 0 only"):
        check_trials(run, other, "one.csv")
    quiet = dataclasses.replace(run, tick=run.tick[first], trial=run.trial[first],
                                neuron=run.neuron[first])       # its trial 1 silent
    check_trials(quiet, other, "one.csv")
    assert first_divergence(quiet, other) is None
    check_trials(run, (np.empty(0, np.int64),) * 3, "empty.csv")  # compared as it is


@pytest.mark.parametrize("name", ["mine.csv", "mine.csv.gz"])
def test_simulate_out_csv_writes_csv_that_compares_identical(tmp_path, capsys, name):
    """``--out x.csv`` wrote Parquet bytes into a file named .csv, which pandas and
    ``--compare`` then could not read; the suffix now says which is written, and the CSV
    holds the same spikes as the Parquet table to the last bit of ``t``."""
    folder = _write_brain(tmp_path / "brain")
    args = ["simulate", str(folder), "--excite", "id:0,4", "--duration", "150ms",
            "--trials", "2", "--seed", "5"]
    code, _, err = cli_run(capsys, *args, "--out", str(tmp_path / "mine.parquet"),
                           "--exp-name", "run")
    assert code == 0, err
    code, _, err = cli_run(capsys, *args, "--out", str(tmp_path / name), "--exp-name", "run")
    assert code == 0, err
    table = pd.read_csv(tmp_path / name)
    assert len(table) > 10
    pd.testing.assert_frame_equal(table, pd.read_parquet(tmp_path / "mine.parquet"))
    # The experiment's default name is the file's, without .csv or .csv.gz.
    code, _, err = cli_run(capsys, *args, "--out", str(tmp_path / "other" / name))
    assert code == 0, err
    assert set(pd.read_csv(tmp_path / "other" / name)["exp_name"]) == {"mine"}
    # An empty name given is kept, not replaced by the file's.
    code, _, err = cli_run(capsys, *args, "--out", str(tmp_path / "empty" / name),
                           "--exp-name", "")
    assert code == 0, err
    assert pd.read_csv(tmp_path / "empty" / name, keep_default_na=False)["exp_name"].eq("").all()
    code, text, err = cli_run(capsys, *args, "--compare", str(tmp_path / name))
    assert code == 0, err
    assert f"compared with {name}: identical, {len(table):,} spikes" in text


@pytest.mark.parametrize("given, note", [("100", True), ("10", True), ("2.5", False),
                                         ("100ms", False), ("100s", False)])
def test_a_long_duration_without_a_unit_says_it_is_seconds(capsys, given, note):
    """``--duration 100`` is 100 s of the fly's time (minutes of work on a large brain): a
    user who meant milliseconds learns it before the run, not after."""
    from flyviz.commands.simulate import duration_arg

    seconds = duration_arg(given)
    assert seconds == (0.1 if given == "100ms" else float(given.rstrip("s")))
    err = capsys.readouterr().err
    if note:
        assert f"note: {given} is read as {float(given):g} s of the fly's time; write " \
               f"{given}ms for milliseconds" in err
    else:
        assert not err


def test_simulate_out_csv_needs_no_pandas(tmp_path, capsys, monkeypatch):
    """CSV is written without pandas (the Parquet table needs it, and pyarrow: the atlas
    extra); an install without them still saves a run's spikes."""
    import sys

    folder = _write_brain(tmp_path / "brain")
    monkeypatch.setitem(sys.modules, "pandas", None)        # import pandas fails
    code, _, err = cli_run(capsys, "simulate", "demo", "--duration", "30ms", "--out",
                           str(tmp_path / "s.csv"))
    assert code == 0, err
    lines = (tmp_path / "s.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "t,trial,flywire_id,exp_name" and len(lines) > 2
    t, trial, _root, name = lines[1].split(",")
    assert 0 <= float(t) < 0.03 and trial == "0" and name == "s"
    # The authors' folder is tables: without pandas, one line naming the extra, not a
    # traceback from inside the reader.
    code, out, err = cli_run(capsys, "simulate", str(folder), "--out", str(tmp_path / "x.csv"))
    one_error_line(code, err, "pandas", "pip install 'flyviz[atlas]'")


@pytest.mark.parametrize("content", [b"", b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"])
def test_a_compare_file_that_is_empty_or_no_text_says_so(tmp_path, capsys, content):
    """An empty file read "No columns to parse from file" and a picture or a recording
    "'utf-8' codec can't decode bytes in position ...": the decoder's words, not the user's."""
    other = tmp_path / "other.csv"
    other.write_bytes(content)
    code, _, err = cli_run(capsys, "simulate", "demo", "--duration", "20ms", "--compare",
                           str(other))
    one_error_line(code, err, "other.csv: it is empty, or not a CSV table")


def test_an_input_end_shorter_than_a_tick_is_refused(tmp_path, capsys):
    """--input-until 0.05ms rounded to no tick and ran with no input at all, while
    --duration 0.05ms is refused as shorter than a tick."""
    code, _, err = cli_run(capsys, "simulate", "demo", "--duration", "20ms", "--input-until",
                           "0.05ms", "--out", str(tmp_path / "x.csv"))
    one_error_line(code, err, "0.05 ms is shorter than one tick (0.1 ms)")
    code, _, err = cli_run(capsys, "simulate", "demo", "--duration", "20ms", "--input-until",
                           "0ms", "--out", str(tmp_path / "x.csv"))
    assert code == 0, err                                   # 0: no input, as asked


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf"])
def test_a_synapse_weight_that_is_not_positive_is_refused(tmp_path, capsys, value):
    """A negative --w-syn turned every synapse and the input drive around: the run went
    silent and said "0 spikes", exit 0."""
    from flyviz.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:       # argparse's refusal of the option
        main(["simulate", "demo", "--duration", "20ms", "--w-syn", value, "--out",
              str(tmp_path / "x.csv")])
    one_error_line(int(exited.value.code), capsys.readouterr().err, "argument --w-syn",
                   "must be a positive number of mV")
    assert not (tmp_path / "x.csv").exists()


def test_simulate_out_of_another_suffix_is_refused_before_the_run(tmp_path, capsys):
    folder = _write_brain(tmp_path / "brain")
    code, out, err = cli_run(capsys, "simulate", str(folder), "--out", str(tmp_path / "x.txt"))
    one_error_line(code, err, "--out", "x.txt: give a .parquet file (the authors' layout) or "
                   "a .csv")
    assert not out and not (tmp_path / "x.txt").exists()


@pytest.mark.parametrize("case, message", [
    ("layout", "lacks column(s) trial: spikes in the authors' layout have columns t, trial, "
               "flywire_id, exp_name"),
    ("experiments", "holds 2 experiments (exp_name a, b); give a file of one"),
    ("trials", "holds trial 5, and this run has 2 trial(s) (0..1); give --trials 6"),
    ("late", "holds a spike at 300 ms, after this run's 150 ms; give a longer --duration"),
    # times in milliseconds (the last, 149.9, within 150 ms): say that t is in seconds
    ("milliseconds", "holds a spike at 149900 ms, after this run's 150 ms; its t looks like "
                     "milliseconds (149.9 ms is within the run): t must be in seconds (the "
                     "authors' layout)"),
    ("unknown", "is not a neuron of"),
    ("until", "--input-until 200 ms is after the run's end (150 ms)"),
    ("negative", "--input-until must be a non-negative number of seconds"),
    ("missing", "--compare file not found"),
    ("folder", "it is a folder, not a regular file"),
])
def test_bad_compare_files_and_input_ends_are_one_line(tmp_path, capsys, case, message):
    folder = _write_brain(tmp_path / "brain")
    table = pd.DataFrame({"t": [0.001, 0.002], "trial": [0, 1],
                          "flywire_id": [IDS[0], IDS[1]], "exp_name": ["a", "a"]})
    if case == "layout":
        table = table.drop(columns=["trial"])
    elif case == "experiments":
        table["exp_name"] = ["a", "b"]
    elif case == "trials":
        table["trial"] = [0, 5]
    elif case == "late":
        table["t"] = [0.001, 0.3]
    elif case == "milliseconds":
        table["t"] = [1.0, 149.9]
    elif case == "unknown":
        table["flywire_id"] = [IDS[0], 720575940699999999]
    other = tmp_path / "other.parquet"
    table.to_parquet(other)
    if case == "missing":
        other = tmp_path / "nothing.parquet"
    elif case == "folder":
        other = tmp_path
    args = ["simulate", str(folder), "--excite", "id:0", "--duration", "150ms", "--trials",
            "2", "--compare", str(other)]
    if case == "until":
        args += ["--input-until", "200ms"]
    elif case == "negative":
        args += ["--input-until=-5ms"]
    code, _, err = cli_run(capsys, *args)
    one_error_line(code, err, message)


def test_read_spikes_refuses_a_spike_twice(tmp_path):
    table = pd.DataFrame({"t": [0.001, 0.001], "trial": [0, 0], "flywire_id": [IDS[0]] * 2,
                          "exp_name": ["a", "a"]})
    table.to_csv(tmp_path / "twice.csv", index=False)
    with pytest.raises(InputError, match="twice"):
        read_spikes(tmp_path / "twice.csv", _brain(), 1e-4, 1, 1000)
