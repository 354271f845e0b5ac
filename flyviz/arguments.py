"""Checks of the arguments a library call or an option takes: each returns the value in its
plain form, or raises one :class:`~flyviz.errors.InputError` that names the argument and
says what it accepts.

A wrong type passed to ``flyviz.importance`` or ``flyviz.causal_trace`` would otherwise
surface as a ``TypeError`` or ``IndexError`` from deep inside NumPy or pathlib, naming
nothing the caller wrote. These checks run at the top of the public functions, before any
work. Standard library only, like :mod:`flyviz.errors`.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Collection
from typing import Any

from flyviz.errors import InputError

__all__ = ["choice", "instance_or_default", "loaded_model", "shown", "span", "text_not_a_path",
           "whole_number"]

#: A ``str`` with a line break, or longer than this, is text: never taken for a file's name.
PATH_LIKE_LENGTH = 1024


def shown(value: Any) -> str:
    """A short, one-line picture of a value for a message: ``'x' (str)``, ``None``."""
    if value is None or isinstance(value, bool):
        return repr(value)
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def _bounds(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f" between {lo} and {hi}"
    if lo is not None:
        return f" of {lo} or more"
    return f" of {hi} or less" if hi is not None else ""


def whole_number(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an ``int``, checked to be a whole number in ``[lo, hi]``.

    Parameters
    ----------
    name
        How the caller wrote the argument (``"window"``, ``"--batch"``).
    value
        What was given: an ``int`` or a NumPy integer (``True``/``False``, floats and
        strings are refused: ``2.5`` or ``"8"`` would mean a guess).
    lo, hi
        The inclusive bounds (``None``: unbounded).

    Raises
    ------
    InputError
        ``"window must be a whole number of 1 or more, not 'x' (str)"`` or
        ``"--batch 0 must be between 1 and 4096"``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be a whole number{_bounds(lo, hi)}, not {shown(value)}")
    number = int(value)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        range_text = f"between {lo} and {hi}" if lo is not None and hi is not None else \
            _bounds(lo, hi).strip().removeprefix("of ")
        raise InputError(f"{name} {number} must be {range_text}")
    return number


def choice(name: str, value: Any, choices: Collection[str], *, none: str | None = None
           ) -> Any:
    """``value``, checked to be one of ``choices`` (or ``None`` where ``none`` says what it
    means, e.g. ``"the default"``).

    Raises
    ------
    InputError
        ``"kernel 'gpu' is not one of scipy, llvm (or None: the default)"``.
    """
    if value is None and none is not None:
        return None
    if not isinstance(value, str) or value not in choices:
        also = f" (or None: {none})" if none is not None else ""
        raise InputError(f"{name} {shown(value)} is not one of {', '.join(choices)}{also}")
    return value


def instance_or_default(what: str, value: Any, cls: type, why: str = "") -> Any:
    """``value`` when it is a ``cls``, a default ``cls()`` for ``None``; anything else
    (another kind's settings, a prompt where a stimulus is read) is one line rather than
    dropped for the default without a word.

    Raises
    ------
    InputError
        ``"{what} a {module}.{class} (or None), not {shown(value)}{why}"``, e.g. ``"a
        spiking run's settings are a flyviz.kinds.spiking.BinSettings (or None), not
        GenerationSettings(...) (GenerationSettings)"``.
    """
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise InputError(f"{what} a {cls.__module__}.{cls.__qualname__} (or None), "
                         f"not {shown(value)}{why}")
    return value


def loaded_model(name: str, value: Any, *, none: bool = True) -> Any:
    """``value``, checked to be a loaded model of any kind: what ``flyviz.load`` or
    ``SpikingModel.load`` returned (it has ``neurons`` and ``drawing_anatomy``), or ``None``
    where ``none``. Where a call draws a model's neurons, a spec such as ``"demo"`` would
    be a guess at its kind (both kinds have a demo), so it is refused with the line that
    loads it.

    Raises
    ------
    InputError
        ``"model must be a loaded model (what flyviz.load returned), not 'demo' (str);
        load it first: model=flyviz.load('demo')"``.
    """
    if value is None and none:
        return None
    if value is not None and hasattr(value, "neurons") and hasattr(value, "drawing_anatomy"):
        return value
    hint = f"; load it first: {name}=flyviz.load({os.fspath(value)!r})" \
        if isinstance(value, (str, os.PathLike)) else ""
    or_none = " (or None)" if none else ""
    raise InputError(f"{name} must be a loaded model (what flyviz.load returned){or_none}, "
                     f"not {shown(value)}{hint}")


def span(name: str, value: Any, lo: int, hi: int) -> tuple[int, int]:
    """A half-open range ``(start, stop)`` of whole numbers with ``lo <= start < stop <= hi``.

    Negative numbers are refused rather than counted from the end: ``(-3, 2)`` is far more
    often a slip than a wish for a wrapped range.

    Raises
    ------
    InputError
        ``"positions (5, 2) must be (start, stop) with 1 <= start < stop <= 9"``.
    """
    rule = f"must be (start, stop) with {lo} <= start < stop <= {hi}"
    if isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, (tuple, list)) \
            or len(value) != 2:
        raise InputError(f"{name} {shown(value)} {rule}, two whole numbers")
    start, stop = (whole_number(f"the {which} of {name}", v)
                   for which, v in zip(("start", "stop"), value))
    if not lo <= start < stop <= hi:
        why = "; they count from 0, not from the end" if min(start, stop) < 0 else ""
        raise InputError(f"{name} ({start}, {stop}) {rule}{why}")
    return start, stop


def text_not_a_path(name: str, text: str, reads: str) -> str:
    """``text``, refused when it looks like the name of a file or folder that exists.

    Where a library call takes either text (a ``str``) or files (a :class:`pathlib.Path`),
    a ``str`` is always the text. ``flyviz.importance(model, "heldout.txt")`` would then
    analyse the eleven characters of the name, without a word; so a ``str`` written as a
    path (one line of at most :data:`PATH_LIKE_LENGTH` characters with a ``/``, a leading
    ``~`` or a file suffix) that names something that exists is refused, to be passed as
    a ``Path`` or as the text itself. A plain word is text even where a folder of that
    name exists.

    Parameters
    ----------
    name
        How the caller wrote the argument (``"text"``, ``"text[1]"``).
    text
        The ``str`` given.
    reads
        What a ``Path`` of it would do: ``"to read the file"``.

    Raises
    ------
    InputError
        ``"text 'heldout.txt' is the name of an existing file, and a str is read as text:
        pass pathlib.Path('heldout.txt') to read the file, or the text itself"``.
    """
    if "\n" in text or "\r" in text or not text.strip() or len(text) > PATH_LIKE_LENGTH:
        return text
    # Only what is written as a path: a separator, a home folder or a file suffix. A word
    # that names a folder here ("docs", "demo") is text; refusing it would leave no way
    # to give that text at all.
    stem, suffix = os.path.splitext(text.strip())
    if not ("/" in text or os.sep in text or text.startswith("~")
            or (suffix[1:].isalnum() and stem and " " not in text)):
        return text
    try:
        path = os.path.expanduser(text)
        what = "folder" if os.path.isdir(path) else "file" if os.path.exists(path) else None
    except (OSError, ValueError):  # a name too long for the system, a NUL: not a path
        what = None
    if what is not None:
        # the end of a long path names the file: keep it, not the start
        short = text if len(text) <= 80 else "..." + text[-77:]
        raise InputError(f"{name} {short!r} is the name of an existing {what}, and a str is "
                         f"read as text: pass pathlib.Path({short!r}) {reads}, or the text "
                         "itself")
    return text
