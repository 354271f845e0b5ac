"""The source of ``flyviz_rate``, a kind of model that lives outside flyviz (the third-kind
test writes it under its ``tmp_path`` as a distribution of its own).

A rate model on flyviz's demo graph: ``x_t = tanh(gain · W x_{t-1} + input)``, with ``W``
the demo brain's signed weights and ``input`` a constant drive into the neurons of the
dorsal part of the brain, drawn at the demo brain's somas, with a colour layer of its own
(each neuron's change since the step before). A model is a folder (``rate.json`` and
``graph.npz``), which :func:`write_model` makes from a checkpoint.

``ASKED`` lists every place in flyviz, outside ``flyviz.kinds``, that read the kind's key,
compared it, asked for a side channel by name or for an attribute it does not have: a host
that asks which kind it has. With ``FLYVIZ_RATE_STRICT`` set (a subprocess), asking raises.
"""

SOURCE = r'''
"""flyviz_rate: a rate model on flyviz's demo graph, a kind of model from outside flyviz."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from flyviz.errors import InputError
from flyviz.kinds import ModelKind, TimeAxis, Wiring, state_frame
from flyviz.model.checkpoint import Anatomy
from flyviz.render.style import ColourLayer, ColourScale
from flyviz.viewer.layers import LayerKind

#: What a model folder's rate.json says it is.
FORMAT = "flyviz-rate-model"
#: The kind's own colour layer.
CHANGE = "rate:change"
#: Where flyviz asked which kind it has (module:line).
ASKED: list[str] = []


def _asked(depth: int, what: str) -> None:
    frame = sys._getframe(depth + 1)
    module = str(frame.f_globals.get("__name__", ""))
    if module.startswith("flyviz.") and not module.startswith("flyviz.kinds"):
        where = f"{module}:{frame.f_lineno} {what}"
        ASKED.append(where)
        if os.environ.get("FLYVIZ_RATE_STRICT"):
            raise AssertionError(f"flyviz asked which kind it has: {where}")


class _Key:
    """The kind's key, noting who reads it."""

    def __get__(self, obj: Any, owner: Any = None) -> str:
        _asked(1, "read the kind's key")
        return "rate"


def write_model(folder: Any, checkpoint: Any, gain: float = 0.02) -> Path:
    """A rate model folder of ``checkpoint``'s graph (its CSR weights) and anatomy."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    a = checkpoint.anatomy
    np.savez(folder / "graph.npz", offsets=np.asarray(checkpoint.w_offsets, np.int64),
             indices=np.asarray(checkpoint.w_indices, np.int32),
             weights=np.asarray(checkpoint.w_values, np.float32),
             positions=np.asarray(a.positions, np.float32), valid=np.asarray(a.valid, bool),
             body_id=np.asarray(a.body_id, np.int64), superclass=np.asarray(a.superclass),
             side=np.asarray(a.side), cell_type=np.asarray(a.cell_type))
    (folder / "rate.json").write_text(json.dumps({"format": FORMAT, "gain": gain,
                                                  "name": "rate model (demo graph)"}))
    return folder


class RateModel:
    """A rate model loaded from its folder."""

    kind: ClassVar["RateKind"]

    def __init__(self, folder: Any) -> None:
        import scipy.sparse

        folder = Path(folder)
        try:
            info = json.loads((folder / "rate.json").read_text())
        except (OSError, ValueError):
            raise InputError(f"{folder} is not a rate model (no readable rate.json)") from None
        if info.get("format") != FORMAT:
            raise InputError(f"{folder} is not a rate model")
        self.spec, self.name, self.gain = str(folder), str(info["name"]), float(info["gain"])
        with np.load(folder / "graph.npz", allow_pickle=False) as g:
            n = g["offsets"].size - 1
            self.w = scipy.sparse.csr_matrix(
                (g["weights"] * np.float32(self.gain), g["indices"], g["offsets"]), shape=(n, n))
            self.anatomy = Anatomy(positions=g["positions"], valid=g["valid"], kind="synthetic",
                                   body_id=g["body_id"],
                                   superclass=[str(s) for s in g["superclass"]],
                                   side=[str(s) for s in g["side"]],
                                   cell_type=[str(s) for s in g["cell_type"]])
        self.neurons = n

    def drawing_anatomy(self) -> Anatomy:
        return self.anatomy

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Drive:
    """What a run is given: ``strength`` into the neurons of the top ``dorsal`` share of the
    brain (by soma height)."""

    dorsal: float = 0.5
    strength: float = 3.0

    def driven(self, model: RateModel) -> np.ndarray:
        height = model.anatomy.positions_um()[:, 1]          # dorsal up
        valid = model.anatomy.valid
        cut = np.quantile(height[valid], 1.0 - self.dorsal)
        return valid & (height >= cut)


@dataclass(frozen=True)
class Steps:
    steps: int = 12


def change(recording: Any, index: int) -> np.ndarray:
    """Each neuron's change since the step before (``None`` before the first step: a
    layer's values where the recording has no such frame, as ColourLayer.values says)."""
    if not 0 <= index < len(recording):
        return None
    now = recording.state(index).astype(np.float32)
    return now - (recording.state(index - 1).astype(np.float32) if index > 0 else 0.0)


def change_layer() -> ColourLayer:
    return ColourLayer(name=CHANGE, colormap="difference", label="\u0394x since the step before",
                       scale=ColourScale.auto(), source=change)


class RateKind(ModelKind):
    """x_t = tanh(gain W x_{t-1} + input), one frame a step."""

    key = _Key()                                            # type: ignore[assignment]
    title: ClassVar[str] = "rate model"
    time_axis: ClassVar[TimeAxis] = TimeAxis("step", "step")
    state_label: ClassVar[str] = "x"

    def load(self, spec: str, **options: Any) -> RateModel:
        return RateModel(spec)

    def model_spec(self, recording: Any) -> tuple[str | None, dict[str, Any]]:
        meta = recording.metadata.get("rate")
        spec = meta.get("model") if isinstance(meta, dict) else None
        return (spec if isinstance(spec, str) else None), {}

    def wiring(self, model: RateModel) -> Wiring:
        return Wiring(model.neurons, model.w.indptr, model.w.indices, model.w.data)

    def run_settings(self, run: Any = None, **options: Any) -> Steps:
        return Steps(**options)

    def frames(self, model: Any, request: Any, settings: Any = None, *, interventions: Any = (),
               recording: Any = None):
        if interventions:
            raise InputError("a rate model's run takes no interventions")
        drive = request if isinstance(request, Drive) else Drive()
        steps = (settings if isinstance(settings, Steps) else Steps()).steps
        given = np.where(drive.driven(model), np.float32(drive.strength), np.float32(0.0))
        x = np.zeros(model.neurons, np.float32)
        if recording is not None:
            recording.metadata.update({"kind": "rate", "model_name": model.name,
                                       "rate": {"model": model.spec, "steps": steps,
                                                "dorsal": drive.dorsal,
                                                "strength": drive.strength}})
        for t in range(steps):
            x = np.tanh(model.w @ x + given).astype(np.float32)
            frame = state_frame(t, x)
            if recording is not None:
                recording.append(frame)
            yield frame

    def colour_layers(self) -> tuple[LayerKind, ...]:
        return (LayerKind(CHANGE, "Rate model: &change", "Each neuron's change since the "
                          "step before", change_layer),)

    # Asking which kind this is, from flyviz outside its kinds, is noted.
    def has(self, channel: str) -> bool:
        _asked(1, f"asked for the side channel {channel!r}")
        return False

    def __eq__(self, other: object) -> bool:
        _asked(1, "compared the kind")
        return other is self

    __hash__ = ModelKind.__hash__

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("__"):
            _asked(1, f"looked for {name!r}")
        raise AttributeError(name)


RATE = RateKind()
RateModel.kind = RATE
'''
