"""Interventions: silence, clamp, stimulate or cut any part of the brain.

Each intervention is a small frozen dataclass naming its neurons by a query
string (:mod:`flyviz.model.selection`) or by an explicit sequence of neuron
indices, with an optional token window:

``Silence(neurons)``
    after every step, ``x[S] = 0``;
``Clamp(neurons, value)``
    after every step, ``x[S] = value`` (``|value| < 1``, the range a state can
    reach);
``Stimulate(neurons, amount)``
    every step, ``pre[S] += amount`` before the tanh;
``Cut(pre, post)``
    every synapse from a neuron in ``pre`` onto a neuron in ``post`` removed;
``Scale(pre, post, factor)``
    those synapses multiplied by ``factor``.

Exact semantics, on the step of fly-formats.md section 1.5 (what
:class:`~flyviz.model.engine.Engine` and any other engine must do)::

    rec  = W' @ x_prev             W' = W with the cuts/scales active at this step
    pre  = rec_gain * rec ; pre[in_index] += drive
    pre[S] += amount               every Stimulate active at this step, in list order
    x    = (1 - leak) * x_prev + leak * tanh(gain * pre + bias)
    x[S] = value                   every Silence (value 0) / Clamp active, in list order
    logits = head(LayerNorm(x))    the readout sees the intervened state

- *Token windows*: ``start``/``stop`` are positions as in
  :attr:`~flyviz.record.frame.Frame.position` (0 is BOS), half-open like a
  Python slice: ``start=10, stop=20`` acts on the steps that read tokens 10
  to 19; ``start=10`` from token 10 on; ``stop=5`` on the first five. The
  command-line form is ``@FROM:TO`` (``@10:20``, ``@10:``, ``@:5``). A cut or
  scale active at step ``p`` changes the recurrent input of step ``p``
  (``W' @ x_{p-1}``).
- *Order*: silences and clamps are applied in list order, so where two touch
  the same neuron the later one wins. Stimulations add up. Cuts and scales
  that touch the same synapse multiply (a cut is a factor of 0).
- A stimulation is added to ``pre`` after the recurrent gain and the input
  drive and before ``gain * pre + bias``, so the neuron's gain multiplies it.
- A cut or scale keeps the graph's sparsity structure: the weights of the
  chosen synapses are set to 0 or multiplied, once per combination of active
  edits, not every step.

:func:`resolve` turns interventions into index arrays for one checkpoint
(:class:`ResolvedInterventions`); the JSON form (:func:`to_json`,
:func:`from_json`) is what ``generate --json`` prints and recordings store.

(One module of a little over 700 lines on purpose: the semantics above, the
objects, their command-line, text and JSON forms and their resolution for a
checkpoint are one contract. Each form round-trips through the others
(:func:`as_interventions` takes resolved ones as they are, a resolved set prints
the JSON of its objects), so a split would make two modules import each other
and part the rules above from the one place that implements them.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Union

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import InputError
from flyviz.model.selection import NeuronIndex, SelectionError, neuron_index

#: A selection: a query string, or neuron indices.
Target = Union[str, Sequence[int], np.ndarray]

KINDS = ("silence", "clamp", "stimulate", "cut", "scale")
#: The selection fields and what they are called in messages.
_ROLES = {"neurons": "neurons", "pre": "presynaptic neurons", "post": "postsynaptic neurons"}


def _target(value: Any, what: str) -> "str | tuple[int, ...]":
    """A query string (stripped) or a tuple of neuron indices, checked for form only."""
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


def _init_window(item: Any) -> None:
    """Check a frozen intervention's window and store it as plain ints."""
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


def _target_text(target: "str | tuple[int, ...]") -> str:
    """A query string for a target (indices as a compact ``id:`` list)."""
    if isinstance(target, str):
        return target
    ids = np.unique(np.asarray(target, dtype=np.int64))
    parts = []
    breaks = np.flatnonzero(np.diff(ids) != 1)
    for lo, hi in zip(np.r_[0, breaks + 1], np.r_[breaks, ids.size - 1]):
        a, b = int(ids[lo]), int(ids[hi])
        parts.append(str(a) if a == b else f"{a},{b}" if b == a + 1 else f"{a}-{b}")
    return "id:" + ",".join(parts)


class _Intervention:
    """What every intervention shares: a kind, a token window, text and JSON forms."""

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
                value = _target(value, f"the {_ROLES[name]} to {self.kind}")
            else:
                value = _finite(value, f"{self.kind} {name}")
            object.__setattr__(self, name, value)
        self._check()
        _init_window(self)

    def _check(self) -> None:
        """Checks of one kind beyond the field types (none by default)."""

    def cli_value(self) -> str:
        """The option value ``--KIND`` takes: ``QUERY``, ``QUERY=VALUE``,
        ``QUERY->QUERY`` or ``QUERY->QUERY=FACTOR``, then ``@FROM:TO`` if windowed."""
        fields = self._json_fields
        targets = "->".join(_target_text(getattr(self, n)) for n in fields if n in _ROLES)
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
class Silence(_Intervention):
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
class Clamp(_Intervention):
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
class Stimulate(_Intervention):
    """Every step (in the window), ``amount`` is added to the neurons' input before the tanh."""

    neurons: Target
    amount: float
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "stimulate"
    _json_fields: ClassVar[tuple[str, ...]] = ("neurons", "amount")


@dataclass(frozen=True)
class Cut(_Intervention):
    """Every synapse from a neuron in ``pre`` onto a neuron in ``post`` is removed."""

    pre: Target
    post: Target
    start: int | None = None
    stop: int | None = None
    kind: ClassVar[str] = "cut"
    _json_fields: ClassVar[tuple[str, ...]] = ("pre", "post")
    factor: ClassVar[float] = 0.0


@dataclass(frozen=True)
class Scale(_Intervention):
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
    kinds: tuple[type, ...] = (Silence, Clamp, Stimulate, Cut, Scale, _patch_class())
    if items is None:
        return ()
    if isinstance(items, ResolvedInterventions):
        return items
    if isinstance(items, kinds):
        return (items,)  # type: ignore[return-value]  # a Patch is an intervention too
    if isinstance(items, str):
        items = (items,)
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
def to_json(interventions: Iterable[Intervention]) -> list[dict[str, Any]]:
    """The JSON form: one object per intervention, in order.

    ``{"kind": "silence"|"clamp"|"stimulate", "neurons": QUERY or [indices], "value": v
    (clamp), "amount": c (stimulate)}`` or ``{"kind": "cut"|"scale", "pre": ..., "post":
    ..., "factor": f (scale)}``, plus ``"from"``/``"to"`` for a token window.
    """
    return [iv.to_json() for iv in interventions]


def from_json(items: Any) -> tuple[Intervention, ...]:
    """Interventions from their JSON form (extra keys, such as counts, are ignored).

    Raises
    ------
    InputError
        For anything that is not a list of well-formed intervention objects.
    """
    if not isinstance(items, list):
        raise InputError("interventions must be a JSON list of objects")
    out: list[Any] = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("kind") == "patch":
            from flyviz.model.patching import patch_from_json

            out.append(patch_from_json(item, i))
            continue
        if not isinstance(item, dict) or item.get("kind") not in _CLASSES:
            raise InputError(f"intervention {i + 1} has no valid 'kind' (one of "
                             f"{', '.join(KINDS)})")
        cls = _CLASSES[item["kind"]]
        names = cls._json_fields
        missing = [n for n in names if n not in item]
        if missing:
            raise InputError(f"intervention {i + 1} ({item['kind']}) lacks {missing[0]!r}")
        values = [item[n] for n in names] + [item.get("from"), item.get("to")]
        out.append(cls(*values))
    return tuple(out)


def describe_applied(item: dict[str, Any]) -> str:
    """One line for an applied intervention's JSON (:meth:`ResolvedInterventions.to_json`):
    ``silence sign:inhibitory (16,677 neurons, 53 steps)``."""
    (intervention,) = from_json([item])
    parts = []
    if "synapses" in item:
        parts.append(f"{item['synapses']:,} synapses")
    elif "neurons_selected" in item:
        parts.append(f"{item['neurons_selected']:,} neurons")
    if "steps" in item:
        parts.append(f"{item['steps']} steps")
    return f"{intervention}" + (f" ({', '.join(parts)})" if parts else "")


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


def _in_window(op: Any, position: int) -> bool:
    return (op.start is None or position >= op.start) and (op.stop is None or position < op.stop)


@dataclass(frozen=True)
class ResolvedInterventions:
    """Interventions turned into index arrays for one checkpoint, in the form any engine
    can apply (see the module docstring for the exact step).

    Attributes
    ----------
    interventions
        What was asked for, in order.
    post_state
        The silences and clamps, in order (the later wins on a shared neuron),
        and the patches among them (:class:`flyviz.model.patching.StatePatch`:
        their values change with the position).
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


def _selection(index: NeuronIndex, target: Target, what: str) -> np.ndarray:
    """Sorted unique intp indices of a target (a query, or checked explicit indices)."""
    if isinstance(target, str):
        try:
            return index.select(target).astype(np.intp)
        except SelectionError as exc:
            raise SelectionError(f"{what}: {exc}") from None
    ids = np.unique(np.asarray(target, dtype=np.intp))
    if ids[-1] >= index.neurons:
        raise InputError(f"{what}: neuron index {int(ids[-1])} is outside "
                         f"0..{index.neurons - 1}")
    return ids


def synapses_between(checkpoint: Checkpoint, pre: np.ndarray, post: np.ndarray) -> np.ndarray:
    """Positions in the CSR arrays of every synapse from a neuron in ``pre`` onto one in
    ``post`` (sorted, int64)."""
    n = checkpoint.config.neurons
    offsets = np.asarray(checkpoint.w_offsets, dtype=np.int64)
    rows = np.asarray(post, dtype=np.intp)
    lengths = offsets[rows + 1] - offsets[rows]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # The edge positions of the chosen rows: offsets[row] + 0..length-1, row after row.
    first = np.repeat(offsets[rows] - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    edges = first + np.arange(total, dtype=np.int64)
    is_pre = np.zeros(n, dtype=bool)
    is_pre[np.asarray(pre, dtype=np.intp)] = True
    return edges[is_pre[np.asarray(checkpoint.w_indices)[edges]]]


def resolve(checkpoint: Checkpoint, interventions: "Iterable[Intervention] | ResolvedInterventions"
            ) -> ResolvedInterventions:
    """Turn interventions into index arrays for ``checkpoint``.

    Raises
    ------
    InputError
        (a :class:`~flyviz.model.selection.SelectionError` for queries) when a
        selection is bad or empty, or an index lies outside the model; also
        when a cut or scale touches no synapse.
    """
    if isinstance(interventions, ResolvedInterventions):
        if interventions.interventions and interventions.neurons != checkpoint.config.neurons:
            raise InputError("these interventions were resolved for another model")
        return interventions
    items = tuple(interventions)
    patch = _patch_class()
    for item in items:
        if not isinstance(item, (Silence, Clamp, Stimulate, Cut, Scale, patch)):
            raise InputError(f"{item!r} is not an intervention (Silence, Clamp, Stimulate, "
                             "Cut or Scale)")
    if not items:
        return ResolvedInterventions(neurons=checkpoint.config.neurons)
    index = neuron_index(checkpoint)
    post_state: list[Any] = []  # StateSet, and StatePatch for a patch
    pre_add: list[PreAdd] = []
    graph_edits: list[GraphEdit] = []
    selected: list[int] = []
    applied: list[Any] = []
    for item in items:
        applied.append(item)
        label = f"{item.kind} {item.cli_value()}"
        if isinstance(item, patch):
            # A patch is a clamp to the source's values: it acts among the silences and
            # clamps, in list order (flyviz.model.patching).
            from flyviz.model.patching import resolve_patch

            patched: Any = item
            ids = _selection(index, patched.neurons, label)
            ids.setflags(write=False)
            applied[-1], op = resolve_patch(checkpoint, patched, ids)
            post_state.append(op)
            selected.append(int(ids.size))
            continue
        if isinstance(item, (Silence, Clamp, Stimulate)):
            ids = _selection(index, item.neurons, label)
            ids.setflags(write=False)
            selected.append(int(ids.size))
            if isinstance(item, Stimulate):
                pre_add.append(PreAdd(ids, item.amount, item.start, item.stop))
            else:
                value = item.value if isinstance(item, Clamp) else 0.0
                post_state.append(StateSet(ids, value, item.start, item.stop))
            continue
        pre = _selection(index, item.pre, f"{label} (before '->')")
        post = _selection(index, item.post, f"{label} (after '->')")
        edges = synapses_between(checkpoint, pre, post)
        if edges.size == 0:
            raise InputError(f"{label}: no synapse runs from the {pre.size:,} selected neurons "
                             f"onto the {post.size:,} others; nothing to {item.kind}")
        for array in (pre, post, edges):
            array.setflags(write=False)
        selected.append(int(edges.size))
        graph_edits.append(GraphEdit(pre, post, edges, item.factor, item.start, item.stop))
    return ResolvedInterventions(tuple(applied), tuple(post_state), tuple(pre_add),
                                 tuple(graph_edits), tuple(selected), checkpoint.config.neurons)


# ----------------------------------------------------------------- patches
def _patch_class() -> type:
    """:class:`flyviz.model.patching.Patch` (imported on use: that module builds on this one)."""
    from flyviz.model.patching import Patch

    return Patch
