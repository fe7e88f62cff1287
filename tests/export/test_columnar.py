"""Column-wise decoding equals the per-record decoder on every fixed-layout schema of the corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from openetw.etl.reader import EtlReader  # noqa: E402
from openetw.export.columnar import FixedLayout, fixed_layout  # noqa: E402
from openetw.export.types import column_type  # noqa: E402
from openetw.manifest.winmeta import InType, OutType  # noqa: E402
from openetw.tdh.context import DecodeContext  # noqa: E402
from openetw.tdh.schema import PropertyInfo, Schema  # noqa: E402
from tests.conftest import corpus_path  # noqa: E402
from tests.export.conftest import ETL_FILES, registry  # noqa: E402
from tests.export.synthetic import kernel_trace  # noqa: E402

_PER_SCHEMA = 2000  # payloads compared per schema and file


def _payloads(name: str) -> dict[tuple[int, int], tuple[Any, list[bytes]]]:
    """The decoder and payloads (up to ``_PER_SCHEMA``) of each fixed-layout schema of a corpus file."""
    return _payloads_of(str(corpus_path("etl", name)))


def _payloads_of(path: str) -> dict[tuple[int, int], tuple[Any, list[bytes]]]:
    schemas = registry()
    context = DecodeContext(schemas, learn_threads=False, learn_images=False)
    found: dict[tuple[int, int], tuple[Any, list[bytes]]] = {}
    reader = EtlReader(path, strict=False)
    try:
        for record in reader.records(time_order=True):
            if record.kind == "unknown":
                continue
            context.observe(record)
            schema = context.schema_for(record)
            if schema is None:
                continue
            key = (id(schema), record.pointer_size)
            entry = found.get(key)
            if entry is None:
                entry = found[key] = (schemas.compiled(schema, record.pointer_size), [])
            if len(entry[1]) < _PER_SCHEMA:
                entry[1].append(bytes(record.user_data))
    finally:
        reader.close()
    return {key: entry for key, entry in found.items() if fixed_layout(entry[0]) is not None}


def _compare(decoder: Any, payloads: list[bytes]) -> int:
    layout = fixed_layout(decoder)
    assert layout is not None
    long_enough = [data for data in payloads if len(data) >= layout.size]
    columns = layout.read(long_enough)
    assert columns is not None
    expected = [decoder(data) for data in long_enough]
    assert all(not errors for _, errors in expected), "a payload the layout reads had decode errors"
    for prop in decoder.schema.properties:
        kind = column_type(prop, pa)
        got = layout.arrow(columns[prop.name], kind.arrow, pa)
        want = kind.array([values[prop.name] for values, _ in expected], pa)
        assert got.type == want.type, prop.name
        assert got.to_pylist() == want.to_pylist(), (decoder.schema.event_name, prop.name)
        column = columns[prop.name]
        assert (column if isinstance(column, list) else column.tolist()) == [values[prop.name] for values, _ in expected]
    if len(long_enough) < len(payloads):
        assert layout.read(payloads) is None  # a short payload: the batch is decoded record by record
    return len(long_enough)


@pytest.mark.parametrize("name", ETL_FILES)
def test_fixed_layouts_match_the_record_decoder(name: str) -> None:
    for decoder, payloads in _payloads(name).values():
        _compare(decoder, payloads)


def test_kernel_events_take_the_fast_path(tmp_path: Path) -> None:
    """Context switches, disk I/O and thread events of a kernel trace have fixed layouts."""
    found = _payloads_of(str(kernel_trace(tmp_path / "kernel.etl", steps=300)))
    names = {decoder.schema.event_name for decoder, _ in found.values()}
    assert {"Thread/CSwitch", "DiskIO/Read", "DiskIO/Write"} <= names
    assert sum(_compare(decoder, payloads) for decoder, payloads in found.values()) > 200


def _schema(*properties: PropertyInfo) -> Schema:
    return Schema(provider_id=__import__("uuid").UUID(int=1), event_id=1, version=0, opcode=0, task=0, properties=properties)


def test_layout_types_and_byte_orders() -> None:
    schema = _schema(
        PropertyInfo("a", InType.INT8), PropertyInfo("b", InType.UINT16, OutType.PORT), PropertyInfo("c", InType.POINTER),
        PropertyInfo("d", InType.BOOLEAN), PropertyInfo("e", InType.UINT32, OutType.BOOLEAN), PropertyInfo("f", InType.DOUBLE),
        PropertyInfo("g", InType.FLOAT), PropertyInfo("h", InType.HEXINT64),
    )  # fmt: skip
    schemas = registry()
    for pointer_size in (4, 8):
        decoder = schemas.compiled(schema, pointer_size)
        payloads = [
            bytes([0xFF, 0x01, 0xBB]) + (7).to_bytes(pointer_size, "little") + (2).to_bytes(4, "little") + bytes(4)
            + np.float64(1.5).tobytes() + np.float32(-2.25).tobytes() + (1 << 63).to_bytes(8, "little") + extra
            for extra in (b"", b"trailing bytes")
        ]  # fmt: skip
        assert _compare(decoder, payloads) == 2
        columns = fixed_layout(decoder).read(payloads)  # type: ignore[union-attr]
        assert columns["b"].tolist() == [443, 443] and columns["a"].tolist() == [-1, -1]
        assert fixed_layout(decoder).read([payloads[0][:-1]]) is None  # type: ignore[union-attr]


def test_variable_layouts_are_not_fixed() -> None:
    schemas = registry()
    for prop in (
        PropertyInfo("s", InType.ANSISTRING), PropertyInfo("g", InType.GUID), PropertyInfo("t", InType.FILETIME),
        PropertyInfo("n", InType.UINT32, count=2), PropertyInfo("ip", InType.UINT32, OutType.IPV4),
        PropertyInfo("o", InType.UINT32, optional=True),
    ):  # fmt: skip
        assert fixed_layout(schemas.compiled(_schema(PropertyInfo("x", InType.UINT32), prop), 8)) is None
    assert fixed_layout(lambda data: ({}, {})) is None
    assert isinstance(fixed_layout(schemas.compiled(_schema(PropertyInfo("x", InType.UINT32)), 8)), FixedLayout)
    text = _schema(PropertyInfo("x", InType.UINT32), PropertyInfo("s", InType.UNICODESTRING), PropertyInfo("y", InType.UINT32))
    assert fixed_layout(schemas.compiled(text, 8)) is None  # a number after a string: its offset varies


def test_trailing_strings() -> None:
    schema = _schema(PropertyInfo("x", InType.UINT16), PropertyInfo("s", InType.UNICODESTRING), PropertyInfo("t", InType.UNICODESTRING))
    decoder = registry().compiled(schema, 8)
    layout = fixed_layout(decoder)
    assert layout is not None and layout.strings == ("s", "t") and layout.size == 2
    payloads = [
        b"\x01\x00" + "C:\\a.dll".encode("utf-16-le") + b"\0\0" + "b".encode("utf-16-le") + b"\0\0",
        b"\x02\x00" + "x".encode("utf-16-le") + b"\0\0" + "no terminator".encode("utf-16-le") + b"\x41",  # odd last byte
        b"\x03\x00\x41\x00\x00\x00" + "z".encode("utf-16-le") + b"\0\0",  # a NUL pair at an odd offset is not the end
        b"\x04\x00\x00\xd8\x00\x00" + b"\0\0",  # a lone surrogate is replaced
    ]
    assert _compare(decoder, payloads) == len(payloads)
    assert layout.read([b"\x05\x00" + "only one".encode("utf-16-le") + b"\0\0"]) is None  # the second starts at the end
