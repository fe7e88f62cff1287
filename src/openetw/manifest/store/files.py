"""File primitives for the stores: atomic replacement, an exclusive lock, bounded regular-file reads."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from openetw.safeio import NotARegularFile, TooLarge, read_regular_file  # noqa: F401 - re-exported

# A file everyone may read (the system store is readable by all users).
READABLE_BY_ALL = 0o644


def write_atomically(path: Path, data: bytes, mode: int = READABLE_BY_ALL) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new one, never a part.

    The bytes go to a fresh temporary file in the same directory, are flushed to disk, and the
    temporary file is renamed over ``path``. A symlink at ``path`` is replaced, not followed.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``path`` (created when missing) for the ``with`` body."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, READABLE_BY_ALL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


