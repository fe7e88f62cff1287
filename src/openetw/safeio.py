"""Reading files named by a user without trusting them: regular files only, with a size cap."""

from __future__ import annotations

import os
import stat
from pathlib import Path


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
