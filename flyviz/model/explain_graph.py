"""The pruned graph of an :class:`~flyviz.model.explain.Attribution`, and its JSON forms.

Pruning follows circuit-tracer's ``prune_graph`` (``explain.md`` section 1) on
the unrolled graph, whose nodes are (neuron, position) pairs of the window,
the input tokens and the explained logit:

1. *Node influence*: every row of direct effects is normalised by its
   absolute sum (a neuron at step ``t``: its synapses ``|lam d g r W'_ij
   x_j(t-1)|``, its leak ``(1-lam)|x_i(t-1)|`` and its sources, drive, bias,
   stimulation; the logit: ``|f_i(P)|`` and ``|const|``), and influence on
   the logit is ``w A + w A^2 + ...``, finite because the unrolled graph is
   acyclic. It is computed by a sweep over the window with two sparse
   products per step (``|W'| |x_{t-1}|`` for the row sums, ``|W'|^T`` for the
   propagation), never as a matrix.
2. The smallest set of neuron nodes carrying ``node_threshold`` (80 %) of
   the influence is kept, at most ``nodes`` of them (the largest first); the
   input tokens and the logit are always kept.
3. Between the kept nodes, the edges (synapses, leaks, tokens into their
   input neurons, neurons at ``P`` into the logit) are scored as
   circuit-tracer does (row-normalised, times the influence of their target
   in the pruned graph, the logit counting 1) and those carrying
   ``edge_threshold`` (98 %) of the score are kept; a neuron node left
   without an edge is dropped.

Edge and node values are flows (units of ``L``); node *influence* is a
share (0..1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.model.attribution import DECOMPOSITION

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.explain import Attribution


@dataclass
class Graph:
    """A pruned attribution graph.

    Attributes
    ----------
    neurons, positions
        The kept neuron nodes (int64 arrays of the same length).
    flows, states, influence
        Per kept neuron node: ``f_i(t)``, ``x_i(t)`` and its influence share.
    tokens
        Kept token nodes: positions of the input tokens.
    edges
        One dict per kept edge: ``kind`` (``synapse``, ``leak``, ``token``,
        ``logit``), ``pre``, ``pre_position``, ``post``, ``post_position``
        (``pre`` is the token id for a token edge; ``post`` is ``-1`` for the
        logit), ``flow``.
    node_influence_total
        Influence of all neuron nodes before pruning (the 100 % of the threshold).
    """

    neurons: np.ndarray
    positions: np.ndarray
    flows: np.ndarray
    states: np.ndarray
    influence: np.ndarray
    tokens: list[int]
    edges: list[dict[str, Any]] = field(default_factory=list)
    node_influence_total: float = 0.0


def node_influence(att: "Attribution") -> tuple[np.ndarray, np.ndarray]:
    """``(neurons, tokens)``: each (neuron, position) node's influence on the logit,
    ``(window, neurons)``, and each input position's, ``(position + 1,)``."""
    from flyviz.model.engine import SINGLE_THREADED_BLAS

    with SINGLE_THREADED_BLAS:  # see BackwardEngine.sweep
        return _node_influence(att)


def _node_influence(att: "Attribution") -> tuple[np.ndarray, np.ndarray]:
    bw, tape = att.backward, att.tape
    interventions = tape.interventions
    first, last = att.window_start, att.position
    k, slot = bw.config.delay_k, bw.config.neurons_per_slot
    in_index = bw.in_index
    lam, keep = float(bw.leak), float(bw.keep)
    influence = np.zeros((last - first + 1, bw.neurons))
    tokens = np.zeros(last + 1)
    f_p = np.abs(att.node_flow(last))
    influence[-1] = f_p / max(float(f_p.sum()) + abs(att.constant), 1e-300)
    for t in range(last, first - 1, -1):
        row = influence[t - first]
        x_prev = np.abs(tape.x(t - 1)).astype(np.float64)
        d = tape.s(t) if att.mode == DECOMPOSITION else tape.slope(t)
        free = att.mask(t)
        a = lam * np.abs(d.astype(np.float64) * bw.gain) * free       # |lam d g| of free neurons
        synaptic = a * np.abs(bw.rec_gain)
        drive = np.zeros(bw.neurons)
        drive[in_index] = np.abs(bw.slot_drive(tape.tokens, t)).reshape(-1)
        sources = a * (drive + np.abs(bw.stimulation_at(interventions, t))) \
            + lam * np.abs(d) * free * np.abs(bw.bias)   # the bias is not gained
        row_sum, _ = bw.abs_products(interventions, t, x=x_prev)
        assert row_sum is not None
        total = synaptic * row_sum + keep * x_prev * free + sources
        mask, values = bw.set_at(interventions, t)
        total[mask] = np.abs(values[mask])
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(total > 0, row / np.where(total > 0, total, 1.0), 0.0) * free
        # Into the tokens read through the delay slots of step t.
        shares = (z * a * drive)[in_index].reshape(k, slot).sum(axis=1)
        for j in range(k):
            if t - j >= 0:
                tokens[t - j] += shares[j]
        if t > first:
            _, back = bw.abs_products(interventions, t, y=z * synaptic)
            assert back is not None
            influence[t - 1 - first] += x_prev * back + z * keep * x_prev
    return influence, tokens


def _threshold_count(scores: np.ndarray, share: float) -> int:
    """How many of the largest ``scores`` carry ``share`` of their sum (at least 1)."""
    total = float(scores.sum())
    if total <= 0 or scores.size == 0:
        return 0
    cumulative = np.cumsum(np.sort(scores)[::-1]) / total
    return min(int(scores.size), int(np.searchsorted(cumulative, share)) + 1)


def prune(att: "Attribution", *, nodes: int = 500, node_threshold: float = 0.8,
          edge_threshold: float = 0.98) -> Graph:
    """The pruned graph of ``att`` (see the module documentation)."""
    from flyviz.model.errors import InputError

    if nodes < 1:
        raise InputError(f"the graph needs room for at least 1 node, not {nodes}")
    if not 0 < node_threshold <= 1 or not 0 < edge_threshold <= 1:
        raise InputError("node and edge thresholds are shares in (0, 1]")
    first, last = att.window_start, att.position
    influence, token_influence = node_influence(att)
    flat = influence.reshape(-1)
    count = min(int(nodes), _threshold_count(flat, node_threshold))
    order = np.argsort(-flat, kind="stable")[:count]
    order = order[flat[order] > 0]
    rows, neurons = np.divmod(order, att.neurons)
    positions = rows + first
    # Nodes of the pruned graph: 0 the logit, then the neuron nodes, then the tokens.
    token_positions = [p for p in range(last + 1) if token_influence[p] > 0]
    index: dict[tuple[int, int], int] = {(int(i), int(t)): 1 + n
                                         for n, (i, t) in enumerate(zip(neurons, positions))}
    token_node = {p: 1 + len(index) + n for n, p in enumerate(token_positions)}
    size = 1 + len(index) + len(token_node)
    candidates: list[dict[str, Any]] = []
    by_step: dict[int, set[int]] = {}
    for i, t in index:
        by_step.setdefault(t, set()).add(i)
    k, slot = att.checkpoint.config.delay_k, att.checkpoint.config.neurons_per_slot
    place_of = np.full(att.neurons, -1, dtype=np.int64)     # where in the drive vector
    place_of[att.backward.in_index] = np.arange(k * slot)
    slot_of = np.where(place_of >= 0, place_of // slot, -1)
    drive_cache: dict[int, np.ndarray] = {}
    for (i, t), target in index.items():
        if t == last:
            candidates.append({"kind": "logit", "pre": i, "pre_position": t, "post": -1,
                               "post_position": last, "flow": float(att.node_flow(t)[i]),
                               "_s": target, "_t": 0})
        previous = by_step.get(t - 1, set()) if t > first else set()
        if previous:
            incoming = att.edge_flows(i, t)
            for j, flow in zip(incoming["pre"], incoming["flow"]):
                if int(j) in previous and flow != 0:
                    candidates.append({"kind": "synapse", "pre": int(j), "pre_position": t - 1,
                                       "post": i, "post_position": t, "flow": float(flow),
                                       "_s": index[(int(j), t - 1)], "_t": target})
            if i in previous:
                leak = float(att.cotangent(t)[i]) * float(att.mask(t)[i]) * \
                    float(att.backward.keep) * float(att.tape.x(t - 1)[i])
                if leak != 0:
                    candidates.append({"kind": "leak", "pre": i, "pre_position": t - 1,
                                       "post": i, "post_position": t, "flow": leak,
                                       "_s": index[(i, t - 1)], "_t": target})
        j = int(slot_of[i])
        if j >= 0 and t - j >= 0 and (t - j) in token_node:
            if t not in drive_cache:
                drive_cache[t] = att.backward.slot_drive(att.tape.tokens, t).reshape(-1)
            bw = att.backward
            d = att.tape.s(t) if att.mode == DECOMPOSITION else att.tape.slope(t)
            # m_t(i) lam d_i g_i D_i: the drive is gained but not rec_gained.
            flow = float(att.cotangent(t)[i]) * float(att.mask(t)[i]) * float(bw.leak) \
                * float(d[i]) * float(bw.gain[i]) * float(drive_cache[t][place_of[i]])
            candidates.append({"kind": "token", "pre": att.prompt_ids[t - j],
                               "pre_position": t - j, "post": i, "post_position": t,
                               "flow": float(flow), "_s": token_node[t - j], "_t": target})
    # Edge scores as circuit-tracer's compute_edge_influence, on the pruned graph.
    # Sparse: a graph of thousands of nodes has only their edges.
    from scipy.sparse import csr_matrix

    targets = np.array([e["_t"] for e in candidates], dtype=np.int64)
    sources = np.array([e["_s"] for e in candidates], dtype=np.int64)
    magnitudes = np.abs(np.array([e["flow"] for e in candidates], dtype=np.float64))
    sums = np.bincount(targets, weights=magnitudes, minlength=size)
    shares = np.divide(magnitudes, sums[targets], out=np.zeros_like(magnitudes),
                       where=sums[targets] > 0)
    normed = csr_matrix((shares, (targets, sources)), shape=(size, size))
    reach = np.zeros(size)
    reach[0] = 1.0
    current = reach.copy()
    for _ in range(last - first + 3):
        current = normed.T @ current            # the row vector current @ normed
        if not current.any():
            break
        reach += current
    scores = shares * reach[targets]
    kept = _threshold_count(scores, edge_threshold) if scores.size else 0
    chosen = np.argsort(-scores, kind="stable")[:kept] if kept else np.zeros(0, np.int64)
    edges = [candidates[c] for c in chosen]
    touched = {e["_s"] for e in edges} | {e["_t"] for e in edges}
    keep_nodes = [n for n, key in enumerate(index) if 1 + n in touched]
    if not keep_nodes and len(index):  # a single node straight into the logit
        keep_nodes = [0]
    for e in edges:
        e.pop("_s")
        e.pop("_t")
    pick = np.asarray(keep_nodes, dtype=np.int64)
    neurons, positions = neurons[pick], positions[pick]
    return Graph(neurons=neurons.astype(np.int64), positions=positions.astype(np.int64),
                 flows=np.array([att.node_flow(int(t))[int(i)]
                                 for i, t in zip(neurons, positions)]),
                 states=np.array([float(att.tape.x(int(t))[int(i)])
                                  for i, t in zip(neurons, positions)]),
                 influence=influence[positions - first, neurons],
                 tokens=token_positions, edges=edges,
                 node_influence_total=float(flat.sum()))


# ------------------------------------------------------------------------ JSON
def _label(att: "Attribution", neuron: int) -> str:
    anatomy = att.checkpoint.anatomy
    if anatomy is None:
        return f"#{neuron}"
    parts = [str(v[neuron]) for v in (anatomy.cell_type, anatomy.superclass)
             if v is not None and str(v[neuron]).strip()]
    return " / ".join(parts) or f"#{neuron}"


def to_json(att: "Attribution", *, nodes: int = 500, top: int = 50) -> dict[str, Any]:
    """What ``flyviz trace --json`` prints: the explained value, the sources, the kept
    nodes and edges (plus the ``top`` largest node flows at P and P-1 and synapses
    into P), the group flows."""
    graph = att.graph(nodes=nodes)
    node_rows: dict[tuple[int, int], dict[str, Any]] = {}

    def add_node(i: int, t: int, influence: float | None = None) -> None:
        key = (int(i), int(t))
        if key not in node_rows:
            node_rows[key] = {"neuron": key[0], "position": key[1],
                              "flow": float(att.node_flow(key[1])[key[0]]),
                              "state": float(att.tape.x(key[1])[key[0]]),
                              "label": _label(att, key[0]), "kept": False}
        if influence is not None:
            node_rows[key].update(kept=True, influence=float(influence))

    for i, t, share in zip(graph.neurons, graph.positions, graph.influence):
        add_node(int(i), int(t), float(share))
    for t in (att.position, att.position - 1):
        if t >= att.window_start:
            for i in att.top_neurons(t, top):
                add_node(i, t)
    edges = [dict(e, kept=True) for e in graph.edges]
    seen = {(e["pre"], e["pre_position"], e["post"], e["post_position"]) for e in edges
            if e["kind"] == "synapse"}
    if att.position > 0:  # before BOS there is no state to flow from
        strongest = att.step_edge_flows(att.position, top)
        for j, i, flow in zip(strongest["pre"], strongest["post"], strongest["flow"]):
            key = (int(j), att.position - 1, int(i), att.position)
            if key not in seen:
                edges.append({"kind": "synapse", "pre": key[0], "pre_position": key[1],
                              "post": key[2], "post_position": key[3], "flow": float(flow),
                              "kept": False})
    groups: dict[str, list[dict[str, Any]]] = {}
    for by in ("superclass", "cell_type", "side"):
        names, flows = att.group_flows(by)
        rows: list[dict[str, Any]] = []
        for r, t in enumerate(att.positions):
            order = np.argsort(-np.abs(flows[r]), kind="stable")
            if by == "cell_type":
                order = order[:top]  # thousands of types: the strongest per position
            rows.extend({"name": names[g], "position": int(t), "flow": float(flows[r, g])}
                        for g in order)
        groups[by] = rows
    return {
        "model": att.model_name,
        "mode": att.mode,
        "prompt_ids": att.prompt_ids,
        "position": att.position,
        "window": [att.window_start, att.position],
        "target": {"token": att.target, "text": att.target_text,
                   "versus": None if att.versus is None else {"token": att.versus,
                                                             "text": att.versus_text},
                   "value": att.value},
        "constant": att.constant,
        "completeness_error": att.completeness_error,
        # False: the flows do not add up to L (a window too long); None in gradient mode.
        "complete": att.complete,
        "completeness_tolerance": None if att.complete is None else att.tolerance,
        "holding_window": att.holding_window(),
        "token_flows": [{"position": p, "token": att.prompt_ids[p], "text": att.token_texts[p],
                         "flow": float(att.token_flows[p])} for p in range(att.position + 1)],
        "pad_flow": att.pad_flow,
        "bias_flow": att.bias_flow,
        "stimulation_flow": att.stimulation_flow,
        "clamp_flow": att.clamp_flow,
        "earlier_flow": att.earlier_flow,
        "interventions": att.tape.interventions.to_json(att.position + 1),
        "nodes": list(node_rows.values()),
        "edges": edges,
        "groups": groups,
        "pruning": {"nodes": nodes, "node_threshold": 0.8, "edge_threshold": 0.98,
                    "kept_nodes": int(graph.neurons.size), "kept_edges": len(graph.edges)},
    }


def to_circuit_tracer_json(att: "Attribution", *, nodes: int = 500) -> dict[str, Any]:
    """The pruned graph in the schema of circuit-tracer's ``frontend/graph_models.py``
    (what the Neuronpedia graph viewer reads).

    A neuron node at position ``t`` has ``ctx_idx = t`` and ``layer = P - t``
    (the step lag), ``feature`` its neuron index and its cell type (and
    superclass) as ``clerp``; input tokens are embedding nodes (layer ``"E"``);
    the explained logit sits at ``layer = window + 1``, ``ctx_idx = P``.
    Supernodes group the kept neurons by cell type.
    """
    graph = att.graph(nodes=nodes)
    p = att.position
    logit_layer = str(p - att.window_start + 1)
    probability = float(_softmax(att.tape.logits(p))[att.target])
    logit_id = f"{logit_layer}_{att.target}_{p}"
    out_nodes: list[dict[str, Any]] = [{
        "node_id": logit_id, "feature": att.target, "layer": logit_layer, "ctx_idx": p,
        "feature_type": "logit", "token_prob": probability, "is_target_logit": True,
        "run_idx": 0, "reverse_ctx_idx": 0, "jsNodeId": f"L_{att.target}-{p}",
        "clerp": f'Output "{att.target_text}" (p={probability:.3f}); L = {att.value:+.4f}',
        "influence": None, "activation": None}]

    def neuron_id(i: int, t: int) -> str:
        return f"{p - t}_{i}_{t}"

    supernodes: dict[str, list[str]] = {}
    for i, t, share, flow, state in zip(graph.neurons, graph.positions, graph.influence,
                                        graph.flows, graph.states):
        i, t = int(i), int(t)
        label = _label(att, i)
        out_nodes.append({"node_id": neuron_id(i, t), "feature": i, "layer": str(p - t),
                          "ctx_idx": t, "feature_type": "cross layer transcoder",
                          "token_prob": 0.0, "is_target_logit": False, "run_idx": 0,
                          "reverse_ctx_idx": 0, "jsNodeId": f"{p - t}_{i}-0",
                          "clerp": f"#{i} {label} (flow {flow:+.3g})",
                          "influence": float(share), "activation": float(state)})
        supernodes.setdefault(label.split(" / ")[0], []).append(neuron_id(i, t))
    for t in graph.tokens:
        token = att.prompt_ids[t]
        out_nodes.append({"node_id": f"E_{token}_{t}", "feature": t, "layer": "E",
                          "ctx_idx": t, "feature_type": "embedding", "token_prob": 0.0,
                          "is_target_logit": False, "run_idx": 0, "reverse_ctx_idx": 0,
                          "jsNodeId": f"E_{token}-{t}",
                          "clerp": f"{att.token_texts[t]!r} (flow {att.token_flows[t]:+.3g})",
                          "influence": None, "activation": None})
    links = []
    for e in graph.edges:
        if e["kind"] == "token":
            source = f"E_{e['pre']}_{e['pre_position']}"
        else:
            source = neuron_id(e["pre"], e["pre_position"])
        target = logit_id if e["kind"] == "logit" else neuron_id(e["post"], e["post_position"])
        links.append({"source": source, "target": target, "weight": float(e["flow"])})
    slug = f"flyviz-{att.model_name}-{p}".lower().replace(" ", "-")
    return {
        "metadata": {"slug": slug, "scan": att.model_name, "transcoder_list": [],
                     "prompt_tokens": att.token_texts, "prompt": "".join(att.token_texts[1:]),
                     "node_threshold": 0.8, "schema_version": 1},
        "qParams": {"pinnedIds": [], "linkType": "both", "clickedId": "", "sg_pos": "",
                    "supernodes": [[name, *ids] for name, ids in sorted(supernodes.items())
                                   if len(ids) > 1]},
        "nodes": out_nodes,
        "links": links,
    }


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


def to_xarray(att: "Attribution", model: Any = None) -> Any:
    """``node_flow``, ``state`` and ``cotangent`` (position × neuron) with token and
    neuron coordinates (labels from ``model``, else the attribution's checkpoint)."""
    from flyviz.record.convert import anatomy_of, neuron_table, require_module

    xr = require_module("xarray", "Attribution.to_xarray", "data")
    anatomy = anatomy_of(model if model is not None else att.checkpoint, att.neurons)
    table = neuron_table(anatomy, att.neurons)
    positions = att.positions
    coords: dict[str, Any] = {"position": positions, "neuron": table.pop("neuron")}
    coords.update({name: ("neuron", values) for name, values in table.items()})
    coords["token_id"] = ("position", np.asarray([att.prompt_ids[t] for t in positions]))
    coords["token_text"] = ("position", np.asarray([att.token_texts[t] for t in positions],
                                                   dtype=object).astype(str))
    assert att.sweep.cotangents is not None
    states = np.stack([att.tape.x(int(t)) for t in positions])
    return xr.Dataset(
        {"node_flow": (("position", "neuron"), att.node_flows(),
                       {"long_name": "node flow v_t(i) x_i(t)", "units": "logit"}),
         "state": (("position", "neuron"), states, {"long_name": "state x_t"}),
         "cotangent": (("position", "neuron"), att.sweep.cotangents,
                       {"long_name": "v_t, units of L per unit of x"}),
         "token_flow": (("position",), att.token_flows[positions],
                        {"long_name": "flow of the token read at this position"})},
        coords=coords,
        attrs={"mode": att.mode, "position": att.position, "target": att.target,
               "target_text": att.target_text, "value": att.value, "constant": att.constant,
               "completeness_error": (np.nan if att.completeness_error is None
                                      else att.completeness_error),
               "model": att.model_name})
