"""Stubs of the compiled tracefs page decoder (``_tracefs.c``); the pure twin
(``kernel/ringbuffer_batch.py``) is the reference."""

from typing import Any

def decode_batch(
    pages: list[bytes], cpu: int, params: tuple[int, ...], plan: list[Any], fixed: tuple[bytes, bytes, tuple[Any, ...], int] | None,
    out: list[Any], /,
) -> tuple[tuple[bytearray, bytearray, tuple[bytearray, ...]] | None, int, int, int, int, list[int | None]]: ...
