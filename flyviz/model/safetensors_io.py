"""Read and write safetensors files with NumPy alone, memory-mapped, never unpickling.

A safetensors file is an 8-byte little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``
and then the raw little-endian tensor bytes. flyviz parses the header itself
so that it can check every offset against the file size before touching the
data, map each tensor read-only (a 284 MB checkpoint opens in milliseconds)
and turn a damaged file into one clear :class:`CheckpointError` line.

BF16 tensors are widened to float32 (the engine computes in float32) by a
16-bit shift into a preallocated array, without an intermediate copy.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Union

import numpy as np

from flyviz.model.errors import CheckpointError, FlyvizError

#: safetensors dtype names -> NumPy dtypes (little-endian). BF16 is handled apart.
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"),
    "U16": np.dtype("<u2"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_ITEMSIZE = {**{name: dt.itemsize for name, dt in DTYPES.items()}, "BF16": 2}

#: A header larger than this is not a model header but a damaged or hostile file.
MAX_HEADER_BYTES = 100 * 1024 * 1024


def _dtype_name(array: np.ndarray) -> str:
    if array.dtype.name == "bfloat16":
        return "BF16"
    for name, dt in DTYPES.items():
        if array.dtype == dt or array.dtype == dt.newbyteorder("="):
            return name
    raise TypeError(f"cannot store dtype {array.dtype} in safetensors")


@dataclass(frozen=True)
class ChunkedTensor:
    """A tensor that :func:`save_safetensors` writes piece by piece, never whole in memory.

    Parameters
    ----------
    dtype, shape
        Of the whole tensor.
    chunks
        Returns the pieces in order (arrays of ``dtype``, row blocks of the
        C-ordered tensor); their bytes must add up to the tensor's.
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    chunks: Callable[[], Iterable[np.ndarray]]

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


Tensor = Union[np.ndarray, ChunkedTensor]


def _little_endian_bytes(array: np.ndarray, dtype: np.dtype) -> memoryview:
    array = np.ascontiguousarray(array, dtype=dtype)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return memoryview(array.reshape(-1).view(np.uint8))


def save_safetensors(path: str | Path, tensors: Mapping[str, Tensor],
                     metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``tensors`` as a safetensors file.

    Tensors are laid out as the reference writer does: by element size,
    largest first, then by name, so the data of each tensor stays aligned.

    Parameters
    ----------
    path
        File to write.
    tensors
        Name -> array (BF16 arrays use ``ml_dtypes.bfloat16``) or
        :class:`ChunkedTensor`.
    metadata
        String -> string pairs stored under ``__metadata__``.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    order = sorted(tensors, key=lambda name: (-np.dtype(tensors[name].dtype).itemsize, name))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name in order:
        tensor = tensors[name]
        nbytes = int(tensor.size * np.dtype(tensor.dtype).itemsize)
        header[name] = {"dtype": _dtype_name(np.empty(0, dtype=tensor.dtype)),
                        "shape": [int(s) for s in tensor.shape],
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the data start is 8-byte aligned
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)))
        handle.write(text)
        for name in order:
            tensor = tensors[name]
            if isinstance(tensor, ChunkedTensor):
                expected = tensor.size * np.dtype(tensor.dtype).itemsize
                written = 0
                for chunk in tensor.chunks():
                    written += handle.write(_little_endian_bytes(chunk, np.dtype(tensor.dtype)))
                if written != expected:
                    raise ValueError(f"tensor {name!r}: chunks gave {written} bytes, the shape "
                                     f"needs {expected}")
            else:
                handle.write(_little_endian_bytes(tensor, tensor.dtype))
    return path


def bf16_to_f32(raw: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Widen raw BF16 bit patterns (uint16) to float32 exactly.

    A bfloat16 is the top half of a float32, so shifting the bits left by 16
    gives the same number.
    """
    raw = np.asarray(raw, dtype=np.uint16)
    if out is None:
        out = np.empty(raw.shape, dtype=np.float32)
    bits = out.view(np.uint32)
    np.left_shift(raw, 16, out=bits, dtype=np.uint32)
    return out


class SafetensorsFile:
    """A parsed safetensors file whose tensors are read-only memory maps.

    Parameters
    ----------
    path
        The ``.safetensors`` file.
    error
        The :class:`FlyvizError` subclass to raise (a recording's reader
        raises :class:`~flyviz.model.errors.RecordingError`).
    remedy
        What the messages tell the user to do about a damaged file.

    Raises
    ------
    CheckpointError
        If the file is missing, truncated, or its header is malformed,
        names an unknown dtype, a shape that does not match its byte range,
        or byte ranges that overlap or run past the end of the file.
    """

    def __init__(self, path: str | Path, *, error: type[FlyvizError] = CheckpointError,
                 remedy: str = "download it again") -> None:
        self.path = Path(path)
        name = self.path.name
        self._error = error
        # Said before a remedy that does not say it already (a recording's remedy is "it is
        # not a flyviz recording or it is damaged": the clause twice read as an echo).
        damaged = "" if "damaged" in remedy else "the file is damaged, "
        try:
            size = os.path.getsize(self.path)
        except OSError:
            raise error(f"{self.path}: file not found; check the path or {remedy}") from None
        if size < 8:
            raise error(f"{name}: only {size} bytes, too short for a safetensors file; {remedy}")
        with open(self.path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise error(f"{name}: header length {header_len} does not fit in the "
                            f"{size}-byte file; the file is truncated or not safetensors, "
                            f"{remedy}")
            raw_header = handle.read(header_len)
        try:
            header = json.loads(raw_header.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise error(f"{name}: the header is not valid JSON; {damaged}{remedy}") from None
        if not isinstance(header, dict):
            raise error(f"{name}: the header is not a JSON object; {remedy}")
        meta = header.pop("__metadata__", None) or {}
        #: ``__metadata__`` exactly as stored (the format allows only strings).
        self.raw_metadata: Any = meta
        self.metadata: dict[str, str] = {str(k): str(v) for k, v in meta.items()} \
            if isinstance(meta, dict) else {}
        self.size = size
        self._data_start = 8 + header_len
        data_size = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        spans = []
        for tensor, info in header.items():
            try:
                dtype = str(info["dtype"])
                shape = tuple(int(s) for s in info["shape"])
                begin, end = (int(v) for v in info["data_offsets"])
            except (KeyError, TypeError, ValueError):
                raise error(f"{name}: tensor {tensor!r} has a malformed header entry; "
                            f"{remedy}") from None
            if dtype not in _ITEMSIZE:
                raise error(f"{name}: tensor {tensor!r} has unsupported dtype {dtype}; "
                            "flyviz reads F32, F16, BF16, I64, I32, I16, U16, U8 and BOOL")
            if any(s < 0 for s in shape):
                raise error(f"{name}: tensor {tensor!r} has a negative dimension; {remedy}")
            expected = int(np.prod(shape, dtype=np.int64)) * _ITEMSIZE[dtype]
            if not 0 <= begin <= end:
                raise error(f"{name}: tensor {tensor!r} has invalid byte range [{begin}, {end}]; "
                            f"{damaged}{remedy}")
            if end - begin != expected:
                raise error(f"{name}: tensor {tensor!r} is {end - begin} bytes but shape "
                            f"{list(shape)} of {dtype} needs {expected}; {damaged}"
                            f"{remedy}")
            if end > data_size:
                raise error(f"{name}: tensor {tensor!r} ends at byte {end} but the file holds "
                            f"only {data_size} data bytes; the file is truncated, {remedy}")
            self._entries[tensor] = (dtype, shape, begin, end)
            spans.append((begin, end, tensor))
        spans.sort()
        for (_b0, e0, t0), (b1, _e1, t1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise error(f"{name}: tensors {t0!r} and {t1!r} overlap; the file is damaged or "
                            f"not a safetensors file, {remedy}")

    def keys(self) -> list[str]:
        """Tensor names in file order."""
        return sorted(self._entries, key=lambda t: self._entries[t][2])

    def __contains__(self, tensor: object) -> bool:
        return tensor in self._entries

    def dtype(self, tensor: str) -> str:
        """The stored safetensors dtype name (``"F32"``, ``"BF16"``, ...)."""
        return self._entries[tensor][0]

    def shape(self, tensor: str) -> tuple[int, ...]:
        """The stored shape."""
        return self._entries[tensor][1]

    @property
    def data_start(self) -> int:
        """Where the tensors' bytes begin in the file (after the length and the header)."""
        return self._data_start

    def byte_range(self, tensor: str) -> tuple[int, int]:
        """``(begin, end)`` of the tensor's bytes in the file (absolute offsets)."""
        _, _, begin, end = self._entries[tensor]
        return self._data_start + begin, self._data_start + end

    def get(self, tensor: str) -> np.ndarray:
        """The tensor as a read-only array (a memory map unless it is BF16).

        BF16 tensors come back as float32; every other dtype as stored.
        """
        if tensor not in self._entries:
            raise self._error(f"{self.path.name}: tensor {tensor!r} is missing; the file is "
                              "not this kind of file, or it is damaged")
        dtype, shape, begin, end = self._entries[tensor]
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            np_dtype = np.float32 if dtype == "BF16" else DTYPES[dtype]
            return np.zeros(shape, dtype=np_dtype)
        if dtype == "BF16":
            raw = np.memmap(self.path, dtype="<u2", mode="r", offset=self._data_start + begin,
                            shape=(count,))
            return bf16_to_f32(raw).reshape(shape)
        return np.memmap(self.path, dtype=DTYPES[dtype], mode="r",
                         offset=self._data_start + begin, shape=shape)

