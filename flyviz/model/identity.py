"""What a model *is*, as two digests: its trained weights and its graph.

Results computed from a model (an atlas, a lesion map) record these digests so
that they are only ever shown beside the model they were made with, whatever
layout, folder or name the model was loaded from. Both are SHA-256 over the
arrays as the engine uses them, in a fixed order and fixed dtypes, with each
array's name and shape hashed before its bytes:

``weights``
    ``wte, in_proj, gain, rec_gain, bias, ln_weight, ln_bias`` and the
    readout (``head``, or ``head_a`` and ``head_b``), as float32.
``graph``
    The CSR graph (``w_offsets`` as int64, ``w_indices`` as int32,
    ``w_values`` as float32) and the interface (``in_index``, ``out_index``
    as int64).

So a web export, fly-wordbrain weights and a Hugging Face copy of the same
model have the same identity; a graph stored with 16-bit indices hashes like
its 32-bit copy. Hashing a full-size model takes about 0.1 s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from flyviz.model.checkpoint import Checkpoint

WEIGHT_ARRAYS = ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias",
                 "head", "head_a", "head_b")
GRAPH_ARRAYS = (("w_offsets", np.int64), ("w_indices", np.int32), ("w_values", np.float32),
                ("in_index", np.int64), ("out_index", np.int64))


@dataclass(frozen=True)
class ModelIdentity:
    """The two digests of a model (lower-case hex SHA-256)."""

    weights_sha256: str
    graph_sha256: str

    def to_dict(self) -> dict[str, str]:
        """Plain-JSON form."""
        return {"weights_sha256": self.weights_sha256, "graph_sha256": self.graph_sha256}

    def short(self) -> str:
        """``weights 1a2b3c4d…, graph 5e6f7a8b…`` for messages."""
        return f"weights {self.weights_sha256[:12]}…, graph {self.graph_sha256[:12]}…"


def _update(digest, name: str, array: np.ndarray, dtype: type) -> None:
    array = np.asarray(array)
    digest.update(f"{name}:{dtype.__name__}:{list(array.shape)}\0".encode())
    flat = array.reshape(-1)
    step = 1 << 22  # in pieces, so that memory-mapped arrays are streamed, not copied whole
    for start in range(0, flat.size, step):
        digest.update(np.ascontiguousarray(flat[start:start + step], dtype=dtype).tobytes())


def model_identity(checkpoint: Checkpoint) -> ModelIdentity:
    """The weight and graph digests of ``checkpoint`` (see the module documentation)."""
    weights = hashlib.sha256()
    for name in WEIGHT_ARRAYS:
        array = getattr(checkpoint, name)
        if array is not None:
            _update(weights, name, array, np.float32)
    graph = hashlib.sha256()
    for name, dtype in GRAPH_ARRAYS:
        _update(graph, name, getattr(checkpoint, name), dtype)
    return ModelIdentity(weights.hexdigest(), graph.hexdigest())
