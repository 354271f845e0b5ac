"""The ``flyviz`` command: the desktop app and its command-line tools.

Each subcommand lives in :mod:`flyviz.commands` as a module with two
functions, ``configure(parser)`` and ``run(args) -> int``; it is imported only
when used, so ``flyviz generate`` never loads Qt and ``flyviz --help`` is fast.

Errors the user can fix (:class:`~flyviz.model.errors.FlyvizError`) are printed
as one line on stderr with exit status 2; so are a missing file, any other error of
the file system (:func:`flyviz.fileio.os_error`: a name too long, a full disk) and Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flyviz._version import __version__

#: (name, module, one-line help), in the order ``--help`` lists them.
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("gui", "flyviz.commands.gui", "open the desktop app (the default with no subcommand)"),
    ("generate", "flyviz.commands.generate", "continue a prompt and print the text (or JSON)"),
    ("compare", "flyviz.commands.compare", "compare an intervened run with the untouched one"),
    ("trace", "flyviz.commands.trace", "why this token: split a logit exactly by token, neuron, "
     "synapse"),
    ("select", "flyviz.commands.select", "count the neurons a selection query picks"),
    ("info", "flyviz.commands.info", "describe a checkpoint: sizes, layout, anatomy, digests"),
    ("verify", "flyviz.commands.verify", "check a model's files, graph and golden traces"),
    ("replay", "flyviz.commands.replay", "re-run a recording with its seed and compare the tokens"),
    ("export", "flyviz.commands.export", "render a run or a saved recording as MP4/WebM/GIF/PNG"),
    ("share", "flyviz.commands.share", "write a recording as one web page that plays it, offline"),
    ("convert", "flyviz.commands.convert", "write a recording as Zarr, NWB or .npz for other tools"),
    ("figure", "flyviz.commands.figure", "figures of a run: raster, cell types, trajectory, brain"),
    ("atlas", "flyviz.commands.atlas", "what every neuron responds to across a corpus (on Dask)"),
    ("neuron", "flyviz.commands.neuron", "print one neuron's atlas card"),
    ("sweep", "flyviz.commands.sweep", "lesion map: how much a text needs each group (on Dask)"),
    ("patch", "flyviz.commands.patch", "causal trace: where and when a prompt keeps its answer"),
    ("importance", "flyviz.commands.importance", "estimated lesions: every neuron's cost to a text"),
    ("circuit", "flyviz.commands.circuit", "the smallest circuit that keeps a task, measured"),
    ("null", "flyviz.commands.null", "write a null model: the same model on a shuffled graph"),
    ("dynamics", "flyviz.commands.dynamics", "the model as a dynamical system, against null "
     "wirings"),
    ("bench", "flyviz.commands.bench", "measure engine speed against the memory-bandwidth floor"),
    ("build-demo", "flyviz.commands.build_demo", "rebuild the embedded demo brain from nothing"),
    ("simulate", "flyviz.commands.simulate", "run the whole-brain spiking (LIF) model, as Brian2"),
    ("check", "flyviz.commands.check", "a battery of spiking-brain checks, with controls"),
    ("screen", "flyviz.commands.screen", "activation and silencing screens of the spiking "
     "brain (on Dask)"),
)

DESCRIPTION = """\
flyviz: watch a connectome language model think.

The Fly LLM's recurrent layer is the fruit-fly central brain (49,393 neurons,
9,050,172 signed synapses), stepped once per text token. With no subcommand,
flyviz opens the desktop app on the embedded demo brain.

A model SPEC is a local folder (a checkpoint or a Fly Recital web export), a
Hugging Face repo id (ngxson/fly-llm-hf, fernandofernandes/fly-wordbrain-rank64,
QuixiAI/FlyGPT or its /scrambled, /init, /full-cns) or "demo". The spiking whole
brain (flyviz simulate) is a folder holding Shiu et al.'s Completeness_783.csv and
Connectivity_783.parquet.
"""

EPILOG = """\
examples (from a clone's root, where assets/ and examples/ are):
  flyviz                                    open the app on the demo brain
  flyviz gui --model ngxson/fly-llm-hf      open the app on a real checkpoint
  flyviz generate demo --prompt "Once upon a time"
  flyviz compare demo --prompt "Once upon a time" --silence 'sign:inhibitory'
  flyviz trace demo --prompt "there was a little girl named"
  flyviz select demo 'superclass:cb_sensory & side:left'
  flyviz info ./fly-llm-hf --json
  flyviz verify ./web --dataset ./dataset   check files, graph and golden traces
  flyviz export demo --prompt "Tom and his dog" --out run.mp4
  flyviz convert run.flyrec --to zarr run.zarr
  flyviz figure run.flyrec --kind raster --out raster.png
  flyviz sweep demo --by superclass --text assets/demo/heldout.txt --max-tokens 2000 \\
      --out lesions.csv
  flyviz patch demo --clean "... girl named Lily." --corrupt "... boy named Tom." \\
      --answer " She" --versus " He" --by superclass --out trace.csv --figure trace.png
  flyviz importance demo --text assets/demo/heldout.txt --max-tokens 2000 --out estimate.csv

Run 'flyviz COMMAND --help' for the options of one command.
"""


#: A value argparse takes for an option because of its leading '-' ("-1s", "-5x5", "-5:"):
#: a minus and then a digit, or a point and a digit. (A plain number, "-1", argparse
#: already takes as a value.)
_NEGATIVE_LOOKING = re.compile(r"^-\.?\d")
#: argparse's message for an option given no value: ``argument -d/--duration: expected
#: one argument`` (or "at least one" for a list).
_NO_VALUE = re.compile(r"^argument (\S+): expected (?:at least )?one argument$")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line and exit status 2."""

    _argv: tuple[str, ...] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Kept for error(): argparse tells it which option lacks a value, not what came
        # next. A subcommand's parser is called here too, with its own arguments.
        self._argv = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        message = self._negative_value_message(message) or message
        self.exit(2, f"flyviz: error: {message} (see 'flyviz {self.prog.split()[-1]} --help')\n"
                  if " " in self.prog else f"flyviz: error: {message} (see 'flyviz --help')\n")

    def _negative_value_message(self, message: str) -> str | None:
        """For "expected one argument" where the value was there but starts with '-' and
        a digit (``--duration -1s``, which argparse reads as an option), how to write it
        instead: ``--duration=-1s`` (the option's own check then says whether a negative
        value makes sense); ``None`` for any other error."""
        match = _NO_VALUE.match(message)
        if match is None:
            return None
        names = match.group(1).split("/")
        option = names[-1]
        for typed, value in zip(self._argv, self._argv[1:]):
            # as typed: the full name, or an abbreviation argparse accepted
            if typed.startswith("-") and typed not in ("-", "--") \
                    and any(name.startswith(typed) for name in names) \
                    and _NEGATIVE_LOOKING.match(value):
                return (f"{option} {value}: a value that starts with '-' reads as an "
                        f"option; write {option}={value}")
        return None


class _StandardOutputError(Exception):
    """Standard output is closed or cannot be written; the message says why. Not an
    :class:`OSError`, so no command's own ``except OSError`` (which names the file it
    writes) takes it for an error of its output file."""


class _GuardedStandardOutput:
    """``sys.stdout`` for the length of one command: writes go to the real stream, and a
    stream that is closed (``>&-``: ``sys.stdout`` is ``None``, and :func:`print` would
    drop the text without a word) or that fails (``>/dev/full``) raises
    :class:`_StandardOutputError`, which :func:`main` reports as one line that names
    standard output. A broken pipe (``| head``) stays a :class:`BrokenPipeError`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _failed(self, exc: OSError) -> _StandardOutputError:
        from flyviz.fileio import os_error

        why = str(os_error(exc)).split(": ", 1)[-1]  # the reason only: no file to name
        return _StandardOutputError(why)

    def write(self, text: str) -> int:
        if self._stream is None:
            raise _StandardOutputError("it is closed")
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from exc

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self._stream is None:
            return  # nothing was written: nothing to lose
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from exc

    def isatty(self) -> bool:
        return self._stream is not None and bool(self._stream.isatty())

    def __getattr__(self, name: str) -> Any:
        # encoding, fileno, buffer, ...: those of the real stream. With none, what None
        # gave (AttributeError), so code that asks with hasattr or getattr(..., default)
        # goes on as it did; only writing is the error.
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _drop_standard_output(stream: Any) -> None:
    """Point a failed standard output's file descriptor at the null device, so that the
    interpreter's own flush at exit does not fail again with "Exception ignored" after
    the one line :func:`main` printed."""
    import os

    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (AttributeError, OSError, ValueError):
        pass  # not a real file (a test's capture): nothing is flushed at exit


def _path_option(text: str) -> Path:
    """A path option's value; an empty one is a usage error, because ``Path("")`` is the
    working folder and a writer would act on that (``--record ""`` wrote into ``.``)."""
    if not text:
        raise argparse.ArgumentTypeError("the name is empty: give a file or folder name")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand's options."""
    parser = _Parser(prog="flyviz", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"flyviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name, help_text in SUBCOMMANDS:
        sp = sub.add_parser(name, help=help_text, description=help_text,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            sp.set_defaults(_module=None)
            continue
        module.configure(sp)
        for action in sp._actions:
            if action.type is Path:
                action.type = _path_option
        # How the command itself names each path it takes ("REC", "OUT", "--out"), for the
        # refusals made before it runs (flyviz.fileio.check_command_paths).
        sp.set_defaults(_module=module_name, _labels={
            action.dest: action.option_strings[0] if action.option_strings else
            str(action.metavar or action.dest.upper()) for action in sp._actions})
    return parser


def _apply_selector(args: argparse.Namespace) -> None:
    """Turn ``--selector NAME`` into the SPEC of that selector's weights file.

    :func:`main` runs it before the command, so every path that
    loads ``args.spec`` (workers included) loads the same file.

    Raises
    ------
    InputError, CheckpointError
        No SPEC to pick in, or no such selector (one line listing the keys).
    """
    selector = getattr(args, "selector", None)
    if selector is None:
        return
    from flyviz.errors import InputError
    from flyviz.model.resolve import selector_spec

    if getattr(args, "spec", None) is None:
        raise InputError("--selector picks weights in a fly-wordbrain release: give the "
                         "release folder or hub id as SPEC")
    args.spec = selector_spec(str(args.spec), str(selector))


def hold_standard_descriptors() -> list[int]:
    """Open the null device on each of file descriptors 0, 1 and 2 that is closed; returns
    those it opened.

    A command started with its standard output or error closed (``flyviz ... >&-``, or
    the app from a launcher that gives it none) would otherwise open its first file, a
    recording or a movie, as descriptor 1 or 2, and what writes there (a warning from Qt
    or OpenGL, a child process such as ffmpeg) would land inside that file. Python's own
    ``sys.stdout`` stays ``None`` for a standard output closed at start, so writing a
    result there is still refused in one line (:class:`_GuardedStandardOutput`).

    A ``sys.stderr`` that Python set to ``None`` becomes a stream on the null device:
    ``print(..., file=None)`` writes to standard output, so every error line would have
    gone into the command's output (``flyviz sweep ... > table.csv 2>&-``), or, with that
    closed too, have ended the command in a traceback nobody sees.
    """
    import os

    held = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # the lower ones are open, so the lowest free is fd itself
                os.dup2(null, fd)
                os.close(null)
            held.append(fd)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    return held


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flyviz`` console script."""
    from flyviz.errors import FlyvizError, Interrupted

    hold_standard_descriptors()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        argv = ["gui", *argv]
    args = parser.parse_args(argv)
    module_name = getattr(args, "_module", None)
    if module_name is None:
        print(f"flyviz: error: '{args.command}' is not available in this installation",
              file=sys.stderr)
        return 2
    gui = getattr(args, "command", None) == "gui"
    restore = None if gui else _terminate_as_interrupt()
    # The app writes nothing there (and runs with no standard output at all when started
    # from a desktop launcher): only the other commands need it to work.
    stdout = sys.stdout
    if not gui:
        sys.stdout = _GuardedStandardOutput(stdout)
    try:
        from flyviz.fileio import check_command_paths, check_text_arguments

        check_command_paths(args)  # names too long, an output over an input: before any work
        check_text_arguments(args)
        _apply_selector(args)  # --selector NAME: the SPEC of that selector's weights file
        code = int(importlib.import_module(module_name).run(args) or 0)
        sys.stdout.flush()  # a full device fails here, while main can still say so
        return code
    except _StandardOutputError as exc:
        print(f"flyviz: error: cannot write to standard output: {exc}", file=sys.stderr)
        _drop_standard_output(stdout)
        return 2
    except Interrupted as exc:  # stopped, not an error: as Ctrl+C ends any command
        print(f"flyviz {args.command}: {exc}", file=sys.stderr)
        return 130
    except FlyvizError as exc:
        print(f"flyviz: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"flyviz: error: file not found: {exc.filename or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("flyviz: error: out of memory; close other programs or use a smaller model",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("flyviz: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a path too long, not permitted, read-only, a full disk, ...
        from flyviz.fileio import os_error

        print(f"flyviz: error: {os_error(exc)}", file=sys.stderr)
        return 2
    finally:
        if isinstance(sys.stdout, _GuardedStandardOutput):
            sys.stdout = stdout
        if restore is not None:
            restore()


def _terminate_as_interrupt() -> "Callable[[], None] | None":
    """Make SIGTERM (a job manager's or ``kill``'s stop) end a command as Ctrl+C does, with
    its ``finally`` blocks and temporary folders cleaned up (the default ends the process on
    the spot and leaves them: the null models of ``circuit --nulls``, a half-written part).
    Only where SIGTERM has its default action and on the main thread; returns what puts it
    back, or ``None``."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "SIGTERM") or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except (ValueError, OSError):
        return None

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return restore


def gui_main() -> int:
    """Entry point of the ``flyviz-gui`` launcher (no console needed)."""
    return main(["gui", *sys.argv[1:]])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
