"""The generalised leaky-tanh operator and QuixiAI/FlyGPT (fly-family-2026.md §3).

The FlyGPT fixture is written by flyviz's own writer in the published layout and dtypes
(asymmetric graph, neurons with no inputs, bf16 parameters); its logits are checked
against a float64 reading of the published formulas written out here, from the tensors
given to the writer (not from flyviz's reader).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz.model.engine import Engine
from flyviz.model.formats import LAYOUT_FLYGPT, detect_layout, load_folder
from flyviz.model.formats.flygpt import VOCABULARY
from flyviz.model.safetensors_io import save_safetensors
from flyviz.model.synthetic import make_flygpt_tensors, make_random_checkpoint
from flyviz.model.tokenizer import tokenizer_for
from flyviz.model.writers import _REMOTE_CODE_SENTINEL, write_connectome_dataset, write_flygpt
from flyviz.record.run import encode_prompt

PROMPT = "ROMEO:"
PROMPT_IDS = [30, 27, 25, 17, 27, 10]


# ----------------------------------------------------------------------- FlyGPT
def _reference_float64(tensors: dict[str, np.ndarray], ids: list[int], microsteps: int = 2,
                        transpose: bool = False) -> np.ndarray:
    """§3.3 of the reference in float64, read from the tensors as published."""
    f64 = {k: np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
    n = f64["graph.node_id"].shape[0]
    src, dst = np.asarray(tensors["graph.edge_index"], dtype=np.int64)
    if transpose:
        src, dst = dst, src
    indegree = np.bincount(dst, minlength=n)
    weights = np.zeros((n, n))
    np.add.at(weights, (dst, src), f64["recurrent.edge_values"] / np.sqrt(np.maximum(1, indegree[dst])))
    leak = 1.0 / (1.0 + np.exp(-f64["recurrent.raw_leak"]))
    inputs = np.asarray(tensors["graph.input_nodes"], dtype=np.int64)
    outputs = np.asarray(tensors["graph.output_nodes"], dtype=np.int64)
    h = np.zeros(n)
    logits = []
    for token in ids:
        d = np.zeros(n)
        d[inputs] = f64["input_proj.weight"] @ f64["embed.weight"][token] + f64["input_proj.bias"]
        for _ in range(microsteps):
            h = (1 - leak) * h + leak * np.tanh(weights @ h + d + f64["recurrent.bias"])
        logits.append(f64["lm_head.weight"] @ h[outputs] + f64["lm_head.bias"])
    return np.array(logits)


@pytest.fixture
def flygpt(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    tensors = make_flygpt_tensors(seed=11)
    folder = write_flygpt(tensors, tmp_path / "FlyGPT", with_remote_code=True)
    return folder, tensors


def test_flygpt_fixture_is_the_published_layout(flygpt) -> None:
    folder, tensors = flygpt
    header_size = int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")
    header = json.loads((folder / "model.safetensors").read_bytes()[8:8 + header_size])
    assert header["__metadata__"]["architecture"] == "FlyGPTForCausalLM"
    dtypes = {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"graph.edge_index": "I32", "graph.synapse_count": "I32",
                      "graph.node_id": "I64", "graph.input_nodes": "I64",
                      "graph.output_nodes": "I64", **{k: "BF16" for k in (
                          "recurrent.edge_values", "recurrent.bias", "recurrent.raw_leak",
                          "embed.weight", "input_proj.weight", "input_proj.bias",
                          "lm_head.weight", "lm_head.bias")}}
    src, dst = tensors["graph.edge_index"]
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert any((b, a) not in pairs for a, b in pairs)  # asymmetric
    assert np.bincount(dst, minlength=40).min() == 0  # neurons with no inputs
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_flygpt.FlyGPTForCausalLM"
    assert config["dtype"] == "bfloat16" and config["microsteps"] == 2


def test_flygpt_tokens_and_logits_match_the_published_formulas(flygpt) -> None:
    folder, tensors = flygpt
    modules_before = set(sys.modules)
    assert detect_layout(folder) == LAYOUT_FLYGPT
    ck = load_folder(folder)
    tokenizer = tokenizer_for(ck)
    ids = encode_prompt(tokenizer, PROMPT, ck.config.bos_token_id)
    assert ids == PROMPT_IDS  # no BOS
    assert tokenizer.decode(tokenizer.encode(VOCABULARY)) == VOCABULARY
    engine = Engine(ck, threads=2)
    got = np.array([engine.step(t).copy() for t in ids], dtype=np.float64)
    engine.close()
    expected = _reference_float64(tensors, ids)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-5)
    # The check can fail: a transposed edge_index or one microstep give other logits.
    assert not np.allclose(got, _reference_float64(tensors, ids, transpose=True), atol=1e-3)
    assert not np.allclose(got, _reference_float64(tensors, ids, microsteps=1), atol=1e-3)
    # Nothing of the folder's Python ran.
    assert not (folder / _REMOTE_CODE_SENTINEL).exists()
    assert not {m for m in set(sys.modules) - modules_before if "flygpt" in m.lower()
                and not m.startswith("flyviz")}


def test_flygpt_runs_and_reports_from_the_command_line(flygpt, capsys) -> None:
    folder, _ = flygpt
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["layout"] == "flygpt"
    assert info["graph_provenance"]["source"] == "MaleCNS v1.0"
    assert info["training_state"]["status"] == "init"
    assert info["operator"]["microsteps"] == 2 and info["operator"]["bos"] is False
    code, out, err = cli_run(capsys, "generate", str(folder), "--prompt", PROMPT,
                             "--max-new-tokens", "5", "--json")
    assert code == 0, err
    assert not (folder / _REMOTE_CODE_SENTINEL).exists()


def test_info_says_what_of_the_operator_applies_to_flygpt(flygpt, capsys) -> None:
    """A leak per neuron, no LayerNorm, no delay slots: not the Fly LLM's 0.9, eps, slots."""
    folder, tensors = flygpt
    leak = 1.0 / (1.0 + np.exp(-tensors["recurrent.raw_leak"].astype(np.float64)))
    code, out, err = cli_run(capsys, "info", str(folder))
    assert code == 0, err
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in out.splitlines()
            if "  " in line}
    assert rows["leak"].startswith(f"per neuron, {leak.min():.2f} to {leak.max():.2f}")
    assert rows["layer norm"] == "none"
    assert rows["input neurons"].startswith("8 (a biased linear map")
    assert not {"delay slots", "neurons per slot", "leak / ln eps"} & set(rows)
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    info = json.loads(out)
    assert (info["leak"], info["layer_norm_eps"], info["delay_slots"]) == (None, None, None)
    assert info["leak_per_neuron"]["min"] == pytest.approx(leak.min(), rel=1e-6)
    assert info["leak_per_neuron"]["max"] == pytest.approx(leak.max(), rel=1e-6)
    assert info["input_neurons"] == 8
    # It runs as no spiking brain, and the reason is FlyGPT's (not "not whole multiples").
    assert info["spiking"]["runs"] is False
    assert "graph.synapse_count" in rows["as a brain"] and "no sign" in rows["as a brain"]
    code, _, err = cli_run(capsys, "simulate", str(folder), "--out", "never.parquet")
    assert code == 2 and "never.parquet" not in os.listdir(".")


def test_flygpt_without_its_tokenizer_asks_for_flygpts(flygpt, capsys) -> None:
    """Not ngxson/fly-llm-hf's byte-level BPE, which does not fit FlyGPT's 65 characters."""
    folder, _ = flygpt
    (folder / "tokenizer.json").unlink()
    code, _, err = cli_run(capsys, "generate", str(folder), "--prompt", PROMPT)
    one_error_line(code, err, "FlyGPT's tokenizer.json", "65-character", str(folder))
    assert "fly-llm-hf" not in err
    code, out, err = cli_run(capsys, "info", str(folder))
    assert code == 0, err
    line = next(row for row in out.splitlines() if row.startswith("tokenizer "))
    assert "no tokenizer.json" in line and "FlyGPT's tokenizer.json" in line


@pytest.mark.parametrize("model_type, expected", [
    (None, "lacks model_type"), ("FlyGPT", "has model_type 'FlyGPT'")])
def test_flygpt_config_without_its_model_type_says_so(flygpt, capsys, model_type,
                                                      expected) -> None:
    """Not "this is not a Fly LLM config": the tensors are FlyGPT's, the config says not."""
    folder, _ = flygpt
    config = json.loads((folder / "config.json").read_text())
    config.pop("model_type")
    if model_type is not None:
        config["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(config))
    for argv in (("info",), ("generate", "--prompt", PROMPT)):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, expected, "FlyGPT's tensors", '"model_type": "flygpt"')
        assert "not a Fly LLM config" not in err


def test_flygpt_without_config_json_says_config_json_is_missing(flygpt, capsys) -> None:
    """Not taken for fly-wordbrain weights, which would ask for a connectome dataset."""
    folder, _ = flygpt
    (folder / "config.json").unlink()
    for argv in (("info",), ("generate", "--prompt", PROMPT)):
        code, _, err = cli_run(capsys, argv[0], str(folder), *argv[1:])
        one_error_line(code, err, "config.json is missing", "FlyGPT's tensors",
                       '"model_type": "flygpt"', "QuixiAI/FlyGPT")
        assert "dataset" not in err


def test_selector_on_flygpt_says_it_applies_to_releases_only(flygpt, capsys) -> None:
    """Not "the release's manifest.json not found ... download it again": FlyGPT has one
    weights file, and no selectors to pick from."""
    folder, _ = flygpt
    for spec in (str(folder), "QuixiAI/FlyGPT"):
        code, _, err = cli_run(capsys, "info", spec, "--selector", "maximum_validation_accuracy")
        one_error_line(code, err, "--selector applies only to fly-wordbrain releases", "FlyGPT",
                       "leave --selector out")
        assert "not found" not in err and "download" not in err


def test_flygpt_counts_the_published_trainable_tensors(flygpt, capsys) -> None:
    """The count is the published float tensors' sizes: the learned edge values in, the
    gain, rec_gain and LayerNorm placeholders the loader fills out."""
    folder, tensors = flygpt
    trainable = sum(a.size for a in tensors.values() if a.dtype == ml_dtypes.bfloat16)
    assert trainable == 3569  # embed 2080, input_proj 264, lm_head 845, 40 + 40 + 300
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    assert code == 0, err
    assert json.loads(out)["parameters"] == trainable
    code, out, err = cli_run(capsys, "verify", str(folder))
    assert f"{trainable:,} parameters" in out
    # A leak that was not learned holds its initial value: not a parameter.
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "learned_leak": False}))
    assert load_folder(folder).parameter_count() == trainable - 40


def _rewrite(folder: Path, tensors: dict[str, np.ndarray]) -> None:
    save_safetensors(folder / "model.safetensors", tensors, {"format": "pt"})


@pytest.mark.parametrize("damage, expected", [
    (lambda t: t.pop("lm_head.bias"), "lacks lm_head.bias"),
    (lambda t: t.__setitem__("graph.edge_index", t["graph.edge_index"].astype(np.float32)),
     "graph.edge_index is F32"),
    (lambda t: t.__setitem__("recurrent.raw_leak", t["recurrent.raw_leak"][:-1]),
     "recurrent.raw_leak has shape"),
    (lambda t: t["graph.edge_index"].__setitem__((0, 4), 40), "source neuron 40"),
    # The file's tensor and index, not the engine's reordered, renamed array.
    (lambda t: t["recurrent.edge_values"].__setitem__(5, np.nan),
     "model.safetensors: recurrent.edge_values holds a non-finite value (NaN or inf) at flat "
     "index 5"),
    (lambda t: t["embed.weight"].__setitem__((1, 2), np.inf), "embed.weight holds a non-finite"),
])
def test_damaged_flygpt_is_refused_in_one_line(flygpt, capsys, damage, expected) -> None:
    folder, tensors = flygpt
    tensors = {k: v.copy() for k, v in tensors.items()}
    damage(tensors)
    _rewrite(folder, tensors)
    code, _, err = cli_run(capsys, "info", str(folder))
    one_error_line(code, err, expected)


def test_character_outside_the_table_is_refused_in_one_line(flygpt, capsys) -> None:
    folder, _ = flygpt
    code, _, err = cli_run(capsys, "generate", str(folder), "--prompt", "ROMÉO")
    one_error_line(code, err, "'É'", "65-character table")


def test_bf16_tensors_are_upcast_exactly(flygpt) -> None:
    folder, tensors = flygpt
    ck = load_folder(folder)
    assert np.array_equal(ck.wte, tensors["embed.weight"].astype(np.float32))
    assert np.array_equal(ck.head_bias, tensors["lm_head.bias"].astype(np.float32))
    assert tensors["embed.weight"].dtype == ml_dtypes.bfloat16


def test_flygpt_neurons_are_placed_by_body_id_from_a_dataset(flygpt, tmp_path, capsys) -> None:
    folder, tensors = flygpt
    host = make_random_checkpoint(neurons=60, edges=300, d_embed=4, delay_k=2, vocabulary=16,
                                  seed=4, with_anatomy=True)
    # Half of FlyGPT's body ids are in the dataset, at other rows than in the model.
    node_ids = tensors["graph.node_id"]
    body = host.anatomy.body_id.copy()
    shared_rows = np.arange(0, 40, 2)
    body[59 - shared_rows] = node_ids[shared_rows]
    order = np.argsort(body)
    host.anatomy = dataclasses.replace(
        host.anatomy, body_id=body[order], positions=host.anatomy.positions[order],
        valid=np.ones(60, bool), superclass=[host.anatomy.superclass[i] for i in order],
        side=[host.anatomy.side[i] for i in order],
        cell_type=[host.anatomy.cell_type[i] for i in order])
    dataset = write_connectome_dataset(host, tmp_path / "dataset")
    ck = load_folder(folder, dataset_dir=dataset)
    placed = np.flatnonzero(ck.anatomy.valid)
    assert np.array_equal(placed, shared_rows)
    for row in shared_rows:
        source = int(np.flatnonzero(host.anatomy.body_id == node_ids[row])[0])
        # The dataset stores positions as whole voxels (int32).
        assert np.array_equal(ck.anatomy.positions[row], np.rint(host.anatomy.positions[source]))
        assert ck.anatomy.cell_type[row] == host.anatomy.cell_type[source]
    code, out, err = cli_run(capsys, "info", str(folder), "--dataset", str(dataset))
    assert code == 0, err
    assert "20 of 40 neurons placed by MaleCNS body id" in out


def test_flygpt_without_a_dataset_keeps_its_graphs_body_ids_on_the_layout(flygpt, capsys) -> None:
    """Without --dataset nothing places or labels the neurons, but the graph names each by its
    MaleCNS body id: the model keeps them, and the graph layout it is drawn on carries them
    (they were dropped: every host showed no body id)."""
    from flyviz.record.runner import Model

    folder, tensors = flygpt
    ck = load_folder(folder)
    node_ids = np.asarray(tensors["graph.node_id"], np.int64)
    assert ck.anatomy is not None and ck.anatomy.n_valid == 0
    np.testing.assert_array_equal(ck.anatomy.body_id, node_ids)
    drawn = Model(ck).drawing_anatomy()
    assert drawn.kind == "layout" and drawn.valid.all()
    np.testing.assert_array_equal(drawn.body_id, node_ids)
    code, out, err = cli_run(capsys, "info", str(folder))
    assert code == 0, err
    assert "none of the 40 neurons has a soma position: the graph is laid out" in out


def test_flygpt_in_the_batch_engine_matches_one_stream_at_a_time(flygpt) -> None:
    from flyviz.model.batch import BatchEngine

    folder, _ = flygpt
    ck = load_folder(folder)
    prompts = [PROMPT_IDS, [46, 43, 50, 50, 53, 1]]  # "ROMEO:", "hello "
    batch = BatchEngine(ck, streams=2, threads=1)
    batch_logits = [batch.step(np.array(pair), logits=True).copy() for pair in zip(*prompts)]
    batch.close()
    for stream, ids in enumerate(prompts):
        engine = Engine(ck, threads=1)
        for position, token in enumerate(ids):
            np.testing.assert_allclose(batch_logits[position][stream], engine.step(token),
                                       rtol=1e-6, atol=1e-6)
        engine.close()


def _newline_favoured(folder: Path, tensors: dict[str, np.ndarray]) -> None:
    """Rewrite the folder so that '\\n' (id 0) is the likeliest next character, whatever the
    state: a run meets it at its first generated token."""
    tensors = dict(tensors)
    bias = tensors["lm_head.bias"].astype(np.float32)
    bias[0] = 50.0
    tensors["lm_head.bias"] = bias.astype(tensors["lm_head.bias"].dtype)
    _rewrite(folder, tensors)


def test_flygpt_has_no_end_of_text_and_generates_past_newlines(flygpt, capsys) -> None:
    """FlyGPT has no special tokens (§3.1): '\\n' is id 0 and is text, not the end of it."""
    folder, tensors = flygpt
    _newline_favoured(folder, tensors)
    code, out, err = cli_run(capsys, "generate", str(folder), "--prompt", PROMPT,
                             "--max-new-tokens", "7", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["tokens"] == [0] * 7 and run["text"] == "\n" * 7
    assert load_folder(folder).config.eos_token_id is None
    code, out, err = cli_run(capsys, "info", str(folder), "--json")
    assert code == 0, err
    assert json.loads(out)["special_tokens"]["eos"] is None


def test_min_new_tokens_changes_nothing_for_a_model_with_no_end_of_text(flygpt, capsys) -> None:
    """Nothing is masked: the newline FlyGPT would write stays possible."""
    folder, tensors = flygpt
    _newline_favoured(folder, tensors)
    runs = []
    for least in ("0", "5"):
        code, out, err = cli_run(capsys, "generate", str(folder), "--prompt", PROMPT,
                                 "--max-new-tokens", "6", "--min-new-tokens", least, "--json")
        assert code == 0, err
        runs.append(json.loads(out)["tokens"])
    assert runs[0] == runs[1] == [0] * 6


def test_generate_help_says_bos_only_where_the_tokenizer_has_one(capsys) -> None:
    with pytest.raises(SystemExit):
        cli_run(capsys, "generate", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "(BOS is added once)" not in text
    assert "BOS is added once where the model's tokenizer has one; FlyGPT's has none" in text
