"""Reading and writing the user's files safely: the one home of the checks every command
needs.

- :func:`os_error` turns an :class:`OSError` (a name over the file system's
  255-character limit, no permission, a read-only folder, a folder where a
  file was expected, a full disk) into one :class:`~flyviz.errors.FileAccessError`
  line naming the path; the command line does the same for any that escapes.
- :func:`open_regular` / :func:`check_regular` open or check regular files only:
  a FIFO, a device or a socket in place of a file would block or never end.
- :func:`check_not_input` refuses an output that is one of the inputs (the
  same path, or another name of the same file: a hard or symbolic link).
- :func:`atomic_write` writes into a temporary file beside the output and
  renames it into place, so that a full disk or an error leaves the old file
  (or none), never a half-written one.
- :func:`earlier_output` says what writing a render or a conversion replaces, and
  :func:`replaced_note` how the line that says it was written says so
  (``...; replaced the earlier file)``).

Standard library only (no Qt, no numpy): the model and record layers use it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from flyviz.errors import FileAccessError, InputError

#: Longest name component most file systems take (ext4, XFS, APFS, NTFS).
NAME_MAX = 255

# The process's umask, read once: a file written through a temporary gets the mode
# open() would have given it (mkstemp makes it 0600).
_UMASK = os.umask(0o022)
os.umask(_UMASK)

_WHY = {
    errno.ENAMETOOLONG: "the name is too long (at most 255 characters per name)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.EISDIR: "it is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOSPC: "no space left on the device; free some space and run again",
    errno.EDQUOT: "the disk quota is exceeded; free some space and run again",
    errno.EFBIG: "the file is too large for this file system",
    errno.ELOOP: "too many symbolic links in the path",
    errno.EEXIST: "it exists already",
    errno.ENXIO: "it is not a file that can be read (a FIFO or device with no one at the "
                 "other end)",
    errno.EIO: "an input/output error of the device",
}


def short_path(path: Any, limit: int = 120) -> str:
    """``path`` as text, its middle elided past ``limit`` characters (a 300-character name
    in a message is noise; its start and end say which one it is)."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return f"{text[:keep]}...{text[-keep:]} ({len(text)} characters)"


def os_error(exc: OSError, path: Any = None, action: str | None = None) -> FileAccessError:
    """One :class:`FileAccessError` line for ``exc``: what was done to which path, and why.

    Parameters
    ----------
    exc
        The error.
    path
        The path to name (default: the error's own ``filename``).
    action
        ``"read"``, ``"write"``, ... (default: "use").
    """
    name = path if path is not None else (exc.filename if exc.filename is not None else "")
    why = _WHY.get(exc.errno or 0) or (exc.strerror or str(exc) or type(exc).__name__)
    verb = action or "use"
    where = f" {short_path(name)}" if name != "" else ""
    return FileAccessError(f"cannot {verb}{where}: {why}")


def is_disk_full(exc: BaseException) -> bool:
    """True for an :class:`OSError` of a full disk or an exceeded quota."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


#: Characters a writer adds to an output's name for the temporary file it writes beside it
#: and renames into place (``.NAME.1a2b3c4d.part``, ``.NAME.partial``), besides the
#: name's own suffix written again after them (``.part.csv``).
TEMP_NAME_ROOM = 16


def nearest_existing(path: str | Path) -> Path:
    """``path`` itself where it exists, else its nearest parent that does (the root at
    worst): where a check of a path still to be made can look."""
    where = Path(path)
    while not where.exists() and where != where.parent:
        where = where.parent
    return where


def name_max(folder: str | Path) -> int:
    """The longest name (bytes) the file system of ``folder`` (or of its nearest existing
    parent) takes: the system's own ``PC_NAME_MAX``, else :data:`NAME_MAX`."""
    where = nearest_existing(Path(folder).expanduser())
    try:
        limit = os.pathconf(where, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return NAME_MAX
    return limit if isinstance(limit, int) and limit > 0 else NAME_MAX


def check_name_lengths(path: str | Path, what: str = "", *, output: bool = False) -> None:
    """Raise when a component of ``path`` is longer than its file system takes (the system's
    own limit, :func:`name_max`), before any work, where the call that fails would come
    late. For an ``output``, its own name must also leave room for the temporary name it is
    first written under (:data:`TEMP_NAME_ROOM` and its suffix again)."""
    label = f"{what} " if what else ""
    parts = Path(path).parts
    folder = Path(".")
    for k, part in enumerate(parts):
        limit = name_max(folder)
        size = len(os.fsencode(part))
        if size > limit:
            raise FileAccessError(f"cannot use {label}{short_path(path)}: "
                                  f"the name is too long (at most {limit} bytes per name here)")
        if output and k == len(parts) - 1:
            room = TEMP_NAME_ROOM + len(os.fsencode(Path(part).suffix))
            if size > limit - room:
                raise FileAccessError(
                    f"cannot write {label}{short_path(path)}: the name is too long (at most "
                    f"{limit - room} bytes here: it is written first under a temporary name "
                    f"{room} bytes longer); give a shorter name")
        folder = folder / part


def check_output_path(path: str | Path, what: str = "the output", probe: bool = False,
                      folder: bool = False) -> Path:
    """Check, before any long work, that ``path`` can be written: its name is not too long,
    it is not a folder, and its folder exists (or can be made) and is writable; with
    ``probe``, by creating a file in the nearest folder that exists (:func:`probe_writable`:
    ``os.access`` says yes to root everywhere, /proc included).

    Parameters
    ----------
    folder
        ``path`` is a folder to write into (PNG frames): a folder there is fine, a file
        is not.

    Raises
    ------
    FileAccessError
        One line naming ``path`` and why.
    """
    path = Path(path).expanduser()
    check_name_lengths(path, what, output=True)
    if folder and path.exists() and not path.is_dir():
        raise FileAccessError(f"cannot write {what} {short_path(path)}: it is a file; give a "
                              "folder name")
    if not folder and path.is_dir():
        raise FileAccessError(f"cannot write {what} {short_path(path)}: it is a folder; give a "
                              "file name")
    parent = path.parent if str(path.parent) else Path(".")
    existing = nearest_existing(path if folder else parent)
    if not existing.is_dir():
        raise FileAccessError(f"cannot write {what} {short_path(path)}: "
                              f"{missing_folder(path if folder else parent)}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise FileAccessError(f"cannot write {what} {short_path(path)}: the folder "
                              f"{short_path(existing)} is not writable")
    if probe:
        probe_writable(existing, what, path)
    return path


#: What every command that writes a result (``flyviz atlas``, ``sweep``, ``patch``,
#: ``importance``, ``circuit``, ``check``, and ``simulate``'s spike table) does with one
#: already at its ``--out``, as its ``--help`` says it (:func:`check_new_result` is the
#: rule). ``screen`` continues into its folder instead (a rerun skips the sets done there and
#: refuses other settings), and ``null`` refuses any ``--out`` that exists.
KEPT_RESULT_HELP = ("a finished result already there is never replaced: give a new name, or "
                    "delete the old one first")

#: The same, for a command with ``--resume``: continuing its own interrupted run is the one
#: way it writes over what is there.
KEPT_RESUMABLE_RESULT_HELP = (KEPT_RESULT_HELP + "; --resume continues an interrupted run "
                              "that writes there")


#: What ``--record FILE`` does with a file already at FILE, as each command's ``--help``
#: says it: a recording may be the only copy of a long run, so the same command typed
#: again must not throw it away (:func:`check_command_paths` refuses it).
KEPT_RECORDING_HELP = ("a recording already there is never replaced: give a new name, or "
                       "delete the old one first")


def check_new_result(path: str | Path, what: str, option: str = "--out", *,
                     continuing: bool = False) -> Path:
    """Refuse, before any model is loaded, to write a result where a finished one is: a
    file, or a folder that holds anything (a result may be hours of a cluster's work, and
    the same command typed again must not throw it away without a word). An empty folder
    holds nothing to lose.

    Parameters
    ----------
    what
        What the result is, for the refusal: ``"atlas"``, ``"lesion map"``.
    continuing
        The run continues an interrupted run that writes ``path`` (``--resume`` with its
        parts kept): the one case that replaces what is there.

    Raises
    ------
    InputError
        One line naming ``path`` and what to do.
    """
    path = Path(path).expanduser()
    if continuing:
        return path
    if path.is_file() or path.is_dir() and not _empty_folder(path):
        raise InputError(f"{option} {short_path(path)} is a finished {what}: give a new name, "
                         f"or delete {short_path(path)} to make it again")
    return path


def earlier_output(out: str | Path, folder: str = "files", holding: str = "*") -> str | None:
    """What writing ``out`` replaces, as the last line of the command that writes it says
    it (``...; replaced the earlier file)``): ``"the earlier file"`` where ``out`` is a
    file, ``f"the earlier {folder}"`` where it is a folder that holds what ``holding``
    matches, or ``None`` for nothing. Asked before writing: afterwards ``out`` is always
    there.

    The rule every render and conversion follows (a movie and its PNG frames, a figure, a
    page, a trace's graph, a conversion, the demo brain): made again from its inputs in the
    time it takes, it replaces one of the same name as ``savefig`` does, rather than refuse
    it (a recording, which may be the only copy of a run, is never written over:
    :data:`KEPT_RECORDING_HELP`; a finished result neither: :func:`check_new_result`), and
    says so, so that a name typed again by mistake is noticed.

    Parameters
    ----------
    out
        The output about to be written.
    folder
        What a folder at ``out`` holds, for the message: ``"frames"``, ``"store"``.
    holding
        The glob of the names that make a folder at ``out`` an earlier output
        (``"frame_*.png"``); a folder without any is not one (an empty folder to write
        PNG frames into replaces nothing).
    """
    path = Path(out).expanduser()
    if path.is_file():
        return "the earlier file"
    try:
        if path.is_dir() and any(path.glob(holding)):
            return f"the earlier {folder}"
    except OSError:     # a folder that cannot be listed: the write will say why
        pass
    return None


def replaced_note(replaced: str | None, inside: bool = False) -> str:
    """What the line that says an output was written adds about :func:`earlier_output`'s
    ``replaced``: ``" (replaced the earlier file)"``, or inside the line's own parentheses
    (``inside``) ``"; replaced the earlier file"``; nothing where nothing was replaced."""
    if not replaced:
        return ""
    return f"; replaced {replaced}" if inside else f" (replaced {replaced})"


def _empty_folder(path: Path) -> bool:
    """True when the folder ``path`` holds nothing; one that cannot be listed may hold a
    result, and is not taken for empty."""
    try:
        return not any(path.iterdir())
    except OSError:
        return False


def missing_folder(folder: str | Path) -> str:
    """Why a file cannot be written into ``folder``, which is not a folder: ``"the folder
    out does not exist"``, or ``"empty.txt is a file, not a folder"`` where ``folder`` (or
    the nearest part of it that exists) is a file: "does not exist" would send the user
    looking for something that is there."""
    folder = Path(folder) if str(folder) else Path(".")
    existing = nearest_existing(folder)
    if existing.exists() and not existing.is_dir():
        return f"{short_path(existing)} is a file, not a folder"
    return f"the folder {short_path(folder)} does not exist"


def folder_refusal(exc: OSError, folder: str | Path) -> str:
    """Why nothing could be written into ``folder``, from the error its making or a write
    into it raised: :func:`missing_folder`'s words where a part of it is a file (mkdir's
    "File exists" names neither the part nor why), else the system's reason."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)) and not Path(folder).is_dir():
        return missing_folder(folder)
    return str(exc.strerror or exc)


def probe_writable(folder: str | Path, what: str, path: str | Path) -> None:
    """Create and remove a file in ``folder``, where ``path`` (``what``) is to be written:
    only trying tells, before hours of work, whether a folder takes files (``os.access``
    says yes to root everywhere, /proc and read-only mounts included).

    Raises
    ------
    FileAccessError
        One line naming ``path`` and the system's reason.
    """
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".flyviz-probe-"):
            pass
    except OSError as exc:
        label = f"{what} " if what else ""
        if exc.errno == errno.ENOENT and Path(folder).is_dir():
            # A folder that is there but says "no such file" of a new one: a system's
            # pseudo-file system (/proc, /sys), where no file can be saved.
            why = f"the folder {short_path(folder)} takes no new files (the system says: " \
                  f"{(exc.strerror or str(exc)).lower()}); choose another folder"
        else:
            why = _WHY.get(exc.errno or 0) or str(exc.strerror or exc)
        raise FileAccessError(f"cannot write {label}{short_path(path)}: {why}") from None


#: The example files the help and the guide name, by file name, with where a clone of the
#: repository holds them (they are not in the wheel): a user who types the name from
#: another folder is told where it is (:func:`shipped_example_hint`).
SHIPPED_EXAMPLES = {
    "names.jsonl": "examples/names.jsonl",
    "checks-demo.txt": "examples/checks-demo.txt",
    "sets.txt": "examples/sets.txt",
    "heldout.txt": "assets/demo/heldout.txt",
}


def shipped_example_hint(path: str | Path) -> str:
    """``"; the shipped names.jsonl is examples/names.jsonl in a clone (run from its root)"``
    for a missing ``path`` named as one of :data:`SHIPPED_EXAMPLES`, else ``""``: the end of
    a corpus's, a task's, a battery's or a sets file's not-found error."""
    name = Path(path).name
    where = SHIPPED_EXAMPLES.get(name)
    if where is None:
        return ""
    return f"; the shipped {name} is {where} in a clone of flyviz (run from its root)"


def not_a_file(path: str | Path) -> str:
    """Why ``path`` cannot be read as a file, in a few words: ``"no such file"``, ``"it is a
    folder"``, ``"it is a FIFO, not a regular file"``...; ``""`` for a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if stat.S_ISREG(mode):
        return ""
    if stat.S_ISDIR(mode):
        return "it is a folder"
    return f"it is {_not_regular(mode)}, not a regular file"


def _not_regular(mode: int) -> str:
    """What a path of ``st_mode`` ``mode`` that is not a regular file is, in two words."""
    return "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
        "a device or socket"


def check_regular(path: str | Path, what: str = "file") -> None:
    """Raise unless ``path`` is a regular file (a FIFO would block the reader; a device or
    a socket never ends). A missing file raises :class:`FileNotFoundError` as ``open``
    would."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise os_error(exc, path, "read") from None
    if not stat.S_ISREG(mode):
        raise FileAccessError(f"cannot read {short_path(path)} as a {what}: it is "
                              f"{_not_regular(mode)}, not a regular file")


def open_regular(path: str | Path, mode: str = "rb", what: str = "file",
                 **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for reading, of a regular file only: the file is opened without
    blocking (a FIFO would wait for a writer forever) and checked before it is read."""
    if any(c in mode for c in "wax+"):
        raise ValueError("open_regular opens files for reading only")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise os_error(exc, path, "read") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileAccessError(f"cannot read {short_path(path)} as a {what}: it is "
                                  f"{_not_regular(info.st_mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | Path, what: str = "file") -> bytes:
    """The bytes of a regular file (see :func:`open_regular`)."""
    with open_regular(path, "rb", what) as handle:
        return handle.read()


def _absolute(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(path))


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """True when ``a`` and ``b`` name the same existing file or folder (the same path, a
    hard link or a symbolic link to it); False when either does not exist (a word such as
    ``--by superclass`` is no file)."""
    try:
        return os.path.exists(b) and (
            _absolute(a) == _absolute(b) or os.path.exists(a) and os.path.samefile(a, b))
    except (OSError, ValueError):
        return False


def check_not_input(output: str | Path | None, inputs: Mapping[str, Any],
                    option: str = "--out") -> None:
    """Raise when ``output`` is one of ``inputs`` (``{option name: path or paths}``):
    writing it would destroy what is read.

    Raises
    ------
    InputError
        Naming both options, before anything is read or written.
    """
    if output is None:
        return
    for name, value in inputs.items():
        if value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if item is None or not isinstance(item, (str, os.PathLike)):
                continue
            member = folder_member(output, _folder_read(name, item))
            if member is not None:
                raise InputError(f"{option} {short_path(output)} is {member}, a file the folder "
                                 f"of {name} {short_path(item)} is read from; writing it would "
                                 "destroy it: give a file name outside that folder")
            if same_file(output, item):
                if name in ("--recording", "--source", "REC"):
                    what = f"the recording itself ({name})"
                else:
                    what = f"also {name}" if name in OUTPUT_OPTIONS.values() else \
                        f"the input of {name}"
                raise InputError(f"{option} {short_path(output)} is {what}; writing it would "
                                 "destroy it: give another file name")


def _folder_read(option: str, path: Any) -> Any:
    """The folder an input ``path`` is read from: itself when it is one, else the folder
    of a spiking brain's completeness table given as BRAIN (its connectivity is beside
    it)."""
    if option == "BRAIN" and os.path.isfile(os.path.expanduser(path)):
        return os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    return path


#: The file suffix of a flyviz recording (``flyviz.record.flyrec_codec.FILE_SUFFIX``).
RECORDING_SUFFIX = ".flyrec"

#: The command-line options (argparse dests) that name files a command writes, and the
#: ones that name files or folders it reads; ``--by``/``SPEC`` may be a word, not a path.
OUTPUT_OPTIONS = {"out": "--out", "record": "--record", "graph": "--graph", "movie": "--movie",
                  "figure": "--figure"}
#: The suffix an output option's file must have, where it writes one kind of file: every
#: command's ``--record`` writes a recording (one saved as ``x.txt`` is not found again by
#: the app's file dialog, nor read by the napari plugin).
OUTPUT_SUFFIXES = {"record": RECORDING_SUFFIX}
#: The output options that always name one file (a recording, a graph, a figure), never a
#: folder; ``--out`` and ``--movie`` name a folder in some commands (a null, PNG frames).
FILE_OUTPUTS = ("record", "graph", "figure")
#: The output options never written over (:data:`KEPT_RECORDING_HELP`), and what the
#: refusal calls the file there; the others are renders or tables made again from their
#: inputs.
KEPT_OUTPUTS = {"record": "recording"}
INPUT_OPTIONS = {"spec": "SPEC", "model": "--model", "dataset": "--dataset",
                 "recording": "--recording", "source": "--source", "text": "--text",
                 "corpus": "--corpus", "by": "--by", "atlas": "--atlas", "mesh": "--mesh",
                 "lesion_map": "--lesion-map", "brain": "BRAIN", "excite_file": "--excite-file",
                 "input_spikes": "--input-spikes", "sets": "--sets", "task": "--task",
                 "compare": "--compare",
                 "connectivity": "--connectivity", "coordinates": "--coordinates",
                 "classification": "--classification"}


#: The files a model, dataset or spiking brain folder is read from (relative to the folder,
#: matched without regard to case): an output there would replace what the command reads, or
#: what the next load of the folder reads (a checkpoint's JSON and tensors, a dataset's
#: graph/, interface/ and neurons/, the authors' completeness and connectivity tables and
#: FlyWire's coordinates and classification).
FOLDER_MEMBERS = ("*.json", "*.safetensors", "*.f32", "*.i32", "*.u16", "*.i16",
                  "graph/*", "interface/*", "neurons/*",
                  "completeness_*.csv", "*_completeness_*.csv", "connectivity_*.parquet",
                  "*_connectivity_*.parquet", "coordinates.csv", "coordinates.csv.gz",
                  "classification.csv", "classification.csv.gz")


def folder_member(output: str | os.PathLike[str], folder: str | os.PathLike[str]) -> str | None:
    """The name, inside ``folder``, of a file that ``output`` would replace and that the
    folder's reader reads (:data:`FOLDER_MEMBERS`), or ``None``. Both are compared
    resolved (a symbolic link to the folder is the folder)."""
    import fnmatch

    try:
        base = Path(os.path.realpath(os.path.expanduser(folder)))
        if not base.is_dir():
            return None
        target = Path(os.path.realpath(os.path.expanduser(output)))
        inside = target.relative_to(base).as_posix()
    except (OSError, ValueError):
        return None
    lowered = inside.lower()
    return inside if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in FOLDER_MEMBERS) \
        else None


def _paths(value: Any) -> list[Any]:
    values = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in values if isinstance(v, (str, os.PathLike)) and str(v)]


def check_command_paths(args: Any) -> None:
    """The checks every command's paths get before it starts (:func:`flyviz.cli.main`
    runs it): no output with an empty name or, where the option writes one kind of file,
    another suffix (:data:`OUTPUT_SUFFIXES`: ``--record`` must end in ``.flyrec``), no name
    too long for the file system, no output that is one of the inputs or another
    output, and no output of :data:`KEPT_OUTPUTS` (``--record``) where a file already is.

    Parameters
    ----------
    args
        The parsed options (an :class:`argparse.Namespace`).

    Raises
    ------
    FileAccessError, InputError
        One line naming the option and the path.
    """
    options = vars(args)
    outputs = {dest: options[dest] for dest in OUTPUT_OPTIONS if options.get(dest) is not None}
    inputs = {dest: options[dest] for dest in INPUT_OPTIONS if options.get(dest) is not None}
    # The command's own names where it gives them (convert's REC and OUT), else the usual.
    own = options.get("_labels") or {}

    def named(dest: str) -> str:
        return str(own.get(dest) or OUTPUT_OPTIONS.get(dest) or INPUT_OPTIONS[dest])

    for dest, value in outputs.items():
        if any(isinstance(v, (str, os.PathLike)) and not os.fspath(v)
               for v in (value if isinstance(value, (list, tuple)) else [value])):
            # An empty name is the working folder to some writers and nothing to others.
            raise InputError(f"{named(dest)} is empty: give a file name")
    for dest, value in {**inputs, **outputs}.items():
        for path in _paths(value):
            check_name_lengths(path, named(dest), output=dest in outputs)
    for n, (dest, value) in enumerate(outputs.items()):
        label = named(dest)
        others = {named(d): v for d, v in inputs.items()}
        others.update({named(d): v for d, v in list(outputs.items())[n + 1:]})
        for path in _paths(value):
            check_not_input(path, others, label)
            for later, other in list(outputs.items())[n + 1:]:
                # Two outputs of one name, neither written yet: the second would replace
                # the first (check_not_input compares existing files only).
                if any(_absolute(path) == _absolute(o) for o in _paths(other)):
                    raise InputError(f"{label} and {named(later)} are both "
                                     f"{short_path(path)}: give each its own file name")
    # Last: an output over an input is the graver news, and says so first.
    for dest, value in outputs.items():
        suffix = OUTPUT_SUFFIXES.get(dest)
        for path in _paths(value) if suffix else ():
            if Path(path).suffix.lower() != suffix:
                raise InputError(f"{named(dest)} {short_path(path)} must end in {suffix}, "
                                 f"e.g. {named(dest)} {Path(path).stem or 'run'}{suffix}")
    for dest, value in outputs.items():
        for path in _paths(value):
            check_output_folder(path, named(dest), file=dest in FILE_OUTPUTS)
            if dest in KEPT_OUTPUTS and Path(path).expanduser().is_file():
                # Here, before any work: refused only when saving, the new run (maybe
                # hours of it) would be thrown away instead.
                raise InputError(f"{named(dest)} {short_path(path)} already exists, and a "
                                 f"{KEPT_OUTPUTS[dest]} is never written over: give a new "
                                 f"name, or delete {short_path(path)} first")


def check_output_folder(path: str | Path, what: str, *, file: bool = False) -> None:
    """Raise unless the folder ``path`` would be written in takes a new file: the nearest
    part of it that exists is a folder, and a file can be made there (tried:
    :func:`probe_writable`; ``os.access`` says yes to root everywhere, /proc included).
    A missing folder is no reason (the commands make it). With ``file``, ``path`` itself
    must not be a folder.

    :func:`check_command_paths` runs it on every output of every command, before any
    work: the writers that meet such a folder meet it only at the end, after the run
    (``generate --record /proc/run.flyrec`` generated, then failed to save).

    Raises
    ------
    FileAccessError
        ``"cannot write --record notes.txt/run.flyrec: notes.txt is a file, not a folder"``.
    """
    path = Path(path).expanduser()
    if file and path.is_dir():
        raise FileAccessError(f"cannot write {what} {short_path(path)}: it is a folder; give a "
                              "file name")
    # An existing folder is written into (PNG frames, a circuit's tables); a file's folder
    # is its parent.
    where = path if path.is_dir() else nearest_existing(path.parent if str(path.parent)
                                                        else Path("."))
    if not where.is_dir():
        raise FileAccessError(f"cannot write {what} {short_path(path)}: "
                              f"{missing_folder(path.parent)}")
    probe_writable(where, what, path)


def check_text_arguments(args: Any) -> None:
    """Refuse a text option that is not valid UTF-8 (a title, a name, a query): the shell
    passes such bytes through as lone surrogates, which no file or page can hold. Paths are
    :class:`~pathlib.Path` objects and are not checked (a Linux file name may be any bytes),
    nor is an input that may be a path or a word (BRAIN, SPEC) when it names an existing
    file or folder.

    Raises
    ------
    InputError
        Naming the option.
    """
    for dest, value in vars(args).items():
        for text in value if isinstance(value, (list, tuple)) else [value]:
            bad = next((c for c in text if "\ud800" <= c <= "\udfff"), None) \
                if isinstance(text, str) else None
            if bad is not None and dest in INPUT_OPTIONS and os.path.lexists(text):
                continue    # BRAIN, SPEC...: a path or a word; as an existing path, any bytes
            if bad is not None:
                name = INPUT_OPTIONS.get(dest) or "--" + dest.replace("_", "-")
                # The shell's undecodable byte b arrives as U+DC00 + b (surrogateescape).
                byte = f" (byte 0x{ord(bad) - 0xDC00:02x})" if bad >= "\udc80" else ""
                raise InputError(f"{name} is not valid UTF-8 text{byte}")


def temporary_file_beside(path: str | Path, suffix: str = ".part") -> Path:
    """A new empty file beside ``path``, to write and then rename onto ``path``, with the
    mode ``open()`` gives a new file (the umask's): :func:`tempfile.mkstemp` makes it 0600,
    and a mode sticks to the finished file through the rename, so a recording or table
    would be readable by its owner only. :class:`OSError` as raised."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name[:80]}.", suffix=suffix,
                                dir=path.parent if str(path.parent) else ".")
    try:
        os.chmod(name, 0o666 & ~_UMASK)
    finally:
        os.close(fd)
    return Path(name)


def temporary_folder_beside(path: str | Path, suffix: str = ".part") -> Path:
    """A new empty folder beside ``path``, to fill and then rename onto ``path``, with the
    mode ``mkdir`` gives a new folder (:func:`tempfile.mkdtemp` makes it 0700, which would
    stick to the finished folder). :class:`OSError` as raised."""
    path = Path(path)
    name = tempfile.mkdtemp(prefix=f".{path.name[:80]}.", suffix=suffix,
                            dir=path.parent if str(path.parent) else ".")
    os.chmod(name, 0o777 & ~_UMASK)
    return Path(name)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Write ``path`` through a temporary file beside it, renamed into place once the
    ``with`` block ends without an error (so a full disk or a crash leaves the old file or
    none, never a torn one). An :class:`OSError` becomes one :class:`FileAccessError`.

    The temporary name keeps ``path``'s suffix (some writers look at it).
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        tmp = temporary_file_beside(path, f".part{path.suffix}")
    except OSError as exc:
        raise os_error(exc, path, "write") from None
    try:
        with open(tmp, mode, **kwargs) as handle:
            yield handle
            handle.flush()
        os.replace(tmp, path)
    except OSError as exc:
        raise os_error(exc, path, "write") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text_atomically(path: str | Path, text: str) -> None:
    """``path.write_text(text)`` through :func:`atomic_write`."""
    with atomic_write(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)


def write_bytes_atomically(path: str | Path, data: bytes) -> None:
    """``path.write_bytes(data)`` through :func:`atomic_write`."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def new_folder(out: str | Path, label: str | None = None) -> Iterator[Path]:
    """Write the new folder ``out`` through a temporary folder beside it (yielded), renamed
    into place once the ``with`` block ends without an error: an error or an interruption
    leaves nothing under ``out`` and no temporary folder. A missing parent folder is made
    (as every command makes its output's), and removed again if the write fails. An
    :class:`OSError` becomes one :class:`InputError` beginning with ``label`` (default: the
    path).
    """
    out = Path(out)
    label = str(out) if label is None else label
    parent = out.parent if str(out.parent) else Path(".")
    chain = [parent, *parent.parents]
    made = chain[:chain.index(nearest_existing(parent))][::-1]  # to be made, outermost first
    done = False
    try:
        try:
            parent.mkdir(parents=True, exist_ok=True)
            scratch = temporary_folder_beside(out, ".partial")
        except OSError as exc:
            raise InputError(f"{label}: cannot write in {parent} ({exc.strerror})") from None
        try:
            yield scratch
            os.replace(scratch, out)
            done = True
        except OSError as exc:
            raise InputError(f"{label}: writing failed ({exc.strerror or exc})") from None
        finally:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        if not done:
            for folder in reversed(made):   # the innermost first; only while empty
                with contextlib.suppress(OSError):
                    folder.rmdir()


__all__ = ["FOLDER_MEMBERS", "NAME_MAX", "TEMP_NAME_ROOM", "atomic_write", "new_folder", "name_max",
           "nearest_existing", "folder_member", "check_name_lengths", "check_not_input",
           "check_command_paths", "check_new_result", "check_output_folder", "check_output_path",
           "KEPT_OUTPUTS", "KEPT_RECORDING_HELP", "KEPT_RESULT_HELP",
           "KEPT_RESUMABLE_RESULT_HELP",
           "check_regular", "folder_refusal", "is_disk_full", "open_regular", "os_error",
           "read_regular_bytes",
           "same_file", "short_path", "temporary_file_beside", "temporary_folder_beside",
           "write_bytes_atomically", "write_text_atomically"]
