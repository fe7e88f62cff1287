"""Stubs of the compiled write side (``_write.c``); the pure twins are the reference:
``ipc/pool.py`` (the pool write, take and release), ``provider/encode_source.py`` (the
generated ``write_fast``), ``provider/runtime.py`` (``TraceLoggingProvider.write``) and
``service/screen.py`` (the screen of producer buffers)."""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from _typeshed import ReadableBuffer, WriteableBuffer

class PoolWriter:
    def __init__(self, mapping: WriteableBuffer, buffer_size: int, buffer_count: int, logger_id: int, full: Callable[[int], None] | None) -> None: ...
    def write(self, record: ReadableBuffer, timestamp: int, cpu: int = 0) -> bool: ...
    def flush(self) -> bool: ...
    def orphan(self) -> None: ...
    def release(self) -> None: ...

class FastWrite:
    def __init__(
        self,
        plan: tuple[Any, ...],
        python: Callable[..., Any],
        route: list[Any],
        activity: ContextVar[Any],
        no_activity: object,
        pid: list[int],
        clock: Callable[[], int] | None,
        unmapped: tuple[type[BaseException], ...],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

class TraceLoggingWrite:
    def __init__(self, provider: object, method: Callable[..., bool]) -> None: ...
    def __call__(self, event_name: str, *args: Any, **fields: Any) -> bool: ...

def take_release_into(pool: WriteableBuffer, index: int, buffer_size: int, logger_id: int, out: WriteableBuffer, /) -> bool: ...
def screen(
    data: ReadableBuffer, pid: int, providers: frozenset[bytes], secured: frozenset[bytes], classic: bool, least: bytes,
    thread_ok: Callable[[int], bool], known: set[int] | None, /,
) -> tuple[int, int, list[list[int]] | None, list[tuple[int, int, int]]]: ...
def constants() -> dict[str, Any]: ...
