"""What the text, next-token and trace panels show for a comparison recording.

A comparison recording (:func:`~flyviz.record.compare.new_comparison_recording`)
holds the intervened run with the untouched one as its ``baseline``. The panels
ask :func:`is_comparison` and then show:

* the text panel: both texts, the divergence marked (:func:`comparison_html`).
  Free-running, the two continuations, with everything from the first token
  where they part marked. Teacher-forced, the intervened model reads the
  untouched text, so its line is what it would have written next at each
  position (its top-1), marked where that differs from the untouched model's
  own top-1 there (as ``flyviz compare`` counts them: the untouched line shows
  the tokens the run drew, which a temperature can make other than its top-1);
* the next-token panel: both distributions side by side (:func:`paired_candidates`);
* the traces: the per-token KL(p_untouched ‖ p_intervened) (from
  :func:`~flyviz.record.compare.comparison_trace`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from flyviz.app.base import theme
from flyviz.record.compare import parted_at
from flyviz.record.frame import PHASE_GENERATION, FrameInfo
from flyviz.record.recording import Recording

#: Colour of what differs from the untouched run.
DIVERGED = "#ff7a9a"


def is_comparison(recording: Recording | None) -> bool:
    """True for a recording of an intervened run with its untouched run beside it."""
    return recording is not None and recording.baseline is not None


def _infos(recording: Recording, stop: int) -> list:
    # The per-frame records without their states: reading states would cost a
    # decode of every neuron per token just to print the text.
    return list(recording.frame_infos[:stop])


@dataclass(frozen=True)
class ComparedText:
    """Both texts of a comparison up to a frame.

    Attributes
    ----------
    mode
        ``"forced"`` or ``"free"``.
    prompt
        The prompt text.
    untouched, intervened
        Token texts of each line, in order.
    differs
        Per intervened token: True where it differs from the untouched run (forced:
        the two models' top-1 at that position; free: everything from where the two
        texts part).
    parted
        Index of the first differing token, or ``None``.
    """

    mode: str
    prompt: str
    untouched: list[str]
    intervened: list[str]
    differs: list[bool]
    parted: int | None


def _top1(info: FrameInfo) -> int:
    """The most probable next token of a frame's record (-1 where it kept none)."""
    return int(info.top_k_ids[0]) if len(info.top_k_ids) else -1


def compared_text(recording: Recording, index: int) -> ComparedText:
    """Both lines of a comparison recording as they stood at frame ``index``."""
    info = recording.metadata.get("comparison") or {}
    mode = str(info.get("mode", "forced"))
    baseline = recording.baseline
    assert baseline is not None
    stop = index + 1
    mine = [i for i in _infos(recording, stop) if i.phase == PHASE_GENERATION]
    theirs = [i for i in _infos(baseline, min(stop, len(baseline))) if i.phase == PHASE_GENERATION]
    untouched = [i.predicted_text for i in theirs]
    if mode == "forced":
        intervened = [i.top_k_text[0] if len(i.top_k_text) else "" for i in mine]
        ids = [_top1(i) for i in mine]
        # Top-1 against top-1: the token the untouched run drew is a sample (at the app's
        # temperature often not its top-1), and marking those would say an intervention
        # that changes nothing changed words.
        differs = [a != _top1(b) for a, b in zip(ids, theirs)] + \
            [True] * max(0, len(ids) - len(theirs))
        parted = differs.index(True) if True in differs else None
    else:
        intervened = [i.predicted_text for i in mine]
        mine_ids = [i.predicted_token_id for i in mine]
        parted = parted_at([i.predicted_token_id for i in theirs], mine_ids)
        if parted is not None and parted >= len(mine_ids):
            parted = None
        differs = [parted is not None and k >= parted for k in range(len(mine_ids))]
    return ComparedText(mode, str(recording.metadata.get("prompt", "")), untouched, intervened,
                        differs, parted)


def visible_token_text(text: str) -> str:
    """Token text with invisible characters made visible (newlines kept)."""
    return text.replace("\t", "→").replace("\r", "")


def _tokens_html(tokens: list[str], marks: list[bool] | None, colour: str) -> str:
    out = []
    for k, text in enumerate(tokens):
        shown = html.escape(visible_token_text(text).replace("</s>", " [end]"))
        if marks is not None and k < len(marks) and marks[k]:
            out.append(f"<span style='color:{DIVERGED}; text-decoration:underline'>{shown}</span>")
        else:
            out.append(f"<span style='color:{colour}'>{shown}</span>")
    return "".join(out)


def comparison_html(recording: Recording, index: int) -> str:
    """The text panel's page for a comparison at frame ``index``: both texts, divergence marked."""
    text = compared_text(recording, index)
    prompt = html.escape(text.prompt)
    if text.mode == "forced":
        second = "intervened model's next-token choice (reading the untouched text)"
    else:
        second = "intervened (free-running)"
    if text.parted is None:
        verdict = ("no divergence yet" if text.mode == "free"
                   else "the same top choice as the untouched model at every token so far")
    else:
        changed = sum(text.differs)
        verdict = (f"parts at generated token {text.parted + 1}" if text.mode == "free"
                   else f"top choice first differs from the untouched model's at generated "
                        f"token {text.parted + 1}; {changed} of {len(text.differs)} differ")
    head = f"color:{theme.MUTED}; font-size:10pt"
    return (f"<p style='{head}'>untouched</p>"
            f"<p><span style='color:{theme.PROMPT_TEXT}'>{prompt}</span>"
            f"{_tokens_html(text.untouched, None, theme.TEXT)}</p>"
            f"<p style='{head}'>{html.escape(second)}</p>"
            f"<p><span style='color:{theme.PROMPT_TEXT}'>{prompt}</span>"
            f"{_tokens_html(text.intervened, text.differs, theme.TEXT)}</p>"
            f"<p style='color:{DIVERGED}; font-size:10pt'>{html.escape(verdict)}</p>")


@dataclass(frozen=True)
class PairedCandidates:
    """Next-token candidates of both runs at one position, for paired bars.

    Attributes
    ----------
    texts
        Candidate token texts, most likely (in either run) first.
    untouched, intervened
        Their probabilities in each run (0 where a run's top-k leaves one out).
    """

    texts: list[str]
    untouched: np.ndarray
    intervened: np.ndarray


def paired_candidates(recording: Recording, index: int, k: int) -> PairedCandidates | None:
    """The ``k`` likeliest candidates of either run at frame ``index`` with both probabilities."""
    baseline = recording.baseline
    if baseline is None or not 0 <= index < min(len(recording), len(baseline)):
        return None
    mine, theirs = recording.frame_infos[index], baseline.frame_infos[index]
    table: dict[int, list] = {}
    for slot, info in ((0, theirs), (1, mine)):
        for tid, text, p in zip(info.top_k_ids, info.top_k_text, info.top_k_probabilities):
            row = table.setdefault(int(tid), [text, 0.0, 0.0])
            row[1 + slot] = float(p)
    order = sorted(table.values(), key=lambda row: -max(row[1], row[2]))[:k]
    return PairedCandidates([row[0] for row in order],
                            np.array([row[1] for row in order], dtype=float),
                            np.array([row[2] for row in order], dtype=float))


#: Most characters of each text the movie overlay keeps (its tail).
OVERLAY_CHARS = 90


def _tail(text: str, limit: int = OVERLAY_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def comparison_overlays(recording: Recording, start: int = 0, stop: int | None = None) -> list:
    """Movie overlays of a comparison's frames ``start:stop``: both texts, one line each
    (the tail of each when long), the intervened run's newest token highlighted."""
    import dataclasses

    from flyviz.render.overlay import iter_overlays

    out = []
    for i, own in enumerate(iter_overlays(recording, start, stop), start):
        if own.newest_in_prompt:                 # both read the same prompt
            out.append(own)
            continue
        text = compared_text(recording, i)
        label = "intervened" if text.mode == "free" else "intervened (top-1)"
        newest = text.intervened[-1] if text.intervened else ""
        untouched = _tail(text.prompt + "".join(text.untouched)).replace("\n", " ")
        mine = _tail(text.prompt + "".join(text.intervened[:-1] if newest else text.intervened))
        out.append(dataclasses.replace(own, prompt=f"untouched: {untouched}\n{label}: ",
                                       generated=mine.replace("\n", " "),
                                       newest=newest or own.newest, newest_in_prompt=False))
    return out
