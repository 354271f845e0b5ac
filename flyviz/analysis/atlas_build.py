"""Building an atlas: the run over a corpus's chunks on Dask workers, and the writing
of the Zarr store.

This module has one job: :func:`build_atlas` hands the corpus's chunks to
:func:`flyviz.analysis.cluster.run_tree` (each worker runs
:func:`atlas_chunk`, which loads the model once and refuses other weights than
the client's), merges their partial statistics
(:mod:`flyviz.analysis.atlas_stats`) and :func:`write_atlas` writes the
finished arrays, the corpus, the tokenizer and the model's identity, sealed
with chunk digests (:mod:`flyviz.analysis.integrity`).
:class:`~flyviz.analysis.atlas.Atlas` reads what it writes.

Storage
-------
A Zarr store (format 2, consolidated metadata; readable lazily with
``xarray.open_zarr``), chunked by neuron, holding the statistics, the
corpus's principal axes (``pca_*``, :mod:`flyviz.analysis.atlas_basis`; an atlas
written before flyviz kept them has none), the tokenized corpus (``corpus_tokens``, ``corpus_offsets``), the tokenizer, the
model's identity (weight and graph digests, :mod:`flyviz.model.identity`) and
the settings (attribute ``flyviz_atlas``). :class:`Atlas` reads it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis import atlas_stats, cluster, integrity, runs
from flyviz.analysis.atlas_basis import SKETCH_SEED, sketch_columns
from flyviz.analysis.atlas_stats import (BANDS, HIST_BINS, HIST_EDGES, AtlasSettings,
                                         finish_statistics, merge_partials)
from flyviz.analysis.corpus import Corpus, CorpusChunk
from flyviz.fileio import missing_folder, probe_writable
from flyviz.model.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

FORMAT = "flyviz-atlas"
FORMAT_VERSION = 1
NEURON_CHUNK = 1024
TOKEN_CHUNK = 1 << 16
COMPONENT_CHUNK = 3


def atlas_chunk(spec: str, dataset: str | None, weights_sha256: str, settings: dict[str, Any],
                chunk: CorpusChunk) -> cluster.Partial:
    """The partial statistics of one chunk (runs on a worker): the model comes from ``spec``
    (joined to ``dataset``, loaded once per process) and must have the client's weights."""
    ckpt = cluster.worker_model(spec, dataset, weights_sha256)
    # Looked up on the module at each call, so that a test can stand in for it there.
    return atlas_stats.chunk_statistics(ckpt, AtlasSettings(**settings), chunk)


# ------------------------------------------------------------------- building
@dataclass
class AtlasRun:
    """What :func:`build_atlas` did."""

    path: Path
    tokens: int
    counted_tokens: int
    seconds: float
    workers: int
    resumed_chunks: int
    chunks: int
    compute_seconds: float = 0.0


def _store_key(identity: dict[str, Any], corpus: Corpus, settings: AtlasSettings,
               chunks: list[CorpusChunk]) -> dict[str, Any]:
    model = {"weights_sha256": identity["weights_sha256"], "graph_sha256": identity["graph_sha256"]}
    # The sketch's shape and seed too: saved parts of a run without it cannot be merged.
    basis = {"seed": SKETCH_SEED, "columns": sketch_columns(int(identity.get("neurons", 0)))}
    return {"format": FORMAT, "model": model, "corpus": corpus.digest(),
            "settings": settings.run_key(), "chunks": len(chunks), "basis": basis}


def check_output(out: Path) -> None:
    """Refuse an output path that holds something other than an atlas, or that cannot be
    written (checked before the model or the corpus is read). A finished atlas there is
    the library's :func:`build_atlas` to replace; ``flyviz atlas`` refuses it
    (:func:`flyviz.analysis.parts.check_new_run`)."""
    import os

    if out.exists():
        if not out.is_dir():
            raise InputError(f"--out {out} is a file; give a new folder name (e.g. corpus.atlas)")
        if any(out.iterdir()) and not _is_atlas(out):
            raise InputError(f"--out {out} holds files that are not a flyviz atlas; give a new "
                             "or empty folder")
    parent = out.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: {missing_folder(parent)}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: the folder {parent} is not writable")
    # os.access says yes to root everywhere, /proc included: only a file made there tells
    # (the atlas and its parts folder are made beside each other, in ``parent``).
    probe_writable(parent, "--out", out)


def _is_atlas(path: Path) -> bool:
    try:
        attrs = json.loads((path / ".zattrs").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(attrs, dict) and attrs.get("flyviz_atlas", {}).get("format") == FORMAT


def build_atlas(spec: str, ckpt: "Checkpoint", corpus: Corpus, out: str | Path,
                settings: AtlasSettings = AtlasSettings(),  # noqa: B008 - frozen
                *, workers: int | None = None,
                scheduler: str | None = None, resume: bool = False,
                progress: cluster.ProgressBar | None = None, compact: bool = False,
                log=None, dataset: str | Path | None = None) -> AtlasRun:
    """Compute an atlas of ``ckpt`` (loaded from ``spec``) over ``corpus`` and write it to ``out``.

    Parameters
    ----------
    spec
        How workers load the model (a path or ``"demo"``): every worker loads it
        itself, once, and refuses to work if its weights are not ``ckpt``'s.
    ckpt
        The same model, loaded here (identity, readout, tokenizer).
    corpus
        The tokenized corpus.
    out
        The Zarr store to write (replaced if it is an atlas).
    settings
        See :class:`AtlasSettings`.
    workers, scheduler, resume, progress
        See :func:`flyviz.analysis.cluster.run_tree`.
    dataset
        The connectome dataset folder workers join ``spec`` to (``--dataset``).
    compact
        Store no quantile samples (the settings should then ask for none).
    log
        ``log(line)`` for status lines.
    """
    from flyviz.model.identity import model_identity

    cluster.require_dask("flyviz atlas", workers, scheduler)
    settings = settings.validate()
    out = Path(out).expanduser()
    check_output(out)
    identity = model_identity(ckpt)
    chunks = corpus.chunks(settings.chunk_tokens)
    store = cluster.open_store(out, _store_key(identity, corpus, settings, chunks), resume)
    if log is not None:
        log(f"{corpus.n_tokens:,} tokens in {corpus.n_windows:,} windows of "
            f"{corpus.n_documents:,} documents; {len(chunks)} chunks")
    result = runs.run_tasks(atlas_chunk, chunks, merge_partials, spec=spec, dataset=dataset,
                            identity=identity, settings=settings, model=ckpt, workers=workers,
                            scheduler=scheduler, store=store, resume=resume,
                            progress=progress, log=log)
    write_atlas(out, result.partial, ckpt, corpus, settings, identity, compact=compact)
    store.remove()
    return AtlasRun(path=out, tokens=corpus.n_tokens, counted_tokens=corpus.counted_tokens,
                    seconds=result.seconds, workers=result.workers,
                    resumed_chunks=result.resumed_chunks, chunks=len(chunks),
                    compute_seconds=result.compute_seconds)


def _zarr_array(group: Any, name: str, data: np.ndarray, dims: tuple[str, ...],
                chunks: tuple[int, ...] | None = None) -> None:
    """One array in a format-2 group, with xarray's dimension names."""
    import numcodecs

    data = np.ascontiguousarray(data)
    if chunks is None:
        chunks = data.shape if data.ndim else ()
    chunks = tuple(max(1, min(c, s)) for c, s in zip(chunks, data.shape))
    compressor = numcodecs.Zstd(level=5)
    if hasattr(group, "create_array"):  # zarr-python 3
        # Every chunk written, all-zero ones too: zarr 3 skips a chunk equal to its fill
        # value by default, and the store's integrity check counts a missing chunk as damage.
        array = group.create_array(name=name, shape=data.shape, dtype=data.dtype,
                                   chunks=chunks or None, compressors=[compressor],
                                   fill_value=None, config={"write_empty_chunks": True})
    else:  # pragma: no cover - zarr-python 2
        array = group.create_dataset(name, shape=data.shape, dtype=data.dtype, chunks=chunks,
                                     compressor=compressor)
    array[...] = data
    array.attrs["_ARRAY_DIMENSIONS"] = list(dims)


def write_atlas(out: Path, partial: cluster.Partial, ckpt: "Checkpoint", corpus: Corpus,
                settings: AtlasSettings, identity: dict[str, Any], *,
                compact: bool = False) -> None:
    """Write the finished atlas as a Zarr store at ``out`` (replacing an old atlas there)."""
    import shutil

    import zarr

    arrays = finish_statistics(partial, ckpt, settings, compact=compact)
    n = ckpt.config.neurons
    tmp = out.with_name(out.name + ".writing")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        # Zarr 3 writes its own format unless told; the atlas stays readable by Zarr 2.
        format_option: dict[str, Any] = {"zarr_format": 2} if _zarr_major() >= 3 else {}
        group = zarr.open_group(str(tmp), mode="w", **format_option)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    nc = NEURON_CHUNK
    k = arrays["top_index"].shape[1]
    window, position = corpus.locate(np.maximum(arrays.pop("top_index"), 0))
    valid = np.isfinite(arrays["top_value"])
    _zarr_array(group, "neuron", np.arange(n, dtype=np.int32), ("neuron",), (nc,))
    for name in ("mean", "std", "density", "max", "selectivity"):
        _zarr_array(group, name, arrays[name], ("neuron",), (nc,))
    _zarr_array(group, "histogram", arrays["histogram"], ("neuron", "bin"), (nc, HIST_BINS))
    _zarr_array(group, "histogram_edges", HIST_EDGES.astype(np.float32), ("edge",))
    _zarr_array(group, "top_window", np.where(valid, window, -1).astype(np.int32),
                ("neuron", "rank"), (nc, k))
    _zarr_array(group, "top_position", np.where(valid, position, -1).astype(np.int32),
                ("neuron", "rank"), (nc, k))
    _zarr_array(group, "top_value", arrays["top_value"], ("neuron", "rank"), (nc, k))
    for name, dim in (("driving_token", "driving"), ("driving_mean", "driving"),
                      ("promoted_token", "logit"), ("promoted_effect", "logit"),
                      ("suppressed_token", "logit"), ("suppressed_effect", "logit")):
        _zarr_array(group, name, arrays[name], ("neuron", dim), (nc, arrays[name].shape[1]))
    _zarr_array(group, "token_count", arrays["token_count"], ("token",))
    if "pca_axes" in arrays:
        # The corpus's principal axes (flyviz.analysis.atlas_basis): float64, read whole.
        _zarr_array(group, "pca_axes", arrays["pca_axes"], ("component", "neuron"),
                    (COMPONENT_CHUNK, nc))
        _zarr_array(group, "pca_mean", arrays["pca_mean"], ("neuron",), (nc,))
        _zarr_array(group, "pca_variance", arrays["pca_variance"], ("component",))
        _zarr_array(group, "pca_total_variance", arrays["pca_total_variance"].reshape(1),
                    ("total",))
    if "sample_index" in arrays:
        index = arrays["sample_index"]
        sw, sp = corpus.locate(np.maximum(index, 0))
        have = index >= 0
        shape = index.shape
        _zarr_array(group, "band_edges", arrays["band_edges"], ("neuron", "band_edge"),
                    (nc, shape[1] + 1))
        _zarr_array(group, "sample_window", np.where(have, sw, -1).astype(np.int32),
                    ("neuron", "band", "sample"), (nc,) + shape[1:])
        _zarr_array(group, "sample_position", np.where(have, sp, -1).astype(np.int32),
                    ("neuron", "band", "sample"), (nc,) + shape[1:])
        _zarr_array(group, "sample_value", arrays["sample_value"], ("neuron", "band", "sample"),
                    (nc,) + shape[1:])
        _zarr_array(group, "band_quantiles", np.array(BANDS, dtype=np.float32),
                    ("band", "bound"))
    token_dtype = np.uint16 if ckpt.config.vocabulary <= 1 << 16 else np.int32
    _zarr_array(group, "corpus_tokens", corpus.tokens.astype(token_dtype), ("corpus_token",),
                (TOKEN_CHUNK,))
    _zarr_array(group, "corpus_offsets", corpus.offsets, ("window_edge",), (TOKEN_CHUNK,))
    _zarr_array(group, "window_document", corpus.window_document, ("window",), (TOKEN_CHUNK,))
    tokenizer_text = b""
    if ckpt.tokenizer_path is not None and Path(ckpt.tokenizer_path).is_file():
        tokenizer_text = Path(ckpt.tokenizer_path).read_bytes()
    _zarr_array(group, "tokenizer_json", np.frombuffer(tokenizer_text, dtype=np.uint8),
                ("tokenizer_byte",), (1 << 20,))
    group.attrs["flyviz_atlas"] = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        # The model's identity (flyviz.model.identity), less the machine's dataset folder.
        "model": {k: v for k, v in identity.items() if k != "dataset"},
        "settings": {**settings.run_key(), "compact": bool(compact)},
        "density_threshold": settings.density_threshold,
        "counted_tokens": int(arrays["count"]),
        "layer_norm_scale": float(arrays["layer_norm_scale"]),
        "corpus": {"tokens": corpus.n_tokens, "windows": corpus.n_windows,
                   "documents": corpus.n_documents, "context": corpus.context,
                   "sources": corpus.sources[:1000], "sha256": corpus.digest()},
        "bands": [list(b) for b in BANDS],
        "basis": {"seed": SKETCH_SEED, "sketch_columns": sketch_columns(n),
                  "components": int(arrays["pca_axes"].shape[0]) if "pca_axes" in arrays else 0},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    zarr.consolidate_metadata(str(tmp))
    # Every chunk's size and CRC-32, so that a reader refuses a missing or damaged chunk
    # rather than reading it as zeros (flyviz.analysis.integrity).
    integrity.seal_store(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)


def _zarr_major() -> int:
    import zarr

    return int(str(zarr.__version__).split(".")[0])


__all__ = ["AtlasRun", "FORMAT", "FORMAT_VERSION", "NEURON_CHUNK", "atlas_chunk", "build_atlas",
           "check_output", "write_atlas"]
