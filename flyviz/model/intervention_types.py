"""The intervention types: plain frozen objects, their text forms and their resolved form.

What :mod:`flyviz.model.interventions` documents (the exact step) and re-exports:
:class:`Silence`, :class:`Clamp`, :class:`Stimulate`, :class:`Cut` and :class:`Scale`
(and :class:`InterventionBase`, which :class:`flyviz.model.patching.Patch` builds on),
their command-line and text forms (:func:`parse_intervention`,
:func:`intervention_from_text`, :func:`as_interventions`), and the resolved form any
engine applies (:class:`ResolvedInterventions` of :class:`StateSet`, :class:`PreAdd`,
:class:`GraphEdit` and :class:`StatePatch`).

This module imports no other part of the model but its errors: not the checkpoint, the
selections, the engine or patching. Resolving interventions for a checkpoint
(:func:`flyviz.model.interventions.resolve`) and patching (:mod:`flyviz.model.patching`)
build on it, and the engine on both, so that no import runs in a circle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np

from flyviz.model.errors import InputError

#: A selection: a query string, or neuron indices.
Target = Union[str, Sequence[int], np.ndarray]

KINDS = ("silence", "clamp", "stimulate", "cut", "scale")
#: The selection fields and what they are called in messages.
_ROLES = {"neurons": "neurons", "pre": "presynaptic neurons", "post": "postsynaptic neurons"}


def check_target(value: Any, what: str) -> "str | tuple[int, ...]":
    """A query string (stripped) or a tuple of neuron indices, checked for form only.

    Parameters
    ----------
    value
        What an intervention was given as its neurons (a :data:`Target`).
    what
        How messages name it (``"the neurons to silence"``).

    Raises
    ------
    InputError
        For an empty query, an empty or negative list of indices, or anything else.
    """
    if isinstance(value, str):
        if not value.strip():
            raise InputError(f"{what} is empty: give a query such as 'superclass:cb_sensory'")
        return value.strip()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError):  # not array-like, ragged, or too large
        array = None
    if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InputError(f"{what} must be a query string or a list of neuron indices")
    if array.size == 0:
        raise InputError(f"{what} selects no neurons (an empty list of indices)")
    if int(array.min()) < 0:
        raise InputError(f"{what} holds the negative neuron index {int(array.min())}")
    return tuple(int(i) for i in array)


def _window(start: Any, stop: Any) -> tuple[int | None, int | None]:
    out: list[int | None] = []
    for name, value in (("start", start), ("stop", stop)):
        if value is None:
            out.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"token window {name} must be a whole number, not {value!r}")
        if value < 0:
            raise InputError(f"token window {name} {value} is negative; positions count from "
                             "0 (BOS)")
        out.append(int(value))
    if out[0] is not None and out[1] is not None and out[1] <= out[0]:
        raise InputError(f"token window @{out[0]}:{out[1]} holds no token; "
                         "TO must be greater than FROM")
    return out[0], out[1]


def init_window(item: Any) -> None:
    """Check a frozen intervention's token window (``item.start``, ``item.stop``) and store
    it as plain ints (``None`` for an open end).

    Raises
    ------
    InputError
        For a bound that is not a whole number >= 0, or an empty window.
    """
    start, stop = _window(item.start, item.stop)
    object.__setattr__(item, "start", start)
    object.__setattr__(item, "stop", stop)


def _finite(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise InputError(f"{what} {value!r} must be a finite number")
    if abs(number) > _FLOAT32_MAX:  # the engine computes in float32: it would be inf there
        raise InputError(f"{what} {value!r} is too large: the engine computes in float32, "
                         f"where numbers end at about {_FLOAT32_MAX:.3g}")
    return number


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def target_text(target: "str | tuple[int, ...]") -> str:
    """A query string for a target as :func:`check_target` returns it: the query itself, or
    indices as a compact ``id:`` list (``id:3,7-9``)."""
    if isinstance(target, str):
        return target
    ids = np.unique(np.asarray(target, dtype=np.int64))
    parts = []
    breaks = np.flatnonzero(np.diff(ids) != 1)
    for lo, hi in zip(np.r_[0, breaks + 1], np.r_[breaks, ids.size - 1]):
        a, b = int(ids[lo]), int(ids[hi])
        parts.append(str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}")
    return "id:" + ",".join(parts)


class InterventionBase:
    """What every intervention shares: a kind, a token window, text and JSON forms.

    The base of :class:`Silence`, :class:`Clamp`, :class:`Stimulate`, :class:`Cut`,
    :class:`Scale` and :class:`flyviz.model.patching.Patch`; a subclass is a frozen
    dataclass naming its fields in ``_json_fields``.
    """

    kind: ClassVar[str]
    start: int | None
    stop: int | None

    def active(self, position: int) -> bool:
        """True when the step at ``position`` (0 is BOS) lies in the token window."""
        return _in_window(self, position)

    def steps_in(self, steps: int) -> int:
        """How many of the positions ``0..steps-1`` lie in the window."""
        lo = self.start or 0
        hi = steps if self.stop is None else min(self.stop, steps)
        return max(0, hi - lo)

    @property
    def window_text(self) -> str:
        """``@FROM:TO`` (empty without a window)."""
        if self.start is None and self.stop is None:
            return ""
        start = "" if self.start is None else self.start
        stop = "" if self.stop is None else self.stop
        return f"@{start}:{stop}"

    def __post_init__(self) -> None:
        # Normalise the fields in place (the dataclasses are frozen): selections to a query
        # string or a tuple of indices, numbers to finite floats, the window to ints.
        for name in self._json_fields:
            value = getattr(self, name)
            if name in _ROLES:
                value = check_target(value, f"the {_ROLES[name]} to {self.kind}")
            else:
                value = _finite(value, f"{self.kind} {name}")
            object.__setattr__(self, name, value)
        self._check()
        init_window(self)

    def _check(self) -> None:
        """Checks of one kind beyond the field types (none by default)."""

    def cli_value(self) -> str:
        """The option value ``--KIND`` takes: ``QUERY``, ``QUERY=VALUE``,
        ``QUERY->QUERY`` or ``QUERY->QUERY=FACTOR``, then ``@FROM:TO`` if windowed."""
        fields = self._json_fields
        targets = "->".join(target_text(getattr(self, n)) for n in fields if n in _ROLES)
        numbers = "".join(f"={getattr(self, n):g}" for n in fields if n not in _ROLES)
        return targets + numbers + self.window_text

    def __str__(self) -> str:
        return f"{self.kind} {self.cli_value()}"

    def to_json(self) -> dict[str, Any]:
        """The JSON form (see :func:`to_json`)."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in self._json_fields:
            value = getattr(self, name)
            out[name] = value if isinstance(value, (str, float)) else list(value)
        if self.start is not None:
            out["from"] = self.start
        if self.stop is not None:
            out["to"] = self.stop
        return out

    _json_fields: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class Silence(InterventionBase):
    """After every step (in the window), the neurons' state is 0.

    Parameters
    ----------
    neurons
        Query string or neuron indices.
    start, stop
        Token window (positions, half-open); ``None`` for no bound.
    """

    neurons: Target
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "silence"
    _json_fields: ClassVar[tuple[str, ...]] = ("neurons",)


@dataclass(frozen=True)
class Clamp(InterventionBase):
    """After every step (in the window), the neurons' state is ``value`` (``|value| < 1``)."""

    neurons: Target
    value: float
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "clamp"
    _json_fields: ClassVar[tuple[str, ...]] = ("neurons", "value")

    def _check(self) -> None:
        if not abs(self.value) < 1.0:
            raise InputError(f"clamp value {self.value:g} is outside (-1, 1), the range a "
                             "neuron's state can take")


@dataclass(frozen=True)
class Stimulate(InterventionBase):
    """Every step (in the window), ``amount`` is added to the neurons' input before the tanh."""

    neurons: Target
    amount: float
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "stimulate"
    _json_fields: ClassVar[tuple[str, ...]] = ("neurons", "amount")


@dataclass(frozen=True)
class Cut(InterventionBase):
    """Every synapse from a neuron in ``pre`` onto a neuron in ``post`` is removed."""

    pre: Target
    post: Target
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "cut"
    _json_fields: ClassVar[tuple[str, ...]] = ("pre", "post")
    factor: ClassVar[float] = 0.0


@dataclass(frozen=True)
class Scale(InterventionBase):
    """Every synapse from a neuron in ``pre`` onto a neuron in ``post`` is multiplied by
    ``factor``."""

    pre: Target
    post: Target
    factor: float
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "scale"
    _json_fields: ClassVar[tuple[str, ...]] = ("pre", "post", "factor")


Intervention = Union[Silence, Clamp, Stimulate, Cut, Scale]
_CLASSES: dict[str, type[Intervention]] = {c.kind: c for c in (Silence, Clamp, Stimulate, Cut, Scale)}


# ------------------------------------------------------------ command line
_WINDOW = re.compile(r"@\s*(\d*)\s*:\s*(\d*)\s*$")


def split_window(text: str, option: str) -> tuple[str, int | None, int | None]:
    """``QUERY...@FROM:TO`` split into the rest and its half-open token window (``None``
    for an end left out, or for no window); a malformed window is one line naming ``option``."""
    body = str(text).strip()
    if "@" not in body:
        return body, None, None
    match = _WINDOW.search(body)
    if match is None:
        raise InputError(f"{option}: the token window must look like @FROM:TO, e.g. @10:20, "
                         "@10: or @:5")
    start = int(match.group(1)) if match.group(1) else None
    stop = int(match.group(2)) if match.group(2) else None
    return body[:match.start()].strip(), start, stop


def parse_intervention(kind: str, text: str) -> Intervention:
    """An intervention from its command-line form.

    ``silence``: ``QUERY``; ``clamp`` and ``stimulate``: ``QUERY=VALUE``;
    ``cut``: ``QUERY->QUERY``; ``scale``: ``QUERY->QUERY=FACTOR``; each may
    end in a token window ``@FROM:TO`` (half-open, either end may be left out).

    Raises
    ------
    InputError
        With one line naming the option and what is wrong.
    """
    if kind not in _CLASSES:
        raise InputError(f"unknown intervention {kind!r}; expected one of {', '.join(KINDS)}")
    option = f"--{kind} {text!r}"
    body, start, stop = split_window(text, option)
    number = 0.0  # silence and cut take no value
    if kind != "silence" and kind != "cut":
        query, eq, value = body.rpartition("=")
        if not eq:
            form = "QUERY->QUERY=FACTOR" if kind == "scale" else "QUERY=VALUE"
            raise InputError(f"{option} must look like {form}, e.g. "
                             f"{_CLI_EXAMPLES[kind]}")
        number = _finite(value.strip(), f"{option}:")
        body = query.strip()
    elif "=" in body:
        raise InputError(f"{option} takes no value; e.g. {_CLI_EXAMPLES[kind]}")
    try:
        if kind in ("cut", "scale"):
            parts = body.split("->")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                raise InputError(f"{option} must name two selections as PRE->POST, e.g. "
                                 f"{_CLI_EXAMPLES[kind]}")
            pre, post = parts[0].strip(), parts[1].strip()
            if kind == "cut":
                return Cut(pre, post, start, stop)
            return Scale(pre, post, number, start, stop)
        if "->" in body:
            raise InputError(f"{option}: '->' belongs to --cut and --scale; give one selection")
        if kind == "silence":
            return Silence(body, start, stop)
        if kind == "clamp":
            return Clamp(body, number, start, stop)
        return Stimulate(body, number, start, stop)
    except InputError as exc:
        if str(exc).startswith(option):
            raise
        raise InputError(f"{option}: {exc}") from None


def intervention_from_text(text: str) -> Intervention:
    """An intervention from its text form: ``"KIND VALUE"``, what ``str()`` of one gives.

    ``KIND`` may be written as the option (``--silence``) and joined to the
    value by ``=`` (``"--silence=sign:inhibitory"``), so that a command line's
    option can be pasted as it is. Examples: ``"silence sign:inhibitory@10:"``,
    ``"clamp type:KC*=0.5"``, ``"--cut superclass:visual_projection->all"``.

    Raises
    ------
    InputError
        When the kind is unknown or the value malformed (see
        :func:`parse_intervention`).
    """
    body = str(text).strip()
    kind, _, value = body.partition(" ")
    word = kind.lstrip("-")
    if "=" in word and word.split("=", 1)[0] in _CLASSES:  # --clamp=type:KC*=0.5
        word, _, head = word.partition("=")
        value = head + (" " + value if value else "")
    if word not in _CLASSES:
        raise InputError(f"{body!r} is not an intervention; write KIND VALUE with KIND one of "
                         f"{', '.join(KINDS)}, e.g. 'silence sign:inhibitory@10:'")
    return parse_intervention(word, value)


def as_interventions(items: Any) -> "tuple[Intervention, ...] | ResolvedInterventions":
    """Interventions given in any of the forms the library accepts, as objects.

    Parameters
    ----------
    items
        ``None``; a :class:`ResolvedInterventions` (returned as is); or a
        sequence whose items are intervention objects (:class:`Silence`,
        :class:`Clamp`, :class:`Stimulate`, :class:`Cut`, :class:`Scale`),
        text forms (:func:`intervention_from_text`) or ``(kind, value)``
        pairs of the command-line options (:func:`parse_intervention`). A
        single object or string counts as a sequence of one.

    Raises
    ------
    InputError
        For anything else, or a malformed text form.
    """
    kinds = InterventionBase  # the five kinds here, and a Patch (flyviz.model.patching)
    if items is None:
        return ()
    if isinstance(items, ResolvedInterventions):
        return items
    if isinstance(items, kinds):
        return (items,)  # type: ignore[return-value]  # a Patch is an intervention too
    if isinstance(items, str):
        items = (items,)
    if isinstance(items, (bytes, dict)) or not isinstance(items, Iterable):
        # 42 would fail as "'int' object is not iterable", naming nothing the caller wrote
        raise InputError(f"interventions must be a list of interventions (Silence, Clamp, "
                         f"Stimulate, Cut or Scale objects, or their text), not "
                         f"{type(items).__name__}")
    out: list[Intervention] = []
    for item in items:
        if isinstance(item, str):
            out.append(intervention_from_text(item))
        elif isinstance(item, tuple) and len(item) == 2 and all(isinstance(v, str) for v in item):
            out.append(parse_intervention(*item))
        elif isinstance(item, kinds):
            out.append(item)  # type: ignore[arg-type]  # a Patch is an intervention too
        else:
            raise InputError(f"{item!r} is not an intervention: give Silence, Clamp, Stimulate, "
                             "Cut or Scale objects, or text such as 'silence sign:inhibitory'")
    return tuple(out)


_CLI_EXAMPLES = {"silence": "--silence 'sign:inhibitory@10:20'",
                 "clamp": "--clamp 'type:KC*=0.5'",
                 "stimulate": "--stimulate 'input=0.8@10:15'",
                 "cut": "--cut 'superclass:cb_sensory->all'",
                 "scale": "--scale 'superclass:visual_projection->superclass:cb_intrinsic=0.5'"}



# ------------------------------------------------------------------- JSON
def plain_from_json(item: Any, number: int = 0) -> Intervention:
    """A silence, clamp, stimulation, cut or scale from its JSON form (see
    :func:`flyviz.model.interventions.to_json`; extra keys, such as counts, are ignored).

    Parameters
    ----------
    item
        One object of the JSON list.
    number
        Its 0-based place in the list, for messages.

    Raises
    ------
    InputError
        When it is not an object with a known ``kind`` and that kind's fields.
    """
    if not isinstance(item, dict) or item.get("kind") not in _CLASSES:
        raise InputError(f"intervention {number + 1} has no valid 'kind' (one of "
                         f"{', '.join(KINDS)})")
    cls = _CLASSES[item["kind"]]
    names = cls._json_fields
    missing = [n for n in names if n not in item]
    if missing:
        raise InputError(f"intervention {number + 1} ({item['kind']}) lacks {missing[0]!r}")
    values = [item[n] for n in names] + [item.get("from"), item.get("to")]
    return cls(*values)


# --------------------------------------------------------------- resolved
@dataclass(frozen=True)
class StateSet:
    """After a step in ``[start, stop)``: ``x[indices] = value`` (a silence is value 0)."""

    indices: np.ndarray
    value: float
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class PreAdd:
    """At a step in ``[start, stop)``: ``pre[indices] += amount`` before gain and bias."""

    indices: np.ndarray
    amount: float
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class GraphEdit:
    """At a step in ``[start, stop)``: the synapses ``edges`` (positions in the CSR arrays:
    every synapse from a neuron in ``pre`` onto one in ``post``) are multiplied by
    ``factor`` (0 for a cut)."""

    pre: np.ndarray
    post: np.ndarray
    edges: np.ndarray
    factor: float
    start: int | None
    stop: int | None


@dataclass(frozen=True)
class StatePatch:
    """After a step in ``[start, stop)``: ``x[indices] = values[position + shift]`` where the
    source has that row (the resolved form of a :class:`~flyviz.model.patching.Patch`)."""

    indices: np.ndarray
    values: np.ndarray
    shift: int
    start: int | None
    stop: int | None

    def values_at(self, position: int) -> np.ndarray | None:
        """The source values of the patched neurons at ``position``, or ``None`` where the
        source has no state."""
        row = position + self.shift
        if 0 <= row < self.values.shape[0]:
            return self.values[row]
        return None


def _in_window(op: Any, position: int) -> bool:
    return (op.start is None or position >= op.start) and (op.stop is None or position < op.stop)


@dataclass(frozen=True)
class ResolvedInterventions:
    """Interventions turned into index arrays for one checkpoint, in the form any engine
    can apply (:mod:`flyviz.model.interventions` gives the exact step).

    Attributes
    ----------
    interventions
        What was asked for, in order.
    post_state
        The silences and clamps, in order (the later wins on a shared neuron),
        and the patches among them (:class:`StatePatch`: their values change
        with the position).
    pre_add
        The stimulations.
    graph_edits
        The cuts and scales, in order (they multiply on a shared synapse).
    selected
        Per intervention: neurons selected (silence, clamp, stimulate) or
        synapses touched (cut, scale).
    """

    interventions: tuple[Intervention, ...] = ()
    post_state: tuple[StateSet, ...] = ()
    pre_add: tuple[PreAdd, ...] = ()
    graph_edits: tuple[GraphEdit, ...] = ()
    selected: tuple[int, ...] = ()
    neurons: int = 0

    def __bool__(self) -> bool:
        return bool(self.interventions)

    def __len__(self) -> int:
        return len(self.interventions)

    def checked_for(self, neurons: int) -> "ResolvedInterventions":
        """These interventions, if they were resolved for a model of ``neurons`` neurons.

        Raises
        ------
        InputError
            When they were resolved for another model (an empty set fits any).
        """
        if self.interventions and self.neurons != neurons:
            raise InputError("these interventions were resolved for another model")
        return self

    def active_state_sets(self, position: int) -> list[StateSet]:
        """The silences and clamps acting after the step at ``position``."""
        return [op for op in self.post_state if _in_window(op, position)]

    def graph_key(self, position: int) -> tuple[int, ...]:
        """Indices into :attr:`graph_edits` of the cuts/scales active at ``position``."""
        return tuple(i for i, op in enumerate(self.graph_edits) if _in_window(op, position))

    def graph_keys(self) -> list[tuple[int, ...]]:
        """Every distinct non-empty combination of active cuts/scales over all positions."""
        if not self.graph_edits:
            return []
        bounds = {0}
        for op in self.graph_edits:
            bounds.update(b for b in (op.start, op.stop) if b is not None)
        keys = dict.fromkeys(self.graph_key(b) for b in sorted(bounds))
        return [k for k in keys if k]

    def edited_values(self, values: np.ndarray, key: tuple[int, ...]) -> np.ndarray:
        """A float32 copy of the CSR weights ``values`` with the edits ``key`` applied."""
        out = np.array(values, dtype=np.float32, copy=True)
        for i in key:
            op = self.graph_edits[i]
            if op.factor == 0.0:
                out[op.edges] = 0.0
            else:
                out[op.edges] *= np.float32(op.factor)
        return out

    def to_json(self, steps: int | None = None) -> list[dict[str, Any]]:
        """The JSON form with what each selected (``"neurons_selected"``, or
        ``"synapses"`` for a cut or scale) and, given a run's length, ``"steps"``:
        on how many of its steps each acted."""
        out = []
        for iv, count in zip(self.interventions, self.selected):
            item = iv.to_json()
            item["synapses" if iv.kind in ("cut", "scale") else "neurons_selected"] = count
            if steps is not None:
                item["steps"] = iv.steps_in(steps)
            out.append(item)
        return out


__all__ = ["KINDS", "Clamp", "Cut", "GraphEdit", "Intervention", "InterventionBase", "PreAdd",
           "ResolvedInterventions", "Scale", "Silence", "StatePatch", "StateSet", "Stimulate",
           "Target", "as_interventions", "check_target", "init_window", "intervention_from_text",
           "parse_intervention", "plain_from_json", "split_window", "target_text"]
