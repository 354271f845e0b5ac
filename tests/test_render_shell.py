"""The brain's outline behind the cloud: drawn where the brain is, neurons still readable."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("vispy")

from flyviz.analysis.outline import Mesh, soma_outline  # noqa: E402
from flyviz.errors import InputError  # noqa: E402
from flyviz.render.offscreen import FrameRenderer  # noqa: E402


def _cloud(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(3000, 3)) * [120, 60, 40]).astype(np.float32)


def _render(points, values, meshes=(), opacity=0.2):
    with FrameRenderer(points, None, size=(320, 240), overlays=False, meshes=meshes,
                       mesh_opacity=opacity, scale=1.0) as renderer:
        return renderer.render_state(values).astype(int)


def test_the_outline_is_drawn_around_the_cloud_and_nowhere_else():
    points = _cloud()
    quiet = np.zeros(len(points), np.float32)
    outline = soma_outline(points)
    bare = _render(points, quiet)
    shelled = _render(points, quiet, [outline])
    lighter = (shelled.sum(axis=2) - bare.sum(axis=2)) > 6
    # Inside the brain's silhouette the shell shows; the frame's corners stay background.
    assert lighter[100:140, 130:190].mean() > 0.5
    for corner in (lighter[:15, :15], lighter[:15, -15:], lighter[-15:, :15], lighter[-15:, -15:]):
        assert not corner.any()
    # Opacity 0 draws nothing.
    np.testing.assert_array_equal(_render(points, quiet, [outline], opacity=0.0), bare)


def test_lit_neurons_stay_readable_in_front_of_and_behind_the_shell():
    points = _cloud()
    values = np.zeros(len(points), np.float32)
    values[::50] = 1.0                                      # a few bright neurons everywhere
    bare = _render(points, values)
    shelled = _render(points, values, [soma_outline(points)])
    bright = bare.sum(axis=2) > 400
    assert bright.sum() > 20
    # The shell never hides a lit neuron: each is at least as bright as without it.
    assert (shelled.sum(axis=2)[bright] >= bare.sum(axis=2)[bright] - 30).all()


def test_the_viewer_state_caches_the_outline_and_adds_mesh_files(tmp_path):
    trimesh = pytest.importorskip("trimesh")
    from flyviz.model.checkpoint import Anatomy
    from flyviz.viewer.state import ViewerState

    points = _cloud(1)
    anatomy = Anatomy(points / 0.008, np.ones(len(points), bool), kind="synthetic")
    state = ViewerState()
    state.set_model(None, anatomy, "cloud")
    changes: list[int] = []
    state.events.meshes.connect(lambda: changes.append(1))
    assert state.shown_meshes() == []
    state.mesh.outline_shown = True
    first = state.shown_meshes()
    assert len(first) == 1 and state.shown_meshes()[0] is first[0]    # computed once
    path = tmp_path / "box.stl"
    trimesh.creation.box(extents=(10.0, 10.0, 10.0)).export(str(path))
    added = state.add_mesh(path, scale=2.0)
    assert state.shown_meshes() == [first[0], added] and state.mesh.mesh_shown
    broken = tmp_path / "broken.ply"
    broken.write_bytes(b"ply\nnot really\n")
    with pytest.raises(InputError, match="broken.ply"):
        state.add_mesh(broken)
    assert state.mesh_files == (added,)                                # nothing changed
    state.mesh.mesh_shown = False
    assert state.shown_meshes() == [first[0]]
    assert len(changes) >= 3
    assert isinstance(added, Mesh)
