"""A run as a sequence of frames, stored compactly in memory: the container.

This module has one job: :class:`Recording` holds a run's frames as they are
appended (or as a ``.flyrec`` file maps them) and serves them back, whole or
as per-token columns. States are kept as float16 by default (half the bytes
of float32, about 1e-3 relative precision: plenty for display and inspection)
or float32 on request (for analysis), in fixed-size chunks, so a long run
grows memory by what its frames need and nothing is ever re-copied when it
grows. Everything else per frame is a few numbers and short strings.

The ``.flyrec`` file format (specified in ``docs/recording-format.md``) is
:mod:`flyviz.record.flyrec_codec`'s job; :meth:`Recording.save` and
:meth:`Recording.load` call it, and its public names are imported here too, so
``from flyviz.record.recording import FILE_SUFFIX`` keeps working.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.errors import RecordingError
from flyviz.record import flyrec_codec
from flyviz.record.flyrec_codec import (BASELINE_PREFIX, CHECK_BLOCK_BYTES, COMPARISON_MODES,
                                        DAMAGE_REMEDY, FILE_SUFFIX, FORMAT_MAJOR, FORMAT_NAME,
                                        FORMAT_VERSION, content_digest, state_rows_problem)
from flyviz.record.frame import (CHUNK_FRAMES, PHASE_GENERATION, PHASE_PROMPT, STORED_FIELDS,
                                 Frame, FrameInfo)
from flyviz.record.spikes import SpikeLog

#: State dtypes a recording may store.
STATE_DTYPES = ("float16", "float32")


def _frame_bound(name: str, value: Any) -> int:
    """``start`` or ``stop`` of :meth:`Recording.states`: a whole number from 0 (a plain
    ``int`` with one type test: the views call it per frame)."""
    if type(value) is not int:
        from flyviz.arguments import whole_number

        value = whole_number(name, value)
    if value < 0:
        from flyviz.errors import InputError

        raise InputError(f"{name} {value} must be 0 or more: frames count from 0, not from "
                         "the end")
    return value


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
        self._infos: list[FrameInfo] = []
        # States of a loaded file (memory-mapped, frames 0..len-1 of it), then
        # appended frames in chunks.
        self._stored: np.ndarray | None = None
        self._stored_crc: np.ndarray | None = None
        self._unchecked: np.ndarray | None = None   # stored rows not checked yet (lazy open)
        self._source: Path | None = None
        self._chunks: list[np.ndarray] = []
        # text_so_far grows with the run; storing it whole per frame would make a long
        # run's memory quadratic. Frames store what changed, plus the whole text every
        # CHUNK_FRAMES frames to rebuild any frame's text quickly.
        self._text_anchors: list[str] = []
        self._last_text = ""
        #: A comparison's untouched run, stored beside this (intervened) one, or ``None``;
        #: ``metadata["comparison"]`` then holds the per-frame KL and mean |dx|
        #: (:mod:`flyviz.record.compare`, ``docs/recording-format.md``).
        self.baseline: Recording | None = None
        #: The exact spikes behind the frames, frame by frame (a spiking run's; format 1.4),
        #: or ``None`` when the run kept none (:class:`~flyviz.record.spikes.SpikeLog`).
        #: Whoever appends a frame appends its spikes; :meth:`save` writes them when they
        #: cover every frame.
        self.spikes: SpikeLog | None = None

    @classmethod
    def from_parts(cls, neurons: int, metadata: dict[str, Any] | None, *, states_dtype: str,
                   frames: Sequence[FrameInfo], text_anchors: Sequence[str],
                   stored_states: np.ndarray | None = None,
                   stored_crc: np.ndarray | None = None, checked: bool = True,
                   source: Path | None = None, spikes: SpikeLog | None = None
                   ) -> "Recording":
        """A recording made of frames read from elsewhere (what the ``.flyrec`` codec calls).

        Parameters
        ----------
        neurons, metadata, states_dtype
            As for the constructor.
        frames
            Every frame's :class:`FrameInfo`, in order.
        text_anchors
            The whole ``text_so_far`` of frames ``0, CHUNK_FRAMES, 2 * CHUNK_FRAMES, ...``
            (:data:`CHUNK_FRAMES`): one per started chunk of frames.
        stored_states
            The states of every frame, ``(len(frames), neurons)`` in ``states_dtype``
            (typically a read-only memory map of a file), or ``None`` when there are
            no frames.
        stored_crc
            The CRC-32 of each stored state row (:func:`~flyviz.record.flyrec_codec.state_rows_problem`
            checks rows against it), or ``None`` when the source had none.
        checked
            Whether the stored rows have been checked already; ``False`` checks each
            row when it is first read, and reading a damaged one raises
            :class:`RecordingError`.
        source
            The file the states come from, named in messages.
        spikes
            The spikes behind the frames (:attr:`spikes`), one entry per frame, or ``None``.

        Raises
        ------
        ValueError
            If ``neurons`` or ``states_dtype`` is invalid, or the parts do not fit together.
        """
        rec = cls(neurons, metadata, states_dtype=states_dtype)
        n = len(frames)
        if len(text_anchors) != -(-n // CHUNK_FRAMES):
            raise ValueError(f"{n} frames need {-(-n // CHUNK_FRAMES)} text anchors, "
                             f"not {len(text_anchors)}")
        if (stored_states is None) != (n == 0) or (
                stored_states is not None and stored_states.shape != (n, rec.neurons)):
            raise ValueError(f"the stored states must be ({n}, {rec.neurons}) for {n} frames")
        if spikes is not None and len(spikes) != n:
            raise ValueError(f"the spikes cover {len(spikes)} frames, not the {n} recorded")
        rec.spikes = spikes
        rec._source = None if source is None else Path(source)
        rec._infos = list(frames)
        rec._text_anchors = list(text_anchors)
        if n:
            rec._stored = stored_states
            rec._stored_crc = stored_crc
            rec._unchecked = None if checked else np.ones(n, dtype=bool)
            rec._last_text = rec.text_so_far(n - 1)
        return rec

    # ------------------------------------------------------------ container
    def __len__(self) -> int:
        return len(self._infos)

    def __iter__(self) -> Iterator[Frame]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: int) -> Frame:
        index = self._index(index)  # IndexOutOfRange (an IndexError) past the end; -1 the last
        info = self._infos[index]
        return Frame(**{name: getattr(info, name) for name in STORED_FIELDS},
                     state=self.state(index), text_so_far=self.text_so_far(index))

    @property
    def source(self) -> Path | None:
        """The file this recording was loaded from (whose states it maps), or ``None`` for
        one made in memory: what must not be overwritten while it is read."""
        return self._source

    @property
    def frame_infos(self) -> Sequence[FrameInfo]:
        """Every frame's :class:`FrameInfo` (its fields but the state), in order; read-only,
        not a copy."""
        return self._infos

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
        row = (i - self._stored_len) % CHUNK_FRAMES
        if row == 0:
            self._chunks.append(np.empty((CHUNK_FRAMES, self.neurons), dtype=self.states_dtype))
        self._chunks[-1][row] = state
        text = str(frame.text_so_far)
        previous = self._last_text
        keep = len(previous) if text.startswith(previous) else \
            len(os.path.commonprefix([previous, text]))
        if i % CHUNK_FRAMES == 0:
            self._text_anchors.append(text)
        self._last_text = text
        self._infos.append(FrameInfo.of({name: getattr(frame, name) for name in STORED_FIELDS},
                                         keep, text[keep:]))
        return i

    def clear(self) -> None:
        """Drop every frame (metadata is kept)."""
        self._infos.clear()
        self._chunks.clear()
        self._stored = self._stored_crc = self._unchecked = None
        self._text_anchors.clear()
        self._last_text = ""
        if self.spikes is not None:
            self.spikes.clear()

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
        frozen.spikes = None if self.spikes is None else self.spikes.snapshot()
        frozen.__dict__["_frozen"] = True
        return frozen

    # --------------------------------------------------------------- access
    def _index(self, index: int) -> int:
        """``index`` as a frame's place (negative ones count from the end, as for any
        sequence); one line for anything else. Called for every frame a view shows: a
        plain ``int`` is checked with one type test."""
        n = len(self._infos)
        if type(index) is not int:
            from flyviz.arguments import whole_number

            index = whole_number("a frame index", index)
        if not -n <= index < n:
            from flyviz.errors import IndexOutOfRange

            frames = f"frames 0..{n - 1}" if n else "no frames yet"
            raise IndexOutOfRange(f"frame {index} is out of range: the recording has {frames}")
        return index % n

    def text_so_far(self, index: int) -> str:
        """Decoded continuation up to frame ``index``."""
        index = self._index(index)
        anchor = index - index % CHUNK_FRAMES
        text = self._text_anchors[anchor // CHUNK_FRAMES]
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
        return self._chunks[j // CHUNK_FRAMES][j % CHUNK_FRAMES]

    def state(self, index: int) -> np.ndarray:
        """The float32 state of frame ``index`` (a new array)."""
        return self._row(self._index(index)).astype(np.float32)

    def neuron_trace(self, neuron: int) -> np.ndarray:
        """Activation of one neuron over every frame, float32 ``(len(self),)``.

        Raises
        ------
        InputError
            For anything but a neuron index in ``0..neurons-1`` (a negative one is not
            counted from the end: -1 is far more often a slip).
        """
        from flyviz.arguments import whole_number

        neuron = whole_number("neuron", neuron, 0, self.neurons - 1)
        return self.states(np.array([neuron]))[:, 0]

    def states(self, neurons: np.ndarray | None = None, start: int = 0,
               stop: int | None = None) -> np.ndarray:
        """States of frames ``start:stop`` (optionally a subset of neurons), float32.

        Parameters
        ----------
        neurons
            Neuron indices in ``0..neurons-1`` (whole numbers, in the order wanted), or
            ``None`` for all.
        start, stop
            Frames from ``start`` up to ``stop`` (``None``: the end; beyond it is cut to
            it). Negative ones are refused, not counted from the end: ``start=-5`` read
            every frame and ``stop=-2`` none, without a word.

        Raises
        ------
        InputError
            For indices that are not whole numbers or are out of range.
        """
        start = _frame_bound("start", start)
        stop = len(self) if stop is None else min(_frame_bound("stop", stop), len(self))
        cols: slice | np.ndarray = slice(None)
        width = self.neurons
        if neurons is not None:
            cols = self._neuron_indices(neurons)
            width = cols.size
        out = np.empty((max(0, stop - start), width), dtype=np.float32)
        split = min(max(start, self._stored_len), stop)
        if split > start:
            assert self._stored is not None
            self._check_stored(start, split)
            out[:split - start] = self._stored[start:split][:, cols]
        for i in range(split, stop):
            out[i - start] = self._row(i)[cols]
        return out

    def _neuron_indices(self, neurons: Any) -> np.ndarray:
        """``neurons`` as a 1-D array of neuron indices, checked with one min/max pass (the
        views call :meth:`states` per frame); one line for anything else. A negative index
        is refused as :meth:`neuron_trace` refuses it: -1 is far more often a slip."""
        from flyviz.errors import InputError

        cols = np.asarray(neurons)
        if cols.ndim != 1 or (cols.size and (cols.dtype == bool
                                             or not np.issubdtype(cols.dtype, np.integer))):
            raise InputError(f"neurons must be a 1-D array of whole neuron indices in "
                             f"0..{self.neurons - 1}, not {cols.ndim}-D {cols.dtype} values")
        if cols.size:
            low, high = int(cols.min()), int(cols.max())
            if low < 0 or high >= self.neurons:
                bad = low if low < 0 else high
                raise InputError(f"neuron {bad} is outside 0..{self.neurons - 1} (negative "
                                 "indices are not counted from the end)")
        return cols.astype(np.intp, copy=False)

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
                rows = max(1, CHECK_BLOCK_BYTES // (self.neurons * self.states_dtype.itemsize))
                for first in range(0, self._stored_len, rows):
                    self._check_stored(first, min(first + rows, self._stored_len))
            blocks.append(self._stored)
        appended = len(self) - self._stored_len
        for i, chunk in enumerate(self._chunks):
            rows = min(CHUNK_FRAMES, appended - i * CHUNK_FRAMES)
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

    def to_nwb(self, path: str | Path, model: Any = None, *, timing: Any = None) -> Path:
        """Write the run as an NWB file: the states as a time-first response series over
        a table of the neurons, the tokens as intervals
        (:func:`flyviz.record.convert.to_nwb`; needs ``flyviz[nwb]``). A run stepped in
        time (a spiking run's bins) is timed by its kind's ``timing``
        (``kind_of_recording(recording).frame_timing(recording)``)."""
        from flyviz.record.convert import to_nwb

        return to_nwb(self, path, model, timing=timing)

    def to_npz(self, path: str | Path, model: Any = None) -> Path:
        """Write the run as one ``.npz`` of plain arrays, readable with
        ``allow_pickle=False`` (:func:`flyviz.record.convert.to_npz`)."""
        from flyviz.record.convert import to_npz

        return to_npz(self, path, model)

    @property
    def mean_abs_states(self) -> np.ndarray:
        """Mean |x| of every frame (float64, as a recording stores it: a converted file
        copies these exactly)."""
        return self._column("mean_abs_state", np.float64)

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
        problem = state_rows_problem(block, first, self._stored_crc)
        if problem:
            raise RecordingError(f"{self._name()} is damaged ({problem}); {DAMAGE_REMEDY}")
        self._unchecked[first:last] = False

    def _name(self) -> str:
        return self._source.name if self._source is not None else "the recording"

    # ------------------------------------------------------------- file I/O
    def state_stream(self) -> Iterator[np.ndarray]:
        """All states in order, a few MB at a time: what :meth:`save` streams to a file.

        Unlike :meth:`state_blocks`, a loaded file's rows come as small copies
        (:data:`~flyviz.record.flyrec_codec.CHECK_BLOCK_BYTES` at a time), each
        checked first, so that writing a large recording never holds it whole.
        """
        n, stored = len(self), self._stored_len
        rows = max(1, CHECK_BLOCK_BYTES // (self.neurons * self.states_dtype.itemsize))
        for start in range(0, stored, rows):
            self._check_stored(start, min(stored, start + rows))
            yield np.asarray(self._stored[start:start + rows])  # type: ignore[index]
        for c, chunk in enumerate(self._chunks):
            first = stored + c * CHUNK_FRAMES
            yield chunk[:min(CHUNK_FRAMES, n - first)]

    def save(self, path: str | Path) -> Path:
        """Write the recording to ``path`` atomically (a temporary file, then a rename).

        The states stream from memory or from the file this recording was
        opened from; a 2 GB recording is never copied whole. Non-finite
        states are refused (:class:`RecordingError`): they could not be
        opened again. A comparison's untouched run (:attr:`baseline`) is
        written into the same file (format 1.3, see
        ``docs/recording-format.md``), and so are the run's spikes
        (:attr:`spikes`, format 1.4) when it kept them: those of its frames;
        spikes that cover fewer frames than it has are refused.
        """
        return flyrec_codec.write_recording(self, path)

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
            version, truncated, damaged or inconsistent, or ``path`` is not a
            path: one line.
        """
        if not isinstance(path, (str, os.PathLike)):
            from flyviz.arguments import shown

            raise RecordingError(f"Recording.load takes the path of a .flyrec file (a str or "
                                 f"a pathlib.Path), not {shown(path)}")
        return flyrec_codec.read_recording(path, verify=verify, cls=cls)


__all__ = ["BASELINE_PREFIX", "CHUNK_FRAMES", "COMPARISON_MODES", "FILE_SUFFIX", "FORMAT_MAJOR",
           "FORMAT_NAME", "FORMAT_VERSION", "STATE_DTYPES", "FrameInfo", "Recording",
           "content_digest"]
