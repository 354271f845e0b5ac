"""Fit the demo brain's parameters to a corpus, on a CPU, in minutes.

The demo brain is an echo-state network: its wiring and per-neuron
parameters are chosen, not trained, and only the readout is fitted.

1. **Embeddings** (``wte``) are the leading left singular vectors of the
   centred log-bigram matrix: token ``t``'s embedding says how ``t`` shifts the
   next token's distribution, the most useful 32 numbers the input slots can
   carry. ``in_proj`` is random; gains, recurrent gains and biases are drawn
   around values that keep the dynamics alive but not saturated.
2. The fixed reservoir reads the training stories in many streams at once
   (:class:`~flyviz.demo.reservoir.StoryStreams`) and the LayerNorm-ed state
   of a set of feature neurons (every input slot and a sample of the rest) is
   stored for every token.
3. A ridge regression maps those features to smoothed trigram
   log-probabilities of the next token; reduced-rank regression keeps the 63
   directions of the fitted logits that matter most. Together with a
   constant direction they form the rank-64 readout: ``head_a`` projects the
   LayerNorm-ed state onto them and ``head_b`` maps them to logits.
4. Both factors are then refined together by L-BFGS on the true next-token
   cross-entropy.

The constant direction uses the LayerNorm: with ``ln_weight = 1`` and
``ln_bias = beta`` everywhere, the normed state sums to ``N * beta`` exactly,
so a ``head_a`` row of ``1 / (N * beta)`` reads a constant 1 (the readout's
per-token bias, which the two-factor head has no other place for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flyviz.demo.ngram import NGramModel
from flyviz.demo.reservoir import StoryStreams, StreamReservoir, layer_norm_columns

#: ``ln_bias`` everywhere (see the module notes).
LN_BIAS = 0.5
#: Per-slot share of the feature neurons, slot 0 (the current token) first.
_SLOT_SHARES = (0.30, 0.20, 0.11, 0.06, 0.03, 0.02, 0.02, 0.02)

Progress = Callable[[str, float], None]


@dataclass
class NeuronParameters:
    """The chosen (not fitted) parameters of the recurrent layer."""

    wte: np.ndarray
    in_proj: np.ndarray
    gain: np.ndarray
    rec_gain: np.ndarray
    bias: np.ndarray


def bigram_embeddings(ngram: NGramModel, d_embed: int, pad_token_id: int = 0) -> np.ndarray:
    """``(V, d_embed)`` embeddings from the SVD of the centred log-bigram matrix.

    Each column is scaled to unit root-mean-square over the corpus's tokens,
    so the input drive has the same size whatever the corpus.
    """
    v = ngram.vocabulary
    log_p = np.log(ngram.bigram_probs(np.arange(v)))
    log_p -= log_p.mean(axis=1, keepdims=True)
    freq = ngram.unigram_counts / max(ngram.unigram_counts.sum(), 1.0)
    weight = np.sqrt(freq + 1e-6)
    u, s, _ = np.linalg.svd(log_p * weight[:, None], full_matrices=False)
    emb = u[:, :d_embed] * s[:d_embed] / weight[:, None]
    rms = np.sqrt((freq[:, None] * emb ** 2).sum(axis=0) / max(freq.sum(), 1e-12))
    emb /= np.maximum(rms, 1e-12)
    # Rare tokens' rows are mostly smoothing noise: keep them from dominating.
    emb = np.clip(emb, -4.0, 4.0)
    emb[pad_token_id] = 0.0
    return emb.astype(np.float32)


def choose_parameters(ngram: NGramModel, neurons: int, delay_k: int, d_embed: int,
                      neurons_per_slot: int, rng: np.random.Generator,
                      drive_scale: float = 1.2, rec_gain: float = 1.6) -> NeuronParameters:
    """Embeddings from token statistics; input projections and gains drawn at random."""
    wte = bigram_embeddings(ngram, d_embed)
    in_proj = (rng.standard_normal((delay_k, d_embed, neurons_per_slot))
               * (drive_scale / np.sqrt(d_embed))).astype(np.float32)
    gain = rng.lognormal(0.0, 0.2, neurons).astype(np.float32)
    rec = (rec_gain * rng.lognormal(0.0, 0.25, neurons)).astype(np.float32)
    bias = (0.1 * rng.standard_normal(neurons)).astype(np.float32)
    return NeuronParameters(wte, in_proj, gain, rec, bias)


def feature_neurons(neurons: int, in_index: np.ndarray, neurons_per_slot: int, count: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Neurons whose states feed the readout fit: input neurons of every slot
    (most from the newest) and a sample of the others (the recurrent memory)."""
    chosen = []
    slots = in_index.shape[0] // neurons_per_slot
    for j in range(slots):
        share = _SLOT_SHARES[j] if j < len(_SLOT_SHARES) else 0.01
        take = min(neurons_per_slot, int(round(share * count)))
        block = in_index[j * neurons_per_slot:(j + 1) * neurons_per_slot]
        chosen.append(rng.choice(block, size=take, replace=False))
    chosen_in = np.concatenate(chosen)
    rest = np.setdiff1d(np.arange(neurons), in_index)
    take = min(rest.size, max(0, count - chosen_in.size))
    chosen.append(rng.choice(rest, size=take, replace=False))
    return np.sort(np.concatenate(chosen)).astype(np.int64)


@dataclass
class Features:
    """LayerNorm-ed feature-neuron states with their contexts and targets."""

    values: np.ndarray      # (n, K) float32: LN(x)[sel] + LN_BIAS
    previous: np.ndarray    # (n,) token before the current one
    current: np.ndarray     # (n,) token just read
    target: np.ndarray      # (n,) next token
    mean_abs_state: np.ndarray  # (steps,) mean |x| over neurons and active streams


def collect_features(reservoir: StreamReservoir, sequences: list[np.ndarray],
                     selected: np.ndarray, eps: float, max_rows: int,
                     progress: Progress | None = None, label: str = "reservoir") -> Features:
    """Run the stories through the reservoir and keep the selected neurons' normed states."""
    total = min(max_rows, sum(int(s.size - 1) for s in sequences))
    values = np.empty((total, selected.size), dtype=np.float32)
    previous = np.empty(total, dtype=np.int32)
    current = np.empty(total, dtype=np.int32)
    target = np.empty(total, dtype=np.int32)
    mean_abs = []
    row = 0
    stream = StoryStreams(reservoir, sequences)
    for step, (state, active, tokens, prev, nxt) in enumerate(stream.steps()):
        idx = np.flatnonzero(active)
        mean, inv = layer_norm_columns(state[:, idx], eps)
        feats = (state[np.ix_(selected, idx)] - mean[None, :]) * inv[None, :] + np.float32(LN_BIAS)
        take = min(idx.size, total - row)
        values[row:row + take] = feats.T[:take]
        previous[row:row + take] = prev[idx][:take]
        current[row:row + take] = tokens[idx][:take]
        target[row:row + take] = nxt[idx][:take]
        mean_abs.append(float(np.abs(state[:, idx]).mean()))
        row += take
        if progress is not None and step % 20 == 0:
            progress(label, row / total)
        if row >= total:
            break
    return Features(values[:row], previous[:row], current[:row], target[:row],
                    np.asarray(mean_abs))


def _softmax_loss(logits: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed cross-entropy and its gradient with respect to the logits (in place)."""
    logits -= logits.max(axis=1, keepdims=True)
    np.exp(logits, out=logits)
    sums = logits.sum(axis=1, keepdims=True)
    rows = np.arange(target.size)
    loss = float(np.sum(np.log(sums[:, 0]) - np.log(np.maximum(logits[rows, target], 1e-30))))
    logits /= sums
    logits[rows, target] -= 1.0
    return loss, logits


@dataclass
class Readout:
    """A fitted rank-r readout over the feature neurons."""

    projection: np.ndarray  # (K, r - 1): feature neurons -> readout directions
    head_b: np.ndarray      # (V, r): readout directions (+ constant) -> logits


def fit_readout(features: Features, ngram: NGramModel, rank: int, vocabulary: int,
                ridge: float = 1e-3, iterations: int = 60,
                progress: Progress | None = None) -> Readout:
    """Ridge + reduced-rank regression onto trigram log-probabilities, then
    joint L-BFGS refinement of both factors on the next-token cross-entropy."""
    from scipy.optimize import minimize

    f = features.values
    n, k = f.shape
    v = vocabulary
    chunk = 8192
    gram = np.zeros((k + 1, k + 1), dtype=np.float64)
    cross = np.zeros((k + 1, v), dtype=np.float64)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        fc = np.empty((stop - start, k + 1), dtype=np.float32)
        fc[:, :k] = f[start:stop]
        fc[:, k] = 1.0
        targets = ngram.log_probs(features.previous[start:stop].astype(np.int64),
                                  features.current[start:stop].astype(np.int64))
        targets -= targets.mean(axis=1, keepdims=True)
        gram += fc.T @ fc
        cross += fc.T @ targets
        if progress is not None:
            progress("readout: regression", 0.5 * stop / n)
    reg = ridge * np.trace(gram[:k, :k]) / k
    gram_reg = gram.copy()
    gram_reg[np.arange(k), np.arange(k)] += reg
    coef = np.linalg.solve(gram_reg, cross)                       # (K+1, V)
    fitted = coef.T @ gram @ coef                                 # (V, V)
    _, vecs = np.linalg.eigh(fitted)
    directions = vecs[:, ::-1][:, :rank - 1]                      # (V, r-1)
    reduced = coef @ directions                                   # (K+1, r-1)
    projection = reduced[:k].astype(np.float32)
    head_b = np.concatenate([directions, (reduced[k] @ directions.T)[:, None]], axis=1)
    if progress is not None:
        progress("readout: refinement", 0.5)

    # Joint refinement. Parameters: projection (K, r-1) and head_b (V, r).
    target = features.target.astype(np.int64)
    n_proj = k * (rank - 1)
    l2_proj = 1e-4
    l2_head = 1e-5
    scale = np.float32(1.0 / n)

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        proj = theta[:n_proj].reshape(k, rank - 1).astype(np.float32)
        hb = theta[n_proj:].reshape(v, rank).astype(np.float32)
        g_proj = np.zeros((k, rank - 1), dtype=np.float32)
        g_hb = np.zeros((v, rank), dtype=np.float32)
        loss = 0.0
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            fc = f[start:stop]
            z = np.empty((stop - start, rank), dtype=np.float32)
            z[:, :rank - 1] = fc @ proj
            z[:, rank - 1] = 1.0
            part, dlogits = _softmax_loss(z @ hb.T, target[start:stop])
            loss += part
            g_hb += dlogits.T @ z
            dz = dlogits @ hb[:, :rank - 1]
            g_proj += fc.T @ dz
        loss = loss / n + l2_proj * float(np.sum(proj.astype(np.float64) ** 2)) \
            + l2_head * float(np.sum(hb.astype(np.float64) ** 2))
        grad = np.concatenate([(g_proj * scale + 2 * l2_proj * proj).ravel(),
                               (g_hb * scale + 2 * l2_head * hb).ravel()]).astype(np.float64)
        return loss, grad

    calls = [0]

    def report(_: np.ndarray) -> None:
        calls[0] += 1
        if progress is not None:
            progress("readout: refinement", 0.5 + 0.5 * min(1.0, calls[0] / max(iterations, 1)))

    theta0 = np.concatenate([projection.ravel(), head_b.ravel()]).astype(np.float64)
    if iterations > 0:
        result = minimize(objective, theta0, jac=True, method="L-BFGS-B", callback=report,
                          options={"maxiter": iterations, "maxcor": 20})
        theta0 = result.x
    projection = theta0[:n_proj].reshape(k, rank - 1).astype(np.float32)
    head_b = theta0[n_proj:].reshape(v, rank).astype(np.float32)
    return Readout(projection, head_b)


def readout_factors(readout: Readout, selected: np.ndarray, neurons: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``head_a``, ``head_b``, ``ln_weight``, ``ln_bias`` of the model."""
    rank = readout.head_b.shape[1]
    head_a = np.zeros((rank, neurons), dtype=np.float32)
    head_a[:rank - 1, selected] = readout.projection.T
    head_a[rank - 1, :] = np.float32(1.0 / (neurons * LN_BIAS))
    ln_weight = np.ones(neurons, dtype=np.float32)
    ln_bias = np.full(neurons, LN_BIAS, dtype=np.float32)
    return head_a, readout.head_b.astype(np.float32), ln_weight, ln_bias


def stream_cross_entropy(reservoir: StreamReservoir, sequences: list[np.ndarray],
                         head_a: np.ndarray, head_b: np.ndarray, ln_weight: np.ndarray,
                         ln_bias: np.ndarray, eps: float,
                         progress: Progress | None = None) -> tuple[float, float]:
    """Cross-entropy (nats/token) of the full model on ``sequences``, and the mean |x|.

    Uses the full readout (``head_a`` over all neurons), as the engine does.
    """
    total_loss, count, abs_sum, steps = 0.0, 0, 0.0, 0
    n_tokens = sum(int(s.size - 1) for s in sequences)
    for step, (state, active, _, _, target) in enumerate(
            StoryStreams(reservoir, sequences).steps()):
        idx = np.flatnonzero(active)
        x = state[:, idx]
        mean, inv = layer_norm_columns(x, eps)
        normed = (x - mean[None, :]) * inv[None, :]
        normed *= ln_weight[:, None]
        normed += ln_bias[:, None]
        logits = (head_b @ (head_a @ normed)).T.astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        lse = np.log(np.exp(logits).sum(axis=1))
        total_loss += float(np.sum(lse - logits[np.arange(idx.size), target[idx]]))
        count += idx.size
        abs_sum += float(np.abs(x).mean())
        steps += 1
        if progress is not None and step % 10 == 0:
            progress("held-out cross-entropy", count / max(n_tokens, 1))
    return total_loss / max(count, 1), abs_sum / max(steps, 1)
