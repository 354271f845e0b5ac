"""Desktop packaging: metadata agrees with the package, and (opt-in) the bundle runs.

Building the PyInstaller bundle takes a minute or two and ~750 MB of disk, so
that test runs in CI (``CI=true``) and locally only with ``FLYVIZ_TEST_BUNDLE=1``
(see packaging/README.md).
"""

from __future__ import annotations

import argparse
import configparser
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import flyviz
from flyviz.cli import SUBCOMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
APP_ID = "org.flyviz.flyviz"


def test_every_package_of_the_source_tree_is_listed_for_the_wheel():
    """pyproject.toml lists the packages by name: a new one (a module split into a package)
    left out of the list would be missing from the wheel and fail to import there."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for init in (ROOT / "flyviz").rglob("__init__.py")}
    assert found - listed == set()


def test_metainfo_names_this_version_and_the_desktop_file():
    tree = ET.parse(PACKAGING / "linux" / f"{APP_ID}.metainfo.xml")
    root = tree.getroot()
    assert root.findtext("id") == APP_ID
    releases = [r.get("version") for r in root.iter("release")]
    assert releases and releases[0] == flyviz.__version__, \
        "update the newest <release> in the metainfo when the version changes"
    assert root.find("launchable").text == f"{APP_ID}.desktop"
    assert "CC BY 4.0" in ET.tostring(root, encoding="unicode")


def test_desktop_entry_launches_the_gui_script_with_the_shipped_icon():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(PACKAGING / "linux" / f"{APP_ID}.desktop")
    section = entry["Desktop Entry"]
    assert section["Type"] == "Application"
    assert section["Exec"].split()[0] == "flyviz-gui"
    assert section["Icon"] == APP_ID
    assert section["Categories"].endswith(";")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'flyviz-gui = "flyviz.cli:gui_main"' in pyproject


@pytest.mark.parametrize("size", [16, 24, 32, 48, 64, 128, 256, 512])
def test_icons_exist_at_every_size_with_those_pixels(size):
    path = PACKAGING / "linux" / "icons" / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (size, size)


def test_help_describes_every_subcommand(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name, _module, help_text in SUBCOMMANDS:
        assert name in text and help_text in text
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"flyviz {flyviz.__version__}"


def test_every_example_in_the_help_keeps_its_line_breaks():
    """A bare backslash at a line's end inside an epilogue (not a raw string) swallows the
    newline: sweep's last example once printed as one line with the next one's indent in it."""
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in [("flyviz", parser), *subcommands.choices.items()]:
        for line in (sub.epilog or "").splitlines():
            if line.lstrip().startswith("flyviz "):
                command = line.split("  #")[0].rstrip()
                assert not re.search(r"\S {3,}--", command), (name, line)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLYVIZ_TEST_BUNDLE") != "1" and os.environ.get("CI") != "true",
                    reason="builds the PyInstaller bundle (runs in CI; locally set FLYVIZ_TEST_BUNDLE=1)")
def test_bundle_reports_its_version_and_exports_headless(tmp_path):
    pytest.importorskip("PyInstaller")
    dist, work = tmp_path / "dist", tmp_path / "build"
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work),
                    str(PACKAGING / "flyviz.spec")], check=True, cwd=ROOT)
    exe = dist / "flyviz" / "flyviz"
    env = dict(os.environ, FLYVIZ_CACHE_DIR=str(tmp_path / "cache"))
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, env=env,
                             check=True, cwd=tmp_path)
    assert version.stdout.strip() == f"flyviz {flyviz.__version__}"
    out = tmp_path / "clip.mp4"
    subprocess.run([str(exe), "export", "demo", "--prompt", "Tom and his dog",
                    "--max-new-tokens", "4", "--size", "320x180", "--frames-per-token", "1",
                    "--out", str(out)], check=True, env=env, cwd=tmp_path, timeout=300)
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(out))
    meta = next(reader)
    assert tuple(meta["size"]) == (320, 180)
    assert sum(1 for _ in reader) > 4
