"""Spiking brains: the authors' files, a Fly LLM checkpoint's graph, or the demo brain.

The authors' layout (philshiu/Drosophila_brain_model, Readme.md and ``model.py``):

``Completeness_783.csv`` (release 783) or ``2023_03_23_completeness_630_final.csv`` (630)
    Read with ``index_col=0``: the index is the FlyWire root id and the row order is the model
    index (Brian2's neuron index). Other columns (``Completed``) are not used.
``Connectivity_783.parquet`` or ``2023_03_23_connectivity_630_final.parquet``
    One row per connected pair: ``Presynaptic_ID, Postsynaptic_ID, Presynaptic_Index,
    Postsynaptic_Index, Connectivity, Excitatory, Excitatory x Connectivity``. flyviz needs
    ``Presynaptic_Index, Postsynaptic_Index, Excitatory x Connectivity`` (the signed synapse
    count) and checks the two ``*_ID`` columns, where present, against the completeness table.

A fly-connectome-malecns-166k folder (``fly-family-2026.md`` §2; its ``manifest.json`` names
the label indices) is read by :func:`brain_from_malecns`: its 166,700 MaleCNS neurons, body
ids, superclasses, cell types and named populations, and its raw signed weights as synapse
counts (:func:`synapse_counts`) at MaleCNS's ``w_syn``.

A ConnecTorch brain (``us/connectorch``'s ``.ct`` folder: ``metadata.json``, ``nodes.parquet``,
``edges.parquet``; :mod:`flyviz.model.formats.connectorch`) runs too: its node ids are the root
ids (text ids number the neurons by their index instead), each edge's signed synapse count is
``synapse_count`` (else ``weight``, else 1) times ``sign`` (0 read as +1), and the node columns
``cell_type``, ``superclass`` and ``side`` are its labels.

Optional, from the FlyWire connectome's downloads (found in the folder or given by path):

``coordinates.csv[.gz]``
    ``root_id, position`` with position written ``"[x y z]"`` (extra columns such as
    ``supervoxel_id`` are ignored; the first row of a root id wins). Neurons without one have
    no position (``positions_valid`` False).
``classification.csv[.gz]``
    ``root_id`` and any of ``super_class``, ``cell_type`` (else ``hemibrain_type``),
    ``side``: the labels the query language's ``superclass:``, ``type:`` and ``side:`` read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.errors import InputError

__all__ = ["SPIKE_COLUMNS", "BrainError", "SpikingBrain", "brain_from_checkpoint",
           "brain_from_connectorch", "brain_from_malecns", "refuse_other_files", "brain_spec", "synapse_counts", "load_authors_brain",
           "load_brain", "load_connectorch_brain", "COMPLETENESS_NAMES", "CONNECTIVITY_NAMES",
           "FAFB_W_SYN", "MALECNS_W_SYN", "DEMO_EXCITED", "demo_brain", "strongest_sensory"]

#: The authors' weight per synapse (mV), fitted on FlyWire (FAFB).
FAFB_W_SYN = 0.275
#: The default on MaleCNS graphs (mV): 0.275 mV scaled down for MaleCNS's denser wiring (its
#: neurons carry about 1.81x FAFB's synapses), the value of gianlucamazza/flymsg's MaleCNS port.
MALECNS_W_SYN = 0.192

COMPLETENESS_NAMES = ("Completeness_783.csv", "2023_03_23_completeness_630_final.csv",
                      "Completeness_630.csv", "2023_02_01_completeness_587_final.csv")
CONNECTIVITY_NAMES = ("Connectivity_783.parquet", "2023_03_23_connectivity_630_final.parquet",
                      "Connectivity_630.parquet", "2023_02_01_connectivity_587_final.parquet")
COORDINATE_NAMES = ("coordinates.csv.gz", "coordinates.csv")
CLASSIFICATION_NAMES = ("classification.csv.gz", "classification.csv")
CONNECTIVITY_COLUMNS = ("Presynaptic_Index", "Postsynaptic_Index", "Excitatory x Connectivity")


class BrainError(InputError):
    """A spiking brain's files are missing, malformed or inconsistent."""


@dataclass
class SpikingBrain:
    """A graph the LIF model runs on: neurons, signed synapse counts, optional anatomy.

    Attributes
    ----------
    name
        Shown in summaries and written as the default ``exp_name``.
    root_ids
        ``(n,)`` int64 id of each neuron (FlyWire root id, MaleCNS body id).
    indptr, post, counts
        Outgoing synapses of neuron ``i``: targets ``post[indptr[i]:indptr[i+1]]`` with signed
        counts ``counts[...]`` (float64), in the order of the source table.
    w_syn
        Default weight of one synapse, mV.
    positions, positions_valid
        Soma positions ``(n, 3)`` and which are known, or None.
    superclass, cell_type, side
        Per-neuron labels, or None.
    default_excite
        Model indices a run excites when none are named (the demo's sensory set), or None.
    populations
        Named sets of model indices (``population:NAME`` in a query), or None.
    weights
        How the graph's weights became ``counts`` (said by ``flyviz info``); ``""`` where
        they are the authors' signed synapse counts as written.
    """

    name: str
    root_ids: np.ndarray
    indptr: np.ndarray
    post: np.ndarray
    counts: np.ndarray
    w_syn: float = FAFB_W_SYN
    positions: np.ndarray | None = None
    positions_valid: np.ndarray | None = None
    superclass: list[str] | None = None
    cell_type: list[str] | None = None
    side: list[str] | None = None
    default_excite: np.ndarray | None = None
    populations: dict[str, np.ndarray] | None = None
    weights: str = ""
    source: str = ""
    _id_order: np.ndarray | None = field(default=None, repr=False)
    _grouped: tuple[Any, ...] | None = field(default=None, repr=False)

    @property
    def neurons(self) -> int:
        """Number of neurons."""
        return int(self.root_ids.shape[0])

    @property
    def synapses(self) -> int:
        """Number of connected pairs (rows of the connectivity table)."""
        return int(self.post.shape[0])

    def grouped_rows(self, w_syn_v: float) -> tuple[np.ndarray, np.ndarray, float]:
        """The synapses in the order the engine reads them
        (:func:`~flyviz.spiking.engine.group_rows`): targets, weights ``counts * w_syn_v``
        (volts) and the smallest nonzero weight magnitude, kept until ``post``, ``counts`` or
        the weight change (arrays replaced, not edited in place)."""
        from flyviz.spiking.engine import group_rows

        cached = self._grouped
        if cached is None or cached[0] is not self.post or cached[1] is not self.counts:
            order = group_rows(self.indptr, self.post)
            cached = (self.post, self.counts, order,
                      np.ascontiguousarray(self.post[order], np.int32), None, None, 0.0)
        if cached[4] != w_syn_v:
            weight = self.counts[cached[2]] * w_syn_v
            magnitude = np.abs(weight)
            smallest = float(magnitude.min(initial=np.inf, where=magnitude > 0))
            cached = cached[:4] + (w_syn_v, weight, smallest)
        self._grouped = cached
        return cached[3], cached[5], cached[6]

    def indices_of(self, root_ids: Any, what: str = "root id") -> np.ndarray:
        """Model indices of ``root_ids``; a :class:`BrainError` names the first unknown one."""
        ids = np.asarray(root_ids, dtype=np.int64).ravel()
        if self._id_order is None:
            self._id_order = np.argsort(self.root_ids, kind="stable")
        order = self._id_order
        sorted_ids = self.root_ids[order]
        at = np.searchsorted(sorted_ids, ids)
        at_c = np.minimum(at, max(self.neurons - 1, 0))
        found = (at < self.neurons) & (sorted_ids[at_c] == ids) if self.neurons else \
            np.zeros(ids.shape, bool)
        if not found.all():
            raise BrainError(f"{what} {int(ids[~found][0])} is not a neuron of {self.name}")
        return order[at_c].astype(np.int64)


def _csr_by_pre(n: int, pre: np.ndarray, post: np.ndarray, counts: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by presynaptic neuron, keeping each neuron's rows in table order (the
    order Brian2 delivers them).

    The stable grouping is a counting sort (SciPy's CSR to CSC conversion of one row per
    table row): the order ``np.argsort(pre, kind="stable")`` gives, five times faster on
    tens of millions of rows."""
    from scipy import sparse

    rows = int(np.asarray(pre).shape[0])
    if rows == 0:
        order = np.zeros(0, dtype=np.int64)
    else:
        one_per_row = sparse.csr_matrix(
            (np.arange(rows, dtype=np.int64), np.asarray(pre, dtype=np.int32),
             np.arange(rows + 1, dtype=np.int64)), shape=(rows, n))
        order = one_per_row.tocsc().data  # within a column, rows stay in table order
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pre, minlength=n), out=indptr[1:])
    return indptr, np.ascontiguousarray(post[order], dtype=np.int32), \
        np.ascontiguousarray(counts[order], dtype=np.float64)


def _transpose(n: int, offsets: np.ndarray, source: np.ndarray, counts: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A destination-major CSR (row = postsynaptic neuron) regrouped by presynaptic neuron,
    each neuron's targets in their row order: what :func:`_csr_by_pre` gives for the edges
    read row by row, without building the edge table."""
    from scipy import sparse

    by_post = sparse.csr_matrix((np.asarray(counts, dtype=np.float64),
                                 np.asarray(source, dtype=np.int32),
                                 np.asarray(offsets, dtype=np.int64)), shape=(n, n))
    by_pre = by_post.tocsc()  # keeps repeated pairs apart, targets in row order
    return by_pre.indptr.astype(np.int64), np.ascontiguousarray(by_pre.indices, np.int32), \
        np.ascontiguousarray(by_pre.data, np.float64)


def _find(folder: Path, names: tuple[str, ...]) -> Path | None:
    """The first of ``names`` in ``folder`` that exists: a FIFO or folder of that name is
    found too, and refused by its reader as not a regular file (not passed over for a
    message that the file is missing)."""
    for name in names:
        if os.path.lexists(folder / name):
            return folder / name
    return None


def _is_authors_folder(folder: Path) -> bool:
    """True when ``folder`` is a folder in the authors' layout: it holds one of
    :data:`COMPLETENESS_NAMES`. :func:`load_brain` reads such a folder as the authors'
    brain (and says so in one line when its connectivity table is missing), never as a
    model, so :func:`is_brain_folder` and :func:`load_brain` both ask this."""
    return folder.is_dir() and _find(folder, COMPLETENESS_NAMES) is not None


def is_brain_folder(spec: str | Path) -> bool:
    """True when ``spec`` is a local folder that holds a spiking brain and no language model
    (the authors' layout, a ConnecTorch ``.ct`` brain, or fly-connectome-malecns-166k):
    what every host's Model box (the window's, napari's) opens as a spiking brain with
    :func:`load_brain` rather than as a model. Every folder :func:`load_brain` reads as a
    brain of its own, not as a model's graph, is one."""
    from flyviz.model.formats.connectorch import is_connectorch_brain
    from flyviz.model.formats.malecns import is_malecns_dataset

    folder = Path(str(spec)).expanduser()
    return folder.is_dir() and (_is_authors_folder(folder) or is_connectorch_brain(folder)
                                or is_malecns_dataset(folder))


def brain_spec(spec: str) -> str:
    """What a recording keeps to load ``spec``'s brain again: a folder or file that exists as
    its absolute, resolved path (read back from anywhere, it names that brain, not one of
    the same name in the reader's working folder); ``"demo"`` or a hub id as given."""
    if spec == "demo" or not spec:
        return spec
    local = Path(spec).expanduser()
    try:
        return str(local.resolve(strict=True)) if os.path.lexists(local) else spec
    except (OSError, RuntimeError):
        return spec


#: The columns that make a table one of spikes or input events (the authors' layout and
#: ``--input-spikes``): a completeness table has root ids and ``Completed``.
SPIKE_COLUMNS = ("t", "flywire_id")


def refuse_other_files(path: Path) -> None:
    """Raise :class:`BrainError` where ``path`` is a file flyviz knows and no brain: a
    recording or an export of one
    (:func:`~flyviz.record.flyrec_codec.recording_file_kind`), a table of spikes
    (:data:`SPIKE_COLUMNS`), or a file named ``*.ct`` (a ConnecTorch brain is a folder).
    Read as a completeness CSV, each failed with words about a missing connectivity table
    or a bad root id."""
    from flyviz.record.flyrec_codec import recording_file_kind

    if path.name.lower().endswith(".ct") and path.is_file():
        # Not "no connectivity table beside brain.ct": ConnecTorch writes a brain as a folder.
        raise BrainError(f"{path} is a file, but a ConnecTorch .ct brain is a folder "
                         "(metadata.json, nodes.parquet, edges.parquet): give that folder")
    what = recording_file_kind(path)
    if what is None and _table_columns(path).issuperset(SPIKE_COLUMNS):
        what = f"a table of spikes ({', '.join(SPIKE_COLUMNS)})"
    if what is not None:
        raise BrainError(f"{path.name} is {what}, not a brain (give the authors' folder, a .ct "
                         "brain, a model or demo)")


def _table_columns(path: Path) -> set[str]:
    """The column names of a CSV (``.csv``, ``.csv.gz``: its header row) or Parquet
    (``.parquet``, ``.pq``: its schema) file, read without its rows; none for anything else
    or a file that cannot be read (its reader names what is wrong)."""
    from flyviz.fileio import not_a_file

    name = path.name.lower()
    if not name.endswith((".csv", ".csv.gz", ".parquet", ".pq")) or not_a_file(path):
        return set()
    try:
        if name.endswith((".parquet", ".pq")):
            import pyarrow.parquet as pq

            return set(pq.read_schema(path).names)
        import csv
        import gzip
        import io

        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rb") as handle:
            first = handle.readline(1 << 20).decode("utf-8", "replace")
        return set(next(csv.reader(io.StringIO(first)), []))
    except Exception:  # noqa: BLE001 - not readable here: its reader says why, in one line
        return set()


def load_brain(path: str | Path, connectivity: str | Path | None = None, *,
               coordinates: str | Path | None = None,
               classification: str | Path | None = None) -> SpikingBrain:
    """A folder (or completeness CSV) in the authors' layout, or ``"demo"``, a
    fly-connectome-malecns-166k folder or its hub id (:func:`brain_from_malecns`), a
    ConnecTorch ``.ct`` brain (:func:`load_connectorch_brain`), or a flyviz model spec (a
    checkpoint folder or hub id: its graph with MaleCNS's default ``w_syn``).
    ``coordinates`` and ``classification`` apply to the authors' layout, the 166k set and a
    ``.ct`` brain."""
    text = str(path)
    if text == "demo":
        return demo_brain()
    p = Path(text).expanduser()
    refuse_other_files(p)
    from flyviz.model.formats.connectorch import is_connectorch_brain

    if is_connectorch_brain(p):
        if connectivity is not None:
            raise BrainError(f"{p.name} is a ConnecTorch brain: its edges are its own "
                             "edges.parquet; leave out --connectivity")
        return load_connectorch_brain(p, coordinates=coordinates, classification=classification)
    if connectivity is None:
        from flyviz.model.formats.malecns import load_malecns
        from flyviz.model.resolve import malecns_folder

        folder = malecns_folder(text)  # a local folder, or the hub's dataset
        if folder is not None:
            return _with_files(brain_from_malecns(load_malecns(folder)), coordinates,
                               classification)
    if p.is_dir() and not _is_authors_folder(p) and connectivity is None:
        from flyviz.model.resolve import load_model

        return brain_from_checkpoint(load_model(text))
    if not p.exists():
        if "/" in text and not text.startswith((".", "/", "~")) and connectivity is None:
            from flyviz.model.resolve import load_model  # a hub id

            return brain_from_checkpoint(load_model(text))
        raise BrainError(f"no spiking brain at {text}: give a folder with "
                         f"{COMPLETENESS_NAMES[0]} and {CONNECTIVITY_NAMES[0]}, the two files, "
                         "a ConnecTorch .ct folder, a fly-connectome-malecns-166k folder, a "
                         "flyviz model or 'demo'")
    return load_authors_brain(p, connectivity, coordinates=coordinates,
                              classification=classification)


def load_authors_brain(path: str | Path, connectivity: str | Path | None = None, *,
                       coordinates: str | Path | None = None,
                       classification: str | Path | None = None) -> SpikingBrain:
    """Read and check the authors' two files (see the module notes).

    ``path`` is the folder holding them or the completeness CSV; ``connectivity`` the Parquet
    file when it is not beside it under one of :data:`CONNECTIVITY_NAMES`.

    Raises
    ------
    BrainError
        One line naming the missing file or column, the out-of-range index or unknown id.
    """
    from flyviz.extras import require
    from flyviz.spiking.tables import id_column, index_column, number_column, read_table

    require("parquet", "reading the authors' Connectivity parquet")
    p = Path(path).expanduser()
    if not p.is_dir():
        refuse_other_files(p)   # before "no connectivity table beside" a recording
    folder = p if p.is_dir() else p.parent
    comp_path = _find(p, COMPLETENESS_NAMES) if p.is_dir() else p
    if comp_path is None:
        raise BrainError(f"{p} has no completeness table ({', '.join(COMPLETENESS_NAMES[:2])})")
    conn_path = Path(connectivity).expanduser() if connectivity is not None else \
        _find(folder, CONNECTIVITY_NAMES)
    if conn_path is None or not conn_path.exists():
        raise BrainError(f"no connectivity table beside {comp_path.name} "
                         f"({', '.join(CONNECTIVITY_NAMES[:2])}); give it with --connectivity")
    comp = read_table(comp_path, "the completeness table", strings=True, error=BrainError)
    if comp.shape[1] < 1:
        raise BrainError(f"{comp_path.name} has no columns: its first must hold root ids")
    first = str(comp.columns[0])
    root_ids = id_column(comp, comp.columns[0], comp_path.name, error=BrainError,
                         label="root id" if first.startswith("Unnamed") else first)
    n = int(root_ids.shape[0])
    if n == 0:
        raise BrainError(f"{comp_path.name} lists no neurons")
    if np.unique(root_ids).shape[0] != n:
        raise BrainError(f"{comp_path.name}: root ids are not unique")
    con = read_table(conn_path, "the connectivity table", error=BrainError)
    missing = [c for c in CONNECTIVITY_COLUMNS if c not in con.columns]
    if missing:
        raise BrainError(f"{conn_path.name} lacks column(s) {', '.join(missing)} "
                         f"(needs {', '.join(CONNECTIVITY_COLUMNS)})")
    pre, post = (index_column(con, name, conn_path.name, n, error=BrainError)
                 for name in ("Presynaptic_Index", "Postsynaptic_Index"))
    counts = number_column(con, "Excitatory x Connectivity", conn_path.name,
                           what="signed synapse counts", error=BrainError)
    for id_col, idx in (("Presynaptic_ID", pre), ("Postsynaptic_ID", post)):
        if id_col not in con.columns:
            continue
        ids = id_column(con, id_col, conn_path.name, error=BrainError)
        wrong = ids != root_ids[idx]
        if wrong.any():
            row = int(np.flatnonzero(wrong)[0])
            known = np.isin(ids[row], root_ids)
            why = "is not in" if not known else "does not match its index in"
            raise BrainError(f"{conn_path.name}: {id_col} {int(ids[row])} (row {row}) {why} "
                             f"{comp_path.name}")
    indptr, post_sorted, counts_sorted = _csr_by_pre(n, pre, post, counts)
    brain = SpikingBrain(name=comp_path.stem, root_ids=root_ids, indptr=indptr,
                         post=post_sorted, counts=counts_sorted, source=str(folder))
    coords = Path(coordinates) if coordinates is not None else _find(folder, COORDINATE_NAMES)
    if coords is not None:
        _read_coordinates(brain, coords)
    labels = Path(classification) if classification is not None else \
        _find(folder, CLASSIFICATION_NAMES)
    if labels is not None:
        _read_classification(brain, labels)
    return brain


def load_connectorch_brain(path: str | Path, *, coordinates: str | Path | None = None,
                           classification: str | Path | None = None) -> SpikingBrain:
    """The ConnecTorch ``.ct`` brain at ``path``, read and checked
    (:func:`flyviz.model.formats.connectorch.read_brain`: both digests recomputed), as a spiking
    brain (:func:`brain_from_connectorch`); ``coordinates`` and ``classification`` as for the
    authors' files (their root ids are the node ids)."""
    from flyviz.model.formats.connectorch import read_brain

    return _with_files(brain_from_connectorch(read_brain(Path(path).expanduser())),
                       coordinates, classification)


def _with_files(brain: SpikingBrain, coordinates: str | Path | None,
                classification: str | Path | None) -> SpikingBrain:
    """``brain`` with the soma positions and labels of the files given by path (by root id)."""
    if coordinates is not None:
        _read_coordinates(brain, Path(coordinates))
    if classification is not None:
        _read_classification(brain, Path(classification))
    return brain


def brain_from_connectorch(ct: Any) -> SpikingBrain:
    """A :class:`~flyviz.model.formats.connectorch.ConnecTorchBrain` as a spiking brain.

    The neurons are the nodes in index order; each edge's signed synapse count is
    :func:`~flyviz.model.formats.connectorch.signed_weights`'s (``synapse_count``, else
    ``weight``, else 1, times ``sign`` with 0 as +1); the root ids are the node ids, or the
    indices where the ids are text; the node columns ``cell_type``, ``superclass`` and ``side``
    (as ConnecTorch's MaleCNS loader names them) are the labels. ``w_syn`` is MaleCNS's
    0.192 mV when the provenance's dataset is MaleCNS (``male-cns...``), else the authors'
    0.275 mV.
    """
    from flyviz.model.formats.connectorch import signed_weights

    n = ct.num_nodes
    counts, _ = signed_weights(ct)
    indptr, post, counts_sorted = _csr_by_pre(n, ct.source_index, ct.target_index, counts)
    ids = np.arange(n, dtype=np.int64) if ct.string_ids else \
        np.asarray(ct.node_ids, dtype=np.int64)
    folder = ct.path
    name = "connectorch" if folder is None else \
        (folder.name[:-3] if folder.name.lower().endswith(".ct") else folder.name)
    dataset = str(ct.provenance.get("dataset") or "").lower()
    w_syn = MALECNS_W_SYN if dataset.startswith(("male-cns", "malecns")) else FAFB_W_SYN
    brain = SpikingBrain(name=name, root_ids=ids, indptr=indptr, post=post,
                         counts=counts_sorted, w_syn=w_syn, source=str(folder or name))

    def labels(column: str) -> list[str] | None:
        values = ct.node_columns.get(column)
        if values is None:
            return None
        return ["" if value is None or value != value else str(value)
                for value in values.tolist()]

    brain.cell_type, brain.superclass, brain.side = \
        labels("cell_type"), labels("superclass"), labels("side")
    return brain


def _read_coordinates(brain: SpikingBrain, path: Path) -> None:
    from flyviz.spiking.tables import id_column, read_table

    table = read_table(path, "the coordinates table", strings=True, error=BrainError)
    for column in ("root_id", "position"):
        if column not in table.columns:
            raise BrainError(f"{path.name} lacks column {column} (needs root_id, position)")
    ids = id_column(table, "root_id", path.name, error=BrainError)
    first = np.unique(ids, return_index=True)[1]      # the first row of a root id wins
    rows = np.sort(first)[np.isin(ids[np.sort(first)], brain.root_ids)]
    xyz = np.full((rows.size, 3), np.nan)
    texts = table["position"].to_numpy()
    for k, row in enumerate(rows.tolist()):
        text = texts[row]
        parts = str(text).strip("[]() ").replace(",", " ").split()
        try:
            xyz[k] = [float(x) for x in parts] if len(parts) == 3 else [np.nan] * 4
        except ValueError:
            xyz[k] = np.nan
        if not np.isfinite(xyz[k]).all():
            raise BrainError(f"{path.name}: position {str(text)[:40]!r} (row {row}) is not "
                             "'[x y z]' of three finite numbers")
    positions = np.zeros((brain.neurons, 3))
    valid = np.zeros(brain.neurons, dtype=bool)
    at = brain.indices_of(ids[rows])
    positions[at] = xyz
    valid[at] = True
    brain.positions, brain.positions_valid = positions, valid


def _read_classification(brain: SpikingBrain, path: Path) -> None:
    from flyviz.spiking.tables import id_column, read_table

    table = read_table(path, "the classification table", strings=True, error=BrainError)
    if "root_id" not in table.columns:
        raise BrainError(f"{path.name} lacks column root_id")
    ids = id_column(table, "root_id", path.name, error=BrainError)
    first = np.sort(np.unique(ids, return_index=True)[1])  # the first row of a root id wins
    rows = first[np.isin(ids[first], brain.root_ids)]
    at = brain.indices_of(ids[rows])

    def labels(column: str) -> list[str] | None:
        if column not in table.columns:
            return None
        out = [""] * brain.neurons
        for i, value in zip(at.tolist(), table[column].to_numpy()[rows].tolist()):
            out[i] = str(value)
        return out

    brain.superclass = labels("super_class")
    brain.cell_type = labels("cell_type") or labels("hemibrain_type")
    brain.side = labels("side")


def synapse_counts(values: Any) -> tuple[np.ndarray, float, bool]:
    """Signed synapse counts from a graph's weights: the weights over their smallest
    magnitude (one synapse), rounded, when every weight is a whole multiple of it (to
    within 0.01 synapse); else the weights as they are.

    Returns
    -------
    counts, unit, whole
        float64 counts, the weight of one synapse (1.0 when not ``whole``) and whether the
        weights were whole multiples of it.
    """
    # Two float64 arrays of the edges' size at most besides the result (a whole brain has
    # tens of millions of synapses): each step writes into one of them, not a new one.
    weights = np.array(values, dtype=np.float64)        # a copy: returned when not whole
    scratch = np.abs(weights)
    unit = float(scratch.min(initial=np.inf, where=scratch > 0))
    if not np.isfinite(unit):
        return weights, 1.0, True
    counts = np.divide(weights, unit, out=scratch)
    rounded = np.rint(counts)
    residual = np.abs(np.subtract(counts, rounded, out=scratch), out=scratch)
    if float(residual.max(initial=0.0)) > 0.01:
        return weights, 1.0, False
    return rounded, unit, True


def why_no_brain(checkpoint: Any, whole: bool) -> str | None:
    """Why a checkpoint's graph cannot run as a spiking brain (``whole``: whether its weights
    are whole multiples of one synapse, :func:`synapse_counts`), or ``None`` when it can."""
    if whole:
        return None
    if checkpoint.layout == "flygpt":
        # graph.synapse_count is there, but unsigned: an LIF brain needs each synapse's sign.
        return ("its recurrent weights are learned (recurrent.edge_values) and its graph's "
                "synapse counts (graph.synapse_count) carry no sign, which a spiking brain needs")
    return "its weights are not whole multiples of one synapse, so they give no counts"


def brain_from_checkpoint(checkpoint: Any, w_syn: float = MALECNS_W_SYN) -> SpikingBrain:
    """The LIF model on a Fly LLM checkpoint's graph: its signed synapse counts (the weights
    over their smallest magnitude, which is one synapse), MaleCNS body ids, soma positions and
    labels."""
    ck = checkpoint
    n = int(ck.config.neurons)
    rounded, _unit, whole = synapse_counts(ck.w_values)
    why = why_no_brain(ck, whole)
    if why is not None:
        raise BrainError(f"{ck.name} cannot run as a spiking brain: {why}")
    indptr, post_sorted, counts_sorted = _transpose(n, ck.w_offsets, ck.w_indices, rounded)
    anatomy = ck.anatomy
    ids = np.asarray(anatomy.body_id, dtype=np.int64) if anatomy is not None and \
        anatomy.body_id is not None else np.arange(n, dtype=np.int64)
    brain = SpikingBrain(name=str(ck.name), root_ids=ids, indptr=indptr, post=post_sorted,
                         counts=counts_sorted, w_syn=w_syn, source=str(ck.source or ck.name))
    if anatomy is not None:
        brain.positions = np.asarray(anatomy.positions, dtype=np.float64)
        brain.positions_valid = np.asarray(anatomy.valid, dtype=bool)
        brain.superclass, brain.cell_type, brain.side = \
            anatomy.superclass, anatomy.cell_type, anatomy.side
    return brain


def brain_from_malecns(dataset: Any, w_syn: float = MALECNS_W_SYN) -> SpikingBrain:
    """The LIF model on a fly-connectome-malecns-166k dataset
    (:class:`~flyviz.model.formats.malecns.MaleCNSDataset`): its neurons in their order (body
    ids ascending), their superclasses, cell types and the named populations, no positions.

    The weights are raw and signed; a synapse's weight in the model is
    ``count x sign x w_syn`` as in the authors' model, the signed count being the weight
    over the smallest weight magnitude (one synapse) when the weights are whole multiples of
    it (the published ones read as multiples of 0.275), else the weight itself (the
    manifest calls the weights signed synaptic counts). :attr:`SpikingBrain.weights` says
    which, for ``flyviz info``. A run excites the ``sugar`` population unless told
    otherwise.
    """
    n = dataset.neurons
    counts, unit, whole = synapse_counts(dataset.weight)
    indptr, post_sorted, counts_sorted = _transpose(n, dataset.offsets, dataset.source, counts)
    how = (f"signed synapse count = weight / {unit:.6g} (the smallest |weight|, one synapse)"
           if whole else "signed synapse count = the raw weight (the manifest's signed "
                         "synaptic count; the weights are not whole multiples of one value)")
    path = getattr(dataset, "path", None)
    populations = {k: np.asarray(v, np.int64) for k, v in dataset.populations.items()}
    return SpikingBrain(name=str(dataset.manifest.get("name") or "malecns-166k"),
                        root_ids=np.asarray(dataset.body_id, dtype=np.int64), indptr=indptr,
                        post=post_sorted, counts=counts_sorted, w_syn=w_syn,
                        superclass=dataset.superclass_labels(),
                        cell_type=dataset.cell_type_labels(),
                        populations=populations, weights=how,
                        source=str(path) if path is not None else "",
                        # Unless told otherwise a run excites the sugar neurons, as the
                        # authors' first experiment (the demo excites its 21 sugar GRNs).
                        default_excite=populations.get("sugar"))


# ------------------------------------------------------------ the demo brain
#: Neurons a demo run excites by default: the authors' 21 sugar-sensing GRNs, in number.
DEMO_EXCITED = 21

_demo_cache: list[SpikingBrain] = []


def demo_brain() -> SpikingBrain:
    """The demo spiking brain (built once per process)."""
    if _demo_cache:
        return _demo_cache[0]
    from flyviz.model.resolve import load_model

    brain = brain_from_checkpoint(load_model("demo"))
    brain.name = "demo"
    brain.default_excite = strongest_sensory(brain)
    _demo_cache.append(brain)
    return brain


def strongest_sensory(brain: SpikingBrain, count: int = DEMO_EXCITED) -> np.ndarray:
    """The ``count`` ``cb_sensory`` neurons (any neurons, on a brain without labels) with the
    most outgoing excitatory synapses, sorted: what a run on a Fly LLM model's graph excites
    when nothing is named."""
    excitatory = np.where(brain.counts > 0, brain.counts, 0.0)
    out = np.add.reduceat(excitatory, brain.indptr[:-1]) if brain.synapses else \
        np.zeros(brain.neurons)
    out[np.diff(brain.indptr) == 0] = 0.0
    if brain.superclass is not None:
        sensory = np.array([s == "cb_sensory" for s in brain.superclass])
        out = np.where(sensory, out, -1.0)
    return np.sort(np.argsort(-out, kind="stable")[:int(count)])
