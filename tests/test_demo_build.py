"""The demo brain end to end at tiny scale: build command, asset, loader, cache, behaviour."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from flyviz import cli
from flyviz.demo import DEMO_DESCRIPTION, DEMO_NAME
from flyviz.demo.build import DEFAULT_SEED, SCALES
from flyviz.demo.connectome import make_connectome
from flyviz.demo.corpus import make_corpus, split_stories
from flyviz.demo.loader import dataset_digest, load_demo, prepare_dataset, read_demo_info
from flyviz.demo.ngram import NGramModel, story_sequences
from flyviz.demo.reservoir import StreamReservoir
from flyviz.model.engine import Engine, softmax
from flyviz.model.errors import CheckpointError, ModelNotFoundError
from flyviz.model.formats.recital import load_recital_web
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.record.run import GenerationSettings, iter_frames

pytestmark = pytest.mark.slow

TINY = SCALES["tiny"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny build through the real command line; returns (asset dir, stderr text)."""
    out = tmp_path_factory.mktemp("asset") / "demo"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = cli.main(["build-demo", "--scale", "tiny", "--out", str(out), "--workers", "0"])
    assert status == 0, err.getvalue()
    return out, err.getvalue()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(root))
    return root


@pytest.fixture
def loaded(built, cache):
    return load_demo(asset_dir=built[0])


def _held_out(asset: Path, tokenizer: FlyTokenizer) -> list[np.ndarray]:
    stories = split_stories((asset / "heldout.txt").read_text(encoding="utf-8"))
    return story_sequences([tokenizer.encode(s) for s in stories], 1, 2)


def test_build_writes_the_web_export_layout_and_reports_progress(built):
    out, err = built
    assert "running the reservoir" in err and "100.0%" in err
    manifest = json.loads((out / "model" / "manifest.json").read_text())
    assert manifest["config"]["neurons"] == TINY.neurons
    assert manifest["config"]["readout_rank"] == 64
    for name in ("wte", "in_proj", "gain", "rec_gain", "bias", "ln_weight", "ln_bias",
                 "head_a", "head_b"):
        entry = manifest["files"][name]
        assert (out / "model" / entry["file"]).stat().st_size == entry["bytes"]
    info = read_demo_info(out)
    assert info["synthetic_wiring"] is True and info["seed"] == DEFAULT_SEED
    assert info["edges"] == TINY.edges
    # No Python, no pickles: only data files.
    assert not list(out.rglob("*.py")) and not list(out.rglob("*.pkl"))


def test_loaded_graph_is_the_one_built(built, loaded):
    expected = make_connectome(TINY.neurons, TINY.edges, TINY.delay_k, TINY.neurons_per_slot,
                               seed=DEFAULT_SEED)
    assert loaded.layout == "recital-web"
    assert np.array_equal(np.asarray(loaded.w_offsets), expected.offsets)
    assert np.array_equal(np.asarray(loaded.w_indices).astype(np.int32), expected.sources)
    assert np.array_equal(np.asarray(loaded.w_values), expected.weights())
    assert np.array_equal(np.asarray(loaded.in_index), expected.in_index)
    anatomy = loaded.anatomy
    assert anatomy is not None and anatomy.kind == "synthetic"
    assert np.array_equal(np.asarray(anatomy.valid, dtype=bool), expected.valid)
    assert anatomy.n_valid < TINY.neurons


def test_loads_through_the_web_export_loader_directly(built, cache):
    out, _ = built
    dataset = prepare_dataset(out, read_demo_info(out))
    ckpt = load_recital_web(out / "model", dataset)
    assert ckpt.config.neurons == TINY.neurons and ckpt.n_edges == TINY.edges
    assert ckpt.anatomy.kind == "synthetic"  # from the dataset manifest


def test_generates_text_with_live_recurrent_dynamics(loaded):
    tokenizer = FlyTokenizer(loaded.tokenizer_path)
    engine = Engine(loaded)
    frames = list(iter_frames(engine, tokenizer, "Once upon a time",
                              GenerationSettings(max_new_tokens=30)))
    engine.close()
    generated = [f.predicted_token_id for f in frames if f.generation_index is not None]
    assert len(generated) >= 10
    text = frames[-1].text_so_far
    assert sum(c.isalpha() for c in text) > 20
    mean_abs = np.array([f.mean_abs_state for f in frames])
    assert np.all(mean_abs[2:] > 0.05), "dynamics died out"
    assert np.all(mean_abs < 0.8), "dynamics saturated"
    # The state keeps moving from token to token.
    steps = [np.abs(b.state - a.state).mean() for a, b in zip(frames, frames[1:])]
    assert min(steps) > 1e-3
    # Neurons that receive no input drive are active too: the recurrence carries activity.
    driven = np.zeros(loaded.config.neurons, dtype=bool)
    driven[np.asarray(loaded.in_index)] = True
    assert np.abs(frames[-1].state[~driven]).mean() > 0.02


def test_engine_cross_entropy_is_below_unigram(built, loaded):
    out, _ = built
    tokenizer = FlyTokenizer(loaded.tokenizer_path)
    train, _ = make_corpus(TINY.corpus_chars, seed=DEFAULT_SEED)
    ngram = NGramModel(story_sequences([tokenizer.encode(s) for s in train], 1, 2),
                       tokenizer.vocab_size)
    held = _held_out(out, tokenizer)[:8]
    engine = Engine(loaded)
    nll, count = 0.0, 0
    for seq in held:
        engine.reset()
        for cur, nxt in zip(seq[:-1], seq[1:]):
            nll -= float(np.log(softmax(engine.step(int(cur)))[int(nxt)]))
            count += 1
    engine.close()
    model_ce = nll / count
    assert model_ce < ngram.unigram_cross_entropy(held) - 1.0
    # The figure recorded at build time (whole held-out split) tells the same story.
    quality = read_demo_info(out)["quality"]
    assert quality["cross_entropy_model"] < quality["cross_entropy_unigram"]


def test_batched_reservoir_matches_the_engine(loaded, built):
    tokenizer = FlyTokenizer(loaded.tokenizer_path)
    seqs = _held_out(built[0], tokenizer)[:3]
    res = StreamReservoir(loaded.w_offsets, loaded.w_indices, loaded.w_values, loaded.wte,
                          loaded.in_proj, loaded.gain, loaded.rec_gain, loaded.bias,
                          loaded.in_index, streams=3, threads=2)
    engine = Engine(loaded)
    steps = min(s.size for s in seqs)
    expected = []
    for seq in seqs:
        engine.reset()
        for token in seq[:steps]:
            engine.step(int(token))
        expected.append(engine.state.copy())
    engine.close()
    for t in range(steps):
        state = res.step(np.array([s[t] for s in seqs]))
    res.close()
    for i in range(3):
        np.testing.assert_allclose(state[:, i], expected[i], atol=2e-5)


def test_cache_is_checked_and_repaired(built, cache):
    out, _ = built
    load_demo(asset_dir=out)
    folders = list((cache / "demo").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("dataset-")
    weights = folders[0] / "graph" / "edges_weight.f32"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[100:108] = b"\xff" * 8
    weights.write_bytes(bytes(damaged))
    labels = []
    ckpt = load_demo(lambda label, fraction: labels.append((label, fraction)), asset_dir=out)
    assert weights.read_bytes() == good, "a damaged cache is rebuilt"
    assert any("first use" in label for label, _ in labels)
    assert [f for _, f in labels] == sorted(f for _, f in labels) and labels[-1][1] == 1.0
    assert dataset_digest(folders[0]) == read_demo_info(out)["dataset_sha256"]
    assert ckpt.metadata["description"] == DEMO_DESCRIPTION and ckpt.name == DEMO_NAME
    assert not [p for p in (cache / "demo").iterdir() if p.name.endswith(".partial")]


def test_damaged_asset_is_refused_with_one_line(built, cache, tmp_path):
    copy = tmp_path / "demo"
    shutil.copytree(built[0], copy)
    info = json.loads((copy / "demo.json").read_text())
    info["dataset_sha256"] = "0" * 64
    (copy / "demo.json").write_text(json.dumps(info))
    with pytest.raises(CheckpointError) as err:
        load_demo(asset_dir=copy)
    assert "\n" not in str(err.value) and "build-demo" in str(err.value)
    (copy / "demo.json").unlink()
    with pytest.raises(ModelNotFoundError):
        load_demo(asset_dir=copy)


def test_model_spec_demo_resolves_to_the_demo_brain(built, cache, monkeypatch):
    """``load_model("demo")`` loads the demo where this installation keeps it (here the tiny
    one just built): its weights, not only its name. The break it catches: the spec loading
    the installed demo (or any other) instead of the one ``demo_asset_dir`` names."""
    from flyviz.demo import loader
    from flyviz.model.resolve import load_model

    monkeypatch.setattr(loader, "demo_asset_dir", lambda: built[0])
    progress = []
    ckpt = load_model("demo", lambda label, f: progress.append(label))
    assert ckpt.name == DEMO_NAME and ckpt.anatomy.kind == "synthetic"
    assert progress
    just_built = load_demo(asset_dir=built[0])
    assert ckpt.config.neurons == just_built.config.neurons
    assert np.array_equal(np.asarray(ckpt.w_values), np.asarray(just_built.w_values))
    assert np.array_equal(np.asarray(ckpt.w_indices), np.asarray(just_built.w_indices))


def test_build_command_rejects_bad_arguments(tmp_path, capsys):
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("x")
    assert cli.main(["build-demo", "--scale", "tiny", "--out", str(not_a_folder)]) == 2
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert cli.main(["build-demo", "--scale", "tiny", "--out", str(other)]) == 2
    assert (other / "notes.txt").read_text() == "mine", "never wipes a folder it did not write"
    err = capsys.readouterr().err
    assert err.count("flyviz: error:") == 2
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["build-demo", "--scale", "huge"])
    assert exit_info.value.code == 2


def test_evaluation_script_measures_the_quality_bar(built, cache):
    from flyviz.demo.evaluate import distinct_ngram_ratio, evaluate, loop_period

    assert loop_period([5, 6, 7] * 20) == 3
    assert loop_period(list(range(60))) == 0
    assert distinct_ngram_ratio([1, 2, 3, 4] * 5) < 0.3 < distinct_ngram_ratio(list(range(20)))
    lines: list[str] = []
    result = evaluate(built[0], time_loading=False, log=lines.append)
    ce = result["cross_entropy"]
    assert ce["model"] < ce["unigram"] and ce["engine_vs_batch_difference"] < 1e-4
    assert result["held_out_matches_seed"]
    assert result["greedy"]["tokens"] > 0 and len(result["samples"]["texts"]) == 3
    assert any("held-out cross-entropy" in line for line in lines)


def test_unwritable_cache_is_reported_with_one_line(built, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(CheckpointError) as err:
        load_demo(asset_dir=built[0])
    assert "FLYVIZ_CACHE_DIR" in str(err.value) and "\n" not in str(err.value)


def test_cache_follows_the_real_dataset_schema_and_replaces_an_old_one(built, cache):
    """The cached folder passes the dataset authors' 18 checks; a cache in flyviz 0.1's
    layout (another manifest schema and digest convention) is rebuilt, not read."""
    from flyviz.model.formats.dataset import DatasetFiles, check_dataset

    out, _ = built
    expected = read_demo_info(out)["dataset_sha256"]
    old = cache / "demo" / f"dataset-{expected[:16]}"
    old.mkdir(parents=True)
    (old / "manifest.json").write_text(json.dumps({"files": [], "frozen_buffers_sha256": {}}))
    ckpt = load_demo(asset_dir=out)
    assert not old.exists()
    folder = Path(ckpt.metadata["dataset"])
    results = check_dataset(DatasetFiles.open(folder), hash_files=True, quantised=True)
    assert results and all(r.status == "pass" for r in results), \
        [r for r in results if r.status != "pass"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert isinstance(manifest["files"], dict) and "edges_offsets" in manifest["files"]


def test_build_ships_a_compact_atlas_that_atlas_only_reproduces(built, cache, tmp_path):
    import zarr

    from flyviz.analysis.atlas import Atlas

    out, err = built
    atlas = Atlas(out / "atlas")
    atlas.check_model(load_demo(asset_dir=out))
    assert atlas.settings["top_k"] == 10 and not atlas.has_samples
    info = read_demo_info(out)
    assert atlas.info["corpus"]["documents"] == (info["corpus"]["train_stories"]
                                                 + info["corpus"]["held_out_stories"])
    card = atlas.card(TINY.neurons - 1)
    assert len(card.top_contexts) == 10 and card.top_contexts[0].text
    copy = tmp_path / "demo"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("atlas"))
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["build-demo", "--atlas-only", "--out", str(copy), "--workers", "0"]) == 0
    first = zarr.open_group(str(out / "atlas"), mode="r")
    again = zarr.open_group(str(copy / "atlas"), mode="r")
    assert sorted(first.array_keys()) == sorted(again.array_keys())
    for name in first.array_keys():
        np.testing.assert_array_equal(np.asarray(first[name][...]), np.asarray(again[name][...]),
                                      err_msg=name)


@pytest.mark.parametrize("workers", ["-1", "5000"])
def test_a_bad_workers_count_is_refused_before_the_build(tmp_path, capsys, monkeypatch,
                                                         workers):
    """``--workers -1`` went unchecked: the whole build ran (minutes at full scale) and
    only its last step, the atlas on Dask, failed. It is one line before anything is
    built, as in every other command with --workers."""
    import flyviz.demo.build as build_module

    def must_not_build(*_args, **_kwargs):
        raise AssertionError("the build started before --workers was checked")

    monkeypatch.setattr(build_module, "build_demo", must_not_build)
    monkeypatch.setattr(build_module, "build_demo_atlas", must_not_build)
    out = tmp_path / "demo"
    for extra in ([], ["--atlas-only"]):
        status = cli.main(["build-demo", "--scale", "tiny", "--out", str(out), "--workers",
                           workers, *extra])
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1, err
        assert err.startswith(f"flyviz: error: --workers {workers} must be between 0 and 1024")
    assert not out.exists()
