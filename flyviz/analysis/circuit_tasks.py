"""A circuit's task: the prompts and the metric a circuit must keep, read and checked.

Two forms (:func:`load_task`):

* **JSON Lines** (``.jsonl``, ``.ndjson``), one prompt a line::

      {"prompt": "there was a little girl named", "target": " Lily", "versus": " Tom"}
      {"prompt": "...", "target_id": 766, "versus_id": 812}

  The metric of a prompt is ``logit[target] - logit[versus]`` at its last
  position (the step that reads its last token, whose prediction is the next
  token); without a versus ``logit[target] - mean(logits)``, what ``flyviz
  trace`` explains (:func:`flyviz.model.explain.explained_value`). Blank lines
  are skipped. A target (or versus) is a text that is exactly one token of
  the model's vocabulary (often with its leading space) or an id.

* **Plain text** (any other file): read as the lesion map reads a text
  (:func:`flyviz.analysis.corpus.build_corpus`: documents separated by blank
  lines, windows of at most ``context - 1`` tokens fed from the zero state
  after BOS); every window is one "prompt". The metric is the mean
  next-token **log-probability** over every counted position, that is
  *minus* the mean cross-entropy (nats/token), so that for both forms a
  higher metric means the model does the task better and ``m(M) > m(∅)``
  for an ablation that hurts. (The faithfulness ratio does not depend on
  the metric's sign; the scores' signs do.)

The task mean ``m`` is the mean of the prompts' metrics (JSON Lines) or of
every counted position's log-probability (text). Bad input is one
:class:`~flyviz.errors.InputError` line naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flyviz.analysis.corpus import JSONL_SUFFIXES
from flyviz.errors import InputError
from flyviz.fileio import shipped_example_hint
from flyviz.model.tokenizer import start_ids

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.tokenizer import FlyTokenizer

LOGIT = "logit"
TEXT = "text"
#: Longest window of a text task, BOS included (short: a window's tape is kept whole).
TEXT_CONTEXT = 128
#: Longest prompt of a JSON Lines task, BOS included.
MAX_PROMPT_TOKENS = 4096


@dataclass(frozen=True)
class TaskPrompt:
    """One prompt of a task.

    Attributes
    ----------
    ids
        The tokens read, BOS first.
    target, versus
        Token ids of a logit task (``versus`` may be ``None``: minus the mean
        logit); both ``None`` for a text window (every position counted).
    line
        Its line in the task file (1-based; a text window's number).
    """

    ids: tuple[int, ...]
    target: int | None = None
    versus: int | None = None
    line: int = 0

    @property
    def n_tokens(self) -> int:
        """Steps the prompt takes."""
        return len(self.ids)

    @property
    def terms(self) -> int:
        """Metric terms it adds: 1 (its last position) or, for a text window, every counted
        position."""
        return 1 if self.target is not None else max(0, len(self.ids) - 1)


@dataclass(frozen=True)
class CircuitTask:
    """The prompts and the metric (see the module documentation).

    Attributes
    ----------
    kind
        ``"logit"`` (JSON Lines) or ``"text"``.
    prompts
        In file order.
    source
        The file's name.
    """

    kind: str
    prompts: tuple[TaskPrompt, ...]
    source: str = ""

    @property
    def n_tokens(self) -> int:
        """Steps of every prompt together."""
        return sum(p.n_tokens for p in self.prompts)

    @property
    def terms(self) -> int:
        """Metric terms of the task (what its mean divides by)."""
        return sum(p.terms for p in self.prompts)

    def digest(self) -> str:
        """SHA-256 of the prompts' tokens and targets (what the scores depend on)."""
        h = hashlib.sha256(self.kind.encode())
        for p in self.prompts:
            h.update(json.dumps([list(p.ids), p.target, p.versus]).encode())
        return h.hexdigest()

    def metric_text(self) -> str:
        """What the metric is, in words."""
        if self.kind == TEXT:
            return "mean next-token log-probability (minus the cross-entropy, nats/token)"
        with_versus = sum(p.versus is not None for p in self.prompts)
        if with_versus == len(self.prompts):
            return "logit[target] - logit[versus] at the last position"
        if with_versus == 0:
            return "logit[target] - mean(logits) at the last position"
        return "logit[target] - logit[versus] (or - mean(logits)) at the last position"


def chunks(task: CircuitTask, count: int) -> list["PromptChunk"]:
    """The task's prompts cut into ``count`` contiguous chunks (fewer for fewer prompts);
    depends only on the task and ``count``."""
    n = len(task.prompts)
    count = max(1, min(int(count), n))
    bounds = np.linspace(0, n, count + 1).round().astype(int)
    return [PromptChunk(i, task.prompts[a:b]) for i, (a, b) in
            enumerate(zip(bounds[:-1], bounds[1:]))]


@dataclass
class PromptChunk:
    """Contiguous prompts of a task: one Dask task (``index``: its leaf in the merge tree)."""

    index: int
    prompts: tuple[TaskPrompt, ...]

    @property
    def n_tokens(self) -> int:
        """Steps of its prompts."""
        return sum(p.n_tokens for p in self.prompts)


# ---------------------------------------------------------------------- reading
def _token(tokenizer: "FlyTokenizer", vocabulary: int, entry: dict[str, Any], name: str,
           where: str) -> int | None:
    """The id of ``entry[name]`` (a one-token text) or ``entry[name + '_id']``, or ``None``."""
    from flyviz.model.explain import token_id

    text, number = entry.get(name), entry.get(f"{name}_id")
    if text is not None and number is not None:
        raise InputError(f"{where}: give {name!r} or {name + '_id'!r}, not both")
    if number is not None:
        if isinstance(number, bool) or not isinstance(number, int):
            raise InputError(f"{where}: {name}_id must be a whole number, not {number!r}")
        try:
            return token_id(tokenizer, vocabulary, int(number), name)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError(f"{where}: {name} must be a text (one token, e.g. \" Lily\"), not "
                         f"{text!r}")
    try:
        return token_id(tokenizer, vocabulary, text, name)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def parse_jsonl(text: str, tokenizer: "FlyTokenizer", vocabulary: int, bos: int,
                source: str = "task") -> CircuitTask:
    """A logit task from the JSON Lines ``text`` (see the module documentation).

    Raises
    ------
    InputError
        For a line that is not a JSON object, a line without a prompt or without a
        target, a target or versus that is not one token (or an id outside the
        vocabulary), a versus equal to the target, or a file without a prompt.
    """
    prompts: list[TaskPrompt] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where} is not JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:      # thousands of nested [ or {: Python's parser gives up
            raise InputError(f"{where} nests its JSON too deeply to read; a task line is one "
                             "object: {\"prompt\": ..., \"target\": ...}") from None
        if not isinstance(entry, dict):
            raise InputError(f"{where} is not a JSON object with a \"prompt\"")
        prompt = entry.get("prompt")
        if prompt is None:
            raise InputError(f"{where} has no \"prompt\"")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"{where}: the prompt must be a text that is not empty")
        target = _token(tokenizer, vocabulary, entry, "target", where)
        if target is None:
            raise InputError(f"{where} has no \"target\" (a one-token text such as \" Lily\") "
                             "or \"target_id\"")
        versus = _token(tokenizer, vocabulary, entry, "versus", where)
        if versus is not None and versus == target:
            raise InputError(f"{where}: the versus is the target itself "
                             f"({tokenizer.token_text(target)!r}); the difference is 0")
        ids = (*start_ids(tokenizer, bos), *(int(t) for t in tokenizer.encode(prompt)))
        if len(ids) > MAX_PROMPT_TOKENS:
            raise InputError(f"{where}: the prompt is {len(ids):,} tokens; at most "
                             f"{MAX_PROMPT_TOKENS:,} (use a text task for long texts)")
        prompts.append(TaskPrompt(ids, target, versus, number))
    if not prompts:
        raise InputError(f"{source} holds no prompt: give one JSON object a line, e.g. "
                         "{\"prompt\": \"there was a little girl named\", \"target\": \" Lily\"}")
    return CircuitTask(LOGIT, tuple(prompts), source)


def load_task(path: str | Path, tokenizer: "FlyTokenizer", vocabulary: int, bos: int, *,
              context: int = TEXT_CONTEXT, max_tokens: int | None = None) -> CircuitTask:
    """Read a task file: JSON Lines by its suffix, any other file as a text.

    Parameters
    ----------
    path
        The file.
    tokenizer, vocabulary, bos
        The model's tokenizer, vocabulary size and BOS id.
    context, max_tokens
        A text's windows (BOS included) and the most tokens read of it.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise InputError(f"the task file {path} does not exist{shipped_example_hint(path)}"
                         if not path.exists()
                         else f"the task {path} is not a file")
    if path.suffix.lower() in JSONL_SUFFIXES:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path.name} is not UTF-8 text") from None
        return parse_jsonl(text, tokenizer, vocabulary, bos, path.name)
    from flyviz.analysis.corpus import build_corpus

    try:
        corpus = build_corpus([path], tokenizer, context=context, max_tokens=max_tokens,
                              bos_token_id=bos if start_ids(tokenizer, bos) else None)
    except InputError as exc:
        raise InputError(f"{path.name}: {exc}") from None
    offsets = np.asarray(corpus.offsets)
    tokens = np.asarray(corpus.tokens)
    prompts = tuple(TaskPrompt(tuple(int(t) for t in tokens[a:b]), line=w + 1)
                    for w, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])) if b - a >= 2)
    if not prompts:
        raise InputError(f"{path.name} holds no window of two tokens or more: nothing to "
                         "predict")
    return CircuitTask(TEXT, prompts, path.name)


def task_from_prompts(entries: Sequence[dict[str, Any]], tokenizer: "FlyTokenizer",
                      vocabulary: int, bos: int) -> CircuitTask:
    """A logit task from dictionaries of the JSON Lines form (for scripts and tests)."""
    return parse_jsonl("\n".join(json.dumps(e) for e in entries), tokenizer, vocabulary, bos,
                       "task")


__all__ = ["CircuitTask", "LOGIT", "PromptChunk", "TEXT", "TEXT_CONTEXT", "TaskPrompt",
           "chunks", "load_task", "parse_jsonl", "task_from_prompts"]
