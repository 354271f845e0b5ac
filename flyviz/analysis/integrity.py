"""Integrity of the Zarr stores flyviz writes: every chunk's size and CRC-32, kept in the store.

Zarr reads a missing chunk as its fill value and hands a damaged one to the
decompressor, so a deleted chunk file, a deleted array folder or a flipped
byte would read as plausible numbers, and a truncated chunk as a decoder
traceback. A store flyviz writes therefore carries, in its root attributes
(``.zattrs``, and the consolidated ``.zmetadata`` beside it), the attribute
:data:`ATTRIBUTE`::

    {"algorithm": "crc32", "arrays": {"mean": {"0": "3850:1f2e3d4c", "1": ...}, ...}}

that is, per array the chunk files that must exist, each with ``SIZE:CRC``: its
size in bytes and the CRC-32 of its bytes as stored (compressed), in hex. :class:`StoreVerifier`
checks the chunks a read touches before Zarr decodes them, and
:meth:`StoreVerifier.check_all` checks the whole store (about 1 GB/s from the
page cache). :func:`seal_store` adds the attribute to a store, rewriting only
its two metadata files (the chunks are not touched), so that stores written
before flyviz kept digests can be sealed in place.

Only the standard library and NumPy; no Zarr needed to check a store.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The root attribute holding the chunk digests.
ATTRIBUTE = "flyviz_integrity"
ALGORITHM = "crc32"


def _crc32(path: Path) -> tuple[int, int]:
    """``(size, crc32)`` of a file, read in blocks."""
    crc = 0
    size = 0
    with open(path, "rb") as handle:
        while True:
            block = handle.read(1 << 20)
            if not block:
                break
            crc = zlib.crc32(block, crc)
            size += len(block)
    return size, crc & 0xFFFFFFFF


def _array_folders(root: Path) -> dict[str, Path]:
    """Every array of a format-2 store: name (``a`` or ``group/a``) -> folder."""
    found = {}
    for meta in sorted(root.rglob(".zarray")):
        found[meta.parent.relative_to(root).as_posix()] = meta.parent
    return found


def _chunk_files(folder: Path) -> dict[str, Path]:
    """An array folder's chunk files, by chunk key (``0.3``, or ``0/3`` when nested)."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            files[path.relative_to(folder).as_posix()] = path
    return files


def chunk_digests(root: str | Path) -> dict[str, Any]:
    """The :data:`ATTRIBUTE` value of the store at ``root`` as it is now on disk."""
    root = Path(root)
    arrays: dict[str, dict[str, str]] = {}
    for name, folder in _array_folders(root).items():
        arrays[name] = {key: "%d:%08x" % _crc32(path)
                        for key, path in _chunk_files(folder).items()}
    return {"algorithm": ALGORITHM, "arrays": arrays}


def _write_json(path: Path, value: Any, indent: int | None) -> None:
    # Laid out as Zarr writes them (.zattrs indented, .zmetadata on one line).
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=indent), encoding="utf-8")
    os.replace(tmp, path)


def seal_store(root: str | Path) -> dict[str, Any]:
    """Record the digests of every chunk of the store at ``root`` in its root attributes
    (``.zattrs``) and in its consolidated metadata (``.zmetadata``, when it has one).

    Only those two files are rewritten; the chunks are read, not changed. Call it on a
    finished store (after :func:`zarr.consolidate_metadata`). Returns the attribute.
    """
    root = Path(root)
    digests = chunk_digests(root)
    attrs_path = root / ".zattrs"
    attrs = json.loads(attrs_path.read_text(encoding="utf-8")) if attrs_path.is_file() else {}
    attrs[ATTRIBUTE] = digests
    _write_json(attrs_path, attrs, 2)
    consolidated = root / ".zmetadata"
    if consolidated.is_file():
        meta = json.loads(consolidated.read_text(encoding="utf-8"))
        meta.setdefault("metadata", {})[".zattrs"] = attrs
        _write_json(consolidated, meta, None)
    return digests


class StoreVerifier:
    """Checks a sealed store's chunks against its digests before they are read.

    Parameters
    ----------
    root
        The store folder.
    digests
        Its :data:`ATTRIBUTE` value (``None``: the store carries none, and
        :attr:`sealed` is False; nothing is checked).
    damaged
        ``damaged(why) -> Exception``: the one-line error to raise.
    """

    def __init__(self, root: str | Path, digests: Any,
                 damaged: Callable[[str], Exception]) -> None:
        self.root = Path(root)
        self.damaged = damaged
        self.sealed = isinstance(digests, dict) and digests.get("algorithm") == ALGORITHM \
            and isinstance(digests.get("arrays"), dict)
        self.arrays: dict[str, dict[str, str]] = digests["arrays"] if self.sealed else {}
        self._checked: set[tuple[str, str]] = set()
        self._row_chunk: dict[str, int] = {}

    def _check_chunk(self, name: str, key: str, expected: Any) -> None:
        if (name, key) in self._checked:
            return
        path = self.root / name / key
        try:
            size, crc = _crc32(path)
        except FileNotFoundError:
            folder = self.root / name
            what = f"its '{name}' array folder is missing" if not folder.is_dir() else \
                f"chunk {key} of its '{name}' array is missing"
            raise self.damaged(what) from None
        except OSError as exc:
            raise self.damaged(f"chunk {key} of '{name}' cannot be read: "
                               f"{exc.strerror or exc}") from None
        try:
            size_text, crc_text = str(expected).split(":")
            want_size, want_crc = int(size_text), int(crc_text, 16)
        except ValueError:
            raise self.damaged(f"its digest of chunk {key} of '{name}' is malformed") from None
        if size != want_size:
            raise self.damaged(f"chunk {key} of its '{name}' array has {size:,} bytes, not "
                               f"{want_size:,} (truncated or replaced)")
        if crc != want_crc:
            raise self.damaged(f"chunk {key} of its '{name}' array fails its CRC-32 check")
        self._checked.add((name, key))

    def _rows_per_chunk(self, name: str) -> int:
        if name not in self._row_chunk:
            try:
                meta = json.loads((self.root / name / ".zarray").read_text(encoding="utf-8"))
                chunks = meta.get("chunks") or [0]
                self._row_chunk[name] = max(1, int(chunks[0])) if chunks else 0
            except (OSError, ValueError, TypeError):
                raise self.damaged(f"the metadata of its '{name}' array is missing or not "
                                   "JSON") from None
        return self._row_chunk[name]

    def check(self, name: str, start: int | None = None, stop: int | None = None) -> None:
        """Check the chunks of array ``name`` that rows ``start:stop`` (along the first
        axis; all of it by default) fall in.

        Raises what ``damaged`` makes, naming the array and the chunk, when a
        chunk that must exist is missing or does not match its size and CRC-32.
        """
        if not self.sealed:
            return
        expected = self.arrays.get(name)
        if expected is None:
            raise self.damaged(f"it has no digests of its '{name}' array")
        if not expected:
            return
        lo = hi = None
        if start is not None or stop is not None:
            rows = self._rows_per_chunk(name)
            if rows:
                lo = (start or 0) // rows
                hi = None if stop is None else max(lo, (stop - 1) // rows)
        for key, digest in expected.items():
            if lo is not None:
                first = int(key.replace("/", ".").split(".")[0])
                if first < lo or (hi is not None and first > hi):
                    continue
            self._check_chunk(name, key, digest)

    def check_all(self) -> None:
        """Check every chunk of every array the digests name."""
        for name in self.arrays:
            self.check(name)
