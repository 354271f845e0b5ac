"""The NumPy safetensors reader: every dtype, BF16 widening, and damaged files."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from flyviz.model.errors import CheckpointError
from flyviz.model.safetensors_io import SafetensorsFile, bf16_to_f32, save_safetensors


def _raw_file(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_every_dtype_round_trips_and_matches_the_reference_library(tmp_path):
    from safetensors.numpy import load_file

    rng = np.random.default_rng(0)
    tensors = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "i64": rng.integers(-2**40, 2**40, 4, dtype=np.int64),
        "i32": rng.integers(-2**30, 2**30, (2, 3), dtype=np.int32),
        "i16": rng.integers(-300, 300, 9, dtype=np.int16),
        "u16": rng.integers(0, 65535, 11, dtype=np.uint16),
        "u8": rng.integers(0, 255, 13, dtype=np.uint8),
        "bool": rng.random(6) > 0.5,
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = save_safetensors(tmp_path / "t.safetensors", tensors, {"format": "pt"})
    reference = load_file(str(path))  # the upstream library reads what flyviz writes
    file = SafetensorsFile(path)
    assert file.metadata == {"format": "pt"}
    for name, array in tensors.items():
        got = file.get(name)
        assert got.dtype == array.dtype and got.shape == array.shape, name
        np.testing.assert_array_equal(got, array)
        np.testing.assert_array_equal(reference[name], array)
    assert not file.get("f32").flags.writeable  # memory-mapped read-only, never copied


def test_bf16_is_widened_exactly(tmp_path):
    values = np.array([0.0, -0.0, 1.0, -2.5, 3.140625, 1e-30, 6e4, np.inf], dtype=np.float32)
    bf16 = values.astype(ml_dtypes.bfloat16)
    path = save_safetensors(tmp_path / "b.safetensors", {"w": bf16.reshape(2, 4)})
    file = SafetensorsFile(path)
    assert file.dtype("w") == "BF16"
    got = file.get("w")
    assert got.dtype == np.float32 and got.shape == (2, 4)
    np.testing.assert_array_equal(got.reshape(-1), bf16.astype(np.float32))
    np.testing.assert_array_equal(bf16_to_f32(bf16.view(np.uint16)), bf16.astype(np.float32))


@pytest.mark.parametrize("header, data, fragment", [
    ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "truncated"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "overlap"),
    ({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unsupported dtype"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "needs 12"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, "invalid byte range"),
    ({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "malformed"),
])
def test_damaged_headers_fail_with_one_line(tmp_path, header, data, fragment):
    path = tmp_path / "bad.safetensors"
    _raw_file(path, header, data)
    with pytest.raises(CheckpointError, match=fragment) as info:
        SafetensorsFile(path)
    assert "\n" not in str(info.value)


def test_header_length_beyond_the_file_and_garbage(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(CheckpointError, match="does not fit"):
        SafetensorsFile(path)
    path.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        SafetensorsFile(path)
    path.write_bytes(b"abc")
    with pytest.raises(CheckpointError, match="too short"):
        SafetensorsFile(path)
    with pytest.raises(CheckpointError, match="not found"):
        SafetensorsFile(tmp_path / "missing.safetensors")


def test_truncating_a_written_file_is_detected(tmp_path):
    path = save_safetensors(tmp_path / "t.safetensors",
                            {"w": np.ones((100, 10), np.float32), "i": np.arange(5)})
    raw = path.read_bytes()
    path.write_bytes(raw[:-7])
    with pytest.raises(CheckpointError, match="truncated"):
        SafetensorsFile(path)
