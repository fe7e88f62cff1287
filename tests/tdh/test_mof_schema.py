"""Schemas from classic MOF layouts: names, types, REST and optional fields, and the corpus fit."""

from __future__ import annotations

import struct
import uuid
from collections import Counter

import pytest

from openetw.etl import read_records
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh import REST, decode_properties, format_properties
from openetw.tdh.mof import schema_from_mof
from openetw.tdh.mof_kernel import KERNEL_CLASSES, find_layout
from openetw.tdh.schema import PropertyInfo, Schema
from tests.conftest import corpus_path

PROCESS = uuid.UUID("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c")
IMAGE_ID = uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de")
DIAGHUB = ("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession")
CORPUS_FILES = [
    (*DIAGHUB, "diaghub.kernel.1.etl"),
    ("etl", "etl-parser", "ShutdownPerfDiagLogger.etl"),
    (*DIAGHUB, "diaghub.etl"),
    ("etl", "perfview", "net.4.5.2.x64.etl"),  # compressed buffers
]


def mof_schema(key: uuid.UUID | str | int, opcode: int, version: int, provider_id: uuid.UUID | None = None) -> Schema:
    match = find_layout(key, opcode, version)
    assert match is not None
    return schema_from_mof(match.mof_class, match.event, provider_id)


def test_names_follow_perfview() -> None:
    start = mof_schema(0x03, 1, 4)
    assert (start.provider_name, start.event_name, start.task_name, start.opcode_name) == ("Windows Kernel", "Process/Start", "Process", "Start")
    assert (start.source, start.opcode, start.version, start.event_id) == ("mof", 1, 4, 0)
    assert start.provider_id == start.event_guid == PROCESS
    header = mof_schema(0x00, 0, 2)
    assert (header.event_name, header.opcode_name) == ("EventTrace", "Header")
    image_id = mof_schema(IMAGE_ID, 36, 2, IMAGE_ID)
    assert (image_id.provider_name, image_id.event_name) == ("KernelTraceControl", "ImageID/DbgID_RSDS")
    build = mof_schema(0x00, 66, 2)  # filed under the provider name TDH reports
    assert (build.provider_name, build.event_name) == ("MSNT_SystemTrace", "EventTrace/BuildInfo")


def test_types_become_tdh_enums() -> None:
    schema = mof_schema(0x03, 1, 4)
    by_name = {prop.name: prop for prop in schema.properties}
    assert by_name["UniqueProcessKey"].in_type is InType.POINTER
    assert by_name["UserSID"].in_type is InType.WBEMSID
    assert by_name["ImageFileName"].in_type is InType.ANSISTRING
    for cls in KERNEL_CLASSES:
        for event in cls.events:
            for prop in schema_from_mof(cls, event).properties:
                assert isinstance(prop.in_type, InType) and prop.problem is None
                assert prop.out_type is None or isinstance(prop.out_type, OutType)
                if prop.in_type is InType.SIZET and prop.out_type is None:
                    pytest.fail(f"{prop.name}: SIZET without an out-type")


def test_schemas_are_cached_per_layout_and_provider() -> None:
    match = find_layout(0x03, 1, 4)
    assert match is not None
    assert schema_from_mof(match.mof_class, match.event) is schema_from_mof(match.mof_class, match.event)
    other = uuid.UUID(int=7)
    assert schema_from_mof(match.mof_class, match.event, other).provider_id == other


# --- REST and optional in the decoder ------------------------------------------------------------


def schema(*properties: PropertyInfo) -> Schema:
    return Schema(uuid.UUID(int=1), properties=properties, source="mof")


def test_rest_count_repeats_until_the_payload_ends() -> None:
    stack = schema(PropertyInfo("Time", InType.UINT64), PropertyInfo("Stack", InType.POINTER, count=REST))
    data = struct.pack("<QQQQ", 5, 0x1000, 0x2000, 0x3000)
    decoded = decode_properties(stack, data, 8)
    assert decoded.errors == {} and decoded["Stack"] == [0x1000, 0x2000, 0x3000]
    assert decode_properties(stack, data[:8], 8)["Stack"] == []
    assert decode_properties(stack, data, 4)["Stack"] == [0x1000, 0, 0x2000, 0, 0x3000, 0]
    partial = decode_properties(stack, data[:-3], 8)
    assert partial.errors["Stack"].message == "pointer needs 8 bytes, 5 left in the payload"


def test_rest_length_takes_every_byte_left() -> None:
    blob = schema(PropertyInfo("Id", InType.GUID), PropertyInfo("Blob", InType.BINARY, length=REST))
    data = uuid.UUID(int=3).bytes_le + b"\x01\x02\x03"
    decoded = decode_properties(blob, data, 8)
    assert decoded["Blob"] == b"\x01\x02\x03" and decoded.end_offset == len(data)
    assert decode_properties(blob, data[:16], 8)["Blob"] == b""
    text = schema(PropertyInfo("Text", InType.UNICODESTRING, length=REST))
    assert decode_properties(text, "abc".encode("utf-16-le") + b"\0\0", 8)["Text"] == "abc"


def test_optional_trailing_field_is_absent_or_decoded() -> None:
    thread = mof_schema(0x05, 1, 3)  # Thread v3: ThreadName only on newer builds
    assert thread.properties[-1].optional
    fixed = thread.properties[:-1]
    size = sum({InType.UINT32: 4, InType.POINTER: 8, InType.UINT8: 1}[p.in_type] for p in fixed)  # type: ignore[index]
    without = bytes(size)
    decoded = decode_properties(thread, without, 8)
    assert decoded.ok and "ThreadName" not in decoded and decoded.errors == {}
    assert decoded.values_in_order()[-1] is None
    named = decode_properties(thread, without + "worker\0".encode("utf-16-le"), 8)
    assert named.ok and named["ThreadName"] == "worker"
    unterminated = decode_properties(thread, without + b"w\0o", 8)  # runs to the end; the odd byte is not text
    assert unterminated.ok and unterminated["ThreadName"] == "w" and unterminated.trailing == b""


# --- the corpus -----------------------------------------------------------------------------------


def _layout_key(record: object) -> tuple[object, int, int] | None:
    kind = record.kind
    if kind in ("system", "compact", "perfinfo"):
        return record.hook_id >> 8, record.opcode, record.version
    if kind in ("classic", "instance"):
        return record.provider_id, record.opcode, record.version
    return None


@pytest.mark.parametrize("parts", CORPUS_FILES, ids=lambda parts: parts[-1])
def test_corpus_kernel_and_classic_records_decode_exactly(parts: tuple[str, ...]) -> None:
    decoded_ok = 0
    failures: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for record in read_records(corpus_path(*parts)):
        key = _layout_key(record)
        if key is None:
            continue
        match = find_layout(*key)  # type: ignore[arg-type]
        if match is None:
            continue
        provider = key[0] if isinstance(key[0], uuid.UUID) else None
        schema = schema_from_mof(match.mof_class, match.event, provider)
        data = record.user_data
        decoded = decode_properties(schema, data, record.pointer_size)
        if decoded.errors or decoded.end_offset != len(data):
            name = f"{schema.provider_name}/{schema.event_name} v{record.version}"
            failures[name] += 1
            examples.setdefault(name, f"{len(data)} bytes, stopped at {decoded.end_offset}, {decoded.errors}")
        else:
            format_properties(decoded)  # every value renders
            decoded_ok += 1
    total = decoded_ok + sum(failures.values())
    for name, count in failures.most_common():
        print(f"{count:6d} {name}: {examples[name]}")
    assert total > 1000
    assert decoded_ok >= 0.99 * total, failures.most_common(10)
