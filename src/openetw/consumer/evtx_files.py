"""Telling an ``.evtx`` file by its first bytes, and mapping one: what a command needs before it
knows which reader to open, without the ``.etl`` source machinery (numpy, the index) of
``openetw.consumer.sources``."""

from __future__ import annotations

import mmap
import os
from typing import Any

from openetw.errors import InvalidArgument
from openetw.evtx import layout as EL

__all__ = ["is_evtx_file", "map_file"]


def is_evtx_file(path: str | os.PathLike[str]) -> bool:
    """An ``.evtx`` by its first bytes (``ElfFile``), else by its name."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(EL.FILE_MAGIC)) == EL.FILE_MAGIC
    except OSError:
        return os.fspath(path).lower().endswith(".evtx")


def map_file(path: str) -> Any:
    """The file's bytes, mapped (an empty file reads as ``b""``)."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return b""
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise InvalidArgument(f"no such file: {path}") from None
    except IsADirectoryError:
        raise InvalidArgument(f"{path} is a directory, not an .evtx file") from None
