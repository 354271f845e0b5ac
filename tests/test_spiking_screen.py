"""Screens of the spiking brain (flyviz.spiking.screen, ``flyviz screen``): each set's rates are
a single ``simulate`` run's, a rerun skips the finished sets and writes the same table, worker
counts agree, and bad input is one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz import cli, spiking
from flyviz.analysis import cluster
from flyviz.errors import FlyvizError, InputError
from flyviz.spiking import screen as sc

# The engine's kernels compiled once for all the test workers (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("spiking_kernels")

N = 80
IDS = 720575940600000000 + 7 * np.arange(N, dtype=np.int64)


def _edges(seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random graph strong enough to spread activity: 0..9 drive the rest, some inhibit."""
    rng = np.random.default_rng(seed)
    pre = np.concatenate([np.repeat(np.arange(10), 12), rng.integers(0, N, 500)])
    post = np.concatenate([rng.integers(10, N, 120), rng.integers(0, N, 500)])
    counts = np.concatenate([np.full(120, 120.0), rng.integers(-40, 60, 500).astype(float)])
    return pre, post, counts


def _brain() -> spiking.SpikingBrain:
    pre, post, counts = _edges()
    order = np.argsort(pre, kind="stable")
    indptr = np.zeros(N + 1, np.int64)
    np.cumsum(np.bincount(pre, minlength=N), out=indptr[1:])
    brain = spiking.SpikingBrain(name="tiny", root_ids=IDS.copy(), indptr=indptr,
                                 post=post[order].astype(np.int32), counts=counts[order])
    brain.default_excite = np.arange(3, dtype=np.int64)
    return brain


@pytest.fixture(scope="module")
def brain() -> spiking.SpikingBrain:
    return _brain()


SETS = [("drivers", "id:0-4"), ("one", str(IDS[5])), ("tail", "id:40-79")]
SHORT = dict(duration_s=0.15, trials=2, seed=3)


@pytest.mark.parametrize("mode", ["activate", "silence"])
def test_each_sets_rates_are_a_single_simulate_run(brain, mode):
    sets = sc.resolve_sets(brain, SETS)
    assert [s.size for s in sets] == [5, 1, 40] and sets[1].members.tolist() == [5]
    settings = sc.ScreenSettings(mode=mode, rate=120.0, **SHORT)
    result = sc.run_screen(brain, sets, settings)
    base = np.arange(3) if mode == "silence" else np.empty(0, np.int64)
    for i, s in enumerate(sets):
        excite, silence = (s.members, None) if mode == "activate" else (base, s.members)
        alone = spiking.simulate(brain, excite=excite, silence=silence, rate=120.0,
                                 **SHORT).rates()
        assert np.array_equal(result.rates[i], alone), s.name
    baseline = spiking.simulate(brain, excite=base, rate=120.0, **SHORT).rates()
    assert np.array_equal(result.baseline, baseline)
    assert result.rates.sum() > 0 and result.computed + result.pruned == len(sets) + 1
    if mode == "activate":
        assert not baseline.any()                      # no input, no spikes
    else:
        # silencing the drivers changes the drivees; the rows say so
        assert result.summary[1]["changed"] > 0
        target = int(np.argmax(np.abs(result.rates[0] - baseline)))
        values = result.neuron_values(target)
        assert values[sets[0].members].tolist() == [result.change_of(target)[0]] * 5
        assert np.isnan(values[20:40]).all()           # in no set
        assert values[5] == result.change_of(target)[1]


@pytest.mark.parametrize("spikes", [0, 7, 5_000])
def test_each_trials_counts_are_the_same_by_a_table_or_by_sorting_the_spikes(spikes):
    """trial_counts counts by one table of every neuron in every trial where that table is
    small next to the spikes, else by sorting the spikes by neuron: the same answer."""
    rng = np.random.default_rng(spikes)
    trials, n = 4, 3_000
    trial = np.sort(rng.integers(0, trials, spikes))
    neuron = rng.integers(0, 600, spikes) * 5  # a fifth of the neurons can fire at most
    expected = {}
    for t, i in zip(trial.tolist(), neuron.tolist()):
        expected[i] = expected.get(i, [0] * trials)
        expected[i][t] += 1
    for neurons in (n, None, 10**9):  # the brain's size, unknown, or too many for a table
        fired, counts = sc.trial_counts(trial, neuron, trials, neurons)
        assert fired.dtype == counts.dtype == np.int64
        assert fired.tolist() == sorted(expected)
        assert counts.shape == (trials, fired.size)
        assert counts.T.tolist() == [expected[i] for i in sorted(expected)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rerun_skips_finished_sets_and_writes_the_same_table(brain, tmp_path):
    sets = sc.resolve_sets(brain, SETS)
    settings = sc.ScreenSettings(mode="silence", **SHORT)
    out = tmp_path / "screen"
    first = sc.run_screen(brain, sets, settings, out=out)
    files = _files(out)
    assert set(files) >= {"screen.json", "baseline.csv", "summary.csv"}
    # "one" (neuron 5) never fires in the baseline: answered from it, no run, no file
    assert first.pruned == 1 and first.answered == ["run", "baseline", "run"]
    assert len([f for f in files if f.startswith("sets/")]) == 2
    info, rows = sc.read_summary(out)
    assert [r["set"] for r in rows] == [sc.BASELINE, "drivers", "one", "tail"]
    assert [r["answered"] for r in rows] == ["run", "run", "baseline", "run"]
    assert info["mode"] == "silence" and info["sets"] == 3
    assert info["answered_from_baseline"] == 1 and info["runs"] == 3
    import json
    said = json.loads((out / "screen.json").read_text())["last_run"]
    assert said["answered_from_baseline"] == 1 and said["runs"] == 3

    again = sc.run_screen(brain, sets, settings, out=out)
    assert (again.computed, again.resumed, again.pruned) == (0, 3, 1)
    assert np.array_equal(again.rates, first.rates) and _files(out) == files

    # Stopped after two runs (Ctrl+C): what finished is kept, the rerun does the rest.
    class StopAfter:
        total = 1

        def __init__(self) -> None:
            self.calls = 0

        def update(self, done: int, force: bool = False) -> None:
            if done >= 2:
                raise KeyboardInterrupt

    fresh = tmp_path / "stopped"
    with pytest.raises(cluster.Interrupted,
                       match=r"2 of 3 runs \(the baseline and 3 sets; 1 answered from the "
                             r"baseline\) are saved"):
        sc.run_screen(brain, sets, settings, out=fresh, progress=StopAfter())
    assert not (fresh / "summary.csv").exists()
    rest = sc.run_screen(brain, sets, settings, out=fresh)
    assert (rest.computed, rest.resumed, rest.pruned) == (1, 2, 1)
    assert _files(fresh) == files                      # the same bits as the one-go run

    # A damaged set file is computed again.
    victim = next(p for p in (out / "sets").iterdir())
    victim.write_bytes(victim.read_bytes().replace(b"0.0", b"1.0", 1))
    notes: list[str] = []
    healed = sc.run_screen(brain, sets, settings, out=out, log=notes.append)
    assert healed.computed == 1 and any("damaged" in n for n in notes)
    assert _files(out) == files


def test_a_folder_of_other_settings_or_sets_is_refused(brain, tmp_path):
    sets = sc.resolve_sets(brain, SETS)
    out = tmp_path / "screen"
    sc.run_screen(brain, sets, sc.ScreenSettings(mode="activate", **SHORT), out=out)
    with pytest.raises(sc.ScreenError, match=r"another mode .*, trials \(2 there, 1 now\)"):
        sc.run_screen(brain, sets, sc.ScreenSettings(mode="silence", duration_s=0.15,
                                                     seed=3), out=out)
    changed = sc.resolve_sets(brain, [("drivers", "id:0-5")])
    with pytest.raises(sc.ScreenError, match="'drivers' .* was run as 'id:0-4'"):
        sc.run_screen(brain, changed, sc.ScreenSettings(mode="activate", **SHORT), out=out)
    other = _brain()
    other.counts = other.counts * 2
    with pytest.raises(sc.ScreenError, match=r"another brain \(its neurons or synapses differ\);"):
        sc.run_screen(other, sc.resolve_sets(other, SETS),
                      sc.ScreenSettings(mode="activate", **SHORT), out=out)


@pytest.mark.parametrize("text, message", [
    ("no colon here", "line 1: expected 'NAME: QUERY'"),
    ("a: id:1\nempty:\n", "line 2: the set 'empty' is empty"),
    ("a: id:1\na: id:2", "'a' is used on line 1 too"),
    ("(baseline): id:1", "may not start with '('"),
    ("a: type:(", "line 1 (a)"),
    ("# nothing\n\n", "holds no 'NAME: QUERY' line"),
])
def test_bad_sets_are_one_line(text, message):
    with pytest.raises(sc.ScreenError) as info:
        sc.parse_sets(text, "sets.txt")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_sets_that_select_nothing_and_bad_settings_are_refused(brain):
    with pytest.raises(sc.ScreenError, match="set 'x': .*999 is not a neuron of tiny"):
        sc.resolve_sets(brain, [("x", "720575940699999999")])
    with pytest.raises(sc.ScreenError, match="set 'x'"):
        sc.resolve_sets(brain, [("x", "type:KC*")])          # no labels
    for bad in (dict(rate=-1.0), dict(duration_s=float("nan")), dict(trials=0),
                dict(mode="lesion"), dict(excite="id:1")):
        with pytest.raises(InputError):
            sc.ScreenSettings(**bad).validate()  # type: ignore[arg-type]
    # Refused with the settings, before a screen folder is written (the run itself refused
    # them only after screen.json held them, and a corrected rerun was refused as another).
    for bad, message in ((dict(rate=1e9), "above one event per tick"),
                         (dict(duration_s=1e-5), "shorter than one tick"),
                         (dict(duration_s=1e12), "longer than a run may be")):
        with pytest.raises(sc.ScreenError, match=message):
            sc.ScreenSettings(**bad).validate()  # type: ignore[arg-type]


@pytest.mark.slow
def test_two_worker_processes_give_the_rates_and_files_of_one_in_process(tmp_path):
    """A real LocalCluster: the workers load the brain from its files."""
    pytest.importorskip("distributed")
    pytest.importorskip("pyarrow")
    folder = _write_authors_brain(tmp_path / "brain")
    brain = spiking.load_brain(folder)
    sets = sc.resolve_sets(brain, SETS)
    settings = sc.ScreenSettings(mode="silence", excite="id:0-2", **SHORT)
    here = sc.run_screen(brain, sets, settings, out=tmp_path / "w0", target=30)
    there = sc.run_screen(brain, sets, settings, out=tmp_path / "w2", workers=2,
                          spec={"brain": str(folder)}, target=30)
    assert there.workers == 2 and there.pruned == here.pruned == 1
    assert np.array_equal(here.rates, there.rates)
    assert np.array_equal(here.trial_counts, there.trial_counts)
    assert _files(tmp_path / "w0") == _files(tmp_path / "w2")


# ---------------------------------------------------------------- the command
def _write_authors_brain(folder: Path) -> Path:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"Completed": True}, index=pd.Index(IDS)).to_csv(
        folder / "Completeness_783.csv")
    pre, post, counts = _edges()
    pd.DataFrame({"Presynaptic_Index": pre, "Postsynaptic_Index": post,
                  "Excitatory x Connectivity": counts.astype(np.int64)}).to_parquet(
        folder / "Connectivity_783.parquet")
    return folder


@pytest.fixture(scope="module")
def authors(tmp_path_factory) -> Path:
    pytest.importorskip("pyarrow")
    folder = _write_authors_brain(tmp_path_factory.mktemp("authors") / "brain")
    (folder.parent / "sets.txt").write_text(
        "# three sets\n" + "\n".join(f"{name}: {query}" for name, query in SETS) + "\n")
    return folder


def test_the_command_writes_the_folder_and_prints_the_targets_change(authors, tmp_path,
                                                                     capsys):
    sets = authors.parent / "sets.txt"
    out = tmp_path / "screen"
    args = ("screen", str(authors), "--sets", str(sets), "--mode", "silence", "--excite",
            "id:0-2", "--duration", "150ms", "--trials", "2", "--seed", "3", "--workers", "0",
            "--out", str(out))
    code, text, err = cli_run(capsys, *args, "--target", f"body:{IDS[30]}")
    assert code == 0, err
    assert "3 set(s) to silence" in text and f"target {IDS[30]}" in text
    assert "target Δ Hz" in text and "drivers" in text and "3 run(s) now" in text
    assert "1 answered from the baseline" in text
    assert text.rstrip().endswith(f"(in this process) -> {out}")   # --workers 0: no worker
    # the numbers are the library's
    brain = spiking.load_brain(authors)
    result = sc.run_screen(brain, sc.resolve_sets(brain, SETS),
                           sc.ScreenSettings(mode="silence", excite="id:0-2", **SHORT))
    change = result.change_of(30)
    drivers = next(line for line in text.splitlines() if line.strip().startswith("drivers"))
    assert drivers.split()[5] == f"{change[0]:+.3f}"
    assert sc.read_summary(out)[1][1]["set"] == "drivers"
    # again: nothing to run; other settings: one line
    code, text, err = cli_run(capsys, *args)
    assert code == 0 and "0 run(s) now, 3 found done, 1 answered" in text
    code, _, err = cli_run(capsys, *args[:-2], "--rate", "90", "--out", str(out))
    one_error_line(code, err, "another rate (150.0 there, 90.0 now)")


def test_the_help_says_what_the_files_hold_and_what_the_pairs_are_chosen_by(authors, tmp_path,
                                                                          capsys):
    """What the help says of the folder is what a screen writes: baseline.csv has a
    trial_counts column beside root_id and rate_hz; --pairs works without --target too."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli.main(["screen", "--help"])
    assert exited.value.code == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "baseline.csv the baseline's row per neuron: root_id, rate_hz (mean over the " \
           "trials) and trial_counts" in flat
    assert "largest effect: on the --target's rate, or without --target on the mean rate " \
           "of every neuron" in flat
    out = tmp_path / "o"
    code, text, err = cli_run(capsys, "screen", str(authors), "--sets",
                              str(authors.parent / "sets.txt"), "--mode", "silence", "--excite",
                              "id:0-2", "--duration", "150ms", "--trials", "2", "--seed", "3",
                              "--workers", "0", "--pairs", "2", "--out", str(out))
    assert code == 0, err
    assert "pairs of the top 2" in text
    columns = (out / "baseline.csv").read_text().splitlines()[1]
    assert columns == "root_id,rate_hz,trial_counts"


@pytest.mark.parametrize("case, message", [
    ("missing", "sets file not found"),
    ("empty", "the set 'b' is empty"),
    ("unknown", "is not a neuron of"),
    ("rate", "--rate must be a non-negative number"),
    ("rate0", "--rate 0 Hz drives no neuron"),
    ("out", "cannot write --out"),
    ("target", "--target id:0-3 must select one neuron, not 4"),
    ("excite", "--excite is a silencing screen's base stimulus"),
])
def test_bad_input_is_one_line_and_exit_2(authors, tmp_path, capsys, case, message):
    sets = tmp_path / "sets.txt"
    sets.write_text({"empty": "a: id:1\nb:\n", "unknown": "a: 720575940699999999\n"}
                    .get(case, "a: id:1\n"))
    args = ["screen", str(authors), "--sets", str(sets), "--mode", "activate",
            "--duration", "50ms", "--workers", "0", "--out", str(tmp_path / "o")]
    if case == "missing":
        args[3] = str(tmp_path / "nothing.txt")
    elif case == "rate":
        args += ["--rate", "-1"]
    elif case == "rate0":
        args += ["--rate", "0"]
    elif case == "out":
        args[-1] = str(tmp_path / "no" / "such" / "o")
    elif case == "target":
        args += ["--target", "id:0-3"]
    elif case == "excite":
        args += ["--excite", "id:1"]
    code, _, err = cli_run(capsys, *args)
    one_error_line(code, err, message)
    assert not (tmp_path / "o" / "summary.csv").exists()


def test_the_screen_layer_has_one_rule_for_range_nan_and_caption():
    from flyviz.kinds.spiking import SpikingModel
    from flyviz.viewer.layers import SCREEN, ScreenEffect, screen_layer
    from flyviz.viewer.settings import ViewerError
    from flyviz.viewer.state import ViewerState

    effect = ScreenEffect(np.r_[np.nan, -3.0, 1.5, np.zeros(N - 3)], target=2,
                          target_name="MN9", mode="silence", baseline_hz=40.0)
    layer = screen_layer(effect)
    values = layer.values(None, 0)
    assert values[:3].tolist() == [0.0, -3.0, 1.5]          # NaN (in no set): the middle
    assert layer.value_range(values) == (-3.0, 3.0) and layer.diverging
    assert layer.caption == "Δ rate of MN9 when the neuron's set is silenced (Hz)"
    flat = screen_layer(ScreenEffect(np.zeros(N), target=0, mode="activate"))
    assert flat.value_range(flat.values(None, 0)) == (-1e-3, 1e-3)
    assert "neuron 0 when the neuron's set is activated" in flat.caption
    with pytest.raises(InputError):
        ScreenEffect(np.zeros(N), target=N)

    state = ViewerState()
    state.set_model(SpikingModel(_brain()))
    assert SCREEN not in state.colour_layers
    state.screen = effect
    state.colour_by = SCREEN
    assert np.array_equal(state.values(), values) and state.value_range() == (-3.0, 3.0)
    with pytest.raises(ViewerError):
        state.screen = ScreenEffect(np.zeros(N + 1), target=0)
    state.screen = None                                      # withdrawn: back to the state
    assert state.colour_by == "state" and not state.colour_layers[SCREEN].available


# ---------------------------------------------------------------- pruning, pairs, p-values
def test_sets_answered_from_the_baseline_equal_running_them(brain):
    """A silenced set none of whose neurons fires in the baseline is not run; its rates and
    trial counts are what running it gives, bit for bit."""
    sets = sc.each_neuron(brain, "id:0-79")
    settings = sc.ScreenSettings(mode="silence", **SHORT)
    result = sc.run_screen(brain, sets, settings)
    fired = result.baseline > 0
    pruned = [i for i, how in enumerate(result.answered) if how == sc.FROM_BASELINE]
    assert result.pruned == len(pruned) == int((~fired).sum()) > 0
    assert result.computed == 1 + int(fired.sum())        # the baseline and the firing ones
    for i in range(len(sets)):
        alone = spiking.simulate(brain, excite=np.arange(3), silence=sets[i].members, **SHORT)
        assert np.array_equal(result.rates[i], alone.rates()), sets[i].name
        fired_alone, counts = sc.trial_counts(alone.trial, alone.neuron, alone.trials)
        full = np.zeros((SHORT["trials"], brain.neurons), np.int64)
        full[:, fired_alone] = counts
        assert np.array_equal(result.trial_counts[i], full), sets[i].name
    # the firing ones, run, do change something (the pruning is not of every set)
    assert any(row["changed"] for row in result.summary[1:] if row["answered"] == sc.RUN)


def test_a_pair_screens_single_effects_are_the_single_screens(brain, tmp_path):
    sets = sc.each_neuron(brain, "id:0-29")
    settings = sc.ScreenSettings(mode="silence", **SHORT)
    target = 15                                 # 13 of the 30 single sets move its rate
    single = sc.run_screen(brain, sets, settings, target=target)
    paired = sc.run_screen(brain, sets, settings, target=target, pairs=4, out=tmp_path / "p")
    n = len(sets)
    assert len(paired.sets) == n + 6 and paired.pair_of[:n] == [None] * n
    assert np.array_equal(paired.rates[:n], single.rates)
    assert np.array_equal(paired.trial_counts[:n], single.trial_counts)
    effect, p, _ = single.effects(target)
    both, p_both, _ = paired.effects(target)
    assert np.array_equal(both[:n], effect) and np.array_equal(p_both[:n], p)
    # the pairs are of the four largest effects, and each is one run of both sets silenced
    top = np.argsort(-np.abs(effect), kind="stable")[:4].tolist()
    assert paired.top == top and np.abs(effect[top]).min() > 0
    for i in range(n, n + 6):
        a, b = paired.pair_of[i]
        assert {a, b} <= set(top)
        members = np.union1d(sets[a].members, sets[b].members)
        alone = spiking.simulate(brain, excite=np.arange(3), silence=members, **SHORT).rates()
        assert np.array_equal(paired.rates[i], alone[paired.columns])
        assert both[i] == alone[target] - single.baseline[target]
    names, matrix = paired.pair_matrix(target)
    assert names == [sets[i].name for i in top]
    assert np.array_equal(np.diag(matrix), effect[top])
    assert np.array_equal(matrix, matrix.T) and np.isfinite(matrix).all()
    rows = sc.read_summary(tmp_path / "p")[1]
    assert [r["kind"] for r in rows].count("pair") == 6
    pair_row = rows[n + 1]
    assert pair_row["set"] == f"{pair_row['first']} + {pair_row['second']}"
    # a rerun with the pairs resumes everything
    again = sc.run_screen(brain, sets, settings, target=target, pairs=4, out=tmp_path / "p")
    assert again.computed == 0 and np.array_equal(again.rates, paired.rates)


def test_the_pairs_are_a_q_value_family_of_their_own(brain, authors, tmp_path, capsys):
    """The pairs are chosen after the fact from the singles' largest effects: in the singles'
    Benjamini-Hochberg family they would lower every single's q and swell the count."""
    sets = sc.each_neuron(brain, "id:0-29")
    settings = sc.ScreenSettings(mode="silence", duration_s=0.15, trials=8, seed=3)
    target, n = 15, len(sets)
    single = sc.run_screen(brain, sets, settings, target=target)
    paired = sc.run_screen(brain, sets, settings, target=target, pairs=4, out=tmp_path / "p")
    _, p, q = single.effects(target)
    _, p_both, q_both = paired.effects(target)
    assert np.array_equal(p_both[:n], p) and np.array_equal(q_both[:n], q)
    pairs = np.arange(n, n + 6)
    assert (p_both[pairs] < 1).all()
    assert np.array_equal(q_both[pairs], sc.benjamini_hochberg(p_both[pairs]))
    # one family of all would have given the singles other q-values (the test can tell)
    moved = np.flatnonzero(p_both < 1)
    pooled = sc.benjamini_hochberg(p_both[moved])
    assert not np.array_equal(pooled[moved < n], q[moved[moved < n]])
    info, rows = sc.read_summary(tmp_path / "p")
    assert [float(r["q_value"]) for r in rows[1:]] == q_both.tolist()
    assert info["q_families"] == "single sets; pairs"

    # the command counts each family's discoveries apart
    (tmp_path / "each.txt").write_text(
        "".join(f"{s.name}: id:{s.members[0]}\n" for s in sets))
    code, text, err = cli_run(
        capsys, "screen", str(authors), "--sets", str(tmp_path / "each.txt"), "--mode",
        "silence", "--excite", "id:0-2", "--duration", "150ms", "--trials", "8", "--seed",
        "3", "--workers", "0", "--target", f"body:{IDS[target]}", "--pairs", "4", "--show", "0",
        "--out",
        str(tmp_path / "cli"))
    assert code == 0, err
    found, found_pairs = int((q <= sc.ALPHA).sum()), int((q_both[pairs] <= sc.ALPHA).sum())
    assert found_pairs > 0
    assert (f"{found} of {n} set(s) and {found_pairs} of 6 pair(s) with q <= 0.05 (the pairs "
            "a family of their own") in text
    assert "pairs (q over the pairs alone" in text


def test_benjamini_hochberg_finds_planted_p_values_and_not_the_nulls():
    rng = np.random.default_rng(7)
    nulls = (np.arange(90) + 0.5) / 90          # uniform p-values, evenly spread
    planted = rng.uniform(0.0, 1e-4, 10)
    p = np.concatenate([nulls, planted])
    q = sc.benjamini_hochberg(p)
    assert np.flatnonzero(q <= 0.05).tolist() == list(range(90, 100))
    # unadjusted, 5 % of the nulls would pass too
    assert (nulls <= 0.05).sum() == 5
    assert np.all(q >= p) and np.all(q <= 1)
    # its definition: the k smallest are discoveries for the largest k with p_(k) <= a k/m
    for _ in range(20):
        p = np.concatenate([rng.uniform(0, 1, 80), rng.uniform(0, 1e-3, 20)])
        ranked = np.sort(p)
        k = max([i + 1 for i in range(100) if ranked[i] <= 0.05 * (i + 1) / 100] or [0])
        found = sc.benjamini_hochberg(p) <= 0.05
        assert found.sum() == k and (found == (p <= (ranked[k - 1] if k else -1))).all()
    assert np.isnan(sc.benjamini_hochberg([np.nan, 0.01]))[0]
    assert sc.benjamini_hochberg([0.01, np.nan])[0] == 0.01


def _planted_brain() -> spiking.SpikingBrain:
    """0 drives 2..9, and 2, 3, 4 together drive the target 30 (one silenced: it fires
    less); 1 drives 10..19, which drive 35 and not the target."""
    edges = [(0, j, 120.0) for j in range(2, 10)] + [(1, j, 120.0) for j in range(10, 20)]
    edges += [(j, 30, 40.0) for j in (2, 3, 4)] + [(j, 35, 120.0) for j in range(10, 20)]
    n = 40
    pre, post, counts = (np.array(c) for c in zip(*edges))
    order = np.argsort(pre, kind="stable")
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(pre.astype(np.int64), minlength=n), out=indptr[1:])
    brain = spiking.SpikingBrain(name="planted", root_ids=IDS[:n].copy(), indptr=indptr,
                                 post=post[order].astype(np.int32),
                                 counts=counts[order].astype(float))
    brain.default_excite = np.array([0, 1], np.int64)
    return brain


def test_planted_effects_are_found_and_the_nulls_are_not():
    brain = _planted_brain()
    sets = sc.each_neuron(brain, "id:2-19")
    settings = sc.ScreenSettings(mode="silence", duration_s=0.1, trials=10, seed=1)
    result = sc.run_screen(brain, sets, settings, target=30)
    effect, p, q = result.effects(30)
    found = [sets[i].members[0] for i in np.flatnonzero(q <= sc.ALPHA)]
    assert found == [2, 3, 4]
    assert (effect[:3] < 0).all() and not effect[3:].any() and (p[3:] == 1).all()
    # the sets that change the target in no trial are known to do nothing: not in the family
    assert np.array_equal(q[:3], sc.benjamini_hochberg(p[:3])) and (q[3:] == 1).all()
    assert [r["q_value"] for r in result.summary[1:]] == q.tolist()


def test_pairs_beyond_the_screen_or_the_brain_are_one_line(brain, authors, tmp_path, capsys):
    sets = sc.resolve_sets(brain, SETS)
    settings = sc.ScreenSettings(mode="silence", **SHORT)
    for pairs, message in ((4, "more than the screen's 3 set(s)"),
                           (N + 1, f"more than the brain's {N} neurons"),
                           (1, "must be 0 (no pairs) or at least 2"),
                           (-3, "--pairs -3 must be 0")):
        with pytest.raises(sc.ScreenError, match=re.escape(message)):
            sc.run_screen(brain, sets, settings, pairs=pairs)
    (tmp_path / "sets.txt").write_text("a: id:1\nb: id:2\n")
    base = ["screen", str(authors), "--sets", str(tmp_path / "sets.txt"), "--mode", "silence",
            "--excite", "id:0-2", "--duration", "50ms", "--workers", "0",
            "--out", str(tmp_path / "o")]
    code, _, err = cli_run(capsys, *base, "--pairs", "3")
    one_error_line(code, err, "--pairs 3 is more than the screen's 2 set(s)")
    code, _, err = cli_run(capsys, *base[:2], "--each", "id:0-79", *base[4:], "--pairs", "81")
    one_error_line(code, err, "--pairs 81 is more than the brain's 80 neurons")
    assert not (tmp_path / "o" / "summary.csv").exists()


def test_a_pair_count_no_one_can_wait_for_is_refused_before_the_brain_loads(tmp_path, capsys):
    """``--each 'id:0-49392' --pairs 49393`` on the demo brain started 1.2 billion pair
    runs (and would have printed a 49,393-square matrix): it is one line, exit 2, before
    the brain loads or the folder is made."""
    with pytest.raises(sc.ScreenError, match=re.escape(f"give at most {sc.MAX_PAIRS}")):
        sc.check_pairs(sc.MAX_PAIRS + 1, 10**6, 10**6)
    assert sc.check_pairs(sc.MAX_PAIRS, 10**6, 10**6) == sc.MAX_PAIRS
    out = tmp_path / "o"
    code, _, err = cli_run(capsys, "screen", str(tmp_path / "no-brain-needed"), "--each", "all",
                           "--mode", "activate", "--workers", "0", "--pairs", "49393",
                           "--out", str(out))
    one_error_line(code, err, "--pairs 49,393 would run 1,219,809,528 pairs; give at most 100")
    assert not out.exists()


def test_a_screen_whose_input_cannot_be_held_is_refused_before_the_folder(brain, tmp_path):
    """A silencing screen's base stimulus of every neuron for an hour of 10 trials: its
    input cannot be held, and the folder is not made (it was, and the first run failed)."""
    sets = sc.resolve_sets(brain, SETS)
    settings = sc.ScreenSettings(mode="silence", excite="all", rate=10000.0,
                                 duration_s=3600.0, trials=10)
    with pytest.raises(sc.ScreenError, match="the input would be about"):
        sc.run_screen(brain, sets, settings, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_an_out_where_no_file_can_be_made_fails_before_the_brain_loads(tmp_path, capsys):
    """``--out /proc/x`` as root (os.access says yes): it loaded the brain, printed its
    plan, then failed with the system's bare "No such file or directory"."""
    (tmp_path / "sets.txt").write_text("a: id:1\n")
    code, out, err = cli_run(capsys, "screen", str(tmp_path / "no-brain-needed"), "--sets",
                             str(tmp_path / "sets.txt"), "--mode", "activate", "--workers", "0",
                             "--out", "/proc/flyviz-x")
    one_error_line(code, err, "cannot write --out /proc/flyviz-x: the folder /proc takes no "
                              "new files")
    assert out == ""


def test_a_full_disk_leaves_no_folder_that_blocks_the_rerun(brain, tmp_path, monkeypatch):
    """``screen --out`` on a full disk left ``DIR/sets/`` without ``screen.json``, and the
    corrected rerun was refused ("holds other files and no screen")."""
    import flyviz.fileio as fileio

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    sets = sc.resolve_sets(brain, SETS)
    settings = sc.ScreenSettings(mode="silence", **SHORT)
    out = tmp_path / "screen"
    with monkeypatch.context() as patch:
        patch.setattr(fileio, "write_text_atomically", no_space)
        with pytest.raises(FlyvizError, match="no space left"):
            sc.run_screen(brain, sets, settings, out=out)
    assert not out.exists()
    out.mkdir()                                   # a folder the user made stays, empty
    with monkeypatch.context() as patch:
        patch.setattr(fileio, "write_text_atomically", no_space)
        with pytest.raises(FlyvizError):
            sc.run_screen(brain, sets, settings, out=out)
    assert out.is_dir() and list(out.iterdir()) == []
    done = sc.run_screen(brain, sets, settings, out=out)
    assert (out / "screen.json").is_file() and done.computed == 3


def test_a_blank_scheduler_address_is_refused_before_the_screen_starts(brain):
    """``scheduler=""`` said "a screen on Dask needs the brain's spec", as if Dask were
    asked for: the address is blank, and that is what is said."""
    from flyviz.analysis.cluster import ClusterError

    sets = sc.resolve_sets(brain, SETS)
    with pytest.raises(ClusterError, match="scheduler address is empty"):
        sc.run_screen(brain, sets, sc.ScreenSettings(**SHORT), workers=0, scheduler="")
