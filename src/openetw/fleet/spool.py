"""A streaming session's messages waiting for the fleet: in memory, then on disk, in order.

One FIFO of ``Item``s: the oldest may be in a file (``spill`` moves the head of memory to the
end of the file, so the file always holds the older part), the newest in memory. ``pop`` takes
from the file first. The file is truncated whenever it has been read to its end.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Item", "Spool"]

# sequence, events, events lost, buffers lost, gap first, gap last (-1: none), kind, payload length
_RECORD = struct.Struct("<QIQQqqBI")
_KIND_CODES = {"header": 0, "buffer": 1, "end": 2}
_KIND_NAMES = {code: kind for kind, code in _KIND_CODES.items()}


@dataclass
class Item:
    sequence: int
    kind: str
    payload: bytes | bytearray
    events: int
    events_lost: int
    buffers_lost: int
    gap: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return len(self.payload)


class Spool:
    """Items in order; ``spill`` sends memory's oldest to ``path`` (made on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._memory: deque[Item] = deque()
        self.memory_bytes = 0
        self.disk_bytes = 0  # payload bytes in the file not read yet
        self.disk_items = 0
        self._fd = -1
        self._read_at = 0
        self._write_at = 0
        self.spilled = 0  # items ever written to the file

    def __len__(self) -> int:
        return len(self._memory) + self.disk_items

    def push(self, item: Item) -> None:
        self._memory.append(item)
        self.memory_bytes += item.size

    def spill(self, keep_bytes: int) -> None:
        """Write memory's oldest items to the file until memory holds at most ``keep_bytes``."""
        while self._memory and self.memory_bytes > keep_bytes:
            item = self._memory.popleft()
            self.memory_bytes -= item.size
            self._append(item)

    def pop(self) -> Item | None:
        if self.disk_items:
            return self._read()
        if self._memory:
            item = self._memory.popleft()
            self.memory_bytes -= item.size
            return item
        return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            try:
                self.path.unlink()
            except OSError:
                pass

    def _append(self, item: Item) -> None:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        gap_first, gap_last = item.gap if item.gap is not None else (-1, -1)
        record = _RECORD.pack(item.sequence, item.events, item.events_lost, item.buffers_lost, gap_first, gap_last,
                              _KIND_CODES[item.kind], len(item.payload))  # fmt: skip
        data = record + item.payload
        written = os.pwrite(self._fd, data, self._write_at)
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], self._write_at + written)
        self._write_at += len(data)
        self.disk_items += 1
        self.disk_bytes += item.size
        self.spilled += 1

    def _read(self) -> Item:
        head = os.pread(self._fd, _RECORD.size, self._read_at)
        sequence, events, events_lost, buffers_lost, gap_first, gap_last, kind, length = _RECORD.unpack(head)
        payload = os.pread(self._fd, length, self._read_at + _RECORD.size) if length else b""
        self._read_at += _RECORD.size + length
        self.disk_items -= 1
        self.disk_bytes -= length
        if not self.disk_items:
            os.ftruncate(self._fd, 0)
            self._read_at = self._write_at = 0
        gap = (gap_first, gap_last) if gap_first >= 0 else None
        return Item(sequence, _KIND_NAMES[kind], payload, events, events_lost, buffers_lost, gap)
