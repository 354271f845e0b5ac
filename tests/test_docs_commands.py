"""Every shell command in README.md and docs/ runs on the demo brain, or says why it cannot.

A user copies commands from the documentation; one that fails as printed (``flyviz gui
demo`` once did, and every circuit example named a task file that was not shipped) costs
them more than a missing one. This reads every fenced ``bash``/``console`` block of the
README and the docs pages, page by page and in order (a later command may read what an
earlier one wrote, ``tom.flyrec``), and runs each ``flyviz`` command in a scratch folder
that holds the shipped examples (``examples/``) and the demo's files (``assets/``).

A block that cannot run here says so in an HTML comment on the line before its fence,
which the rendered page does not show::

    <!-- docs-test: real checkpoint -->     names a published model or the authors' files
    <!-- docs-test: install -->             sets up an environment (.ci/run runs these)
    <!-- docs-test: app -->                 opens the window: parsed and its model checked
    <!-- docs-test: long -->                minutes of work (a corpus, a rebuild, a bench)
    <!-- docs-test: cluster -->             starts Dask on other machines
    <!-- docs-test: other package -->       needs a package that is not flyviz (a third kind)

Any other command, and any ``flyviz`` command in a block without a mark, runs, and must
exit 0 (or the exit status its comment promises, ``# exit 1``). A session block (``$
command`` then its output) shows what the command prints, and where the command runs here as
printed the lines shown must be among what it printed, in order (``...`` skips lines; the
seconds, the workers and the digits of an e-notation number may differ). What is checked is that a
command works as printed, not the minutes its full text would take: a ``--max-tokens N`` of a
corpus command runs with at most :data:`MAX_TOKENS` tokens, a task with its first
:data:`MAX_TASK_PROMPTS` prompts, a command that would start a
local Dask cluster runs in this process instead (``--workers 0``: the same bits on any number of
workers, which each analysis's own tests check), and a movie is drawn at most
:data:`MOVIE_WIDTH` pixels wide (its aspect kept) with at most :data:`MOVIE_FRAMES_PER_TOKEN`
frames a token and its last frame held at most :data:`MOVIE_HOLD_S` s: every frame is drawn in
software here, and a movie's size, easing and hold are checked by tests/test_export_movie.py;
a ``trace --movie`` is as small (``--movie-size``).
A circuit's faithfulness curve has at most :data:`MAX_CURVE_POINTS` sizes (``--points``,
default 12; the search itself is checked by the circuit's own tests), a text is generated for
at most :data:`MAX_NEW_TOKENS` tokens (``--max-new-tokens``, default 80), and the spiking
brain runs for at most :data:`MAX_DURATION_MS` ms (``--duration``, default 1 s; a movie of
the run draws frames for all of it). Each command of a page after its first gets the demo
brain's arrays its first command loaded (:func:`_load_the_demo_once`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: What a block's mark may say, and so why its commands are not run.
MARKS = ("real checkpoint", "install", "app", "long", "cluster", "other package")

_FENCE = re.compile(r"^(?P<mark><!-- docs-test: (?P<why>[a-z ]+) -->\n)?"
                    r"(?P<fence>```|~~~)(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.M | re.S)
_SHELL = ("bash", "sh", "shell", "console")

#: The most corpus tokens a documented command reads here (``--max-tokens``): each is a
#: step of the whole brain (a sweep's and an importance run's, one per group or score), and
#: 40 still fill one window of every corpus command, as the pages' thousands do several.
MAX_TOKENS = 40
#: The most prompts of a task file (``.jsonl``) a documented command reads here: each is a
#: run of the whole brain at every size a circuit search measures.
MAX_TASK_PROMPTS = 3
#: The most circuit sizes on a documented ``circuit``'s faithfulness curve (``--points``):
#: each is a batch of whole-brain runs, and 4 still leave sizes between the ends to search.
MAX_CURVE_POINTS = 4
#: The most tokens a documented command generates (``--max-new-tokens``); no page's later
#: command reads a token past it (``--tokens 10:20``, ``--token 11``, ``--trace 7``).
MAX_NEW_TOKENS = 20
#: The longest a documented command runs the spiking brain, in ms (``--duration``).
MAX_DURATION_MS = 100


#: The widest movie a documented ``export`` draws here (``--size``, default 1280x720).
MOVIE_WIDTH = 320
#: The most frames a token a documented ``export`` draws here (``--frames-per-token``).
MOVIE_FRAMES_PER_TOKEN = 2
#: The longest a documented ``export`` holds its last frame here, in seconds (``--hold``,
#: default 1): each held frame is drawn again, and the default's 30 were as many frames as a
#: page's tokens (the movies' page drew 124 frames for 48 tokens); 0.1 s still holds 3.
MOVIE_HOLD_S = 0.1

#: The commands that take ``--workers`` (a local Dask cluster unless it is 0).
DASK_COMMANDS = ("sweep", "importance", "atlas", "circuit", "patch", "screen", "dynamics", "check")
#: The commands whose ``--max-new-tokens`` defaults to 80 (``export`` has it too, but a
#: recording's export takes none, and every documented model export gives a small one).
GENERATING_COMMANDS = ("generate", "compare")
#: The commands that run the spiking brain for ``--duration`` (default 1 s).
SPIKING_COMMANDS = ("simulate", "screen")


def capped(words: list[str]) -> list[str]:
    """``words`` with a ``--max-tokens`` above :data:`MAX_TOKENS` brought down to it,
    ``--workers 0`` where a command would start a cluster of its own, an ``export``'s
    movie at most :data:`MOVIE_WIDTH` wide, :data:`MOVIE_FRAMES_PER_TOKEN` frames a token and
    a hold of :data:`MOVIE_HOLD_S` s,
    a ``circuit``'s curve at most :data:`MAX_CURVE_POINTS` sizes, a generation at most
    :data:`MAX_NEW_TOKENS` tokens and a spiking run at most :data:`MAX_DURATION_MS` ms."""
    words = list(words)
    for i, word in enumerate(words[:-1]):
        if word == "--max-tokens" and words[i + 1].isdigit():
            words[i + 1] = str(min(int(words[i + 1]), MAX_TOKENS))
        if word == "--workers" and words[i + 1].isdigit():
            words[i + 1] = "0"
    if words[:1] and words[0] in DASK_COMMANDS and "--scheduler" not in words \
            and "--workers" not in words:
        words += ["--workers", "0"]
    if words[:1] == ["export"]:
        words = _at_most(_small_movie(words), "--max-new-tokens", None, MAX_NEW_TOKENS)
    if words[:1] == ["trace"] and "--movie" in words:
        words = _small_trace_movie(words)
    if words[:1] and words[0] in GENERATING_COMMANDS:
        words = _at_most(words, "--max-new-tokens", 80, MAX_NEW_TOKENS)
    if words[:1] == ["circuit"]:
        words = _at_most(words, "--points", 12, MAX_CURVE_POINTS)
    if words[:1] and words[0] in SPIKING_COMMANDS:
        words = _shorter_run(words)
    return words


def _at_most(words: list[str], option: str, default: int | None, most: int) -> list[str]:
    """``words`` with ``option``'s number (``default`` where it is not given; None: leave it
    out then) at most ``most``."""
    words = list(words)
    if option in words[:-1]:
        at = words.index(option) + 1
        if words[at].isdigit():
            words[at] = str(min(int(words[at]), most))
    elif default is not None and default > most:
        words += [option, str(most)]
    return words


def _shorter_run(words: list[str]) -> list[str]:
    """A spiking command's words with its ``--duration`` (default 1 s) at most
    :data:`MAX_DURATION_MS` ms."""
    from flyviz.commands.simulate import duration_arg

    words = list(words)
    if "--duration" not in words[:-1]:
        return words + ["--duration", f"{MAX_DURATION_MS}ms"]
    at = words.index("--duration") + 1
    if duration_arg(words[at]) * 1000.0 > MAX_DURATION_MS:
        words[at] = f"{MAX_DURATION_MS}ms"
    return words


def _smaller_frame(size: str) -> str:
    """A movie's ``WxH`` scaled down to :data:`MOVIE_WIDTH` wide, its aspect kept (even
    sides, as encoders need)."""
    found = re.fullmatch(r"(\d+)x(\d+)", size)
    if not found or int(found.group(1)) <= MOVIE_WIDTH:
        return size
    width, height = int(found.group(1)), int(found.group(2))
    return f"{MOVIE_WIDTH}x{max(2, round(height * MOVIE_WIDTH / width / 2) * 2)}"


def _small_trace_movie(words: list[str]) -> list[str]:
    """A ``trace --movie``'s words with its ``--movie-size`` (default 1280x720) at most
    :data:`MOVIE_WIDTH` wide."""
    words = list(words)
    if "--movie-size" in words[:-1]:
        at = words.index("--movie-size") + 1
        words[at] = _smaller_frame(words[at])
        return words
    return words + ["--movie-size", _smaller_frame("1280x720")]


def _small_movie(words: list[str]) -> list[str]:
    """An ``export``'s words with its ``--size`` (default 1280x720) scaled down to
    :data:`MOVIE_WIDTH` wide, its aspect kept (even sides, as encoders need), its
    ``--frames-per-token`` (default 6) at most :data:`MOVIE_FRAMES_PER_TOKEN` and its
    ``--hold`` (default 1 s) at most :data:`MOVIE_HOLD_S`."""
    options = {"--size": "1280x720", "--frames-per-token": "6", "--hold": "1"}
    for i, word in enumerate(words[:-1]):
        if word in options:
            options[word] = words[i + 1]
    options["--size"] = _smaller_frame(options["--size"])
    if options["--frames-per-token"].isdigit():
        options["--frames-per-token"] = str(min(int(options["--frames-per-token"]),
                                                MOVIE_FRAMES_PER_TOKEN))
    with contextlib.suppress(ValueError):     # not a number: the command's own refusal
        if float(options["--hold"]) > MOVIE_HOLD_S:
            options["--hold"] = f"{MOVIE_HOLD_S:g}"
    kept = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
        elif word in options and i + 1 < len(words):
            skip = True
        else:
            kept.append(word)
    return kept + [word for option, value in options.items() for word in (option, value)]


@dataclass(frozen=True)
class Command:
    """One shell command of a page: its words, the page, its block's mark and its line."""

    page: str
    line: int
    text: str
    mark: str | None
    #: The output a session block (``$ command`` then what it prints) shows under the
    #: command, line by line; ``...`` stands for lines the page leaves out.
    shown: tuple[str, ...] = ()

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def argv(self) -> list[str]:
        """The words flyviz gets: without the command name and any ``> FILE``."""
        words = self.words[1:]
        return words[:words.index(">")] if ">" in words else words

    @property
    def stdout_file(self) -> str | None:
        """Where ``> FILE`` sends the command's output, if it does."""
        words = self.words
        return words[words.index(">") + 1] if ">" in words[:-1] else None

    @property
    def expected_exit(self) -> int:
        found = re.search(r"#\s*exit (\d)\b", self.text)
        return int(found.group(1)) if found else 0

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def shell_commands(text: str, page: str) -> list[Command]:
    """The commands of ``text``'s shell blocks (continuation lines joined, ``$ `` dropped)."""
    commands = []
    for block in _FENCE.finditer(text):
        if block.group("lang").strip() not in _SHELL:
            continue
        first = text.count("\n", 0, block.start("body")) + 1
        lines = block.group("body").splitlines()
        # A block that shows a session (``$ command`` then its output) runs its ``$`` lines.
        session = any(line.lstrip().startswith("$ ") for line in lines)
        pending, start = "", first
        for offset, raw in enumerate(lines):
            line = raw.strip()
            if not pending:
                start = first + offset
                if session and not line.startswith("$ "):
                    if commands and commands[-1].line >= first:   # this block's command
                        last = commands[-1]
                        commands[-1] = replace(last, shown=(*last.shown, raw.rstrip()))
                    continue
                line = line.removeprefix("$ ")
            pending = f"{pending} {line}".strip() if pending else line
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            if pending and not pending.startswith("#"):
                commands.append(Command(page, start, pending, block.group("why")))
            pending = ""
    return commands


#: What may differ between a run and the output a page shows: the seconds it took, how
#: many workers it had, and the digits of a number in e-notation (the float32 rounding
#: of a completeness error, which another CPU's vector code may round otherwise; its
#: order of magnitude is what it says).
_VARYING = (
    (re.compile(r"\d[\d,]*(\.\d+)? s\b"), "<seconds> s"),
    (re.compile(r"\d+ worker\(s\)|in this process"), "<n> worker(s)"),
    (re.compile(r"([+-]?)\d\.\d+e([+-]\d+)"), r"\1<digits>e\2"),
)


def _comparable(line: str) -> str:
    for pattern, stand_in in _VARYING:
        line = pattern.sub(stand_in, line)
    return line.rstrip()


def shown_but_not_printed(shown: tuple[str, ...], printed: str) -> list[str]:
    """The lines of a page's ``shown`` output that the command did not print, in order
    (``...`` skips any number of printed lines; timings, worker counts and the digits of
    e-notation numbers are not compared)."""
    lines = [_comparable(line) for line in printed.splitlines()]
    missing, at = [], 0
    for line in shown:
        if line.strip() in ("", "..."):
            continue
        try:
            at = lines.index(_comparable(line), at) + 1
        except ValueError:
            missing.append(line)
    return missing


def documented_commands() -> list[Command]:
    return [command for document in DOCUMENTS
            for command in shell_commands(document.read_text(encoding="utf-8"),
                                          document.relative_to(ROOT).as_posix())]


def pages_with_commands_to_run() -> list[str]:
    return sorted({c.page for c in documented_commands() if c.mark is None})


#: The pages shared out over test files of their own (``test_docs_commands_b.py``, ``_c.py``,
#: ``_d.py``) so that the suite's workers run them side by side (a file goes to one worker);
#: every other page runs from this file. Each of the four files takes about half a minute of
#: CPU (the command line's page 17 s, the atlas's 11 s, the movies' 10 s, the rest 3 to 9 s).
PAGE_GROUPS = {
    "b": ("docs/estimate.md", "docs/patching.md", "docs/interventions.md", "docs/python.md"),
    "c": ("docs/command-line.md", "docs/nulls.md", "docs/why.md", "docs/lesion-map.md"),
    "d": ("docs/atlas.md", "docs/circuits.md", "docs/spiking.md", "docs/share.md"),
}


def pages_of_group(group: str | None) -> list[str]:
    """The pages with commands to run that :data:`PAGE_GROUPS` gives ``group`` (None: the
    pages no group names)."""
    grouped = {page for pages in PAGE_GROUPS.values() for page in pages}
    return [page for page in pages_with_commands_to_run()
            if (page in PAGE_GROUPS[group] if group else page not in grouped)]


def test_the_reader_joins_lines_drops_prompts_and_reads_marks():
    text = ("Intro\n\n```bash\nflyviz generate demo \\\n    --prompt 'a b'   # five\n"
            "# a comment\nflyviz replay x.flyrec  # exit 1\n```\n\n"
            "<!-- docs-test: real checkpoint -->\n```bash\nflyviz info ngxson/fly-llm-hf\n```\n"
            "```\nflyviz not a shell block\n```\n"
            "```sh\nflyviz trace demo --json > why.json\n```\n"
            "```console\n$ flyviz select demo \\\n  'sign:inhibitory'\nsign:inhibitory selects\n```\n")
    found = shell_commands(text, "p.md")
    assert [(c.line, c.words, c.mark, c.expected_exit) for c in found] == [
        (4, ["flyviz", "generate", "demo", "--prompt", "a b"], None, 0),
        (7, ["flyviz", "replay", "x.flyrec"], None, 1),
        (12, ["flyviz", "info", "ngxson/fly-llm-hf"], "real checkpoint", 0),
        (18, ["flyviz", "trace", "demo", "--json", ">", "why.json"], None, 0),
        (21, ["flyviz", "select", "demo", "sign:inhibitory"], None, 0),
    ]
    assert found[3].argv == ["trace", "demo", "--json"] and found[3].stdout_file == "why.json"
    assert [c.shown for c in found] == [(), (), (), (), ("sign:inhibitory selects",)]


def test_a_session_blocks_output_is_compared_with_what_the_command_printed():
    shown = ("L = +16.1380", "...", "error: +1.19e-06 (L minus the rest)",
             "written: 70 cells, 9.5 s (1 worker(s))")
    printed = ("L = +16.1380\nmore\nerror: +1.01e-06 (L minus the rest)\n"
               "written: 70 cells, 12.0 s (2 worker(s))\n")
    assert shown_but_not_printed(shown, printed) == []
    assert shown_but_not_printed(("9.5 s (1 worker(s))",), "12.2 s (in this process)") == []
    assert shown_but_not_printed(("L = +16.1380",), "L = +16.1381\n") == ["L = +16.1380"]
    assert shown_but_not_printed(("error: +1.01e-03",), "error: +1.01e-06\n") == [
        "error: +1.01e-03"]
    assert shown_but_not_printed(("b", "a"), "a\nb\n") == ["a"]      # in the printed order
    assert _as_printed(["trace", "demo", "--prompt", "x"])
    assert _as_printed(["patch", "demo", "--clean", "a", "--corrupt", "b"])
    assert not _as_printed(["sweep", "demo", "--max-tokens", "2000"])


def test_a_corpus_command_is_capped_and_nothing_else_changes():
    assert capped(["sweep", "demo", "--max-tokens", "2000", "--prompt", "2000"]) == [
        "sweep", "demo", "--max-tokens", "40", "--prompt", "2000", "--workers", "0"]
    assert capped(["atlas", "--max-tokens", "30", "--workers", "8"]) == [
        "atlas", "--max-tokens", "30", "--workers", "0"]
    assert capped(["trace", "demo", "--prompt", "x"]) == ["trace", "demo", "--prompt", "x"]
    assert capped(["export", "demo", "--prompt", "x", "--out", "a.mp4"]) == [
        "export", "demo", "--prompt", "x", "--out", "a.mp4", "--size", "320x180",
        "--frames-per-token", "2", "--hold", "0.1"]
    assert capped(["export", "--recording", "r.flyrec", "--size", "960x540", "--out", "a.webm",
                   "--frames-per-token", "1", "--orbit", "10", "--hold", "2.5"]) == [
        "export", "--recording", "r.flyrec", "--out", "a.webm", "--orbit", "10",
        "--size", "320x180", "--frames-per-token", "1", "--hold", "0.1"]
    assert capped(["export", "r.flyrec", "--size", "200x100", "--out", "a.gif", "--hold", "0"]
                  )[-6:] == ["--size", "200x100", "--frames-per-token", "2", "--hold", "0"]
    assert capped(["export", "r.flyrec", "--out", "a.gif", "--hold", "soon"])[-2:] == [
        "--hold", "soon"]


def test_a_circuit_a_generation_a_spiking_run_and_a_trace_movie_are_capped():
    assert capped(["circuit", "demo", "--task", "t.jsonl"]) == [
        "circuit", "demo", "--task", "t.jsonl", "--workers", "0", "--points", "4"]
    assert capped(["circuit", "demo", "--task", "t.jsonl", "--points", "30", "--workers", "0"]
                  )[-4:] == ["--points", "4", "--workers", "0"]
    assert capped(["circuit", "demo", "--task", "t.jsonl", "--points", "3"])[4:6] == [
        "--points", "3"]
    assert capped(["compare", "demo", "--prompt", "x", "--silence", "sign:inhibitory"]) == [
        "compare", "demo", "--prompt", "x", "--silence", "sign:inhibitory",
        "--max-new-tokens", "20"]
    assert capped(["generate", "demo", "--prompt", "x", "--max-new-tokens", "40"]) == [
        "generate", "demo", "--prompt", "x", "--max-new-tokens", "20"]
    assert capped(["generate", "demo", "--prompt", "x", "--max-new-tokens", "6"])[-1] == "6"
    assert capped(["export", "demo", "--prompt", "x", "--max-new-tokens", "30", "--out",
                   "a.mp4"])[:5] == ["export", "demo", "--prompt", "x", "--max-new-tokens"]
    assert capped(["export", "demo", "--prompt", "x", "--max-new-tokens", "30", "--out",
                   "a.mp4"])[5] == "20"
    assert "--max-new-tokens" not in capped(["export", "r.flyrec", "--out", "a.mp4"])
    assert capped(["simulate", "demo", "--out", "s.parquet"]) == [
        "simulate", "demo", "--out", "s.parquet", "--duration", "100ms"]
    assert capped(["simulate", "demo", "--duration", "0.5", "--record", "s.flyrec"]) == [
        "simulate", "demo", "--duration", "100ms", "--record", "s.flyrec"]
    assert capped(["simulate", "demo", "--duration", "40ms"]) == [
        "simulate", "demo", "--duration", "40ms"]
    assert capped(["screen", "demo", "--sets", "s.txt", "--duration", "1s"])[-4:] == [
        "--duration", "100ms", "--workers", "0"]
    assert capped(["trace", "demo", "--prompt", "x", "--movie", "w.mp4"]) == [
        "trace", "demo", "--prompt", "x", "--movie", "w.mp4", "--movie-size", "320x180"]
    assert capped(["trace", "demo", "--movie", "w.mp4", "--movie-size", "640x480"]) == [
        "trace", "demo", "--movie", "w.mp4", "--movie-size", "320x240"]


def test_every_command_runs_or_its_block_says_why_not():
    """A mark is one of the known reasons, and an unmarked block holds only flyviz commands."""
    problems = []
    for command in documented_commands():
        if command.mark is not None:
            if command.mark not in MARKS:
                problems.append(f"{command}: unknown mark {command.mark!r} (one of {MARKS})")
            continue
        if command.words[:1] != ["flyviz"]:
            problems.append(f"{command}: not a flyviz command, and its block has no mark")
    assert not problems, "\n".join(problems)


def test_app_commands_parse_and_name_a_model_that_loads():
    """``flyviz gui demo`` once failed as printed ("unrecognized arguments: demo")."""
    from flyviz.cli import build_parser
    from flyviz.model.resolve import check_spec

    parser = build_parser()
    seen = 0
    for command in documented_commands():
        if command.mark != "app" or command.words[:1] != ["flyviz"]:
            continue
        seen += 1
        args = parser.parse_args(command.words[1:] or ["gui"])
        assert args.command == "gui", command
        check_spec(args.spec or args.model)
    assert seen >= 1


def _workspace(tmp_path: Path) -> Path:
    """A scratch folder as a user's clone looks from its root: examples and the demo's files.
    Each example is both at the root (where a page's bare ``names.jsonl`` finds it) and in
    ``examples/`` (as ``examples/sets.txt`` names it from a clone's root)."""
    work = tmp_path / "work"
    (work / "examples").mkdir(parents=True)
    for example in (ROOT / "examples").iterdir():
        if example.is_file() and example.suffix == ".jsonl":
            # a task: its first prompts (each is a run, or a curve of runs, of the full-size
            # demo brain; all 20 of names.jsonl made its circuit command 30 CPU s)
            lines = example.read_text("utf-8").splitlines(keepends=True)
            for folder in (work, work / "examples"):
                (folder / example.name).write_text("".join(lines[:MAX_TASK_PROMPTS]), "utf-8")
        elif example.is_file() and example.suffix in (".txt", ".csv", ".json"):
            for folder in (work, work / "examples"):
                shutil.copy(example, folder / example.name)
    (work / "assets").symlink_to(ROOT / "assets", target_is_directory=True)
    (work / "docs" / "images").mkdir(parents=True)
    return work


def _load_the_demo_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have ``load_model("demo")`` read the demo brain's files only the first time.

    A user's process loads the demo for each command (its graph's digest checked, about
    0.3 CPU s), which this process would do for every command of a page. The page's first
    command loads it so; the later ones get the same read-only arrays (memory-mapped and
    not writable: no command can change them for the next) with their own copies of what
    is writable (metadata, digests, anatomy). Everything around the load (the spec's
    checks, the validation) still runs each time.
    """
    import copy

    from flyviz.model import resolve

    real = resolve._load_demo
    loaded = []

    def load_demo_once(progress):
        if not loaded:
            loaded.append(real(progress))
        ckpt = copy.copy(loaded[0])
        ckpt.metadata = copy.deepcopy(ckpt.metadata)
        ckpt.digests = dict(ckpt.digests)
        ckpt.tensor_names = dict(ckpt.tensor_names)
        ckpt.anatomy = _own_anatomy(ckpt.anatomy)
        return ckpt

    monkeypatch.setattr(resolve, "_load_demo", load_demo_once)


def _own_anatomy(anatomy):
    """A copy of ``anatomy`` that no command can change the next one's through: its
    writable arrays copied, its lists of names copied (their strings cannot change), its
    read-only arrays shared, anything else deep-copied. A deep copy walked every name of
    the demo's 49,393 neurons one by one for each command of a page."""
    import copy
    import dataclasses

    import numpy as np

    own = copy.copy(anatomy)
    for field in dataclasses.fields(anatomy):
        value = getattr(anatomy, field.name)
        if isinstance(value, np.ndarray):
            value = value.copy() if value.flags.writeable else value
        elif isinstance(value, list) and all(isinstance(v, (str, type(None))) for v in value):
            value = list(value)
        else:
            value = copy.deepcopy(value)
        object.__setattr__(own, field.name, value)
    return own


def run_the_pages_commands(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every command of ``page`` in order in a scratch workspace; each must exit as said."""
    from flyviz.cli import main

    _load_the_demo_once(monkeypatch)
    monkeypatch.chdir(_workspace(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("FLYVIZ_WORKERS", "0")
    for command in documented_commands():
        if command.page != page or command.mark is not None:
            continue
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(capped(command.argv))
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 2
        assert status == command.expected_exit, (
            f"{command}\nexit {status}\n{out.getvalue()[-2000:]}\n{err.getvalue()[-2000:]}")
        # A session block shows what its command prints: a reader compares their screen
        # with it. Only a command run as printed can print it (a capped one runs less).
        if command.shown and _as_printed(command.argv):
            missing = shown_but_not_printed(command.shown, out.getvalue() + err.getvalue())
            assert not missing, (f"{command}\nthe page shows lines it did not print:\n"
                                 + "\n".join(missing) + f"\nit printed:\n{out.getvalue()}")
        if command.stdout_file:
            Path(command.stdout_file).write_text(out.getvalue(), encoding="utf-8")
    assert os.listdir(".")  # the commands wrote what they say they write, here


def _as_printed(argv: list[str]) -> bool:
    """Whether ``argv`` runs here as printed: capped at most to ``--workers 0`` (the same
    bits on any number of workers)."""
    ran = capped(argv)
    if ran[-2:] == ["--workers", "0"] and "--workers" not in argv:
        ran = ran[:-2]
    printed = list(argv)
    for i, word in enumerate(printed[:-1]):
        if word == "--workers":
            printed[i + 1] = "0"
    return ran == printed


def test_every_page_with_commands_is_run_by_one_file():
    pages = [page for group in (None, *PAGE_GROUPS) for page in pages_of_group(group)]
    assert sorted(pages) == pages_with_commands_to_run()


@pytest.mark.slow
@pytest.mark.parametrize("page", pages_of_group(None))
def test_the_pages_commands_run_on_the_demo(page, tmp_path, monkeypatch):
    run_the_pages_commands(page, tmp_path, monkeypatch)
