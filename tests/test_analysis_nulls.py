"""Null models: what each kind keeps, determinism, the written checkpoint, real vs nulls,
``--nulls N`` on the corpus commands and bad input."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

import flyviz
from flyviz import cli
from flyviz.analysis.nulls import (NULL_KINDS, compare_to_nulls, degree_rewire,
                                   describe_record, make_null, run_on_nulls, write_null)
from flyviz.errors import InputError
from flyviz.model.synthetic import _WORDS
from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf,
                                  write_recital_web, write_wordbrain)

PARAMETERS = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias", "head",
              "head_a", "head_b")
ROW = re.compile(r"real (\S+) \| nulls (\S+) ± (\S+) \(n=(\d+)\) \| z (\S+) \| p (\S+)$")


def _edges(ckpt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pre, post, weight) per synapse."""
    n = ckpt.config.neurons
    post = np.repeat(np.arange(n), np.diff(np.asarray(ckpt.w_offsets, dtype=np.int64)))
    return np.asarray(ckpt.w_indices, dtype=np.int64), post, np.asarray(ckpt.w_values)


def _keys(ckpt) -> np.ndarray:
    pre, post, _ = _edges(ckpt)
    return pre * ckpt.config.neurons + post


def _assert_simple_sorted_graph(ckpt) -> None:
    """No self-loops, no duplicate synapse, columns strictly increasing in every row."""
    pre, post, _ = _edges(ckpt)
    assert not np.any(pre == post)
    flat = post * ckpt.config.neurons + pre
    assert np.all(np.diff(flat) > 0)


def _graph(ckpt) -> tuple[np.ndarray, ...]:
    return (np.asarray(ckpt.w_offsets), np.asarray(ckpt.w_indices), np.asarray(ckpt.w_values))


# ------------------------------------------------------------------ what each kind keeps
def test_a_degree_null_keeps_degrees_and_signs_moves_most_edges_and_stays_simple(
        tiny_checkpoint):
    real = tiny_checkpoint
    null = make_null(real, "degree", 4)
    n = real.config.neurons
    pre, post, weight = _edges(real)
    npre, npost, nweight = _edges(null)
    assert np.array_equal(np.bincount(npost, minlength=n), np.bincount(post, minlength=n))
    assert np.array_equal(np.bincount(npre, minlength=n), np.bincount(pre, minlength=n))
    assert np.count_nonzero(nweight > 0) == np.count_nonzero(weight > 0)
    assert np.count_nonzero(nweight < 0) == np.count_nonzero(weight < 0)
    # Every synapse kept its presynaptic neuron's weight: each neuron's outgoing weights
    # are the same multiset (so its signs, Dale's law).
    order, norder = np.lexsort((weight, pre)), np.lexsort((nweight, npre))
    assert np.array_equal(pre[order], npre[norder])
    assert np.array_equal(weight[order], nweight[norder])
    _assert_simple_sorted_graph(null)
    moved = 1.0 - np.isin(_keys(null), _keys(real)).mean()
    assert moved > 0.8
    record = null.metadata["null_model"]
    assert record["kind"] == "degree" and record["seed"] == 4
    # The permuted targets made offences, and the graph above is simple: the repair ran.
    assert record["self_loops"] + record["duplicates"] > 0 and record["repair_swaps"] > 0
    assert record["source"]["graph_sha256"] != null.digests.get("graph/brain.w_indices")


def _per_neuron_counts(neuron: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """How many synapses each neuron has in each group: a (neuron, group) count table."""
    _, codes = np.unique(group, return_inverse=True)
    codes = codes.ravel()
    return np.bincount(neuron * (codes.max() + 1) + codes, minlength=n * (codes.max() + 1))


def test_a_degree_sign_null_keeps_every_neurons_degrees_per_sign_and_moves_most_edges(
        tiny_checkpoint):
    real = tiny_checkpoint
    n = real.config.neurons
    pre, post, weight = _edges(real)
    null = make_null(real, "degree-sign", 2)
    npre, npost, nweight = _edges(null)
    for mine, theirs in ((post, npost), (pre, npre)):  # in per sign, then out per sign
        assert np.array_equal(_per_neuron_counts(mine, np.sign(weight), n),
                              _per_neuron_counts(theirs, np.sign(nweight), n))
    order, norder = np.lexsort((weight, pre)), np.lexsort((nweight, npre))
    assert np.array_equal(weight[order], nweight[norder])  # each neuron's outgoing weights
    _assert_simple_sorted_graph(null)
    assert 1.0 - np.isin(_keys(null), _keys(real)).mean() > 0.8
    # A plain degree null keeps the degrees but not the inputs' signs: the test above
    # can tell the two apart.
    dpre, dpost, dweight = _edges(make_null(real, "degree", 2))
    assert not np.array_equal(_per_neuron_counts(post, np.sign(weight), n),
                              _per_neuron_counts(dpost, np.sign(dweight), n))
    assert null.metadata["null_model"]["kind"] == "degree-sign"


def test_a_type_pairs_null_rewires_only_within_each_cell_type_pair(tiny_checkpoint):
    real = tiny_checkpoint
    n = real.config.neurons
    types = np.unique(np.asarray(real.anatomy.cell_type), return_inverse=True)[1].ravel()
    pre, post, weight = _edges(real)
    null = make_null(real, "type-pairs", 3)
    npre, npost, nweight = _edges(null)
    t = types.max() + 1
    # Each neuron's synapses to and from each partner type: in and out per type pair, so
    # also the synapse count of every (pre type, post type) pair and every degree.
    assert np.array_equal(_per_neuron_counts(post, types[pre], n),
                          _per_neuron_counts(npost, types[npre], n))
    assert np.array_equal(_per_neuron_counts(pre, types[post], n),
                          _per_neuron_counts(npre, types[npost], n))
    assert np.array_equal(np.bincount(types[pre] * t + types[post], minlength=t * t),
                          np.bincount(types[npre] * t + types[npost], minlength=t * t))
    order, norder = np.lexsort((weight, pre)), np.lexsort((nweight, npre))
    assert np.array_equal(weight[order], nweight[norder])
    _assert_simple_sorted_graph(null)
    assert 1.0 - np.isin(_keys(null), _keys(real)).mean() > 0.6
    # Without cell types there is nothing to keep: one line saying so.
    bare = dataclasses.replace(real, anatomy=None)
    with pytest.raises(InputError, match="needs the neurons' cell types"):
        make_null(bare, "type-pairs", 0)


def test_a_class_with_no_other_arrangement_keeps_its_synapses_and_the_rest_is_rewired():
    # Class 0: three neurons wired to three others completely (no swap within it makes a new
    # synapse); class 1: a sparse random graph on 200 others, which rewires freely.
    rng = np.random.default_rng(5)
    complete = [(a, b) for a in range(3) for b in range(3, 6)]
    keys = np.unique(rng.integers(6, 206, 3000) * 1000 + rng.integers(6, 206, 3000))
    sparse = [(k // 1000, k % 1000) for k in keys if k // 1000 != k % 1000]
    pairs = np.array(complete + sparse, dtype=np.int64)
    source, target = pairs[:, 0], pairs[:, 1]
    classes = np.r_[np.zeros(len(complete)), np.ones(len(sparse))].astype(np.int64)
    for seed in range(20):  # a seed whose permutation puts a second copy in class 0
        new, facts = degree_rewire(1000, source, target, np.random.default_rng(seed), classes)
        if facts.get("kept_classes"):
            break
    assert facts["kept_classes"] == 1 and facts["kept_edges"] == len(complete)
    assert np.array_equal(new[classes == 0], target[classes == 0])
    made = source * 1000 + new
    assert np.unique(made).size == made.size and not np.any(source == new)
    assert np.array_equal(np.bincount(new, minlength=1000), np.bincount(target, minlength=1000))
    assert np.isin(made[classes == 1], source * 1000 + target).mean() < 0.2
    line = describe_record({"kind": "type-pairs", "seed": seed, **facts,
                            "source": {"name": "planted"}})
    assert "9 synapses of 1 class no swap rearranges kept, of planted" in line


def test_every_kind_states_what_it_keeps_in_the_help(capsys):
    from flyviz.analysis.nulls import KIND_KEEPS

    assert set(KIND_KEEPS) == set(NULL_KINDS)
    with pytest.raises(SystemExit):
        cli.main(["null", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for kind in NULL_KINDS:
        assert f"{kind} {' '.join(KIND_KEEPS[kind].split())}" in text


def test_the_degree_rewiring_repairs_every_self_loop_and_duplicate_at_hubs():
    # Hubs that reach a third of the brain: the permuted targets make hundreds of second
    # copies between them, and the last few have few partners that can take them.
    rng = np.random.default_rng(0)
    n = 400
    weight_out, weight_in = rng.pareto(1.3, n) + 1, rng.pareto(1.3, n) + 1
    pre = rng.choice(n, 30_000, p=weight_out / weight_out.sum())
    post = rng.choice(n, 30_000, p=weight_in / weight_in.sum())
    keys = np.unique(pre * n + post)
    keys = keys[keys // n != keys % n]
    source, target = keys // n, keys % n
    assert np.bincount(source, minlength=n).max() > n / 3
    new, facts = degree_rewire(n, source, target, np.random.default_rng(1))
    assert facts["duplicates"] > 100 and facts["self_loops"] > 0
    assert facts["repair_swaps"] > 0 and facts["repair_rounds"] > 1
    assert np.array_equal(np.bincount(new, minlength=n), np.bincount(target, minlength=n))
    assert not np.any(source == new)
    made = source * n + new
    assert np.unique(made).size == made.size
    assert np.isin(made, keys).mean() < 0.8
    again, _ = degree_rewire(n, source, target, np.random.default_rng(1))
    assert np.array_equal(new, again)


def test_a_degree_null_of_a_graph_with_no_other_simple_graph_is_refused():
    n = 6  # every synapse there is: the graph is the only one with its degrees
    pre, post = np.nonzero(~np.eye(n, dtype=bool))
    with pytest.raises(InputError, match="degree null of this graph cannot be made"):
        degree_rewire(n, pre.astype(np.int64), post.astype(np.int64),
                      np.random.default_rng(0))


def test_the_same_seed_gives_the_identical_null_and_another_seed_another(tiny_checkpoint):
    for kind in NULL_KINDS:
        first, again = make_null(tiny_checkpoint, kind, 7), make_null(tiny_checkpoint, kind, 7)
        other = make_null(tiny_checkpoint, kind, 8)
        for a, b in zip(_graph(first), _graph(again)):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert not all(np.array_equal(a, b) for a, b in zip(_graph(first), _graph(other)))
        assert not all(np.array_equal(a, b) for a, b in zip(_graph(first),
                                                            _graph(tiny_checkpoint)))


def test_sign_weights_and_erdos_nulls_keep_what_they_promise(tiny_checkpoint):
    real = tiny_checkpoint
    off, idx, val = _graph(real)
    sign = make_null(real, "sign", 1)
    assert np.array_equal(sign.w_offsets, off) and np.array_equal(sign.w_indices, idx)
    assert np.array_equal(np.abs(sign.w_values), np.abs(val))
    assert np.count_nonzero(sign.w_values < 0) == np.count_nonzero(val < 0)
    assert np.mean(np.sign(sign.w_values) != np.sign(val)) > 0.2

    weights = make_null(real, "weights", 1)
    assert np.array_equal(weights.w_offsets, off) and np.array_equal(weights.w_indices, idx)
    assert np.array_equal(np.sort(weights.w_values), np.sort(val))
    assert np.mean(weights.w_values != val) > 0.9

    erdos = make_null(real, "erdos", 1)
    assert erdos.n_edges == real.n_edges
    assert np.array_equal(np.sort(erdos.w_values), np.sort(val))
    _assert_simple_sorted_graph(erdos)
    assert not np.array_equal(erdos.w_offsets, off)
    # Uniform endpoints: about the density's share of the real synapses, not most of them.
    n = real.config.neurons
    shared = np.isin(_keys(erdos), _keys(real)).mean()
    assert shared < 5 * real.n_edges / (n * (n - 1))


def test_make_null_refuses_an_unknown_kind_and_a_negative_seed(tiny_checkpoint):
    with pytest.raises(InputError, match="unknown null kind"):
        make_null(tiny_checkpoint, "shuffle", 0)
    with pytest.raises(InputError, match=">= 0"):
        make_null(tiny_checkpoint, "degree", -1)


# ------------------------------------------------------------------ the written checkpoint
def _write_source(ckpt, root: Path, layout: str) -> Path:
    model = root / "model"
    if layout == "fly-llm-hf":  # a dataset beside it adds the anatomy
        write_fly_llm_hf(ckpt, model)
        write_connectome_dataset(ckpt, model / "dataset")
    elif layout == "wordbrain":
        write_wordbrain(ckpt, model, web_export=False, tokenizer_path=ckpt.tokenizer_path)
        write_connectome_dataset(ckpt, model / "dataset")
    else:
        write_recital_web(ckpt, model, golden_prompts=())
        write_connectome_dataset(ckpt, model / "dataset")
    return model


@pytest.mark.parametrize("layout", ["recital-web", "wordbrain", "fly-llm-hf"])
def test_a_written_null_loads_in_the_input_layout_with_the_same_parameter_bytes(
        tiny_checkpoint, tmp_path, layout):
    source = _write_source(tiny_checkpoint, tmp_path, layout)
    real = flyviz.load(source).checkpoint
    out = write_null(source, "degree", 2, tmp_path / "null")
    null = flyviz.load(out).checkpoint
    assert null.layout == real.layout == layout
    for name in PARAMETERS:
        a, b = getattr(real, name), getattr(null, name)
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    if layout == "recital-web":  # the very files, byte for byte
        for name in ("wte", "in_proj", "head_a", "head_b", "gain"):
            assert (out / f"{name}.f32").read_bytes() == (source / f"{name}.f32").read_bytes()
    expected = make_null(real, "degree", 2)
    for a, b in zip(_graph(expected), _graph(null)):
        assert np.array_equal(a, b)
    assert null.anatomy is not None and real.anatomy is not None
    assert np.array_equal(null.anatomy.positions, real.anatomy.positions)
    assert np.array_equal(null.in_index, real.in_index)
    record = null.metadata["null_model"]
    assert (record["kind"], record["seed"]) == ("degree", 2)
    assert record["source"]["weights_sha256"] == flyviz.model.identity.weights_digest(real)
    assert record["source"]["spec"] == str(source.resolve())


def test_flyviz_null_writes_and_flyviz_info_says_what_it_is_a_null_of(
        tiny_checkpoint, tmp_path, capsys):
    source = _write_source(tiny_checkpoint, tmp_path, "recital-web")
    out = tmp_path / "null"
    assert cli.main(["null", str(source), "--kind", "sign", "--seed", "5", "--out", str(out)]) == 0
    assert "sign null, seed 5" in capsys.readouterr().out
    assert cli.main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.startswith("null model"))
    assert "sign null, seed 5" in line and str(source.resolve()) in line
    again = tmp_path / "again"
    assert cli.main(["null", str(source), "--kind", "sign", "--seed", "5", "--out",
                     str(again)]) == 0
    for name in ("graph/edges_source.u16", "graph/edges_weight.f32", "graph/edges_offsets.i32"):
        assert (out / "dataset" / name).read_bytes() == (again / "dataset" / name).read_bytes()


def _one_line_exit_2(capsys, argv: list[str], match: str) -> None:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # a usage error, from argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("flyviz: error:") and match in err, err


def test_flyviz_null_into_a_folder_that_takes_no_file_is_refused_before_the_model_loads(
        capsys, monkeypatch):
    """``--out /proc/null``: root passes ``os.access`` there, so the model was loaded and the
    whole graph shuffled before the write failed. The folder is tried first."""
    import os

    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    import flyviz.commands._options as options

    def must_not_load(*_args, **_kwargs):
        raise AssertionError("the model was loaded before --out was checked")

    monkeypatch.setattr(options, "load_model_from_args", must_not_load)
    _one_line_exit_2(capsys, ["null", "demo", "--out", "/proc/flyviz-null"],
                     "cannot write --out /proc/flyviz-null: the folder /proc takes no new files")


@pytest.mark.parametrize("layout", ["recital-web", "wordbrain", "fly-llm-hf"])
def test_flyviz_null_makes_the_missing_folder_of_out(tiny_checkpoint, tmp_path, capsys,
                                                    monkeypatch, layout):
    """``--out nulls/degree-1`` with no ``nulls`` yet: made, as every command makes its
    output's folder; a write that fails leaves no folder behind."""
    source = _write_source(tiny_checkpoint, tmp_path, layout)
    out = tmp_path / "nulls" / "deeper" / "degree-1"
    assert cli.main(["null", str(source), "--kind", "degree", "--seed", "1", "--out",
                     str(out)]) == 0, capsys.readouterr().err
    assert flyviz.load(out).checkpoint.layout == layout
    assert sorted(p.name for p in out.parent.iterdir()) == ["degree-1"]

    import flyviz.analysis.nulls as nulls_module

    def full_disk(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(nulls_module, "_write_checkpoint", full_disk)
    _one_line_exit_2(capsys, ["null", str(source), "--kind", "degree", "--seed", "1", "--out",
                              str(tmp_path / "other" / "deeper" / "degree-1")],
                     "No space left on device")
    assert not (tmp_path / "other").exists()


def test_bad_input_to_flyviz_null_is_one_line_and_exit_2_and_writes_nothing(
        tiny_checkpoint, tmp_path, capsys):
    source = _write_source(tiny_checkpoint, tmp_path, "recital-web")
    before = sorted(p.name for p in tmp_path.iterdir())
    new = str(tmp_path / "new")
    _one_line_exit_2(capsys, ["null", str(source), "--kind", "shuffle", "--out", new],
                     "invalid choice")
    _one_line_exit_2(capsys, ["null", str(source), "--seed", "-1", "--out", new], ">= 0")
    _one_line_exit_2(capsys, ["null", str(source), "--out", str(source)], "is the input of")
    _one_line_exit_2(capsys, ["null", str(source), "--out", str(tmp_path)], "exists")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x", encoding="utf-8")
    _one_line_exit_2(capsys, ["null", str(source), "--out", str(a_file / "x")],
                     "file.txt is a file, not a folder")
    _one_line_exit_2(capsys, ["null", str(source), "--out", str(a_file / "no" / "x")],
                     "file.txt is a file, not a folder")
    _one_line_exit_2(capsys, ["null", str(tmp_path / "missing"), "--out", new], "no such")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["file.txt"])
    with pytest.raises(InputError, match="own folder"):
        write_null(str(source), "degree", 0, source)


# ------------------------------------------------------------------ real vs nulls
def test_a_two_sided_comparison_counts_a_value_far_below_every_null_as_extreme():
    nulls = [1.00, 1.01, 0.99, 1.00, 1.00, 1.02, 0.98, 1.01, 0.99, 1.00]
    below = compare_to_nulls(0.90, nulls, two_sided=True)
    assert below.z < -8 and below.p == pytest.approx(1 / 11)
    assert compare_to_nulls(0.90, nulls).p == 1.0  # one-sided, higher is more
    assert compare_to_nulls(1.10, nulls, two_sided=True).p == pytest.approx(1 / 11)
    inside = compare_to_nulls(1.00, nulls, two_sided=True)
    assert inside.p == pytest.approx(11 / 11)  # every null is at least as far from the mean
    assert below.to_dict()["two_sided"] is True and "two-sided" in below.line()


def test_compare_to_nulls_matches_numpy():
    rng = np.random.default_rng(0)
    nulls = rng.normal(1.0, 0.3, 9)
    real = 1.4
    found = compare_to_nulls(real, nulls)
    assert found.mean == pytest.approx(np.mean(nulls))
    assert found.sd == pytest.approx(np.std(nulls, ddof=1))
    assert found.z == pytest.approx((real - np.mean(nulls)) / np.std(nulls, ddof=1))
    assert found.p == pytest.approx((1 + np.sum(nulls >= real)) / (1 + nulls.size))
    lower = compare_to_nulls(real, nulls, higher_is_more=False)
    assert lower.p == pytest.approx((1 + np.sum(nulls <= real)) / (1 + nulls.size))
    assert found.n == 9 and found.nulls == tuple(nulls)
    fields = ROW.match(found.line())
    assert fields is not None
    assert float(fields[1]) == pytest.approx(real) and int(fields[4]) == 9
    assert float(fields[2]) == pytest.approx(found.mean, rel=1e-3)
    assert float(fields[5]) == pytest.approx(found.z, abs=0.006)
    assert float(fields[6]) == pytest.approx(found.p, rel=1e-3)
    assert compare_to_nulls(2.0, [1.0, 1.0]).z == np.inf
    # z is left out where it is undefined (one null; every value the same): it read "z nan"
    one = compare_to_nulls(1.0, [0.5])
    assert math.isnan(one.z) and one.line() == "real 1 | nulls 0.5 ± nan (n=1) | p 0.5"
    assert "z " not in compare_to_nulls(1.0, [1.0, 1.0]).line()
    assert "| z inf |" in compare_to_nulls(2.0, [1.0, 1.0]).line()
    with pytest.raises(InputError):
        compare_to_nulls(1.0, [])


def test_run_on_nulls_hands_each_seeded_null_to_the_work(tiny_checkpoint, tmp_path):
    seen: list[tuple[int, bool, str | None]] = []

    def work(null) -> float:
        expected = make_null(tiny_checkpoint, "weights", null.seed)
        seen.append((null.seed, Path(null.spec).is_dir() if null.spec else False, null.spec))
        assert np.array_equal(null.checkpoint.w_values, expected.w_values)
        return float(np.asarray(null.checkpoint.w_values)[:10].sum())

    values = run_on_nulls(tiny_checkpoint, "weights", [3, 4], work, workdir=tmp_path)
    assert [s for s, _, _ in seen] == [3, 4] and all(on_disk for _, on_disk, _ in seen)
    assert not any(Path(spec).exists() for _, _, spec in seen)  # removed after the work
    assert values[0] != values[1]
    in_memory = run_on_nulls(tiny_checkpoint, "weights", [3, 4], work, in_memory=True)
    assert in_memory == values


@pytest.fixture(scope="module")
def corpus_world(tmp_path_factory, tokenizer_path):
    """A small model folder with anatomy and a short text for the corpus commands."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.tokenizer import FlyTokenizer

    root = tmp_path_factory.mktemp("nulls")
    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=203, edges=4001, d_embed=16, vocabulary=FlyTokenizer(tokenizer_path).vocab_size,
        readout_rank=9, seed=8, tokenizer_path=tokenizer_path, name="small"))
    ckpt = dataclasses.replace(ckpt, head_b=np.asarray(ckpt.head_b) * np.float32(0.1))
    model = _write_source(ckpt, root, "recital-web")
    rng = np.random.default_rng(3)
    text = root / "story.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(_WORDS, 10)).capitalize() + "."
                                for _ in range(6)) + "\n", encoding="utf-8")
    return {"root": root, "spec": str(model), "text": str(text)}


@pytest.mark.parametrize(("command", "nulls", "kind"), [("sweep", "degree-sign:2", "degree-sign"),
                                                         ("importance", "2", "degree")])
def test_nulls_2_prints_real_vs_nulls_for_the_headline_numbers(corpus_world, capsys, tmp_path,
                                                               command, nulls, kind):
    out = tmp_path / "result.csv"
    code = cli.main([command, corpus_world["spec"], "--by", "side", "--text",
                     corpus_world["text"], "--out", str(out), "--workers", "0", "--context",
                     "24", "--nulls", nulls, "--null-seed", "3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    start = lines.index(f"real vs 2 {kind} null(s) (seeds 3-4), nats/token:")
    rows = {line.split("  real ")[0].strip(): ROW.search(line) for line in lines[start + 1:]}
    assert set(rows) == {"untouched CE", "top group dCE", "top-3 dCE sum"}
    assert all(m is not None and m[4] == "2" for m in rows.values())
    real_ce = re.search(r"untouched cross-entropy (\S+) nats/token", captured.out)
    assert real_ce is not None
    ce = rows["untouched CE"]
    assert float(ce[1]) == pytest.approx(float(real_ce[1]), abs=1e-3)
    assert float(ce[2]) != pytest.approx(float(ce[1]), abs=1e-6)  # the nulls ran on other graphs
    assert all(min(abs(float(m[6]) - p) for p in (1 / 3, 2 / 3, 1.0)) < 1e-3
               for m in rows.values())
    assert f"null 2 of 2: {kind}, seed 4" in captured.err
    # The nulls and their results are gone; only the real run's files are left.
    assert all(p.name.startswith("result.") for p in tmp_path.iterdir())


def test_bad_nulls_options_are_one_line_and_exit_2(corpus_world, capsys, tmp_path):
    base = ["sweep", corpus_world["spec"], "--by", "side", "--text", corpus_world["text"],
            "--out", str(tmp_path / "r.csv"), "--workers", "0"]
    _one_line_exit_2(capsys, base + ["--nulls", "-1"], "--nulls")
    _one_line_exit_2(capsys, base + ["--nulls", "2", "--null-seed", "-4"], ">= 0")
    _one_line_exit_2(capsys, base + ["--nulls", "2", "--null-kind", "bogus"], "invalid choice")
    _one_line_exit_2(capsys, base + ["--nulls", "bogus:2"], "unknown null kind 'bogus'")
    _one_line_exit_2(capsys, base + ["--nulls", "sign:two"], "KIND:N")
    _one_line_exit_2(capsys, base + ["--nulls", "sign:2", "--null-kind", "weights"],
                     "different kinds")
    assert not (tmp_path / "r.csv").exists()


def test_a_type_pairs_null_of_a_model_without_cell_types_is_refused_before_the_real_run(
        tiny_checkpoint, capsys, tmp_path, tokenizer_path):
    bare = dataclasses.replace(tiny_checkpoint, anatomy=None)
    model = tmp_path / "bare"
    write_fly_llm_hf(bare, model)  # no dataset beside it: no anatomy
    task = tmp_path / "task.jsonl"
    task.write_text('{"prompt": " cat cat cat", "target": " lily", "versus": " tom"}\n'
                    '{"prompt": " dog dog dog", "target": " tom", "versus": " lily"}\n', "utf-8")
    out = tmp_path / "circuit"
    # One line and nothing else on stderr: the real search (which logs its m(M) and its
    # progress) never started.
    _one_line_exit_2(capsys, ["circuit", str(model), "--task", str(task), "--out", str(out),
                              "--workers", "0", "--nulls", "type-pairs:2"],
                     "needs the neurons' cell types")
    assert not out.exists()


@pytest.mark.parametrize("command", ["sweep", "importance", "circuit"])
def test_a_huge_nulls_count_is_refused_before_the_model_loads(capsys, tmp_path, command):
    # A model that does not exist: the count is refused first (a billion nulls once built a
    # billion-entry list and was killed at 23.8 GB; a count past the bound would run for days).
    argv = [command, str(tmp_path / "no-such-model"), "--nulls", "1000000000"]
    argv += (["--task", str(tmp_path / "t.jsonl")] if command == "circuit" else
             ["--by", "side", "--text", str(tmp_path / "t.txt"), "--out", str(tmp_path / "r")])
    _one_line_exit_2(capsys, argv, "is more than 1,000")
    _one_line_exit_2(capsys, argv[:-1] + ["degree:100000"], "is more than 1,000")
    assert list(tmp_path.iterdir()) == []
