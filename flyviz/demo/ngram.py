"""Count-based token models: baselines for the demo brain and targets for its fit.

Every story is read as ``[BOS] + tokens + [EOS]``, the sequence the model
sees; a model predicts each token after BOS from what precedes it.

* :class:`NGramModel` holds unigram, bigram and trigram counts of a training
  split. Its unigram and (interpolated) bigram cross-entropies on held-out
  text are the baselines the demo brain's quality bar is stated against.
* :meth:`NGramModel.log_probs` gives smoothed trigram log-probabilities of the
  next token for a batch of contexts: the targets of the demo brain's
  linear readout fit (smooth, well conditioned regression targets that carry
  the statistics the fit should capture).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def story_sequences(token_lists: Sequence[Sequence[int]], bos: int,
                    eos: int | None) -> list[np.ndarray]:
    """``[BOS] + tokens + [EOS]`` for every story, as int32 arrays (no EOS for a model
    that has none, ``eos=None``)."""
    end = [] if eos is None else [eos]
    return [np.asarray([bos, *tokens, *end], dtype=np.int32) for tokens in token_lists]


class NGramModel:
    """Unigram, bigram and trigram statistics of a token corpus.

    Parameters
    ----------
    sequences
        Stories as ``[BOS] + tokens + [EOS]`` arrays.
    vocabulary
        Vocabulary size.
    interpolation
        ``(trigram, bigram, unigram)`` weights of the smoothed trigram
        distribution; ``None`` fits the bigram weight on the last tenth of
        the sequences and uses a fixed trigram share.
    """

    def __init__(self, sequences: Sequence[np.ndarray], vocabulary: int,
                 interpolation: tuple[float, float, float] | None = None) -> None:
        self.vocabulary = v = int(vocabulary)
        nexts = np.concatenate([s[1:] for s in sequences]).astype(np.int64)
        currs = np.concatenate([s[:-1] for s in sequences]).astype(np.int64)
        prevs = np.concatenate([np.concatenate([[s[0]], s[:-2]]) for s in sequences]).astype(np.int64)
        # A story's first prediction has only BOS before it: its "previous" is BOS too.
        self.unigram_counts = np.bincount(nexts, minlength=v).astype(np.float64)
        self.unigram = (self.unigram_counts + 1.0) / (self.unigram_counts.sum() + v)
        bigram = sp.coo_matrix((np.ones(nexts.size), (currs, nexts)), shape=(v, v)).tocsr()
        bigram.sum_duplicates()
        self.bigram_counts = bigram
        self._bigram_rows = np.asarray(bigram.sum(axis=1)).ravel()
        trigram = sp.coo_matrix((np.ones(nexts.size), (prevs * v + currs, nexts)),
                                shape=(v * v, v)).tocsr()
        trigram.sum_duplicates()
        self.trigram_counts = trigram
        self._trigram_rows = np.asarray(trigram.sum(axis=1)).ravel()
        if interpolation is None:
            split = max(1, int(len(sequences) * 0.9))
            held = NGramModel(sequences[:split], v, interpolation=(0.0, 0.5, 0.5))
            lam = held.fit_bigram_weight(sequences[split:])
            interpolation = (0.6 * lam, 0.4 * lam, 1.0 - lam)
            self.bigram_weight = lam
        else:
            self.bigram_weight = interpolation[0] + interpolation[1]
        self.interpolation = interpolation

    # ------------------------------------------------------------ distributions
    def _bigram_ml(self, currs: np.ndarray) -> np.ndarray:
        rows = self.bigram_counts[currs].toarray()
        return rows / np.maximum(self._bigram_rows[currs], 1.0)[:, None]

    def _trigram_ml(self, prevs: np.ndarray, currs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = prevs.astype(np.int64) * self.vocabulary + currs
        rows = self.trigram_counts[keys].toarray()
        totals = self._trigram_rows[keys]
        return rows / np.maximum(totals, 1.0)[:, None], totals > 0

    def bigram_probs(self, currs: np.ndarray, weight: float | None = None) -> np.ndarray:
        """``(len(currs), V)`` interpolated bigram distributions."""
        lam = self.bigram_weight if weight is None else weight
        seen = (self._bigram_rows[currs] > 0)[:, None]
        ml = self._bigram_ml(currs)
        mixed = lam * ml + (1.0 - lam) * self.unigram[None, :]
        return np.where(seen, mixed, self.unigram[None, :])

    def log_probs(self, prevs: np.ndarray, currs: np.ndarray) -> np.ndarray:
        """``(B, V)`` float32 smoothed trigram log-probabilities of the next token."""
        l3, l2, l1 = self.interpolation
        tri, tri_seen = self._trigram_ml(np.asarray(prevs), np.asarray(currs))
        bi = self._bigram_ml(np.asarray(currs))
        bi_seen = (self._bigram_rows[currs] > 0)[:, None]
        # Unseen contexts give their weight to the lower orders.
        w3 = np.where(tri_seen[:, None], l3, 0.0)
        w2 = np.where(bi_seen, l2 + (l3 - w3), 0.0)
        w1 = 1.0 - w3 - w2
        p = w3 * tri + w2 * bi + w1 * self.unigram[None, :]
        return np.log(p).astype(np.float32)

    # ------------------------------------------------------------- evaluation
    def fit_bigram_weight(self, sequences: Sequence[np.ndarray]) -> float:
        """Bigram interpolation weight that maximises the likelihood of ``sequences`` (EM)."""
        currs = np.concatenate([s[:-1] for s in sequences]).astype(np.int64)
        nexts = np.concatenate([s[1:] for s in sequences]).astype(np.int64)
        rows = self.bigram_counts[currs]
        ml = np.asarray(rows[np.arange(currs.size), nexts]).ravel() \
            / np.maximum(self._bigram_rows[currs], 1.0)
        uni = self.unigram[nexts]
        lam = 0.5
        for _ in range(50):
            a = lam * ml
            post = a / (a + (1.0 - lam) * uni)
            lam = float(np.clip(post.mean(), 1e-3, 1.0 - 1e-3))
        return lam

    def unigram_cross_entropy(self, sequences: Sequence[np.ndarray]) -> float:
        """Mean negative log-likelihood (nats/token) of the unigram model."""
        nexts = np.concatenate([s[1:] for s in sequences]).astype(np.int64)
        return float(-np.log(self.unigram[nexts]).mean())

    def bigram_cross_entropy(self, sequences: Sequence[np.ndarray]) -> float:
        """Mean negative log-likelihood (nats/token) of the interpolated bigram model."""
        currs = np.concatenate([s[:-1] for s in sequences]).astype(np.int64)
        nexts = np.concatenate([s[1:] for s in sequences]).astype(np.int64)
        rows = self.bigram_counts[currs]
        ml = np.asarray(rows[np.arange(currs.size), nexts]).ravel() \
            / np.maximum(self._bigram_rows[currs], 1.0)
        seen = self._bigram_rows[currs] > 0
        lam = self.bigram_weight
        p = np.where(seen, lam * ml + (1.0 - lam) * self.unigram[nexts], self.unigram[nexts])
        return float(-np.log(p).mean())

    def trigram_cross_entropy(self, sequences: Sequence[np.ndarray]) -> float:
        """Mean negative log-likelihood (nats/token) of the smoothed trigram targets."""
        total, count = 0.0, 0
        for s in sequences:
            prevs = np.concatenate([[s[0]], s[:-2]]).astype(np.int64)
            lp = self.log_probs(prevs, s[:-1].astype(np.int64))
            total -= float(lp[np.arange(s.size - 1), s[1:]].sum())
            count += s.size - 1
        return total / max(count, 1)
