"""ConnecTorch ``.ct`` brains: written in ConnecTorch's exact layout, read back with both digests
recomputed, refused in one line when damaged, run as a spiking brain and rewired as a null."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz.model.formats.connectorch import (ConnecTorchBrain, ConnecTorchError, build_brain,
                                              content_hash, fingerprint, read_brain, write_brain)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

B = 720575940600000000
#: Given out of order; sorted they are the indices 0..4 (B+11, B+22, B+33, B+44, B+55).
NODE_IDS = [B + 33, B + 11, B + 55, B + 22, B + 44]
CELL_TYPES = ["T33", "T11", "T55", "T22", "T44"]
#: (source id, target id, synapse_count, weight, sign): asymmetric (11->22 is not 22->11),
#: B+11->B+22 twice (merged into one edge of 12 synapses), B+55 has no inputs.
EDGES = [(B + 11, B + 22, 7, 0.5, 1), (B + 33, B + 22, 3, 0.25, -1), (B + 11, B + 33, 4, 1.0, 1),
         (B + 22, B + 11, 2, 0.125, 1), (B + 11, B + 22, 5, 0.5, 1), (B + 44, B + 33, 6, 2.0, -1),
         (B + 55, B + 44, 1, 0.75, 0)]
#: What ConnecTorch stores, worked out by hand: edges by target then source, the parallel
#: pair summed (synapse_count widened to int64, weight summed, sign the first's).
SORTED_IDS = [B + 11, B + 22, B + 33, B + 44, B + 55]
SOURCE_INDEX = [1, 0, 2, 0, 3, 4]
TARGET_INDEX = [0, 1, 1, 2, 2, 3]
SYNAPSES = [2, 12, 3, 4, 6, 1]
WEIGHTS = [0.125, 1.0, 0.25, 1.0, 2.0, 0.75]
SIGNS = [1, 1, -1, 1, -1, 0]

STRING_IDS = ["PVCL", "AVAL", "ASHL", "AVAR"]
STRING_EDGES = [("ASHL", "AVAL", 0.5), ("AVAL", "PVCL", 1.5), ("AVAR", "AVAL", 0.25)]


def _int_brain() -> ConnecTorchBrain:
    source, target, count, weight, sign = (list(column) for column in zip(*EDGES))
    return build_brain(source, target, node_ids=NODE_IDS,
                       node_columns={"cell_type": CELL_TYPES, "superclass": ["optic"] * 5},
                       synapse_count=np.array(count, np.int32), weight=np.array(weight),
                       sign=np.array(sign, np.int8),
                       provenance={"dataset": "male-cns:v1.0", "filters": {"min_synapses": 1}})


def _string_brain() -> ConnecTorchBrain:
    source, target, weight = (list(column) for column in zip(*STRING_EDGES))
    return build_brain(source, target, node_ids=STRING_IDS, weight=np.array(weight))


@pytest.fixture()
def int_ct(tmp_path: Path) -> Path:
    return write_brain(_int_brain(), tmp_path / "brain.ct")


# ------------------------------------------------------------------ the published layout
def test_the_writer_makes_connectorchs_layout_and_the_reader_reads_it_back(int_ct: Path) -> None:
    assert sorted(p.name for p in int_ct.iterdir()) == ["edges.parquet", "metadata.json",
                                                        "nodes.parquet"]
    nodes, edges = pq.read_table(int_ct / "nodes.parquet"), pq.read_table(int_ct / "edges.parquet")
    assert nodes.schema.names == ["node_id", "cell_type", "superclass"]
    assert [str(t) for t in nodes.schema.types] == ["int64", "string", "string"]
    assert nodes.column("node_id").to_pylist() == SORTED_IDS
    assert nodes.column("cell_type").to_pylist() == ["T11", "T22", "T33", "T44", "T55"]
    assert edges.schema.names == ["source_index", "target_index", "synapse_count", "weight",
                                  "sign"]
    assert [str(t) for t in edges.schema.types] == ["int64", "int64", "int64", "double", "int8"]
    assert edges.column("source_index").to_pylist() == SOURCE_INDEX
    assert edges.column("target_index").to_pylist() == TARGET_INDEX
    assert edges.column("synapse_count").to_pylist() == SYNAPSES
    assert edges.column("weight").to_pylist() == WEIGHTS
    assert edges.column("sign").to_pylist() == SIGNS
    for name in ("nodes.parquet", "edges.parquet"):
        assert pq.ParquetFile(int_ct / name).metadata.row_group(0).column(0).compression == "ZSTD"
    meta = json.loads((int_ct / "metadata.json").read_text())
    assert list(meta) == ["schema_version", "num_nodes", "num_edges", "fingerprint",
                          "content_hash", "provenance"]
    assert (meta["schema_version"], meta["num_nodes"], meta["num_edges"]) == (1, 5, 6)
    assert meta["provenance"] == {"dataset": "male-cns:v1.0", "filters": {"min_synapses": 1},
                                  "node_order": "sorted", "aggregate_parallel_edges": True,
                                  "parallel_edges_merged": 1}
    back = read_brain(int_ct)
    assert back.node_ids.tolist() == SORTED_IDS and back.num_edges == 6
    assert back.source_index.tolist() == SOURCE_INDEX
    assert back.edge_columns["synapse_count"].tolist() == SYNAPSES
    # Written again from what was read, the same digests and the same tables.
    again = write_brain(back, int_ct.parent / "again.ct")
    meta2 = json.loads((again / "metadata.json").read_text())
    assert (meta2["fingerprint"], meta2["content_hash"]) == (meta["fingerprint"],
                                                             meta["content_hash"])
    assert pq.read_table(again / "edges.parquet").equals(edges)


def _arrow_strings(values: list[str]) -> bytes:
    """An Arrow ``string`` column's buffers: int32 offsets, then the UTF-8 bytes."""
    encoded = [v.encode() for v in values]
    offsets = np.cumsum([0] + [len(e) for e in encoded]).astype("<i4")
    return offsets.tobytes() + b"".join(encoded)


def i64(values: list) -> bytes:
    return np.array(values, "<i8").tobytes()


def f64(values: list) -> bytes:
    return np.array(values, "<f8").tobytes()


def _sha16(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()[:16]


def test_both_digests_equal_an_independent_reading_of_the_published_algorithm(int_ct: Path,
                                                                            tmp_path: Path
                                                                            ) -> None:
    expected_fingerprint = _sha16(
        b"connectorch-v1", b"int:", i64(SORTED_IDS), b"|edges|", i64(SOURCE_INDEX),
        i64(TARGET_INDEX), b"synapse_count", b"i", i64(SYNAPSES), b"weight", b"f",
        f64(WEIGHTS), b"sign", b"i", i64(SIGNS), b"sorted")
    expected_content = _sha16(
        b"connectorch-content-v1",
        b"node_id", b"int64", i64(SORTED_IDS),
        b"cell_type", b"string", _arrow_strings(["T11", "T22", "T33", "T44", "T55"]),
        b"superclass", b"string", _arrow_strings(["optic"] * 5),
        b"source_index", b"int64", i64(SOURCE_INDEX), b"target_index", b"int64",
        i64(TARGET_INDEX), b"synapse_count", b"int64", i64(SYNAPSES), b"weight", b"double",
        f64(WEIGHTS), b"sign", b"int8", np.array(SIGNS, "i1").tobytes())
    meta = json.loads((int_ct / "metadata.json").read_text())
    assert meta["fingerprint"] == expected_fingerprint
    assert meta["content_hash"] == expected_content
    back = read_brain(int_ct)
    assert (fingerprint(back), content_hash(back)) == (expected_fingerprint, expected_content)

    # Text ids: each id's UTF-8 length as 8 little-endian bytes before it.
    words = write_brain(_string_brain(), tmp_path / "worm.ct")
    ids = sorted(STRING_IDS)                             # ASHL AVAL AVAR PVCL
    source, target, weight = [0, 2, 1], [1, 1, 3], [0.5, 0.25, 1.5]
    id_bytes = b"".join(len(i).to_bytes(8, "little") + i.encode() for i in ids)
    meta = json.loads((words / "metadata.json").read_text())
    assert meta["fingerprint"] == _sha16(b"connectorch-v1", b"str:", id_bytes, b"|edges|",
                                         i64(source), i64(target), b"weight", b"f",
                                         f64(weight), b"sorted")
    assert meta["content_hash"] == _sha16(b"connectorch-content-v1", b"node_id", b"string",
                                          _arrow_strings(ids), b"source_index", b"int64",
                                          i64(source), b"target_index", b"int64", i64(target),
                                          b"weight", b"double", f64(weight))
    assert read_brain(words).node_ids.tolist() == ids


# ------------------------------------------------------------------ damaged brains
def _rewrite(folder: Path, *, nodes: dict | None = None, edges: dict | None = None,
             rehash: bool = True) -> None:
    """Replace a table of ``folder`` with ``nodes``/``edges`` (columns by name); with
    ``rehash`` the digests in metadata.json are those of the new tables, so that only the
    fault the test makes is left to find."""
    if nodes is not None:
        pq.write_table(pa.table(nodes), folder / "nodes.parquet", compression="zstd")
    if edges is not None:
        pq.write_table(pa.table(edges), folder / "edges.parquet", compression="zstd")
    if not rehash:
        return
    meta = json.loads((folder / "metadata.json").read_text())
    n = pq.read_table(folder / "nodes.parquet").to_pydict()
    e = pq.read_table(folder / "edges.parquet").to_pydict()
    ids = np.array(n.pop("node_id"))
    brain = ConnecTorchBrain(ids, {k: np.array(v, dtype=object) for k, v in n.items()},
                             np.array(e.pop("source_index", [])),
                             np.array(e.pop("target_index", [])),
                             {k: np.array(v) for k, v in e.items()}, meta["provenance"])
    brain.edge_columns["sign"] = brain.edge_columns["sign"].astype(np.int8)
    meta.update(fingerprint=fingerprint(brain), content_hash=content_hash(brain))
    (folder / "metadata.json").write_text(json.dumps(meta))


def _edges(**changes: list) -> dict:
    table = {"source_index": SOURCE_INDEX, "target_index": TARGET_INDEX,
             "synapse_count": SYNAPSES, "weight": WEIGHTS, "sign": SIGNS}
    table.update(changes)
    columns = {k: pa.array(v) for k, v in table.items() if v is not None}
    columns["sign"] = pa.array(table["sign"], pa.int8())
    return columns


def test_a_brain_whose_content_hash_differs_is_one_line_naming_both_hashes(int_ct: Path,
                                                                          capsys) -> None:
    recorded = json.loads((int_ct / "metadata.json").read_text())["content_hash"]
    _rewrite(int_ct, nodes={"node_id": SORTED_IDS,
                            "cell_type": ["T11", "T22", "T33", "T44", "EDITED"],
                            "superclass": ["optic"] * 5}, rehash=False)
    computed = content_hash(ConnecTorchBrain(
        np.array(SORTED_IDS), {"cell_type": np.array(["T11", "T22", "T33", "T44", "EDITED"],
                                                     dtype=object),
                               "superclass": np.array(["optic"] * 5, dtype=object)},
        np.array(SOURCE_INDEX), np.array(TARGET_INDEX),
        {"synapse_count": np.array(SYNAPSES), "weight": np.array(WEIGHTS),
         "sign": np.array(SIGNS, np.int8)}))
    code, _, err = cli_run(capsys, "simulate", str(int_ct), "--excite", "id:0", "--duration",
                           "10ms", "--out", str(int_ct.parent / "s.parquet"))
    one_error_line(code, err, "content hash differs", recorded, computed)
    assert not (int_ct.parent / "s.parquet").exists()


def test_a_changed_graph_under_a_matching_content_hash_fails_the_fingerprint(int_ct: Path
                                                                            ) -> None:
    meta = json.loads((int_ct / "metadata.json").read_text())
    good = meta["fingerprint"]
    meta["fingerprint"] = "0123456789abcdef"
    (int_ct / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ConnecTorchError, match=f"fingerprint differs.*0123456789abcdef.*{good}"):
        read_brain(int_ct)


@pytest.mark.parametrize(("damage", "expected"), [
    ("no edges", "has no edges.parquet"),
    ("no nodes", "has no nodes.parquet"),
    ("no metadata", "has no metadata.json"),
    ("no target column", "edges.parquet lacks column target_index"),
    ("no node_id column", "nodes.parquet lacks column node_id"),
    ("unsorted edges", "edge 2 (0 -> 1) comes after (2 -> 1); ConnecTorch orders edges by "
                       "target_index, then source_index"),
    ("edge out of range", "target_index 5 (row 5) is outside 0..4"),
    ("negative index", "source_index -1 (row 0) is outside 0..4"),
    ("float index", "source_index holds float64 values"),
    ("unsorted ids", f"node_id {B + 22} (row 2) is below the one before it"),
    ("repeated id", f"node_id {B + 11} (row 1) repeats the one before it"),
    ("parallel edges", "edge 3 (2 -> 1) repeats the one before it"),
    ("bad sign", "sign 2 (row 4) is not -1, 0 or 1"),
    ("count mismatch", "metadata.json says num_edges 7, the table holds 6"),
    ("schema 2", "schema_version 2; flyviz reads ConnecTorch's schema version 1"),
])
def test_a_damaged_brain_is_one_line_and_exit_2(int_ct: Path, capsys, damage: str,
                                               expected: str) -> None:
    nodes = {"node_id": SORTED_IDS, "cell_type": ["a"] * 5}
    if damage == "no edges":
        (int_ct / "edges.parquet").unlink()
    elif damage == "no nodes":
        (int_ct / "nodes.parquet").unlink()
    elif damage == "no metadata":
        (int_ct / "metadata.json").unlink()
    elif damage == "no target column":
        pq.write_table(pa.table({"source_index": SOURCE_INDEX}), int_ct / "edges.parquet")
    elif damage == "no node_id column":
        pq.write_table(pa.table({"id": SORTED_IDS}), int_ct / "nodes.parquet")
    elif damage == "unsorted edges":
        _rewrite(int_ct, edges=_edges(source_index=[1, 2, 0, 0, 3, 4],
                                      target_index=[0, 1, 1, 2, 2, 3]))
    elif damage == "edge out of range":
        _rewrite(int_ct, edges=_edges(target_index=[0, 1, 1, 2, 2, 5]))
    elif damage == "negative index":
        _rewrite(int_ct, edges=_edges(source_index=[-1, 0, 2, 0, 3, 4]))
    elif damage == "float index":
        _rewrite(int_ct, edges=_edges(source_index=[1.0, 0, 2, 0, 3, 4]), rehash=False)
    elif damage == "unsorted ids":
        _rewrite(int_ct, nodes={**nodes, "node_id": [B + 11, B + 33, B + 22, B + 44, B + 55]})
    elif damage == "repeated id":
        _rewrite(int_ct, nodes={**nodes, "node_id": [B + 11, B + 11, B + 33, B + 44, B + 55]})
    elif damage == "parallel edges":
        _rewrite(int_ct, edges=_edges(source_index=[1, 0, 2, 2, 3, 4],
                                      target_index=[0, 1, 1, 1, 2, 3]))
    elif damage == "bad sign":
        _rewrite(int_ct, edges=_edges(sign=[1, 1, -1, 1, 2, 0]))
    else:
        meta = json.loads((int_ct / "metadata.json").read_text())
        if damage == "count mismatch":
            meta["num_edges"] = 7
        else:
            meta["schema_version"] = 2
        (int_ct / "metadata.json").write_text(json.dumps(meta))
    code, _, err = cli_run(capsys, "simulate", str(int_ct), "--excite", "id:0", "--duration",
                           "10ms", "--out", str(int_ct.parent / "s.parquet"))
    one_error_line(code, err, expected)
    assert not (int_ct.parent / "s.parquet").exists()


def test_info_describes_a_brain_and_the_model_commands_say_where_it_runs(int_ct: Path,
                                                                         capsys) -> None:
    meta = json.loads((int_ct / "metadata.json").read_text())
    code, out, err = cli_run(capsys, "info", str(int_ct), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert (info["nodes"], info["edges"], info["node_ids"]) == (5, 6, "int64")
    assert info["edge_columns"] == ["synapse_count", "weight", "sign"]
    assert (info["fingerprint"], info["content_hash"]) == (meta["fingerprint"],
                                                           meta["content_hash"])
    assert info["spiking"]["w_syn_mV"] == pytest.approx(0.192)
    assert info["spiking"]["signed_count"] == "synapse_count x sign (0 read as +1)"
    code, out, err = cli_run(capsys, "info", str(int_ct))
    assert code == 0 and "(recomputed: matches)" in out and "male-cns:v1.0" in out, err
    code, _, err = cli_run(capsys, "generate", str(int_ct), "--prompt", "a")
    one_error_line(code, err, "is a ConnecTorch brain", "flyviz simulate", "flyviz null",
                   "flyviz info checks its digests")
    code, _, err = cli_run(capsys, "verify", str(int_ct))
    one_error_line(code, err, "is a ConnecTorch brain", "flyviz info checks its digests")
    # A .ct that is not there: the brains simulate reads are named, .ct folders among them.
    code, _, err = cli_run(capsys, "simulate", str(int_ct.parent / "other.ct"), "--out",
                           str(int_ct.parent / "s.parquet"))
    one_error_line(code, err, "no spiking brain at", "a ConnecTorch .ct folder")


def test_a_ct_path_that_is_a_file_is_said_to_need_the_folder(tmp_path: Path, capsys) -> None:
    """Not "no connectivity table beside brain.ct": a .ct brain is a folder."""
    path = tmp_path / "brain.ct"
    path.write_bytes(b"not a folder")
    code, _, err = cli_run(capsys, "simulate", str(path), "--duration", "5ms", "--out",
                           str(tmp_path / "s.parquet"))
    one_error_line(code, err, "is a file, but a ConnecTorch .ct brain is a folder")
    assert "connectivity table" not in err and not (tmp_path / "s.parquet").exists()


def test_selector_on_a_ct_brain_says_it_applies_to_releases_only(int_ct: Path, capsys) -> None:
    """Not "the release's manifest.json not found ... download it again"."""
    code, _, err = cli_run(capsys, "info", str(int_ct), "--selector", "maximum_validation_accuracy")
    one_error_line(code, err, "--selector applies only to fly-wordbrain releases",
                   "is a ConnecTorch brain", "leave --selector out")
    assert "not found" not in err and "download" not in err


# ------------------------------------------------------------------ as a spiking brain
@pytest.mark.usefixtures("spiking_kernels")
def test_a_ct_brain_runs_as_a_spiking_brain_on_its_signed_synapse_counts(int_ct: Path,
                                                                         capsys) -> None:
    import pandas as pd

    from flyviz.kinds.spiking import SpikingModel
    from flyviz.spiking import load_brain

    brain = load_brain(str(int_ct))
    assert brain.root_ids.tolist() == SORTED_IDS
    assert brain.cell_type == ["T11", "T22", "T33", "T44", "T55"]
    assert brain.w_syn == pytest.approx(0.192)        # its provenance names MaleCNS
    # synapse_count x sign (0 read as +1), grouped by presynaptic neuron.
    signed = {(s, t): c * (g or 1) for s, t, c, g in zip(SOURCE_INDEX, TARGET_INDEX, SYNAPSES,
                                                          SIGNS)}
    got = {(pre, int(post)): float(count) for pre in range(5)
           for post, count in zip(brain.post[brain.indptr[pre]:brain.indptr[pre + 1]],
                                  brain.counts[brain.indptr[pre]:brain.indptr[pre + 1]])}
    assert got == signed
    # The app reopens a spiking recording's brain through the same loader.
    assert SpikingModel.load(str(int_ct)).brain.counts.tolist() == brain.counts.tolist()

    out = int_ct.parent / "spikes.parquet"
    code, text, err = cli_run(capsys, "simulate", str(int_ct), "--excite", "type:T11", "--rate",
                              "200", "--duration", "100ms", "--out", str(out))
    assert code == 0, err
    table = pd.read_parquet(out)
    assert set(table["flywire_id"]) <= set(SORTED_IDS) and (table["flywire_id"] == B + 11).any()
    assert "brain: 5 neurons, 6 synapses; 1 excited" in text
    code, _, err = cli_run(capsys, "simulate", str(int_ct), "--connectivity", str(out),
                           "--excite", "id:0", "--out", str(int_ct.parent / "x.parquet"))
    one_error_line(code, err, "is a ConnecTorch brain", "leave out --connectivity")


def test_text_ids_number_the_neurons_by_index() -> None:
    from flyviz.spiking import brain_from_connectorch

    brain = brain_from_connectorch(_string_brain())
    assert brain.root_ids.tolist() == [0, 1, 2, 3] and brain.w_syn == pytest.approx(0.275)
    assert brain.counts.tolist() == [0.5, 1.5, 0.25] and brain.post.tolist() == [1, 3, 1]


# ------------------------------------------------------------------ as a graph for nulls
def _random_brain(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    n = 30
    pairs = rng.choice(n * n, size=160, replace=False)
    source, target = pairs // n, pairs % n
    keep = source != target
    source, target = source[keep] + 100, target[keep] + 100
    types = [f"T{i % 4}" for i in range(n)]
    return write_brain(build_brain(source, target, node_ids=np.arange(100, 100 + n),
                                   node_columns={"cell_type": types},
                                   synapse_count=rng.integers(1, 9, source.size),
                                   sign=rng.choice(np.array([-1, 1], np.int8), source.size)),
                       tmp_path / "random.ct")


def _degrees(brain: ConnecTorchBrain) -> tuple[list[int], list[int]]:
    n = brain.num_nodes
    return (np.bincount(brain.source_index, minlength=n).tolist(),
            np.bincount(brain.target_index, minlength=n).tolist())


def _rows(brain: ConnecTorchBrain) -> list[tuple[int, int, int]]:
    """Each edge's source and attributes (what a degree null keeps of every edge)."""
    return sorted(zip(brain.source_index.tolist(), brain.edge_columns["synapse_count"].tolist(),
                      brain.edge_columns["sign"].tolist()))


def _in_degrees(brain: ConnecTorchBrain, sign: int) -> list[int]:
    pick = brain.edge_columns["sign"] == sign
    return np.bincount(brain.target_index[pick], minlength=brain.num_nodes).tolist()


def _type_pairs(brain: ConnecTorchBrain) -> list[tuple[str, str]]:
    types = brain.node_columns["cell_type"]
    return sorted(zip(types[brain.source_index].tolist(), types[brain.target_index].tolist()))


def test_flyviz_null_of_a_ct_brain_writes_a_ct_brain_that_keeps_what_its_kind_promises(
        tmp_path: Path, capsys) -> None:
    real_path = _random_brain(tmp_path)
    real = read_brain(real_path)
    for kind in ("degree", "degree-sign", "type-pairs", "weights", "sign", "erdos"):
        out = tmp_path / "nulls" / f"{kind}.ct"      # nulls/ is made by the first
        code, text, err = cli_run(capsys, "null", str(real_path), "--kind", kind, "--seed", "1",
                                  "--out", str(out))
        assert code == 0, err
        assert f"wrote {kind} null, seed 1" in text and "random.ct" in text
        null = read_brain(out)                           # both digests hold
        assert null.node_ids.tolist() == real.node_ids.tolist()
        assert null.node_columns["cell_type"].tolist() == real.node_columns["cell_type"].tolist()
        record = null.provenance["null_model"]
        assert (record["kind"], record["seed"]) == (kind, 1)
        assert record["source"]["fingerprint"] == json.loads(
            (real_path / "metadata.json").read_text())["fingerprint"]
        assert null.provenance["history"][-1]["op"] == "flyviz null"
        keys = null.target_index * 30 + null.source_index
        assert (np.diff(keys) > 0).all()                 # ConnecTorch's order, simple graph
        moved = np.mean(keys != real.target_index * 30 + real.source_index)
        if kind in ("degree", "degree-sign", "type-pairs"):
            assert _degrees(null) == _degrees(real) and _rows(null) == _rows(real) and moved > 0.3
        if kind == "degree-sign":
            for sign in (-1, 1):
                assert _in_degrees(null, sign) == _in_degrees(real, sign)
        if kind == "type-pairs":
            assert _type_pairs(null) == _type_pairs(real)
        if kind in ("weights", "sign"):
            assert moved == 0 and sorted(null.edge_columns["sign"].tolist()) == \
                sorted(real.edge_columns["sign"].tolist())
            column = "synapse_count" if kind == "weights" else "sign"
            assert (null.edge_columns[column] != real.edge_columns[column]).any()
        if kind == "sign":
            assert null.edge_columns["synapse_count"].tolist() == \
                real.edge_columns["synapse_count"].tolist()
        if kind == "erdos":
            assert null.num_edges == real.num_edges and moved > 0.8
            assert (null.source_index != null.target_index).all()
    code, text, err = cli_run(capsys, "info", str(tmp_path / "nulls" / "degree.ct"))
    assert code == 0 and "degree null, seed 1, targets permuted" in text, err
    # The same seed writes the same brain.
    assert cli_run(capsys, "null", str(real_path), "--kind", "degree", "--seed", "1", "--out",
                   str(tmp_path / "again.ct"))[0] == 0
    assert (json.loads((tmp_path / "again.ct" / "metadata.json").read_text())["content_hash"] ==
            json.loads((tmp_path / "nulls" / "degree.ct" / "metadata.json").read_text())
            ["content_hash"])


def test_a_null_a_ct_brain_cannot_have_is_one_line_and_writes_nothing(tmp_path: Path,
                                                                      capsys) -> None:
    words = write_brain(_string_brain(), tmp_path / "worm.ct")
    for kind, expected in (("type-pairs", "needs the nodes' cell types (a cell_type node "
                                          "column)"),
                           ("sign", "a sign null needs signed edges")):
        code, _, err = cli_run(capsys, "null", str(words), "--kind", kind, "--out",
                               str(tmp_path / "n.ct"))
        one_error_line(code, err, expected)
    code, _, err = cli_run(capsys, "null", str(words), "--dataset", str(tmp_path), "--out",
                           str(tmp_path / "n.ct"))
    one_error_line(code, err, "leave out --dataset")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["worm.ct"]


# ------------------------------------------------------------------ in the app
def test_the_app_opens_a_ct_folder_as_a_spiking_brain(qtbot, tmp_path: Path) -> None:
    """File → Open model folder on a .ct brain shows it as a spiking brain (a damaged one is a
    line in the status bar and changes nothing)."""
    pytest.importorskip("pytestqt")
    pytest.importorskip("vispy")
    from app_conftest import lit_count, make_window

    from flyviz.app._testing import make_app_checkpoint
    from flyviz.kinds.spiking import SPIKING, SpikingModel

    good = _random_brain(tmp_path)
    bad = write_brain(_int_brain(), tmp_path / "bad.ct")
    meta = json.loads((bad / "metadata.json").read_text())
    meta["content_hash"] = "0123456789abcdef"
    (bad / "metadata.json").write_text(json.dumps(meta))
    win = make_window(qtbot, make_app_checkpoint(tmp_path / "model"), tmp_path)
    try:
        feature = win.features["spiking"]
        before = lit_count(win.brain.canvas.render())
        win.files.open_model_folder(bad)
        qtbot.waitUntil(lambda: "content hash differs" in win.statusBar().currentMessage(),
                        timeout=30_000)
        assert win.state.kind is not SPIKING and win.state.neurons == 400
        win.files.open_model_folder(good)
        qtbot.waitUntil(lambda: win.state.kind is SPIKING and not feature.opening_busy,
                        timeout=30_000)
        model = win.state.model
        assert isinstance(model, SpikingModel) and model.neurons == 30
        assert Path(model.spec) == good.resolve()        # what a recording names to reopen it
        assert model.brain.cell_type == [f"T{i % 4}" for i in range(30)]
        assert not win.docks["stimulus"].isHidden()
        win.refresh_panels()
        image = win.brain.canvas.render()
        # 30 neurons on a generic layout where 400 were: fewer lit pixels, but some.
        assert 0 < lit_count(image) < before
    finally:
        win.close()


def test_connectorchs_bundled_sample_reads_with_its_published_digests() -> None:
    """Where ConnecTorch is installed (a developer's machine), its bundled MaleCNS sample reads
    with the digests its metadata.json publishes (fly-family-2026.md §4.1)."""
    import importlib.util

    spec = importlib.util.find_spec("connectorch")   # found, not imported (it imports torch)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("connectorch is not installed")
    sample = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / \
        "malecns_sample.ct"
    if not sample.is_dir():
        pytest.skip("this connectorch has no bundled malecns_sample.ct")
    brain = read_brain(sample)
    assert (brain.num_nodes, brain.num_edges) == (100, 3630)
    assert (fingerprint(brain), content_hash(brain)) == ("c5a303ffe2b8ff4b", "e315ebfef3ffe885")


def test_a_model_folder_named_ct_is_still_a_model(tmp_path: Path, capsys) -> None:
    from flyviz.model.formats.connectorch import is_connectorch_brain
    from flyviz.model.synthetic import make_flygpt_tensors
    from flyviz.model.writers import write_flygpt

    folder = write_flygpt(make_flygpt_tensors(seed=3), tmp_path / "model.ct")
    assert not is_connectorch_brain(folder)
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    assert code == 0 and json.loads(out)["layout"] == "flygpt", err
    empty = tmp_path / "empty.ct"
    empty.mkdir()
    assert not is_connectorch_brain(empty)
    (empty / "edges.parquet").write_bytes(b"")
    assert is_connectorch_brain(empty)                  # read as one, and refused for its files
