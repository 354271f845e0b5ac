"""The fly-connectome-49k graph dataset: raw CSR graph, interface and anatomy arrays.

``fly-formats.md`` section 3. All files are headerless little-endian arrays;
``manifest.json`` gives each file (``files``, an object keyed by logical name:
``{file, dtype, shape, bytes, sha256}``), the counts of the graph, the
interface sizes and the frozen-buffer digests that bind trained weights to
this graph.

:func:`check_dataset` is the one implementation of the 18 checks the
dataset's authors run on it (their ``verify_connectome_package.py``): the
loader runs the cheap ones on every load, ``flyviz verify`` all of them, and
the tests run them over what :mod:`flyviz.model.writers` produces.

One module, a little over 700 lines, on purpose: the reader and the 18 checks
read the same manifest entries and arrays, and the checks are kept in the
authors' order beside the loader that runs the cheap ones, so a change to the
layout is made (and reviewed) in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Anatomy
from flyviz.model.checks import FAIL, PASS, SKIP, CheckResult, Progress, raise_first_failure
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import (FROZEN_BUFFER_DTYPES, HASH_LIMIT_BYTES,
                                          NODE_TYPE_INDEX, array_digest, min_max, read_json,
                                          read_raw, sha256_file, weight_stats, whole_number)

#: Logical file names of the dataset manifest and where the files lie.
DATASET_FILES = {
    "edges_offsets": "graph/edges_offsets.i32",
    "edges_source": "graph/edges_source.u16",
    "edges_weight_f32": "graph/edges_weight.f32",
    "edges_weight_i16": "graph/edges_weight.i16",
    "input_neurons": "interface/in_index.i32",
    "output_neurons": "interface/out_index.i32",
    "body_id": "neurons/body_id.i64",
    "type_index": "neurons/type_index.i32",
    "soma_position": "neurons/soma_position.i32",
    "soma_valid": "neurons/soma_valid.u8",
    "type_labels": "neurons/type_labels.json",
    "cell_type": "neurons/cell_type.json",
    "superclass": "neurons/superclass.json",
    "side": "neurons/side.json",
}
#: flyviz's own extension for graphs of more than 65,536 neurons (uint16 cannot index them).
WIDE_SOURCE_FILE = "graph/edges_source.i32"

#: Raw array dtypes by file extension, as the authors' verifier reads them.
EXTENSION_DTYPES = {"i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                    "u16": "uint16", "f32": "float32"}

#: Frozen buffer -> the logical file it is computed from.
FROZEN_BUFFER_FILES = {
    "brain.w_offsets": "edges_offsets",
    "brain.w_indices": "edges_source",
    "brain.w_values": "edges_weight_f32",
    "brain.in_index": "input_neurons",
    "brain.out_index": "output_neurons",
}

#: Files the engine and the viewer read; the loader hashes these (up to
#: :data:`HASH_LIMIT_BYTES` each). The int16 weights are the browser's copy.
_READ_ON_LOAD = frozenset(DATASET_FILES) - {"edges_weight_i16"}
_GRAPH_FILES = ("edges_offsets", "edges_source", "edges_weight_f32", "input_neurons",
                "output_neurons")
_REDOWNLOAD = "the dataset is damaged or was modified; download fernandofernandes/fly-connectome-49k again"


def _manifest_count(root: Path, block: Any, key: str, field: str | None = None) -> int | None:
    """``block[key]`` of the manifest of the dataset at ``root`` as a count; ``None`` when
    the block or the key is absent (the caller then counts the arrays or skips a check).

    The rule is :func:`~flyviz.model.formats.common.whole_number`'s, the one every flyviz
    reader follows: ``300`` and ``300.0`` are read; ``300.7`` (which ``int`` would truncate
    to another count), the text ``"300"``, ``true``, ``null``, NaN and infinities are one
    :class:`CheckpointError` line naming ``field`` (default ``key``) and the manifest file.
    """
    if not isinstance(block, dict) or key not in block:
        return None
    return whole_number(block[key], f"{root / 'manifest.json'}: {field or key}")


def _normalise_entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``files`` as ``{logical name: entry}``.

    The released manifest keys its entries by logical name (``edges_offsets``
    ...); an entry under another key is matched to a logical name by its
    ``file``. flyviz 0.1 wrote a list here, with frozen digests in another
    convention: such a folder is refused by the digest check, so the list
    form is not read at all.
    """
    files = manifest.get("files")
    if not isinstance(files, dict):
        return {}
    by_path = {path: name for name, path in DATASET_FILES.items()}
    by_path[WIDE_SOURCE_FILE] = "edges_source"
    entries: dict[str, dict[str, Any]] = {}
    for key, entry in files.items():
        if isinstance(entry, dict):
            name = str(key) if str(key) in DATASET_FILES else by_path.get(
                str(entry.get("file", "")), str(key))
            entries[name] = entry
    return entries


@dataclass
class DatasetFiles:
    """The files of a dataset folder, memory-mapped on demand with their sizes checked.

    Parameters
    ----------
    root
        The dataset folder.
    manifest
        Its parsed ``manifest.json``.
    """

    root: Path
    manifest: dict[str, Any]
    entries: dict[str, dict[str, Any]] = field(init=False)
    _arrays: dict[str, np.ndarray] = field(init=False, default_factory=dict, repr=False)
    _graph_digests: dict[str, str] | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.entries = _normalise_entries(self.manifest)

    @classmethod
    def open(cls, dataset_dir: str | Path) -> "DatasetFiles":
        """Read ``manifest.json`` of a dataset folder.

        Raises
        ------
        CheckpointError
            When the folder or its manifest is missing or not a JSON object.
        """
        root = Path(dataset_dir)
        if not root.is_dir():
            raise CheckpointError(f"connectome dataset folder not found: {root}")
        manifest = read_json(root / "manifest.json", "the dataset's manifest.json")
        if not isinstance(manifest, dict):
            raise CheckpointError(f"{root / 'manifest.json'} is not a JSON object; download it "
                                  "again")
        return cls(root, manifest)

    # ------------------------------------------------------------------ files
    def relative(self, name: str) -> str:
        """The path of logical file ``name`` inside the dataset."""
        entry = self.entries.get(name)
        if entry is not None and entry.get("file"):
            return str(entry["file"])
        if name == "edges_source" and not (self.root / DATASET_FILES[name]).is_file() \
                and (self.root / WIDE_SOURCE_FILE).is_file():
            return WIDE_SOURCE_FILE
        return DATASET_FILES.get(name, name)

    def path(self, name: str) -> Path:
        """Absolute path of logical file ``name``."""
        return self.root / self.relative(name)

    def present(self, name: str) -> bool:
        """True when the file is there."""
        return self.path(name).is_file()

    @property
    def neurons(self) -> int:
        """Neuron count: the manifest's ``neurons``, else the offsets' length - 1."""
        n = _manifest_count(self.root, self.manifest, "neurons")
        if n is not None:
            return n
        return max(0, self._count("edges_offsets") - 1)

    @property
    def edges(self) -> int:
        """Edge count: the manifest's ``edges``, else the float32 weights' length."""
        e = _manifest_count(self.root, self.manifest, "edges")
        return e if e is not None else self._count("edges_weight_f32")

    def _count(self, name: str) -> int:
        path = self.path(name)
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; the dataset folder is incomplete, "
                                  "download it again")
        itemsize = np.dtype(self.dtype(name)).itemsize
        size = path.stat().st_size
        if size % itemsize:
            raise CheckpointError(f"{self.relative(name)} is {size:,} bytes, not a whole number "
                                  f"of {itemsize}-byte values; the file is truncated")
        return size // itemsize

    def recorded_bytes(self, name: str) -> int | None:
        """The byte count the manifest records for logical file ``name`` (``None`` if none)."""
        return _manifest_count(self.root, self.entries.get(name), "bytes",
                               f"files.{name}.bytes")

    def dtype(self, name: str) -> str:
        """The array dtype, from the file extension (as the authors' verifier reads it)."""
        ext = self.relative(name).rsplit(".", 1)[-1]
        if ext not in EXTENSION_DTYPES:
            raise CheckpointError(f"{self.relative(name)}: unknown array file extension .{ext}; "
                                  "the manifest is damaged")
        return EXTENSION_DTYPES[ext]

    def array(self, name: str, shape: tuple[int, ...] | int | None = None) -> np.ndarray:
        """Memory-map logical file ``name`` after checking its size.

        The shape is the manifest entry's, else ``shape``, else the whole file
        as a vector. A file whose byte count differs from the manifest's, or
        that does not hold the shape, raises :class:`CheckpointError`.
        """
        if name in self._arrays:
            return self._arrays[name]
        path = self.path(name)
        entry = self.entries.get(name) or {}
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; the dataset folder is incomplete, "
                                  "download it again")
        size = self.recorded_bytes(name)
        if size is not None and path.stat().st_size != size:
            raise CheckpointError(f"{self.relative(name)} is {path.stat().st_size:,} bytes but "
                                  f"the manifest says {size:,}; the file is "
                                  "truncated or damaged, download it again")
        if isinstance(entry.get("shape"), list):
            where = f"{self.root / 'manifest.json'}: files.{name}.shape"
            shape = tuple(whole_number(s, where) for s in entry["shape"])
        elif shape is None:
            shape = self._count(name)
        array = read_raw(path, self.dtype(name), shape)
        self._arrays[name] = array
        return array

    # --------------------------------------------------------------- digests
    def original_dtypes(self) -> dict[str, str]:
        """``frozen_buffers_original_dtype`` of the manifest (the released dtypes if absent)."""
        dtypes = dict(FROZEN_BUFFER_DTYPES)
        given = self.manifest.get("frozen_buffers_original_dtype")
        if isinstance(given, dict):
            for key, value in given.items():
                try:
                    dtypes[str(key)] = np.dtype(str(value)).name
                except TypeError:
                    raise CheckpointError(f"the dataset manifest names an unknown dtype {value!r} "
                                          f"for {key}; {_REDOWNLOAD}") from None
        return dtypes

    def buffer(self, name: str) -> np.ndarray:
        """The array a frozen buffer is computed from (the identity for an absent out_index)."""
        if name == NODE_TYPE_INDEX:
            return self.array("type_index", self.neurons)
        logical = FROZEN_BUFFER_FILES[name]
        if logical == "output_neurons" and not self.present(logical):
            return np.arange(self.neurons, dtype=np.int32)  # the browser export omits it
        return self.array(logical)

    def graph_digests(self, progress: Progress | None = None) -> dict[str, str]:
        """The frozen-buffer digests recomputed from the arrays (cached).

        The five graph buffers, plus ``brain.node_type_index`` when the
        dataset has ``neurons/type_index.i32``.
        """
        if self._graph_digests is None:
            dtypes = self.original_dtypes()
            digests: dict[str, str] = {}
            names = list(FROZEN_BUFFER_FILES) + ([NODE_TYPE_INDEX] if self.present("type_index")
                                                 else [])
            for i, name in enumerate(names):
                if progress is not None:
                    progress(f"recomputing {name}", i / len(names))
                digests[name] = array_digest(self.buffer(name), dtypes.get(name, "int64"))
            self._graph_digests = digests
        return self._graph_digests


# ---------------------------------------------------------------------------- checks
class _Checks:
    """Collects :class:`CheckResult` rows for one dataset."""

    def __init__(self) -> None:
        self.results: list[CheckResult] = []

    def add(self, name: str, ok: bool | None, detail: str, skip_reason: str = "") -> None:
        status = SKIP if ok is None else PASS if ok else FAIL
        self.results.append(CheckResult("dataset", name, status,
                                        skip_reason if ok is None else detail))


def check_dataset(files: DatasetFiles, *, hash_files: bool | None = None,
                  quantised: bool = False, graph: bool = True,
                  progress: Progress | None = None) -> list[CheckResult]:
    """The 18 checks of the dataset's authors, run over a dataset folder.

    1. every file's SHA-256 equals its ``files`` entry; 2. offsets have
    ``neurons + 1`` values, sources and weights ``edges``; 3. offsets never
    decrease; 4. they run from 0 to ``edges``; 5. every source is a neuron;
    6. every weight is finite; 7. the negative and positive weight counts
    equal the manifest's; 8-12. the five frozen-buffer digests recomputed
    from the arrays equal ``frozen_buffers_sha256``; 13. the int16 weights
    times the scale are within ``max_absolute_error`` of the float32 ones,
    14. with the same signs; 15. ``type_index`` runs from 0 to the last label;
    16. ``soma_valid`` sums to ``soma.positioned``; 17. somata without a
    position are zeros; 18. body ids are unique.

    Parameters
    ----------
    files
        The dataset.
    hash_files
        1: ``None`` hashes the files the loader reads, up to 64 MB each (every
        file of the real dataset; the load-time cost is in ``flyviz bench``);
        ``True`` every file present; ``False`` none.
    quantised
        Run 13-14 (the browser's int16 copy, which flyviz neither downloads
        nor reads); ``flyviz verify`` does.
    graph
        Run 2-14; ``False`` checks only the anatomy (a dataset with only
        ``neurons/``).
    progress
        ``progress(label, fraction)``.

    Returns
    -------
    list of CheckResult
        A check whose data or manifest field is absent is skipped, with the reason.
        A file that cannot be read as its manifest describes is a failure.
    """
    checks = _Checks()
    report = progress or (lambda _label, _fraction: None)

    # 1. File hashes.
    report("hashing files", 0.0)
    names = [n for n in files.entries if n in DATASET_FILES] + \
        [n for n in files.entries if n not in DATASET_FILES]
    for i, name in enumerate(names):
        entry = files.entries[name]
        rel = files.relative(name)
        path = files.root / rel
        label = f"sha256 {rel}"
        if not graph and not rel.startswith("neurons/"):
            continue
        if not path.is_file():
            if hash_files is True:
                checks.add(label, None, "", "not present (flyviz does not need it)")
            continue
        expected = entry.get("sha256")
        if not expected:
            if hash_files is True:
                checks.add(label, None, "", "the manifest records no digest")
            continue
        if hash_files is False:
            continue
        if hash_files is None and (name not in _READ_ON_LOAD
                                   or path.stat().st_size > HASH_LIMIT_BYTES):
            continue
        report(f"hashing {rel}", 0.5 * i / max(1, len(names)))
        size = files.recorded_bytes(name)
        if size is not None and path.stat().st_size != size:
            checks.add(label, False, f"{rel} is {path.stat().st_size:,} bytes but the manifest "
                                     f"says {size:,}; the file is truncated or "
                                     "damaged, download it again")
            continue
        actual = sha256_file(path)
        checks.add(label, actual.lower() == str(expected).lower(),
                   f"{rel}: SHA-256 {actual[:12]}... does not match the manifest's "
                   f"{str(expected)[:12]}...; the file is damaged or from another release, "
                   "download it again" if actual.lower() != str(expected).lower()
                   else f"{actual[:16]}...")

    if graph:
        _check_graph(files, checks, quantised, report)
    _check_anatomy(files, checks)
    report("dataset checked", 1.0)
    return checks.results


def _check_graph(files: DatasetFiles, checks: _Checks, quantised: bool,
                 report: Progress) -> None:
    """Checks 2-14."""
    manifest = files.manifest
    n, e = files.neurons, files.edges
    offsets = files.array("edges_offsets")
    source = files.array("edges_source")
    weights = files.array("edges_weight_f32")

    # 2. Counts.
    counts_ok = offsets.shape[0] == n + 1 and source.shape[0] == e and weights.shape[0] == e
    checks.add("counts", counts_ok,
               f"offsets {offsets.shape[0]:,} = neurons + 1, sources and weights {e:,}"
               if counts_ok else
               f"the graph files hold {offsets.shape[0]:,} offsets, {source.shape[0]:,} sources "
               f"and {weights.shape[0]:,} weights but the manifest says {n:,} neurons and "
               f"{e:,} edges; {_REDOWNLOAD}")
    if not counts_ok:
        return
    # 3-4. Offsets.
    report("checking the graph", 0.55)
    off = np.asarray(offsets, dtype=np.int64)
    monotone = bool(np.all(off[1:] >= off[:-1])) if off.size > 1 else True
    checks.add("offsets non-decreasing", monotone,
               "" if monotone else f"graph/edges_offsets.i32 decreases at row "
               f"{int(np.flatnonzero(off[1:] < off[:-1])[0])}; {_REDOWNLOAD}")
    span_ok = int(off[0]) == 0 and int(off[-1]) == e
    checks.add("offsets span", span_ok,
               f"0 to {e:,}" if span_ok else f"graph/edges_offsets.i32 runs from {int(off[0])} "
               f"to {int(off[-1])}, not 0 to {e:,}; {_REDOWNLOAD}")
    # 5. Source range, in chunks (9M values).
    low, high = min_max(source)
    source_ok = e == 0 or (low >= 0 and high < n)
    checks.add("sources in range", source_ok,
               f"all in 0..{n - 1}" if source_ok else
               f"{files.relative('edges_source')} holds neuron {high if high >= n else low}, "
               f"outside 0..{n - 1}; {_REDOWNLOAD}")
    # 6-7. Weights.
    finite, negative, positive = weight_stats(weights)
    checks.add("weights finite", finite,
               "" if finite else f"graph/edges_weight.f32 holds NaN or inf; {_REDOWNLOAD}")
    block: dict[str, Any] = manifest.get("weights") or {}
    block = block if isinstance(block, dict) else {}
    want_neg = _manifest_count(files.root, block, "negative_edges", "weights.negative_edges")
    want_pos = _manifest_count(files.root, block, "positive_edges", "weights.positive_edges")
    if want_neg is None or want_pos is None:
        checks.add("weight signs", None, "", "the manifest records no negative_edges/"
                                             "positive_edges")
    else:
        signs_ok = negative == want_neg and positive == want_pos
        checks.add("weight signs", signs_ok,
                   f"{negative:,} negative, {positive:,} positive" if signs_ok else
                   f"graph/edges_weight.f32 has {negative:,} negative and {positive:,} positive "
                   f"weights but the manifest says {want_neg:,} and {want_pos:,}; {_REDOWNLOAD}")
    # 8-12. Frozen-buffer digests, recomputed.
    recorded = manifest.get("frozen_buffers_sha256")
    recorded = recorded if isinstance(recorded, dict) else {}
    digests = files.graph_digests(lambda label, f: report(label, 0.6 + 0.3 * f))
    for name in FROZEN_BUFFER_FILES:
        expected = recorded.get(name)
        label = f"frozen digest {name}"
        if not expected:
            checks.add(label, None, "", "the manifest records no frozen-buffer digest")
            continue
        ok = digests[name].lower() == str(expected).lower()
        checks.add(label, ok, f"{digests[name][:16]}..." if ok else
                   f"{files.relative(FROZEN_BUFFER_FILES[name])} does not give the manifest's "
                   f"frozen digest for {name} (recomputed {digests[name][:12]}..., recorded "
                   f"{str(expected)[:12]}...); {_REDOWNLOAD}")
    # 13-14. The browser's int16 copy.
    if quantised:
        _check_quantised(files, checks, weights, block)


def _check_quantised(files: DatasetFiles, checks: _Checks, weights: np.ndarray,
                     block: dict[str, Any]) -> None:
    rel = files.relative("edges_weight_i16")
    if not files.present("edges_weight_i16"):
        for name in ("int16 weights error", "int16 weights signs"):
            checks.add(name, None, "", f"{rel} not downloaded (flyviz does not read it)")
        return
    quant = block.get("quantised")
    quant = quant if isinstance(quant, dict) else {}
    scale, bound = quant.get("scale"), quant.get("max_absolute_error")
    try:
        codes = files.array("edges_weight_i16")
    except CheckpointError as exc:
        checks.add("int16 weights error", False, str(exc))
        return
    if codes.shape != weights.shape:
        checks.add("int16 weights error", False, f"{rel} holds {codes.shape[0]:,} weights, the "
                                                 f"float32 file {weights.shape[0]:,}; {_REDOWNLOAD}")
        return
    if scale is None or bound is None:
        checks.add("int16 weights error", None, "", "the manifest records no quantised scale "
                                                    "and max_absolute_error")
    else:
        worst = 0.0
        step = 1 << 22
        for start in range(0, weights.shape[0], step):
            diff = np.abs(codes[start:start + step].astype(np.float64) * float(scale)
                          - weights[start:start + step].astype(np.float64))
            worst = max(worst, float(diff.max(initial=0.0)))
        ok = worst <= float(bound)
        checks.add("int16 weights error", ok, f"max {worst:.3g} <= {float(bound):.3g}" if ok else
                   f"{rel} differs from the float32 weights by up to {worst:.3g}, more than the "
                   f"manifest's {float(bound):.3g}; {_REDOWNLOAD}")
    same = all(np.array_equal(np.sign(codes[s:s + (1 << 22)]),
                              np.sign(weights[s:s + (1 << 22)]).astype(np.int16))
               for s in range(0, weights.shape[0], 1 << 22))
    checks.add("int16 weights signs", same, "" if same else
               f"{rel} has weights whose sign differs from the float32 ones; {_REDOWNLOAD}")


def _check_anatomy(files: DatasetFiles, checks: _Checks) -> None:
    """Checks 15-18, each skipped when its files are absent."""
    manifest = files.manifest
    n = files.neurons if (files.present("edges_offsets") or "neurons" in manifest) \
        else _anatomy_neurons(files)
    # 15. Cell-type index.
    if files.present("type_index") and files.present("type_labels"):
        labels = read_json(files.path("type_labels"), "type_labels.json")
        index = files.array("type_index", n)
        count = len(labels) if isinstance(labels, list) else -1
        lo, hi = min_max(index)
        ok = count > 0 and lo == 0 and hi == count - 1
        checks.add("type_index range", ok, f"0..{hi} over {count:,} labels" if ok else
                   f"neurons/type_index.i32 runs from {lo} to {hi} but type_labels.json has "
                   f"{max(count, 0):,} labels; {_REDOWNLOAD}")
    else:
        checks.add("type_index range", None, "", "no neurons/type_index.i32 + type_labels.json")
    # 16-17. Somata.
    soma = manifest.get("soma")
    soma = soma if isinstance(soma, dict) else {}
    if files.present("soma_valid"):
        valid = np.asarray(files.array("soma_valid", n)) != 0
        positioned = _manifest_count(files.root, soma, "positioned", "soma.positioned")
        if positioned is None:
            checks.add("somata positioned", None, "", "the manifest records no soma.positioned")
        else:
            ok = int(valid.sum()) == positioned
            checks.add("somata positioned", ok, f"{positioned:,}" if ok else
                       f"neurons/soma_valid.u8 marks {int(valid.sum()):,} somata but the manifest "
                       f"says {positioned:,}; {_REDOWNLOAD}")
        if files.present("soma_position"):
            positions = files.array("soma_position", (n, 3))
            ok = not np.any(np.asarray(positions)[~valid])
            checks.add("missing somata are zero", ok, "" if ok else
                       f"neurons/soma_position.i32 has a position for a soma marked missing; "
                       f"{_REDOWNLOAD}")
        else:
            checks.add("missing somata are zero", None, "", "no neurons/soma_position.i32")
    else:
        checks.add("somata positioned", None, "", "no neurons/soma_valid.u8")
        checks.add("missing somata are zero", None, "", "no neurons/soma_valid.u8")
    # 18. Body ids.
    if files.present("body_id"):
        ids = np.sort(np.asarray(files.array("body_id", n)))
        ok = ids.size < 2 or bool(np.all(ids[1:] != ids[:-1]))
        checks.add("body ids unique", ok, "" if ok else
                   f"neurons/body_id.i64 repeats a body id; {_REDOWNLOAD}")
    else:
        checks.add("body ids unique", None, "", "no neurons/body_id.i64")


def _anatomy_neurons(files: DatasetFiles) -> int:
    """Neuron count of a dataset that has only ``neurons/``."""
    if files.present("soma_valid"):
        return files.path("soma_valid").stat().st_size
    if files.present("soma_position"):
        return files.path("soma_position").stat().st_size // 12
    return 0


# --------------------------------------------------------------------------- loading
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
    graph_digests
        The same digests recomputed from the arrays above (plus
        ``brain.node_type_index`` when the dataset has cell types): what
        trained weights are bound to.
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
    graph_digests: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def neurons(self) -> int:
        """Number of neurons (CSR rows)."""
        return int(self.offsets.shape[0]) - 1


def _read_json_list(path: Path, n: int) -> list[str] | None:
    if not path.is_file():
        return None
    data = read_json(path, path.name)
    if not isinstance(data, list) or len(data) != n:
        raise CheckpointError(f"{path.name} holds {len(data) if isinstance(data, list) else 'no'} "
                              f"labels but the graph has {n} neurons; the dataset is damaged")
    return ["" if v is None else str(v) for v in data]


def _read_anatomy(files: DatasetFiles, n: int) -> Anatomy | None:
    """Soma positions and labels from ``neurons/``, or ``None`` when absent."""
    if not files.present("soma_position"):
        return None
    positions = np.asarray(files.array("soma_position", (n, 3)), dtype=np.float32)
    if positions.shape != (n, 3):
        raise CheckpointError(f"neurons/soma_position.i32 has shape {list(positions.shape)}, "
                              f"expected [{n}, 3]; the dataset is damaged")
    if files.present("soma_valid"):
        valid = np.asarray(files.array("soma_valid", n)) != 0
    else:  # without the mask, all-zero rows are the missing ones
        valid = np.any(positions != 0, axis=1)
    body_id = np.asarray(files.array("body_id", n)) if files.present("body_id") else None
    cell_type = _read_json_list(files.path("cell_type"), n)
    if cell_type is None and files.present("type_index") and files.present("type_labels"):
        labels = read_json(files.path("type_labels"), "type_labels.json")
        type_index = np.asarray(files.array("type_index", n))
        if not isinstance(labels, list) or (n and (type_index.min() < 0
                                                   or type_index.max() >= len(labels))):
            raise CheckpointError("neurons/type_index.i32 points outside type_labels.json; "
                                  "the dataset is damaged")
        cell_type = [str(labels[i]) for i in type_index]
    for name, array in (("soma_valid", valid), ("body_id", body_id)):
        if array is not None and array.shape != (n,):
            raise CheckpointError(f"neurons/{name} holds {array.shape[0]:,} values for {n:,} "
                                  "neurons; the dataset is damaged")
    block = files.manifest.get("anatomy") or {}
    kind = block.get("kind", "measured") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise CheckpointError(f"manifest.json: anatomy is {block!r:.80}, expected an object "
                              'like {"kind": "measured"}; the manifest is damaged')
    return Anatomy(positions=positions, valid=valid, kind=kind, body_id=body_id,
                   superclass=_read_json_list(files.path("superclass"), n),
                   side=_read_json_list(files.path("side"), n), cell_type=cell_type)


def load_dataset_anatomy(dataset_dir: str | Path, *, verify: bool | None = None) -> Anatomy | None:
    """Only the anatomy (``neurons/``) of a dataset folder; the graph files may be absent.

    Used to give a checkpoint that carries its own graph (ngxson's) the soma
    positions of the same 49,393 neurons. A fly-connectome-malecns-166k folder gives
    its labels and named populations (after its 17 checks) and no positions. The anatomy checks of
    :func:`check_dataset` (hashes of ``neurons/``, 15-18) run first.
    """
    from flyviz.model.formats.malecns import is_malecns_dataset, load_malecns

    if is_malecns_dataset(dataset_dir):  # labels and populations, no somata
        return load_malecns(dataset_dir, verify=verify).anatomy()
    files = DatasetFiles.open(dataset_dir)
    n = _anatomy_neurons(files)
    if n == 0:
        return None
    if "neurons" not in files.manifest:
        files.manifest["neurons"] = n
    raise_first_failure(check_dataset(files, hash_files=verify, graph=False))
    return _read_anatomy(files, n)


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
        (default) hashes the files flyviz reads up to 64 MB each, which is
        every one of the real dataset; ``True`` every file present; ``False``
        none. Sizes are always checked, and so are checks 2-12 and 15-18 of
        :func:`check_dataset`, including the frozen-buffer digests recomputed
        from the arrays.
    with_anatomy
        Read ``neurons/`` (positions, labels) when present.

    Returns
    -------
    ConnectomeDataset

    Raises
    ------
    CheckpointError
        For a missing, truncated, damaged or inconsistent file, with the first
        problem found.
    """
    files = DatasetFiles.open(dataset_dir)
    if files._count("edges_offsets") < 2:
        raise CheckpointError("graph/edges_offsets.i32 is empty; the dataset is damaged")
    raise_first_failure(check_dataset(files, hash_files=verify, quantised=verify is True))
    n = files.neurons
    offsets = files.array("edges_offsets")
    in_index = files.array("input_neurons")
    out_index = files.array("output_neurons") if files.present("output_neurons") \
        else np.arange(n, dtype=np.int32)  # the browser export omits it: it is the identity
    interface = files.manifest.get("interface") or {}
    interface = interface if isinstance(interface, dict) else {}
    recorded = files.manifest.get("frozen_buffers_sha256")
    return ConnectomeDataset(
        offsets=offsets, indices=files.array("edges_source"),
        values=files.array("edges_weight_f32"), in_index=in_index, out_index=out_index,
        anatomy=_read_anatomy(files, n) if with_anatomy else None,
        n_in_declared=_manifest_count(files.root, interface, "n_in_declared",
                                      "interface.n_in_declared"),
        delay_slots=_manifest_count(files.root, interface, "delay_slots", "interface.delay_slots"),
        neurons_per_slot=_manifest_count(files.root, interface, "neurons_per_slot",
                                         "interface.neurons_per_slot"),
        frozen_digests={str(k): str(v) for k, v in recorded.items()}
        if isinstance(recorded, dict) else {},
        graph_digests=dict(files.graph_digests()), manifest=files.manifest, path=files.root)
