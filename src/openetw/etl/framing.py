"""How records sit in a buffer, declared once: the marker, one row per header type, the walk.

``layouts.py`` says what each structure holds; this module says how a reader finds them. Every
walker of buffers in the project (the streaming reader, the consumer's index, the service's
record counts, the writers of kernel and provider records) takes its constants from here, and
each fast walker is tested against :func:`walk`, the plain reference.

**The marker.** Every record starts with a u32 whose byte 2 is the header type and byte 3 the
marker flags. A *typed* record has both top flag bits set (``flags & 0xC0 == 0xC0``, normally
exactly ``0xC0``); a WPP message has ``flags & 0xD0 == 0x90``. ``marker >> 16`` is the *marker
key* (flags << 8 | header type), one table lookup for the common case. A buffer's unused tail is
``0xFF`` filled, so a marker of ``0xFFFFFFFF`` ends the record chain.

**The chain.** Records start right after the WMI_BUFFER_HEADER, each at the previous one's
start plus its Size rounded up to 8 bytes; the chain ends at the buffer's ``Offset`` field (the
end of valid data, the header included).

**Where Size sits.** EVENT_HEADER, EVENT_TRACE_HEADER (and the instance form) and
MESSAGE_TRACE_HEADER keep Size first; SYSTEM_TRACE_HEADER (full and compact) and
PERFINFO_TRACE_HEADER keep the Version first and Size after the marker (offset 4).

**The SYSTEM extension rule.** A SYSTEM or PERFINFO header whose Version word has bits in its
high byte is followed by an 8-byte extension when bit 15 is set, and by 8 bytes per PMC counter
(bits 8-10) before the user data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from openetw.etl import layouts as L

__all__ = [
    "BUFFER_OFFSET_AT",
    "BUFFER_SIZE_AT",
    "BUFFER_TIMESTAMP_AT",
    "END_OF_DATA",
    "HEADER_KINDS",
    "MARKER_FLAGS_SHIFT",
    "MARKER_KEY_SHIFT",
    "MESSAGE_FLAGS",
    "MESSAGE_FLAGS_MASK",
    "MESSAGE_KIND",
    "MIN_RECORD_SIZE",
    "PRODUCER_SIZE_AT",
    "RECORDS_START",
    "RECORD_ALIGNMENT",
    "TYPED_FLAGS",
    "TYPED_FLAGS_MASK",
    "Framed",
    "HeaderKind",
    "Problem",
    "Unframed",
    "aligned",
    "field_offsets",
    "header_type_of",
    "is_message",
    "is_typed",
    "kind_of_marker",
    "marker_bits",
    "system_header_extension",
    "typed_key",
    "walk",
]

# -- the marker ------------------------------------------------------------------------------
MARKER_TYPE_SHIFT = L.MARKER_TYPE_SHIFT  # 16, byte 2: the header type
MARKER_FLAGS_SHIFT = L.MARKER_FLAGS_SHIFT  # 24, byte 3: the marker flags
MARKER_KEY_SHIFT = 16  # marker >> 16 == flags << 8 | header type
TYPED_FLAGS = L.MARKER_FLAGS_TYPED  # 0xC0, what writers put there
TYPED_FLAGS_MASK = 0xC0  # a reader accepts any flags with these bits set as typed
MESSAGE_FLAGS = L.MARKER_FLAGS_MESSAGE  # 0x90 (WPP / TraceMessage)
MESSAGE_FLAGS_MASK = 0xD0
END_OF_DATA = 0xFFFFFFFF  # a buffer's unused tail is 0xFF filled

# -- the chain -------------------------------------------------------------------------------
RECORD_ALIGNMENT = 8
MIN_RECORD_SIZE = 8  # no header is shorter than its marker and size
RECORDS_START = L.BUFFER_HEADER_SIZE
BUFFER_SIZE_AT = L.WMI_BUFFER_HEADER.offset("BufferSize")
BUFFER_OFFSET_AT = L.WMI_BUFFER_HEADER.offset("Offset")  # the end of valid data
BUFFER_TIMESTAMP_AT = L.WMI_BUFFER_HEADER.offset("TimeStamp")


def aligned(size: int) -> int:
    """The step from one record to the next: ``size`` rounded up to the record alignment."""
    return (size + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT


def header_type_of(marker: int) -> int:
    return (marker >> MARKER_TYPE_SHIFT) & 0xFF


def is_typed(flags: int) -> bool:
    """Whether marker flags frame a typed record (SYSTEM, PERFINFO, classic or EVENT_HEADER)."""
    return flags & TYPED_FLAGS_MASK == TYPED_FLAGS_MASK


def is_message(flags: int) -> bool:
    """Whether marker flags frame a WPP message."""
    return flags & MESSAGE_FLAGS_MASK == MESSAGE_FLAGS


def typed_key(header_type: int) -> int:
    """The marker key (``marker >> 16``) writers give a typed record of ``header_type``."""
    return TYPED_FLAGS << 8 | header_type


# Writers build markers with it too, and load ``layouts`` without this module.
marker_bits = L.marker_bits


def system_header_extension(version_field: int) -> int:
    """Bytes between a SYSTEM/PERFINFO header and its user data: an extension and PMC counters."""
    if version_field & 0xFF00 == 0:
        return 0
    return (8 if version_field & 0x8000 else 0) + 8 * ((version_field >> 8) & 7)


def field_offsets(layout: L.Layout) -> dict[str, tuple[int, str]]:
    """Every field of ``layout``: (byte offset in the header, struct code)."""
    return {name: (layout.offset(name), code) for name, code in layout.fields}


# -- one row per header type ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class HeaderKind:
    """How a header type frames a record."""

    header_type: int
    kind: str  # EventRecord.kind: system, compact, perfinfo, classic, instance, event, wpp
    layout: L.Layout
    pointer_size: int
    size_index: int  # where the unpacked header tuple keeps Size
    size_at: int  # where Size sits in the header's bytes
    system_extension: bool  # the SYSTEM extension rule applies (Version first, see module doc)
    timestamp_index: int | None  # where the unpacked tuple keeps the timestamp (None: not in the header)

    @property
    def header_size(self) -> int:
        return self.layout.size

    @property
    def structure(self) -> str:
        return self.layout.name


def _row(header_type: int, kind: str, layout: L.Layout, pointer_size: int, timestamp: str | None) -> HeaderKind:
    return HeaderKind(
        header_type, kind, layout, pointer_size, layout.index("Size"), layout.offset("Size"),
        kind in _VERSION_FIRST, layout.index(timestamp) if timestamp else None,
    )  # fmt: skip


_VERSION_FIRST = ("system", "compact", "perfinfo")  # the kinds with Version first and the extension rule


HEADER_KINDS: dict[int, HeaderKind] = {
    row.header_type: row
    for row in (
        _row(L.HEADER_TYPE_SYSTEM32, "system", L.SYSTEM_TRACE_HEADER, 4, "SystemTime"),
        _row(L.HEADER_TYPE_SYSTEM64, "system", L.SYSTEM_TRACE_HEADER, 8, "SystemTime"),
        _row(L.HEADER_TYPE_COMPACT32, "compact", L.COMPACT_SYSTEM_TRACE_HEADER, 4, "SystemTime"),
        _row(L.HEADER_TYPE_COMPACT64, "compact", L.COMPACT_SYSTEM_TRACE_HEADER, 8, "SystemTime"),
        _row(L.HEADER_TYPE_PERFINFO32, "perfinfo", L.PERFINFO_TRACE_HEADER, 4, "SystemTime"),
        _row(L.HEADER_TYPE_PERFINFO64, "perfinfo", L.PERFINFO_TRACE_HEADER, 8, "SystemTime"),
        _row(L.HEADER_TYPE_FULL_HEADER32, "classic", L.EVENT_TRACE_HEADER, 4, "TimeStamp"),
        _row(L.HEADER_TYPE_FULL_HEADER64, "classic", L.EVENT_TRACE_HEADER, 8, "TimeStamp"),
        _row(L.HEADER_TYPE_INSTANCE32, "instance", L.EVENT_INSTANCE_HEADER, 4, "TimeStamp"),
        _row(L.HEADER_TYPE_INSTANCE64, "instance", L.EVENT_INSTANCE_HEADER, 8, "TimeStamp"),
        _row(L.HEADER_TYPE_EVENT_HEADER32, "event", L.EVENT_HEADER, 4, "TimeStamp"),
        _row(L.HEADER_TYPE_EVENT_HEADER64, "event", L.EVENT_HEADER, 8, "TimeStamp"),
    )
}
"""Typed header types (framed under ``TYPED_FLAGS``)."""

MESSAGE_KIND = HeaderKind(
    L.HEADER_TYPE_MESSAGE, "wpp", L.MESSAGE_TRACE_HEADER, 0, L.MESSAGE_TRACE_HEADER.index("Size"),
    L.MESSAGE_TRACE_HEADER.offset("Size"), False, None,
)  # fmt: skip
"""WPP messages (framed under ``MESSAGE_FLAGS``, whatever byte 2 holds); pointer size 0: from the flags."""

# Producers (EventWrite, TraceEvent) write EVENT_HEADER and EVENT_TRACE_HEADER records only: their
# Size is the record's first u16, which lets the service count a pool buffer's records fast.
PRODUCER_SIZE_AT = L.EVENT_HEADER.offset("Size")
assert PRODUCER_SIZE_AT == L.EVENT_TRACE_HEADER.offset("Size") == L.EVENT_INSTANCE_HEADER.offset("Size") == 0
assert all(row.size_at in (0, 4) and row.header_size >= MIN_RECORD_SIZE for row in HEADER_KINDS.values())


def kind_of_marker(marker: int) -> HeaderKind | None:
    """The row that frames a record starting with ``marker``; ``None``: no known record starts here."""
    flags = marker >> MARKER_FLAGS_SHIFT
    if is_typed(flags):
        return HEADER_KINDS.get(header_type_of(marker))
    if is_message(flags):
        return MESSAGE_KIND
    return None


# -- the plain reference walk -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Framed:
    """A record: where it starts in the buffer's data, its Size, and its row."""

    pos: int
    size: int
    kind: HeaderKind


@dataclass(frozen=True, slots=True)
class Unframed:
    """Bytes where no known record starts (kept as an unknown record): up to the data's end."""

    pos: int
    size: int
    reason: str


@dataclass(frozen=True, slots=True)
class Problem:
    """Damage, with where it is: the file offset, the buffer, the structure being read, and how
    many bytes it makes a lenient reader skip."""

    message: str
    offset: int
    buffer_index: int
    structure: str
    skipped: int


def walk(
    data: bytes,
    *,
    data_end: int,
    buffer_size: int,
    compressed: bool = False,
    file_offset: int = 0,
    buffer_index: int = 0,
) -> Iterator[Framed | Unframed | Problem]:
    """The records of one buffer, then what is wrong with it: the reference every walker matches.

    ``data`` is the buffer as read (header included, inflated when it was compressed, short when
    the file ends inside it); ``data_end`` its ``Offset`` field, ``buffer_size`` its
    ``BufferSize``. Positions are in ``data``; a problem's ``offset`` is in the file (the
    buffer's own offset for an inflated buffer, whose positions are not the file's).
    """
    end, length = data_end, len(data)
    truncated = length < buffer_size and not compressed
    late: Problem | None = None
    offset_structure = "WMI_BUFFER_HEADER.Offset"
    if end > length:
        if not truncated and not compressed:
            late = Problem(f"Offset {end:#x} is past the buffer end {length:#x}", file_offset + BUFFER_OFFSET_AT, buffer_index, offset_structure, 0)
        end = length
    elif end < RECORDS_START and not compressed:
        late = Problem(f"Offset {end:#x} is inside the buffer header", file_offset + BUFFER_OFFSET_AT, buffer_index, offset_structure, 0)
    pos = RECORDS_START
    problem: tuple[str, str] | None = None
    while pos + 4 <= end:
        marker = int.from_bytes(data[pos : pos + 4], "little")
        if marker == END_OF_DATA:
            break
        row = kind_of_marker(marker)
        if row is None:
            typed = is_typed(marker >> MARKER_FLAGS_SHIFT)
            unknown = f"unknown header type {header_type_of(marker):#04x}"
            yield Unframed(pos, end - pos, unknown if typed else f"no record header at this position (marker {marker:#010x})")
            break
        if pos + row.header_size > end:
            problem = ("record header runs past the buffer's data", row.structure)
            break
        size = int.from_bytes(data[pos + row.size_at : pos + row.size_at + 2], "little")
        if size < row.header_size or pos + size > end:
            problem = (f"record size {size:#x} is out of range", f"{row.structure}.Size")
            break
        yield Framed(pos, size, row)
        pos += aligned(size)
    where = file_offset + (pos if not compressed else 0)
    if problem is not None:
        message, structure = problem
        if truncated and end == length:
            message = f"file ends inside a record ({message})"
        yield Problem(message, where, buffer_index, structure, end - pos)
    elif truncated:
        yield Problem(f"file ends inside a buffer ({length} of {buffer_size} bytes)", file_offset + length, buffer_index, "buffer", 0)
    if late is not None:
        yield late
