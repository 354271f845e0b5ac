"""The atlas's principal axes: the covariance sketch against NumPy's SVD, its merge, old atlases."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from flyviz.analysis import integrity
from flyviz.analysis.atlas import Atlas, AtlasSettings, build_atlas
from flyviz.analysis.atlas_basis import AXES_ARRAYS, SKETCH_COLUMNS, finish_basis
from flyviz.analysis.atlas_stats import ChunkStatistics, merge_partials, principal_basis
from flyviz.analysis.corpus import build_corpus
from flyviz.model.engine import Engine
from flyviz.model.resolve import load_model
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import write_fly_llm_hf

SETTINGS = AtlasSettings(top_k=4, streams=3, context=12, chunk_tokens=64, min_token_count=2,
                         samples_per_band=2)
NEURONS = 397


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, tokenizer_path):
    """A small model and an atlas of it over a corpus of fewer counted tokens than the
    sketch has columns (so the sketch is exact), with every counted state brute-forced."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint

    root = tmp_path_factory.mktemp("basis")
    tokenizer = FlyTokenizer(tokenizer_path)
    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=NEURONS, edges=6001, d_embed=16, vocabulary=tokenizer.vocab_size,
        readout_rank=9, seed=4, tokenizer_path=tokenizer_path, name="small"))
    write_fly_llm_hf(ckpt, root / "model")
    model = load_model(str(root / "model"))
    text = root / "story.txt"
    text.write_text("The cat sat on the mat.\n\nA dog ran home.\n", encoding="utf-8")
    corpus = build_corpus([text], tokenizer, context=SETTINGS.context)
    out = root / "tiny.atlas"
    build_atlas(str(root / "model"), model, corpus, out, SETTINGS, workers=0)
    states = []
    for w in range(corpus.n_windows):
        engine = Engine(model, threads=1)
        for position, token in enumerate(corpus.tokens[corpus.offsets[w]:corpus.offsets[w + 1]]):
            engine.step(int(token))
            if position > 0:                    # the BOS is left out of every statistic
                states.append(engine.state.astype(np.float64))
        engine.close()
    states = np.array(states)
    assert 4 <= len(states) <= SKETCH_COLUMNS, len(states)
    return {"root": root, "atlas": out, "states": states}


def _svd(states: np.ndarray, components: int = 3):
    mean = states.mean(axis=0)
    _u, s, vt = np.linalg.svd(states - mean, full_matrices=False)
    return mean, vt[:components], s[:components] ** 2 / len(states), \
        float(((states - mean) ** 2).sum() / len(states))


def test_a_small_corpus_atlas_holds_the_svds_axes(tiny):
    atlas = Atlas(tiny["atlas"])
    assert atlas.has_principal_axes and atlas.principal_axes_note() is None
    basis = atlas.principal_axes()
    assert basis is not None
    mean, axes, variance, total = _svd(tiny["states"])
    assert basis.axes.shape == (3, NEURONS)
    assert np.degrees(subspace_angles(basis.axes.T, axes.T)).max() < np.degrees(1e-5)
    # Each axis is the SVD's (one by one: the variances are distinct), unit, orthogonal.
    assert np.abs(np.abs(np.einsum("ij,ij->i", basis.axes, axes)) - 1).max() < 1e-9
    np.testing.assert_allclose(basis.axes @ basis.axes.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(basis.explained * total, variance, rtol=1e-6)
    np.testing.assert_allclose(basis.mean, mean, atol=1e-7)
    # Each axis's largest loading is positive, as principal_trajectory chooses.
    assert (basis.axes[np.arange(3), np.abs(basis.axes).argmax(axis=1)] > 0).all()
    # project / captured: the corpus's own states on its axes hold what the axes explain.
    np.testing.assert_allclose(basis.project(tiny["states"]),
                               (tiny["states"] - basis.mean) @ basis.axes.T, atol=1e-12)
    np.testing.assert_allclose(basis.captured(tiny["states"]), basis.explained, rtol=1e-5)
    assert atlas.info["basis"]["components"] == 3


def test_the_axes_read_with_xarray_as_named_dimensions(tiny):
    xr = pytest.importorskip("xarray")
    ds = xr.open_zarr(str(tiny["atlas"]))
    assert ds["pca_axes"].dims == ("component", "neuron") and ds.sizes["component"] == 3
    assert ds["pca_mean"].dims == ("neuron",)
    np.testing.assert_allclose(ds["pca_variance"].values,
                               Atlas(tiny["atlas"]).principal_axes().explained
                               * float(ds["pca_total_variance"].values[0]), rtol=1e-12)


def _planted_steps(seed: int, steps: int, streams: int, rank: int):
    """States in (-1, 1) that move in ``rank`` planted directions around a mean state."""
    rng = np.random.default_rng(seed)
    directions = rng.standard_normal((NEURONS, rank)) / np.sqrt(NEURONS)
    centre = 0.3 * np.tanh(rng.standard_normal(NEURONS))[:, None]
    scales = np.array([3.0, 2.0, 1.4, 1.0, 0.7][:rank])
    for _ in range(steps):
        yield (centre + 0.1 * directions @ (scales[:, None] * rng.standard_normal((rank, streams)))
               ).astype(np.float32)


def _chunk(steps, streams: int, start: int) -> dict:
    stats = ChunkStatistics(NEURONS, 8, streams, AtlasSettings(top_k=2, streams=streams,
                                                               samples_per_band=0))
    everything = []
    for i, x in enumerate(steps):
        stats.add(x, np.zeros(streams, dtype=np.int64), start + i * streams + np.arange(streams),
                  np.ones(streams, dtype=np.int64))
        everything.append(x.T)
    return {"partial": stats.partial(), "states": np.concatenate(everything)}


def test_planted_low_rank_states_and_the_merge_of_two_workers(tiny):
    streams = 16
    steps = list(_planted_steps(3, 40, streams, rank=5))       # 640 states of rank 5
    one = _chunk(steps, streams, 0)
    first, second = _chunk(steps[:17], streams, 0), _chunk(steps[17:], streams, 17 * streams)
    merged = merge_partials(first["partial"], second["partial"])
    np.testing.assert_allclose(merged["pca_sketch"], one["partial"]["pca_sketch"], rtol=1e-12,
                               atol=1e-12 * np.abs(one["partial"]["pca_sketch"]).max())
    states = one["states"].astype(np.float64)
    mean, axes, variance, total = _svd(states)
    for partial in (one["partial"], merged):
        basis = principal_basis(partial)
        assert np.degrees(subspace_angles(basis.axes.T, axes.T)).max() < np.degrees(1e-5)
        np.testing.assert_allclose(basis.variance, variance, rtol=1e-6)
        assert basis.total_variance == pytest.approx(total, rel=1e-6)   # the float32 step sums
    a, b = principal_basis(one["partial"]), principal_basis(merged)
    np.testing.assert_allclose(a.axes, b.axes, atol=1e-9)
    np.testing.assert_allclose(a.variance, b.variance, rtol=1e-9)


def test_a_degenerate_sketch_gives_fewer_axes_and_never_nan():
    streams = 8
    steps = list(_planted_steps(5, 6, streams, rank=2))        # 48 states, two directions
    partial = _chunk(steps, streams, 0)["partial"]
    basis = principal_basis(partial)
    assert basis.axes.shape == (2, NEURONS) and np.isfinite(basis.axes).all()
    _mean, axes, variance, _total = _svd(_chunk(steps, streams, 0)["states"].astype(np.float64), 2)
    np.testing.assert_allclose(basis.variance, variance, rtol=1e-6)
    # States that do not move at all: no axes, no NaN.
    still = [np.full((NEURONS, streams), 0.25, dtype=np.float32)] * 3
    partial = _chunk(still, streams, 0)["partial"]
    basis = principal_basis(partial)
    assert basis.axes.shape == (0, NEURONS) and basis.variance.size == 0
    assert np.isfinite(basis.mean).all()
    # One state: nothing to fit.
    assert finish_basis(partial["pca_sketch"], partial["pca_sum"], 1, 0.0).axes.shape[0] == 0


def atlas_without_axes(atlas: Path, out: Path) -> Path:
    """A copy of ``atlas`` as flyviz wrote it before it kept principal axes (also used by
    the app's Trajectory tests)."""
    import zarr

    shutil.copytree(atlas, out)
    for name in AXES_ARRAYS:
        shutil.rmtree(out / name)
    zarr.consolidate_metadata(str(out))
    integrity.seal_store(out)
    return out


def test_an_atlas_written_before_the_axes_opens_without_them(tiny, tmp_path):
    old = Atlas(atlas_without_axes(tiny["atlas"], tmp_path / "old.atlas"))     # verified whole
    assert not old.has_principal_axes and old.principal_axes() is None
    note = old.principal_axes_note()
    assert note is not None and "flyviz atlas" in note and "before" in note
    card = old.card(5)                                                   # the rest still works
    assert card.neuron == 5 and card.count == len(tiny["states"])


def test_damaged_axes_are_refused_in_one_line(tiny, tmp_path):
    from flyviz.analysis.atlas import AtlasError

    broken = tmp_path / "broken.atlas"
    shutil.copytree(tiny["atlas"], broken)
    chunk = next(p for p in (broken / "pca_axes").iterdir() if not p.name.startswith("."))
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    atlas = Atlas(broken, verify=False)
    with pytest.raises(AtlasError, match="pca_axes"):
        atlas.principal_axes()


def test_an_atlas_whose_states_do_not_vary_has_no_axes_and_says_so(tiny, tmp_path,
                                                                   monkeypatch, tokenizer_path):
    from flyviz.analysis import atlas_stats
    from flyviz.analysis.atlas_basis import Basis

    # What finish_basis gives for states that do not move (see the degenerate test above).
    monkeypatch.setattr(atlas_stats, "principal_basis", lambda partial: Basis(
        np.zeros((0, NEURONS)), np.zeros(NEURONS), np.zeros(0), 0.0))
    model = load_model(str(tiny["root"] / "model"))
    corpus = build_corpus([tiny["root"] / "story.txt"], FlyTokenizer(tokenizer_path),
                          context=SETTINGS.context)
    out = tmp_path / "still.atlas"
    build_atlas(str(tiny["root"] / "model"), model, corpus, out, SETTINGS, workers=0)
    atlas = Atlas(out)                                   # every chunk verified
    assert atlas.has_principal_axes and atlas.principal_axes() is None
    assert "do not vary" in atlas.principal_axes_note()
