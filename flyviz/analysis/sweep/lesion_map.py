"""The lesion map's result: a row per group (:class:`GroupResult`), the file's format, and
:class:`LesionMap`, the reader the app and scripts use.

The file (CSV or Parquet, the model's identity inside) is described in
:mod:`flyviz.analysis.sweep` ("Result file"); :func:`flyviz.analysis.sweep.run.write_result`
writes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis.sweep.groups import BY_LABELS, label_groups
from flyviz.analysis.table_file import open_result_table
from flyviz.errors import FlyvizError, InputError, SelectionError
from flyviz.model.batch import LESION_MODES as MODES

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.interventions import Intervention

FORMAT = "flyviz-sweep"
FORMAT_VERSION = 1
#: The columns of a result file, in order.
COLUMNS = ("rank", "group", "query", "neurons", "delta_ce", "kl", "top1_agreement",
           "cross_entropy", "positions")
#: The measures a :class:`LesionMap` can colour neurons by.
METRICS = ("delta_ce", "kl", "top1_agreement", "cross_entropy")
CSV_PREFIX = "# flyviz-sweep "
PARQUET_KEY = b"flyviz_sweep"


class SweepError(FlyvizError):
    """A lesion map file is missing, damaged, or belongs to another model."""


@dataclass(frozen=True)
class GroupResult:
    """One row of a lesion map: a group and what lesioning it did to the text's prediction.

    Attributes
    ----------
    rank
        1 for the largest ``delta_ce``.
    group, query, neurons
        The group's name, a query that selects exactly its neurons, their number.
    delta_ce
        Mean increase in cross-entropy over the untouched model, nats/token.
    kl
        Mean KL(p_untouched ‖ p_lesioned), nats/token.
    top1_agreement
        Fraction of positions where both models' most likely next token is the same.
    cross_entropy
        The lesioned model's mean cross-entropy, nats/token.
    positions
        Positions counted.
    """

    rank: int
    group: str
    query: str
    neurons: int
    delta_ce: float
    kl: float
    top1_agreement: float
    cross_entropy: float
    positions: int

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)



def rows_digest(rows: list[GroupResult]) -> str:
    """SHA-256 of the rows' values in column order (floats as their shortest exact text),
    kept in the metadata as ``rows_sha256``: a reader refuses a lesion map whose rows were
    edited, cut short or damaged."""
    import hashlib

    table = [[getattr(row, c) for c in COLUMNS] for row in rows]
    return hashlib.sha256(json.dumps(table, separators=(",", ":")).encode("utf-8")).hexdigest()



def _checkpoint_of(model: Any) -> "Checkpoint":
    """The checkpoint of a :class:`~flyviz.record.runner.Model` (``flyviz.load``), or the
    checkpoint itself."""
    return getattr(model, "checkpoint", model)


class LesionMap:
    """A lesion map file (CSV or Parquet), read: its groups, their measures, the settings.

    Everything is read when it is opened (one row per group). Resolving groups
    to neurons needs the model (a checkpoint, or a :class:`~flyviz.record.runner.Model`
    from ``flyviz.load``): :meth:`check_model` first, then :meth:`neurons_of`
    and :meth:`importance`.

    Parameters
    ----------
    path
        The ``.csv`` or ``.parquet`` file ``flyviz sweep`` wrote.

    Raises
    ------
    SweepError
        When the file is missing, not a lesion map, or damaged.

    Examples
    --------
    >>> lesions = LesionMap("lesions.csv")                       # doctest: +SKIP
    >>> lesions.check_model(checkpoint)                          # doctest: +SKIP
    >>> colour = lesions.importance(checkpoint)                  # one value per neuron
    >>> top = lesions.rows[0]; lesions.neurons_of(top, checkpoint)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        info, records = open_result_table(self.path, noun="lesion map", command="sweep",
                                          fmt=FORMAT, csv_prefix=CSV_PREFIX,
                                          parquet_key=PARQUET_KEY, error=SweepError,
                                          damaged=self._damaged)
        if int(info.get("format_version", 0)) > FORMAT_VERSION:
            raise SweepError(f"{self.path.name} was written by a newer flyviz (lesion map "
                             f"format {info.get('format_version')}); update flyviz")
        self.info: dict[str, Any] = info
        self.rows: list[GroupResult] = self._rows(records)
        expected = info.get("rows_sha256")
        #: One line for the user when the file cannot be checked (no digest), else None.
        self.integrity_note: str | None = None
        if expected is None:
            self.integrity_note = (f"the lesion map {self.path.name} carries no digest of its "
                                   "rows (written before flyviz kept one), so damage to it "
                                   "cannot be detected")
        elif expected != rows_digest(self.rows):
            raise self._damaged("its rows do not match their rows_sha256 digest: edited, cut "
                                "short or corrupted")
        self._resolved: tuple[Any, list[np.ndarray]] | None = None

    # --------------------------------------------------------------- reading
    def _damaged(self, why: str) -> SweepError:
        return SweepError(f"{self.path.name} is damaged ({why}); run 'flyviz sweep' again")

    def _rows(self, records: list[dict[str, Any]]) -> list[GroupResult]:
        kinds = {f.name: f.type for f in fields(GroupResult)}
        rows = []
        for number, record in enumerate(records, start=1):
            missing = [c for c in COLUMNS if record.get(c) in (None, "")]
            if missing:
                raise self._damaged(f"row {number} has no {missing[0]}")
            try:
                values = {c: (int(record[c]) if kinds[c] == "int" else
                              float(record[c]) if kinds[c] == "float" else str(record[c] or ""))
                          for c in COLUMNS}
            except (TypeError, ValueError):
                raise self._damaged(f"row {number} holds a value that is not a number") from None
            rows.append(GroupResult(**values))  # type: ignore[arg-type]  # typed per column above
        if not rows:
            raise self._damaged("it holds no group")
        return rows

    # ------------------------------------------------------------ properties
    @property
    def by(self) -> str:
        """What the groups are: ``superclass``, ``type``, ``side`` or ``file``."""
        return str(self.info.get("by", "file"))

    @property
    def mode(self) -> str:
        """The lesion: ``silence``, ``cut-out`` or ``cut-in``."""
        return str(self.info.get("mode", "silence"))

    @property
    def baseline_cross_entropy(self) -> float:
        """The untouched model's mean cross-entropy on the text, nats/token."""
        return float(self.info.get("baseline_cross_entropy", float("nan")))

    @property
    def model(self) -> dict[str, Any]:
        """The identity of the model it was made with (:func:`~flyviz.model.identity.model_identity`)."""
        model = self.info.get("model")
        return dict(model) if isinstance(model, dict) else {}

    @property
    def settings(self) -> dict[str, Any]:
        """The settings it was computed with."""
        return dict(self.info.get("settings", {}))

    def row(self, group: str | int) -> GroupResult:
        """A row by group name, or by position in :attr:`rows` (0 is the largest ΔCE)."""
        if isinstance(group, (int, np.integer)):
            return self.rows[int(group)]
        for row in self.rows:
            if row.group == group:
                return row
        raise InputError(f"the lesion map {self.path.name} has no group {group!r}")

    def values(self, metric: str = "delta_ce") -> np.ndarray:
        """One measure of every row, in row order."""
        if metric not in METRICS:
            raise InputError(f"unknown measure {metric!r}; choose one of {', '.join(METRICS)}")
        return np.array([getattr(r, metric) for r in self.rows], dtype=np.float64)

    # ----------------------------------------------------------------- model
    def mismatch(self, model: Any) -> str | None:
        """``None`` when the map was made with ``model`` (same weight and graph digests),
        else one line saying what differs."""
        from flyviz.model.identity import identity_mismatch

        checkpoint = _checkpoint_of(model)
        if not self.model.get("weights_sha256") or not self.model.get("graph_sha256"):
            return (f"the lesion map {self.path.name} does not name its model (no digests); "
                    "run 'flyviz sweep' again")
        return identity_mismatch(self.model, checkpoint, f"the lesion map {self.path.name}")

    def matches(self, model: Any) -> bool:
        """True when the map was made with ``model``."""
        return self.mismatch(model) is None

    def check_model(self, model: Any) -> None:
        """Raise :class:`SweepError` (one line) unless the map was made with ``model``."""
        note = self.mismatch(model)
        if note is not None:
            raise SweepError(note)

    def _neurons(self, model: Any) -> list[np.ndarray]:
        """Every row's neurons in ``model`` (resolved once per model)."""
        from flyviz.model.selection import neuron_index

        checkpoint = _checkpoint_of(model)
        if self._resolved is not None and self._resolved[0] is checkpoint:
            return self._resolved[1]
        found: list[np.ndarray | None]
        if self.by in BY_LABELS:
            # By label: one pass over the labels instead of thousands of queries.
            try:
                by_name = {g.name: g.neurons for g in label_groups(checkpoint, self.by)}
            except SelectionError as exc:
                raise SweepError(f"{self.path.name}: {exc}") from None
            found = [by_name.get(r.group) for r in self.rows]
        else:
            index = neuron_index(checkpoint)
            found = []
            for r in self.rows:
                try:
                    found.append(index.select(r.query))
                except SelectionError:
                    found.append(None)
        for r, neurons in zip(self.rows, found):
            if neurons is None or neurons.size != r.neurons:
                got = "nothing" if neurons is None else f"{neurons.size:,} neurons"
                raise SweepError(f"the group {r.group!r} of {self.path.name} ({r.neurons:,} "
                                 f"neurons) selects {got} of {checkpoint.name}; open the map "
                                 "with the model it was made with")
        resolved = [np.asarray(n) for n in found if n is not None]
        self._resolved = (checkpoint, resolved)
        return resolved

    def neurons_of(self, group: "GroupResult | str | int", model: Any) -> np.ndarray:
        """Sorted neuron indices of a group (a row, its name, or its position)."""
        row = group if isinstance(group, GroupResult) else self.row(group)
        return self._neurons(model)[self.rows.index(row)]

    def importance(self, model: Any, metric: str = "delta_ce") -> np.ndarray:
        """``(neurons,)`` float32: each neuron's group's measure, for colouring.

        A neuron in several groups (a groups file may overlap) takes the
        largest value among them; a neuron in none is NaN.
        """
        values = self.values(metric)
        out = np.full(_checkpoint_of(model).config.neurons, -np.inf, dtype=np.float64)
        for neurons, value in zip(self._neurons(model), values):
            out[neurons] = np.maximum(out[neurons], value)
        out[out == -np.inf] = np.nan
        return out.astype(np.float32)

    def intervention(self, group: "GroupResult | str | int", mode: str | None = None
                     ) -> "Intervention":
        """The intervention the sweep applied to a group, or the lesion ``mode`` of it (to
        replay it with ``flyviz compare`` or :class:`~flyviz.record.compare.Comparison`)."""
        from flyviz.model.interventions import Cut, Silence

        row = group if isinstance(group, GroupResult) else self.row(group)
        mode = self.mode if mode is None else mode
        if mode not in MODES:
            raise InputError(f"unknown lesion {mode!r}; expected one of {', '.join(MODES)}")
        if mode == "cut-out":
            return Cut(row.query, "all")
        if mode == "cut-in":
            return Cut("all", row.query)
        return Silence(row.query)


def open_lesion_map(path: str | Path) -> LesionMap:
    """Open a lesion map (see :class:`LesionMap`)."""
    return LesionMap(path)


__all__ = ["COLUMNS", "FORMAT", "FORMAT_VERSION", "GroupResult", "LesionMap", "METRICS",
           "SweepError", "open_lesion_map", "rows_digest"]
