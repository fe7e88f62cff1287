"""Whether an index file may be believed, and whether one may be kept in a folder.

An index is derived data that a reader believes instead of the trace: one that someone else
planted beside a file (``FILE.etl.idx``) could make a reader see fewer events, or other ones.
So an index is read only when it is a regular file (not a link) owned by the reading user or
root that nobody else can write, in a folder nobody else can write to (or one with the sticky
bit, where others cannot replace it); otherwise it is built again and kept in the user's cache.
An index that passes is still checked for structure before use (``index_problem``; columns
read alone: ``columns_problem``, and the ones that say where records are, ``PLACE_COLUMNS``,
with the others ``rows_problem`` needs).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from openetw.consumer._engine.index_build import KIND_CODES
from openetw.etl import layouts as L
from openetw.etl.record import RECORD_CLASSES

__all__ = [
    "HEADER_COLUMNS", "PLACE_CHECKED", "PLACE_COLUMNS", "buffer_positions", "columns_problem", "index_problem", "may_keep_index_in", "rows_problem",
    "untrusted_reason",
]  # fmt: skip

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _trusted_owner(owner: int, uid: int) -> bool:
    return owner in (uid, 0)


def _folder_reason(folder: Path, uid: int) -> str | None:
    try:
        info = os.stat(folder)
    except OSError as exc:
        return f"its folder cannot be examined: {exc.strerror or exc}"
    if not _trusted_owner(info.st_uid, uid) and not info.st_mode & stat.S_ISVTX:
        return f"its folder belongs to uid {info.st_uid}"
    if info.st_mode & _OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        return "others may write to its folder"
    return None


def untrusted_reason(location: str | os.PathLike[str], *, uid: int | None = None) -> str | None:
    """Why the index file at ``location`` may not be believed by ``uid`` (default: this
    process's effective user), or ``None`` when it may. A missing file has a reason too."""
    reader = os.geteuid() if uid is None else uid
    path = Path(location)
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"it cannot be examined: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    if not _trusted_owner(info.st_uid, reader):
        return f"it belongs to uid {info.st_uid}, not to uid {reader} or root"
    if info.st_mode & _OTHERS_WRITE:
        return "others may write to it"
    return _folder_reason(path.parent, reader)


def may_keep_index_in(folder: str | os.PathLike[str], *, uid: int | None = None) -> bool:
    """Whether an index written into ``folder`` could be believed later (see the module's text)."""
    return _folder_reason(Path(folder), os.geteuid() if uid is None else uid) is None


def _header_sizes() -> tuple[np.ndarray, np.ndarray]:
    """Per header type: the kind code its record class has (255: none), and its header's size."""
    kind_of = np.full(256, 255, dtype=np.int64)
    size_of = np.zeros(256, dtype=np.int64)
    for header_type, cls in RECORD_CLASSES.items():
        kind_of[header_type] = KIND_CODES[cls.kind]
        size_of[header_type] = cls.layout.size  # type: ignore[union-attr]
    return kind_of, size_of


_KIND_OF_TYPE, _HEADER_SIZE = _header_sizes()
_WPP, _UNKNOWN = KIND_CODES["wpp"], KIND_CODES["unknown"]
MAX_INDEXED_BUFFER = 64 << 20  # ETW's buffers are at most 16 MB; a compressed one says what it holds


def index_problem(records: np.ndarray, buffers: np.ndarray, providers: np.ndarray, meta: dict[str, Any], file_size: int) -> str | None:
    """What is structurally wrong with a loaded index of a file of ``file_size`` bytes, or
    ``None``: every buffer must lie in the file, every row point into the provider table, to a
    buffer the table has, and hold a record of its kind that ends inside that buffer."""
    try:
        if providers.ndim != 2 or providers.shape[1:] != (16,) or providers.dtype != np.uint8:
            return "the provider table is not a table of GUIDs"
        if buffers.ndim != 1 or records.ndim != 1:
            return "the tables are not one-dimensional"
        if not isinstance(meta.get("errors", []), list):
            return "'errors' is not a list"
        for key in ("unknown_reasons", "read_stats"):
            if not isinstance(meta.get(key, {}), dict):
                return f"{key!r} is not an object"
        for row in meta.get("unknown_reasons", {}):
            int(row)
        starts = buffers["file_offset"].astype(np.int64)
        sizes = buffers["buffer_size"].astype(np.int64)
        lengths = buffers["length"].astype(np.int64)
        if (starts < 0).any() or (starts + np.minimum(sizes, lengths) > file_size).any():
            return "a buffer lies outside the file"
        if (lengths > MAX_INDEXED_BUFFER).any() or (buffers["data_end"].astype(np.int64) > MAX_INDEXED_BUFFER).any():
            return "a buffer is larger than any buffer can be"
        if len(np.unique(buffers["index"])) != len(buffers):
            return "two buffers have one number"
        return rows_problem(records, buffers, len(providers)) if len(records) else None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return f"it cannot be checked: {exc}"


HEADER_COLUMNS = frozenset({
    "timestamp", "filetime", "keyword", "provider", "pid", "tid", "cpu", "id", "version", "task", "hook_id", "flags", "kind", "level", "opcode",
    "channel",
})  # fmt: skip
"""The columns that say what a record is, not where it is: read alone, they point into nothing
but the provider table, so ``columns_problem`` is all they need checked."""


def columns_problem(columns: dict[str, np.ndarray], providers: int) -> str | None:
    """What is wrong with header columns (``HEADER_COLUMNS``) read from an index whose provider
    table has ``providers`` rows, or ``None``: each column as long as the others, every
    provider code in the table (or -1), every kind a kind."""
    lengths = {len(values) for values in columns.values()}
    if len(lengths) > 1:
        return "its columns differ in length"
    provider = columns.get("provider")
    if provider is not None and len(provider) and (int(provider.min()) < -1 or int(provider.max()) >= providers):
        return "a row names a provider the table does not have"
    kind = columns.get("kind")
    if kind is not None and len(kind) and int(kind.max()) > _UNKNOWN:
        return "a row has an unknown kind"
    return None


PLACE_COLUMNS = frozenset({"buffer", "offset", "size", "user_data_offset", "user_data_length", "header_type"})
"""The columns that say where a record is in its file: read from an index, they are checked
together with ``PLACE_CHECKED`` (``rows_problem``) before anything reads the file at them."""
PLACE_CHECKED = ("provider", "kind", *sorted(PLACE_COLUMNS))


def buffer_positions(buffers: np.ndarray) -> np.ndarray:
    """Each buffer number's row in the buffer table ``buffers`` (numbers unique), -1 for none."""
    numbers = buffers["index"].astype(np.int64)
    positions = np.full(int(numbers.max()) + 1 if len(numbers) else 0, -1, dtype=np.int64)
    positions[numbers] = np.arange(len(numbers))
    return positions


def rows_problem(records: Any, buffers: np.ndarray, providers: int, positions: np.ndarray | None = None) -> str | None:
    """What is wrong with rows (a structured array, or a mapping of the ``PLACE_CHECKED``
    columns) of an index whose buffer table is ``buffers`` (checked already) and whose provider
    table has ``providers`` rows, or ``None``: every row points into the provider table, to a
    buffer the table has, and holds a record of its kind that ends inside that buffer.
    ``positions``: ``buffer_positions(buffers)``, when the caller keeps it."""
    try:
        provider = records["provider"].astype(np.int64)
        if (provider < -1).any() or (provider >= providers).any():
            return "a row names a provider the table does not have"
        kind = records["kind"].astype(np.int64)
        if (kind > _UNKNOWN).any():
            return "a row has an unknown kind"
        if positions is None:
            positions = buffer_positions(buffers)
        number = records["buffer"].astype(np.int64)
        if not len(positions) or int(number.max()) >= len(positions):
            return "a row names a buffer the table does not have"
        position = positions[number]
        if int(position.min()) < 0:
            return "a row names a buffer the table does not have"
        header_type = records["header_type"].astype(np.int64)
        typed = kind < _WPP
        if (typed & (_KIND_OF_TYPE[header_type] != kind)).any():
            return "a row's kind does not match its header type"
        least = np.where(typed, _HEADER_SIZE[header_type], np.where(kind == _WPP, L.MESSAGE_TRACE_HEADER.size, 0))
        size = records["size"].astype(np.int64)
        if (size < least).any():
            return "a row's record is shorter than its header"
        if (records["offset"].astype(np.int64) + size > buffers["length"].astype(np.int64)[position]).any():
            return "a row's record ends past its buffer"
        if (records["user_data_offset"].astype(np.int64) + records["user_data_length"].astype(np.int64) > size).any():
            return "a row's user data ends past its record"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        return f"it cannot be checked: {exc}"
    return None
