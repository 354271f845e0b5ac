"""``--cpu-report`` charges each test file with the CPU it used, its own and its children's,
the same with and without xdist workers (tests/cpu_report.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

#: CPU seconds the planted tests burn: well above what a test's bookkeeping costs.
BURN_S = 0.4

_BURN = f"""
import time

def burn():
    start = time.process_time()
    while time.process_time() - start < {BURN_S}:
        pass
"""

_FILES = {
    "test_in_process.py": _BURN + "\ndef test_burns():\n    burn()\n",
    "test_in_a_child.py": textwrap.dedent(f"""
        import subprocess, sys
        CHILD = {_BURN!r} + "\\nburn()\\n"

        def test_starts_a_burning_child():
            subprocess.run([sys.executable, "-c", CHILD], check=True)
        """),
    "test_waiting.py": "import time\n\ndef test_waits():\n    time.sleep(0.5)\n",
    "conftest.py": 'pytest_plugins = ["cpu_report"]\n',
    "pytest.ini": "[pytest]\n",           # the folder is the run's root, its options none
}

_ROW = re.compile(r"^\s*(?P<own>[\d.]+)\s+(?P<children>[\d.]+)\s+(?P<tests>\d+)\s+(?P<file>\S+)$",
                  re.M)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_each_file_is_charged_with_its_own_and_its_childrens_cpu(tmp_path, workers):
    for name, text in _FILES.items():
        (tmp_path / name).write_text(text)
    out = _pytest(tmp_path, "-n", workers, "--cpu-report", "2")
    summary = out.stdout.split("CPU by test file", 1)[1]
    assert "2 of 3 files" in summary, summary
    rows = {Path(m["file"]).name: m for m in _ROW.finditer(summary)}
    # the two that burn CPU, not the one that waits longer than either
    assert set(rows) == {"test_in_process.py", "test_in_a_child.py"}, summary
    own, child = rows["test_in_process.py"], rows["test_in_a_child.py"]
    assert float(own["own"]) >= BURN_S * 0.9 and float(own["children"]) < 0.1
    assert float(child["children"]) >= BURN_S * 0.9 and float(child["own"]) < BURN_S / 2
    assert own["tests"] == child["tests"] == "1"
    assert ("workers" in summary) == (workers != "0")


def test_no_report_unless_asked(tmp_path):
    for name in ("test_in_process.py", "conftest.py", "pytest.ini"):
        (tmp_path / name).write_text(_FILES[name])
    out = _pytest(tmp_path, "-n", "0")
    assert "1 passed" in out.stdout and "CPU by test file" not in out.stdout


def _pytest(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """pytest run on ``folder`` with the plugin importable and the suite's plugins that need
    a screen or Qt off (xdist's on); it must pass."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("PYTEST_", "PYTHONPATH"))}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xvfb",
         "-p", "no:pytestqt", "-p", "no:napari", "-p", "no:napari-plugin-engine",
         "-p", "no:npe2", *argv, str(folder)],
        cwd=folder, capture_output=True, text=True, timeout=300,
        env={**environment, "PYTHONPATH": str(TESTS)})
    assert out.returncode == 0, out.stdout + out.stderr
    return out
