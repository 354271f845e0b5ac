"""``flyviz circuit``: the table, --json, --out (all or nothing) and bad input in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flyviz import cli
from flyviz.analysis.circuit_file import read_curve
from flyviz.model.writers import write_connectome_dataset, write_wordbrain
from test_analysis_circuit import planted_entries, planted_model, random_model


@pytest.fixture(scope="module")
def world(tmp_path_factory, tokenizer_path):
    root = tmp_path_factory.mktemp("circuit-cli")
    ck, chain = planted_model(tokenizer_path)
    write_wordbrain(ck, root / "model", tokenizer_path=tokenizer_path)
    write_connectome_dataset(ck, root / "connectome")
    task = root / "task.jsonl"
    task.write_text("".join(json.dumps(e) + "\n" for e in planted_entries()), "utf-8")
    return {"spec": str(root / "model"), "dataset": str(root / "connectome"), "task": task,
            "chain": chain, "root": root}


def _run(world, *extra):
    return cli.main(["circuit", world["spec"], "--dataset", world["dataset"], "--task",
                     str(world["task"]), "--workers", "0", *extra])


def test_json_holds_the_curve_the_circuit_and_the_settings(capsys, world):
    assert _run(world, "--json", "--ablation", "mean", "--tolerance", "0.1") == 0
    out = json.loads(capsys.readouterr().out)
    assert set(world["chain"]) <= set(out["circuit"]["neurons"])
    assert out["circuit"]["faithful"] is True and out["circuit"]["size"] == 4
    assert abs(1 - out["circuit"]["faithfulness"]) <= 0.1
    spread = out["circuit"]["prompt_faithfulness"]
    assert spread["within"] == 1.0 and 0.9 <= spread["min"] <= spread["median"] <= spread["max"]
    assert out["overshoot"] is None
    assert [p["nodes"] for p in out["curve"]][:2] == [0, 10] and len(out["curve"]) == 13
    assert out["curve"][-1] == {"nodes": 200, "faithfulness": 1.0,
                                "metric": out["full_metric"], "prompts_within": 1.0}
    # Each point's share of prompts within the tolerance, as the text table shows it.
    chosen = next(p for p in out["curve"] + out["refinement"] if p["nodes"] == 4)
    assert chosen["prompts_within"] == spread["within"]
    assert out["settings"]["ablation"] == "mean" and out["settings"]["tolerance"] == 0.1
    assert out["settings"]["prompt_share"] == 0.9
    assert 0 < out["cpr"] and 0 <= out["cmd"]
    assert {t["type"] for t in out["circuit"]["types"]} and out["task"]["prompts"] == 8


def test_the_table_prints_the_curve_cpr_and_the_circuits_neurons(capsys, world):
    assert _run(world) == 0
    text = capsys.readouterr().out
    assert "CPR " in text and "CMD " in text
    assert " s in this process\n" in text and "worker(s)" not in text   # --workers 0
    assert "faithful circuit: 4 neurons" in text and "100% of the prompts within 0.1" in text
    for i in world["chain"]:
        assert f"#{i} " in text
    assert _run(world, "--edges", "--show", "3") == 0
    text = capsys.readouterr().out
    assert "faithful circuit: 3 edges" in text
    c = world["chain"]
    assert f"#{c[0]} " in text and f"-> #{c[1]} " in text


def test_on_a_random_model_the_command_says_no_circuit_is_faithful_and_names_overshoots(
        capsys, tmp_path, tokenizer_path, world):
    ck = random_model(tokenizer_path)
    write_wordbrain(ck, tmp_path / "model", tokenizer_path=tokenizer_path)
    write_connectome_dataset(ck, tmp_path / "connectome")
    argv = ["circuit", str(tmp_path / "model"), "--dataset", str(tmp_path / "connectome"),
            "--task", str(world["task"]), "--workers", "0"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    found = re.search(r"no circuit below the whole brain is faithful: none of the (\d+) "
                      r"measured sizes smaller than all 200 neurons has \|1 - f\| <= 0\.1 on "
                      r"the task and on 90% of its 8 prompts", text)
    assert found, text
    measured = int(found.group(1))
    assert "faithful circuit:" not in text and "its top neurons" not in text
    # The curve's overshoots are named as such, never as kept: f of 6.16 at 67 neurons.
    over = [line for line in text.splitlines() if line.startswith("overshoots: ")]
    assert len(over) == 1 and over[0].endswith("(more than the whole model: not faithful, "
                                                "not kept)")
    percent, size = over[0].split()[1], over[0].split()[3]
    rows = {int(line.split()[0].replace(",", "")): line for line in text.splitlines()
            if line.strip() and line.split()[0].replace(",", "").isdigit()}
    assert f"overshoots: {percent}" in rows[int(size.replace(",", ""))]
    assert cli.main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # The whole brain is no circuit: a failed search names no size and no neurons (it
    # listed all 200 as the circuit's).
    circuit = out["circuit"]
    assert circuit["faithful"] is False and circuit["size"] is None
    assert circuit["fraction"] is None and circuit["neurons"] == [] and circuit["types"] == []
    # The whole model's f = 1 is no finding: a failed search reports none, and says so.
    assert circuit["faithfulness"] is None and circuit["prompt_faithfulness"] is None
    assert circuit["verdict"] == "no circuit below the whole model is faithful"
    assert circuit["measured_below_whole"] == measured == len(
        {p["nodes"] for p in out["curve"] + out["refinement"] if 0 < p["nodes"] < 200})
    assert all(0.0 <= p["prompts_within"] <= 1.0 for p in out["curve"][1:])
    assert out["overshoot"]["faithfulness"] == max(p["faithfulness"] for p in
                                                   out["curve"] + out["refinement"])
    assert f"{out['overshoot']['faithfulness']:.0%}" == percent


def test_a_search_without_a_circuit_writes_no_unit_as_in_the_circuit(
        capsys, tmp_path, tokenizer_path, world):
    """scores.csv had in_circuit = 1 on every row and circuit.json every neuron, types and
    groups: the whole brain, written as the circuit."""
    ck = random_model(tokenizer_path)
    write_wordbrain(ck, tmp_path / "model", tokenizer_path=tokenizer_path)
    write_connectome_dataset(ck, tmp_path / "connectome")
    for nodes, header in (("neurons", "rank,neuron,"), ("types", "rank,group,")):
        out = tmp_path / f"none-{nodes}"
        assert cli.main(["circuit", str(tmp_path / "model"), "--dataset",
                         str(tmp_path / "connectome"), "--task", str(world["task"]),
                         "--workers", "0", "--nodes", nodes, "--out", str(out)]) == 0
        capsys.readouterr()
        rows = (out / "scores.csv").read_text("utf-8").splitlines()
        assert rows[0].startswith(header) and len(rows) > 2
        assert all(r.endswith(",0") for r in rows[1:])
        circuit = json.loads((out / "circuit.json").read_text("utf-8"))["circuit"]
        assert circuit["faithful"] is False and circuit["size"] is None
        assert circuit["verdict"] == "no circuit below the whole model is faithful"
        assert circuit["neurons"] == [] and circuit["types"] == []
        assert circuit.get("groups", []) == []


def test_show_0_prints_no_empty_unit_lists(capsys, world):
    """--show 0 printed the headers 'its superclasses:' and 'its top neurons:' with
    nothing under them."""
    for extra in ([], ["--nodes", "types"], ["--edges"]):
        assert _run(world, "--show", "0", *extra) == 0
        text = capsys.readouterr().out
        assert "faithful circuit:" in text
        assert not re.search(r"^its [a-z ]+:$", text, re.M), text


@pytest.mark.parametrize("extra, message", [
    (["--max-tokens", "-5"], "--max-tokens -5 must be at least 2"),
    (["--max-tokens", "1"], "--max-tokens 1 must be at least 2"),
])
def test_max_tokens_is_checked_with_a_json_lines_task_too(capsys, world, extra, message):
    """It was checked only where a text task reads it: a JSON Lines task took -5."""
    assert _run(world, *extra) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == f"flyviz: error: {message}"


def test_resample_of_a_one_prompt_task_is_refused_before_any_progress(capsys, world, tmp_path):
    """The refusal came after an empty progress line: two lines, the first noise."""
    task = tmp_path / "one.jsonl"
    task.write_text(json.dumps(planted_entries()[0]) + "\n", "utf-8")
    assert cli.main(["circuit", world["spec"], "--dataset", world["dataset"], "--task",
                     str(task), "--workers", "0", "--ablation", "resample"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("flyviz: error: --ablation resample holds each prompt")


def test_out_writes_scores_curve_and_circuit_json(capsys, world):
    out = world["root"] / "found"
    assert _run(world, "--out", str(out), "--nodes", "types") == 0
    assert sorted(p.name for p in out.iterdir()) == ["circuit.json", "curve.csv", "scores.csv"]
    document = json.loads((out / "circuit.json").read_text("utf-8"))
    assert document["format"] == "flyviz-circuit" and document["settings"]["units"] == "types"
    curve = read_curve(out / "curve.csv")
    assert [r["nodes"] for r in curve if r["kind"] == "curve"] == \
        [p["nodes"] for p in document["curve"]]
    rows = (out / "scores.csv").read_text("utf-8").splitlines()
    assert rows[0] == "rank,group,neurons,score,in_circuit"
    assert sum(r.endswith(",1") for r in rows[1:]) == document["circuit"]["size"]
    # A finished circuit is not written over (as no command's result is), nor is any other
    # folder: both refused before any work.
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert _run(world, "--out", str(out)) == 2
    assert f"--out {out} is a finished circuit" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written
    other = world["root"] / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me", "utf-8")
    capsys.readouterr()
    assert _run(world, "--out", str(other)) == 2
    assert "not a circuit folder" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("lines, extra, message", [
    (['{"target": " dog"}'], [], 'line 1 has no "prompt"'),
    (['{"prompt": "a", "target": " dog"}', '{"prompt": "b",'], [], "line 2 is not JSON"),
    (['{"prompt": "a", "target": " zyxw"}'], [], "not one token"),
    (['{"prompt": "a", "target": " cat dog"}'], [], "is 2 tokens"),
    (['{"prompt": "a", "target_id": 99999}'], [], "outside the vocabulary"),
    ([""], [], "holds no prompt"),
    (None, ["--tolerance", "0"], "--tolerance 0.0 must lie in (0, 1)"),
    (None, ["--tolerance", "1"], "--tolerance 1.0 must lie in (0, 1)"),
    (None, ["--prompt-share", "0"], "--prompt-share 0.0 must lie in (0, 1]"),
    (None, ["--ablation", "resample", "--edges"], "with --edges use mean or zero"),
    (None, ["--edges", "--nodes", "types"], "--edges keeps synapses"),
    (None, ["--workers", "-1"], "--workers -1"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, world, tmp_path, lines, extra, message):
    args = ["circuit", world["spec"], "--dataset", world["dataset"], "--workers", "0", *extra]
    if lines is None:
        args += ["--task", str(world["task"])]
    else:
        task = tmp_path / "bad.jsonl"
        task.write_text("\n".join(lines) + "\n", "utf-8")
        args += ["--task", str(task)]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("flyviz: error: ") and "\n" not in err, err
    assert message in err and captured.out == ""


def test_a_missing_task_file_is_one_line(capsys, world, tmp_path):
    assert cli.main(["circuit", world["spec"], "--task", str(tmp_path / "none.jsonl"),
                     "--workers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and "\n" not in err


# ------------------------------------------------------------------ real vs null models
def test_nulls_compare_the_planted_circuit_with_the_same_search_on_degree_nulls(capsys, world):
    assert _run(world, "--json", "--nulls", "4") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    nulls = out["nulls"]
    assert nulls["kind"] == "degree" and nulls["seeds"] == [0, 1, 2, 3]
    assert set(nulls) == {"kind", "seeds", "cpr", "cmd", "circuit_size", "circuit_fraction",
                          "faithful_circuit"}
    cpr, cmd, size = nulls["cpr"], nulls["cmd"], nulls["circuit_size"]
    assert cpr["real"] == out["cpr"] and cmd["real"] == out["cmd"]
    assert size["real"] == out["circuit"]["size"] == 4
    assert all(c["n"] == 4 and len(c["nulls"]) == 4 for c in (cpr, cmd))
    assert cpr["mean"] == pytest.approx(sum(cpr["nulls"]) / 4)
    # The chain carries the task; rewired, the task is spread over more neurons: the real
    # CPR is above the nulls' (z > 0), and no null's circuit is as small or its curve as
    # close to 1 (CMD). One null's CPR may still pass the real one's, where its f
    # overshoots 1 (CPR rewards that, CMD does not).
    assert cpr["real"] > cpr["mean"] and cpr["z"] > 0
    assert max(cmd["nulls"]) > min(cmd["nulls"]) > cmd["real"]
    assert cmd["p"] == pytest.approx(1 / 5)
    # Two of the nulls find no faithful circuit (recorded as the whole model, 200 neurons):
    # the sizes are compared among the other two only, both larger than the real one.
    found = nulls["faithful_circuit"]
    assert found["real"] == 1.0 and found["nulls"] == [0.0, 1.0, 1.0, 0.0]
    assert size["n"] == 2 and min(size["nulls"]) > size["real"] and 200 not in size["nulls"]
    assert size["p"] == pytest.approx(1 / 3)
    assert size["note"] == "among the 2 of 4 nulls with a faithful circuit"
    assert size["higher_is_more"] is False and cpr["higher_is_more"] is True
    assert "null 4 of 4: degree, seed 3" in captured.err


def test_nulls_print_a_real_vs_null_row_for_each_headline_number(capsys, world):
    assert _run(world, "--nulls", "1", "--null-kind", "weights") == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("real vs 1 weights null(s) (seed 0), circuits of neurons at --tolerance 0.1:")
    rows = [re.split(r"\s{2,}", line.strip())[0] for line in lines[start + 1:]]
    assert rows == ["CPR", "CMD", "circuit size", "circuit fraction", "faithful circuit"]
    cpr = next(line for line in lines if line.startswith("CPR "))
    assert f"real {float(cpr.split()[1]):.4g} |" in lines[start + 1]
    # One null has no sd, so no z: the rows said "z nan".
    assert not any("z nan" in line for line in lines[start + 1:])
    found = lines[start + 5]
    assert "p = (1 + #nulls that find one too) / (1 + N)" in found, found
    assert "p is the share of nulls" not in found


def test_the_faithful_circuit_row_says_how_its_p_is_counted():
    """Its note read 'p is the share of nulls that find one too'; p is (1 + #found) /
    (1 + N), and 1 whatever the nulls found where the real search found none."""
    from flyviz.commands.circuit import _comparisons

    def search(faithful: bool) -> dict:
        return {"cpr": (1.0, True), "cmd": (0.1, False), "circuit_size": (5.0, False),
                "circuit_fraction": (0.005, False),
                "faithful_circuit": (1.0 if faithful else 0.0, True)}

    nulls = [search(True), search(False), search(False), search(False)]
    row = _comparisons(search(True), nulls)["faithful_circuit"]
    assert row["p"] == pytest.approx((1 + 1) / (1 + 4))
    assert "p = (1 + #nulls that find one too) / (1 + N)" in row["note"]
    row = _comparisons(search(False), nulls)["faithful_circuit"]
    assert row["p"] == 1.0 and "the real search found none" in row["note"]
    assert "p = (1 + N) / (1 + N) = 1" in row["note"]


def test_a_search_without_a_circuit_is_not_compared_as_a_large_or_faithful_one():
    """A search that finds nothing records f = 1 and the whole model as its size: read as
    numbers, a real faithful circuit (f = 0.91) scored p = 1 against nulls without one, and
    the sizes mixed 'no circuit' with circuits."""
    from flyviz.commands.circuit import _comparisons

    def search(faithful: bool, size: float, cpr: float = 1.0) -> dict:
        return {"cpr": (cpr, True), "cmd": (0.1, False), "circuit_size": (size, False),
                "circuit_fraction": (size / 1000, False),
                "faithful_circuit": (1.0 if faithful else 0.0, True)}

    none = [search(False, 1000.0) for _ in range(4)]
    rows = _comparisons(search(True, 40.0), none)
    assert rows["faithful_circuit"]["p"] == pytest.approx(1 / 5)  # no null finds one
    assert rows["circuit_size"]["p"] is None and rows["circuit_size"]["real"] == 40.0
    assert "no null's search found a faithful circuit (0 of 4)" in rows["circuit_size"]["note"]
    mixed = [search(True, 30.0), search(True, 50.0), *none[:2]]
    rows = _comparisons(search(True, 40.0), mixed)
    assert rows["circuit_size"]["nulls"] == [30.0, 50.0] and rows["circuit_size"]["n"] == 2
    assert rows["faithful_circuit"]["p"] == pytest.approx(3 / 5)
    rows = _comparisons(search(False, 1000.0), mixed)
    assert rows["circuit_size"]["real"] is None and rows["circuit_size"]["p"] is None
    assert rows["circuit_size"]["note"] == "the real search found no faithful circuit"
    assert rows["faithful_circuit"]["p"] == 1.0


def test_bad_nulls_options_on_circuit_are_one_line_and_exit_2(capsys, world):
    for extra, message in ((["--nulls", "-1"], "--nulls"),
                           (["--nulls", "1", "--null-seed", "-2"], ">= 0"),
                           # without --nulls they were accepted and nothing ran on nulls
                           (["--null-kind", "sign"], "--null-kind sign applies only to the "
                                                     "nulls --nulls N runs"),
                           (["--null-seed", "5"], "--null-seed 5 applies only"),
                           (["--nulls", "0", "--null-seed", "5", "--null-kind", "sign"],
                            "--null-kind sign and --null-seed 5 apply only")):
        try:
            code = _run(world, *extra)
        except SystemExit as exc:  # a usage error, from argparse
            code = exc.code
        assert code == 2
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert err.startswith("flyviz: error: ") and "\n" not in err and message in err
        assert captured.out == ""


# ------------------------------------------------------------------ --figure FILE
def test_figure_draws_the_measured_curve_where_its_points_lie(capsys, world, monkeypatch):
    """The PNG is the curve: the line's colour lies on the segments between the measured
    points (mapped to pixels by the drawn axes' own data transform), the rest of the plot
    is not that colour, and nothing is left beside the file."""
    import matplotlib.image as mpimg
    import numpy as np
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure

    from flyviz.analysis.circuit_figure import CURVE_COLOUR

    drawn = []
    savefig = Figure.savefig

    def keep(self, *args, **kwargs):  # remember the figure to read its transforms
        drawn.append(self)
        return savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    folder = world["root"] / "figure"
    folder.mkdir()
    path = folder / "curve.png"
    assert _run(world, "--json", "--figure", str(path)) == 0
    document = json.loads(capsys.readouterr().out)
    assert [p.name for p in folder.iterdir()] == ["curve.png"]  # no partial file left
    image = mpimg.imread(path)[..., :3]
    height, width = image.shape[:2]
    assert (width, height) == (900, 560)
    axes = drawn[0].axes[0]
    on_line = np.abs(image - np.array(to_rgb(CURVE_COLOUR))).max(axis=2) < 0.1
    assert on_line.sum() > 300  # a drawn line, not a stray pixel
    curve = [(p["nodes"], p["faithfulness"]) for p in document["curve"]]
    misses = []
    for (ka, fa), (kb, fb) in zip(curve[:-1], curve[1:]):
        # The segment's midpoint in display space (the line is straight there in display
        # space; image rows run down from the top).
        (xa, ya), (xb, yb) = axes.transData.transform([(ka, fa), (kb, fb)])
        x, y = int(round((xa + xb) / 2)), int(round(height - (ya + yb) / 2))
        if not on_line[max(0, y - 3):y + 4, max(0, x - 3):x + 4].any():
            misses.append((ka, kb))
    assert not misses, misses
    # Outside the axes (the top strip holding the title) there is no curve colour.
    top = height - axes.get_window_extent().y1
    assert top > 10 and not on_line[:int(top) - 2, :].any()
    # .svg is the same drawing as vectors: the curve is a path stroked in its colour.
    svg = folder / "curve.svg"
    assert _run(world, "--figure", str(svg)) == 0
    drawing = svg.read_text("utf-8")
    assert drawing.lstrip().startswith("<?xml") and "<svg" in drawing
    assert f"stroke: {CURVE_COLOUR}" in drawing


def test_a_figure_that_is_not_png_or_svg_is_refused_before_any_work(capsys, world,
                                                                     monkeypatch):
    from flyviz.analysis import circuit

    def no_work(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(circuit, "find_circuit", no_work)
    monkeypatch.setattr("flyviz.commands.circuit.load_model_from_args", no_work)
    path = world["root"] / "curve.txt"
    assert _run(world, "--figure", str(path)) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("flyviz: error: ") and "\n" not in err
    assert ".png or .svg" in err and captured.out == "" and not path.exists()


@pytest.mark.parametrize("option, target, message", [
    ("--out", "{file}/x", "is a file, not a folder"),
    ("--out", "/proc/flyviz-x", "cannot write --out /proc/flyviz-x"),
    ("--figure", "/proc/flyviz-x.png", "cannot write --figure /proc/flyviz-x.png"),
])
def test_an_output_no_file_can_be_made_in_is_refused_before_any_work(capsys, world,
                                                                     monkeypatch, option,
                                                                     target, message):
    """A folder that refuses files (/proc, for root too) or a file named as a folder: told
    at once, not after every point and null model was scored."""
    if option == "--figure":
        pytest.importorskip("matplotlib")
    if target.startswith("/proc") and not Path("/proc").is_dir():
        pytest.skip("this system has no /proc")
    from flyviz.analysis import circuit

    def no_work(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(circuit, "find_circuit", no_work)
    monkeypatch.setattr("flyviz.commands.circuit.load_model_from_args", no_work)
    a_file = world["root"] / "a-file"
    a_file.write_text("")
    assert _run(world, option, target.format(file=a_file)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flyviz: error: ") and "\n" not in err and message in err, err


def test_a_figure_without_matplotlib_is_one_line_naming_the_extra(capsys, world,
                                                                  monkeypatch):
    import sys

    from flyviz.analysis import circuit

    monkeypatch.setattr(circuit, "find_circuit",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("the search ran")))
    monkeypatch.setattr("flyviz.commands.circuit.load_model_from_args",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # hidden: the import fails
    path = world["root"] / "no-mpl.png"
    assert _run(world, "--figure", str(path)) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("flyviz: error: ") and "\n" not in err
    assert "pip install 'flyviz[figures]'" in err and not path.exists()

