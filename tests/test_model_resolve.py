"""Model specs: local folders, the Hugging Face cache (offline), the demo brain."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from flyviz.model.errors import CheckpointError, ModelNotFoundError
from flyviz.model.resolve import WORDBRAIN_DEFAULT_SUBFOLDER, load_model, parse_hub_spec
from flyviz.model.writers import (write_connectome_dataset, write_fly_llm_hf, write_recital_web,
                                  write_wordbrain)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty huggingface_hub cache, offline, and a helper to lay out snapshots in it."""
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def snapshot(repo_id: str, repo_type: str = "model", revision: str = "main",
                 commit: str = "0123456789abcdef0123456789abcdef01234567"):
        # huggingface_hub's own layout: <type>s--owner--name/{refs/<rev>, snapshots/<commit>/}
        base = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / revision).write_text(commit)
        folder = base / "snapshots" / commit
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    return snapshot


def test_parse_hub_specs():
    assert parse_hub_spec("ngxson/fly-llm-hf").subfolder == ""
    wordbrain = parse_hub_spec("fernandofernandes/fly-wordbrain-rank64")
    assert wordbrain.subfolder == WORDBRAIN_DEFAULT_SUBFOLDER == "corpus-10k/web"
    pinned = parse_hub_spec("fernandofernandes/fly-wordbrain-rank64@f2fb0a2/web")
    assert (pinned.repo_id, pinned.revision, pinned.subfolder) == (
        "fernandofernandes/fly-wordbrain-rank64", "f2fb0a2", "web")
    assert parse_hub_spec("fernandofernandes/fly-wordbrain-rank64/.").subfolder == ""
    for not_hub in ("demo", "./folder", "/abs/path", "a/b/../../etc", "no spaces/x y"):
        assert parse_hub_spec(not_hub) is None


def test_local_folder_and_file_specs(tiny_checkpoint, tmp_path):
    write_fly_llm_hf(tiny_checkpoint, tmp_path / "m")
    by_folder = load_model(str(tmp_path / "m"))
    by_file = load_model(str(tmp_path / "m" / "model.safetensors"))
    assert by_folder.layout == by_file.layout == "fly-llm-hf"
    assert by_folder.name == "m"
    with pytest.raises(ModelNotFoundError, match="no such folder"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="no model given"):
        load_model("  ")


def test_the_help_and_the_missing_folder_error_name_every_repo_the_readme_says_loads(tmp_path):
    """README's "What loads" table, `flyviz --help` and the "no such folder" hint agree."""
    from flyviz.cli import DESCRIPTION

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme.split("## What loads", 1)[1].split("\n## ", 1)[0]
    repos = re.findall(r"`([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)`", table)
    assert {"ngxson/fly-llm-hf", "fernandofernandes/fly-wordbrain-rank64",
            "QuixiAI/FlyGPT"} <= set(repos)
    with pytest.raises(ModelNotFoundError) as refused:
        load_model(str(tmp_path / "missing"))
    hint = str(refused.value)
    assert "\n" not in hint
    help_text = " ".join(DESCRIPTION.split())
    for text in (hint, help_text):
        for repo in repos:
            assert repo in text, (repo, text)
        for subfolder in ("/scrambled", "/init", "/full-cns"):
            assert subfolder in text, (subfolder, text)
        assert "web export" in text, text


def test_hub_models_load_from_the_cache_offline(tiny_checkpoint, hub_cache):
    write_fly_llm_hf(tiny_checkpoint, hub_cache("ngxson/fly-llm-hf"))
    events = []
    ckpt = load_model("ngxson/fly-llm-hf", lambda label, fraction: events.append((label, fraction)))
    assert ckpt.layout == "fly-llm-hf" and ckpt.name == "ngxson/fly-llm-hf"
    assert ckpt.anatomy is None  # no dataset in the cache: the model runs without positions
    assert [f for _, f in events] == sorted(f for _, f in events) and events[-1][1] == 1.0

    # The derived model ships no tokenizer: ngxson's comes from the cache alongside.
    no_tokenizer = tiny_checkpoint.__class__(**{**tiny_checkpoint.__dict__, "tokenizer_path": None})
    snapshot = hub_cache("fernandofernandes/fly-wordbrain-rank64")
    write_recital_web(no_tokenizer, snapshot / "corpus-10k" / "web")
    write_wordbrain(no_tokenizer, snapshot)
    write_connectome_dataset(tiny_checkpoint, hub_cache("fernandofernandes/fly-connectome-49k",
                                                        repo_type="dataset"))
    web = load_model("fernandofernandes/fly-wordbrain-rank64")
    assert web.layout == "recital-web"
    assert web.tokenizer_path.name == "tokenizer.json" and "ngxson" in str(web.tokenizer_path)
    # With the dataset cached, ngxson's model gets its neurons' soma positions too.
    with_positions = load_model("ngxson/fly-llm-hf")
    np.testing.assert_array_equal(with_positions.anatomy.valid, tiny_checkpoint.anatomy.valid)
    root = load_model("fernandofernandes/fly-wordbrain-rank64/.")
    assert root.layout == "wordbrain"
    np.testing.assert_array_equal(web.head_a, root.head_a)


def test_a_pinned_revision_uses_that_snapshot(tiny_checkpoint, hub_cache):
    write_fly_llm_hf(tiny_checkpoint, hub_cache("ngxson/fly-llm-hf", revision="v1",
                                                commit="1" * 40))
    assert load_model("ngxson/fly-llm-hf@v1").layout == "fly-llm-hf"
    with pytest.raises(ModelNotFoundError):
        load_model("ngxson/fly-llm-hf@v2")


def test_offline_without_cache_says_what_to_download(hub_cache):
    with pytest.raises(ModelNotFoundError) as info:
        load_model("ngxson/fly-llm-hf")
    message = str(info.value)
    assert "model.safetensors" in message and "config.json" in message
    assert "https://huggingface.co/ngxson/fly-llm-hf" in message and "\n" not in message
    with pytest.raises(ModelNotFoundError) as info:
        load_model("fernandofernandes/fly-wordbrain-rank64")
    message = str(info.value)
    assert "corpus-10k/web" in message and "fly-connectome-49k" in message
    assert "tokenizer.json" in message
    # A graph-control release runs only with the trainer's receipt beside its weights.
    with pytest.raises(ModelNotFoundError) as info:
        load_model("fernandofernandes/fly-wordbrain-shuffled-10k")
    message = str(info.value)
    assert "manifest.json (and graph-control.json where the release has one)" in message


def test_a_hub_model_without_its_dataset_in_the_cache(tiny_checkpoint, hub_cache):
    write_recital_web(tiny_checkpoint, hub_cache("fernandofernandes/fly-wordbrain-rank64")
                      / "corpus-10k" / "web")
    with pytest.raises(ModelNotFoundError, match="fly-connectome-49k"):
        load_model("fernandofernandes/fly-wordbrain-rank64")


def test_demo_spec(monkeypatch, tiny_checkpoint):
    monkeypatch.setitem(sys.modules, "flyviz.demo", types.ModuleType("flyviz.demo"))
    with pytest.raises(ModelNotFoundError, match="demo brain is not built"):
        load_model("demo")
    calls = []
    demo = types.ModuleType("flyviz.demo")
    demo.load_demo = lambda progress=None: calls.append(progress) or tiny_checkpoint
    monkeypatch.setitem(sys.modules, "flyviz.demo", demo)
    assert load_model("demo") is tiny_checkpoint and len(calls) == 1
    # Whatever the demo returns is validated like any checkpoint.
    broken = tiny_checkpoint.__class__(**{**tiny_checkpoint.__dict__,
                                          "bias": np.full(523, np.nan, np.float32)})
    demo.load_demo = lambda progress=None: broken
    with pytest.raises(CheckpointError, match="non-finite"):
        load_model("demo")


def test_only_hub_failures_read_as_model_not_found(monkeypatch, hub_cache):
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(ModelNotFoundError, match="network is unreachable|offline"):
        load_model("ngxson/fly-llm-hf")

    def buggy(*args, **kwargs):
        raise KeyError("a bug, not a missing model")

    # A bug surfaces as itself, not as "cannot get ... from the Hugging Face Hub".
    monkeypatch.setattr(huggingface_hub, "snapshot_download", buggy)
    with pytest.raises(KeyError, match="a bug"):
        load_model("ngxson/fly-llm-hf")


def test_a_module_the_demo_needs_is_not_reported_as_an_unbuilt_demo(monkeypatch):
    demo = types.ModuleType("flyviz.demo")

    def __getattr__(name):
        raise ModuleNotFoundError("No module named 'somedependency'", name="somedependency")

    demo.__getattr__ = __getattr__
    monkeypatch.setitem(sys.modules, "flyviz.demo", demo)
    with pytest.raises(ModuleNotFoundError, match="somedependency"):
        load_model("demo")


def test_flygpt_variants_load_from_a_pinned_hub_snapshot(hub_cache):
    from flyviz.model.resolve import FLYGPT_REPO, _model_patterns
    from flyviz.model.synthetic import make_flygpt_tensors
    from flyviz.model.writers import write_flygpt

    snapshot = hub_cache(FLYGPT_REPO, revision="v1", commit="2" * 40)
    write_flygpt(make_flygpt_tensors(seed=1), snapshot, with_remote_code=True)
    write_flygpt(make_flygpt_tensors(seed=2), snapshot / "scrambled", with_remote_code=True)
    root = load_model(f"{FLYGPT_REPO}@v1")  # no dataset is asked for: the graph is inside
    scrambled = load_model(f"{FLYGPT_REPO}@v1/scrambled")
    assert root.layout == scrambled.layout == "flygpt"
    assert not np.array_equal(root.w_indices, scrambled.w_indices)
    # Only data files are fetched, never the shipped Python.
    spec = parse_hub_spec(f"{FLYGPT_REPO}@v1/scrambled")
    assert spec is not None
    patterns = _model_patterns(spec)
    assert "scrambled/model.safetensors" in patterns and not any(p.endswith(".py") for p in patterns)
    with pytest.raises(ModelNotFoundError):
        load_model(f"{FLYGPT_REPO}@v2")


def test_wordbrain_releases_and_their_selectors_from_the_hub_cache(tiny_checkpoint, hub_cache):
    """fernandofernandes/fly-wordbrain-rank32 (a release at the repository root): the folder
    loads min-CE, a file after it one selector, and a selector key the manifest's file."""
    import dataclasses

    from flyviz.model.resolve import _model_patterns, selector_spec

    repo, rank64 = "fernandofernandes/fly-wordbrain-rank32", "fernandofernandes/fly-wordbrain-rank64"
    snapshot = hub_cache(repo)
    other = dataclasses.replace(tiny_checkpoint, gain=tiny_checkpoint.gain * 1.5)
    write_wordbrain(tiny_checkpoint, snapshot, web_export=False,
                    tokenizer_path=tiny_checkpoint.tokenizer_path)
    write_wordbrain(other, snapshot, "max-accuracy.safetensors", web_export=False)
    write_connectome_dataset(tiny_checkpoint, hub_cache("fernandofernandes/fly-connectome-49k",
                                                        repo_type="dataset"))
    default = load_model(repo)
    assert default.metadata["weights_file"] == "min-ce.safetensors"
    file_spec = f"{repo}/max-accuracy.safetensors"
    parsed = parse_hub_spec(file_spec)
    assert parsed is not None and (parsed.subfolder, parsed.file) == ("", "max-accuracy.safetensors")
    assert parsed.display == file_spec
    assert "max-accuracy.safetensors" in _model_patterns(parsed)
    assert "*.safetensors" not in _model_patterns(parsed)  # only the selector asked for
    by_file = load_model(file_spec)
    assert by_file.metadata["spec"] == file_spec
    np.testing.assert_array_equal(by_file.gain, other.gain)
    assert selector_spec(repo, "maximum_validation_accuracy") == file_spec
    by_key = load_model(repo, selector="maximum_validation_accuracy")
    np.testing.assert_array_equal(by_key.gain, other.gain)
    with pytest.raises(CheckpointError, match="no selector 'latest'"):
        load_model(repo, selector="latest")
    # The rank-64 repository's selectors are at its root, not in the default corpus-10k/web.
    write_wordbrain(other, hub_cache(rank64), "max-accuracy.safetensors", web_export=False)
    assert selector_spec(rank64, "maximum_validation_accuracy") \
        == f"{rank64}/max-accuracy.safetensors"
