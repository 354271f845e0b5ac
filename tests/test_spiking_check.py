"""``flyviz check``: a battery of experiments on the spiking brain against degree-preserving
shuffles and class-matched random stimulus sets, p-values with Holm's correction, the
battery's format and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flyviz import cli
from flyviz.spiking.brain import SpikingBrain
from flyviz.spiking.check import (CheckError, CheckSettings, holm, parse_battery,
                                  random_set, run_battery, shuffled_brain, table_text)

# The engine's kernels compiled once for all the test workers (tests/conftest.py): without
# it a worker that reaches the runs here while another compiles them compiles them again.
pytestmark = pytest.mark.usefixtures("spiking_kernels")

#: A pathway A (0-5) -> B (100-105) -> C (150-155) of strong synapses in a weak random brain.
A, B, C, D = (np.arange(0, 6), np.arange(100, 106), np.arange(150, 156), np.arange(200, 206))

BATTERY = """\
# a planted pathway and a readout that is not downstream of it
pathway: excite id:0-5 ; read id:150-155 ; expect increase
elsewhere: excite id:0-5 ; read id:200-205 ; expect increase
"""


def planted_brain(n: int = 240, seed: int = 0) -> SpikingBrain:
    """A random brain (6 weak synapses a neuron) with the pathway A -> B -> C planted."""
    rng = np.random.default_rng(seed)
    edges: dict[tuple[int, int], float] = {}
    for i in range(n):
        for j in rng.choice(n, 6, replace=False):
            if j != i:
                edges[(i, int(j))] = float(rng.choice([1.0, 2.0, -1.0]))
    for a in A:
        for b in B:
            edges[(int(a), int(b))] = 40.0
    for b in B:
        for c in C:
            edges[(int(b), int(c))] = 40.0
    keys = sorted(edges)
    pre = np.array([k[0] for k in keys])
    indptr = np.zeros(n + 1, np.int64)
    indptr[1:] = np.cumsum(np.bincount(pre, minlength=n))
    return SpikingBrain(name="planted", root_ids=np.arange(n, dtype=np.int64) + 10**6,
                        indptr=indptr, post=np.array([k[1] for k in keys], np.int32),
                        counts=np.array([edges[k] for k in keys], np.float64),
                        superclass=["sensory" if i < 40 else "central" for i in range(n)],
                        cell_type=[f"t{i // 6}" for i in range(n)], side=["left"] * n)


def test_a_degree_shuffle_keeps_every_degree_and_outgoing_sign_and_moves_most_edges():
    brain = planted_brain()
    other = shuffled_brain(brain, 3)
    n = brain.neurons
    assert np.array_equal(other.indptr, brain.indptr)              # out-degrees
    assert np.array_equal(other.counts, brain.counts)              # each synapse's count
    assert np.array_equal(np.bincount(other.post, minlength=n),    # in-degrees
                          np.bincount(brain.post, minlength=n))
    pre = np.repeat(np.arange(n), np.diff(brain.indptr))
    assert not np.any(other.post == pre)                           # no self-loops
    assert np.unique(pre * n + other.post).size == pre.size        # no duplicates
    assert np.mean(other.post != brain.post) > 0.8
    assert np.array_equal(shuffled_brain(brain, 3).post, other.post)
    assert not np.array_equal(shuffled_brain(brain, 4).post, other.post)


def test_random_sets_match_the_classes_and_avoid_the_set_and_the_readout():
    labels = np.array(["s"] * 40 + ["c"] * 200, dtype=object)
    members = np.array([0, 1, 2, 50, 60])
    exclude = np.union1d(members, C)
    rng = np.random.default_rng(0)
    for _ in range(20):
        drawn = random_set(members, labels, exclude, 240, rng)
        assert sorted(labels[drawn]) == sorted(labels[members])
        assert not np.isin(drawn, exclude).any() and np.unique(drawn).size == 5


def test_holm_adjusts_step_down_and_stays_monotone():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    assert holm([0.3, 0.9, 0.01, 0.2]) == pytest.approx([0.6, 0.9, 0.04, 0.6])


@pytest.mark.slow
def test_a_planted_pathway_is_significant_and_a_readout_not_downstream_is_not():
    brain = planted_brain()
    settings = CheckSettings(shuffles=100, random_sets=100, duration_s=0.05, seed=1)
    result = run_battery(brain, parse_battery(BATTERY), settings)
    pathway, elsewhere = result.results
    assert pathway.statistic > 50 and pathway.holds
    assert pathway.p < 0.01 and pathway.p_shuffles < 0.01 and pathway.p_random_sets < 0.01
    assert pathway.verdict == "pass"
    assert elsewhere.p > 0.05 and elsewhere.verdict != "pass"
    assert len(pathway.shuffles) == 100 and len(pathway.random_sets) == 100


def test_the_same_seed_gives_the_same_table_and_a_silencing_check_reads_a_change():
    brain = planted_brain()
    battery = parse_battery(BATTERY + "cut: excite id:0-5 ; silence id:100-105 ; "
                                      "read id:150-155 ; expect decrease\n")
    settings = CheckSettings(shuffles=4, random_sets=4, duration_s=0.05, seed=7)
    first = run_battery(brain, battery, settings)
    again = run_battery(brain, battery, settings)
    assert table_text(first) == table_text(again)
    cut = first.results[2]
    # Silencing B removes C's only strong drive: its rate falls by what A's drive gave it.
    assert cut.statistic == pytest.approx(-first.results[0].statistic, abs=20)
    assert cut.holds and cut.p_shuffles is not None
    other = run_battery(brain, battery, CheckSettings(shuffles=4, random_sets=4,
                                                      duration_s=0.05, seed=8))
    assert table_text(other) != table_text(first)


@pytest.mark.parametrize("line, message", [
    ("x excite id:1 ; read id:2 ; expect increase", "expected 'NAME: excite"),
    ("x: excite id:1 ; read id:2", "no 'expect ...' field"),
    ("x: excite id:1 ; read id:2 ; expect upward", "is not one of"),
    ("x: excite id:1 ; read id:2 ; expect above many", "needs a number of Hz"),
    ("x: excite id:1 ; read id:2 ; expect increase 3", "is not one of"),
    ("x: excite id:1 ; drive id:2 ; read id:2 ; expect increase", "unknown field 'drive'"),
    ("x: excite type:( ; read id:2 ; expect increase", "excite"),
    ("x: excite id:1 ; excite id:2 ; read id:2 ; expect increase", "excite is given twice"),
])
def test_a_bad_battery_line_is_named(line, message):
    with pytest.raises(CheckError, match="line 2") as info:
        parse_battery("# a comment\n" + line + "\n")
    assert message in str(info.value)


# ---------------------------------------------------------------- the command
@pytest.fixture(scope="module")
def brain_folder(tmp_path_factory) -> Path:
    """The planted brain as the authors' files (a completeness CSV and a connectivity
    parquet), which ``flyviz check`` loads."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    brain = planted_brain()
    folder = tmp_path_factory.mktemp("planted")
    pd.DataFrame({"Completed": True}, index=pd.Index(brain.root_ids, name="")).to_csv(
        folder / "Completeness_783.csv")
    pre = np.repeat(np.arange(brain.neurons), np.diff(brain.indptr))
    pd.DataFrame({"Presynaptic_ID": brain.root_ids[pre],
                  "Postsynaptic_ID": brain.root_ids[brain.post],
                  "Presynaptic_Index": pre, "Postsynaptic_Index": brain.post.astype(np.int64),
                  "Connectivity": np.abs(brain.counts).astype(np.int64),
                  "Excitatory": np.where(brain.counts > 0, 1, -1),
                  "Excitatory x Connectivity": brain.counts.astype(np.int64)}).to_parquet(
        folder / "Connectivity_783.parquet")
    (folder / "battery.txt").write_text(BATTERY.replace("id:0-5", "id:0,1,2,3,4,5"),
                                        encoding="utf-8")
    return folder


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_flyviz_check_prints_the_table_and_writes_csv_and_figure(brain_folder, tmp_path,
                                                                 capsys):
    out, figure = tmp_path / "checks.csv", tmp_path / "checks.png"
    code, printed, err = _run(capsys, "check", str(brain_folder), "--battery",
                              str(brain_folder / "battery.txt"), "--shuffles", "3",
                              "--random-sets", "3", "--duration", "50ms", "--workers", "0",
                              "--out", str(out),
                              "--figure", str(figure))
    assert code == 0, err
    assert "pathway" in printed and "elsewhere" in printed and "Holm" in printed
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# flyviz-check ") and lines[1].startswith("check,statistic_hz")
    assert len(lines) == 4
    from PIL import Image

    with Image.open(figure) as image:
        pixels = np.asarray(image.convert("RGB"))
    # The brain's diamonds: the pathway (holds, not significant with 3 controls: orange)
    # and the readout elsewhere (fails: red) are drawn.
    orange = np.all(np.abs(pixels.astype(int) - (255, 127, 14)) < 30, axis=-1)
    red = np.all(np.abs(pixels.astype(int) - (214, 39, 40)) < 30, axis=-1)
    assert orange.sum() > 20 and red.sum() > 20
    code, printed, err = _run(capsys, "check", str(brain_folder), "--battery",
                              str(brain_folder / "battery.txt"), "--shuffles", "2",
                              "--random-sets", "0", "--duration", "50ms", "--workers", "0",
                              "--json")
    assert code == 0, err
    found = json.loads(printed)
    assert [c["check"] for c in found["checks"]] == ["pathway", "elsewhere"]
    assert all(c["p_random_sets"] is None and len(c["shuffles"]) == 2 for c in found["checks"])


@pytest.mark.parametrize("extra, message", [
    (["--shuffles", "-1"], "--shuffles -1 must be between"),
    (["--shuffles", "0", "--random-sets", "0"], "a check needs controls"),
    (["--alpha", "2"], "--alpha 2.0 must be a number between 0 and 1"),
    (["--duration", "0ms"], "--duration must be longer than 0"),
    (["--out", "table.txt"], "should end in .csv"),
    (["--figure", "figure.bmp"], "a figure is written as"),
])
def test_bad_input_to_flyviz_check_is_one_line_and_exit_2(brain_folder, capsys, extra,
                                                          message):
    code, out, err = _run(capsys, "check", str(brain_folder), "--battery",
                          str(brain_folder / "battery.txt"), *extra)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("flyviz: error:")
    assert message in err


def test_a_missing_or_bad_battery_and_an_empty_selection_are_one_line(brain_folder, tmp_path,
                                                                      capsys):
    code, _, err = _run(capsys, "check", str(brain_folder), "--battery",
                        str(tmp_path / "none.txt"))
    assert code == 2 and "battery file not found" in err and err.count("\n") == 1
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe nonsense")
    code, _, err = _run(capsys, "check", str(brain_folder), "--battery", str(bad))
    assert code == 2 and "not UTF-8" in err and err.count("\n") == 1
    empty = tmp_path / "empty.txt"
    empty.write_text("x: excite id:0 ; read superclass:nothing ; expect increase\n")
    code, _, err = _run(capsys, "check", str(brain_folder), "--battery", str(empty),
                        "--shuffles", "1", "--random-sets", "0", "--duration", "50ms",
                        "--workers", "0")
    assert code == 2 and err.count("\n") == 1 and "check 'x'" in err
    # An index one past the end is neither an index nor a root id: say both.
    past = tmp_path / "past.txt"
    past.write_text("x: excite id:240 ; read id:0-9 ; expect increase\n")
    code, _, err = _run(capsys, "check", str(brain_folder), "--battery", str(past),
                        "--shuffles", "1", "--random-sets", "0", "--duration", "50ms",
                        "--workers", "0")
    assert code == 2 and err.count("\n") == 1, err
    assert "id:240 is neither a neuron index (0 to 239) nor a root id of" in err


@pytest.mark.slow
def test_the_battery_on_dask_gives_the_table_of_this_process(brain_folder, capsys):
    argv = ["check", str(brain_folder), "--battery", str(brain_folder / "battery.txt"),
            "--shuffles", "2", "--random-sets", "2", "--duration", "50ms", "--json"]
    code, here, err = _run(capsys, *argv, "--workers", "0")
    assert code == 0, err
    code, there, err = _run(capsys, *argv, "--workers", "2")
    assert code == 0, err
    here_rows, there_rows = json.loads(here)["checks"], json.loads(there)["checks"]
    assert here_rows == there_rows


def test_a_blank_scheduler_address_is_refused_before_the_battery_starts():
    """``scheduler=""`` said "a battery on Dask needs the brain's spec": the address is
    blank, and that is what is said."""
    from flyviz.analysis.cluster import ClusterError

    with pytest.raises(ClusterError, match="scheduler address is empty"):
        run_battery(planted_brain(), parse_battery(BATTERY), CheckSettings(), workers=0,
                    scheduler=" ")
