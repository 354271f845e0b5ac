"""Helpers for testing the app: a small model with anatomy and hand-made frames.

Used by ``tests/test_app_*.py``; kept in the package so that the app's own
benchmark script can use the same model. Nothing here is imported by the app.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT, Frame
from flyviz.record.recording import Recording


def make_app_checkpoint(folder: str | Path, neurons: int = 400, edges: int = 4000,
                        seed: int = 0, name: str = "test-brain") -> Checkpoint:
    """A small random model with anatomy and a tokenizer written into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_path = folder / "tokenizer.json"
    if not tokenizer_path.exists():
        write_tokenizer(tokenizer_path)
    vocabulary = FlyTokenizer(tokenizer_path).vocab_size
    return make_random_checkpoint(neurons, edges, vocabulary=vocabulary, seed=seed,
                                  tokenizer_path=tokenizer_path, name=name)


def make_frame(position: int, state: np.ndarray, *, generated: bool = True,
               token_text: str = "x", top_k: int = 5) -> Frame:
    """A hand-made frame with exactly ``state`` (for tests that control what is drawn)."""
    ids = np.arange(3, 3 + top_k, dtype=np.int32)
    probs = np.linspace(0.5, 0.1, top_k).astype(np.float32)
    state = np.asarray(state, dtype=np.float32)
    return Frame(position=position, phase=PHASE_GENERATION if generated else PHASE_PROMPT,
                 input_token_id=3, input_text=token_text, predicted_token_id=3,
                 predicted_text=token_text, probability=float(probs[0]), top_k_ids=ids,
                 top_k_probabilities=probs,
                 top_k_text=tuple(f"t{i}" for i in range(top_k)), state=state.copy(),
                 mean_abs_state=float(np.abs(state).mean()),
                 text_so_far=token_text * (position + 1) if generated else "",
                 generation_index=position if generated else None)


def one_hot_recording(neurons: int, lit: list[int], value: float = 1.0) -> Recording:
    """Frame ``i`` has neuron ``lit[i]`` at ``value`` and every other neuron at zero."""
    rec = Recording(neurons, {"model_name": "hand-made"})
    for i, neuron in enumerate(lit):
        state = np.zeros(neurons, np.float32)
        state[neuron] = value
        rec.append(make_frame(i, state))
    return rec


def make_app_atlas(checkpoint: Checkpoint, folder: str | Path, stories: int = 60,
                   seed: int = 7) -> Path:
    """A small neuron atlas of ``checkpoint`` over random stories, written into ``folder``.

    The model is written to ``folder/model`` first (atlas tasks load it by path);
    the atlas keeps 5 top contexts and 2 quantile samples per band.
    """
    from flyviz.analysis.atlas import AtlasSettings, build_atlas
    from flyviz.analysis.corpus import build_corpus
    from flyviz.model.synthetic import WORDS
    from flyviz.model.writers import write_fly_llm_hf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    text = "\n\n".join(
        "\n".join(" ".join(rng.choice(WORDS, rng.integers(2, 14))).capitalize() + "."
                  for _ in range(rng.integers(1, 4)))
        for _ in range(stories)) + "\n"
    corpus_path = folder / "stories.txt"
    corpus_path.write_text(text, encoding="utf-8")
    write_fly_llm_hf(checkpoint, folder / "model")
    settings = AtlasSettings(top_k=5, streams=5, context=24, chunk_tokens=600,
                             min_token_count=3, samples_per_band=2)
    assert checkpoint.tokenizer_path is not None
    corpus = build_corpus([corpus_path], FlyTokenizer(checkpoint.tokenizer_path),
                          context=settings.context)
    out = folder / "brain.atlas"
    build_atlas(str(folder / "model"), checkpoint, corpus, out, settings, workers=0)
    return out


def make_app_lesion_map(checkpoint: Checkpoint, folder: str | Path, by: str = "superclass",
                        name: str = "lesions.csv", stories: int = 12, seed: int = 5) -> Path:
    """A lesion map of ``checkpoint`` (each group silenced) over random stories, in ``folder``.

    The model is written to ``folder/model`` (sweep tasks load it by path); the
    sweep runs in this process. ``name`` ends in ``.csv`` or ``.parquet``.
    """
    from flyviz.analysis.corpus import build_corpus
    from flyviz.analysis.sweep import SweepSettings, run_sweep, sweep_groups
    from flyviz.model.synthetic import WORDS
    from flyviz.model.writers import write_fly_llm_hf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    text = "\n\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 12))).capitalize() + "."
                       for _ in range(stories)) + "\n"
    text_path = folder / "story.txt"
    text_path.write_text(text, encoding="utf-8")
    if not (folder / "model").exists():
        write_fly_llm_hf(checkpoint, folder / "model")
    settings = SweepSettings(streams=16, context=24, chunk_tokens=400, min_tasks=1)
    assert checkpoint.tokenizer_path is not None
    corpus = build_corpus([text_path], FlyTokenizer(checkpoint.tokenizer_path),
                          context=settings.context)
    out = folder / name
    run_sweep(str(folder / "model"), checkpoint, corpus, sweep_groups(checkpoint, by), out,
              settings, by=by, workers=0)
    return out
