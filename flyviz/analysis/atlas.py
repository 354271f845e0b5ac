"""The neuron atlas: what every neuron responds to across a whole corpus.

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

Storage
-------
A Zarr store (format 2, consolidated metadata; readable lazily with
``xarray.open_zarr``), chunked by neuron, holding the statistics, the
tokenized corpus (``corpus_tokens``, ``corpus_offsets``), the tokenizer, the
model's identity (weight and graph digests, :mod:`flyviz.model.identity`) and
the settings (attribute ``flyviz_atlas``). :class:`Atlas` reads it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import _kernels, cluster, integrity
from flyviz.analysis.corpus import Corpus, CorpusChunk, StreamSchedule
from flyviz.model.errors import FlyvizError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

FORMAT = "flyviz-atlas"
FORMAT_VERSION = 1
HIST_BINS = 50
HIST_EDGES = np.linspace(-1.0, 1.0, HIST_BINS + 1)
#: Quantile bands of the samples, as fractions of the neuron's distribution.
BANDS = ((0.0, 0.5), (0.5, 0.9), (0.9, 0.99), (0.99, 0.999))
SLOTS_PER_BIN = 2
SAMPLE_SHIFT = 58  # a position is sampled when key >> 58 == 0: 1 in 64
NEURON_CHUNK = 1024
TOKEN_CHUNK = 1 << 16
_FLUSH_WINDOWS = 64  # window candidates buffered before they are merged into the top-K
_HIST_BLOCK = 2048  # neurons per histogram bincount (their 100k counters stay in cache)
_TOKEN_BLOCK = 4096  # neurons per transposed block of the token sums
_UINT64_MAX = np.uint64(np.iinfo(np.uint64).max)


class AtlasError(FlyvizError):
    """An atlas is missing, damaged, or belongs to another model."""


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
        }
        if self.keep_samples:
            parts["sample_index"] = self.sample_index
            parts["sample_value"] = self.sample_value
        return parts


def merge_partials(a: cluster.Partial, b: cluster.Partial) -> cluster.Partial:
    """Merge two partials (``a`` from the lower chunks): exact for counts, histograms and
    top contexts; Chan's formula for the moments."""
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
    if "sample_index" in a:
        index = np.concatenate([a["sample_index"], b["sample_index"]], axis=2)
        values = np.concatenate([a["sample_value"], b["sample_value"]], axis=2)
        order = np.argsort(_sample_keys(index), axis=2, kind="stable")[:, :, :SLOTS_PER_BIN]
        out["sample_index"] = np.take_along_axis(index, order, axis=2)
        out["sample_value"] = np.take_along_axis(values, order, axis=2)
    return out


def atlas_chunk(spec: str, dataset: str | None, weights_sha256: str, settings: dict[str, Any],
                chunk: CorpusChunk) -> cluster.Partial:
    """The partial statistics of one chunk (runs on a worker): the model comes from ``spec``
    (joined to ``dataset``, loaded once per process) and must have the client's weights."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    return chunk_statistics(ckpt, AtlasSettings(**settings), chunk)


def chunk_statistics(ckpt: "Checkpoint", settings: AtlasSettings,
                     chunk: CorpusChunk) -> cluster.Partial:
    """Run ``chunk`` through a batched engine and return its partial statistics."""
    from flyviz.model.batch import BatchEngine
    from flyviz.model.engine import _SINGLE_THREADED_BLAS

    cfg = ckpt.config
    schedule = StreamSchedule(chunk, settings.streams, cfg.pad_token_id)
    engine = BatchEngine(ckpt, settings.streams, threads=settings.threads, kernel=settings.kernel)
    readout = None if ckpt.out_index_is_identity() else np.asarray(ckpt.out_index, dtype=np.intp)
    stats = ChunkStatistics(cfg.neurons, cfg.vocabulary, settings.streams, settings,
                            readout=readout, eps=cfg.layer_norm_eps,
                            compiled=engine.prepare() == "llvm")
    # BLAS (the statistics' matrix-vector products) stays in this thread, as in a step.
    with _SINGLE_THREADED_BLAS:
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
    masks = []
    for band in range(len(BANDS)):
        lo, hi = edges[:, band:band + 1], edges[:, band + 1:band + 2]
        inside = (value >= lo) & (value <= hi) & (index >= 0)
        touches = (HIST_EDGES[slot_bin] <= hi) & (HIST_EDGES[slot_bin + 1] >= lo) & (index >= 0)
        masks.append(touches)
        # Inside the band first, then the band's bins; smallest key first within each.
        rank = np.where(inside, keys >> np.uint64(1),
                        np.where(touches, (keys >> np.uint64(1)) | np.uint64(1 << 63),
                                 _UINT64_MAX))
        order = np.argsort(rank, axis=1, kind="stable")[:, :per_band]
        chosen = np.take_along_axis(rank, order, axis=1) != _UINT64_MAX
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


# ------------------------------------------------------------------- building
@dataclass
class AtlasRun:
    """What :func:`build_atlas` did."""

    path: Path
    tokens: int
    counted_tokens: int
    seconds: float
    workers: int
    resumed_chunks: int
    chunks: int
    compute_seconds: float = 0.0


def _store_key(identity: dict[str, Any], corpus: Corpus, settings: AtlasSettings,
               chunks: list[CorpusChunk]) -> dict[str, Any]:
    model = {"weights_sha256": identity["weights_sha256"], "graph_sha256": identity["graph_sha256"]}
    return {"format": FORMAT, "model": model, "corpus": corpus.digest(),
            "settings": settings.run_key(), "chunks": len(chunks)}


#: Where an atlas run keeps its finished chunks until it is written.
parts_folder = cluster.parts_folder


def check_output(out: Path) -> None:
    """Refuse an output path that holds something other than an atlas, or that cannot be
    written (checked before the model or the corpus is read)."""
    import os

    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out} is a file; give a new folder name (e.g. corpus.atlas)")
        if any(out.iterdir()) and not _is_atlas(out):
            raise InputError(f"--out {out} holds files that are not a flyviz atlas; give a new "
                             "or empty folder")
    parent = out.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: the folder {parent} is not writable")


def _is_atlas(path: Path) -> bool:
    try:
        attrs = json.loads((path / ".zattrs").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(attrs, dict) and attrs.get("flyviz_atlas", {}).get("format") == FORMAT


def build_atlas(spec: str, ckpt: "Checkpoint", corpus: Corpus, out: str | Path,
                settings: AtlasSettings = AtlasSettings(), *, workers: int | None = None,
                scheduler: str | None = None, resume: bool = False,
                progress: cluster.ProgressBar | None = None, compact: bool = False,
                log=None, dataset: str | Path | None = None) -> AtlasRun:
    """Compute an atlas of ``ckpt`` (loaded from ``spec``) over ``corpus`` and write it to ``out``.

    Parameters
    ----------
    spec
        How workers load the model (a path or ``"demo"``): every worker loads it
        itself, once, and refuses to work if its weights are not ``ckpt``'s.
    ckpt
        The same model, loaded here (identity, readout, tokenizer).
    corpus
        The tokenized corpus.
    out
        The Zarr store to write (replaced if it is an atlas).
    settings
        See :class:`AtlasSettings`.
    workers, scheduler, resume, progress
        See :func:`flyviz.analysis.cluster.run_tree`.
    dataset
        The connectome dataset folder workers join ``spec`` to (``--dataset``).
    compact
        Store no quantile samples (the settings should then ask for none).
    log
        ``log(line)`` for status lines.
    """
    from flyviz.model.identity import model_identity

    cluster.require_dask("flyviz atlas", workers, scheduler)
    settings = settings.validate()
    out = Path(out).expanduser()
    check_output(out)
    identity = model_identity(ckpt)
    chunks = corpus.chunks(settings.chunk_tokens)
    store = cluster.open_store(out, _store_key(identity, corpus, settings, chunks), resume)
    if log is not None:
        log(f"{corpus.n_tokens:,} tokens in {corpus.n_windows:,} windows of "
            f"{corpus.n_documents:,} documents; {len(chunks)} chunks")
    task_args = (spec, None if dataset is None else str(dataset), identity["weights_sha256"],
                 asdict(settings))
    result = cluster.run_tree(atlas_chunk, task_args, chunks, merge_partials,
                              workers=workers, scheduler=scheduler, store=store, resume=resume,
                              progress=progress, log=log)
    write_atlas(out, result.partial, ckpt, corpus, settings, identity, compact=compact)
    store.remove()
    return AtlasRun(path=out, tokens=corpus.n_tokens, counted_tokens=corpus.counted_tokens,
                    seconds=result.seconds, workers=result.workers,
                    resumed_chunks=result.resumed_chunks, chunks=len(chunks),
                    compute_seconds=result.compute_seconds)


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
    if not compact and "sample_index" in partial and settings.samples_per_band > 0:
        edges, index, value, _ = band_samples(partial, settings.samples_per_band)
        arrays.update(band_edges=edges, sample_index=index, sample_value=value)
    return arrays


def _zarr_array(group: Any, name: str, data: np.ndarray, dims: tuple[str, ...],
                chunks: tuple[int, ...] | None = None) -> None:
    """One array in a format-2 group, with xarray's dimension names."""
    import numcodecs

    data = np.ascontiguousarray(data)
    if chunks is None:
        chunks = data.shape if data.ndim else ()
    chunks = tuple(max(1, min(c, s)) for c, s in zip(chunks, data.shape))
    compressor = numcodecs.Zstd(level=5)
    if hasattr(group, "create_array"):  # zarr-python 3
        array = group.create_array(name=name, shape=data.shape, dtype=data.dtype,
                                   chunks=chunks or None, compressors=[compressor],
                                   fill_value=None)
    else:  # pragma: no cover - zarr-python 2
        array = group.create_dataset(name, shape=data.shape, dtype=data.dtype, chunks=chunks,
                                     compressor=compressor)
    array[...] = data
    array.attrs["_ARRAY_DIMENSIONS"] = list(dims)


def write_atlas(out: Path, partial: cluster.Partial, ckpt: "Checkpoint", corpus: Corpus,
                settings: AtlasSettings, identity: dict[str, Any], *,
                compact: bool = False) -> None:
    """Write the finished atlas as a Zarr store at ``out`` (replacing an old atlas there)."""
    import shutil

    import zarr

    arrays = finish_statistics(partial, ckpt, settings, compact=compact)
    n = ckpt.config.neurons
    tmp = out.with_name(out.name + ".writing")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        # Zarr 3 writes its own format unless told; the atlas stays readable by Zarr 2.
        format_option: dict[str, Any] = {"zarr_format": 2} if _zarr_major() >= 3 else {}
        group = zarr.open_group(str(tmp), mode="w", **format_option)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    nc = NEURON_CHUNK
    k = arrays["top_index"].shape[1]
    window, position = corpus.locate(np.maximum(arrays.pop("top_index"), 0))
    valid = np.isfinite(arrays["top_value"])
    _zarr_array(group, "neuron", np.arange(n, dtype=np.int32), ("neuron",), (nc,))
    for name in ("mean", "std", "density", "max", "selectivity"):
        _zarr_array(group, name, arrays[name], ("neuron",), (nc,))
    _zarr_array(group, "histogram", arrays["histogram"], ("neuron", "bin"), (nc, HIST_BINS))
    _zarr_array(group, "histogram_edges", HIST_EDGES.astype(np.float32), ("edge",))
    _zarr_array(group, "top_window", np.where(valid, window, -1).astype(np.int32),
                ("neuron", "rank"), (nc, k))
    _zarr_array(group, "top_position", np.where(valid, position, -1).astype(np.int32),
                ("neuron", "rank"), (nc, k))
    _zarr_array(group, "top_value", arrays["top_value"], ("neuron", "rank"), (nc, k))
    for name, dim in (("driving_token", "driving"), ("driving_mean", "driving"),
                      ("promoted_token", "logit"), ("promoted_effect", "logit"),
                      ("suppressed_token", "logit"), ("suppressed_effect", "logit")):
        _zarr_array(group, name, arrays[name], ("neuron", dim), (nc, arrays[name].shape[1]))
    _zarr_array(group, "token_count", arrays["token_count"], ("token",))
    if "sample_index" in arrays:
        index = arrays["sample_index"]
        sw, sp = corpus.locate(np.maximum(index, 0))
        have = index >= 0
        shape = index.shape
        _zarr_array(group, "band_edges", arrays["band_edges"], ("neuron", "band_edge"),
                    (nc, shape[1] + 1))
        _zarr_array(group, "sample_window", np.where(have, sw, -1).astype(np.int32),
                    ("neuron", "band", "sample"), (nc,) + shape[1:])
        _zarr_array(group, "sample_position", np.where(have, sp, -1).astype(np.int32),
                    ("neuron", "band", "sample"), (nc,) + shape[1:])
        _zarr_array(group, "sample_value", arrays["sample_value"], ("neuron", "band", "sample"),
                    (nc,) + shape[1:])
        _zarr_array(group, "band_quantiles", np.array(BANDS, dtype=np.float32),
                    ("band", "bound"))
    token_dtype = np.uint16 if ckpt.config.vocabulary <= 1 << 16 else np.int32
    _zarr_array(group, "corpus_tokens", corpus.tokens.astype(token_dtype), ("corpus_token",),
                (TOKEN_CHUNK,))
    _zarr_array(group, "corpus_offsets", corpus.offsets, ("window_edge",), (TOKEN_CHUNK,))
    _zarr_array(group, "window_document", corpus.window_document, ("window",), (TOKEN_CHUNK,))
    tokenizer_text = b""
    if ckpt.tokenizer_path is not None and Path(ckpt.tokenizer_path).is_file():
        tokenizer_text = Path(ckpt.tokenizer_path).read_bytes()
    _zarr_array(group, "tokenizer_json", np.frombuffer(tokenizer_text, dtype=np.uint8),
                ("tokenizer_byte",), (1 << 20,))
    group.attrs["flyviz_atlas"] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        # The model's identity (flyviz.model.identity), less the machine's dataset folder.
        "model": {k: v for k, v in identity.items() if k != "dataset"},
        "settings": {**settings.run_key(), "compact": bool(compact)},
        "density_threshold": settings.density_threshold,
        "counted_tokens": int(arrays["count"]),
        "layer_norm_scale": float(arrays["layer_norm_scale"]),
        "corpus": {"tokens": corpus.n_tokens, "windows": corpus.n_windows,
                   "documents": corpus.n_documents, "context": corpus.context,
                   "sources": corpus.sources[:1000], "sha256": corpus.digest()},
        "bands": [list(b) for b in BANDS],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    zarr.consolidate_metadata(str(tmp))
    # Every chunk's size and CRC-32, so that a reader refuses a missing or damaged chunk
    # rather than reading it as zeros (flyviz.analysis.integrity).
    integrity.seal_store(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


@contextlib.contextmanager
def _quiet_zarr() -> Iterator[None]:
    """A context in which zarr's warnings (a folder with both format-2 and format-3
    metadata, ...) stay off stderr: a problem with an atlas is flyviz's one line."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(zarr|numcodecs)(\..*)?$")
        yield


def _zarr_major() -> int:
    import zarr

    return int(str(zarr.__version__).split(".")[0])


# -------------------------------------------------------------------- reading
@dataclass
class Context:
    """One example position, as text.

    ``text[span[0]:span[1]]`` is the token read at that position (the one
    whose activation is ``value``); the text around it is the window's tokens
    before and after (BOS left out).
    """

    window: int
    position: int
    value: float
    token_id: int
    text: str
    span: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {**asdict(self), "span": list(self.span)}


@dataclass
class TokenScore:
    """A token and a number about it (mean activation, logit effect), and its read count."""

    token_id: int
    text: str
    value: float
    count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


@dataclass
class NeuronCard:
    """Everything an atlas says about one neuron, as plain data."""

    neuron: int
    count: int
    mean: float
    std: float
    density: float
    density_threshold: float
    max: float
    selectivity: float
    histogram: np.ndarray
    histogram_edges: np.ndarray
    top_contexts: list[Context]
    quantile_samples: list[tuple[tuple[float, float], list[Context]]]
    driving_tokens: list[TokenScore]
    promoted_tokens: list[TokenScore]
    suppressed_tokens: list[TokenScore]
    model_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (``flyviz neuron --json``)."""
        return {
            "neuron": self.neuron, "model": self.model_name, "count": self.count,
            "mean": self.mean, "std": self.std, "density": self.density,
            "density_threshold": self.density_threshold, "max": self.max,
            "selectivity": self.selectivity,
            "histogram": {"counts": [int(c) for c in self.histogram],
                          "edges": [round(float(e), 4) for e in self.histogram_edges]},
            "top_contexts": [c.to_dict() for c in self.top_contexts],
            "quantile_samples": [{"band": list(band), "samples": [c.to_dict() for c in samples]}
                                 for band, samples in self.quantile_samples],
            "driving_tokens": [t.to_dict() for t in self.driving_tokens],
            "promoted_tokens": [t.to_dict() for t in self.promoted_tokens],
            "suppressed_tokens": [t.to_dict() for t in self.suppressed_tokens],
        }


#: Statistics :meth:`Atlas.statistic` serves, for colouring neurons.
STATISTICS = ("mean", "std", "density", "max", "selectivity")


class Atlas:
    """A neuron atlas on disk, opened lazily: cards, token search, statistics.

    Opening reads only the metadata; each card reads the chunk of neurons it
    falls in (kept in a small cache) and the corpus tokens around its
    contexts. Everything it returns is plain data (no arrays of the store).

    Every chunk read is first checked against the size and CRC-32 the atlas
    keeps for it (:mod:`flyviz.analysis.integrity`): a missing chunk or array
    folder, a flipped byte or a truncated chunk is an :class:`AtlasError`
    (one line), never zeros or a decoder traceback. An atlas written before
    flyviz kept digests opens with :attr:`integrity_note` set and is read
    unchecked (``flyviz.analysis.integrity.seal_store`` seals it in place).

    Parameters
    ----------
    path
        The atlas folder.
    context_before, context_after
        Tokens shown before and after an example's token.
    verify
        Check every chunk now (about 1 GB/s), so that a damaged atlas fails to
        open; ``False`` checks each chunk when it is first read instead.

    Raises
    ------
    AtlasError
        When the folder is missing, not a readable atlas, or damaged.
    """

    def __init__(self, path: str | Path, context_before: int = 16,
                 context_after: int = 4, *, verify: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.context_before = int(context_before)
        self.context_after = int(context_after)
        if not self.path.is_dir():
            raise AtlasError(f"no atlas at {self.path}: the folder does not exist")
        try:
            import zarr

            with _quiet_zarr():
                try:
                    self._group = zarr.open_consolidated(str(self.path), mode="r")
                except Exception:
                    self._group = zarr.open_group(str(self.path), mode="r")
            attrs = dict(self._group.attrs)
            info = attrs.get("flyviz_atlas")
        except Exception as exc:
            raise AtlasError(f"{self.path} is not a readable flyviz atlas "
                             f"({type(exc).__name__}: {str(exc)[:100]})") from None
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise AtlasError(f"{self.path} is not a flyviz atlas (no flyviz_atlas attributes)")
        if int(info.get("format_version", 0)) > FORMAT_VERSION:
            raise AtlasError(f"{self.path} was written by a newer flyviz (atlas format "
                             f"{info.get('format_version')}); update flyviz")
        self.info: dict[str, Any] = info
        model = info.get("model", {})
        self.neurons = int(model.get("neurons", 0))
        self.vocabulary = int(model.get("vocabulary", 0))
        self.model_name = str(model.get("name", ""))
        self._blocks: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._arrays: dict[str, Any] = {}
        self._tokenizer: Any = None
        self._corpus_tokens: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        self._token_count: np.ndarray | None = None
        self._driving_index: dict[int, np.ndarray] | None = None
        self._verifier = integrity.StoreVerifier(self.path, attrs.get(integrity.ATTRIBUTE),
                                                 self._damaged)
        #: One line for the user when the atlas cannot be checked (no digests), else None.
        self.integrity_note: str | None = None if self._verifier.sealed else (
            f"the atlas {self.path.name} carries no chunk digests (written before flyviz "
            "kept them), so damage to it cannot be detected; build it again with "
            "'flyviz atlas' to have them")
        if verify:
            self._verifier.check_all()

    def _damaged(self, why: str) -> AtlasError:
        return AtlasError(f"{self.path.name} is damaged ({why}); build it again with "
                          "'flyviz atlas'")

    # ------------------------------------------------------------- identity
    @property
    def weights_sha256(self) -> str:
        """Digest of the trained weights of the atlas's model (:mod:`flyviz.model.identity`)."""
        return str(self.info.get("model", {}).get("weights_sha256", ""))

    @property
    def graph_sha256(self) -> dict[str, str]:
        """The frozen-buffer digests of the graph of the atlas's model."""
        graph = self.info.get("model", {}).get("graph_sha256")
        return {str(k): str(v) for k, v in graph.items()} if isinstance(graph, dict) else {}

    @property
    def settings(self) -> dict[str, Any]:
        """The settings it was computed with."""
        return dict(self.info.get("settings", {}))

    @property
    def has_samples(self) -> bool:
        """True when it holds quantile samples (a full atlas, not a compact one)."""
        return "sample_window" in self._names()

    def mismatch(self, checkpoint: "Checkpoint") -> str | None:
        """``None`` when the atlas was made with ``checkpoint`` (same size, weight and graph
        digests), else one line saying what differs and what to do.

        The comparison is :func:`~flyviz.model.identity.identity_mismatch`'s, as
        for recordings and lesion maps; unlike a recording, an atlas that names
        no digests is refused (its statistics would be trusted blindly).
        """
        from flyviz.model.identity import identity_mismatch

        advice = "open it with that model, or build an atlas of this one with 'flyviz atlas'"
        if self.neurons == checkpoint.config.neurons and \
                (not self.graph_sha256 or not self.weights_sha256):
            return (f"the atlas {self.path.name} was made with a model it does not name (no "
                    f"digests) ({self.model_name or 'unnamed'}); {advice}")
        recorded = {"name": self.model_name or "an unnamed model", "neurons": self.neurons,
                    "graph_sha256": self.graph_sha256, "weights_sha256": self.weights_sha256}
        problem = identity_mismatch(recorded, checkpoint,
                                    what=f"the atlas {self.path.name}, another model's,")
        return None if problem is None else f"{problem}; {advice}"

    def matches(self, checkpoint: "Checkpoint") -> bool:
        """True when the atlas was made with ``checkpoint`` (same weight and graph digests)."""
        return self.mismatch(checkpoint) is None

    def check_model(self, checkpoint: "Checkpoint") -> None:
        """Raise :class:`AtlasError` (one line) unless the atlas was made with ``checkpoint``."""
        note = self.mismatch(checkpoint)
        if note is not None:
            raise AtlasError(note)

    # --------------------------------------------------------------- arrays
    def _names(self) -> set[str]:
        try:
            return set(self._group.array_keys())
        except AttributeError:  # pragma: no cover - zarr-python 2
            return set(self._group.keys())

    def _array(self, name: str) -> Any:
        if name not in self._arrays:
            try:
                self._arrays[name] = self._group[name]
            except KeyError:
                raise AtlasError(f"{self.path} is damaged: it has no '{name}' array") from None
        return self._arrays[name]

    def _read(self, name: str, start: int | None = None, stop: int | None = None
              ) -> np.ndarray:
        """Rows ``start:stop`` of array ``name`` (all of it by default), its chunks checked
        against their digests first; any failure to decode is one :class:`AtlasError`."""
        array = self._array(name)
        self._verifier.check(name, start, stop)
        try:
            with _quiet_zarr():
                if start is None and stop is None:
                    return np.asarray(array[...])
                return np.asarray(array[start:stop])
        except FlyvizError:
            raise
        except Exception as exc:  # a damaged chunk of an atlas without digests
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:100]
            raise self._damaged(f"its '{name}' array cannot be read: {type(exc).__name__}: "
                                f"{why}") from None

    def _block(self, neuron: int) -> dict[str, np.ndarray]:
        """The chunk-aligned block of per-neuron arrays that holds ``neuron``."""
        start = neuron // NEURON_CHUNK * NEURON_CHUNK
        block = self._blocks.get(start)
        if block is None:
            stop = min(self.neurons, start + NEURON_CHUNK)
            names = ["mean", "std", "density", "max", "selectivity", "histogram", "top_window",
                     "top_position", "top_value", "driving_token", "driving_mean",
                     "promoted_token", "promoted_effect", "suppressed_token",
                     "suppressed_effect"]
            if self.has_samples:
                names += ["band_edges", "sample_window", "sample_position", "sample_value"]
            block = {name: self._read(name, start, stop) for name in names}
            self._blocks[start] = block
            while len(self._blocks) > 8:
                self._blocks.popitem(last=False)
        self._blocks.move_to_end(start)
        return {name: values[neuron - start] for name, values in block.items()}

    def statistic(self, name: str) -> np.ndarray:
        """``(neurons,)`` float32 values of one statistic (:data:`STATISTICS`), for colouring."""
        if name not in STATISTICS:
            raise InputError(f"unknown atlas statistic {name!r}; choose one of "
                             f"{', '.join(STATISTICS)}")
        return np.asarray(self._read(name), dtype=np.float32)

    @property
    def tokenizer(self):
        """The model's tokenizer, as stored in the atlas."""
        if self._tokenizer is None:
            from flyviz.model.tokenizer import FlyTokenizer

            raw = np.asarray(self._read("tokenizer_json"), dtype=np.uint8).tobytes()
            if not raw:
                raise AtlasError(f"{self.path} holds no tokenizer")
            self._tokenizer = FlyTokenizer.from_json_text(raw.decode("utf-8"),
                                                          path=self.path / "tokenizer_json")
        return self._tokenizer

    def token_counts(self) -> np.ndarray:
        """How often each token was read in the corpus."""
        if self._token_count is None:
            self._token_count = self._read("token_count")
        return self._token_count

    def _window_tokens(self, window: int) -> np.ndarray:
        if self._offsets is None:
            self._offsets = self._read("corpus_offsets")
        lo, hi = int(self._offsets[window]), int(self._offsets[window + 1])
        if self._corpus_tokens is None and int(self._offsets[-1]) <= 1 << 24:
            # Small corpora (up to 16M tokens, 32 MB) are read once.
            self._corpus_tokens = self._read("corpus_tokens")
        if self._corpus_tokens is not None:
            return self._corpus_tokens[lo:hi]
        return self._read("corpus_tokens", lo, hi)

    def context(self, window: int, position: int, value: float) -> Context:
        """The text around ``position`` of ``window``, with the token's span."""
        tokens = self._window_tokens(int(window))
        position = int(position)
        lo = max(1, position - self.context_before)
        hi = min(tokens.size, position + 1 + self.context_after)
        tok = self.tokenizer
        before = tok.decode(tokens[lo:position].tolist())
        here = tok.decode([int(tokens[position])]) if position > 0 else ""
        after = tok.decode(tokens[position + 1:hi].tolist())
        return Context(window=int(window), position=position, value=float(value),
                       token_id=int(tokens[position]), text=before + here + after,
                       span=(len(before), len(before) + len(here)))

    def _scores(self, ids: np.ndarray, values: np.ndarray, counts: bool = False
                ) -> list[TokenScore]:
        tok = self.tokenizer
        table = self.token_counts() if counts else None
        return [TokenScore(token_id=int(i), text=tok.token_text(int(i)), value=float(v),
                           count=int(table[int(i)]) if table is not None else None)
                for i, v in zip(ids, values) if int(i) >= 0]

    def card(self, neuron: int) -> NeuronCard:
        """Everything about ``neuron`` (0-based index), as plain data."""
        neuron = int(neuron)
        if not 0 <= neuron < self.neurons:
            raise InputError(f"neuron {neuron} is outside 0..{self.neurons - 1}")
        row = self._block(neuron)
        tops = [self.context(w, p, v) for w, p, v in
                zip(row["top_window"], row["top_position"], row["top_value"]) if w >= 0]
        samples: list[tuple[tuple[float, float], list[Context]]] = []
        if "sample_window" in row:
            for band, (q_lo, q_hi) in enumerate(self.info.get("bands", BANDS)):
                found = [self.context(w, p, v) for w, p, v in
                         zip(row["sample_window"][band], row["sample_position"][band],
                             row["sample_value"][band]) if w >= 0]
                samples.append(((float(q_lo), float(q_hi)), found))
        return NeuronCard(
            neuron=neuron, count=int(self.info.get("counted_tokens", 0)),
            mean=float(row["mean"]), std=float(row["std"]), density=float(row["density"]),
            density_threshold=float(self.info.get("density_threshold", 0.0)),
            max=float(row["max"]), selectivity=float(row["selectivity"]),
            histogram=np.asarray(row["histogram"]), histogram_edges=HIST_EDGES.copy(),
            top_contexts=tops, quantile_samples=samples,
            driving_tokens=self._scores(row["driving_token"], row["driving_mean"], counts=True),
            promoted_tokens=self._scores(row["promoted_token"], row["promoted_effect"]),
            suppressed_tokens=self._scores(row["suppressed_token"], row["suppressed_effect"]),
            model_name=self.model_name)

    # -------------------------------------------------------------- search
    def token_ids_for(self, token_or_word: int | str) -> list[int]:
        """Token ids a search term stands for: an id, or a word's single tokens.

        A word matches the tokens that spell it alone, with and without a
        leading space (``"dog"`` and ``" dog"``); a word the tokenizer splits
        into several tokens matches each of them.
        """
        if isinstance(token_or_word, (int, np.integer)):
            token = int(token_or_word)
            if not 0 <= token < self.vocabulary:
                raise InputError(f"token id {token} is outside 0..{self.vocabulary - 1}")
            return [token]
        word = str(token_or_word)
        if not word.strip():
            raise InputError("give a token or word to search for")
        ids: list[int] = []
        for variant in (word, " " + word.strip(), word.strip()):
            for i in self.tokenizer.encode_batch([variant])[0]:
                if i not in ids:
                    ids.append(int(i))
        return ids

    def neurons_driven_by(self, token_or_word: int | str) -> np.ndarray:
        """Neurons (sorted ids) whose driving tokens include the token, or any token of the word."""
        if self._driving_index is None:
            table = self._read("driving_token")
            neuron_ids = np.repeat(np.arange(table.shape[0]), table.shape[1])
            flat = table.reshape(-1)
            keep = flat >= 0
            order = np.argsort(flat[keep], kind="stable")
            tokens = flat[keep][order]
            owners = neuron_ids[keep][order]
            cuts = np.flatnonzero(np.diff(tokens)) + 1
            self._driving_index = {int(group[0]): np.unique(who) for group, who in
                                   zip(np.split(tokens, cuts), np.split(owners, cuts))
                                   if group.size}
        found = [self._driving_index.get(t, np.zeros(0, dtype=np.int64))
                 for t in self.token_ids_for(token_or_word)]
        return np.unique(np.concatenate(found)).astype(np.int64) if found else \
            np.zeros(0, dtype=np.int64)

    def open_xarray(self):  # pragma: no cover - thin convenience
        """The store as a lazily-loaded :class:`xarray.Dataset` (needs xarray); every chunk
        is checked against its digest first (xarray reads the store itself)."""
        import xarray as xr

        self._verifier.check_all()

        return xr.open_zarr(str(self.path))


def open_atlas(path: str | Path) -> Atlas:
    """Open an atlas (see :class:`Atlas`)."""
    return Atlas(path)


__all__ = ["Atlas", "AtlasError", "AtlasSettings", "BANDS", "Context", "NeuronCard",
           "STATISTICS", "TokenScore", "build_atlas", "chunk_statistics", "merge_partials",
           "open_atlas", "write_atlas"]
