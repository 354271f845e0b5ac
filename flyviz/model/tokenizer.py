"""The Fly LLM's byte-level BPE tokenizer, through the HF ``tokenizers`` library.

The tokenizer adds no special tokens: callers prepend BOS themselves, as the
reference does. Decoding is done on the *whole* continuation every time, since
one token can hold half of a multi-byte character.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flyviz.model.errors import InputError, TokenizerError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from flyviz.model.checkpoint import Checkpoint

#: Longest prompt accepted, in characters (the model has no context limit, but a
#: runaway paste should not freeze the app).
MAX_PROMPT_CHARS = 20_000


class FlyTokenizer:
    """Encode and decode text for a Fly LLM.

    Parameters
    ----------
    path
        A ``tokenizer.json`` in the HF ``tokenizers`` format.
    """

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise TokenizerError(f"tokenizer file not found: {self.path}")
        try:
            self._tok = Tokenizer.from_file(str(self.path))
        except Exception as exc:  # the library raises plain Exceptions
            raise TokenizerError(f"cannot read tokenizer {self.path}: {str(exc).splitlines()[0]}") \
                from None
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = {i for i in range(self.vocab_size)
                            if self._tok.id_to_token(i) in {"<pad>", "<s>", "</s>"}}
        self._piece_cache: dict[int, str] = {}
        self.characters = _character_table(self._tok)
        #: Whether the vocabulary has a BOS token (``<s>``) to start a prompt with.
        self.has_bos = self._tok.token_to_id("<s>") is not None

    @classmethod
    def from_json_text(cls, text: str, path: str | Path = "<memory>") -> "FlyTokenizer":
        """Build from the JSON text of a tokenizer file (used by tests)."""
        from tokenizers import Tokenizer

        obj = cls.__new__(cls)
        obj.path = Path(path)
        try:
            json.loads(text)
            obj._tok = Tokenizer.from_str(text)
        except Exception as exc:
            raise TokenizerError(f"cannot read tokenizer: {str(exc).splitlines()[0]}") from None
        obj.vocab_size = obj._tok.get_vocab_size(with_added_tokens=True)
        obj.special_ids = {i for i in range(obj.vocab_size)
                           if obj._tok.id_to_token(i) in {"<pad>", "<s>", "</s>"}}
        obj._piece_cache = {}
        obj.characters = _character_table(obj._tok)
        obj.has_bos = obj._tok.token_to_id("<s>") is not None
        return obj

    def encode(self, text: str, what: str = "the prompt") -> list[int]:
        """Token ids of ``text``, without special tokens; ``what`` names the text in the
        one-line errors (``"--target"``), so that they point at the argument at fault."""
        if not isinstance(text, str):
            raise InputError(f"{what} is text, not {type(text).__name__}")
        if len(text) > MAX_PROMPT_CHARS:
            raise InputError(f"{what} has {len(text):,} characters; "
                             f"the limit is {MAX_PROMPT_CHARS:,}")
        check_unicode(text, what)
        if self.characters is not None:
            check_characters(text, self.characters, what)
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of many texts (no length limit, no special tokens), encoded in parallel."""
        texts = list(texts)
        for number, text in enumerate(texts, start=1):
            check_unicode(text, f"text {number}")
            if self.characters is not None:
                check_characters(text, self.characters, f"text {number}")
        return [list(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        """Text of ``ids`` with special tokens dropped; invalid UTF-8 shows as U+FFFD."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        """Display text of one token (specials by name, e.g. ``</s>``)."""
        token_id = int(token_id)
        cached = self._piece_cache.get(token_id)
        if cached is None:
            if token_id in self.special_ids:
                cached = self._tok.id_to_token(token_id) or ""
            else:
                cached = self._tok.decode([token_id], skip_special_tokens=False)
            self._piece_cache[token_id] = cached
        return cached


def check_unicode(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode: a lone surrogate, which is what Python makes
    of bytes that are not UTF-8 in a command-line argument (the tokenizer cannot take it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        raw = f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF else \
            f"lone surrogate U+{ord(char):04X}"
        raise InputError(f"{what} is not valid UTF-8 text ({raw} at character "
                         f"{exc.start + 1}); give it as UTF-8") from None


def start_ids(tokenizer: Any, bos_token_id: int) -> list[int]:
    """What a prompt starts with: ``[BOS]``, or nothing for a tokenizer with no BOS token
    (FlyGPT's 65 characters); duck-typed tokenizers without ``has_bos`` take BOS."""
    return [int(bos_token_id)] if getattr(tokenizer, "has_bos", True) else []


def _character_table(tok: Any) -> frozenset[str] | None:
    """The characters of a strict character-level (WordLevel) tokenizer, such as FlyGPT's
    65; ``None`` for any other tokenizer (byte-level BPE encodes every text)."""
    if type(tok.model).__name__ != "WordLevel":
        return None
    vocabulary = tok.get_vocab(with_added_tokens=False)
    if not vocabulary or any(len(token) != 1 for token in vocabulary):
        return None
    return frozenset(vocabulary)


def check_characters(text: str, characters: frozenset[str], what: str) -> None:
    """Refuse a character the tokenizer's table does not hold (FlyGPT's is strict)."""
    for position, char in enumerate(text, start=1):
        if char not in characters:
            raise InputError(f"{what} has {char!r} (U+{ord(char):04X}) at character {position}, "
                             f"which this model's {len(characters)}-character table does not "
                             "hold; use only its characters")


def character_tokenizer_json(characters: str) -> str:
    """A WordLevel tokenizer over ``characters`` (id = position), laid out as FlyGPT's
    exporter writes it: each character split off alone, ``Fuse`` decoder, no special
    tokens, no BOS, ``unk_token`` saved as ``"<unk>"`` (not in the table)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(characters)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
    tok.decoder = decoders.Fuse()
    return tok.to_str()


def missing_tokenizer_advice(checkpoint: "Checkpoint") -> str:
    """Which ``tokenizer.json`` a model without one needs, and where to put it.

    FlyGPT's is its own 65-character WordLevel table, not the Fly LLM's byte-level BPE:
    pointing a FlyGPT user at ngxson/fly-llm-hf's would give a tokenizer that does not fit.
    """
    folder = f" ({checkpoint.source})" if checkpoint.source is not None else ""
    if checkpoint.layout == "flygpt":
        return ("put FlyGPT's tokenizer.json (its 65-character WordLevel table, in every "
                f"folder of QuixiAI/FlyGPT) in the model's folder{folder}")
    return ("put the model's tokenizer.json (ngxson/fly-llm-hf's for the released models) in "
            f"its folder{folder}")


def tokenizer_for(checkpoint: "Checkpoint") -> FlyTokenizer:
    """The checkpoint's tokenizer, checked against its vocabulary.

    Raises
    ------
    TokenizerError
        When the checkpoint names no tokenizer, or one with more tokens than
        the model's vocabulary (they do not belong together).
    """
    if checkpoint.tokenizer_path is None:
        raise TokenizerError(f"model {checkpoint.name!r} comes without a tokenizer.json; "
                             + missing_tokenizer_advice(checkpoint))
    tokenizer = FlyTokenizer(checkpoint.tokenizer_path)
    if tokenizer.vocab_size > checkpoint.config.vocabulary:
        raise TokenizerError(f"the tokenizer has {tokenizer.vocab_size:,} tokens but the model only "
                             f"{checkpoint.config.vocabulary:,}; they do not belong together")
    return tokenizer


def train_byte_level_bpe(texts: "Iterable[str]", vocab_size: int) -> str:
    """Train a byte-level BPE tokenizer laid out like the Fly LLM's; return its JSON.

    Special tokens come first (``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2), then
    the 256 byte symbols, then merges. The vocabulary may come out smaller than
    ``vocab_size`` when the text runs out of merges.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok.to_str()
