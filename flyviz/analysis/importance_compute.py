"""Estimated lesions, the gradient maths: one window's per-neuron ``sum_t x_i(t) dCE/dx_i(t)``.

:func:`window_scores` runs one teacher-forced pass of the single-stream engine
(recording its tape) and one backward sweep in the ``"gradient"`` mode, seeded at
every counted position with the cotangent of that position's cross-entropy term,
and takes the neuron's one-step self-path out of the derivative (the module
documentation of :mod:`flyviz.analysis.importance` says why). Plain NumPy on the
engines it is given: no tasks, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis.sweep import LOG_FLOOR

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.attribution import BackwardEngine
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.engine import Engine


def _head_cotangents(ckpt: "Checkpoint", weights: np.ndarray, scratch: dict[str, Any]
                     ) -> np.ndarray:
    """``(T, readout)`` float64: ``head^T e`` for each row ``e`` of ``weights`` (what
    :func:`~flyviz.model.explain.logit_cotangent` computes first, for all positions of a
    window in one product)."""
    if ckpt.head is not None:
        return (weights.astype(np.float32) @ np.asarray(ckpt.head)).astype(np.float64)
    if "head_a" not in scratch:  # float64 copies, once per engine
        scratch["head_a"] = np.asarray(ckpt.head_a, dtype=np.float64)
        scratch["head_b"] = np.asarray(ckpt.head_b, dtype=np.float64)
    return (weights @ scratch["head_b"]) @ scratch["head_a"]


#: Positions whose seeds are computed together (float64 blocks of this many states).
_SEED_ROWS = 32


def _layer_norm_cotangents(ckpt: "Checkpoint", states: np.ndarray, heads: np.ndarray,
                           scratch: dict[str, Any]) -> np.ndarray:
    """``(rows, neurons)`` float32: ``d(a_t . LayerNorm(x_t[out]))/dx_t`` for each row, the
    LayerNorm's scale differentiated too (what :func:`flyviz.model.explain.logit_cotangent`
    gives in the gradient mode, for a block of positions at once; the scale is computed
    as the engine's readout computes it)."""
    cfg = ckpt.config
    if "out_index" not in scratch:
        out = None if ckpt.out_index_is_identity() else np.asarray(ckpt.out_index, np.intp)
        unique = out is None or np.unique(out).size == out.size
        scratch["out_index"] = (out, unique, np.asarray(ckpt.ln_weight, dtype=np.float64))
    out, unique, ln_weight = scratch["out_index"]
    h = states if out is None else states[:, out]
    mean = h.mean(axis=1, dtype=np.float64)
    var = np.square(h - mean.astype(np.float32)[:, None], dtype=np.float32).mean(
        axis=1, dtype=np.float64)
    inv = (1.0 / np.sqrt(var + cfg.layer_norm_eps)).astype(np.float32).astype(np.float64)
    q = heads * ln_weight
    q -= q.mean(axis=1, keepdims=True)
    normed = (h.astype(np.float64) - mean[:, None]) * inv[:, None]
    # mean(q * normed) is the same with q centred: normed sums to 0 along each row.
    c_h = q - normed * np.mean(q * normed, axis=1, keepdims=True)
    c_h *= inv[:, None]
    if out is None:
        return c_h.astype(np.float32)
    c = np.zeros((states.shape[0], cfg.neurons), dtype=np.float64)
    if unique:
        c[:, out] = c_h
    else:
        for row in range(states.shape[0]):
            np.add.at(c[row], out, c_h[row])
    return c.astype(np.float32)


def self_weights(ckpt: "Checkpoint") -> np.ndarray:
    """``(neurons,)`` float64: each neuron's synapse onto itself (0 where it has none)."""
    offsets = np.asarray(ckpt.w_offsets, dtype=np.int64)
    rows = np.repeat(np.arange(ckpt.config.neurons), np.diff(offsets))
    pre = np.asarray(ckpt.w_indices)
    out = np.zeros(ckpt.config.neurons)
    hit = rows == pre
    out[rows[hit]] = np.asarray(ckpt.w_values, dtype=np.float64)[hit]
    return out


def window_scores(ckpt: "Checkpoint", engine: "Engine", backward: "BackwardEngine",
                  ids: Sequence[int] | np.ndarray, scratch: dict[str, Any] | None = None
                  ) -> tuple[np.ndarray, float, int]:
    """One window (BOS first): ``(sum_t x_i(t) dCE_sum/dx_i(t) per neuron, CE sum, positions)``.

    ``CE_sum`` is the sum of the cross-entropies of positions ``0 .. len(ids)-2``
    (position ``p`` predicts ``ids[p + 1]``); ``ΔCE_est`` of the window's sum is
    minus the first value. One forward pass (tape) and one gradient sweep.

    The derivative is the one the silence needs (see the module documentation):
    ``sum_t x_i(t) (v_i(t) - J_ii(t+1) v_i(t+1)) = sum_t v_i(t) (x_i(t) - J_ii(t)
    x_i(t-1))``, computed as the second form while the sweep passes.
    """
    from flyviz.model.attribution import GRADIENT, record_tape

    scratch = {} if scratch is None else scratch
    ids = [int(t) for t in ids]
    n = int(ckpt.config.neurons)
    total = np.zeros(n, dtype=np.float64)
    counted = len(ids) - 1
    if counted < 1:
        return total, 0.0, 0
    tape = record_tape(engine, ids, slopes=True, interventions=())
    logits = np.stack([tape.logits(t) for t in range(counted)]).astype(np.float64)
    targets = np.asarray(ids[1:], dtype=np.int64)
    rows = np.arange(counted)
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    ce_sum = float(-np.maximum(log_p[rows, targets], LOG_FLOOR).sum())
    # d CE_p / d logits_p = softmax - one_hot(target): every position's term is a seed.
    weights = np.exp(log_p)
    weights[rows, targets] -= 1.0
    heads = _head_cotangents(ckpt, weights, scratch)
    seeds: dict[int, np.ndarray] = {}
    for start in range(0, counted, _SEED_ROWS):
        rows_here = range(start, min(counted, start + _SEED_ROWS))
        block = _layer_norm_cotangents(ckpt, np.stack([tape.x(t) for t in rows_here]),
                                       heads[start:start + len(rows_here)], scratch)
        seeds.update(zip(rows_here, block))

    if "self_weight" not in scratch:
        scratch["self_weight"] = self_weights(ckpt)
    # J_ii(t) = dx_i(t)/dx_i(t-1) along the neuron's own one-step path: its leak, and its
    # self-synapse (if any) through the tanh.
    leak = float(ckpt.config.leak)
    own = leak * np.asarray(ckpt.gain, np.float64) * np.asarray(ckpt.rec_gain, np.float64) \
        * scratch["self_weight"]

    def gather(t: int, v: np.ndarray, m: np.ndarray, w: np.ndarray) -> None:
        x = tape.x(t).astype(np.float64)
        held = (1.0 - leak) + own * tape.slope(t).astype(np.float64)
        injected = x - held * tape.x(t - 1).astype(np.float64)
        np.add(total, injected * v, out=total)

    backward.sweep(tape, seeds, mode=GRADIENT, keep=False, on_step=gather)
    return total, ce_sum, counted


__all__ = ["self_weights", "window_scores"]
