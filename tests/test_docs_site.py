"""The documentation site builds strictly: no broken link, no page left out of its navigation.

``mkdocs build --strict`` turns every warning into a failure: a link to a page or an anchor
that does not exist, a page in ``docs/`` that the navigation leaves out, an API entry
(mkdocstrings) naming an object that is gone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
pytest.importorskip("material", reason="the docs extra is not installed: pip install -e '.[docs]'")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_api_pages(tmp_path):
    site = tmp_path / "site"
    result = build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, result.stderr[-4000:]
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Getting started" in index
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "flyviz.api.load" in api and "Parameters" in api  # rendered from the docstrings
    for page in ("spiking", "circuits", "architecture", "benchmarks"):
        assert (site / page / "index.html").is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build is what catches a dead link: a copy of the site with one must fail."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the missing page](missing.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: t\ndocs_dir: docs\nnav:\n  - Home: index.md\n"
                      "validation:\n  links:\n    not_found: warn\n")
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert "missing.md" in result.stderr
