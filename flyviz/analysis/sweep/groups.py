"""The lesion map's groups: one per superclass, cell type or side, or one per line of a file.

What ``--by`` names (see :mod:`flyviz.analysis.sweep`, "Groups"): the groups
a lesion map, estimated lesions and a causal trace run over, each with a query
that selects exactly its neurons, and the digest a resumed run must share.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flyviz.errors import InputError, SelectionError

if TYPE_CHECKING:  # pragma: no cover
    from flyviz.model.checkpoint import Checkpoint

#: ``--by`` values that sweep the anatomy's labels (anything else names a file).
BY_LABELS = ("superclass", "type", "side")
#: The name of the group of neurons without a label.
UNLABELLED = "(unlabelled)"
_LABEL_KEYS = {"superclass": ("superclass", "superclass"), "type": ("cell_type", "cell type"),
               "side": ("side", "side")}



@dataclass(frozen=True)
class Group:
    """A group of neurons to lesion: its name, a query that selects exactly it, its neurons."""

    name: str
    query: str
    neurons: np.ndarray

    @property
    def size(self) -> int:
        """Number of neurons."""
        return int(self.neurons.size)


def label_query(by: str, name: str) -> str:
    """An exact query for one label: ``superclass:NAME``, ``side:NAME`` or ``type:NAME`` with
    the glob characters of a type name escaped (``[*]``, ``[?]``, ``[[]``)."""
    from flyviz.model.selection import Term

    value = name
    if by == "type":
        value = "".join(f"[{c}]" if c in "*?[" else c for c in name)
    return str(Term(by, (value,)))


def label_groups(checkpoint: "Checkpoint", by: str) -> list[Group]:
    """One group per ``superclass``, cell ``type`` or ``side`` label of ``checkpoint``.

    Raises
    ------
    SelectionError
        When the model has no such labels.
    """
    from flyviz.model.intervention_types import target_text
    from flyviz.model.selection import neuron_index

    if by not in BY_LABELS:
        raise InputError(f"--by {by!r}: expected one of {', '.join(BY_LABELS)} or a file")
    index = neuron_index(checkpoint)
    attribute, what = _LABEL_KEYS[by]
    labels = getattr(index, attribute)
    if labels is None:
        raise SelectionError(f"{checkpoint.name} has no {what} labels to sweep; name the groups "
                             "in a file of 'NAME: QUERY' lines and pass it to --by")
    order = np.argsort(labels.codes, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(labels.counts)])
    groups = []
    for code, name in enumerate(labels.names):
        members = np.sort(order[bounds[code]:bounds[code + 1]]).astype(np.int64)
        if members.size == 0:
            continue
        query = label_query(by, name) if name and '"' not in name else ""
        # Superclasses match without regard to case: two names that differ only in case
        # cannot be told apart by a query (a handful of groups: checked, not assumed).
        if query and by != "type" and index.count(query) != members.size:
            query = ""
        if not query:  # no label, or one a query cannot name: the neurons themselves
            query = target_text(tuple(members.tolist()))
        members.setflags(write=False)
        groups.append(Group(name or UNLABELLED, query, members))
    return groups


def file_groups(checkpoint: "Checkpoint", path: str | Path) -> list[Group]:
    """The groups of a file of ``NAME: QUERY`` lines (see the module documentation).

    Raises
    ------
    InputError
        (a :class:`SelectionError` for a query) with one line naming the file and line
        that is wrong: unreadable, no ``NAME:``, a repeated name, a bad query, a
        query that selects nothing, or no group at all.
    """
    from flyviz.model.selection import neuron_index, parse

    path = Path(path).expanduser()
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the groups file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"the groups file {path} is not UTF-8 text (undecodable byte at "
                         f"offset {exc.start})") from None
    index = neuron_index(checkpoint)
    groups: list[Group] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path.name}, line {number}"
        name, colon, query = line.partition(":")
        name, query = name.strip(), query.strip()
        if not colon or not name or not query:
            raise InputError(f"{where}: expected 'NAME: QUERY', e.g. 'sensory: "
                             f"superclass:cb_sensory', not {line[:60]!r}")
        if name in seen:
            raise InputError(f"{where}: the group name {name!r} is used on line {seen[name]} "
                             "too; give each group its own name")
        try:
            members = index.select(query).astype(np.int64)
        except SelectionError as exc:
            hint = ""
            try:
                parse(line)
                hint = " (start the line with a name: 'NAME: QUERY')"
            except SelectionError:
                pass
            raise SelectionError(f"{where} ({name}): {exc}{hint}") from None
        seen[name] = number
        members.setflags(write=False)
        groups.append(Group(name, query, members))
    if not groups:
        raise InputError(f"the groups file {path} holds no 'NAME: QUERY' line")
    return groups


def sweep_groups(checkpoint: "Checkpoint", by: str | Path) -> list[Group]:
    """The groups ``--by`` names: a label kind of :data:`BY_LABELS`, or a groups file.

    Raises
    ------
    InputError
        When ``by`` is neither a label kind nor an existing file, or as
        :func:`label_groups` and :func:`file_groups` do.
    """
    check_by(by)
    if str(by) in BY_LABELS:
        return label_groups(checkpoint, str(by))
    return file_groups(checkpoint, by)


def check_by(by: str | Path) -> None:
    """Raise a one-line :class:`InputError` unless ``by`` is a label kind or an existing file."""
    if str(by) in BY_LABELS:
        return
    path = Path(by).expanduser()
    if not path.is_file():
        raise InputError(f"--by {str(by)!r} is neither {', '.join(BY_LABELS)} nor a file of "
                         "'NAME: QUERY' lines")


def groups_digest(groups: list[Group]) -> str:
    """SHA-256 of the groups' names, queries and neurons (what a resumed run must share)."""
    h = hashlib.sha256()
    for group in groups:
        h.update(f"{group.name}\0{group.query}\0{group.size}\0".encode())
        h.update(np.ascontiguousarray(group.neurons, dtype=np.int64).tobytes())
    return h.hexdigest()


__all__ = ["BY_LABELS", "Group", "UNLABELLED", "check_by", "file_groups", "groups_digest",
           "label_groups", "label_query", "sweep_groups"]
