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

The objects, their command-line and text forms and their resolved form live in
:mod:`flyviz.model.intervention_types`, which imports neither the engine nor
patching; this module re-exports every one of them (``from
flyviz.model.interventions import Silence`` keeps working) and adds what needs a
checkpoint or a patch: the JSON form with patches, and :func:`resolve`. At import
time and at run time the order is one way: intervention types and the engine's
core, then patching, then this module, then the engine. (Resolving a patch whose
source is a prompt runs that prompt on an untouched
:class:`~flyviz.model.engine_core.EngineCore`, which resolves nothing;
:class:`~flyviz.model.engine.Engine`, the core that takes written interventions,
imports this module.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import InputError
from flyviz.model.intervention_types import (KINDS, Clamp, Cut, GraphEdit, Intervention,
                                             PreAdd, ResolvedInterventions, Scale, Silence,
                                             StateSet, Stimulate, Target, as_interventions,
                                             intervention_from_text, parse_intervention,
                                             plain_from_json, split_window)
from flyviz.model.patching import Patch, patch_from_json, resolve_patch
from flyviz.model.selection import NeuronIndex, SelectionError, neuron_index


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
            out.append(patch_from_json(item, i))
        else:
            out.append(plain_from_json(item, i))
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


def _selection(index: NeuronIndex, target: Target, item: Any, end: str = "") -> np.ndarray:
    """Sorted unique intp indices of a target (a query, or checked explicit indices) of
    intervention ``item`` (its ``end`` of a cut, for the error message)."""
    if isinstance(target, str):
        try:
            return index.select(target).astype(np.intp)
        except SelectionError as exc:
            raise SelectionError(f"{_label(item)}{end}: {exc}") from None
    ids = np.unique(np.asarray(target, dtype=np.intp))
    if ids[-1] >= index.neurons:
        raise InputError(f"{_label(item)}{end}: neuron index {int(ids[-1])} is outside "
                         f"0..{index.neurons - 1}")
    return ids


def _label(item: Any) -> str:
    """How an error names intervention ``item``: its kind and option value. Written only for
    an error: a list of thousands of indices is long to write, and a circuit's "run alone"
    resolves hundreds of interventions each time the list changes."""
    return f"{item.kind} {item.cli_value()}"


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
        return interventions.checked_for(checkpoint.config.neurons)
    items = tuple(interventions)
    patch = Patch
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
        if isinstance(item, patch):
            # A patch is a clamp to the source's values: it acts among the silences and
            # clamps, in list order (flyviz.model.patching).
            patched: Any = item
            ids = _selection(index, patched.neurons, item)
            ids.setflags(write=False)
            applied[-1], op = resolve_patch(checkpoint, patched, ids)
            post_state.append(op)
            selected.append(int(ids.size))
            continue
        if isinstance(item, (Silence, Clamp, Stimulate)):
            ids = _selection(index, item.neurons, item)
            ids.setflags(write=False)
            selected.append(int(ids.size))
            if isinstance(item, Stimulate):
                pre_add.append(PreAdd(ids, item.amount, item.start, item.stop))
            else:
                value = item.value if isinstance(item, Clamp) else 0.0
                post_state.append(StateSet(ids, value, item.start, item.stop))
            continue
        pre = _selection(index, item.pre, item, " (before '->')")
        post = _selection(index, item.post, item, " (after '->')")
        edges = synapses_between(checkpoint, pre, post)
        if edges.size == 0:
            raise InputError(f"{_label(item)}: no synapse runs from the {pre.size:,} selected neurons "
                             f"onto the {post.size:,} others; nothing to {item.kind}")
        for array in (pre, post, edges):
            array.setflags(write=False)
        selected.append(int(edges.size))
        graph_edits.append(GraphEdit(pre, post, edges, item.factor, item.start, item.stop))
    return ResolvedInterventions(tuple(applied), tuple(post_state), tuple(pre_add),
                                 tuple(graph_edits), tuple(selected), checkpoint.config.neurons)


__all__ = ["KINDS", "Clamp", "Cut", "GraphEdit", "Intervention", "PreAdd", "ResolvedInterventions",
           "Scale", "Silence", "StateSet", "Stimulate", "Target", "as_interventions",
           "describe_applied", "from_json", "intervention_from_text", "parse_intervention",
           "resolve", "split_window", "synapses_between", "to_json"]
