"""``--cpu-report``: which test files cost the suite its CPU time (a plugin of tests/conftest.py).

The suite runs on every core, so its wall time is its CPU time shared among them: a file
that makes the run longer is one that costs CPU, its own process's and that of the
processes it starts (a wheel's venv, ``flyviz`` commands, Chromium, Dask workers), not one
whose tests wait. ``python -m pytest --cpu-report`` ends with the files that cost the most,
summed over the xdist workers; ``--cpu-report 40`` lists forty::

    ============================ CPU by test file ============================
    20 of 164 files; all tests 1,107.2 s in-process, 153.9 s in child processes; ...
      s in-process  s children  tests  file
              77.8         0.0     19  tests/test_app_spiking_layout.py
    ...

In-process is the worker's CPU time from a test's setup to its teardown; children is
what the processes the test started and waited for used (``getrusage``: a process still
running when the test ends, or never waited for, is not counted). A worker's total
includes its collection and its session fixtures, which no file is charged for.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest

#: How many files ``--cpu-report`` lists when not told.
LISTED_FILES = 20
#: Where a worker's figures travel to the controller (``config.workeroutput``).
_OUTPUT_KEY = "flyviz_cpu_report"

_per_file = pytest.StashKey[dict[str, list[float]]]()
_worker_totals = pytest.StashKey[list[float]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=int, nargs="?", const=LISTED_FILES, default=None,
                     metavar="N",
                     help=f"end with the N test files (default {LISTED_FILES}) that cost the "
                          "most CPU time, in-process and in the processes they started")


def _reporting(config: pytest.Config) -> bool:
    return config.getoption("cpu_report", None) is not None


def _charge(files: dict[str, list[float]], name: str, own: float, children: float,
            tests: int) -> None:
    """Add to file ``name``'s row: CPU seconds in-process and in children, and tests."""
    row = files.setdefault(name, [0.0, 0.0, 0])
    row[0] += own
    row[1] += children
    row[2] += tests


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    """Charge the test's file with the CPU its setup, call and teardown used."""
    config = item.config
    if not _reporting(config):
        return (yield)
    own, children = time.process_time(), _children_cpu()
    try:
        return (yield)
    finally:
        _charge(config.stash.setdefault(_per_file, {}), item.nodeid.split("::", 1)[0],
                time.process_time() - own, _children_cpu() - children, 1)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its figures to the controller; without xdist they stay here."""
    config = session.config
    if not _reporting(config) or not hasattr(config, "workerinput"):
        return
    config.workeroutput[_OUTPUT_KEY] = {
        "files": config.stash.get(_per_file, {}), "total": time.process_time()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up what each worker reports as it ends."""
    config = node.config
    report = getattr(node, "workeroutput", {}).get(_OUTPUT_KEY)
    if not _reporting(config) or report is None:
        return
    merged = config.stash.setdefault(_per_file, {})
    for name, (own, children, tests) in report["files"].items():
        _charge(merged, name, own, children, tests)
    config.stash.setdefault(_worker_totals, []).append(report["total"])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not _reporting(config) or hasattr(config, "workerinput"):
        return
    files = config.stash.get(_per_file, {})
    listed = sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[
        :max(0, config.getoption("cpu_report"))]
    own = sum(row[0] for row in files.values())
    children = sum(row[1] for row in files.values())
    workers = config.stash.get(_worker_totals, [])
    total = (f"; workers {sum(workers):,.1f} s in all" if workers
             else f"; this process {time.process_time():,.1f} s in all")
    terminalreporter.section("CPU by test file")
    terminalreporter.write_line(
        f"{len(listed)} of {len(files)} files; all tests {own:,.1f} s in-process, "
        f"{children:,.1f} s in child processes{total}")
    terminalreporter.write_line(f"{'s in-process':>14}{'s children':>12}{'tests':>7}  file")
    for name, (file_own, file_children, tests) in listed:
        terminalreporter.write_line(
            f"{file_own:14.1f}{file_children:12.1f}{int(tests):7d}  {name}")
