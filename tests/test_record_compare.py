"""The untouched-versus-intervened comparison: library runner, ``flyviz compare`` and the
intervention options of ``generate`` and ``export``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flyviz.model.engine import Engine, softmax
from flyviz.model.interventions import Clamp, Cut, Silence, Stimulate, from_json
from flyviz.model.tokenizer import tokenizer_for
from flyviz.record.compare import Comparison, kl_divergence, parted_at
from flyviz.record.recording import Recording
from flyviz.record.run import GenerationSettings, iter_frames
from test_cli_commands import _one_line_error, _run, web_model  # noqa: F401

PROMPT = "the dog ran to the park"


def _distributions(ckpt, ids, interventions=()):
    """Next-token distribution and state after each id, from a fresh engine."""
    engine = Engine(ckpt, interventions=interventions)
    out = []
    for token in ids:
        logits = engine.step(token)
        out.append((softmax(logits), engine.state.copy()))
    engine.close()
    return out


def test_compare_json_values_equal_those_recomputed_from_both_runs(capsys, web_model,
                                                                   tiny_checkpoint):
    options = ["--silence", "superclass:cb_intrinsic@4:", "--stimulate", "input=0.6@:6",
               "--max-new-tokens", "12", "--seed", "7"]
    code, out, _ = _run(capsys, "compare", str(web_model), "--prompt", PROMPT, *options, "--json")
    assert code == 0
    result = json.loads(out)
    assert list(result) == ["prompt", "interventions", "baseline", "intervened", "parted_at",
                            "forced"]
    # baseline and intervened are exactly what generate --json prints.
    code, plain, _ = _run(capsys, "generate", str(web_model), "--prompt", PROMPT,
                          "--max-new-tokens", "12", "--seed", "7", "--json")
    assert code == 0 and json.loads(plain) == result["baseline"]
    code, intervened, _ = _run(capsys, "generate", str(web_model), "--prompt", PROMPT, *options,
                               "--json")
    assert code == 0 and json.loads(intervened) == result["intervened"]
    assert result["interventions"] == result["intervened"]["interventions"]
    assert [i["kind"] for i in result["interventions"]] == ["silence", "stimulate"]
    assert result["baseline"]["interventions"] == []
    assert result["baseline"]["seed"] == result["intervened"]["seed"] == 7
    assert result["parted_at"] == parted_at(result["baseline"]["tokens"],
                                            result["intervened"]["tokens"])
    # Teacher forcing: the intervened model reads the untouched tokens. Recompute both
    # distributions from two fresh engines and compare position by position.
    ids = result["baseline"]["prompt_ids"] + result["baseline"]["tokens"][:-1]
    base = _distributions(tiny_checkpoint, ids)
    other = _distributions(tiny_checkpoint, ids, from_json(result["interventions"]))
    steps = result["forced"]["steps"]
    first = len(result["baseline"]["prompt_ids"]) - 1
    assert len(steps) == len(result["baseline"]["tokens"])
    assert any(s["kl"] > 1e-3 for s in steps)
    for i, step in enumerate(steps):
        (p, x), (q, y) = base[first + i], other[first + i]
        assert step["token"] == result["baseline"]["tokens"][i]
        assert step["kl"] == pytest.approx(float(np.sum(p * np.log(p / q))), rel=1e-9, abs=1e-12)
        assert step["baseline_top1"] == int(np.argmax(p))
        assert step["intervened_top1"] == int(np.argmax(q))
        assert step["mean_abs_delta"] == pytest.approx(float(np.abs(y - x).mean()), rel=1e-6)


def test_compare_text_marks_where_the_runs_part(capsys, web_model, tiny_checkpoint):
    code, out, _ = _run(capsys, "compare", str(web_model), "--prompt", PROMPT, "--clamp", "all=0.5",
                        "--max-new-tokens", "8", "--json")
    result = json.loads(out)
    parted = result["parted_at"]
    assert parted is not None  # clamping every neuron changes the text
    code, text, _ = _run(capsys, "compare", str(web_model), "--prompt", PROMPT, "--clamp", "all=0.5",
                         "--max-new-tokens", "8")
    assert code == 0
    tokenizer = tokenizer_for(tiny_checkpoint)
    common = tokenizer.decode(result["baseline"]["tokens"][:parted])
    rest = tokenizer.decode(result["baseline"]["tokens"][parted:])
    assert f"untouched:  {common}[[{rest}]]" in text
    assert f"they part at generated token {parted}:" in text
    assert f"clamp all=0.5 ({tiny_checkpoint.config.neurons} neurons" in text
    table = text[text.index("teacher-forced"):].splitlines()[2:-1]
    assert len(table) == len(result["forced"]["steps"])
    for step, row in zip(result["forced"]["steps"], table):
        assert f" {step['kl']:>9.4f}  " in row and row.endswith(f"{step['mean_abs_delta']:>9.4f}")


@pytest.mark.parametrize("argv, fragment", [
    ([], "at least one intervention"),
    (["--silence", "superclass:nope"], "unknown superclass 'nope'"),
    (["--silence", "input & !input"], "selects no neurons"),
    (["--clamp", "input=2"], "outside (-1, 1)"),
    (["--cut", "input"], "PRE->POST"),
    (["--silence", "input@4:2"], "holds no token"),
    (["--stimulate", "type:ZZZ*=1"], "matches no cell type"),
])
def test_compare_refuses_bad_interventions_with_one_line(capsys, web_model, argv, fragment):
    code, _, err = _run(capsys, "compare", str(web_model), "--prompt", "a", *argv)
    _one_line_error(code, err)
    assert fragment in err


def test_compare_without_an_intervention_names_every_kind_patch_included(capsys, web_model):
    """The list of interventions left out --patch, which compare takes."""
    code, _, err = _run(capsys, "compare", str(web_model), "--prompt", "a")
    _one_line_error(code, err)
    for option in ("--silence", "--clamp", "--stimulate", "--cut", "--scale", "--patch"):
        assert option in err, err


def test_generate_json_lists_the_interventions_in_order(capsys, web_model, tiny_checkpoint):
    code, out, err = _run(capsys, "generate", str(web_model), "--prompt", PROMPT, "--max-new-tokens",
                          "5", "--clamp", "input=0.5", "--silence", "input@2:4",
                          "--cut", "superclass:cb_sensory->all", "--scale", "all->all=0.5@90:",
                          "--json")
    assert code == 0
    applied = json.loads(out)["interventions"]
    assert [a["kind"] for a in applied] == ["clamp", "silence", "cut", "scale"]
    frames = len(json.loads(out)["prompt_ids"]) - 1 + len(json.loads(out)["tokens"])
    assert [a["steps"] for a in applied] == [frames, 2, frames, 0]
    assert applied[0]["neurons_selected"] == tiny_checkpoint.config.n_inputs
    assert applied[2]["synapses"] > 0
    # The window that never opened is pointed out.
    assert "never acted" in err and "scale" in err
    code, out, _ = _run(capsys, "generate", str(web_model), "--prompt", PROMPT, "--max-new-tokens",
                        "5", "--json")
    assert json.loads(out)["interventions"] == []


def test_comparison_runner_pairs_frames_token_by_token(tiny_checkpoint):
    comparison = Comparison.for_checkpoint(tiny_checkpoint, [Silence("superclass:cb_sensory")],
                                           threads=2)
    settings = GenerationSettings(max_new_tokens=10, temperature=0.9, seed=4)
    forced = list(comparison.run(PROMPT, settings))
    assert [s.position for s in forced] == list(range(len(forced)))
    for step in forced:
        assert step.baseline.input_token_id == step.intervened.input_token_id
        if step.is_generation:  # the intervened run writes the untouched run's token
            assert step.baseline.predicted_token_id == step.intervened.predicted_token_id
        assert step.kl == kl_divergence(step.baseline.probabilities, step.intervened.probabilities)
        assert step.mean_abs_delta == pytest.approx(float(np.abs(step.delta()).mean()))
    assert any(s.kl > 1e-3 for s in forced if s.is_generation)
    # Cancelling half-way leaves both engines ready for the next run.
    partial = comparison.run(PROMPT, settings, mode="free")
    next(partial), next(partial)
    partial.close()
    free = list(comparison.run(PROMPT, settings, mode="free"))
    # Free-running with the same seed: the untouched side is the same run as before.
    base_tokens = [s.baseline.predicted_token_id for s in free if s.baseline and s.is_generation]
    assert base_tokens == [s.baseline.predicted_token_id for s in forced if s.is_generation]
    other = [s.intervened.predicted_token_id for s in free if s.intervened and
             s.intervened.is_generation]
    assert other == [f.predicted_token_id for f in iter_frames(
        comparison.intervened, comparison.tokenizer, PROMPT, settings) if f.is_generation]
    with pytest.raises(Exception, match="untouched engine has interventions"):
        Comparison(comparison.intervened, comparison.intervened, comparison.tokenizer)
    comparison.close()


def test_overlapped_engines_compare_bit_for_bit_like_serial_ones(tiny_checkpoint):
    # The app steps both engines with overlap on one thread each (Model.comparison).
    settings = GenerationSettings(max_new_tokens=12, temperature=0.9, seed=7)
    runs = {}
    for overlap in (False, True):
        comparison = Comparison.for_checkpoint(tiny_checkpoint, [Silence("superclass:cb_sensory")],
                                               threads=1, overlap=overlap)
        assert comparison.baseline.overlap is overlap and comparison.intervened.overlap is overlap
        runs[overlap] = list(comparison.run(PROMPT, settings))
        comparison.close()
    assert len(runs[False]) == len(runs[True])
    for a, b in zip(runs[False], runs[True]):
        assert (a.kl, a.mean_abs_delta) == (b.kl, b.mean_abs_delta)
        for x, y in ((a.baseline, b.baseline), (a.intervened, b.intervened)):
            assert x.predicted_token_id == y.predicted_token_id
            assert np.array_equal(x.state, y.state)
            assert np.array_equal(x.probabilities, y.probabilities)


def test_teacher_forced_frames_read_the_given_tokens(tiny_checkpoint):
    tokenizer = tokenizer_for(tiny_checkpoint)
    engine = Engine(tiny_checkpoint, interventions=[Stimulate("input", 1.0)])
    forced = [40, 41, 42, 43]
    frames = list(iter_frames(engine, tokenizer, PROMPT, GenerationSettings(max_new_tokens=9),
                              forced_ids=forced))
    generated = [f for f in frames if f.is_generation]
    assert [f.predicted_token_id for f in generated] == forced  # stops when they run out
    for f in generated:
        assert f.probability == pytest.approx(f.probabilities[f.predicted_token_id])
    inputs = [f.input_token_id for f in frames]
    assert inputs[-3:] == forced[:3]
    engine.close()


def test_recordings_keep_the_interventions_and_replay_with_them(tiny_checkpoint, tmp_path):
    from flyviz.record.replay import replay_recording
    from flyviz.record.runner import Model

    chosen = [Clamp("superclass:cb_sensory", 0.25, 3, 9), Cut("side:left", "all")]
    settings = GenerationSettings(max_new_tokens=6, temperature=0.9, seed=5)
    model = Model(tiny_checkpoint, spec="tiny")
    recording = model.record(PROMPT, settings, interventions=chosen)
    path = recording.save(tmp_path / "run.flyrec")
    loaded = Recording.load(path)
    assert from_json(loaded.metadata["interventions"]) == tuple(chosen)
    assert loaded.metadata["interventions"][1]["synapses"] > 0
    plain = model.record(PROMPT, settings)  # the same engine, without the interventions
    assert "interventions" not in plain.metadata
    assert plain.generated_ids != recording.generated_ids
    # A replay runs with the stored interventions, so every token matches.
    assert replay_recording(loaded, tiny_checkpoint).matched
    model.close()
    # The recorded states are the intervened ones: the clamp holds inside its window.
    sensory = [i for i, s in enumerate(tiny_checkpoint.anatomy.superclass) if s == "cb_sensory"]
    for frame in loaded:
        held = np.allclose(frame.state[sensory], 0.25, atol=1e-3)
        assert held == (3 <= frame.position < 9)


def test_generate_record_stores_the_interventions(capsys, web_model, tmp_path):
    path = tmp_path / "silenced.flyrec"
    code, out, _ = _run(capsys, "generate", str(web_model), "--prompt", PROMPT,
                        "--max-new-tokens", "5", "--silence", "input@2:", "--record", str(path),
                        "--json")
    assert code == 0
    result = json.loads(out)
    stored = Recording.load(path).metadata["interventions"]
    assert [{k: v for k, v in item.items() if k != "steps"} for item in result["interventions"]] \
        == stored
    code, out, _ = _run(capsys, "replay", str(path), "--json")
    assert code == 0 and json.loads(out)["matched"] is True


def test_compare_record_saves_the_forced_comparison_that_share_shows_as_delta(capsys, web_model,
                                                                             tmp_path):
    """The errors of ``share --layer delta`` and ``figure --quantity dx`` on a single run
    tell users to make a comparison with ``flyviz compare ... --record FILE``: that must
    write one, holding both runs and what the report printed."""
    single, compared = tmp_path / "single.flyrec", tmp_path / "compared.flyrec"
    assert _run(capsys, "generate", str(web_model), "--prompt", PROMPT, "--max-new-tokens", "4",
                "--record", str(single))[0] == 0
    code, _, err = _run(capsys, "share", str(single), "--out", str(tmp_path / "s.html"),
                        "--layer", "delta")
    _one_line_error(code, err)
    assert "flyviz compare SPEC --prompt TEXT --silence QUERY --record FILE" in err
    code, out, err = _run(capsys, "compare", str(web_model), "--prompt", PROMPT,
                          "--max-new-tokens", "5", "--seed", "3", "--silence", "sign:inhibitory",
                          "--record", str(compared), "--json")
    assert code == 0 and f"saved {compared}" in err
    result = json.loads(out)
    assert result["recording"] == str(compared)
    loaded = Recording.load(compared)
    assert loaded.baseline is not None
    info = loaded.metadata["comparison"]
    assert info["mode"] == "forced"
    assert loaded.metadata["interventions"][0]["kind"] == "silence"
    # The intervened run read the untouched tokens: the KL per generated token is the
    # report's, at the same positions.
    steps = result["forced"]["steps"]
    prompt_length = len(result["baseline"]["prompt_ids"])
    assert info["kl"][prompt_length - 1:] == pytest.approx([s["kl"] for s in steps])
    generated = [int(t) for t in loaded.baseline.token_ids[prompt_length:]]
    assert generated == result["baseline"]["tokens"][:len(generated)]
    page = tmp_path / "delta.html"
    code, _, err = _run(capsys, "share", str(compared), "--out", str(page), "--layer", "delta")
    assert code == 0, err
    assert '"delta"' in page.read_text(encoding="utf-8")


def test_bench_measures_interventions_against_the_plain_step(capsys, web_model):
    code, out, _ = _run(capsys, "bench", str(web_model), "--interventions", "--steps", "4",
                        "--threads", "2", "--kernel", "scipy", "--silence", "input",
                        "--cut", "all->side:left", "--json")
    assert code == 0
    results = json.loads(out)
    assert [i["kind"] for i in results["interventions"]] == ["silence", "cut"]
    (entry,) = results["kernels"]
    assert entry["kernel"] == "scipy" and entry["steps"] == 4
    assert entry["plain_ms"] > 0 and entry["intervened_ms"] > 0
    # The timed engine really ran with the interventions: silencing the input neurons
    # changed the state that the same tokens gave.
    assert entry["mean_abs_state_difference"] > 1e-3
    assert entry["plain_ms_p10"] <= entry["plain_ms"] <= entry["plain_ms_p90"]
    code, text, _ = _run(capsys, "bench", str(web_model), "--interventions", "--steps", "2",
                         "--kernel", "scipy", "--stimulate", "input=0.5")
    assert code == 0 and "stimulate input" in text and "ratio" in text
    code, _, err = _run(capsys, "bench", str(web_model), "--silence", "input")
    _one_line_error(code, err)
    assert "--interventions" in err


def test_selections_interventions_and_comparisons_load_no_gui_code():
    import subprocess
    import sys

    code = ("import sys, flyviz.model, flyviz.record, flyviz.commands.compare, "
            "flyviz.commands.select; "
            "print([m for m in sys.modules if m.split('.')[0] in ('PySide6', 'vispy', "
            "'pyqtgraph')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("amount, changes", [(1e-6, False), (3.0, True)])
def test_the_apps_forced_comparison_marks_where_the_top_choices_differ(tiny_checkpoint, amount,
                                                                       changes):
    """Teacher-forced, a word is marked where the intervened model's top-1 differs from the
    untouched model's top-1, as ``flyviz compare`` counts: the untouched line shows the
    tokens the run drew, and at a temperature those are often not its top-1 (an
    intervention too small to change any choice once marked a fifth of the words)."""
    pytest.importorskip("PySide6")
    from flyviz.app.language.compare_views import comparison_html, compared_text
    from flyviz.record.frame import PHASE_GENERATION

    comparison = Comparison.for_checkpoint(
        tiny_checkpoint, [Stimulate("superclass:cb_sensory", amount)], threads=1)
    settings = GenerationSettings(max_new_tokens=24, temperature=1.0, top_p=1.0, seed=3)
    recording = comparison.record(PROMPT, settings)
    comparison.close()

    def generated(rec: Recording) -> list:
        return [i for i in rec.frame_infos if i.phase == PHASE_GENERATION]

    untouched, intervened = generated(recording.baseline), generated(recording)
    # What makes the case: the untouched run drew other tokens than its top-1 here and there.
    assert any(i.predicted_token_id != int(i.top_k_ids[0]) for i in untouched)
    expected = [int(a.top_k_ids[0]) != int(b.top_k_ids[0]) for a, b in zip(untouched, intervened)]
    text = compared_text(recording, len(recording) - 1)
    assert text.differs == expected
    assert any(expected) is changes
    page = comparison_html(recording, len(recording) - 1)
    if changes:
        first = expected.index(True)
        assert text.parted == first
        assert f"at generated token {first + 1}; {sum(expected)} of {len(expected)} differ" in page
    else:
        assert text.parted is None and "the same top choice" in page
