"""fly-wordbrain checkpoints: parameters-only safetensors plus a connectome dataset.

``fly-formats.md`` section 2. The safetensors file holds the trained
parameters (``lm_head.0.weight``/``lm_head.1.weight`` readout factors, or a
dense ``lm_head.weight`` for full-readout arms); ``manifest.json`` records the
frozen-buffer digests of the graph the weights were trained on. Sizes follow
from the tensor shapes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.config import ModelConfig
from flyviz.model.errors import CheckpointError
from flyviz.model.formats.common import (NODE_TYPE_INDEX, READOUT_TENSORS, array_digest,
                                          check_sha256, compare_frozen_digests, find_tokenizer,
                                          read_json, read_readout, real_number, whole_number)
from flyviz.model.formats.dataset import (ConnectomeDataset, DatasetFiles,
                                          load_connectome_dataset)
from flyviz.model.formats.recital import checkpoint_from_parts
from flyviz.model.safetensors_io import SafetensorsFile

#: Selector files in order of preference when none is named.
DEFAULT_SELECTORS = ("min-ce.safetensors", "max-accuracy.safetensors")

_PARAMETERS = {"brain.wte.weight": "wte", "brain.in_proj": "in_proj", "brain.gain": "gain",
               "brain.rec_gain": "rec_gain", "brain.bias": "bias", "ln.weight": "ln_weight",
               "ln.bias": "ln_bias"}


#: The extra parameters of the arms that extend the operator (``fly-family-2026.md`` §1.7,
#: §1.8): a trainable leak per neuron, and bounded type-pair multipliers of the edges.
LEAK_DELTA = "brain.leak_delta"
THETA_SOURCE, THETA_DESTINATION = "brain.edge_theta_source", "brain.edge_theta_destination"
ARM_TENSORS = (LEAK_DELTA, THETA_SOURCE, THETA_DESTINATION)


#: Stored dtypes a parameter may have (the releases are F32; BF16 is upcast exactly).
PARAMETER_DTYPES = ("F32", "BF16")

#: Selector names of a release manifest by weights file stem (``package_model_release.py``).
SELECTOR_NAMES = {"min-ce": "minimum_validation_ce",
                  "max-accuracy": "maximum_validation_accuracy"}


def selector_entry_problem(key: str, entry: Any) -> str | None:
    """What is wrong with one entry of a release manifest's ``selectors``, or ``None``.

    The authors' packagers write each entry as an object whose ``file`` is a bare file
    name in the release folder (``min-ce.safetensors``). An entry that is not an object
    binds nothing, and a ``file`` with a folder in it (``../min-ce.safetensors``) names a
    file flyviz does not load: both are a damaged manifest. An entry without ``file`` is
    read as its key's usual file (:func:`selector_names`).

    Parameters
    ----------
    key
        The entry's key in ``selectors`` (``""`` for a list of entries).
    entry
        The entry as read from the JSON.
    """
    name = f"selector {key}" if key else "selector entry"
    if not isinstance(entry, dict):
        return (f"manifest.json's {name} is {entry!r:.40}, not an object naming its file, "
                "safetensors_sha256 and frozen_buffers_sha256; the manifest is damaged, "
                "download it again")
    file = entry.get("file")
    if not file:
        return None
    if not isinstance(file, str) or Path(file).name != file or file in (".", "..") \
            or "\\" in file:
        return (f"manifest.json's {name} names the file {file!r:.60}, not a file name in the "
                "release folder (the packagers write bare names such as min-ce.safetensors); "
                "the manifest is damaged, download it again")
    return None


def _selector_problem(manifest: dict[str, Any], filename: str) -> str | None:
    """The problem (:func:`selector_entry_problem`) of the damaged entry that stands for
    ``filename``: its key is the file's selector name or stem, or its ``file`` ends in
    ``filename``; ``None`` when there is none."""
    selectors = manifest.get("selectors")
    stem = Path(filename).stem
    entries: list[tuple[str, Any]] = (list(selectors.items()) if isinstance(selectors, dict)
                                      else [("", e) for e in selectors]
                                      if isinstance(selectors, list) else [])
    for key, entry in entries:
        problem = selector_entry_problem(str(key), entry)
        if problem is None:
            continue
        named = entry.get("selector") if isinstance(entry, dict) else None
        file = entry.get("file") if isinstance(entry, dict) else None
        if key in (stem, SELECTOR_NAMES.get(stem)) or named in (stem, SELECTOR_NAMES.get(stem)) \
                or (isinstance(file, str) and Path(file.replace("\\", "/")).name == filename):
            return problem
    return None


def selector_entry(manifest: dict[str, Any], filename: str) -> dict[str, Any]:
    """The ``selectors`` entry of a weights file (``{}`` when the manifest has none).

    Release manifests key ``selectors`` by selector name
    (``minimum_validation_ce``) and name the file in each entry; a list of
    entries, or keys equal to the file stem, are accepted too.
    """
    selectors = manifest.get("selectors")
    stem = Path(filename).stem
    entries: list[tuple[str, Any]] = (list(selectors.items()) if isinstance(selectors, dict)
                                      else [("", e) for e in selectors]
                                      if isinstance(selectors, list) else [])
    for key, entry in entries:  # the file an entry names decides
        if isinstance(entry, dict) and entry.get("file") == filename \
                and selector_entry_problem(str(key), entry) is None:
            return entry
    for key, entry in entries:  # else an entry without a file, by name
        if isinstance(entry, dict) and not entry.get("file") \
                and (stem in (key, entry.get("selector")) or key == SELECTOR_NAMES.get(stem)):
            return entry
    return {}


def selector_names(manifest: dict[str, Any]) -> dict[str, str]:
    """``{selector key: weights file}`` of a release manifest's ``selectors``.

    The authors' packagers key ``selectors`` by criterion
    (``minimum_validation_ce``, ``maximum_validation_accuracy``) and name the
    file in each entry; an entry without ``file`` is read as the key's usual
    file (``min-ce.safetensors`` ...), else ``<key>.safetensors``.
    """
    selectors = manifest.get("selectors")
    if not isinstance(selectors, dict):
        return {}
    stems = {name: stem for stem, name in SELECTOR_NAMES.items()}
    names: dict[str, str] = {}
    for key, entry in selectors.items():
        file = entry.get("file") if isinstance(entry, dict) else None
        names[str(key)] = Path(str(file)).name if file else f"{stems.get(str(key), key)}.safetensors"
    return names


def selector_file(manifest: dict[str, Any], selector: str, where: str) -> str:
    """The weights file of the selector a manifest keys ``selector``.

    Raises
    ------
    CheckpointError
        When the manifest has no such key (the message lists the keys it has).
    """
    names = selector_names(manifest)
    if selector in names:
        selectors = manifest.get("selectors")
        problem = selector_entry_problem(selector, selectors.get(selector)) \
            if isinstance(selectors, dict) else None
        if problem:
            raise CheckpointError(f"{where}: {problem}")
        return names[selector]
    have = ", ".join(names) or "none"
    raise CheckpointError(f"{where} has no selector {selector!r}; its manifest's selectors are "
                          f"{have}")


def weights_digest(entry: dict[str, Any]) -> str | None:
    """The SHA-256 a selector entry records for its weights file.

    Release manifests call it ``safetensors_sha256``; flyviz 0.1 wrote ``sha256``.
    """
    value = entry.get("safetensors_sha256") or entry.get("sha256")
    return str(value) if value else None


def _refuse_a_missing_default(model_dir: Path) -> None:
    """Refuse in one line when the folder's release manifest has a minimum-validation-CE
    selector whose file is missing: loading the other selector instead would give another
    model than the default the user asked for, without a word."""
    try:
        manifest = read_json(model_dir / "manifest.json", "manifest.json")
    except CheckpointError:
        return  # no (readable) manifest: the binding check says what is wrong
    names = selector_names(manifest) if isinstance(manifest, dict) else {}
    default_key = SELECTOR_NAMES[Path(DEFAULT_SELECTORS[0]).stem]
    if default_key not in names and DEFAULT_SELECTORS[0] not in names.values():
        return  # a release (or a null of one selector) without a min-CE selector
    others = [f"--selector {key} to load {file}" for key, file in names.items()
              if file != DEFAULT_SELECTORS[0] and (model_dir / file).is_file()]
    raise CheckpointError(
        f"{model_dir / DEFAULT_SELECTORS[0]} is missing: it holds the release's default "
        f"selector, {default_key}; download it again"
        + (f", or pass {' or '.join(others)}" if others else ""))


def pick_selector_file(model_dir: Path, filename: str | None = None) -> Path:
    """The safetensors file to load: ``filename``, else min-CE, else the only one.

    Raises
    ------
    CheckpointError
        When ``filename`` is not in the folder; when, without it, the release's manifest
        names a min-CE selector whose file is missing (the message says which selector
        loads another file); when the folder holds no weights, or several and none is
        min-CE.
    """
    if filename is not None:
        path = model_dir / filename
        if not path.is_file():
            raise CheckpointError(f"{path} not found; the folder holds "
                                  f"{', '.join(p.name for p in model_dir.glob('*.safetensors')) or 'no safetensors'}")
        return path
    default = model_dir / DEFAULT_SELECTORS[0]
    if default.is_file():
        return default
    _refuse_a_missing_default(model_dir)
    for candidate in DEFAULT_SELECTORS[1:]:
        if (model_dir / candidate).is_file():
            return model_dir / candidate
    found = sorted(model_dir.glob("*.safetensors"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(f"{model_dir} holds no .safetensors weights; download "
                              "min-ce.safetensors into it")
    raise CheckpointError(f"{model_dir} holds several weight files ({', '.join(p.name for p in found)}); "
                          "name one")


#: Safetensors metadata keys only the graph-control packager writes.
CONTROL_METADATA = ("graph", "graph_w_indices_sha256")

#: The trainer's receipt of the control graph, which the graph-control packager copies
#: beside the weights (``fly-family-2026.md`` §1.6).
CONTROL_RECEIPT = "graph-control.json"

#: What to do about a graph-control release whose files disagree.
_INCONSISTENT = "the release is inconsistent, download it again"


def _whole_count(value: Any) -> int | None:
    """A JSON integer >= 0 as an ``int``; ``None`` for anything else (text, a bool, a
    fraction): a count compared with the rebuild's must be one."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if value >= 0 else None


def _digest_at(block: Any, key: str) -> str | None:
    """``block[key]`` lower-cased when ``block`` is an object recording it, else ``None``."""
    value = block.get(key) if isinstance(block, dict) else None
    return str(value).lower() if value else None


def _control_receipt(model_dir: Path, where: str) -> dict[str, Any]:
    """The release's ``graph-control.json``, refused in one line when missing or not an
    object: the packager always copies it, and its digests are checked against the graph."""
    path = model_dir / CONTROL_RECEIPT
    if not path.is_file():
        raise CheckpointError(f"{where}: {path} is missing; the graph-control packager copies "
                              "the trainer's receipt of the control graph into every release, "
                              "download the whole release folder again")
    receipt = read_json(path, CONTROL_RECEIPT)
    if not isinstance(receipt, dict):
        raise CheckpointError(f"{where}: {path} is not a JSON object (the trainer's receipt of "
                              "the control graph); download it again")
    return receipt


def _check_control_receipt(receipt: dict[str, Any], *, mode: Any, seed: int, measured: str,
                           control: str, repairs: int, frozen: Any, where: str) -> None:
    """The receipt against the manifest's ``graph_control`` block and the selector's
    frozen digests, which the loader then holds to the rebuilt graph and the dataset.

    The authors' packager requires and copies every field read here (it checks the
    receipt's frozen digests against each selector's); ``control_source_sha256`` and
    ``created_at_utc`` are not read (shuffled-10k's receipt lacks the first).
    """
    said = f"{where}: {CONTROL_RECEIPT} records"
    for key, want in (("mode", mode), ("seed", seed)):
        value = receipt.get(key)
        if key not in receipt or isinstance(value, bool) or value != want:
            raise CheckpointError(f"{said} {key} {value!r:.40} but manifest.json's "
                                  f"graph_control records {want!r:.40}; {_INCONSISTENT}")
    original, rewired = receipt.get("original_graph_sha256"), receipt.get("control_graph_sha256")
    for block, what, want in ((rewired, "the control graph", control),
                              (original, "the measured graph", measured)):
        value = _digest_at(block, "w_indices")
        if value != want:
            raise CheckpointError(
                f"{said} {what} {value[:12] + '...' if value else 'no digest'} but "
                f"manifest.json's graph_control records {want[:12]}...; {_INCONSISTENT}")
    frozen = frozen if isinstance(frozen, dict) else {}
    weights = _digest_at(frozen, "brain.w_values")
    for block in (original, rewired):
        value = _digest_at(block, "w_values")
        if weights and value and value != weights:
            raise CheckpointError(
                f"{said} the weights {value[:12]}... but the selector's frozen digests record "
                f"brain.w_values {weights[:12]}... (a shuffle moves no weight); "
                f"{_INCONSISTENT}")
    buffers = receipt.get("frozen_buffers_sha256")
    if not isinstance(buffers, dict) or not buffers:
        raise CheckpointError(f"{said} no frozen_buffers_sha256, the digests the packager "
                              f"checks each selector against; {_INCONSISTENT}")
    for name, value in buffers.items():
        # As the authors' packager: every buffer the receipt asserts, the selector must too.
        have = _digest_at(frozen, str(name))
        if have != str(value).lower():
            raise CheckpointError(
                f"{said} {name} {str(value)[:12]}... but the selector's frozen digests "
                f"{'record ' + have[:12] + '...' if have else 'record none'}; {_INCONSISTENT}")
    changed = receipt.get("changed")
    count = _whole_count(changed.get("repaired_slots")) if isinstance(changed, dict) else None
    if count != repairs:
        raise CheckpointError(f"{said} {count if count is not None else 'no'} repaired slots "
                              f"but manifest.json's graph_control records {repairs:,}; "
                              f"{_INCONSISTENT}")


def _control_dataset(dataset: ConnectomeDataset, control: Any, metadata: dict[str, str],
                     entry: dict[str, Any], model_dir: Path,
                     where: str) -> tuple[ConnectomeDataset, dict[str, Any]]:
    """The dataset with the graph-control arm's rewired indices, after every record agrees.

    ``control`` is the manifest's ``graph_control`` block; the rebuilt graph
    (:func:`~flyviz.model.graph_control.control_indices`) must have the digest
    and the repaired-slot count it records, and be rebuilt from the measured
    graph it records. The safetensors metadata (``graph`` and
    ``graph_w_indices_sha256``), the selector's frozen digests and the
    trainer's receipt (``graph-control.json``) must repeat them: the
    authors' packager writes each of them into every release. Returns the
    dataset and the graph record ``flyviz info`` shows.
    """
    from flyviz.model.graph_control import control_indices

    if not isinstance(control, dict):
        raise CheckpointError(f"{where}: manifest.json's graph_control is not an object; "
                              "download the manifest again")
    seed, mode = control.get("seed"), control.get("mode")
    recorded = control.get("control_graph_w_indices_sha256")
    if isinstance(seed, bool) or not isinstance(seed, int) or not recorded:
        raise CheckpointError(f"{where}: manifest.json's graph_control lacks its seed or the "
                              "control graph's digest, so the graph these weights were trained "
                              "on cannot be rebuilt; download the manifest again")
    if seed < 0:
        # NumPy's generators take no negative seed: refused here, not as its ValueError.
        raise CheckpointError(f"{where}: manifest.json's graph_control seed is {seed}, not a "
                              "whole number >= 0 (the trainer's --control-seed), so the graph "
                              "these weights were trained on cannot be rebuilt; the manifest "
                              "is damaged, download it again")
    if not isinstance(mode, str) or not mode:
        raise CheckpointError(f"{where}: manifest.json's graph_control records no mode (the "
                              "trainer's --graph-control, shuffle for shuffled-10k), so the "
                              "graph these weights were trained on cannot be rebuilt; the "
                              "manifest is damaged, download it again")
    recorded = str(recorded).lower()
    measured = _digest_at(control, "measured_graph_w_indices_sha256")
    if not measured:
        raise CheckpointError(f"{where}: manifest.json's graph_control records no "
                              "measured_graph_w_indices_sha256, so nothing says which measured "
                              "graph the control graph is rebuilt from; the manifest is "
                              "damaged, download it again")
    changed = control.get("changed")
    repairs = _whole_count(changed.get("repaired_slots")) if isinstance(changed, dict) else None
    if repairs is None:
        raise CheckpointError(f"{where}: manifest.json's graph_control records no "
                              "repaired_slots count (a whole number) in its changed block, so "
                              "the rebuild cannot be checked against it; the manifest is "
                              "damaged, download it again")
    missing = [key for key in CONTROL_METADATA if not metadata.get(key)]
    if missing:
        raise CheckpointError(f"{where}: its safetensors metadata has no {' or '.join(missing)}, "
                              "which the graph-control packager writes into each weights file "
                              "of the release; the file is not the release's, download it "
                              "again")
    frozen = entry.get("frozen_buffers_sha256")
    for source, value in (("the safetensors metadata binds",
                           metadata.get("graph_w_indices_sha256")),
                          ("the selector's frozen-buffer digests bind",
                           frozen.get("brain.w_indices") if isinstance(frozen, dict) else None)):
        if value and str(value).lower() != recorded:
            raise CheckpointError(f"{where}: {source} these weights to the graph "
                                  f"{str(value)[:12]}... but graph_control records "
                                  f"{recorded[:12]}...; {_INCONSISTENT}")
    _check_control_receipt(_control_receipt(model_dir, where), mode=mode, seed=seed,
                           measured=measured, control=recorded, repairs=repairs, frozen=frozen,
                           where=where)
    # The trainer hashed the measured indices as int32, whatever dtype the dataset stores.
    have = array_digest(np.asarray(dataset.indices), "int32")
    if measured != have:
        raise CheckpointError(f"{where}: the control graph is rebuilt from the measured graph "
                              f"{measured[:12]}... but the dataset's presynaptic indices are "
                              f"{have[:12]}...; use fernandofernandes/fly-connectome-49k")
    rebuilt = control_indices(dataset.offsets, dataset.indices, str(mode), seed)
    if rebuilt.digest != recorded:
        raise CheckpointError(
            f"{where}: the control graph rebuilt from seed {seed} has digest "
            f"{rebuilt.digest[:12]}... ({rebuilt.repaired_slots:,} repaired slots), not the "
            f"recorded {recorded[:12]}... ({repairs:,} repaired); NumPy {np.__version__}'s "
            "random streams may differ from the ones the weights were trained with, and the "
            "weights are valid on that graph only: not loaded")
    if rebuilt.repaired_slots != repairs:
        raise CheckpointError(
            f"{where}: the control graph rebuilt from seed {seed} has the recorded digest but "
            f"took {rebuilt.repaired_slots:,} repaired slots, not the {repairs:,} repaired "
            f"slots manifest.json's graph_control records; {_INCONSISTENT}")
    digests = dict(dataset.graph_digests)
    digests["brain.w_indices"] = rebuilt.digest
    record = {"control": f"randomised ({mode}, seed {seed}), NOT the measured connectome",
              "rebuilt_from": f"{dataset.path} (w_indices {measured[:12]}...)",
              "repaired_slots": rebuilt.repaired_slots, "w_indices_sha256": rebuilt.digest,
              "receipt": f"{CONTROL_RECEIPT} agrees (digests, seed, repaired slots)"}
    return dataclasses.replace(dataset, indices=rebuilt.indices, graph_digests=digests), record


def _control_digest_without_block(model_dir: Path, meta: dict[str, str],
                                  entry: dict[str, Any]) -> str | None:
    """The control graph a release without a ``graph_control`` block was trained on, when
    its weights' metadata or its receipt says so (``None`` otherwise).

    The receipt counts only when it binds the selector's own frozen ``brain.w_indices``:
    a stray ``graph-control.json`` beside a measured-graph release is no evidence.
    """
    if any(meta.get(key) for key in CONTROL_METADATA):
        return str(meta.get("graph_w_indices_sha256") or "?")
    path = model_dir / CONTROL_RECEIPT
    if not path.is_file():
        return None
    try:
        receipt = read_json(path, CONTROL_RECEIPT)
    except CheckpointError:
        return None
    control = _digest_at(receipt.get("control_graph_sha256") if isinstance(receipt, dict)
                         else None, "w_indices")
    bound = _digest_at(entry.get("frozen_buffers_sha256"), "brain.w_indices")
    return control if control and control == bound else None


#: What to do when the weights cannot be bound to their graph.
_WHOLE_RELEASE = ("download the whole release folder (manifest.json beside the weights), or "
                  "load it by its hub id, e.g. fernandofernandes/fly-wordbrain-rank32")


def _binding_entry(model_dir: Path, weights: Path,
                   meta: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The release manifest and the selector entry of ``weights``, refused in one line
    unless the entry records the frozen-buffer digests that bind the weights to a graph.

    The safetensors holds parameters only: without those digests the weights would run
    on any graph of the same size and give wrong answers without a word.
    """
    manifest_path = model_dir / "manifest.json"
    if not manifest_path.is_file():
        control = meta.get("graph_w_indices_sha256") or meta.get("graph")
        trained = (f" was trained on a randomised control graph "
                   f"({str(meta.get('graph_w_indices_sha256', ''))[:12]}...), not the measured "
                   "connectome, and" if control else "")
        raise CheckpointError(
            f"{weights.name}{trained} has no manifest.json beside it in {model_dir}; the "
            "manifest's selector digests bind the weights to the graph they were trained on, "
            "and without them they would run on any graph of their size; "
            + (_WHOLE_RELEASE.replace("rank32", "shuffled-10k") if control else _WHOLE_RELEASE))
    manifest = read_json(manifest_path, "manifest.json")
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{manifest_path} is not a JSON object; {_WHOLE_RELEASE}")
    if not isinstance(manifest.get("selectors"), (dict, list)):
        raise CheckpointError(
            f"{manifest_path} has no selectors block, so nothing binds {weights.name} to a "
            f"graph; {_WHOLE_RELEASE}")
    entry = selector_entry(manifest, weights.name)
    if not entry:
        problem = _selector_problem(manifest, weights.name)
        if problem:
            # The entry is there but damaged: "no entry" would contradict the list of keys.
            raise CheckpointError(f"{model_dir}: {problem}")
        have = ", ".join(selector_names(manifest)) or "none"
        raise CheckpointError(
            f"{manifest_path}'s selectors have no entry for {weights.name} (they are {have}), "
            f"so nothing binds it to a graph; {_WHOLE_RELEASE}")
    frozen = entry.get("frozen_buffers_sha256")
    if not isinstance(frozen, dict) or not frozen:
        raise CheckpointError(
            f"{manifest_path}: the selector entry of {weights.name} records no "
            f"frozen_buffers_sha256, so nothing binds it to a graph; {_WHOLE_RELEASE}")
    return manifest, entry


def _selector_key(manifest: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """The key of the manifest's ``selectors`` that ``entry`` is (its ``selector`` field
    for a list of entries), or ``None``."""
    selectors = manifest.get("selectors")
    if isinstance(selectors, dict):
        return next((str(key) for key, value in selectors.items() if value is entry), None)
    value = entry.get("selector")
    return str(value) if value else None


def _refuse_a_renamed_selector(weights: Path, manifest: dict[str, Any],
                               entry: dict[str, Any], failure: CheckpointError) -> None:
    """Say so when a weights file whose digest failed is another selector's file (the
    files were swapped or renamed); return to let ``failure`` stand otherwise."""
    from flyviz.model.formats.common import sha256_file

    actual = sha256_file(weights).lower()
    selectors = manifest.get("selectors")
    for key, other in (selectors.items() if isinstance(selectors, dict) else ()):
        if isinstance(other, dict) and other is not entry \
                and str(weights_digest(other) or "").lower() == actual:
            named = Path(str(other.get("file") or f"{key}.safetensors")).name
            raise CheckpointError(
                f"{weights.name}: its SHA-256 {actual[:12]}... is the one the manifest records "
                f"for selector {key!r} ({named}), not this file's; the selector files were "
                "swapped or renamed: give each its own name again, or download them again"
            ) from failure


def _refuse_unknown_tensors(st: SafetensorsFile, name: str) -> None:
    """One line for a file holding tensors this loader does not run: leaving one out would
    run another model than the file's without a word (a multitask arm's ``unified.*``
    readouts, a per-edge-group ``brain.edge_theta``)."""
    known = {*_PARAMETERS, *ARM_TENSORS, *READOUT_TENSORS.values()}
    unknown = sorted(set(st.keys()) - known)
    if unknown:
        shown = ", ".join(unknown[:4]) + (f" and {len(unknown) - 4} more" if len(unknown) > 4
                                          else "")
        what = (" (a multitask arm's: flyviz runs the language arms)"
                if any(t.startswith("unified.") for t in unknown) else "")
        raise CheckpointError(f"{name} holds tensors that flyviz does not run: {shown}{what}; "
                              "without them it would be another model than the file's")


def _apply_arm_parameters(ckpt: Checkpoint, st: SafetensorsFile, name: str,
                          dataset: ConnectomeDataset) -> None:
    """The trainable-leak arm's per-neuron leak and the bounded arms' edge multipliers into
    the operator's parameters (:mod:`flyviz.model.operator`): ``leak_vector`` and the
    effective ``w_values``. Zero parameters give the fixed arm bit for bit."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.operator import bounded_edge_values, trainable_leak

    n = ckpt.config.neurons
    if LEAK_DELTA in st:
        delta = st.get(LEAK_DELTA)
        if delta.shape != (n,):
            raise CheckpointError(f"{name}: {LEAK_DELTA} has shape {list(delta.shape)}, expected "
                                  f"[{n}] (one per neuron)")
        if not np.isfinite(delta).all():
            raise CheckpointError(f"{name}: {LEAK_DELTA} holds a non-finite value")
        ckpt.leak_vector = trainable_leak(delta)
        validate_checkpoint(ckpt)   # a delta of -800 makes a leak of 0
    present = [t for t in (THETA_SOURCE, THETA_DESTINATION) if t in st]
    if not present:
        return
    if len(present) == 1:
        missing = THETA_DESTINATION if present[0] == THETA_SOURCE else THETA_SOURCE
        raise CheckpointError(f"{name} holds {present[0]} but not {missing}: the bounded arms "
                              "store both")
    files = DatasetFiles.open(dataset.path) if dataset.path is not None else None
    if files is None or not files.present("type_index"):
        raise CheckpointError(f"{name}'s edge multipliers are per cell type, and the dataset "
                              f"{dataset.path} has no neurons/type_index.i32 to say each "
                              "neuron's type")
    # The type index the selector's brain.node_type_index digest binds the weights to.
    types = np.asarray(files.buffer(NODE_TYPE_INDEX), dtype=np.int64)
    theta_src, theta_dst = st.get(THETA_SOURCE), st.get(THETA_DESTINATION)
    width = int(types.max(initial=-1)) + 1
    for tensor, theta in ((THETA_SOURCE, theta_src), (THETA_DESTINATION, theta_dst)):
        if theta.ndim != 1 or theta.shape[0] < width:
            raise CheckpointError(f"{name}: {tensor} has shape {list(theta.shape)}; the "
                                  f"dataset's neurons have {width:,} cell types")
        if not np.isfinite(theta).all():
            raise CheckpointError(f"{name}: {tensor} holds a non-finite value")
    ckpt.w_values = bounded_edge_values(ckpt.w_values, ckpt.w_indices, ckpt.w_offsets, types,
                                        theta_src, theta_dst)
    ckpt.metadata["edge_multipliers"] = (f"bounded type-pair multipliers 1 + 0.1 tanh(θ_src + "
                                         f"θ_dst) over {theta_src.shape[0]:,} cell types")


#: Each parameter's shape by size: N neurons, O read-out neurons, K delay slots, P input
#: neurons per slot, D embedding width, V vocabulary, R readout rank.
_SHAPES = {"brain.wte.weight": ("V", "D"), "brain.in_proj": ("K", "D", "P"),
           "brain.gain": ("N",), "brain.rec_gain": ("N",), "brain.bias": ("N",),
           "ln.weight": ("O",), "ln.bias": ("O",), "lm_head.weight": ("V", "O"),
           "lm_head.0.weight": ("R", "O"), "lm_head.1.weight": ("V", "R")}
#: What each size is, as a refusal says it.
_SIZE_NAMES = {"N": "neurons", "O": "read-out neurons", "K": "delay slots",
               "P": "input neurons per slot", "D": "embedding width", "V": "vocabulary",
               "R": "readout rank"}
#: The manifest's key of each size the tensors alone may leave open.
_MANIFEST_SIZES = {"V": "vocabulary", "D": "d_embed", "R": "readout_rank"}


def _check_parameter_shapes(shapes: dict[str, tuple[int, ...]], name: str,
                            dataset: ConnectomeDataset, hint: Any) -> None:
    """Refuse the first parameter whose shape is not the one the other sizes fix, naming
    that tensor (not a healthy one a size was read from).

    The graph the frozen digests bound the weights to fixes the neurons, the read-out
    neurons and the input neurons (with the dataset's interface, the slots and their
    width). The vocabulary, the embedding width and the readout rank are each carried by
    two tensors: when they disagree, the manifest's value (``hint(key)``) says which is
    right, else both are named.

    Parameters
    ----------
    shapes
        ``{tensor: shape}`` of the parameters present in the weights file.
    name
        The weights file's name, for the messages.
    dataset
        The graph the weights run on (its digests already matched theirs).
    hint
        ``hint(key)``: the manifest's value of a size key, or ``None``.
    """
    sizes: dict[str, int] = {"N": dataset.neurons, "O": int(dataset.out_index.shape[0])}
    inputs = int(dataset.in_index.shape[0])
    if dataset.neurons_per_slot:
        sizes["P"] = dataset.neurons_per_slot
        sizes["K"] = dataset.delay_slots or inputs // dataset.neurons_per_slot
    elif dataset.delay_slots:
        sizes["K"] = dataset.delay_slots
        sizes["P"] = inputs // dataset.delay_slots
    where = {letter: [(tensor, axis) for tensor, dims in _SHAPES.items() if tensor in shapes
                      for axis, d in enumerate(dims) if d == letter] for letter in _SIZE_NAMES}
    for letter in ("K", "P", "D", "V", "R"):
        if letter in sizes:
            continue
        seen = {tensor: shapes[tensor][axis] for tensor, axis in where[letter]
                if axis < len(shapes[tensor])}
        values = set(seen.values())
        if len(values) <= 1:
            if values:
                sizes[letter] = values.pop()
            continue
        key = _MANIFEST_SIZES.get(letter)
        manifest_value = hint(key) if key else None
        if isinstance(manifest_value, int) and manifest_value in values:
            sizes[letter] = manifest_value
            continue
        shown = " but ".join(f"{tensor} {size:,}" for tensor, size in seen.items())
        raise CheckpointError(f"{name}: the {_SIZE_NAMES[letter]} differs between its "
                              f"tensors ({shown}); one of them is damaged, download the file "
                              "again")
    if "K" in sizes and "P" in sizes and sizes["K"] * sizes["P"] != inputs:
        raise CheckpointError(f"{name}: brain.in_proj drives {sizes['K']} slots x "
                              f"{sizes['P']} neurons but the graph has {inputs:,} input "
                              "neurons; the file is damaged, download it again")
    for tensor, dims in _SHAPES.items():
        if tensor not in shapes:
            continue
        expected = [sizes.get(d, -1) for d in dims]
        got = list(shapes[tensor])
        if len(got) == len(expected) and all(e in (-1, g) for e, g in zip(expected, got)):
            continue
        why = ", ".join(f"{sizes[d]:,} {_SIZE_NAMES[d]}" for d in dict.fromkeys(dims)
                        if d in sizes)
        raise CheckpointError(f"{name}: {tensor}: has shape {got} but the model needs "
                              f"{[e if e >= 0 else '?' for e in expected]} ({why}); the file "
                              "is damaged, download it again")



def load_wordbrain(model_dir: str | Path, dataset_dir: str | Path, *,
                   filename: str | None = None, tokenizer_path: str | Path | None = None,
                   name: str | None = None, verify: bool | None = None) -> Checkpoint:
    """Load a fly-wordbrain checkpoint and join it to its graph dataset.

    Parameters
    ----------
    model_dir
        Folder with ``min-ce.safetensors`` (or another selector) and
        ``manifest.json``.
    dataset_dir
        The fly-connectome dataset folder.
    filename
        Which safetensors file; default ``min-ce.safetensors``.
    tokenizer_path
        ``tokenizer.json``; default: one found in ``model_dir`` or ``dataset_dir``.
    name
        Display name; default: the experiment in the metadata, else the folder.
    verify
        SHA-256 policy for the weights and dataset files (see
        :func:`~flyviz.model.formats.dataset.load_connectome_dataset`).

    Returns
    -------
    Checkpoint
        Validated, layout ``"wordbrain"``.

    Notes
    -----
    Sizes come from the tensors: the manifest's ``architecture`` block is
    not read for them (the authors' packager writes 49,393 neurons,
    9,050,172 edges and 1,024 tokens whatever the model). A graph-control
    release (a ``graph_control`` block in the manifest, shuffled-10k) runs on
    its rewired graph, rebuilt from the dataset and the recorded seed by
    :func:`~flyviz.model.graph_control.control_indices` and refused unless
    its digest and repaired-slot count are the recorded ones and the
    release agrees with itself (the weights' ``graph`` metadata, the
    selector's frozen digests, the trainer's ``graph-control.json``);
    weights whose safetensors metadata or receipt binds them to a control
    graph are refused without that block.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"model folder not found: {model_dir}")
    weights = pick_selector_file(model_dir, filename)
    st = SafetensorsFile(weights)
    meta = dict(st.metadata)
    manifest, entry = _binding_entry(model_dir, weights, meta)
    expected_sha256 = weights_digest(entry)
    if not expected_sha256:
        # The authors' packagers always record it: without it the file loaded is not the
        # one the release vouches for, and nothing would say so.
        raise CheckpointError(
            f"{model_dir / 'manifest.json'}: the selector entry of {weights.name} records no "
            "safetensors_sha256, so the weights cannot be checked against the release; the "
            "manifest is damaged, download it again")
    try:
        check_sha256(weights, expected_sha256, verify)
    except CheckpointError as exc:
        _refuse_a_renamed_selector(weights, manifest, entry, exc)
        raise
    control = manifest.get("graph_control")
    trained_on = _control_digest_without_block(model_dir, meta, entry) if control is None \
        else None
    if trained_on:
        raise CheckpointError(
            f"{weights.name} was trained on a randomised control graph "
            f"({trained_on[:12]}...), not the measured connectome, and the folder's "
            "manifest.json has no graph_control block to rebuild it from; download the "
            "release's manifest.json beside it")
    _refuse_unknown_tensors(st, weights.name)
    for tensor in (*_PARAMETERS, *ARM_TENSORS, "lm_head.weight", "lm_head.0.weight",
                   "lm_head.1.weight"):
        if tensor in st and st.dtype(tensor) not in PARAMETER_DTYPES:
            raise CheckpointError(f"{weights.name}: {tensor} is {st.dtype(tensor)}, expected "
                                  f"{' or '.join(PARAMETER_DTYPES)} (the releases store F32); "
                                  "the file is damaged or holds other weights")
    params: dict[str, np.ndarray] = {}
    for tensor, attr in _PARAMETERS.items():
        params[attr] = st.get(tensor)
    readout, rank = read_readout(st, weights.name)
    params.update(readout)
    in_proj, wte = params["in_proj"], params["wte"]
    if in_proj.ndim != 3 or wte.ndim != 2:
        raise CheckpointError(f"{weights.name}: brain.in_proj has shape {list(in_proj.shape)} and "
                              f"brain.wte.weight {list(wte.shape)}; expected 3 and 2 dimensions")
    arch: dict[str, Any] = manifest.get("architecture") or {}
    arch = arch if isinstance(arch, dict) else {}
    web_cfg = (manifest.get("web_export") or {}).get("config") if isinstance(
        manifest.get("web_export"), dict) else None
    web_cfg = web_cfg if isinstance(web_cfg, dict) else {}
    assert isinstance(web_cfg, dict)

    def pick(key: str, default: Any) -> Any:
        for source in (web_cfg, arch):
            if source.get(key) is not None:
                return source[key]
        return default

    config = ModelConfig(
        neurons=int(params["gain"].shape[0]), delay_k=int(in_proj.shape[0]),
        neurons_per_slot=int(in_proj.shape[2]), d_embed=int(wte.shape[1]),
        vocabulary=int(wte.shape[0]), readout_rank=rank,
        leak=real_number(pick("leak", 0.9), "manifest.json: leak"),
        layer_norm_eps=real_number(pick("layer_norm_eps", 1e-5), "manifest.json: layer_norm_eps"),
        pad_token_id=whole_number(pick("pad_token_id", 0), "manifest.json: pad_token_id"),
        bos_token_id=whole_number(pick("bos_token_id", 1), "manifest.json: bos_token_id"),
        eos_token_id=whole_number(pick("eos_token_id", 2), "manifest.json: eos_token_id"))

    dataset = load_connectome_dataset(dataset_dir, verify=verify)
    frozen = entry["frozen_buffers_sha256"]
    if not set(frozen) & set(dataset.graph_digests):
        raise CheckpointError(
            f"{weights.name}: its selector's frozen_buffers_sha256 names none of the graph's "
            f"buffers ({', '.join(sorted(dataset.graph_digests))}), so nothing binds these "
            f"weights to {dataset.path}; {_WHOLE_RELEASE}")
    graph_record = None
    if control is not None:
        dataset, graph_record = _control_dataset(dataset, control, meta, entry, model_dir,
                                                  weights.name)
    # Weights from another graph are that graph's problem: said before any shape is blamed.
    compare_frozen_digests(frozen, dataset.graph_digests)
    _check_parameter_shapes({t: tuple(st.shape(t)) for t in _SHAPES if t in st}, weights.name,
                            dataset, lambda key: pick(key, None))
    metadata: dict[str, Any] = {k: meta[k] for k in ("experiment", "selector", "updates",
                                                     "source_checkpoint_sha256") if k in meta}
    metadata["weights_file"] = weights.name
    metadata["selector_key"] = _selector_key(manifest, entry)
    if graph_record is not None:
        metadata["graph"] = graph_record
    metadata["weights_sha256_manifest"] = expected_sha256
    tok = Path(tokenizer_path) if tokenizer_path is not None else find_tokenizer(
        model_dir, Path(dataset_dir))
    ckpt = checkpoint_from_parts(
        params, config, dataset, name=name or str(meta.get("experiment") or model_dir.name),
        layout="wordbrain", tokenizer_path=tok, source=model_dir,
        model_digests=frozen, metadata=metadata,
        tensor_names={attr: f"{weights.name}: {tensor}" for tensor, attr in
                      (*_PARAMETERS.items(), *((t, a) for a, t in READOUT_TENSORS.items()))})
    _apply_arm_parameters(ckpt, st, weights.name, dataset)
    ckpt.digests[f"file/{weights.name}"] = expected_sha256
    # The release stores its named_parameters() only (fly-formats.md §2.2), so every tensor
    # counts, the extra ones of the trainable-leak and type-pair arms included.
    ckpt.trainable_tensors = {t: int(np.prod(st.shape(t))) for t in st.keys()}
    return ckpt
