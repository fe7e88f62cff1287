"""Data types for classic (MOF) event layouts: a class, its events, their fields.

Layouts are data only. A field names a TDH in-type as a string; sizes that depend on the
producer's pointer width (``POINTER``, ``SIZET``, ``WBEMSID``) are resolved by the decoder,
which learns the width from the record header (SYSTEM32/SYSTEM64, ...).

Field vocabulary
----------------
``in_type``
    ``INT8 UINT8 INT16 UINT16 INT32 UINT32 INT64 UINT64 FLOAT DOUBLE`` (little-endian),
    ``POINTER`` / ``SIZET`` (4 or 8 bytes), ``FILETIME`` (8), ``GUID`` (16, Windows layout),
    ``UNICODESTRING`` (UTF-16LE), ``ANSISTRING`` (8-bit), ``SID`` (a bare SID),
    ``WBEMSID`` (kernel SID: a u32 of 0 alone, or a TOKEN_USER of two pointers then a SID),
    ``BINARY`` (raw bytes; needs ``length``).
``out_type``
    An optional TDH out-type: ``HEXINT8/16/32/64``, ``IPV4`` (u32 in network order),
    ``IPV6`` (16-byte BINARY), ``PORT`` (u16 in network order), ``NTSTATUS``.
    In- and out-type strings are the member names of ``openetw.manifest.winmeta.InType`` /
    ``OutType``.
``length``
    Strings: a number of characters for fixed arrays (``WCHAR[N]`` is
    ``UNICODESTRING`` with ``length=N``, NUL padded); ``None`` means NUL-terminated.
    ``BINARY``: a number of bytes. Either may name an earlier field holding the value, or be
    ``REST`` (everything left in the payload).
``count``
    Makes the field an array: a number, the name of an earlier integer field, or ``REST``
    (repeat until the payload ends).
``optional``
    The field may be missing at the end of the payload: some Windows builds log the same
    version with and without it (Thread v3 ``ThreadName``).

``POINTER`` fields hold addresses and handles (shown in hex); pointer-sized counts and sizes are
``SIZET`` (shown in decimal). ``INT64`` time fields hold QPC values or FILETIMEs as logged.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

REST: Final = "*"
"""``length``/``count`` value meaning "the rest of the payload"."""

INT8: Final = "INT8"
UINT8: Final = "UINT8"
INT16: Final = "INT16"
UINT16: Final = "UINT16"
INT32: Final = "INT32"
UINT32: Final = "UINT32"
INT64: Final = "INT64"
UINT64: Final = "UINT64"
POINTER: Final = "POINTER"
SIZET: Final = "SIZET"
FILETIME: Final = "FILETIME"
GUID: Final = "GUID"
UNICODESTRING: Final = "UNICODESTRING"
ANSISTRING: Final = "ANSISTRING"
SID: Final = "SID"
WBEMSID: Final = "WBEMSID"
BINARY: Final = "BINARY"

HEXINT8: Final = "HEXINT8"
HEXINT16: Final = "HEXINT16"
HEXINT32: Final = "HEXINT32"
HEXINT64: Final = "HEXINT64"
IPV4: Final = "IPV4"
IPV6: Final = "IPV6"
PORT: Final = "PORT"
NTSTATUS: Final = "NTSTATUS"

FIXED_SIZES: Final[dict[str, int]] = {
    INT8: 1, UINT8: 1, INT16: 2, UINT16: 2, INT32: 4, UINT32: 4, INT64: 8, UINT64: 8,
    "FLOAT": 4, "DOUBLE": 8, FILETIME: 8, GUID: 16,
}
POINTER_SIZED: Final = frozenset({POINTER, SIZET})
IN_TYPES: Final = frozenset(FIXED_SIZES) | POINTER_SIZED | {
    UNICODESTRING, ANSISTRING, SID, WBEMSID, BINARY,
}
OUT_TYPES: Final = frozenset({HEXINT8, HEXINT16, HEXINT32, HEXINT64, IPV4, IPV6, PORT, NTSTATUS})


@dataclass(frozen=True, slots=True)
class MofField:
    name: str
    in_type: str
    out_type: str | None = None
    length: int | str | None = None
    count: int | str | None = None
    optional: bool = False

    def static_size(self, pointer_size: int) -> int | None:
        """Bytes taken by this field, or ``None`` when only the payload can tell."""
        if isinstance(self.count, str):
            return None
        per_item = _item_size(self, pointer_size)
        if per_item is None:
            return None
        return per_item * (1 if self.count is None else self.count)


def _item_size(field: MofField, pointer_size: int) -> int | None:
    if field.in_type in FIXED_SIZES:
        return FIXED_SIZES[field.in_type]
    if field.in_type in POINTER_SIZED:
        return pointer_size
    if not isinstance(field.length, int):
        return None
    if field.in_type == UNICODESTRING:
        return 2 * field.length
    if field.in_type in (ANSISTRING, BINARY):
        return field.length
    return None


@dataclass(frozen=True, slots=True)
class MofEvent:
    """One (opcode, version) layout. ``provider_name``/``task_name`` override the class's
    names for the few events PerfView files elsewhere (``Dispatcher/ReadyThread``,
    ``VirtualMem/Alloc``, and ``MSNT_SystemTrace/...`` for events its kernel parser lacks)."""

    opcode: int
    version: int
    event_name: str
    fields: tuple[MofField, ...]
    provider_name: str | None = None
    task_name: str | None = None

    def static_size(self, pointer_size: int) -> tuple[int, bool]:
        """``(bytes of the fields whose size is known up front, whether any size is not)``.

        With no variable field the first value is the exact payload length; otherwise the
        payload is at least that long (optional trailing fields are left out of the sum).
        """
        total = 0
        variable = False
        for field in self.fields:
            size = field.static_size(pointer_size)
            if field.optional or size is None:
                variable = True
            else:
                total += size
        return total, variable


@dataclass(frozen=True, slots=True)
class MofClass:
    """An event class: every event logged under one event GUID (and one kernel group)."""

    guid: uuid.UUID
    provider_name: str
    task_name: str
    group: int | None
    events: tuple[MofEvent, ...]


def versions(
    versions_: tuple[int, ...],
    names: dict[int, str],
    fields: tuple[MofField, ...],
    *,
    provider_name: str | None = None,
    task_name: str | None = None,
) -> tuple[MofEvent, ...]:
    """The same field list under several opcodes (``{opcode: event name}``) and versions."""
    return tuple(
        MofEvent(opcode, version, name, fields, provider_name, task_name)
        for version in versions_
        for opcode, name in names.items()
    )
