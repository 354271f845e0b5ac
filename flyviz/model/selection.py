"""Neuron selections: one small query language for the command line, the app and the library.

A query names a set of neurons of one checkpoint::

    superclass:cb_sensory & side:left
    type:KC* | type:MBON??
    sign:inhibitory & !input
    id:3,17,100-199
    (superclass:visual_projection | body:720575940600000001) & !side:center

Terms
-----
``id:LIST``
    Neuron indices (rows of the graph), a comma-separated list of numbers and
    inclusive ranges: ``id:3,17,100-199`` is 3, 17 and 100 to 199.
``body:LIST``
    MaleCNS body ids, where the checkpoint's anatomy has them (same list form).
``superclass:NAME[,NAME...]``
    Superclass labels (case-insensitive), e.g. ``superclass:cb_sensory``.
``type:GLOB[,GLOB...]``
    Cell types, shell-style wildcards (``*``, ``?``, ``[abc]``), case-sensitive
    as the labels are: ``type:KC*``. Quote a name that holds spaces,
    parentheses or ``&|``: ``type:"a (b)"``.
``side:left|right|center``
    Hemisphere (``l``/``r``/``c``, ``centre`` and ``middle`` are accepted).
``sign:excitatory|inhibitory``
    The sign of the neuron's outgoing synapses, read from the graph's weights
    (in the released models every neuron's outgoing synapses share one sign;
    where they do not, the sign of their sum counts). A neuron without
    outgoing synapses, or whose weights sum to zero, has neither sign.
``population:NAME[,NAME...]``
    A named population of the brain (case-insensitive), where its source has them:
    fly-connectome-malecns-166k's ``retina``, ``lamina``, ``descending`` and ``sugar``.
``input``
    The input neurons of the delay line (``in_index``).
``all``
    Every neuron.

Terms combine with ``&`` (and), ``|`` (or), ``!`` (not) and parentheses;
``!`` binds tightest, then ``&``, then ``|``. A comma list inside one term is
an "or" of its values.

A query is parsed once into a small tree (:func:`parse`, cached) and evaluated
against a :class:`NeuronIndex`, the per-neuron labels of one checkpoint built
once (:func:`neuron_index`, cached per checkpoint). Evaluating a query on the
full-size brain takes well under a millisecond for most terms (a few for a
type glob over ~9,000 cell-type names), so the app can count a selection
live while the user types.

Errors are one line (:class:`SelectionError`, an :class:`InputError`): a bad
query says where, an unknown name lists the closest valid names, and a query
that selects nothing is an error (:meth:`NeuronIndex.select`), never a silent
no-op.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

import numpy as np

from flyviz.model.checkpoint import Checkpoint
from flyviz.errors import SelectionError

#: The term keys with a value, and the bare words, in the order error messages list them.
KEYS = ("id", "body", "superclass", "type", "side", "sign", "population")
WORDS = ("all", "input")
SIDES = ("left", "right", "center")
SIGNS = ("excitatory", "inhibitory")
_SIDE_ALIASES = {"l": "left", "left": "left", "r": "right", "right": "right",
                 "c": "center", "center": "center", "centre": "center", "middle": "center",
                 "m": "center"}
#: Term key -> (NeuronIndex attribute, what the labels are called in messages).
_LABELS = {"superclass": ("superclass", "superclass"), "type": ("cell_type", "cell type"),
           "side": ("side", "side")}
_SIGN_ALIASES = {"excitatory": 1, "exc": 1, "+": 1, "inhibitory": -1, "inh": -1, "-": -1}


# ------------------------------------------------------------------ the tree
@dataclass(frozen=True)
class Term:
    """One term: ``key`` (``id``, ``body``, ``superclass``, ``type``, ``side``, ``sign``,
    ``all`` or ``input``) and its comma-separated values (empty for ``all``/``input``)."""

    key: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.values:
            return self.key
        return f"{self.key}:" + ",".join(_quote(v) for v in self.values)


@dataclass(frozen=True)
class Not:
    """Every neuron not selected by ``operand``."""

    operand: "Node"

    def __str__(self) -> str:
        inner = str(self.operand)
        return f"!{inner}" if isinstance(self.operand, (Term, Not)) else f"!({inner})"


@dataclass(frozen=True)
class And:
    """Neurons selected by every operand."""

    operands: tuple["Node", ...]

    def __str__(self) -> str:
        return " & ".join(f"({o})" if isinstance(o, Or) else str(o) for o in self.operands)


@dataclass(frozen=True)
class Or:
    """Neurons selected by any operand."""

    operands: tuple["Node", ...]

    def __str__(self) -> str:
        return " | ".join(str(o) for o in self.operands)


Node = Union[Term, Not, And, Or]


def _quote(value: str) -> str:
    return value if re.fullmatch(r"[^\s&|()!'\",]+", value) else '"' + value.replace('"', "") + '"'


# ------------------------------------------------------------------- parsing
_OPERATORS = "&|!()"


#: Deepest nesting of parentheses a query may have (Python's recursion limit is far off).
MAX_DEPTH = 64


class _Parser:
    """Recursive descent over the query text: or := and ('|' and)*, and := unary ('&' unary)*,
    unary := '!'* ('(' or ')' | term). A run of '!' is read in a loop (an even number
    cancels), and parentheses nest at most :data:`MAX_DEPTH` deep, so no query can
    exhaust the stack."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def fail(self, what: str, at: int | None = None) -> SelectionError:
        at = self.pos if at is None else at
        shown = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        where = "at the end" if at >= len(self.text) else f"at character {at + 1}"
        return SelectionError(f"bad query {shown!r}: {what} {where}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def parse(self) -> Node:
        if not self.text.strip():
            raise SelectionError("the query is empty: give e.g. 'superclass:cb_sensory', "
                                 "'type:KC*', 'sign:inhibitory', 'input' or 'all'")
        node = self.parse_or()
        if self.peek():
            char = self.peek()
            raise self.fail(f"unexpected {char!r}" + (" (no '(' to close)" if char == ")" else
                                                       "; join terms with & or |"))
        return node

    def parse_or(self) -> Node:
        return self._chain("|", self.parse_and, Or)

    def parse_and(self) -> Node:
        return self._chain("&", self.parse_unary, And)

    def _chain(self, operator: str, operand: "Callable[[], Node]", node: type) -> Node:
        """``operand (operator operand)*``, one node for two or more operands."""
        operands = [operand()]
        while self.peek() == operator:
            self.pos += 1
            operands.append(operand())
        return operands[0] if len(operands) == 1 else node(tuple(operands))

    def parse_unary(self) -> Node:
        negations = 0
        while self.peek() == "!":
            self.pos += 1
            negations += 1
        node = self._parse_primary()
        return Not(node) if negations % 2 else node

    def _parse_primary(self) -> Node:
        char = self.peek()
        if char == "(":
            opened = self.pos
            if self.depth >= MAX_DEPTH:
                raise self.fail(f"parentheses nest more than {MAX_DEPTH} deep")
            self.pos += 1
            self.depth += 1
            node = self.parse_or()
            self.depth -= 1
            if self.peek() != ")":
                shown = self.text if len(self.text) <= 60 else self.text[:57] + "..."
                raise SelectionError(f"bad query {shown!r}: the '(' at character {opened + 1} "
                                     "is never closed")
            self.pos += 1
            return node
        if not char:
            raise self.fail("expected a term")
        if char in "&|)":
            raise self.fail(f"expected a term before {char!r}")
        return self.parse_term()

    def parse_term(self) -> Term:
        start = self.pos
        match = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*").match(self.text, self.pos)
        if match is None:
            raise self.fail(f"expected a term such as 'superclass:NAME', not "
                            f"{self.text[self.pos]!r}")
        word = match.group(0)
        key = word.lower()
        self.pos = match.end()
        if self.peek() != ":":
            if key in WORDS:
                return Term(key)
            if key in KEYS:
                raise self.fail(f"'{word}' needs a value, e.g. '{key}:{_EXAMPLES[key]}'")
            raise SelectionError(f"unknown term {word!r} in query {self.text!r}; "
                                 f"{_closest(word, KEYS + WORDS, 'terms', listing=len(KEYS + WORDS))}")
        if key not in KEYS:
            if key in WORDS:
                raise self.fail(f"'{key}' takes no value", start)
            raise SelectionError(f"unknown term {word + ':'!r} in query {self.text!r}; "
                                 f"{_closest(word, KEYS + WORDS, 'terms', listing=len(KEYS + WORDS))}")
        self.pos += 1  # the colon
        self.skip_space()
        values = [self.parse_value(key)]
        while self.pos < len(self.text) and self.text[self.pos] == ",":
            self.pos += 1
            values.append(self.parse_value(key))
        return Term(key, tuple(values))

    def parse_value(self, key: str) -> str:
        """A quoted string, or characters up to white space, a comma or an operator
        (a '!' inside a value, as in a glob's ``[!a]``, is part of it)."""
        text, start = self.text, self.pos
        if start < len(text) and text[start] in "'\"":
            end = text.find(text[start], start + 1)
            if end < 0:
                raise self.fail("a quoted value is not closed", start)
            self.pos = end + 1
            value = text[start + 1:end]
        else:
            end = start
            while end < len(text) and not text[end].isspace() and text[end] not in ",&|()" \
                    and not (text[end] == "!" and end == start):
                end += 1
            self.pos = end
            value = text[start:end]
        if not value:
            raise self.fail(f"'{key}:' needs a value, e.g. '{key}:{_EXAMPLES[key]}'", start)
        return value


_EXAMPLES = {"id": "3,17,100-199", "body": "720575940612345678", "superclass": "cb_sensory",
             "type": "KC*", "side": "left", "sign": "inhibitory", "population": "sugar"}


def parse(query: str) -> Node:
    """Parse ``query`` into a tree of :class:`Term`, :class:`Not`, :class:`And`, :class:`Or`.

    Raises
    ------
    SelectionError
        With one line saying what is wrong and where. Names are checked
        against a model only when the tree is evaluated.
    """
    # Checked before the cache, which would fail on a list in a TypeError of its own.
    if not isinstance(query, str):
        from flyviz.arguments import shown

        raise SelectionError(f"a query must be text (a str) such as 'superclass:sensory', "
                             f"not {shown(query)}")
    return _parse(query)


@functools.lru_cache(maxsize=512)
def _parse(query: str) -> Node:
    """:func:`parse` of a ``str``, cached."""
    return _Parser(query).parse()


def _closest(word: str, names: "list[str] | tuple[str, ...]", what: str, limit: int = 5,
             listing: int = 8) -> str:
    """``closest types: a, b, c``; for a handful of names (at most ``listing``), all of
    them, likeliest first."""
    names = list(dict.fromkeys(n for n in names if n))
    lowered = {n.lower(): n for n in names}
    close = [lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered),
                                                            n=limit, cutoff=0.5)]
    if len(names) <= listing:
        hint = f"did you mean {close[0]!r}? " if close else ""
        return f"{hint}valid {what}: {', '.join(names)}"
    if not close:  # nothing alike: the names that start the same way, else any few
        close = [n for n in names if n.lower().startswith(word.lower()[:2])][:limit] \
            or names[:limit]
    return f"closest {what}: {', '.join(close)}"


_INT64_MAX = 2**63 - 1


def _parse_numbers(values: tuple[str, ...], what: str, too_large: "Callable[[str], str]"
                   ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Single numbers and inclusive ``a-b`` ranges of a term's values; a number beyond
    int64 is refused with the line ``too_large(its text)`` rather than overflowing."""
    singles: list[int] = []
    ranges: list[tuple[int, int]] = []
    for value in values:
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
        if match is None:
            raise SelectionError(f"{what} {value!r} is not a number or a range like 100-199")
        for number in (match.group(1), match.group(2)):
            digits = (number or "0").lstrip("0") or "0"
            if len(digits) > 19 or int(digits) > _INT64_MAX:
                raise SelectionError(too_large(digits if len(digits) <= 24
                                               else digits[:21] + "..."))
        lo = int(match.group(1).lstrip("0") or "0")
        if match.group(2) is None:
            singles.append(lo)
            continue
        hi = int(match.group(2).lstrip("0") or "0")
        if hi < lo:
            raise SelectionError(f"{what} range {value!r} runs backwards; write {hi}-{lo}")
        ranges.append((lo, hi))
    return np.asarray(singles, dtype=np.int64), ranges


# -------------------------------------------------------------- the labels
class _Labels:
    """One categorical label per neuron: ``codes[i]`` indexes ``names``."""

    def __init__(self, labels: "list[str]") -> None:
        self.names = list(dict.fromkeys(labels))            # in order of first appearance
        code = {name: i for i, name in enumerate(self.names)}
        self.codes = np.fromiter(map(code.__getitem__, labels), dtype=np.int32,
                                 count=len(labels))
        self.counts = np.bincount(self.codes, minlength=len(self.names))

    def mask_of(self, codes: "list[int]") -> np.ndarray:
        table = np.zeros(len(self.names), dtype=bool)
        table[codes] = True
        return table[self.codes]


def net_outgoing_weight(sources: np.ndarray, weights: np.ndarray, neurons: int) -> np.ndarray:
    """``(neurons,)`` float64: the summed weight of each neuron's outgoing synapses, given
    each synapse's source and weight; in pieces, so that a full-size graph (9M synapses)
    needs no large temporary."""
    net = np.zeros(neurons, dtype=np.float64)
    piece = 1 << 21
    for start in range(0, int(weights.shape[0]), piece):
        net += np.bincount(np.asarray(sources[start:start + piece], dtype=np.intp),
                           weights=np.asarray(weights[start:start + piece], dtype=np.float64),
                           minlength=neurons)
    return net


class NeuronIndex:
    """Every neuron's labels for one checkpoint, for evaluating queries quickly.

    Build it once per checkpoint with :func:`neuron_index` (cached); then
    :meth:`mask`, :meth:`select` and :meth:`breakdown` are cheap.

    Parameters
    ----------
    checkpoint
        The model whose anatomy labels, graph and input neurons are indexed.
    """

    def __init__(self, checkpoint: Checkpoint) -> None:
        ck = checkpoint
        n = int(ck.config.neurons)
        self.neurons = n
        self.model_name = ck.name
        anatomy = ck.anatomy
        self.superclass = _Labels(anatomy.superclass) if anatomy and anatomy.superclass else None
        self.cell_type = _Labels(anatomy.cell_type) if anatomy and anatomy.cell_type else None
        self._type_code = {name: i for i, name in enumerate(self.cell_type.names)} \
            if self.cell_type is not None else {}
        self._type_matches: dict[str, list[int]] = {}
        self.side = None
        if anatomy is not None and anatomy.side:
            side = _Labels([_SIDE_ALIASES.get(s.strip().lower(), "") for s in anatomy.side])
            self.side = side
        populations = getattr(anatomy, "populations", None) if anatomy is not None else None
        self.populations: dict[str, np.ndarray] | None = None
        if populations:
            self.populations = {str(k).lower(): np.asarray(v, dtype=np.intp)
                                for k, v in populations.items()}
        self.body_id = None
        if anatomy is not None and anatomy.body_id is not None:
            self.body_id = np.asarray(anatomy.body_id, dtype=np.int64)
            self._body_order = np.argsort(self.body_id, kind="stable")
        self.input = np.zeros(n, dtype=bool)
        self.input[np.asarray(ck.in_index, dtype=np.intp)] = True
        # The signs read every synapse (70 ms for the full-size graph), and most sessions ask
        # no sign: query: worked out at the first (:attr:`sign`). A model may sum its
        # neurons' outgoing weights itself (``outgoing_weight()``: a spiking brain's view).
        outgoing = getattr(ck, "outgoing_weight", None)
        self._outgoing_weight: Callable[[], np.ndarray] = outgoing if outgoing is not None \
            else functools.partial(net_outgoing_weight, ck.w_indices, ck.w_values, n)

    @functools.cached_property
    def sign(self) -> np.ndarray:
        """``(neurons,)`` int8: the sign of each neuron's outgoing synapses' summed weight."""
        return np.sign(self._outgoing_weight()).astype(np.int8)

    # ------------------------------------------------------------ evaluate
    def mask(self, query: "str | Node") -> np.ndarray:
        """``(neurons,)`` bool mask of the neurons ``query`` selects (may be all False).

        Raises
        ------
        SelectionError
            For a query that does not parse or names an unknown label.
        """
        # parse() refuses what is not text (5, None) in one line; a parsed tree is taken as is.
        node = query if isinstance(query, (Term, Not, And, Or)) else parse(query)
        return self._evaluate(node)

    def select(self, query: "str | Node") -> np.ndarray:
        """Sorted indices of the neurons ``query`` selects.

        Raises
        ------
        SelectionError
            Also when the query selects no neuron at all.
        """
        indices = np.flatnonzero(self.mask(query))
        if indices.size == 0:
            raise SelectionError(f"query {str(query)!r} selects no neurons of {self.model_name}")
        return indices

    def count(self, query: "str | Node") -> int:
        """How many neurons ``query`` selects (0 allowed; bad queries still raise)."""
        return int(np.count_nonzero(self.mask(query)))

    def breakdown(self, indices: np.ndarray) -> dict[str, int]:
        """How many of ``indices`` fall in each superclass (``{"": n}`` without labels),
        largest first."""
        if self.superclass is None:
            return {"": int(np.asarray(indices).size)}
        counts = np.bincount(self.superclass.codes[np.asarray(indices, dtype=np.intp)],
                             minlength=len(self.superclass.names))
        order = np.argsort(-counts, kind="stable")
        return {self.superclass.names[i] or "(unlabelled)": int(counts[i])
                for i in order if counts[i]}

    def _evaluate(self, node: Node) -> np.ndarray:
        if isinstance(node, Term):
            return self._term(node)
        if isinstance(node, Not):
            return ~self._evaluate(node.operand)
        masks = [self._evaluate(o) for o in node.operands]
        out = masks[0].copy()
        combine = np.logical_and if isinstance(node, And) else np.logical_or
        for m in masks[1:]:
            combine(out, m, out=out)
        return out

    def terms(self) -> list[str]:
        """The query terms this model's labels support, in the help's order (``id:``,
        ``sign:``, ``input`` and ``all`` always; the others where it has their labels)."""
        have = {"body:": self.body_id is not None, "superclass:": self.superclass is not None,
                "type:": self.cell_type is not None, "side:": self.side is not None,
                "population:": bool(self.populations)}
        return ["id:", *(term for term, there in have.items() if there), "sign:", "input",
                "all"]

    def _missing(self, what: str) -> SelectionError:
        terms = self.terms()
        return SelectionError(f"{self.model_name} has no {what} labels; select by "
                              f"{', '.join(terms[:-1])} or {terms[-1]} instead")

    def _term(self, term: Term) -> np.ndarray:
        n = self.neurons
        key, values = term.key, term.values
        if key == "all":
            return np.ones(n, dtype=bool)
        if key == "input":
            return self.input.copy()
        if key == "id":
            singles, ranges = _parse_numbers(
                values, "neuron index", lambda big: f"neuron index {big} is outside 0..{n - 1}")
            for bad in [*singles.tolist(), *(hi for _, hi in ranges)]:
                if bad >= n:
                    raise SelectionError(f"neuron index {bad} is outside 0..{n - 1}")
            mask = np.zeros(n, dtype=bool)
            mask[singles] = True
            for lo, hi in ranges:
                mask[lo:hi + 1] = True
            return mask
        if key == "body":
            if self.body_id is None:
                raise self._missing("body id")
            singles, ranges = _parse_numbers(
                values, "body id", lambda big: f"body id {big} is not a neuron of "
                                               f"{self.model_name}")
            sorted_ids = self.body_id[self._body_order]
            mask = np.zeros(n, dtype=bool)
            at = np.searchsorted(sorted_ids, singles)
            found = (at < n) & (sorted_ids[np.minimum(at, n - 1)] == singles)
            if not found.all():
                missing = singles[~found][0]
                raise SelectionError(f"body id {missing} is not a neuron of {self.model_name}")
            mask[self._body_order[at]] = True
            for lo, hi in ranges:
                mask |= (self.body_id >= lo) & (self.body_id <= hi)
            return mask
        if key in _LABELS:
            attribute, what = _LABELS[key]
            labels: _Labels | None = getattr(self, attribute)
            if labels is None:
                raise self._missing(what)
            codes: list[int] = []
            for value in values:
                codes.extend(self._label_codes(key, labels, value))
            return labels.mask_of(codes)
        if key == "population":
            if not self.populations:
                raise self._missing("population")
            mask = np.zeros(n, dtype=bool)
            for value in values:
                members = self.populations.get(value.lower())
                if members is None:
                    raise SelectionError(f"unknown population {value!r}; "
                                         f"{_closest(value, list(self.populations), 'populations')}")
                mask[members] = True
            return mask
        assert key == "sign"
        mask = np.zeros(n, dtype=bool)
        for value in values:
            sign = _SIGN_ALIASES.get(value.lower())
            if sign is None:
                raise SelectionError(f"unknown sign {value!r}; valid signs: {', '.join(SIGNS)}")
            mask |= self.sign == sign
        return mask

    def _label_codes(self, key: str, labels: _Labels, value: str) -> list[int]:
        """The label codes one value of a ``superclass``, ``type`` or ``side`` term names."""
        if key == "type":
            matched = self._type_codes(value)
            if not matched:
                raise SelectionError(f"type {value!r} matches no cell type; "
                                     + (self._other_case(value, labels.names)
                                        or _closest(value.strip("*?"), labels.names, "types")))
            return matched
        if key == "superclass":
            code = {name.lower(): c for c, name in enumerate(labels.names)}.get(value.lower())
            if code is None:
                closest = _closest(value, labels.names, "superclasses")
                raise SelectionError(f"unknown superclass {value!r}; {closest}")
            return [code]
        side = _SIDE_ALIASES.get(value.lower())
        if side is None:
            raise SelectionError(f"unknown side {value!r}; valid sides: {', '.join(SIDES)}")
        return [labels.names.index(side)] if side in labels.names else []

    def _other_case(self, pattern: str, names: "list[str]") -> str | None:
        """Where ``pattern`` matches cell types only when case is ignored, what to say:
        that types are case-sensitive, and the spelling that matches (the pattern in upper
        or lower case, or the one type it names), else the types it would match."""
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE)
        matches = [name for name in names if name and regex.match(name)]
        if not matches:
            return None
        spellings = [pattern.upper(), pattern.lower()] + (matches if len(matches) == 1 else [])
        spelling = next((s for s in spellings if self._type_codes(s)), None)
        count = f"{len(matches):,} cell type{'s' if len(matches) != 1 else ''}"
        if spelling is not None:
            return (f"cell types are case-sensitive: type:{spelling} matches {count}")
        listed = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        return (f"cell types are case-sensitive, and ignoring case it would match {count}: "
                f"{listed}")

    def _type_codes(self, pattern: str) -> list[int]:
        """Codes of the cell types ``pattern`` matches (remembered: the app asks again
        for every key typed)."""
        assert self.cell_type is not None
        codes = self._type_matches.get(pattern)
        if codes is None:
            names = self.cell_type.names
            if not any(c in pattern for c in "*?["):
                code = self._type_code.get(pattern)
                codes = [] if code is None else [code]
            else:
                regex = re.compile(fnmatch.translate(pattern))
                codes = [i for i, name in enumerate(names) if name and regex.match(name)]
            if len(self._type_matches) > 1024:
                self._type_matches.clear()
            self._type_matches[pattern] = codes
        return codes


_cache_lock = threading.Lock()
_cache: dict[int, tuple["weakref.ref[Checkpoint]", NeuronIndex]] = {}


def neuron_index(checkpoint: Checkpoint) -> NeuronIndex:
    """The :class:`NeuronIndex` of ``checkpoint``, built on first use and kept while it lives.

    Building one for the full-size brain takes about 0.1 s (the sign of every
    neuron reads all 9M weights once); later calls return the same object.
    """
    key = id(checkpoint)
    with _cache_lock:
        entry = _cache.get(key)
        if entry is not None and entry[0]() is checkpoint:
            return entry[1]
    index = NeuronIndex(checkpoint)
    with _cache_lock:
        entry = _cache.get(key)
        if entry is not None and entry[0]() is checkpoint:
            return entry[1]
        def forget(_ref: object, key: int = key) -> None:
            _cache.pop(key, None)

        _cache[key] = (weakref.ref(checkpoint, forget), index)
    return index


def select(checkpoint: Checkpoint, query: str) -> np.ndarray:
    """Sorted indices of the neurons of ``checkpoint`` that ``query`` selects (never empty).

    Raises
    ------
    SelectionError
        For a bad query, an unknown name, or a query that selects nothing.
    """
    return neuron_index(checkpoint).select(query)
