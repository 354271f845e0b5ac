"""Write a :class:`~flyviz.model.checkpoint.Checkpoint` in the real Fly LLM layouts.

This module has one job, the four writers and the manifests they fill, so
that one file says everything flyviz writes and how it matches the authors'
tools. The digests the manifests carry are :mod:`flyviz.model.digests`, the
golden traces a web export embeds :mod:`flyviz.model.golden` (their names are
imported here too); the readers of these layouts are :mod:`flyviz.model.formats`.

Each writer produces exactly the files, names, dtypes and keys that the
published models use (``fly-formats.md`` sections 1-4), so that whatever
flyviz can write it can also load, and so that tests can exercise every
loader on small models without a download:

* :func:`write_fly_llm_hf` -- ngxson/fly-llm-hf: ``config.json`` and one
  ``model.safetensors`` holding parameters and the frozen graph.
* :func:`write_wordbrain` -- fly-wordbrain: parameters-only safetensors and
  ``manifest.json``; the graph lives in a connectome dataset.
* :func:`write_connectome_dataset` -- fly-connectome-49k: raw little-endian
  graph, interface and neuron arrays with a ``manifest.json``.
* :func:`write_recital_web` -- the Fly Recital web export: ``.f32`` arrays and
  ``manifest.json``; the graph again comes from a dataset.
* :func:`write_malecns_dataset` -- fly-connectome-malecns-166k
  (``fly-family-2026.md`` §2): the whole MaleCNS graph with raw signed weights,
  sorted label tables, named populations and hop counts.
* :func:`write_control_release` -- fly-wordbrain's graph-control release
  (shuffled-10k): weights bound to a rewired graph, with the ``graph_control``
  block and receipt that rebuild it (``fly-family-2026.md`` §1.6).
* :func:`write_flygpt` -- QuixiAI/FlyGPT (``fly-family-2026.md`` §3.1): the 13
  published tensors in their dtypes, ``config.json`` with ``auto_map``, the
  65-character WordLevel tokenizer.

The manifests follow the real schemas (fly-formats.md sections 2.2, 3 and
4.2): the dataset's ``files`` is an object keyed by logical name, a
wordbrain manifest's ``selectors`` an object keyed by selector name with the
weights' ``safetensors_sha256``, and the frozen-buffer digests
(:func:`frozen_buffer_digests`) use the convention the released values were
computed with, so the loaders' recomputation and the dataset authors' own 18
checks (:func:`flyviz.model.formats.dataset.check_dataset`) accept them.

What the authors' own tools write, these write too (their scripts
``package_connectome.py``, ``export_web_model.py`` and
``package_model_release.py`` were read for their conventions):

* the int16 weights, their scale and recorded error in float32
  (:func:`~flyviz.model.checks.quantise_int16`), so that the authors'
  verifier accepts them on every seed;
* golden traces (:func:`golden_traces_for`: the four Fly Recital prompts,
  60 greedy tokens, from flyviz's float32 engine with the exact weights) in
  every web export, the one a release carries in ``web/`` included; the
  final state is the state after the last step the generator ran (the last
  token fed unless it is EOS);
* every manifest key of the real files. Where flyviz cannot know a value it
  writes ``null``: a release's ``training`` and ``license`` and a dataset's
  ``provenance`` and ``license`` (unless the checkpoint's metadata carries
  them), the update count and source checkpoint SHA-256 of a model flyviz
  did not train, a dataset's ``name`` unless given, ``soma.semantics``, the
  ``types`` annotation counts, and ``verification.numpy_matches_torch``
  (flyviz runs no PyTorch); ``held_out_scores`` is ``{}``. ``golden`` is
  ``[]`` only when the checkpoint has no tokenizer to encode the prompts;
* the authors' selector names (``minimum_validation_ce``,
  ``maximum_validation_accuracy``) in the safetensors metadata as in the
  manifest. Older flyviz versions wrote the file stem (``min-ce``) there;
  ``flyviz verify`` reads it with a note.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import ml_dtypes
import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.checks import INT16_TOP, quantise_int16
from flyviz.model.digests import (FROZEN_BUFFER_DTYPES, WEB_PARAMETERS, cell_type_index,
                                  frozen_buffer_digests, parameter_digests, selector_digests)
from flyviz.model.formats.common import sha256_file
from flyviz.model.formats.wordbrain import SELECTOR_NAMES
from flyviz.model.golden import GOLDEN_MAX_NEW_TOKENS, GOLDEN_PROMPTS, golden_traces_for
from flyviz.model.safetensors_io import save_safetensors

__all__ = ["FROZEN_BUFFER_DTYPES", "GOLDEN_MAX_NEW_TOKENS", "GOLDEN_PROMPTS",
           "frozen_buffer_digests", "golden_traces_for", "parameter_digests",
           "selector_digests", "write_connectome_dataset", "write_control_release",
           "write_fly_llm_hf", "write_flygpt", "write_malecns_dataset", "write_recital_web",
           "write_wordbrain", "CONTROL_GRAPH_NOTE", "PUBLISHED_ARCHITECTURE"]

#: Parameter tensor names of the released checkpoints -> Checkpoint attribute.
PARAMETER_NAMES = {
    "brain.wte.weight": "wte",
    "brain.in_proj": "in_proj",
    "brain.gain": "gain",
    "brain.rec_gain": "rec_gain",
    "brain.bias": "bias",
    "ln.weight": "ln_weight",
    "ln.bias": "ln_bias",
}
#: Readout tensor names: dense (ngxson) or two factors (fly-wordbrain).
HEAD_DENSE = "lm_head.weight"
HEAD_A = "lm_head.0.weight"
HEAD_B = "lm_head.1.weight"

_REMOTE_CODE_SENTINEL = "REMOTE_CODE_WAS_EXECUTED"


def _now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _f32(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)


def _parameter_tensors(ckpt: Checkpoint) -> dict[str, np.ndarray]:
    tensors = {name: _f32(getattr(ckpt, attr)) for name, attr in PARAMETER_NAMES.items()}
    if ckpt.head is not None:
        tensors[HEAD_DENSE] = _f32(ckpt.head)
    else:
        assert ckpt.head_a is not None and ckpt.head_b is not None
        tensors[HEAD_A] = _f32(ckpt.head_a)
        tensors[HEAD_B] = _f32(ckpt.head_b)
    return tensors


def _tokenizer_source(ckpt: Checkpoint, tokenizer_path: str | Path | None) -> Path | None:
    source = tokenizer_path if tokenizer_path is not None else ckpt.tokenizer_path
    return Path(source) if source is not None else None


def _copy_tokenizer(source: Path | None, model_dir: Path) -> None:
    if source is not None:
        target = model_dir / "tokenizer.json"
        if source.resolve() != target.resolve():
            shutil.copyfile(source, target)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _readout_rank(ckpt: Checkpoint) -> int | None:
    if ckpt.head is not None:
        return None
    assert ckpt.head_a is not None
    return int(ckpt.head_a.shape[0])


# --------------------------------------------------------------------------- HF
def write_fly_llm_hf(ckpt: Checkpoint, model_dir: str | Path, dtype: str = "F32",
                     tokenizer_path: str | Path | None = None, *,
                     n_in_declared: int | None = None,
                     with_remote_code: bool = False) -> Path:
    """Write the ngxson/fly-llm-hf layout.

    Parameters
    ----------
    ckpt
        The model. A factored readout is stored as ``lm_head.0.weight`` and
        ``lm_head.1.weight`` (the released model has a dense ``lm_head.weight``).
    model_dir
        Folder to create or fill.
    dtype
        ``"F32"`` (as released) or ``"BF16"`` for the floating-point tensors.
        Offsets and presynaptic indices are I32, ``in_index``/``out_index`` I64.
    tokenizer_path
        ``tokenizer.json`` to copy in; default: the checkpoint's.
    n_in_declared
        ``config.n_in``; the release declares 14,069 although only
        ``delay_k * (n_in // delay_k)`` = 14,064 neurons are driven.
    with_remote_code
        Also write ``modeling_fly.py`` and ``configuration_fly.py`` stand-ins,
        as the real repository has. Importing them writes a sentinel file next
        to them, so tests can prove flyviz never executes shipped code.

    Returns
    -------
    pathlib.Path
        ``model_dir``.
    """
    dtype = dtype.upper()
    if dtype not in ("F32", "BF16"):
        raise ValueError(f"dtype must be 'F32' or 'BF16', not {dtype!r}")
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    cfg = ckpt.config
    tensors = _parameter_tensors(ckpt)
    if dtype == "BF16":
        tensors = {name: array.astype(ml_dtypes.bfloat16) for name, array in tensors.items()}
    tensors["brain.w_values"] = (np.asarray(ckpt.w_values).astype(ml_dtypes.bfloat16)
                                 if dtype == "BF16" else _f32(ckpt.w_values))
    tensors["brain.w_offsets"] = np.ascontiguousarray(ckpt.w_offsets, dtype="<i4")
    tensors["brain.w_indices"] = np.ascontiguousarray(ckpt.w_indices, dtype="<i4")
    tensors["brain.in_index"] = np.ascontiguousarray(ckpt.in_index, dtype="<i8")
    tensors["brain.out_index"] = np.ascontiguousarray(ckpt.out_index, dtype="<i8")
    save_safetensors(model_dir / "model.safetensors", tensors, {"format": "pt"})

    config: dict[str, Any] = {
        "architectures": ["FlyForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_fly.FlyConfig",
                     "AutoModelForCausalLM": "modeling_fly.FlyForCausalLM"},
        "model_type": "fly",
        "n_neurons": cfg.neurons,
        "n_edges": ckpt.n_edges,
        "n_in": int(n_in_declared if n_in_declared is not None else cfg.n_inputs),
        "n_out": int(ckpt.out_index.shape[0]),
        "delay_k": cfg.delay_k,
        "d_embed": cfg.d_embed,
        "vocab_size": cfg.vocabulary,
        "leak": float(cfg.leak),
        "rec_target": 5.0,
        "input_scale": 1.0,
        "layer_norm_eps": float(cfg.layer_norm_eps),
        "pad_token_id": cfg.pad_token_id,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "use_cache": True,
        "torch_dtype": "bfloat16" if dtype == "BF16" else "float32",
    }
    if ckpt.head is None:
        config["readout_rank"] = _readout_rank(ckpt)
    _write_json(model_dir / "config.json", config)
    _write_json(model_dir / "generation_config.json",
                {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
                 "pad_token_id": cfg.pad_token_id, "max_new_tokens": 80, "do_sample": False})
    _copy_tokenizer(_tokenizer_source(ckpt, tokenizer_path), model_dir)
    if with_remote_code:
        _write_remote_code(model_dir, ("modeling_fly.py", "configuration_fly.py"))
    return model_dir


def _write_remote_code(model_dir: Path, modules: tuple[str, ...]) -> None:
    """Stand-ins for the Python a hub repository ships, that leave a sentinel when imported."""
    for module in modules:
        (model_dir / module).write_text(
            "# Stand-in for the remote code shipped with the real checkpoint.\n"
            "# flyviz must never import it: doing so leaves a sentinel file behind.\n"
            "from pathlib import Path\n"
            f"(Path(__file__).parent / {_REMOTE_CODE_SENTINEL!r}).write_text('executed')\n",
            encoding="utf-8")


# ------------------------------------------------------------------ FlyGPT
def write_flygpt(tensors: Mapping[str, np.ndarray], model_dir: str | Path, *,
                 microsteps: int = 2, training_state: Mapping[str, Any] | None = None,
                 graph: Mapping[str, Any] | None = None,
                 with_remote_code: bool = False) -> Path:
    """Write a QuixiAI/FlyGPT folder as its exporter does (``fly-family-2026.md`` §3.1).

    Parameters
    ----------
    tensors
        The 13 published tensors by name (:data:`flyviz.model.formats.flygpt.TENSORS`),
        in the dtypes to store: int32 ``graph.edge_index``/``graph.synapse_count``, int64
        node, input and output ids, ``ml_dtypes.bfloat16`` parameters as published.
    model_dir
        Folder to create or fill.
    microsteps
        ``config.microsteps`` (2 in every published variant).
    training_state, graph
        ``config.training_state`` and ``config.graph``; default: an untrained record.
    with_remote_code
        Also write ``modeling_flygpt.py`` and ``configuration_flygpt.py`` stand-ins that
        leave a sentinel file when imported (flyviz must never import them).

    Returns
    -------
    pathlib.Path
        ``model_dir``.
    """
    from flyviz.model.formats.flygpt import VOCABULARY
    from flyviz.model.tokenizer import character_tokenizer_json

    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    edges = int(tensors["graph.edge_index"].shape[1])
    neurons = int(tensors["graph.node_id"].shape[0])
    vocabulary, embed = (int(x) for x in tensors["embed.weight"].shape)
    save_safetensors(model_dir / "model.safetensors", dict(tensors),
                     {"format": "pt", "source": "MaleCNS v1.0 (CC-BY 4.0)",
                      "architecture": "FlyGPTForCausalLM"})
    graph_record = dict(graph) if graph is not None else {
        "graph_name": "fixture", "condition": "real", "control_seed": None,
        "source": "MaleCNS v1.0", "region_filter": None, "min_synapses": 1, "hash": "0" * 64}
    state = dict(training_state) if training_state is not None else {
        "status": "init", "condition": graph_record.get("condition"), "seed": 1, "step": 0,
        "val_loss": None, "checkpoint": None, "project": "FlyGPT"}
    _write_json(model_dir / "config.json", {
        "model_type": "flygpt", "architectures": ["FlyGPTForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_flygpt.FlyGPTConfig",
                     "AutoModelForCausalLM": "modeling_flygpt.FlyGPTForCausalLM"},
        "vocab_size": vocabulary, "num_neurons": neurons, "num_edges": edges,
        "embedding_dim": embed,
        "num_input_neurons": int(tensors["graph.input_nodes"].shape[0]),
        "num_output_neurons": int(tensors["graph.output_nodes"].shape[0]),
        "microsteps": int(microsteps), "activation": "tanh", "learned_leak": True,
        "leak_init": 0.9, "degree_normalization": True, "init_scale": 1.0,
        "dtype": "bfloat16", "graph": graph_record, "training_state": state})
    _write_json(model_dir / "generation_config.json",
                {"do_sample": True, "temperature": 0.8, "max_new_tokens": 300})
    (model_dir / "tokenizer.json").write_text(character_tokenizer_json(VOCABULARY),
                                              encoding="utf-8")
    _write_json(model_dir / "tokenizer_config.json",
                {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 10000000,
                 "clean_up_tokenization_spaces": False, "add_prefix_space": False})
    _write_json(model_dir / "graph_metadata.json", {"hash": graph_record.get("hash"),
                                                    "neurons": neurons, "edges": edges})
    if with_remote_code:
        _write_remote_code(model_dir, ("modeling_flygpt.py", "configuration_flygpt.py"))
    return model_dir


# ------------------------------------------------------------------ wordbrain
def _parameter_counts(tensors: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Trainable, encoder (``wte`` + ``in_proj``) and readout (head) parameter counts."""
    encoder = int(tensors["brain.wte.weight"].size + tensors["brain.in_proj"].size)
    readout = int(sum(a.size for name, a in tensors.items() if name.startswith("lm_head.")))
    return {"trainable_parameters": int(sum(a.size for a in tensors.values())),
            "encoder_parameters": encoder, "readout_parameters": readout}


@dataclass(frozen=True)
class _SelectorWeights:
    """One selector's weights file as written, and what its manifest entry repeats."""

    file: Path
    selector: str
    experiment: str
    updates: int | None
    source_sha256: str | None
    tensors: dict[str, np.ndarray]


def _write_selector_weights(ckpt: Checkpoint, file: Path, experiment: str | None,
                            updates: int | None,
                            extra: Mapping[str, str] | None = None) -> _SelectorWeights:
    """Write a release's parameters-only F32 safetensors with the packagers' metadata
    (``experiment``, ``selector``, ``updates``, ``source_checkpoint_sha256``, then ``extra``);
    an unknown update count or source digest is left out."""
    stem = file.stem
    selector = SELECTOR_NAMES.get(stem, stem)
    experiment = experiment if experiment is not None else str(
        ckpt.metadata.get("experiment", ckpt.name))
    known_updates = updates if updates is not None else ckpt.metadata.get("updates")
    update_count = int(known_updates) if known_updates is not None else None
    source_sha256 = ckpt.metadata.get("source_checkpoint_sha256") or None
    tensors = _parameter_tensors(ckpt)
    metadata = {"experiment": experiment, "selector": selector}
    if update_count is not None:
        metadata["updates"] = str(update_count)
    if source_sha256:
        metadata["source_checkpoint_sha256"] = str(source_sha256)
    metadata.update(extra or {})
    save_safetensors(file, tensors, metadata)
    return _SelectorWeights(file, selector, experiment, update_count,
                            str(source_sha256) if source_sha256 else None, tensors)


def write_wordbrain(ckpt: Checkpoint, model_dir: str | Path,
                    filename: str = "min-ce.safetensors", *,
                    tokenizer_path: str | Path | None = None,
                    experiment: str | None = None, updates: int | None = None,
                    web_export: bool | None = None,
                    golden_prompts: Sequence[str] = GOLDEN_PROMPTS,
                    golden_tokens: int = GOLDEN_MAX_NEW_TOKENS,
                    dataset: str = "fly-connectome",
                    architecture: Mapping[str, Any] | None = None) -> Path:
    """Write the fly-wordbrain layout: parameters-only F32 safetensors + manifest.

    The graph is not stored; write it with :func:`write_connectome_dataset`.
    The manifest's ``selectors`` entry (keyed ``minimum_validation_ce`` for
    ``min-ce.safetensors``, ``maximum_validation_accuracy`` for
    ``max-accuracy.safetensors``) records the file's ``safetensors_sha256``
    and the seven frozen-buffer digests that bind these weights to that graph.
    The safetensors metadata's ``selector`` is that name too, as the
    authors' ``package_model_release.py`` writes it.

    As a release carries it, the web export of these weights (golden traces
    included) goes into ``web/`` and is summarised in the manifest's
    ``web_export``. Every key of the authors' release manifest is written;
    ``training`` and ``license`` are ``null`` unless the checkpoint's
    metadata has them, as are ``updates`` and ``source_checkpoint_sha256``
    when unknown (the safetensors metadata then leaves them out), and
    ``held_out_scores`` is ``{}``: flyviz did not train or score the model.

    Parameters
    ----------
    ckpt
        The model (factored or dense readout).
    model_dir
        Folder to create or fill.
    filename
        Safetensors file name (``min-ce.safetensors`` or
        ``max-accuracy.safetensors`` for the two selectors).
    tokenizer_path
        Optional ``tokenizer.json`` to copy in (the released repository has
        none; flyviz fetches ngxson's alongside).
    experiment, updates
        Recorded in the safetensors metadata and the manifest; default: the
        checkpoint's metadata, else its name and ``null``.
    web_export
        Write ``web/``: ``None`` (default) when the folder has none yet (a
        second selector joins a release whose web export is the first's),
        ``True`` always, ``False`` never.
    golden_prompts, golden_tokens, dataset
        As for :func:`write_recital_web`.
    architecture
        Values replacing this model's own in the manifest's ``architecture``
        block. The authors' packager writes the sizes of
        :data:`PUBLISHED_ARCHITECTURE` whatever the model; pass them to write
        a release exactly as theirs (loaders take sizes from the tensors).

    Returns
    -------
    pathlib.Path
        ``model_dir``.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    cfg = ckpt.config
    weights = _write_selector_weights(ckpt, model_dir / filename, experiment, updates)
    selector_name, experiment = weights.selector, weights.experiment
    update_count, source_sha256, tensors, file = (weights.updates, weights.source_sha256,
                                                   weights.tensors, weights.file)
    rank = _readout_rank(ckpt)
    counts = _parameter_counts(tensors)
    manifest_path = model_dir / "manifest.json"
    manifest: dict[str, Any] = {}
    if manifest_path.exists():  # a second selector joins the first
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest.update({
        "schema_version": 1,
        "created_at_utc": _now_utc(),
        "experiment": experiment,
        "architecture": {
            "neurons": cfg.neurons, "edges": ckpt.n_edges, "delay_slots": cfg.delay_k,
            "encoder_width": cfg.d_embed, "readout_rank": rank, "vocabulary": cfg.vocabulary,
            "neurons_per_slot": cfg.neurons_per_slot, "leak": float(cfg.leak),
            "layer_norm_eps": float(cfg.layer_norm_eps),
            "edge_adaptation": "fixed",
            "recurrence": "x = (1 - leak) x + leak tanh(gain (rec_gain W x + drive) + bias)",
            **(architecture or {}),
        },
        **counts,
        "graph": {"dataset": dataset,
                  "note": "The connectome is not duplicated here. The frozen-buffer digests of "
                          "each selector identify the exact graph these weights run on; the "
                          "dataset manifest carries the same digests."},
    })
    manifest.setdefault("selectors", {})[selector_name] = {
        "file": filename, "selector": selector_name, "updates": update_count,
        "source_checkpoint_sha256": source_sha256,
        "safetensors_sha256": sha256_file(file),
        "validation": ckpt.metadata.get("validation"),
        "frozen_buffers_sha256": selector_digests(ckpt),
        "parameters": counts["trainable_parameters"],
    }
    manifest.setdefault("held_out_scores", {})
    manifest.setdefault("training", ckpt.metadata.get("training"))
    manifest.setdefault("license", ckpt.metadata.get("license"))
    web_dir = model_dir / "web"
    if web_export or (web_export is None and not (web_dir / "manifest.json").exists()):
        write_recital_web(ckpt, web_dir, {"selector": selector_name, "updates": update_count},
                          golden_prompts=golden_prompts, golden_tokens=golden_tokens,
                          dataset=dataset)
        web = json.loads((web_dir / "manifest.json").read_text(encoding="utf-8"))
        manifest["web_export"] = {
            "files": list(web["files"]), "config": web["config"],
            "golden_prompts": [entry["prompt"] for entry in web["golden"]],
            "note": "Raw little-endian float32 arrays in web/, streamed by the browser demo; "
                    "web/manifest.json carries the golden traces, computed by flyviz's "
                    "float32 engine."}
    manifest.setdefault("web_export", None)  # no web export made alongside
    _write_json(manifest_path, manifest)
    _copy_tokenizer(Path(tokenizer_path) if tokenizer_path is not None else None, model_dir)
    return model_dir


#: The sizes the authors' release packagers write in a manifest's ``architecture``
#: whatever the model (``fly-family-2026.md`` §1.4): a loader must not trust them.
PUBLISHED_ARCHITECTURE = {"neurons": 49393, "edges": 9050172, "vocabulary": 1024}

#: What the graph-control packager writes in each weights file's metadata.
CONTROL_GRAPH_NOTE = "randomised control graph; NOT the measured connectome"


def write_control_release(ckpt: Checkpoint, model_dir: str | Path, receipt: Mapping[str, Any],
                          filename: str = "min-ce.safetensors", *,
                          experiment: str | None = None, updates: int | None = None,
                          stage: str = "07-graph-control",
                          dataset: str = "fernandofernandes/fly-connectome-49k",
                          architecture: Mapping[str, Any] | None = None) -> Path:
    """Write a graph-control release (shuffled-10k's layout, ``fly-family-2026.md`` §1.6).

    As the authors' ``package_control_release.py`` writes it: the parameters
    in F32 safetensors whose metadata adds ``graph`` (:data:`CONTROL_GRAPH_NOTE`)
    and ``graph_w_indices_sha256``; ``manifest.json`` with the
    ``graph_control`` block (warning, mode, seed, how to rebuild, both index
    digests, what was preserved and changed) and ``selectors`` keyed by
    criterion, each naming its file (with no ``selector`` field, as theirs);
    and the trainer's receipt as ``graph-control.json``. No web export. Call
    it once per selector; the second joins the first's manifest.

    Parameters
    ----------
    ckpt
        The model on its control graph (its ``w_indices`` the rewired ones).
    model_dir
        Folder to create or fill.
    receipt
        The trainer's receipt (:func:`~flyviz.model.graph_control.control_receipt`);
        its control index digest must be ``ckpt``'s.
    filename
        ``min-ce.safetensors`` or ``max-accuracy.safetensors``.
    experiment, updates
        As for :func:`write_wordbrain`.
    stage, dataset
        The manifest's ``stage`` and ``graph.dataset``.
    architecture
        As for :func:`write_wordbrain`.

    Returns
    -------
    pathlib.Path
        ``model_dir``.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    frozen = frozen_buffer_digests(ckpt)
    control_digest = str(receipt["control_graph_sha256"]["w_indices"])
    if frozen["brain.w_indices"] != control_digest:
        raise ValueError("the checkpoint does not run on the receipt's control graph")
    weights = _write_selector_weights(ckpt, model_dir / filename, experiment, updates, {
        "graph": CONTROL_GRAPH_NOTE, "graph_w_indices_sha256": control_digest})
    criterion, experiment = weights.selector, weights.experiment
    update_count, source_sha256, tensors, file = (weights.updates, weights.source_sha256,
                                                   weights.tensors, weights.file)
    manifest_path = model_dir / "manifest.json"
    manifest: dict[str, Any] = (json.loads(manifest_path.read_text(encoding="utf-8"))
                                if manifest_path.exists() else {})
    cfg = ckpt.config
    receipt = dict(receipt)
    receipt.setdefault("frozen_buffers_sha256", frozen)
    manifest.update({
        "schema_version": 1, "created_at_utc": _now_utc(), "experiment": experiment,
        "stage": stage, "role": manifest.get("role") or ckpt.metadata.get("role"),
        "trainable_parameters": _parameter_counts(tensors)["trainable_parameters"],
        "architecture": {
            "neurons": cfg.neurons, "edges": ckpt.n_edges, "encoder_width": cfg.d_embed,
            "readout_rank": _readout_rank(ckpt), "delay_slots": cfg.delay_k,
            "vocabulary": cfg.vocabulary, "edge_adaptation": "fixed",
            "recurrence": "x = 0.1*x + 0.9*tanh(gain*(rec_gain*(W@x) + drive) + bias)",
            **(architecture or {}),
        },
        "graph_control": {
            "WARNING": "These weights were trained on a RANDOMISED graph. Loading them onto the "
                       "measured connectome gives a model that was never trained and its scores "
                       "are meaningless. Rebuild the control graph first.",
            "mode": receipt["mode"], "seed": receipt["seed"],
            "rebuild_with": "control_indices(offsets, source, mode, seed) of the authors' "
                            "train_connectorch_control.py (flyviz.model.graph_control), applied "
                            "to the measured graph of the dataset",
            "measured_graph_w_indices_sha256": receipt["original_graph_sha256"]["w_indices"],
            "control_graph_w_indices_sha256": control_digest,
            "synaptic_weights_unchanged": receipt["original_graph_sha256"]["w_values"]
            == receipt["control_graph_sha256"]["w_values"],
            "preserved": receipt["preserved"], "changed": receipt["changed"],
        },
        "graph": {"dataset": dataset,
                  "note": "Not duplicated here. This arm's graph is a deterministic function of "
                          "that dataset and the seed recorded above."},
    })
    manifest.setdefault("selectors", {})[criterion] = {
        "file": filename, "updates": update_count, "source_checkpoint_sha256": source_sha256,
        "safetensors_sha256": sha256_file(file),
        "parameters": _parameter_counts(tensors)["trainable_parameters"],
        "validation": ckpt.metadata.get("validation"),
        "frozen_buffers_sha256": selector_digests(ckpt),
    }
    for key in ("training", "license", "stage7_finding"):
        manifest.setdefault(key, ckpt.metadata.get(key))
    manifest.setdefault("held_out_scores", {})
    _write_json(manifest_path, manifest)
    _write_json(model_dir / "graph-control.json", {"created_at_utc": _now_utc(), **receipt})
    return model_dir


# -------------------------------------------------------------------- dataset
def _write_raw(root: Path, relative: str, array: np.ndarray, dtype: str) -> dict[str, Any]:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<"))
    data.tofile(path)
    return {"file": relative, "dtype": np.dtype(dtype).name,
            "shape": [int(s) for s in data.shape], "bytes": int(data.nbytes),
            "sha256": sha256_file(path)}


def _write_json_file(root: Path, relative: str, data: Any) -> dict[str, Any]:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    return {"file": relative, "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def write_connectome_dataset(ckpt: Checkpoint, dataset_dir: str | Path, *,
                             n_in_declared: int | None = None, name: str | None = None,
                             description: str | None = None) -> Path:
    """Write the fly-connectome-49k layout: the frozen graph, interface and anatomy.

    The manifest has the real schema: ``files`` keyed by logical name
    (``edges_offsets`` ... ``side``), top-level ``neurons`` and ``edges``,
    ``weights`` with the sign counts and the int16 copy's ``scale`` and
    ``max_absolute_error``, ``soma.positioned``, and the frozen-buffer
    digests with their original dtypes, so that the dataset passes all 18
    checks of :func:`flyviz.model.formats.dataset.check_dataset`.

    Parameters
    ----------
    ckpt
        The model whose graph, ``in_index``/``out_index`` and anatomy to write.
        Neuron files are written only when it has anatomy; the anatomy kind is
        recorded as ``manifest["anatomy"]["kind"]``.
    dataset_dir
        Folder to create or fill.
    n_in_declared
        ``interface.n_in_declared`` (default ``delay_k * neurons_per_slot``).
    name, description
        The manifest's ``name`` (``null`` unless given: flyviz does not know
        what the graph is called) and ``description``.

    Notes
    -----
    Every key of the authors' ``package_connectome.py`` manifest is written;
    those flyviz cannot fill are ``null``: ``provenance`` and ``license``
    (unless the checkpoint's metadata has them), ``soma.semantics``, and
    ``types.annotated``/``untyped_nodes``/``policy``. The int16 copy is made
    in float32 (:func:`~flyviz.model.checks.quantise_int16`), as theirs.

    Returns
    -------
    pathlib.Path
        ``dataset_dir``.
    """
    root = Path(dataset_dir)
    root.mkdir(parents=True, exist_ok=True)
    cfg = ckpt.config
    n = cfg.neurons
    files: dict[str, dict[str, Any]] = {}
    values = _f32(ckpt.w_values)
    files["edges_offsets"] = _write_raw(root, "graph/edges_offsets.i32", ckpt.w_offsets, "int32")
    if n <= 65_536:
        files["edges_source"] = _write_raw(root, "graph/edges_source.u16", ckpt.w_indices,
                                           "uint16")
    else:  # uint16 cannot index more neurons; flyviz reads this wider file instead
        files["edges_source"] = _write_raw(root, "graph/edges_source.i32", ckpt.w_indices,
                                           "int32")
    files["edges_weight_f32"] = _write_raw(root, "graph/edges_weight.f32", values, "float32")
    # The browser's int16 copy in the packager's float32 arithmetic: float64 codes differ
    # from the authors' by one here and there, and their verifier then rejects the file.
    codes, scale, quantisation_error = quantise_int16(values)
    peak = float(np.abs(values).max()) if values.size else 0.0
    files["edges_weight_i16"] = _write_raw(root, "graph/edges_weight.i16", codes, "int16")
    files["input_neurons"] = _write_raw(root, "interface/in_index.i32", ckpt.in_index, "int32")
    files["output_neurons"] = _write_raw(root, "interface/out_index.i32", ckpt.out_index, "int32")

    positive = int(np.count_nonzero(values > 0))
    negative = int(np.count_nonzero(values < 0))
    round_trip = codes.astype(np.float32) * np.float32(scale)
    source_file = files["edges_source"]["file"]
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "created_at_utc": _now_utc(),
        "name": name,
        "description": (description if description is not None else
                        f"A {n:,}-neuron / {ckpt.n_edges:,}-edge graph written by flyviz "
                        f"from the checkpoint {ckpt.name!r}"),
        "neurons": n,
        "edges": ckpt.n_edges,
        "files": files,
        "csr": {"orientation": f"row = destination neuron, {Path(source_file).stem} = "
                               "presynaptic neuron index",
                "offsets_length": n + 1,
                "reconstruct": f"for dst in range({n}): for e in range(offsets[dst], "
                               "offsets[dst+1]): W[dst, edges_source[e]] = edges_weight[e]",
                "rows": n, "columns": n, "nnz": ckpt.n_edges, "row": "postsynaptic",
                "offsets": "graph/edges_offsets.i32", "columns_file": source_file},
        "weights": {"signed": True, "count": ckpt.n_edges, "positive_edges": positive,
                    "negative_edges": negative, "zero_edges": ckpt.n_edges - positive - negative,
                    "absolute_max": peak,
                    "canonical": "graph/edges_weight.f32",
                    "quantised": {
                        "encoding": "symmetric fixed point, value = code * scale",
                        "file": "graph/edges_weight.i16", "scale": scale,
                        "max_absolute_error": quantisation_error,
                        "max_relative_error": quantisation_error / peak if peak > 0 else 0.0,
                        "sign_preserved": bool(np.array_equal(np.sign(round_trip),
                                                              np.sign(values))),
                        "arithmetic": f"float32: codes = rint(w / scale), scale = max|w| / "
                                      f"{INT16_TOP:g}, error = max|codes * scale - w|"}},
        "interface": {"n_in_declared": int(n_in_declared if n_in_declared is not None
                                           else cfg.n_inputs),
                      "in_index_length": int(np.asarray(ckpt.in_index).shape[0]),
                      "delay_slots": cfg.delay_k, "neurons_per_slot": cfg.neurons_per_slot,
                      "note": "Each delay slot drives neurons_per_slot neurons; the remainder "
                              "of the declared n_in is unused by integer division."},
    }
    anatomy = ckpt.anatomy
    if anatomy is not None:
        body_id = anatomy.body_id if anatomy.body_id is not None else np.arange(n)
        files["body_id"] = _write_raw(root, "neurons/body_id.i64", body_id, "int64")
        types = cell_type_index(anatomy)
        if types is not None:
            labels, type_index = types
            files["type_index"] = _write_raw(root, "neurons/type_index.i32", type_index, "int32")
        valid = np.asarray(anatomy.valid, dtype=bool)
        positions = np.rint(np.asarray(anatomy.positions, dtype=np.float64)).astype(np.int32)
        positions[~valid] = 0  # missing somata are stored as zeros, never invented
        files["soma_position"] = _write_raw(root, "neurons/soma_position.i32", positions, "int32")
        files["soma_valid"] = _write_raw(root, "neurons/soma_valid.u8", valid.astype(np.uint8),
                                         "uint8")
        if types is not None:
            files["type_labels"] = _write_json_file(root, "neurons/type_labels.json", labels)
            files["cell_type"] = _write_json_file(root, "neurons/cell_type.json",
                                                  list(anatomy.cell_type or ()))
        if anatomy.superclass is not None:
            files["superclass"] = _write_json_file(root, "neurons/superclass.json",
                                                   list(anatomy.superclass))
        if anatomy.side is not None:
            files["side"] = _write_json_file(root, "neurons/side.json", list(anatomy.side))
        manifest["soma"] = {"positioned": int(valid.sum()), "missing": int(n - valid.sum()),
                            "units": "8nm voxels",
                            "semantics": ckpt.metadata.get("soma_semantics"),
                            "missing_encoding": "soma_position rows are zero where soma_valid "
                                                "is 0",
                            "missing_rows": "zeros in soma_position.i32, 0 in soma_valid.u8",
                            "qualification": None if anatomy.kind == "measured" else
                            f"{anatomy.kind} positions, not measured somata"}
        if types is not None:
            manifest["types"] = {"groups": len(types[0]), "annotated": None,
                                 "untyped_nodes": None, "policy": None}
        manifest["anatomy"] = {"kind": anatomy.kind}
    manifest["provenance"] = ckpt.metadata.get("provenance")
    manifest["frozen_buffers_sha256"] = frozen_buffer_digests(ckpt)
    manifest["frozen_buffers_original_dtype"] = dict(FROZEN_BUFFER_DTYPES)
    manifest["frozen_buffers_rebuild"] = {
        "brain.w_offsets": "graph/edges_offsets.i32", "brain.w_indices": source_file,
        "brain.w_values": "graph/edges_weight.f32", "brain.in_index": "interface/in_index.i32",
        "brain.out_index": "interface/out_index.i32",
        "note": "Cast each packed array back to its original dtype, then hash dtype + shape + "
                "raw bytes to reproduce the checkpoint digest."}
    manifest["license"] = ckpt.metadata.get("license")
    _write_json(root / "manifest.json", manifest)
    return root


def _write_label_json(root: Path, relative: str, data: Any) -> dict[str, Any]:
    """A JSON file as the 166k packager writes it: indented by 2, UTF-8 as is, a newline."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
                      + "\n").encode("utf-8"))
    return {"file": relative, "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _categorical(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Labels as an int32 index into ``sorted({str(v)})``, as the 166k packager stores them."""
    labels = sorted({str(v) for v in values})
    lookup = {label: i for i, label in enumerate(labels)}
    return np.array([lookup[str(v)] for v in values], dtype=np.int32), labels


def write_malecns_dataset(dataset_dir: str | Path, *, offsets: np.ndarray, source: np.ndarray,
                          weight: np.ndarray, body_id: np.ndarray, superclass: Sequence[str],
                          cell_type: Sequence[str], populations: Mapping[str, np.ndarray],
                          hops_from_retina: np.ndarray | None = None,
                          hops_to_descending: np.ndarray | None = None,
                          synaptic_contacts: int | None = None) -> Path:
    """Write the fly-connectome-malecns-166k layout (``fly-family-2026.md`` §2.1-2.2).

    The files, dtypes and manifest of the authors' ``package_full_connectome.py``:
    ``graph/edges_offsets.i32``, ``edges_source.i32``, ``edges_weight.f32`` (raw, signed),
    ``neurons/body_id.i64``, ``superclass_index.i32``/``cell_type_index.i32`` into sorted
    label tables (``superclass_labels.json``/``cell_type_labels.json``, indented by 2 with a
    final newline), ``populations/<name>.i32`` and ``derived/hops_*.i32``; ``manifest.json``
    keys each file by logical name with ``{file, dtype, shape, bytes, sha256}`` (JSON files
    ``{file, bytes, sha256}``) and carries every block of theirs. What flyviz cannot know
    (the upstream files, the packager's digest) is ``null``.

    Parameters
    ----------
    dataset_dir
        A folder to create or fill.
    offsets, source, weight
        Destination-major CSR (row = postsynaptic neuron), written as int32, int32, float32.
    body_id
        MaleCNS body ids (int64); the published set is in ascending order.
    superclass, cell_type
        One label per neuron (``""`` for an untyped neuron).
    populations
        Name -> neuron indices, in the published order ``retina, lamina, descending, sugar``.
    hops_from_retina, hops_to_descending
        Default: computed (:func:`~flyviz.model.formats.malecns.hop_counts`) from the
        ``retina`` and ``descending`` populations.
    synaptic_contacts
        The manifest's ``synaptic_contacts`` (default: the sum of |weight|, rounded).

    Returns
    -------
    pathlib.Path
        ``dataset_dir``.
    """
    from flyviz.model.formats.malecns import MALECNS_FILES, MALECNS_NAME, hop_counts

    root = Path(dataset_dir)
    root.mkdir(parents=True, exist_ok=True)
    weight = np.asarray(weight, dtype=np.float32)
    n = int(np.asarray(offsets).shape[0]) - 1
    superclass_index, superclass_labels = _categorical(superclass)
    cell_type_index_, cell_type_labels = _categorical(cell_type)
    if hops_from_retina is None:
        hops_from_retina = hop_counts(offsets, source, populations.get("retina", np.zeros(0, np.int32)))
    if hops_to_descending is None:
        hops_to_descending = hop_counts(offsets, source, populations.get("descending", np.zeros(0, np.int32)),
                                        downstream=False)
    arrays = {"edges_offsets": (offsets, "int32"), "edges_source": (source, "int32"),
              "edges_weight": (weight, "float32"), "body_id": (body_id, "int64"),
              "superclass_index": (superclass_index, "int32"),
              "cell_type_index": (cell_type_index_, "int32")}
    files: dict[str, dict[str, Any]] = {}
    for name, (array, dtype) in arrays.items():
        files[name] = _write_raw(root, MALECNS_FILES[name], array, dtype)
    files["superclass_labels"] = _write_label_json(root, MALECNS_FILES["superclass_labels"],
                                                   superclass_labels)
    files["cell_type_labels"] = _write_label_json(root, MALECNS_FILES["cell_type_labels"],
                                                  cell_type_labels)
    for name, hops in (("hops_from_retina", hops_from_retina),
                       ("hops_to_descending", hops_to_descending)):
        files[name] = _write_raw(root, MALECNS_FILES[name], hops, "int32")
    for name, members in populations.items():
        files[f"population_{name}"] = _write_raw(root, f"populations/{name}.i32", members,
                                                 "int32")
    edges = int(weight.shape[0])
    manifest = {
        "schema_version": 1,
        "created_at_utc": _now_utc(),
        "name": MALECNS_NAME,
        "description": "The complete MaleCNS v1.0 connectome as typed arrays: every neuron, "
                       "every directed edge, raw signed weights, destination-major CSR.",
        "neurons": n,
        "edges": edges,
        "synaptic_contacts": int(synaptic_contacts) if synaptic_contacts is not None
        else int(round(float(np.abs(weight.astype(np.float64)).sum()))),
        "csr": {"orientation": "row = postsynaptic neuron, edges_source = presynaptic neuron "
                               "index",
                "offsets_length": n + 1,
                "reconstruct": "for post in range(neurons): for e in range(offsets[post], "
                               "offsets[post+1]): W[post, edges_source[e]] = edges_weight[e]",
                "transpose_note": "Transpose for a presynaptic-major view; no edge is "
                                  "coalesced."},
        "weights": {
            "raw": True, "normalization_applied": False,
            "semantics": "Signed synaptic count: magnitude from the flat connectome at minimum "
                         "confidence 0.5, sign from the neurotransmitter prediction. Not a "
                         "conductance and not a measured physiological strength.",
            "positive_edges": int(np.count_nonzero(weight > 0)),
            "negative_edges": int(np.count_nonzero(weight < 0)),
            "zero_edges": int(np.count_nonzero(weight == 0)),
            "absolute_max": float(np.abs(weight).max()) if edges else 0.0},
        "neurons_detail": {
            "superclasses": len(superclass_labels), "cell_types": len(cell_type_labels),
            "untyped": int(sum(1 for v in cell_type if str(v) == "")),
            "note": "Cell type is an empty label where the source carries no official type."},
        "populations": {name: int(np.asarray(members).shape[0])
                        for name, members in populations.items()},
        "derived": {
            "hops_from_retina": "Unweighted shortest-path hop count from the retinal input "
                                "set; -1 where unreachable.",
            "hops_to_descending": "Unweighted shortest-path hop count to the descending set; "
                                  "-1 where unreachable.",
            "computed_by": "this project, not the upstream release"},
        "soma_positions": {
            "included": False,
            "note": "Soma coordinates are not part of this package. The central-brain subset "
                    "dataset fly-connectome-49k carries measured soma positions for its "
                    "49,393 neurons."},
        "provenance": {"dataset": "MaleCNS v1.0 flat connectome", "upstream_files": None,
                       "assembled_via": None, "source_graph_sha256": None,
                       "source_graph_bytes": None, "packager_sha256": None,
                       "minimum_confidence": 0.5},
        "related": {"central_brain_subset": "fernandofernandes/fly-connectome-49k",
                    "models": ["fernandofernandes/fly-wordbrain-rank64",
                               "fernandofernandes/fly-wordbrain-rank32"]},
        "files": files,
        "license": {"data": "CC-BY-4.0",
                    "attribution": "FlyEM / HHMI Janelia Research Campus, University of "
                                   "Cambridge, MRC Laboratory of Molecular Biology, Google "
                                   "Research",
                    "packaging_code": "MIT"},
    }
    _write_label_json(root, "manifest.json", manifest)
    return root


# ------------------------------------------------------------------ web export
def _web_config(ckpt: Checkpoint) -> dict[str, Any]:
    cfg = ckpt.config
    return {"neurons": cfg.neurons, "delay_k": cfg.delay_k, "vocabulary": cfg.vocabulary,
            "d_embed": cfg.d_embed, "readout_rank": _readout_rank(ckpt),
            "neurons_per_slot": cfg.neurons_per_slot, "leak": float(cfg.leak),
            "pad_token_id": cfg.pad_token_id, "bos_token_id": cfg.bos_token_id,
            "eos_token_id": cfg.eos_token_id, "layer_norm_eps": float(cfg.layer_norm_eps)}


def write_recital_web(ckpt: Checkpoint, model_dir: str | Path,
                      extra_manifest: Mapping[str, Any] | None = None, *,
                      golden_prompts: Sequence[str] = GOLDEN_PROMPTS,
                      golden_tokens: int = GOLDEN_MAX_NEW_TOKENS,
                      dataset: str = "fly-connectome") -> Path:
    """Write the Fly Recital web export: raw float32 ``.f32`` files + ``manifest.json``.

    The graph is not stored; write it with :func:`write_connectome_dataset`.
    A dense readout is written as ``head.f32`` (the released export is
    rank-64 and has ``head_a.f32``/``head_b.f32``). The checkpoint's
    tokenizer, if any, is copied in as ``tokenizer.json``.

    The manifest has every key of ``export_web_model.py``'s: ``golden``
    traces (:func:`golden_traces_for`), ``verification`` with the int16
    weights' ``quantisation_drift`` (``numpy_matches_torch`` is ``null``:
    flyviz runs no PyTorch) and ``graph.quantised_alternative.scale`` (the
    dataset's int16 scale). ``selector``, ``checkpoint_sha256`` and
    ``updates`` come from the checkpoint's metadata, else ``null``.

    Parameters
    ----------
    ckpt
        The model.
    model_dir
        Folder to create or fill.
    extra_manifest
        Keys merged into the top level of the manifest last (e.g.
        ``experiment``, provenance). ``golden`` given here replaces the
        computed traces (none are computed then).
    golden_prompts, golden_tokens
        The golden traces' prompts and greedy tokens (the authors': four
        prompts, 60 tokens); an empty ``golden_prompts`` writes none.
    dataset
        ``graph.dataset``: the name of the dataset folder to find beside it.

    Returns
    -------
    pathlib.Path
        ``model_dir``.
    """
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    arrays = {name: getattr(ckpt, name) for name in WEB_PARAMETERS}
    if ckpt.head is not None:
        arrays["head"] = ckpt.head
    else:
        arrays["head_a"] = ckpt.head_a
        arrays["head_b"] = ckpt.head_b
    files = {}
    for name, array in arrays.items():
        data = np.ascontiguousarray(array, dtype="<f4")
        path = model_dir / f"{name}.f32"
        data.tofile(path)
        files[name] = {"file": path.name, "shape": [int(s) for s in data.shape],
                       "dtype": "float32", "bytes": int(data.nbytes), "sha256": sha256_file(path)}
    trainable = int(sum(np.asarray(a).size for a in arrays.values()))
    golden: list[dict[str, Any]] = []
    drift: list[dict[str, Any]] = []
    if not (extra_manifest and "golden" in extra_manifest):
        golden, drift = golden_traces_for(ckpt, golden_prompts, golden_tokens)
    _codes, scale, _error = quantise_int16(ckpt.w_values)
    updates = ckpt.metadata.get("updates")
    manifest: dict[str, Any] = {
        "schema_version": 1,
        "created_at_utc": _now_utc(),
        "experiment": ckpt.metadata.get("experiment", ckpt.name),
        "selector": ckpt.metadata.get("selector"),
        "checkpoint_sha256": ckpt.metadata.get("checkpoint_sha256") or None,
        "updates": int(updates) if updates is not None else None,
        "trainable_parameters": trainable,
        "config": _web_config(ckpt),
        "index_checks": {
            "in_index_unique": bool(np.unique(ckpt.in_index).size == ckpt.in_index.size),
            "out_index_is_identity": ckpt.out_index_is_identity(),
        },
        "graph": {
            "dataset": dataset,
            "edges": ckpt.n_edges,
            "encoding": "graph/edges_weight.f32 (exact) with graph/edges_source.u16 and "
                        "graph/edges_offsets.i32",
            "quantised_alternative": {"file": "graph/edges_weight.i16", "scale": scale,
                                      "halves_the_edge_payload": True},
            "frozen_buffers_sha256": frozen_buffer_digests(ckpt),
        },
        "layout": {
            "in_index": "slot-major: slot j drives in_index[j*neurons_per_slot:(j+1)*neurons_per_slot]",
            "out_index": "identity" if ckpt.out_index_is_identity() else "interface/out_index.i32",
            "drive": "concat_j wte[token(t-j)] @ in_proj[j]",
            "recurrence": "x = (1-leak) x + leak tanh(gain (rec_gain W x + drive) + bias)",
            "readout": ("LayerNorm(x) @ head.T" if ckpt.head is not None
                        else "LayerNorm(x) @ head_a.T @ head_b.T"),
        },
        "files": files,
        "verification": {
            "numpy_matches_torch": None,
            "quantisation_drift": drift,
            "note": "Golden traces were computed by flyviz's float32 engine with the exact "
                    "float32 graph the browser downloads; the final state is the state after "
                    "the last step the generator ran (the last token fed unless it is EOS). "
                    "flyviz runs no PyTorch, so numpy_matches_torch is null. The drift rows "
                    "record what the int16 edge file would change.",
        },
        "golden": golden,
    }
    if extra_manifest:
        manifest.update(dict(extra_manifest))
    _write_json(model_dir / "manifest.json", manifest)
    _copy_tokenizer(ckpt.tokenizer_path, model_dir)
    return model_dir
