"""Helpers shared by the layout loaders: JSON, raw arrays, digests, tokenizers."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.errors import CheckpointError

#: Files at most this large are hashed and compared with the manifest's SHA-256
#: on load. Larger ones (the 36 MB weights, the 18 MB presynaptic indices) are
#: size-checked and memory-mapped; ``verify=True`` hashes them too.
HASH_LIMIT_BYTES = 64 * 1024 * 1024


def read_json(path: Path, what: str) -> Any:
    """Parse a JSON file, turning every failure into one :class:`CheckpointError` line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{what} not found: {path}; the folder is incomplete, "
                              "download it again") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path.name} is not UTF-8 text (byte {exc.start}); the file is "
                              "damaged, download it again") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON (line {exc.lineno}, column "
                              f"{exc.colno}: {exc.msg}); the file is damaged, download it "
                              "again") from None
    except RecursionError:
        raise CheckpointError(f"{path.name} nests too deeply to be read; the file is damaged, "
                              "download it again") from None


def whole_number(value: Any, what: str) -> int:
    """A JSON integer (or a float with no fraction, ``8.0``) as an ``int``; anything else
    (text, ``null``, ``true``, a list, ``1.5``, ``NaN``, ``Infinity``) is one
    :class:`CheckpointError` line naming ``what``, e.g. ``"config.json: n_neurons"``.
    A numpy scalar (a count read from an array) is judged as the Python value it holds."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise CheckpointError(f"{what} is {value!r:.60}, expected an integer; the file is damaged, "
                          "download it again")


def real_number(value: Any, what: str) -> float:
    """A JSON number as a ``float``; anything else is one :class:`CheckpointError` line naming
    ``what`` (NaN and infinities pass here: the checkpoint's own checks name their range)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise CheckpointError(f"{what} is {value!r:.60}, expected a number; the file is damaged, "
                          "download it again")


def true_or_false(value: Any, what: str) -> bool:
    """A JSON ``true`` or ``false`` as a ``bool``; anything else (the text ``"false"``, which
    Python would take as true, ``0``, ``null``) is one :class:`CheckpointError` line naming
    ``what``."""
    if isinstance(value, bool):
        return value
    raise CheckpointError(f"{what} is {value!r:.60}, expected true or false; the file is "
                          "damaged, download it again")


def hash_file(path: Path, digest: Any) -> str:
    """Feed a file to a ``hashlib`` object in 4 MB chunks; return its hex digest."""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file."""
    return hash_file(path, hashlib.sha256())


#: dtypes in which the released checkpoints store their frozen buffers; the
#: dataset manifest repeats them as ``frozen_buffers_original_dtype``.
FROZEN_BUFFER_DTYPES = {
    "brain.w_offsets": "int32",
    "brain.w_indices": "int32",
    "brain.w_values": "float32",
    "brain.in_index": "int64",
    "brain.out_index": "int64",
}
#: The two extra frozen buffers a fly-wordbrain selector entry digests:
#: ``neurons/type_index.i32`` as int64, and the edge-group index (empty for the
#: fixed-plasticity arms flyviz runs).
NODE_TYPE_INDEX = "brain.node_type_index"
EDGE_GROUP_INDEX = "brain.edge_group_index"

#: Elements cast and hashed at a time by :func:`array_digest`.
_DIGEST_CHUNK = 1 << 22


def array_digest(array: np.ndarray, dtype: str | np.dtype) -> str:
    """The fly-wordbrain frozen-buffer digest of ``array`` cast to ``dtype``.

    One SHA-256 over the UTF-8 dtype name (``int32``), the UTF-8 text of
    Python's ``str(tuple(shape))`` (``(49394,)``, trailing comma for 1-D) and
    the raw little-endian bytes of the cast array (fly-formats.md section 2.2,
    verified by recomputing the released values). The cast runs in chunks, so
    a memory-mapped 9M-edge array is streamed, not copied whole.
    """
    dt = np.dtype(dtype)
    little = dt.newbyteorder("<") if dt.itemsize > 1 else dt
    digest = hashlib.sha256()
    digest.update(dt.name.encode("utf-8"))
    digest.update(str(tuple(int(s) for s in array.shape)).encode("utf-8"))
    flat = array.reshape(-1)
    for start in range(0, flat.shape[0], _DIGEST_CHUNK):
        chunk = np.ascontiguousarray(flat[start:start + _DIGEST_CHUNK], dtype=little)
        digest.update(memoryview(chunk.view(np.uint8)))
    return digest.hexdigest()


def empty_index_digests() -> set[str]:
    """Digests an empty index buffer may have (its integer dtype is not recorded)."""
    empty = np.zeros(0, dtype=np.int64)
    return {array_digest(empty, dtype) for dtype in ("int64", "int32")}


def check_sha256(path: Path, expected: str | None, verify: bool | None) -> None:
    """Compare a file's SHA-256 with the manifest's.

    ``verify=None`` hashes files up to :data:`HASH_LIMIT_BYTES`, ``True`` all,
    ``False`` none.
    """
    if not expected or verify is False:
        return
    if verify is None and path.stat().st_size > HASH_LIMIT_BYTES:
        return
    actual = sha256_file(path)
    if actual.lower() != str(expected).lower():
        raise CheckpointError(f"{path.name}: SHA-256 {actual[:12]}... does not match the "
                              f"manifest's {str(expected)[:12]}...; the file is damaged or from "
                              "another release, download it again")


def read_raw(path: Path, dtype: str | np.dtype, shape: tuple[int, ...] | int) -> np.ndarray:
    """Memory-map a headerless little-endian array after checking its byte size."""
    dt = np.dtype(dtype).newbyteorder("<") if np.dtype(dtype).itemsize > 1 else np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise CheckpointError(f"{path.name}: shape {list(shape)} has a negative size; the "
                              "manifest is damaged, download it again")
    expected = math.prod(shape) * dt.itemsize  # Python ints: a damaged shape cannot overflow
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; the folder is incomplete, download it "
                              "again") from None
    if size != expected:
        raise CheckpointError(f"{path.name} is {size:,} bytes but {list(shape)} x {dt.name} needs "
                              f"{expected:,}; the file is truncated or does not belong to this "
                              "model, download it again")
    if expected == 0:
        return np.zeros(shape, dtype=dt)
    return np.memmap(path, dtype=dt, mode="r", shape=shape)


def find_tokenizer(*folders: Path | None) -> Path | None:
    """The first ``tokenizer.json`` found in ``folders``."""
    for folder in folders:
        if folder is not None and (Path(folder) / "tokenizer.json").is_file():
            return Path(folder) / "tokenizer.json"
    return None


def frozen_digest_mismatch(model_digests: dict[str, str] | None,
                           graph_digests: dict[str, str] | None) -> str | None:
    """Why weights do not belong to a graph, or ``None`` when they do.

    Parameters
    ----------
    model_digests
        The frozen-buffer digests the weights' manifest records.
    graph_digests
        The same digests recomputed from the arrays flyviz will run (see
        :func:`array_digest`). Only buffers named in both are compared; an
        empty ``brain.edge_group_index`` matches its empty-array digest.
    """
    if not model_digests or not graph_digests:
        return None
    for name, digest in model_digests.items():
        other = graph_digests.get(name)
        if other is None and name == EDGE_GROUP_INDEX:
            continue  # the dataset has no edge groups; verify reports whether it is empty
        if other is not None and str(other).lower() != str(digest).lower():
            what = ("another cell-type index" if name == NODE_TYPE_INDEX
                    else "a different graph")
            return (f"these weights were trained on {what}: {name} digest {str(digest)[:12]}... "
                    f"differs from the dataset's {str(other)[:12]}... (recomputed from its "
                    "arrays); use the connectome dataset these weights were released with")
    return None


def compare_frozen_digests(model_digests: dict[str, str] | None,
                           graph_digests: dict[str, str] | None) -> None:
    """Refuse weights trained on another graph (see :func:`frozen_digest_mismatch`)."""
    problem = frozen_digest_mismatch(model_digests, graph_digests)
    if problem:
        raise CheckpointError(problem)


def prefixed(prefix: str, digests: dict[str, str] | None) -> dict[str, str]:
    """``{"<prefix>/<name>": digest}`` for ``Checkpoint.digests``."""
    return {f"{prefix}/{name}": str(value) for name, value in (digests or {}).items()}


#: The file's tensor of each readout field (:func:`read_readout`).
READOUT_TENSORS = {"head": "lm_head.weight", "head_a": "lm_head.0.weight",
                   "head_b": "lm_head.1.weight"}


def read_readout(st: Any, source: str) -> tuple[dict[str, np.ndarray], int | None]:
    """The readout of a safetensors checkpoint: a dense head or two factors.

    Parameters
    ----------
    st
        An open :class:`~flyviz.model.safetensors_io.SafetensorsFile`.
    source
        The file's name, for the error message.

    Returns
    -------
    (arrays, rank)
        ``{"head": ...}`` with rank ``None``, or ``{"head_a": ..., "head_b": ...}``
        with the factors' rank.
    """
    if "lm_head.weight" in st:
        return {"head": st.get("lm_head.weight")}, None
    if "lm_head.0.weight" in st and "lm_head.1.weight" in st:
        head_a = st.get("lm_head.0.weight")
        return {"head_a": head_a, "head_b": st.get("lm_head.1.weight")}, int(head_a.shape[0])
    raise CheckpointError(f"{source} has no readout (lm_head.weight or lm_head.0.weight + "
                          "lm_head.1.weight); it is not a Fly LLM checkpoint, or it is damaged")


def min_max(array: np.ndarray, step: int = 1 << 22) -> tuple[int, int]:
    """The smallest and largest value of a large integer ``array``, read ``step`` entries at a
    time (a memory map stays unread past each block); ``(0, -1)`` when it is empty."""
    low, high = 0, -1
    for start in range(0, array.shape[0], step):
        chunk = array[start:start + step]
        if chunk.size:
            lo, hi = int(chunk.min()), int(chunk.max())
            low, high = (lo, hi) if high < low else (min(low, lo), max(high, hi))
    return low, high


def weight_stats(weights: np.ndarray, step: int = 1 << 22) -> tuple[bool, int, int]:
    """Whether every weight is finite, and how many are negative and positive, read ``step``
    entries at a time."""
    finite, negative, positive = True, 0, 0
    for start in range(0, weights.shape[0], step):
        chunk = weights[start:start + step]
        finite &= bool(np.isfinite(chunk).all())
        negative += int(np.count_nonzero(chunk < 0))
        positive += int(np.count_nonzero(chunk > 0))
    return finite, negative, positive
