"""Reading files named by a user without trusting them: regular files only, with a size cap;
and writing files made from others with their privacy (``mode_like``, ``create_output``)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

PRIVATE_MODE = 0o600


def mode_like(*sources: str | os.PathLike[str]) -> int:
    """The permission bits a file made from ``sources`` may have: the read and write bits every
    source has (a copy is never more open than its most private input), 0600 when a source
    cannot be examined."""
    bits = 0o666
    for source in sources:
        try:
            bits &= stat.S_IMODE(os.stat(source).st_mode)
        except OSError:
            return PRIVATE_MODE & bits
    return bits


def create_output(path: str | os.PathLike[str], mode: int, flags: int = os.O_WRONLY) -> int:
    """A descriptor of ``path`` opened to be written from the start: a new file is created with
    ``mode`` (narrowed further by the umask) from its first moment; a file that existed is
    emptied and keeps at most ``mode``'s bits (narrowed before anything is written to it)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        current = stat.S_IMODE(os.fstat(fd).st_mode)
        if current & ~mode & 0o7777:
            os.fchmod(fd, current & mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def umask_like(*sources: str | os.PathLike[str]) -> Iterator[None]:
    """Within: the files and folders this process makes take ``sources``' privacy (for writers
    that create files themselves). The group's and others' bits the sources lack are added to
    the umask (no read: no access at all; no write: no write), which only ever narrows."""
    bits = mode_like(*sources)
    mask = 0
    for shift in (3, 0):
        have = (bits >> shift) & 0o7
        if not have & 0o4:
            mask |= 0o7 << shift
        elif not have & 0o2:
            mask |= 0o2 << shift
    old = os.umask(0o077)
    os.umask(old | mask)
    try:
        yield
    finally:
        os.umask(old)


class NotARegularFile(OSError):
    """The path names a directory, a device, a FIFO or a socket."""


class TooLarge(OSError):
    """The file is larger than the caller accepts."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), refusing anything else.

    Devices and FIFOs are refused before a byte is read (``/dev/zero`` would never end), and
    at most ``limit`` bytes are accepted.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile("not a regular file (a directory, device, FIFO or socket)")
        if info.st_size > limit:
            raise TooLarge(f"larger than {limit} bytes")
        chunks = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
