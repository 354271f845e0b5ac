"""Parity with the reference engine (engine.js under node) and the real tokenizer.

The model is written in the Fly Recital web layout plus a connectome dataset,
loaded by the node driver in tests/oracle/ (which imports the shared
engine.js) and by flyviz, and both traces are compared with the reference's
own tolerances: identical greedy tokens, top-1 probability within 2e-4, mean
|x| within 2e-5 per step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from flyviz.commands.generate import generate
from flyviz.model.formats import load_recital_web
from flyviz.model.sampler import Sampler
from flyviz.model.synthetic import make_random_checkpoint
from flyviz.model.tokenizer import FlyTokenizer
from flyviz.model.writers import write_connectome_dataset, write_recital_web
from flyviz.record.run import GenerationSettings

DRIVER = Path(__file__).resolve().parent / "oracle" / "trace.mjs"
PROMPTS = ("Once upon a time, there was a", "One day, a little girl named Lily found a needle",
           "Tom and his dog", "The little bird was afraid of the rain. Its mother")


@pytest.fixture(scope="module")
def engine_js(shared_dir: Path) -> Path:
    path = shared_dir / "reference" / "engine.js"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return path


def _oracle(engine_js: Path, model_dir: Path, dataset_dir: Path, request: dict, tmp: Path) -> dict:
    request_path = tmp / "request.json"
    request_path.write_text(json.dumps(request))
    done = subprocess.run(["node", str(DRIVER), str(engine_js), str(model_dir), str(dataset_dir),
                           str(request_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("neurons, edges, d_embed, rank, seed", [
    (1999, 40_003, 24, 16, 7),
    (777, 15_551, 32, 64, 3),
])
def test_greedy_traces_match_the_reference_engine(engine_js, tmp_path, real_tokenizer_path,
                                                   neurons, edges, d_embed, rank, seed):
    # The real tokenizer: the reference engine then tokenizes exactly as the Fly LLM does.
    ckpt = make_random_checkpoint(neurons=neurons, edges=edges, d_embed=d_embed,
                                  readout_rank=rank,
                                  vocabulary=FlyTokenizer(real_tokenizer_path).vocab_size,
                                  seed=seed, tokenizer_path=real_tokenizer_path)
    write_recital_web(ckpt, tmp_path / "web")
    write_connectome_dataset(ckpt, tmp_path / "dataset")
    loaded = load_recital_web(tmp_path / "web", tmp_path / "dataset")
    settings = GenerationSettings(max_new_tokens=40)
    ours = [generate(loaded, prompt, settings) for prompt in PROMPTS]
    reference = _oracle(engine_js, tmp_path / "web", tmp_path / "dataset",
                        {"prompts": [o["prompt_ids"] for o in ours], "max_new_tokens": 40},
                        tmp_path)["traces"]
    distinct = set()
    for mine, theirs in zip(ours, reference):
        assert mine["tokens"] == theirs["tokens"]
        distinct.update(mine["tokens"])
        for a, b in zip(mine["steps"], theirs["steps"]):
            assert a["token"] == b["token"]
            assert abs(a["top1_probability"] - b["top1_probability"]) <= 2e-4
            assert abs(a["mean_abs_state"] - b["mean_abs_state"]) <= 2e-5
    # The comparison means something: varied tokens, non-trivial states.
    assert len(distinct) > 5
    assert max(s["mean_abs_state"] for o in ours for s in o["steps"]) > 0.05


def test_the_reference_engine_replays_the_golden_traces_flyviz_writes(engine_js, tmp_path,
                                                                     tokenizer_path,
                                                                     tokenizer_vocabulary):
    """A flyviz web export's golden traces (four prompts, 60 tokens, from flyviz's float32
    engine) replayed by engine.js: same tokens, parity.mjs's tolerances, final state too."""
    ckpt = make_random_checkpoint(neurons=1999, edges=40_003, d_embed=24, readout_rank=16,
                                  vocabulary=tokenizer_vocabulary, seed=7,
                                  tokenizer_path=tokenizer_path)
    write_recital_web(ckpt, tmp_path / "web")
    write_connectome_dataset(ckpt, tmp_path / "dataset")
    golden = json.loads((tmp_path / "web" / "manifest.json").read_text())["golden"]
    assert [g["prompt"] for g in golden] == list(PROMPTS)
    assert all(g["steps"] and (len(g["steps"]) == 60 or g["tokens"][-1] == 2) for g in golden)
    reference = _oracle(engine_js, tmp_path / "web", tmp_path / "dataset",
                        {"prompts": [g["prompt_ids"] for g in golden], "max_new_tokens": 60},
                        tmp_path)["traces"]
    for ours, theirs in zip(golden, reference, strict=True):
        assert ours["tokens"] == theirs["tokens"]
        for a, b in zip(ours["steps"], theirs["steps"], strict=True):
            assert abs(a["top1_probability"] - b["top1_probability"]) <= 2e-4
            assert abs(a["mean_abs_state"] - b["mean_abs_state"]) <= 2e-5
        assert abs(ours["final_state_mean_abs"] - theirs["final_state_mean_abs"]) <= 2e-5
    assert len({t for g in golden for t in g["tokens"]}) > 5
    # The final state compared is not the last step's: the last token was fed.
    assert any(abs(g["final_state_mean_abs"] - g["steps"][-1]["mean_abs_state"]) > 2e-5
               for g in golden if len(g["steps"]) == 60)


def test_sampling_follows_the_reference_semantics(engine_js, tmp_path, tiny_checkpoint):
    write_recital_web(tiny_checkpoint, tmp_path / "web")
    write_connectome_dataset(tiny_checkpoint, tmp_path / "dataset")
    rng = np.random.default_rng(4)
    cases = []
    for temperature, top_p in ((0.0, 1.0), (0.7, 0.9), (1.0, 1.0), (1.4, 0.5), (0.3, 0.1)):
        logits = (rng.standard_normal(200) * 3).astype(np.float32)
        cases.append({"logits": logits.tolist(), "temperature": temperature, "top_p": top_p,
                      "draws": rng.random(60).tolist()})
    reference = _oracle(engine_js, tmp_path / "web", tmp_path / "dataset", {"picks": cases},
                        tmp_path)["picks"]
    for case, expected in zip(cases, reference):
        sampler = Sampler(case["temperature"], case["top_p"], seed=0)
        draws = iter(case["draws"])

        class _Draws:
            def random(self):
                return next(draws)  # noqa: B023 (used within this iteration)

        sampler._rng = _Draws()  # feed both samplers the same uniform numbers
        picks = [sampler.pick(np.asarray(case["logits"], dtype=np.float32)) for _ in case["draws"]]
        assert picks == expected
    assert len(set(reference[2])) > 3  # sampling at T=1 does vary


def test_sampling_with_a_seed_is_reproducible(tiny_checkpoint):
    settings = GenerationSettings(max_new_tokens=25, temperature=0.9, top_p=0.95, seed=123)
    first = generate(tiny_checkpoint, "the cat and the dog", settings)
    again = generate(tiny_checkpoint, "the cat and the dog", settings)
    other = generate(tiny_checkpoint, "the cat and the dog",
                     GenerationSettings(max_new_tokens=25, temperature=0.9, top_p=0.95, seed=124))
    assert first == again
    assert first["tokens"] != other["tokens"]


def test_real_tokenizer_vectors(real_tokenizer_path):
    tok = FlyTokenizer(real_tokenizer_path)
    assert tok.vocab_size == 1024
    assert tok.encode("Tom and his dog") == [54, 290, 271, 341, 721]
    ids = tok.encode("Once upon a time, there was a")
    assert ids == [393, 417, 261, 368, 14, 370, 277, 261]
    assert tok.decode(ids) == "Once upon a time, there was a"
    assert tok.decode([1] + ids + [2]) == "Once upon a time, there was a"  # specials dropped
