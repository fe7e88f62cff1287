"""The EventHeader interceptor format of LinuxTracepoints' tests: EventHeader events as a
provider wrote them, without perf or a kernel.

Each entry is a little-endian u32 size (of the whole entry, the size included), the
tracepoint name NUL-terminated, then the event's bytes (eventheader, extensions, payload).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from openetw.errors import PerfDataFormatError

__all__ = ["interceptor_events"]


def interceptor_events(data: bytes) -> Iterator[tuple[int, str, bytes]]:
    """(offset of the event bytes, tracepoint name, event bytes) of each entry; a damaged entry
    raises ``PerfDataFormatError`` after every good one before it."""
    pos = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise PerfDataFormatError(
                f"{len(data) - pos} bytes left, too few for an entry size", offset=pos, structure="interceptor entry"
            )
        size = struct.unpack_from("<I", data, pos)[0]
        if size < 5 or pos + size > len(data):
            raise PerfDataFormatError(
                f"entry of {size} bytes with {len(data) - pos} left", offset=pos, structure="interceptor entry"
            )
        nul = data.find(b"\0", pos + 4, pos + size)
        if nul < 0:
            raise PerfDataFormatError("tracepoint name without its NUL", offset=pos + 4, structure="interceptor entry")
        yield nul + 1, data[pos + 4 : nul].decode("utf-8", "replace"), bytes(data[nul + 1 : pos + size])
        pos += size
