"""The atlas's statistics: what one chunk of a corpus says about every neuron, and
the exact merge of chunks.

This module has one job: to turn the engine's states over a chunk of a corpus
(:mod:`flyviz.analysis.corpus`) into mergeable partial statistics
(:class:`ChunkStatistics`, :func:`chunk_statistics`), to merge two partials
(:func:`merge_partials`, exact, so the result does not depend on how the
corpus was split over Dask workers) and to finish the merged partial into the
per-neuron arrays an atlas stores (:func:`finish_statistics`). Running the
chunks and writing the store is :mod:`flyviz.analysis.atlas_build`'s job;
reading it is :mod:`flyviz.analysis.atlas`'s.
Position 0 of every window (the BOS) is left out of every statistic.

An atlas runs a model over a corpus (:mod:`flyviz.analysis.corpus`) with the
batched engine and keeps, per neuron, statistics that merge exactly across
chunks of the corpus, so the work spreads over Dask workers
(:mod:`flyviz.analysis.cluster`) and the result does not depend on how.
Position 0 of every window (the BOS) is left out of every statistic.

Per neuron ``i``, over the counted positions ``t``:

``mean``, ``std``
    Of ``x_i(t)``; chunk moments (float64 sums) merged with Chan's formula.
    ``std`` is the population standard deviation.
``histogram``
    Counts in 50 bins of fixed edges ``-1, -0.96, ..., 1`` (``x`` lies in
    ``(-1, 1)``), so histograms add exactly. Bin ``b`` holds
    ``-1 + 0.04 b <= x < -1 + 0.04 (b + 1)`` (bin index
    ``floor((x + 1) * 25)`` in float32, clipped to 0..49).
``density``
    Fraction of positions with ``x < -threshold`` or ``x >= threshold``, read
    off the histogram: the threshold is a multiple of 0.04 (a bin edge;
    default 0.2) and stored with it.
``max``
    The largest ``x_i``.
``top contexts``
    The ``K`` largest window maxima: each window contributes at most one
    candidate per neuron (its maximum there, at its earliest position), so one
    long story cannot fill the list. Ties go to the lower window, then the
    lower position. Stored as (window, position, value).
``quantile samples``
    Random examples from the bands 0-50 %, 50-90 %, 90-99 % and 99-99.9 % of
    the neuron's distribution. Mergeable and deterministic: every position has
    a key ``splitmix64(global token index)``; positions whose key falls in the
    lowest 1/64 of the range are *sampled*; per neuron and histogram bin the 2
    sampled positions with the smallest keys are kept (a uniform random choice
    within the bin, merged by taking the smallest keys again). At the end each
    band's value range is read off the histogram (linear within a bin) and the
    band takes up to 5 of the kept samples inside that range, smallest key
    first (then samples from the bins the band touches).
``driving tokens``
    The 10 input tokens with the highest mean ``x_i`` at the positions that
    read them (tokens read at least 5 times), with their means and counts.
``selectivity``
    ``(mean at the top driving token - mean) / std``: how much more than
    usual the best token drives the neuron.
``promoted / suppressed tokens``
    The neuron's direct effect on the next-token logits through the readout.
    With ``H`` the effective readout (``head``, or ``head_b @ head_a``),
    ``gamma`` the LayerNorm weight and ``j`` the neuron's readout column,
    LayerNorm scales ``x_j`` by ``gamma_j / sigma_t``; taking ``sigma_t`` at
    its corpus mean ``sigma = mean_t sqrt(var_t + eps)`` (``var_t``: the
    variance over the read-out neurons at position ``t``) and ignoring the
    neuron's own O(1/N) share of the mean and variance, one unit of ``x_j``
    moves logit ``v`` by::

        effect[v] = (gamma_j / sigma) * (H[v, j] - mean_u H[u, j])

    (centred over the vocabulary, since a shift of every logit changes no
    probability). The 10 largest are *promoted*, the 10 smallest *suppressed*.
    Neurons outside the readout have no direct effect (empty lists).
``principal axes``
    The first three principal axes of all the counted states, their
    variances and the total variance, from a randomized sketch of the
    covariance that chunks sum (:mod:`flyviz.analysis.atlas_basis`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from flyviz.analysis import _kernels, cluster
from flyviz.analysis.atlas_basis import Basis, CovarianceSketch, finish_basis, merge_sketches
from flyviz.analysis.corpus import CorpusChunk, StreamSchedule
from flyviz.model.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

HIST_BINS = 50
HIST_EDGES = np.linspace(-1.0, 1.0, HIST_BINS + 1)
#: Quantile bands of the samples, as fractions of the neuron's distribution.
BANDS = ((0.0, 0.5), (0.5, 0.9), (0.9, 0.99), (0.99, 0.999))
SLOTS_PER_BIN = 2
SAMPLE_SHIFT = 58  # a position is sampled when key >> 58 == 0: 1 in 64
_FLUSH_WINDOWS = 64  # window candidates buffered before they are merged into the top-K
_HIST_BLOCK = 2048  # neurons per histogram bincount (their 100k counters stay in cache)
_TOKEN_BLOCK = 4096  # neurons per transposed block of the token sums
_UINT64_MAX = np.uint64(np.iinfo(np.uint64).max)


@dataclass(frozen=True)
class AtlasSettings(cluster.RunSettings):
    """How an atlas is computed.

    Attributes
    ----------
    top_k
        Top contexts kept per neuron.
    context
        Longest window, BOS included.
    streams
        Streams of the batched engine (``--batch``).
    density_threshold
        ``|x|`` at or above which a position counts as active; a multiple of
        0.04 (a histogram edge).
    driving_tokens, logit_tokens
        Driving tokens, and promoted and suppressed tokens, kept per neuron.
    min_token_count
        Reads a token needs to rank as a driving token.
    samples_per_band
        Quantile samples kept per band; 0 keeps none (a compact atlas).
    chunk_tokens
        Tokens per task (the unit of work and of ``--resume``).
    kernel, threads
        Sparse kernel and threads per task (same results for every choice).
    """

    top_k: int = 32
    context: int = 512
    streams: int = 64
    density_threshold: float = 0.2
    driving_tokens: int = 10
    logit_tokens: int = 10
    min_token_count: int = 5
    samples_per_band: int = 5
    chunk_tokens: int = 32_768
    kernel: str | None = None
    threads: int = 1

    def validate(self) -> "AtlasSettings":
        """Raise :class:`InputError` for out-of-range values; return ``self``."""
        checks = (("--top-k", self.top_k, 1, 1000), ("--context", self.context, 2, 1 << 20),
                  ("--batch", self.streams, 1, 4096), ("driving tokens", self.driving_tokens, 1, 100),
                  ("logit tokens", self.logit_tokens, 1, 100),
                  ("--chunk-tokens", self.chunk_tokens, 64, 1 << 30),
                  ("samples per band", self.samples_per_band, 0, 2 * SLOTS_PER_BIN * HIST_BINS),
                  ("threads", self.threads, 1, 64), ("min token count", self.min_token_count, 1, 1 << 30))
        self.check_ranges(checks)
        steps = self.density_threshold / 0.04
        if not (0 < self.density_threshold < 1 and abs(steps - round(steps)) < 1e-9):
            raise InputError(f"--density-threshold {self.density_threshold} must be a multiple "
                             "of 0.04 between 0 and 1 (a histogram edge), e.g. 0.2")
        return self


# ---------------------------------------------------------------- small tools
def splitmix64(index: np.ndarray) -> np.ndarray:
    """A bijective 64-bit mix of (non-negative) token indices: the sampling keys."""
    z = np.asarray(index, dtype=np.int64).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def histogram_bins(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The histogram bin (0..49, uint8) of each value (see the module documentation).

    ``out``: a float32 scratch array of ``x``'s shape to use (overwritten).
    """
    x = np.asarray(x, dtype=np.float32)
    scaled = np.add(x, np.float32(1.0), out=out)
    np.multiply(scaled, np.float32(25.0), out=scaled)
    np.maximum(scaled, np.float32(0.0), out=scaled)  # x is never below -1; kept for safety
    bins = scaled.astype(np.uint8)
    np.minimum(bins, HIST_BINS - 1, out=bins)  # x may reach exactly 1.0 in float32
    return bins


def _rank_keys(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """uint64 keys that sort by value descending, then index ascending (index < 2**32)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    ascending = np.where(bits & np.uint32(0x80000000), ~bits, bits | np.uint32(0x80000000))
    descending = (~ascending).astype(np.uint64)
    return (descending << np.uint64(32)) | (index.astype(np.uint64) & np.uint64(0xFFFFFFFF))


def select_top(values: np.ndarray, index: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` entries of largest value (ties: lower index), in that order.

    Empty entries have value ``-inf`` and index -1 and sort last.
    """
    keys = _rank_keys(values, index)
    if keys.shape[1] > k:
        part = np.argpartition(keys, k - 1, axis=1)[:, :k]
        keys = np.take_along_axis(keys, part, axis=1)
    else:
        part = np.broadcast_to(np.arange(keys.shape[1]), keys.shape)
    order = np.take_along_axis(part, np.argsort(keys, axis=1, kind="stable"), axis=1)
    return (np.take_along_axis(values, order, axis=1),
            np.take_along_axis(index, order, axis=1))


def _sample_keys(index: np.ndarray) -> np.ndarray:
    keys = splitmix64(np.maximum(index, 0))
    keys[index < 0] = _UINT64_MAX
    return keys


# ------------------------------------------------------------- chunk statistics
class ChunkStatistics:
    """Accumulates one chunk's statistics from the engine's states, step by step.

    Parameters
    ----------
    neurons, vocabulary
        Model sizes.
    streams
        Columns of the state matrix.
    settings
        The atlas settings.
    readout
        The read-out neurons (for the LayerNorm scale); ``None`` = all.
    eps
        The LayerNorm epsilon.
    compiled
        Use the compiled loops of :mod:`flyviz.analysis._kernels` where they
        build (the same results as NumPy's, faster).
    """

    def __init__(self, neurons: int, vocabulary: int, streams: int, settings: AtlasSettings,
                 readout: np.ndarray | None = None, eps: float = 1e-5,
                 compiled: bool = False) -> None:
        n, v = neurons, vocabulary
        self.neurons, self.vocabulary, self.streams = n, v, streams
        self.settings = settings
        self.readout = readout
        self.eps = float(eps)
        self.count = 0
        self.s1 = np.zeros(n, dtype=np.float64)
        self.s2 = np.zeros(n, dtype=np.float64)
        self.scale_sum = 0.0
        self.hist = np.zeros((n, HIST_BINS), dtype=np.int64)
        self.token_sum = np.zeros((v, n), dtype=np.float32)
        self.token_count = np.zeros(v, dtype=np.int64)
        self.run_max = np.full((n, streams), -np.inf, dtype=np.float32)
        self.run_index = np.full((n, streams), -1, dtype=np.int64)
        k = settings.top_k
        self.top_value = np.full((n, k), -np.inf, dtype=np.float32)
        self.top_index = np.full((n, k), -1, dtype=np.int64)
        self._pending_values: list[np.ndarray] = []
        self._pending_index: list[np.ndarray] = []
        self.keep_samples = settings.samples_per_band > 0
        shape = (n, HIST_BINS, SLOTS_PER_BIN)
        self.sample_key = np.full(shape, _UINT64_MAX, dtype=np.uint64)
        self.sample_index = np.full(shape, -1, dtype=np.int64)
        self.sample_value = np.zeros(shape, dtype=np.float32)
        self._row_offset = (np.arange(min(n, _HIST_BLOCK), dtype=np.intp) * HIST_BINS)[:, None]
        self._slot_base = np.arange(n, dtype=np.intp) * (HIST_BINS * SLOTS_PER_BIN)
        self._ones_out = np.ones(n if readout is None else readout.size, dtype=np.float32)
        #: The compiled histogram and token-sum loops (same results), or None for NumPy's.
        self._compiled = _kernels.compiled() if compiled else None
        #: The sketch of the states' covariance, for the atlas's principal axes.
        self.basis = CovarianceSketch(n)

    def start_windows(self, columns: np.ndarray) -> None:
        """Columns that begin a new window at this step."""
        if columns.size:
            self.run_max[:, columns] = -np.inf
            self.run_index[:, columns] = -1

    def end_windows(self, columns: np.ndarray) -> None:
        """Columns whose window ended with this step: one top-context candidate each."""
        for column in columns:
            self._pending_values.append(self.run_max[:, column].copy())
            self._pending_index.append(self.run_index[:, column].copy())
        if len(self._pending_values) >= _FLUSH_WINDOWS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending_values:
            return
        values = np.concatenate([self.top_value, np.stack(self._pending_values, axis=1)], axis=1)
        index = np.concatenate([self.top_index, np.stack(self._pending_index, axis=1)], axis=1)
        self._pending_values.clear()
        self._pending_index.clear()
        self.top_value, self.top_index = select_top(values, index, self.settings.top_k)

    def add(self, x: np.ndarray, tokens: np.ndarray, index: np.ndarray,
            position: np.ndarray) -> None:
        """One step: ``x`` the ``(neurons, streams)`` states after reading ``tokens`` at
        global ``index`` and window ``position`` (-1: idle column)."""
        counted = position > 0
        cols = np.flatnonzero(counted)
        if cols.size == 0:
            return
        every = cols.size == x.shape[1]
        xs = np.ascontiguousarray(x if every else x[:, cols], dtype=np.float32)
        m = cols.size
        self.count += m
        squares = xs * xs
        self.s1 += xs @ np.ones(m, dtype=np.float32)
        self.s2 += squares @ np.ones(m, dtype=np.float32)
        self.basis.add(xs)
        # The LayerNorm scale at each counted position (over the read-out neurons).
        if self.readout is None:
            ones = self._ones_out
            col_sum, col_sq = ones @ xs, ones @ squares
        else:
            col_sum, col_sq = self._ones_out @ xs[self.readout], self._ones_out @ squares[self.readout]
        n_out = self._ones_out.size
        mean = col_sum.astype(np.float64) / n_out
        var = np.maximum(col_sq.astype(np.float64) / n_out - mean * mean, 0.0)
        self.scale_sum += float(np.sqrt(var + self.eps).sum())
        bins = self._histogram(xs, scratch=squares)
        # Window maxima (earliest position on ties: strictly greater replaces).
        here = index[cols]
        run_max = self.run_max if every else self.run_max[:, cols]
        run_index = self.run_index if every else self.run_index[:, cols]
        better = xs > run_max
        np.copyto(run_max, xs, where=better)
        np.copyto(run_index, np.broadcast_to(here, run_index.shape), where=better)
        if not every:
            self.run_max[:, cols] = run_max
            self.run_index[:, cols] = run_index
        toks = tokens[cols]
        self.token_count += np.bincount(toks, minlength=self.vocabulary)
        self._token_sums(xs, toks)
        # Samples: per neuron and bin, the sampled positions of smallest key.
        if self.keep_samples:
            if bins is None:
                bins = histogram_bins(xs, out=squares)
            keys = splitmix64(here)
            for i in np.flatnonzero((keys >> np.uint64(SAMPLE_SHIFT)) == 0):
                self._sample(bins[:, i], keys[i], int(here[i]), xs[:, i])

    def _histogram(self, xs: np.ndarray, scratch: np.ndarray) -> np.ndarray | None:
        """Count ``xs`` into the histogram; return the bins where NumPy computed them."""
        if self._compiled is not None:
            _kernels.histogram_add(self._compiled, xs, self.hist)
            return None
        bins = histogram_bins(xs, out=scratch)
        # bincount over blocks of neurons whose counters stay in cache.
        for start in range(0, self.neurons, _HIST_BLOCK):
            stop = min(self.neurons, start + _HIST_BLOCK)
            flat = bins[start:stop].astype(np.intp)
            flat += self._row_offset[:stop - start]
            self.hist[start:stop] += np.bincount(
                flat.reshape(-1), minlength=(stop - start) * HIST_BINS).reshape(-1, HIST_BINS)
        return bins

    def _token_sums(self, xs: np.ndarray, toks: np.ndarray) -> None:
        """Add column ``c`` of ``xs`` to row ``toks[c]`` of the token sums, column by column."""
        if self._compiled is not None:
            _kernels.token_add(self._compiled, xs, toks, self.token_sum)
            return
        # Token-major rows: a block of neurons is transposed in cache and each column
        # added to its token's row in place (repeated tokens add in turn).
        for start in range(0, self.neurons, _TOKEN_BLOCK):
            stop = min(self.neurons, start + _TOKEN_BLOCK)
            rows = np.ascontiguousarray(xs[start:stop].T)
            for i, token in enumerate(toks):
                target = self.token_sum[token, start:stop]
                np.add(target, rows[i], out=target)

    def _sample(self, bins: np.ndarray, key: np.uint64, index: int, values: np.ndarray) -> None:
        # Flat positions of slot 0 of each neuron's bin; slot 1 follows it.
        at = self._slot_base + bins.astype(np.intp) * SLOTS_PER_BIN
        skey = self.sample_key.reshape(-1)
        sindex = self.sample_index.reshape(-1)
        svalue = self.sample_value.reshape(-1)
        k0, k1 = skey[at], skey[at + 1]
        first = key < k0
        second = ~first & (key < k1)
        a = at[first]
        skey[a + 1], sindex[a + 1], svalue[a + 1] = skey[a], sindex[a], svalue[a]
        skey[a], sindex[a], svalue[a] = key, index, values[first]
        a = at[second] + 1
        skey[a], sindex[a], svalue[a] = key, index, values[second]

    def partial(self) -> cluster.Partial:
        """The chunk's mergeable partial statistics."""
        self._flush()
        n = max(self.count, 1)
        mean = self.s1 / n
        m2 = np.maximum(self.s2 - self.s1 * mean, 0.0)
        parts = {
            "count": np.array(self.count, dtype=np.int64),
            "mean": mean, "m2": m2,
            "scale_sum": np.array(self.scale_sum, dtype=np.float64),
            "histogram": self.hist,
            "top_value": self.top_value, "top_index": self.top_index,
            "token_sum": self.token_sum, "token_count": self.token_count,
            "pca_sketch": self.basis.sketch, "pca_sum": self.basis.total,
        }
        if self.keep_samples:
            parts["sample_index"] = self.sample_index
            parts["sample_value"] = self.sample_value
        return parts


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """Merge two partials (``a`` from the lower chunks): exact for counts, histograms and
    top contexts; Chan's formula for the moments; a sum for the covariance sketch."""
    na, nb = int(a["count"]), int(b["count"])
    n = na + nb
    out: cluster.Partial = {"count": np.array(n, dtype=np.int64)}
    if n == 0:
        out["mean"], out["m2"] = a["mean"], a["m2"]
    else:
        delta = b["mean"] - a["mean"]
        out["mean"] = a["mean"] + delta * (nb / n)
        out["m2"] = a["m2"] + b["m2"] + delta * delta * (na * nb / n)
    out["scale_sum"] = np.array(float(a["scale_sum"]) + float(b["scale_sum"]))
    out["histogram"] = a["histogram"] + b["histogram"]
    k = a["top_value"].shape[1]
    out["top_value"], out["top_index"] = select_top(
        np.concatenate([a["top_value"], b["top_value"]], axis=1),
        np.concatenate([a["top_index"], b["top_index"]], axis=1), k)
    out["token_sum"] = a["token_sum"] + b["token_sum"]
    out["token_count"] = a["token_count"] + b["token_count"]
    if "pca_sketch" in a and "pca_sketch" in b:
        out["pca_sketch"] = merge_sketches(a["pca_sketch"], b["pca_sketch"])
        out["pca_sum"] = merge_sketches(a["pca_sum"], b["pca_sum"])
    if "sample_index" in a:
        index = np.concatenate([a["sample_index"], b["sample_index"]], axis=2)
        values = np.concatenate([a["sample_value"], b["sample_value"]], axis=2)
        order = np.argsort(_sample_keys(index), axis=2, kind="stable")[:, :, :SLOTS_PER_BIN]
        out["sample_index"] = np.take_along_axis(index, order, axis=2)
        out["sample_value"] = np.take_along_axis(values, order, axis=2)
    return out


def streams_for(chunk: CorpusChunk, streams: int) -> int:
    """The engine's columns for ``chunk``: ``streams`` (``--batch``), or fewer where the chunk
    has fewer windows, rounded up to whole vectors of the compiled kernel
    (:data:`~flyviz.model.kernels.MULTI_LANES`).

    A chunk of 8 windows stepped 64 columns wide paid for 56 idle ones (a 2,000-token atlas
    of one story took 8 times as long as it needed). With no more columns than windows
    every window starts at step 0 on the column it had before, and each column's product
    sums its edges in the same order whatever the width, so the atlas keeps its bits."""
    from flyviz.model.kernels import MULTI_LANES

    windows = int(np.asarray(chunk.offsets).size - 1)
    needed = max(1, -(-windows // MULTI_LANES)) * MULTI_LANES
    return min(int(streams), needed)


def chunk_statistics(ckpt: "Checkpoint", settings: AtlasSettings,
                     chunk: CorpusChunk) -> cluster.Partial:
    """Run ``chunk`` through a batched engine and return its partial statistics."""
    from flyviz.model.batch import BatchEngine
    from flyviz.model.engine import SINGLE_THREADED_BLAS

    cfg = ckpt.config
    streams = streams_for(chunk, settings.streams)
    schedule = StreamSchedule(chunk, streams, cfg.pad_token_id)
    engine = BatchEngine(ckpt, streams, threads=settings.threads, kernel=settings.kernel)
    readout = None if ckpt.out_index_is_identity() else np.asarray(ckpt.out_index, dtype=np.intp)
    stats = ChunkStatistics(cfg.neurons, cfg.vocabulary, streams, settings,
                            readout=readout, eps=cfg.layer_norm_eps,
                            compiled=engine.prepare() == "llvm")
    # BLAS (the statistics' matrix-vector products) stays in this thread, as in a step.
    with SINGLE_THREADED_BLAS:
        try:
            _run_schedule(engine, stats, schedule, chunk)
        finally:
            engine.close()
    return stats.partial()


def _run_schedule(engine, stats: ChunkStatistics, schedule: StreamSchedule,
                  chunk: CorpusChunk) -> None:
    """Step the engine through the schedule, feeding every state to the statistics."""
    reported = 0
    last = time.perf_counter()
    for step in range(schedule.steps):
        starts = schedule.starts(step)
        if starts.size:
            engine.reset(starts)
            stats.start_windows(starts)
        engine.step(schedule.tokens[step])
        stats.add(engine.state, schedule.tokens[step], schedule.index[step],
                  schedule.position[step])
        stats.end_windows(schedule.ends(step))
        now = time.perf_counter()
        if now - last > 1.0:  # progress about once a second
            done = int(np.count_nonzero(schedule.index[:step + 1] >= 0))
            cluster.report_progress(done - reported)
            reported, last = done, now
    cluster.report_progress(chunk.n_tokens - reported)


# ------------------------------------------------------------------- finishing
def _band_edges(histogram: np.ndarray, count: int) -> np.ndarray:
    """``(neurons, len(BANDS) + 1)`` value boundaries of the bands, read off the histogram."""
    quantiles = np.array([BANDS[0][0]] + [hi for _, hi in BANDS])
    cdf = np.cumsum(histogram, axis=1) / max(count, 1)
    cdf = np.concatenate([np.zeros((cdf.shape[0], 1)), cdf], axis=1)  # at the 51 edges
    edges = np.empty((histogram.shape[0], quantiles.size))
    for row in range(histogram.shape[0]):
        # First the lowest / highest occupied edges, so bands do not reach empty bins.
        edges[row] = np.interp(quantiles, cdf[row], HIST_EDGES)
    occupied = histogram > 0
    first = np.argmax(occupied, axis=1)
    last = HIST_BINS - 1 - np.argmax(occupied[:, ::-1], axis=1)
    edges[:, 0] = np.maximum(edges[:, 0], HIST_EDGES[first])
    edges[:, -1] = np.minimum(edges[:, -1], HIST_EDGES[last + 1])
    return edges


def band_samples(partial: cluster.Partial, per_band: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray, np.ndarray]:
    """The quantile-band samples: ``(edges, index, value)`` with index -1 where missing.

    Returns ``edges (neurons, bands + 1)``, ``index (neurons, bands, per_band)``,
    ``value`` likewise, and the bands' bin masks (for tests).
    """
    hist = partial["histogram"]
    n = hist.shape[0]
    edges = _band_edges(hist, int(partial["count"]))
    index = partial["sample_index"].reshape(n, -1)
    value = partial["sample_value"].reshape(n, -1)
    keys = _sample_keys(index)
    slot_bin = np.repeat(np.arange(HIST_BINS), SLOTS_PER_BIN)[None, :]
    out_index = np.full((n, len(BANDS), per_band), -1, dtype=np.int64)
    out_value = np.full((n, len(BANDS), per_band), np.nan, dtype=np.float32)
    rows = np.arange(n)[:, None]
    # Each kept sample is listed under one band at most: first every band takes the
    # samples inside its value range (one on an edge goes to the lower band), then a band
    # short of samples fills up from the bins it touches, with samples no band lists (a
    # card marks those as outside the band's range: flyviz.analysis.atlas).
    taken = np.zeros(index.shape, dtype=bool)
    own: list[np.ndarray] = []
    masks = []
    for band in range(len(BANDS)):
        lo, hi = edges[:, band:band + 1], edges[:, band + 1:band + 2]
        inside = (value >= lo) & (value <= hi) & (index >= 0) & ~taken
        rank = np.where(inside, keys >> np.uint64(1), _UINT64_MAX)
        order = np.argsort(rank, axis=1, kind="stable")[:, :per_band]
        chosen = np.zeros(index.shape, dtype=bool)
        chosen[rows, order] = np.take_along_axis(rank, order, axis=1) != _UINT64_MAX
        taken |= chosen
        own.append(chosen)
    for band in range(len(BANDS)):
        lo, hi = edges[:, band:band + 1], edges[:, band + 1:band + 2]
        touches = (HIST_EDGES[slot_bin] <= hi) & (HIST_EDGES[slot_bin + 1] >= lo) & (index >= 0)
        masks.append(touches)
        # The band's own samples first, then fill-ins; smallest key first within each.
        rank = np.where(own[band], keys >> np.uint64(1),
                        np.where(touches & ~taken, (keys >> np.uint64(1)) | np.uint64(1 << 63),
                                 _UINT64_MAX))
        order = np.argsort(rank, axis=1, kind="stable")[:, :per_band]
        chosen = np.take_along_axis(rank, order, axis=1) != _UINT64_MAX
        filled = np.zeros(index.shape, dtype=bool)
        filled[rows, order] = chosen
        taken |= filled
        out_index[:, band, :order.shape[1]] = np.where(chosen, np.take_along_axis(index, order, 1), -1)
        out_value[:, band, :order.shape[1]] = np.where(chosen, np.take_along_axis(value, order, 1),
                                                       np.nan)
    return edges.astype(np.float32), out_index, out_value, np.stack(masks, axis=1)


def driving_tokens(partial: cluster.Partial, top: int, min_count: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per neuron, the ``top`` tokens of highest mean activation (read >= ``min_count`` times).

    Returns ``(token ids (neurons, top) int32, means float32)``; -1 / NaN where fewer
    tokens qualify. Ties: the lower token id first.
    """
    counts = partial["token_count"]
    sums = partial["token_sum"]
    eligible = np.flatnonzero(counts >= min_count)
    n = sums.shape[1]
    ids = np.full((n, top), -1, dtype=np.int32)
    means = np.full((n, top), np.nan, dtype=np.float32)
    if eligible.size == 0:
        return ids, means
    block = 4096
    for start in range(0, n, block):
        stop = min(n, start + block)
        m = (sums[eligible, start:stop] / counts[eligible, None]).astype(np.float32).T  # (b, e)
        values, which = select_top(m, np.broadcast_to(eligible, m.shape).astype(np.int64),
                                   min(top, eligible.size))
        ids[start:stop, :which.shape[1]] = which
        means[start:stop, :values.shape[1]] = values
    return ids, means


def direct_effects(ckpt: "Checkpoint", scale: float, top: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Promoted and suppressed tokens of every neuron (formula in the module documentation).

    Returns ``(promoted ids, promoted effects, suppressed ids, suppressed effects)``,
    each ``(neurons, top)``; -1 / NaN for neurons outside the readout.
    """
    n = ckpt.config.neurons
    vocab = ckpt.config.vocabulary
    top = min(top, vocab)
    out_index = np.asarray(ckpt.out_index, dtype=np.int64)
    gamma = np.asarray(ckpt.ln_weight, dtype=np.float64)
    prom_ids = np.full((n, top), -1, dtype=np.int32)
    prom = np.full((n, top), np.nan, dtype=np.float32)
    supp_ids = np.full((n, top), -1, dtype=np.int32)
    supp = np.full((n, top), np.nan, dtype=np.float32)
    block = 2048
    token_ids = np.arange(vocab, dtype=np.int64)
    for start in range(0, out_index.size, block):
        cols = np.arange(start, min(out_index.size, start + block))
        if ckpt.head is not None:
            h = np.asarray(ckpt.head, dtype=np.float64)[:, cols]
        else:
            h = np.asarray(ckpt.head_b, dtype=np.float64) @ np.asarray(ckpt.head_a,
                                                                       dtype=np.float64)[:, cols]
        effect = (h - h.mean(axis=0, keepdims=True)) * (gamma[cols] / scale)[None, :]
        effect = effect.T.astype(np.float32)                       # (cols, vocab)
        ids = np.broadcast_to(token_ids, effect.shape)
        v, i = select_top(effect, ids, top)
        neurons = out_index[cols]
        prom_ids[neurons], prom[neurons] = i, v
        v, i = select_top(-effect, ids, top)
        supp_ids[neurons], supp[neurons] = i, -v
    return prom_ids, prom, supp_ids, supp


def principal_basis(partial: cluster.Partial) -> Basis:
    """The corpus's principal axes from the merged partial's sketch and exact moments."""
    count = int(partial["count"])
    return finish_basis(partial["pca_sketch"], partial["pca_sum"], count,
                        float(partial["m2"].sum()) / max(count, 1))


def finish_statistics(partial: cluster.Partial, ckpt: "Checkpoint", settings: AtlasSettings,
                      compact: bool = False) -> dict[str, np.ndarray]:
    """The per-neuron arrays an atlas stores, from the merged partial (indices still global)."""
    count = int(partial["count"])
    if count == 0:
        raise InputError("the corpus has no token to count (every window is only its BOS)")
    hist = partial["histogram"]
    mean = partial["mean"]
    std = np.sqrt(partial["m2"] / count)
    t = int(round((settings.density_threshold + 1.0) / 0.04))
    s = int(round((1.0 - settings.density_threshold) / 0.04))
    # Bins below -threshold and from +threshold up (both thresholds are bin edges).
    active = hist[:, :s].sum(axis=1) + hist[:, t:].sum(axis=1)
    scale = float(partial["scale_sum"]) / count
    ids, means = driving_tokens(partial, settings.driving_tokens, settings.min_token_count)
    with np.errstate(invalid="ignore", divide="ignore"):
        selectivity = np.where(std > 0, (means[:, 0] - mean) / std, 0.0)
    selectivity = np.nan_to_num(selectivity, nan=0.0)
    prom_ids, prom, supp_ids, supp = direct_effects(ckpt, scale, settings.logit_tokens)
    arrays = {
        "mean": mean.astype(np.float32), "std": std.astype(np.float32),
        "density": (active / count).astype(np.float32),
        "max": partial["top_value"][:, 0].astype(np.float32),
        "selectivity": selectivity.astype(np.float32),
        "histogram": hist.astype(np.int32 if count < 2**31 else np.int64),
        "top_value": np.where(partial["top_index"] >= 0, partial["top_value"], np.nan
                              ).astype(np.float32),
        "top_index": partial["top_index"],
        "driving_token": ids, "driving_mean": means,
        "promoted_token": prom_ids, "promoted_effect": prom,
        "suppressed_token": supp_ids, "suppressed_effect": supp,
        "token_count": partial["token_count"],
        "layer_norm_scale": np.array(scale),
        "count": np.array(count),
    }
    if "pca_sketch" in partial:
        basis = principal_basis(partial)
        arrays.update(pca_axes=basis.axes, pca_mean=basis.mean, pca_variance=basis.variance,
                      pca_total_variance=np.array(basis.total_variance))
    if not compact and "sample_index" in partial and settings.samples_per_band > 0:
        edges, index, value, _ = band_samples(partial, settings.samples_per_band)
        arrays.update(band_edges=edges, sample_index=index, sample_value=value)
    return arrays


__all__ = ["AtlasSettings", "BANDS", "ChunkStatistics", "HIST_BINS", "HIST_EDGES",
           "band_samples", "chunk_statistics", "direct_effects", "driving_tokens",
           "finish_statistics", "histogram_bins", "merge_partials", "principal_basis", "select_top",
           "splitmix64"]
