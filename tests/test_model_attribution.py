"""Exact attribution (flyviz.trace): the backward sweep against an independent float64
re-implementation of explain.md section 1, on odd-sized checkpoints in every layout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.sparse import csr_matrix

import flyviz
from flyviz.errors import InputError
from flyviz.model.attribution import incoming_currents, record_tape
from flyviz.model.checkpoint import validate_checkpoint
from flyviz.model.explain import readout_cotangent
from flyviz.model.formats import load_folder
from flyviz.model.interventions import Clamp, Cut, Scale, Silence, Stimulate
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf, write_recital_web,
                                  write_wordbrain)
from flyviz.record.runner import Model

PROMPT = "the little dog saw a big red ball"
LAYOUTS = ("ngxson", "web", "webrank", "wordbrain")


def _odd_checkpoint(tokenizer_path, vocabulary, *, rank, seed, subset_readout=False):
    ckpt = make_random_checkpoint(neurons=347, edges=4111, d_embed=13, delay_k=8,
                                  neurons_per_slot=7, vocabulary=vocabulary, readout_rank=rank,
                                  seed=seed, tokenizer_path=tokenizer_path, name="odd")
    if subset_readout:
        # Read out 301 of the 347 neurons, in a scrambled order (c is scattered back).
        rng = np.random.default_rng(seed)
        out = rng.permutation(347)[:301].astype(np.int64)
        ckpt = dataclasses.replace(
            ckpt, out_index=out, ln_weight=ckpt.ln_weight[out], ln_bias=ckpt.ln_bias[out],
            head=None if ckpt.head is None else np.ascontiguousarray(ckpt.head[:, out]),
            head_a=None if ckpt.head_a is None else np.ascontiguousarray(ckpt.head_a[:, out]))
    return validate_checkpoint(ckpt)


@pytest.fixture(params=LAYOUTS)
def layout_checkpoint(request, tmp_path, tokenizer_path, tokenizer_vocabulary):
    """An odd-sized checkpoint written in one layout and loaded back."""
    layout = request.param
    rank = {"ngxson": None, "web": None, "webrank": 5, "wordbrain": 7}[layout]
    ckpt = _odd_checkpoint(tokenizer_path, tokenizer_vocabulary, rank=rank,
                           seed=LAYOUTS.index(layout) + 3, subset_readout=layout == "ngxson")
    if layout == "ngxson":
        write_fly_llm_hf(ckpt, tmp_path / "model")
    else:
        write_connectome_dataset(ckpt, tmp_path / "dataset")
        if layout == "wordbrain":
            write_wordbrain(ckpt, tmp_path / "model", tokenizer_path=tokenizer_path)
        else:
            write_recital_web(ckpt, tmp_path / "model")
    return load_folder(tmp_path / "model")


# ------------------------------------------------------------- the float64 reference
class Reference:
    """explain.md section 1 in float64 NumPy, dense, written from the equations."""

    def __init__(self, ck, interventions=()):
        self.ck = ck
        cfg = ck.config
        self.n, self.k, self.slot = cfg.neurons, cfg.delay_k, cfg.neurons_per_slot
        self.lam = float(cfg.leak)
        f = np.float64
        self.g, self.r, self.b = (np.asarray(getattr(ck, a), f) for a in ("gain", "rec_gain",
                                                                         "bias"))
        self.wte, self.in_proj = np.asarray(ck.wte, f), np.asarray(ck.in_proj, f)
        self.in_index = np.asarray(ck.in_index, np.int64)
        self.out = np.asarray(ck.out_index, np.int64)
        self.W = csr_matrix((np.asarray(ck.w_values, f), np.asarray(ck.w_indices, np.int64),
                             np.asarray(ck.w_offsets, np.int64)),
                            shape=(self.n, self.n)).toarray()
        self.head = (np.asarray(ck.head, f) if ck.head is not None
                     else np.asarray(ck.head_b, f) @ np.asarray(ck.head_a, f))
        self.iv = interventions

    def _sel(self, target):
        return np.asarray(target, dtype=np.int64)

    def weights(self, t):
        W = self.W.copy()
        for iv in self.iv:
            if isinstance(iv, (Cut, Scale)) and iv.active(t):
                factor = 0.0 if isinstance(iv, Cut) else iv.factor
                rows, cols = self._sel(iv.post), self._sel(iv.pre)
                W[np.ix_(rows, cols)] *= factor
        return W

    def drive(self, ids, t):
        d = np.zeros(self.n)
        for j in range(self.k):
            tok = ids[t - j] if t - j >= 0 else self.ck.config.pad_token_id
            d[self.in_index[j * self.slot:(j + 1) * self.slot]] = self.wte[tok] @ self.in_proj[j]
        return d

    def slot_drive(self, ids, t, j):
        d = np.zeros(self.n)
        tok = ids[t - j] if t - j >= 0 else self.ck.config.pad_token_id
        d[self.in_index[j * self.slot:(j + 1) * self.slot]] = self.wte[tok] @ self.in_proj[j]
        return d

    def stim(self, t):
        s = np.zeros(self.n)
        for iv in self.iv:
            if isinstance(iv, Stimulate) and iv.active(t):
                s[self._sel(iv.neurons)] += iv.amount
        return s

    def sets(self, t):
        mask, values = np.zeros(self.n, bool), np.zeros(self.n)
        for iv in self.iv:
            if isinstance(iv, (Silence, Clamp)) and iv.active(t):
                mask[self._sel(iv.neurons)] = True
                values[self._sel(iv.neurons)] = iv.value if isinstance(iv, Clamp) else 0.0
        return mask, values

    def forward(self, ids, start=None, at=None):
        """States, u for every step; ``start=(t, x_t)`` resumes from a given state."""
        x = np.zeros(self.n)
        xs, us = [], []
        first = 0
        if start is not None:
            first, x = start[0] + 1, start[1].copy()
        for t in range(first, len(ids)):
            u = self.g * (self.r * (self.weights(t) @ x) + self.drive(ids, t) + self.stim(t)) \
                + self.b
            x = (1 - self.lam) * x + self.lam * np.tanh(u)
            mask, values = self.sets(t)
            x[mask] = values[mask]
            xs.append(x.copy())
            us.append(u)
        return xs, us

    def value(self, x, target, versus=None):
        h = x[self.out]
        mu, var = h.mean(), h.var()
        z = (h - mu) / np.sqrt(var + self.ck.config.layer_norm_eps)
        logits = self.head @ (z * np.asarray(self.ck.ln_weight, np.float64)
                              + np.asarray(self.ck.ln_bias, np.float64))
        return logits[target] - (logits[versus] if versus is not None else logits.mean())

    def frozen_c(self, x, target, versus=None):
        """c and const with L = c.x + const at the frozen LayerNorm scale (dense algebra)."""
        h = x[self.out]
        n_out = h.size
        inv = 1.0 / np.sqrt(h.var() + self.ck.config.layer_norm_eps)
        e = np.zeros(self.head.shape[0])
        e[target] += 1
        if versus is None:
            e -= 1.0 / e.size
        else:
            e[versus] -= 1
        a = self.head.T @ e
        centre = np.eye(n_out) - 1.0 / n_out
        select = np.zeros((n_out, self.n))
        select[np.arange(n_out), self.out] = 1
        c = inv * (select.T @ centre @ (a * np.asarray(self.ck.ln_weight, np.float64)))
        return c, float(a @ np.asarray(self.ck.ln_bias, np.float64))

    def attribution(self, ids, P, target, versus=None):
        xs, us = self.forward(ids[:P + 1])
        c, const = self.frozen_c(xs[P], target, versus)
        v = c
        vs, tokens, pad, bias, stim, clamp = {}, np.zeros(P + 1), 0.0, 0.0, 0.0, 0.0
        for t in range(P, -1, -1):
            vs[t] = v.copy()
            mask, values = self.sets(t)
            clamp += float(v[mask] @ values[mask])
            m = v.copy()
            m[mask] = 0
            s = np.where(us[t] != 0, np.tanh(us[t]) / np.where(us[t] != 0, us[t], 1), 1.0)
            bias += float(m @ (self.lam * s * self.b))
            stim += float(m @ (self.lam * s * self.g * self.stim(t)))
            for j in range(self.k):
                flow = float(m @ (self.lam * s * self.g * self.slot_drive(ids, t, j)))
                if t - j >= 0:
                    tokens[t - j] += flow
                else:
                    pad += flow
            J = (1 - self.lam) * np.eye(self.n) + (self.lam * s * self.g * self.r)[:, None] \
                * self.weights(t)
            v = J.T @ m
        nodes = np.stack([vs[t] * xs[t] for t in range(P + 1)])
        return dict(xs=xs, us=us, vs=vs, nodes=nodes, tokens=tokens, pad=pad, bias=bias,
                    stim=stim, clamp=clamp, const=const, L=self.value(xs[P], target, versus))

    def edge_flows(self, ref, t, i):
        s = np.tanh(ref["us"][t][i]) / ref["us"][t][i]
        mask, _ = self.sets(t)
        m = 0.0 if mask[i] else ref["vs"][t][i]
        x_prev = ref["xs"][t - 1] if t > 0 else np.zeros(self.n)
        return m * self.lam * s * self.g[i] * self.r[i] * self.weights(t)[i] * x_prev


def _model(ck):
    return Model(ck, threads=2)


def _assert_matches(att, ref, scale):
    tol = 1e-5 * scale
    np.testing.assert_allclose(att.node_flows(), ref["nodes"], rtol=0, atol=tol)
    np.testing.assert_allclose(att.token_flows, ref["tokens"], rtol=0, atol=tol)
    for name, key in (("pad_flow", "pad"), ("bias_flow", "bias"), ("stimulation_flow", "stim"),
                      ("clamp_flow", "clamp"), ("constant", "const"), ("value", "L")):
        assert getattr(att, name) == pytest.approx(ref[key], abs=tol), name


# -------------------------------------------------------------------------- tests
def test_flows_add_up_and_equal_the_float64_reference_in_every_layout(layout_checkpoint):
    ck = layout_checkpoint
    with _model(ck) as model:
        att = flyviz.trace(model, PROMPT)
        ids = att.prompt_ids
        P = att.position
        assert P == len(ids) - 1 and P > 8                   # more steps than delay slots
        ref = Reference(ck).attribution(ids, P, att.target)
        scale = max(1.0, abs(att.value))
        assert abs(att.completeness_error) <= 1e-4 * scale
        _assert_matches(att, ref, scale)
        # Each position's node flows are what is left of L after the sources that came later.
        for t in range(P + 1):
            assert att.node_flow(t).sum() == pytest.approx(ref["nodes"][t].sum(), abs=1e-5 * scale)
        # Edge flows into two neurons at two steps, and their sum with the leaks.
        for t in (P, P - 3):
            busiest = int(np.argmax(np.diff(np.asarray(ck.w_offsets))))
            for i in (busiest, int(att.top_neurons(t, 1)[0])):
                edges = att.edge_flows(i, t)
                expected = Reference(ck).edge_flows(ref, t, i)
                got = np.zeros(ck.config.neurons)
                np.add.at(got, edges["pre"], edges["flow"])
                np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * scale)
        # A target given as text, against another token: logit difference.
        other = int(np.argsort(att.tape.logits(P))[-2])
        versus = flyviz.trace(model, PROMPT, target=att.target_text, versus=other)
        assert versus.target == att.target and versus.versus == other
        ref = Reference(ck).attribution(ids, P, att.target, other)
        _assert_matches(versus, ref, max(1.0, abs(versus.value)))


def test_a_window_leaves_the_earlier_state_as_one_source(tiny_checkpoint):
    with _model(tiny_checkpoint) as model:
        whole = flyviz.trace(model, PROMPT)
        part = flyviz.trace(model, PROMPT, window=3)
        scale = max(1.0, abs(whole.value))
        assert part.window_start == whole.position - 2
        assert part.node_flows().shape == (3, model.neurons)
        np.testing.assert_allclose(part.node_flows(), whole.node_flows()[-3:], atol=1e-5 * scale)
        # What the state before the window carries is the node flow there.
        assert part.earlier_flow == pytest.approx(whole.node_flow(part.window_start - 1).sum(),
                                                  abs=1e-5 * scale)
        assert abs(part.completeness_error) <= 1e-4 * scale
        with pytest.raises(InputError, match="empty"):
            flyviz.trace(model, PROMPT, window=0)
        with pytest.raises(InputError, match="outside the run"):
            flyviz.trace(model, PROMPT, position=99)
        with pytest.raises(InputError, match="not one token"):
            flyviz.trace(model, PROMPT, target=" little dog saw")


def test_gradient_mode_equals_central_finite_differences(tiny_checkpoint):
    ck = tiny_checkpoint
    ref = Reference(ck)
    rng = np.random.default_rng(0)
    with _model(ck) as model:
        att = flyviz.trace(model, PROMPT, mode="gradient")
        assert att.completeness_error is None
        ids, P = att.prompt_ids, att.position
        xs, _ = ref.forward(ids[:P + 1])
        for t in (P, P - 1, P - 4):
            direction = rng.standard_normal(ck.config.neurons)
            eps = 1e-4

            def value(sign, t=t, eps=eps, direction=direction):
                x = xs[t] + sign * eps * direction
                if t == P:
                    return ref.value(x, att.target)
                later, _ = ref.forward(ids[:P + 1], start=(t, x))
                return ref.value(later[-1], att.target)

            numeric = (value(1) - value(-1)) / (2 * eps)
            analytic = float(att.cotangent(t).astype(np.float64) @ direction)
            assert analytic == pytest.approx(numeric, rel=1e-3)


def test_the_sweep_takes_seeds_at_several_steps(tiny_checkpoint):
    """The gradient of a sum of two positions' values is the sum of the two sweeps: what a
    teacher-forced loss (estimated lesions) and activation patching build on."""
    ck = tiny_checkpoint
    with _model(ck) as model:
        ids = model.tokenizer.encode(PROMPT)
        ids = [ck.config.bos_token_id] + ids
        tape = record_tape(model.engine, ids, slopes=True)
        bw = model.backward
        p1, p2 = 4, len(ids) - 1
        c1, _ = readout_cotangent(ck, tape.x(p1), 5, mode="gradient")
        c2, _ = readout_cotangent(ck, tape.x(p2), 9, mode="gradient")
        both = bw.sweep(tape, {p1: c1, p2: c2}, mode="gradient")
        one = bw.sweep(tape, {p1: c1}, mode="gradient")
        two = bw.sweep(tape, {p2: c2}, mode="gradient")
        for t in range(p1 + 1):
            np.testing.assert_allclose(both.cotangent(t), one.cotangent(t) + two.cotangent(t),
                                       rtol=1e-5, atol=1e-5 * np.abs(both.cotangent(t)).max())
        np.testing.assert_allclose(both.cotangent(p2), two.cotangent(p2))
        seen = []
        bw.sweep(tape, {p2: c2}, first=2, keep=False, on_step=lambda t, *_: seen.append(t))
        assert seen == list(range(p2, 1, -1))
        with pytest.raises(InputError):
            bw.sweep(tape, {})


@pytest.mark.parametrize("kernel", ["scipy", "llvm"])
def test_interventions_are_honoured(tiny_checkpoint, kernel):
    ck = tiny_checkpoint
    offsets, indices = np.asarray(ck.w_offsets), np.asarray(ck.w_indices)
    busiest = int(np.argmax(np.diff(offsets)))
    cut_pre = [int(j) for j in indices[offsets[busiest]:offsets[busiest + 1]][:6]]
    silenced = list(range(40, 60))
    interventions = (Silence(silenced), Clamp([3, 4, 5], 0.4, start=2),
                     Stimulate(list(range(100, 130)), 0.7, start=1, stop=6),
                     Cut(cut_pre, [busiest]), Scale([busiest], list(range(0, 200)), 0.5, start=3))
    with Model(ck, threads=2, kernel=kernel) as model:
        att = flyviz.trace(model, PROMPT, interventions=interventions)
        P = att.position
        resolved = model.resolve_interventions(interventions)
        ref = Reference(ck, interventions).attribution(att.prompt_ids, P, att.target)
        scale = max(1.0, abs(att.value))
        assert abs(att.completeness_error) <= 1e-4 * scale
        _assert_matches(att, ref, scale)
        # A silenced neuron carries no flow, and nothing flows into it or out of it.
        assert not att.node_flows()[:, silenced].any()
        for t in (P, P - 2):
            edges = att.edge_flows(silenced[0], t)
            assert not edges["flow"].any()
            top = att.step_edge_flows(t, top=200)
            assert not np.isin(top["pre"], silenced).any()
            assert not np.isin(top["post"], silenced).any()
        # The cut synapses carry nothing; the inspector's currents use the edited weights.
        edges = att.edge_flows(busiest, P)
        cut = np.isin(edges["pre"], cut_pre)
        assert cut.any() and not edges["flow"][cut].any() and edges["flow"][~cut].any()
        currents = incoming_currents(ck, busiest, att.tape.x(P - 1), interventions=resolved,
                                     position=P)
        assert not currents.weights[np.isin(currents.pre, cut_pre)].any()
        plain = incoming_currents(ck, busiest, att.tape.x(P - 1))
        assert plain.weights[np.isin(plain.pre, cut_pre)].any()
        # A stimulation is one more source; a clamp's value is one too.
        assert att.stimulation_flow != 0 and att.clamp_flow != 0


def test_the_graph_is_pruned_and_written_for_circuit_tracer(tiny_checkpoint):
    with _model(tiny_checkpoint) as model:
        att = flyviz.trace(model, PROMPT)
        graph = att.graph(nodes=40)
        assert 0 < graph.neurons.size <= 40
        big = att.graph(nodes=400)
        assert {e["kind"] for e in big.edges} == {"synapse", "leak", "token", "logit"}
        ref = Reference(tiny_checkpoint)
        expected = ref.attribution(att.prompt_ids, att.position, att.target)
        scale = max(1.0, abs(att.value))
        for edge in big.edges:
            t, i = edge["post_position"], edge["post"]
            if edge["kind"] == "logit":
                want = expected["nodes"][edge["pre_position"], edge["pre"]]
            else:
                s = np.tanh(expected["us"][t][i]) / expected["us"][t][i]
                v = expected["vs"][t][i]
                if edge["kind"] == "leak":
                    want = v * (1 - ref.lam) * expected["xs"][t - 1][i]
                elif edge["kind"] == "token":
                    slot = t - edge["pre_position"]
                    want = v * ref.lam * s * ref.g[i] * ref.slot_drive(att.prompt_ids, t, slot)[i]
                else:
                    continue
            assert edge["flow"] == pytest.approx(want, abs=1e-5 * scale), edge
        # Influence shares of the whole unrolled graph: the kept nodes are the most influential.
        assert graph.influence.min() > 0 and graph.influence.sum() <= graph.node_influence_total
        for edge in graph.edges:
            if edge["kind"] == "synapse":
                flows = att.edge_flows(edge["post"], edge["post_position"])
                hit = flows["pre"] == edge["pre"]
                assert edge["flow"] == pytest.approx(float(flows["flow"][hit].sum()))
        data = att.to_json(nodes=40)
        for key in ("prompt_ids", "position", "target", "constant", "completeness_error",
                    "token_flows", "pad_flow", "bias_flow", "nodes", "edges", "groups"):
            assert key in data
        assert set(data["target"]) >= {"token", "text", "versus", "value"}
        at_p = [n for n in data["nodes"] if n["position"] == att.position]
        assert len(at_p) >= 50
        strongest = att.top_neurons(att.position, 50)
        assert set(strongest) <= {n["neuron"] for n in at_p}
        into_p = [e for e in data["edges"] if e["kind"] == "synapse"
                  and e["post_position"] == att.position]
        assert len(into_p) >= 50
        superclass = {g["name"] for g in data["groups"]["superclass"]}
        assert superclass == set(tiny_checkpoint.anatomy.superclass)
        names, flows = att.group_flows("superclass")
        np.testing.assert_allclose(flows.sum(axis=1), att.node_flows().sum(axis=1))
        ct = att.to_circuit_tracer_json(nodes=40)
        ids = {n["node_id"] for n in ct["nodes"]}
        assert {"metadata", "qParams", "nodes", "links"} <= set(ct)
        assert sum(n["is_target_logit"] for n in ct["nodes"]) == 1
        assert all(link["source"] in ids and link["target"] in ids for link in ct["links"])
        assert {n["feature_type"] for n in ct["nodes"]} <= {"logit", "embedding",
                                                            "cross layer transcoder"}


def test_node_influence_equals_circuit_tracers_on_the_dense_unrolled_graph(tiny_checkpoint):
    """Influence computed by the sweep equals w A + w A^2 + ... on the explicit matrix."""
    from flyviz.model.explain_graph import node_influence

    ck = tiny_checkpoint
    with _model(ck) as model:
        att = flyviz.trace(model, "the dog saw a ball", window=4)
        influence, _ = node_influence(att)
        ref = Reference(ck)
        n, first, P = ck.config.neurons, att.window_start, att.position
        steps = P - first + 1
        size = steps * n + 1                 # the neurons of the window, then the logit
        A = np.zeros((size, size))
        sources = np.zeros(size)
        ids, tape = att.prompt_ids, att.tape
        for t in range(first, P + 1):
            row = (t - first) * n
            s = tape.s(t).astype(np.float64)
            x_prev = tape.x(t - 1).astype(np.float64)
            direct = (ref.lam * s * ref.g * ref.r)[:, None] * ref.W * x_prev[None, :]
            leak = (1 - ref.lam) * x_prev
            sources[row:row + n] = np.abs(ref.lam * s * ref.g * ref.drive(ids, t)) \
                + np.abs(ref.lam * s * ref.b)
            if t > first:
                back = row - n
                A[row:row + n, back:back + n] = np.abs(direct) + np.diag(np.abs(leak))
            else:
                sources[row:row + n] += np.abs(direct).sum(axis=1) + np.abs(leak)
        f_p = np.abs(att.node_flow(P))
        A[-1, (steps - 1) * n:steps * n] = f_p
        sources[-1] = abs(att.constant)
        total = A.sum(axis=1) + sources
        normed = np.divide(A, total[:, None], out=np.zeros_like(A), where=total[:, None] > 0)
        weights = np.zeros(size)
        weights[-1] = 1
        expected, current = np.zeros(size), weights
        for _ in range(steps + 1):
            current = current @ normed
            expected += current
        np.testing.assert_allclose(influence.reshape(-1), expected[:-1], rtol=1e-4,
                                   atol=1e-9)


def test_a_saved_recording_is_traced_on_its_own_tokens(tiny_checkpoint, tmp_path):
    xr = pytest.importorskip("xarray")
    with _model(tiny_checkpoint) as model:
        recording = flyviz.run(model, "the dog saw", max_new_tokens=4, states_dtype="float32",
                               interventions=["silence id:0-4"])
        path = recording.save(tmp_path / "run.flyrec")
        last = len(recording) - 1
        att = flyviz.trace(model, path, position=last)
        # The default target is the token the run chose there; the states are the run's.
        assert att.target == recording[last].predicted_token_id
        np.testing.assert_array_equal(att.tape.x(last), recording.state(last))
        assert not att.node_flows()[:, :5].any()
        with pytest.raises(InputError, match="interventions it was made with"):
            flyviz.trace(model, recording, interventions=["silence id:7"])
        data = att.to_xarray(model)
        assert isinstance(data, xr.Dataset)
        assert data["node_flow"].dims == ("position", "neuron")
        np.testing.assert_array_equal(data["node_flow"].values, att.node_flows())
        assert list(data["superclass"].values) == list(tiny_checkpoint.anatomy.superclass)
        assert data.attrs["target"] == att.target


def test_a_teacher_forced_loss_is_one_sweep_seeded_at_every_position(tiny_checkpoint):
    """The cross-entropy of a text, every position's term entering at its own step, against
    central finite differences: the gradient estimated lesions are built on."""
    from flyviz.model.explain import logit_cotangent

    ck = tiny_checkpoint
    ref = Reference(ck)
    with _model(ck) as model:
        ids = [ck.config.bos_token_id] + model.tokenizer.encode(PROMPT)
        tape = record_tape(model.engine, ids, slopes=True)
        seeds = {}
        for t in range(len(ids) - 1):
            z = tape.logits(t).astype(np.float64)
            p = np.exp(z - z.max())
            p /= p.sum()
            p[ids[t + 1]] -= 1.0                       # d CE_t / d logits_t
            seeds[t], _ = logit_cotangent(ck, tape.x(t), p)
        sweep = model.backward.sweep(tape, seeds, mode="gradient")

        def loss(xs, first=0):
            total = 0.0
            for t, x in enumerate(xs, start=first):
                if t < len(ids) - 1:
                    h = x[ref.out]
                    zn = (h - h.mean()) / np.sqrt(h.var() + ck.config.layer_norm_eps)
                    z = ref.head @ (zn * np.asarray(ck.ln_weight, np.float64)
                                    + np.asarray(ck.ln_bias, np.float64))
                    total += np.log(np.exp(z - z.max()).sum()) + z.max() - z[ids[t + 1]]
            return total

        xs, _ = ref.forward(ids)
        rng = np.random.default_rng(1)
        for t in (1, len(ids) // 2):
            direction = rng.standard_normal(ck.config.neurons)
            eps = 1e-4
            values = []
            for sign in (1, -1):
                x = xs[t] + sign * eps * direction
                later, _ = ref.forward(ids, start=(t, x))
                values.append(loss(xs[:t], 0) + loss([x], t) + loss(later, t + 1))
            numeric = (values[0] - values[1]) / (2 * eps)
            assert float(sweep.cotangent(t).astype(np.float64) @ direction) == pytest.approx(
                numeric, rel=1e-3)


#: 195 steps: over the whole run (or the default window) the tiny model's frozen steps grow
#: the flows until float32 rounding swamps L.
LONG_PROMPT = PROMPT + " " + " ".join([PROMPT] * 23)


def test_flows_that_do_not_add_up_are_flagged_with_a_warning(tiny_checkpoint):
    from flyviz.model.explain import COMPLETENESS_TOLERANCE, IncompleteAttributionWarning

    with _model(tiny_checkpoint) as model:
        with pytest.warns(IncompleteAttributionWarning, match="do not add up") as caught:
            whole = flyviz.trace(model, LONG_PROMPT, window=None)
        assert whole.complete is False and whole.window_start == 0
        assert whole.tolerance == COMPLETENESS_TOLERANCE * max(1.0, abs(whole.value))
        assert not abs(whole.completeness_error) <= whole.tolerance
        assert "not exact" in repr(whole) or "do not add up" in repr(whole)
        holding = whole.holding_window()
        assert 1 <= holding < len(whole.positions)
        assert f"window={holding}" in str(caught[0].message)
        # Each window's error, as this sweep predicts it, is that window's own trace's.
        errors = whole.window_errors()
        assert errors[0] == pytest.approx(whole.completeness_error, rel=1e-6)
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error", IncompleteAttributionWarning)
            shorter = flyviz.trace(model, LONG_PROMPT, window=holding)
        assert shorter.complete is True and shorter.holding_window() == holding
        assert shorter.completeness_error == pytest.approx(errors[-holding],
                                                           abs=1e-6 * max(1, abs(whole.value)))
        with pytest.warns(IncompleteAttributionWarning):
            longer = flyviz.trace(model, LONG_PROMPT, window=holding + 1)
        assert longer.complete is False
        # The gradient mode's flows never add up: nothing to flag.
        gradient = flyviz.trace(model, PROMPT, mode="gradient")
        assert gradient.complete is None and gradient.holding_window() is None


def test_a_short_window_keeps_only_its_steps_on_the_tape(tiny_checkpoint):
    with _model(tiny_checkpoint) as model:
        short = flyviz.trace(model, PROMPT, window=3)
        long = flyviz.trace(model, LONG_PROMPT, window=3)
        with pytest.warns(flyviz.model.explain.IncompleteAttributionWarning):
            whole = flyviz.trace(model, LONG_PROMPT, window=None)
    assert long.tape.steps == len(long.prompt_ids) > 100
    assert long.tape.keep_from == long.window_start - 1
    assert long.tape.nbytes == short.tape.nbytes < whole.tape.nbytes / 40
    with pytest.raises(IndexError, match="not kept"):
        long.tape.x(long.window_start - 2)


def test_a_trace_too_big_for_the_memory_is_refused(tiny_checkpoint, monkeypatch):
    import flyviz.model.explain as explain

    per_step = explain.trace_memory(523, tiny_checkpoint.config.vocabulary, 1) // 2
    with pytest.raises(InputError, match=r"would need about .* MiB .*\(--window 39;"):
        explain.check_trace_memory(523, tiny_checkpoint.config.vocabulary, 100,
                                   available=50 * per_step)
    explain.check_trace_memory(523, tiny_checkpoint.config.vocabulary, 49,
                               available=50 * per_step)
    monkeypatch.setattr(explain, "available_memory", lambda: 20 * per_step)
    with _model(tiny_checkpoint) as model:
        with pytest.raises(InputError, match="would need about"):
            flyviz.trace(model, LONG_PROMPT, window=None)
        assert flyviz.trace(model, LONG_PROMPT, window=10).complete


@pytest.mark.parametrize("position", [True, False, 2.0, "3"])
def test_a_position_that_is_not_a_whole_number_is_refused(tiny_checkpoint, tmp_path, position):
    with _model(tiny_checkpoint) as model:
        with pytest.raises(InputError, match="is not a whole number"):
            flyviz.trace(model, PROMPT, position=position)
        recording = flyviz.run(model, "the dog saw", max_new_tokens=2, states_dtype="float32")
        with pytest.raises(InputError, match="is not a whole number"):
            flyviz.trace(model, recording, position=position)


@pytest.mark.parametrize("target, words", [("id:-1", "id -1 is outside the vocabulary"),
                                           ("id:x", "'id:x' is not a token id"),
                                           (-1, "id -1 is outside the vocabulary")])
def test_an_id_target_is_an_id(tiny_checkpoint, target, words):
    with _model(tiny_checkpoint) as model:
        with pytest.raises(InputError, match=words):
            flyviz.trace(model, PROMPT, target=target)
        assert flyviz.trace(model, PROMPT, target="id:7").target == 7
