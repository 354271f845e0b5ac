"""Golden traces: the reference generations a web export embeds.

This module has one job: :func:`golden_traces_for` runs flyviz's float32
engine greedily on the four Fly Recital prompts, as the authors'
``export_web_model.py`` does (fly-formats.md section 4.3), and records each
step's token, top-1 probability and mean ``|x|``, the final state's digest and,
with the int16 weights, where those part from the exact ones. The writers
(:mod:`flyviz.model.writers`) embed them in every web export; ``flyviz
verify`` replays what a manifest holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.checks import quantise_int16

__all__ = ["GOLDEN_MAX_NEW_TOKENS", "GOLDEN_PROMPTS", "golden_traces_for"]

#: The golden-trace prompts of ``export_web_model.py`` (fly-formats.md section 4.3).
GOLDEN_PROMPTS = ("Once upon a time, there was a",
                  "One day, a little girl named Lily found a needle",
                  "Tom and his dog",
                  "The little bird was afraid of the rain. Its mother")
#: Greedy tokens per golden trace, as the authors' exporter writes them.
GOLDEN_MAX_NEW_TOKENS = 60


def _greedy(engine: Any, prompt_ids: list[int], max_new_tokens: int,
            eos: int | None) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Greedy steps ``{token, top1_probability, mean_abs_state}`` and the final state.

    As the authors' generator: each step records the state that produced its
    logits; a token other than EOS is fed, so after ``max_new_tokens`` the
    final state is one step past the last entry's, and after EOS it is not. ``eos``
    ``None`` (a model with no EOS) runs all ``max_new_tokens``.
    """
    from flyviz.model.engine import softmax

    engine.reset()
    logits = np.zeros(0, np.float32)
    for token in prompt_ids:
        logits = engine.step(token)
    steps: list[dict[str, Any]] = []
    for _ in range(max_new_tokens):
        token = int(np.argmax(logits))
        steps.append({"token": token, "top1_probability": float(softmax(logits)[token]),
                      "mean_abs_state": float(engine.mean_abs_state)})
        if eos is not None and token == eos:
            break
        logits = engine.step(token)
    return steps, np.array(engine.state, dtype="<f4")


def golden_traces_for(ckpt: Checkpoint, prompts: Sequence[str] = GOLDEN_PROMPTS,
                      max_new_tokens: int = GOLDEN_MAX_NEW_TOKENS, *,
                      drift: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Golden traces of a model, as ``export_web_model.py`` writes them, from flyviz's engine.

    Parameters
    ----------
    ckpt
        The model, with the exact float32 graph weights (what the browser
        downloads). Its tokenizer encodes the prompts.
    prompts, max_new_tokens
        The four Fly Recital prompts and 60 tokens by default.
    drift
        Also generate with the int16 weights and record where they part
        from the exact ones (the manifest's ``verification.quantisation_drift``).

    Returns
    -------
    golden, drift
        ``golden``: per prompt ``{prompt, prompt_ids (BOS + encode), tokens,
        text, continuation, steps, final_state_sha256, final_state_mean_abs}``;
        ``drift``: per prompt ``{prompt, exact_tokens, quantised_tokens,
        identical, first_divergent_step}``. Both are empty when the checkpoint
        has no tokenizer, or one whose ids do not fit its vocabulary.
    """
    from flyviz.model.engine import Engine
    from flyviz.model.errors import FlyvizError
    from flyviz.model.tokenizer import tokenizer_for

    if not prompts or max_new_tokens <= 0 or ckpt.tokenizer_path is None:
        return [], []
    try:
        tokenizer = tokenizer_for(ckpt)
    except FlyvizError:
        return [], []
    cfg = ckpt.config
    encoded = [[cfg.bos_token_id] + list(tokenizer.encode(p)) for p in prompts]
    if any(not 0 <= t < cfg.vocabulary for ids in encoded for t in ids):
        return [], []
    golden: list[dict[str, Any]] = []
    engine = Engine(ckpt, threads=1)
    try:
        for prompt, ids in zip(prompts, encoded):
            steps, state = _greedy(engine, ids, max_new_tokens, cfg.eos_token_id)
            tokens = [s["token"] for s in steps]
            golden.append({
                "prompt": prompt, "prompt_ids": ids, "tokens": tokens,
                "text": tokenizer.decode(ids + tokens), "continuation": tokenizer.decode(tokens),
                "steps": steps, "final_state_sha256": hashlib.sha256(state.tobytes()).hexdigest(),
                "final_state_mean_abs": float(np.abs(state).mean(dtype=np.float64))})
    finally:
        engine.close()
    rows: list[dict[str, Any]] = []
    if drift:
        codes, scale, _error = quantise_int16(ckpt.w_values)
        quantised = dataclasses.replace(
            ckpt, w_values=codes.astype(np.float32) * np.float32(scale))
        engine = Engine(quantised, threads=1)
        try:
            for trace in golden:
                steps, _state = _greedy(engine, trace["prompt_ids"], max_new_tokens,
                                        cfg.eos_token_id)
                exact, other = trace["tokens"], [s["token"] for s in steps]
                first = next((i for i, (a, b) in enumerate(zip(exact, other)) if a != b), None)
                rows.append({"prompt": trace["prompt"], "exact_tokens": len(exact),
                             "quantised_tokens": len(other), "identical": exact == other,
                             "first_divergent_step": first})
        finally:
            engine.close()
    return golden, rows
