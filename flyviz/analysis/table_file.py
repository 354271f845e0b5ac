"""The result tables flyviz writes: a JSON metadata line (CSV) or key (Parquet), then rows.

Lesion maps, estimated lesions (and their per-neuron tables) and causal traces share the
file format, written by :func:`write_table_file` and read by :func:`read_table_file`: a CSV
whose first line is ``PREFIX {json}`` followed by a header and rows, or a
Parquet table whose schema metadata holds the JSON under a key. Every way such
a file can be unreadable is one line of the caller's error class.

The metadata holds :data:`CHECKSUM_KEY`: the CRC-32 of the metadata itself (without
that key, as canonical JSON) and of the rows (a CSV's text after its first line, the
column header included; a Parquet table's columns as JSON), so that a flipped bit
in a number or a name is found, not read as a plausible result. Files written
before flyviz kept it are read unchecked.
"""

from __future__ import annotations

import csv
import io
import json
import os
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError, MissingDependencyError
from flyviz.fileio import missing_folder, open_regular, os_error, probe_writable

#: The metadata key holding the table's CRC-32 (hex).
CHECKSUM_KEY = "table_crc32"

CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")


def result_format(out: Path) -> str:
    """``"csv"`` or ``"parquet"`` by the extension of ``out``.

    Raises
    ------
    InputError
        For any other extension.
    """
    suffix = out.suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    raise InputError(f"--out {out}: give a file name ending in .csv or .parquet, e.g. "
                     "lesions.csv")


def check_output(out: Path) -> str:
    """Refuse an output path that cannot be written; return its format."""
    kind = result_format(out)
    if out.is_dir():
        raise InputError(f"--out {out} is a folder; give a file name ending in .{kind}")
    if not out.parent.is_dir():
        raise InputError(f"--out {out}: {missing_folder(out.parent)}")
    if not os.access(out.parent, os.W_OK):
        raise InputError(f"--out {out}: the folder {out.parent} is not writable")
    # os.access says yes to root everywhere, /proc included: only a file made there tells.
    probe_writable(out.parent, "--out", out)
    if kind == "parquet":
        _pyarrow("writing a Parquet lesion map")
    return kind


def _pyarrow(feature: str):
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependencyError.for_feature(feature, "pyarrow", "atlas") from None
    return pyarrow




def table_checksum(info: Mapping[str, Any], body: bytes) -> str:
    """The :data:`CHECKSUM_KEY` value of a table: CRC-32 (hex) of its metadata without the
    key (canonical JSON), a newline, and ``body`` (the rows as stored). Where the metadata
    holds a digest of the rows of its own (a lesion map's ``rows_sha256``, checked with
    its own message), only the column header of the body is covered."""
    meta = {k: v for k, v in info.items() if k != CHECKSUM_KEY}
    if "rows_sha256" in meta:
        body = body.split(b"\n", 1)[0]
    head = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return "%08x" % (zlib.crc32(head + b"\n" + body) & 0xFFFFFFFF)


def parquet_body(table: Any) -> bytes:
    """A Parquet table's columns as the bytes its checksum covers: the column names on the
    first line, then the values."""
    return (json.dumps(table.column_names) + "\n" + json.dumps(table.to_pydict())).encode("utf-8")


def verified_info(info: Any, body: bytes, damaged: Callable[[str], Exception]) -> Any:
    """``info`` without its checksum, checked against ``body`` when it carries one.

    Raises
    ------
    Exception
        ``damaged(why)`` when the checksum does not match (or is not text).
    """
    if not isinstance(info, dict) or CHECKSUM_KEY not in info:
        return info
    if table_checksum(info, body) != info[CHECKSUM_KEY]:
        raise damaged("its rows or its metadata fail their CRC-32 check")
    return {k: v for k, v in info.items() if k != CHECKSUM_KEY}


def read_table_file(path: Path, kind: str, *, csv_prefix: str, parquet_key: bytes,
                    what: str, error: Callable[[str], Exception],
                    damaged: Callable[[str], Exception]) -> tuple[Any, list[dict[str, Any]]]:
    """The metadata and the rows of a result table.

    Parameters
    ----------
    path, kind
        The file and its format (``"csv"`` or ``"parquet"``).
    csv_prefix, parquet_key
        Where its JSON metadata is: the CSV's first line starts with
        ``csv_prefix``; the Parquet schema's metadata holds ``parquet_key``.
    what
        What the file should be, for messages (``"flyviz lesion map"``).
    error, damaged
        Make the caller's one-line error: ``error(text)`` for a file that is not
        one, ``damaged(why)`` for one that is broken.
    """
    if kind == "csv":
        try:
            with open_regular(path, "rb", what) as handle:  # a FIFO would block the read
                raw_text = handle.read()
            text = raw_text.decode("utf-8")
        except UnicodeDecodeError:
            raise damaged("it is not UTF-8 text") from None
        except OSError as exc:
            raise error(str(os_error(exc, path, "read"))) from None
        except InputError as exc:  # a FIFO, a folder
            raise error(str(exc)) from None
        first, _, rest = text.partition("\n")
        if not first.startswith(csv_prefix):
            raise error(f"{path.name} is not a {what} (its first line is not "
                        f"'{csv_prefix.strip()} {{...}}')")
        try:
            info = json.loads(first[len(csv_prefix):])
        except ValueError:
            raise damaged("its metadata line is not JSON") from None
        info = verified_info(info, rest.encode("utf-8"), damaged)
        return info, list(csv.DictReader(io.StringIO(rest)))
    _pyarrow(f"reading a Parquet {what.removeprefix('flyviz ')}")
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises its own error types
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise error(f"{path.name} is not a readable Parquet file ({first_line[:100]})") from None
    raw = (table.schema.metadata or {}).get(parquet_key)
    if raw is None:
        raise error(f"{path.name} is not a {what} (no {parquet_key.decode()} metadata)")
    try:
        info = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise damaged("its metadata is not JSON") from None
    try:
        info = verified_info(info, parquet_body(table), damaged)
        return info, table.to_pylist()
    except (UnicodeDecodeError, ValueError) as exc:
        # A flipped bit in a string column's bytes: pyarrow reads the page but cannot
        # decode a value of it.
        raise damaged(f"a value cannot be read: {type(exc).__name__}") from None


def open_result_table(path: Path, *, noun: str, command: str, fmt: str, csv_prefix: str,
                      parquet_key: bytes, error: Callable[[str], Exception],
                      damaged: Callable[[str], Exception]) -> tuple[Any, list[dict[str, Any]]]:
    """The metadata and the rows of the file ``flyviz COMMAND`` writes, checked to be one.

    Parameters
    ----------
    path
        The ``.csv`` or ``.parquet`` file.
    noun, command, fmt
        What it is (``"lesion map"``), the command that writes it (``"sweep"``) and the
        ``format`` its metadata names (``"flyviz-sweep"``), for the checks and messages.
    csv_prefix, parquet_key, error, damaged
        As for :func:`read_table_file`; ``error(text)`` is raised (one line) when the
        file is missing, has another extension, or its metadata is not ``fmt``'s.
    """
    if not path.is_file():
        raise error(f"no {noun} at {path}: the file does not exist")
    try:
        kind = result_format(path)
    except InputError:
        raise error(f"{path.name} is not a {noun} (expected a .csv or .parquet file from "
                    f"'flyviz {command}')") from None
    info, records = read_table_file(path, kind, csv_prefix=csv_prefix, parquet_key=parquet_key,
                                    what=f"flyviz {noun}", error=error, damaged=damaged)
    if not isinstance(info, dict) or info.get("format") != fmt:
        raise error(f"{path.name} is not a flyviz {noun} (no {fmt} metadata)")
    return info, records


def _csv_cells(values: Any) -> list[Any]:
    """A column's cells as the CSV writer takes them: each float as its ``repr``, every other
    value as it is."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        return list(map(repr, values.tolist()))
    if isinstance(values, np.ndarray) and values.dtype.kind in "biu":
        return values.tolist()
    listed = values.tolist() if hasattr(values, "tolist") else values
    return [repr(v) if isinstance(v, float) else v for v in listed]


def write_table_file(out: Path, columns: Mapping[str, Any], info: dict[str, Any], kind: str, *,
                     csv_prefix: str, parquet_key: bytes, what: str,
                     types: Mapping[str, str] | None = None, default_type: str = "float64"
                     ) -> None:
    """Write a result table and its metadata as CSV or Parquet (what :func:`read_table_file`
    reads), through a temporary file beside ``out`` so that no half-written file is left.

    Parameters
    ----------
    out, kind
        The file and its format (``"csv"`` or ``"parquet"``).
    columns
        Column name to its values (a list or a NumPy array; all the same length), in order.
    info
        The metadata: one JSON object (keys sorted), the CSV's first line after
        ``csv_prefix`` or the Parquet schema metadata under ``parquet_key``.
    what
        What the file is, for the message when pyarrow is missing (``"lesion map"``).
    types
        Parquet: the Arrow type of each named column (``"int32"``, ``"string"``, ...),
        ``default_type`` for the others; ``None``: the types of the values.

    Raises
    ------
    InputError
        One line when the file cannot be written.
    """
    tmp = out.with_name(out.name + ".writing")
    info = {k: v for k, v in info.items() if k != CHECKSUM_KEY}
    try:
        if kind == "csv":
            body = io.StringIO()
            writer = csv.writer(body, lineterminator="\n")
            writer.writerow(list(columns))
            # repr: the shortest text that reads back as the same float. Column by column, then
            # the rows in one call: a screen writes a row for every neuron of every set (49,393
            # rows a set on the MaleCNS brain), which row by row took longer than its runs.
            writer.writerows(zip(*(_csv_cells(v) for v in columns.values())))
            text = body.getvalue()
            info[CHECKSUM_KEY] = table_checksum(info, text.encode("utf-8"))
            meta = json.dumps(info, sort_keys=True, separators=(",", ":"))
            with open(tmp, "w", encoding="utf-8", newline="") as handle:
                handle.write(csv_prefix + meta + "\n")
                handle.write(text)
        else:
            pa = _pyarrow(f"writing a Parquet {what}")
            import pyarrow.parquet as pq

            if types is None:
                arrays = {name: pa.array(v) for name, v in columns.items()}
            else:
                arrays = {name: pa.array(v, type=getattr(pa, types.get(name, default_type))())
                          for name, v in columns.items()}
            table = pa.table(arrays)
            info[CHECKSUM_KEY] = table_checksum(info, parquet_body(table))
            meta = json.dumps(info, sort_keys=True, separators=(",", ":"))
            table = table.replace_schema_metadata({parquet_key: meta.encode("utf-8")})
            pq.write_table(table, tmp)
        os.replace(tmp, out)
    except OSError as exc:  # a full disk among them: nothing half-written is left
        tmp.unlink(missing_ok=True)
        raise os_error(exc, out, "write") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
