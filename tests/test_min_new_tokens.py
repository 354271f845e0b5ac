"""``--min-new-tokens`` / ``run(min_new_tokens=...)``: a run goes on past the place the model
would end the text (the demo ends "Once upon a time" at its end-of-text token after 64
tokens even when 200 are asked for)."""

from __future__ import annotations

import json

import pytest
from cli_checks import cli_run, one_error_line

import flyviz
from flyviz.record.replay import replay_settings

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def demo():
    model = flyviz.load("demo")
    yield model
    model.close()


def test_without_it_the_demo_stops_at_end_of_text(demo):
    recording = flyviz.run(demo, PROMPT, max_new_tokens=200)
    generated = recording.generated_ids
    eos = demo.checkpoint.config.eos_token_id
    assert 0 < len(generated) < 100 and generated[-1] == eos


def test_the_run_goes_on_past_end_of_text_until_min_new_tokens(demo):
    eos = demo.checkpoint.config.eos_token_id
    recording = flyviz.run(demo, PROMPT, max_new_tokens=200, min_new_tokens=120)
    generated = list(recording.generated_ids)
    assert len(generated) >= 120
    assert eos not in generated[:120]
    # The same text up to where the free run ended its text.
    free = list(flyviz.run(demo, PROMPT, max_new_tokens=200).generated_ids)
    assert generated[:len(free) - 1] == free[:-1]
    # A replay keeps going as far as the recording did.
    again = replay_settings(recording)
    assert again.min_new_tokens == 120 and again.max_new_tokens == len(generated)


def test_generate_on_the_command_line(capsys):
    code, out, _ = cli_run(capsys, "generate", "demo", "--prompt", PROMPT,
                           "--max-new-tokens", "200", "--min-new-tokens", "120", "--json")
    assert code == 0
    assert len(json.loads(out)["tokens"]) >= 120
    code, _, err = cli_run(capsys, "generate", "demo", "--prompt", PROMPT,
                           "--max-new-tokens", "20", "--min-new-tokens", "30")
    one_error_line(code, err, "min new tokens 30")
