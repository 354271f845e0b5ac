"""``flyviz.compare(..., record=PATH)`` saves the comparison it returns, as ``flyviz compare
--record`` does: the file reads back as the same two runs and the same numbers."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import flyviz
from flyviz.errors import FileAccessError
from flyviz.record.runner import Model

PROMPT = "the cat and the dog"


@pytest.fixture
def model(tiny_checkpoint):
    with Model(tiny_checkpoint, spec="tiny") as loaded:
        yield loaded


def test_compare_records_what_it_returns(model, tmp_path):
    path = tmp_path / "runs" / "compare.flyrec"
    result = flyviz.compare(model, PROMPT, ["silence side:left"], max_new_tokens=4,
                            temperature=0.8, seed=5, record=path, states_dtype="float32")
    assert result["recording"] == str(path)
    recording = flyviz.Recording.load(path)
    base = recording.baseline
    assert base is not None
    # The untouched run's tokens: the prompt's, then the generated ones the call returned.
    assert base.token_ids[:len(result["baseline"]["prompt_ids"])].tolist() == \
        result["baseline"]["prompt_ids"]
    assert list(base.generated_ids) == result["baseline"]["tokens"]
    assert base.metadata["seed"] == result["baseline"]["seed"] == 5
    assert recording.metadata["model"] == "tiny"
    assert recording.states_dtype == np.float32
    # The teacher-forced numbers of each generated token, as the call listed them.
    comparison = recording.metadata["comparison"]
    assert comparison["mode"] == "forced"
    forced = result["forced"]["steps"]
    generated = [i for i, info in enumerate(recording.frame_infos)
                 if info.phase == "generation"]
    assert [comparison["kl"][i] for i in generated] == [step["kl"] for step in forced]
    assert [comparison["mean_abs_delta"][i] for i in generated] == \
        [step["mean_abs_delta"] for step in forced]
    assert [recording.frame_infos[i].top_k_ids[0] for i in generated] == \
        [step["intervened_top1"] for step in forced]
    assert [item["kind"] for item in recording.metadata["interventions"]] == ["silence"]


def test_compare_without_record_writes_nothing_and_says_no_path(model, tmp_path):
    result = flyviz.compare(model, PROMPT, ["silence side:left"], max_new_tokens=2)
    assert "recording" not in result
    assert not list(tmp_path.iterdir())


def test_a_record_path_that_cannot_be_written_fails_before_the_runs(model, tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(FileAccessError, match="it is a folder"):
        flyviz.compare(model, PROMPT, ["silence side:left"], max_new_tokens=2,
                       record=tmp_path / "folder")


def test_compare_takes_record_as_its_cli_sibling_does():
    """Same name, same type and default as the comparison writer it calls."""
    from flyviz.record.compare import compare as compare_runs

    api, writer = (inspect.signature(f).parameters for f in (flyviz.compare, compare_runs))
    for name in ("record", "states_dtype"):
        assert api[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert api[name].default == writer[name].default
        assert api[name].annotation == writer[name].annotation
