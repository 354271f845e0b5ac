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

__all__ = ["choice", "shown", "span", "whole_number"]


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
