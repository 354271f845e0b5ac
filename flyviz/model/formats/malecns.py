"""The fly-connectome-malecns-166k dataset: the whole MaleCNS graph with its labels.

``fly-family-2026.md`` §2. Every neuron (166,700) and edge (25,582,938) of MaleCNS
v1.0 as headerless little-endian arrays, in the destination-major CSR of the
fly-connectome-49k set: ``graph/edges_offsets.i32`` (row = postsynaptic neuron),
``graph/edges_source.i32`` (presynaptic index, int32 where the 49k set has uint16)
and ``graph/edges_weight.f32`` (raw signed weights, no normalisation, no int16
copy); ``neurons/body_id.i64`` in ascending order, ``superclass_index``/
``cell_type_index`` into sorted label tables (``""`` is an untyped neuron); four
named populations (retina, lamina, descending, sugar) as index lists; two hop
counts (-1 where unreachable). No soma positions, no interface. ``manifest.json``
keys every file by logical name with ``{file, dtype, shape, bytes, sha256}``.

:func:`check_malecns` is the one implementation of the 17 checks the authors'
verifier (``scripts/verify_connectome_package.py``, its full-connectome branch)
runs, in its order and with its names; :func:`load_malecns` runs them (hashing
the files of at most 64 MB, as the 49k loader) and refuses the first failure in
one line. :func:`central_brain_subset` and :func:`join_central_brain` are §2.5:
the 49k set's neurons are this set's neurons of five superclasses in the same
body-id order, and its weights are these times :data:`CENTRAL_BRAIN_SCALE`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Anatomy
from flyviz.model.checks import FAIL, MALECNS_CHECKS, MALECNS_GROUP, PASS, SKIP, CheckResult, Progress
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import HASH_LIMIT_BYTES, read_json, read_raw, sha256_file
from flyviz.model.formats.common import min_max, weight_stats, whole_number

#: The dataset's name on the hub and in its manifest.
MALECNS_NAME = "fly-connectome-malecns-166k"
MALECNS_REPO = "fernandofernandes/fly-connectome-malecns-166k"

#: Logical name -> where the authors' packager writes the file.
MALECNS_FILES = {
    "edges_offsets": "graph/edges_offsets.i32",
    "edges_source": "graph/edges_source.i32",
    "edges_weight": "graph/edges_weight.f32",
    "body_id": "neurons/body_id.i64",
    "superclass_index": "neurons/superclass_index.i32",
    "cell_type_index": "neurons/cell_type_index.i32",
    "superclass_labels": "neurons/superclass_labels.json",
    "cell_type_labels": "neurons/cell_type_labels.json",
    "hops_from_retina": "derived/hops_from_retina.i32",
    "hops_to_descending": "derived/hops_to_descending.i32",
}
#: The named populations the packager writes (``populations/<name>.i32``).
POPULATIONS = ("retina", "lamina", "descending", "sugar")
#: Raw dtypes by file extension, as the authors' verifier reads them.
_EXTENSION_DTYPES = {"i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
                     "u16": "uint16", "f32": "float32"}

#: ``CheckResult.group`` of the authors' 17 checks' rows.
GROUP = MALECNS_GROUP

#: §2.5: the superclasses whose neurons, in ascending body id, are fly-connectome-49k's.
CENTRAL_BRAIN_SUPERCLASSES = ("cb_sensory", "visual_projection", "cb_intrinsic",
                              "ascending_neuron", "descending_neuron")
#: §2.5: ``w49k = w166k x`` this (the float32 median ratio of the two releases).
CENTRAL_BRAIN_SCALE = 9.529943345114589e-04

_REDOWNLOAD = f"the dataset is damaged or was modified; download {MALECNS_REPO} again"


def is_malecns_dataset(folder: str | Path) -> bool:
    """True when ``folder``'s ``manifest.json`` is this dataset's: its ``files`` name the
    label indices and no frozen-buffer digests are recorded (the authors' verifier's own
    test for the full-connectome branch). A manifest without frozen digests whose ``files``
    block is damaged counts too when it carries this dataset's name or the folder holds
    its label files, so that loading it says the manifest is damaged."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        return False
    try:
        manifest = read_json(path, "manifest.json")
    except CheckpointError:
        return False
    return is_malecns_manifest(manifest, folder)


def is_malecns_manifest(manifest: Any, folder: str | Path) -> bool:
    """:func:`is_malecns_dataset` of ``folder`` whose ``manifest.json`` has been read already
    (``manifest``, as parsed): a caller that reads it for more does not read it twice."""
    if not isinstance(manifest, dict) or "frozen_buffers_sha256" in manifest:
        return False
    files = manifest.get("files")
    if isinstance(files, dict) and "superclass_index" in files:
        return True
    # A damaged files block hides it: its name, or the label files only this dataset has,
    # still say which dataset it is (so that the refusal says its manifest is damaged,
    # not that it is a fly-connectome-49k graph).
    root = Path(folder)
    return manifest.get("name") == MALECNS_NAME or all(
        (root / MALECNS_FILES[name]).is_file() for name in ("superclass_index",
                                                            "superclass_labels"))


def _block(manifest: dict[str, Any], key: str) -> dict[str, Any]:
    """``manifest[key]`` when it is an object, else ``{}``."""
    value = manifest.get(key)
    return value if isinstance(value, dict) else {}


def _count(value: Any) -> str:
    """A count as a message writes it: ``1,839``; anything else (``None``) as it is."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}"
    return str(value)


def _as_int(value: Any) -> int | None:
    """A whole number of the manifest as an int; ``None`` for anything else: a bool, text
    (``"300"``, which ``int`` would read as a count the packager never writes), a fraction
    such as 300.7 (which ``int`` would truncate to another count). The rule is
    :func:`~flyviz.model.formats.common.whole_number`'s (a float with no fraction, ``300.0``,
    is read, as everywhere in flyviz); here a value it refuses fails its check instead."""
    try:
        return whole_number(value, "a manifest count")
    except CheckpointError:
        return None


class _Package:
    """The files of one dataset folder as the manifest describes them, each read once."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        files = manifest.get("files")
        self.entries: dict[str, dict[str, Any]] = {
            str(k): v for k, v in (files.items() if isinstance(files, dict) else ())
            if isinstance(v, dict)}
        self._loaded: dict[str, Any] = {}

    def relative(self, name: str) -> str:
        """Where logical file ``name`` lies inside the folder; a manifest that points outside
        it (an absolute path, ``..``) is refused, never followed."""
        entry = self.entries.get(name, {})
        default = MALECNS_FILES.get(name, f"populations/{name.removeprefix('population_')}.i32")
        relative = str(entry.get("file") or default)
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise CheckpointError(f"the manifest puts {name} at {relative[:80]!r}, outside the "
                                  f"dataset folder; {_REDOWNLOAD}")
        return relative

    def load(self, name: str) -> Any:
        """Logical file ``name``: a memory-mapped array of the manifest's shape, or parsed
        JSON. :class:`CheckpointError` (one line) for a file that is missing, of another size
        than the manifest's, or not what its extension says."""
        if name in self._loaded:
            return self._loaded[name]
        rel = self.relative(name)
        path = self.root / rel
        if name not in self.entries:
            raise CheckpointError(f"the manifest lists no {name} file; {_REDOWNLOAD}")
        if not path.is_file():
            raise CheckpointError(f"{rel} is missing; the dataset folder is incomplete, "
                                  f"download {MALECNS_REPO} again")
        entry = self.entries[name]
        size = path.stat().st_size
        want = _as_int(entry.get("bytes"))
        if want is not None and size != want:
            raise CheckpointError(f"{rel} is {size:,} bytes but the manifest says {want:,}; "
                                  f"the file is truncated or damaged, download it again")
        if rel.endswith(".json"):
            value: Any = read_json(path, rel)
        else:
            ext = rel.rsplit(".", 1)[-1]
            if ext not in _EXTENSION_DTYPES:
                raise CheckpointError(f"{rel}: unknown array file extension .{ext}; "
                                      f"{_REDOWNLOAD}")
            shape = entry.get("shape")
            if not (isinstance(shape, list) and shape and all(_as_int(s) is not None and
                                                              int(s) >= 0 for s in shape)):
                raise CheckpointError(f"the manifest gives {rel} no shape; {_REDOWNLOAD}")
            value = read_raw(path, _EXTENSION_DTYPES[ext], tuple(int(s) for s in shape))
        self._loaded[name] = value
        return value

    def hash_all(self, limit: int | None, progress: Progress) -> str | None:
        """SHA-256 of every listed file against the manifest (files above ``limit`` bytes
        are not hashed); the first mismatch as one line, else ``None``."""
        names = list(self.entries)
        for i, name in enumerate(names):
            entry = self.entries[name]
            rel = self.relative(name)
            path = self.root / rel
            if not path.is_file():
                return f"{rel} is missing; the dataset folder is incomplete, download " \
                       f"{MALECNS_REPO} again"
            want = _as_int(entry.get("bytes"))
            if want is not None and path.stat().st_size != want:
                return (f"{rel} is {path.stat().st_size:,} bytes but the manifest says "
                        f"{want:,}; the file is truncated or damaged, download it again")
            expected = str(entry.get("sha256") or "")
            if not expected:
                return f"the manifest records no SHA-256 for {rel}; {_REDOWNLOAD}"
            if limit is not None and path.stat().st_size > limit:
                continue
            progress(f"hashing {rel}", 0.6 * i / max(1, len(names)))
            actual = sha256_file(path)
            if actual.lower() != expected.lower():
                return (f"{rel}: SHA-256 {actual[:12]}... does not match the manifest's "
                        f"{expected[:12]}...; {_REDOWNLOAD}")
        return None


def _open(folder: str | Path) -> _Package:
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise CheckpointError(f"connectome dataset folder not found: {root}")
    manifest = read_json(root / "manifest.json", "the dataset's manifest.json")
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{root / 'manifest.json'} is not a JSON object; download it again")
    if not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{root / 'manifest.json'}: its files block is "
                              f"{type(manifest.get('files')).__name__}, not an object naming "
                              f"each file; the {MALECNS_NAME} manifest is damaged, download it "
                              "again")
    return _Package(root, manifest)


def check_malecns(folder: str | Path, *, hash_limit: int | None = None,
                  progress: Progress | None = None) -> list[CheckResult]:
    """The 17 checks of the authors' verifier, run over a dataset folder, in their order.

    1. every listed file's SHA-256 equals its manifest entry; 2. offsets have
    ``neurons + 1`` values, sources and weights ``edges``; 3. offsets never decrease;
    4. they run from 0 to ``edges``; 5. every source is a neuron; 6. every weight is
    finite; 7. the negative and positive weight counts equal the manifest's;
    8-9. the superclass and cell-type indices have one value per neuron, each a row of
    their label table; 10. body ids are unique; 11-14. each population has the
    manifest's size and only neurons; 15-16. each hop array has one value per neuron,
    none below -1; 17. the manifest says the weights are raw and not normalised.

    Where the authors' script would stop with a traceback (a missing file, a file of the
    wrong size), the check that reads it fails with one line and the others still run.

    Parameters
    ----------
    folder
        The dataset folder.
    hash_limit
        Check 1 hashes files of at most this many bytes (``None``: all of them, as the
        authors' verifier; the loader passes 64 MB).
    progress
        ``progress(label, fraction)``.

    Raises
    ------
    CheckpointError
        Only when the folder or its manifest cannot be read at all (its ``files`` block
        included, which every check reads through).
    """
    package = _open(folder)
    report = progress or (lambda _label, _fraction: None)
    manifest = package.manifest
    rows: list[CheckResult] = []

    def add(number: int, name: str, ok: bool | None, detail: str) -> None:
        status = SKIP if ok is None else PASS if ok else FAIL
        rows.append(CheckResult(GROUP, name, status, detail, number))

    def loaded(name: str) -> tuple[Any, str]:
        try:
            return package.load(name), ""
        except CheckpointError as exc:
            return None, str(exc)

    # 1.
    problem = package.hash_all(hash_limit, report)
    hashed = "every file" if hash_limit is None else "no file (hashing was turned off)" \
        if hash_limit == 0 else f"every file of at most {hash_limit // (1 << 20)} MB"
    add(1, MALECNS_CHECKS[1], problem is None,
        problem or f"{hashed} ({len(package.entries)} listed) matches the manifest")
    n, e = _as_int(manifest.get("neurons")), _as_int(manifest.get("edges"))
    report("checking the graph", 0.6)
    offsets, why_offsets = loaded("edges_offsets")
    source, why_source = loaded("edges_source")
    weight, why_weight = loaded("edges_weight")
    graph_problem = why_offsets or why_source or why_weight
    # 2.
    if n is None or e is None:
        counts_ok = False
        missing = [key for key, value in (("neurons", n), ("edges", e))
                   if value is None and manifest.get(key) is None]
        fractional = [f"{key} {manifest[key]!r:.40}" for key, value in (("neurons", n),
                                                                        ("edges", e))
                      if value is None and manifest.get(key) is not None]
        detail = (f"the manifest's {' and '.join(fractional)} is not a whole number; "
                  f"{_REDOWNLOAD}" if fractional else
                  f"the manifest gives no {' or '.join(missing)} count; {_REDOWNLOAD}")
    elif graph_problem:
        counts_ok, detail = False, graph_problem
    else:
        counts_ok = offsets.size == n + 1 and source.size == e and weight.size == e
        detail = (f"{n:,} neurons, {e:,} edges" if counts_ok else
                  f"the graph files hold {offsets.size:,} offsets, {source.size:,} sources and "
                  f"{weight.size:,} weights but the manifest says {n:,} neurons and {e:,} "
                  f"edges; {_REDOWNLOAD}")
    add(2, MALECNS_CHECKS[2], counts_ok, detail)
    # 3-4.
    if offsets is not None and offsets.size:
        off = np.asarray(offsets, dtype=np.int64)
        falls = np.flatnonzero(off[1:] < off[:-1])
        add(3, MALECNS_CHECKS[3], falls.size == 0,
            "" if falls.size == 0 else f"{package.relative('edges_offsets')} decreases after "
                                       f"row {int(falls[0])}; {_REDOWNLOAD}")
        span_ok = e is not None and int(off[0]) == 0 and int(off[-1]) == e
        add(4, MALECNS_CHECKS[4], span_ok,
            f"0 to {e:,}" if span_ok else f"{package.relative('edges_offsets')} runs from "
                                          f"{int(off[0])} to {int(off[-1])}, not 0 to {e}; "
                                          f"{_REDOWNLOAD}")
    else:
        why = why_offsets or f"{package.relative('edges_offsets')} is empty; {_REDOWNLOAD}"
        add(3, MALECNS_CHECKS[3], False, why)
        add(4, MALECNS_CHECKS[4], False, why)
    # 5.
    if source is None or n is None:
        add(5, MALECNS_CHECKS[5], False, why_source or "the manifest gives no neuron count")
    else:
        low, high = min_max(source)
        ok = source.size == 0 or (low >= 0 and high < n)
        add(5, MALECNS_CHECKS[5], ok,
            f"all in 0..{n - 1}" if ok else f"{package.relative('edges_source')} holds neuron "
                                            f"{high if high >= n else low}, outside "
                                            f"0..{n - 1}; {_REDOWNLOAD}")
    # 6-7.
    block = _block(manifest, "weights")
    if weight is None:
        add(6, MALECNS_CHECKS[6], False, why_weight)
        add(7, MALECNS_CHECKS[7], False, why_weight)
    else:
        report("checking the weights", 0.7)
        finite, negative, positive = weight_stats(weight)
        add(6, MALECNS_CHECKS[6], finite,
            "" if finite else f"{package.relative('edges_weight')} holds NaN or inf; "
                              f"{_REDOWNLOAD}")
        want_neg, want_pos = _as_int(block.get("negative_edges")), \
            _as_int(block.get("positive_edges"))
        ok = negative == want_neg and positive == want_pos
        # A count that is not a whole number ("20", null) is shown as written, said so.
        said = [_count(want) if want is not None else
                f"{block.get(key)!r:.40} (not a whole number)"
                for key, want in (("negative_edges", want_neg), ("positive_edges", want_pos))]
        add(7, MALECNS_CHECKS[7], ok,
            f"{negative:,} negative, {positive:,} positive" if ok else
            f"{package.relative('edges_weight')} has {negative:,} negative and {positive:,} "
            f"positive weights but the manifest says {said[0]} and {said[1]}; {_REDOWNLOAD}")
    # 8-9.
    report("checking the labels", 0.8)
    for number, what in ((8, "superclass"), (9, "cell_type")):
        labels, why_labels = loaded(f"{what}_labels")
        index, why_index = loaded(f"{what}_index")
        if labels is None or index is None:
            add(number, MALECNS_CHECKS[number], False, why_labels or why_index)
            continue
        count = len(labels) if isinstance(labels, list) else -1
        low, high = min_max(index)
        ok = n is not None and index.size == n and count > 0 and low >= 0 and high < count
        add(number, MALECNS_CHECKS[number], ok,
            f"{n:,} neurons over {count:,} labels" if ok else
            f"{package.relative(f'{what}_index')} holds {index.size:,} values from "
            f"{_count(low)} to {_count(high)} for {_count(n)} neurons, but {package.relative(f'{what}_labels')} has "
            f"{max(count, 0):,} labels; {_REDOWNLOAD}")
    # 10.
    body, why_body = loaded("body_id")
    if body is None:
        add(10, MALECNS_CHECKS[10], False, why_body)
    else:
        ids = np.sort(np.asarray(body, dtype=np.int64))
        ok = n is not None and ids.size == n and not np.any(ids[1:] == ids[:-1])
        add(10, MALECNS_CHECKS[10], ok, f"{ids.size:,} distinct" if ok else
            f"{package.relative('body_id')} holds {ids.size:,} body ids for {_count(n)} "
            f"neurons, "
            f"or repeats one; {_REDOWNLOAD}")
    # 11-14.
    populations = _block(manifest, "populations")
    if not populations:
        add(11, "populations in range", False, f"the manifest names no populations; "
                                                f"{_REDOWNLOAD}")
    for number, (name, count) in enumerate(populations.items(), start=11):
        label = f"population {name} in range"
        members, why = loaded(f"population_{name}")
        if members is None:
            add(number, label, False, why)
            continue
        if _as_int(count) is None:
            add(number, label, False, f"the manifest's populations.{name} count {count!r:.40} "
                                      f"is not a whole number; {_REDOWNLOAD}")
            continue
        low, high = min_max(members)
        ok = members.size == _as_int(count) and n is not None and \
            (members.size == 0 or (low >= 0 and high < n))
        add(number, label, ok, f"{members.size:,} neurons" if ok else
            f"{package.relative(f'population_{name}')} holds {members.size:,} indices from "
            f"{_count(low)} to {_count(high)}, but the manifest says {_count(count)} neurons "
            f"of 0..{_count((n or 0) - 1)}; "
            f"{_REDOWNLOAD}")
    # 15-16.
    after = 11 + max(len(populations), 1)
    for number, name in enumerate(("hops_from_retina", "hops_to_descending"), start=after):
        hops, why = loaded(name)
        if hops is None:
            add(number, f"{name} covers every neuron", False, why)
            continue
        low, high = min_max(hops)
        ok = n is not None and hops.size == n and (hops.size == 0 or low >= -1)
        add(number, f"{name} covers every neuron", ok,
            f"{int(np.count_nonzero(np.asarray(hops) < 0)):,} unreachable (-1)" if ok else
            f"{package.relative(name)} holds {hops.size:,} values, the least {low}, for {n} "
            f"neurons (-1 marks unreachable); {_REDOWNLOAD}")
    # 17.
    raw = block.get("raw") is True and block.get("normalization_applied") is False
    add(after + 2, MALECNS_CHECKS[17], raw,
        "raw: true, normalization_applied: false" if raw else
        f"the manifest's weights block says raw {block.get('raw')!r}, normalization_applied "
        f"{block.get('normalization_applied')!r}: these are not the published raw weights")
    report("dataset checked", 1.0)
    return rows


def summary_line(rows: list[CheckResult], manifest: dict[str, Any]) -> str:
    """The authors' closing line: ``All 17 checks passed: 166,700 neurons, ...``, or how
    many failed."""
    failed = [r for r in rows if r.status == FAIL]
    if failed:
        return f"{len(failed)} check(s) failed."
    detail = _block(manifest, "neurons_detail")
    populations = _block(manifest, "populations")
    cell_types = _as_int(detail.get("cell_types"))
    return (f"All {len(rows)} checks passed: {int(manifest['neurons']):,} neurons, "
            f"{int(manifest['edges']):,} edges, "
            f"{'?' if cell_types is None else f'{cell_types:,}'} cell types, "
            f"{len(populations)} named populations.")


def hop_counts(offsets: np.ndarray, source: np.ndarray, start: np.ndarray, *,
               downstream: bool = True) -> np.ndarray:
    """Unweighted shortest hop counts from the neurons ``start`` (0 for them) along the
    edges (``downstream``: presynaptic to postsynaptic, the packager's
    ``hops_from_retina``) or against them (the hops *to* the set, ``hops_to_descending``);
    -1 where no path exists. int32, one per CSR row."""
    from scipy import sparse

    n = int(np.asarray(offsets).shape[0]) - 1
    # Row = postsynaptic: A @ x reaches the targets of x, A.T @ x its sources.
    graph = sparse.csr_matrix((np.ones(np.asarray(source).shape[0], np.float32),
                               np.asarray(source, np.int64), np.asarray(offsets, np.int64)),
                              shape=(n, n))
    step = graph if downstream else graph.T.tocsr()
    hops = np.full(n, -1, dtype=np.int32)
    frontier = np.zeros(n, dtype=bool)
    frontier[np.asarray(start, np.int64)] = True
    depth = 0
    while frontier.any():
        hops[frontier] = depth
        reached = np.asarray(step @ frontier.astype(np.float32)).ravel() > 0
        frontier = reached & (hops < 0)
        depth += 1
    return hops


# --------------------------------------------------------------------------- loading
@dataclass
class MaleCNSDataset:
    """A fly-connectome-malecns-166k folder, checked and memory-mapped.

    Attributes
    ----------
    offsets, source, weight
        Destination-major CSR: the inputs of neuron ``post`` are
        ``source[offsets[post]:offsets[post + 1]]`` with raw signed weights ``weight[...]``.
    body_id
        ``(n,)`` int64 MaleCNS body ids, ascending.
    superclass, cell_type
        ``(labels, index)``: the sorted label table and each neuron's row of it.
    populations
        Name -> int32 neuron indices (``retina``, ``lamina``, ``descending``, ``sugar``).
    hops_from_retina, hops_to_descending
        Unweighted shortest hop counts, -1 where unreachable.
    manifest, path
        The manifest and the folder.
    """

    offsets: np.ndarray
    source: np.ndarray
    weight: np.ndarray
    body_id: np.ndarray
    superclass: tuple[list[str], np.ndarray]
    cell_type: tuple[list[str], np.ndarray]
    populations: dict[str, np.ndarray] = field(default_factory=dict)
    hops_from_retina: np.ndarray | None = None
    hops_to_descending: np.ndarray | None = None
    manifest: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def neurons(self) -> int:
        """Number of neurons (CSR rows)."""
        return int(self.offsets.shape[0]) - 1

    @property
    def edges(self) -> int:
        """Number of edges."""
        return int(self.weight.shape[0])

    def superclass_labels(self) -> list[str]:
        """Each neuron's superclass."""
        labels, index = self.superclass
        return [labels[i] for i in np.asarray(index).tolist()]

    def cell_type_labels(self) -> list[str]:
        """Each neuron's cell type (``""`` where untyped)."""
        labels, index = self.cell_type
        return [labels[i] for i in np.asarray(index).tolist()]

    def anatomy(self) -> Anatomy:
        """The dataset as an anatomy and label source: body ids, superclasses, cell types
        and the named populations; no neuron has a position (the set has no somata, so a
        viewer lays the graph out)."""
        n = self.neurons
        return Anatomy(positions=np.zeros((n, 3), np.float32), valid=np.zeros(n, bool),
                       kind="measured", body_id=np.asarray(self.body_id, np.int64),
                       superclass=self.superclass_labels(), cell_type=self.cell_type_labels(),
                       populations={k: np.asarray(v, np.int64)
                                    for k, v in self.populations.items()})

    def central_brain_anatomy(self) -> Anatomy:
        """:meth:`anatomy` of the central-brain neurons only (:func:`central_brain_subset`:
        fly-connectome-49k's neurons, in its order), the populations renumbered to them:
        the labels of a Fly LLM's 49,393 neurons."""
        keep = central_brain_subset(self)
        whole = self.anatomy()
        rank = np.full(self.neurons, -1, dtype=np.int64)
        rank[keep] = np.arange(keep.size)
        populations = {}
        for name, members in (whole.populations or {}).items():
            mapped = rank[np.asarray(members, np.int64)]
            populations[name] = np.sort(mapped[mapped >= 0])
        return Anatomy(positions=np.zeros((keep.size, 3), np.float32),
                       valid=np.zeros(keep.size, bool), kind=whole.kind,
                       body_id=np.asarray(self.body_id, np.int64)[keep],
                       superclass=[(whole.superclass or [])[i] for i in keep.tolist()],
                       cell_type=[(whole.cell_type or [])[i] for i in keep.tolist()],
                       populations=populations)

    def describe(self) -> dict[str, Any]:
        """What ``flyviz info`` shows of the dataset, as plain JSON values."""
        manifest = self.manifest
        block = _block(manifest, "weights")
        provenance = _block(manifest, "provenance")
        sizes = np.bincount(np.asarray(self.superclass[1]), minlength=len(self.superclass[0]))
        order = np.argsort(-sizes, kind="stable")
        return {
            "name": manifest.get("name"), "layout": "malecns-166k",
            "source": str(self.path) if self.path else None,
            "neurons": self.neurons, "edges": self.edges,
            "synaptic_contacts": manifest.get("synaptic_contacts"),
            "weights": {"raw": block.get("raw"),
                        "normalization_applied": block.get("normalization_applied"),
                        "positive_edges": block.get("positive_edges"),
                        "negative_edges": block.get("negative_edges"),
                        "semantics": block.get("semantics")},
            "superclasses": {self.superclass[0][i]: int(sizes[i]) for i in order},
            "cell_types": len(self.cell_type[0]),
            "untyped": int(np.count_nonzero(np.asarray(self.cell_type[1]) ==
                                            (self.cell_type[0].index("")
                                             if "" in self.cell_type[0] else -1))),
            "populations": {k: int(v.size) for k, v in self.populations.items()},
            "soma_positions": False,
            "provenance": {k: provenance.get(k) for k in ("dataset", "assembled_via",
                                                          "minimum_confidence")},
        }


def load_malecns(folder: str | Path, *, verify: bool | None = None,
                 progress: Progress | None = None) -> MaleCNSDataset:
    """Load a fly-connectome-malecns-166k folder after the authors' 17 checks.

    Parameters
    ----------
    folder
        The dataset folder.
    verify
        Check 1's hashing: ``None`` (default) the files of at most 64 MB (all but the
        two 102 MB edge arrays of the real dataset, which are size-checked), ``True``
        every file, ``False`` none (check 1 is then not run).
    progress
        ``progress(label, fraction)``.

    Raises
    ------
    CheckpointError
        One line: the first check that failed (a missing or truncated file, a digest,
        an index out of range...).
    """
    limit = None if verify is True else (0 if verify is False else HASH_LIMIT_BYTES)
    rows = check_malecns(folder, hash_limit=limit, progress=progress)
    for row in rows:
        if row.status == FAIL:
            raise CheckpointError(f"{Path(folder).name}: {row.detail}" if row.detail
                                  else f"{Path(folder).name}: check {row.name} failed")
    package = _open(folder)
    populations = _block(package.manifest, "populations")
    return MaleCNSDataset(
        offsets=package.load("edges_offsets"), source=package.load("edges_source"),
        weight=package.load("edges_weight"), body_id=package.load("body_id"),
        superclass=([str(s) for s in package.load("superclass_labels")],
                    package.load("superclass_index")),
        cell_type=([str(s) for s in package.load("cell_type_labels")],
                   package.load("cell_type_index")),
        populations={str(name): np.asarray(package.load(f"population_{name}"), np.int64)
                     for name in populations},
        hops_from_retina=package.load("hops_from_retina"),
        hops_to_descending=package.load("hops_to_descending"),
        manifest=package.manifest, path=package.root)


# --------------------------------------------------------------- the 49k subset (§2.5)
def central_brain_subset(dataset: MaleCNSDataset) -> np.ndarray:
    """The neurons fly-connectome-49k keeps, as this dataset's indices in its (ascending
    body id) order: those of the five :data:`CENTRAL_BRAIN_SUPERCLASSES`."""
    labels, index = dataset.superclass
    keep = np.zeros(len(labels), dtype=bool)
    keep[[i for i, name in enumerate(labels) if name in CENTRAL_BRAIN_SUPERCLASSES]] = True
    return np.flatnonzero(keep[np.asarray(index)])


def central_brain_graph(dataset: MaleCNSDataset
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The subgraph the central-brain neurons induce, in the 49k layout: ``(neurons,
    offsets int32, sources int32, weights float32)``, the sources renumbered to the subset,
    the weights ``float32(w x CENTRAL_BRAIN_SCALE)``. The published 49k set holds all but
    628,902 of these 9,679,074 edges."""
    keep = central_brain_subset(dataset)
    n = dataset.neurons
    rank = np.full(n, -1, dtype=np.int64)
    rank[keep] = np.arange(keep.size)
    offsets = np.asarray(dataset.offsets, dtype=np.int64)
    post = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    source = np.asarray(dataset.source, dtype=np.int64)
    inside = (rank[post] >= 0) & (rank[source] >= 0)
    new_post = rank[post[inside]]
    out_offsets = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(new_post, minlength=keep.size), out=out_offsets[1:])
    weights = (np.asarray(dataset.weight, np.float64)[inside] * CENTRAL_BRAIN_SCALE
               ).astype(np.float32)
    return keep, out_offsets.astype(np.int32), rank[source[inside]].astype(np.int32), weights


def join_central_brain(dataset: MaleCNSDataset, central: Any) -> list[CheckResult]:
    """§2.5 on a fly-connectome-49k folder: its neurons are this dataset's central-brain
    neurons in the same order (joined by body id), each of its edges is one of this
    dataset's with the same sign, and its weight is this one's times
    :data:`CENTRAL_BRAIN_SCALE` to within one float32 step.

    ``central`` is a :class:`~flyviz.model.formats.dataset.DatasetFiles`. The rows are
    flyviz's own (group ``"join"``); each names what differs.
    """
    rows: list[CheckResult] = []

    def add(name: str, ok: bool, detail: str) -> None:
        rows.append(CheckResult("join", name, PASS if ok else FAIL, detail))

    keep = central_brain_subset(dataset)
    ids166 = np.asarray(dataset.body_id, dtype=np.int64)
    try:
        ids49 = np.asarray(central.array("body_id", central.neurons), dtype=np.int64)
        offsets49 = np.asarray(central.array("edges_offsets"), dtype=np.int64)
        source49 = np.asarray(central.array("edges_source"), dtype=np.int64)
        weight49 = np.asarray(central.array("edges_weight_f32"), dtype=np.float32)
    except CheckpointError as exc:
        add("central-brain dataset readable", False, str(exc))
        return rows
    same = ids49.shape == keep.shape and bool(np.array_equal(ids166[keep], ids49))
    if same:
        add("neurons joined by body id", True,
            f"all {ids49.size:,} are this dataset's {', '.join(CENTRAL_BRAIN_SUPERCLASSES)} "
            "neurons, in the same order")
    else:
        known = int(np.isin(ids49, ids166).sum())
        add("neurons joined by body id", False,
            f"the central-brain dataset's {ids49.size:,} body ids are not this dataset's "
            f"{keep.size:,} central-brain neurons in order ({known:,} of them are neurons "
            "here at all); the two datasets are not the published pair")
        return rows
    n = dataset.neurons
    if offsets49.size != ids49.size + 1 or source49.size != weight49.size or \
            (source49.size and (source49.min() < 0 or source49.max() >= ids49.size)):
        add("central-brain graph readable", False, "the central-brain dataset's graph does "
                                                   "not fit its neurons; verify it first")
        return rows
    post49 = np.repeat(np.arange(ids49.size, dtype=np.int64), np.diff(offsets49))
    wanted = keep[post49] * n + keep[source49]
    offsets = np.asarray(dataset.offsets, dtype=np.int64)
    post166 = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    keys = post166 * n + np.asarray(dataset.source, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    at = np.searchsorted(keys, wanted, sorter=order)
    at_c = np.minimum(at, max(keys.size - 1, 0))
    found = (at < keys.size) & (keys[order[at_c]] == wanted) if keys.size else \
        np.zeros(wanted.size, bool)
    if not found.all():
        first = int(np.flatnonzero(~found)[0])
        add("every edge is a MaleCNS edge", False,
            f"{int((~found).sum()):,} of {wanted.size:,} central-brain edges are not in this "
            f"dataset, the first from body {int(ids49[source49[first]])} to "
            f"{int(ids49[post49[first]])}")
        return rows
    induced = int(np.count_nonzero(np.isin(post166, keep) &
                                   np.isin(np.asarray(dataset.source), keep)))
    add("every edge is a MaleCNS edge", True,
        f"{wanted.size:,} of the {induced:,} edges the central-brain neurons induce "
        f"({induced - wanted.size:,} absent)")
    w166 = np.asarray(dataset.weight, dtype=np.float32)[order[at_c]]
    signs = np.sign(w166) == np.sign(weight49)
    add("same signs", bool(signs.all()),
        "every edge" if signs.all() else
        f"{int((~signs).sum()):,} edges change sign, the first from body "
        f"{int(ids49[source49[np.flatnonzero(~signs)[0]]])}")
    expected = w166.astype(np.float64) * CENTRAL_BRAIN_SCALE
    error = np.abs(weight49.astype(np.float64) - expected)
    step = np.spacing(np.abs(weight49)).astype(np.float64)
    scaled = bool(np.all(error <= step))
    ratio = float(np.median(weight49[w166 != 0] / w166[w166 != 0])) if w166.size else 0.0
    add(f"weights scaled by {CENTRAL_BRAIN_SCALE:.6e}", scaled,
        f"median ratio {ratio:.9e}, largest difference {float(error.max(initial=0)):.3g}"
        if scaled else
        f"{int((error > step).sum()):,} weights are not this dataset's times "
        f"{CENTRAL_BRAIN_SCALE:.6e} (median ratio {ratio:.6e}, off by up to "
        f"{float(error.max()):.3g})")
    return rows
