"""Run the Fly LLM step over many token streams at once.

Fitting the demo brain's readout needs the model's state after every token of
a large corpus. One stream at a time, that is one sparse matrix-vector product
per token; here the states of ``S`` independent streams form an
``(neurons, S)`` matrix, so one sparse x dense product advances them all and
the per-token cost drops several times. The update is exactly the engine's
(:mod:`flyviz.model.engine`, fly-formats.md section 1.5); a test checks that
both give the same states.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.sparse import _sparsetools

from flyviz.model.engine import default_threads


class StreamReservoir:
    """The recurrent layer of a Fly LLM, advanced for ``streams`` sequences together.

    Parameters
    ----------
    offsets, indices, values
        CSR graph (row = postsynaptic neuron).
    wte, in_proj, gain, rec_gain, bias
        Parameters as in :class:`~flyviz.model.checkpoint.Checkpoint`.
    in_index
        Input neurons, slot-major.
    streams
        Number of sequences advanced together.
    leak, pad_token_id
        As in the model config.
    threads
        Threads for the sparse product (rows are split between them).
    """

    def __init__(self, offsets: np.ndarray, indices: np.ndarray, values: np.ndarray,
                 wte: np.ndarray, in_proj: np.ndarray, gain: np.ndarray,
                 rec_gain: np.ndarray, bias: np.ndarray, in_index: np.ndarray,
                 streams: int, leak: float = 0.9, pad_token_id: int = 0,
                 threads: int | None = None) -> None:
        self.neurons = n = int(offsets.shape[0] - 1)
        self.streams = s = int(streams)
        self.wte = np.ascontiguousarray(wte, dtype=np.float32)
        self.in_proj = np.ascontiguousarray(in_proj, dtype=np.float32)
        self.delay_k, _, self.slot = self.in_proj.shape
        self.gain = np.ascontiguousarray(gain, dtype=np.float32)[:, None]
        self.rec_gain = np.ascontiguousarray(rec_gain, dtype=np.float32)[:, None]
        self.bias = np.ascontiguousarray(bias, dtype=np.float32)[:, None]
        self.in_index = np.ascontiguousarray(in_index, dtype=np.intp)
        self.leak = np.float32(leak)
        self.keep = np.float32(1.0 - leak)
        self.pad = int(pad_token_id)
        self.state = np.zeros((n, s), dtype=np.float32)
        self._pre = np.zeros((n, s), dtype=np.float32)
        self.recent = np.full((s, self.delay_k), self.pad, dtype=np.int64)
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        values = np.ascontiguousarray(values, dtype=np.float32)
        offsets = np.asarray(offsets, dtype=np.int64)
        threads = max(1, threads or default_threads())
        nnz = int(offsets[-1])
        cuts = sorted({0, n, *(int(np.searchsorted(offsets, nnz * p // threads))
                               for p in range(1, threads))})
        self._blocks = []
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                lo, hi = int(offsets[a]), int(offsets[b])
                self._blocks.append((a, b, (offsets[a:b + 1] - lo).astype(np.int32),
                                     indices[lo:hi], values[lo:hi]))
        self._pool = ThreadPoolExecutor(len(self._blocks)) if len(self._blocks) > 1 else None

    def close(self) -> None:
        """Stop the worker threads."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def reset(self, mask: np.ndarray | None = None) -> None:
        """Zero the state and the delay line of the streams in ``mask`` (all when None)."""
        if mask is None:
            self.state.fill(0.0)
            self.recent.fill(self.pad)
        elif mask.any():
            self.state[:, mask] = 0.0
            self.recent[mask] = self.pad

    def _matvecs(self, block) -> None:
        a, b, indptr, indices, data = block
        out = self._pre[a:b]
        out.fill(0.0)
        _sparsetools.csr_matvecs(b - a, self.neurons, self.streams, indptr, indices, data,
                                 self.state.ravel(), out.ravel())

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed one token per stream; return the new ``(neurons, streams)`` state (a view)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        k = self.delay_k
        history = np.empty((self.streams, k), dtype=np.int64)
        history[:, 0] = tokens
        history[:, 1:] = self.recent[:, ::-1][:, : k - 1]
        if self._pool is None:
            for block in self._blocks:
                self._matvecs(block)
        else:
            list(self._pool.map(self._matvecs, self._blocks))
        pre = self._pre
        pre *= self.rec_gain
        emb = self.wte[history]                                  # (S, k, d)
        for j in range(k):
            drive = emb[:, j, :] @ self.in_proj[j]                # (S, slot)
            pre[self.in_index[j * self.slot:(j + 1) * self.slot]] += drive.T
        pre *= self.gain
        pre += self.bias
        np.tanh(pre, out=pre)
        pre *= self.leak
        self.state *= self.keep
        self.state += pre
        self.recent[:, :-1] = self.recent[:, 1:]
        self.recent[:, -1] = tokens
        return self.state


def layer_norm_columns(state: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (per-stream) mean and inverse standard deviation over the neurons.

    Computed like the engine's LayerNorm (float64 mean of float32 values,
    biased variance).
    """
    mean = state.mean(axis=0, dtype=np.float64).astype(np.float32)
    centred = state - mean[None, :]
    var = np.square(centred).mean(axis=0, dtype=np.float64)
    inv = (1.0 / np.sqrt(var + eps)).astype(np.float32)
    return mean, inv


class StoryStreams:
    """Feeds whole stories through a :class:`StreamReservoir`, one story per stream at a time.

    Each stream starts a story from the zero state (as the engine does for a
    new prompt), reads ``[BOS] + tokens + [EOS]`` and moves on to the next
    story when done. :meth:`steps` yields, for every step, the state and
    which streams produced a prediction target.

    Parameters
    ----------
    reservoir
        The batched recurrent layer.
    sequences
        Stories as ``[BOS] + tokens + [EOS]`` arrays.
    """

    def __init__(self, reservoir: StreamReservoir, sequences: list[np.ndarray]) -> None:
        self.reservoir = reservoir
        self.sequences = sequences

    def steps(self):
        """Yield ``(state, active, current, previous, target)`` per step.

        ``active`` marks streams whose ``target`` (the next token) is real;
        ``current``/``previous`` are the token just read and the one before.
        """
        res = self.reservoir
        s = res.streams
        queue = iter(range(len(self.sequences)))
        story = np.full(s, -1, dtype=np.int64)
        pos = np.zeros(s, dtype=np.int64)
        for i in range(s):
            story[i] = next(queue, -1)
        res.reset()
        while (story >= 0).any():
            tokens = np.zeros(s, dtype=np.int64)
            previous = np.zeros(s, dtype=np.int64)
            target = np.zeros(s, dtype=np.int64)
            active = story >= 0
            for i in np.flatnonzero(active):
                seq = self.sequences[story[i]]
                tokens[i] = seq[pos[i]]
                previous[i] = seq[pos[i] - 1] if pos[i] > 0 else seq[0]
                target[i] = seq[pos[i] + 1]
            state = res.step(tokens)
            yield state, active, tokens, previous, target
            pos[active] += 1
            finished = np.zeros(s, dtype=bool)
            for i in np.flatnonzero(active):
                if pos[i] >= self.sequences[story[i]].size - 1:
                    story[i] = next(queue, -1)
                    pos[i] = 0
                    finished[i] = True
            res.reset(finished)
