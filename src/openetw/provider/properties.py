"""Enable properties a session asked for (EnableTraceEx2's EnableProperty): the extended data
items the provider adds to each event it writes into that session.

``EVENT_ENABLE_PROPERTY_SID`` adds the writing process's user SID (``EXT_SID``; a Unix user is
``S-1-22-1-<uid>``, as Samba and SSSD name them), ``EVENT_ENABLE_PROPERTY_TS_ID`` its terminal
session id (``EXT_TS_ID``: the process's POSIX session, ``getsid``). Only sessions that asked get
them: their pool's write is wrapped, the others' writes stay as they are.
``EVENT_ENABLE_PROPERTY_STACK_TRACE`` adds nothing: a Python provider has no native call stack
to give.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from openetw.etl import layouts as L
from openetw.etl.extended import EXT_SID, EXT_TS_ID, ExtendedItem, encode_extended_items
from openetw.session.enable import EnableProperty

__all__ = ["SUPPORTED", "unix_user_sid", "with_properties"]

WriteFn = Callable[[bytes, int, int], bool]
SUPPORTED = EnableProperty.SID | EnableProperty.TS_ID
_HEADER = L.EVENT_HEADER.size
_FLAGS_AT = 4


def unix_user_sid(uid: int) -> bytes:
    """The binary SID ``S-1-22-1-<uid>``: revision 1, two sub-authorities, authority 22."""
    return struct.pack("<BB", 1, 2) + (22).to_bytes(6, "big") + struct.pack("<II", 1, uid & 0xFFFFFFFF)


def _items(properties: int) -> list[ExtendedItem]:
    items = []
    if properties & EnableProperty.SID:
        items.append(ExtendedItem(EXT_SID, unix_user_sid(os.geteuid())))
    if properties & EnableProperty.TS_ID:
        items.append(ExtendedItem(EXT_TS_ID, struct.pack("<I", os.getsid(0) & 0xFFFFFFFF)))
    return items


def with_properties(write: WriteFn, properties: int) -> WriteFn:
    """``write``, adding the extended items ``properties`` ask for to every EVENT_HEADER record
    (``write`` itself when they ask for none this provider can give)."""
    if not properties & SUPPORTED:
        return write
    items = _items(properties)
    alone = encode_extended_items(items)
    # Followed by the record's own items: the last of ours says more follow (its linkage bit).
    linked = encode_extended_items([*items, ExtendedItem(0, b"")])[: len(alone)]

    def write_with_items(record: bytes, timestamp: int, cpu: int) -> bool:
        if len(record) < _HEADER or record[2] != L.HEADER_TYPE_EVENT_HEADER64 or len(record) + len(alone) > 0xFFFF:
            return write(record, timestamp, cpu)  # a refusal marker, or no room left: as it is
        (flags,) = struct.unpack_from("<H", record, _FLAGS_AT)
        ours = linked if flags & L.EVENT_HEADER_FLAG_EXTENDED_INFO else alone
        head = struct.pack("<H", len(record) + len(ours)) + record[2:_FLAGS_AT]
        head += struct.pack("<H", flags | L.EVENT_HEADER_FLAG_EXTENDED_INFO) + record[_FLAGS_AT + 2 : _HEADER]
        return write(head + ours + record[_HEADER:], timestamp, cpu)

    return write_with_items
