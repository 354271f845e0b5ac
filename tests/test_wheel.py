"""The wheel: built from the repository, it carries the demo brain and the napari manifest,
and installed into a new venv outside the repository it runs ``flyviz generate demo``.

Slow (a build and a venv, ~15 s). The new venv borrows the test environment's
dependencies through a ``.pth`` file (nothing is downloaded but the build's
setuptools); flyviz itself comes only from the wheel, which the test checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built as a release is (``python -m build``): the sdist from the repository,
    then the wheel from the unpacked sdist; both in one isolated build environment, so that
    the build's setuptools is installed once."""
    import tarfile

    from build import BuildBackendException, BuildException, ProjectBuilder
    from build.env import DefaultIsolatedEnv

    out = tmp_path_factory.mktemp("dist")
    unpacked = tmp_path_factory.mktemp("sdist")
    try:
        with DefaultIsolatedEnv() as env:
            from_repo = ProjectBuilder.from_isolated_env(env, REPO)
            env.install(from_repo.build_system_requires)
            env.install(from_repo.get_requires_for_build("sdist"))
            sdist = Path(from_repo.build("sdist", out))
            with tarfile.open(sdist) as tf:
                tf.extractall(unpacked, filter="data")
            (source,) = unpacked.iterdir()
            from_sdist = ProjectBuilder.from_isolated_env(env, source)
            env.install(from_sdist.build_system_requires - from_repo.build_system_requires)
            env.install(from_sdist.get_requires_for_build("wheel"))
            path = Path(from_sdist.build("wheel", out))
    except (BuildException, BuildBackendException, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the wheel did not build: {exc}")
    assert path.name.endswith("-py3-none-any.whl"), path
    return path


def test_sdist_carries_the_sources_assets_and_manifest(wheel):
    import tarfile

    (sdist,) = wheel.parent.glob("flyviz-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("pyproject.toml", "flyviz/napari/napari.yaml", "assets/demo/connectome.npz",
                   "assets/demo/atlas/.zmetadata"):
        assert needed in names, needed


def test_wheel_carries_the_demo_brain_the_manifest_and_the_entry_point(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    for needed in ("flyviz/napari/napari.yaml", "flyviz/napari/_reader.py",
                   "flyviz/notebook/__init__.py", "flyviz/brain_source.py",
                   "flyviz/_assets/demo/connectome.npz", "flyviz/_assets/demo/demo.json",
                   "flyviz/_assets/demo/model/manifest.json", "flyviz/export/page/page.html",
                   "flyviz/export/page/page.js", "flyviz/export/page/page.css"):
        assert needed in names, needed
    # The demo atlas is a Zarr store: its dot-files must travel too.
    assert any(n.startswith("flyviz/_assets/demo/atlas/") and "/." in n for n in names)
    assert "[napari.manifest]" in entry_points
    assert "flyviz = flyviz.napari:napari.yaml" in entry_points
    # The kinds of model flyviz ships register where another package's would.
    assert "[flyviz.kinds]" in entry_points
    assert "language = flyviz.kinds.language:LANGUAGE" in entry_points
    assert "spiking = flyviz.kinds.spiking:SPIKING" in entry_points
    assert not any(n.startswith(("tests/", "shared/")) for n in names)


def test_wheel_installs_into_a_new_venv_and_runs_the_demo(wheel, tmp_path):
    venv = tmp_path / "venv"
    # No pip of its own (bootstrapping one costs seconds): this environment's pip installs
    # into it (pip --python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies of the test environment (its .pth files, such as an editable
    # flyviz, are not processed from a directory a .pth adds).
    Path(site, "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                   check=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["FLYVIZ_CACHE_DIR"] = str(tmp_path / "cache")
    where = subprocess.run([str(python), "-c", "import flyviz; print(flyviz.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    run = subprocess.run([str(venv / "bin" / "flyviz"), "generate", "demo", "--prompt",
                          "Once upon a time", "--max-new-tokens", "5"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()
    found = subprocess.run([str(python), "-c", "import npe2; pm = npe2.PluginManager.instance(); "
                            "pm.discover(); print([r.command for r in "
                            "pm.iter_compatible_readers(['run.flyrec'])])"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=300)
    if "No module named 'npe2'" not in found.stderr:
        assert "flyviz.read_flyviz" in found.stdout, found.stderr
