"""Mutated metadata and payloads only ever yield per-property decode errors, never an exception."""

from __future__ import annotations

import random
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.errors import PropertyDecodeError
from openetw.etl import read_records
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.format import format_event_message, format_properties
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema
from openetw.tdh.tracelogging import encode_event_metadata, pack_values, schema_from_tracelogging
from tests.conftest import corpus_path
from tests.tdh.test_tracelogging_roundtrip import events

PROVIDER = uuid.UUID(int=0xF022)


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(5)
        position = rng.randrange(len(buf) + 1)
        if choice == 0 and buf:
            buf[position % len(buf)] ^= 1 << rng.randrange(8)
        elif choice == 1 and buf:
            buf[position % len(buf)] = rng.choice((0, 0x80, 0xFF, rng.randrange(256)))
        elif choice == 2:
            del buf[position:]
        elif choice == 3:
            buf[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        else:
            del buf[position : position + rng.randint(1, 4)]
    return bytes(buf)


def check_never_raises(schema: Schema, payload: bytes, pointer_size: int = 8) -> None:
    decoded = decode_properties(schema, payload, pointer_size)
    values = dict(decoded)
    errors = decoded.errors
    assert all(isinstance(error, PropertyDecodeError) for error in errors.values())
    assert all(error.property_name == name and error.offset is not None for name, error in errors.items())
    names = {prop.name for prop in schema.properties}
    assert names <= set(values) | set(errors) | set(decoded.not_decoded)
    assert 0 <= decoded.end_offset <= len(payload)
    assert len(decoded.values_in_order()) == len(schema.properties)
    format_properties(decoded)
    format_event_message(decoded)
    for name in names:
        decoded.raw(name)


def corpus_blobs() -> list[tuple[bytes, bytes | None, bytes]]:
    found = []
    for parts in (("perfview", "primitive-types.etl"), ("etl-parser", "lxcore_kernel.etl"), ("perfview", "SelfDescribingSingleEvent.etl")):
        for record in read_records(corpus_path("etl", *parts)):
            items = {item.ext_type: bytes(item.data) for item in getattr(record, "extended", ()) or ()}
            if 11 in items:
                found.append((items[11], items.get(12), bytes(record.user_data)))
                break
    return found


def test_mutated_corpus_events() -> None:
    rng = random.Random(20240917)
    for metadata, traits, payload in corpus_blobs():
        for _ in range(400):
            bad_metadata = mutate(metadata, rng) if rng.random() < 0.6 else metadata
            bad_traits = mutate(traits, rng) if traits and rng.random() < 0.3 else traits
            bad_payload = mutate(payload, rng) if rng.random() < 0.7 else payload
            schema = schema_from_tracelogging(PROVIDER, bad_metadata, bad_traits)
            check_never_raises(schema, bad_payload, rng.choice((4, 8)))


@settings(max_examples=120, deadline=None)
@given(events(), st.randoms(use_true_random=False))
def test_mutated_generated_events(event: tuple[str, int, list[PropertyInfo], dict[str, object]], rng: random.Random) -> None:
    name, tags, fields, values = event
    metadata = encode_event_metadata(name, fields, tags=tags)
    payload = pack_values(fields, values)
    for _ in range(5):
        schema = schema_from_tracelogging(PROVIDER, mutate(metadata, rng))
        check_never_raises(schema, payload)
        check_never_raises(schema_from_tracelogging(PROVIDER, metadata), mutate(payload, rng))


# A manifest-style schema: references, maps, structs, every TDH in-type.
_MANIFEST_LIKE = Schema(
    PROVIDER,
    message="%1 %2 %3!x! %4 %99",
    maps={"M": EventMap("M", "bit", (MapEntry(1, "one"), MapEntry(2, "two")))},
    properties=(
        PropertyInfo("n", InType.UINT8),
        PropertyInfo("len", InType.UINT16),
        PropertyInfo("flags", InType.UINT32, map_name="M"),
        PropertyInfo("code", InType.UINT32, OutType.NTSTATUS),
        PropertyInfo("items", InType.UNICODESTRING, count="n"),
        PropertyInfo("blob", InType.BINARY, length="len"),
        PropertyInfo("pts", InType.NULL, count="n", members=(PropertyInfo("x", InType.INT32), PropertyInfo("t", InType.SYSTEMTIME))),
        PropertyInfo("sock", InType.BINARY, OutType.SOCKETADDRESS, length=16),
        *(PropertyInfo(f"t{int(t)}", t) for t in InType if t not in (InType.NULL, InType.BINARY, InType.RESERVED24)),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from([4, 8]))
def test_random_payloads_with_a_manifest_like_schema(payload: bytes, pointer_size: int) -> None:
    check_never_raises(_MANIFEST_LIKE, payload, pointer_size)


def test_random_metadata_blobs() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        size = rng.randrange(0, 80)
        blob = bytes(rng.randrange(256) for _ in range(size))
        if size >= 2 and rng.random() < 0.7:
            blob = size.to_bytes(2, "little") + blob[2:]
        schema = schema_from_tracelogging(PROVIDER, blob, blob if rng.random() < 0.2 else None)
        check_never_raises(schema, bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60))))
