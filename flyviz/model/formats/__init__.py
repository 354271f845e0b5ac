"""Loaders for every published Fly LLM layout, and layout detection.

=================  ===============================================  ==========================
layout             files                                            loader
=================  ===============================================  ==========================
``fly-llm-hf``     ``config.json`` + ``model.safetensors``          :func:`load_fly_llm_hf`
``wordbrain``      ``*.safetensors`` (parameters) + manifest        :func:`load_wordbrain`
``recital-web``    ``manifest.json`` + ``wte.f32`` ... ``head_b``   :func:`load_recital_web`
``connectome``     ``manifest.json`` + ``graph/edges_offsets.i32``  :func:`load_connectome_dataset`
``flygpt``         ``config.json`` (``model_type "flygpt"``)        :func:`load_flygpt`
                   + ``model.safetensors``
=================  ===============================================  ==========================

The last three need a connectome dataset folder for the graph. Python files
shipped with a checkpoint are never imported.
"""

from __future__ import annotations

import json
from pathlib import Path

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.errors import CheckpointError, DatasetNotFoundError
from flyviz.model.formats.dataset import (ConnectomeDataset, load_connectome_dataset,
                                          load_dataset_anatomy)
from flyviz.model.formats.flygpt import is_flygpt_config, load_flygpt
from flyviz.model.formats.hf import load_fly_llm_hf, refuse_model_without_its_config
from flyviz.model.formats.recital import load_recital_web
from flyviz.model.formats.wordbrain import load_wordbrain

LAYOUT_HF = "fly-llm-hf"
LAYOUT_WORDBRAIN = "wordbrain"
LAYOUT_RECITAL = "recital-web"
LAYOUT_DATASET = "connectome-dataset"
LAYOUT_FLYGPT = "flygpt"

__all__ = ["ConnectomeDataset", "LAYOUT_DATASET", "LAYOUT_FLYGPT", "LAYOUT_HF", "LAYOUT_RECITAL",
           "LAYOUT_WORDBRAIN", "detect_layout", "find_dataset", "load_connectome_dataset",
           "load_dataset_anatomy", "load_fly_llm_hf", "load_flygpt", "load_folder", "load_recital_web", "load_wordbrain"]


def detect_layout(folder: str | Path) -> str:
    """Which layout a folder holds, judged from the files present.

    Returns
    -------
    str
        One of ``"fly-llm-hf"``, ``"flygpt"``, ``"wordbrain"``, ``"recital-web"``,
        ``"connectome-dataset"``.

    Raises
    ------
    CheckpointError
        When the folder is missing or holds none of them.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"no such folder: {folder}")
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return LAYOUT_FLYGPT if is_flygpt_config(folder) else LAYOUT_HF
    if (folder / "graph" / "edges_offsets.i32").is_file():
        return LAYOUT_DATASET
    if (folder / "wte.f32").is_file() and (folder / "manifest.json").is_file():
        return LAYOUT_RECITAL
    if not (folder / "config.json").is_file():
        # FlyGPT's or ngxson's weights without their config.json are no fly-wordbrain
        # release: say what is missing, not which dataset a release would need.
        refuse_model_without_its_config(folder, None)
    if any(folder.glob("*.safetensors")):
        return LAYOUT_WORDBRAIN
    from flyviz.model.formats.connectorch import is_connectorch_brain

    if is_connectorch_brain(folder):
        raise CheckpointError(f"{folder} is a ConnecTorch brain (a graph, no language model): "
                              "run it with flyviz simulate or flyviz screen, write its nulls "
                              "with flyviz null; flyviz info checks its digests")
    if (folder / "config.json").is_file():
        raise CheckpointError(f"{folder} has config.json but no model.safetensors; download "
                              "model.safetensors into it")
    raise CheckpointError(f"{folder} holds no Fly LLM checkpoint: expected config.json + "
                          "model.safetensors, a web export (manifest.json + wte.f32 ...) or "
                          "fly-wordbrain weights (*.safetensors)")


def _declared_dataset(folder: Path) -> str | None:
    """The dataset name a wordbrain/web manifest points at, if any."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    graph = manifest.get("graph") if isinstance(manifest, dict) else None
    if isinstance(graph, dict) and graph.get("dataset"):
        return str(graph["dataset"]).rstrip("/").split("/")[-1]
    return None


def find_dataset(model_dir: str | Path, *, anatomy_only: bool = False) -> Path | None:
    """Look for the connectome dataset next to or above a model folder.

    Checks ``<model>/dataset``, ``<model>/connectome``, then sibling and parent
    folders that are datasets (``graph/edges_offsets.i32`` inside), preferring
    the name the model's manifest gives. With ``anatomy_only``, a folder
    with ``neurons/soma_position.i32`` is enough.
    """
    from flyviz.model.formats.common import read_json
    from flyviz.model.formats.malecns import is_malecns_manifest  # no Fly LLM's graph

    model_dir = Path(model_dir).resolve()
    preferred = _declared_dataset(model_dir)
    # (folder, named): a folder the model names (its dataset/ or connectome/ subfolder, or
    # the dataset its manifest declares) is taken even when its manifest is damaged, so
    # that loading says so; any other sibling only when its manifest reads as one.
    candidates: list[tuple[Path, bool]] = [(model_dir / "dataset", True),
                                           (model_dir / "connectome", True)]
    for parent in (model_dir.parent, model_dir.parent.parent):
        if preferred:
            candidates.append((parent / preferred, True))
        if parent.is_dir():
            candidates.extend((p, False) for p in sorted(parent.iterdir()) if p.is_dir())
    marker = ("neurons", "soma_position.i32") if anatomy_only else ("graph", "edges_offsets.i32")
    for candidate, named in candidates:
        path = candidate / "manifest.json"
        if candidate == model_dir or not path.is_file() \
                or not candidate.joinpath(*marker).is_file():
            continue
        # Read once, for both questions below.
        try:
            manifest = read_json(path, "manifest.json")
        except CheckpointError:
            manifest = None     # damaged: a named folder is still taken, and its load says so
        if manifest is not None and is_malecns_manifest(manifest, candidate):
            continue
        if named or _readable_manifest(manifest):
            return candidate
    return None


def _readable_manifest(manifest: object) -> bool:
    """True when a parsed ``manifest.json`` is a JSON object with a ``files`` block, as a
    fly-connectome-49k dataset's is; a damaged one (another dataset's, say a broken
    malecns-166k copy) is not taken for the model's dataset."""
    return isinstance(manifest, dict) and isinstance(manifest.get("files"), dict)


def load_folder(folder: str | Path, *, dataset_dir: str | Path | None = None,
                tokenizer_path: str | Path | None = None, name: str | None = None,
                filename: str | None = None) -> Checkpoint:
    """Load whatever checkpoint layout ``folder`` holds.

    Parameters
    ----------
    folder
        A model folder.
    dataset_dir
        The connectome dataset for layouts that need one; default: found by
        :func:`find_dataset`.
    tokenizer_path, name
        Passed to the loader.
    filename
        For fly-wordbrain weights, which selector's safetensors file (default:
        ``min-ce.safetensors``); ignored by the other layouts.

    Returns
    -------
    Checkpoint
        Validated.
    """
    folder = Path(folder)
    layout = detect_layout(folder)
    ckpt = _load_layout(folder, layout, dataset_dir=dataset_dir, tokenizer_path=tokenizer_path,
                        name=name, filename=filename)
    record = _null_record(folder, layout)
    if record is not None:  # a null model written by flyviz null: say what it is a null of
        ckpt.metadata["null_model"] = record
    return ckpt


def _null_record(folder: Path, layout: str) -> dict | None:
    """The ``flyviz_null`` record of a folder's manifest (``config.json`` for ngxson's
    layout), or ``None``."""
    path = folder / ("config.json" if layout in (LAYOUT_HF, LAYOUT_FLYGPT) else "manifest.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    record = data.get("flyviz_null") if isinstance(data, dict) else None
    return record if isinstance(record, dict) else None


def _load_layout(folder: Path, layout: str, *, dataset_dir: str | Path | None,
                 tokenizer_path: str | Path | None, name: str | None,
                 filename: str | None = None) -> Checkpoint:
    if layout == LAYOUT_HF:
        # The checkpoint has its own graph; a dataset next to it only adds soma positions.
        if dataset_dir is not None:
            return load_fly_llm_hf(folder, tokenizer_path=tokenizer_path, name=name,
                                   dataset_dir=dataset_dir)
        found = find_dataset(folder, anatomy_only=True)
        if found is not None:
            try:
                return load_fly_llm_hf(folder, tokenizer_path=tokenizer_path, name=name,
                                       dataset_dir=found)
            except CheckpointError:
                pass  # a neighbour that does not fit; the model's own problems resurface below
        return load_fly_llm_hf(folder, tokenizer_path=tokenizer_path, name=name)
    if layout == LAYOUT_FLYGPT:  # its own graph; a dataset given places neurons by body id
        return load_flygpt(folder, tokenizer_path=tokenizer_path, name=name,
                           dataset_dir=dataset_dir)
    if layout == LAYOUT_DATASET:
        from flyviz.model.formats.common import read_json
        from flyviz.model.formats.malecns import is_malecns_dataset

        # A damaged manifest hides which dataset this is: say so, not "not a model".
        read_json(folder / "manifest.json", "the dataset's manifest.json")
        if is_malecns_dataset(folder):
            raise CheckpointError(f"{folder} is the fly-connectome-malecns-166k dataset (a graph "
                                  "with labels, no language model): run it as a spiking brain "
                                  "(flyviz simulate), check it (flyviz verify), or give it as "
                                  "--dataset to label a FlyGPT model's neurons")
        raise CheckpointError(f"{folder} is a connectome dataset (the graph only), not a model; "
                              "pass the model folder and this one as its dataset")
    dataset = Path(dataset_dir) if dataset_dir is not None else find_dataset(folder)
    if dataset is None:
        raise DatasetNotFoundError(f"{folder} holds {layout} weights but no connectome dataset "
                                   "was found next to it; download "
                                   "fernandofernandes/fly-connectome-49k into a sibling folder "
                                   "or pass it explicitly")
    if layout == LAYOUT_RECITAL:
        return load_recital_web(folder, dataset, tokenizer_path=tokenizer_path, name=name)
    return load_wordbrain(folder, dataset, filename=filename, tokenizer_path=tokenizer_path,
                          name=name)
