"""ConnecTorch brains: the ``.ct`` directory of ``us/connectorch`` (v0.1.0), read and written.

A ``.ct`` brain is a graph, not a language model (``fly-family-2026.md`` §4.1)::

    brain.ct/
        metadata.json     schema_version 1, num_nodes, num_edges, fingerprint, content_hash,
                          provenance {..., node_order "sorted", aggregate_parallel_edges, history}
        nodes.parquet     node_id (int64 or string, sorted ascending: the row is the index)
                          and free node columns (cell_type, superclass, side, ...)
        edges.parquet     source_index, target_index (int64), then attribute columns
                          (synapse_count, weight, sign in {-1, 0, 1}, ...), rows in ascending
                          (target_index, source_index) order

Both parquet files are zstd-compressed. Two digests guard the files, each the first 16 hex
digits of a SHA-256:

``content_hash``
    ``"connectorch-content-v1"``, then for the node table and the edge table in turn, each
    column's name, its Arrow type string (``int64``, ``string``, ``double``) and its Arrow
    buffers (validity, offsets, data; an absent one adds nothing), the columns read back as
    NumPy and turned into Arrow again, as ConnecTorch's ``load`` does.
``fingerprint``
    ``"connectorch-v1"``, the node ids (``"int:"`` and their int64 bytes, or ``"str:"`` and
    each id's UTF-8 length as 8 little-endian bytes and its bytes), ``"|edges|"``, the source
    then the target indices as int64, then for ``synapse_count``, ``weight`` and ``sign`` where
    present: the name, the NumPy dtype kind (``i``, ``u``, ``f``, ``b``) and the values
    widened to int64, uint64 or (any other kind) float64; last the provenance's
    ``node_order``.

:func:`read_brain` checks every one of these facts and refuses a brain that breaks one with a
:class:`ConnecTorchError` (one line: the file, the column, the row or the two digests).
:func:`build_brain` makes a brain as ConnecTorch's ``Connectome`` constructor does (ids
sorted, edges ordered by target then source, parallel edges merged by summing
``synapse_count`` and ``weight``); :func:`write_brain` writes it in exactly ConnecTorch's
layout. Needs pyarrow (``pip install 'flyviz[atlas]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import CheckpointError, InputError

__all__ = ["CT_FILES", "ConnecTorchBrain", "ConnecTorchError", "SCHEMA_VERSION", "build_brain",
           "content_hash", "fingerprint", "is_connectorch_brain", "read_brain", "signed_weights",
           "write_brain"]

#: The schema version this reader and writer know (ConnecTorch v0.1.0's).
SCHEMA_VERSION = 1
#: The three files of a ``.ct`` brain.
CT_FILES = ("metadata.json", "nodes.parquet", "edges.parquet")
NODE_ID, SOURCE_INDEX, TARGET_INDEX = "node_id", "source_index", "target_index"
SYNAPSE_COUNT, WEIGHT, SIGN = "synapse_count", "weight", "sign"
#: The edge columns parallel edges sum (every other keeps the first edge's value).
SUMMED = (SYNAPSE_COUNT, WEIGHT)
_HEX16 = re.compile(r"[0-9a-f]{16}")


class ConnecTorchError(CheckpointError):
    """A ``.ct`` brain's files are missing, malformed, out of order or fail a digest."""


@dataclass
class ConnecTorchBrain:
    """A ConnecTorch connectome: sorted node ids and canonical edges.

    Attributes
    ----------
    node_ids
        ``(n,)`` int64, or object array of ``str``, ascending: ``node_ids[i]`` is node ``i``.
    node_columns
        Free node columns, each ``(n,)``, in file order.
    source_index, target_index
        ``(E,)`` int64 node indices, ordered by target then source.
    edge_columns
        Attribute columns, each ``(E,)``, in file order.
    provenance
        ``metadata.json``'s record (``node_order``, ``aggregate_parallel_edges``,
        ``history``, ...).
    path
        The folder it was read from, if any.
    """

    node_ids: np.ndarray
    node_columns: dict[str, np.ndarray]
    source_index: np.ndarray
    target_index: np.ndarray
    edge_columns: dict[str, np.ndarray]
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return int(self.node_ids.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of edges (after any merging of parallel ones)."""
        return int(self.source_index.shape[0])

    @property
    def string_ids(self) -> bool:
        """True when the node ids are text (not whole numbers)."""
        return self.node_ids.dtype.kind in "OUS"

    def node_table(self) -> Any:
        """The node table as Arrow (``node_id`` first), as ConnecTorch writes it."""
        import pyarrow as pa

        return pa.table({NODE_ID: self.node_ids, **self.node_columns})

    def edge_table(self) -> Any:
        """The edge table as Arrow (``source_index``, ``target_index`` first)."""
        import pyarrow as pa

        return pa.table({SOURCE_INDEX: self.source_index, TARGET_INDEX: self.target_index,
                         **self.edge_columns})


# ------------------------------------------------------------------ digests
def content_hash(brain: ConnecTorchBrain) -> str:
    """The ``content_hash`` of ``brain``'s tables (see the module notes): 16 hex digits."""
    digest = hashlib.sha256(f"connectorch-content-v{SCHEMA_VERSION}".encode())
    for table in (brain.node_table(), brain.edge_table()):
        for name in table.column_names:
            column = table.column(name)
            digest.update(name.encode())
            digest.update(str(column.type).encode())
            for buffer in column.combine_chunks().buffers():
                if buffer is not None:
                    digest.update(buffer.to_pybytes())
    return digest.hexdigest()[:16]


def _id_bytes(ids: np.ndarray) -> bytes:
    if ids.dtype.kind in "OUS":
        # Each id's length before it: no separator could be told from a character of an id.
        parts = bytearray(b"str:")
        for value in ids.tolist():
            encoded = str(value).encode("utf-8")
            parts += len(encoded).to_bytes(8, "little") + encoded
        return bytes(parts)
    return b"int:" + np.ascontiguousarray(ids.astype("<i8")).tobytes()


def fingerprint(brain: ConnecTorchBrain) -> str:
    """The ``fingerprint`` of ``brain``'s structure (see the module notes): 16 hex digits."""
    digest = hashlib.sha256(f"connectorch-v{SCHEMA_VERSION}".encode())
    digest.update(_id_bytes(brain.node_ids))
    digest.update(b"|edges|")
    digest.update(np.ascontiguousarray(brain.source_index.astype("<i8")).tobytes())
    digest.update(np.ascontiguousarray(brain.target_index.astype("<i8")).tobytes())
    for name in (*SUMMED, SIGN):
        if name in brain.edge_columns:
            column = brain.edge_columns[name]
            kind = column.dtype.kind
            digest.update(name.encode())
            digest.update(kind.encode())
            # Whole numbers hashed as whole numbers: a float64 would not tell 2**53 from 2**53+1.
            wide = column.astype("<u8" if kind == "u" else "<i8" if kind == "i" else "<f8")
            digest.update(np.ascontiguousarray(wide).tobytes())
    digest.update(str(brain.provenance.get("node_order", "sorted")).encode())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------ building
def _column(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise InputError(f"column {name} must be one-dimensional, not of shape {array.shape}")
    if array.dtype.kind == "U":
        return array.astype(object)
    return array


def _ids(values: Any, name: str) -> np.ndarray:
    array = _column(values, name)
    if array.dtype.kind in "iu":
        if array.dtype.kind == "u" and array.size and int(array.max()) > np.iinfo(np.int64).max:
            raise InputError(f"{name} holds ids above 2**63 - 1")
        return array.astype(np.int64)
    if array.dtype.kind == "O" and all(isinstance(v, str) for v in array.tolist()):
        return array
    raise InputError(f"{name} must hold whole numbers or text, not {array.dtype}")


def build_brain(source: Any, target: Any, *, node_ids: Any = None,
                node_columns: Mapping[str, Any] | None = None,
                aggregate_parallel_edges: bool = True,
                provenance: Mapping[str, Any] | None = None,
                **edge_columns: Any) -> ConnecTorchBrain:
    """A brain from edges given by node id, made canonical as ConnecTorch makes it.

    The node ids (``node_ids``, or those the edges name) are sorted and become the indices;
    ``node_columns`` follow their ids. The edges are sorted by target index, then source
    index, then (ties: parallel edges) by each attribute column in turn, and with
    ``aggregate_parallel_edges`` merged: ``synapse_count`` and ``weight`` summed (widened to
    int64, uint64 or float64), every other column the first edge's value. ``provenance``
    gains ``filters``, ``node_order "sorted"``, ``aggregate_parallel_edges`` and
    ``parallel_edges_merged`` (when any were).

    Raises
    ------
    InputError
        An edge naming a node that is not among ``node_ids``, duplicate node ids, columns of
        the wrong length, ids that are neither whole numbers nor text.
    """
    src, dst = _ids(source, "source"), _ids(target, "target")
    if src.shape != dst.shape:
        raise InputError(f"source and target differ in length ({src.size} and {dst.size})")
    columns = {str(name): _column(values, name) for name, values in
               (node_columns or {}).items()}
    if node_ids is None:
        if columns:
            raise InputError("node columns need node_ids to key them by")
        ids = np.unique(np.concatenate([src, dst])) if src.size else src
    else:
        ids = _ids(node_ids, NODE_ID)
        if np.unique(ids).size != ids.size:
            raise InputError("node ids are not unique")
    for name, values in columns.items():
        if values.shape[0] != ids.shape[0]:
            raise InputError(f"node column {name} has {values.shape[0]} values for "
                             f"{ids.shape[0]} nodes")
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    columns = {name: values[order] for name, values in columns.items()}
    if src.size and (ids.dtype.kind == "O") != (src.dtype.kind == "O"):
        raise InputError("node ids and edge endpoints must both be whole numbers or both text")
    positions = []
    for name, ends in (("source", src), ("target", dst)):
        at = np.minimum(np.searchsorted(ids, ends), max(ids.size - 1, 0))
        known = ids[at] == ends if ids.size else np.zeros(ends.shape, bool)
        if not known.all():
            row = int(np.flatnonzero(~known)[0])
            raise InputError(f"edge {row}'s {name} {ends[row]!r} is not a node")
        positions.append(at.astype(np.int64))
    edges = {str(name): _column(values, name) for name, values in edge_columns.items()}
    for name, values in edges.items():
        if values.shape[0] != src.shape[0]:
            raise InputError(f"edge column {name} has {values.shape[0]} values for "
                             f"{src.shape[0]} edges")
    record = dict(provenance or {})
    record.setdefault("filters", {})
    record["node_order"] = "sorted"
    record["aggregate_parallel_edges"] = bool(aggregate_parallel_edges)
    s_index, t_index, edges, merged = canonical_edges(positions[0], positions[1], edges,
                                                      aggregate=aggregate_parallel_edges)
    if merged:
        record["parallel_edges_merged"] = merged
    return ConnecTorchBrain(ids, columns, s_index, t_index, edges, record)


def canonical_edges(source: np.ndarray, target: np.ndarray, columns: dict[str, np.ndarray], *,
                    aggregate: bool) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], int]:
    """Edges in ConnecTorch's order (target, source, then the attribute columns by name), and
    with ``aggregate`` parallel ones merged; returns them and how many were merged away."""
    if source.size == 0:
        return source, target, columns, 0
    ties = [columns[name].astype(str) if columns[name].dtype.kind == "O" else columns[name]
            for name in sorted(columns) if columns[name].dtype.kind in "biufUSO"]
    # np.lexsort's last key is the primary one.
    order = np.lexsort((*ties, source, target))
    source, target = source[order], target[order]
    columns = {name: values[order] for name, values in columns.items()}
    if not aggregate:
        return source, target, columns, 0
    new = np.ones(source.size, dtype=bool)
    new[1:] = (source[1:] != source[:-1]) | (target[1:] != target[:-1])
    first = np.flatnonzero(new)
    if first.size == source.size:
        return source, target, columns, 0
    merged: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        kind = values.dtype.kind
        if name in SUMMED and kind in "biuf":
            wide = values.astype(np.uint64 if kind == "u" else np.int64 if kind in "bi"
                                 else np.float64)
            merged[name] = np.add.reduceat(wide, first)  # each group summed on its own
        else:
            merged[name] = values[first]
    return source[first], target[first], merged, int(source.size - first.size)


# ------------------------------------------------------------------ writing
def _metadata(brain: ConnecTorchBrain) -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "num_nodes": brain.num_nodes,
            "num_edges": brain.num_edges, "fingerprint": fingerprint(brain),
            "content_hash": content_hash(brain), "provenance": brain.provenance}


def write_brain(brain: ConnecTorchBrain, path: str | Path) -> Path:
    """Write ``brain`` as a ``.ct`` folder at ``path`` (a new folder) in ConnecTorch's layout:
    zstd parquet tables and ``metadata.json`` with both digests.

    The folder is written under a temporary name beside ``path`` and renamed into place, so
    an error leaves nothing under ``path``.

    Raises
    ------
    InputError
        ``path`` exists or its folder cannot be written.
    """
    from flyviz.extras import require

    require("parquet", "writing a ConnecTorch brain")
    import pyarrow.parquet as pq

    out = Path(path).expanduser()
    if os.path.lexists(out):
        raise InputError(f"{out} exists; give a new folder (a brain is never written over "
                         "anything)")
    from flyviz.fileio import new_folder

    with new_folder(out) as scratch:
        pq.write_table(brain.node_table(), scratch / "nodes.parquet", compression="zstd")
        pq.write_table(brain.edge_table(), scratch / "edges.parquet", compression="zstd")
        (scratch / "metadata.json").write_text(
            json.dumps(_metadata(brain), indent=2, default=str), encoding="utf-8")
    return out


# ------------------------------------------------------------------ reading
def is_connectorch_brain(path: str | Path) -> bool:
    """True when ``path`` is a folder that is a ``.ct`` brain: holding ``metadata.json``
    beside ``nodes.parquet`` or ``edges.parquet``, or named ``*.ct`` and holding one of the
    three (so that a brain missing a file is still read as one, and refused for it; a model
    folder that happens to be named ``*.ct`` is not one)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return False
    present = [os.path.lexists(p / name) for name in CT_FILES]
    if p.name.lower().endswith(".ct"):
        return any(present)
    return present[0] and any(present[1:])


def _read_metadata(folder: Path) -> dict[str, Any]:
    from flyviz.fileio import read_regular_bytes

    name = f"{folder.name}/metadata.json"
    try:
        data = read_regular_bytes(folder / "metadata.json", name)
    except FileNotFoundError:
        raise ConnecTorchError(f"{folder.name} has no metadata.json: a ConnecTorch brain is "
                               "metadata.json, nodes.parquet and edges.parquet") from None
    except InputError as exc:
        raise ConnecTorchError(str(exc)) from None
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConnecTorchError(f"{name} is not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise ConnecTorchError(f"{name} must hold a JSON object")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ConnecTorchError(f"{name}: schema_version {version!r}; flyviz reads ConnecTorch's "
                               f"schema version {SCHEMA_VERSION}")
    for key in ("num_nodes", "num_edges"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConnecTorchError(f"{name}: {key} must be a whole number >= 0, not {value!r}")
    for key in ("fingerprint", "content_hash"):
        value = meta.get(key)
        if not isinstance(value, str) or not _HEX16.fullmatch(value):
            raise ConnecTorchError(f"{name}: {key} must be 16 lowercase hex digits, not "
                                   f"{value!r}")
    provenance = meta.get("provenance", {})
    if not isinstance(provenance, dict):
        raise ConnecTorchError(f"{name}: provenance must be a JSON object")
    return meta


def _read_table(folder: Path, name: str) -> dict[str, np.ndarray]:
    """The columns of ``folder/name`` as NumPy, as ConnecTorch reads them."""
    import pyarrow.parquet as pq

    from flyviz.fileio import open_regular

    what = f"{folder.name}/{name}"
    try:
        handle = open_regular(folder / name, "rb", what)
    except FileNotFoundError:
        raise ConnecTorchError(f"{folder.name} has no {name}: a ConnecTorch brain is "
                               "metadata.json, nodes.parquet and edges.parquet") from None
    except InputError as exc:
        raise ConnecTorchError(str(exc)) from None
    with handle:
        try:
            table = pq.read_table(handle)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConnecTorchError(f"cannot read {what}: {first}") from None
    columns: dict[str, np.ndarray] = {}
    for column in table.column_names:
        if column in columns:
            raise ConnecTorchError(f"{what} has two columns named {column}")
        columns[column] = np.asarray(table.column(column).to_numpy(zero_copy_only=False))
    return columns


def _need(columns: dict[str, np.ndarray], names: tuple[str, ...], what: str) -> None:
    missing = [name for name in names if name not in columns]
    if missing:
        raise ConnecTorchError(f"{what} lacks column {', '.join(missing)} (needs "
                               f"{', '.join(names)})")


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _value(value: Any) -> Any:
    """A NumPy scalar as Python's (a message reads ``2``, not ``np.int8(2)``)."""
    return value.item() if isinstance(value, np.generic) else value


def _check_ids(ids: np.ndarray, what: str) -> np.ndarray:
    if ids.dtype.kind in "iu":
        wide = ids.astype(np.int64)
        if ids.dtype.kind == "u" and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
            row = _first_bad(ids > np.iinfo(np.int64).max)
            raise ConnecTorchError(f"{what}: node_id {int(ids[row])} (row {row}) is above "
                                   "2**63 - 1")
        later = wide[1:] <= wide[:-1]
    elif ids.dtype.kind == "O":
        values = ids.tolist()
        for row, value in enumerate(values):
            if not isinstance(value, str):
                raise ConnecTorchError(f"{what}: node_id {value!r} (row {row}) is not text; "
                                       "node ids are whole numbers or text, none missing")
        later = np.fromiter((b <= a for a, b in zip(values, values[1:])), bool,
                            max(len(values) - 1, 0))
    else:
        raise ConnecTorchError(f"{what}: node_id holds {ids.dtype} values; node ids are whole "
                               "numbers (int64) or text")
    if later.any():
        row = _first_bad(later) + 1
        how = "repeats" if ids[row] == ids[row - 1] else "is below"
        raise ConnecTorchError(f"{what}: node_id {_value(ids[row])!r} (row {row}) {how} the one "
                               "before it; ConnecTorch's node ids are sorted ascending and unique")
    return ids


def _check_edges(brain: ConnecTorchBrain, what: str, aggregated: bool) -> None:
    n = brain.num_nodes
    for name, index in ((SOURCE_INDEX, brain.source_index), (TARGET_INDEX, brain.target_index)):
        bad = (index < 0) | (index >= n)
        if bad.any():
            row = _first_bad(bad)
            raise ConnecTorchError(f"{what}: {name} {int(index[row])} (row {row}) is outside "
                                   f"0..{n - 1} (the {n:,} nodes of nodes.parquet)")
    s, t = brain.source_index, brain.target_index
    step_t = t[1:] - t[:-1]
    step_s = s[1:] - s[:-1]
    back = (step_t < 0) | ((step_t == 0) & (step_s < 0))
    if back.any():
        row = _first_bad(back) + 1
        raise ConnecTorchError(f"{what}: edge {row} ({int(s[row])} -> {int(t[row])}) comes after "
                               f"({int(s[row - 1])} -> {int(t[row - 1])}); ConnecTorch orders "
                               "edges by target_index, then source_index")
    if aggregated:
        twice = (step_t == 0) & (step_s == 0)
        if twice.any():
            row = _first_bad(twice) + 1
            raise ConnecTorchError(f"{what}: edge {row} ({int(s[row])} -> {int(t[row])}) repeats "
                                   "the one before it, but its provenance says parallel edges "
                                   "were merged")
    columns = brain.edge_columns
    if SIGN in columns:
        sign = columns[SIGN]
        if sign.dtype.kind not in "biuf" or (~np.isin(sign, (-1, 0, 1))).any():
            row = _first_bad(~np.isin(sign, (-1, 0, 1))) if sign.dtype.kind in "biuf" else 0
            raise ConnecTorchError(f"{what}: sign {_value(sign[row])!r} (row {row}) is not -1, 0 "
                                   "or 1")
    if SYNAPSE_COUNT in columns:
        count = columns[SYNAPSE_COUNT]
        if count.dtype.kind not in "iuf":
            raise ConnecTorchError(f"{what}: synapse_count holds {count.dtype} values, not counts")
        bad = ~np.isfinite(count) | (count < 0) | (count != np.floor(count)) \
            if count.dtype.kind == "f" else count < 0
        if bad.any():
            row = _first_bad(bad)
            raise ConnecTorchError(f"{what}: synapse_count {_value(count[row])!r} (row {row}) is "
                                   "not a whole number >= 0")
    if WEIGHT in columns:
        weight = columns[WEIGHT]
        if weight.dtype.kind not in "biuf":
            raise ConnecTorchError(f"{what}: weight holds {weight.dtype} values, not numbers")
        if weight.dtype.kind == "f" and not np.isfinite(weight).all():
            row = _first_bad(~np.isfinite(weight))
            raise ConnecTorchError(f"{what}: weight {_value(weight[row])!r} (row {row}) is not "
                                   "finite")


def read_brain(path: str | Path) -> ConnecTorchBrain:
    """Read and check the ``.ct`` brain at ``path``.

    Checks, in order: ``metadata.json`` (schema version 1, counts, both digests given); both
    tables present and readable with the columns ConnecTorch writes; the counts against
    ``metadata.json``; the content hash, then the fingerprint, recomputed; the node ids
    (whole numbers or text, ascending, unique); the edge indices (whole numbers in range,
    ordered by target then source, no parallel edges when the provenance says they were
    merged); ``sign`` in {-1, 0, 1}, ``synapse_count`` whole and >= 0, ``weight`` finite.

    Raises
    ------
    ConnecTorchError
        One line naming the file and what is wrong (for a digest: the recorded and the
        recomputed values).
    """
    from flyviz.extras import require

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConnecTorchError(f"{folder} is not a folder: a ConnecTorch brain is a folder "
                               "(metadata.json, nodes.parquet, edges.parquet)")
    meta = _read_metadata(folder)
    require("parquet", f"reading the ConnecTorch brain {folder.name}")
    nodes_what, edges_what = f"{folder.name}/nodes.parquet", f"{folder.name}/edges.parquet"
    nodes = _read_table(folder, "nodes.parquet")
    edges = _read_table(folder, "edges.parquet")
    _need(nodes, (NODE_ID,), nodes_what)
    _need(edges, (SOURCE_INDEX, TARGET_INDEX), edges_what)
    ids = nodes.pop(NODE_ID)
    source, target = edges.pop(SOURCE_INDEX), edges.pop(TARGET_INDEX)
    for name, index in ((SOURCE_INDEX, source), (TARGET_INDEX, target)):
        if index.dtype.kind not in "iu":
            raise ConnecTorchError(f"{edges_what}: {name} holds {index.dtype} values, not "
                                   "node indices (int64)")
    brain = ConnecTorchBrain(ids, nodes, source.astype(np.int64, copy=False),
                             target.astype(np.int64, copy=False), edges,
                             dict(meta.get("provenance", {})), folder)
    for key, have in (("num_nodes", brain.num_nodes), ("num_edges", brain.num_edges)):
        if meta[key] != have:
            raise ConnecTorchError(f"{folder.name}: metadata.json says {key} {meta[key]:,}, the "
                                   f"table holds {have:,}")
    recorded, computed = meta["content_hash"], content_hash(brain)
    if recorded != computed:
        raise ConnecTorchError(f"{folder.name}: content hash differs: metadata.json records "
                               f"{recorded}, nodes.parquet and edges.parquet hash to {computed} "
                               "(changed or damaged after they were written)")
    recorded, computed = meta["fingerprint"], fingerprint(brain)
    if recorded != computed:
        raise ConnecTorchError(f"{folder.name}: fingerprint differs: metadata.json records "
                               f"{recorded}, the graph hashes to {computed} (its node ids, "
                               "edges, weights, signs or node order are not the ones written)")
    _check_ids(ids, nodes_what)
    for name, values in nodes.items():
        if values.shape[0] != brain.num_nodes:  # pragma: no cover - parquet keeps rows equal
            raise ConnecTorchError(f"{nodes_what}: column {name} has {values.shape[0]} rows")
    aggregated = brain.provenance.get("aggregate_parallel_edges", True) is not False
    _check_edges(brain, edges_what, aggregated)
    return brain


# ------------------------------------------------------------------ what the runtime reads
def signed_weights(brain: ConnecTorchBrain) -> tuple[np.ndarray, str]:
    """Each edge's signed weight (float64) and a line saying how it was made.

    ``synapse_count`` where present, else ``weight``, else 1 per edge; times ``sign`` where
    present, a sign of 0 (unknown) counting as +1: ConnecTorch's rule.
    """
    columns = brain.edge_columns
    if SYNAPSE_COUNT in columns:
        base, said = columns[SYNAPSE_COUNT].astype(np.float64), "synapse_count"
    elif WEIGHT in columns:
        base, said = columns[WEIGHT].astype(np.float64), "weight"
    else:
        base, said = np.ones(brain.num_edges), "1 per edge (no synapse_count or weight column)"
    if SIGN in columns:
        sign = columns[SIGN].astype(np.float64)
        base = base * np.where(sign == 0, 1.0, sign)
        said += " x sign (0 read as +1)"
    return base, said
