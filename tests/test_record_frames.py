"""Frames from iter_frames and the Recording that stores them."""

from __future__ import annotations

import numpy as np
import pytest

from flyviz.model import Engine, FlyTokenizer, InputError, RecordingError, validate_checkpoint
from flyviz.model.synthetic import make_random_checkpoint, write_tokenizer
from flyviz.record import GenerationSettings, Recording, iter_frames
from flyviz.record.frame import PHASE_GENERATION, PHASE_PROMPT


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    path = write_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=400)
    tokenizer = FlyTokenizer(path)
    ckpt = validate_checkpoint(make_random_checkpoint(
        neurons=257, edges=2500, vocabulary=tokenizer.vocab_size, seed=3))
    engine = Engine(ckpt, threads=2)
    yield engine, tokenizer
    engine.close()


def test_frames_follow_prompt_then_generation(small_model):
    engine, tokenizer = small_model
    prompt = "the cat saw a dog"
    ids = [1] + tokenizer.encode(prompt)
    frames = list(iter_frames(engine, tokenizer, prompt, GenerationSettings(max_new_tokens=7)))
    generated = [f.predicted_token_id for f in frames if f.is_generation]
    # P prompt ids (BOS first) and G generated tokens give P + G - 1 frames.
    assert len(frames) == len(ids) + len(generated) - 1
    assert [f.input_token_id for f in frames[:len(ids)]] == ids
    assert [f.phase for f in frames[:len(ids) - 1]] == [PHASE_PROMPT] * (len(ids) - 1)
    assert frames[len(ids) - 1].phase == PHASE_GENERATION
    assert frames[len(ids) - 1].generation_index == 0
    # Each generated token is fed back as the next input.
    for a, b in zip(frames[len(ids) - 1:], frames[len(ids):]):
        assert b.input_token_id == a.predicted_token_id
    assert len(generated) == 7 or generated[-1] == engine.config.eos_token_id
    assert frames[-1].text_so_far == tokenizer.decode(generated)
    # States are private copies, not views of the engine's buffer.
    assert not np.shares_memory(frames[0].state, engine.state)
    assert not np.array_equal(frames[0].state, frames[-1].state)
    for f in frames:
        assert f.mean_abs_state == pytest.approx(float(np.abs(f.state).mean()), rel=1e-5)
        assert f.top_k_probabilities[0] >= f.top_k_probabilities[-1]


def test_greedy_picks_top1_and_seeded_sampling_repeats(small_model):
    engine, tokenizer = small_model
    greedy = list(iter_frames(engine, tokenizer, "the dog", GenerationSettings(max_new_tokens=5)))
    for f in greedy:
        if f.is_generation:
            assert f.predicted_token_id == int(f.top_k_ids[0])
    sampled = GenerationSettings(max_new_tokens=12, temperature=1.5, top_p=0.95, seed=11)
    a = [f.predicted_token_id for f in iter_frames(engine, tokenizer, "the dog", sampled)]
    b = [f.predicted_token_id for f in iter_frames(engine, tokenizer, "the dog", sampled)]
    c = [f.predicted_token_id for f in iter_frames(
        engine, tokenizer, "the dog", GenerationSettings(12, 1.5, 0.95, seed=12))]
    assert a == b
    assert a != c


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_an_input_error(small_model, prompt):
    engine, tokenizer = small_model
    with pytest.raises(InputError, match="empty"):
        next(iter_frames(engine, tokenizer, prompt))


@pytest.mark.parametrize("settings", [GenerationSettings(max_new_tokens=0),
                                      GenerationSettings(temperature=-1),
                                      GenerationSettings(top_p=0.0),
                                      GenerationSettings(top_k=0)])
def test_bad_settings_are_input_errors(small_model, settings):
    engine, tokenizer = small_model
    with pytest.raises(InputError):
        next(iter_frames(engine, tokenizer, "the cat", settings))


def test_recording_round_trip(small_model, tmp_path):
    engine, tokenizer = small_model
    frames = list(iter_frames(engine, tokenizer, "the sun and the ’rain", GenerationSettings(
        max_new_tokens=9, top_k=5)))
    rec = Recording(engine.config.neurons, {"model": "synthetic", "prompt": "the sun"})
    for f in frames:
        rec.append(f)
    assert len(rec) == len(frames)
    # float16 storage: half the bytes of float32, close to the original.
    assert rec.nbytes() <= 2 * engine.config.neurons * 64 * ((len(frames) + 63) // 64)
    np.testing.assert_allclose(rec[3].state, frames[3].state, atol=1e-3)
    np.testing.assert_allclose(rec.neuron_trace(17), [f.state[17] for f in frames], atol=1e-3)

    path = rec.save(tmp_path / "run.flyrec")
    back = Recording.load(path)
    assert back.metadata == rec.metadata
    assert len(back) == len(rec)
    assert back.generated_ids == rec.generated_ids
    assert back.prompt_ids == rec.prompt_ids
    for a, b in zip(rec, back):
        assert (a.phase, a.input_text, a.predicted_text, a.text_so_far, a.top_k_text) == \
               (b.phase, b.input_text, b.predicted_text, b.text_so_far, b.top_k_text)
        np.testing.assert_array_equal(a.top_k_ids, b.top_k_ids)
        np.testing.assert_array_equal(a.state, b.state)
        assert a.generation_index == b.generation_index
    assert not list(tmp_path.glob("*.part"))


def test_recording_grows_in_chunks_without_copying():
    rec = Recording(1000)
    state = np.linspace(-1, 1, 1000, dtype=np.float32)
    from flyviz.record.frame import Frame
    frame = Frame(0, PHASE_PROMPT, 1, "<s>", 5, "a", 0.5, np.array([5]), np.array([0.5]),
                  ("a",), state, 0.5)
    for _ in range(200):
        rec.append(frame)
    # 200 frames fill four 64-frame chunks of float16.
    assert rec.nbytes() == 4 * 64 * 1000 * 2
    assert rec.states(np.array([0, 999]), 10, 12).tolist() == [[-1.0, 1.0], [-1.0, 1.0]]
    with pytest.raises(ValueError):
        rec.append(Frame(0, PHASE_PROMPT, 1, "", 5, "", 0.5, np.array([5]), np.array([0.5]),
                         ("",), np.zeros(3, np.float32)))


def test_the_accessors_refuse_bad_indices_in_one_line():
    from flyviz.errors import IndexOutOfRange
    from flyviz.record.frame import Frame

    rec = Recording(50)
    state = np.arange(50, dtype=np.float32)
    for _ in range(20):
        rec.append(Frame(0, PHASE_PROMPT, 1, "<s>", 5, "a", 0.5, np.array([5]), np.array([0.5]),
                         ("a",), state, 0.5))
    # Past the end: one line, and still an IndexError as for any sequence.
    for call in (lambda: rec.state(100), lambda: rec[20], lambda: rec.text_so_far(-21)):
        with pytest.raises(IndexOutOfRange, match="frame (100|20|-21) is out of range: the "
                                                  "recording has frames 0..19"):
            call()
    with pytest.raises(IndexError):
        rec.state(20)
    assert rec.state(-1)[7] == 7 and rec[np.int64(3)].state[9] == 9   # as before
    wrong = [(lambda: rec.state(2.5), "a frame index must be a whole number, not 2.5"),
             (lambda: rec.state("1"), "a frame index must be a whole number, not '1'"),
             (lambda: rec.states(np.array([10**6])), "neuron 1000000 is outside 0..49"),
             (lambda: rec.states(np.array([-1])), "neuron -1 is outside 0..49"),
             (lambda: rec.states(np.array([0.5])), "1-D array of whole neuron indices"),
             (lambda: rec.states(np.array([True] * 50)), "whole neuron indices"),
             (lambda: rec.states(start=-5), "start -5 must be 0 or more: frames count from 0"),
             (lambda: rec.states(stop=-2), "stop -2 must be 0 or more"),
             (lambda: rec.states(start="a"), "start must be a whole number, not 'a'"),
             (lambda: Recording.load(None), "Recording.load takes the path of a .flyrec file")]
    for call, said in wrong:
        with pytest.raises((InputError, RecordingError), match=said) as info:
            call()
        assert "\n" not in str(info.value)
    # What was right still reads the same: a stop past the end is cut, an empty pick is empty.
    assert rec.states(np.array([3, 1]), 2, 100).shape == (18, 2)
    assert rec.states(np.array([], np.int64)).shape == (20, 0)
    assert rec.states([4], np.int64(1), 3).tolist() == [[4.0], [4.0]]


def test_loading_bad_recordings_fails_with_one_line(tmp_path):
    missing = tmp_path / "nope.flyrec"
    with pytest.raises(RecordingError, match="cannot read"):
        Recording.load(missing)
    junk = tmp_path / "junk.flyrec"
    junk.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(RecordingError, match="not a flyviz recording"):
        Recording.load(junk)
    rec = Recording(10, {"model": "x"})
    good = rec.save(tmp_path / "empty.flyrec")
    truncated = tmp_path / "cut.flyrec"
    truncated.write_bytes(good.read_bytes()[:-5] if good.stat().st_size > 200 else b"\x00" * 4)
    with pytest.raises(RecordingError) as info:
        Recording.load(truncated)
    assert "\n" not in str(info.value)


def test_save_to_unwritable_path_is_a_recording_error(tmp_path):
    rec = Recording(10)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RecordingError, match="cannot write"):
        rec.save(blocker / "sub" / "run.flyrec")


def test_continuation_text_matches_whole_decoding_across_split_characters(tmp_path):
    from flyviz.model.synthetic import write_tokenizer
    from flyviz.record.run import ContinuationText

    tokenizer = FlyTokenizer(write_tokenizer(tmp_path / "tok.json", vocab_size=300))
    # Multi-byte characters are not merges of this tokenizer: they split over byte tokens.
    ids = tokenizer.encode("the cat ’ saw a 🐝 and a wörd.") * 3
    text = ContinuationText(tokenizer)
    for n, token in enumerate(ids, start=1):
        assert text.append(token) == tokenizer.decode(ids[:n])


def test_recording_texts_are_stored_as_changes_and_rebuilt_exactly(tmp_path):
    from flyviz.record.frame import Frame

    rec = Recording(4)
    texts = []
    text = ""
    rng = np.random.default_rng(0)
    for i in range(300):
        # Mostly growth, sometimes a replaced last character (a completed multi-byte char).
        text = text[:-1] + "é" if i % 17 == 5 and text else text + rng.choice(["a", " b", "\ufffd"])
        texts.append(text)
        rec.append(Frame(i, "generation", 5, "x", 6, "y", 0.1, np.array([6]), np.array([0.1]),
                         ("y",), np.zeros(4, np.float32), 0.0, text, i))
    assert [rec[i].text_so_far for i in (0, 1, 63, 64, 65, 200, 299)] == \
           [texts[i] for i in (0, 1, 63, 64, 65, 200, 299)]
    back = Recording.load(rec.save(tmp_path / "t.flyrec"))
    assert [f.text_so_far for f in back] == texts
    # Stored per frame: only the change, so memory stays linear in the run's length.
    assert sum(len(info.text_tail) for info in rec._infos) < 2 * len(texts[-1])
