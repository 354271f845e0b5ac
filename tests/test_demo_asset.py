"""The shipped demo brain (assets/demo): it loads, runs, and is what it says it is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flyviz.demo import DEMO_DESCRIPTION
from flyviz.demo.connectome import spectral_radius
from flyviz.model.engine import Engine
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.record.run import GenerationSettings, iter_frames

ASSETS = Path(__file__).resolve().parents[1] / "assets"
DEMO = ASSETS / "demo"

pytestmark = pytest.mark.skipif(not (DEMO / "demo.json").is_file(),
                                reason="the demo brain asset is not built")


@pytest.fixture(scope="module")
def demo(demo_cache):
    import os

    from flyviz.model.resolve import load_model

    saved = os.environ.get("FLYVIZ_CACHE_DIR")
    os.environ["FLYVIZ_CACHE_DIR"] = str(demo_cache)
    try:
        yield load_model("demo")
    finally:
        if saved is None:
            os.environ.pop("FLYVIZ_CACHE_DIR", None)
        else:
            os.environ["FLYVIZ_CACHE_DIR"] = saved


def test_assets_stay_within_the_size_budget():
    total = sum(p.stat().st_size for p in ASSETS.rglob("*") if p.is_file())
    assert total < 48 * 2**20  # the demo brain with its compact atlas


def test_real_sizes_and_synthetic_labels(demo):
    assert demo.config.neurons == 49_393 and demo.n_edges == 9_050_172
    assert demo.config.n_inputs == 8 * 1_758 and demo.config.vocabulary == 1024
    assert demo.config.readout_rank == 64 and demo.config.d_embed == 32
    assert demo.anatomy.kind == "synthetic"
    assert demo.metadata["description"] == DEMO_DESCRIPTION
    assert "synthetic" in DEMO_DESCRIPTION and "NOT the fruit-fly connectome" in DEMO_DESCRIPTION
    missing = 1.0 - demo.anatomy.n_valid / demo.config.neurons
    assert 0.05 < missing < 0.15


def test_graph_is_sorted_signed_and_scaled(demo):
    offsets = np.asarray(demo.w_offsets, dtype=np.int64)
    indices = np.asarray(demo.w_indices, dtype=np.int64)
    rows = np.repeat(np.arange(demo.config.neurons), np.diff(offsets))
    assert np.all(np.diff(rows * demo.config.neurons + indices) > 0)
    values = np.asarray(demo.w_values)
    assert 0.6 < float(np.mean(values > 0)) < 0.72 and not np.any(values == 0)
    assert spectral_radius(offsets, indices, values) == pytest.approx(0.99, rel=1e-3)


def test_writes_english_with_live_dynamics(demo):
    tokenizer = FlyTokenizer(demo.tokenizer_path)
    engine = Engine(demo)
    frames = list(iter_frames(engine, tokenizer, "Once upon a time",
                              GenerationSettings(max_new_tokens=24)))
    engine.close()
    text = frames[-1].text_so_far
    info = json.loads((DEMO / "demo.json").read_text())
    held = (DEMO / "heldout.txt").read_text().lower()
    words = [w.strip('.,!?"').lower() for w in text.split()]
    words = [w for w in words if w.isalpha()]
    assert len(words) >= 8
    # Most words of the continuation occur in the (held-out part of the) corpus.
    assert np.mean([w in held for w in words]) > 0.8
    mean_abs = [f.mean_abs_state for f in frames[2:]]
    assert 0.05 < min(mean_abs) and max(mean_abs) < 0.8
    quality = info["quality"]
    assert quality["cross_entropy_model"] <= quality["cross_entropy_unigram"] - 1.0
    assert quality["cross_entropy_model"] <= quality["cross_entropy_bigram"] + 0.5
