"""Finished work of a corpus run kept on disk, and the fixed tree its partials are merged in.

Partials are merged in a binary tree whose shape depends only on the number of
chunks (chunk ``i`` is leaf ``i``; node ``(level, j)`` merges nodes
``(level - 1, 2j)`` and ``(level - 1, 2j + 1)``), never on which worker
finished first, so 1 worker, 2 workers and a resumed run give the same bits.
Each finished node is written to a :class:`PartialStore` on disk (``OUT.parts``
beside the result; its children deleted) as soon as it exists, so an
interrupted run loses only the chunks in flight: ``--resume`` continues from
the stored nodes. :func:`flyviz.analysis.cluster.run_tree` drives both.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flyviz.model.errors import InputError

Partial = dict[str, np.ndarray]
Merge = Callable[[Partial, Partial], Partial]


def _save_npz(path: Path, partial: Partial) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            np.savez(handle, **partial)  # type: ignore[arg-type]  # numpy's stub types the first kwarg
        os.replace(tmp, path)
    except OSError:  # a full disk: no torn node is left for --resume to trip on
        tmp.unlink(missing_ok=True)
        raise


def _load_npz(path: Path) -> Partial:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


class PartialStore:
    """A folder of finished tree nodes (``node-<level>-<j>.npz``) and the run's key.

    Parameters
    ----------
    folder
        Where the nodes live.
    key
        What the partials depend on (model, corpus, settings, chunk plan); a
        store made under another key cannot be resumed.
    """

    def __init__(self, folder: str | Path, key: dict[str, Any]) -> None:
        self.folder = Path(folder)
        self.key = json.loads(json.dumps(key, sort_keys=True))

    @property
    def manifest(self) -> Path:
        return self.folder / "run.json"

    def exists(self) -> bool:
        """True when a store (of any key) is at the folder: a whole ``run.json``, or finished
        nodes. A store whose ``run.json`` is empty or torn (a full disk as it was written)
        and that holds no node has no work to keep: it does not count (:meth:`torn`)."""
        return self.manifest.is_file() and (not self.torn() or bool(self.nodes()))

    def torn(self) -> bool:
        """True when ``run.json`` is there but is not a whole JSON object (0 bytes, cut)."""
        try:
            return not isinstance(json.loads(self.manifest.read_text(encoding="utf-8")), dict)
        except (OSError, ValueError):
            return self.manifest.exists()

    def create(self) -> None:
        """Start an empty store (replacing any old one). ``run.json`` is written through a
        temporary file; when it cannot be (a full disk), no store is left behind."""
        from flyviz.fileio import os_error

        try:
            if self.folder.exists():
                shutil.rmtree(self.folder)
            self.folder.mkdir(parents=True)
            tmp = self.manifest.with_name("run.json.tmp")
            tmp.write_text(json.dumps(self.key, indent=1, sort_keys=True) + "\n",
                           encoding="utf-8")
            os.replace(tmp, self.manifest)
        except OSError as exc:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise os_error(exc, self.folder, "write") from None

    def check_resumable(self) -> None:
        """Raise unless the store was made under the same key. A store whose ``run.json``
        is torn and that holds no node is started again (there is nothing to lose)."""
        if self.manifest.is_file() and self.torn() and not self.nodes():
            self.create()
            return
        if not self.exists():
            raise InputError(f"nothing to resume: {self.folder} does not exist; run without "
                             "--resume")
        try:
            key = json.loads(self.manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise InputError(f"{self.manifest} is damaged; delete {self.folder} and start "
                             "over") from None
        if key != self.key:
            changed = sorted(k for k in set(key) | set(self.key) if key.get(k) != self.key.get(k))
            raise InputError(f"cannot resume: the interrupted run in {self.folder} was made "
                             f"with other {', '.join(changed)}; run with the same options, or "
                             f"delete {self.folder} to start over")

    def _path(self, node: tuple[int, int]) -> Path:
        return self.folder / f"node-{node[0]}-{node[1]}.npz"

    def nodes(self) -> list[tuple[int, int]]:
        """The stored nodes."""
        found = []
        for path in self.folder.glob("node-*-*.npz"):
            try:
                _, level, j = path.stem.split("-")
                found.append((int(level), int(j)))
            except ValueError:
                continue
        return sorted(found)

    def save(self, node: tuple[int, int], partial: Partial) -> None:
        _save_npz(self._path(node), partial)

    def load(self, node: tuple[int, int]) -> Partial:
        try:
            return _load_npz(self._path(node))
        except Exception as exc:  # zipfile, zlib and numpy each raise their own on damage
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:100]
            raise InputError(f"{self._path(node)} is damaged ({why}); delete {self.folder} "
                             "and start over") from None

    def intact(self, node: tuple[int, int]) -> bool:
        """True when the node's file is a whole ``.npz`` whose members pass their CRC-32
        (read through once; nothing is kept in memory)."""
        import zipfile

        try:
            with zipfile.ZipFile(self._path(node)) as archive:
                return bool(archive.namelist()) and archive.testzip() is None
        except Exception:  # empty, truncated, not a zip, unreadable
            return False

    def rename(self, old: tuple[int, int], new: tuple[int, int]) -> None:
        os.replace(self._path(old), self._path(new))

    def delete(self, node: tuple[int, int]) -> None:
        self._path(node).unlink(missing_ok=True)

    def remove(self) -> None:
        """Delete the whole store (after a successful run)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def parts_folder(out: Path) -> Path:
    """Where a run that writes ``out`` keeps its finished nodes until it is written
    (``OUT.parts`` beside it)."""
    return out.with_name(out.name + ".parts")


def check_parts(out: Path, resume: bool) -> None:
    """Refuse now (before the model or the corpus is read) a run whose ``--resume`` cannot
    work: nothing to resume with ``resume``, or an interrupted run that a fresh start would
    throw away without it. Whether a kept run matches is known only with the corpus
    (:func:`open_store`)."""
    store = PartialStore(parts_folder(out), {})
    if store.manifest.is_file() and store.torn() and not store.nodes():
        return  # a store cut off as it was started (a full disk): the run rewrites it
    if resume and not store.exists():
        raise InputError(f"nothing to resume: {store.folder} does not exist; run without "
                         "--resume")
    if not resume and store.exists():
        raise InputError(f"an interrupted run is kept in {store.folder}: add --resume to "
                         f"continue it, or delete {store.folder} to start over")


def check_new_run(out: Path, resume: bool, what: str) -> None:
    """What a command with ``--resume`` checks of its ``--out`` before the model loads: a
    finished result there is refused (:func:`flyviz.fileio.check_new_result`) unless
    ``resume`` continues an interrupted run kept beside it, which writes there; then
    :func:`check_parts`.

    Raises
    ------
    InputError
        One line naming the path and what to do.
    """
    from flyviz.fileio import check_new_result

    continuing = resume and PartialStore(parts_folder(out), {}).exists()
    check_new_result(out, what, continuing=continuing)
    check_parts(out, resume)


def open_store(out: Path, key: dict[str, Any], resume: bool) -> PartialStore:
    """The :class:`PartialStore` of a run that writes ``out``, checked (before any status
    line is printed) against ``resume``.

    Raises
    ------
    InputError
        When an interrupted run is kept there and ``resume`` is off: a fresh
        start would silently throw its finished chunks away; when ``resume``
        is on and there is nothing to resume, or the kept run was made with
        other options.
    """
    check_parts(out, resume)
    store = PartialStore(parts_folder(out), key)
    if resume:
        store.check_resumable()
    return store


class MergeTree:
    """The fixed binary tree over ``leaves`` chunks; merges partials as they arrive.

    ``merge(left, right)`` is always called with the lower-numbered node on
    the left, and a node without a sibling moves up unchanged.
    """

    def __init__(self, leaves: int, merge: Merge, store: PartialStore | None = None) -> None:
        if leaves < 1:
            raise ValueError("a merge tree needs at least one leaf")
        self.leaves = leaves
        self.levels = max(0, math.ceil(math.log2(leaves)))
        self.merge = merge
        self.store = store
        self.held: dict[tuple[int, int], Partial | None] = {}  # None: on disk, not loaded

    def exists(self, node: tuple[int, int]) -> bool:
        level, j = node
        return j >= 0 and j * (1 << level) < self.leaves

    def covers(self, node: tuple[int, int]) -> range:
        level, j = node
        return range(j << level, min((j + 1) << level, self.leaves))

    def restore(self, log: Callable[[str], None] | None = None) -> set[int]:
        """Take the nodes of the store; return the leaves they already cover.

        A node whose file is damaged (empty, truncated, failing its CRC) is
        deleted and its chunks are computed again; ``log`` is told so.
        """
        assert self.store is not None
        nodes = [n for n in self.store.nodes() if self.exists(n) and n[0] <= self.levels]
        damaged = [n for n in nodes if not self.store.intact(n)]
        for node in damaged:
            self.store.delete(node)
            nodes.remove(node)
        if damaged and log is not None:
            chunks = sum(len(self.covers(n)) for n in damaged)
            log(f"note: {len(damaged)} saved part file(s) were damaged and are computed again "
                f"({chunks} chunk(s))")
        covered: set[int] = set()
        # Highest first: a node whose ancestor is stored too (a run stopped between
        # saving a parent and deleting its children) is dropped.
        for node in sorted(nodes, key=lambda n: -n[0]):
            leaves = set(self.covers(node))
            if leaves & covered:
                self.store.delete(node)
                continue
            covered |= leaves
            self.held[node] = None
        return covered

    def _value(self, node: tuple[int, int]) -> Partial:
        value = self.held.pop(node)
        if value is None:
            assert self.store is not None
            value = self.store.load(node)
        return value

    def add(self, node: tuple[int, int], value: Partial, *, stored: bool = False) -> None:
        """A finished node: merge upwards as far as the siblings allow."""
        while node[0] < self.levels:
            level, j = node
            sibling = (level, j ^ 1)
            parent = (level + 1, j >> 1)
            if not self.exists(sibling):
                if self.store is not None:
                    if not stored:
                        self.store.save(node, value)
                    self.store.rename(node, parent)
                    stored = True
                node = parent
                continue
            if sibling not in self.held:
                self.held[node] = value
                if self.store is not None and not stored:
                    self.store.save(node, value)
                return
            other = self._value(sibling)
            left, right = (value, other) if j < sibling[1] else (other, value)
            value = self.merge(left, right)
            if self.store is not None:
                self.store.save(parent, value)
                self.store.delete(node)
                self.store.delete(sibling)
            stored = True
            node = parent
        self.held[node] = value
        if self.store is not None and not stored:
            self.store.save(node, value)

    def saved_chunks(self) -> int:
        """How many chunks the finished nodes cover: those kept in the store (what
        ``--resume`` will not compute again), or held here when there is no store."""
        nodes = self.store.nodes() if self.store is not None else list(self.held)
        covered: set[int] = set()
        for node in nodes:
            if self.exists(node) and node[0] <= self.levels:
                covered.update(self.covers(node))
        return len(covered)

    def restored_pending(self) -> None:
        """Combine nodes restored from disk that are siblings of each other."""
        for node in sorted(self.held, key=lambda n: (n[0], n[1])):
            if node in self.held and self.held.get(node) is None:
                value = self._value(node)
                self.add(node, value, stored=True)

    def result(self) -> Partial:
        """The root, once every leaf has arrived."""
        root = (self.levels, 0)
        if root not in self.held:
            raise RuntimeError("the merge tree is not complete")
        return self._value(root)


__all__ = ["MergeTree", "Partial", "PartialStore", "check_parts", "open_store", "parts_folder"]
