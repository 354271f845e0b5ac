"""A run as a sequence of frames, stored compactly, saved to and loaded from one file.

States are kept as float16 in fixed-size chunks (half the bytes of float32,
about 1e-3 relative precision, plenty for display and inspection), so a long
run grows memory by what its frames need and nothing is ever re-copied when it
grows. Everything else per frame is a few numbers and short strings.

File format (``.flyrec``): a safetensors file with the per-frame arrays as
tensors and the strings and run metadata as JSON in the safetensors metadata.
Loading never unpickles anything.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz._version import __version__
from flyviz.model.errors import RecordingError
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame

FORMAT_NAME = "flyviz-recording"
FORMAT_VERSION = 1
FILE_SUFFIX = ".flyrec"
_CHUNK_FRAMES = 64


@dataclass
class _FrameInfo:
    """Everything in a frame but its state."""

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


class Recording:
    """An append-only list of frames for one model.

    Parameters
    ----------
    neurons
        State length every frame must have.
    metadata
        Free-form run description (model name, prompt, settings); saved with
        the recording.
    """

    def __init__(self, neurons: int, metadata: dict[str, Any] | None = None) -> None:
        if neurons <= 0:
            raise ValueError("neurons must be positive")
        self.neurons = int(neurons)
        self.metadata: dict[str, Any] = dict(metadata or {})
        self._infos: list[_FrameInfo] = []
        self._chunks: list[np.ndarray] = []
        # text_so_far grows with the run; storing it whole per frame would make a long
        # run's memory quadratic. Frames store what changed, plus the whole text every
        # _CHUNK_FRAMES frames to rebuild any frame's text quickly.
        self._text_anchors: list[str] = []
        self._last_text = ""

    # ------------------------------------------------------------ container
    def __len__(self) -> int:
        return len(self._infos)

    def __iter__(self) -> Iterator[Frame]:
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: int) -> Frame:
        info = self._infos[index]  # IndexError for out-of-range, negatives allowed
        index = index % len(self._infos)
        return Frame(
            position=info.position, phase=info.phase, input_token_id=info.input_token_id,
            input_text=info.input_text, predicted_token_id=info.predicted_token_id,
            predicted_text=info.predicted_text, probability=info.probability,
            top_k_ids=info.top_k_ids, top_k_probabilities=info.top_k_probabilities,
            top_k_text=info.top_k_text, state=self.state(index),
            mean_abs_state=info.mean_abs_state, text_so_far=self.text_so_far(index),
            generation_index=info.generation_index)

    def append(self, frame: Frame) -> int:
        """Store ``frame`` (its state is converted to float16); return its index."""
        state = np.asarray(frame.state)
        if state.shape != (self.neurons,):
            raise ValueError(f"frame state has shape {state.shape}, expected ({self.neurons},)")
        i = len(self._infos)
        row = i % _CHUNK_FRAMES
        if row == 0:
            self._chunks.append(np.empty((_CHUNK_FRAMES, self.neurons), dtype=np.float16))
        self._chunks[-1][row] = state
        text = str(frame.text_so_far)
        previous = self._last_text
        keep = len(previous) if text.startswith(previous) else \
            len(os.path.commonprefix([previous, text]))
        if row == 0:
            self._text_anchors.append(text)
        self._last_text = text
        self._infos.append(_FrameInfo(
            position=int(frame.position), phase=str(frame.phase),
            input_token_id=int(frame.input_token_id), input_text=str(frame.input_text),
            predicted_token_id=int(frame.predicted_token_id),
            predicted_text=str(frame.predicted_text), probability=float(frame.probability),
            top_k_ids=np.asarray(frame.top_k_ids, dtype=np.int32).copy(),
            top_k_probabilities=np.asarray(frame.top_k_probabilities, dtype=np.float32).copy(),
            top_k_text=tuple(frame.top_k_text), mean_abs_state=float(frame.mean_abs_state),
            text_keep=keep, text_tail=text[keep:], generation_index=frame.generation_index))
        return i

    def clear(self) -> None:
        """Drop every frame (metadata is kept)."""
        self._infos.clear()
        self._chunks.clear()
        self._text_anchors.clear()
        self._last_text = ""

    # --------------------------------------------------------------- access
    def text_so_far(self, index: int) -> str:
        """Decoded continuation up to frame ``index``."""
        n = len(self._infos)
        if not -n <= index < n:
            raise IndexError(f"frame {index} out of range 0..{n - 1}")
        index %= n
        anchor = index - index % _CHUNK_FRAMES
        text = self._text_anchors[anchor // _CHUNK_FRAMES]
        for info in self._infos[anchor + 1:index + 1]:
            text = text[:info.text_keep] + info.text_tail
        return text

    def state(self, index: int) -> np.ndarray:
        """The float32 state of frame ``index`` (a new array)."""
        n = len(self._infos)
        if not -n <= index < n:
            raise IndexError(f"frame {index} out of range 0..{n - 1}")
        index %= n
        return self._chunks[index // _CHUNK_FRAMES][index % _CHUNK_FRAMES].astype(np.float32)

    def neuron_trace(self, neuron: int) -> np.ndarray:
        """Activation of one neuron over every frame, float32 ``(len(self),)``."""
        if not 0 <= neuron < self.neurons:
            raise IndexError(f"neuron {neuron} out of range 0..{self.neurons - 1}")
        n = len(self._infos)
        out = np.empty(n, dtype=np.float32)
        for c, chunk in enumerate(self._chunks):
            start = c * _CHUNK_FRAMES
            rows = min(_CHUNK_FRAMES, n - start)
            out[start:start + rows] = chunk[:rows, neuron]
        return out

    def states(self, neurons: np.ndarray | None = None, start: int = 0,
               stop: int | None = None) -> np.ndarray:
        """States of frames ``start:stop`` (optionally a subset of neurons), float32."""
        stop = len(self) if stop is None else min(stop, len(self))
        start = max(0, start)
        cols = slice(None) if neurons is None else np.asarray(neurons)
        width = self.neurons if neurons is None else len(cols)
        out = np.empty((max(0, stop - start), width), dtype=np.float32)
        for i in range(start, stop):
            out[i - start] = self._chunks[i // _CHUNK_FRAMES][i % _CHUNK_FRAMES][cols]
        return out

    @property
    def mean_abs_states(self) -> np.ndarray:
        """Mean |h| of every frame."""
        return np.array([f.mean_abs_state for f in self._infos], dtype=np.float32)

    @property
    def top1_probabilities(self) -> np.ndarray:
        """Top-1 probability of every frame."""
        return np.array([float(f.top_k_probabilities[0]) for f in self._infos], dtype=np.float32)

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
        """Bytes held by the stored states."""
        return sum(chunk.nbytes for chunk in self._chunks)

    # ------------------------------------------------------------- file I/O
    def save(self, path: str | Path) -> Path:
        """Write the recording to ``path`` atomically (a temporary file, then a rename)."""
        from safetensors.numpy import save as st_save

        path = Path(path)
        n = len(self)
        k = max((len(f.top_k_ids) for f in self._infos), default=1)
        top_ids = np.full((n, k), -1, dtype=np.int32)
        top_probs = np.zeros((n, k), dtype=np.float32)
        for i, f in enumerate(self._infos):
            top_ids[i, :len(f.top_k_ids)] = f.top_k_ids
            top_probs[i, :len(f.top_k_probabilities)] = f.top_k_probabilities
        tensors = {
            "states": self.states_f16(),
            "position": np.array([f.position for f in self._infos], dtype=np.int64).reshape(n),
            "input_token_id": np.array([f.input_token_id for f in self._infos], dtype=np.int64).reshape(n),
            "predicted_token_id": np.array([f.predicted_token_id for f in self._infos],
                                           dtype=np.int64).reshape(n),
            "probability": np.array([f.probability for f in self._infos], dtype=np.float64).reshape(n),
            "mean_abs_state": np.array([f.mean_abs_state for f in self._infos],
                                       dtype=np.float64).reshape(n),
            "top_k_ids": top_ids,
            "top_k_probabilities": top_probs,
        }
        texts = [{"phase": f.phase, "input_text": f.input_text, "predicted_text": f.predicted_text,
                  "top_k_text": list(f.top_k_text), "text_keep": f.text_keep,
                  "text_tail": f.text_tail, "generation_index": f.generation_index}
                 for f in self._infos]
        header = {"format": FORMAT_NAME, "format_version": str(FORMAT_VERSION),
                  "flyviz_version": __version__, "neurons": str(self.neurons),
                  "metadata": json.dumps(self.metadata), "frames": json.dumps(texts)}
        data = st_save(tensors, metadata=header)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise RecordingError(f"cannot write recording {path}: {exc.strerror or exc}") from None
        return path

    def states_f16(self) -> np.ndarray:
        """All states as one ``(frames, neurons)`` float16 array (a copy)."""
        n = len(self)
        out = np.empty((n, self.neurons), dtype=np.float16)
        for c, chunk in enumerate(self._chunks):
            start = c * _CHUNK_FRAMES
            rows = min(_CHUNK_FRAMES, n - start)
            out[start:start + rows] = chunk[:rows]
        return out

    @classmethod
    def load(cls, path: str | Path) -> "Recording":
        """Read a recording written by :meth:`save`.

        Raises
        ------
        RecordingError
            If the file is missing, not a recording, truncated or inconsistent.
        """
        from safetensors import SafetensorError
        from safetensors.numpy import load as st_load

        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RecordingError(f"cannot read recording {path}: {exc.strerror or exc}") from None
        try:
            tensors = st_load(raw)
            header_len = int.from_bytes(raw[:8], "little")
            header = json.loads(raw[8:8 + header_len])
            meta = header.get("__metadata__", {})
        except (SafetensorError, ValueError, UnicodeDecodeError) as exc:
            raise RecordingError(f"{path} is not a flyviz recording or is damaged "
                                 f"({str(exc).splitlines()[0]})") from None
        if meta.get("format") != FORMAT_NAME:
            raise RecordingError(f"{path} is not a flyviz recording")
        if int(meta.get("format_version", "0")) > FORMAT_VERSION:
            raise RecordingError(f"{path} was written by a newer flyviz; upgrade to open it")
        try:
            neurons = int(meta["neurons"])
            metadata = json.loads(meta.get("metadata", "{}"))
            texts = json.loads(meta["frames"])
            states = tensors["states"]
            n = len(texts)
            arrays = {name: tensors[name] for name in (
                "position", "input_token_id", "predicted_token_id", "probability",
                "mean_abs_state", "top_k_ids", "top_k_probabilities")}
        except (KeyError, ValueError, TypeError) as exc:
            raise RecordingError(f"{path} is an incomplete recording (missing {exc})") from None
        if states.shape != (n, neurons) or any(a.shape[0] != n for a in arrays.values()):
            raise RecordingError(f"{path} is inconsistent: {n} frames but states of shape "
                                 f"{list(states.shape)}")
        rec = cls(neurons, metadata)
        text = ""
        for i, t in enumerate(texts):
            try:
                text = text[:int(t["text_keep"])] + str(t["text_tail"])
            except (KeyError, TypeError, ValueError):
                raise RecordingError(f"{path} is an incomplete recording (frame {i} has no text)") \
                    from None
            ids = arrays["top_k_ids"][i]
            valid = ids >= 0
            rec.append(Frame(
                position=int(arrays["position"][i]), phase=str(t["phase"]),
                input_token_id=int(arrays["input_token_id"][i]), input_text=str(t["input_text"]),
                predicted_token_id=int(arrays["predicted_token_id"][i]),
                predicted_text=str(t["predicted_text"]),
                probability=float(arrays["probability"][i]),
                top_k_ids=ids[valid], top_k_probabilities=arrays["top_k_probabilities"][i][valid],
                top_k_text=tuple(t["top_k_text"]), state=states[i],
                mean_abs_state=float(arrays["mean_abs_state"][i]),
                text_so_far=text, generation_index=t["generation_index"]))
        return rec
