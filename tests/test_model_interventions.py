"""Interventions in the engine against an independent NumPy re-implementation of the step.

The reference below is fly-formats.md section 1.5 written out densely in float64, with each
intervention applied as the issue defines it (silence: x[S] = 0 after the step; clamp:
x[S] = v; stimulate: pre[S] += c before the tanh; cut A->B: W[B, A] = 0; scale: W[B, A] *= f),
and with the selections computed from the labels by hand, not by the query language.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flyviz.model import kernels
from flyviz.model.engine import Engine
from flyviz.model.engine_core import EngineCore
from flyviz.model.errors import InputError
from flyviz.model.interventions import (Clamp, Cut, GraphEdit, ResolvedInterventions, Scale,
                                        Silence, Stimulate, from_json, parse_intervention,
                                        resolve, to_json)
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.record.run import GenerationSettings, iter_frames

PROMPT_IDS = [1, 17, 300, 5, 5, 900, 44]
NEW_TOKENS = 9


def _dense(ck):
    n = ck.config.neurons
    w = np.zeros((n, n))
    offsets = np.asarray(ck.w_offsets)
    for row in range(n):
        lo, hi = offsets[row], offsets[row + 1]
        w[row, np.asarray(ck.w_indices[lo:hi], dtype=np.intp)] = ck.w_values[lo:hi]
    return w


def _active(op, position):
    start, stop = op.get("from"), op.get("to")
    return (start is None or position >= start) and (stop is None or position < stop)


def reference_run(ck, prompt_ids, new_tokens, ops):
    """Greedy run of the dense float64 step with ``ops``: dicts {kind, S | A, B, value, from, to}.

    Returns the tokens read after the prompt (the generated ones) and the next-token
    distribution of every step.
    """
    cfg = ck.config
    w = _dense(ck)
    x = np.zeros(cfg.neurons)
    history = [cfg.pad_token_id] * cfg.delay_k
    ids = list(prompt_ids)
    generated, dists = [], []
    position = 0
    while True:
        token = ids[position]
        weights = w.copy()
        for op in ops:
            if op["kind"] in ("cut", "scale") and _active(op, position):
                block = np.ix_(op["B"], op["A"])
                weights[block] *= 0.0 if op["kind"] == "cut" else op["value"]
        ext = history + [token]
        drive = np.concatenate([ck.wte[ext[-1 - j]].astype(np.float64) @ ck.in_proj[j]
                                for j in range(cfg.delay_k)])
        pre = ck.rec_gain * (weights @ x)
        pre[ck.in_index] += drive
        for op in ops:
            if op["kind"] == "stimulate" and _active(op, position):
                pre[op["S"]] += op["value"]
        x = (1 - cfg.leak) * x + cfg.leak * np.tanh(ck.gain * pre + ck.bias)
        for op in ops:
            if op["kind"] in ("silence", "clamp") and _active(op, position):
                x[op["S"]] = 0.0 if op["kind"] == "silence" else op["value"]
        history = ext[1:]
        h = x
        normed = (h - h.mean()) / np.sqrt(h.var() + cfg.layer_norm_eps) * ck.ln_weight + ck.ln_bias
        logits = ck.head @ normed if ck.head is not None else ck.head_b @ (ck.head_a @ normed)
        z = np.exp(logits - logits.max())
        dists.append(z / z.sum())
        position += 1
        if position < len(ids):
            continue
        chosen = int(np.argmax(logits))
        generated.append(chosen)
        if chosen == cfg.eos_token_id or len(generated) >= new_tokens:
            return generated, dists
        ids.append(chosen)


def _labels(ck):
    a = ck.anatomy
    n = ck.config.neurons
    return {
        "superclass": {name: [i for i in range(n) if a.superclass[i] == name]
                       for name in set(a.superclass)},
        "side": {name: [i for i in range(n) if a.side[i] == name] for name in set(a.side)},
        "input": sorted(int(i) for i in ck.in_index),
        "all": list(range(n)),
    }


def _cases(ck):
    """(interventions for the engine, the same for the reference), per intervention kind."""
    lab = _labels(ck)
    sensory, intrinsic = lab["superclass"]["cb_sensory"], lab["superclass"]["cb_intrinsic"]
    left = lab["side"]["left"]
    sensory_left = sorted(set(sensory) & set(left))
    odd = list(range(1, ck.config.neurons, 2))
    return {
        "silence": ([Silence("superclass:cb_sensory")],
                    [dict(kind="silence", S=sensory)]),
        "silence by indices, windowed": ([Silence(np.array(odd), 3, 10)],
                                          [{"kind": "silence", "S": odd, "from": 3, "to": 10}]),
        "clamp": ([Clamp("superclass:cb_sensory & side:left", 0.6)],
                  [dict(kind="clamp", S=sensory_left, value=0.6)]),
        "clamp negative, from a token on": ([Clamp("side:left", -0.3, 8)],
                                             [{"kind": "clamp", "S": left, "value": -0.3,
                                               "from": 8}]),
        "stimulate": ([Stimulate("input", 0.7)], [dict(kind="stimulate", S=lab["input"],
                                                        value=0.7)]),
        "stimulate five tokens": ([Stimulate("superclass:cb_intrinsic", -1.5, 4, 9)],
                                  [{"kind": "stimulate", "S": intrinsic, "value": -1.5,
                                    "from": 4, "to": 9}]),
        "cut": ([Cut("superclass:cb_sensory", "all")],
                [dict(kind="cut", A=sensory, B=lab["all"])]),
        "cut windowed": ([Cut("side:left", "superclass:cb_intrinsic", None, 6)],
                         [{"kind": "cut", "A": left, "B": intrinsic, "to": 6}]),
        "scale": ([Scale("all", "superclass:cb_sensory", 2.5)],
                  [dict(kind="scale", A=lab["all"], B=sensory, value=2.5)]),
        "scale windowed, negative": ([Scale("superclass:cb_intrinsic", "side:left", -0.5, 5, 12)],
                                     [{"kind": "scale", "A": intrinsic, "B": left, "value": -0.5,
                                       "from": 5, "to": 12}]),
        "all five together": (
            [Stimulate("input", 0.4, 2), Cut("superclass:cb_sensory", "side:left", 4),
             Silence("superclass:cb_intrinsic", None, 7), Scale("all", "all", 0.8, 3, 11),
             Clamp("side:left", 0.25, 5, 13)],
            [{"kind": "stimulate", "S": lab["input"], "value": 0.4, "from": 2},
             {"kind": "cut", "A": sensory, "B": left, "from": 4},
             {"kind": "silence", "S": intrinsic, "to": 7},
             {"kind": "scale", "A": lab["all"], "B": lab["all"], "value": 0.8, "from": 3,
              "to": 11},
             {"kind": "clamp", "S": left, "value": 0.25, "from": 5, "to": 13}]),
        # Overlaps: the later silence/clamp wins on a shared neuron; stimulations add;
        # a cut and a scale of the same synapse multiply (to 0).
        "later clamp wins": ([Silence("side:left"), Clamp("superclass:cb_sensory", 0.5)],
                             [dict(kind="silence", S=left),
                              dict(kind="clamp", S=sensory, value=0.5)]),
        "later silence wins": ([Clamp("superclass:cb_sensory", 0.5), Silence("side:left")],
                               [dict(kind="clamp", S=sensory, value=0.5),
                                dict(kind="silence", S=left)]),
        "stimulations add, edits multiply": (
            [Stimulate("input", 0.3), Stimulate("side:left", 0.2), Scale("all", "all", 0.5),
             Scale("side:left", "all", 3.0, 2, 8), Cut("superclass:cb_sensory", "all", 6)],
            [dict(kind="stimulate", S=lab["input"], value=0.3),
             dict(kind="stimulate", S=left, value=0.2),
             dict(kind="scale", A=lab["all"], B=lab["all"], value=0.5),
             {"kind": "scale", "A": left, "B": lab["all"], "value": 3.0, "from": 2, "to": 8},
             {"kind": "cut", "A": sensory, "B": lab["all"], "from": 6}]),
    }


CHECKPOINTS = {
    "389 neurons, rank 7": dict(neurons=389, edges=6007, d_embed=12, readout_rank=7, seed=21),
    "523 neurons, dense": dict(neurons=523, edges=9001, d_embed=10, readout_rank=None, seed=5),
}


@pytest.fixture(scope="module", params=list(CHECKPOINTS))
def odd_checkpoint(request):
    return make_random_checkpoint(missing_fraction=0.0, **CHECKPOINTS[request.param])


def _engine_run(engine, ck):
    tokenizer = _Tokens(ck.config.vocabulary)
    frames = list(iter_frames(engine, tokenizer, "", GenerationSettings(max_new_tokens=NEW_TOKENS),
                              prompt_ids=PROMPT_IDS))
    return ([f.predicted_token_id for f in frames if f.is_generation],
            [f.probabilities for f in frames])


class _Tokens:
    """Enough of a tokenizer for iter_frames on a model with no real vocabulary."""

    def __init__(self, vocabulary):
        self.vocab_size = vocabulary

    def token_text(self, token_id):
        return f"<{int(token_id)}>"

    def decode(self, ids):
        return "".join(self.token_text(i) for i in ids)


CASES = list(_cases(make_random_checkpoint(**CHECKPOINTS["389 neurons, rank 7"])))


@pytest.mark.parametrize("case", CASES)
def test_every_intervention_matches_the_reference_step(odd_checkpoint, case):
    ck = odd_checkpoint
    interventions, ops = _cases(ck)[case]
    expected_tokens, expected_dists = reference_run(ck, PROMPT_IDS, NEW_TOKENS, ops)
    plain_tokens, _ = reference_run(ck, PROMPT_IDS, NEW_TOKENS, [])
    for options in (dict(threads=1, overlap=False), dict(threads=2, overlap=True)):
        engine = Engine(ck, interventions=interventions, **options)
        tokens, dists = _engine_run(engine, ck)
        engine.close()
        assert tokens == expected_tokens, (case, options)
        assert len(dists) == len(expected_dists)
        for got, want in zip(dists, expected_dists):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # The intervention does something measurable (else this test could not fail).
    _, plain_dists = reference_run(ck, PROMPT_IDS, NEW_TOKENS, [])
    gap = max(np.abs(a - b).max() for a, b in zip(plain_dists, expected_dists))
    assert gap > 1e-3 or plain_tokens != expected_tokens, case


def _trace(engine, tokens):
    out = []
    for token in tokens:
        out.append(engine.step(token).copy())
        out.append(engine.state.copy())
    return out


TOKENS = [1, 17, 300, 5, 5, 900, 2, 44, 61, 1000, 3, 3, 8, 9]


@pytest.mark.parametrize("options", [dict(threads=1, overlap=False), dict(threads=2, overlap=True),
                                     dict(threads=3, blocks_per_thread=2)])
def test_no_interventions_is_bit_identical_to_the_plain_engine(options):
    ck = make_random_checkpoint(neurons=601, edges=12_007, d_embed=16, seed=8, vocabulary=1001)
    expected = _trace(Engine(ck, **options), TOKENS)
    for engine in (Engine(ck, interventions=[], **options),
                   Engine(ck, interventions=ResolvedInterventions(), **options)):
        assert engine._plan is None and not engine.interventions
        for a, b in zip(_trace(engine, TOKENS), expected):
            np.testing.assert_array_equal(a, b)
    # Interventions set and then removed leave the plain path, bit for bit.
    engine = Engine(ck, interventions=[Cut("all", "all"), Silence("input")], **options)
    _trace(engine, TOKENS[:4])
    engine.set_interventions([])
    engine.reset()
    assert engine._plan is None and not engine._variants
    for a, b in zip(_trace(engine, TOKENS), expected):
        np.testing.assert_array_equal(a, b)


def test_interventions_set_after_the_first_step_equal_those_given_at_construction():
    ck = make_random_checkpoint(neurons=389, edges=6007, d_embed=12, readout_rank=7, seed=2)
    chosen = [Cut("superclass:cb_sensory", "all", 3), Stimulate("input", 0.5, None, 6),
              Silence("side:right", 5)]
    expected = _trace(Engine(ck, threads=2, interventions=chosen), TOKENS)
    engine = Engine(ck, threads=2)
    engine.step(5)  # the kernel is chosen and the graph laid out before the interventions come
    engine.set_interventions(chosen)
    engine.reset()
    for a, b in zip(_trace(engine, TOKENS), expected):
        np.testing.assert_array_equal(a, b)


def test_the_engine_core_steps_resolved_interventions_as_the_engine_does():
    # The core (below the interventions, where a patch's source prompt runs) takes only
    # resolved interventions, and steps them to the engine's bits; written ones are refused
    # with one line rather than ignored.
    ck = make_random_checkpoint(neurons=389, edges=6007, d_embed=12, readout_rank=7, seed=2)
    chosen = [Cut("superclass:cb_sensory", "all", 3), Silence("side:right", 5)]
    expected = _trace(Engine(ck, threads=2, interventions=chosen), TOKENS)
    core = EngineCore(ck, threads=2, interventions=resolve(ck, chosen))
    for a, b in zip(_trace(core, TOKENS), expected):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(InputError, match="takes resolved interventions"):
        core.set_interventions(chosen)
    other = make_random_checkpoint(neurons=101, edges=900, seed=2)
    with pytest.raises(InputError, match="resolved for another model"):
        core.set_interventions(resolve(other, [Silence("input")]))
    assert [iv.kind for iv in core.interventions.interventions] == ["cut", "silence"]


def test_the_llvm_kernel_gives_the_same_bits_with_cuts_and_scales():
    if kernels.resolve("llvm") != "llvm":
        pytest.skip(f"llvm kernel unavailable: {kernels.status()['error']}")
    ck = make_random_checkpoint(neurons=1201, edges=30_011, d_embed=16, seed=8, vocabulary=1001)
    chosen = [Cut("superclass:cb_sensory", "side:left", 2, 9), Scale("all", "all", 0.7, 5),
              Clamp("input", 0.2, 4, 7)]
    expected = _trace(Engine(ck, threads=2, kernel="scipy", interventions=chosen), TOKENS)
    engine = Engine(ck, threads=2, kernel="llvm", interventions=chosen)
    for a, b in zip(_trace(engine, TOKENS), expected):
        np.testing.assert_array_equal(a, b)
    assert engine.kernel == "llvm" and len(engine._variants) == 3


def test_resolved_form_exposes_the_exact_arrays():
    ck = make_random_checkpoint(neurons=389, edges=6007, d_embed=12, readout_rank=7, seed=21)
    lab = _labels(ck)
    resolved = resolve(ck, [Silence("side:left", 2, 5), Stimulate("input", 0.5),
                            Clamp("id:1-4", 0.3), Cut("superclass:cb_sensory", "all", 3)])
    assert [op.indices.tolist() for op in resolved.post_state] == [lab["side"]["left"],
                                                                   [1, 2, 3, 4]]
    assert [op.value for op in resolved.post_state] == [0.0, 0.3]
    assert resolved.pre_add[0].indices.tolist() == lab["input"]
    (edit,) = resolved.graph_edits
    assert isinstance(edit, GraphEdit) and edit.factor == 0.0 and (edit.start, edit.stop) == (3, None)
    dense = _dense(ck)
    sensory = set(lab["superclass"]["cb_sensory"])
    offsets = np.asarray(ck.w_offsets)
    rows = np.repeat(np.arange(ck.config.neurons), np.diff(offsets))
    expected_edges = [e for e in range(ck.n_edges) if int(ck.w_indices[e]) in sensory]
    assert edit.edges.tolist() == expected_edges
    assert np.count_nonzero(dense[:, sorted(sensory)]) == edit.edges.size
    assert set(rows[edit.edges]) <= set(range(ck.config.neurons))
    assert resolved.selected == (len(lab["side"]["left"]), len(lab["input"]), 4, edit.edges.size)
    assert resolved.graph_keys() == [(0,)]
    assert resolved.graph_key(2) == () and resolved.graph_key(3) == (0,)
    for array in (edit.edges, resolved.post_state[0].indices):
        assert not array.flags.writeable


@pytest.mark.parametrize("kind, text, expected", [
    ("silence", "sign:inhibitory", Silence("sign:inhibitory")),
    ("silence", " superclass:cb_sensory & side:left @10:20 ",
     Silence("superclass:cb_sensory & side:left", 10, 20)),
    ("silence", "input@10:", Silence("input", 10)),
    ("silence", "input@:5", Silence("input", None, 5)),
    ("clamp", "type:KC*=0.5", Clamp("type:KC*", 0.5)),
    ("clamp", "id:3-7 = -0.25 @ 2 : 4", Clamp("id:3-7", -0.25, 2, 4)),
    ("stimulate", "input=0.8@10:15", Stimulate("input", 0.8, 10, 15)),
    ("stimulate", "input=-2", Stimulate("input", -2.0)),
    ("cut", "superclass:cb_sensory->all", Cut("superclass:cb_sensory", "all")),
    ("cut", "id:1-5 -> id:7-9@3:", Cut("id:1-5", "id:7-9", 3)),
    ("scale", "all->side:left=0.5@:8", Scale("all", "side:left", 0.5, None, 8)),
    ("scale", "(input|sign:inhibitory)->!input=-1", Scale("(input|sign:inhibitory)", "!input", -1)),
])
def test_command_line_forms(kind, text, expected):
    got = parse_intervention(kind, text)
    assert got == expected
    # The text form parses back to the same intervention.
    assert parse_intervention(kind, got.cli_value()) == got


@pytest.mark.parametrize("kind, text, fragment", [
    ("clamp", "input=1", "outside (-1, 1)"),
    ("clamp", "input=-1.5", "outside (-1, 1)"),
    ("clamp", "input", "must look like QUERY=VALUE"),
    ("clamp", "input=abc", "is not a number"),
    ("stimulate", "input=nan", "finite"),
    ("silence", "input=0.5", "takes no value"),
    ("silence", "input@5:5", "holds no token"),
    ("silence", "input@9:3", "holds no token"),
    ("silence", "input@a:b", "must look like @FROM:TO"),
    ("silence", "input@-3:", "must look like @FROM:TO"),
    ("silence", "@1:3", "is empty"),
    ("silence", "a->b", "belongs to --cut and --scale"),
    ("cut", "input", "PRE->POST"),
    ("cut", "input->", "PRE->POST"),
    ("cut", "a->b->c", "PRE->POST"),
    ("scale", "a->b", "QUERY->QUERY=FACTOR"),
    ("scale", "a->b=inf", "finite"),
])
def test_bad_command_line_forms_are_one_line_input_errors(kind, text, fragment):
    with pytest.raises(InputError) as info:
        parse_intervention(kind, text)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(f"--{kind} ")


def test_bad_interventions_fail_when_resolved_or_made():
    ck = make_random_checkpoint(neurons=101, edges=900, seed=2)
    with pytest.raises(InputError, match="selects no neurons"):
        resolve(ck, [Silence("input & !input")])
    with pytest.raises(InputError, match="unknown superclass"):
        Engine(ck, interventions=[Cut("superclass:nope", "all")])
    with pytest.raises(InputError, match="outside 0..100"):
        resolve(ck, [Silence([3, 101])])
    with pytest.raises(InputError, match="negative"):
        Silence([-1])
    with pytest.raises(InputError, match="empty list"):
        Silence([])
    with pytest.raises(InputError, match="outside"):
        Clamp("all", 1.0)
    with pytest.raises(InputError, match="whole number"):
        Silence("all", 2.5)
    # A cut between neurons with no synapse between them touches nothing: an error, not a no-op.
    offsets = np.asarray(ck.w_offsets)
    source = int(ck.w_indices[0])
    targets = [r for r in range(101) if source not in
               np.asarray(ck.w_indices[offsets[r]:offsets[r + 1]]).tolist()]
    with pytest.raises(InputError, match="no synapse runs"):
        resolve(ck, [Cut([source], targets)])
    # A failed set_interventions leaves the engine as it was.
    engine = Engine(ck, interventions=[Silence("input")])
    with pytest.raises(InputError):
        engine.set_interventions([Silence("superclass:nope")])
    assert [iv.kind for iv in engine.interventions.interventions] == ["silence"]


def test_a_resolve_error_names_the_intervention_and_the_end_of_the_cut_it_is_about():
    """Each refusal of resolve() begins with the intervention as the command line writes it
    (its kind and option value), and for a cut which side of '->' is wrong."""
    ck = make_random_checkpoint(neurons=101, edges=900, seed=2)
    offsets = np.asarray(ck.w_offsets)
    source = int(ck.w_indices[0])
    unconnected = [r for r in range(101) if source not in
                   np.asarray(ck.w_indices[offsets[r]:offsets[r + 1]]).tolist()]
    cases = [
        (Silence([3, 9, 10, 11, 101]), "", "neuron index 101 is outside 0..100"),
        (Clamp("input & !input", 0.5, 2, 5), "", "selects no neurons"),
        (Cut("input", [4, 200]), " (after '->')", "neuron index 200 is outside"),
        (Scale([500], "all", 0.5), " (before '->')", "neuron index 500 is outside"),
        (Cut([source], unconnected), "", "no synapse runs from the 1 selected neurons"),
    ]
    for item, end, reason in cases:
        with pytest.raises(InputError) as caught:
            resolve(ck, [Silence("input"), item])
        assert str(caught.value).startswith(f"{item}{end}: "), str(caught.value)
        assert reason in str(caught.value)
    assert str(cases[0][0]) == "silence id:3,9-11,101"


def test_json_form_round_trips_and_counts():
    chosen = (Silence("sign:inhibitory", 10, 20), Clamp([5, 6, 7, 9], -0.5),
              Stimulate("input", 0.8, None, 5), Cut("superclass:cb_sensory", "all", 4),
              Scale("all", "side:left", 0.5))
    data = to_json(chosen)
    assert data[0] == {"kind": "silence", "neurons": "sign:inhibitory", "from": 10, "to": 20}
    assert data[1] == {"kind": "clamp", "neurons": [5, 6, 7, 9], "value": -0.5}
    assert data[4] == {"kind": "scale", "pre": "all", "post": "side:left", "factor": 0.5}
    assert from_json(data) == chosen
    ck = make_random_checkpoint(neurons=389, edges=6007, d_embed=12, readout_rank=7, seed=21)
    ck = dataclasses.replace(ck, w_values=-np.abs(ck.w_values))  # every neuron inhibitory
    resolved = resolve(ck, chosen)
    applied = resolved.to_json(steps=15)
    assert [a["steps"] for a in applied] == [5, 15, 5, 11, 15]
    assert applied[1]["neurons_selected"] == 4 and applied[3]["synapses"] > 0
    assert from_json(applied) == chosen  # the counts are ignored on the way back
    assert str(chosen[1]) == "clamp id:5-7,9=-0.5"
    for bad, fragment in (({"kind": "zap"}, "no valid 'kind'"), ({"kind": "clamp", "neurons": "a"},
                                                                    "lacks 'value'"), ("x", "no valid")):
        with pytest.raises(InputError, match=fragment):
            from_json([bad])
