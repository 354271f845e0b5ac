"""The analyses on a FlyGPT model: its prompts follow its tokenizer (no BOS), and a null it
cannot have yet is refused in one line.

The FlyGPT fixture is the one of tests/test_model_flygpt.py: written by flyviz's writer in the
published layout (65-character WordLevel tokenizer, no BOS).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_checks import cli_run, one_error_line
from flyviz.analysis.causal import encode_prompts
from flyviz.analysis.circuit_tasks import load_task
from flyviz.model.formats import load_folder
from flyviz.model.synthetic import make_flygpt_tensors
from flyviz.model.tokenizer import tokenizer_for
from flyviz.model.writers import write_flygpt

#: "ROMEO:" in FlyGPT's table (fly-family-2026.md §3), no BOS before it.
ROMEO = [30, 27, 25, 17, 27, 10]


@pytest.fixture
def flygpt(tmp_path: Path) -> Path:
    return write_flygpt(make_flygpt_tensors(seed=11), tmp_path / "FlyGPT")


def test_patching_prompts_are_flygpts_characters_without_a_bos(flygpt: Path) -> None:
    ckpt = load_folder(flygpt)
    tokenizer = tokenizer_for(ckpt)
    prompts = encode_prompts(tokenizer, ckpt.config.bos_token_id, "ROMEO:", "JULIE:", "a")
    assert list(prompts.clean) == ROMEO
    assert list(prompts.corrupt) == tokenizer.encode("JULIE:") and len(prompts.corrupt) == 6


def test_flyviz_patch_on_flygpt_traces_the_characters_read(flygpt: Path, tmp_path: Path,
                                                           capsys) -> None:
    groups = tmp_path / "groups.txt"
    groups.write_text("first: id:0,1,2,3\nsecond: id:4,5,6,7\n")
    out = tmp_path / "trace.csv"
    code, _, err = cli_run(capsys, "patch", str(flygpt), "--clean", "ROMEO:", "--corrupt",
                           "JULIE:", "--answer", "a", "--by", str(groups), "--out", str(out),
                           "--workers", "0")
    assert code == 0, err
    head, *rows = out.read_text().splitlines()
    info = json.loads(head.removeprefix("# flyviz-patch "))
    assert info["clean_ids"] == ROMEO and info["positions"] == [0, 6]
    assert info["tokens"] == list("JULIE:")            # position 0 is 'J', not '<s>'
    assert len(rows) == 1 + 2 * 6                      # a header, 2 groups x 6 positions


def test_circuit_task_prompts_follow_flygpts_tokenizer(flygpt: Path, tmp_path: Path) -> None:
    ckpt = load_folder(flygpt)
    tokenizer, cfg = tokenizer_for(ckpt), ckpt.config
    jsonl = tmp_path / "names.jsonl"
    jsonl.write_text('{"prompt": "ROMEO", "target": ":"}\n{"prompt": "JULIE", "target": "T"}\n')
    task = load_task(jsonl, tokenizer, cfg.vocabulary, cfg.bos_token_id)
    assert [list(p.ids) for p in task.prompts] == [ROMEO[:5], tokenizer.encode("JULIE")]
    text = tmp_path / "play.txt"
    text.write_text("ROMEO: wherefore\n\nJULIE: here\n")
    task = load_task(text, tokenizer, cfg.vocabulary, cfg.bos_token_id)
    assert [list(p.ids) for p in task.prompts] == [tokenizer.encode("ROMEO: wherefore"),
                                                   tokenizer.encode("JULIE: here")]
    assert task.terms == sum(len(p.ids) - 1 for p in task.prompts)


def test_flyviz_null_of_flygpt_is_one_line_naming_what_the_layouts_lack(flygpt: Path,
                                                                        tmp_path: Path,
                                                                        capsys) -> None:
    out = tmp_path / "null"
    code, _, err = cli_run(capsys, "null", str(flygpt), "--kind", "degree", "--out", str(out))
    one_error_line(code, err, "cannot be written yet", "a leak per neuron", "2 microsteps")
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FlyGPT"]   # nothing half-written
    # In memory the null is made: the same parameters on a rewired graph.
    from flyviz.analysis.nulls import make_null

    ckpt = load_folder(flygpt)
    null = make_null(ckpt, "degree", 1)
    assert np.array_equal(np.diff(null.w_offsets), np.diff(ckpt.w_offsets))
    assert not np.array_equal(null.w_indices, ckpt.w_indices)
