"""Stubs of the compiled EventPipe row walk (``_nettrace.c``); the pure twin is the reference:
``nettrace/events.py`` (``rows_v3``, ``_v4_rows``, ``_compressed_rows``)."""

from typing import Any

def walk(
    data: Any, start: int, end: int, base: int, mode: int, limit: int, null: bytes, /
) -> tuple[tuple[list[Any], ...], int, bool]: ...
def constants() -> dict[str, int]: ...
