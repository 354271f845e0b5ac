"""Digests of a checkpoint's graph buffers and parameters, as the published manifests
compute them.

This module has one job: the SHA-256 digests that name a model's frozen graph
(:func:`frozen_buffer_digests`, and a wordbrain selector's set,
:func:`selector_digests`) and its weights as a web export stores them
(:func:`parameter_digests`), in the convention the released values were
computed with (fly-formats.md sections 2.2, 3 and 4.2). The writers
(:mod:`flyviz.model.writers`) put them in the manifests they fill; a model's
identity (:mod:`flyviz.model.identity`) and ``flyviz verify``
(:mod:`flyviz.model.verify`) recompute them.
"""

from __future__ import annotations

import hashlib

import numpy as np

from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.formats.common import (EDGE_GROUP_INDEX, FROZEN_BUFFER_DTYPES,
                                          NODE_TYPE_INDEX, array_digest)

__all__ = ["FROZEN_BUFFER_DTYPES", "WEB_PARAMETERS", "cell_type_index", "frozen_buffer_digests",
           "parameter_digests", "selector_digests"]

#: The web export's parameter files, in the order the browser downloads them.
WEB_PARAMETERS = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias")


def _graph_buffers(ckpt: Checkpoint) -> dict[str, np.ndarray]:
    return {
        "brain.w_offsets": np.asarray(ckpt.w_offsets),
        "brain.w_indices": np.asarray(ckpt.w_indices),
        "brain.w_values": np.asarray(ckpt.w_values),
        "brain.in_index": np.asarray(ckpt.in_index),
        "brain.out_index": np.asarray(ckpt.out_index),
    }


def frozen_buffer_digests(ckpt: Checkpoint) -> dict[str, str]:
    """SHA-256 of each frozen graph buffer in its original dtype.

    Each digest covers the dtype name, Python's ``str(tuple(shape))`` and the
    raw little-endian bytes, e.g. ``sha256(b"int32" + b"(49394,)" + bytes)``
    (:func:`~flyviz.model.formats.common.array_digest`).

    Returns
    -------
    dict
        ``{"brain.w_offsets": hex, ...}`` for the five frozen buffers.
    """
    return {name: array_digest(array, FROZEN_BUFFER_DTYPES[name])
            for name, array in _graph_buffers(ckpt).items()}


def cell_type_index(anatomy: Anatomy | None) -> tuple[list[str], np.ndarray] | None:
    """``(type_labels, type_index)`` as the dataset stores cell types, or ``None``.

    Labels are sorted; ``type_index[i]`` is neuron ``i``'s label's position.
    """
    if anatomy is None or anatomy.cell_type is None:
        return None
    labels = sorted(set(anatomy.cell_type))
    lookup = {label: i for i, label in enumerate(labels)}
    return labels, np.array([lookup[t] for t in anatomy.cell_type], dtype=np.int32)


def selector_digests(ckpt: Checkpoint) -> dict[str, str]:
    """The frozen-buffer digests of a wordbrain selector entry.

    The five graph buffers, the empty ``brain.edge_group_index`` of the
    fixed-plasticity arms and, when the checkpoint has cell types,
    ``brain.node_type_index`` (the dataset's ``type_index`` as int64).
    """
    digests = frozen_buffer_digests(ckpt)
    digests[EDGE_GROUP_INDEX] = array_digest(np.zeros(0, dtype=np.int64), "int64")
    types = cell_type_index(ckpt.anatomy)
    if types is not None:
        digests[NODE_TYPE_INDEX] = array_digest(types[1], "int64")
    return digests


def parameter_digests(ckpt: Checkpoint) -> dict[str, str]:
    """SHA-256 of each parameter as the web export stores it (raw little-endian float32).

    Keyed like the web manifest's ``files`` (``wte`` ... ``head_a``,
    ``head_b``, or ``head`` for a dense readout); equal digests mean a web
    export holds exactly these weights.
    """
    arrays = {name: getattr(ckpt, name) for name in WEB_PARAMETERS}
    if ckpt.head is not None:
        arrays["head"] = ckpt.head
    else:
        arrays["head_a"], arrays["head_b"] = ckpt.head_a, ckpt.head_b
    return {name: hashlib.sha256(np.ascontiguousarray(a, dtype="<f4").tobytes()).hexdigest()
            for name, a in arrays.items()}
