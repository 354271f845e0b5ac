"""fly-connectome-malecns-166k (fly-family-2026.md §2): read exactly as published, its 17
verifier checks, a spiking brain, a label and population source, and the 49k subset.

Every fixture is written by flyviz's own writer (:func:`write_malecns_dataset`) in the
published layout and dtypes: a 300-neuron asymmetric graph with rows that have no inputs,
raw signed weights that are synapse counts x 0.275, untyped neurons (``""``) and
unreachable neurons (-1 hops).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz.errors import SelectionError
from flyviz.model.checks import MALECNS_CHECKS
from flyviz.model.formats.malecns import (CENTRAL_BRAIN_SCALE, CENTRAL_BRAIN_SUPERCLASSES,
                                          MALECNS_FILES, central_brain_graph, check_malecns,
                                          join_central_brain, load_malecns, summary_line)
from flyviz.model.synthetic import make_malecns_arrays
from flyviz.model.writers import write_malecns_dataset

#: Every file the authors' packager writes, with its dtype (§2.1).
PUBLISHED = {"graph/edges_offsets.i32": "<i4", "graph/edges_source.i32": "<i4",
             "graph/edges_weight.f32": "<f4", "neurons/body_id.i64": "<i8",
             "neurons/superclass_index.i32": "<i4", "neurons/cell_type_index.i32": "<i4",
             "derived/hops_from_retina.i32": "<i4", "derived/hops_to_descending.i32": "<i4",
             "populations/retina.i32": "<i4", "populations/lamina.i32": "<i4",
             "populations/descending.i32": "<i4", "populations/sugar.i32": "<i4"}


@pytest.fixture(scope="module")
def arrays() -> dict:
    return make_malecns_arrays(neurons=300, edges=3000, seed=3)


@pytest.fixture(scope="module")
def malecns(tmp_path_factory, arrays) -> Path:
    return write_malecns_dataset(tmp_path_factory.mktemp("malecns") / "malecns-166k", **arrays)


def _raw(root: Path, relative: str) -> np.ndarray:
    return np.fromfile(root / relative, dtype=PUBLISHED[relative])


def _copy(malecns: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(malecns, tmp_path / "copy"))


def _rewrite(root: Path, name: str, array: np.ndarray, *, rehash: bool = True) -> None:
    """Write logical file ``name`` again; with ``rehash`` its manifest entry follows (so
    only the check that reads the content can notice)."""
    manifest = json.loads((root / "manifest.json").read_text())
    entry = manifest["files"][name]
    data = np.ascontiguousarray(array, dtype=np.dtype(entry["dtype"]).newbyteorder("<"))
    (root / entry["file"]).write_bytes(data.tobytes())
    if rehash:
        entry.update(shape=list(data.shape), bytes=data.nbytes,
                     sha256=hashlib.sha256(data.tobytes()).hexdigest())
        (root / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _edit_manifest(root: Path, edit) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    edit(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2))


# ------------------------------------------------------------------------ the layout
def test_fixture_is_the_published_layout(malecns, arrays):
    files = sorted(str(p.relative_to(malecns)) for p in malecns.rglob("*") if p.is_file())
    assert files == sorted([*PUBLISHED, "neurons/superclass_labels.json",
                            "neurons/cell_type_labels.json", "manifest.json"])
    manifest = json.loads((malecns / "manifest.json").read_text())
    n, e = manifest["neurons"], manifest["edges"]
    assert (n, e) == (300, arrays["weight"].size)
    # Keyed by logical name; arrays {file, dtype, shape, bytes, sha256}, JSON without a dtype.
    assert set(manifest["files"]) == set(MALECNS_FILES) | {f"population_{p}" for p in
                                                            ("retina", "lamina", "descending",
                                                             "sugar")}
    for entry in manifest["files"].values():
        raw = (malecns / entry["file"]).read_bytes()
        assert entry["bytes"] == len(raw) and entry["sha256"] == hashlib.sha256(raw).hexdigest()
        if entry["file"].endswith(".json"):
            assert set(entry) == {"file", "bytes", "sha256"}
            # json.dumps(indent=2, ensure_ascii=False) + "\n", a sorted table of the labels.
            labels = json.loads(raw)
            assert raw.decode() == json.dumps(labels, indent=2, ensure_ascii=False) + "\n"
            assert labels == sorted(set(labels))
        else:
            assert set(entry) == {"file", "dtype", "shape", "bytes", "sha256"}
            assert entry["dtype"] == np.dtype(PUBLISHED[entry["file"]]).name
            assert entry["bytes"] == int(np.prod(entry["shape"])) * np.dtype(entry["dtype"]).itemsize
    assert manifest["weights"]["raw"] is True and manifest["weights"]["normalization_applied"] \
        is False
    offsets = _raw(malecns, "graph/edges_offsets.i32")
    source = _raw(malecns, "graph/edges_source.i32")
    weight = _raw(malecns, "graph/edges_weight.f32")
    body = _raw(malecns, "neurons/body_id.i64")
    assert offsets.size == n + 1 and source.size == weight.size == e
    assert np.all(np.diff(body) > 0)                     # ascending body ids
    assert np.count_nonzero(np.diff(offsets) == 0) >= 20  # rows with no inputs
    post = np.repeat(np.arange(n), np.diff(offsets))
    pairs = set(zip(post.tolist(), source.tolist()))
    assert sum((b, a) not in pairs for a, b in pairs) > 0.9 * len(pairs)  # asymmetric
    assert "" in json.loads((malecns / "neurons/cell_type_labels.json").read_text())
    assert (weight < 0).any() and (weight > 0).any() and not (weight == 0).any()


def _bfs(n: int, edges: list[tuple[int, int]], start: np.ndarray) -> np.ndarray:
    """Hops from ``start`` along ``edges`` (a -> b), -1 where unreachable."""
    nxt: dict[int, list[int]] = {}
    for a, b in edges:
        nxt.setdefault(a, []).append(b)
    hops = np.full(n, -1)
    queue = deque(int(s) for s in start)
    hops[list(queue)] = 0
    while queue:
        a = queue.popleft()
        for b in nxt.get(a, ()):
            if hops[b] < 0:
                hops[b] = hops[a] + 1
                queue.append(b)
    return hops


def test_hop_counts_are_unweighted_shortest_paths(malecns):
    offsets = _raw(malecns, "graph/edges_offsets.i32")
    source = _raw(malecns, "graph/edges_source.i32")
    n = offsets.size - 1
    post = np.repeat(np.arange(n), np.diff(offsets))
    forward = list(zip(source.tolist(), post.tolist()))
    from_retina = _bfs(n, forward, _raw(malecns, "populations/retina.i32"))
    to_descending = _bfs(n, [(b, a) for a, b in forward],
                         _raw(malecns, "populations/descending.i32"))
    assert np.array_equal(_raw(malecns, "derived/hops_from_retina.i32"), from_retina)
    assert np.array_equal(_raw(malecns, "derived/hops_to_descending.i32"), to_descending)
    assert from_retina.min() == -1 and from_retina.max() >= 2


# ------------------------------------------------------------------------ 17 checks
def test_the_17_checks_pass_in_the_authors_order(malecns):
    rows = check_malecns(malecns)
    assert [r.authors_check for r in rows] == list(range(1, 18))
    assert [r.name for r in rows] == [MALECNS_CHECKS[i] for i in range(1, 18)]
    assert all(r.status == "pass" for r in rows), [r for r in rows if r.status != "pass"]
    manifest = json.loads((malecns / "manifest.json").read_text())
    cell_types = len(json.loads((malecns / "neurons/cell_type_labels.json").read_text()))
    assert summary_line(rows, manifest) == (
        f"All 17 checks passed: 300 neurons, {manifest['edges']:,} edges, {cell_types:,} cell "
        "types, 4 named populations.")


def _corrupt(root: Path, check: int) -> None:
    """Break exactly what check ``check`` reads."""
    n = 300
    offsets = _raw(root, "graph/edges_offsets.i32").copy()
    source = _raw(root, "graph/edges_source.i32").copy()
    weight = _raw(root, "graph/edges_weight.f32").copy()
    if check == 1:  # a changed file the manifest's digest no longer describes
        weight[5] *= 2
        _rewrite(root, "edges_weight", weight, rehash=False)
    elif check == 2:
        _rewrite(root, "edges_source", np.append(source, 0))
    elif check == 3:
        k = int(np.flatnonzero(np.diff(offsets[1:-1]) > 0)[0]) + 1
        offsets[k], offsets[k + 1] = offsets[k + 1], offsets[k]
        _rewrite(root, "edges_offsets", offsets)
    elif check == 4:
        offsets[-1] -= 1
        _rewrite(root, "edges_offsets", offsets)
    elif check == 5:
        source[7] = n
        _rewrite(root, "edges_source", source)
    elif check == 6:
        weight[3] = np.copysign(np.inf, weight[3])
        _rewrite(root, "edges_weight", weight)
    elif check == 7:
        _edit_manifest(root, lambda m: m["weights"].update(negative_edges=m["weights"]
                                                           ["negative_edges"] + 1))
    elif check in (8, 9):
        name = "superclass" if check == 8 else "cell_type"
        index = _raw(root, f"neurons/{name}_index.i32").copy()
        index[0] = len(json.loads((root / f"neurons/{name}_labels.json").read_text()))
        _rewrite(root, f"{name}_index", index)
    elif check == 10:
        body = _raw(root, "neurons/body_id.i64").copy()
        body[1] = body[0]
        _rewrite(root, "body_id", body)
    elif check in (11, 12, 13, 14):
        name = ("retina", "lamina", "descending", "sugar")[check - 11]
        members = _raw(root, f"populations/{name}.i32").copy()
        members[0] = n
        _rewrite(root, f"population_{name}", members)
    elif check in (15, 16):
        name = ("hops_from_retina", "hops_to_descending")[check - 15]
        hops = _raw(root, f"derived/{name}.i32").copy()
        hops[4] = -2
        _rewrite(root, name, hops)
    else:
        _edit_manifest(root, lambda m: m["weights"].update(normalization_applied=True))


@pytest.mark.parametrize("check", range(1, 18))
def test_each_check_fails_alone_when_its_data_is_corrupted(malecns, tmp_path, check):
    root = _copy(malecns, tmp_path)
    _corrupt(root, check)
    rows = check_malecns(root)
    assert len(rows) == 17
    failed = [r.authors_check for r in rows if r.status == "fail"]
    assert failed == [check], [(r.name, r.detail) for r in rows if r.status == "fail"]
    assert summary_line(rows, {}) == "1 check(s) failed."


def test_flyviz_verify_reports_each_check(malecns, tmp_path, capsys):
    code, out, _ = cli_run(capsys, "verify", str(malecns))
    assert code == 0
    lines = out.splitlines()
    for number in range(1, 18):
        assert any(f"authors {number} " in line and MALECNS_CHECKS[number] in line
                   and line.split()[-1] != "FAIL" for line in lines), number
    assert lines[-1].startswith("All 17 checks passed: 300 neurons")
    code, out, _ = cli_run(capsys, "verify", str(malecns), "--json")
    report = json.loads(out)
    assert code == 0 and report["passed"] and len(report["checks"]) == 17
    assert [c["authors_name"] for c in report["checks"]] == [MALECNS_CHECKS[i]
                                                             for i in range(1, 18)]
    root = _copy(malecns, tmp_path)
    _corrupt(root, 9)
    code, out, _ = cli_run(capsys, "verify", str(root))
    assert code == 1
    assert "FAIL" in next(line for line in out.splitlines() if "authors 9 " in line)
    assert out.splitlines()[-1] == f"1 check(s) failed: authors 9 {MALECNS_CHECKS[9]}."
    # Counts read as counts: "1,839", not "1839".
    root = _copy(malecns, tmp_path / "signs")
    _corrupt(root, 7)
    code, out, _ = cli_run(capsys, "verify", str(root))
    line = next(line for line in out.splitlines() if "authors 7 " in line)
    manifest = json.loads((root / "manifest.json").read_text())
    want = manifest["weights"]["negative_edges"], manifest["weights"]["positive_edges"]
    assert code == 1 and max(want) >= 1000
    assert f"the manifest says {want[0]:,} and {want[1]:,}" in line, line


@pytest.mark.parametrize("damage, expected", [
    ("missing", "populations/sugar.i32 is missing"),
    ("truncated", "graph/edges_weight.f32 is"),
    ("failed check", "superclass_index.i32 holds"),
    ("out of range", "graph/edges_source.i32 holds neuron 300, outside 0..299"),
    ("outside the folder", "the manifest puts body_id at '../body_id.i64', outside the dataset"),
    # Not truncated to 300 neurons: a count that is not whole is a damaged manifest.
    ("fractional count", "the manifest's neurons 300.7 is not a whole number"),
    # Text is not a count, though Python's int() would read "300" as one.
    ("text count", "the manifest's neurons '300' is not a whole number"),
    ("text population", "the manifest's populations.sugar count '6' is not a whole number"),
    ("text sign count", "the manifest says '862' (not a whole number) and 1,839"),
    ("null count", "the manifest gives no edges count"),
])
def test_bad_input_is_one_line_exit_2(malecns, tmp_path, capsys, damage, expected):
    root = _copy(malecns, tmp_path)
    if damage == "missing":
        (root / "populations/sugar.i32").unlink()
    elif damage == "truncated":
        path = root / "graph/edges_weight.f32"
        path.write_bytes(path.read_bytes()[:-4])
    elif damage == "failed check":
        _corrupt(root, 8)
    elif damage == "out of range":
        _corrupt(root, 5)
    elif damage == "fractional count":
        _edit_manifest(root, lambda m: m.update(neurons=300.7))
    elif damage == "text count":
        _edit_manifest(root, lambda m: m.update(neurons=str(m["neurons"])))
    elif damage == "text population":
        _edit_manifest(root, lambda m: m["populations"].update(sugar=str(m["populations"]["sugar"])))
    elif damage == "text sign count":
        _edit_manifest(root, lambda m: m["weights"].update(
            negative_edges=str(m["weights"]["negative_edges"])))
    elif damage == "null count":
        _edit_manifest(root, lambda m: m.update(edges=None))
    else:
        shutil.copy(root / "neurons/body_id.i64", tmp_path / "body_id.i64")
        _edit_manifest(root, lambda m: m["files"]["body_id"].update(file="../body_id.i64"))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for argv in (["simulate", str(root), "--duration", "5ms", "--out",
                  str(tmp_path / "s.parquet")], ["info", str(root)]):
        code, _, err = cli_run(capsys, *argv)
        one_error_line(code, err, expected)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing left behind


@pytest.mark.parametrize("files", [[], "x", None])
def test_a_manifest_whose_files_are_not_an_object_is_said_to_be_damaged(malecns, tmp_path,
                                                                       capsys, files):
    """Not taken for a fly-connectome-49k graph ("is a connectome dataset ... not a model")."""
    root = _copy(malecns, tmp_path)
    _edit_manifest(root, lambda m: m.update(files=files))
    for argv in (("info",), ("verify",), ("simulate", "--duration", "5ms", "--out",
                                          str(tmp_path / "s.parquet"))):
        code, _, err = cli_run(capsys, argv[0], str(root), *argv[1:])
        one_error_line(code, err, "its files block is", "not an object",
                       "the fly-connectome-malecns-166k manifest is damaged")
        assert "connectome dataset (the graph only)" not in err
    # Its name gone too, the label files only this dataset has still say which it is.
    _edit_manifest(root, lambda m: m.pop("name"))
    code, _, err = cli_run(capsys, "info", str(root))
    one_error_line(code, err, "the fly-connectome-malecns-166k manifest is damaged")


def test_selector_on_the_dataset_says_it_applies_to_releases_only(malecns, capsys):
    """Not "has no selector 'foo'; its manifest's selectors are none"."""
    for argv in (("info",), ("verify",)):
        code, _, err = cli_run(capsys, argv[0], str(malecns), "--selector", "foo")
        one_error_line(code, err, "--selector applies only to fly-wordbrain releases",
                       "fly-connectome-malecns-166k dataset", "leave --selector out")
        assert "no selector 'foo'" not in err


# ------------------------------------------------------------------- spiking brain
#: The spiking engine's kernels, compiled once for all the test workers (tests/conftest.py):
#: without it a worker that reaches these tests first compiles them a second time.
needs_kernels = pytest.mark.usefixtures("spiking_kernels")


@needs_kernels
def test_a_spiking_brain_of_signed_synapse_counts(malecns, capsys):
    from flyviz.spiking import load_brain
    from flyviz.spiking.brain import MALECNS_W_SYN

    brain = load_brain(str(malecns))
    offsets = _raw(malecns, "graph/edges_offsets.i32")
    source = _raw(malecns, "graph/edges_source.i32")
    weight = _raw(malecns, "graph/edges_weight.f32")
    body = _raw(malecns, "neurons/body_id.i64")
    assert brain.neurons == 300 and np.array_equal(brain.root_ids, body)
    assert brain.w_syn == MALECNS_W_SYN
    # Each edge pre -> post once, its count the raw weight over one synapse's 0.275, signed.
    post = np.repeat(np.arange(300), np.diff(offsets))
    expected = sorted(zip(source.tolist(), post.tolist(),
                          np.rint(weight.astype(np.float64) / np.float32(0.275)).tolist()))
    pre = np.repeat(np.arange(300), np.diff(brain.indptr))
    assert sorted(zip(pre.tolist(), brain.post.tolist(), brain.counts.tolist())) == expected
    assert np.all(brain.counts == np.rint(brain.counts))
    # Grouped by presynaptic neuron, each one's targets in the dataset's row order.
    order = np.argsort(source, kind="stable")
    assert np.array_equal(brain.post, post[order])
    assert np.array_equal(brain.indptr, np.concatenate([[0], np.cumsum(np.bincount(
        source, minlength=300))]))
    # In the engine: count x w_syn, in volts.
    targets, volts, _ = brain.grouped_rows(MALECNS_W_SYN * 1e-3)
    assert np.allclose(np.sort(volts), np.sort(np.asarray([c for *_, c in expected])
                                               * MALECNS_W_SYN * 1e-3))
    code, out, _ = cli_run(capsys, "info", str(malecns))
    assert code == 0
    assert "signed count = weight / 0.275 (the smallest |weight|, one synapse)" in out
    assert "w_syn 0.192 mV" in out and f"{0.192 / 0.275:.6g} x w mV" in out
    assert "retina 20, lamina 25" in out and "sugar 6" in out


def test_weights_off_a_lattice_are_read_as_the_manifests_counts(arrays, tmp_path, capsys):
    from flyviz.spiking import load_brain

    weight = arrays["weight"]
    # 0.275 x count, some 0.1 or 0.2 further from zero: multiples of no one value.
    odd = dict(arrays, weight=(weight + np.sign(weight) * 0.1 * (np.arange(weight.size) % 3)
                               ).astype(np.float32))
    root = write_malecns_dataset(tmp_path / "odd", **odd)
    brain = load_brain(str(root))
    assert sorted(brain.counts.tolist()) == sorted(odd["weight"].astype(np.float64).tolist())
    code, out, _ = cli_run(capsys, "info", str(root))
    assert code == 0 and "signed count = the raw weight" in out and "0.192 x w mV" in out


def test_populations_superclasses_and_types_in_queries(malecns, arrays):
    from flyviz.spiking import load_brain, select

    brain = load_brain(str(malecns))
    sugar = _raw(malecns, "populations/sugar.i32")
    retina = _raw(malecns, "populations/retina.i32")
    assert np.array_equal(select(brain, "population:sugar"), np.sort(sugar))
    assert np.array_equal(select(brain, "population:Sugar,retina"),
                          np.union1d(sugar, retina))
    labels = json.loads((malecns / "neurons/superclass_labels.json").read_text())
    index = _raw(malecns, "neurons/superclass_index.i32")
    want = np.flatnonzero(index == labels.index("cb_sensory"))
    assert np.array_equal(select(brain, "superclass:cb_sensory"), want)
    assert np.array_equal(select(brain, "superclass:cb_sensory & !population:retina"),
                          np.setdiff1d(want, retina))
    typed = [i for i, t in enumerate(arrays["cell_type"]) if t.startswith("OL1")]
    assert np.array_equal(select(brain, "type:OL1*"), typed)
    with pytest.raises(SelectionError, match="unknown population 'sugr'; did you mean 'sugar'"):
        select(brain, "population:sugr")
    with pytest.raises(SelectionError, match="has no population labels"):
        select(dataclasses.replace(brain, populations=None), "population:sugar")



def test_flyviz_select_on_the_dataset(malecns, capsys):
    code, out, _ = cli_run(capsys, "select", str(malecns), "population:sugar | population:retina",
                           "--json")
    union = np.union1d(_raw(malecns, "populations/sugar.i32"),
                       _raw(malecns, "populations/retina.i32"))
    assert code == 0 and json.loads(out)["indices"] == union.tolist()
    code, _, err = cli_run(capsys, "select", str(malecns), "population:nectar")
    one_error_line(code, err, "unknown population 'nectar'", "retina, lamina, descending, sugar")


@needs_kernels
def test_simulate_and_open_as_a_spiking_brain(malecns, tmp_path, capsys):
    import pandas as pd

    from flyviz.kinds.spiking import BinSettings, Stimulus, SpikingModel, record_run

    out = tmp_path / "sugar.parquet"
    code, text, err = cli_run(capsys, "simulate", str(malecns), "--excite", "population:sugar",
                              "--duration", "30ms", "--out", str(out))
    assert code == 0, err
    spikes = pd.read_parquet(out)
    body = _raw(malecns, "neurons/body_id.i64")
    sugar = body[_raw(malecns, "populations/sugar.i32")]
    assert set(sugar) <= set(spikes["flywire_id"])  # driven at 150 Hz for 30 ms
    assert set(spikes["flywire_id"]) <= set(body)
    # Unless told otherwise, a run excites the sugar population (into a table of its own:
    # the first run's is never written over).
    code, text, err = cli_run(capsys, "simulate", str(malecns), "--duration", "5ms", "--out",
                              str(tmp_path / "default.parquet"))
    assert code == 0 and "6 excited at 150 Hz" in text, err
    model = SpikingModel.load(str(malecns))
    anatomy = model.drawing_anatomy()
    assert anatomy.valid.all() and anatomy.kind == "layout"  # no somata: a generic ball
    assert anatomy.superclass == model.brain.superclass and anatomy.populations is not None
    recording = record_run(model, Stimulus(excite="population:sugar"), BinSettings(bins=3))
    assert recording.metadata["spiking"]["brain"] == str(malecns.resolve())
    assert recording.metadata["spiking"]["excited"] == 6


@needs_kernels
def test_a_recorded_run_reopens_on_its_brain(malecns, tmp_path, capsys):
    from flyviz.kinds.spiking import SPIKING
    from flyviz.record.recording import Recording

    path = tmp_path / "sugar.flyrec"
    code, _, err = cli_run(capsys, "simulate", str(malecns), "--excite", "population:sugar",
                           "--duration", "20ms", "--record", str(path))
    assert code == 0, err
    recording = Recording.load(path)
    model, note = SPIKING.shown_model(recording)
    assert note == "" and model.neurons == 300
    assert np.array_equal(model.brain.root_ids, _raw(malecns, "neurons/body_id.i64"))
    assert sorted(model.brain.populations) == ["descending", "lamina", "retina", "sugar"]
    # Two 10 ms bins; the sugar neurons, driven at 150 Hz (3 Poisson events each expected),
    # fire far above the rest.
    sugar = _raw(malecns, "populations/sugar.i32")
    rates = np.asarray(recording.states(), dtype=np.float64)
    assert rates.shape == (2, 300) and (rates[:, sugar].sum(axis=0) > 0).sum() >= 3
    assert rates[:, sugar].mean() > 5 * rates[:, np.setdiff1d(np.arange(300), sugar)].mean()


# ------------------------------------------------------------------- the 49k subset
def _derive_central_brain(malecns: Path, out: Path, drop_every: int = 7, *,
                          damage: str = "") -> Path:
    """A fly-connectome-49k-layout dataset derived from the 166k fixture as §2.5 says, written
    by flyviz's own 49k writer: the five superclasses' neurons in body-id order, the induced
    edges but every ``drop_every``-th, the weights times the scale."""
    from flyviz.model.checkpoint import Anatomy
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_connectome_dataset

    dataset = load_malecns(malecns)
    keep, offsets, source, weight = central_brain_graph(dataset)
    post = np.repeat(np.arange(keep.size), np.diff(offsets))
    kept = np.arange(weight.size) % drop_every != 3
    if damage == "sign":
        weight[12] = -weight[12]
    elif damage == "scale":
        weight[11] = np.float32(weight[11] * 1.001)
    post, source, weight = post[kept], source[kept], weight[kept]
    if damage == "extra edge":  # one edge MaleCNS does not have
        have = set(zip(post.tolist(), source.tolist()))
        a, b = next((a, b) for a in range(keep.size) for b in range(keep.size)
                    if (a, b) not in have)
        post, source, weight = (np.append(post, a), np.append(source, b),
                                np.append(weight, np.float32(0.001)))
        order = np.lexsort((source, post))
        post, source, weight = post[order], source[order], weight[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(post, minlength=keep.size))])
    ckpt = make_random_checkpoint(neurons=keep.size, edges=40, delay_k=2, vocabulary=16,
                                  d_embed=4, with_anatomy=False)
    ckpt.w_offsets, ckpt.w_indices, ckpt.w_values = (offsets.astype(np.int32),
                                                     source.astype(np.int32), weight)
    body = np.asarray(dataset.body_id)[keep]
    if damage == "order":
        body = body[::-1].copy()
    labels = dataset.superclass_labels()
    ckpt.anatomy = Anatomy(positions=np.zeros((keep.size, 3), np.float32),
                           valid=np.zeros(keep.size, bool), body_id=body,
                           superclass=[labels[i] for i in keep])
    return write_connectome_dataset(ckpt, out)


def test_the_49k_subset_derived_from_the_166k_set_joins_by_body_id(malecns, tmp_path, capsys):
    from flyviz.model.formats.dataset import DatasetFiles, load_connectome_dataset

    central = _derive_central_brain(malecns, tmp_path / "central")
    derived = load_connectome_dataset(central)  # the 49k layout's own 18 checks pass
    full = load_malecns(malecns)
    # Independently of flyviz's join: by body id, every derived edge is a 166k edge with
    # its sign and its weight times the scale, and the neurons are the five superclasses.
    body = np.asarray(full.body_id)
    labels = full.superclass_labels()
    chosen = [i for i in range(full.neurons) if labels[i] in CENTRAL_BRAIN_SUPERCLASSES]
    assert derived.anatomy is not None
    assert list(derived.anatomy.body_id) == [int(body[i]) for i in chosen]
    by_body = {}
    offsets = np.asarray(full.offsets)
    for post in range(full.neurons):
        for e in range(offsets[post], offsets[post + 1]):
            by_body[(int(body[post]), int(body[full.source[e]]))] = float(full.weight[e])
    ids49 = derived.anatomy.body_id
    post49 = np.repeat(np.arange(ids49.size), np.diff(derived.offsets))
    assert len(post49) > 100
    for post, pre, w in zip(post49, derived.indices, derived.values):
        w166 = by_body[(int(ids49[post]), int(ids49[pre]))]
        assert w == np.float32(np.float64(w166) * CENTRAL_BRAIN_SCALE)
    rows = join_central_brain(full, DatasetFiles.open(central))
    assert [r.status for r in rows] == ["pass"] * 4, rows
    induced = sum(1 for (a, b) in by_body if a in set(ids49.tolist()) and b in
                  set(ids49.tolist()))
    assert f"{len(post49):,} of the {induced:,} edges" in rows[1].detail
    code, out, _ = cli_run(capsys, "verify", str(malecns), "--dataset", str(central))
    assert code == 0 and "neurons joined by body id" in out
    assert out.splitlines()[-1].endswith(f"The join to {central} passed (4 checks).")


@pytest.mark.parametrize("damage, failing", [
    ("order", "neurons joined by body id"), ("extra edge", "every edge is a MaleCNS edge"),
    ("sign", "same signs"), ("scale", "weights scaled by"),
])
def test_a_49k_set_that_is_not_the_subset_fails_the_join(malecns, tmp_path, capsys, damage,
                                                         failing):
    from flyviz.model.formats.dataset import DatasetFiles

    central = _derive_central_brain(malecns, tmp_path / "central", damage=damage)
    rows = join_central_brain(load_malecns(malecns), DatasetFiles.open(central))
    assert [r.name for r in rows if r.status == "fail"][0].startswith(failing)
    code, out, _ = cli_run(capsys, "verify", str(malecns), "--dataset", str(central))
    assert code == 1
    # The closing line is written after the join's rows and names what failed.
    closing = out.splitlines()[-1]
    assert closing.startswith(f"The join to {central} failed (") and failing in closing, closing
    assert "though the authors' checks passed: All 17 checks passed" in closing
    code, out, _ = cli_run(capsys, "verify", str(malecns), "--dataset", str(central), "--json")
    report = json.loads(out)
    assert code == 1 and report["passed"] is False
    assert report["summary"].startswith("The join to") and failing in report["summary"]


def test_a_join_skipped_for_a_failed_check_says_so(malecns, tmp_path, capsys):
    """One of the 17 fails: the join is not run, a row says so and why, and the closing
    line names the failed check and the skipped join."""
    central = _derive_central_brain(malecns, tmp_path / "central")
    root = _copy(malecns, tmp_path)
    _corrupt(root, 9)
    code, out, _ = cli_run(capsys, "verify", str(root), "--dataset", str(central))
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("join "))
    assert " skip " in row and "not run: 1 of the authors' checks failed" in row
    assert MALECNS_CHECKS[9] in row
    assert out.splitlines()[-1] == (f"1 check(s) failed: authors 9 {MALECNS_CHECKS[9]}; the "
                                    f"join to {central} was skipped.")
    code, out, _ = cli_run(capsys, "verify", str(root), "--dataset", str(central), "--json")
    report = json.loads(out)
    assert report["passed"] is False
    assert report["checks"][-1]["group"] == "join" and report["checks"][-1]["status"] == "skip"


def test_labels_and_populations_for_a_flygpt_model_by_body_id(malecns, tmp_path):
    from flyviz.model.resolve import load_model
    from flyviz.model.selection import select
    from flyviz.model.synthetic import make_flygpt_tensors
    from flyviz.model.writers import write_flygpt

    full = load_malecns(malecns)
    tensors = make_flygpt_tensors(neurons=40, edges=300)
    # The model's neurons: 38 of the dataset's (the sugar neurons among them), 2 unknown.
    sugar = np.asarray(full.populations["sugar"])
    rest = np.setdiff1d(np.arange(full.neurons), sugar)[::7][:32]
    rows = np.sort(np.concatenate([sugar, rest]))
    ids = np.concatenate([np.asarray(full.body_id)[rows], [1, 2]])
    tensors["graph.node_id"] = ids.astype(np.int64)
    folder = write_flygpt(tensors, tmp_path / "flygpt")
    ckpt = load_model(str(folder), dataset_dir=malecns)
    labels = full.superclass_labels()
    assert ckpt.anatomy is not None and ckpt.anatomy.n_valid == 0  # no somata: laid out
    assert ckpt.anatomy.superclass == [labels[r] for r in rows] + ["", ""]
    model_sugar = np.flatnonzero(np.isin(rows, sugar))
    assert np.array_equal(select(ckpt, "population:sugar"), model_sugar)
    assert ckpt.metadata["body_ids"] == ("38 of 40 neurons labelled by MaleCNS body id from the "
                                         "dataset, which has no soma positions, so the graph "
                                         "is laid out")


def test_info_of_a_flygpt_model_labelled_by_the_dataset_says_it_has_no_positions(
        malecns, tmp_path, capsys):
    """One story: no "0 of 40 (0.0 %), measured" positions beside "no soma positions"."""
    from flyviz.model.synthetic import make_flygpt_tensors
    from flyviz.model.writers import write_flygpt

    tensors = make_flygpt_tensors(neurons=40, edges=300)
    tensors["graph.node_id"] = np.asarray(load_malecns(malecns).body_id)[:40].astype(np.int64)
    folder = write_flygpt(tensors, tmp_path / "flygpt")
    code, out, err = cli_run(capsys, "info", str(folder), "--dataset", str(malecns))
    assert code == 0, err
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip()
            for line in out.splitlines() if "  " in line}
    assert rows["positions"] == "none of the 40 neurons has a soma position: the graph is laid out"
    assert "no soma positions" in rows["body ids"]


def test_info_and_verify_accept_the_datasets_manifest_path(malecns, capsys):
    """The manifest names the dataset as its folder does (flyviz info DIR works)."""
    code, out, err = cli_run(capsys, "info", str(malecns / "manifest.json"))
    assert code == 0, err
    assert "fly-connectome-malecns-166k" in out.splitlines()[0]
    code, out, err = cli_run(capsys, "verify", str(malecns / "manifest.json"))
    assert code == 0 and out.splitlines()[-1].startswith("All 17 checks passed"), err


def test_the_hub_dataset_is_fetched_as_data_only(malecns, monkeypatch, capsys):
    import huggingface_hub

    calls = []

    def snapshot(repo_id, **options):
        calls.append((repo_id, options))
        if options.get("revision") == "gone":
            raise OSError("404 Client Error: Revision Not Found")
        return str(malecns)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)   # an online hub that says 404
    code, out, _ = cli_run(capsys, "info", "fernandofernandes/fly-connectome-malecns-166k@v1")
    assert code == 0 and "populations   retina 20" in out
    repo, options = calls[-1]
    assert repo == "fernandofernandes/fly-connectome-malecns-166k"
    assert options["repo_type"] == "dataset" and options["revision"] == "v1"
    assert all(not p.endswith(".py") for p in options["allow_patterns"])
    code, _, err = cli_run(capsys, "simulate", "fernandofernandes/fly-connectome-malecns-166k@gone",
                           "--out", "never.parquet")
    one_error_line(code, err, "cannot get fernandofernandes/fly-connectome-malecns-166k",
                   "Revision Not Found", "into a folder")


def _published(repo: str, variable: str, marker: str) -> Path:
    """The published dataset: the folder ``$variable`` names, else the Hugging Face cache's
    copy (never downloaded here); a skip without it."""
    import os

    given = os.environ.get(variable)
    if given:
        return Path(given)
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo, repo_type="dataset", local_files_only=True))
    except Exception:  # not cached, or huggingface_hub cannot say: nothing to test on
        pytest.skip(f"{repo} is not here (set {variable} to its folder)")
    if not (folder / marker).is_file():
        pytest.skip(f"the cached {repo} is incomplete")
    return folder


@pytest.mark.slow
def test_the_published_dataset(capsys):
    """The real fly-connectome-malecns-166k (skipped without it): the authors' 17 checks and
    the dataset card's figures; with the real fly-connectome-49k too, the §2.5 join."""
    from flyviz.model.formats.dataset import DatasetFiles

    folder = _published("fernandofernandes/fly-connectome-malecns-166k",
                        "FLYVIZ_MALECNS_166K", "graph/edges_source.i32")
    rows = check_malecns(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert summary_line(rows, manifest) == (
        "All 17 checks passed: 166,700 neurons, 25,582,938 edges, 11,752 cell types, 4 named "
        "populations.")
    dataset = load_malecns(folder, verify=False)
    info = dataset.describe()
    assert info["weights"]["positive_edges"] == 15_768_940
    assert info["weights"]["negative_edges"] == 9_813_998
    assert len(info["superclasses"]) == 27
    assert info["superclasses"]["ol_intrinsic"] == 89_403
    assert info["superclasses"]["cb_intrinsic"] == 32_164
    assert info["populations"] == {"retina": 3335, "lamina": 7114, "descending": 1314,
                                   "sugar": 23}
    assert np.all(np.diff(np.asarray(dataset.body_id)) > 0)
    central = _published("fernandofernandes/fly-connectome-49k", "FLYVIZ_CONNECTOME_49K",
                         "graph/edges_source.u16")
    rows = join_central_brain(dataset, DatasetFiles.open(central))
    assert [r.status for r in rows] == ["pass"] * 4, rows
    assert rows[1].detail.startswith("9,050,172 of the 9,679,074 edges")


def test_the_fly_llm_labelled_by_its_central_brain_subset(malecns, tmp_path, capsys):
    """§2.5 put to use: ngxson's layout carries no body ids, and its neurons are the 166k
    set's central-brain neurons in order, so the 166k set labels them."""
    from flyviz.model.resolve import load_model
    from flyviz.model.selection import select
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_fly_llm_hf

    full = load_malecns(malecns)
    labels = full.superclass_labels()
    central = [i for i in range(full.neurons) if labels[i] in CENTRAL_BRAIN_SUPERCLASSES]
    folder = write_fly_llm_hf(make_random_checkpoint(len(central), 600, d_embed=4, delay_k=2,
                                                     vocabulary=16, with_anatomy=False),
                              tmp_path / "fly-llm")
    ckpt = load_model(str(folder), dataset_dir=malecns)
    assert ckpt.anatomy is not None and ckpt.anatomy.n_valid == 0
    assert list(ckpt.anatomy.body_id) == [int(full.body_id[i]) for i in central]
    assert ckpt.anatomy.superclass == [labels[i] for i in central]
    sugar = [k for k, i in enumerate(central) if i in set(full.populations["sugar"].tolist())]
    assert sugar and select(ckpt, "population:sugar").tolist() == sugar
    descending = [k for k, i in enumerate(central)
                  if i in set(full.populations["descending"].tolist())]
    assert descending and select(ckpt, "population:descending").tolist() == descending
    code, out, _ = cli_run(capsys, "info", str(folder), "--dataset", str(malecns))
    assert code == 0 and f"of the {len(central):,} central-brain neurons" in out
    # A model of another size does not belong to it: one line, exit 2.
    other = write_fly_llm_hf(make_random_checkpoint(len(central) + 1, 600, d_embed=4,
                                                    delay_k=2, vocabulary=16,
                                                    with_anatomy=False), tmp_path / "other")
    code, _, err = cli_run(capsys, "info", str(other), "--dataset", str(malecns))
    one_error_line(code, err, f"describes {len(central):,} neurons", "do not belong together")
