"""Estimated lesions, the files: the groups' result, the per-neuron table and the Zarr array.

A run writing ``RESULT`` (``.csv`` or ``.parquet``, the lesion-map format) also
writes ``RESULT.neurons.csv`` (or ``.parquet``) and ``RESULT.zarr``
(:func:`companion_paths`), all three moved into place together
(:func:`write_outputs`); :func:`read_neuron_table` reads the per-neuron table back
and checks it. The formats are described in :mod:`flyviz.analysis.importance`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis.sweep import write_result
from flyviz.analysis.table_file import write_table_file
from flyviz.errors import InputError, MissingDependencyError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

#: The per-neuron table's metadata: the CSV's first line starts with this, the Parquet
#: schema metadata key is :data:`NEURONS_PARQUET_KEY`.
NEURONS_CSV_PREFIX = "# flyviz-importance "
NEURONS_PARQUET_KEY = b"flyviz_importance"
METHOD = "attribution patching: sum_t (0 - x_i(t)) dCE/dx_i(t), true gradient"


def companion_paths(out: Path) -> dict[str, Path]:
    """The files a run writing ``out`` makes: ``out``, ``OUT.neurons.EXT`` and ``OUT.zarr``
    (``lesions.csv`` → ``lesions.neurons.csv``, ``lesions.zarr``)."""
    return {"groups": out, "neurons": out.with_name(f"{out.stem}.neurons{out.suffix}"),
            "zarr": out.with_name(f"{out.stem}.zarr")}


def check_companions(out: Path) -> None:
    """Refuse, before any work, a run whose per-neuron table or Zarr store beside ``out``
    (:func:`companion_paths`) could not be put in place: a folder where the table goes, a
    file where the store goes, or a folder there that is no store flyviz wrote (it would
    be replaced).

    Raises
    ------
    InputError
        One line naming the path and what to do.
    """
    from flyviz.record.convert import is_zarr_store

    paths = companion_paths(out)
    if paths["neurons"].is_dir():
        raise InputError(f"--out {out}: {paths['neurons']} (the per-neuron table written "
                         "beside it) is a folder; remove it or choose another name")
    store = paths["zarr"]
    empty = store.is_dir() and not any(store.iterdir())
    if store.exists() and not empty and not is_zarr_store(store):
        raise InputError(f"--out {out}: {store} (the Zarr store written beside it) exists and "
                         "is not a store flyviz wrote; remove it or choose another name")


def require_xarray() -> None:
    """Check that xarray and zarr, which write the estimates, are installed (before any work).

    Raises
    ------
    MissingDependencyError
        One line naming the extra to install (``flyviz[data]``).
    """
    try:
        import xarray  # noqa: F401
        import zarr  # noqa: F401
    except ImportError:
        raise MissingDependencyError.for_feature("writing the estimates as Zarr", "xarray",
                                                 "data") from None


def write_outputs(paths: dict[str, Path], rows: list[Any], ckpt: "Checkpoint",
                   estimate: np.ndarray, info: dict[str, Any], kind: str) -> None:
    """Write the result (when there are ``rows``), the per-neuron table and the Zarr array
    into a folder beside ``paths`` (:func:`companion_paths`), then move all three into place: a full disk leaves none of them half-written (and
    the finished tasks kept for ``--resume``), never a result without its companions."""
    import shutil
    import tempfile

    from flyviz.fileio import os_error

    out = paths["groups"]
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name[:80]}.", suffix=".writing",
                                        dir=out.parent))
    except OSError as exc:
        raise os_error(exc, out, "write") from None
    try:
        staged = {name: staging / path.name for name, path in paths.items()}
        if rows:
            write_result(staged["groups"], rows, info, kind)
        write_neuron_table(staged["neurons"], ckpt, estimate, info, kind)
        write_zarr(staged["zarr"], ckpt, estimate, info)
        for name, path in paths.items():
            if not staged[name].exists():
                continue
            if name == "zarr" and path.is_dir():
                shutil.rmtree(path)
            os.replace(staged[name], path)
    except OSError as exc:
        raise os_error(exc, out, "write") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def neuron_columns(ckpt: "Checkpoint", estimate: np.ndarray) -> dict[str, np.ndarray]:
    """The per-neuron table: ``neuron``, the anatomy's labels, ``delta_ce_est``."""
    from flyviz.record.convert import neuron_table

    table = neuron_table(ckpt.anatomy, int(ckpt.config.neurons))
    table = {k: v for k, v in table.items() if k not in ("x", "y", "z")}
    table["delta_ce_est"] = np.asarray(estimate, dtype=np.float64)
    return table


def write_neuron_table(path: Path, ckpt: "Checkpoint", estimate: np.ndarray,
                       info: dict[str, Any], kind: str) -> None:
    """Write the per-neuron table as CSV (metadata on the first line) or Parquet."""
    write_table_file(path, neuron_columns(ckpt, estimate), info, kind,
                     csv_prefix=NEURONS_CSV_PREFIX, parquet_key=NEURONS_PARQUET_KEY,
                     what="per-neuron estimate")


def to_xarray(ckpt: "Checkpoint", estimate: np.ndarray, info: dict[str, Any] | None = None
              ) -> Any:
    """``delta_ce_est[neuron]`` as an :class:`xarray.Dataset` with the neurons' labels."""
    import xarray as xr

    table = neuron_columns(ckpt, estimate)
    values = table.pop("delta_ce_est")
    coords: dict[str, Any] = {"neuron": table.pop("neuron")}
    coords.update({name: ("neuron", column) for name, column in table.items()})
    attrs = {"method": METHOD, "units": "nats/token"}
    if info is not None:
        attrs["flyviz_importance"] = json.dumps(info, sort_keys=True, separators=(",", ":"))
    return xr.Dataset({"delta_ce_est": (("neuron",), values,
                                        {"long_name": "estimated rise in mean cross-entropy "
                                                      "when the neuron is silenced",
                                         "units": "nats/token"})},
                      coords=coords, attrs=attrs)


def write_zarr(path: Path, ckpt: "Checkpoint", estimate: np.ndarray,
               info: dict[str, Any]) -> Path:
    """Write :func:`to_xarray` as a Zarr store (texts as codes, as recordings are)."""
    from flyviz.record.convert import encode_texts, is_zarr_store, write_folder_atomically

    encoded = encode_texts(to_xarray(ckpt, estimate, info))

    def write(tmp: Path) -> None:
        encoded.to_zarr(tmp, mode="w", consolidated=False)

    return write_folder_atomically(path, write, is_zarr_store)


def read_neuron_table(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(info, columns)`` of a per-neuron table (CSV or Parquet).

    Raises
    ------
    InputError
        One line when the file is missing, is not a per-neuron estimate, or is truncated or
        damaged (:func:`~flyviz.analysis.table_file.read_table_file`'s checks, then each
        column's values).
    """
    from flyviz.analysis.table_file import result_format, read_table_file

    path = Path(path)
    if not path.is_file():
        raise InputError(f"no per-neuron estimate at {path}: the file does not exist")

    def damaged(why: str) -> InputError:
        return InputError(f"{path.name} is a damaged per-neuron estimate ({why})")

    info, rows = read_table_file(path, result_format(path), csv_prefix=NEURONS_CSV_PREFIX,
                                 parquet_key=NEURONS_PARQUET_KEY, what="flyviz per-neuron estimate",
                                 error=InputError, damaged=damaged)
    if not isinstance(info, dict):
        raise damaged("its metadata is not a JSON object")
    model = info.get("model")
    neurons = model.get("neurons") if isinstance(model, dict) else None
    if isinstance(neurons, int) and len(rows) != neurons:  # a table cut short, or padded
        raise damaged(f"it has {len(rows):,} rows, not one for each of its model's "
                      f"{neurons:,} neurons")
    columns: dict[str, np.ndarray] = {}
    try:
        for name in (rows[0] if rows else {}):
            raw = [r[name] for r in rows]
            if name == "delta_ce_est":
                columns[name] = np.array([float(v) for v in raw])
            elif name in ("neuron", "body_id"):
                columns[name] = np.array([int(v) for v in raw], dtype=np.int64)
            else:
                columns[name] = np.array(raw)
    except (TypeError, ValueError, KeyError):
        # A truncated last row (None) or a value that is not a number.
        raise damaged(f"a value of its {name!r} column is not what the column holds"
                      ) from None
    return info, columns


__all__ = ["METHOD", "NEURONS_CSV_PREFIX", "NEURONS_PARQUET_KEY", "check_companions",
           "companion_paths", "neuron_columns", "read_neuron_table", "require_xarray", "to_xarray",
           "write_neuron_table", "write_outputs", "write_zarr"]
