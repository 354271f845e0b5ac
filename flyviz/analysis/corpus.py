"""Corpora for whole-corpus analyses: reading, tokenizing, windows, chunks, stream schedules.

Input
-----
Any mix of files and folders (folders are searched recursively, files in
path order, hidden ones skipped):

* plain text (``.txt``, ``.text``, ``.md``, and any named file of another
  suffix): UTF-8, documents separated by blank lines;
* JSON Lines (``.jsonl``, ``.ndjson``): one object per line, the document in
  its ``text`` field;
* Parquet (``.parquet``, ``.pq``): the documents in a ``text`` column (needs
  ``pyarrow``, in the ``atlas`` extra).

Windows
-------
Each document is tokenized (no special tokens) and cut into *windows* of at
most ``context - 1`` tokens; each window is fed as ``BOS + tokens`` from the
zero state, as a prompt is. All windows are stored back to back in one int32
array with their offsets (:class:`Corpus`); a token is named by its *global
index* in that array, or by ``(window, position)`` with position 0 the BOS.
Position 0 is stepped but left out of every statistic.

Chunks and schedules
--------------------
:meth:`Corpus.chunks` cuts the windows into contiguous :class:`CorpusChunk`
s of about the same token count: small arrays that are cheap to send to a
worker. A :class:`StreamSchedule` lays one chunk's windows onto ``B``
streams of a :class:`~flyviz.model.batch.BatchEngine` (longest window first,
each to the stream that frees first, so that all streams finish nearly
together); each stream is reset when it starts a window.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flyviz.fileio import not_a_file, shipped_example_hint
from flyviz.model.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.tokenizer import FlyTokenizer

TEXT_SUFFIXES = (".txt", ".text", ".md")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
#: Default longest window, BOS included.
DEFAULT_CONTEXT = 512
_BLANK_LINES = re.compile(r"\n[ \t\r\f\v]*\n")
_ENCODE_BATCH = 512  # documents tokenized per call


def corpus_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files a list of corpus paths names, folders expanded.

    Raises
    ------
    InputError
        When a path does not exist, or a folder holds no corpus file.
    """
    files: list[Path] = []
    known = TEXT_SUFFIXES + JSONL_SUFFIXES + PARQUET_SUFFIXES
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file()
                           and p.suffix.lower() in known
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise InputError(f"corpus folder {path} holds no .txt, .md, .jsonl or .parquet "
                                 "files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            raise InputError(f"cannot read corpus {path}: {not_a_file(path)}")
        else:
            raise InputError(f"corpus file not found: {path}{shipped_example_hint(path)}")
    if not files:
        raise InputError("no corpus given: pass --corpus with text, JSON Lines or Parquet "
                         "files or folders")
    parquet = next((f for f in files if f.suffix.lower() in PARQUET_SUFFIXES), None)
    if parquet is not None:  # say so now, not after the text files before it are read
        from flyviz.extras import require

        require("parquet", f"reading Parquet ({parquet.name})")
    return files


def _text_documents(path: Path) -> Iterator[str]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read corpus file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"corpus file {path} is not UTF-8 text (undecodable byte at offset "
                         f"{exc.start}); convert it to UTF-8") from None
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    for part in _BLANK_LINES.split(text):
        if part.strip():
            yield part.strip()


def _jsonl_documents(path: Path) -> Iterator[str]:
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read corpus file {path}: {exc.strerror or exc}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError:
                raise InputError(f"corpus file {path}, line {number}: not UTF-8 text") from None
            except ValueError:
                raise InputError(f"corpus file {path}, line {number}: not valid JSON") from None
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise InputError(f"corpus file {path}, line {number}: expected a JSON object "
                                 "with a 'text' string")
            if text.strip():
                yield text


def _parquet_documents(path: Path) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"reading Parquet ({path}) needs pyarrow: pip install "
                         "'flyviz[atlas]'") from None
    try:
        handle = pq.ParquetFile(path)
        columns = handle.schema_arrow.names
    except Exception as exc:  # pyarrow raises its own error types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"corpus file {path} is not a readable Parquet file ({first})") from None
    if "text" not in columns:
        raise InputError(f"corpus file {path} has no 'text' column (its columns: "
                         f"{', '.join(columns) or 'none'}); put the documents in a 'text' column")
    try:
        for batch in handle.iter_batches(columns=["text"], batch_size=4096):
            for text in batch.column(0).to_pylist():
                if isinstance(text, str) and text.strip():
                    yield text
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"corpus file {path} cannot be read ({first})") from None


def iter_documents(files: Sequence[Path]) -> Iterator[tuple[int, str]]:
    """``(file index, document text)`` for every non-empty document, in order."""
    for index, path in enumerate(files):
        suffix = path.suffix.lower()
        if suffix in JSONL_SUFFIXES:
            reader = _jsonl_documents(path)
        elif suffix in PARQUET_SUFFIXES:
            reader = _parquet_documents(path)
        else:
            reader = _text_documents(path)
        for text in reader:
            yield index, text


class _Windows:
    """Sizes of windows stored back to back in ``tokens`` with boundaries ``offsets``."""

    tokens: np.ndarray
    offsets: np.ndarray

    @property
    def n_tokens(self) -> int:
        """Tokens fed, BOS included."""
        return int(self.tokens.shape[0])

    @property
    def n_windows(self) -> int:
        """Number of windows."""
        return int(self.offsets.shape[0] - 1)


@dataclass
class CorpusChunk(_Windows):
    """A contiguous run of windows, as sent to a worker.

    Attributes
    ----------
    index
        The chunk's number in its corpus.
    first_window
        Global number of its first window.
    base
        Global index of its first token.
    tokens
        Its windows' tokens, back to back (int32).
    offsets
        Window boundaries within ``tokens`` (int64, from 0).
    """

    index: int
    first_window: int
    base: int
    tokens: np.ndarray
    offsets: np.ndarray


@dataclass
class Corpus(_Windows):
    """A tokenized corpus as windows (see the module documentation).

    Attributes
    ----------
    tokens
        All windows back to back, each starting with BOS (int32).
    offsets
        ``(windows + 1,)`` int64 window boundaries.
    window_document
        ``(windows,)`` int64: the document each window was cut from.
    document_source
        ``(documents,)`` int32: the file each document came from.
    sources
        File names, as given.
    context
        Longest window, BOS included.
    bos_token_id
        The BOS id at every window start, ``None`` where the windows start with the text
        (a model that reads no BOS).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    window_document: np.ndarray
    document_source: np.ndarray
    sources: list[str] = field(default_factory=list)
    context: int = DEFAULT_CONTEXT
    bos_token_id: int | None = 1

    @property
    def n_documents(self) -> int:
        """Number of documents."""
        return int(self.document_source.shape[0])

    @property
    def counted_tokens(self) -> int:
        """Tokens that statistics count: every position but each window's BOS."""
        return self.n_tokens - self.n_windows

    def digest(self) -> str:
        """SHA-256 of the tokens and window offsets (what the statistics depend on)."""
        h = hashlib.sha256()
        h.update(f"tokens:{self.n_tokens}:offsets:{self.n_windows}\0".encode())
        h.update(np.ascontiguousarray(self.tokens, dtype=np.int32).tobytes())
        h.update(np.ascontiguousarray(self.offsets, dtype=np.int64).tobytes())
        return h.hexdigest()

    def locate(self, index: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """``(window, position)`` of global token indices."""
        index = np.asarray(index, dtype=np.int64)
        window = np.searchsorted(self.offsets, index, side="right") - 1
        return window, index - self.offsets[window]

    def chunks(self, chunk_tokens: int) -> list[CorpusChunk]:
        """Cut the windows into contiguous chunks of about ``chunk_tokens`` tokens each.

        The cut depends only on the corpus and ``chunk_tokens``, never on the
        number of workers, so every run with the same settings computes the
        same chunks.
        """
        chunk_tokens = max(1, int(chunk_tokens))
        count = max(1, round(self.n_tokens / chunk_tokens))
        targets = np.arange(1, count) * (self.n_tokens / count)
        cuts = np.unique(np.concatenate([[0], np.searchsorted(self.offsets, targets),
                                         [self.n_windows]]))
        chunks = []
        for number, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
            lo, hi = int(self.offsets[a]), int(self.offsets[b])
            chunks.append(CorpusChunk(index=number, first_window=int(a), base=lo,
                                      tokens=np.ascontiguousarray(self.tokens[lo:hi]),
                                      offsets=self.offsets[a:b + 1] - lo))
        return chunks


def build_corpus(paths: Iterable[str | Path], tokenizer: "FlyTokenizer", *,
                 context: int = DEFAULT_CONTEXT, max_tokens: int | None = None,
                 bos_token_id: int | None = 1) -> Corpus:
    """Read, tokenize and window a corpus.

    Parameters
    ----------
    paths
        Files and folders (see the module documentation).
    tokenizer
        The model's tokenizer.
    context
        Longest window, BOS included (at least 2).
    max_tokens
        Stop once the windows hold this many tokens (BOS included); the last
        window is shortened. ``None``: the whole corpus.
    bos_token_id
        The BOS id each window starts with; ``None`` for a model that reads none
        (FlyGPT): the windows are the text's tokens alone, up to ``context`` of them.

    Raises
    ------
    InputError
        A missing or unreadable file, undecodable bytes, a JSON line or a
        Parquet file without text, or a corpus without a single token.
    """
    if context < 2:
        raise InputError(f"the context length must be at least 2 tokens, not {context}")
    if max_tokens is not None and max_tokens < 2:
        raise InputError(f"--max-tokens {max_tokens} must be at least 2")
    files = corpus_files(paths)
    prefix = [] if bos_token_id is None else [bos_token_id]
    piece = context - len(prefix)
    tokens: list[np.ndarray] = []
    lengths: list[int] = []
    window_document: list[int] = []
    document_source: list[int] = []
    total = 0
    full = False
    batch: list[tuple[int, str]] = []

    def flush() -> None:
        nonlocal total, full
        for (source, _), ids in zip(batch, tokenizer.encode_batch([t for _, t in batch])):
            if full:
                break
            if not ids:
                continue
            document = len(document_source)
            document_source.append(source)
            ids_array = np.asarray(ids, dtype=np.int32)
            for start in range(0, ids_array.size, piece):
                window = ids_array[start:start + piece]
                if max_tokens is not None and total + len(prefix) + window.size > max_tokens:
                    window = window[:max_tokens - total - len(prefix)]
                    full = True
                    if window.size == 0:
                        break
                tokens.append(np.concatenate([prefix, window]).astype(np.int32))
                lengths.append(window.size + len(prefix))
                window_document.append(document)
                total += window.size + len(prefix)
                if full:
                    break
        batch.clear()

    for source, text in iter_documents(files):
        batch.append((source, text))
        if len(batch) >= _ENCODE_BATCH:
            flush()
        if full:
            break
    if not full:
        flush()
    if not tokens or total - len(tokens) <= 0:
        raise InputError(f"the corpus holds no text ({len(files)} file(s): "
                         f"{', '.join(str(f) for f in files[:3])}{'…' if len(files) > 3 else ''})")
    if total >= 2**31:
        raise InputError(f"the corpus has {total:,} tokens; flyviz takes at most 2^31 per atlas "
                         "(use --max-tokens)")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Corpus(tokens=np.concatenate(tokens), offsets=offsets,
                  window_document=np.asarray(window_document, dtype=np.int64),
                  document_source=np.asarray(document_source, dtype=np.int32),
                  sources=[str(f) for f in files], context=int(context),
                  bos_token_id=None if bos_token_id is None else int(bos_token_id))


class StreamSchedule:
    """One chunk's windows laid onto ``streams`` columns of a batched engine.

    Longest window first, each to the stream that frees first (lowest
    stream on ties), so every stream finishes at nearly the same step. The
    layout depends only on the chunk and ``streams``.

    Attributes
    ----------
    tokens
        ``(steps, streams)`` int64: the token each stream reads at each step
        (PAD where a stream is idle).
    index
        ``(steps, streams)`` int64: that token's global index, -1 where idle.
    position
        ``(steps, streams)`` int64: its position in its window (0 = BOS),
        -1 where idle.
    """

    def __init__(self, chunk: CorpusChunk, streams: int, pad_token_id: int = 0) -> None:
        lengths = np.diff(chunk.offsets)
        order = np.argsort(-lengths, kind="stable")
        free = [(0, column) for column in range(streams)]
        placed = []
        for window in order:
            start, column = heapq.heappop(free)
            placed.append((int(window), column, start))
            heapq.heappush(free, (start + int(lengths[window]), column))
        steps = max((s + int(lengths[w]) for w, _, s in placed), default=0)
        self.streams = streams
        self.tokens = np.full((steps, streams), pad_token_id, dtype=np.int64)
        self.index = np.full((steps, streams), -1, dtype=np.int64)
        self.position = np.full((steps, streams), -1, dtype=np.int64)
        for window, column, start in placed:
            lo, hi = int(chunk.offsets[window]), int(chunk.offsets[window + 1])
            n = hi - lo
            self.tokens[start:start + n, column] = chunk.tokens[lo:hi]
            self.index[start:start + n, column] = chunk.base + np.arange(lo, hi)
            self.position[start:start + n, column] = np.arange(n)

    @property
    def steps(self) -> int:
        """Steps the engine takes for the whole chunk."""
        return int(self.tokens.shape[0])

    def starts(self, step: int) -> np.ndarray:
        """Streams that begin a window at ``step`` (reset them before stepping)."""
        return np.flatnonzero(self.position[step] == 0)

    def ends(self, step: int) -> np.ndarray:
        """Streams whose window ends with ``step``."""
        here = self.position[step] >= 0
        if step + 1 < self.steps:
            here &= self.position[step + 1] <= 0
        return np.flatnonzero(here)
