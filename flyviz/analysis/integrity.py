"""Integrity of the Zarr stores flyviz writes: every chunk's size and CRC-32, kept in the store.

Zarr reads a missing chunk as its fill value and hands a damaged one to the
decompressor, so a deleted chunk file, a deleted array folder or a flipped
byte would read as plausible numbers, and a truncated chunk as a decoder
traceback. A store flyviz writes therefore carries, in its root attributes
(``.zattrs``, and the consolidated ``.zmetadata`` beside it), the attribute
:data:`ATTRIBUTE`::

    {"algorithm": "crc32", "arrays": {"mean": {"0": "3850:1f2e3d4c", "1": ...}, ...}}

that is, per array the chunk files that must exist, each with ``SIZE:CRC``: its
size in bytes and the CRC-32 of its bytes as stored (compressed), in hex, and
``"seal"``: the CRC-32 of the store's metadata (every ``.zarray``, ``.zattrs``
and ``.zgroup`` but this attribute, as canonical JSON) together with that list
of chunks, so that an edited dtype, shape, dimension separator or attribute, or
a chunk deleted with its digest entry, is found too (:meth:`StoreVerifier.check_metadata`;
it also checks that every chunk lies inside the grid the shapes imply, and that
the consolidated ``.zmetadata`` says what the files say). :class:`StoreVerifier`
checks the chunks a read touches before Zarr decodes them, and
:meth:`StoreVerifier.check_all` checks the whole store (about 1 GB/s from the
page cache). :func:`seal_store` adds the attribute to a store, rewriting only
its two metadata files (the chunks are not touched), so that stores written
before flyviz kept digests can be sealed in place.

Only the standard library and NumPy; no Zarr needed to check a store.
"""

from __future__ import annotations

import json
import math
import os
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flyviz.fileio import open_regular

#: The root attribute holding the chunk digests.
ATTRIBUTE = "flyviz_integrity"
ALGORITHM = "crc32"


def _crc32(path: Path) -> tuple[int, int]:
    """``(size, crc32)`` of a file, read in blocks."""
    crc = 0
    size = 0
    with open_regular(path, "rb", "chunk") as handle:  # a FIFO would block the read
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


_METADATA_FILES = (".zarray", ".zattrs", ".zgroup")


def store_metadata(root: str | Path) -> dict[str, Any]:
    """The metadata files of the store at ``root`` as :func:`zarr.consolidate_metadata`
    keys them (``"mean/.zarray"``, ``".zattrs"``), parsed, without :data:`ATTRIBUTE`.

    Raises
    ------
    OSError, ValueError
        When a metadata file cannot be read or is not JSON.
    """
    root = Path(root)
    out: dict[str, Any] = {}
    for path in sorted(root.rglob(".z*")):
        if path.name not in _METADATA_FILES:
            continue
        with open_regular(path, "rb", "metadata file") as handle:
            value = json.loads(handle.read().decode("utf-8"))
        key = path.relative_to(root).as_posix()
        if key == ".zattrs" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != ATTRIBUTE}
        out[key] = value
    return out


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def metadata_seal(metadata: dict[str, Any], arrays: dict[str, Any]) -> str:
    """The ``"seal"`` of a store: CRC-32 (hex) of its metadata and its list of chunks."""
    return "%08x" % (zlib.crc32(_canonical({"metadata": metadata, "arrays": arrays}))
                     & 0xFFFFFFFF)


def chunk_grid(meta: Any) -> set[str] | None:
    """The chunk keys an array's ``.zarray`` implies (``0.0``, ``1.0``, ... or ``0/0``),
    or ``None`` when the metadata is not a format-2 array's.

    Raises
    ------
    ValueError
        When the shape, chunks or separator are malformed.
    """
    if not isinstance(meta, dict) or "shape" not in meta or "chunks" not in meta:
        return None
    shape, chunks = meta["shape"], meta["chunks"]
    separator = meta.get("dimension_separator", ".") or "."
    if separator not in (".", "/") or not isinstance(shape, list) or \
            not isinstance(chunks, list) or len(shape) != len(chunks) or \
            any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in shape) or \
            any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in chunks):
        raise ValueError("malformed shape, chunks or dimension separator")
    if not shape:
        return {"0"}
    counts = [math.ceil(s / c) for s, c in zip(shape, chunks)]
    if math.prod(counts) > 10_000_000:
        raise ValueError("an implausible number of chunks")
    keys = [""]
    for n in counts:
        keys = [f"{k}{separator}{i}" if k else str(i) for k in keys for i in range(n)]
    return set(keys) if all(counts) else set()


def chunk_digests(root: str | Path) -> dict[str, Any]:
    """The :data:`ATTRIBUTE` value of the store at ``root`` as it is now on disk."""
    root = Path(root)
    arrays: dict[str, dict[str, str]] = {}
    for name, folder in _array_folders(root).items():
        arrays[name] = {key: "%d:%08x" % _crc32(path)
                        for key, path in _chunk_files(folder).items()}
    return {"algorithm": ALGORITHM, "arrays": arrays,
            "seal": metadata_seal(store_metadata(root), arrays)}


def check_regular_tree(root: str | Path, damaged: Callable[[str], Exception]) -> None:
    """Raise ``damaged(why)`` when anything in the store at ``root`` is neither a folder
    nor a regular file (a FIFO in place of a chunk would block its reader forever)."""
    root = Path(root)
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                mode = os.stat(path).st_mode
            except OSError:
                continue  # a dangling link reads as a missing file, found by the digests
            if not stat.S_ISREG(mode):
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
                raise damaged(f"{path.relative_to(root).as_posix()} is {kind}, not a file")


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
        #: The metadata seal (``None``: sealed before flyviz kept one; chunks only).
        self.seal: str | None = str(digests["seal"]) if self.sealed and "seal" in digests \
            else None
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

    def check_metadata(self, consolidated: Any = None) -> None:
        """Check the store's metadata against its seal, before anything is read from it:
        every metadata file as sealed, the consolidated metadata (``consolidated``: the
        ``"metadata"`` of ``.zmetadata``, or ``None`` to read it) saying the same, and each
        array's chunks inside the grid its shape implies, none missing that Zarr would
        read as a fill value.

        Raises what ``damaged`` makes. A store sealed before flyviz kept a seal is
        checked for its grids only.
        """
        check_regular_tree(self.root, self.damaged)
        if not self.sealed:
            return
        try:
            metadata = store_metadata(self.root)
            if consolidated is None and (self.root / ".zmetadata").is_file():
                with open_regular(self.root / ".zmetadata", "rb", "metadata file") as handle:
                    consolidated = json.loads(handle.read().decode("utf-8")).get("metadata")
        except (OSError, ValueError, AttributeError) as exc:
            raise self.damaged(f"its metadata cannot be read ({type(exc).__name__})") from None
        except Exception as exc:  # a FileAccessError (a FIFO) or another flyviz error
            raise self.damaged(str(exc)) from None
        sealed_metadata = metadata
        if consolidated is not None:
            if not isinstance(consolidated, dict):
                raise self.damaged("its consolidated metadata (.zmetadata) is malformed")
            # What Zarr reads (it opens the consolidated metadata) is what was sealed.
            sealed_metadata = {k: ({a: b for a, b in v.items() if a != ATTRIBUTE}
                                   if k == ".zattrs" and isinstance(v, dict) else v)
                               for k, v in consolidated.items()}
            # The files must say the same (compared as canonical JSON: a NaN fill value is
            # not equal to itself). An array whose whole folder is gone is left to the
            # chunk check, which names it when it is read.
            for key in sorted(set(sealed_metadata) | set(metadata)):
                name = key.rsplit("/", 1)[0] if "/" in key else ""
                if key not in metadata and name and not (self.root / name).is_dir():
                    continue
                if _canonical(sealed_metadata.get(key)) != _canonical(metadata.get(key)):
                    where = f"its '{name}' array" if name else "its root"
                    raise self.damaged(f"the consolidated metadata (.zmetadata) of {where} "
                                       f"differs from its file {key}")
        if self.seal is not None and metadata_seal(sealed_metadata, self.arrays) != self.seal:
            raise self.damaged("its metadata or its list of chunks fails its CRC-32 check "
                               "(an edited dtype, shape or attribute, or a chunk deleted)")
        metadata = sealed_metadata
        for key, meta in metadata.items():
            if not key.endswith("/.zarray"):
                continue
            name = key[: -len("/.zarray")]
            try:
                grid = chunk_grid(meta)
            except ValueError as exc:
                raise self.damaged(f"the metadata of its '{name}' array is malformed "
                                   f"({exc})") from None
            if grid is None:
                continue
            listed = set(self.arrays.get(name, {}))
            outside = sorted(listed - grid)
            if outside:
                raise self.damaged(f"chunk {outside[0]} of its '{name}' array lies outside "
                                   "the shape its metadata gives")
            missing = sorted(grid - listed)
            if missing and meta.get("fill_value") is None:
                raise self.damaged(f"chunk {missing[0]} of its '{name}' array is missing")

    def check_all(self) -> None:
        """Check the metadata (:meth:`check_metadata`) and every chunk of every array the
        digests name."""
        self.check_metadata()
        for name in self.arrays:
            self.check(name)
