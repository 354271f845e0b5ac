"""The lesion map: numbers equal flyviz compare's, workers, resume, groups, files, bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from flyviz import cli
from flyviz.analysis import cluster
from flyviz.analysis.sweep import tasks as sweep_tasks
from flyviz.analysis.corpus import build_corpus
from flyviz.analysis.sweep import (LesionMap, SweepError, SweepSettings, file_groups,
                                   label_groups, merge_partials, plan_tasks, run_sweep,
                                   sweep_groups)
from flyviz.model.errors import InputError
from flyviz.model.resolve import load_model
from flyviz.model.selection import neuron_index
from flyviz.model.synthetic import _WORDS
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import write_fly_llm_hf
from flyviz.record.compare import Comparison, forced_on_text

# Five columns per pass: four groups and the untouched model, so types take several passes.
SETTINGS = SweepSettings(streams=5, context=24, chunk_tokens=160, min_tasks=4)


@pytest.fixture(scope="module")
def world(small_world):
    """A small model with anatomy (fly-wordbrain weights joined to a connectome dataset
    folder, as --dataset does; loadable by workers), a text and its corpus."""
    rng = np.random.default_rng(3)
    stories = ["\n".join(" ".join(rng.choice(_WORDS, rng.integers(2, 12))).capitalize() + "."
                         for _ in range(rng.integers(1, 3))) for _ in range(14)]
    # A trained model's logit size: float32 rounding of the readout stays far below the 1e-6
    # the numbers are checked to.
    world = small_world("sweep", neurons=203, edges=4001, seed=8, anatomy=True, logit_scale=0.1,
                        text="\n\n".join(stories) + "\n", context=SETTINGS.context)
    assert world["model"].anatomy.cell_type is not None
    return world


def _sweep(world, out: Path, by: str = "superclass", workers: int | None = 0,
           settings: SweepSettings = SETTINGS, **kwargs):
    groups = sweep_groups(world["model"], by)
    return run_sweep(world["spec"], world["model"], world["corpus"], groups, out, settings,
                     by=by, dataset=world["dataset"], workers=workers, **kwargs)


def _table(path: Path) -> list[dict]:
    return [row.to_dict() for row in LesionMap(path).rows]


@pytest.fixture(scope="module")
def by_type(world, tmp_path_factory):
    """The cell-type sweep in this process (the reference for workers and resume)."""
    out = tmp_path_factory.mktemp("types") / "types.csv"
    result = _sweep(world, out, by="type")
    return out, result


@pytest.mark.parametrize("mode", ["silence", "cut-out", "cut-in"])
def test_each_groups_numbers_equal_flyviz_compare_on_the_same_text(world, tmp_path, mode):
    """ΔCE, KL, CE and top-1 agreement of a group equal the teacher-forced numbers of
    flyviz compare's runner with the group's intervention, over every window of the text."""
    out = tmp_path / "sc.csv"
    settings = dataclasses.replace(SETTINGS, mode=mode)
    result = _sweep(world, out, settings=settings)
    lesions = LesionMap(out)
    corpus, model = world["corpus"], world["model"]
    assert lesions.mode == mode and result.positions == corpus.counted_tokens
    assert corpus.n_windows > 4  # several windows, several chunks
    checked = 0
    for row in lesions.rows[:2] + lesions.rows[-1:]:
        comparison = Comparison.for_checkpoint(model, [lesions.intervention(row)], threads=1)
        positions = []
        for lo, hi in zip(corpus.offsets[:-1], corpus.offsets[1:]):
            positions.extend(forced_on_text(comparison, corpus.tokens[lo:hi].tolist()))
        comparison.close()
        assert len(positions) == row.positions == corpus.counted_tokens
        delta = np.mean([p.cross_entropy_intervened - p.cross_entropy_untouched
                         for p in positions])
        assert row.delta_ce == pytest.approx(delta, abs=1e-6)
        assert row.kl == pytest.approx(np.mean([p.kl for p in positions]), abs=1e-6)
        assert row.cross_entropy == pytest.approx(
            np.mean([p.cross_entropy_intervened for p in positions]), abs=1e-6)
        assert row.top1_agreement == np.mean([p.top1_untouched == p.top1_intervened
                                              for p in positions])
        assert lesions.baseline_cross_entropy == pytest.approx(
            np.mean([p.cross_entropy_untouched for p in positions]), abs=1e-6)
        checked += 1
    assert checked == 3
    # The lesions matter (the numbers are not trivially zero) and the rows are sorted.
    assert lesions.rows[0].delta_ce > 0.01 and lesions.rows[0].kl > 0.01
    assert [r.delta_ce for r in lesions.rows] == sorted((r.delta_ce for r in lesions.rows),
                                                        reverse=True)


#: What a user's Dask configuration may give the nannies: two BLAS threads per worker.
MANY_BLAS_THREADS = {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}


@pytest.fixture(scope="module")
def two_workers(module_dask_workers):
    """Two local worker processes started as ``--workers 2`` starts them, where the user's
    Dask configuration gives the nannies :data:`MANY_BLAS_THREADS`; the tests below share
    them (one cluster to start, close and warm up, not three)."""
    dask = pytest.importorskip("dask")

    with dask.config.set({"distributed.nanny.pre-spawn-environ": MANY_BLAS_THREADS}):
        module_dask_workers.scaled_to(2)
    return module_dask_workers


@pytest.mark.slow
def test_one_and_two_worker_processes_give_identical_tables(world, by_type, tmp_path,
                                                            two_workers):
    """A real dask.distributed LocalCluster with worker processes: one that the run starts
    and closes itself (``workers=1``), and the module's two (``--scheduler``; the run's
    tasks are spread over the scheduler's workers as on a cluster of its own)."""
    reference, in_process = by_type
    assert in_process.passes >= 3 and in_process.tasks >= 6   # several tasks per worker
    for workers, where in ((2, {"workers": None, "scheduler": two_workers.scaled_to(2)}),
                           (1, {"workers": 1})):
        out = tmp_path / f"w{workers}.csv"
        result = _sweep(world, out, by="type", **where)
        assert result.workers == workers
        assert _table(out) == _table(reference)  # every float, bit for bit


def test_local_workers_run_blas_in_one_thread_whatever_the_dask_configuration(two_workers):
    """N workers on N cores, each with N BLAS threads, would fight over the cores: the local
    workers get one BLAS/OpenMP thread each even where the user's Dask configuration gives
    the nannies another environment (:func:`two_workers` started them under one)."""
    pytest.importorskip("threadpoolctl")

    def blas_threads() -> list[int]:
        import numpy  # noqa: F401 - loads the BLAS the pools are counted for
        from threadpoolctl import threadpool_info

        return [pool["num_threads"] for pool in threadpool_info()]

    found = two_workers.client.run(blas_threads)
    pools = [n for threads in found.values() for n in threads]
    assert len(found) == 2 and pools and set(pools) == {1}


def test_a_sweep_on_a_running_cluster_equals_the_one_in_process(world, by_type, tmp_path,
                                                                two_workers):
    """--scheduler: the workers of a cluster started elsewhere (here the module's two worker
    processes) load the model from the spec and give the same bits."""
    reference, in_process = by_type
    out = tmp_path / "s.csv"
    result = _sweep(world, out, by="type", workers=None, scheduler=two_workers.scaled_to(2))
    assert result.tasks == in_process.tasks
    assert _table(out) == _table(reference)


def test_a_resumed_sweep_equals_an_uninterrupted_one(world, by_type, tmp_path,
                                                    interrupt_after):
    reference, in_process = by_type
    out = tmp_path / "r.parquet"
    restore = interrupt_after(sweep_tasks, "pass_partial", 3)
    with pytest.raises(cluster.Interrupted, match="3 of .* are saved"):
        _sweep(world, out, by="type")
    assert not out.exists() and (tmp_path / "r.parquet.parts").is_dir()
    with pytest.raises(InputError, match="--resume"):
        _sweep(world, out, by="type")
    restore()
    result = _sweep(world, out, by="type", resume=True)
    assert result.resumed_tasks == 3 and result.tasks == in_process.tasks
    assert not (tmp_path / "r.parquet.parts").exists()
    assert _table(out) == _table(reference)


def test_merge_is_the_same_in_any_order(world):
    groups = sweep_groups(world["model"], "type")
    tasks, _ = plan_tasks(groups, world["corpus"], SETTINGS)
    rng = np.random.default_rng(0)
    partials = []
    for task in tasks[:5]:
        k = task.groups.size
        partials.append({"group": task.groups, "chunk": np.full(k, task.chunk.index),
                         "delta_ce": rng.standard_normal(k), "cross_entropy": rng.random(k),
                         "kl": rng.random(k), "agree": rng.integers(0, 9, k),
                         "positions": np.full(k, 9),
                         "base_chunk": np.array([task.chunk.index] if task.block == 0 else [],
                                                dtype=np.int64),
                         "base_ce": np.array([1.0] if task.block == 0 else []),
                         "base_positions": np.array([9] if task.block == 0 else [],
                                                    dtype=np.int64)})
    a, b, c, d, e = partials
    left = merge_partials(merge_partials(merge_partials(a, b), merge_partials(c, d)), e)
    right = merge_partials(e, merge_partials(d, merge_partials(c, merge_partials(b, a))))
    assert sorted(left) == sorted(right)
    for name in left:
        np.testing.assert_array_equal(left[name], right[name], err_msg=name)


def test_tasks_cover_every_group_and_position_once(world):
    groups = sweep_groups(world["model"], "type")
    corpus = world["corpus"]
    tasks, chunks = plan_tasks(groups, corpus, SETTINGS)
    blocks = len(tasks) // chunks
    assert blocks == -(-len(groups) // 4) and [t.index for t in tasks] == list(range(len(tasks)))
    for block in range(blocks):
        mine = [t for t in tasks if t.block == block]
        assert sum(t.positions for t in mine) == corpus.counted_tokens
        assert all(t.groups.size <= SETTINGS.streams - 1 for t in mine)
    numbers = np.concatenate([t.groups for t in tasks if t.chunk.index == 0])
    np.testing.assert_array_equal(numbers, np.arange(len(groups)))
    for task in tasks[:chunks + 1]:
        for number, neurons in zip(task.groups, task.group_neurons()):
            np.testing.assert_array_equal(neurons, groups[number].neurons)
    # Few blocks: the text is cut finer, so that min_tasks workers have work.
    few, chunks = plan_tasks(groups[:3], corpus, dataclasses.replace(SETTINGS, min_tasks=6,
                                                                     chunk_tokens=10_000))
    assert len(few) == chunks >= 6


def test_label_groups_have_exact_queries_even_for_odd_names(world):
    model = world["model"]
    n = model.config.neurons
    types = [("A*[x]?" if i % 7 == 0 else "plain b" if i % 7 == 1 else "" if i % 7 == 2
              else f"T{i % 5}") for i in range(n)]
    odd = dataclasses.replace(model, anatomy=dataclasses.replace(model.anatomy, cell_type=types),
                              digests={})
    groups = label_groups(odd, "type")
    index = neuron_index(odd)
    names = [g.name for g in groups]
    assert set(names) == {"A*[x]?", "plain b", "(unlabelled)", "T0", "T1", "T2", "T3", "T4"}
    assert sum(g.size for g in groups) == n
    for group in groups:
        np.testing.assert_array_equal(index.select(group.query), group.neurons,
                                      err_msg=group.query)
    for by in ("superclass", "side"):
        for group in label_groups(model, by):
            np.testing.assert_array_equal(index.select(group.query), group.neurons)


def test_groups_file_names_queries_and_lines(world, tmp_path):
    model = world["model"]
    path = tmp_path / "groups.txt"
    path.write_text("# my groups\n\ninhibitory: sign:inhibitory\n"
                    "left sensory : superclass:cb_sensory & side:left\n"
                    "everything: all\n", encoding="utf-8")
    groups = file_groups(model, path)
    index = neuron_index(model)
    assert [g.name for g in groups] == ["inhibitory", "left sensory", "everything"]
    np.testing.assert_array_equal(groups[1].neurons,
                                  index.select("superclass:cb_sensory & side:left"))
    cases = {"x: id:0\nnothing: sign:inhibitory & !sign:inhibitory\n":
             r"line 2 \(nothing\): query .* selects no neurons",
             "\n\nsuperclass:cb_sensory\n": "line 3 .*start the line with a name",
             "a: id:1\na: id:2\n": "line 2: the group name 'a' is used on line 1",
             "just words\n": "line 1: expected 'NAME: QUERY'",
             "# only a comment\n": "holds no 'NAME: QUERY' line",
             "t: type:nosuchtype\n": "line 1 .*matches no cell type"}
    for text, message in cases.items():
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InputError, match=message):
            file_groups(model, path)


def test_reader_colours_neurons_and_checks_the_model(world, by_type, tmp_path):
    model = world["model"]
    lesions = LesionMap(by_type[0])
    lesions.check_model(model)
    assert lesions.by == "type" and lesions.info["text"]["positions"] > 0
    importance = lesions.importance(model)
    assert importance.shape == (model.config.neurons,) and importance.dtype == np.float32
    for row in lesions.rows:
        neurons = lesions.neurons_of(row, model)
        assert neurons.size == row.neurons
        np.testing.assert_array_equal(importance[neurons], np.float32(row.delta_ce))
    assert not np.isnan(importance).any()  # cell types partition the neurons
    kl = lesions.importance(model, "kl")
    top = lesions.rows[0]
    assert kl[lesions.neurons_of(top.group, model)][0] == np.float32(top.kl)
    # Overlapping groups of a file: a neuron takes its largest value; none is NaN.
    path = tmp_path / "g.txt"
    path.write_text("first: id:0-9\nsecond: id:5-14\n", encoding="utf-8")
    out = tmp_path / "g.csv"
    _sweep(world, out, by=str(path))
    overlap = LesionMap(out)
    assert overlap.by == "file" and overlap.info["groups_file"] == "g.txt"
    values = overlap.importance(model)
    first, second = overlap.row("first").delta_ce, overlap.row("second").delta_ce
    assert values[7] == np.float32(max(first, second))
    assert values[2] == np.float32(first) and values[12] == np.float32(second)
    assert np.isnan(values[15:]).all()
    # Another model: one line saying so.
    changed = dataclasses.replace(model, bias=np.asarray(model.bias) + 1, digests={})
    assert not lesions.matches(changed)
    with pytest.raises(SweepError, match="weights differ"):
        lesions.check_model(changed)


def test_reader_refuses_damaged_and_foreign_files(tmp_path, by_type):
    with pytest.raises(SweepError, match="does not exist"):
        LesionMap(tmp_path / "none.csv")
    plain = tmp_path / "plain.csv"
    plain.write_text("group,delta_ce\na,1\n", encoding="utf-8")
    with pytest.raises(SweepError, match="not a flyviz lesion map"):
        LesionMap(plain)
    lines = by_type[0].read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join(lines[:2] + [lines[2].replace(",", ",x", 4)]) + "\n",
                      encoding="utf-8")
    with pytest.raises(SweepError, match="damaged"):
        LesionMap(broken)
    other = tmp_path / "x.txt"
    other.write_text("hello", encoding="utf-8")
    with pytest.raises(SweepError):
        LesionMap(other)


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sweep_command_prints_the_sorted_table_and_writes_parquet(capsys, world, tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    def side_sweep(out: Path, *extra: str):
        return _cli(capsys, "sweep", world["spec"], "--dataset", world["dataset"], "--by",
                    "side", "--text", str(world["text"]), "--out", str(out), "--workers", "0",
                    "--batch", "3", "--context", "24", "--max-tokens", "150", "--mode",
                    "cut-in", *extra)

    out = tmp_path / "side.parquet"
    code, stdout, err = side_sweep(out, "--kernel", "scipy")
    assert code == 0, err
    assert "group-tokens/s" in err and "written to" in stdout
    lesions = LesionMap(out)
    assert [r.group for r in lesions.rows] == \
        [line.split()[1] for line in stdout.splitlines()[2:5]]
    assert {r.group for r in lesions.rows} == {"left", "right", "center"}
    assert world["corpus"].n_tokens > 150        # so --max-tokens is what cuts the text
    assert lesions.mode == "cut-in" and lesions.info["text"]["tokens"] == 150
    meta = json.loads(pq.read_schema(out).metadata[b"flyviz_sweep"])
    assert meta["model"]["weights_sha256"] == lesions.model["weights_sha256"]
    assert meta["settings"]["streams"] == 3 and "dataset" not in meta["model"]
    assert str(lesions.intervention("left")) == "cut all->side:left"
    assert str(lesions.intervention("left", "silence")) == "silence side:left"
    # The CSV table reads with any CSV reader once its metadata line is skipped; the
    # default kernel (the compiled one, where it builds) gives scipy's numbers.
    csv_out = tmp_path / "side.csv"
    code, stdout, err = side_sweep(csv_out, "--show", "1")
    assert code == 0, err
    assert "... 2 more groups" in stdout
    import csv

    with open(csv_out, encoding="utf-8") as handle:
        assert handle.readline().startswith("# flyviz-sweep {")
        rows = list(csv.DictReader(handle))
    assert [float(r["delta_ce"]) for r in rows] == [r.delta_ce for r in lesions.rows]


@pytest.mark.parametrize("case", ["by", "nothing", "empty", "suffix", "folder", "file",
                                  "scheduler", "batch", "no-labels"])
def test_bad_input_gives_one_line_and_exit_2(capsys, monkeypatch, world, tmp_path, case):
    text, by, out = world["text"], "superclass", tmp_path / "x.csv"
    extra: list[str] = ["--workers", "0", "--dataset", world["dataset"]]
    spec = world["spec"]
    if case == "by":
        by = "cells"
    elif case == "nothing":
        by = str(tmp_path / "g.txt")
        Path(by).write_text("fine: id:1\nnone: sign:inhibitory & !sign:inhibitory\n",
                            encoding="utf-8")
    elif case == "empty":
        text = tmp_path / "empty.txt"
        text.write_text("\n\n   \n", encoding="utf-8")
    elif case == "suffix":
        out = tmp_path / "x.xlsx"
    elif case == "folder":
        out = tmp_path / "missing" / "x.csv"
    elif case == "file":  # a file where the folder should be is not "missing"
        (tmp_path / "empty.txt").write_text("", encoding="utf-8")
        out = tmp_path / "empty.txt" / "x.csv"
    elif case == "scheduler":
        extra = ["--scheduler", "tcp://127.0.0.1:9"]
        # Nothing listens there: the refusal is the same after 0.2 s as after the 5 s a
        # user's scheduler is given.
        monkeypatch.setattr(cluster, "SCHEDULER_CONNECT_TIMEOUT_S", 0.2)
    elif case == "batch":
        extra += ["--batch", "1"]
    elif case == "no-labels":
        bare = dataclasses.replace(world["model"], anatomy=None, digests={})
        write_fly_llm_hf(bare, tmp_path / "bare")
        spec, extra = str(tmp_path / "bare"), ["--workers", "0"]
    code, _, err = _cli(capsys, "sweep", spec, "--by", by, "--text", str(text), "--out",
                        str(out), *extra)
    assert code == 2, err
    assert err.startswith("flyviz: error: ") and err.count("\n") == 1, err
    expected = {"by": "neither superclass, type, side nor a file",
                "nothing": "g.txt, line 2 (none)", "empty": "no text",
                "suffix": ".csv or .parquet", "folder": "does not exist",
                "file": "empty.txt is a file, not a folder",
                "scheduler": "scheduler", "batch": "--batch 1",
                "no-labels": "no superclass labels"}[case]
    assert expected in err
    assert not out.exists()


def test_workers_that_cannot_start_give_one_line_and_exit_2(capsys, world, tmp_path,
                                                            monkeypatch):
    distributed = pytest.importorskip("distributed")

    def failing_cluster(*args, **kwargs):
        raise RuntimeError("Nanny failed to start.") from RuntimeError(
            "Nanny failed to start worker process")

    monkeypatch.setattr(distributed, "LocalCluster", failing_cluster)
    out = tmp_path / "x.csv"
    code, _, err = _cli(capsys, "sweep", world["spec"], "--dataset", world["dataset"], "--by",
                        "side", "--text", str(world["text"]), "--out", str(out), "--workers", "2")
    assert code == 2, err
    last = err.splitlines()[-1]
    assert "Traceback" not in err and err.count("flyviz: error:") == 1
    assert last.startswith("flyviz: error: could not start 2 local Dask worker process(es)")
    assert "--workers 0" in last and not out.exists()
    assert not (tmp_path / "x.csv.parts").exists()  # nothing to --resume


@pytest.mark.slow
def test_the_demo_brains_numbers_equal_flyviz_compare_at_full_size(tmp_path, monkeypatch,
                                                                   demo_cache):
    """The same check on the full-size demo brain (49,393 neurons) and its held-out stories:
    the batched readout and the single-stream one round differently, within 1e-6."""
    heldout = Path(__file__).resolve().parents[1] / "assets" / "demo" / "heldout.txt"
    if not heldout.is_file():
        pytest.skip("the demo brain is not built")
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    model = load_model("demo")
    corpus = build_corpus([heldout], FlyTokenizer(model.tokenizer_path), max_tokens=30)
    groups = [g for g in sweep_groups(model, "superclass")
              if g.name in ("visual_projection", "descending_neuron")]
    out = tmp_path / "demo.csv"
    run_sweep("demo", model, corpus, groups, out, SweepSettings(), by="superclass", workers=0)
    lesions = LesionMap(out)
    lesions.check_model(model)
    for row in lesions.rows:
        comparison = Comparison.for_checkpoint(model, [lesions.intervention(row)], threads=1)
        positions = []
        for lo, hi in zip(corpus.offsets[:-1], corpus.offsets[1:]):
            positions.extend(forced_on_text(comparison, corpus.tokens[lo:hi].tolist()))
        comparison.close()
        assert len(positions) == row.positions == 29
        assert row.delta_ce == pytest.approx(np.mean([p.cross_entropy_intervened
                                                      - p.cross_entropy_untouched
                                                      for p in positions]), abs=1e-6)
        assert row.kl == pytest.approx(np.mean([p.kl for p in positions]), abs=1e-6)
        assert row.kl > 1e-4


def test_the_lesion_map_page_says_what_an_intervention_prints():
    """docs/lesion-map.md's comment is what printing ``lesions.intervention(...)`` shows
    (it once showed a repr, ``Silence(neurons=...)``, that print does not)."""
    from flyviz.model.interventions import Silence

    page = Path(__file__).resolve().parents[1] / "docs" / "lesion-map.md"
    line = next(text for text in page.read_text(encoding="utf-8").splitlines()
                if 'lesions.intervention("visual_projection")' in text)
    code, comment = line.split("#", 1)
    assert code.strip().startswith("print(lesions.intervention(")
    # the map's group is the query superclass:visual_projection; silence is the default
    assert comment.strip().startswith(f"{Silence('superclass:visual_projection')} (")


def test_where_it_ran_says_in_this_process_for_no_workers():
    from flyviz.analysis.cluster import where_it_ran

    assert where_it_ran(1, 0) == "in this process"
    assert where_it_ran(1, 0, "tcp://host:8786") == "1 worker(s)"   # a scheduler's worker
    assert where_it_ran(2, None) == where_it_ran(2, 2) == "2 worker(s)"


def test_the_lesion_map_pages_groups_file_selects_groups_of_the_demo_brain(tmp_path, demo):
    """docs/lesion-map.md's ``groups.txt`` (a text block the docs test does not run) is the
    reader's first ``--by FILE``: each of its queries must select neurons of the demo brain
    (its ``type:KC*`` matched no cell type there)."""
    import re

    page = (Path(__file__).resolve().parents[1] / "docs" / "lesion-map.md").read_text("utf-8")
    block = re.search(r"```text\n(# groups\.txt\n.*?)```", page, re.S)
    assert block is not None
    path = tmp_path / "groups.txt"
    path.write_text(block.group(1), encoding="utf-8")
    groups = file_groups(demo.checkpoint, path)
    assert len(groups) == 3 and all(g.size > 0 for g in groups)
