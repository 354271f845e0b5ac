"""fly-wordbrain's two extensions of the operator, as parameters of the generalised one.

Neither arm is published (``fly-family-2026.md`` §1.7, §1.8): these give the per-neuron
leak and the per-edge weights the engine takes (``Checkpoint.leak_vector``,
``Checkpoint.w_values``) from the arms' parameters, so that their weights load as soon as
they appear. With zero parameters both give the fixed arm, the Fly LLM, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

#: The fixed arm's leak.
BASE_LEAK = 0.9
#: The bound of the type-pair multipliers (the "±10 %" arms).
MULTIPLIER_BOUND = 0.1


def trainable_leak(delta: np.ndarray, base: float = BASE_LEAK) -> np.ndarray:
    """``sigmoid(logit(base) + delta)`` per neuron, in float64 (the trainable-leak arm).

    Float64 so that the engine rounds the leak and ``1 - leak`` once each: ``delta = 0``
    then gives the scalar leak's bits exactly.
    """
    logit = math.log(base / (1.0 - base))
    return 1.0 / (1.0 + np.exp(-(logit + np.asarray(delta, dtype=np.float64))))


def bounded_edge_values(w_values: np.ndarray, w_indices: np.ndarray, w_offsets: np.ndarray,
                        neuron_type: np.ndarray, theta_src: np.ndarray, theta_dst: np.ndarray,
                        bound: float = MULTIPLIER_BOUND) -> np.ndarray:
    """``w · (1 + bound · tanh(θ_src[type(src)] + θ_dst[type(dst)]))`` per CSR edge, float32.

    Parameters
    ----------
    w_values, w_indices, w_offsets
        The CSR graph (row = destination).
    neuron_type
        ``(neurons,)`` type index of every neuron.
    theta_src, theta_dst
        ``(types,)`` the arm's source and destination parameters.
    bound
        The multipliers' bound (0.1).
    """
    types = np.asarray(neuron_type, dtype=np.int64)
    counts: np.ndarray = np.diff(np.asarray(w_offsets, dtype=np.int64)).astype(np.int64)
    destination = np.repeat(np.arange(counts.size), counts)
    angle = (np.asarray(theta_src, np.float32)[types[np.asarray(w_indices)]]
             + np.asarray(theta_dst, np.float32)[types[destination]])
    multiplier = np.float32(1.0) + np.float32(bound) * np.tanh(angle)
    return (np.asarray(w_values, dtype=np.float32) * multiplier).astype(np.float32)
