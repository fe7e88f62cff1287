"""Every on-disk ETL layout, declared once and used by both the reader and the writer.

Field names are the Windows ones (``BufferSize``, ``SavedOffset``); a layout unpacks to a tuple in
declaration order and packs from one, so ``layout.pack(*layout.unpack_from(b, 0)) == b[:size]``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any


class Layout:
    """A little-endian C structure: named fields, one ``struct.Struct``."""

    __slots__ = ("name", "fields", "struct", "size", "_index", "_offsets", "unpack_from", "pack", "pack_into")

    def __init__(self, name: str, fields: Iterable[tuple[str, str]]) -> None:
        self.name = name
        self.fields = tuple(fields)
        self.struct = struct.Struct("<" + "".join(code for _, code in self.fields))
        self.size = self.struct.size
        self._index = {field: i for i, (field, _) in enumerate(self.fields)}
        self._offsets: dict[str, int] = {}
        offset = 0
        for field, code in self.fields:
            self._offsets[field] = offset
            offset += struct.calcsize("<" + code)
        self.unpack_from = self.struct.unpack_from
        self.pack = self.struct.pack
        self.pack_into = self.struct.pack_into

    def index(self, field: str) -> int:
        """Position of ``field`` in an unpacked tuple."""
        return self._index[field]

    def offset(self, field: str) -> int:
        return self._offsets[field]

    def as_dict(self, values: tuple[Any, ...]) -> dict[str, Any]:
        return {field: value for (field, _), value in zip(self.fields, values, strict=True)}

    def pack_dict(self, values: dict[str, Any]) -> bytes:
        missing = [field for field, _ in self.fields if field not in values]
        if missing:
            raise KeyError(f"{self.name}: missing fields {missing}")
        return self.struct.pack(*(values[field] for field, _ in self.fields))

    def __repr__(self) -> str:
        return f"Layout({self.name}, {self.size:#x} bytes)"


WMI_BUFFER_HEADER = Layout(
    "WMI_BUFFER_HEADER",
    [
        ("BufferSize", "I"),
        ("SavedOffset", "I"),
        ("CurrentOffset", "I"),
        ("ReferenceCount", "i"),
        ("TimeStamp", "q"),
        ("SequenceNumber", "q"),
        ("ClockTypeFrequency", "Q"),
        ("ProcessorIndex", "H"),  # u8 number + u8 alignment unless BufferFlag has PROCESSOR_INDEX
        ("LoggerId", "H"),
        ("State", "I"),
        ("Offset", "I"),
        ("BufferFlag", "H"),
        ("BufferType", "H"),
        ("KernelPointers", "16s"),
    ],
)
BUFFER_HEADER_SIZE = WMI_BUFFER_HEADER.size  # 0x48
# ETW's largest buffer (EVENT_TRACE_PROPERTIES.BufferSize at most 16384 KB): a compressed buffer
# that says it holds more is damage (or a bomb), whatever its compressed bytes would expand to.
ETW_MAX_BUFFER_SIZE = 16 << 20

# BufferFlag bits
BUFFER_FLAG_FLUSH_MARKER = 0x0001
BUFFER_FLAG_EVENTS_LOST = 0x0002
BUFFER_FLAG_BUFFER_LOST = 0x0004
BUFFER_FLAG_RTBACKUP_CORRUPT = 0x0008
BUFFER_FLAG_RTBACKUP = 0x0010
BUFFER_FLAG_PROCESSOR_INDEX = 0x0020
BUFFER_FLAG_COMPRESSED = 0x0040

# BufferType values
BUFFER_TYPE_GENERIC = 0
BUFFER_TYPE_RUNDOWN = 1
BUFFER_TYPE_CTX_SWAP = 2
BUFFER_TYPE_REFTIME = 3
BUFFER_TYPE_HEADER = 4
BUFFER_TYPE_BATCHED = 5
BUFFER_TYPE_EMPTY_MARKER = 6
BUFFER_TYPE_DBG_INFO = 7

# The first u32 of every record: byte 2 is the header type, byte 3 the marker flags.
MARKER_FLAGS_TYPED = 0xC0
MARKER_FLAGS_MESSAGE = 0x90
MARKER_TYPE_SHIFT = 16
MARKER_FLAGS_SHIFT = 24


def marker_bits(header_type: int, flags: int = MARKER_FLAGS_TYPED) -> int:
    """The header type and flags in place in a record's first u32 (or u64)."""
    return header_type << MARKER_TYPE_SHIFT | flags << MARKER_FLAGS_SHIFT


HEADER_TYPE_SYSTEM32 = 0x01
HEADER_TYPE_SYSTEM64 = 0x02
HEADER_TYPE_COMPACT32 = 0x03
HEADER_TYPE_COMPACT64 = 0x04
HEADER_TYPE_FULL_HEADER32 = 0x0A
HEADER_TYPE_INSTANCE32 = 0x0B
HEADER_TYPE_MESSAGE = 0x0F
HEADER_TYPE_PERFINFO32 = 0x10
HEADER_TYPE_PERFINFO64 = 0x11
HEADER_TYPE_EVENT_HEADER32 = 0x12
HEADER_TYPE_EVENT_HEADER64 = 0x13
HEADER_TYPE_FULL_HEADER64 = 0x14
HEADER_TYPE_INSTANCE64 = 0x15

# SYSTEM_TRACE_HEADER (and its compact form): Version, HeaderType and flags share the marker u32.
SYSTEM_TRACE_HEADER = Layout(
    "SYSTEM_TRACE_HEADER",
    [
        ("Version", "H"),
        ("HeaderType", "B"),
        ("MarkerFlags", "B"),
        ("Size", "H"),
        ("HookId", "H"),
        ("ThreadId", "I"),
        ("ProcessId", "I"),
        ("SystemTime", "q"),
        ("KernelTime", "I"),
        ("UserTime", "I"),
    ],
)
COMPACT_SYSTEM_TRACE_HEADER = Layout("SYSTEM_TRACE_HEADER(compact)", SYSTEM_TRACE_HEADER.fields[:8])

PERFINFO_TRACE_HEADER = Layout(
    "PERFINFO_TRACE_HEADER",
    [
        ("Version", "H"),
        ("HeaderType", "B"),
        ("MarkerFlags", "B"),
        ("Size", "H"),
        ("HookId", "H"),
        ("SystemTime", "q"),
    ],
)

EVENT_TRACE_HEADER = Layout(
    "EVENT_TRACE_HEADER",
    [
        ("Size", "H"),
        ("HeaderType", "B"),
        ("MarkerFlags", "B"),
        ("Type", "B"),
        ("Level", "B"),
        ("Version", "H"),
        ("ThreadId", "I"),
        ("ProcessId", "I"),
        ("TimeStamp", "q"),
        ("Guid", "16s"),
        ("KernelTime", "I"),
        ("UserTime", "I"),
    ],
)

EVENT_INSTANCE_HEADER = Layout(
    "EVENT_INSTANCE_HEADER",
    EVENT_TRACE_HEADER.fields
    + (
        ("InstanceId", "I"),
        ("ParentInstanceId", "I"),
        ("ParentGuid", "16s"),
    ),
)

EVENT_HEADER = Layout(
    "EVENT_HEADER",
    [
        ("Size", "H"),
        ("HeaderType", "B"),
        ("MarkerFlags", "B"),
        ("Flags", "H"),
        ("EventProperty", "H"),
        ("ThreadId", "I"),
        ("ProcessId", "I"),
        ("TimeStamp", "q"),
        ("ProviderId", "16s"),
        ("Id", "H"),
        ("Version", "B"),
        ("Channel", "B"),
        ("Level", "B"),
        ("Opcode", "B"),
        ("Task", "H"),
        ("Keyword", "Q"),
        ("ProcessorTime", "Q"),  # KernelTime u32 + UserTime u32 unless EVENT_HEADER_FLAG_NO_CPUTIME
        ("ActivityId", "16s"),
    ],
)

# EVENT_HEADER.Flags
EVENT_HEADER_FLAG_EXTENDED_INFO = 0x0001
EVENT_HEADER_FLAG_PRIVATE_SESSION = 0x0002
EVENT_HEADER_FLAG_STRING_ONLY = 0x0004
EVENT_HEADER_FLAG_TRACE_MESSAGE = 0x0008
EVENT_HEADER_FLAG_NO_CPUTIME = 0x0010
EVENT_HEADER_FLAG_32_BIT_HEADER = 0x0020
EVENT_HEADER_FLAG_64_BIT_HEADER = 0x0040
EVENT_HEADER_FLAG_CLASSIC_HEADER = 0x0100

EVENT_HEADER_EXTENDED_ITEM = Layout(
    "EVENT_HEADER_EXTENDED_DATA_ITEM",
    [
        ("ItemSize", "H"),
        ("ExtType", "H"),
        ("Linkage", "H"),
        ("DataSize", "H"),
    ],
)

# WPP (TraceMessage): u16 Size, u8 HeaderType (0x0F), u8 marker flags 0x90, then the message header.
MESSAGE_TRACE_HEADER = Layout(
    "MESSAGE_TRACE_HEADER",
    [
        ("Size", "H"),
        ("HeaderType", "B"),
        ("MarkerFlags", "B"),
        ("MessageNumber", "H"),
        ("OptionFlags", "H"),
    ],
)
TRACE_MESSAGE_SEQUENCE = 0x01
TRACE_MESSAGE_GUID = 0x02
TRACE_MESSAGE_COMPONENTID = 0x04
TRACE_MESSAGE_TIMESTAMP = 0x08
TRACE_MESSAGE_PERFORMANCE_TIMESTAMP = 0x10
TRACE_MESSAGE_SYSTEMINFO = 0x20
TRACE_MESSAGE_POINTER32 = 0x40
TRACE_MESSAGE_POINTER64 = 0x80


def trace_logfile_header(pointer_size: int) -> Layout:
    """TRACE_LOGFILE_HEADER for 4- or 8-byte pointers (0x110 or 0x118 bytes)."""
    return _LOGFILE_HEADERS[pointer_size]


def _logfile_header(pointer_size: int) -> Layout:
    pointer = "I" if pointer_size == 4 else "Q"
    return Layout(
        f"TRACE_LOGFILE_HEADER{pointer_size * 8}",
        [
            ("BufferSize", "I"),
            ("Version", "I"),
            ("ProviderVersion", "I"),
            ("NumberOfProcessors", "I"),
            ("EndTime", "q"),
            ("TimerResolution", "I"),
            ("MaximumFileSize", "I"),
            ("LogFileMode", "I"),
            ("BuffersWritten", "I"),
            ("StartBuffers", "I"),
            ("PointerSize", "I"),
            ("EventsLost", "I"),
            ("CpuSpeedInMHz", "I"),
            ("LoggerName", pointer),
            ("LogFileName", pointer),
            ("TimeZone", "172s"),
            ("Padding", "4s"),
            ("BootTime", "q"),
            ("PerfFreq", "q"),
            ("StartTime", "q"),
            ("ReservedFlags", "I"),
            ("BuffersLost", "I"),
        ],
    )


_LOGFILE_HEADERS = {4: _logfile_header(4), 8: _logfile_header(8)}

# LogFileMode bits a reader and writer care about.
EVENT_TRACE_FILE_MODE_SEQUENTIAL = 0x00000001
EVENT_TRACE_FILE_MODE_CIRCULAR = 0x00000002
EVENT_TRACE_FILE_MODE_NEWFILE = 0x00000008
EVENT_TRACE_REAL_TIME_MODE = 0x00000100
EVENT_TRACE_RELOG_MODE = 0x00010000
EVENT_TRACE_COMPRESSED_MODE = 0x04000000

# Clock types (TRACE_LOGFILE_HEADER.ReservedFlags).
CLOCK_QPC = 1
CLOCK_SYSTEM_TIME = 2
CLOCK_CPU_CYCLE = 3
