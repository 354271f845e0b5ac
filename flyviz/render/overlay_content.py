"""What the text overlays of a rendered frame say, as plain data (no Qt, no kinds).

:class:`OverlayContent` is what a kind of model says over one of its frames
(:meth:`flyviz.kinds.ModelKind.overlays`) and what the offscreen renderer draws;
:mod:`flyviz.render.overlay` derives it for every frame of a recording. It sits
under the kinds, which make it, and the renderers, which draw it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OverlayContent", "VISIBLE_NEWLINE", "VISIBLE_SPACE", "display_token"]

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
        A short progress line, e.g. ``"token 12 of 0–39 · generating"``.
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
