"""Estimated lesions: against an independent float64 forward + backward, against the exact
silence of one quiet neuron, workers and resume bit-identical, files, the CLI, bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_matrix

import flyviz
from flyviz import cli
from flyviz.analysis import cluster
from flyviz.analysis import importance_tasks
from flyviz.analysis.corpus import build_corpus
from flyviz.analysis.importance import (ImportanceSettings, agreement, companion_paths,
                                        merge_partials, plan_chunks, read_neuron_table,
                                        run_importance, window_scores)
from flyviz.analysis.sweep import LesionMap, SweepSettings, run_sweep, sweep_groups
from flyviz.model.attribution import BackwardEngine
from flyviz.model.checkpoint import validate_checkpoint
from flyviz.model.engine import Engine
from flyviz.model.resolve import load_model
from flyviz.model.synthetic import _WORDS, make_random_checkpoint
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import write_fly_llm_hf

SETTINGS = ImportanceSettings(context=20, chunk_tokens=64, min_tasks=5)

#: Single neurons silenced exactly against their estimates (the strongest; half as many more
#: from the middle of the ranking).
SINGLES = 6


def _stories(seed: int, count: int) -> str:
    rng = np.random.default_rng(seed)
    return "\n\n".join(" ".join(rng.choice(_WORDS, rng.integers(3, 14))).capitalize() + "."
                       for _ in range(count)) + "\n"


# ------------------------------------------------------------- the float64 reference
class Reference:
    """Forward pass and backward sweep of a text's summed cross-entropy, dense float64,
    written from the equations of fly-formats.md 1.5 (no flyviz engine code)."""

    def __init__(self, ck, silence: int | None = None):
        cfg = ck.config
        f = np.float64
        self.ck, self.n, self.k, self.slot = ck, cfg.neurons, cfg.delay_k, cfg.neurons_per_slot
        self.lam, self.eps, self.pad = float(cfg.leak), float(cfg.layer_norm_eps), cfg.pad_token_id
        self.g, self.r, self.b = (np.asarray(getattr(ck, a), f) for a in ("gain", "rec_gain",
                                                                         "bias"))
        self.wte, self.in_proj = np.asarray(ck.wte, f), np.asarray(ck.in_proj, f)
        self.in_index = np.asarray(ck.in_index, np.int64)
        self.out = np.asarray(ck.out_index, np.int64)
        self.lnw, self.lnb = np.asarray(ck.ln_weight, f), np.asarray(ck.ln_bias, f)
        self.W = csr_matrix((np.asarray(ck.w_values, f), np.asarray(ck.w_indices, np.int64),
                             np.asarray(ck.w_offsets, np.int64)), shape=(self.n, self.n)).toarray()
        self.head = (np.asarray(ck.head, f) if ck.head is not None
                     else np.asarray(ck.head_b, f) @ np.asarray(ck.head_a, f))
        self.silence = silence

    def forward(self, ids):
        x = np.zeros(self.n)
        xs, us = [], []
        for t in range(len(ids)):
            d = np.zeros(self.n)
            for j in range(self.k):
                tok = ids[t - j] if t - j >= 0 else self.pad
                d[self.in_index[j * self.slot:(j + 1) * self.slot]] = self.wte[tok] @ self.in_proj[j]
            u = self.g * (self.r * (self.W @ x) + d) + self.b
            x = (1 - self.lam) * x + self.lam * np.tanh(u)
            if self.silence is not None:
                x[self.silence] = 0.0
            xs.append(x.copy())
            us.append(u)
        return xs, us

    def readout(self, x):
        h = x[self.out]
        scale = 1.0 / np.sqrt(h.var() + self.eps)
        z = (h - h.mean()) * scale
        return self.head @ (z * self.lnw + self.lnb), z, scale

    def ce_and_seed(self, x, target):
        """CE of one position and dCE/dx (the whole LayerNorm differentiated)."""
        logits, z, scale = self.readout(x)
        top = logits.max()
        log_p = logits - top - np.log(np.exp(logits - top).sum())
        grad_logits = np.exp(log_p)
        grad_logits[target] -= 1.0
        gz = (self.head.T @ grad_logits) * self.lnw
        gh = scale * (gz - gz.mean() - z * np.mean(gz * z))
        seed = np.zeros(self.n)
        np.add.at(seed, self.out, gh)
        return -log_p[target], seed

    def window(self, ids):
        """(sum_t x_t * dCE_sum/dx_t, CE sum, positions) of one window."""
        xs, us = self.forward(ids)
        P = len(ids) - 1
        ce, seeds = 0.0, []
        for t in range(P):
            c, s = self.ce_and_seed(xs[t], ids[t + 1])
            ce += c
            seeds.append(s)
        # v_t = dCE/dx_t (total) = seed_t + J_{t+1}^T v_{t+1}; a silence sets every x_i(t), so
        # its derivative holds x_i(t+1) fixed: v_i(t) - J_{t+1}[i, i] v_i(t+1).
        total = np.zeros(self.n)
        v_next, diag_next = np.zeros(self.n), np.zeros(self.n)
        for t in range(len(ids) - 1, -1, -1):
            v = seeds[t].copy() if t < P else np.zeros(self.n)
            if t + 1 < len(ids):
                J = (1 - self.lam) * np.eye(self.n) + (
                    self.lam * (1.0 - np.tanh(us[t + 1]) ** 2) * self.g * self.r)[:, None] * self.W
                v += J.T @ v_next
                diag_next = np.diag(J)
            total += xs[t] * (v - diag_next * v_next)
            v_next = v
        return total, ce, P

    def corpus(self, corpus):
        """(ΔCE_est per neuron, mean CE) over every window of a corpus."""
        total, ce, positions = np.zeros(self.n), 0.0, 0
        for lo, hi in zip(corpus.offsets[:-1], corpus.offsets[1:]):
            t, c, p = self.window([int(i) for i in corpus.tokens[lo:hi]])
            total, ce, positions = total + t, ce + c, positions + p
        return -total / positions, ce / positions


def _odd(tokenizer_path, vocabulary, rank, seed):
    ck = make_random_checkpoint(neurons=347, edges=4111, d_embed=13, delay_k=8,
                                neurons_per_slot=7, vocabulary=vocabulary, readout_rank=rank,
                                seed=seed, tokenizer_path=tokenizer_path, name="odd")
    # Logits of a trained model's size (a CE of a few nats), as in the sweep's tests.
    if ck.head_b is not None:
        ck = dataclasses.replace(ck, head_b=np.asarray(ck.head_b) * np.float32(0.1))
    else:
        ck = dataclasses.replace(ck, head=np.asarray(ck.head) * np.float32(0.1))
    return validate_checkpoint(ck)


@pytest.mark.parametrize("rank", [None, 5], ids=["dense-head", "rank-5-head"])
def test_every_neurons_estimate_equals_a_float64_forward_and_backward(
        tmp_path, tokenizer_path, tokenizer_vocabulary, rank):
    ck = _odd(tokenizer_path, tokenizer_vocabulary, rank, seed=4 if rank is None else 9)
    text = tmp_path / "story.txt"
    text.write_text(_stories(5, 6), encoding="utf-8")
    corpus = build_corpus([text], FlyTokenizer(tokenizer_path), context=SETTINGS.context)
    assert corpus.n_windows > 2                      # several windows, each from zero
    run = run_importance(None, ck, corpus, [], None, SETTINGS, workers=0)
    expected, baseline = Reference(ck).corpus(corpus)
    assert run.estimate.shape == (347,) and run.estimate.dtype == np.float64
    assert np.abs(expected).max() > 1e-3             # something to get right
    np.testing.assert_allclose(run.estimate, expected, rtol=0, atol=1e-5)
    assert run.baseline_cross_entropy == pytest.approx(baseline, abs=1e-5)
    assert run.positions == corpus.counted_tokens


def test_a_quiet_neurons_estimate_is_its_exact_silence_to_second_order(
        tokenizer_path, tokenizer_vocabulary):
    """Scaling one neuron's gain down makes its state tiny: the exact ΔCE of silencing it
    (float64, by finite difference of two runs) and the estimate then differ by the
    second-order term, which shrinks as the square of the state."""
    base = _odd(tokenizer_path, tokenizer_vocabulary, 7, seed=12)
    tok = FlyTokenizer(tokenizer_path)
    ids = [base.config.bos_token_id] + tok.encode("the little dog saw a big red ball and ran "
                                                   "home to the old house")
    neuron = int(np.asarray(base.out_index)[3])       # read out: it matters
    errors, sizes = [], []
    for scale in (0.01, 0.005):
        gain = np.array(base.gain, dtype=np.float32)
        bias = np.array(base.bias, dtype=np.float32)
        gain[neuron] *= np.float32(scale)
        bias[neuron] = 0.0
        ck = validate_checkpoint(dataclasses.replace(base, gain=gain, bias=bias))
        engine, backward = Engine(ck, 1), BackwardEngine(ck, threads=1)
        try:
            total, _, positions = window_scores(ck, engine, backward, ids)
        finally:
            backward.close()
            engine.close()
        estimate = -total[neuron] / positions
        untouched = Reference(ck).window(ids)[1]
        silenced_ref = Reference(ck, silence=neuron)
        xs, _ = silenced_ref.forward(ids)
        silenced = sum(silenced_ref.ce_and_seed(xs[t], ids[t + 1])[0]
                       for t in range(len(ids) - 1))
        exact = (silenced - untouched) / positions
        state = max(abs(x[neuron]) for x in Reference(ck).forward(ids)[0])
        assert abs(exact - estimate) < 0.02 * abs(exact), (exact, estimate)
        errors.append(abs(exact - estimate))
        sizes.append(state)
    # Half the state, about a quarter of the error: the difference is second order.
    assert sizes[1] == pytest.approx(sizes[0] / 2, rel=0.1)
    assert 2.5 < errors[0] / errors[1] < 6.0, errors


# ------------------------------------------------------------------ workers, files
@pytest.fixture(scope="module")
def world(small_world):
    """A small model with anatomy, loadable by workers, a text and its corpus."""
    return small_world("importance", neurons=203, edges=4001, seed=8, anatomy=True,
                       logit_scale=0.1, text=_stories(3, 12), context=SETTINGS.context)


def _key(row):
    """A row's fields but the NaN ones (kl, top-1 agreement), for exact comparison."""
    return (row.rank, row.group, row.query, row.neurons, row.delta_ce, row.cross_entropy,
            row.positions)


def _run(world, out, workers=0, by="type", **kwargs):
    groups = sweep_groups(world["model"], by)
    return run_importance(world["spec"], world["model"], world["corpus"], groups, out,
                          SETTINGS, by=by, dataset=world["dataset"], workers=workers, **kwargs)


@pytest.fixture(scope="module")
def in_process(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "types.csv"
    return out, _run(world, out)


def test_groups_are_sums_of_their_neurons_and_the_files_hold_them(world, in_process):
    out, run = in_process
    assert run.tasks >= SETTINGS.min_tasks
    groups = {g.name: g for g in sweep_groups(world["model"], "type")}
    for row in run.rows:
        assert row.delta_ce == float(np.sum(run.estimate[groups[row.group].neurons]))
    assert [r.delta_ce for r in run.rows] == sorted((r.delta_ce for r in run.rows), reverse=True)
    lesions = LesionMap(out)                          # the lesion-map format, read as one
    lesions.check_model(world["model"])
    assert lesions.info["estimate"] is True and lesions.mode == "silence"
    assert [_key(r) for r in lesions.rows] == [_key(r) for r in run.rows]
    assert np.isnan(lesions.rows[0].kl) and np.isnan(lesions.rows[0].top1_agreement)
    paths = companion_paths(out)
    info, columns = read_neuron_table(paths["neurons"])
    assert info["model"]["weights_sha256"] == lesions.model["weights_sha256"]
    np.testing.assert_array_equal(columns["delta_ce_est"], run.estimate)
    assert list(columns["cell_type"]) == list(world["model"].anatomy.cell_type)
    from flyviz.record.convert import open_zarr

    data = open_zarr(paths["zarr"])
    np.testing.assert_array_equal(data["delta_ce_est"].values, run.estimate)
    assert list(data["superclass"].values) == list(world["model"].anatomy.superclass)
    assert not cluster.parts_folder(out).exists()


@pytest.mark.slow
def test_one_and_two_workers_and_a_resumed_run_give_the_same_bits(world, in_process, tmp_path,
                                                                  interrupt_after):
    reference, expected = in_process
    two = _run(world, tmp_path / "two.parquet", workers=2)
    assert two.workers == 2
    np.testing.assert_array_equal(two.estimate, expected.estimate)
    assert [_key(r) for r in two.rows] == [_key(r) for r in expected.rows]
    out = tmp_path / "resumed.csv"
    restore = interrupt_after(importance_tasks, "chunk_partial", 2)  # where tasks call it
    with pytest.raises(cluster.Interrupted, match="2 of .* are saved"):
        _run(world, out)
    restore()
    resumed = _run(world, out, by="superclass", resume=True)  # partials do not hold groups
    assert resumed.resumed_tasks == 2
    np.testing.assert_array_equal(resumed.estimate, expected.estimate)
    np.testing.assert_array_equal(read_neuron_table(companion_paths(out)["neurons"])[1][
        "delta_ce_est"], read_neuron_table(companion_paths(reference)["neurons"])[1][
        "delta_ce_est"])


def test_merge_is_commutative_and_tasks_cover_the_text_once(world):
    chunks = plan_chunks(world["corpus"], SETTINGS)
    assert sum(c.n_tokens for c in chunks) == world["corpus"].n_tokens
    rng = np.random.default_rng(0)
    a, b = ({"score": rng.standard_normal(203), "ce": rng.random(1),
             "positions": np.array([5]), "chunks": np.array([1])} for _ in range(2))
    for name, value in merge_partials(a, b).items():
        np.testing.assert_array_equal(value, merge_partials(b, a)[name])


def test_the_library_function_takes_text_and_query_groups(world):
    text = world["text"].read_text(encoding="utf-8")
    est = flyviz.importance(world["model"], text, by={"left": "side:left", "all": "all"},
                            context=SETTINGS.context)
    on_file = flyviz.importance(world["model"], world["text"], by=None,
                                context=SETTINGS.context)
    np.testing.assert_array_equal(est.estimate, on_file.estimate)
    rows = {r.group: r for r in est.rows}
    assert rows["all"].delta_ce == pytest.approx(est.estimate.sum(), rel=1e-12)
    assert rows["left"].neurons == int(np.sum(np.asarray(world["model"].anatomy.side) == "left"))
    assert on_file.rows == []


def test_agreement_of_the_estimate_with_the_exact_sweep(world, tmp_path):
    """The estimate against exact silences: lesions measured by running the model silenced
    (``run_sweep``). Single neurons, where a first-order estimate must hold: each has its
    exact ΔCE's sign, within a factor of two, and the neurons it ranks strongest are the
    strongest when silenced. Superclasses: the strongest lesion's size and sign (a group
    of most of the brain is beyond a first-order estimate, so not all are asked for);
    ``agreement`` and the stored metadata report them."""
    from scipy.stats import spearmanr

    from flyviz.analysis.sweep.groups import Group

    model = world["model"]
    sweep = SweepSettings(streams=9, context=SETTINGS.context, chunk_tokens=64)
    superclasses = sweep_groups(model, "superclass")
    exact = run_sweep(world["spec"], model, world["corpus"], superclasses,
                      tmp_path / "exact.csv", sweep, by="superclass",
                      dataset=world["dataset"], workers=0)
    est = _run(world, tmp_path / "est.csv", by="superclass", exact=exact.rows)
    # The same text, read the same way: the untouched cross-entropies agree.
    assert est.baseline_cross_entropy == pytest.approx(exact.baseline_cross_entropy, abs=1e-5)

    # Single neurons: those the estimate ranks strongest and some from the middle.
    ranked = np.argsort(-np.abs(est.estimate))
    strong = [int(i) for i in ranked[:SINGLES]]
    middle = [int(i) for i in ranked[len(ranked) // 2:][:SINGLES // 2]]
    singles = [Group(f"neuron {i}", f"id:{i}", np.array([i])) for i in strong + middle]
    silenced = run_sweep(world["spec"], model, world["corpus"], singles,
                         tmp_path / "singles.csv", sweep, by="superclass",
                         dataset=world["dataset"], workers=0)
    measured = {r.group: r.delta_ce for r in silenced.rows}
    true = np.array([measured[g.name] for g in singles])
    guess = est.estimate[strong + middle]
    assert np.all(np.abs(true) > 1e-3)                       # each changes the text's CE
    assert np.all(np.sign(guess) == np.sign(true)), (true, guess)
    assert np.all(np.abs(guess - true) < np.abs(true)), (true, guess)   # within 2x
    assert np.abs(true[:SINGLES]).min() > np.abs(true[SINGLES:]).max()
    assert spearmanr(true, guess).statistic > 0.8

    # Superclasses: the largest exact lesion is estimated with its sign, within 25 %.
    found = agreement(exact.rows, est.rows)
    assert found.groups == len(superclasses)
    assert est.info["agreement"] == found.to_dict()
    by_name = {r.group: r.delta_ce for r in est.rows}
    strongest = max(exact.rows, key=lambda r: abs(r.delta_ce))
    assert by_name[strongest.group] == pytest.approx(strongest.delta_ce, rel=0.25)
    signs = [np.sign(r.delta_ce) == np.sign(by_name[r.group]) for r in exact.rows]
    assert found.sign_agreement == pytest.approx(np.mean(signs))




# ------------------------------------------------------------------------- CLI
def _cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_commands_print_tables_and_agreement(capsys, world, tmp_path):
    out = tmp_path / "est.csv"
    code, stdout, err = _cli(capsys, "importance", world["spec"], "--dataset", world["dataset"],
                             "--text", str(world["text"]), "--out", str(out), "--by", "side",
                             "--workers", "0", "--context", str(SETTINGS.context))
    assert code == 0, err
    assert "estimated lesions of" in stdout and all(p.exists()
                                                    for p in companion_paths(out).values())
    # --workers 0: no Dask worker, and the summary does not suggest one
    assert " s (in this process)\n" in stdout and "worker(s)" not in stdout
    sweep_out = tmp_path / "exact.csv"
    code, stdout, err = _cli(capsys, "sweep", world["spec"], "--dataset", world["dataset"],
                             "--text", str(world["text"]), "--out", str(sweep_out), "--by",
                             "side", "--workers", "0", "--context", str(SETTINGS.context),
                             "--estimate")
    assert code == 0, err
    assert "Spearman rank correlation" in stdout and "same sign" in stdout
    assert "group-tokens/s, in this process)" in stdout and "worker(s)" not in stdout
    estimate = LesionMap(tmp_path / "exact.estimate.csv")
    assert estimate.info["estimate"] and "agreement" in estimate.info
    assert {r.group for r in estimate.rows} == {r.group for r in LesionMap(sweep_out).rows}


@pytest.mark.parametrize("case", ["by", "suffix", "empty", "folder", "file", "mode",
                                  "no-labels"])
def test_bad_input_gives_one_line_and_exit_2(capsys, world, tmp_path, case):
    spec, by, out, text = world["spec"], "superclass", tmp_path / "x.csv", world["text"]
    extra = ["--workers", "0", "--dataset", world["dataset"]]
    command = "importance"
    if case == "by":
        by = "cells"
    elif case == "suffix":
        out = tmp_path / "x.xlsx"
    elif case == "empty":
        text = tmp_path / "empty.txt"
        text.write_text("\n\n  \n", encoding="utf-8")
    elif case == "folder":
        out = tmp_path / "missing" / "x.csv"
    elif case == "file":  # a file where the folder should be is not "missing"
        (tmp_path / "empty.txt").write_text("", encoding="utf-8")
        out = tmp_path / "empty.txt" / "x.csv"
    elif case == "mode":
        command, extra = "sweep", extra + ["--estimate", "--mode", "cut-out"]
    elif case == "no-labels":
        bare = dataclasses.replace(world["model"], anatomy=None, digests={})
        write_fly_llm_hf(bare, tmp_path / "bare")
        spec, extra = str(tmp_path / "bare"), ["--workers", "0"]
    code, _, err = _cli(capsys, command, spec, "--by", by, "--text", str(text), "--out",
                        str(out), *extra)
    assert code == 2, err
    assert err.startswith("flyviz: error: ") and err.count("\n") == 1, err
    expected = {"by": "neither superclass, type, side nor a file", "suffix": ".csv or .parquet",
                "empty": "no text", "folder": "does not exist",
                "file": "empty.txt is a file, not a folder", "mode": "--mode cut-out",
                "no-labels": "no superclass labels"}[case]
    assert expected in err
    assert not out.exists() and not companion_paths(out)["neurons"].exists()


@pytest.mark.parametrize("case", ["proc", "neurons", "zarr"])
def test_outputs_that_cannot_be_put_in_place_are_refused_before_the_model_loads(
        capsys, world, tmp_path, monkeypatch, case):
    """/proc takes no file though os.access says root may write there; a folder where the
    per-neuron table goes, a file where the Zarr store goes: named before any work (they
    failed after it, /proc as "/proc/x.csv.parts"), the user's files left as they were."""
    import flyviz.commands.importance as command

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded before the outputs were checked")

    monkeypatch.setattr(command, "load_model_from_args", no_model)
    out = tmp_path / "x.csv"
    if case == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc here")
        out = Path("/proc/x.csv")
    elif case == "neurons":
        (tmp_path / "x.neurons.csv").mkdir()
    else:
        (tmp_path / "x.zarr").write_text("mine", encoding="utf-8")
    code, _, err = _cli(capsys, "importance", world["spec"], "--text", str(world["text"]),
                        "--out", str(out), "--workers", "0", "--dataset", world["dataset"])
    assert code == 2 and err.startswith("flyviz: error: ") and err.count("\n") == 1, err
    expected = {"proc": "cannot write --out /proc/x.csv: the folder /proc takes no new file",
                "neurons": "x.neurons.csv (the per-neuron table written beside it) is a folder",
                "zarr": "x.zarr (the Zarr store written beside it) exists and is not a store"}
    assert expected[case] in err and ".parts" not in err
    if case == "zarr":
        assert (tmp_path / "x.zarr").read_text(encoding="utf-8") == "mine"


def test_the_library_refuses_an_empty_group_and_an_empty_text(world):
    from flyviz.errors import InputError, SelectionError

    with pytest.raises(SelectionError, match="selects no neuron|nothing"):
        flyviz.importance(world["model"], "a story", by={"none": "side:left & !side:left"})
    with pytest.raises(InputError, match="empty"):
        flyviz.importance(world["model"], "   ", by=None)


@pytest.mark.slow
def test_the_demo_brains_estimate_runs_at_full_size(tmp_path):
    """All 49,393 neurons of the demo brain over a few held-out tokens: the untouched
    cross-entropy is the exact sweep's, the estimates are finite."""
    heldout = Path(__file__).resolve().parents[1] / "assets" / "demo" / "heldout.txt"
    if not heldout.is_file():
        pytest.skip("the demo brain is not built")
    model = load_model("demo")
    corpus = build_corpus([heldout], FlyTokenizer(model.tokenizer_path), max_tokens=24)
    groups = [g for g in sweep_groups(model, "superclass") if g.name == "visual_projection"]
    exact = run_sweep("demo", model, corpus, groups, tmp_path / "x.csv", SweepSettings(),
                      by="superclass", workers=0)
    est = run_importance(None, model, corpus, groups, None, ImportanceSettings(), workers=0)
    assert est.estimate.shape == (49393,) and np.isfinite(est.estimate).all()
    assert est.baseline_cross_entropy == pytest.approx(exact.baseline_cross_entropy, abs=1e-5)


def test_the_printed_table_of_an_estimate_has_no_columns_of_nan():
    """``flyviz importance`` printed its rows with KL and top-1 columns of ``nan`` and ``nan%``
    (an estimate gives the change of cross-entropy only), which read as a failure; an exact
    lesion map keeps both columns."""
    from flyviz.analysis.importance import estimate_rows
    from flyviz.analysis.sweep.groups import Group
    from flyviz.analysis.sweep.lesion_map import GroupResult
    from flyviz.analysis.sweep.run import format_table

    groups = [Group("cb_sensory", "superclass:cb_sensory", np.array([0, 2])),
              Group("optic", "superclass:optic", np.array([1]))]
    table = format_table(estimate_rows(np.array([0.5, 0.25, 0.125]), groups, 3.0, 100))
    lines = table.splitlines()
    assert "nan" not in table and "KL" not in lines[0] and "top-1" not in lines[0]
    assert lines[1].split()[:4] == ["1", "cb_sensory", "2", "0.6250"]
    assert "estimate gives dCE only" in lines[-1]
    exact = [GroupResult(rank=1, group="optic", query="superclass:optic", neurons=1,
                         delta_ce=0.25, kl=0.125, top1_agreement=0.875, cross_entropy=3.25,
                         positions=100)]
    shown = format_table(exact).splitlines()
    assert "KL nats/tok" in shown[0] and shown[1].split()[-2:] == ["0.1250", "87.5%"]


def test_a_scheduler_address_where_something_else_listens_is_one_line_not_a_hang(
        tmp_path, capsys, monkeypatch):
    """``--scheduler tcp://host:8787``, the dashboard's port, or any service that does not
    answer Dask's handshake: the Client waited for the handshake forever (its timeout covers
    only the TCP connect), or read the first bytes of an HTTP reply as a frame length and
    said "out of memory". Either is one line that names the address, before any work."""
    import socket
    import threading

    # The refusal is the same after 0.2 s as after the 5 s (twice, for the handshake) a
    # user's scheduler is given.
    monkeypatch.setattr(cluster, "SCHEDULER_CONNECT_TIMEOUT_S", 0.2)

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []

    def accept() -> None:        # takes connections and says nothing, as an HTTP server does
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 20, encoding="utf-8")
    try:
        code = cli.main(["importance", "demo", "--text", str(text), "--out",
                         str(tmp_path / "out.csv"), "--scheduler", address])
    finally:
        server.close()
        for connection in accepted:
            connection.close()
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"flyviz: error: {address} did not answer as a Dask scheduler"), err
    assert accepted, "the command never knocked at the address"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]
