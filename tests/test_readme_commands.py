"""Every ``python -m MODULE`` and ``python path/x.py`` the documentation names exists.

A command that moved (``flyviz.app.bench`` became ``tests/bench_app.py``) leaves the README
telling users to run something that is not there; this reads README.md and docs/*.md, their
fenced code blocks and inline code (which may wrap across lines), and checks each command.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]

#: Top-level names that are folders of this repository: their modules are looked up as
#: files here (``python -m tests.bench_app`` runs from the repository root).
LOCAL_PACKAGES = ("flyviz", "tests", "examples", "packaging")

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_PYTHON = re.compile(r"(?<![\w.-])(?:[\w.~/-]*/)?python(?:3(?:\.\d+)?)?$")


def code_spans(text: str) -> list[str]:
    """The text of every fenced code block and inline code span in Markdown ``text``."""
    spans = [m.group(2) for m in _FENCE.finditer(text)]
    rest = _FENCE.sub("", text)
    spans += [m.group(1) for m in _INLINE.finditer(rest)]
    return spans


def python_commands(code: str) -> list[tuple[str, str]]:
    """``("module", name)`` or ``("file", path)`` for each Python command in ``code``."""
    found = []
    words = code.split()
    for i, word in enumerate(words):
        if not _PYTHON.search(word):
            continue
        for j in range(i + 1, len(words)):
            arg = words[j]
            if arg == "-m" and j + 1 < len(words):
                found.append(("module", words[j + 1].rstrip(";)&|")))
                break
            if arg.startswith("-"):          # an interpreter option (-u, -X ...)
                continue
            if arg.endswith(".py"):
                found.append(("file", arg))
            break
    return found


def documented_commands() -> list[tuple[str, str, str]]:
    """``(document, kind, target)`` for every Python command the documentation names."""
    commands = []
    for document in DOCUMENTS:
        for span in code_spans(document.read_text(encoding="utf-8")):
            for kind, target in python_commands(span):
                commands.append((document.relative_to(ROOT).as_posix(), kind, target))
    return sorted(set(commands))


def module_exists(name: str) -> bool:
    """True when ``python -m name`` finds a module to run."""
    parts = name.split(".")
    if parts[0] in LOCAL_PACKAGES:
        base = ROOT.joinpath(*parts)
        return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def test_the_parser_finds_commands_in_blocks_and_in_inline_code_that_wraps():
    text = ("Run\n```bash\nxvfb-run -a .venv/bin/python -m tests.bench_app --demo\n```\n"
            "and `python tests/bench_atlas.py\ndemo`, or `python3 -u -m flyviz.demo.evaluate`;"
            " not `pythonic x.py` nor `mypython -m y`.\n")
    found = [c for span in code_spans(text) for c in python_commands(span)]
    assert found == [("module", "tests.bench_app"), ("file", "tests/bench_atlas.py"),
                     ("module", "flyviz.demo.evaluate")]
    assert module_exists("tests.bench_app") and module_exists("pytest")
    assert not module_exists("flyviz.app.bench") and not module_exists("no_such_module_here")


def test_the_readme_names_commands():
    kinds = {kind for _, kind, _ in documented_commands()}
    assert kinds == {"module", "file"}       # the parser reads the README at all


@pytest.mark.parametrize("document, kind, target", documented_commands(),
                         ids=lambda v: str(v))
def test_every_documented_python_command_exists(document, kind, target):
    if kind == "module":
        assert module_exists(target), f"{document}: `python -m {target}` names no module"
    else:
        assert (ROOT / target).is_file(), f"{document}: `python {target}` names no file"
