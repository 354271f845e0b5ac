"""The engine: the forward pass written out by hand, and its speed options give identical results."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.model.engine import Engine
from flyviz.model.errors import InputError
from flyviz.model.synthetic import make_random_checkpoint

TOKENS = [1, 17, 300, 5, 5, 900, 2, 44, 61, 1000, 3, 3]


def _reference_step(ckpt, x, history, token):
    """fly-formats.md section 1.5 in float64, one line per equation."""
    cfg = ckpt.config
    ext = list(history) + [token]
    drive = np.concatenate([ckpt.wte[ext[-1 - j]].astype(np.float64) @ ckpt.in_proj[j]
                            for j in range(cfg.delay_k)])
    rec = np.zeros(cfg.neurons)
    for row in range(cfg.neurons):
        lo, hi = ckpt.w_offsets[row], ckpt.w_offsets[row + 1]
        rec[row] = np.dot(ckpt.w_values[lo:hi].astype(np.float64), x[ckpt.w_indices[lo:hi]])
    pre = ckpt.rec_gain * rec
    pre[ckpt.in_index] += drive
    x = (1 - cfg.leak) * x + cfg.leak * np.tanh(ckpt.gain * pre + ckpt.bias)
    h = x[ckpt.out_index]
    normed = (h - h.mean()) / np.sqrt(h.var() + cfg.layer_norm_eps) * ckpt.ln_weight + ckpt.ln_bias
    logits = ckpt.head @ normed if ckpt.head is not None else ckpt.head_b @ (ckpt.head_a @ normed)
    return x, ext[1:], logits


@pytest.mark.parametrize("rank", [7, None])
def test_engine_follows_the_forward_pass(rank):
    ckpt = make_random_checkpoint(neurons=389, edges=6007, d_embed=12, readout_rank=rank, seed=21)
    engine = Engine(ckpt, threads=2)
    x = np.zeros(ckpt.config.neurons)
    history = [ckpt.config.pad_token_id] * ckpt.config.delay_k
    for token in TOKENS:
        x, history, expected = _reference_step(ckpt, x, history, token)
        logits = engine.step(token)
        np.testing.assert_allclose(engine.state, x, atol=2e-5)
        np.testing.assert_allclose(logits, expected, atol=2e-4 * max(1.0, np.abs(expected).max()))
        assert engine.mean_abs_state == pytest.approx(np.abs(x).mean(), abs=1e-6)
    engine.close()


def _run(engine, tokens, settle=False):
    out = []
    for token in tokens:
        out.append(engine.step(token).copy())
        out.append(engine.state.copy())
        if settle:  # finishing the background product early must not change the next step
            engine.wait_background()
    return out


@pytest.mark.parametrize("rank", [12, None])
def test_overlap_threads_and_blocks_do_not_change_a_single_bit(rank):
    ckpt = make_random_checkpoint(neurons=1201, edges=30_011, d_embed=16, seed=8,
                                  readout_rank=rank, vocabulary=1001)
    baseline = Engine(ckpt, threads=1, overlap=False)
    expected = _run(baseline, TOKENS)
    for options in (dict(threads=2, overlap=True), dict(threads=2, overlap=False),
                    dict(threads=3, overlap=True, blocks_per_thread=4), dict(threads=1, overlap=True),
                    dict(threads=2, overlap=True, single_threaded_blas=False)):
        engine = Engine(ckpt, **options)
        assert engine.overlap == options["overlap"]
        # Run, reset half-way (a pending background product must not leak in), run again.
        got = _run(engine, TOKENS[:5])
        engine.reset()
        assert not engine.state.any() and engine.tokens_seen == 0
        got = _run(engine, TOKENS)
        # Multi-threaded BLAS splits a dense head's rows differently, which may move
        # the last bits of a logit: a few float32 ulps of the largest logit (one ulp at
        # 16 is 1.9e-6), so the tolerance scales with the logits; everything else must
        # be bit-identical.
        same = np.testing.assert_array_equal if options.get("single_threaded_blas", True) \
            else (lambda a, b: np.testing.assert_allclose(
                a, b, rtol=0, atol=4 * float(np.spacing(np.abs(b).max(initial=1.0)))))
        for a, b in zip(got, expected):
            same(a, b)
        engine.reset()
        for a, b in zip(_run(engine, TOKENS, settle=True), expected):
            same(a, b)
        engine.close()
    baseline.close()


def test_blas_thread_limit_is_restored_after_steps():
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    # Two BLAS threads to come back to (the suite may run with one per test process), so
    # that a limit left at one thread shows.
    with controller.limit(limits=2, user_api="blas"):
        before = [lib.num_threads for lib in controller.select(user_api="blas").lib_controllers]
        engine = Engine(make_random_checkpoint(neurons=211, edges=2000, seed=4), threads=2)
        for token in TOKENS:
            engine.step(token)
        engine.close()
        after = [lib.num_threads for lib in ThreadpoolController().select(
            user_api="blas").lib_controllers]
    assert after == before


def test_bad_token_ids_are_input_errors():
    engine = Engine(make_random_checkpoint(neurons=101, edges=900, seed=2), threads=2)
    engine.step(5)
    with pytest.raises(InputError, match="outside the vocabulary"):
        engine.step(10_000)
    with pytest.raises(InputError):
        engine.step(-1)
    engine.step(6)  # still usable afterwards
    engine.close()


def test_blas_loaded_after_the_first_step_runs_in_one_thread_too():
    """scipy's own BLAS (ARPACK's, scipy.linalg's) often loads after an engine first steps."""
    import json
    import os
    import subprocess
    import sys

    script = """
import json
from threadpoolctl import ThreadpoolController
from flyviz.model.engine import SINGLE_THREADED_BLAS, Engine
from flyviz.model.synthetic import make_random_checkpoint
def listed():
    return [lib.num_threads for lib in ThreadpoolController().select(user_api="blas").lib_controllers]
engine = Engine(make_random_checkpoint(neurons=101, edges=900, seed=2), threads=1)
engine.step(5)  # the first listing of the BLAS libraries
before = len(listed())
import scipy.linalg  # noqa: E402,F401
with SINGLE_THREADED_BLAS:
    inside = listed()
print(json.dumps({"before": before, "inside": inside, "after": listed()}))
"""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if len(found["inside"]) == found["before"]:
        pytest.skip("scipy.linalg brought no BLAS library of its own here")
    assert found["inside"] == [1] * len(found["inside"])
    assert 2 in found["after"]  # and the setting comes back
