"""The leaky-tanh operator generalised once (leak per neuron, input and readout biases,
microsteps, a readout without LayerNorm): at their neutral values it is the Fly LLM of
fly-formats.md §1.5, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.sparse import csr_matrix

from flyviz.model.engine import Engine
from flyviz.model.synthetic import make_random_checkpoint


def _fly_llm_float32(ck, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """fly-formats.md §1.5 in float32, in the engine's order of operations: one update per
    token, scalar leak, delay slots, LayerNorm and the head (the Fly LLM as it was)."""
    cfg = ck.config
    f32 = np.float32
    n = cfg.neurons
    w = csr_matrix((np.asarray(ck.w_values, f32), np.asarray(ck.w_indices),
                    np.asarray(ck.w_offsets)), shape=(n, n))
    x = np.zeros(n, f32)
    recent = [cfg.pad_token_id] * cfg.delay_k
    leak, keep = f32(cfg.leak), f32(1.0 - cfg.leak)
    logits = []
    for token in tokens:
        history = np.array([token] + recent[::-1][: cfg.delay_k - 1])
        drive = np.matmul(np.asarray(ck.wte, f32)[history][:, None, :],
                          np.asarray(ck.in_proj, f32))[:, 0, :].reshape(-1)
        pre = w @ x
        pre *= np.asarray(ck.rec_gain, f32)
        pre[np.asarray(ck.in_index)] += drive
        pre *= np.asarray(ck.gain, f32)
        pre += np.asarray(ck.bias, f32)
        x = x * keep + np.tanh(pre) * leak
        recent = recent[1:] + [token]
        h = x[np.asarray(ck.out_index)]
        mean = h.mean(dtype=np.float64)
        var = np.square(h - f32(mean), dtype=f32).mean(dtype=np.float64)
        normed = (h - f32(mean)) * f32(1.0 / np.sqrt(var + cfg.layer_norm_eps))
        normed = normed * np.asarray(ck.ln_weight, f32) + np.asarray(ck.ln_bias, f32)
        logits.append(np.asarray(ck.head_b, f32) @ (np.asarray(ck.head_a, f32) @ normed))
    return np.array(logits), x


def test_neutral_operator_parameters_give_the_fly_llm_bit_for_bit() -> None:
    ck = make_random_checkpoint(neurons=120, edges=1500, d_embed=8, delay_k=3,
                                vocabulary=64, readout_rank=6, seed=3, with_anatomy=False)
    # The same model with the new parameters spelled out at their neutral values.
    neutral = dataclasses.replace(
        ck, config=dataclasses.replace(ck.config, microsteps=1, layer_norm=True),
        in_bias=np.zeros(ck.config.n_inputs, np.float32),
        head_bias=np.zeros(ck.config.vocabulary, np.float32))
    tokens = [1, 7, 33, 5, 60, 2, 9, 9]
    expected_logits, expected_state = _fly_llm_float32(ck, tokens)
    for model in (ck, neutral):
        engine = Engine(model, threads=1)
        got = np.array([engine.step(t).copy() for t in tokens])
        assert np.array_equal(got, expected_logits)
        assert np.array_equal(engine.state, expected_state)
        engine.close()
    assert ck.operator_extensions() == []


def test_microsteps_and_per_neuron_leak_change_the_step() -> None:
    """The new parameters are live: two microsteps and a leak vector change the state."""
    ck = make_random_checkpoint(neurons=80, edges=800, d_embed=8, delay_k=2,
                                vocabulary=32, readout_rank=4, seed=5, with_anatomy=False)
    states = {}
    rng = np.random.default_rng(0)
    leak = rng.uniform(0.2, 0.95, ck.config.neurons).astype(np.float32)
    for label, model in {
            "plain": ck,
            "two": dataclasses.replace(ck, config=dataclasses.replace(ck.config, microsteps=2)),
            "leak": dataclasses.replace(ck, leak_vector=leak)}.items():
        engine = Engine(model, threads=1)
        for t in (3, 4, 5):
            engine.step(t)
        states[label] = engine.state.copy()
        engine.close()
    assert not np.allclose(states["plain"], states["two"])
    assert not np.allclose(states["plain"], states["leak"])


def test_trainable_leak_and_bounded_multipliers_at_zero_are_the_fixed_arm() -> None:
    from flyviz.model.operator import bounded_edge_values, trainable_leak

    ck = make_random_checkpoint(neurons=90, edges=900, d_embed=8, delay_k=2, vocabulary=32,
                                readout_rank=4, seed=8, with_anatomy=False)
    n = ck.config.neurons
    types = np.random.default_rng(1).integers(0, 7, n)

    def run(model) -> tuple[np.ndarray, np.ndarray]:
        engine = Engine(model, threads=1)
        logits = np.array([engine.step(t).copy() for t in (1, 4, 9, 16, 25)])
        state = engine.state.copy()
        engine.close()
        return logits, state

    def arm(delta: np.ndarray, theta: np.ndarray):
        values = bounded_edge_values(ck.w_values, ck.w_indices, ck.w_offsets, types, theta, theta)
        return dataclasses.replace(ck, leak_vector=trainable_leak(delta), w_values=values)

    fixed = run(ck)
    zero = run(arm(np.zeros(n), np.zeros(7, np.float32)))
    assert np.array_equal(zero[0], fixed[0]) and np.array_equal(zero[1], fixed[1])
    moved = run(arm(np.full(n, 0.5), np.full(7, 0.3, np.float32)))
    assert not np.allclose(moved[1], fixed[1])
