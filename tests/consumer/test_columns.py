"""Batches of columns against the per-event reader and decoder, on both engines.

Every corpus .etl read as column batches: header columns equal the records ``EtlReader`` gives,
and every schema's field columns equal what its per-event decoder (``CompiledSchema``) gives each
payload, whether the compiled core decoded the payload or handed it back to Python. Random schemas
and damaged payloads hold the column plan to the decoder too.
"""

from __future__ import annotations

import math
import os
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.consumer._engine import index_build, index_walk
from openetw.consumer.columns import column_batches
from openetw.etl import lzxpress, reader
from openetw.etl.intypes import InType, OutType
from openetw.etl.lzxpress import decompress_python
from openetw.report.sources import build_registry
from openetw.tdh import columns as tdh_columns
from openetw.tdh.columns import STEPS, column_plan, decode_columns
from openetw.tdh.compiled import CompiledSchema
from openetw.tdh.context import DecodeContext
from openetw.tdh.schema import PropertyInfo, Schema
from tests.native import cases
from tests.tdh.test_compiled import payloads, schemas

_read = native.module("_read")
if _read is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled core must be active under CI: {native.reason()}")


@pytest.fixture(params=["native", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The compiled core, or the pure-Python reference everywhere the column path reaches."""
    if request.param == "native":
        if _read is None:
            pytest.skip(f"compiled core not active: {native.reason()}")
    else:
        for module in (reader, index_walk, index_build, tdh_columns):
            monkeypatch.setattr(module, "_NATIVE", None)
        monkeypatch.setattr(lzxpress, "decompress", decompress_python)
    yield request.param


def same(a: Any, b: Any) -> bool:
    """Equal values of one type, NaN equal to NaN (inside arrays and structs too)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b) and type(a) is type(b)


def column_value(kind: str, value: Any) -> Any:
    """The decoder's value as the column holds it."""
    return tdh_columns._python_value(kind, value)


def check_fields(decoder: CompiledSchema, payloads_: list[bytes], fields: tdh_columns.FieldColumns) -> None:
    expected = [decoder(data) for data in payloads_]
    plan = fields.plan
    if plan is None:
        assert fields.fallback.tolist() == list(range(len(payloads_)))
        for (values, errors), got, got_errors in zip(expected, fields.values, fields.errors, strict=True):
            assert got.keys() == values.keys() and all(same(got[k], values[k]) for k in values)
            assert got_errors.keys() == errors.keys()
        return
    arrays = fields.arrow(pa)
    for k, (name, kind) in enumerate(zip(plan.names, plan.types, strict=True)):
        got = (arrays[k].cast(pa.int64()) if kind == "timestamp[us, UTC]" else arrays[k]).to_pylist()
        want = [column_value(kind, values.get(name)) for values, _ in expected]
        assert all(same(a, b) for a, b in zip(got, want, strict=True)), (name, kind)
    assert fields.rows_with_errors == sum(1 for _, errors in expected if errors)


def test_the_core_reads_the_steps_the_plan_writes() -> None:
    if _read is None:
        pytest.skip(f"compiled core not active: {native.reason()}")
    assert _read.constants()["column_steps"] == STEPS


def test_every_corpus_trace_as_column_batches_equals_its_records_and_their_decoding(engine: str) -> None:
    planned_rows = 0
    for path in cases.corpus_files():
        context = DecodeContext(build_registry([], installed=False))
        with reader.EtlReader(str(path), strict=False) as source:
            records = list(source.records(time_order=False))
        batches = list(column_batches(str(path), context.schema_for, chunk_bytes=1 << 20))
        assert sum(len(batch) for batch in batches) == len(records), path.name
        first = 0
        for batch in batches:
            mine = records[first : first + len(batch)]
            header = batch.header
            known = [i for i, record in enumerate(mine) if record.kind != "unknown"]
            for name, attr in (
                ("filetime", "filetime"),
                ("pid", "pid"),
                ("tid", "tid"),
                ("cpu", "cpu"),
                ("level", "level"),
                ("keyword", "keyword"),
            ):
                assert header[name][known].tolist() == [getattr(mine[i], attr) & 0xFFFFFFFFFFFFFFFF for i in known], (
                    path.name,
                    name,
                )
            for i in known:
                record = mine[i]
                if record.kind == "event":
                    assert bytes(batch.activity[i]) == record.activity_guid_bytes
                provider = int(header["provider"][i])
                if record.kind in ("event", "classic", "instance"):
                    assert batch.providers[provider].bytes_le == record.provider_guid_bytes
            for item in batch.schemas:
                rows = item.rows.tolist()
                assert all(
                    context.schema_for(mine[row]) is item.schema and mine[row].pointer_size == item.pointer_size
                    for row in rows
                )
                check_fields(
                    CompiledSchema(item.schema, item.pointer_size), [mine[row].user_data for row in rows], item.fields
                )
                planned_rows += len(rows) if item.fields.plan is not None else 0
            decoded = {row for item in batch.schemas for row in item.rows.tolist()}
            assert decoded.isdisjoint(batch.undecoded.tolist()) and len(decoded) + len(batch.undecoded) == len(batch)
            first += len(batch)
    assert planned_rows > 200_000  # most of the corpus' events take the plan


P = PropertyInfo
EDGES = Schema(
    uuid.UUID("6d2b4c1a-0e3f-4b8a-9c7d-1e2f3a4b5c6d"),
    properties=(
        P("n", InType.UINT32), P("flag", InType.BOOLEAN), P("on", InType.UINT8, OutType.BOOLEAN), P("port", InType.UINT16, OutType.PORT),
        P("ptr", InType.POINTER), P("id", InType.GUID), P("when", InType.FILETIME), P("ratio", InType.DOUBLE),
        P("name", InType.UNICODESTRING), P("ansi", InType.ANSISTRING), P("counted", InType.COUNTEDSTRING), P("tail", InType.INT64),
    ),
)  # fmt: skip


def _edge_payload(name: bytes = "Mercury".encode("utf-16-le") + b"\0\0", ansi: bytes = b"abc\0", counted: bytes = b"\x04\x00h\x00i\x00",
                  when: int = 132_000_000_000_000_000, pointer_size: int = 8) -> bytes:  # fmt: skip
    head = (
        struct.pack("<IIBH", 7, 1, 2, 0x3412)
        + (b"\x10" * pointer_size)
        + uuid.uuid4().bytes_le
        + struct.pack("<qd", when, 0.5)
    )
    return head + name + ansi + counted + struct.pack("<q", -3)


def edge_payloads(pointer_size: int) -> list[bytes]:
    good = _edge_payload(pointer_size=pointer_size)
    return [
        good,
        good[:10],  # short: the general decoder reports it
        _edge_payload(
            name="\U0001f600 ok".encode("utf-16-le") + b"\0\0", pointer_size=pointer_size
        ),  # a surrogate pair
        _edge_payload(name=b"\x00\xd8x\x00\0\0", pointer_size=pointer_size),  # a lone surrogate
        _edge_payload(ansi=b"caf\xe9\0", pointer_size=pointer_size),  # not ASCII: cp1252 in Python
        _edge_payload(counted=b"\x03\x00abc", pointer_size=pointer_size),  # an odd byte count
        _edge_payload(when=0, pointer_size=pointer_size),  # ticks that are no date
        _edge_payload(when=-15, pointer_size=pointer_size),
        _edge_payload(when=(1 << 63) - 1, pointer_size=pointer_size),
        good[: len(good) - 8] + b"\x01\x02",  # the last integer cut
        _edge_payload(name=b"A\x00B", pointer_size=pointer_size)[: -8 - 6 - 4],  # a string without its NUL, at the end
        _edge_payload(name=b"A\x00\x3d\xd8\0\0", pointer_size=pointer_size),  # a high surrogate just before the NUL
        _edge_payload(name=b"A\x00\x3d\xd8", pointer_size=pointer_size)[: -8 - 6 - 4],  # ... as the last unit, no NUL
        _edge_payload(name="caf\xe9 \u4e2d".encode("utf-16-le") + b"\0\0", pointer_size=pointer_size),  # 2 and 3 UTF-8 bytes
        _edge_payload(name=b"", pointer_size=pointer_size)[: -8 - 6 - 4],  # the string starts at the payload's end
    ]


@pytest.mark.parametrize("pointer_size", [4, 8])
def test_payloads_the_plan_cannot_read_are_decoded_by_python_with_the_same_values(
    engine: str, pointer_size: int
) -> None:
    data = edge_payloads(pointer_size)
    decoder = CompiledSchema(EDGES, pointer_size)
    assert column_plan(EDGES, pointer_size) is not None
    lengths = np.asarray([len(item) for item in data], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    fields = decode_columns(decoder, b"".join(data), starts, lengths)
    check_fields(decoder, data, fields)
    if engine == "native":
        assert 0 < len(fields.fallback) < len(data)  # some by the core, some handed back
        assert 0 not in fields.fallback.tolist() and 1 in fields.fallback.tolist()


def test_schemas_without_a_plan_are_decoded_payload_by_payload(engine: str) -> None:
    schema = Schema(EDGES.provider_id, properties=(P("n", InType.UINT32), P("items", InType.UINT16, count="n")))
    assert column_plan(schema, 8) is None
    data = [struct.pack("<IHH", 2, 5, 6), struct.pack("<I", 9)]
    fields = decode_columns(CompiledSchema(schema, 8), b"".join(data), np.asarray([0, 8]), np.asarray([8, 4]))
    check_fields(CompiledSchema(schema, 8), data, fields)
    assert fields.values[0] == {"n": 2, "items": [5, 6]}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(schemas(), st.sampled_from([4, 8]), st.integers(0, 2**32))
def test_random_schemas_and_damaged_payloads_give_the_decoders_values(
    engine: str, schema: Schema, pointer_size: int, seed: int
) -> None:
    data = payloads(schema, pointer_size, seed, 6)
    decoder = CompiledSchema(schema, pointer_size)
    lengths = np.asarray([len(item) for item in data], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    check_fields(decoder, data, decode_columns(decoder, b"".join(data), starts, lengths))


PLANNED = [
    (InType.INT8, None), (InType.UINT8, OutType.BOOLEAN), (InType.UINT16, OutType.PORT), (InType.INT16, None), (InType.UINT32, None),
    (InType.HEXINT32, None), (InType.INT64, None), (InType.HEXINT64, None), (InType.FLOAT, None), (InType.DOUBLE, None),
    (InType.BOOLEAN, None), (InType.GUID, None), (InType.FILETIME, None), (InType.POINTER, None), (InType.SIZET, None),
    (InType.UNICODESTRING, None), (InType.ANSISTRING, None), (InType.COUNTEDSTRING, None), (InType.MANIFEST_COUNTEDSTRING, None),
]  # fmt: skip


@st.composite
def planned_schemas(draw: st.DrawFn) -> Schema:
    chosen = draw(st.lists(st.sampled_from(PLANNED), min_size=1, max_size=8))
    return Schema(
        EDGES.provider_id, properties=tuple(P(f"p{i}", in_type, out) for i, (in_type, out) in enumerate(chosen))
    )


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(planned_schemas(), st.sampled_from([4, 8]), st.integers(0, 2**32), st.lists(st.binary(max_size=48), max_size=4))
def test_planned_schemas_over_damaged_and_random_payloads_give_the_decoders_values(
    engine: str, schema: Schema, pointer_size: int, seed: int, noise: list[bytes]
) -> None:  # fmt: skip
    assert column_plan(schema, pointer_size) is not None
    data = payloads(schema, pointer_size, seed, 6) + noise
    decoder = CompiledSchema(schema, pointer_size)
    lengths = np.asarray([len(item) for item in data], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    check_fields(decoder, data, decode_columns(decoder, b"".join(data), starts, lengths))
