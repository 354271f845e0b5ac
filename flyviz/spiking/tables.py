"""Reading the spiking brain's tables: the one check of every id, weight, time and position
column the authors' files (and an input-spike table) hold.

Every reader of a spiking brain (:func:`flyviz.spiking.brain.load_authors_brain`, its
coordinates and classification, :func:`flyviz.spiking.run.read_input_spikes`, ``flyviz
simulate --excite-file``) goes through :func:`read_table` and the column checks here, so a
command, the app and the library refuse the same files with the same line: the file, the
column and the row, and nothing else (no traceback, no pandas warning before it).

The dtypes are those the authors write: root ids are whole numbers of at most 19 digits
that fit a signed 64-bit integer (FlyWire's are 18), indices whole numbers, synapse counts
and times numbers (a boolean column is no count: ``True`` would read as one synapse).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError
from flyviz.fileio import open_regular, short_path

__all__ = ["MAX_ID", "MS_FACTOR", "TableError", "first_repeat", "id_column", "in_milliseconds",
           "index_column", "late_time", "number_column", "parse_ids", "read_id_list",
           "read_table", "spike_keys"]

#: The largest root id a table may hold (the largest signed 64-bit integer: what NumPy,
#: Parquet's int64 and the recordings keep).
MAX_ID = 2**63 - 1

_WHOLE = re.compile(r"\d{1,19}")


class TableError(InputError):
    """A spiking brain's or input table's file, column or row is not what it must be."""


def read_table(path: str | Path, what: str, *, strings: bool = False,
               index_col: int | None = None, error: type[InputError] = TableError) -> Any:
    """The CSV (``.csv``, ``.csv.gz``) or Parquet (``.parquet``, ``.pq``) table at ``path``,
    of a regular file only (a FIFO would block the reader).

    Parameters
    ----------
    what
        How a message names the table (``"the completeness table"``).
    strings
        Read a CSV's cells as text (no guessing of types: each column is checked by the
        functions here, which name the row of a bad cell).
    index_col
        As pandas takes it.
    error
        The :class:`InputError` class raised.

    Raises
    ------
    InputError
        One line naming the file.
    """
    from flyviz.extras import require

    p = Path(path).expanduser()
    require("tables", f"reading {what} {p.name}")
    import pandas as pd

    try:
        # Opened here, of a regular file only, and handed to pandas as a file: a FIFO
        # would block, and pyarrow cannot open a name that is not UTF-8 (legal on Linux).
        handle = open_regular(p, "rb", what)
    except FileNotFoundError:
        raise error(f"{what} {short_path(p)} does not exist") from None
    except InputError as exc:
        raise error(str(exc)) from None
    with handle, warnings.catch_warnings():
        # pandas warns (RuntimeWarning, DtypeWarning) on odd cells before the checks below
        # name them: one line, not warnings and then a line.
        warnings.simplefilter("ignore")
        # A row longer than the header (index_col=False below) is an error, not a warning.
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            if p.suffix.lower() in (".parquet", ".pq"):
                require("parquet", f"reading {what} {p.name}")
                return pd.read_parquet(handle)
            compression = "gzip" if p.suffix.lower() == ".gz" else None
            # Without an index column, never let pandas make one of a row's extra leading
            # fields: a row one field longer than the header would shift every column (t
            # read from trial), and one of 100,000 fields would take minutes. A delimiter at
            # a row's end is still read; more fields are refused (ParserWarning, below).
            columns: int | bool = index_col if index_col is not None else False
            if index_col is None:
                _check_first_row(handle, compression == "gzip")
            if strings:
                return pd.read_csv(handle, dtype=str, keep_default_na=False,
                                   index_col=columns, compression=compression)
            return pd.read_csv(handle, index_col=columns, compression=compression)
        except InputError:
            raise
        except (pd.errors.ParserWarning, _LongFirstRow):
            # (pandas says so of the first row only; a later one is its ParserError below)
            raise error(f"cannot read {what} {short_path(p)}: its first row holds more "
                        "fields than the header names; the file is damaged or not a table of "
                        "this layout") from None
        except (UnicodeDecodeError, pd.errors.EmptyDataError):
            # Bytes that are no text, or nothing at all: a file of another kind (a recording,
            # a picture) or an empty one, not a damaged table; the decoder's words say neither.
            raise error(f"cannot read {what} {short_path(p)}: it is empty, or not a CSV table "
                        "(text with a header row; Parquet files end in .parquet)") from None
        except Exception as exc:  # pandas and pyarrow raise many types for a bad file
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise error(f"cannot read {what} {short_path(p)}: {first}") from None


class _LongFirstRow(Exception):
    """The first row of a CSV has non-empty fields past the header's."""


#: Bytes of a CSV's header and first row that :func:`_check_first_row` reads, at most.
_FIRST_ROW_BYTES = 1 << 20


def _check_first_row(handle: Any, gzipped: bool) -> None:
    """Raise :class:`_LongFirstRow` where a CSV's first row has non-empty fields past its
    header's, before pandas reads it (it builds a column of each, which takes minutes for a
    damaged row of 100,000); a delimiter at the row's end is no field. Puts ``handle`` back
    at its start."""
    import csv
    import gzip
    import io

    try:
        source = gzip.GzipFile(fileobj=handle, mode="rb") if gzipped else handle
        lines = [source.readline(_FIRST_ROW_BYTES), source.readline(_FIRST_ROW_BYTES)]
    except (OSError, EOFError):
        lines = []  # not gzip, or cut short: pandas names it
    finally:
        handle.seek(0)
    try:
        rows = list(csv.reader(io.StringIO(b"".join(lines).decode("utf-8", "replace"))))
    except csv.Error:  # a NUL, a field past csv's limit: pandas reads it or names it
        return
    if len(rows) == 2 and any(rows[1][len(rows[0]):]):
        raise _LongFirstRow


def _bad(file: str, column: str, row: int, value: Any, must: str,
         error: type[InputError]) -> InputError:
    text = repr(value) if isinstance(value, str) else str(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return error(f"{file}: {column} {text} (row {row}) {must}")


def parse_ids(values: Any, file: str, column: str, *,
              error: type[InputError] = TableError) -> np.ndarray:
    """Root ids as int64 from any column: whole numbers 0..2**63-1 (integers, or text of at
    most 19 digits); a boolean, a float, an empty cell or a longer number is refused.

    Raises
    ------
    InputError
        ``"coordinates.csv: root_id 'abc' (row 3) is not a root id (a whole number of at
        most 19 digits)"``.
    """
    array = np.asarray(values)
    must = "is not a root id (a whole number of at most 19 digits)"
    if array.dtype.kind == "b":
        raise error(f"{file}: column {column} holds booleans, not root ids")
    if array.dtype.kind in "iu":
        wide = array.astype(np.uint64) if array.dtype.kind == "u" else array
        bad = (wide > MAX_ID) if array.dtype.kind == "u" else (array < 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise _bad(file, column, row, array[row], must, error)
        return array.astype(np.int64)
    if array.dtype.kind in "OUS":
        out = np.empty(array.shape, np.int64)
        for row, cell in enumerate(array.tolist()):
            text = cell.decode("ascii", "replace") if isinstance(cell, bytes) else cell
            if isinstance(text, bool) or not isinstance(text, (str, int)):
                raise _bad(file, column, row, text, must, error)
            if isinstance(text, str):
                text = text.strip()
                if not _WHOLE.fullmatch(text):
                    raise _bad(file, column, row, text, must, error)
            number = int(text)
            if not 0 <= number <= MAX_ID:
                raise _bad(file, column, row, text, must, error)
            out[row] = number
        return out
    raise error(f"{file}: column {column} holds {array.dtype} values, not root ids "
                "(whole numbers)")


def id_column(frame: Any, column: str, file: str, *, label: str | None = None,
              error: type[InputError] = TableError) -> np.ndarray:
    """:func:`parse_ids` of ``frame[column]`` (``label``: how a message names the column)."""
    return parse_ids(frame[column].to_numpy(), file, label or column, error=error)


def index_column(frame: Any, column: str, file: str, count: int, *,
                 error: type[InputError] = TableError) -> np.ndarray:
    """Model indices 0..``count - 1`` of an integer column (a boolean or float one is
    refused: the authors' indices are int64)."""
    values = frame[column].to_numpy()
    if values.dtype.kind not in "iu":
        raise error(f"{file}: column {column} must hold whole numbers, not {values.dtype}")
    bad = (values < 0) | (values >= count) if values.dtype.kind == "i" else values >= count
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise error(f"{file}: {column} {int(values[row])} (row {row}) is outside "
                    f"0..{count - 1}")
    return values.astype(np.int64)


def number_column(frame: Any, column: str, file: str, *, low: float | None = None,
                  high: float | None = None, what: str = "numbers",
                  error: type[InputError] = TableError) -> np.ndarray:
    """A column of finite numbers as float64, each within ``low .. high`` where given;
    text is parsed (a CSV read as strings), booleans are refused (``True`` is no count).

    Raises
    ------
    InputError
        Naming the file, the column, the first bad value and its row.
    """
    values = frame[column].to_numpy()
    if values.dtype.kind == "b":
        raise error(f"{file}: column {column} holds booleans, not {what}")
    if values.dtype.kind in "iuf":
        numbers = values.astype(np.float64)
    elif values.dtype.kind in "OUS":
        numbers = np.empty(values.shape, np.float64)
        for row, cell in enumerate(values.tolist()):
            try:
                if isinstance(cell, bool):
                    raise ValueError
                numbers[row] = float(cell.strip() if isinstance(cell, str) else cell)
            except (TypeError, ValueError, OverflowError):
                raise _bad(file, column, row, cell, f"is not a number ({what})",
                           error) from None
    else:
        raise error(f"{file}: column {column} holds {values.dtype} values, not {what}")
    bad = ~np.isfinite(numbers)
    if low is not None:
        bad |= numbers < low
    if high is not None:
        bad |= numbers > high
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        span = "" if low is None and high is None else \
            f" (must be finite, {low:g}..{high:g})" if low is not None and high is not None \
            else f" (must be finite, at least {low:g})" if low is not None \
            else f" (must be finite, at most {high:g})"
        raise _bad(file, column, row, float(numbers[row]), f"is out of range{span}" if span else
                   "is not a finite number", error)
    return numbers


#: A table's last time past the run's end by at least this factor, and within the run
#: when divided by 1000, reads as milliseconds: a table in milliseconds whose last spike is
#: after the run's first tenth is 100x to 1000x past it, one in seconds is that far past
#: only where it is of a run 100 times as long.
MS_FACTOR = 100.0


def in_milliseconds(t_max_s: float, duration_s: float, dt_s: float) -> bool:
    """Whether a table's last time ``t_max_s``, read as seconds, looks like milliseconds: at
    least :data:`MS_FACTOR` times the run's ``duration_s``, and within the run (on the tick
    grid of ``dt_s``) when divided by 1000."""
    fits = np.rint(t_max_s / 1000.0 / dt_s) < np.rint(duration_s / dt_s)
    return bool(fits and t_max_s >= MS_FACTOR * duration_s)


def late_time(what: str, name: str, noun: str, t_max_s: float, duration_s: float,
              dt_s: float) -> str:
    """The one line for a table (``what`` ``name``) whose last time ``t_max_s`` is after the
    run's ``duration_s``: where the times look like milliseconds (:func:`in_milliseconds`),
    that ``t`` must be in seconds (the authors' layout); else that the run is too short."""
    said = (f"{what} {name} holds {noun} at {t_max_s * 1000:g} ms, after this run's "
            f"{duration_s * 1000:g} ms")
    if in_milliseconds(t_max_s, duration_s, dt_s):
        return (f"{said}; its t looks like milliseconds ({t_max_s:g} ms is within the run): "
                "t must be in seconds (the authors' layout), so divide it by 1000")
    return f"{said}; give a longer --duration"


def spike_keys(trial: Any, tick: Any, neuron: Any, n_steps: int, neurons: int) -> np.ndarray:
    """One whole number per spike (or input event), in the order (trial, tick, neuron):
    sorting them sorts the spikes, and two equal keys are the same spike twice."""
    return (np.asarray(trial, np.int64) * int(n_steps) + np.asarray(tick, np.int64)) \
        * int(neurons) + np.asarray(neuron, np.int64)


def first_repeat(keys: np.ndarray) -> int | None:
    """The position of the first key of sorted ``keys`` (:func:`spike_keys`) that the next
    one repeats, or ``None`` when each is there once."""
    same = np.flatnonzero(np.diff(keys) == 0) if keys.size > 1 else np.empty(0, np.int64)
    return int(same[0]) if same.size else None


def read_id_list(path: str | Path, option: str = "--excite-file") -> np.ndarray:
    """The root ids of a text file, one a line (``#`` starts a comment line), each checked
    by :func:`parse_ids`; a regular file only.

    Raises
    ------
    InputError
        Naming the option, the file and the first bad line.
    """
    from flyviz.fileio import read_regular_bytes

    p = Path(path).expanduser()
    try:
        data = read_regular_bytes(p, f"{option} file")
    except FileNotFoundError:
        raise TableError(f"{option} not found: {short_path(p)}") from None
    try:
        lines = data.decode("utf-8-sig").splitlines()  # a BOM (Windows' Notepad) is no id
    except UnicodeDecodeError:
        raise TableError(f"{p.name} is not UTF-8 text: it must hold root ids (whole numbers "
                         "of up to 19 digits), one a line") from None
    words, rows = [], []
    for row, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        for word in line.split():
            words.append(word)
            rows.append(row)
    if not words:
        raise TableError(f"{p.name} holds no root ids: give one a line")
    try:
        return parse_ids(np.asarray(words, dtype=object), p.name, "root id")
    except TableError as exc:
        bad = re.search(r"\(row (\d+)\)", str(exc))
        number = rows[int(bad.group(1))] + 1 if bad else 0
        raise TableError(f"{p.name}: line {number} must hold root ids (whole numbers of up to "
                         "19 digits), one a line") from None
