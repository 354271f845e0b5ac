"""The causal trace: cells equal single patched runs, the clean and corrupted ends, workers,
files, the heatmap, bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import flyviz
from flyviz import cli
from flyviz.analysis.causal import (CausalTrace, TraceError, TraceSettings, merge_partials,
                                    run_causal_trace)
from flyviz.analysis.heatmap import (CELL_H, CELL_W, bar_span, colours, heatmap_image,
                                     heatmap_svg)
from flyviz.analysis.sweep import sweep_groups
from flyviz.model.batch import BatchEngine, PatchHooks
from flyviz.model.patching import Patch, PatchSource, source_states
from flyviz.record.runner import Model

# Seven cells per pass, so that the superclasses' cells take several passes.
SETTINGS = TraceSettings(streams=7)


@pytest.fixture(scope="module")
def world(small_world):
    """A small model with anatomy on disk (loadable by workers) and two prompts of one length."""
    # Logits of a trained model's size, so that float32 rounding stays far below 1e-6.
    world = small_world("patch", neurons=211, edges=4001, seed=4, anatomy=True, logit_scale=0.1)
    tokenizer = world["tokenizer"]
    pairs = [("the girl went home and", "the boy went home and"),
             ("the cat saw a dog and", "the dog saw a cat and")]
    clean, corrupt = next(((a, b) for a, b in pairs
                           if len(tokenizer.encode(a)) == len(tokenizer.encode(b))), pairs[0])
    answer = next(w for w in (" she", " the", " a", " he", " and") if len(tokenizer.encode(w)) == 1)
    return {**world, "clean": clean, "corrupt": corrupt, "answer": answer,
            "length": len(tokenizer.encode(corrupt)) + 1}


def _trace(world, out: Path, by="superclass", workers=0, settings=SETTINGS, **kwargs):
    groups = sweep_groups(world["model"], by)
    return run_causal_trace(world["spec"], world["model"], world["clean"], world["corrupt"],
                            world["answer"], groups, out, settings, by=str(by),
                            dataset=world["dataset"], workers=workers, **kwargs)


@pytest.fixture(scope="module")
def by_superclass(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "trace.csv"
    return out, _trace(world, out)


def _final_logits(ckpt, ids, interventions):
    """The logits at the last prompt position of one run through the runner (what
    ``flyviz generate`` runs), from its frame's state."""
    model = Model(ckpt)
    try:
        frames = list(model.frames("", interventions=interventions, prompt_ids=ids))
        frame = frames[len(ids) - 1]
        engine = Engine(ckpt)
        logits = engine.readout(frame.state).astype(np.float64)
        engine.close()
        return logits, frame.probabilities
    finally:
        model.close()


from flyviz.model.engine import Engine  # noqa: E402  (used by the helper above)


def test_each_cell_equals_a_single_run_with_that_patch(world, by_superclass):
    _, result = by_superclass
    trace = result.trace
    info = trace.info
    ids = info["corrupt_ids"]
    source = PatchSource.from_prompt(world["clean"])
    assert len(trace.rows) == len(trace.groups) * len(ids) and len(trace.groups) >= 3
    for cell in trace.rows:
        logits, probabilities = _final_logits(world["model"], ids, [
            Patch(cell.query, source, cell.position, cell.position + cell.window)])
        assert abs(cell.p_answer - probabilities[info["answer_id"]]) < 1e-6, cell
        want = logits[info["answer_id"]] - logits[info["versus_id"]]
        assert abs(cell.logit_diff - want) < 1e-5 * max(1.0, abs(want)), cell
    # The references are the untouched runs; the normalised values follow from them.
    refs = trace.references
    _, clean = _final_logits(world["model"], info["clean_ids"], [])
    _, corrupt = _final_logits(world["model"], ids, [])
    assert abs(refs["p_clean"] - clean[info["answer_id"]]) < 1e-9
    assert abs(refs["p_corrupt"] - corrupt[info["answer_id"]]) < 1e-9
    assert info["versus_id"] == int(np.argmax(corrupt))
    for cell in trace.rows:
        want = (cell.p_answer - refs["p_corrupt"]) / (refs["p_clean"] - refs["p_corrupt"])
        assert cell.p_normalised == pytest.approx(want, abs=1e-12)
    # Some cell restores something (else this test could not fail).
    assert max(abs(c.p_normalised) for c in trace.rows) > 1e-3


def test_a_cell_equals_flyviz_generate_with_its_patch(capsys, world, by_superclass, tmp_path):
    from flyviz.record.recording import Recording

    _, result = by_superclass
    trace = result.trace
    cell = max(trace.rows, key=lambda c: abs(c.p_normalised))
    rec = tmp_path / "cell.flyrec"
    code = cli.main(["generate", world["spec"], "--dataset", world["dataset"], "--prompt",
                     world["corrupt"], "--max-new-tokens", "1", "--patch",
                     f"{cell.query}@{cell.position}:{cell.position + 1}", "--source-prompt",
                     world["clean"], "--record", str(rec), "--states", "float32"])
    assert code == 0, capsys.readouterr().err
    state = Recording.load(rec).states()[world["length"] - 1]
    engine = Engine(world["model"])
    z = engine.readout(state).astype(np.float64)
    engine.close()
    p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    assert abs(cell.p_answer - p[trace.info["answer_id"]]) < 1e-6


def test_every_neuron_at_every_position_is_the_clean_run_and_no_position_the_corrupted(world,
                                                                                      tmp_path):
    ckpt = world["model"]
    tokenizer = world["tokenizer"]
    clean = [1] + tokenizer.encode(world["clean"])
    corrupt = [1] + tokenizer.encode(world["corrupt"])
    source = source_states(ckpt, clean)
    everything = np.arange(ckpt.config.neurons)
    engine = BatchEngine(ckpt, 3)
    engine.hooks = PatchHooks(ckpt.config.neurons, engine.columns, source,
                              [everything, everything], [0, 1], [(0, len(corrupt)), (4, 4)])
    plain = Engine(ckpt)
    for p, token in enumerate(corrupt):
        engine.step(token)
        plain.step(token)
        np.testing.assert_array_equal(engine.state[:, 0], source[p])        # the clean run
        np.testing.assert_array_equal(engine.state[:, 1], plain.state)       # no position
        np.testing.assert_array_equal(engine.state[:, 2], plain.state)       # no patch at all
    engine.close()
    plain.close()
    # Through the trace: every neuron over the whole prompt restores the clean answer.
    files = tmp_path / "all.txt"
    files.write_text("everything: all\n", encoding="utf-8")
    trace = _trace(world, tmp_path / "all.csv", by=files,
                   settings=TraceSettings(streams=3, window=world["length"]),
                   positions=(0, 1)).trace
    (cell,) = trace.rows
    assert cell.window == world["length"]
    assert cell.p_answer == pytest.approx(trace.references["p_clean"], abs=1e-7)
    assert cell.p_normalised == pytest.approx(1.0, abs=1e-4)


@pytest.mark.slow
def test_one_and_two_workers_give_identical_files(world, by_superclass, tmp_path):
    reference, _ = by_superclass
    out = tmp_path / "two.csv"
    result = _trace(world, out, workers=2)
    assert result.workers == 2
    a, b = CausalTrace(reference), CausalTrace(out)
    assert [r.to_dict() for r in a.rows] == [r.to_dict() for r in b.rows]
    one = _trace(world, tmp_path / "one.csv", workers=1)
    assert [r.to_dict() for r in one.trace.rows] == [r.to_dict() for r in a.rows]


def test_a_resumed_trace_equals_an_uninterrupted_one(world, by_superclass, tmp_path,
                                                    interrupt_after):
    from flyviz.analysis import causal as causal_module
    from flyviz.analysis import cluster
    from flyviz.errors import InputError

    reference, in_process = by_superclass
    out = tmp_path / "r.csv"
    restore = interrupt_after(causal_module, "trace_partial", 2)
    with pytest.raises(cluster.Interrupted, match="2 of .* are saved"):
        _trace(world, out)
    assert not out.exists() and (tmp_path / "r.csv.parts").is_dir()
    with pytest.raises(InputError, match="--resume"):
        _trace(world, out)
    restore()
    result = _trace(world, out, resume=True)
    assert result.resumed_tasks == 2 and result.tasks == in_process.tasks
    assert not (tmp_path / "r.csv.parts").exists()
    assert [r.to_dict() for r in CausalTrace(out).rows] == \
        [r.to_dict() for r in CausalTrace(reference).rows]


def test_a_trace_interrupted_without_versus_does_not_resume_with_another(world, by_superclass,
                                                                       tmp_path,
                                                                       interrupt_after):
    """The saved cells hold each cell's logit difference against the run's --versus (else
    the corrupted run's top token). Resuming with another --versus kept those cells and
    measured the rest against the new token: one table, two measures, no word of it."""
    from flyviz.analysis import causal as causal_module
    from flyviz.analysis import cluster
    from flyviz.errors import InputError

    _, in_process = by_superclass
    tokenizer = world["tokenizer"]
    top = in_process.trace.info["versus"]     # what the run without --versus measured against
    other = next(w for w in (" he", " the", " a", " and", " she", " it")
                 if len(tokenizer.encode(w)) == 1 and w not in (world["answer"], top))
    out = tmp_path / "v.csv"
    restore = interrupt_after(causal_module, "trace_partial", 2)
    with pytest.raises(cluster.Interrupted, match="2 of .* are saved"):
        _trace(world, out)
    restore()
    with pytest.raises(InputError, match="cannot resume"):
        _trace(world, out, resume=True, versus=other)
    assert not out.exists() and (tmp_path / "v.csv.parts").is_dir()
    # the same options still resume it
    assert _trace(world, out, resume=True).resumed_tasks == 2


def test_merge_is_the_same_in_any_order():
    rng = np.random.default_rng(0)
    parts = []
    for start in (0, 4, 8):
        cells = np.arange(start, start + 4)
        parts.append({"cell": cells, "p_answer": rng.random(cells.size),
                      "logit_diff": rng.random(cells.size)})
    left = merge_partials(merge_partials(parts[0], parts[1]), parts[2])
    right = merge_partials(parts[2], merge_partials(parts[1], parts[0]))
    for name in left:
        np.testing.assert_array_equal(left[name], right[name])
    np.testing.assert_array_equal(left["cell"], np.arange(12))


def test_the_file_reads_back_as_csv_and_parquet(world, by_superclass, tmp_path):
    reference, result = by_superclass
    trace = CausalTrace(reference)
    assert trace.info["format"] == "flyviz-patch" and trace.info["clean"] == world["clean"]
    assert trace.info["model"]["weights_sha256"]
    assert trace.grid("p_answer").shape == (len(trace.positions), len(trace.groups))
    assert trace.token_labels()[0] == "0 <s>"
    parquet = _trace(world, tmp_path / "trace.parquet", positions="2:4")
    back = CausalTrace(tmp_path / "trace.parquet")
    assert back.positions == [2, 3]
    want = [r for r in result.trace.rows if 2 <= r.position < 4]
    assert [(r.position, r.group, r.query) for r in back.rows] == \
        [(r.position, r.group, r.query) for r in want]
    # Another plan puts the cells in other columns: the readout's GEMM may round the last
    # bit of a logit differently, nothing more.
    for got, cell in zip(back.rows, want):
        assert got.p_answer == pytest.approx(cell.p_answer, rel=1e-6, abs=1e-9)
    assert parquet.trace.info["positions"] == [2, 4]
    bad = tmp_path / "bad.csv"
    bad.write_text("position,token\n1,a\n", encoding="utf-8")
    with pytest.raises(TraceError, match="not a flyviz causal trace"):
        CausalTrace(bad)


def test_the_heatmap_draws_each_cell_in_its_colour(by_superclass, tmp_path):
    reference, _ = by_superclass
    trace = CausalTrace(reference)
    image = heatmap_image(trace, "p_answer")
    low, high = trace.span("p_answer")
    # The bar spans the two runs' values and any cell beyond them.
    span = bar_span((trace.grid("p_answer") - low) / (high - low))
    want = colours(trace.grid("p_answer"), low, high, span)
    # Find the grid: the first cell's colour block, CELL_W x CELL_H, at each (row, column).
    svg = ET.fromstring(heatmap_svg(trace, "p_answer"))
    rects = [r for r in svg.iter("{http://www.w3.org/2000/svg}rect") if r.find(
        "{http://www.w3.org/2000/svg}title") is not None]
    assert len(rects) == len(trace.rows)
    x0, y0 = int(rects[0].get("x")), int(rects[0].get("y"))
    for r in range(want.shape[0]):
        for c in range(want.shape[1]):
            y, x = y0 + r * CELL_H + CELL_H // 2, x0 + c * CELL_W + CELL_W // 2
            assert tuple(image[y, x]) == tuple(want[r, c]), (r, c)
            assert rects[r * want.shape[1] + c].get("fill") == "#%02x%02x%02x" % tuple(want[r, c])
    # The colour bar runs from its clean end (top) to its corrupted one (bottom).
    bar_h = want.shape[0] * CELL_H
    top, bottom = (low + f * (high - low) for f in (span[1], span[0]))
    ramp = colours(np.linspace(top, bottom, bar_h), low, high, span)
    bar_x = x0 + want.shape[1] * CELL_W + 20 + 8
    assert tuple(image[y0 + 1, bar_x]) == tuple(ramp[1])
    assert tuple(image[y0 + bar_h - 2, bar_x]) == tuple(ramp[-2])
    ends = colours(np.array([top, bottom]), low, high, span)
    assert np.abs(ramp[1].astype(int) - ends[0]).max() <= 8
    assert np.abs(ramp[-2].astype(int) - ends[1]).max() <= 8


class _Trace:
    """A causal trace's face as the heatmap reads it, with chosen values."""

    def __init__(self, grid, corrupted, clean):
        self._grid, self._span = np.asarray(grid, float), (corrupted, clean)
        self.positions = list(range(self._grid.shape[0]))
        self.groups = [f"group{c}" for c in range(self._grid.shape[1])]
        self.info = {"answer": " She", "versus": " He", "settings": {"window": 1}}

    def span(self, metric):
        return self._span

    def grid(self, metric):
        return self._grid

    def token_labels(self):
        return [f"{r} tok{r}" for r in self.positions]


def test_cells_beyond_the_runs_values_are_not_drawn_in_their_colours(tmp_path):
    """A cell below the corrupted run's value was drawn in the corrupted colour, one past the
    clean run's in the clean colour, with nothing said; nor which way was brighter when the
    clean run's value is the lower (as p(answer) on the patching page's example)."""
    corrupted, clean = 0.531, 0.4698
    grid = [[0.5457, corrupted], [clean, 0.4676]]     # one cell beyond each run's value
    trace = _Trace(grid, corrupted, clean)
    image = heatmap_image(trace, "p_answer").astype(int)
    svg = heatmap_svg(trace, "p_answer")
    root = ET.fromstring(svg)
    rects = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.find(
        "{http://www.w3.org/2000/svg}title") is not None]
    x0, y0 = int(rects[0].get("x")), int(rects[0].get("y"))

    def cell(r, c):
        return tuple(image[y0 + r * CELL_H + CELL_H // 2, x0 + c * CELL_W + CELL_W // 2])

    fills = [r.get("fill") for r in rects]
    assert len(set(fills)) == 4 and len({cell(0, 0), cell(0, 1), cell(1, 0), cell(1, 1)}) == 4
    # The bar's ends are the cells beyond; the runs' values are labelled marks on it.
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "0.4676 (a cell beyond clean)" in texts and "clean 0.4698" in texts
    assert "corrupted 0.531" in texts and "0.5457 (a cell beyond corrupted)" in texts
    assert any("brighter: nearer the clean run's p(answer) (here the lower" in t for t in texts)
    # Within the runs' values, the bar and colours are as before.
    inside = _Trace([[corrupted, clean]], corrupted, clean)
    assert bar_span((inside.grid("p_answer") - corrupted) / (clean - corrupted)) == (0.0, 1.0)
    assert not any("reaches past" in t.text for t in ET.fromstring(heatmap_svg(
        inside, "p_answer")).iter("{http://www.w3.org/2000/svg}text"))


def test_the_patch_command_writes_the_table_and_the_figure(capsys, world, tmp_path):
    out, figure = tmp_path / "t.csv", tmp_path / "t.png"
    code = cli.main(["patch", world["spec"], "--dataset", world["dataset"], "--clean",
                     world["clean"], "--corrupt", world["corrupt"], "--answer", world["answer"],
                     "--by", "side", "--positions", "1:3", "--window", "2", "--out", str(out),
                     "--figure", str(figure), "--workers", "0", "--batch", "4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "causal trace of " in captured.out and f"written to {out}" in captured.out
    assert " s (in this process)\n" in captured.out and "worker(s)" not in captured.out
    # Without --metric the table is sorted by the window's default measure (its normalised
    # column), the normalised logit difference the docs quote, not p(answer).
    from flyviz.app.language.patching_panel import MEASURES

    assert MEASURES[0][1] == "logit_diff_normalised"
    assert "cells restoring the most logit_diff_normalised:" in captured.out
    # Each column is named as the file's column (no two headers alike), and lined up.
    lines = captured.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["position"])
    assert lines[at].split() == ["position", "token", "group", "p_answer", "p_normalised",
                                 "logit_diff", "logit_diff_normalised"]
    assert len(lines[at + 1]) == len(lines[at])
    trace = CausalTrace(out)
    assert trace.positions == [1, 2] and set(trace.groups) == {"left", "right", "center"} & set(
        trace.groups)
    assert {r.window for r in trace.rows} == {2}
    source = PatchSource.from_prompt(world["clean"])
    for cell in trace.rows:  # a window of two positions is one run patched at both
        _, probabilities = _final_logits(world["model"], trace.info["corrupt_ids"], [
            Patch(cell.query, source, cell.position, cell.position + 2)])
        assert abs(cell.p_answer - probabilities[trace.info["answer_id"]]) < 1e-6, cell
    from PIL import Image

    assert Image.open(figure).size[0] > len(trace.groups) * CELL_W
    # The library gives the same cells.
    model = flyviz.Model(world["model"])
    library = flyviz.causal_trace(model, world["clean"], world["corrupt"], world["answer"],
                                  by="side", positions=(1, 3), window=2, batch=4)
    model.close()
    assert [r.to_dict() for r in library.rows] == [r.to_dict() for r in trace.rows]


@pytest.mark.parametrize("case", ["lengths", "answer", "versus", "empty group", "positions",
                                  "figure", "window"])
def test_bad_input_gives_one_line_and_exit_2(capsys, world, tmp_path, case):
    empty = tmp_path / "groups.txt"
    empty.write_text("nobody: id:0 & !id:0\n", encoding="utf-8")
    argv = ["patch", world["spec"], "--dataset", world["dataset"], "--clean", world["clean"],
            "--corrupt", world["corrupt"], "--answer", world["answer"], "--by", "superclass",
            "--out", str(tmp_path / "t.csv"), "--workers", "0"]

    def swap(option, value):
        i = argv.index(option)
        argv[i + 1] = value

    if case == "lengths":
        swap("--corrupt", world["corrupt"] + " the cat went home")
    elif case == "answer":
        swap("--answer", " the little cat")
    elif case == "versus":
        argv += ["--versus", ""]
    elif case == "empty group":
        swap("--by", str(empty))
    elif case == "positions":
        argv += ["--positions", "5:99"]
    elif case == "figure":
        argv += ["--figure", str(tmp_path / "t.jpg")]
    elif case == "window":
        argv += ["--window", "0"]
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 2, (case, captured.err)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flyviz: error: "), (case, captured.err)
    assert "Traceback" not in captured.err
    assert not (tmp_path / "t.csv").exists()
    if case == "lengths":
        assert "--align end" in lines[0]
    if case == "answer":
        assert "not one" in lines[0]


def test_groups_from_a_mapping_and_an_empty_one_is_refused(world):
    with pytest.raises(flyviz.errors.FlyvizError):
        flyviz.causal_trace(world["model"], world["clean"], world["corrupt"], world["answer"],
                            by={"nobody": "id:0 & !id:0"})
    trace = flyviz.causal_trace(world["model"], world["clean"], world["corrupt"], world["answer"],
                                by={"first": "id:0-9"}, positions="1:2")
    assert trace.groups == ["first"] and len(trace.rows) == 1
    assert json.loads(json.dumps(trace.info))["positions"] == [1, 2]


def test_many_groups_get_narrower_columns_in_their_colours():
    from flyviz.analysis.causal import TraceCell
    from flyviz.analysis.heatmap import MAX_GRID_W, cell_width

    groups, positions = 1500, 2
    rng = np.random.default_rng(1)
    values = rng.random((positions, groups))
    rows = [TraceCell(position=p, token=f"t{p}", group=f"g{g}", query=f"id:{g}", neurons=1,
                      window=1, p_answer=float(values[p, g]), logit_diff=0.0,
                      p_normalised=float(values[p, g]), logit_diff_normalised=0.0)
            for p in range(positions) for g in range(groups)]
    info = {"answer": " a", "versus": " b", "settings": {"window": 1},
            "references": {"p_clean": 1.0, "p_corrupt": 0.0, "logit_diff_clean": 1.0,
                           "logit_diff_corrupt": 0.0}}
    trace = CausalTrace.from_rows(rows, info)
    width = cell_width(groups)
    assert width * groups <= MAX_GRID_W and width >= 1
    image = heatmap_image(trace)
    assert image.shape[1] < MAX_GRID_W + 400
    svg = ET.fromstring(heatmap_svg(trace))
    cells = [r for r in svg.iter("{http://www.w3.org/2000/svg}rect")
             if r.find("{http://www.w3.org/2000/svg}title") is not None]
    x0, y0 = int(cells[0].get("x")), int(cells[0].get("y"))
    want = colours(values, 0.0, 1.0)
    for p in range(positions):
        for g in (0, 1, 700, groups - 1):
            pixel = image[y0 + p * CELL_H + CELL_H // 2, x0 + g * width + width // 2]
            assert tuple(pixel) == tuple(want[p, g])


def test_prompts_aligned_from_the_end_restore_the_shifted_clean_state(world, tmp_path):
    clean = "and then " + world["clean"]
    groups = sweep_groups(world["model"], "side")
    result = run_causal_trace(world["spec"], world["model"], clean, world["corrupt"],
                              world["answer"], groups, tmp_path / "end.csv", SETTINGS,
                              align="end", workers=0)
    trace = result.trace
    shift = trace.info["shift"]
    assert shift == len(trace.info["clean_ids"]) - len(trace.info["corrupt_ids"]) > 0
    assert trace.positions == list(range(len(trace.info["corrupt_ids"])))
    source = PatchSource.from_prompt(clean, align="end")
    for cell in trace.rows[::3]:
        _, probabilities = _final_logits(world["model"], trace.info["corrupt_ids"], [
            Patch(cell.query, source, cell.position, cell.position + 1)])
        assert abs(cell.p_answer - probabilities[trace.info["answer_id"]]) < 1e-6, cell
