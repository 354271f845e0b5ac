"""The fly-connectome-49k graph dataset: raw CSR graph, interface and anatomy arrays.

``fly-formats.md`` section 3. All files are headerless little-endian arrays;
``manifest.json`` gives each file's dtype, shape, byte count and SHA-256, the
interface sizes and the frozen-buffer digests that bind trained weights to
this graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Anatomy
from flyviz.model.errors import CheckpointError
from flyviz.model.formats._common import check_sha256, read_json, read_raw


@dataclass
class ConnectomeDataset:
    """What a connectome dataset folder holds.

    Parameters
    ----------
    offsets, indices, values
        CSR graph, row = postsynaptic neuron. ``indices`` is ``uint16`` when the
        dataset stores it so; cast before use.
    in_index, out_index
        Input neurons (slot-major) and read-out neurons.
    anatomy
        Soma positions and labels, or ``None`` when the dataset has none.
    n_in_declared, delay_slots, neurons_per_slot
        The interface block of the manifest (``None`` where absent).
    frozen_digests
        ``manifest["frozen_buffers_sha256"]`` as written upstream.
    manifest
        The whole manifest.
    path
        The dataset folder.
    """

    offsets: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    in_index: np.ndarray
    out_index: np.ndarray
    anatomy: Anatomy | None
    n_in_declared: int | None
    delay_slots: int | None
    neurons_per_slot: int | None
    frozen_digests: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def neurons(self) -> int:
        """Number of neurons (CSR rows)."""
        return int(self.offsets.shape[0]) - 1


def _file_entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files = manifest.get("files") or {}
    if isinstance(files, dict):
        entries = {}
        for key, entry in files.items():
            if isinstance(entry, dict):
                entries[str(entry.get("file", key))] = entry
        return entries
    if isinstance(files, list):
        return {str(e["file"]): e for e in files if isinstance(e, dict) and "file" in e}
    return {}


def _read_json_list(path: Path, n: int) -> list[str] | None:
    if not path.is_file():
        return None
    data = read_json(path, path.name)
    if not isinstance(data, list) or len(data) != n:
        raise CheckpointError(f"{path.name} holds {len(data) if isinstance(data, list) else 'no'} "
                              f"labels but the graph has {n} neurons; the dataset is damaged")
    return ["" if v is None else str(v) for v in data]


RawReader = Callable[[str, str, "tuple[int, ...] | int"], np.ndarray]


def _read_anatomy(root: Path, manifest: dict[str, Any], n: int, raw: RawReader) -> Anatomy | None:
    """Soma positions and labels from ``neurons/``, or ``None`` when absent."""
    neurons = root / "neurons"
    if not (neurons / "soma_position.i32").is_file():
        return None
    positions = np.asarray(raw("neurons/soma_position.i32", "int32", (n, 3)), dtype=np.float32)
    if (neurons / "soma_valid.u8").is_file():
        valid = np.asarray(raw("neurons/soma_valid.u8", "uint8", n)) != 0
    else:  # without the mask, all-zero rows are the missing ones
        valid = np.any(positions != 0, axis=1)
    body_id = (np.asarray(raw("neurons/body_id.i64", "int64", n))
               if (neurons / "body_id.i64").is_file() else None)
    cell_type = _read_json_list(neurons / "cell_type.json", n)
    if cell_type is None and (neurons / "type_index.i32").is_file() \
            and (neurons / "type_labels.json").is_file():
        labels = read_json(neurons / "type_labels.json", "type_labels.json")
        type_index = np.asarray(raw("neurons/type_index.i32", "int32", n))
        if not isinstance(labels, list) or (n and (type_index.min() < 0
                                                   or type_index.max() >= len(labels))):
            raise CheckpointError("neurons/type_index.i32 points outside type_labels.json; "
                                  "the dataset is damaged")
        cell_type = [str(labels[i]) for i in type_index]
    kind = str((manifest.get("anatomy") or {}).get("kind", "measured"))
    return Anatomy(positions=positions, valid=valid, kind=kind, body_id=body_id,
                   superclass=_read_json_list(neurons / "superclass.json", n),
                   side=_read_json_list(neurons / "side.json", n), cell_type=cell_type)


def _raw_reader(root: Path, manifest: dict[str, Any], verify: bool | None) -> RawReader:
    """A reader that checks each file's size and digest against the manifest."""
    entries = _file_entries(manifest)

    def raw(relative: str, dtype: str, shape: tuple[int, ...] | int) -> np.ndarray:
        path = root / relative
        entry = entries.get(relative)
        if entry is not None and "bytes" in entry and path.is_file() \
                and path.stat().st_size != int(entry["bytes"]):
            raise CheckpointError(f"{relative} is {path.stat().st_size:,} bytes but the manifest "
                                  f"says {int(entry['bytes']):,}; the file is truncated or "
                                  "damaged, download it again")
        array = read_raw(path, dtype, shape)
        check_sha256(path, entry.get("sha256") if entry else None, verify)
        return array

    return raw


def load_dataset_anatomy(dataset_dir: str | Path, *, verify: bool | None = None) -> Anatomy | None:
    """Only the anatomy (``neurons/``) of a dataset folder; the graph files may be absent.

    Used to give a checkpoint that carries its own graph (ngxson's) the soma
    positions of the same 49,393 neurons.
    """
    root = Path(dataset_dir)
    manifest = read_json(root / "manifest.json", "the dataset's manifest.json")
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{root / 'manifest.json'} is not a JSON object; download it again")
    valid = root / "neurons" / "soma_valid.u8"
    positions = root / "neurons" / "soma_position.i32"
    if valid.is_file():
        n = valid.stat().st_size
    elif positions.is_file():
        n = positions.stat().st_size // 12
    else:
        return None
    return _read_anatomy(root, manifest, n, _raw_reader(root, manifest, verify))


def load_connectome_dataset(dataset_dir: str | Path, *, verify: bool | None = None,
                            with_anatomy: bool = True) -> ConnectomeDataset:
    """Load a fly-connectome dataset folder, memory-mapping the large arrays.

    Parameters
    ----------
    dataset_dir
        Folder with ``manifest.json``, ``graph/``, ``interface/`` and
        optionally ``neurons/``.
    verify
        SHA-256 policy for files the manifest gives a digest for: ``None``
        (default) hashes files up to 64 MB, which is every file of the real
        dataset (the largest is 36 MB; hashing all of it takes well under the
        load-time budget, see ``flyviz bench``); ``True`` all; ``False`` none.
        Sizes are always checked.
    with_anatomy
        Read ``neurons/`` (positions, labels) when present.

    Returns
    -------
    ConnectomeDataset

    Raises
    ------
    CheckpointError
        For a missing, truncated or damaged file.
    """
    root = Path(dataset_dir)
    if not root.is_dir():
        raise CheckpointError(f"connectome dataset folder not found: {root}")
    manifest = read_json(root / "manifest.json", "the dataset's manifest.json")
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{root / 'manifest.json'} is not a JSON object; download it again")
    raw = _raw_reader(root, manifest, verify)

    def count(relative: str, itemsize: int) -> int:
        path = root / relative
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; the dataset folder is incomplete, "
                                  "download it again")
        size = path.stat().st_size
        if size % itemsize:
            raise CheckpointError(f"{relative} is {size:,} bytes, not a whole number of "
                                  f"{itemsize}-byte values; the file is truncated")
        return size // itemsize

    n_offsets = count("graph/edges_offsets.i32", 4)
    if n_offsets < 2:
        raise CheckpointError("graph/edges_offsets.i32 is empty; the dataset is damaged")
    n = n_offsets - 1
    offsets = raw("graph/edges_offsets.i32", "int32", n_offsets)
    nnz = count("graph/edges_weight.f32", 4)
    if (root / "graph/edges_source.u16").is_file():
        indices = raw("graph/edges_source.u16", "uint16", nnz)
    elif (root / "graph/edges_source.i32").is_file():
        indices = raw("graph/edges_source.i32", "int32", nnz)
    else:
        raise CheckpointError(f"{root / 'graph/edges_source.u16'} is missing; the dataset folder "
                              "is incomplete, download it again")
    values = raw("graph/edges_weight.f32", "float32", nnz)
    in_index = raw("interface/in_index.i32", "int32", count("interface/in_index.i32", 4))
    if (root / "interface/out_index.i32").is_file():
        out_index = raw("interface/out_index.i32", "int32", count("interface/out_index.i32", 4))
    else:  # the browser export omits it because it is the identity
        out_index = np.arange(n, dtype=np.int32)

    interface = manifest.get("interface") or {}
    anatomy = _read_anatomy(root, manifest, n, raw) if with_anatomy else None

    def as_int(value: Any) -> int | None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None

    digests = manifest.get("frozen_buffers_sha256")
    return ConnectomeDataset(
        offsets=offsets, indices=indices, values=values, in_index=in_index, out_index=out_index,
        anatomy=anatomy, n_in_declared=as_int(interface.get("n_in_declared")),
        delay_slots=as_int(interface.get("delay_slots")),
        neurons_per_slot=as_int(interface.get("neurons_per_slot")),
        frozen_digests={str(k): str(v) for k, v in digests.items()} if isinstance(digests, dict)
        else {},
        manifest=manifest, path=root)
