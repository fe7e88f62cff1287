"""Stubs of the compiled timeline encoders (``_timeline.c``); the pure twins are the reference:
``export/timeline/perfetto.py`` (``PerfettoWriter._annotations``) and ``export/timeline/chrome.py``
(``_args`` written by the writer's JSON encoder)."""

from collections.abc import Callable
from typing import Any

def perfetto_annotations(
    args: dict[str, Any],
    limit: int,
    prefixes: dict[str, bytes],
    arg_prefix: Callable[[str, list[bytes]], bytes],
    new: list[bytes],
    other: Callable[[str, Any, list[bytes]], bytes],
    /,
) -> bytes: ...
def perfetto_track_event(
    ts: int,
    state: bytes,
    head: bytes,
    args: dict[str, Any] | None,
    limit: int,
    prefixes: dict[str, bytes],
    arg_prefix: Callable[[str, list[bytes]], bytes],
    new: list[bytes],
    other: Callable[[str, Any, list[bytes]], bytes],
    extra: bytes,
    /,
) -> bytes | None: ...
def chrome_args(args: dict[str, Any], /) -> str | None: ...
def constants() -> dict[str, int]: ...
