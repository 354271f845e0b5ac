"""The neuron atlas: statistics against brute force, workers, resume, the store, bad input."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from flyviz import cli
from flyviz.analysis import atlas_build, atlas_stats
from flyviz.analysis import cluster
from flyviz.analysis.atlas import (HIST_BINS, Atlas, AtlasError, AtlasSettings, build_atlas,
                                   histogram_bins)
from flyviz.analysis.corpus import StreamSchedule, build_corpus
from flyviz.model.engine import Engine
from flyviz.model.errors import InputError
from flyviz.model.resolve import load_model
from flyviz.model.synthetic import _WORDS
from flyviz.model.tokenizer import FlyTokenizer

SETTINGS = AtlasSettings(top_k=6, streams=5, context=24, chunk_tokens=600, min_token_count=3,
                         samples_per_band=3)


@pytest.fixture(scope="module")
def world(small_world):
    """A small model in a folder (loadable by workers), its corpus file and the corpus."""
    rng = np.random.default_rng(7)
    stories = ["\n".join(" ".join(rng.choice(_WORDS, rng.integers(2, 14))).capitalize() + "."
                         for _ in range(rng.integers(1, 4))) for _ in range(130)]
    world = small_world("atlas", neurons=397, edges=6001, seed=4, anatomy=False,
                        text="\n\n".join(stories) + "\n", text_name="stories.txt",
                        context=SETTINGS.context)
    # The workers and resume tests need several chunks; how many depends on the tokenizer.
    assert len(world["corpus"].chunks(SETTINGS.chunk_tokens)) >= 4, world["corpus"].n_tokens
    return world


def _build(world, out: Path, workers: int | None, **kwargs):
    return build_atlas(world["spec"], world["model"], world["corpus"], out, SETTINGS,
                       workers=workers, **kwargs)


def _arrays(path: Path) -> dict[str, np.ndarray]:
    import zarr

    group = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(group[name][...]) for name in group.array_keys()}


def test_a_quantile_sample_is_listed_under_one_band_and_fill_ins_are_marked(in_process):
    """A neuron whose positions crowd into few bins: its bands share bins, and a band with
    no sample of its own was filled from them, so one sample showed under several bands
    and under bands its value is outside of, unmarked."""
    from flyviz.analysis.atlas_stats import SLOTS_PER_BIN, band_samples

    histogram = np.zeros((1, HIST_BINS), np.int64)
    histogram[0, 25] = 1000                   # every value in [0, 0.04)
    index = np.full((1, HIST_BINS * SLOTS_PER_BIN), -1, np.int64)
    value = np.full(index.shape, np.nan, np.float32)
    slots = slice(25 * SLOTS_PER_BIN, 26 * SLOTS_PER_BIN)
    index[0, slots], value[0, slots] = [7, 11], [0.001, 0.039]
    partial = {"histogram": histogram, "count": 1000, "sample_index": index,
               "sample_value": value}
    edges, chosen, values, _ = band_samples(partial, 5)
    listed = chosen[chosen >= 0].tolist()
    assert sorted(listed) == [7, 11]          # each kept sample once, none lost
    # The cards say which samples lie outside their band's range, in every band.
    atlas = Atlas(in_process)
    for neuron in range(0, atlas.neurons, 37):
        row = atlas._block(neuron)
        seen = set()
        for band, (_, found) in enumerate(atlas.card(neuron).quantile_samples):
            lo, hi = row["band_edges"][band], row["band_edges"][band + 1]
            for c in found:
                assert (c.window, c.position) not in seen
                seen.add((c.window, c.position))
                assert c.outside == (not lo <= c.value <= hi)
    from flyviz.commands.neuron import format_card

    marked = [n for n in range(atlas.neurons) if any(
        c.outside for _, found in atlas.card(n).quantile_samples for c in found)]
    if marked:
        assert "(outside the band)" in format_card(atlas.card(marked[0]))


@pytest.fixture(scope="module")
def in_process(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "a.atlas"
    _build(world, out, workers=0)
    return out


def _brute_force(world):
    """Every window through the single-stream engine: states at counted positions."""
    corpus, model = world["corpus"], world["model"]
    states, tokens, where = [], [], []
    for w in range(corpus.n_windows):
        engine = Engine(model, threads=1)
        ids = corpus.tokens[corpus.offsets[w]:corpus.offsets[w + 1]]
        for position, token in enumerate(ids):
            engine.step(int(token))
            if position > 0:
                states.append(engine.state.copy())
                tokens.append(int(token))
                where.append((w, position))
        engine.close()
    return np.array(states), np.array(tokens), np.array(where)


def _f64(x):
    return x.astype(np.float64)


def test_statistics_equal_a_brute_force_computation(world, in_process):
    x, tokens, where = _brute_force(world)
    got = _arrays(in_process)
    assert world["corpus"].n_windows > 3 * SETTINGS.streams  # refills happened
    np.testing.assert_allclose(got["mean"], _f64(x).mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(got["std"], _f64(x).std(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["max"], x.max(axis=0))
    bins = histogram_bins(x)
    want_hist = np.stack([np.bincount(bins[:, i], minlength=HIST_BINS)
                          for i in range(x.shape[1])])
    np.testing.assert_array_equal(got["histogram"], want_hist)
    assert got["histogram"].sum(axis=1).tolist() == [x.shape[0]] * x.shape[1]
    active = (x >= 0.2) | (x < -0.2)
    np.testing.assert_allclose(got["density"], active.mean(axis=0), atol=1e-6)
    # Top contexts: each window's maximum (earliest position), the 6 largest windows.
    for neuron in (0, 17, 396):
        best: dict[int, tuple[float, int]] = {}
        for value, (w, p) in zip(x[:, neuron], where):
            if w not in best or value > best[w][0]:
                best[w] = (float(value), int(p))
        ranked = sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0]))[:SETTINGS.top_k]
        assert [(w, p) for w, (_, p) in ranked] == list(zip(got["top_window"][neuron],
                                                            got["top_position"][neuron]))
        np.testing.assert_array_equal(got["top_value"][neuron], [v for _, (v, _) in ranked])
    # Driving tokens: highest mean by token among tokens read at least 3 times.
    counts = np.bincount(tokens, minlength=got["token_count"].size)
    np.testing.assert_array_equal(got["token_count"], counts)
    for neuron in (3, 200):
        means = {t: _f64(x[tokens == t, neuron]).mean() for t in np.flatnonzero(counts >= 3)}
        ranked = sorted(means, key=lambda t: (-means[t], t))[:SETTINGS.driving_tokens]
        chosen = got["driving_token"][neuron].tolist()
        # Float32 sums by token: near-ties (within 1e-6) may swap, nothing else.
        np.testing.assert_allclose(got["driving_mean"][neuron], [means[t] for t in chosen],
                                   atol=1e-6)
        np.testing.assert_allclose([means[t] for t in chosen], [means[t] for t in ranked],
                                   atol=2e-6)
    # Quantile samples: each is a real position with that value, inside or touching its band.
    values = {(int(w), int(p)): row for row, (w, p) in zip(x, where)}
    sample_w, sample_p, sample_v = got["sample_window"], got["sample_position"], got["sample_value"]
    assert (sample_w >= 0).sum() > 0
    for neuron in (0, 17):
        edges = got["band_edges"][neuron]
        for band in range(sample_w.shape[1]):
            for w, p, v in zip(sample_w[neuron, band], sample_p[neuron, band],
                               sample_v[neuron, band]):
                if w < 0:
                    continue
                assert values[(int(w), int(p))][neuron] == v
                assert edges[band] - 0.04 <= v <= edges[band + 1] + 0.04


def test_direct_effect_follows_the_documented_formula(world, in_process):
    model = world["model"]
    got = _arrays(in_process)
    attrs = Atlas(in_process).info
    h = np.asarray(model.head_b, dtype=np.float64) @ np.asarray(model.head_a, dtype=np.float64)
    neuron = 42
    effect = (h[:, neuron] - h[:, neuron].mean()) * model.ln_weight[neuron] / attrs["layer_norm_scale"]
    order = np.argsort(-effect, kind="stable")[:SETTINGS.logit_tokens]
    assert got["promoted_token"][neuron].tolist() == order.tolist()
    np.testing.assert_allclose(got["promoted_effect"][neuron], effect[order], rtol=1e-5)
    assert got["suppressed_token"][neuron].tolist() == np.argsort(effect, kind="stable")[
        :SETTINGS.logit_tokens].tolist()
    # The scale is the corpus mean of the LayerNorm's sqrt(var + eps).
    x, _, _ = _brute_force(world)
    scale = np.sqrt(x.var(axis=1) + model.config.layer_norm_eps).mean()
    assert attrs["layer_norm_scale"] == pytest.approx(scale, rel=1e-5)


@pytest.mark.slow
def test_one_and_two_worker_processes_give_the_same_atlas(world, in_process, tmp_path,
                                                          dask_workers):
    """A real dask.distributed LocalCluster with worker processes: one, then scaled to two
    (the first worker keeps its model: one cluster to start and close, not two)."""
    one = _arrays(in_process)
    for workers in (1, 2):
        out = tmp_path / f"w{workers}.atlas"
        result = _build(world, out, workers=None, scheduler=dask_workers.scaled_to(workers))
        assert result.workers == workers
        assert result.chunks == len(world["corpus"].chunks(SETTINGS.chunk_tokens))
        other = _arrays(out)
        assert sorted(other) == sorted(one)
        for name in one:
            np.testing.assert_array_equal(other[name], one[name], err_msg=name)


def test_a_resumed_run_equals_an_uninterrupted_one(world, in_process, tmp_path,
                                                   interrupt_after):
    out = tmp_path / "r.atlas"
    restore = interrupt_after(atlas_stats, "chunk_statistics", 3)
    with pytest.raises(cluster.Interrupted, match="3 of .* chunks are saved"):
        _build(world, out, workers=0)
    assert not out.exists() and (tmp_path / "r.atlas.parts").is_dir()
    with pytest.raises(InputError, match="--resume"):
        _build(world, out, workers=0)
    restore()
    result = _build(world, out, workers=0, resume=True)
    assert result.resumed_chunks == 3
    assert not (tmp_path / "r.atlas.parts").exists()
    want, got = _arrays(in_process), _arrays(out)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_schedule_keeps_streams_busy_and_covers_every_token(world):
    chunk = world["corpus"].chunks(2000)[0]
    schedule = StreamSchedule(chunk, 5)
    seen = np.sort(schedule.index[schedule.index >= 0])
    np.testing.assert_array_equal(seen, chunk.base + np.arange(chunk.n_tokens))
    busy = (schedule.index >= 0).mean()
    assert busy > 0.9


def test_a_chunk_of_few_windows_steps_few_columns_and_keeps_the_atlas_bits(world,
                                                                          monkeypatch):
    """A chunk with fewer windows than ``--batch`` ran every idle column (a one-story atlas at
    the default 64 streams did 8 times the work it needed); it now steps whole vectors of
    columns for its windows, and its statistics equal the full width's, bit for bit."""
    from dataclasses import replace

    from flyviz.analysis import atlas_stats

    ckpt = load_model(world["spec"])
    chunk = world["corpus"].chunks(60)[1]
    windows = chunk.offsets.size - 1
    assert 1 < windows <= 8
    wide = replace(SETTINGS, streams=64)
    assert atlas_stats.streams_for(chunk, 64) == 8
    assert atlas_stats.streams_for(chunk, 5) == 5            # never more than --batch
    assert atlas_stats.streams_for(world["corpus"].chunks(600)[0], 16) == 16
    narrow = atlas_stats.chunk_statistics(ckpt, wide, chunk)
    monkeypatch.setattr(atlas_stats, "streams_for", lambda _chunk, streams: streams)
    full = atlas_stats.chunk_statistics(ckpt, wide, chunk)
    assert sorted(narrow) == sorted(full) and int(full["count"]) > 0
    for name in full:
        np.testing.assert_array_equal(narrow[name], full[name], err_msg=name)


def test_reader_cards_search_statistics_and_model_check(world, in_process, tokenizer_path):

    atlas = Atlas(in_process)
    card = atlas.card(17)
    card = atlas.card(18)
    top = card.top_contexts[0]
    corpus = world["corpus"]
    token = int(corpus.tokens[corpus.offsets[top.window] + top.position])
    assert top.token_id == token
    assert top.text[top.span[0]:top.span[1]] == FlyTokenizer(tokenizer_path).decode([token])
    assert card.max == top.value and len(card.top_contexts) == SETTINGS.top_k
    assert [t.token_id for t in card.driving_tokens] == \
        _arrays(in_process)["driving_token"][18].tolist()
    assert json.loads(json.dumps(card.to_dict()))["neuron"] == 18
    # Find neurons by token: exactly those whose driving tokens hold it.
    table = _arrays(in_process)["driving_token"]
    word = card.driving_tokens[0].text
    ids = atlas.token_ids_for(word.strip())
    want = np.flatnonzero(np.isin(table, ids).any(axis=1))
    np.testing.assert_array_equal(atlas.neurons_driven_by(word.strip()), want)
    np.testing.assert_array_equal(atlas.neurons_driven_by(card.driving_tokens[0].token_id),
                                  np.flatnonzero((table == card.driving_tokens[0].token_id).any(1)))
    assert atlas.statistic("density").shape == (world["model"].config.neurons,)
    with pytest.raises(InputError):
        atlas.statistic("nonsense")
    # Identity.
    atlas.check_model(world["model"])
    other = world["model"]
    import dataclasses
    # digests={}: the identity digests are cached on a checkpoint.
    changed = dataclasses.replace(other, bias=np.asarray(other.bias) + 1, digests={})
    assert not atlas.matches(changed)
    with pytest.raises(AtlasError, match="another model.*weights differ"):
        atlas.check_model(changed)
    xr = pytest.importorskip("xarray")
    ds = xr.open_zarr(str(in_process))
    assert ds["top_value"].dims == ("neuron", "rank")
    assert float(ds["mean"][17]) == pytest.approx(atlas.card(17).mean)


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_neuron_command_prints_the_card(capsys, in_process):
    code, out, _ = _cli(capsys, "neuron", str(in_process), "17")
    assert code == 0 and "neuron 17" in out and "top contexts" in out and "[[" in out
    code, out, _ = _cli(capsys, "neuron", str(in_process), "17", "--json")
    assert code == 0 and json.loads(out)["neuron"] == 17
    code, _, err = _cli(capsys, "neuron", str(in_process), "100000")
    assert code == 2 and err.count("\n") == 1 and "outside" in err


def test_atlas_command_runs_in_process(capsys, world, tmp_path):
    out = tmp_path / "cli.atlas"
    code, stdout, err = _cli(capsys, "atlas", world["spec"], "--corpus", str(world["text"]),
                             "--out", str(out), "--workers", "0", "--batch", "5",
                             "--context", "24", "--compact", "--max-tokens", "900",
                             "--top-k", "4")
    assert code == 0, err
    assert "atlas written" in stdout and "tokens/s" in err
    assert "tokens/s, in this process)" in stdout and "worker(s)" not in stdout
    atlas = Atlas(out)
    assert not atlas.has_samples and atlas.info["corpus"]["tokens"] == 900
    held = atlas.principal_axes().explained.sum()
    assert f"principal axes: PC1–3 hold {100 * held:.1f} % of the corpus's variance" in stdout
    # The same command again does not silently replace the finished atlas.
    created = atlas.info["created"]
    code, stdout, err = _cli(capsys, "atlas", world["spec"], "--corpus", str(world["text"]),
                             "--out", str(out), "--workers", "0", "--compact",
                             "--max-tokens", "900")
    assert code == 2 and err.count("\n") == 1 and stdout == ""
    assert "is a finished atlas" in err and f"delete {out}" in err
    assert Atlas(out).info["created"] == created



def test_an_out_where_no_file_can_be_made_fails_before_the_model_loads(capsys, world,
                                                                      tmp_path):
    """``--out /proc/x.atlas`` as root (os.access says yes): it loaded the model and the
    corpus, then failed with the system's bare "No such file or directory"."""
    out = Path("/proc/flyviz-x.atlas")
    code, stdout, err = _cli(capsys, "atlas", str(tmp_path / "no-model-needed"), "--corpus",
                             str(world["text"]), "--out", str(out), "--workers", "0")
    assert code == 2 and err.count("\n") == 1 and stdout == "", err
    assert f"cannot write --out {out}: the folder /proc takes no new files" in err


@pytest.mark.parametrize("case", ["missing", "empty", "undecodable", "parquet", "jsonl",
                                  "scheduler", "threshold"])
def test_bad_input_gives_one_line_and_exit_2(capsys, monkeypatch, world, tmp_path, case):
    corpus = tmp_path / "c.txt"
    extra: list[str] = ["--workers", "0"]
    if case == "missing":
        corpus = tmp_path / "nope.txt"
    elif case == "empty":
        corpus.write_text("\n\n   \n", encoding="utf-8")
    elif case == "undecodable":
        corpus.write_bytes(b"A fine story.\n\n\xff\xfe broken bytes")
    elif case == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq
        corpus = tmp_path / "c.parquet"
        pq.write_table(pa.table({"body": ["a story"]}), corpus)
    elif case == "jsonl":
        corpus = tmp_path / "c.jsonl"
        corpus.write_text('{"text": "fine"}\n{"txt": 3}\n', encoding="utf-8")
    elif case == "scheduler":
        corpus = world["text"]
        extra = ["--scheduler", "tcp://127.0.0.1:9"]
        # Nothing listens there: the refusal is the same after 0.2 s as after the 5 s a
        # user's scheduler is given.
        monkeypatch.setattr(cluster, "SCHEDULER_CONNECT_TIMEOUT_S", 0.2)
    elif case == "threshold":
        corpus = world["text"]
        extra = ["--density-threshold", "0.25", "--workers", "0"]
    code, _, err = _cli(capsys, "atlas", world["spec"], "--corpus", str(corpus), "--out",
                        str(tmp_path / "x.atlas"), *extra)
    assert code == 2, err
    assert err.startswith("flyviz: error: ") and err.count("\n") == 1, err
    expected = {"missing": "not found", "empty": "no text", "undecodable": "not UTF-8",
                "parquet": "no 'text' column", "jsonl": "line 2", "scheduler": "scheduler",
                "threshold": "multiple of 0.04"}[case]
    assert expected in err


def test_readers_take_jsonl_parquet_and_folders(world, tmp_path, tokenizer_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("One story.\n\nTwo story.\n", encoding="utf-8")
    (folder / "sub" / "b.jsonl").write_text('{"text": "Three."}\n\n{"text": "Four."}\n',
                                           encoding="utf-8")
    pq.write_table(pa.table({"text": ["Five.", None, "Six."]}), folder / "sub" / "c.parquet")
    (folder / ".hidden.txt").write_text("Never.", encoding="utf-8")
    tok = FlyTokenizer(tokenizer_path)
    corpus = build_corpus([folder], tok, context=3)
    assert corpus.n_documents == 6 and len(corpus.sources) == 3
    texts = [tok.decode(corpus.tokens[a + 1:b].tolist())
             for a, b in zip(corpus.offsets[:-1], corpus.offsets[1:])]
    joined = "".join(texts)
    assert "Never" not in joined and "Six." in joined and "Three." in joined
    # Windows of at most context tokens, each starting with BOS.
    assert np.diff(corpus.offsets).max() <= 3
    assert (corpus.tokens[corpus.offsets[:-1]] == corpus.bos_token_id).all()


def test_the_shipped_demo_atlas_matches_the_demo_brain(demo_cache, monkeypatch):
    demo_atlas = Path(__file__).resolve().parents[1] / "assets" / "demo" / "atlas"
    if not demo_atlas.is_dir():
        pytest.skip("the demo atlas is not built")

    monkeypatch.setenv("FLYVIZ_CACHE_DIR", str(demo_cache))
    atlas = Atlas(demo_atlas)
    atlas.check_model(load_model("demo"))
    assert atlas.settings["top_k"] == 10 and not atlas.has_samples
    card = atlas.card(0)
    for neuron in (123, 40_000, 49_392):   # its speed: tests/bench_atlas.py cards
        card = atlas.card(neuron)
    assert len(card.top_contexts) == 10 and card.top_contexts[0].text
    assert atlas.info["corpus"]["tokens"] > 300_000


def test_io_errors_are_one_line(tmp_path):
    with pytest.raises(AtlasError, match="does not exist"):
        Atlas(tmp_path / "none")
    (tmp_path / "junk").mkdir()
    with pytest.raises(AtlasError):
        Atlas(tmp_path / "junk")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["neuron", str(tmp_path / "junk"), "1"]) == 2
    assert err.getvalue().count("\n") == 1


def test_compiled_and_numpy_statistics_give_the_same_partial():
    from flyviz.analysis import _kernels
    from flyviz.analysis.atlas_stats import ChunkStatistics

    if _kernels.compiled() is None:
        pytest.skip("llvmlite cannot build the statistics loops here")
    neurons, vocab, streams = 2500, 40, 16  # more than one block of rows
    settings = AtlasSettings(top_k=3, streams=streams, samples_per_band=2)
    partials = []
    for compiled in (False, True):
        stats = ChunkStatistics(neurons, vocab, streams, settings, compiled=compiled)
        step_rng = np.random.default_rng(9)
        for step in range(12):
            x = np.tanh(3 * step_rng.standard_normal((neurons, streams))).astype(np.float32)
            x[:5, :3] = [[-1.0, 1.0, 0.2]] * 5  # the edges of the range and of a bin
            tokens = step_rng.integers(0, 6, streams)  # many repeats within a step
            position = np.where(step_rng.random(streams) < 0.2, -1, step % 4)
            stats.start_windows(np.flatnonzero(position == 0))
            stats.add(x, tokens, 100 * step + np.arange(streams), position)
            stats.end_windows(np.flatnonzero(position == 3))
        partials.append(stats.partial())
    assert sorted(partials[0]) == sorted(partials[1])
    for name in partials[0]:
        np.testing.assert_array_equal(partials[0][name], partials[1][name], err_msg=name)
    assert partials[0]["histogram"][:5, HIST_BINS - 1].min() >= 1  # x = 1.0 counted in bin 49


def test_a_worker_with_other_weights_is_refused(world):
    from dataclasses import asdict

    chunk = world["corpus"].chunks(SETTINGS.chunk_tokens)[0]
    with pytest.raises(InputError, match="another model"):
        atlas_build.atlas_chunk(world["spec"], None, "0" * 64, asdict(SETTINGS), chunk)


def test_atlas_joins_a_model_to_its_dataset(world, tmp_path, tokenizer_path, capsys):
    """fly-wordbrain weights need the connectome dataset: --dataset gives it, as elsewhere."""
    from flyviz.model.checkpoint import validate_checkpoint
    from flyviz.model.synthetic import make_random_checkpoint
    from flyviz.model.writers import write_connectome_dataset, write_wordbrain

    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=211, edges=3001, d_embed=16, vocabulary=FlyTokenizer(tokenizer_path).vocab_size,
        readout_rank=7, seed=9, tokenizer_path=tokenizer_path, name="wordbrain-small"))
    write_wordbrain(ckpt, tmp_path / "model", tokenizer_path=tokenizer_path)
    dataset = tmp_path / "elsewhere" / "graph"        # not where the loader looks by itself
    write_connectome_dataset(ckpt, dataset)
    argv = ["atlas", str(tmp_path / "model"), "--corpus", str(world["text"]), "--workers", "0",
            "--context", "24", "--batch", "5", "--max-tokens", "400"]
    code = cli.main(argv + ["--out", str(tmp_path / "without.atlas")])
    assert code == 2 and "dataset" in capsys.readouterr().err
    code = cli.main(argv + ["--out", str(tmp_path / "with.atlas"), "--dataset", str(dataset)])
    assert code == 0, capsys.readouterr().err
    atlas = Atlas(tmp_path / "with.atlas")
    atlas.check_model(load_model(str(tmp_path / "model"), dataset_dir=dataset))


def test_max_tokens_counts_each_windows_bos_as_help_and_docs_say(tokenizer_path, tmp_path,
                                                                 capsys):
    """``--max-tokens 2000`` scores 1,984 positions of the demo's stories: the 16 windows'
    BOS tokens are counted. Every command's --help says so."""
    from flyviz import cli

    story = "Once upon a time there was a cat. The cat sat on the mat and the dog ran."
    path = tmp_path / "t.txt"
    path.write_text("\n\n".join([story] * 4), encoding="utf-8")
    corpus = build_corpus([path], FlyTokenizer(tokenizer_path), context=8, max_tokens=30)
    assert corpus.n_tokens == 30 and corpus.n_windows > 1
    assert (corpus.tokens[corpus.offsets[:-1]] == corpus.bos_token_id).all()
    assert corpus.counted_tokens == 30 - corpus.n_windows
    for command in ("sweep", "importance", "atlas", "circuit"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        helped = " ".join(capsys.readouterr().out.split())
        described = helped.partition("--max-tokens N read at most N tokens of")[2]
        assert "BOS tokens included" in described[:40], (command, described[:40])
