"""A found circuit at any measured size ``k``: its neurons, its strongest synapses, the
interventions that run it alone, and its circuit-tracer graph (for the app and scripts).

:func:`~flyviz.analysis.circuit.find_circuit` measures a curve of circuit sizes
(and the bisection's refinements); the app's Circuit dock lets the user pick any
of them. This module turns a :class:`~flyviz.analysis.circuit.CircuitResult` and a
size ``k`` into

* :func:`neurons_at`: the neurons the top ``k`` units keep;
* :func:`strongest_synapses`: the synapses drawn between them (the kept edges by
  ``|score|`` for an edge circuit; otherwise the synapses between two circuit
  neurons by ``|W|``);
* :func:`only_circuit`: interventions (:mod:`flyviz.model.interventions`) under
  which an ordinary run is the circuit's measured run, everything else ablated
  as the measurement did: zero ablation is one ``Silence`` of every neuron outside
  the circuit (a ``Cut`` of the dropped synapses onto each neuron, for edges); mean
  ablation holds each dropped neuron at its mean (one ``Clamp`` per distinct mean,
  a ``Silence`` for the neurons whose mean is 0);
* :func:`circuit_tracer_graph`: the circuit in the graph JSON of circuit-tracer's
  ``frontend/graph_models.py`` (what the Neuronpedia graph viewer reads), as
  :func:`flyviz.model.explain_graph.to_circuit_tracer_json` writes a traced token:
  one node per circuit neuron (``layer``: its hops from the circuit's input
  neurons, 1 first), the task's metric as the logit node, the circuit's synapses
  and each neuron's score onto the metric as links, and the cell types as
  supernodes (``qParams.supernodes``);
* :func:`write_json`: a JSON file written whole (a temporary file moved into place).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.errors import InputError
from flyviz.fileio import atomic_write, missing_folder

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.analysis.circuit import CircuitResult, CurvePoint
    from flyviz.model.checkpoint import Checkpoint
    from flyviz.model.interventions import Intervention

#: Synapses drawn between circuit neurons (the strongest first).
DRAWN_SYNAPSES = 40
#: Interventions an only-the-circuit set may hold at most (distinct means, or cut neurons).
MAX_INTERVENTIONS = 2000
#: Links between circuit neurons a circuit-tracer graph lists at most (the strongest).
MAX_LINKS = 20_000


def measured_points(result: "CircuitResult") -> list["CurvePoint"]:
    """Every measured circuit, the curve's and the refinement's, by size (one per size)."""
    return result.points


def point_at(result: "CircuitResult", k: int) -> "CurvePoint":
    """The measured circuit of size ``k`` (:class:`InputError` if none was measured)."""
    for p in measured_points(result):
        if p.size == int(k):
            return p
    raise InputError(f"no circuit of {k} units was measured; the sizes are "
                     f"{', '.join(str(p.size) for p in measured_points(result))}")


def neurons_at(result: "CircuitResult", ckpt: "Checkpoint", k: int) -> np.ndarray:
    """The neurons of the top ``k`` units (sorted, int64; an edge circuit's endpoints)."""
    at_k = dataclasses.replace(result, size=int(np.clip(k, 0, result.units.count)))
    return np.unique(at_k.circuit_neurons(ckpt)).astype(np.int64)


def _edge_ends(ckpt: "Checkpoint") -> tuple[np.ndarray, np.ndarray]:
    """Each synapse's ``(pre, post)`` neuron, in CSR order."""
    offsets = np.asarray(ckpt.w_offsets, dtype=np.int64)
    post = np.repeat(np.arange(ckpt.config.neurons, dtype=np.int64), np.diff(offsets))
    return np.asarray(ckpt.w_indices, dtype=np.int64), post


def circuit_synapses(result: "CircuitResult", ckpt: "Checkpoint", k: int,
                     top: int | None = None) -> dict[str, np.ndarray]:
    """``{"pre", "post", "weight"}`` of the circuit's synapses, strongest first (at most
    ``top``): an edge circuit's kept synapses with their scores; for node circuits the
    synapses between two circuit neurons with their weights ``W`` (self-synapses left out)."""
    if result.units.kind == "edges":
        kept = result.order[:int(np.clip(k, 0, result.units.count))]
        if top is not None:
            kept = kept[:top]
        pre, post = _edge_ends(ckpt)
        return {"pre": pre[kept], "post": post[kept], "weight": result.scores[kept]}
    pre, post = _edge_ends(ckpt)
    inside = np.zeros(ckpt.config.neurons, dtype=bool)
    inside[neurons_at(result, ckpt, k)] = True
    chosen = np.flatnonzero(inside[pre] & inside[post] & (pre != post))
    weights = np.asarray(ckpt.w_values, dtype=np.float64)[chosen]
    order = np.argsort(-np.abs(weights), kind="stable")
    if top is not None:
        order = order[:top]
    chosen = chosen[order]
    return {"pre": pre[chosen], "post": post[chosen], "weight": weights[order]}


def strongest_synapses(result: "CircuitResult", ckpt: "Checkpoint", k: int,
                       top: int = DRAWN_SYNAPSES) -> dict[str, np.ndarray]:
    """The ``top`` strongest of :func:`circuit_synapses` (what the brain view draws)."""
    return circuit_synapses(result, ckpt, k, top)


def only_circuit(result: "CircuitResult", ckpt: "Checkpoint", k: int) -> list["Intervention"]:
    """Interventions under which a run keeps only the top ``k`` units, everything else
    ablated as the faithfulness was measured (see the module documentation); empty for
    the whole model.

    Raises
    ------
    InputError
        For an edge circuit with mean ablation (an ablated synapse carries ``W μ``,
        which no intervention does), a resample ablation, or a set of more than
        :data:`MAX_INTERVENTIONS` interventions.
    """
    from flyviz.model.interventions import Clamp, Cut, Silence

    n = int(ckpt.config.neurons)
    k = int(np.clip(k, 0, result.units.count))
    if result.settings.ablation == "resample" and k < result.units.count:
        raise InputError("a resample ablation holds each prompt's dropped neurons at another "
                         "prompt's states step by step, which no intervention does; find the "
                         "circuit with mean or zero ablation to run it alone")
    mean = result.settings.ablation == "mean"
    if result.units.kind == "edges":
        if mean:
            raise InputError("an edge circuit with mean ablation keeps each dropped synapse's "
                             "mean current, which no intervention does; find the circuit with "
                             "zero ablation to run it alone")
        dropped = np.ones(result.units.count, dtype=bool)
        dropped[result.order[:k]] = False
        pre, post = _edge_ends(ckpt)
        targets = np.unique(post[dropped])
        if targets.size > MAX_INTERVENTIONS:
            raise InputError(f"running this edge circuit alone cuts synapses onto "
                             f"{targets.size:,} neurons: more than {MAX_INTERVENTIONS:,} "
                             "interventions")
        return [Cut(tuple(int(j) for j in np.unique(pre[dropped & (post == i)])), (int(i),))
                for i in targets]
    outside = np.setdiff1d(np.arange(n, dtype=np.int64), neurons_at(result, ckpt, k))
    if outside.size == 0:
        return []
    if not mean:
        return [Silence(tuple(int(i) for i in outside))]
    assert result.baseline is not None, "a mean-ablation result keeps its baseline"
    values = np.asarray(result.baseline, dtype=np.float32)[outside]
    distinct, groups = np.unique(values, return_inverse=True)
    if distinct.size > MAX_INTERVENTIONS:
        raise InputError(f"running this circuit alone holds {outside.size:,} neurons at "
                         f"{distinct.size:,} different means: more than "
                         f"{MAX_INTERVENTIONS:,} interventions; use zero ablation")
    out: list[Intervention] = []
    for g, value in enumerate(distinct):
        ids = tuple(int(i) for i in outside[groups == g])
        out.append(Silence(ids) if value == 0.0 else Clamp(ids, float(value)))
    return out


def _layers(ckpt: "Checkpoint", neurons: np.ndarray, synapses: dict[str, np.ndarray]
            ) -> dict[int, int]:
    """Each circuit neuron's layer: 1 + its fewest hops along circuit synapses from the
    circuit's input neurons (or, without any, from those no circuit synapse reaches);
    neurons none of them reach come last."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    where = {int(i): r for r, i in enumerate(neurons)}
    m = len(neurons)
    rows = np.array([where[int(a)] for a in synapses["pre"]], dtype=np.int64)
    cols = np.array([where[int(b)] for b in synapses["post"]], dtype=np.int64)
    graph = csr_matrix((np.ones(rows.size), (rows, cols)), shape=(m, m))
    sources = np.flatnonzero(np.isin(neurons, np.asarray(ckpt.in_index)))
    if sources.size == 0:
        reached = np.zeros(m, dtype=bool)
        reached[cols] = True
        sources = np.flatnonzero(~reached)
    if sources.size == 0:
        sources = np.arange(m)
    hops = shortest_path(graph, unweighted=True, indices=sources).min(axis=0)
    finite = np.isfinite(hops)
    last = int(hops[finite].max()) + 1 if finite.any() else 0
    return {int(i): 1 + (int(h) if np.isfinite(h) else last) for i, h in zip(neurons, hops)}


def circuit_tracer_graph(result: "CircuitResult", ckpt: "Checkpoint", k: int) -> dict[str, Any]:
    """The circuit of the top ``k`` units as circuit-tracer graph JSON (``metadata``,
    ``qParams`` with the cell types as ``supernodes``, ``nodes``, ``links``), and what it
    is under ``"flyviz"`` (size, faithfulness, settings, task)."""
    from flyviz.analysis.circuit import neuron_labels
    from flyviz.model.tokenizer import tokenizer_for

    neurons = neurons_at(result, ckpt, k)
    synapses = circuit_synapses(result, ckpt, k)
    for key in synapses:
        synapses[key] = synapses[key][:MAX_LINKS]
    layers = _layers(ckpt, neurons, synapses)
    types = neuron_labels(ckpt, "cell_type")
    classes = neuron_labels(ckpt, "superclass")
    point = point_at(result, k) if any(p.size == k for p in measured_points(result)) else None
    task = result.task
    first = task.prompts[0]
    logit_layer = str(max(layers.values(), default=0) + 1)
    feature = first.target if first.target is not None else -1
    logit_id = f"{logit_layer}_{feature}_0"
    tokenizer = tokenizer_for(ckpt)

    def node_id(i: int) -> str:
        return f"{layers[i]}_{i}_0"

    faithfulness = None if point is None else float(point.faithfulness)
    nodes: list[dict[str, Any]] = [{
        "node_id": logit_id, "feature": feature, "layer": logit_layer, "ctx_idx": 0,
        "feature_type": "logit", "token_prob": 0.0, "is_target_logit": True, "run_idx": 0,
        "reverse_ctx_idx": 0, "jsNodeId": f"L_{feature}-0",
        "clerp": f"the task's metric: {task.metric_text()} (m(M) = {result.full_metric:+.4g})",
        "influence": None, "activation": None}]
    supernodes: dict[str, list[str]] = {}
    for i in (int(v) for v in neurons):
        nodes.append({"node_id": node_id(i), "feature": i, "layer": str(layers[i]),
                      "ctx_idx": 0, "feature_type": "cross layer transcoder",
                      "token_prob": 0.0, "is_target_logit": False, "run_idx": 0,
                      "reverse_ctx_idx": 0, "jsNodeId": f"{layers[i]}_{i}-0",
                      "clerp": f"#{i} {types[i]} / {classes[i]} "
                               f"(score {result.neuron_scores[i]:+.3g})",
                      "influence": float(abs(result.neuron_scores[i])),
                      "activation": None if result.baseline is None
                      else float(result.baseline[i])})
        supernodes.setdefault(types[i], []).append(node_id(i))
    links = [{"source": node_id(int(a)), "target": node_id(int(b)), "weight": float(w)}
             for a, b, w in zip(synapses["pre"], synapses["post"], synapses["weight"])]
    links += [{"source": node_id(int(i)), "target": logit_id,
               "weight": float(result.neuron_scores[int(i)])} for i in neurons]
    s = result.settings
    return {
        "metadata": {"slug": f"flyviz-circuit-{ckpt.name}-{k}".lower().replace(" ", "-"),
                     "scan": ckpt.name, "transcoder_list": [],
                     "prompt_tokens": [tokenizer.token_text(t) for t in first.ids],
                     "prompt": tokenizer.decode(list(first.ids[1:])),
                     "node_threshold": None, "schema_version": 1},
        "qParams": {"pinnedIds": [node_id(int(i)) for i in neurons], "linkType": "both",
                    "clickedId": "", "sg_pos": "",
                    "supernodes": [[name, *ids] for name, ids in sorted(supernodes.items())
                                   if len(ids) > 1]},
        "nodes": nodes,
        "links": links,
        "flyviz": {"format": "flyviz-circuit-graph", "units": result.units.kind,
                   "size": int(k), "units_total": result.units.count,
                   "neurons": int(neurons.size), "faithfulness": faithfulness,
                   "metric": None if point is None else float(point.metric),
                   "full_metric": result.full_metric, "empty_metric": result.empty_metric,
                   "judged": None if point is None else result.judge(point),
                   "tolerance": s.tolerance, "faithful_circuit": result.faithful,
                   "cpr": result.cpr, "cmd": result.cmd, "ablation": s.ablation,
                   "score": s.score, "task": {"source": task.source, "kind": task.kind,
                                              "prompts": len(task.prompts),
                                              "metric": task.metric_text()}},
    }


def write_json(path: str | Path, document: Any) -> Path:
    """Write ``document`` as JSON to ``path`` whole (a temporary file beside it, moved into
    place); :class:`InputError` (one line) when it cannot be written."""
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        raise InputError(f"cannot write {path}: {missing_folder(path.parent)}")
    text = json.dumps(document, indent=1)
    with atomic_write(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def write_interventions(path: str | Path, items: "list[Intervention]") -> Path:
    """Write ``items`` in flyviz's JSON form of interventions (what
    :func:`flyviz.model.interventions.from_json` reads and recordings store)."""
    from flyviz.model.interventions import to_json

    return write_json(path, to_json(items))


__all__ = ["DRAWN_SYNAPSES", "MAX_INTERVENTIONS", "MAX_LINKS", "circuit_synapses",
           "circuit_tracer_graph", "measured_points", "neurons_at", "only_circuit",
           "point_at", "strongest_synapses", "write_interventions", "write_json"]
