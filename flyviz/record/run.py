"""Run a prompt through an engine and produce :class:`Frame` objects, one per token.

This is the single producer of frames: :class:`flyviz.record.runner.Model`
(the command line, the library, the app's engine thread) and the comparison
runner all step an engine through :func:`iter_frames`.
"""

from __future__ import annotations

import dataclasses
import numbers
import secrets
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flyviz.arguments import shown, whole_number
from flyviz.errors import InputError
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.engine import Engine, softmax, top_k
from flyviz.model.interventions import ResolvedInterventions
from flyviz.model.sampler import Sampler
from flyviz.model.tokenizer import FlyTokenizer, start_ids
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame

#: Most new tokens one run may ask for.
MAX_NEW_TOKENS_LIMIT = 100_000
#: Seeds are drawn below this (the app's seed box holds any of them).
SEED_LIMIT = 2**31


def draw_seed() -> int:
    """A fresh random sampler seed in ``[0, 2**31)``."""
    return secrets.randbelow(SEED_LIMIT)


@dataclass(frozen=True)
class GenerationSettings:
    """How to continue a prompt.

    Parameters
    ----------
    max_new_tokens
        Stop after this many generated tokens (EOS, where the model has one, stops
        earlier): at least 1, since the last prompt token's frame is the one that picks
        the first.
    min_new_tokens
        The end-of-text token is never chosen before this many generated tokens (it is
        masked out of the sampler's logits, as ``transformers``' ``min_new_tokens`` does),
        so a run can go on past the place the model would end it. 0 (the default) leaves
        the model free to stop. It changes nothing for a model with no EOS (FlyGPT).
    temperature, top_p, seed
        Sampler settings (greedy when ``temperature <= 0``). ``seed=None``
        means "random": :meth:`validate` draws one, so that the seed a run
        actually used is always known and can be stored with it.
    top_k
        How many candidates each frame records.
    """

    max_new_tokens: int = 80
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    top_k: int = 10
    min_new_tokens: int = 0

    def validate(self) -> "GenerationSettings":
        """The settings to run with: checked, and with a concrete seed.

        Raises :class:`InputError` for out-of-range values. Returns ``self``
        when the seed is set, else a copy with a seed drawn by
        :func:`draw_seed`.
        """
        # whole_number refuses 2.5 and "3" (int() would round one and a comparison with
        # the other raise a TypeError); at least 1 new token, because the last prompt
        # token's frame is the one that picks it.
        most = whole_number("max new tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
        least = whole_number("min new tokens", self.min_new_tokens, 0)
        if least > most:
            raise InputError(f"min new tokens {least} must be between 0 and the "
                             f"max new tokens ({most})")
        whole_number("top-k", self.top_k, 1, 100)
        if self.seed is not None and not 0 <= whole_number("seed", self.seed, 0) < 2**63:
            raise InputError(f"seed {self.seed} must be a whole number below 2**63")
        for name, value in (("temperature", self.temperature), ("top-p", self.top_p)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InputError(f"{name} must be a number, not {shown(value)}")
        Sampler(self.temperature, self.top_p, self.seed)  # validates the sampler values
        return self if self.seed is not None else dataclasses.replace(self, seed=draw_seed())

    def with_candidates(self, candidates: int) -> "GenerationSettings":
        """A copy that records ``candidates`` next-token candidates per frame."""
        return dataclasses.replace(self, top_k=int(candidates))


class ContinuationText:
    """Decoded text of a growing list of token ids, in time linear in its length.

    One token can hold half of a multi-byte character, so each new token is
    decoded together with the tokens since the text was last complete (did not
    end in U+FFFD) rather than on its own, and the whole list is never decoded
    again: a 2,000-token run costs 2,000 short decodes, not 2,000 long ones.
    """

    #: Tokens kept pending at most; past that an incomplete character is final.
    MAX_PENDING = 8

    def __init__(self, tokenizer: FlyTokenizer) -> None:
        self._tokenizer = tokenizer
        self._committed = ""
        self._pending: list[int] = []

    def append(self, token_id: int) -> str:
        """Add one token; return the whole decoded text so far."""
        self._pending.append(int(token_id))
        tail = self._tokenizer.decode(self._pending)
        if tail.endswith("\ufffd") and len(self._pending) < self.MAX_PENDING:
            return self._committed + tail
        self._committed += tail
        self._pending.clear()
        return self._committed


@dataclass(frozen=True)
class EncodedPrompt:
    """A run's prompt with its token ids already chosen (BOS first): what a replay gives a
    run, so that it reads the ids the recording read whatever the text encodes to now."""

    text: str
    ids: tuple[int, ...]


def encode_prompt(tokenizer: FlyTokenizer, prompt: str, bos_token_id: int) -> list[int]:
    """``[BOS] + encode(prompt)``, or ``encode(prompt)`` for a tokenizer with no BOS token
    (FlyGPT's 65 characters: its model reads no BOS); an empty prompt, or one that is not
    a ``str``, is an error (``b"Once"`` or ``5`` would otherwise run as the text of their
    ``repr``)."""
    if not isinstance(prompt, str):
        raise InputError(f"the prompt must be text (a str), not {shown(prompt)}")
    if not prompt.strip():
        raise InputError("the prompt is empty: give some text for the model to continue")
    return start_ids(tokenizer, bos_token_id) + tokenizer.encode(prompt)


def iter_frames(engine: Engine, tokenizer: FlyTokenizer, prompt: str,
                settings: GenerationSettings | None = None,
                prompt_ids: list[int] | None = None,
                forced_ids: Sequence[int] | None = None) -> Generator[Frame, None, None]:
    """Reset the engine, read ``BOS + prompt`` and generate, yielding a frame per token.

    Parameters
    ----------
    engine
        The engine to run (it is reset first), with its interventions if it
        has any (:meth:`~flyviz.model.engine.Engine.set_interventions`).
    tokenizer
        Tokenizer matching the engine's vocabulary.
    prompt
        Text to continue.
    settings
        Generation settings; defaults to greedy, 80 new tokens.
    prompt_ids
        Pre-encoded ids (BOS first) to use instead of encoding ``prompt``.
    forced_ids
        Teacher forcing: the generated tokens are taken from this sequence
        instead of the sampler (each frame still records this model's own
        distribution). It is read lazily, one item per generated token, so it
        may grow while the frames are consumed: the comparison runner appends
        the untouched run's tokens as they come. Generation also ends when the
        sequence has no next item.

    Yields
    ------
    Frame
        One per consumed input token. The last generated token is not fed back
        (as in ``generate``), so a run with ``P`` prompt ids and ``G`` generated
        tokens yields ``P + G - 1`` frames. Generation ends at EOS (not before
        ``min_new_tokens``) or after ``max_new_tokens``; a model with no EOS
        (``config.eos_token_id is None``, FlyGPT) runs to ``max_new_tokens``. Stop
        iterating at any time to cancel.
    """
    settings = (settings or GenerationSettings()).validate()
    cfg = engine.config
    ids = list(prompt_ids) if prompt_ids is not None else encode_prompt(
        tokenizer, prompt, cfg.bos_token_id)
    if not ids:
        raise InputError("the prompt is empty")
    bad = [i for i in ids if not 0 <= int(i) < cfg.vocabulary]
    if bad:
        raise InputError(f"prompt token id {bad[0]} is outside the vocabulary 0..{cfg.vocabulary - 1}")
    sampler = Sampler(settings.temperature, settings.top_p, settings.seed)
    engine.reset()
    generated: list[int] = []
    continuation = ContinuationText(tokenizer)
    text_so_far = ""
    position = 0
    token = ids[0]
    while True:
        in_prompt = position < len(ids) - 1
        if not in_prompt and forced_ids is not None and len(generated) >= len(forced_ids):
            return
        logits = engine.step(token)
        probs = softmax(logits)
        k_ids, k_probs = top_k(probs, settings.top_k)
        if in_prompt:
            predicted = int(k_ids[0])
        else:
            if forced_ids is None:
                if cfg.eos_token_id is not None and len(generated) < settings.min_new_tokens:
                    # Not yet: the model may not end the text here (its frame still
                    # records the distribution it gave, EOS included). A model with no
                    # EOS (FlyGPT) has nothing to mask: every token stays possible.
                    logits = logits.copy()
                    logits[cfg.eos_token_id] = -np.inf
                predicted = sampler.pick(logits)
            else:
                predicted = int(forced_ids[len(generated)])
                if not 0 <= predicted < cfg.vocabulary:
                    raise InputError(f"forced token id {predicted} is outside the vocabulary "
                                     f"0..{cfg.vocabulary - 1}")
            generated.append(predicted)
            text_so_far = continuation.append(predicted)
        frame = Frame(
            position=position,
            phase=PHASE_PROMPT if in_prompt else PHASE_GENERATION,
            input_token_id=int(token),
            input_text=tokenizer.token_text(token),
            predicted_token_id=predicted,
            predicted_text=tokenizer.token_text(predicted),
            probability=float(probs[predicted]),
            top_k_ids=k_ids.astype(np.int32),
            top_k_probabilities=k_probs.astype(np.float32),
            top_k_text=tuple(tokenizer.token_text(i) for i in k_ids),
            state=engine.state.copy(),
            mean_abs_state=engine.mean_abs_state,
            text_so_far=text_so_far,
            generation_index=None if in_prompt else len(generated) - 1,
            probabilities=probs,
        )
        yield frame
        position += 1
        if in_prompt:
            token = ids[position]
            continue
        if (cfg.eos_token_id is not None and predicted == cfg.eos_token_id) \
                or len(generated) >= settings.max_new_tokens:
            return
        token = predicted


class RunSummary:
    """What ``flyviz generate --json`` prints, gathered one frame at a time (no states kept).

    Parameters
    ----------
    prompt, prompt_ids
        The prompt and its ids (BOS first).
    tokenizer
        Decodes the generated tokens.
    seed
        The sampler seed the run used (validated settings always have one).
    interventions
        The run's interventions, if any.
    """

    def __init__(self, prompt: str, prompt_ids: Sequence[int], tokenizer: FlyTokenizer,
                 seed: int | None, interventions: ResolvedInterventions | None = None) -> None:
        self.prompt = prompt
        self.prompt_ids = [int(i) for i in prompt_ids]
        self.tokenizer = tokenizer
        self.seed = seed
        self.interventions = interventions
        self.frames = 0
        self.tokens: list[int] = []
        self.steps: list[dict[str, Any]] = []

    def add(self, frame: Frame) -> None:
        """Count one frame (and its generated token)."""
        self.frames += 1
        if frame.is_generation:
            self.tokens.append(frame.predicted_token_id)
            self.steps.append({"token": frame.predicted_token_id,
                               "top1_probability": frame.top1_probability,
                               "mean_abs_state": frame.mean_abs_state})

    def to_json(self) -> dict[str, Any]:
        """``prompt``, ``prompt_ids`` (BOS first), ``tokens`` (generated ids, EOS included
        if reached), ``text`` (their decoded text), ``steps`` (one ``{token,
        top1_probability, mean_abs_state}`` per generated token), ``seed`` and
        ``interventions`` (their JSON form with the neurons or synapses each selected and
        on how many of the run's steps it acted; ``[]`` for none)."""
        return {"prompt": self.prompt, "prompt_ids": list(self.prompt_ids),
                "tokens": list(self.tokens), "text": self.tokenizer.decode(self.tokens),
                "steps": list(self.steps), "seed": self.seed,
                "interventions": self.interventions.to_json(steps=self.frames)
                if self.interventions else []}


def run_metadata(checkpoint: Checkpoint, prompt: str, settings: GenerationSettings,
                 spec: str | None = None,
                 interventions: ResolvedInterventions | None = None) -> dict[str, Any]:
    """The metadata a recording of one run stores (see ``docs/recording-format.md``).

    Parameters
    ----------
    checkpoint
        The model that runs.
    prompt
        The prompt text.
    settings
        The validated settings (so the seed is the one actually used).
    spec
        How the user named the model; default: the checkpoint's own spec
        (an absolute folder, a hub id or ``"demo"``).
    interventions
        The run's interventions (resolved for ``checkpoint``), if any.

    Returns
    -------
    dict
        ``model``, ``model_name``, ``prompt``, ``neurons``, ``layout``, the
        generation settings (``temperature``, ``top_p``, ``seed``,
        ``max_new_tokens``, ``top_k``, and ``min_new_tokens`` when set), ``model_identity``
        (:func:`flyviz.model.identity.model_identity`) and, for an intervened
        run, ``interventions``: their JSON form with what each selected
        (:func:`flyviz.model.interventions.from_json` reads it back).
    """
    from flyviz.model.identity import model_identity

    identity = model_identity(checkpoint)
    return {"model": str(checkpoint.metadata.get("spec") or spec or checkpoint.name),
            "model_name": checkpoint.name, "prompt": prompt,
            "neurons": checkpoint.config.neurons, "layout": checkpoint.layout,
            "temperature": float(settings.temperature), "top_p": float(settings.top_p),
            "seed": None if settings.seed is None else int(settings.seed),
            "max_new_tokens": int(settings.max_new_tokens), "top_k": int(settings.top_k),
            **({"min_new_tokens": int(settings.min_new_tokens)} if settings.min_new_tokens else {}),
            "model_identity": identity,
            **({"interventions": interventions.to_json()} if interventions else {})}
