"""Helpers shared by the layout loaders: JSON, raw arrays, digests, tokenizers."""

from __future__ import annotations

import hashlib
import json
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
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path.name} is not valid JSON (line {exc.lineno}); the file is "
                              "damaged, download it again") from None


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
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


def compare_frozen_digests(model_digests: dict[str, str] | None,
                           dataset_digests: dict[str, str] | None) -> None:
    """Refuse weights trained on another graph.

    Both digest sets are strings written upstream; flyviz does not recompute
    them. Only buffers named in both are compared.
    """
    if not model_digests or not dataset_digests:
        return
    for name, digest in model_digests.items():
        other = dataset_digests.get(name)
        if other is not None and str(other).lower() != str(digest).lower():
            raise CheckpointError(
                f"these weights were trained on a different graph: {name} digest "
                f"{str(digest)[:12]}... differs from the dataset's {str(other)[:12]}...; "
                "use the connectome dataset these weights were released with")


def prefixed(prefix: str, digests: dict[str, str] | None) -> dict[str, str]:
    """``{"<prefix>/<name>": digest}`` for ``Checkpoint.digests``."""
    return {f"{prefix}/{name}": str(value) for name, value in (digests or {}).items()}


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
