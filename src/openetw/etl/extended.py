"""EVENT_HEADER extended data items, decoded into typed objects."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from openetw.guids import guid_from_le

EXT_RELATED_ACTIVITYID = 1
EXT_SID = 2
EXT_TS_ID = 3
EXT_INSTANCE_INFO = 4
EXT_STACK_TRACE32 = 5
EXT_STACK_TRACE64 = 6
EXT_PEBS_INDEX = 7
EXT_PMC_COUNTERS = 8
EXT_PSM_KEY = 9
EXT_EVENT_KEY = 10
EXT_EVENT_SCHEMA_TL = 11
EXT_PROV_TRAITS = 12
EXT_PROCESS_START_KEY = 13
EXT_CONTROL_GUID = 14
EXT_QPC_DELTA = 15
EXT_CONTAINER_ID = 16
EXT_STACK_KEY32 = 17
EXT_STACK_KEY64 = 18

EXT_TYPE_NAMES = {
    EXT_RELATED_ACTIVITYID: "RELATED_ACTIVITYID",
    EXT_SID: "SID",
    EXT_TS_ID: "TS_ID",
    EXT_INSTANCE_INFO: "INSTANCE_INFO",
    EXT_STACK_TRACE32: "STACK_TRACE32",
    EXT_STACK_TRACE64: "STACK_TRACE64",
    EXT_PEBS_INDEX: "PEBS_INDEX",
    EXT_PMC_COUNTERS: "PMC_COUNTERS",
    EXT_PSM_KEY: "PSM_KEY",
    EXT_EVENT_KEY: "EVENT_KEY",
    EXT_EVENT_SCHEMA_TL: "EVENT_SCHEMA_TL",
    EXT_PROV_TRAITS: "PROV_TRAITS",
    EXT_PROCESS_START_KEY: "PROCESS_START_KEY",
    EXT_CONTROL_GUID: "CONTROL_GUID",
    EXT_QPC_DELTA: "QPC_DELTA",
    EXT_CONTAINER_ID: "CONTAINER_ID",
    EXT_STACK_KEY32: "STACK_KEY32",
    EXT_STACK_KEY64: "STACK_KEY64",
}


@dataclass(frozen=True, slots=True)
class StackTrace:
    match_id: int
    addresses: tuple[int, ...]
    pointer_size: int


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    instance_id: int
    parent_instance_id: int
    parent_guid: uuid.UUID


@dataclass(frozen=True, slots=True)
class ExtendedItem:
    """One extended data item: its type, its raw bytes, and (``value``) the bytes decoded by type."""

    ext_type: int
    data: bytes
    linkage: int = 0

    @property
    def type_name(self) -> str:
        return EXT_TYPE_NAMES.get(self.ext_type, f"EXT_{self.ext_type}")

    @property
    def value(self) -> Any:
        """Typed content: UUID, StackTrace, int, tuple of ints, InstanceInfo; the raw bytes otherwise."""
        return decode_extended_data(self.ext_type, self.data)


def decode_extended_data(ext_type: int, data: bytes) -> Any:
    size = len(data)
    if ext_type in (EXT_RELATED_ACTIVITYID, EXT_CONTROL_GUID, EXT_CONTAINER_ID) and size >= 16:
        return guid_from_le(data[:16])
    if ext_type in (EXT_STACK_TRACE32, EXT_STACK_TRACE64) and size >= 8:
        width = 4 if ext_type == EXT_STACK_TRACE32 else 8
        count = (size - 8) // width
        (match_id,) = struct.unpack_from("<Q", data, 0)
        addresses = struct.unpack_from(f"<{count}{'I' if width == 4 else 'Q'}", data, 8)
        return StackTrace(match_id, addresses, width)
    if ext_type == EXT_TS_ID and size >= 4:
        return struct.unpack_from("<I", data)[0]
    if ext_type in (EXT_PROCESS_START_KEY, EXT_EVENT_KEY, EXT_QPC_DELTA, EXT_PEBS_INDEX) and size >= 8:
        return struct.unpack_from("<Q", data)[0]
    if ext_type in (EXT_STACK_KEY32, EXT_STACK_KEY64) and size >= 8:
        return struct.unpack_from("<Q", data)[0]
    if ext_type == EXT_PMC_COUNTERS:
        return struct.unpack_from(f"<{size // 8}Q", data)
    if ext_type == EXT_INSTANCE_INFO and size >= 24:
        instance_id, parent_id = struct.unpack_from("<II", data)
        return InstanceInfo(instance_id, parent_id, guid_from_le(data[8:24]))
    return data


def encode_extended_items(items: list[ExtendedItem] | tuple[ExtendedItem, ...]) -> bytes:
    """Extended items as they sit after an EVENT_HEADER: 8-byte header each, data padded to 8 bytes."""
    out = bytearray()
    last = len(items) - 1
    for i, item in enumerate(items):
        data = bytes(item.data)
        padded = (len(data) + 7) & ~7
        out += struct.pack("<HHHH", 8 + padded, item.ext_type, 1 if i < last else 0, len(data))
        out += data + b"\0" * (padded - len(data))
    return bytes(out)


def related_activity_item(related: uuid.UUID) -> ExtendedItem:
    return ExtendedItem(EXT_RELATED_ACTIVITYID, related.bytes_le)


def stack_trace_item(match_id: int, addresses: list[int], pointer_size: int = 8) -> ExtendedItem:
    code = "Q" if pointer_size == 8 else "I"
    data = struct.pack(f"<Q{len(addresses)}{code}", match_id, *addresses)
    return ExtendedItem(EXT_STACK_TRACE64 if pointer_size == 8 else EXT_STACK_TRACE32, data)
