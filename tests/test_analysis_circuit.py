"""Automatic circuits: a planted chain is found and keeps the task, random sets do not; the
ablations equal the engine's own interventions; CPR/CMD; 1 vs 2 workers; the task file."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.sparse import csr_matrix

from flyviz.analysis.circuit import (CircuitSettings, Runner, area, curve_sizes, find_circuit,
                                     make_units)
from flyviz.analysis.circuit_tasks import load_task, task_from_prompts
from flyviz.errors import InputError
from flyviz.model.checkpoint import validate_checkpoint
from flyviz.model.engine import Engine
from flyviz.model.explain import explained_value
from flyviz.model.interventions import Clamp, Cut, Silence, resolve
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import write_connectome_dataset, write_wordbrain


def planted_model(tokenizer_path, neurons: int = 200, seed: int = 5):
    """A random, weakly wired background and a chain c0 -> c1 -> c2 -> c3 that carries the
    task: c0 reads the current token (+ for ' cat', - for ' dog'), each link is strong, and
    c3 alone drives the readout's ' lily' - ' tom' difference (the background reaches those
    two rows only weakly). Returns the checkpoint and the chain."""
    tok = FlyTokenizer(tokenizer_path)
    ck = make_random_checkpoint(neurons=neurons, edges=neurons * 12, d_embed=16,
                                vocabulary=tok.vocab_size, readout_rank=None, seed=seed,
                                tokenizer_path=tokenizer_path, name="planted")
    n = neurons
    rng = np.random.default_rng(seed + 1)
    cat, dog = tok.encode(" cat")[0], tok.encode(" dog")[0]
    lily, tom = tok.encode(" lily")[0], tok.encode(" tom")[0]
    in_index = np.asarray(ck.in_index)
    c0 = int(in_index[0])  # slot 0 (the token being read), its first neuron
    c1, c2, c3 = (int(i) for i in rng.choice(np.setdiff1d(np.arange(n), in_index), 3,
                                             replace=False))
    chain = [c0, c1, c2, c3]
    dense = csr_matrix((np.asarray(ck.w_values, np.float64), np.asarray(ck.w_indices),
                        np.asarray(ck.w_offsets)), shape=(n, n)).toarray() * 0.2
    dense[chain, :] = 0.0
    dense[c1, c0] = dense[c2, c1] = dense[c3, c2] = 2.5
    graph = csr_matrix(dense)
    graph.sort_indices()
    in_proj = np.asarray(ck.in_proj, np.float32) * np.float32(0.1)
    wte = np.asarray(ck.wte, np.float64)
    in_proj[0][:, 0] = (np.linalg.pinv(np.stack([wte[cat], wte[dog]]))
                        @ np.array([1.5, -1.5])).astype(np.float32)
    bias = (0.02 * rng.standard_normal(n)).astype(np.float32)
    bias[chain] = 0.0
    gain = np.asarray(ck.gain, np.float32).copy()
    rec_gain = np.asarray(ck.rec_gain, np.float32).copy()
    gain[chain] = rec_gain[chain] = 1.0
    head = np.asarray(ck.head, np.float32) * np.float32(0.3)
    head[[lily, tom]] *= np.float32(0.05 / 0.3)
    head[lily, c3], head[tom, c3] = 3.0, -3.0
    ck = dataclasses.replace(
        ck, w_offsets=graph.indptr.astype(np.int64), w_indices=graph.indices.astype(np.int32),
        w_values=graph.data.astype(np.float32), in_proj=in_proj, bias=bias, gain=gain,
        rec_gain=rec_gain, head=head, ln_weight=np.ones(n, np.float32),
        ln_bias=np.zeros(n, np.float32))
    return validate_checkpoint(ck), chain


def planted_entries(count: int = 8) -> list[dict]:
    """' cat cat ..' predicts ' lily' over ' tom', ' dog dog ..' the other way round."""
    out = []
    for i in range(count):
        word, target, versus = (" cat", " lily", " tom") if i % 2 == 0 else \
            (" dog", " tom", " lily")
        out.append({"prompt": word * (5 + i % 3), "target": target, "versus": versus})
    return out


@pytest.fixture(scope="module")
def planted(tokenizer_path):
    ck, chain = planted_model(tokenizer_path)
    tok = FlyTokenizer(tokenizer_path)
    task = task_from_prompts(planted_entries(), tok, ck.config.vocabulary,
                             ck.config.bos_token_id)
    return ck, chain, task


def _engine_metric(ck, task, interventions=()) -> float:
    """The task's mean metric from the single-stream engine with ``interventions``."""
    engine = Engine(ck, 1, kernel="scipy", interventions=resolve(ck, list(interventions)))
    total = 0.0
    for p in task.prompts:
        engine.reset()
        for t in p.ids:
            logits = engine.step(t)
        total += explained_value(logits, p.target, p.versus)
    return total / len(task.prompts)


# ------------------------------------------------------------------ the planted chain
@pytest.mark.parametrize("score", ["flow", "gradient", "ig"])
@pytest.mark.parametrize("ablation", ["mean", "resample", "zero"])
def test_the_found_circuit_is_the_planted_chain_and_random_sets_lose_the_task(
        planted, score, ablation):
    ck, chain, task = planted
    settings = CircuitSettings(score=score, ablation=ablation)  # tolerance 0.1
    result = find_circuit(None, ck, task, settings, workers=0)
    circuit = set(int(i) for i in result.circuit_neurons(ck))
    assert result.faithful and set(chain) <= circuit
    assert abs(1.0 - result.faithfulness) <= 0.1
    assert result.spread()["within"] >= 0.9
    if ablation != "zero":  # zero ablation's LayerNorm magnifies the chain alone past 1.1
        assert result.size == len(chain)  # the bisection went down to the chain itself
    # Random sets of the circuit's size, measured the same way, lose the task.
    runner = Runner(ck, task, settings, make_units(ck, "neurons"))
    try:
        runner.full_model()
        rng = np.random.default_rng(0)
        masks = np.zeros((12, ck.config.neurons), dtype=bool)
        for row in masks:
            row[rng.choice(ck.config.neurons, result.size, replace=False)] = True
        f = (runner.measure_neurons(masks) - result.empty_metric) / (
            result.full_metric - result.empty_metric)
    finally:
        runner.close()
    assert np.all(f <= 0.2), f


def random_model(tokenizer_path, neurons: int = 200, seed: int = 1):
    """An untrained random model: nothing in it carries the planted task."""
    tok = FlyTokenizer(tokenizer_path)
    return validate_checkpoint(make_random_checkpoint(
        neurons=neurons, edges=neurons * 12, d_embed=16, vocabulary=tok.vocab_size,
        readout_rank=None, seed=seed, tokenizer_path=tokenizer_path, name="random"))


@pytest.mark.parametrize(("neurons", "seed"), [(200, 1), (500, 2), (1000, 3)])
def test_on_a_random_model_no_circuit_below_the_whole_brain_is_faithful(tokenizer_path, neurons,
                                                                      seed):
    """The task's mean f of a random model passes through 1 by chance (at 123 of 1,000 neurons
    for seed 3, with prompts from -4 to 2 averaging to it), and overshoots to several times
    the whole model: neither is a circuit."""
    ck = random_model(tokenizer_path, neurons, seed)
    tok = FlyTokenizer(tokenizer_path)
    task = task_from_prompts(planted_entries(), tok, ck.config.vocabulary,
                             ck.config.bos_token_id)
    result = find_circuit(None, ck, task, CircuitSettings(), workers=0)
    assert not result.faithful
    assert result.size == neurons and result.faithfulness == 1.0
    assert result.to_json(ck)["circuit"]["faithful"] is False
    # Every measured circuit below the whole brain fails the rule, each for a stated reason.
    judged = {p.size: result.judge(p) for p in result.points if 0 < p.size < neurons}
    assert judged and "faithful" not in judged.values()
    assert set(judged.values()) <= {"overshoots", "undershoots", "prompts"}
    # The one closest to faithful is named: within on the task, the most prompts within.
    close = [p for p in result.points if 0 < p.size < neurons and result.judge(p) == "prompts"]
    miss = result.near_miss
    if close:
        best = max(result.spread(p)["within"] for p in close)
        assert miss in close and result.spread(miss)["within"] == best
        assert result.to_json(ck)["circuit"]["near_miss"]["nodes"] == miss.size
    else:
        assert miss is None
    assert len(result.measured_below_whole) == len(judged)


def _one_at_a_time(ck, task, order, sizes, ablation, mu):
    """Each circuit (the top k of ``order``) run alone on the single-stream engine, prompt by
    prompt, with every other neuron silenced (zero) or clamped to its mean (mean)."""
    n = ck.config.neurons
    metrics = []
    for k in sizes:
        outside = np.setdiff1d(np.arange(n), order[:k])
        if ablation == "zero":
            interventions = [Silence(outside.tolist())] if outside.size else []
        else:
            interventions = [Clamp([int(i)], float(mu[i])) for i in outside]
        metrics.append(_engine_metric(ck, task, interventions))
    return np.array(metrics)


@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_every_measured_circuit_equals_its_own_run_one_at_a_time(tokenizer_path, ablation):
    """Every point of the curve and of the bisection is run, and a batched run (many
    circuits and prompts, one per column of the batched engine) measures each column's own
    circuit: each equals the single-stream engine run of that circuit alone.

    Planted breaks this test catches (each tried by planting it in ``Runner.prompt_sums``
    or ``find_circuit`` and seeing this test fail): every column of a batch measuring the
    first job's circuit (``keep[:, c] = masks[batch[0].circuit]``), and curve points
    estimated from the scores instead of run. On a random model the curve swings from
    f = -44 to 6, so no two circuits' metrics agree by chance."""
    ck = random_model(tokenizer_path)
    tok = FlyTokenizer(tokenizer_path)
    task = task_from_prompts(planted_entries(), tok, ck.config.vocabulary,
                             ck.config.bos_token_id)
    result = find_circuit(None, ck, task, CircuitSettings(ablation=ablation, streams=64),
                          workers=0)
    points = [p for p in result.points if 0 < p.size < ck.config.neurons]
    assert len(points) >= 10 and len({round(p.metric, 3) for p in points}) == len(points)
    alone = _one_at_a_time(ck, task, result.order, [p.size for p in points], ablation,
                           result.baseline)
    np.testing.assert_allclose([p.metric for p in points], alone, rtol=1e-4, atol=1e-4)


def test_a_resample_ablation_batched_equals_one_column_at_a_time(tokenizer_path):
    """Resample ablation (each prompt's ablated neurons at the next prompt's untouched states,
    step by step) has no intervention to compare with: the batched measurement of many
    circuits equals the same runner with one column per run (the planted break of the test
    above, every column measuring the first circuit, fails this one too)."""
    ck = random_model(tokenizer_path)
    tok = FlyTokenizer(tokenizer_path)
    task = task_from_prompts(planted_entries(), tok, ck.config.vocabulary,
                             ck.config.bos_token_id)
    rng = np.random.default_rng(3)
    masks = np.zeros((6, ck.config.neurons), dtype=bool)
    for row, size in zip(masks, (5, 20, 50, 100, 150, 199)):
        row[rng.choice(ck.config.neurons, size, replace=False)] = True
    measured = []
    for streams in (64, 1):
        runner = Runner(ck, task, CircuitSettings(ablation="resample", streams=streams),
                        make_units(ck, "neurons"))
        try:
            runner.full_model()
            measured.append(runner.prompt_sums(masks))
        finally:
            runner.close()
    np.testing.assert_allclose(measured[0], measured[1], rtol=1e-5, atol=1e-5)
    # The ablation acts: another prompt's states are not the prompt's own.
    assert np.ptp(measured[0].sum(axis=1)) > 1e-2


def test_the_whole_model_and_the_empty_circuit_are_the_engines_own_runs(planted):
    """m(M) is the untouched run; m(∅) with zero ablation is Silence('all'), with mean
    ablation a Clamp of every neuron to its mean over the task (the single-stream engine)."""
    ck, _, task = planted
    n = ck.config.neurons
    zero = find_circuit(None, ck, task, CircuitSettings(), workers=0)
    assert zero.curve[0].size == 0 and zero.curve[-1].size == n
    assert zero.curve[-1].metric == pytest.approx(_engine_metric(ck, task), rel=1e-5)
    assert zero.full_metric == zero.curve[-1].metric
    assert zero.empty_metric == pytest.approx(
        _engine_metric(ck, task, [Silence(list(range(n)))]), abs=1e-6)
    assert (zero.curve[0].faithfulness, zero.curve[-1].faithfulness) == (0.0, 1.0)
    runner = Runner(ck, task, CircuitSettings(ablation="mean"), make_units(ck, "neurons"))
    try:
        runner.full_model()
        mu = runner.baseline
        empty = runner.measure([0])[0]
        keep = np.zeros(n, dtype=bool)
        keep[:n // 2] = True
        half = runner.measure_neurons(keep[None])[0]
    finally:
        runner.close()
    # The mean over every prompt's every position, from the engine's own states.
    engine = Engine(ck, 1, kernel="scipy")
    states = []
    for p in task.prompts:
        engine.reset()
        for t in p.ids:
            engine.step(t)
            states.append(engine.state.astype(np.float64))
    np.testing.assert_allclose(mu, np.mean(states, axis=0), atol=1e-6)
    clamps = [Clamp([i], float(mu[i])) for i in range(n)]
    assert empty == pytest.approx(_engine_metric(ck, task, clamps), rel=1e-4, abs=1e-5)
    assert half == pytest.approx(_engine_metric(ck, task, clamps[n // 2:]), rel=1e-4, abs=1e-5)


def test_edge_circuits_keep_the_chain_and_no_edge_is_the_graph_cut(planted):
    ck, chain, task = planted
    result = find_circuit(None, ck, task, CircuitSettings(edges=True, ablation="zero"),
                          workers=0)
    pre, post, _ = result.circuit_edges(ck)
    links = set(zip(pre.tolist(), post.tolist()))
    assert {(chain[0], chain[1]), (chain[1], chain[2]), (chain[2], chain[3])} <= links
    assert result.faithful and abs(1.0 - result.faithfulness) <= 0.1 and result.size == 3
    assert result.units.count == int(np.asarray(ck.w_offsets)[-1])
    assert result.empty_metric == pytest.approx(_engine_metric(ck, task, [Cut("all", "all")]),
                                                abs=1e-6)


def test_types_keep_every_neuron_of_the_chosen_types(planted):
    ck, chain, task = planted
    result = find_circuit(None, ck, task, CircuitSettings(nodes="types"), workers=0)
    neurons = result.circuit_neurons(ck)
    kept_types = set(result.to_json(ck)["circuit"]["groups"])
    types = np.asarray(ck.anatomy.cell_type)
    assert set(types[neurons]) == kept_types
    assert np.sum(np.isin(types, list(kept_types))) == neurons.size
    assert {types[i] for i in chain} <= kept_types
    assert result.faithfulness >= 0.8


def test_cpr_and_cmd_are_the_trapezoid_areas_of_the_curve(planted):
    ck, _, task = planted
    result = find_circuit(None, ck, task, CircuitSettings(ablation="mean", points=14),
                          workers=0)
    curve = result.to_json(ck)["curve"]
    assert len(curve) >= 15 and curve[0]["nodes"] == 0 and curve[-1]["nodes"] == 200
    sizes = [p["nodes"] for p in curve]
    assert sizes == sorted(set(sizes)) and sizes[1] == 10
    x = np.array(sizes) / 200
    f = np.array([p["faithfulness"] for p in curve])
    assert result.cpr == pytest.approx(np.trapezoid(f, x), rel=1e-12)
    assert result.cmd == pytest.approx(np.trapezoid(np.abs(1 - f), x), rel=1e-12)
    assert area([0, 0.5, 1], [0, 1, 1]) == pytest.approx(0.75)


def test_curve_sizes_are_log_spaced_distinct_and_end_at_all():
    sizes = curve_sizes(49_393, 12)
    assert len(sizes) == 12 and sizes[0] == 10 and sizes[-1] == 49_393
    ratios = np.diff(np.log(sizes))
    assert np.ptp(ratios) < 0.05  # equal steps in log, but for rounding to whole sizes
    assert curve_sizes(15, 12) == list(range(10, 16))  # only 6 sizes exist from 10 to 15
    assert curve_sizes(5, 12) == [1, 2, 3, 4, 5]
    assert len(curve_sizes(40, 20)) == 20


def test_nothing_to_explain_is_refused_before_the_scores(planted):
    ck, _, task = planted
    # A readout that no state moves: the metric is the same with and without the brain.
    flat = dataclasses.replace(ck, head=np.zeros_like(np.asarray(ck.head)))
    with pytest.raises(InputError, match="nothing to explain"):
        find_circuit(None, flat, task, CircuitSettings(), workers=0)


# ------------------------------------------------------------------ workers
@pytest.fixture(scope="module")
def on_disk(planted, tmp_path_factory, tokenizer_path):
    ck, chain, task = planted
    root = tmp_path_factory.mktemp("circuit")
    write_wordbrain(ck, root / "model", tokenizer_path=tokenizer_path)
    write_connectome_dataset(ck, root / "connectome")
    return str(root / "model"), str(root / "connectome")


@pytest.mark.slow
def test_one_and_two_workers_give_the_same_scores(planted, on_disk, dask_workers):
    """On one local worker process, then the same cluster scaled to two (the first keeps
    its model: one cluster to start and close, not two)."""
    from flyviz.model.resolve import load_model

    spec, dataset = on_disk
    ck = load_model(spec, dataset_dir=dataset)
    _, _, task = planted
    settings = CircuitSettings(edges=False, score="flow", min_tasks=4)
    local = find_circuit(None, ck, task, settings, workers=0)
    one = find_circuit(spec, ck, task, settings, dataset=dataset, workers=None,
                       scheduler=dask_workers.scaled_to(1))
    two = find_circuit(spec, ck, task, settings, dataset=dataset, workers=None,
                       scheduler=dask_workers.scaled_to(2))
    assert one.workers == 1 and two.workers == 2
    assert np.array_equal(one.scores, two.scores)
    assert np.array_equal(local.scores, one.scores)
    assert [p.metric for p in one.curve] == [p.metric for p in two.curve]


# ------------------------------------------------------------------ tasks
def test_a_task_file_reads_targets_ids_and_a_text(tmp_path, tokenizer_path):
    tok = FlyTokenizer(tokenizer_path)
    path = tmp_path / "task.jsonl"
    path.write_text('{"prompt": "the cat", "target": " dog"}\n\n'
                    '{"prompt": "the dog", "target_id": 5, "versus": " cat"}\n', "utf-8")
    task = load_task(path, tok, tok.vocab_size, 1)
    assert task.kind == "logit" and len(task.prompts) == 2
    a, b = task.prompts
    assert a.ids == (1, *tok.encode("the cat")) and a.target == tok.encode(" dog")[0]
    assert a.versus is None and (b.target, b.versus, b.line) == (5, tok.encode(" cat")[0], 3)
    text = tmp_path / "story.txt"
    text.write_text("the cat saw the dog. the dog ran.\n\nthe sun was red.\n", "utf-8")
    story = load_task(text, tok, tok.vocab_size, 1, context=8)
    assert story.kind == "text" and all(p.target is None for p in story.prompts)
    assert story.terms == sum(len(p.ids) - 1 for p in story.prompts)


def test_a_text_tasks_metric_is_its_mean_log_probability(planted, tmp_path, tokenizer_path):
    ck, _, _ = planted
    tok = FlyTokenizer(tokenizer_path)
    text = tmp_path / "cats.txt"
    text.write_text(" cat cat cat dog dog\n\n dog dog cat\n", "utf-8")
    task = load_task(text, tok, ck.config.vocabulary, 1)
    runner = Runner(ck, task, CircuitSettings(), make_units(ck, "neurons"))
    try:
        full = runner.full_model()
    finally:
        runner.close()
    engine = Engine(ck, 1, kernel="scipy")
    logp = []
    for p in task.prompts:
        engine.reset()
        for s, t in enumerate(p.ids[:-1]):
            z = engine.step(t).astype(np.float64)
            logp.append(z[p.ids[s + 1]] - z.max() - np.log(np.exp(z - z.max()).sum()))
    assert full == pytest.approx(np.mean(logp), rel=1e-5)
    result = find_circuit(None, ck, task, CircuitSettings(ablation="mean"), workers=0)
    assert result.curve[-1].metric == pytest.approx(full) and result.full_metric < 0


@pytest.mark.parametrize("text, message", [
    ('{"target": " dog"}', "line 1 has no \"prompt\""),
    ('{"prompt": "a"}\n{"prompt": "b", "target": " dog"', "line 1 has no \"target\""),
    ('{"prompt": "a", "target": " dog"}\n{"prompt": "b", "target": " dog"', "line 2 is not JSON"),
    ('{"prompt": "a", "target": " zyxw"}', "is 5 tokens"),
    ('{"prompt": "a", "target": " dog cat"}', "is 2 tokens"),
    ('{"prompt": "a", "target": ""}', "no token"),
    ('{"prompt": "a", "target_id": 100000}', "outside the vocabulary"),
    ('{"prompt": "a", "target": " dog", "versus": " dog"}', "versus is the target"),
    ("\n\n", "holds no prompt"),
    ('[1, 2]', "not a JSON object"),
    ('{"prompt": "  ", "target": " dog"}', "not empty"),
])
def test_bad_task_lines_are_one_error(tmp_path, tokenizer_path, text, message):
    tok = FlyTokenizer(tokenizer_path)
    path = tmp_path / "bad.jsonl"
    path.write_text(text, "utf-8")
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as info:
        load_task(path, tok, tok.vocab_size, 1)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("settings, message", [
    (CircuitSettings(tolerance=0.0), "--tolerance"),
    (CircuitSettings(tolerance=1.0), "--tolerance"),
    (CircuitSettings(tolerance=float("nan")), "--tolerance"),
    (CircuitSettings(prompt_share=0.0), "--prompt-share"),
    (CircuitSettings(prompt_share=1.5), "--prompt-share"),
    (CircuitSettings(edges=True, ablation="resample"), "--ablation resample"),
    (CircuitSettings(points=1), "--points"),
    (CircuitSettings(edges=True, nodes="types"), "--edges"),
    (CircuitSettings(score="best"), "--score"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(InputError, match=message):
        settings.validate()
