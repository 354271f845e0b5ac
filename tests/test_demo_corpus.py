"""The demo brain's story corpus, tokenizer and count-based baselines."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from flyviz.demo.build import train_tokenizer
from flyviz.demo.corpus import PLOTS, join_stories, make_corpus, make_stories, split_stories
from flyviz.demo.ngram import NGramModel, story_sequences
from flyviz.model.tokenizer import FlyTokenizer

@pytest.fixture(scope="module")
def corpus():
    return make_corpus(300_000, seed=5)


def test_size_split_and_determinism(corpus):
    train, held = corpus
    assert sum(len(s) for s in train + held) >= 300_000
    assert 0.03 < len(held) / (len(train) + len(held)) < 0.08
    assert not set(held) & set(train), "held-out stories do not occur in training"
    again = make_corpus(300_000, seed=5)
    assert again == corpus
    assert make_corpus(300_000, seed=6)[0][:20] != train[:20]
    assert split_stories(join_stories(held)) == held


def test_stories_are_varied_plain_english(corpus):
    train, _ = corpus
    assert len(set(train)) == len(train)
    first_sentences = {re.split(r"(?<=[.!?])\s", s)[0] for s in train}
    assert len(first_sentences) > 300
    text = " ".join(train)
    assert text.isascii()
    for needed in ("Once upon a time", '"', "said", "happy", "The end."):
        assert needed in text
    # Every plot is used, and stories have a beginning, a middle and an end.
    rng_stories = make_stories(400, seed=1)
    lengths = [len(s.split()) for s in rng_stories]
    assert min(lengths) >= 25 and np.median(lengths) > 50
    assert len(PLOTS) >= 10


@pytest.fixture(scope="module")
def tokenizer_text(corpus) -> str:
    """The tokenizer.json text trained on the corpus, as the demo build trains it."""
    return train_tokenizer(corpus[0], 512)


def test_tokenizer_has_the_real_layout(tokenizer_text):
    text = tokenizer_text
    data = json.loads(text)
    assert [t["content"] for t in data["added_tokens"]] == ["<pad>", "<s>", "</s>"]
    assert [t["id"] for t in data["added_tokens"]] == [0, 1, 2]
    tok = FlyTokenizer.from_json_text(text)
    assert tok.vocab_size == 512
    ids = tok.encode("Once upon a time, there was a little girl.")
    assert tok.decode(ids) == "Once upon a time, there was a little girl."
    assert all(i > 2 for i in ids)


def test_tokenizer_has_the_real_byte_symbols(tokenizer_text, real_tokenizer_path):
    """Same byte-symbol block as the real tokenizer: ids 3..258 in code-point order."""
    vocab = json.loads(tokenizer_text)["model"]["vocab"]
    real_vocab = json.loads(real_tokenizer_path.read_text())["model"]["vocab"]
    byte_ids = {k: v for k, v in real_vocab.items() if 3 <= v <= 258}
    assert byte_ids and all(vocab.get(k) == v for k, v in byte_ids.items())


def test_bigram_beats_unigram_on_held_out(corpus):
    train, held = corpus
    tok = FlyTokenizer.from_json_text(train_tokenizer(train, 512))
    train_seq = story_sequences([tok.encode(s) for s in train], 1, 2)
    held_seq = story_sequences([tok.encode(s) for s in held], 1, 2)
    ngram = NGramModel(train_seq, tok.vocab_size)
    uni, bi = ngram.unigram_cross_entropy(held_seq), ngram.bigram_cross_entropy(held_seq)
    tri = ngram.trigram_cross_entropy(held_seq)
    assert bi < uni - 1.0 and tri < bi
    # Smoothed trigram targets are proper distributions.
    lp = ngram.log_probs(np.array([1, 5]), np.array([5, 9]))
    assert np.allclose(np.exp(lp.astype(np.float64)).sum(axis=1), 1.0, atol=1e-4)
