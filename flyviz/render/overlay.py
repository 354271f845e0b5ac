"""What the text overlays of a rendered frame say, independent of how they are drawn.

:class:`OverlayContent` is plain data (text so far, the newest token, the
top-k candidates, a token counter); :func:`iter_overlays` derives it for
every frame of a :class:`~flyviz.record.recording.Recording`, so that the
offscreen renderer and any other view show the same words.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from flyviz.record.frame import PHASE_PROMPT
from flyviz.record.recording import Recording

#: Characters that stand in for invisible token text in the top-k labels.
VISIBLE_SPACE = "\u00b7"  # middle dot
VISIBLE_NEWLINE = "\u00b6"  # pilcrow


@dataclass(frozen=True)
class OverlayContent:
    """The words drawn over one frame.

    Parameters
    ----------
    prompt
        Prompt text read before the newest token.
    generated
        Generated text before the newest token.
    newest
        The newest token's text (highlighted): the prompt token just read, or
        the token just generated.
    newest_in_prompt
        True while the model is still reading the prompt.
    top_k
        ``(token text, probability)`` pairs, most likely first.
    counter
        A short progress line, e.g. ``"token 12 of 40 · generating"``.
    after
        Text after the newest token (a flow movie's prompt goes on past the
        position it shows), drawn as the prompt is.
    top_title
        The heading of the ``top_k`` panel.
    top_labels
        What each ``top_k`` row says beside its bar (default: the probability
        as a percentage); the bar's length stays ``top_k``'s number (0..1).
    top_signs
        The sign of each ``top_k`` row's value: bars of positive ones in the
        flow colormap's red, negative ones in its blue (default: the usual bars).
    """

    prompt: str
    generated: str
    newest: str
    newest_in_prompt: bool
    top_k: tuple[tuple[str, float], ...]
    counter: str
    after: str = ""
    top_title: str = "next token"
    top_labels: tuple[str, ...] = ()
    top_signs: tuple[float, ...] = ()


def display_token(text: str) -> str:
    """A token's text made visible for a label: spaces as ``·``, newlines as ``¶``."""
    if text == "":
        return "(empty)"
    text = (text.replace(" ", VISIBLE_SPACE).replace("\n", VISIBLE_NEWLINE)
            .replace("\t", VISIBLE_SPACE * 2).replace("\r", ""))
    # Control characters have no glyph: show their code instead of a box.
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256
                   else f"\\u{ord(ch):04x}" for ch in text)


def iter_overlays(recording: Recording, start: int = 0,
                  stop: int | None = None) -> Iterator[OverlayContent]:
    """Overlay content of frames ``start:stop`` of ``recording``, one at a time.

    The first frame of a run consumes BOS, which is not shown as text.
    Frames before ``start`` are read (for their prompt text) but not yielded.
    """
    n = len(recording)
    stop = n if stop is None else min(int(stop), n)
    start = max(0, int(start))
    prompt = ""
    for i in range(0, stop):
        frame = recording[i]
        in_prompt = frame.phase == PHASE_PROMPT
        read = "" if frame.position == 0 else frame.input_text
        if in_prompt:
            newest, before, generated = read, prompt, ""
            prompt += read
        else:
            if read and frame.generation_index == 0:
                prompt += read  # the last prompt token starts generation
            before = prompt
            newest = frame.predicted_text
            so_far = frame.text_so_far
            if newest and so_far.endswith(newest):
                generated = so_far[:-len(newest)]
            else:
                # Special tokens (</s>) are not part of the decoded text: show them
                # after it; a token that decodes to part of a character shows nothing.
                generated = so_far
                if not (newest.startswith("<") and newest.endswith(">")):
                    newest = ""
        if i < start:
            continue
        phase = "reading the prompt" if in_prompt else "generating"
        counter = f"token {i + 1} of {n} \u00b7 {phase}"
        top = tuple((str(t), float(p)) for t, p in zip(frame.top_k_text, frame.top_k_probabilities))
        yield OverlayContent(prompt=before, generated=generated, newest=newest,
                             newest_in_prompt=in_prompt, top_k=top, counter=counter)


def overlay_contents(recording: Recording, start: int = 0,
                     stop: int | None = None) -> list[OverlayContent]:
    """:func:`iter_overlays` as a list (for short recordings and tests)."""
    return list(iter_overlays(recording, start, stop))
