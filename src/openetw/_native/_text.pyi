"""Stub of the compiled row writer (``_text.c``); the pure twin (``openetw.export.row_text``) is the reference."""

from typing import Any

def rows(n: int, pieces: list[tuple[Any, ...]], end: bytes, offsets: bool = ..., /) -> bytes | tuple[bytes, bytes]: ...
