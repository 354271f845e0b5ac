"""The causal trace's result file: CSV or Parquet, one row per cell, and its reader.

See :mod:`flyviz.analysis.causal` for what a cell is and how the file is made.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.analysis.table_file import open_result_table, result_format, write_table_file
from flyviz.errors import FlyvizError, InputError

FORMAT = "flyviz-patch"
FORMAT_VERSION = 1
CSV_PREFIX = "# flyviz-patch "
PARQUET_KEY = b"flyviz_patch"
#: The columns of a result file, in order.
COLUMNS = ("position", "token", "group", "query", "neurons", "window", "p_answer",
           "logit_diff", "p_normalised", "logit_diff_normalised")
#: The measures a cell has (what ``--metric`` and the heatmap can show).
METRICS = ("p_answer", "logit_diff", "p_normalised", "logit_diff_normalised")
#: The measure a trace is read by unless asked otherwise: the window's default (the share of
#: the clean-over-corrupted logit difference a cell restores), which p(answer) can invert when
#: the corrupted prompt already favours the answer.
DEFAULT_METRIC = "logit_diff_normalised"


class TraceError(FlyvizError):
    """A causal trace file is missing, damaged, or not a causal trace."""


@dataclass(frozen=True)
class TraceCell:
    """One row of a causal trace: a (position, group) cell and its measures."""

    position: int
    token: str
    group: str
    query: str
    neurons: int
    window: int
    p_answer: float
    logit_diff: float
    p_normalised: float
    logit_diff_normalised: float

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


def write_trace(out: Path, rows: list[TraceCell], info: dict[str, Any],
                kind: str | None = None) -> None:
    """Write the cells and ``info`` as CSV or Parquet (see the module documentation)."""
    write_table_file(out, {c: [getattr(r, c) for r in rows] for c in COLUMNS}, info,
                     kind or result_format(out), csv_prefix=CSV_PREFIX, parquet_key=PARQUET_KEY,
                     what="causal trace", types=_ARROW_TYPES)


#: The Arrow types of a causal trace's columns that are not float64.
_ARROW_TYPES = {"position": "int32", "token": "string", "group": "string", "query": "string",
                "neurons": "int64", "window": "int32"}


class CausalTrace:
    """A causal trace, read from its file (or just computed): cells as a positions x groups
    grid.

    Attributes
    ----------
    rows
        The cells, positions first.
    info
        The file's metadata (prompts, answer, references, settings, model).
    positions
        The corrupted positions traced, in order; ``groups`` the group names.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        info, records = open_result_table(self.path, noun="causal trace", command="patch",
                                          fmt=FORMAT, csv_prefix=CSV_PREFIX,
                                          parquet_key=PARQUET_KEY, error=TraceError,
                                          damaged=self._damaged)
        self._set(self._parse(records), info)

    @classmethod
    def from_rows(cls, rows: list[TraceCell], info: dict[str, Any],
                  path: str | Path | None = None) -> "CausalTrace":
        """A trace from its cells and metadata."""
        trace = cls.__new__(cls)
        trace.path = Path(path) if path is not None else Path("")
        trace._set(rows, info)
        return trace

    def _set(self, rows: list[TraceCell], info: dict[str, Any]) -> None:
        self.rows = rows
        self.info = info
        self.positions = sorted({r.position for r in rows})
        self.groups = list(dict.fromkeys(r.group for r in rows))
        if len(rows) != len(self.positions) * len(self.groups):
            raise TraceError(f"{self.path.name} is damaged (its cells do not form a grid)")

    def _damaged(self, why: str) -> TraceError:
        return TraceError(f"{self.path.name} is damaged ({why}); run 'flyviz patch' again")

    def _parse(self, records: list[dict[str, Any]]) -> list[TraceCell]:
        ints = ("position", "neurons", "window")
        texts = ("token", "group", "query")
        rows = []
        for number, record in enumerate(records, start=1):
            try:
                values = {c: int(record[c]) if c in ints else str(record[c] or "") if c in texts
                          else float(record[c]) for c in COLUMNS}
            except (KeyError, TypeError, ValueError):
                raise self._damaged(f"row {number} lacks a column or holds a bad value") from None
            rows.append(TraceCell(**values))  # type: ignore[arg-type]  # typed per column above
        if not rows:
            raise self._damaged("it holds no cell")
        return rows

    # ------------------------------------------------------------------ views
    @property
    def references(self) -> dict[str, float]:
        """``p_clean``, ``p_corrupt``, ``logit_diff_clean``, ``logit_diff_corrupt``."""
        return dict(self.info.get("references", {}))

    def grid(self, metric: str = "p_answer") -> np.ndarray:
        """``(positions, groups)`` float64 values of one measure."""
        if metric not in METRICS:
            raise InputError(f"unknown measure {metric!r}; choose one of {', '.join(METRICS)}")
        values = np.array([getattr(r, metric) for r in self.rows], dtype=np.float64)
        return values.reshape(len(self.positions), len(self.groups))

    def token_labels(self) -> list[str]:
        """``"12 ·Tom"`` per traced position."""
        return [f"{r.position} {r.token}" for r in self.rows[::len(self.groups)]]

    def span(self, metric: str = "p_answer") -> tuple[float, float]:
        """``(corrupted, clean)`` values of a measure: the ends of the colour bar."""
        refs = self.references
        if metric == "p_answer":
            return float(refs["p_corrupt"]), float(refs["p_clean"])
        if metric == "logit_diff":
            return float(refs["logit_diff_corrupt"]), float(refs["logit_diff_clean"])
        return 0.0, 1.0

    def best(self, metric: str = "p_normalised", limit: int = 10) -> list[TraceCell]:
        """The cells that restore the most, best first (NaN last)."""
        key = [(-v if math.isfinite(v) else math.inf, i)
               for i, v in enumerate(getattr(r, metric) for r in self.rows)]
        return [self.rows[i] for _, i in sorted(key)[:limit]]


def open_causal_trace(path: str | Path) -> CausalTrace:
    """Open a causal trace file (see :class:`CausalTrace`)."""
    return CausalTrace(path)


__all__ = ["COLUMNS", "CausalTrace", "DEFAULT_METRIC", "METRICS", "TraceCell", "TraceError",
           "open_causal_trace", "write_trace"]
