"""Build the demo brain from nothing: corpus, tokenizer, graph, parameters, asset.

``flyviz build-demo`` calls :func:`build_demo`. Every step is deterministic
from the seed; the full build takes minutes on two CPU cores.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.demo.connectome import make_connectome, pack_connectome
from flyviz.demo.corpus import join_stories, make_corpus
from flyviz.demo.fit import (choose_parameters, collect_features, feature_neurons, fit_readout,
                             readout_factors, stream_cross_entropy)
from flyviz.demo.loader import graph_checkpoint, write_demo_dataset
from flyviz.demo.ngram import NGramModel, story_sequences
from flyviz.demo.reservoir import StreamReservoir
from flyviz.errors import InputError
from flyviz.fileio import os_error
from flyviz.model.checkpoint import Checkpoint
from flyviz.model.config import ModelConfig

Progress = Callable[[str, float], None]

#: Seed of the shipped demo brain.
DEFAULT_SEED = 2026
#: Format of ``demo.json``.
FORMAT_VERSION = 1

#: What a build writes in its asset folder, and so all that building again may delete there
#: (:func:`check_demo_folder`): the model, the graph, the held-out stories, ``demo.json``
#: and the atlas.
DEMO_FILES = ("model", "connectome.npz", "heldout.txt", "demo.json", "atlas")


def check_demo_folder(out: str | Path, name: str | None = None) -> Path:
    """``out`` if the demo brain may be built there, else one line: a new or empty folder,
    or an earlier demo brain that holds nothing but :data:`DEMO_FILES` (building again
    deletes it whole; the user's notes or plots put in it would go with it without a
    word, as ``flyviz convert`` refuses a Zarr store that holds other files).

    Parameters
    ----------
    name
        How the refusal names ``out`` (``"--out assets/demo"``; default: the path).

    Raises
    ------
    InputError
        ``"--out demo is a demo brain that also holds notes.txt, which building it again
        would delete: move that out, or choose another folder"``.
    """
    out = Path(out).expanduser()
    said = str(out) if name is None else name
    if out.exists() and not out.is_dir():
        raise InputError(f"{said} is a file; give a folder")
    if not out.is_dir():
        return out
    try:
        held = sorted(entry.name for entry in out.iterdir())
    except OSError as exc:
        raise os_error(exc, out, "read") from None
    if held and "demo.json" not in held:
        raise InputError(f"{said} holds files that are not a demo brain; give an empty or "
                         "new folder")
    others = [entry for entry in held if entry not in DEMO_FILES]
    if others:
        raise InputError(f"{said} is a demo brain that also holds {others[0]}, which "
                         "building it again would delete: move that out, or choose another "
                         "folder")
    return out


@dataclass(frozen=True)
class DemoScale:
    """Sizes of one build.

    Attributes
    ----------
    neurons, edges, neurons_per_slot
        Graph and input interface.
    vocabulary
        Tokenizer size.
    corpus_chars
        Story text to generate (train + held out).
    fit_tokens
        Training tokens whose states the readout is fitted on.
    streams
        Stories advanced together through the reservoir.
    features
        Feature neurons the readout fit sees.
    refine_iterations
        L-BFGS iterations of the joint readout refinement.
    """

    name: str
    neurons: int
    edges: int
    neurons_per_slot: int
    vocabulary: int
    corpus_chars: int
    fit_tokens: int
    streams: int
    features: int
    refine_iterations: int
    delay_k: int = 8
    d_embed: int = 32
    rank: int = 64


SCALES: dict[str, DemoScale] = {
    "full": DemoScale("full", neurons=49_393, edges=9_050_172, neurons_per_slot=1_758,
                      vocabulary=1024, corpus_chars=1_250_000, fit_tokens=64_000,
                      streams=128, features=2048, refine_iterations=40),
    "tiny": DemoScale("tiny", neurons=3_001, edges=120_000, neurons_per_slot=96,
                      vocabulary=512, corpus_chars=90_000, fit_tokens=14_000,
                      streams=64, features=384, refine_iterations=12),
}


class _Stages:
    """Maps each build stage's own 0..1 progress onto the whole build."""

    def __init__(self, progress: Progress | None, weights: dict[str, float]) -> None:
        self.progress = progress
        total = sum(weights.values())
        self.start: dict[str, float] = {}
        self.width: dict[str, float] = {}
        acc = 0.0
        for name, w in weights.items():
            self.start[name] = acc / total
            self.width[name] = w / total
            acc += w

    def __call__(self, stage: str) -> Progress:
        def report(label: str, fraction: float) -> None:
            if self.progress is not None:
                f = self.start[stage] + self.width[stage] * min(max(fraction, 0.0), 1.0)
                self.progress(label, f)
        return report


def train_tokenizer(stories: list[str], vocabulary: int) -> str:
    """A byte-level BPE tokenizer like the Fly LLM's (``<pad>``=0, ``<s>``=1,
    ``</s>``=2, the 256 byte symbols, then merges), as JSON text."""
    from flyviz.model.tokenizer import train_byte_level_bpe

    return train_byte_level_bpe(stories, vocabulary)


#: The demo brain's atlas: compact (statistics and the top 10 contexts per neuron).
DEMO_ATLAS_SETTINGS: dict[str, Any] = dict(top_k=10, samples_per_band=0)


def build_demo_atlas(out_dir: str | Path, *, workers: int | None = None,
                     progress: Progress | None = None, log: Callable[[str], None] | None = None
                     ) -> Path:
    """Compute the demo brain's compact atlas over its whole story corpus into ``out_dir/atlas``.

    The corpus (training and held-out stories) is regenerated from the seed and
    size in ``demo.json``, so this runs on its own against a built asset folder
    (``flyviz build-demo --atlas-only``) in minutes.
    """
    from flyviz.analysis.atlas import AtlasSettings, build_atlas
    from flyviz.analysis.cluster import DEMO_FOLDER_PREFIX
    from flyviz.analysis.corpus import build_corpus
    from flyviz.demo.loader import load_demo, read_demo_info
    from flyviz.model.tokenizer import tokenizer_for

    out = Path(out_dir).resolve()
    info = read_demo_info(out)
    train, held_out = make_corpus(int(info["sizes"]["corpus_chars"]), seed=int(info["seed"]))
    ckpt = load_demo(asset_dir=out)
    settings = AtlasSettings(**DEMO_ATLAS_SETTINGS)
    scratch = Path(tempfile.mkdtemp(prefix="flyviz-demo-atlas-"))
    try:
        stories = scratch / "stories.txt"
        stories.write_text(join_stories(train + held_out), encoding="utf-8")
        corpus = build_corpus([stories], tokenizer_for(ckpt), context=settings.context,
                              bos_token_id=ckpt.config.bos_token_id)
        corpus.sources = ["flyviz demo stories (training and held out)"]
        bar = None
        if progress is not None:
            total = corpus.n_tokens
            report = progress

            class _Bar:
                done = 0

                def update(self, done: int, force: bool = False) -> None:
                    report(f"atlas: {done:,} of {total:,} tokens", done / total)
            bar = _Bar()
        atlas_dir = out / "atlas"
        build_atlas(f"{DEMO_FOLDER_PREFIX}{out}", ckpt, corpus, atlas_dir, settings,
                    workers=workers, progress=bar, compact=True, log=log)  # type: ignore[arg-type]
        return atlas_dir
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def build_demo(out_dir: str | Path, scale: str | DemoScale = "full", seed: int = DEFAULT_SEED,
               progress: Progress | None = None, atlas_workers: int | None = None
               ) -> dict[str, Any]:
    """Build the demo brain into ``out_dir`` (replacing an earlier one there; a folder that
    holds anything else is refused, before the build: :func:`check_demo_folder`).

    Parameters
    ----------
    out_dir
        Asset folder to write (``assets/demo`` for the shipped one).
    scale
        ``"full"`` (the real sizes), ``"tiny"`` (seconds; for tests) or a
        :class:`DemoScale`.
    seed
        Seed of every random choice.
    progress
        Called as ``progress(label, fraction)``.
    atlas_workers
        Dask workers for the atlas (:func:`build_demo_atlas`); ``None``: the
        usable cores, 0: in this process.

    Returns
    -------
    dict
        The content of ``demo.json`` (sizes, digest, quality, timings).
    """
    from flyviz.model.tokenizer import FlyTokenizer
    from flyviz.model.writers import write_recital_web

    sc = SCALES[scale] if isinstance(scale, str) else scale
    out = check_demo_folder(out_dir)
    started = time.perf_counter()
    timings: dict[str, float] = {}
    stages = _Stages(progress, {"corpus": 1, "graph": 4, "parameters": 1, "reservoir": 30,
                                "readout": 15, "evaluate": 5, "write": 2, "atlas": 25})

    def lap(name: str, t0: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - t0, 2)
        return now

    t = time.perf_counter()
    report = stages("corpus")
    report("writing the story corpus", 0.0)
    train_stories, held_out = make_corpus(sc.corpus_chars, seed=seed)
    report("training the tokenizer", 0.4)
    tokenizer_json = train_tokenizer(train_stories, sc.vocabulary)
    scratch = Path(tempfile.mkdtemp(prefix="flyviz-demo-build-"))
    try:
        tok_path = scratch / "tokenizer.json"
        tok_path.write_text(tokenizer_json, encoding="utf-8")
        tokenizer = FlyTokenizer(tok_path)
        vocab = tokenizer.vocab_size
        cfg = ModelConfig(neurons=sc.neurons, delay_k=sc.delay_k,
                          neurons_per_slot=sc.neurons_per_slot, d_embed=sc.d_embed,
                          vocabulary=vocab, readout_rank=sc.rank)
        bos, eos = cfg.bos_token_id, cfg.eos_token_id
        train_seq = story_sequences([tokenizer.encode(s) for s in train_stories], bos, eos)
        held_seq = story_sequences([tokenizer.encode(s) for s in held_out], bos, eos)
        ngram = NGramModel(train_seq, vocab)
        t = lap("corpus_and_tokenizer", t)

        report = stages("graph")
        report("generating the synthetic connectome", 0.0)
        conn = make_connectome(sc.neurons, sc.edges, sc.delay_k, sc.neurons_per_slot, seed=seed)
        weights = conn.weights()
        t = lap("connectome", t)

        report = stages("parameters")
        rng = np.random.default_rng(seed + 1)
        params = choose_parameters(ngram, sc.neurons, sc.delay_k, sc.d_embed,
                                   sc.neurons_per_slot, rng)
        selected = feature_neurons(sc.neurons, conn.in_index.astype(np.int64),
                                   sc.neurons_per_slot, sc.features, rng)

        def reservoir(streams: int) -> StreamReservoir:
            return StreamReservoir(conn.offsets, conn.sources, weights, params.wte,
                                   params.in_proj, params.gain, params.rec_gain, params.bias,
                                   conn.in_index, streams=streams, leak=cfg.leak,
                                   pad_token_id=cfg.pad_token_id)

        # The fit reads a shuffled sample of the training stories (same plots, varied order).
        order = np.random.default_rng(seed + 2).permutation(len(train_seq))
        fit_seq = [train_seq[i] for i in order]
        res = reservoir(sc.streams)
        features = collect_features(res, fit_seq, selected, cfg.layer_norm_eps, sc.fit_tokens,
                                    progress=stages("reservoir"),
                                    label="running the reservoir over the stories")
        res.close()
        t = lap("reservoir", t)
        readout = fit_readout(features, ngram, sc.rank, vocab,
                              iterations=sc.refine_iterations, progress=stages("readout"))
        head_a, head_b, ln_weight, ln_bias = readout_factors(readout, selected, sc.neurons)
        fit_rows = int(features.values.shape[0])
        train_mean_abs = float(features.mean_abs_state.mean())
        del features
        t = lap("readout", t)

        report = stages("evaluate")
        # Few held-out stories: fewer streams keep every stream busy to the end.
        res = reservoir(max(1, min(sc.streams, len(held_seq) // 4)))
        model_ce, held_mean_abs = stream_cross_entropy(res, held_seq, head_a, head_b, ln_weight,
                                                       ln_bias, cfg.layer_norm_eps,
                                                       progress=report)
        res.close()
        quality = {
            "held_out_tokens": int(sum(s.size - 1 for s in held_seq)),
            "cross_entropy_model": round(model_ce, 4),
            "cross_entropy_unigram": round(ngram.unigram_cross_entropy(held_seq), 4),
            "cross_entropy_bigram": round(ngram.bigram_cross_entropy(held_seq), 4),
            "mean_abs_state_held_out": round(held_mean_abs, 4),
            "mean_abs_state_training": round(train_mean_abs, 4),
        }
        t = lap("evaluate", t)

        report = stages("write")
        report("writing the asset", 0.0)
        ckpt = Checkpoint(config=cfg, wte=params.wte, in_proj=params.in_proj, gain=params.gain,
                          rec_gain=params.rec_gain, bias=params.bias, ln_weight=ln_weight,
                          ln_bias=ln_bias, head_a=head_a, head_b=head_b,
                          w_offsets=conn.offsets, w_indices=conn.sources, w_values=weights,
                          in_index=conn.in_index.astype(np.int64),
                          out_index=np.arange(sc.neurons, dtype=np.int64),
                          name="flyviz-demo", layout="recital-web", tokenizer_path=tok_path,
                          anatomy=graph_checkpoint(conn, cfg).anatomy,
                          metadata={"experiment": "flyviz-demo", "selector": "echo-state-fit"})
        if out.exists():
            # Asked again: files may have been put there during the minutes of the build.
            check_demo_folder(out)
            shutil.rmtree(out)
        out.mkdir(parents=True)
        write_recital_web(ckpt, out / "model", extra_manifest={
            "demo": {"synthetic_wiring": True, "scale": sc.name, "seed": seed,
                     "method": "echo-state network: fixed synthetic graph and neuron "
                               "parameters, rank-64 readout fitted by reduced-rank ridge "
                               "regression and L-BFGS on the next-token cross-entropy"}})
        pack_connectome(conn, out / "connectome.npz")
        (out / "heldout.txt").write_text(join_stories(held_out), encoding="utf-8")
        digest = write_demo_dataset(out / "connectome.npz", cfg, scratch / "dataset")
        lap("write", t)
        info: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "name": "flyviz demo brain",
            "synthetic_wiring": True,
            "scale": sc.name,
            "seed": seed,
            "sizes": asdict(sc),
            "neurons": conn.neurons,
            "edges": conn.edges,
            "weight_scale": conn.weight_scale,
            "spectral_radius": 0.99,
            "dataset_sha256": digest,
            "corpus": {"train_stories": len(train_stories), "held_out_stories": len(held_out),
                       "train_chars": sum(len(s) for s in train_stories),
                       "held_out_chars": sum(len(s) for s in held_out),
                       "train_tokens": int(sum(s.size - 1 for s in train_seq)),
                       "fit_tokens": fit_rows},
            "quality": quality,
            "timings_seconds": timings,
            "build_seconds": round(time.perf_counter() - started, 1),
        }
        (out / "demo.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        report = stages("atlas")
        build_demo_atlas(out, workers=atlas_workers, progress=report)
        if progress is not None:
            progress("done", 1.0)
        return info
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
