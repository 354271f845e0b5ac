"""Load the demo brain: unpack its graph into the user cache once, then load it
through the same web-export loader as the real checkpoints.

The shipped asset (``assets/demo``) holds:

``model/``
    The Fly Recital web export (``manifest.json``, ``*.f32``, ``tokenizer.json``).
``connectome.npz``
    The synthetic graph and anatomy, compact (see
    :func:`flyviz.demo.connectome.pack_connectome`).
``demo.json``
    Build facts, quality figures and ``dataset_sha256``: the digest of the
    dataset folder that ``connectome.npz`` unpacks to.
``heldout.txt``
    The held-out stories the quality figures were measured on.

On first use the graph is written as a fly-connectome-49k-style folder under
the user cache (``platformdirs.user_cache_dir("flyviz")``, or
``$FLYVIZ_CACHE_DIR``), in a folder named after the digest and the version of
the folder's layout. Every load checks the digest and rebuilds the folder if it
does not match; a folder written in an older layout (flyviz 0.1 wrote its
manifest in another schema) is replaced, not read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.checkpoint import Anatomy, Checkpoint
from flyviz.model.errors import CheckpointError, ModelNotFoundError

Progress = Callable[[str, float], None]

#: Version of the cached folder's layout: the raw files are the same for a
#: digest, but the manifest written beside them follows the real schema since
#: version 2 (``files`` keyed by logical name, recomputable frozen digests).
CACHE_LAYOUT = 2

#: Dataset files whose bytes the digest covers: the canonical raw arrays. The
#: JSON label files and the int16 browser copy are left out so that a change in
#: their formatting cannot invalidate every user's cache.
DIGEST_FILES = (
    "graph/edges_offsets.i32",
    "graph/edges_source.u16",
    "graph/edges_source.i32",
    "graph/edges_weight.f32",
    "interface/in_index.i32",
    "interface/out_index.i32",
    "neurons/soma_position.i32",
    "neurons/soma_valid.u8",
)


def demo_asset_dir() -> Path:
    """``assets/demo`` of this installation."""
    from flyviz.resources import assets_dir

    try:
        return assets_dir() / "demo"
    except FileNotFoundError:
        raise ModelNotFoundError("flyviz's assets folder is missing, so the demo brain cannot "
                                 "be loaded; reinstall flyviz or run 'flyviz build-demo'") from None


def cache_root() -> Path:
    """Root of flyviz's cache (``$FLYVIZ_CACHE_DIR`` or the platform's user cache)."""
    override = os.environ.get("FLYVIZ_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("flyviz"))


def dataset_digest(dataset_dir: str | Path) -> str:
    """SHA-256 over the canonical raw files of a dataset folder (names and bytes).

    Returns ``""`` when a file the digest needs is missing.
    """
    root = Path(dataset_dir)
    h = hashlib.sha256()
    found = 0
    for rel in DIGEST_FILES:
        path = root / rel
        if not path.is_file():
            continue
        found += 1
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    if not (root / "graph" / "edges_offsets.i32").is_file() or found < 6:
        return ""
    return h.hexdigest()


def read_demo_info(asset_dir: Path) -> dict[str, Any]:
    """``demo.json`` of an asset folder."""
    path = asset_dir / "demo.json"
    if not path.is_file():
        raise ModelNotFoundError(f"the demo brain is not built in this installation ({path} is "
                                 "missing); run 'flyviz build-demo' or reinstall flyviz")
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} cannot be read ({exc}); run 'flyviz build-demo' "
                              "or reinstall flyviz") from None
    if not isinstance(info, dict) or not isinstance(info.get("dataset_sha256"), str):
        raise CheckpointError(f"{path} has no dataset_sha256; run 'flyviz build-demo' "
                              "or reinstall flyviz")
    return info


def _model_config(model_dir: Path):
    from flyviz.model.config import ModelConfig

    manifest = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))
    cfg = manifest["config"]
    return ModelConfig(neurons=int(cfg["neurons"]), delay_k=int(cfg["delay_k"]),
                       neurons_per_slot=int(cfg["neurons_per_slot"]),
                       d_embed=int(cfg["d_embed"]), vocabulary=int(cfg["vocabulary"]),
                       readout_rank=cfg.get("readout_rank"), leak=float(cfg["leak"]),
                       layer_norm_eps=float(cfg["layer_norm_eps"]))


def graph_checkpoint(conn, config) -> Checkpoint:
    """A checkpoint holding only what the dataset writer needs: graph, interface, anatomy.

    Its parameters are empty placeholders; it is never run.
    """
    empty = np.zeros(0, dtype=np.float32)
    anatomy = Anatomy(positions=conn.positions.astype(np.float32), valid=conn.valid,
                      kind="synthetic", body_id=conn.body_id,
                      superclass=conn.superclass_names(), side=conn.side_names(),
                      cell_type=conn.cell_type_names())
    n = conn.neurons
    return Checkpoint(config=config, wte=empty, in_proj=empty, gain=empty, rec_gain=empty,
                      bias=empty, ln_weight=empty, ln_bias=empty, w_offsets=conn.offsets,
                      w_indices=conn.sources, w_values=conn.weights(),
                      in_index=conn.in_index.astype(np.int64),
                      out_index=np.arange(n, dtype=np.int64), name="demo graph",
                      layout="dataset", anatomy=anatomy)


def write_demo_dataset(npz_path: Path, config, dataset_dir: Path) -> str:
    """Unpack ``connectome.npz`` into a dataset folder; return its digest."""
    from flyviz.demo.connectome import unpack_connectome
    from flyviz.model.writers import write_connectome_dataset

    conn = unpack_connectome(npz_path)
    write_connectome_dataset(graph_checkpoint(conn, config), dataset_dir)
    return dataset_digest(dataset_dir)


def prepare_dataset(asset_dir: Path, info: dict[str, Any],
                    progress: Progress | None = None) -> Path:
    """The demo brain's dataset folder in the cache, unpacked and checked.

    Raises
    ------
    CheckpointError
        When a freshly unpacked folder still does not match the digest (the
        shipped files are damaged).
    """
    expected = str(info["dataset_sha256"])
    root = cache_root() / "demo"
    target = root / f"dataset-{expected[:16]}-v{CACHE_LAYOUT}"
    legacy = root / f"dataset-{expected[:16]}"  # flyviz 0.1's layout: rebuilt, not read
    if legacy.is_dir():
        shutil.rmtree(legacy, ignore_errors=True)
    if target.is_dir():
        _report(progress, "checking the demo brain's graph", 0.1)
        if dataset_digest(target) == expected:
            return target
        shutil.rmtree(target, ignore_errors=True)
    _report(progress, "preparing the demo brain (first use): unpacking the graph", 0.15)
    npz = asset_dir / "connectome.npz"
    if not npz.is_file():
        raise ModelNotFoundError(f"the demo brain's graph {npz} is missing; reinstall flyviz "
                                 "or run 'flyviz build-demo'")
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Unpack beside the target and rename into place, so that an interrupted
        # first run or two flyviz processes starting together never leave a
        # half-written folder under the final name.
        scratch = Path(tempfile.mkdtemp(prefix="dataset-", suffix=".partial", dir=root))
    except OSError as exc:
        raise CheckpointError(f"cannot write the demo brain's cache in {root} ({exc.strerror}); "
                              "set FLYVIZ_CACHE_DIR to a writable folder") from None
    try:
        digest = write_demo_dataset(npz, _model_config(asset_dir / "model"), scratch)
        if digest != expected:
            raise CheckpointError(
                f"the demo brain's graph unpacks to digest {digest[:12]}..., not the "
                f"{expected[:12]}... its files record; reinstall flyviz or run 'flyviz build-demo'")
        _report(progress, "preparing the demo brain (first use): graph written", 0.6)
        try:
            os.replace(scratch, target)
        except OSError:
            if not (target.is_dir() and dataset_digest(target) == expected):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _report(progress: Progress | None, label: str, fraction: float) -> None:
    if progress is not None:
        progress(label, float(fraction))


def load_demo(progress: Progress | None = None, asset_dir: str | Path | None = None) -> Checkpoint:
    """Load the demo brain, unpacking its graph into the cache on first use.

    Parameters
    ----------
    progress
        Called as ``progress(label, fraction)`` while anything is prepared.
    asset_dir
        The demo asset folder; default: ``assets/demo`` of this installation.

    Returns
    -------
    Checkpoint
        Layout ``"recital-web"``, synthetic anatomy, ``metadata["description"]``
        = :data:`flyviz.demo.DEMO_DESCRIPTION`.
    """
    from flyviz.demo.names import DEMO_DESCRIPTION, DEMO_NAME
    from flyviz.model.formats.recital import load_recital_web

    asset_dir = Path(asset_dir) if asset_dir is not None else demo_asset_dir()
    info = read_demo_info(asset_dir)
    dataset_dir = prepare_dataset(asset_dir, info, progress)
    _report(progress, "loading the demo brain", 0.7)
    model_dir = asset_dir / "model"
    ckpt = load_recital_web(model_dir, dataset_dir, tokenizer_path=model_dir / "tokenizer.json",
                            name=DEMO_NAME)
    if ckpt.anatomy is not None and ckpt.anatomy.kind != "synthetic":
        ckpt.anatomy.kind = "synthetic"
    ckpt.metadata["description"] = DEMO_DESCRIPTION
    ckpt.metadata["demo"] = {key: info[key] for key in ("scale", "seed", "quality", "corpus",
                                                        "build_seconds") if key in info}
    ckpt.metadata["spec"] = "demo"
    _report(progress, "demo brain ready", 1.0)
    return ckpt
