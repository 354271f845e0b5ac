"""The brain's outline: a shell from the somas, and meshes read from files."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from flyviz.analysis.outline import Mesh, load_mesh, soma_outline
from flyviz.errors import InputError, MissingDependencyError


def inside_mesh(points: np.ndarray, mesh: Mesh, seed: int = 0) -> np.ndarray:
    """Whether each point is inside the closed mesh: the parity of a ray's crossings
    (Moller-Trumbore against every triangle; a random direction avoids edges)."""
    direction = np.random.default_rng(seed).normal(size=3)
    direction /= np.linalg.norm(direction)
    v = mesh.vertices.astype(np.float64)
    a, b, c = v[mesh.faces[:, 0]], v[mesh.faces[:, 1]], v[mesh.faces[:, 2]]
    e1, e2 = b - a, c - a
    h = np.cross(direction, e2)
    det = np.einsum("ij,ij->i", e1, h)
    ok = np.abs(det) > 1e-12
    e1, e2, a, h, det = e1[ok], e2[ok], a[ok], h[ok], det[ok]
    result = np.empty(len(points), dtype=bool)
    for start in range(0, len(points), 64):
        p = points[start:start + 64, None, :].astype(np.float64)
        s = p - a[None]
        u = np.einsum("pij,ij->pi", s, h) / det
        q = np.cross(s, e1[None])
        w = (q @ direction) / det
        t = np.einsum("pij,ij->pi", q, e2) / det
        hits = (u >= 0) & (w >= 0) & (u + w <= 1) & (t > 0)
        result[start:start + 64] = hits.sum(axis=1) % 2 == 1
    return result


def _blobs(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    left = rng.normal(size=(2500, 3)) * [60, 40, 30] + [-120, 0, 0]
    right = rng.normal(size=(2500, 3)) * [60, 40, 30] + [120, 0, 0]
    stray = rng.uniform(-600, 600, size=(25, 3))          # outliers the shell ignores
    return np.concatenate([left, right, stray]).astype(np.float32)


def test_the_soma_outline_encloses_the_somas_and_not_the_empty_space():
    points = _blobs()
    mesh = soma_outline(points)
    assert mesh.name == "soma outline" and len(mesh.faces) > 500
    assert inside_mesh(points, mesh).mean() >= 0.95
    # Between and far outside the two blobs is outside the shell.
    empty = np.array([[0, 0, 200], [0, 300, 0], [400, 0, 0], [-400, 0, 0]], dtype=np.float32)
    assert not inside_mesh(empty, mesh).any()
    low, high = mesh.bounds
    assert low[0] < -200 and high[0] > 200 and high[2] < 250


def test_the_demo_brains_outline_encloses_its_somas(demo_cache, monkeypatch):
    import flyviz

    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    anatomy = flyviz.load("demo").anatomy
    somas = anatomy.positions_um()[anatomy.valid]
    mesh = soma_outline(somas)
    sample = somas[np.random.default_rng(1).choice(len(somas), 2000, replace=False)]
    assert inside_mesh(sample, mesh).mean() >= 0.95


def _box_files(tmp_path):
    trimesh = pytest.importorskip("trimesh")
    box = trimesh.creation.box(extents=(2.0, 4.0, 6.0))
    paths = []
    for suffix in (".obj", ".ply", ".stl"):
        path = tmp_path / f"box{suffix}"
        box.export(str(path))
        paths.append(path)
    return paths


def test_a_mesh_in_each_format_loads_with_scale_and_offset(tmp_path):
    for path in _box_files(tmp_path):
        mesh = load_mesh(path, scale=10.0, offset=(1.0, 2.0, 3.0))
        low, high = mesh.bounds
        np.testing.assert_allclose(low, [-9.0, -18.0, -27.0], atol=1e-4, err_msg=path.name)
        np.testing.assert_allclose(high, [11.0, 22.0, 33.0], atol=1e-4, err_msg=path.name)
        assert len(mesh.faces) == 12 and mesh.name == path.name
        centre = np.array([[1.0, 2.0, 3.0], [50.0, 2.0, 3.0]])
        assert inside_mesh(centre, mesh).tolist() == [True, False]


def test_broken_meshes_are_one_line(tmp_path, monkeypatch):
    paths = _box_files(tmp_path)
    damaged = tmp_path / "damaged.ply"
    damaged.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 99\n"
                        b"property float x\nend_header\n\x00\x01")
    truncated = tmp_path / "truncated.stl"
    truncated.write_bytes(paths[2].read_bytes()[:90])
    empty = tmp_path / "empty.obj"
    empty.write_text("# nothing here\n")
    for path, message in ((damaged, "damaged.ply"), (truncated, "truncated.stl"),
                          (empty, "empty.obj"), (tmp_path / "missing.obj", "no such mesh"),
                          (tmp_path / "brain.glb", "must be one of")):
        with pytest.raises(InputError, match=message) as caught:
            load_mesh(path)
        assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match="scale"):
        load_mesh(paths[0], scale=0.0)
    monkeypatch.setitem(sys.modules, "trimesh", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'flyviz\[meshes\]'"):
        load_mesh(paths[0])


def test_an_outline_needs_somas_and_meshes_need_triangles():
    with pytest.raises(InputError, match="at least 10 somas"):
        soma_outline(np.zeros((3, 3)))
    with pytest.raises(InputError, match="names vertex"):
        Mesh(np.zeros((3, 3), np.float32), np.array([[0, 1, 5]], np.int32), "bad")
    with pytest.raises(InputError, match="non-finite"):
        Mesh(np.full((3, 3), np.nan, np.float32), np.array([[0, 1, 2]], np.int32), "nan")


def test_the_app_refuses_an_unreadable_mesh_before_any_window(tmp_path, capsys):
    from flyviz import cli

    broken = tmp_path / "neuropil.obj"
    broken.write_text("v 0 0\nf 1 2 9\n")
    code = cli.main(["gui", "--mesh", str(broken)])
    err = capsys.readouterr().err
    assert code == 2 and "neuropil.obj" in err and len(err.strip().splitlines()) == 1
