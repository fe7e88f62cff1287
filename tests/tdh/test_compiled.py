"""Compiled readers give exactly the general decoder's results: random schemas and payloads, the
corpus schemas with synthesized payloads, and real records."""

from __future__ import annotations

import math
import random
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.etl import read_records
from openetw.manifest import load_manifest
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh import REST, DecodedEvent, compile_schema, decode_all
from openetw.tdh.compiled import compiled_reader, reader_source
from openetw.tdh.from_manifest import schemas_from_manifest
from openetw.tdh.mof import schema_from_mof
from openetw.tdh.mof_kernel import KERNEL_CLASSES, find_layout
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import EventMap, PropertyInfo, Schema
from tests.conftest import corpus_path
from tests.tdh.test_from_manifest import corpus_manifests

PROVIDER = uuid.UUID("0f6c7d1e-2a3b-4c5d-8e9f-a0b1c2d3e4f5")

INTEGERS = {
    InType.INT8: "b", InType.UINT8: "B", InType.INT16: "h", InType.UINT16: "H", InType.INT32: "i",
    InType.UINT32: "I", InType.INT64: "q", InType.UINT64: "Q", InType.HEXINT32: "I", InType.HEXINT64: "Q",
}  # fmt: skip
COUNTED = {
    InType.MANIFEST_COUNTEDSTRING: "<H", InType.COUNTEDSTRING: "<H", InType.REVERSEDCOUNTEDSTRING: ">H",
    InType.MANIFEST_COUNTEDANSISTRING: "<H", InType.COUNTEDANSISTRING: "<H", InType.REVERSEDCOUNTEDANSISTRING: ">H",
    InType.MANIFEST_COUNTEDBINARY: "<H",
}  # fmt: skip
WIDE = {InType.UNICODESTRING, InType.NONNULLTERMINATEDSTRING, InType.MANIFEST_COUNTEDSTRING, InType.COUNTEDSTRING, InType.REVERSEDCOUNTEDSTRING}
TEXTS = ["", "a", "Mercury", "C:\\Windows\\System32\\ntdll.dll", "caf\u00e9 \u20ac", "\U0001f600", "x\u0100y"]


# --- comparing the two paths -------------------------------------------------------------------


def same(a: Any, b: Any) -> bool:
    """Equality that also holds for NaN floats in the same places."""
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def check_same(schema: Schema, data: bytes, pointer_size: int) -> bool:
    """Both paths agree on everything; returns whether the compiled reader took the payload."""
    compiled = compile_schema(schema, pointer_size)  # compiles now, so decode_all uses it from the start
    general = DecodedEvent(schema, data, pointer_size).decode_all(compiled=False)
    fast = decode_all(schema, data, pointer_size)
    values, errors = compiled(bytearray(data))
    assert same(dict(fast.items()), dict(general.items()))
    assert same(values, dict(general.items()))
    for found in (fast.errors, errors):
        assert {k: (e.message, e.offset, e.raw) for k, e in found.items()} == {
            k: (e.message, e.offset, e.raw) for k, e in general.errors.items()
        }
    assert fast.end_offset == general.end_offset
    assert fast.not_decoded == general.not_decoded
    assert fast.ok == general.ok and fast.trailing == general.trailing
    assert same(fast.values_in_order(), general.values_in_order())
    for prop in schema.properties:
        assert fast.raw(prop.name) == general.raw(prop.name)
    reader = compiled_reader(schema, pointer_size)
    return reader is not None and reader(data) is not None


# --- payloads that mostly fit their schema --------------------------------------------------------


def _integers_referenced(properties: tuple[PropertyInfo, ...]) -> set[str]:
    names: set[str] = set()
    for prop in properties:
        for ref in (prop.count, prop.length):
            if isinstance(ref, str) and ref != REST:
                names.add(ref)
        if prop.members:
            names |= _integers_referenced(prop.members)
    return names


class Synthesizer:
    """Writes a payload for a schema: valid values mostly, with some damage when asked."""

    def __init__(self, rng: random.Random, pointer_size: int, referenced: set[str]) -> None:
        self.rng = rng
        self.pointer_size = pointer_size
        self.referenced = referenced
        self.integers: dict[str, int] = {}

    def payload(self, properties: tuple[PropertyInfo, ...]) -> bytes:
        out = bytearray()
        for prop in properties:
            if prop.optional and self.rng.random() < 0.4:
                break
            out += self.value(prop)
        return bytes(out)

    def count(self, ref: int | str | None) -> int:
        if isinstance(ref, int):
            return ref
        if ref == REST:
            return self.rng.randrange(4)
        return self.integers.get(str(ref), 0)

    def value(self, prop: PropertyInfo) -> bytes:
        if prop.problem is not None:
            return self.rng.randbytes(self.rng.randrange(6))
        if prop.count_in_data:
            n = self.rng.randrange(4)
            return struct.pack("<H", n) + b"".join(self.element(prop) for _ in range(n))
        if prop.count is not None:
            return b"".join(self.element(prop) for _ in range(self.count(prop.count)))
        return self.element(prop)

    def text(self) -> str:
        return self.rng.choice(TEXTS)

    def element(self, prop: PropertyInfo) -> bytes:
        rng, in_type = self.rng, prop.in_type
        if prop.members is not None:
            return b"".join(self.value(member) for member in prop.members)
        if prop.custom_schema is not None:
            raw = rng.randbytes(rng.randrange(5))
            return struct.pack("<H", len(raw)) + raw
        if in_type in INTEGERS:
            code = INTEGERS[in_type]  # type: ignore[index]
            size = struct.calcsize(code)
            small = prop.name in self.referenced or rng.random() < 0.3
            value = rng.randrange(4) if small else rng.randrange(1 << (8 * size))
            self.integers[prop.name] = value
            return value.to_bytes(size, "little")
        if in_type in (InType.POINTER, InType.SIZET):
            value = rng.randrange(4) if prop.name in self.referenced else rng.randrange(1 << (8 * self.pointer_size))
            self.integers[prop.name] = value
            return value.to_bytes(self.pointer_size, "little")
        if in_type == InType.BOOLEAN:
            value = rng.choice([0, 1, 2, 0xFFFFFFFF])
            self.integers[prop.name] = int(value != 0)
            return struct.pack("<I", value)
        if in_type in (InType.FLOAT, InType.DOUBLE):
            return rng.randbytes(4 if in_type == InType.FLOAT else 8)
        if in_type == InType.GUID:
            return rng.randbytes(16)
        if in_type == InType.FILETIME:
            return struct.pack("<q", rng.choice([0, -5, 132_000_000_000_000_000, rng.randrange(-(1 << 63), 1 << 63)]))
        if in_type == InType.SYSTEMTIME:
            if rng.random() < 0.2:
                return rng.randbytes(16)
            return struct.pack("<8H", rng.randrange(1601, 3000), rng.randrange(1, 13), 0, rng.randrange(1, 29), 23, 59, 59, rng.randrange(1000))
        if in_type == InType.UNICODECHAR:
            return self.text()[:1].ljust(1, "z").encode("utf-16-le")[:2]
        if in_type == InType.ANSICHAR:
            return bytes([rng.randrange(256)])
        if in_type == InType.SID:
            n = rng.randrange(4)
            return bytes([1, n]) + rng.randbytes(6) + rng.randbytes(4 * n)
        if in_type == InType.WBEMSID:
            if rng.random() < 0.3:
                return bytes(4)
            n = rng.randrange(3)
            return b"\x01" + rng.randbytes(2 * self.pointer_size - 1) + bytes([1, n]) + rng.randbytes(6 + 4 * n)
        if in_type in COUNTED:
            if in_type == InType.MANIFEST_COUNTEDBINARY:
                raw = rng.randbytes(rng.choice([0, 3, 16]))
            else:
                raw = self.text().encode("utf-16-le" if in_type in WIDE else "cp1252", "replace")
            return struct.pack(COUNTED[in_type], len(raw)) + raw  # type: ignore[index]
        if in_type == InType.HEXDUMP:
            raw = rng.randbytes(rng.randrange(5))
            return struct.pack("<I", len(raw)) + raw
        if in_type in (InType.UNICODESTRING, InType.ANSISTRING, InType.NONNULLTERMINATEDSTRING, InType.NONNULLTERMINATEDANSISTRING, InType.BINARY):
            return self.sized(prop)
        return rng.randbytes(rng.randrange(5))

    def sized(self, prop: PropertyInfo) -> bytes:
        wide = prop.in_type in WIDE
        if prop.in_type == InType.BINARY:
            raw = self.rng.randbytes(16 if prop.out_type == OutType.IPV6 and self.rng.random() < 0.7 else self.rng.randrange(5))
        else:
            text = self.text()
            if self.rng.random() < 0.2:
                text += "\0" + self.text()
            raw = text.encode("utf-16-le" if wide else "cp1252", "replace")
            if self.rng.random() < 0.1 and not wide:
                raw += bytes([0x81, 0xE9])  # undefined and defined cp1252 bytes
        unit = 2 if wide else 1
        if prop.length is None:
            terminated = prop.in_type in (InType.UNICODESTRING, InType.ANSISTRING)
            return raw + (b"\0" * unit if terminated else b"")
        length = len(raw) // unit if prop.length == REST else self.count(prop.length)
        return raw[: length * unit].ljust(length * unit, b"\0")

    def damaged(self, data: bytes) -> bytes:
        roll = self.rng.random()
        if roll < 0.55 or not data:
            return data
        if roll < 0.75:
            return data[: self.rng.randrange(len(data))]
        if roll < 0.9:
            at = self.rng.randrange(len(data))
            return data[:at] + bytes([self.rng.randrange(256)]) + data[at + 1 :]
        return data + self.rng.randbytes(self.rng.randrange(1, 4))


def payloads(schema: Schema, pointer_size: int, seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    referenced = _integers_referenced(schema.properties)
    out = []
    for _ in range(count):
        synthesizer = Synthesizer(rng, pointer_size, referenced)
        out.append(synthesizer.damaged(synthesizer.payload(schema.properties)))
    return out


# --- random schemas ---------------------------------------------------------------------------------

SCALARS = [
    (InType.UINT8, None), (InType.UINT8, OutType.BOOLEAN), (InType.INT8, None), (InType.UINT16, OutType.PORT),
    (InType.INT16, OutType.PORT), (InType.UINT16, None), (InType.INT32, None), (InType.UINT32, OutType.IPV4),
    (InType.UINT32, OutType.HEXINT32), (InType.HEXINT32, OutType.IPV4), (InType.INT64, None), (InType.UINT64, None),
    (InType.HEXINT64, None), (InType.FLOAT, None), (InType.DOUBLE, None), (InType.BOOLEAN, None), (InType.GUID, None),
    (InType.POINTER, None), (InType.SIZET, None), (InType.FILETIME, None), (InType.SYSTEMTIME, None),
    (InType.SYSTEMTIME, OutType.DATETIME_UTC), (InType.UNICODECHAR, None), (InType.ANSICHAR, None),
    (InType.SID, None), (InType.WBEMSID, None), (InType.HEXDUMP, None), (InType.BINARY, OutType.IPV6),
    (InType.ANSISTRING, OutType.UTF8),
    *((in_type, None) for in_type in COUNTED), (InType.MANIFEST_COUNTEDBINARY, OutType.IPV6),
]  # fmt: skip
SIZED = [InType.UNICODESTRING, InType.ANSISTRING, InType.NONNULLTERMINATEDSTRING, InType.NONNULLTERMINATEDANSISTRING, InType.BINARY]


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    properties: list[PropertyInfo] = []
    integers: list[str] = []
    n = draw(st.integers(1, 7))
    for index in range(n):
        name = "p0" if draw(st.integers(0, 30)) == 17 else f"p{index}"  # a duplicate name now and then
        last = index == n - 1
        kind = draw(st.sampled_from(["scalar"] * 4 + ["sized"] * 2 + ["array"] * 2 + ["struct", "odd"]))
        size_refs: list[int | str | None] = [None, 0, 3, *integers] + ([REST] if last else [])
        if kind == "scalar":
            in_type, out_type = draw(st.sampled_from(SCALARS))
            prop = PropertyInfo(name, in_type, out_type)
            if in_type in INTEGERS or in_type in (InType.POINTER, InType.SIZET, InType.BOOLEAN):
                integers.append(name)
        elif kind == "sized":
            in_type = draw(st.sampled_from(SIZED))
            prop = PropertyInfo(name, in_type, length=draw(st.sampled_from(size_refs)))
        elif kind == "array":
            in_type, out_type = draw(st.sampled_from(SCALARS + [(InType.UNICODESTRING, None), (InType.ANSISTRING, None)]))
            counts: list[int | str] = [0, 2, *integers] + ([REST] if last else [])
            in_data = draw(st.booleans()) and draw(st.booleans())
            prop = PropertyInfo(name, in_type, out_type, count=None if in_data else draw(st.sampled_from(counts)), count_in_data=in_data)
        elif kind == "struct":
            members = (PropertyInfo(f"{name}.a", InType.UINT16), PropertyInfo(f"{name}.b", InType.UNICODESTRING))
            prop = PropertyInfo(name, InType.NULL, members=members, count=draw(st.sampled_from([None, 2])))
        else:
            prop = draw(st.sampled_from([
                PropertyInfo(name, InType.NULL, problem="metadata was damaged"),
                PropertyInfo(name, 99),
                PropertyInfo(name, InType.UINT8, custom_schema=b"\x01"),
                PropertyInfo(name, InType.BINARY),
                PropertyInfo(name, InType.UNICODESTRING, length=-1),
                PropertyInfo(name, InType.UINT32, count="nowhere"),
            ]))  # fmt: skip
        properties.append(prop)
    if draw(st.booleans()):  # trailing optional properties, as MOF layouts have them
        properties.append(PropertyInfo("tail", draw(st.sampled_from([InType.UNICODESTRING, InType.UINT32])), optional=True))
    return Schema(PROVIDER, properties=tuple(properties), maps={"m": EventMap("m", "value", ())})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas(), st.sampled_from([4, 8]), st.integers(0, 2**32))
def test_random_schemas_and_payloads_decode_the_same_both_ways(schema: Schema, pointer_size: int, seed: int) -> None:
    for data in payloads(schema, pointer_size, seed, 4):
        check_same(schema, data, pointer_size)


@settings(max_examples=150, deadline=None)
@given(schemas(), st.binary(max_size=64))
def test_random_bytes_decode_the_same_both_ways(schema: Schema, data: bytes) -> None:
    check_same(schema, data, 8)


P = PropertyInfo
EDGE_CASES = [
    # (properties, payload, whether the compiled reader takes it)
    ((P("t", InType.UINT32), P("s", InType.POINTER, count=REST)), struct.pack("<IQQ", 1, 2, 3), True),
    ((P("t", InType.UINT32), P("s", InType.POINTER, count=REST)), struct.pack("<IQQ", 1, 2, 3)[:-3], False),
    ((P("t", InType.UINT32), P("s", InType.UNICODESTRING, count=REST)), struct.pack("<I", 1) + b"a\0\0\0b\0\0\0", True),
    ((P("t", InType.UINT32), P("s", InType.UNICODESTRING, count=REST)), struct.pack("<I", 1) + b"a\0\0", True),
    ((P("sid", InType.WBEMSID),), bytes(4) + b"rest", True),
    ((P("sid", InType.WBEMSID),), b"\x01" + bytes(15) + bytes([1, 1]) + bytes(6) + struct.pack("<I", 18), True),
    ((P("sid", InType.WBEMSID),), b"\x01" + bytes(15) + bytes([1, 2]) + bytes(6) + struct.pack("<I", 18), False),
    ((P("n", InType.INT32), P("a", InType.UINT16, count="n")), struct.pack("<ihh", -1, 1, 2), False),
    ((P("n", InType.BOOLEAN), P("a", InType.UINT16, count="n")), struct.pack("<Ih", 7, 1), True),
    ((P("n", InType.UINT8), P("a", InType.UINT64, count="n")), struct.pack("<BQ", 2, 1), False),
    ((P("n", InType.UINT8), P("s", InType.UNICODESTRING, length="n")), b"\x02a\0b\0", True),
    ((P("n", InType.UINT8), P("s", InType.UNICODESTRING, length="n")), b"\x03a\0b\0", False),
    ((P("s", InType.UNICODESTRING),), b"\0a\0\0\0", True),  # the NUL pair at an odd offset is not the end
    ((P("s", InType.NONNULLTERMINATEDSTRING),), b"a\0b", True),  # an odd last byte is still read
    ((P("s", InType.ANSISTRING),), b"caf\xe9\x81\0", True),
    # A string without its NUL runs to the end of the payload, wherever it is.
    ((P("t", InType.UINT32), P("s", InType.UNICODESTRING)), struct.pack("<I", 1) + "/a".encode("utf-16-le"), True),
    ((P("t", InType.UINT32), P("s", InType.UNICODESTRING)), struct.pack("<I", 1) + "/a".encode("utf-16-le") + b"!", True),
    ((P("t", InType.UINT32), P("s", InType.ANSISTRING)), struct.pack("<I", 1) + b"/a", True),
    ((P("t", InType.UINT32), P("s", InType.UNICODESTRING)), struct.pack("<I", 1), False),
    ((P("s", InType.UNICODESTRING), P("u", InType.UINT8)), "ab".encode("utf-16-le"), False),
    ((P("s", InType.ANSISTRING, count=2),), b"ab", False),
    ((P("s", InType.ANSISTRING, count=REST),), b"a\0b", True),
    ((P("t", InType.SYSTEMTIME),), struct.pack("<8H", 2020, 13, 0, 1, 0, 0, 0, 0), False),
    ((P("t", InType.FILETIME), P("u", InType.UINT8, optional=True)), struct.pack("<q", 0), True),
    ((P("t", InType.FILETIME), P("u", InType.UINT16, optional=True)), struct.pack("<qB", 0, 1), False),
    ((P("p", InType.UINT16, OutType.PORT), P("a", InType.UINT32, OutType.IPV4)), b"\x01\xbb\x7f\x00\x00\x01", True),
    ((P("c", InType.MANIFEST_COUNTEDBINARY, OutType.IPV6),), struct.pack("<H", 16) + bytes(15) + b"\x01", True),
    ((P("b", InType.BINARY, length=REST),), b"xyz", True),
    ((P("n", InType.UINT16), P("a", InType.UINT8, count_in_data=True)), struct.pack("<HH", 9, 2) + b"\x01", False),
    # Elements that take no bytes: a count cannot be bounded by the payload, so it is capped.
    ((P("n", InType.UINT32), P("a", InType.UNICODESTRING, length=0, count="n")), struct.pack("<I", 70000), False),
    ((P("n", InType.UINT32), P("a", InType.UNICODESTRING, length=0, count="n")), struct.pack("<I", 3), True),
    ((P("n", InType.UINT8), P("a", InType.UNICODESTRING, length="n", count="n")), b"\x00", True),
    ((P("n", InType.UINT32), P("a", InType.BINARY, length=0, count=REST)), struct.pack("<I", 1) + b"x", False),
    ((P("n", InType.UINT32), P("a", InType.BINARY, length=0, count=REST)), struct.pack("<I", 1), True),
    ((P("n", InType.UINT8), P("a", InType.UNICODESTRING, length="n", count=REST)), b"\x00ab", False),
]


@pytest.mark.parametrize(("properties", "data", "compiled"), EDGE_CASES)
def test_edge_cases_decode_the_same_both_ways(properties: tuple[PropertyInfo, ...], data: bytes, compiled: bool) -> None:
    schema = Schema(PROVIDER, properties=properties)
    assert check_same(schema, data, 8) is compiled


# --- the corpus --------------------------------------------------------------------------------------


def test_every_corpus_schema_decodes_the_same_both_ways() -> None:
    fast = total = 0
    kernel = [schema_from_mof(cls, event) for cls in KERNEL_CLASSES for event in cls.events]
    shapes: dict[tuple[PropertyInfo, ...], Schema] = {}
    for manifest in corpus_manifests():  # one schema per distinct property list keeps this quick
        for _, _, _, schema in schemas_from_manifest(manifest):
            shapes.setdefault(schema.properties, schema)
    for index, schema in enumerate(kernel + list(shapes.values())):
        pointer_size = 8 if index % 2 else 4
        for data in payloads(schema, pointer_size, index, 2):
            fast += check_same(schema, data, pointer_size)
            total += 1
    assert total > 20000
    assert fast > 0.5 * total  # most payloads take the compiled path


@pytest.mark.parametrize(("name", "step"), [("diaghub.kernel.1.etl", 3), ("diaghub.etl", 12)])
def test_real_records_decode_the_same_both_ways(name: str, step: int) -> None:
    path = corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", name)
    fast = 0
    for index, record in enumerate(read_records(path)):
        if index % step:  # a spread sample keeps this quick
            continue
        if record.kind in ("system", "compact", "perfinfo"):
            match = find_layout(record.hook_id >> 8, record.opcode, record.version)  # type: ignore[operator]
        elif record.kind == "classic":
            match = find_layout(record.provider_id, record.opcode, record.version)  # type: ignore[arg-type]
        else:
            continue
        if match is not None:
            fast += check_same(schema_from_mof(match.mof_class, match.event), record.user_data, record.pointer_size)
    assert fast > 1000


def test_http_urls_without_their_nul_take_the_compiled_path() -> None:
    manifest = load_manifest(corpus_path("etl", "manifests", "tx", "HTTP_Server.man")).manifest
    registry = SchemaRegistry([manifest], kernel=False)
    unterminated = 0
    for record in read_records(corpus_path("etl", "tx", "HTTP_Server.etl")):
        schema = registry.schema_for(record)
        if schema is None:
            continue
        took_compiled = check_same(schema, record.user_data, record.pointer_size)
        if schema.property_named("Url") is not None and not record.user_data.endswith(b"\0\0"):
            assert took_compiled
            unterminated += 1
    assert unterminated == 291


def test_the_registry_keeps_one_compiled_schema_per_schema_and_pointer_size() -> None:
    schema = Schema(PROVIDER, properties=(PropertyInfo("n", InType.UINT32), PropertyInfo("s", InType.UNICODESTRING)))
    registry = SchemaRegistry(kernel=False)
    compiled = registry.compiled(schema, 8)
    assert compiled.fast and registry.compiled(schema, 8) is compiled
    assert registry.compiled(schema, 4) is not compiled and registry.compiled(schema, 4).pointer_size == 4
    assert registry.compiled(Schema(PROVIDER, properties=schema.properties), 8) is not compiled  # equal, not the same
    decoded = registry.decode(schema, struct.pack("<I", 3) + "/url".encode("utf-16-le"), 8)
    assert decoded.ok and dict(decoded.items()) == {"n": 3, "s": "/url"}
    nested = Schema(PROVIDER, properties=(PropertyInfo("s", InType.NULL, members=(PropertyInfo("a", InType.UINT8),)),))
    assert not registry.compiled(nested, 8).fast
    assert registry.decode(nested, b"\x05", 8)["s"] == {"a": 5}
    assert registry.decode(schema, b"\x01", 8).errors["n"].message == "UINT32 needs 4 bytes, 1 left in the payload"


# --- the generated code -------------------------------------------------------------------------------


def test_generated_source_carries_names_only_as_literals() -> None:
    hostile = "x'] = 1; import os; os._exit(3); v = ['"
    schema = Schema(PROVIDER, properties=(PropertyInfo(hostile, InType.UINT32), PropertyInfo("s", InType.UNICODESTRING)))
    source, namespace = reader_source(schema, 8)  # type: ignore[misc]
    assert source.startswith("# Generated by openetw.tdh.compiled")
    assert repr(hostile) in source and "import" not in source.replace(repr(hostile), "")
    assert hostile not in namespace
    values, errors = compile_schema(schema, 8)(struct.pack("<I", 7) + "hi\0".encode("utf-16-le"))
    assert values == {hostile: 7, "s": "hi"} and errors == {}


def test_schemas_without_a_reader_still_decode_through_compile_schema() -> None:
    struct_schema = Schema(PROVIDER, properties=(PropertyInfo("s", InType.NULL, members=(PropertyInfo("a", InType.UINT8),)),))
    compiled = compile_schema(struct_schema, 8)
    assert not compiled.fast
    assert compiled(b"\x05") == ({"s": {"a": 5}}, {})
    decoded = compiled.decode(b"\x05")
    assert decoded["s"] == {"a": 5} and decoded.ok


def test_fast_path_falls_back_with_the_general_errors() -> None:
    schema = Schema(PROVIDER, properties=(PropertyInfo("n", InType.UINT32), PropertyInfo("s", InType.UNICODESTRING)))
    compiled = compile_schema(schema, 8)
    assert compiled.fast
    values, errors = compiled(struct.pack("<I", 1))
    assert values == {"n": 1}
    assert errors["s"].message == "UNICODESTRING needs at least 1 byte, 0 left in the payload"
    decoded = compiled.decode(struct.pack("<I", 1) + "ok\0".encode("utf-16-le") + b"++")
    assert decoded.ok and decoded.trailing == b"++" and decoded.raw("s") == "ok\0".encode("utf-16-le")


def test_a_schema_is_compiled_the_second_time_it_is_asked_for() -> None:
    schema = Schema(PROVIDER, properties=(PropertyInfo("a", InType.UINT32), PropertyInfo("b", InType.ANSISTRING)))
    assert compiled_reader(schema, 8) is None
    reader = compiled_reader(schema, 8)
    assert reader is not None and reader(b"\x01\0\0\0hi\0") == ({"a": 1, "b": "hi"}, 7)
    assert compiled_reader(schema, 4, "latin-1") is None
    assert compiled_reader(schema, 4, "latin-1") is not None
    assert compiled_reader(schema, 4, "cp437", at_once=True) is not None


def test_very_large_schemas_are_not_compiled_but_decode() -> None:
    schema = Schema(PROVIDER, properties=tuple(PropertyInfo(f"f{i}", InType.UINT8) for i in range(600)))
    compiled = compile_schema(schema, 8)
    assert not compiled.fast
    values, errors = compiled(bytes(range(200)) * 3)
    assert len(values) == 600 and errors == {}
