"""What the text overlays of a rendered frame say, independent of how they are drawn.

:class:`OverlayContent` is plain data (running text with its newest piece, a
panel of labelled bars, a progress counter; :mod:`flyviz.render.overlay_content`,
offered here too); :func:`iter_overlays` derives it
for every frame of a :class:`~flyviz.record.recording.Recording` as the
model's kind says (:meth:`flyviz.kinds.ModelKind.overlays`: a language model's
text and next-token candidates; a kind without text, its time axis alone), so
that the offscreen renderer and any other view show the same words.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flyviz.record.recording import Recording
from flyviz.render.overlay_content import (VISIBLE_NEWLINE, VISIBLE_SPACE, OverlayContent,
                                            display_token)

__all__ = ["OverlayContent", "VISIBLE_NEWLINE", "VISIBLE_SPACE", "display_token", "iter_overlays",
           "overlay_contents"]


def iter_overlays(recording: Recording, start: int = 0, stop: int | None = None, *,
                  kind: Any = None) -> Iterator[OverlayContent]:
    """Overlay content of frames ``start:stop`` of ``recording``, one at a time, as
    ``kind`` (a :class:`~flyviz.kinds.ModelKind`; default: the one that made the
    recording, :func:`~flyviz.kinds.kind_of_recording`) says.

    Frames before ``start`` may be read (a language model's prompt text) but are
    not yielded.
    """
    from flyviz.kinds import kind_of_recording

    return (kind or kind_of_recording(recording)).overlays(recording, start, stop)


def overlay_contents(recording: Recording, start: int = 0, stop: int | None = None, *,
                     kind: Any = None) -> list[OverlayContent]:
    """:func:`iter_overlays` as a list (for short recordings and tests)."""
    return list(iter_overlays(recording, start, stop, kind=kind))
