"""The result tables flyviz writes: a JSON metadata line (CSV) or key (Parquet), then rows.

Lesion maps, estimated lesions and causal traces share the file format: a CSV
whose first line is ``PREFIX {json}`` followed by a header and rows, or a
Parquet table whose schema metadata holds the JSON under a key. Every way such
a file can be unreadable is one line of the caller's error class.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flyviz.errors import InputError, MissingDependencyError

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
        raise InputError(f"--out {out}: the folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK):
        raise InputError(f"--out {out}: the folder {out.parent} is not writable")
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
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise error(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        first, _, rest = text.partition("\n")
        if not first.startswith(csv_prefix):
            raise error(f"{path.name} is not a {what} (its first line is not "
                        f"'{csv_prefix.strip()} {{...}}')")
        try:
            info = json.loads(first[len(csv_prefix):])
        except ValueError:
            raise damaged("its metadata line is not JSON") from None
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
    return info, table.to_pylist()
