"""What the text overlays of a rendered frame say, independent of how they are drawn.

:class:`OverlayContent` is plain data (running text with its newest piece, a
panel of labelled bars, a progress counter); :func:`iter_overlays` derives it
for every frame of a :class:`~flyviz.record.recording.Recording` as the
model's kind says (:meth:`flyviz.kinds.ModelKind.overlays`: a language model's
text and next-token candidates; a kind without text, its time axis alone), so
that the offscreen renderer and any other view show the same words.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flyviz.record.recording import Recording

#: Characters that stand in for invisible text in the bars' labels.
VISIBLE_SPACE = "\u00b7"  # middle dot
VISIBLE_NEWLINE = "\u00b6"  # pilcrow


@dataclass(frozen=True)
class OverlayContent:
    """The words drawn over one frame.

    Parameters
    ----------
    prompt
        Text read before the newest piece (a language model's prompt).
    generated
        Text produced before the newest piece.
    newest
        The newest piece of text (highlighted): the prompt token just read, or
        the token just generated.
    newest_in_prompt
        True while the newest piece is read, not produced.
    bars
        ``(label, value in 0..1)`` rows of the right-hand panel, first the
        foremost (a language model's next-token candidates and probabilities).
    counter
        A short progress line, e.g. ``"token 12 of 40 · generating"``.
    after
        Text after the newest piece (a flow movie's prompt goes on past the
        position it shows), drawn as the prompt is.
    bars_title
        The heading of the ``bars`` panel.
    bar_labels
        What each ``bars`` row says beside its bar (default: the value as a
        percentage); the bar's length stays the row's value (0..1).
    bar_signs
        The sign of each ``bars`` row's value: bars of positive ones in the
        flow colormap's red, negative ones in its blue (default: the usual bars).
    """

    prompt: str
    generated: str
    newest: str
    newest_in_prompt: bool
    bars: tuple[tuple[str, float], ...]
    counter: str
    after: str = ""
    bars_title: str = ""
    bar_labels: tuple[str, ...] = ()
    bar_signs: tuple[float, ...] = ()


def display_token(text: str) -> str:
    """A piece of text made visible for a label: spaces as ``·``, newlines as ``¶``."""
    if text == "":
        return "(empty)"
    text = (text.replace(" ", VISIBLE_SPACE).replace("\n", VISIBLE_NEWLINE)
            .replace("\t", VISIBLE_SPACE * 2).replace("\r", ""))
    # Control characters have no glyph: show their code instead of a box.
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256
                   else f"\\u{ord(ch):04x}" for ch in text)


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
