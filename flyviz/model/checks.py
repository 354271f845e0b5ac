"""The outcome of one integrity check, shared by the loaders and ``flyviz verify``.

A check either passes, fails (the message says what is wrong and what to do)
or is skipped (the message says why: a file that was not downloaded, a digest
the manifest does not record). The loaders raise the first failure as a
:class:`~flyviz.model.errors.CheckpointError`; :mod:`flyviz.model.verify`
lists them all.

Each result says where its rule comes from: one of the 18 checks of the
dataset authors' verifier (``scripts/verify_connectome_package.py``,
numbered as in fly-formats.md section 3, :data:`AUTHORS_CHECKS`), or
flyviz's own (``authors_check`` is ``None``).

The int16 weights rule (check 13) lives here too, because the writer and
the checker must do the same arithmetic: the authors' packager makes the
codes, the scale and the recorded error in float32, and their verifier
recomputes the error in float32 and allows a ``1.000001`` slack
(:func:`quantise_int16`, :func:`int16_round_trip_error`,
:func:`within_quantised_bound`). Codes or an error from float64 arithmetic
differ (49 of 84,173 codes by 1 on a 4,096-neuron model), and a float64
check without the slack rejects what the authors' packager writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
import dataclasses
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flyviz.model.errors import CheckpointError

PASS = "pass"
FAIL = "fail"
SKIP = "skip"

#: Progress callback: ``progress(label, fraction)`` with fraction in [0, 1].
Progress = Callable[[str, float], None]

#: The 18 checks of the dataset authors' verifier, by number, with the names it prints.
AUTHORS_CHECKS = {
    1: "every file SHA-256",
    2: "neuron and edge counts",
    3: "CSR offsets non-decreasing",
    4: "CSR offsets span every edge",
    5: "source indices in range",
    6: "weights finite",
    7: "signed weight counts",
    8: "frozen buffer brain.w_offsets",
    9: "frozen buffer brain.w_indices",
    10: "frozen buffer brain.w_values",
    11: "frozen buffer brain.in_index",
    12: "frozen buffer brain.out_index",
    13: "quantised round-trip within manifest",
    14: "quantised signs preserved",
    15: "type index covers its labels",
    16: "positioned soma count",
    17: "missing somata are zeroed",
    18: "body IDs unique",
}

#: The group of the rows of the fly-connectome-malecns-166k verifier's checks.
MALECNS_GROUP = "malecns"
#: The 17 checks of the authors' verifier on fly-connectome-malecns-166k (its full-connectome
#: branch, fly-family-2026.md §2.4), by number, with the names it prints; 11-14 are one per
#: population, in the manifest's order.
MALECNS_CHECKS = {
    **{number: AUTHORS_CHECKS[number] for number in range(1, 8)},  # the graph's, shared
    8: "superclass index covers its labels",
    9: "cell_type index covers its labels",
    10: "body IDs unique",
    11: "population retina in range",
    12: "population lamina in range",
    13: "population descending in range",
    14: "population sugar in range",
    15: "hops_from_retina covers every neuron",
    16: "hops_to_descending covers every neuron",
    17: "weights are raw and unnormalised",
}

#: Check 13 passes when the error is at most the recorded one times this (the authors' slack).
QUANTISED_SLACK = 1.000001
#: Largest int16 code: the symmetric fixed point maps max |w| to it.
INT16_TOP = 32767.0
_CHUNK = 1 << 22


@dataclass(frozen=True)
class CheckResult:
    """One check and its outcome.

    Parameters
    ----------
    group
        What was checked: ``"files"``, ``"dataset"``, ``"binding"``,
        ``"checkpoint"``, ``"release"`` or ``"golden"``.
    name
        Short name, e.g. ``"sha256 graph/edges_weight.f32"`` or
        ``"frozen digest brain.w_values"``.
    status
        :data:`PASS`, :data:`FAIL` or :data:`SKIP`.
    detail
        One line: what was found, why it was skipped, or what is wrong and
        what to do.
    authors_check
        The number (1-18) of the dataset authors' check this one is, or
        ``None`` for flyviz's own.
    """

    group: str
    name: str
    status: str
    detail: str = ""
    authors_check: int | None = None

    @property
    def failed(self) -> bool:
        """True when the check failed."""
        return self.status == FAIL

    @property
    def origin(self) -> str:
        """``"authors 13"`` for one of the authors' 18 checks, else ``"flyviz"``."""
        return f"authors {self.authors_check}" if self.authors_check else "flyviz"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form, with ``origin`` and the authors' name of the check (or ``None``)."""
        data = asdict(self)
        data["origin"] = "authors" if self.authors_check else "flyviz"
        # The 166k verifier's rows carry its own names (a population's is its manifest's).
        data["authors_name"] = (self.name if self.authors_check else None) \
            if self.group == MALECNS_GROUP else AUTHORS_CHECKS.get(self.authors_check or 0)
        return data


def raise_first_failure(results: Iterable[CheckResult]) -> None:
    """Raise the first failed check's detail as a :class:`CheckpointError`."""
    for result in results:
        if result.failed:
            raise CheckpointError(result.detail)


# ------------------------------------------------------------- int16 weights (check 13)
def quantise_int16(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The browser's int16 copy of the weights, as the authors' packager makes it.

    ``scale = float(max |w|) / 32767`` (a Python float), ``codes =
    rint(w / scale)`` and the recorded error ``max |codes * scale - w|``, both
    in float32: a float32 array and a Python float give a float32 result, so
    the scale enters the arithmetic rounded to float32, as written out here.

    Parameters
    ----------
    values
        The float32 weights.

    Returns
    -------
    codes, scale, max_absolute_error
        ``int16`` codes, the scale the manifest records, and the round-trip
        error to record (0 for no or all-zero weights, whose scale is 1).
    """
    weights = np.ascontiguousarray(values, dtype=np.float32)
    peak = float(np.abs(weights).max()) if weights.size else 0.0
    scale = peak / INT16_TOP if peak > 0 else 1.0
    scale32 = np.float32(scale)
    codes = np.empty(weights.shape, dtype=np.int16)
    for start in range(0, weights.shape[0], _CHUNK):
        chunk = weights[start:start + _CHUNK]
        codes[start:start + _CHUNK] = np.rint(chunk / scale32)
    return codes, scale, int16_round_trip_error(codes, weights, scale)


def int16_round_trip_error(codes: np.ndarray, weights: np.ndarray, scale: float) -> float:
    """``max |float32(codes) * scale - weights|`` in float32, as the authors' verifier has it.

    Chunked, so the 9-million-edge graph needs no full-size temporaries (a
    maximum does not depend on the order).
    """
    scale32 = np.float32(scale)
    worst = 0.0
    for start in range(0, int(weights.shape[0]), _CHUNK):
        stop = start + _CHUNK
        diff = np.abs(np.asarray(codes[start:stop]).astype(np.float32) * scale32
                      - np.asarray(weights[start:stop], dtype=np.float32))
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def within_quantised_bound(error: float, bound: float) -> bool:
    """Check 13's rule: ``error <= max_absolute_error * 1.000001``."""
    return float(error) <= float(bound) * QUANTISED_SLACK


# ------------------------------------------------------------- the authors' numbering
#: Row names of :func:`~flyviz.model.formats.dataset.check_dataset` -> the authors' check.
_AUTHORS_NUMBERS = {
    "counts": 2, "offsets non-decreasing": 3, "offsets span": 4, "sources in range": 5,
    "weights finite": 6, "weight signs": 7, "frozen digest brain.w_offsets": 8,
    "frozen digest brain.w_indices": 9, "frozen digest brain.w_values": 10,
    "frozen digest brain.in_index": 11, "frozen digest brain.out_index": 12,
    "int16 weights error": 13, "int16 weights signs": 14, "type_index range": 15,
    "somata positioned": 16, "missing somata are zero": 17, "body ids unique": 18,
}


def numbered(result: CheckResult) -> CheckResult:
    """A dataset row tagged with the authors' check it is."""
    number = 1 if result.name.startswith("sha256 ") else _AUTHORS_NUMBERS.get(result.name)
    return dataclasses.replace(result, authors_check=number) if number else result


def quantised_checks(files: Any) -> list[CheckResult]:
    """Checks 13-14 on the browser's int16 weights, computed as the authors' verifier does.

    ``files`` is a :class:`~flyviz.model.formats.dataset.DatasetFiles`
    (not imported here: that module imports this one).

    ``abs(codes.astype(float32) * scale - weights_f32).max()`` in float32,
    passing when ``<= max_absolute_error * 1.000001``; signs compared as
    ``sign(float32(codes)) == sign(weights)``.
    """
    rel = files.relative("edges_weight_i16")
    error_name, signs_name = "int16 weights error", "int16 weights signs"
    if not files.present("edges_weight_i16"):
        why = f"{rel} not downloaded (flyviz does not read it)"
        return [CheckResult("dataset", error_name, SKIP, why, 13),
                CheckResult("dataset", signs_name, SKIP, why, 14)]
    redownload = "the dataset is damaged or was modified; download it again"
    try:
        weights = files.array("edges_weight_f32")
        codes = files.array("edges_weight_i16")
    except CheckpointError as exc:
        return [CheckResult("dataset", error_name, FAIL, str(exc), 13)]
    if codes.shape != weights.shape:
        return [CheckResult("dataset", error_name, FAIL,
                            f"{rel} holds {codes.shape[0]:,} weights, the float32 file "
                            f"{weights.shape[0]:,}; {redownload}", 13)]
    block = files.manifest.get("weights")
    quant = block.get("quantised") if isinstance(block, dict) else None
    quant = quant if isinstance(quant, dict) else {}
    scale, bound = quant.get("scale"), quant.get("max_absolute_error")
    rows = []
    if scale is None or bound is None:
        rows.append(CheckResult("dataset", error_name, SKIP, "the manifest records no quantised "
                                                            "scale and max_absolute_error", 13))
    else:
        try:
            scale, bound = float(scale), float(bound)
        except (TypeError, ValueError):
            return [CheckResult("dataset", error_name, FAIL, "the manifest's quantised scale or "
                                f"max_absolute_error is not a number; {redownload}", 13)]
        error = int16_round_trip_error(codes, weights, scale)
        ok = within_quantised_bound(error, bound)
        rows.append(CheckResult(
            "dataset", error_name, PASS if ok else FAIL,
            f"max {error:.6g} <= {float(bound):.6g} x {QUANTISED_SLACK} (float32, as the "
            "authors' verifier)" if ok else
            f"{rel} differs from the float32 weights by up to {error:.6g}, more than the "
            f"manifest's {float(bound):.6g} x {QUANTISED_SLACK} (computed in float32 as the "
            f"authors' verifier does); {redownload}", 13))
    step = 1 << 22
    same = all(np.array_equal(np.sign(np.asarray(codes[i:i + step]).astype(np.float32)),
                              np.sign(np.asarray(weights[i:i + step], dtype=np.float32)))
               for i in range(0, weights.shape[0], step))
    rows.append(CheckResult("dataset", signs_name, PASS if same else FAIL, "" if same else
                            f"{rel} has weights whose sign differs from the float32 ones; "
                            f"{redownload}", 14))
    return rows
