"""The ``.flyrec`` codec: a :class:`~flyviz.record.recording.Recording` written to and
read from one file.

This module has one job, the file format (specified in
``docs/recording-format.md``): a safetensors file with the per-frame arrays as
tensors and the strings and run metadata as JSON in the safetensors metadata,
sealed by a CRC-32 per state row and a SHA-256 over everything else
(:func:`content_digest`). :func:`write_recording` writes one atomically,
streaming the states; :func:`read_recording` opens one lazily: the states stay
in the file, memory-mapped, and are checked by streaming them once (or, with
``verify=False``, each frame when first read). Reading never unpickles
anything, and any damage is one :class:`~flyviz.model.errors.RecordingError`
line. Which fields a frame stores comes from :data:`flyviz.record.frame.STORED_FIELDS`:
the number fields are tensors (:data:`_FRAME_TENSORS` gives their dtypes),
the others go into the frame's JSON entry. The frames in memory are
:mod:`flyviz.record.recording`'s job.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz._version import __version__
from flyviz.fileio import RECORDING_SUFFIX, folder_refusal, not_a_file, temporary_file_beside
from flyviz.model.errors import FlyvizError, RecordingError
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, STORED_FIELDS, Frame

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.record.recording import Recording
    from flyviz.record.spikes import SpikeLog

FORMAT_NAME = "flyviz-recording"
#: ``MAJOR.MINOR``. A reader opens any minor version of its major (newer minors
#: only add what it may ignore) and refuses a newer major.
FORMAT_VERSION = "1.4"
FORMAT_MAJOR = 1
FILE_SUFFIX = RECORDING_SUFFIX
#: What ``flyviz convert`` writes of a recording for other tools, by suffix, as a message
#: names it (flyviz reads none of them back as a recording).
EXPORTED_KINDS = {".zarr": "a Zarr store", ".nwb": "an NWB file", ".npz": "a NumPy archive"}
#: Name prefix of a comparison's untouched run: its tensors and header keys (format 1.3).
BASELINE_PREFIX = "baseline."
#: The comparison modes, the one list of them: ``"forced"`` (the intervened model reads the
#: untouched run's tokens; the default) and ``"free"`` (both continue on their own).
#: :mod:`flyviz.record.compare` runs them (its ``MODES``), the viewer state offers them
#: (``COMPARE_MODES``), and a recording stores one in ``metadata["comparison"]["mode"]``.
COMPARISON_MODES = ("forced", "free")
#: Bytes read at a time when a file's states are checked (and streamed when one is written).
CHECK_BLOCK_BYTES = 4 << 20
#: Largest state a recording may claim (a guard against absurd headers).
_MAX_NEURONS = 50_000_000
_PHASES = (PHASE_PROMPT, PHASE_GENERATION)
#: What every message about a damaged recording ends with.
DAMAGE_REMEDY = "record the run again or use an intact copy"
#: The stored fields (:data:`~flyviz.record.frame.STORED_FIELDS`) kept as per-frame
#: tensors: name -> (dtype, rank). top-k tensors are (frames, k).
_FRAME_TENSORS = {
    "position": ("int64", 1),
    "input_token_id": ("int64", 1),
    "predicted_token_id": ("int64", 1),
    "probability": ("float64", 1),
    "mean_abs_state": ("float64", 1),
    "top_k_ids": ("int32", 2),
    "top_k_probabilities": ("float32", 2),
}
#: A run's exact spikes (format 1.4, :class:`~flyviz.record.spikes.SpikeLog`): tensor name ->
#: dtype; ``spike_frame_end`` has one row per frame, the others one per spike.
SPIKE_TENSORS = {
    "spike_tick": "int64",
    "spike_neuron": "int32",
    "spike_trial": "int32",
    "spike_frame_end": "int64",
}
#: The header key of the length of a spike's tick, ms (a decimal string).
SPIKE_TICK_KEY = "spike_tick_ms"


def _entry_keys() -> tuple[str, ...]:
    """The keys of a frame's JSON entry, in :class:`~flyviz.record.frame.Frame`'s order:
    every stored field that is not a tensor, and the text as ``text_keep`` characters of
    the previous frame's text and the ``text_tail`` that follows them."""
    keys: list[str] = []
    for field in dataclasses.fields(Frame):
        if field.name == "text_so_far":
            keys += ["text_keep", "text_tail"]
        elif field.name in STORED_FIELDS and field.name not in _FRAME_TENSORS:
            keys.append(field.name)
    return tuple(keys)


#: The keys of a frame's JSON entry (``frames`` in the header).
ENTRY_KEYS = _entry_keys()
_VERSION_RE = re.compile(r"^(\d{1,6})(?:\.(\d{1,6}))?$")


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


def state_rows_problem(block: np.ndarray, first: int,
                       crc: np.ndarray | None = None) -> str | None:
    """What is wrong with the state rows ``first:first + len(block)`` of a recording, or ``None``.

    Parameters
    ----------
    block
        The rows, float16 or float32 ``(rows, neurons)``.
    first
        The frame index of the first row (messages name frames by it).
    crc
        Every row's stored CRC-32 (the file's ``state_crc32``), indexed by frame, or
        ``None`` to check finiteness only.

    Returns
    -------
    str or None
        ``"the state of frame N fails its checksum"`` or ``"... holds NaN or inf"``
        for the first bad row.
    """
    if crc is not None:
        bad = np.flatnonzero(_crc_rows(block) != crc[first:first + block.shape[0]])
        if bad.size:
            return f"the state of frame {first + int(bad[0])} fails its checksum"
    bad = _non_finite_rows(block)
    if bad.size:
        return f"the state of frame {first + int(bad[0])} holds NaN or inf"
    return None


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



# ------------------------------------------------------------------- writing
def write_recording(rec: "Recording", path: str | Path) -> Path:
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
    from flyviz.model.safetensors_io import ChunkedTensor, save_safetensors

    path = Path(path)
    n = len(rec)
    tensors, texts = _file_parts(rec)
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
              "flyviz_version": __version__, "neurons": str(rec.neurons),
              "metadata": _metadata_json(rec), "frames": json.dumps(texts)}
    _add_spikes(rec, "", tensors, header)
    baseline = rec.baseline
    if baseline is not None:
        who = "the untouched run's "
        if baseline.neurons != rec.neurons:
            raise RecordingError(f"cannot save the recording: the untouched run has "
                                 f"{baseline.neurons:,} neurons per state, the intervened "
                                 f"one {rec.neurons:,}")
        base_tensors, base_texts = _file_parts(baseline, who)
        _add_spikes(baseline, BASELINE_PREFIX, base_tensors, header, who)
        header[BASELINE_PREFIX + "metadata"] = _metadata_json(baseline, who)
        header[BASELINE_PREFIX + "frames"] = json.dumps(base_texts)
        tensors.update({BASELINE_PREFIX + name: a for name, a in base_tensors.items()})
        # The untouched states are sealed by content_sha256 like any tensor but
        # ``states``, so that a format 1.2 reader, which ignores them, still finds the
        # seal intact. A comparison is short; they are held whole only while writing.
        blocks = list(baseline.state_stream())
        tensors[BASELINE_PREFIX + "states"] = np.concatenate(blocks) if blocks else \
            np.zeros((0, rec.neurons), dtype=baseline.states_dtype)
    state_shape = [n, rec.neurons]
    sealed = {name: (str(a.dtype), [int(s) for s in a.shape], a.tobytes())
              for name, a in tensors.items()}
    sealed["states"] = (rec.states_dtype.name, state_shape, b"")
    header["content_sha256"] = content_digest(header, sealed)
    # The states are written block by block, never joined into one array.
    tensors["states"] = ChunkedTensor(  # type: ignore[assignment]
        rec.states_dtype, (n, rec.neurons), rec.state_stream)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_file_beside(path)
        try:
            save_safetensors(tmp, tensors, header)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise RecordingError(f"cannot write recording {path}: "
                             f"{folder_refusal(exc, path.parent)}") from None
    return path


def _file_parts(rec: "Recording", who: str = ""
                ) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Every per-frame tensor but ``states`` (with ``state_crc32``) and the frames'
    JSON list, as :func:`write_recording` writes them; refuses non-finite states."""
    n = len(rec)
    k = max((len(f.top_k_ids) for f in rec.frame_infos), default=1)
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_probs = np.zeros((n, k), dtype=np.float32)
    for i, f in enumerate(rec.frame_infos):
        top_ids[i, :len(f.top_k_ids)] = f.top_k_ids
        top_probs[i, :len(f.top_k_probabilities)] = f.top_k_probabilities
    crc = np.empty(n, dtype=np.uint32)
    done = 0
    for block in rec.state_stream():
        if _non_finite_rows(block).size:
            raise RecordingError(f"cannot save the recording: {who}frame "
                                 f"{done + int(_non_finite_rows(block)[0])} has a NaN or "
                                 "inf state")
        crc[done:done + block.shape[0]] = _crc_rows(block)
        done += block.shape[0]
    # The number fields, each one tensor; the rest of a frame in its JSON entry (a tuple of
    # top-k texts is written as a JSON list).
    tensors: dict[str, Any] = {
        name: np.array([getattr(f, name) for f in rec.frame_infos], dtype=dtype).reshape(n)
        for name, (dtype, rank) in _FRAME_TENSORS.items() if rank == 1}
    tensors.update(top_k_ids=top_ids, top_k_probabilities=top_probs, state_crc32=crc)
    texts = [{key: getattr(f, key) for key in ENTRY_KEYS} for f in rec.frame_infos]
    return tensors, texts


def _add_spikes(rec: "Recording", prefix: str, tensors: dict[str, Any],
                header: dict[str, str], who: str = "") -> None:
    """Add ``rec``'s spikes (:attr:`~flyviz.record.recording.Recording.spikes`), if it kept
    any, as the :data:`SPIKE_TENSORS` and the :data:`SPIKE_TICK_KEY` header key (under
    ``prefix``): those of its frames; refused when they cover fewer frames than it has."""
    log = rec.spikes
    if log is None:
        return
    n = len(rec)
    if len(log) < n:
        raise RecordingError(f"cannot save the recording: {who}spikes cover {len(log):,} of "
                             f"its {n:,} frames")
    tick, neuron, trial = log.arrays(0, n)
    tensors.update(spike_tick=np.ascontiguousarray(tick),
                   spike_neuron=np.ascontiguousarray(neuron),
                   spike_trial=np.ascontiguousarray(trial),
                   spike_frame_end=np.ascontiguousarray(log.frame_ends()[:n]))
    header[prefix + SPIKE_TICK_KEY] = repr(float(log.tick_ms))


def _metadata_json(rec: "Recording", who: str = "") -> str:
    try:
        return json.dumps(rec.metadata, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RecordingError(f"cannot save the recording: {who}metadata is not plain JSON "
                             f"({exc})") from None


# ------------------------------------------------------------------- reading
def read_recording(path: str | Path, *, cls: "type[Recording]",
                   verify: bool = True) -> "Recording":
    """Open a recording written by :func:`write_recording` (or by flyviz 0.1).

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
    cls
        The :class:`~flyviz.record.recording.Recording` class (or subclass) to
        make (:meth:`Recording.load <flyviz.record.recording.Recording.load>` gives
        its own: the codec sits under the class it fills).

    Raises
    ------
    RecordingError
        If the file is missing, not a recording, from a newer major
        version, truncated, damaged or inconsistent: one line.
    """
    path = Path(path)
    try:
        return _load(cls, path, verify)
    except FlyvizError as exc:
        if isinstance(exc, RecordingError):
            raise
        raise RecordingError(str(exc)) from None
    except MemoryError:
        raise RecordingError(f"{path.name} is too large to open in this much memory") from None
    except OSError as exc:
        raise RecordingError(f"cannot read recording {path}: {exc.strerror or exc}") from None


def recording_file_kind(path: str | Path) -> str | None:
    """What ``path`` is, as a message names it, when it is a recording or an export of one:
    ``"a flyviz recording"`` (a ``.flyrec`` name, or a file of any name whose header says
    it is one), ``"a Zarr store"``, ``"an NWB file"`` or ``"a NumPy archive"``
    (:data:`EXPORTED_KINDS`, by suffix); ``None`` for anything else or nothing there.

    For a command that takes another kind of file (a brain, a table) and should say what
    it was given rather than fail on its content."""
    from flyviz.model.safetensors_io import MAX_HEADER_BYTES

    p = Path(path)
    if not os.path.lexists(p):
        return None
    if p.suffix.lower() == FILE_SUFFIX:
        return "a flyviz recording"
    exported = EXPORTED_KINDS.get(p.suffix.lower())
    if exported is not None:
        return exported
    if not_a_file(p):
        return None     # a folder, or a FIFO that reading would block on
    try:
        with open(p, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else 0
            if not 2 <= length <= MAX_HEADER_BYTES or handle.read(1) != b"{":
                return None     # not a safetensors header: no JSON read for nothing
            header = json.loads(b"{" + handle.read(length - 1))
    except (OSError, ValueError, RecursionError):
        return None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return "a flyviz recording" if isinstance(meta, dict) and \
        meta.get("format") == FORMAT_NAME else None


def _load(cls: "type[Recording]", path: Path, verify: bool) -> "Recording":
    from flyviz.model.safetensors_io import SafetensorsFile

    name = path.name
    exported = EXPORTED_KINDS.get(path.suffix.lower())
    if exported is not None and path.exists():
        # What flyviz convert writes for other tools: it is not read back as a recording.
        raise RecordingError(f"{name} is {exported}, which flyviz convert writes for other "
                             "tools; flyviz reads recordings from .flyrec files only")
    reason = not_a_file(path)
    if reason:
        raise RecordingError(f"cannot read recording {path}: {reason}")
    if not os.access(path, os.R_OK):
        raise RecordingError(f"cannot read recording {path}: permission denied")

    def damaged(problem: str) -> RecordingError:
        return RecordingError(f"{name} is damaged ({problem}); {DAMAGE_REMEDY}")

    # The reader's message already says what is wrong and that it is not a flyviz recording
    # or a damaged one (the remedy), once.
    st = SafetensorsFile(path, error=RecordingError,
                         remedy="it is not a flyviz recording or it is damaged")
    meta = st.raw_metadata
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise RecordingError(f"{name} is not a flyviz recording")
    problem = _coverage_problem(st)
    if problem:
        raise damaged(problem)
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
    if not sealed and ("content_sha256" in meta or "state_crc32" in st.keys()):
        # a 1.0 file has no seal: one that carries it is a later one whose version changed
        raise damaged(f"it claims format {meta['format_version']} but carries the seal of "
                      "a later one")

    # Header fields.
    try:
        neurons = int(meta["neurons"])
    except KeyError as exc:
        raise damaged(f"its header lacks {exc}") from None
    except ValueError:
        # The header parsed; its neuron count is text that is no whole number. A long or
        # odd value is cut short: the line names the field, not the whole of it.
        value = meta["neurons"]
        shown = repr(value if len(value) <= 40 else value[:40] + "...")
        raise damaged(f"its header's neurons {shown} is not a whole number") from None
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

    recordings = [_from_run(cls, run, path, neurons, verify, damaged) for run in runs]
    rec = recordings[0]
    rec.baseline = recordings[1] if len(recordings) > 1 else None
    problem = _comparison_problem(rec)
    if problem:
        raise damaged(problem)
    if "spiking" in rec.metadata or rec.spikes is not None:
        from flyviz.record.spikes import spiking_run_problem

        # Once, here, for every reader (convert, figure, share, export, the app): a spike
        # table its run could not have made is a damaged recording, not a wrong picture.
        problem = spiking_run_problem(rec.metadata, len(rec), rec.spikes,
                                      rec.state if verify else None)
        if problem:
            raise damaged(problem)
    return rec


def _coverage_problem(st: Any) -> str | None:
    """Where a recording's tensors do not cover its bytes exactly, or ``None``: the
    safetensors format has every byte after the header belong to one tensor, and a file
    with bytes between its tensors or after the last (appended to, or a copy that went
    wrong) is not the file that was written."""
    at = st.data_start
    for begin, end in sorted(st.byte_range(t) for t in st.keys()):
        if begin != at:     # overlaps are refused by the reader already
            return f"it holds {begin - at:,} bytes between its tensors, at byte {at:,}"
        at = end
    if at != st.size:
        return f"it holds {st.size - at:,} bytes after its last tensor"
    return None


def _from_run(cls: "type[Recording]", run: "_StoredRun", path: Path, neurons: int, verify: bool,
              damaged: Any) -> "Recording":
    """A recording of one run read by :func:`_read_run`: frames checked, states mapped."""
    from flyviz.record.frame import CHUNK_FRAMES, FrameInfo

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
    except ValueError as exc:
        raise damaged(str(exc)) from None
    # Rebuild the text as edits on a list of characters: applying each frame's change
    # costs what changed, and the whole text is joined only for the anchors.
    chars: list[str] = []
    anchors: list[str] = []
    frames: list[FrameInfo] = []
    for i, t in enumerate(texts):
        problem = _frame_problem(t, len(chars))
        if problem:
            raise damaged(f"{whose}frame {i} {problem}")
        del chars[t["text_keep"]:]
        chars.extend(t["text_tail"])
        if i % CHUNK_FRAMES == 0:
            anchors.append("".join(chars))
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
        frames.append(FrameInfo.of(stored, t["text_keep"], t["text_tail"]))

    # States: mapped, then checked (now, or frame by frame when first read).
    states: np.ndarray | None = None
    crc = arrays.get("state_crc32")
    if n:
        begin, _end = run.states_range
        states = np.memmap(path, dtype=states_dt.newbyteorder("<"), mode="r",
                           offset=begin, shape=(n, neurons))
        if verify:
            _check_file_states(path, begin, n, neurons, states_dt, crc)
    try:
        return cls.from_parts(neurons, run.metadata, states_dtype=run.states_dtype,
                              frames=frames, text_anchors=anchors, stored_states=states,
                              stored_crc=crc, checked=verify, source=path, spikes=run.spikes)
    except ValueError as exc:
        raise damaged(str(exc)) from None


@dataclass
class _StoredRun:
    """One run's header fields and small tensors, read from a file but not yet checked."""

    prefix: str
    metadata: dict[str, Any]
    texts: list[Any]
    arrays: dict[str, np.ndarray]
    states_dtype: str
    states_range: tuple[int, int]
    spikes: "SpikeLog | None" = None

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
    spikes = _read_spikes(st, meta, prefix, n, neurons, damaged)
    return _StoredRun(prefix, metadata, texts, arrays, states_dtype, st.byte_range(states),
                      spikes)


def _read_spikes(st: Any, meta: dict[str, str], prefix: str, n: int, neurons: int,
                 damaged: Any) -> "SpikeLog | None":
    """The run's spikes (format 1.4), checked, or ``None`` when it stored none."""
    from flyviz.record.spikes import SpikeLog

    names = [prefix + name for name in SPIKE_TENSORS]
    present = [name in st for name in names]
    if not any(present) and prefix + SPIKE_TICK_KEY not in meta:
        return None
    its = "the untouched run's" if prefix else "its"
    for name, here in zip(names, present):
        if not here:
            raise damaged(f"it has no {name} tensor")
    arrays = {}
    for (tensor, dtype), name in zip(SPIKE_TENSORS.items(), names):
        array = st.get(name)
        if array.dtype != np.dtype(dtype) or array.ndim != 1:
            raise damaged(f"its {name} tensor is {array.dtype} {list(array.shape)}, "
                          f"expected {dtype} of one dimension")
        arrays[tensor] = np.array(array)
    if arrays["spike_frame_end"].size != n:
        raise damaged(f"its {prefix}spike_frame_end has {arrays['spike_frame_end'].size} "
                      f"rows for {n} frames")
    try:
        tick_ms = float(meta.get(prefix + SPIKE_TICK_KEY, ""))
    except ValueError:
        tick_ms = math.nan
    if not math.isfinite(tick_ms) or tick_ms <= 0:
        raise damaged(f"{its} {SPIKE_TICK_KEY} is not a positive number of ms")
    if arrays["spike_neuron"].size and int(arrays["spike_neuron"].max()) >= neurons:
        raise damaged(f"{its} spikes name a neuron beyond its {neurons:,}")
    try:
        return SpikeLog.from_arrays(arrays["spike_tick"], arrays["spike_neuron"],
                                    arrays["spike_trial"], arrays["spike_frame_end"], tick_ms)
    except ValueError as exc:
        raise damaged(f"{its} spikes are inconsistent ({exc})") from None


def _comparison_problem(rec: "Recording") -> str | None:
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
        modes = " or ".join(repr(mode) for mode in COMPARISON_MODES)
        return f"its comparison is not an object with a mode {modes}"
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
    for key in ENTRY_KEYS:
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


def _check_file_states(path: Path, begin: int, n: int, neurons: int, dtype: np.dtype,
                       crc: np.ndarray | None) -> None:
    """Stream a file's ``n`` state rows through their checks without mapping them.

    The rows are read into one reused buffer, so the process's memory stays
    flat: a 2 GB file is checked with about 8 MB of it resident.
    """
    row_bytes = neurons * dtype.itemsize
    rows = max(1, CHECK_BLOCK_BYTES // row_bytes)
    buffer = bytearray(rows * row_bytes)
    view = memoryview(buffer)
    little = dtype.newbyteorder("<")
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
                                         f"{first + got // row_bytes}); {DAMAGE_REMEDY}")
                got += read
            block = np.frombuffer(buffer, dtype=little, count=count * neurons).reshape(
                count, neurons)
            problem = state_rows_problem(block, first, crc)
            if problem:
                raise RecordingError(f"{path.name} is damaged ({problem}); {DAMAGE_REMEDY}")


__all__ = ["BASELINE_PREFIX", "CHECK_BLOCK_BYTES", "COMPARISON_MODES", "DAMAGE_REMEDY", "ENTRY_KEYS",
           "EXPORTED_KINDS", "FILE_SUFFIX", "FORMAT_MAJOR", "FORMAT_NAME", "FORMAT_VERSION",
           "content_digest", "read_recording", "recording_file_kind", "state_rows_problem",
           "write_recording"]
