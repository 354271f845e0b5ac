"""``flyviz info SPEC``: describe a checkpoint without running it."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from flyviz.commands._options import add_dataset_option, load_model_from_args
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.tokenizer import missing_tokenizer_advice


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``flyviz info``."""
    parser.add_argument("spec", metavar="SPEC",
                        help="model folder, hub repo id (ngxson/fly-llm-hf, "
                             "fernandofernandes/fly-wordbrain-rank64[@rev][/subfolder], "
                             "QuixiAI/FlyGPT[/scrambled|/init|/full-cns]), 'demo', "
                             "a fly-connectome-malecns-166k dataset folder or a ConnecTorch "
                             "brain (.ct folder)")
    add_dataset_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.epilog = ("examples:\n  flyviz info ./fly-llm-hf\n"
                     "  flyviz info fernandofernandes/fly-wordbrain-rank64 --json\n"
                     "  flyviz info ./web --dataset ./dataset\n"
                     "  flyviz info ./malecns-166k\n"
                     "  flyviz info ./brain.ct")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def describe(ckpt: Checkpoint) -> dict[str, Any]:
    """Everything ``flyviz info`` reports, as plain JSON values."""
    cfg = ckpt.config
    anatomy = ckpt.anatomy
    model_frozen = {k.split("/", 1)[1]: v for k, v in ckpt.digests.items() if k.startswith("model/")}
    dataset_frozen = {k.split("/", 1)[1]: v for k, v in ckpt.digests.items()
                      if k.startswith("dataset/")}
    recomputed = {k.split("/", 1)[1]: v for k, v in ckpt.digests.items() if k.startswith("graph/")}
    shared = sorted(set(model_frozen) & set(recomputed or dataset_frozen))
    readout: dict[str, Any]
    if ckpt.head is not None:
        readout = {"kind": "dense", "shape": [int(s) for s in ckpt.head.shape], "rank": None}
    else:
        assert ckpt.head_a is not None and ckpt.head_b is not None
        readout = {"kind": f"rank-{int(ckpt.head_a.shape[0])}", "rank": int(ckpt.head_a.shape[0]),
                   "shape": [[int(s) for s in ckpt.head_a.shape],
                             [int(s) for s in ckpt.head_b.shape]]}
    # FlyGPT's input neurons take a biased linear map of the token's embedding: it has no
    # delay slots (the loader stores it as one slot, which is no property of the model).
    slotted = ckpt.in_bias is None
    leak_per_neuron = None
    if ckpt.leak_vector is not None:
        lam = np.asarray(ckpt.leak_vector, dtype=np.float64)
        leak_per_neuron = {"min": float(lam.min()), "max": float(lam.max()),
                           "mean": float(lam.mean())} if lam.size else None
    return {
        "name": ckpt.name,
        "layout": ckpt.layout,
        "source": str(ckpt.source) if ckpt.source else None,
        "neurons": cfg.neurons,
        "edges": ckpt.n_edges,
        "vocabulary": cfg.vocabulary,
        "d_embed": cfg.d_embed,
        "delay_slots": cfg.delay_k if slotted else None,
        "neurons_per_slot": cfg.neurons_per_slot if slotted else None,
        "input_neurons": cfg.n_inputs,
        "input_map": ("embedding x in_proj, one slot per delay" if slotted else
                      "a biased linear map of the token's embedding, no delay slots"),
        "n_in_declared": ckpt.metadata.get("n_in_declared"),
        "readout_rank": cfg.readout_rank,
        "readout": readout,
        "parameters": ckpt.parameter_count(),
        "leak": cfg.leak if ckpt.leak_vector is None else None,
        "leak_per_neuron": leak_per_neuron,
        "layer_norm_eps": cfg.layer_norm_eps if cfg.layer_norm else None,
        "special_tokens": {"pad": cfg.pad_token_id, "bos": cfg.bos_token_id,
                           "eos": cfg.eos_token_id},
        "positions": None if anatomy is None else {
            "kind": anatomy.kind, "with_position": anatomy.n_valid, "neurons": cfg.neurons,
            "coverage": anatomy.n_valid / cfg.neurons if cfg.neurons else 0.0},
        "tokenizer": str(ckpt.tokenizer_path) if ckpt.tokenizer_path else None,
        "tokenizer_missing": None if ckpt.tokenizer_path else
        "no tokenizer.json; " + missing_tokenizer_advice(ckpt),
        "frozen_buffers_sha256": {"model": model_frozen, "dataset": dataset_frozen,
                                  "recomputed": recomputed,
                                  "agree": all(model_frozen[k] == (recomputed or dataset_frozen)[k]
                                               for k in shared) if shared else None},
        "null_model": ckpt.metadata.get("null_model"),
        "operator": {"microsteps": cfg.microsteps, "layer_norm": cfg.layer_norm,
                     "bos": cfg.bos_prepended, "extensions": ckpt.operator_extensions()},
        "graph_provenance": ckpt.metadata.get("graph"),
        "training_state": ckpt.metadata.get("training_state"),
        "digests": dict(ckpt.digests),
        "spiking": _as_a_brain(ckpt),
        "metadata": {k: v for k, v in ckpt.metadata.items() if isinstance(v, (str, int, float))},
    }


def _text(info: dict[str, Any]) -> str:
    def n(v: Any) -> str:
        return f"{v:,}" if isinstance(v, int) else str(v)

    lines = [("model", info["name"]), ("layout", info["layout"]), ("source", info["source"]),
             ("neurons", n(info["neurons"])), ("edges", n(info["edges"])),
             ("vocabulary", n(info["vocabulary"])), ("d_embed", n(info["d_embed"]))]
    if info["delay_slots"] is None:
        lines.append(("input neurons", f"{n(info['input_neurons'])} ({info['input_map']})"))
    else:
        lines.append(("delay slots", n(info["delay_slots"])))
        lines.append(("neurons per slot", f"{n(info['neurons_per_slot'])} "
                                          f"({n(info['input_neurons'])} input neurons"
                      + (f", {n(info['n_in_declared'])} declared)"
                         if info["n_in_declared"] not in (None, info["input_neurons"])
                         else ")")))
    readout = info["readout"]
    if readout["rank"] is None:
        lines.append(("readout", f"dense {readout['shape'][0]:,} x {readout['shape'][1]:,}"))
    else:
        lines.append(("readout", f"rank {readout['rank']} (head_a {readout['shape'][0]}, "
                                 f"head_b {readout['shape'][1]})"))
    weights_file = info["metadata"].get("weights_file")
    if weights_file:  # a fly-wordbrain release: which of its selectors' files runs
        key = info["metadata"].get("selector_key") or info["metadata"].get("selector")
        lines.append(("weights", f"{weights_file}" + (f" (selector {key})" if key else "")))
    lines.append(("parameters", n(info["parameters"])))
    per_neuron, eps = info["leak_per_neuron"], info["layer_norm_eps"]
    if per_neuron is None and eps is not None:
        lines.append(("leak / ln eps", f"{info['leak']} / {eps:g}"))
    else:
        lines.append(("leak", f"{info['leak']}" if per_neuron is None else
                      f"per neuron, {per_neuron['min']:.2f} to {per_neuron['max']:.2f} "
                      f"(mean {per_neuron['mean']:.2f})"))
        lines.append(("layer norm", "none" if eps is None else f"eps {eps:g}"))
    pos = info["positions"]
    if pos is not None and pos["with_position"] == 0:
        # Labels without somata (a dataset such as malecns-166k): no positions, measured or not.
        lines.append(("positions", f"none of the {pos['neurons']:,} neurons has a soma "
                                   "position: the graph is laid out"))
    else:
        lines.append(("positions", "none" if pos is None else
                      f"{pos['with_position']:,} of {pos['neurons']:,} "
                      f"({100 * pos['coverage']:.1f} %), {pos['kind']}"))
    lines.append(("tokenizer", info["tokenizer"] or f"none: {info['tokenizer_missing']}"))
    operator = info["operator"]
    if operator["extensions"]:  # beyond the Fly LLM's operator (FlyGPT): say what
        lines.append(("operator", "leaky tanh with " + ", ".join(operator["extensions"])
                      + ("" if operator["bos"] else "; no BOS")))
    multipliers = info["metadata"].get("edge_multipliers")
    if multipliers:  # fly-wordbrain's bounded arms: the Fly LLM's step on scaled weights
        lines.append(("edge weights", f"the graph's, times {multipliers}"))
    graph = info["graph_provenance"]
    if isinstance(graph, dict) and graph:
        lines.append(("graph", ", ".join(f"{k} {v}" for k, v in graph.items()
                                         if v not in (None, ""))))
    training = info["training_state"]
    if isinstance(training, dict) and training:
        lines.append(("training", ", ".join(f"{k} {v}" for k, v in training.items()
                                            if v not in (None, ""))))
    remote = info["metadata"].get("remote_code_ignored")
    if remote:
        lines.append(("remote code", remote))
    body_ids = info["metadata"].get("body_ids")
    if body_ids:
        lines.append(("body ids", body_ids))
    lines.append(("as a brain", info["spiking"]["millivolts"]))
    frozen = info["frozen_buffers_sha256"]
    if frozen["agree"] is not None:
        lines.append(("graph binding", "the model's frozen-buffer digests match the graph's "
                      "(recomputed)" if frozen["agree"] else "MISMATCH"))
    description = info["metadata"].get("description")
    if description:  # e.g. the demo brain says that its wiring is synthetic
        lines.insert(1, ("about", description))
    if info["null_model"]:  # written by flyviz null: what it is a null of
        from flyviz.analysis.nulls import describe_record

        lines.insert(1, ("null model", describe_record(info["null_model"]) or "unreadable record"))
    width = max(len(k) for k, _ in lines)
    out = [f"{k:<{width}}  {v}" for k, v in lines]
    if info["digests"]:
        out.append("digests (sha256):")
        out.extend(f"  {k:<30} {v}" for k, v in info["digests"].items())
    return "\n".join(out)


def _millivolts(count: str, w_syn: float, default: str = "") -> str:
    """How a graph's weight becomes millivolts when it runs as a spiking brain."""
    return (f"each synapse adds signed count x w_syn to its target's conductance g, as in "
            f"Shiu et al.'s model: signed count = {count}; w_syn {w_syn:g} mV ({default}"
            f"--w-syn sets another)")


def _as_a_brain(ckpt: Checkpoint) -> dict[str, Any]:
    """How ``flyviz simulate SPEC`` runs a checkpoint's graph as a spiking brain
    (:func:`flyviz.spiking.brain.brain_from_checkpoint`), or why it cannot."""
    from flyviz.spiking.brain import MALECNS_W_SYN, synapse_counts, why_no_brain

    _counts, unit, whole = synapse_counts(ckpt.w_values)
    why = why_no_brain(ckpt, whole)
    if why is not None:
        return {"runs": False, "millivolts": f"no: {why}"}
    count = f"weight / {unit:.6g} (the smallest |weight|, one synapse)"
    return {"runs": True, "w_syn_mV": MALECNS_W_SYN, "synapse_unit": unit,
            "signed_count": count,
            "millivolts": "flyviz simulate SPEC runs its graph; "
            + _millivolts(count, MALECNS_W_SYN, "MaleCNS's default; ")}


def describe_malecns(folder: Any) -> dict[str, Any]:
    """What ``flyviz info`` reports of a fly-connectome-malecns-166k folder: the dataset
    (counts, labels, populations, provenance) and how it runs as a spiking brain (how a
    weight becomes millivolts)."""
    from flyviz.model.formats.malecns import load_malecns
    from flyviz.spiking.brain import MALECNS_W_SYN, synapse_counts

    dataset = load_malecns(folder)
    info = dataset.describe()
    _counts, unit, whole = synapse_counts(dataset.weight)
    count = (f"weight / {unit:.6g} (the smallest |weight|, one synapse)" if whole else
             "the raw weight (the manifest's signed synaptic count; the weights are not "
             "whole multiples of one value)")
    info["spiking"] = {
        "w_syn_mV": MALECNS_W_SYN, "synapse_unit": unit if whole else None,
        "signed_count": count,
        "millivolts": _millivolts(count, MALECNS_W_SYN, "MaleCNS's default; ")
        + f", so a weight w adds {MALECNS_W_SYN / (unit if whole else 1.0):.6g} x w mV"}
    return info


def _malecns_text(info: dict[str, Any]) -> str:
    weights = info["weights"]
    largest = ", ".join(f"{k or '(none)'} {v:,}" for k, v in
                        list(info["superclasses"].items())[:4])
    lines = [("dataset", f"{info['name']} ({info['layout']})"), ("source", info["source"]),
             ("neurons", f"{info['neurons']:,}"), ("edges", f"{info['edges']:,}"),
             ("weights", f"raw signed ({weights['positive_edges']:,} excitatory, "
                         f"{weights['negative_edges']:,} inhibitory), no normalisation"),
             ("superclasses", f"{len(info['superclasses'])}: {largest}, ..."),
             ("cell types", f"{info['cell_types']:,} ({info['untyped']:,} neurons untyped)"),
             ("populations", ", ".join(f"{k} {v:,}" for k, v in info["populations"].items())
              + " (query: population:NAME)"),
             ("positions", "none (the dataset has no somata: drawn on a generic layout)"),
             ("as a brain", info["spiking"]["millivolts"])]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def describe_connectorch(path: Any) -> dict[str, Any]:
    """What ``flyviz info`` reports of a ConnecTorch ``.ct`` brain, read with both digests
    recomputed: its tables, digests, provenance and how it runs as a spiking brain."""
    from flyviz.model.formats.connectorch import read_brain, signed_weights
    from flyviz.spiking.brain import brain_from_connectorch

    ct = read_brain(path)
    _, count = signed_weights(ct)
    w_syn = brain_from_connectorch(ct).w_syn
    meta = json.loads((ct.path / "metadata.json").read_text(encoding="utf-8")) \
        if ct.path is not None else {}
    history = [str(step.get("op")) for step in ct.provenance.get("history") or []
               if isinstance(step, dict)]
    return {"layout": "connectorch", "path": str(ct.path), "nodes": ct.num_nodes,
            "edges": ct.num_edges, "node_ids": "text" if ct.string_ids else "int64",
            "node_columns": list(ct.node_columns), "edge_columns": list(ct.edge_columns),
            "fingerprint": meta.get("fingerprint"), "content_hash": meta.get("content_hash"),
            "dataset": ct.provenance.get("dataset"), "history": history,
            "null_model": ct.provenance.get("null_model"),
            "spiking": {"signed_count": count, "w_syn_mV": w_syn,
                        "millivolts": _millivolts(count, w_syn)}}


def _connectorch_text(info: dict[str, Any]) -> str:
    ids = "text: the neurons are numbered by index (id:N)" if info["node_ids"] == "text" \
        else "int64 (the root ids)"
    lines = [("brain", f"{info['path']} (ConnecTorch .ct)"),
             ("nodes", f"{info['nodes']:,}, ids {ids}"),
             ("edges", f"{info['edges']:,}"),
             ("node columns", ", ".join(info["node_columns"]) or "none"),
             ("edge columns", ", ".join(info["edge_columns"]) or "none"),
             ("fingerprint", f"{info['fingerprint']} (recomputed: matches)"),
             ("content hash", f"{info['content_hash']} (recomputed: matches)"),
             ("dataset", str(info["dataset"] or "not recorded")),
             ("history", ", ".join(info["history"]) or "none"),
             ("as a brain", info["spiking"]["millivolts"])]
    from flyviz.analysis.nulls import describe_record

    null = describe_record(info["null_model"])
    if null:
        lines.insert(1, ("null model", null))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def run(args: argparse.Namespace) -> int:
    """Load the model (or the 166k dataset, or a ConnecTorch brain) and print its
    description."""
    from flyviz.model.formats.connectorch import is_connectorch_brain
    from flyviz.model.resolve import malecns_folder

    if is_connectorch_brain(args.spec):
        data = describe_connectorch(args.spec)
        print(json.dumps(data, indent=2) if args.json else _connectorch_text(data))
        return 0
    folder = malecns_folder(args.spec)
    if folder is not None:
        data = describe_malecns(folder)
        print(json.dumps(data, indent=2) if args.json else _malecns_text(data))
        return 0
    info = describe(load_model_from_args(args))
    print(json.dumps(info, indent=2) if args.json else _text(info))
    return 0
