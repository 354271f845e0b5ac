"""Skip a test only when this machine has no offscreen OpenGL; any other export error fails it.

An export that cannot get an OpenGL context says so in one message that begins with
:data:`flyviz.render.gl_backend.NO_OFFSCREEN_GL` (the library raises it as an ``ExportError``,
the command line prints it after ``flyviz: error:``). Every other ``ExportError`` is the
export itself going wrong, and a test that skipped on it would read a broken export as
"skipped". Tests import :func:`offscreen_gl_or_skip` (around the library call) or
:func:`skip_if_no_offscreen_gl` (on a command line's error text) from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from flyviz.model.errors import ExportError
from flyviz.render.gl_backend import NO_OFFSCREEN_GL


def says_no_offscreen_gl(message: str) -> bool:
    """True when ``message`` is the error for "no offscreen OpenGL can be had here"."""
    return NO_OFFSCREEN_GL in message


def skip_if_no_offscreen_gl(message: str) -> None:
    """Skip the running test when ``message`` says no offscreen OpenGL can be had; else return."""
    if says_no_offscreen_gl(message):
        pytest.skip(f"no offscreen OpenGL here: {message.strip()}")


@contextmanager
def offscreen_gl_or_skip() -> Iterator[None]:
    """Run the block; skip the test if it raised the "no offscreen OpenGL" error.

    Any other :class:`ExportError` propagates and fails the test.
    """
    try:
        yield
    except ExportError as exc:
        skip_if_no_offscreen_gl(str(exc))
        raise
