"""A circuit's files: ``flyviz circuit --out DIR`` writes them all or none.

``DIR/scores.csv``
    One row per unit, strongest first: ``rank``, the unit (``neuron`` with its
    ``cell_type`` and ``superclass``; ``group`` and its ``neurons``; or
    ``edge`` with its ``pre`` and ``post`` neurons), ``score`` and ``in_circuit``
    (0 on every row where no circuit below the whole model is faithful).
``DIR/curve.csv``
    One row per measured circuit: ``kind`` (``curve`` or ``refinement``),
    ``nodes`` (its size ``k``), ``fraction`` (``k / N``), ``metric`` and
    ``faithfulness``.
``DIR/circuit.json``
    The object ``flyviz circuit --json`` prints, with ``"format":
    "flyviz-circuit"``; where no circuit is faithful its ``circuit`` has
    ``"faithful": false``, a ``verdict`` that says so, no size and empty lists.

The three are written into a temporary folder beside ``DIR`` and moved into
place together; an existing ``DIR`` is replaced only when it is empty or a
circuit folder flyviz wrote.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError
from flyviz.fileio import missing_folder

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.circuit import CircuitResult
    from flyviz.model.checkpoint import Checkpoint

FORMAT = "flyviz-circuit"
FILES = ("scores.csv", "curve.csv", "circuit.json")


def check_out_dir(out: str | Path) -> Path:
    """``out`` as a path, if a circuit folder may be written there (before any work)."""
    out = Path(out).expanduser()
    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out} is a file; give a folder for the circuit's files")
        entries = {p.name for p in out.iterdir()}
        if entries and not _is_circuit_folder(out):
            raise InputError(f"--out {out} exists and is not a circuit folder flyviz wrote; "
                             "remove it or choose another name")
    elif not out.parent.is_dir():
        raise InputError(f"--out {out}: {missing_folder(out.parent)}")
    from flyviz.fileio import probe_writable

    probe_writable(out if out.is_dir() else out.parent, "--out", out)
    return out


def _is_circuit_folder(path: Path) -> bool:
    try:
        data = json.loads((path / "circuit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    extra = {p.name for p in path.iterdir()} - set(FILES)
    return isinstance(data, dict) and data.get("format") == FORMAT and not extra


def _write_scores(path: Path, result: "CircuitResult", ckpt: "Checkpoint") -> None:
    from flyviz.analysis.circuit import neuron_labels

    units = result.units
    in_circuit = np.zeros(units.count, dtype=bool)
    if result.faithful:   # a search that found none kept the whole brain, which is no circuit
        in_circuit[result.kept_units] = True
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        if units.kind == "neurons":
            types, classes = neuron_labels(ckpt, "cell_type"), neuron_labels(ckpt, "superclass")
            writer.writerow(["rank", "neuron", "cell_type", "superclass", "score", "in_circuit"])
            for rank, i in enumerate(result.order, start=1):
                writer.writerow([rank, int(i), types[i], classes[i], repr(float(result.scores[i])),
                                 int(in_circuit[i])])
        elif units.kind == "edges":
            offsets = np.asarray(ckpt.w_offsets)
            post = np.searchsorted(offsets, result.order, side="right") - 1
            pre = np.asarray(ckpt.w_indices)[result.order]
            writer.writerow(["rank", "edge", "pre", "post", "score", "in_circuit"])
            for rank, (e, a, b) in enumerate(zip(result.order, pre, post), start=1):
                writer.writerow([rank, int(e), int(a), int(b), repr(float(result.scores[e])),
                                 int(in_circuit[e])])
        else:
            assert units.members is not None
            sizes = np.bincount(units.members, minlength=units.count)
            writer.writerow(["rank", "group", "neurons", "score", "in_circuit"])
            for rank, g in enumerate(result.order, start=1):
                writer.writerow([rank, units.names[g], int(sizes[g]),
                                 repr(float(result.scores[g])), int(in_circuit[g])])


def _write_curve(path: Path, result: "CircuitResult") -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kind", "nodes", "fraction", "metric", "faithfulness"])
        for kind, points in (("curve", result.curve), ("refinement", result.refinement)):
            for p in points:
                writer.writerow([kind, p.size, repr(p.size / result.units.count),
                                 repr(float(p.metric)), repr(float(p.faithfulness))])


def write_circuit_folder(out: str | Path, result: "CircuitResult", ckpt: "Checkpoint",
                         document: dict[str, Any] | None = None) -> Path:
    """Write the scores, the curve and ``circuit.json`` into ``out`` (all or none)."""
    out = check_out_dir(out)
    document = dict(result.to_json(ckpt) if document is None else document)
    document["format"] = FORMAT
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        folder = tmp / "circuit"
        folder.mkdir()
        _write_scores(folder / "scores.csv", result, ckpt)
        _write_curve(folder / "curve.csv", result)
        (folder / "circuit.json").write_text(json.dumps(document), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(folder, out)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_curve(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``curve.csv`` (numbers as numbers)."""
    with open(path, encoding="utf-8", newline="") as handle:
        return [{"kind": r["kind"], "nodes": int(r["nodes"]), "fraction": float(r["fraction"]),
                 "metric": float(r["metric"]), "faithfulness": float(r["faithfulness"])}
                for r in csv.DictReader(handle)]


__all__ = ["FILES", "FORMAT", "check_out_dir", "read_curve", "write_circuit_folder"]
