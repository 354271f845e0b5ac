"""The documentation site builds strictly: no broken link, no page left out of its navigation.

``mkdocs build --strict`` turns every warning into a failure: a link to a page or an anchor
that does not exist, a page in ``docs/`` that the navigation leaves out, an API entry
(mkdocstrings) naming an object that is gone.
"""

from __future__ import annotations

import html
import importlib.util
import re
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


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built strictly once for the tests of this module that read its pages."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result = build(ROOT / "mkdocs.yml", site)
    assert result.returncode == 0, result.stderr[-4000:]
    return site


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_api_pages(site):
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Getting started" in index
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "flyviz.api.load" in api and "Parameters" in api  # rendered from the docstrings
    for page in ("spiking", "circuits", "architecture", "benchmarks"):
        assert (site / page / "index.html").is_file(), page
    assert not list(site.rglob("*.py")), "the griffe extension in docs/ is not a page"


def page_text(page: Path) -> str:
    """The text a reader sees on a page: its HTML without tags, entities decoded."""
    body = page.read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", body))


@pytest.mark.slow
def test_the_api_pages_show_no_sphinx_roles_and_link_the_names(site):
    """``:func:`load``` in a docstring is a link to ``load`` on the page, not the markup."""
    pages = [site / "api" / "index.html"]
    for page in pages:
        body = page.read_text(encoding="utf-8")
        for text in (page_text(page), body):
            found = SPHINX_ROLE.findall(text)
            assert not found, f"{page.relative_to(site)} shows Sphinx roles: {sorted(set(found))}"
    api = pages[0].read_text(encoding="utf-8")
    # flyviz.api.run's "What :func:`load` returned", and its return type's ":meth:`save`".
    assert re.search(r'<a class="autorefs autorefs-internal"[^>]*href="#flyviz\.api\.load"[^>]*>'
                     r"<code>load\(\)</code></a>", api), "`load()` is not a link"
    assert 'href="#flyviz.record.recording.Recording.save"' in api
    # A target the site does not render is inline code titled with its full name.
    assert '<span title="pathlib.Path"><code>pathlib.Path</code></span>' in api


#: A Sphinx role as the pages would show it: in the text (``:func:load``, the backticks
#: turned into code) or in the HTML (``:func:<code>load</code>``, or backticks left as written).
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|mod|data|exc|obj|const):(?:<code>|`|\w)")


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


def test_the_griffe_extension_rewrites_sphinx_roles_as_sphinx_reads_them():
    """The extension mkdocs.yml loads (docs/griffe_roles.py), on a small package of its own."""
    griffe = pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_roles", ROOT / "docs" / "griffe_roles.py")
    assert spec is not None and spec.loader is not None
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    source = {
        "__init__.py": "from pkg.core import Thing\n",
        "core.py": ("from pathlib import Path\n\n"
                    "def load():\n    '''Load.'''\n\n"
                    "class Thing:\n    '''See :meth:`save` and :func:`load`.'''\n\n"
                    "    def save(self):\n        '''Save; :class:`~pkg.core.Thing` again.'''\n"),
    }
    with griffe.temporary_visited_package("pkg", source, extensions=griffe.load_extensions(
            roles.SphinxRoles)) as pkg:
        thing = pkg["core.Thing"]
        assert thing.docstring.value == (
            'See <autoref identifier="pkg.core.Thing.save" optional>`save()`</autoref> and '
            '<autoref identifier="pkg.core.load" optional>`load()`</autoref>.')
        assert pkg["core.Thing.save"].docstring.value == (
            'Save; <autoref identifier="pkg.core.Thing" optional>`Thing`</autoref> again.')
        rewrite = roles.rewrite
        # The title form, a name no scope holds, a suppressed link, an imported name.
        assert rewrite(":func:`the loader <load>`", thing) == (
            '<autoref identifier="pkg.core.load" optional>`the loader`</autoref>')
        assert rewrite(":attr:`baseline`", thing) == "`baseline`"
        assert rewrite(":py:class:`!Thing`", thing) == "`Thing`"
        assert rewrite(":class:`~Path`", thing) == '<autoref identifier="pathlib.Path" optional>`Path`</autoref>'
        assert rewrite(":class:`xarray.Dataset`", thing) == (
            '<autoref identifier="xarray.Dataset" optional>`xarray.Dataset`</autoref>')
        assert rewrite(":math:`x`", thing) == ":math:`x`"
