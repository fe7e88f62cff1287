"""Stubs of the compiled read side (``_read.c``); the pure twins are the reference."""

from typing import Any

from _typeshed import ReadableBuffer, WriteableBuffer

def inflate(data: ReadableBuffer, output_size: int, /) -> bytes: ...
def configure(base: type, classes: dict[int, type], message_class: type, /) -> None: ...
def walk(data: bytes, pos: int, end: int, cpu: int, ctx: object, buffer_index: int, limit: int, /) -> tuple[list[Any], int, int, int, int, int]: ...
def chains(blob: ReadableBuffer, bases: ReadableBuffer, ends: ReadableBuffer, /) -> tuple[bytes, bytes, bytes, bytes]: ...
def rows(
    blob: ReadableBuffer, offsets: ReadableBuffer, sizes: ReadableBuffer, positions: ReadableBuffer, bases: ReadableBuffer,
    cpus: ReadableBuffer, indices: ReadableBuffer, groups: ReadableBuffer, aliases: ReadableBuffer, extension: ReadableBuffer,
    column_at: ReadableBuffer, out: WriteableBuffer, row_size: int, lo: WriteableBuffer, hi: WriteableBuffer, has: WriteableBuffer, /,
) -> None: ...
def field(index: int, doc: str | None = ..., /) -> Any: ...
def constants() -> dict[str, Any]: ...

STOP_END: int
STOP_UNKNOWN_TYPE: int
STOP_NO_HEADER: int
STOP_HEADER_PAST: int
STOP_SIZE: int
STOP_MORE: int
