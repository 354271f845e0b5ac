"""Next-token choice with the reference's semantics (fly-formats.md section 4.4)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flyviz.model.errors import InputError


@dataclass
class Sampler:
    """Greedy by default; temperature and nucleus (top-p) sampling otherwise.

    Parameters
    ----------
    temperature
        ``<= 0`` picks the argmax (lowest id on ties). Otherwise tokens are
        weighted by ``exp((logit - max) / temperature)``.
    top_p
        Keep tokens, most likely first, until the normalised cumulative mass is
        ``>= top_p`` (the token that crosses the threshold is kept), then sample
        in proportion to the kept weights.
    seed
        Seed of the random generator; the same seed gives the same tokens.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    _rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise InputError(f"temperature {self.temperature} must be a number >= 0")
        if not (0.0 < self.top_p <= 1.0):
            raise InputError(f"top-p {self.top_p} must be in (0, 1]")
        self._rng = np.random.default_rng(self.seed)

    @property
    def greedy(self) -> bool:
        """True when the choice is the argmax."""
        return self.temperature <= 0

    def pick(self, logits: np.ndarray) -> int:
        """Choose the next token id from ``logits``."""
        logits = np.asarray(logits, dtype=np.float64)
        if self.greedy:
            return int(np.argmax(logits))
        order = np.argsort(-logits, kind="stable")
        scaled = np.exp((logits[order] - logits[order[0]]) / self.temperature)
        cumulative = np.cumsum(scaled / scaled.sum())
        keep = int(np.searchsorted(cumulative, self.top_p, side="left")) + 1
        keep = min(keep, order.shape[0])
        weights = scaled[:keep]
        draw = self._rng.random() * weights.sum()
        chosen = int(np.searchsorted(np.cumsum(weights), draw, side="left"))
        return int(order[min(chosen, keep - 1)])
