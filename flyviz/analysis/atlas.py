"""The neuron atlas: what every neuron responds to across a whole corpus, read back.

An atlas runs a model over a corpus (:mod:`flyviz.analysis.corpus`) with the
batched engine and keeps, per neuron, statistics that merge exactly across
chunks of the corpus. This module has one job: :class:`Atlas` opens an atlas
store, validates it (format, version, chunk digests, the model's identity)
and serves neuron cards, token search and statistics as plain data. The
statistics and their merge are :mod:`flyviz.analysis.atlas_stats` (which
documents every statistic); the Dask build and the writing of the store are
:mod:`flyviz.analysis.atlas_build`. Their public names are imported here too,
so ``from flyviz.analysis.atlas import build_atlas`` keeps working.

Storage
-------
A Zarr store (format 2, consolidated metadata; readable lazily with
``xarray.open_zarr``), chunked by neuron, holding the statistics, the
corpus's principal axes (``pca_*``, :mod:`flyviz.analysis.atlas_basis`; an atlas
written before flyviz kept them has none), the tokenized corpus (``corpus_tokens``, ``corpus_offsets``), the tokenizer, the
model's identity (weight and graph digests, :mod:`flyviz.model.identity`) and
the settings (attribute ``flyviz_atlas``). :class:`Atlas` reads it.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import integrity
from flyviz.analysis.atlas_basis import AXES_ARRAYS
from flyviz.analysis.atlas_build import (FORMAT, FORMAT_VERSION, NEURON_CHUNK, AtlasRun,
                                         atlas_chunk, build_atlas, check_output, write_atlas)
from flyviz.analysis.atlas_stats import (BANDS, HIST_BINS, HIST_EDGES, AtlasSettings,
                                         ChunkStatistics, chunk_statistics, histogram_bins,
                                         merge_partials)
from flyviz.fileio import missing_folder, not_a_file, short_path
from flyviz.model.errors import FlyvizError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.population import Trajectory
    from flyviz.model.checkpoint import Checkpoint


#: The files at the top of a Zarr store that its reader opens first (version 2's
#: consolidated metadata, group and attributes; version 3's one file).
ROOT_METADATA = (".zmetadata", ".zgroup", ".zattrs", "zarr.json")


class AtlasError(FlyvizError):
    """An atlas is missing, damaged, or belongs to another model."""


@contextlib.contextmanager
def _quiet_zarr() -> Iterator[None]:
    """A context in which zarr's warnings (a folder with both format-2 and format-3
    metadata, ...) stay off stderr: a problem with an atlas is flyviz's one line."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(zarr|numcodecs)(\..*)?$")
        yield


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
    #: A quantile sample from outside its band's value range: a band the corpus kept too
    #: few samples inside is filled from the histogram bins it touches.
    outside: bool = False

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
            # A file (a recording given for an atlas) is said to be one, not "missing".
            raise AtlasError(f"no atlas at {short_path(self.path)}: {missing_folder(self.path)}; "
                             "an atlas is a folder made by 'flyviz atlas'")
        # Whether it is an atlas at all is asked first, of its top metadata only: walking
        # the whole tree of any folder given (/, /usr) took long and then called /proc's
        # pipes damage. A FIFO in place of a metadata file would block Zarr's read forever.
        present = [name for name in ROOT_METADATA if os.path.lexists(self.path / name)]
        if not present:
            raise AtlasError(f"{short_path(self.path)} is not a flyviz atlas (no Zarr metadata "
                             "in the folder); make one with 'flyviz atlas'")
        for name in present:
            why = not_a_file(self.path / name)
            if why and why != "no such file":     # a dangling link: Zarr reads it as missing
                raise self._damaged(f"{name}: {why}")
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
        # A FIFO in place of a chunk would block Zarr's read forever.
        integrity.check_regular_tree(self.path, self._damaged)
        self._verifier = integrity.StoreVerifier(self.path, attrs.get(integrity.ATTRIBUTE),
                                                 self._damaged)
        # Before any attribute is trusted: the metadata as sealed (dtypes, shapes,
        # separators, attributes) and every chunk the shapes imply listed.
        self._verifier.check_metadata()
        try:
            version = int(info.get("format_version", 0))
            model = info.get("model", {})
            self.neurons = int(model.get("neurons", 0))
            self.vocabulary = int(model.get("vocabulary", 0))
        except (TypeError, ValueError, AttributeError):
            raise self._damaged("its flyviz_atlas attributes are malformed") from None
        if version > FORMAT_VERSION:
            raise AtlasError(f"{self.path} was written by a newer flyviz (atlas format "
                             f"{info.get('format_version')}); update flyviz")
        self.info: dict[str, Any] = info
        self.model_name = str(model.get("name", ""))
        self._blocks: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._arrays: dict[str, Any] = {}
        self._tokenizer: Any = None
        self._corpus_tokens: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        self._token_count: np.ndarray | None = None
        self._driving_index: dict[int, np.ndarray] | None = None
        #: One line for the user when the atlas cannot be checked (no digests), else None.
        self.integrity_note: str | None = None if self._verifier.sealed else (
            f"the atlas {self.path.name} carries no chunk digests (written before flyviz "
            "kept them), so damage to it cannot be detected; build it again with "
            "'flyviz atlas' to have them")
        if verify:
            self._verifier.check_all()

    def _damaged(self, why: str) -> AtlasError:
        return AtlasError(f"{short_path(self.path)} is damaged ({why}); build it again with "
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

    @property
    def has_principal_axes(self) -> bool:
        """True when the atlas keeps its corpus's principal axes (an atlas written before
        flyviz kept them has none)."""
        return set(AXES_ARRAYS) <= self._names()

    def principal_axes(self) -> "Trajectory | None":
        """The first three principal axes of all the states of the atlas's corpus.

        Every run of the model can be drawn on them (the Trajectory dock's
        *The atlas's axes*), so that runs are comparable: the same directions,
        centred on the corpus's mean state. They come from a one-pass
        randomized sketch of the covariance (:mod:`flyviz.analysis.atlas_basis`):
        exact when the corpus's states span at most 24 directions, an
        approximation otherwise (on the demo brain's flat spectrum they hold
        about three quarters of the variance the exact three axes hold, and
        ``explained`` is an underestimate); ``captured`` on a run's states is
        exact.

        Returns
        -------
        Trajectory or None
            A :class:`~flyviz.analysis.population.Trajectory` with no
            coordinates of its own (``(0, c)``), ``explained`` the share of
            the corpus's variance each axis holds; ``project`` puts a run's
            states on the axes and ``captured`` says how much of that run's
            variance they hold. ``c`` is 3, or fewer when the corpus's states
            vary in fewer directions. ``None`` when the atlas keeps no axes
            (:meth:`principal_axes_note` says why).

        Raises
        ------
        AtlasError
            When the arrays are damaged (their chunk digests do not match).
        """
        if not self.has_principal_axes:
            return None
        from flyviz.analysis.population import Trajectory

        axes = np.asarray(self._read("pca_axes"), dtype=np.float64)
        if axes.ndim != 2 or axes.shape[0] == 0 or axes.shape[1] != self.neurons:
            return None
        variance = np.asarray(self._read("pca_variance"), dtype=np.float64)
        total = float(np.asarray(self._read("pca_total_variance")).reshape(-1)[0])
        explained = variance / total if total > 0 else np.zeros_like(variance)
        return Trajectory(np.zeros((0, axes.shape[0])), explained,
                          np.asarray(self._read("pca_mean"), dtype=np.float64), axes)

    def principal_axes_note(self) -> str | None:
        """``None`` when :meth:`principal_axes` has axes to give, else one line saying why not
        and what to do."""
        if not self.has_principal_axes:
            return (f"the atlas {self.path.name} keeps no principal axes (it was built before "
                    "flyviz kept them); build it again with 'flyviz atlas' to have them")
        shape = tuple(self._array("pca_axes").shape)
        if len(shape) != 2 or shape[1] != self.neurons:
            return f"the atlas {self.path.name}'s principal axes do not fit its {self.neurons} neurons"
        if shape[0] == 0:
            return (f"the states of the atlas {self.path.name}'s corpus do not vary, so it "
                    "has no principal axes; build it over a longer corpus")
        return None

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
        from flyviz.arguments import whole_number

        neuron = whole_number("neuron", neuron)
        if not 0 <= neuron < self.neurons:
            raise InputError(f"neuron {neuron} is outside 0..{self.neurons - 1}")
        row = self._block(neuron)
        tops = [self.context(w, p, v) for w, p, v in
                zip(row["top_window"], row["top_position"], row["top_value"]) if w >= 0]
        samples: list[tuple[tuple[float, float], list[Context]]] = []
        if "sample_window" in row:
            edges = np.asarray(row["band_edges"], dtype=np.float64)
            for band, (q_lo, q_hi) in enumerate(self.info.get("bands", BANDS)):
                found = [self.context(w, p, v) for w, p, v in
                         zip(row["sample_window"][band], row["sample_position"][band],
                             row["sample_value"][band]) if w >= 0]
                lo, hi = edges[band], edges[band + 1]
                for c in found:
                    c.outside = not lo <= c.value <= hi
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

__all__ = ["Atlas", "AtlasError", "AtlasRun", "AtlasSettings", "BANDS", "ChunkStatistics",
           "Context", "HIST_BINS", "NeuronCard", "STATISTICS", "TokenScore", "atlas_chunk",
           "build_atlas", "check_output", "chunk_statistics", "histogram_bins", "merge_partials",
           "open_atlas", "write_atlas"]
