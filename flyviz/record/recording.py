"""A run as a sequence of frames, stored compactly, saved to and loaded from one file.

States are kept as float16 by default (half the bytes of float32, about 1e-3
relative precision: plenty for display and inspection) or float32 on
request (for analysis), in fixed-size chunks, so a long run grows memory by
what its frames need and nothing is ever re-copied when it grows.
Everything else per frame is a few numbers and short strings.

File format (``.flyrec``, specified in ``docs/recording-format.md``): a
safetensors file with the per-frame arrays as tensors and the strings and run
metadata as JSON in the safetensors metadata, sealed by a CRC-32 per state
row and a SHA-256 over everything else. Opening one is lazy: the states stay
in the file, memory-mapped, and are checked by streaming them once (or, with
``verify=False``, each frame when first read). Loading never unpickles
anything, and any damage is one :class:`RecordingError` line.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz._version import __version__
from flyviz.model.errors import FlyvizError, RecordingError
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, STORED_FIELDS, Frame

FORMAT_NAME = "flyviz-recording"
#: ``MAJOR.MINOR``. A reader opens any minor version of its major (newer minors
#: only add what it may ignore) and refuses a newer major.
FORMAT_VERSION = "1.3"
FORMAT_MAJOR = 1
FILE_SUFFIX = ".flyrec"
#: Name prefix of a comparison's untouched run: its tensors and header keys (format 1.3).
BASELINE_PREFIX = "baseline."
#: How a comparison was run (``metadata["comparison"]["mode"]``; see flyviz.record.compare).
COMPARISON_MODES = ("forced", "free")
#: State dtypes a recording may store.
STATE_DTYPES = ("float16", "float32")
_CHUNK_FRAMES = 64
#: Bytes read at a time when a file's states are checked.
_CHECK_BLOCK_BYTES = 4 << 20
#: Largest state a recording may claim (a guard against absurd headers).
_MAX_NEURONS = 50_000_000
_PHASES = (PHASE_PROMPT, PHASE_GENERATION)
_REMEDY = "record the run again or use an intact copy"
#: Per-frame number tensors: name -> (dtype, rank). top-k tensors are (frames, k).
_FRAME_TENSORS = {
    "position": ("int64", 1),
    "input_token_id": ("int64", 1),
    "predicted_token_id": ("int64", 1),
    "probability": ("float64", 1),
    "mean_abs_state": ("float64", 1),
    "top_k_ids": ("int32", 2),
    "top_k_probabilities": ("float32", 2),
}
_VERSION_RE = re.compile(r"^(\d{1,6})(?:\.(\d{1,6}))?$")


@dataclass
class _FrameInfo:
    """Everything in a frame but its state (the fields :data:`STORED_FIELDS` names), and its
    text as what changed since the previous frame."""

    position: int
    phase: str
    input_token_id: int
    input_text: str
    predicted_token_id: int
    predicted_text: str
    probability: float
    top_k_ids: np.ndarray
    top_k_probabilities: np.ndarray
    top_k_text: tuple[str, ...]
    mean_abs_state: float
    text_keep: int          # characters kept from the previous frame's text_so_far
    text_tail: str          # what follows them
    generation_index: int | None

    @classmethod
    def of(cls, values: Any, keep: int, tail: str) -> "_FrameInfo":
        """The record of a frame's :data:`STORED_FIELDS` values (a mapping), normalised."""
        generation = values["generation_index"]
        return cls(
            position=int(values["position"]), phase=str(values["phase"]),
            input_token_id=int(values["input_token_id"]), input_text=str(values["input_text"]),
            predicted_token_id=int(values["predicted_token_id"]),
            predicted_text=str(values["predicted_text"]),
            probability=float(values["probability"]),
            top_k_ids=np.asarray(values["top_k_ids"], dtype=np.int32).copy(),
            top_k_probabilities=np.asarray(values["top_k_probabilities"], dtype=np.float32).copy(),
            top_k_text=tuple(values["top_k_text"]), mean_abs_state=float(values["mean_abs_state"]),
            text_keep=int(keep), text_tail=str(tail),
            generation_index=None if generation is None else int(generation))


def _non_finite_rows(block: np.ndarray) -> np.ndarray:
    """Rows of a float16/float32 block holding NaN or inf, by their exponent bits.

    Testing the bits is several times faster than ``np.isfinite`` on float16.
    """
    if block.dtype == np.float16:
        bits, mask = block.view(np.uint16), 0x7C00
    else:
        bits, mask = block.view(np.uint32), 0x7F800000
    return np.flatnonzero(((bits & mask) == mask).any(axis=1))


def _crc_rows(block: np.ndarray) -> np.ndarray:
    """CRC-32 of each row's bytes."""
    raw = np.ascontiguousarray(block).view(np.uint8).reshape(block.shape[0], -1)
    return np.fromiter((zlib.crc32(row) for row in raw), dtype=np.uint32, count=block.shape[0])


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def content_digest(metadata: dict[str, str], tensors: dict[str, tuple[str, list[int], bytes]]) -> str:
    """SHA-256 sealing a recording: every metadata string but the digest, every
    tensor's name, dtype and shape, and the bytes of every tensor but ``states``
    (whose rows ``state_crc32`` covers).

    Each item is length-prefixed (8 bytes, little-endian), keys and tensor
    names in sorted order; see ``docs/recording-format.md``.
    """
    digest = hashlib.sha256()
    for key in sorted(metadata):
        if key != "content_sha256":
            digest.update(_field(key.encode("utf-8")) + _field(metadata[key].encode("utf-8")))
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        digest.update(_field(name.encode("utf-8")) + _field(dtype.encode("utf-8"))
                      + _field(json.dumps(shape).encode("utf-8")))
        if name != "states":
            digest.update(_field(data))
    return digest.hexdigest()


class Recording:
    """An append-only list of frames for one model.

    Parameters
    ----------
    neurons
        State length every frame must have.
    metadata
        Run description (model, prompt, settings, ...; the documented keys
        are listed in ``docs/recording-format.md``); saved with the recording.
        Any JSON object: new keys may be added freely.
    states_dtype
        ``"float16"`` (default) or ``"float32"``: how states are stored in
        memory and in the file.
    """

    def __init__(self, neurons: int, metadata: dict[str, Any] | None = None, *,
                 states_dtype: str = "float16") -> None:
        if neurons <= 0:
            raise ValueError("neurons must be positive")
        if str(states_dtype) not in STATE_DTYPES:
            raise ValueError(f"states_dtype must be one of {', '.join(STATE_DTYPES)}, "
                             f"not {states_dtype!r}")
        self.neurons = int(neurons)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.states_dtype = np.dtype(str(states_dtype))
        self._infos: list[_FrameInfo] = []
        # States of a loaded file (memory-mapped, frames 0..len-1 of it), then
        # appended frames in chunks.
        self._stored: np.ndarray | None = None
        self._stored_crc: np.ndarray | None = None
        self._unchecked: np.ndarray | None = None   # stored rows not checked yet (lazy open)
        self._source: Path | None = None
        self._chunks: list[np.ndarray] = []
        # text_so_far grows with the run; storing it whole per frame would make a long
        # run's memory quadratic. Frames store what changed, plus the whole text every
        # _CHUNK_FRAMES frames to rebuild any frame's text quickly.
        self._text_anchors: list[str] = []
        self._last_text = ""
        #: A comparison's untouched run, stored beside this (intervened) one, or ``None``;
        #: ``metadata["comparison"]`` then holds the per-frame KL and mean |dx|
        #: (:mod:`flyviz.record.compare`, ``docs/recording-format.md``).
        self.baseline: Recording | None = None

    # ------------------------------------------------------------ container
    def __len__(self) -> int:
        return len(self._infos)

    def __iter__(self) -> Iterator[Frame]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: int) -> Frame:
        info = self._infos[index]  # IndexError for out-of-range, negatives allowed
        index = index % len(self._infos)
        return Frame(**{name: getattr(info, name) for name in STORED_FIELDS},
                     state=self.state(index), text_so_far=self.text_so_far(index))

    @property
    def _stored_len(self) -> int:
        return 0 if self._stored is None else int(self._stored.shape[0])

    def append(self, frame: Frame) -> int:
        """Store ``frame`` (its state in :attr:`states_dtype`); return its index."""
        if self.__dict__.get("_frozen"):
            raise RecordingError("this recording is a frozen snapshot; append to the original")
        state = np.asarray(frame.state)
        if state.shape != (self.neurons,):
            raise ValueError(f"frame state has shape {state.shape}, expected ({self.neurons},)")
        i = len(self._infos)
        row = (i - self._stored_len) % _CHUNK_FRAMES
        if row == 0:
            self._chunks.append(np.empty((_CHUNK_FRAMES, self.neurons), dtype=self.states_dtype))
        self._chunks[-1][row] = state
        text = str(frame.text_so_far)
        previous = self._last_text
        keep = len(previous) if text.startswith(previous) else \
            len(os.path.commonprefix([previous, text]))
        if i % _CHUNK_FRAMES == 0:
            self._text_anchors.append(text)
        self._last_text = text
        self._infos.append(_FrameInfo.of({name: getattr(frame, name) for name in STORED_FIELDS},
                                         keep, text[keep:]))
        return i

    def clear(self) -> None:
        """Drop every frame (metadata is kept)."""
        self._infos.clear()
        self._chunks.clear()
        self._stored = self._stored_crc = self._unchecked = None
        self._text_anchors.clear()
        self._last_text = ""

    def snapshot(self) -> "Recording":
        """A frozen copy of the frames recorded so far, cheap to take, safe to read off-thread.

        The frames are shared, not copied: a recording is append-only (a frame's
        row is written once, when it is appended), so the snapshot's frames never
        change while this recording goes on growing on another thread. Appending
        to the snapshot is refused. Export jobs read a snapshot (see the threading
        rules in :mod:`flyviz.viewer`), never the recording a run still appends to.
        """
        frozen = Recording.__new__(Recording)
        frozen.__dict__.update(self.__dict__)
        frozen.metadata = copy.deepcopy(self.metadata)
        frozen._infos = list(self._infos)
        frozen._chunks = list(self._chunks)
        frozen._text_anchors = list(self._text_anchors)
        frozen.baseline = None if self.baseline is None else self.baseline.snapshot()
        frozen.__dict__["_frozen"] = True
        return frozen

    # --------------------------------------------------------------- access
    def _index(self, index: int) -> int:
        n = len(self._infos)
        if not -n <= index < n:
            raise IndexError(f"frame {index} out of range 0..{n - 1}")
        return index % n

    def text_so_far(self, index: int) -> str:
        """Decoded continuation up to frame ``index``."""
        index = self._index(index)
        anchor = index - index % _CHUNK_FRAMES
        text = self._text_anchors[anchor // _CHUNK_FRAMES]
        for info in self._infos[anchor + 1:index + 1]:
            text = text[:info.text_keep] + info.text_tail
        return text

    def _row(self, index: int) -> np.ndarray:
        """The stored row of frame ``index`` (a view; checked first if opened lazily)."""
        if index < self._stored_len:
            assert self._stored is not None
            self._check_stored(index, index + 1)
            return self._stored[index]
        j = index - self._stored_len
        return self._chunks[j // _CHUNK_FRAMES][j % _CHUNK_FRAMES]

    def state(self, index: int) -> np.ndarray:
        """The float32 state of frame ``index`` (a new array)."""
        return self._row(self._index(index)).astype(np.float32)

    def neuron_trace(self, neuron: int) -> np.ndarray:
        """Activation of one neuron over every frame, float32 ``(len(self),)``."""
        if not 0 <= neuron < self.neurons:
            raise IndexError(f"neuron {neuron} out of range 0..{self.neurons - 1}")
        return self.states(np.array([neuron]))[:, 0]

    def states(self, neurons: np.ndarray | None = None, start: int = 0,
               stop: int | None = None) -> np.ndarray:
        """States of frames ``start:stop`` (optionally a subset of neurons), float32."""
        stop = len(self) if stop is None else min(stop, len(self))
        start = max(0, start)
        cols: slice | np.ndarray = slice(None) if neurons is None else np.asarray(neurons)
        width = self.neurons if neurons is None else len(np.asarray(neurons))
        out = np.empty((max(0, stop - start), width), dtype=np.float32)
        split = min(max(start, self._stored_len), stop)
        if split > start:
            assert self._stored is not None
            self._check_stored(start, split)
            out[:split - start] = self._stored[start:split][:, cols]
        for i in range(split, stop):
            out[i - start] = self._row(i)[cols]
        return out

    def state_blocks(self) -> list[np.ndarray]:
        """The stored states as they are held, (frames, neurons) blocks in
        :attr:`states_dtype`, in order, without copying: a loaded file's
        memory map (read-only; checked first when it was opened with
        ``verify=False``, block by block, memory staying flat), then the
        blocks of frames appended since."""
        blocks: list[np.ndarray] = []
        if self._stored_len:
            assert self._stored is not None
            if self._unchecked is not None:
                rows = max(1, _CHECK_BLOCK_BYTES // (self.neurons * self.states_dtype.itemsize))
                for first in range(0, self._stored_len, rows):
                    self._check_stored(first, min(first + rows, self._stored_len))
            blocks.append(self._stored)
        appended = len(self) - self._stored_len
        for i, chunk in enumerate(self._chunks):
            rows = min(_CHUNK_FRAMES, appended - i * _CHUNK_FRAMES)
            if rows > 0:
                view = chunk[:rows]
                view.flags.writeable = False
                blocks.append(view)
        return blocks

    # ------------------------------------------------------------ per token
    def _column(self, field: str, dtype: Any = None) -> Any:
        """One field of every frame: an array of ``dtype``, or a list without one."""
        values = [getattr(info, field) for info in self._infos]
        return values if dtype is None else np.array(values, dtype=dtype)

    @property
    def token_ids(self) -> np.ndarray:
        """The token each frame consumed (int64, one per frame; BOS first)."""
        return self._column("input_token_id", np.int64)

    @property
    def token_texts(self) -> list[str]:
        """The text of the token each frame consumed."""
        return self._column("input_text")

    @property
    def positions(self) -> np.ndarray:
        """Each frame's position in the sequence (int64; 0 is BOS)."""
        return self._column("position", np.int64)

    @property
    def phases(self) -> list[str]:
        """``"prompt"`` or ``"generation"`` per frame."""
        return self._column("phase")

    @property
    def predicted_ids(self) -> np.ndarray:
        """The next token chosen from each frame's state (int64)."""
        return self._column("predicted_token_id", np.int64)

    @property
    def predicted_texts(self) -> list[str]:
        """The text of each frame's chosen next token."""
        return self._column("predicted_text")

    @property
    def probabilities(self) -> np.ndarray:
        """The probability of each frame's chosen next token (float64)."""
        return self._column("probability", np.float64)

    def top_k_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, probabilities)`` of every frame's most likely next tokens, (frames, k)
        int32 and float32, most likely first; ``-1`` and ``0`` pad shorter rows."""
        k = max((len(f.top_k_ids) for f in self._infos), default=0)
        ids = np.full((len(self), k), -1, dtype=np.int32)
        probabilities = np.zeros((len(self), k), dtype=np.float32)
        for i, f in enumerate(self._infos):
            ids[i, :len(f.top_k_ids)] = f.top_k_ids
            probabilities[i, :len(f.top_k_probabilities)] = f.top_k_probabilities
        return ids, probabilities

    @property
    def prompt(self) -> str:
        """The prompt text the run continued (from the metadata; ``""`` if none)."""
        return str(self.metadata.get("prompt", ""))

    @property
    def text(self) -> str:
        """The generated continuation, decoded (``""`` before any generated token)."""
        return self.text_so_far(len(self) - 1) if len(self) else ""

    # ------------------------------------------------------------ data export
    def to_xarray(self, model: Any = None) -> Any:
        """The run as an :class:`xarray.Dataset`, ``state`` (token × neuron) with token
        and neuron coordinates and the run's description as attributes; the states
        are not copied. ``model`` (what :func:`flyviz.load` returned) adds the
        neurons' labels and positions, which the recording does not store. See
        :func:`flyviz.record.convert.to_xarray`."""
        from flyviz.record.convert import to_xarray

        return to_xarray(self, model)

    def to_zarr(self, path: str | Path, model: Any = None) -> Path:
        """Write :meth:`to_xarray`'s dataset as a Zarr store, chunked along tokens
        (:func:`flyviz.record.convert.to_zarr`; read it back with
        :func:`flyviz.record.convert.open_zarr`)."""
        from flyviz.record.convert import to_zarr

        return to_zarr(self, path, model)

    def to_nwb(self, path: str | Path, model: Any = None) -> Path:
        """Write the run as an NWB file: the states as a time-first response series over
        a table of the neurons, the tokens as intervals
        (:func:`flyviz.record.convert.to_nwb`; needs ``flyviz[nwb]``)."""
        from flyviz.record.convert import to_nwb

        return to_nwb(self, path, model)

    def to_npz(self, path: str | Path, model: Any = None) -> Path:
        """Write the run as one ``.npz`` of plain arrays, readable with
        ``allow_pickle=False`` (:func:`flyviz.record.convert.to_npz`)."""
        from flyviz.record.convert import to_npz

        return to_npz(self, path, model)

    @property
    def mean_abs_states(self) -> np.ndarray:
        """Mean |h| of every frame."""
        return np.array([f.mean_abs_state for f in self._infos], dtype=np.float32)

    @property
    def top1_probabilities(self) -> np.ndarray:
        """Top-1 probability of every frame."""
        return np.array([float(f.top_k_probabilities[0]) if len(f.top_k_probabilities) else 0.0
                         for f in self._infos], dtype=np.float32)

    @property
    def generated_ids(self) -> list[int]:
        """Token ids generated so far, in order (EOS included if reached)."""
        return [f.predicted_token_id for f in self._infos if f.phase == PHASE_GENERATION]

    @property
    def prompt_ids(self) -> list[int]:
        """Input ids of the prompt frames plus the last prompt token (BOS first)."""
        ids = [f.input_token_id for f in self._infos if f.phase == PHASE_PROMPT]
        gen = [f for f in self._infos if f.phase == PHASE_GENERATION]
        if gen:
            ids.append(gen[0].input_token_id)
        return ids

    def nbytes(self) -> int:
        """Bytes of states held in memory (a loaded file's states stay in the file)."""
        return sum(chunk.nbytes for chunk in self._chunks)

    # ------------------------------------------------------------- checking
    def _check_stored(self, start: int, stop: int) -> None:
        """Check rows ``start:stop`` of a lazily opened file before they are used."""
        if self._unchecked is None or not self._unchecked[start:stop].any():
            return
        assert self._stored is not None
        rows = np.flatnonzero(self._unchecked[start:stop]) + start
        first, last = int(rows[0]), int(rows[-1]) + 1
        block = np.asarray(self._stored[first:last])
        problem = self._row_problem(block, first)
        if problem:
            raise RecordingError(f"{self._name()} is damaged ({problem}); {_REMEDY}")
        self._unchecked[first:last] = False

    def _row_problem(self, block: np.ndarray, first: int) -> str | None:
        """What is wrong with stored rows ``first:first+len(block)``, or ``None``."""
        if self._stored_crc is not None:
            crc = _crc_rows(block)
            bad = np.flatnonzero(crc != self._stored_crc[first:first + block.shape[0]])
            if bad.size:
                return f"the state of frame {first + int(bad[0])} fails its checksum"
        bad = _non_finite_rows(block)
        if bad.size:
            return f"the state of frame {first + int(bad[0])} holds NaN or inf"
        return None

    def _name(self) -> str:
        return self._source.name if self._source is not None else "the recording"

    # ------------------------------------------------------------- file I/O
    def _state_blocks(self) -> Iterator[np.ndarray]:
        """All states in order, a few MB at a time (for :meth:`save`)."""
        n, stored = len(self), self._stored_len
        rows = max(1, _CHECK_BLOCK_BYTES // (self.neurons * self.states_dtype.itemsize))
        for start in range(0, stored, rows):
            self._check_stored(start, min(stored, start + rows))
            yield np.asarray(self._stored[start:start + rows])  # type: ignore[index]
        for c, chunk in enumerate(self._chunks):
            first = stored + c * _CHUNK_FRAMES
            yield chunk[:min(_CHUNK_FRAMES, n - first)]

    def _file_parts(self, who: str = "") -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
        """Every per-frame tensor but ``states`` (with ``state_crc32``) and the frames'
        JSON list, as :meth:`save` writes them; refuses non-finite states."""
        n = len(self)
        k = max((len(f.top_k_ids) for f in self._infos), default=1)
        top_ids = np.full((n, k), -1, dtype=np.int32)
        top_probs = np.zeros((n, k), dtype=np.float32)
        for i, f in enumerate(self._infos):
            top_ids[i, :len(f.top_k_ids)] = f.top_k_ids
            top_probs[i, :len(f.top_k_probabilities)] = f.top_k_probabilities
        crc = np.empty(n, dtype=np.uint32)
        done = 0
        for block in self._state_blocks():
            if _non_finite_rows(block).size:
                raise RecordingError(f"cannot save the recording: {who}frame "
                                     f"{done + int(_non_finite_rows(block)[0])} has a NaN or "
                                     "inf state")
            crc[done:done + block.shape[0]] = _crc_rows(block)
            done += block.shape[0]
        tensors: dict[str, Any] = {
            "position": np.array([f.position for f in self._infos], dtype=np.int64).reshape(n),
            "input_token_id": np.array([f.input_token_id for f in self._infos],
                                       dtype=np.int64).reshape(n),
            "predicted_token_id": np.array([f.predicted_token_id for f in self._infos],
                                           dtype=np.int64).reshape(n),
            "probability": np.array([f.probability for f in self._infos],
                                    dtype=np.float64).reshape(n),
            "mean_abs_state": np.array([f.mean_abs_state for f in self._infos],
                                       dtype=np.float64).reshape(n),
            "top_k_ids": top_ids,
            "top_k_probabilities": top_probs,
            "state_crc32": crc,
        }
        texts = [{"phase": f.phase, "input_text": f.input_text, "predicted_text": f.predicted_text,
                  "top_k_text": list(f.top_k_text), "text_keep": f.text_keep,
                  "text_tail": f.text_tail, "generation_index": f.generation_index}
                 for f in self._infos]
        return tensors, texts

    def _metadata_json(self, who: str = "") -> str:
        try:
            return json.dumps(self.metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RecordingError(f"cannot save the recording: {who}metadata is not plain JSON "
                                 f"({exc})") from None

    def save(self, path: str | Path) -> Path:
        """Write the recording to ``path`` atomically (a temporary file, then a rename).

        The states stream from memory or from the file this recording was
        opened from; a 2 GB recording is never copied whole. Non-finite
        states are refused (:class:`RecordingError`): they could not be
        opened again. A comparison's untouched run (:attr:`baseline`) is
        written into the same file (format 1.3, see
        ``docs/recording-format.md``).
        """
        from flyviz.model.safetensors_io import ChunkedTensor, save_safetensors

        path = Path(path)
        n = len(self)
        tensors, texts = self._file_parts()
        header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                  "flyviz_version": __version__, "neurons": str(self.neurons),
                  "metadata": self._metadata_json(), "frames": json.dumps(texts)}
        baseline = self.baseline
        if baseline is not None:
            who = "the untouched run's "
            if baseline.neurons != self.neurons:
                raise RecordingError(f"cannot save the recording: the untouched run has "
                                     f"{baseline.neurons:,} neurons per state, the intervened "
                                     f"one {self.neurons:,}")
            base_tensors, base_texts = baseline._file_parts(who)
            header[BASELINE_PREFIX + "metadata"] = baseline._metadata_json(who)
            header[BASELINE_PREFIX + "frames"] = json.dumps(base_texts)
            tensors.update({BASELINE_PREFIX + name: a for name, a in base_tensors.items()})
            # The untouched states are sealed by content_sha256 like any tensor but
            # ``states``, so that a format 1.2 reader, which ignores them, still finds the
            # seal intact. A comparison is short; they are held whole only while writing.
            blocks = list(baseline._state_blocks())
            tensors[BASELINE_PREFIX + "states"] = np.concatenate(blocks) if blocks else \
                np.zeros((0, self.neurons), dtype=baseline.states_dtype)
        state_shape = [n, self.neurons]
        sealed = {name: (str(a.dtype), [int(s) for s in a.shape], a.tobytes())
                  for name, a in tensors.items()}
        sealed["states"] = (self.states_dtype.name, state_shape, b"")
        header["content_sha256"] = content_digest(header, sealed)
        # The states are written block by block, never joined into one array.
        tensors["states"] = ChunkedTensor(  # type: ignore[assignment]
            self.states_dtype, (n, self.neurons), self._state_blocks)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            os.close(fd)
            try:
                save_safetensors(tmp, tensors, header)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise RecordingError(f"cannot write recording {path}: {exc.strerror or exc}") from None
        return path

    @classmethod
    def load(cls, path: str | Path, *, verify: bool = True) -> "Recording":
        """Open a recording written by :meth:`save` (or by flyviz 0.1).

        The states are memory-mapped, not read into memory. Everything else is
        read and checked at once: the header, every frame's fields, the seal
        (``content_sha256``) of files that carry one.

        Parameters
        ----------
        path
            The ``.flyrec`` file.
        verify
            Stream every state row through its CRC-32 and a finiteness check
            now (about 1 s for 2 GB from the page cache; memory stays flat).
            ``False`` checks each frame when it is first read instead, so that
            opening takes milliseconds whatever the size; a damaged frame then
            raises :class:`RecordingError` when it is read.

        Raises
        ------
        RecordingError
            If the file is missing, not a recording, from a newer major
            version, truncated, damaged or inconsistent: one line.
        """
        path = Path(path)
        try:
            return cls._load(path, verify)
        except FlyvizError as exc:
            if isinstance(exc, RecordingError):
                raise
            raise RecordingError(str(exc)) from None
        except MemoryError:
            raise RecordingError(f"{path.name} is too large to open in this much memory") from None
        except OSError as exc:
            raise RecordingError(f"cannot read recording {path}: {exc.strerror or exc}") from None

    @classmethod
    def _load(cls, path: Path, verify: bool) -> "Recording":
        from flyviz.model.safetensors_io import SafetensorsFile

        name = path.name
        if not path.is_file():
            raise RecordingError(f"cannot read recording {path}: "
                                 f"{'it is a folder' if path.exists() else 'no such file'}")
        if not os.access(path, os.R_OK):
            raise RecordingError(f"cannot read recording {path}: permission denied")

        def damaged(problem: str) -> RecordingError:
            return RecordingError(f"{name} is damaged ({problem}); {_REMEDY}")

        try:
            st = SafetensorsFile(path, error=RecordingError,
                                 remedy="it is not a flyviz recording or it is damaged")
        except RecordingError as exc:
            raise RecordingError(f"{exc} (not a flyviz recording, or a damaged one)") from None
        meta = st.raw_metadata
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise RecordingError(f"{name} is not a flyviz recording")
        if not all(isinstance(v, str) for v in meta.values()):
            raise damaged("its header holds a value that is not a string")
        version = _VERSION_RE.match(meta.get("format_version", ""))
        if version is None:
            raise damaged(f"its format_version {meta.get('format_version')!r} is not MAJOR.MINOR")
        major, minor = int(version.group(1)), int(version.group(2) or 0)
        if major > FORMAT_MAJOR:
            raise RecordingError(f"{name} is a format {major}.{minor} recording, written by a "
                                 f"newer flyviz than this one ({__version__}, format "
                                 f"{FORMAT_VERSION}); upgrade flyviz to open it")
        if major < FORMAT_MAJOR:
            raise damaged(f"its format_version {meta['format_version']!r} is unknown")
        sealed = (major, minor) >= (1, 1)

        # Header fields.
        try:
            neurons = int(meta["neurons"])
        except KeyError as exc:
            raise damaged(f"its header lacks {exc}") from None
        except ValueError:
            raise damaged("its header is not valid JSON") from None
        if not 0 < neurons <= _MAX_NEURONS:
            raise damaged(f"it claims {neurons} neurons per state")
        runs = [_read_run(st, meta, "", neurons, sealed, damaged)]
        if any(key.startswith(BASELINE_PREFIX) for key in [*meta, *st.keys()]):
            runs.append(_read_run(st, meta, BASELINE_PREFIX, neurons, sealed, damaged))

        # The seal.
        if sealed:
            if "content_sha256" not in meta:
                raise damaged("it lacks its content_sha256 seal")
            contents = {t: (str(st.get(t).dtype) if t != "states" else runs[0].states_dtype,
                            [int(s) for s in st.shape(t)],
                            b"" if t == "states" else np.ascontiguousarray(st.get(t)).tobytes())
                        for t in st.keys()}
            if content_digest(meta, contents) != meta["content_sha256"]:
                raise damaged("its contents do not match their content_sha256 seal")

        recordings = [cls._from_run(run, path, neurons, verify, damaged) for run in runs]
        rec = recordings[0]
        rec.baseline = recordings[1] if len(recordings) > 1 else None
        problem = _comparison_problem(rec)
        if problem:
            raise damaged(problem)
        return rec

    @classmethod
    def _from_run(cls, run: "_StoredRun", path: Path, neurons: int, verify: bool,
                  damaged: Any) -> "Recording":
        """A recording of one run read by :func:`_read_run`: frames checked, states mapped."""
        arrays, texts, n = run.arrays, run.texts, len(run.texts)
        its, whose = run.its, run.whose
        ints = ("position", "input_token_id", "predicted_token_id")
        for tensor in ints:
            if n and int(arrays[tensor].min()) < 0:
                raise damaged(f"{its} {tensor} holds a negative value")
        for tensor in ("probability", "mean_abs_state", "top_k_probabilities"):
            values = arrays[tensor]
            if not np.isfinite(values).all() or (values.size and float(values.min()) < 0):
                raise damaged(f"{its} {tensor} holds a NaN, inf or negative value")
        if n and (float(arrays["probability"].max()) > 1 + 1e-6
                  or float(arrays["top_k_probabilities"].max(initial=0.0)) > 1 + 1e-6):
            raise damaged(f"{run.it} holds a probability above 1")
        if n and int(arrays["top_k_ids"].min(initial=0)) < -1:
            raise damaged(f"{its} top_k_ids hold an id below -1")

        try:
            states_dt = np.dtype(run.states_dtype)
            rec = cls(neurons, run.metadata, states_dtype=run.states_dtype)
        except ValueError as exc:
            raise damaged(str(exc)) from None
        rec._source = path
        # Rebuild the text as edits on a list of characters: applying each frame's change
        # costs what changed, and the whole text is joined only for the anchors.
        chars: list[str] = []
        for i, t in enumerate(texts):
            problem = _frame_problem(t, len(chars))
            if problem:
                raise damaged(f"{whose}frame {i} {problem}")
            del chars[t["text_keep"]:]
            chars.extend(t["text_tail"])
            if i % _CHUNK_FRAMES == 0:
                rec._text_anchors.append("".join(chars))
            ids = arrays["top_k_ids"][i]
            valid = ids >= 0
            count = int(valid.sum())
            if count != len(t["top_k_text"]) or not valid[:count].all():
                raise damaged(f"{whose}frame {i} has {count} top-k ids but "
                              f"{len(t['top_k_text'])} top-k texts")
            # Number fields come from the file's tensors, the rest from its frame texts.
            stored = {name: arrays[name][i] if name in _FRAME_TENSORS else t[name]
                      for name in STORED_FIELDS}
            stored["top_k_ids"] = ids[valid]
            stored["top_k_probabilities"] = arrays["top_k_probabilities"][i][valid]
            rec._infos.append(_FrameInfo.of(stored, t["text_keep"], t["text_tail"]))
        rec._last_text = "".join(chars)

        # States: mapped, then checked (now, or frame by frame when first read).
        if n:
            begin, _end = run.states_range
            rec._stored = np.memmap(path, dtype=states_dt.newbyteorder("<"), mode="r",
                                    offset=begin, shape=(n, neurons))
            rec._stored_crc = arrays.get("state_crc32")
            if verify:
                _check_file_states(rec, path, begin)
            else:
                rec._unchecked = np.ones(n, dtype=bool)
        return rec


@dataclass
class _StoredRun:
    """One run's header fields and small tensors, read from a file but not yet checked."""

    prefix: str
    metadata: dict[str, Any]
    texts: list[Any]
    arrays: dict[str, np.ndarray]
    states_dtype: str
    states_range: tuple[int, int]

    @property
    def it(self) -> str:
        """How messages name the run: "it" (the recording) or "the untouched run"."""
        return "the untouched run" if self.prefix else "it"

    @property
    def its(self) -> str:
        return "the untouched run's" if self.prefix else "its"

    @property
    def whose(self) -> str:
        """Prefix of a frame's name in messages."""
        return "the untouched run's " if self.prefix else ""


def _read_run(st: Any, meta: dict[str, str], prefix: str, neurons: int, sealed: bool,
              damaged: Any) -> _StoredRun:
    """The header fields and tensors of the run stored under ``prefix`` (``""``, or
    :data:`BASELINE_PREFIX` for a comparison's untouched run), their presence, dtypes
    and shapes checked."""
    its = "the untouched run's" if prefix else "its"
    it = "the untouched run" if prefix else "it"
    try:
        metadata = json.loads(meta.get(prefix + "metadata", "{}"))
        texts = json.loads(meta[prefix + "frames"])
    except KeyError as exc:
        raise damaged(f"its header lacks {exc}") from None
    except (ValueError, RecursionError):
        raise damaged("its header is not valid JSON") from None
    if not isinstance(metadata, dict):
        raise damaged(f"{its} metadata is not a JSON object")
    if not isinstance(texts, list):
        raise damaged(f"{its} frame list is not a JSON list")
    n = len(texts)
    states = prefix + "states"
    if states not in st:
        raise damaged(f"{it} has no states")
    states_dtype = {"F16": "float16", "F32": "float32"}.get(st.dtype(states))
    if states_dtype is None or (not sealed and states_dtype != "float16"):
        raise damaged(f"{its} states are {st.dtype(states)}, not float16 or float32")
    if st.shape(states) != (n, neurons):
        raise damaged(f"{it} lists {n} frames of {neurons} neurons but {its} states have "
                      f"shape {list(st.shape(states))}")
    expected = dict(_FRAME_TENSORS)
    if sealed:
        expected["state_crc32"] = ("uint32", 1)
    arrays: dict[str, np.ndarray] = {}
    for tensor, (dtype, rank) in expected.items():
        if prefix + tensor not in st:
            raise damaged(f"it has no {prefix + tensor} tensor")
        array = st.get(prefix + tensor)
        if array.dtype != np.dtype(dtype) or array.ndim != rank or array.shape[0] != n:
            raise damaged(f"its {prefix + tensor} tensor is {array.dtype} "
                          f"{list(array.shape)}, expected {dtype} with {n} rows")
        arrays[tensor] = np.array(array)  # small: a copy, so the file may be replaced
    k = arrays["top_k_ids"].shape[1]
    if arrays["top_k_probabilities"].shape != (n, k):
        raise damaged(f"{its} top_k_ids and top_k_probabilities differ in shape")
    return _StoredRun(prefix, metadata, texts, arrays, states_dtype, st.byte_range(states))


def _comparison_problem(rec: Recording) -> str | None:
    """What is wrong with a comparison's ``metadata["comparison"]``, or ``None``.

    A comparison (an untouched run stored beside the intervened one) must say how it
    was run and give one KL and one mean |dx| (a number, or null) per intervened frame.
    """
    info = rec.metadata.get("comparison")
    if info is None:
        return None if rec.baseline is None else \
            "it holds an untouched run but no comparison in its metadata"
    if rec.baseline is None:
        return "its metadata describes a comparison but it holds no untouched run"
    if not isinstance(info, dict) or info.get("mode") not in COMPARISON_MODES:
        return "its comparison is not an object with a mode 'forced' or 'free'"
    for key in ("kl", "mean_abs_delta"):
        values = info.get(key)
        if not isinstance(values, list) or len(values) != len(rec):
            return f"its comparison's {key} is not a list of one value per frame"
        for value in values:
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                return f"its comparison's {key} holds {value!r}, not a number >= 0 or null"
    return None


def _frame_problem(t: Any, previous_length: int) -> str | None:
    """What is wrong with one frame's JSON entry, or ``None``."""
    if not isinstance(t, dict):
        return "is not a JSON object"
    for key in ("phase", "input_text", "predicted_text", "top_k_text", "text_keep", "text_tail",
                "generation_index"):
        if key not in t:
            return f"has no {key}"
    if t["phase"] not in _PHASES:
        return f"has an unknown phase {t['phase']!r}"
    if not all(isinstance(t[key], str) for key in ("input_text", "predicted_text", "text_tail")):
        return "has a text that is not a string"
    if not isinstance(t["top_k_text"], list) or not all(isinstance(s, str)
                                                        for s in t["top_k_text"]):
        return "has top-k texts that are not a list of strings"
    keep = t["text_keep"]
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= previous_length:
        return f"keeps {keep!r} characters of a {previous_length}-character text"
    index = t["generation_index"]
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        return f"has a bad generation_index {index!r}"
    return None


def _check_file_states(rec: Recording, path: Path, begin: int) -> None:
    """Stream a file's state rows through their checks without mapping them.

    The rows are read into one reused buffer, so the process's memory stays
    flat: a 2 GB file is checked with about 8 MB of it resident.
    """
    n = len(rec)
    row_bytes = rec.neurons * rec.states_dtype.itemsize
    rows = max(1, _CHECK_BLOCK_BYTES // row_bytes)
    buffer = bytearray(rows * row_bytes)
    view = memoryview(buffer)
    dtype = rec.states_dtype.newbyteorder("<")
    with open(path, "rb", buffering=0) as handle:
        handle.seek(begin)
        for first in range(0, n, rows):
            count = min(rows, n - first)
            want = count * row_bytes
            got = 0
            while got < want:
                read = handle.readinto(view[got:want])
                if not read:
                    raise RecordingError(f"{path.name} is damaged (the file ends inside frame "
                                         f"{first + got // row_bytes}); {_REMEDY}")
                got += read
            block = np.frombuffer(buffer, dtype=dtype, count=count * rec.neurons).reshape(
                count, rec.neurons)
            problem = rec._row_problem(block, first)
            if problem:
                raise RecordingError(f"{path.name} is damaged ({problem}); {_REMEDY}")
