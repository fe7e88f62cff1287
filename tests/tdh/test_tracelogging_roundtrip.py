"""Property-based: random TraceLogging field sets and values survive encode -> decode unchanged."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.decode import decode_properties
from openetw.tdh.format import format_properties
from openetw.tdh.schema import PropertyInfo
from openetw.tdh.tracelogging import (
    encode_event_metadata,
    encode_provider_traits,
    pack_values,
    schema_from_tracelogging,
    tl_field,
)

PROVIDER = uuid.UUID("d3dd3dd4-aac2-4e2a-8dd4-a8fb61b77615")

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
_CP1252_TEXT = st.text(st.sampled_from("abcXYZ 019-_é€Žüß\t"), max_size=12)
_INTS = {
    InType.INT8: (-(2**7), 2**7 - 1), InType.UINT8: (0, 2**8 - 1),
    InType.INT16: (-(2**15), 2**15 - 1), InType.UINT16: (0, 2**16 - 1),
    InType.INT32: (-(2**31), 2**31 - 1), InType.UINT32: (0, 2**32 - 1),
    InType.INT64: (-(2**63), 2**63 - 1), InType.UINT64: (0, 2**64 - 1),
    InType.HEXINT32: (0, 2**32 - 1), InType.HEXINT64: (0, 2**64 - 1),
}  # fmt: skip
# Out-types that keep the typed value as it is (formatting hints only).
_OUT_TYPES: dict[int, list[OutType | None]] = {
    InType.INT8: [None, OutType.HEXINT8],
    InType.UINT8: [None, OutType.HEXINT8, OutType.STRING],
    InType.UINT16: [None, OutType.HEXINT16, OutType.PORT, OutType.STRING],
    InType.INT32: [None, OutType.HRESULT, OutType.HEXINT32],
    InType.UINT32: [None, OutType.PID, OutType.TID, OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HEXINT32],
    InType.UINT64: [None, OutType.HEXINT64, OutType.CODE_POINTER],
    InType.ANSISTRING: [None, OutType.UTF8, OutType.XML, OutType.JSON],
    InType.MANIFEST_COUNTEDANSISTRING: [None, OutType.UTF8],
    InType.UNICODESTRING: [None, OutType.XML, OutType.JSON],
    InType.FILETIME: [None, OutType.CULTURE_INSENSITIVE_DATETIME],
}
_SCALAR_TYPES = sorted(set(_INTS) | {1, 2, 11, 12, 13, 14, 15, 17, 18, 19, 22, 23, 25})


def _sid_strategy() -> st.SearchStrategy[str]:
    subs = st.lists(st.integers(0, 2**32 - 1), max_size=5)
    return st.builds(lambda auth, s: "-".join(["S-1", str(auth), *map(str, s)]), st.integers(0, 2**32 - 1), subs)


def value_strategy(prop: PropertyInfo) -> st.SearchStrategy[Any]:
    code = prop.in_type
    utf8 = prop.out_type in (OutType.UTF8, OutType.XML, OutType.JSON)
    if code in _INTS:
        low, high = _INTS[code]  # type: ignore[index]
        return st.integers(low, high)
    simple: dict[int, st.SearchStrategy[Any]] = {
        InType.UNICODESTRING: _TEXT,
        InType.ANSISTRING: _TEXT if utf8 else _CP1252_TEXT,
        InType.MANIFEST_COUNTEDSTRING: _TEXT,
        InType.MANIFEST_COUNTEDANSISTRING: _TEXT if utf8 else _CP1252_TEXT,
        InType.FLOAT: st.floats(width=32, allow_nan=False),
        InType.DOUBLE: st.floats(allow_nan=False),
        InType.BOOLEAN: st.booleans(),
        InType.BINARY: st.binary(max_size=20),
        InType.MANIFEST_COUNTEDBINARY: st.binary(max_size=20),
        InType.GUID: st.uuids(),
        InType.FILETIME: st.datetimes(min_value=datetime(1601, 1, 1, microsecond=1), timezones=st.just(UTC)),  # 0 stays int
        InType.SYSTEMTIME: st.datetimes(min_value=datetime(1601, 1, 1)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
        InType.SID: _sid_strategy(),
    }
    return simple[code]  # type: ignore[index]


_NAMES = st.text("abcdefghijklmnop", min_size=1, max_size=6)


@st.composite
def scalar_field(draw: st.DrawFn, name: str) -> PropertyInfo:
    in_type = InType(draw(st.sampled_from(_SCALAR_TYPES)))
    out_type = draw(st.sampled_from(_OUT_TYPES.get(in_type, [None])))
    arity = draw(st.sampled_from(["scalar", "scalar", "const", "variable"]))
    if in_type == InType.BINARY or arity == "scalar":
        count: Any = None
    else:
        count = draw(st.integers(0, 3)) if arity == "const" else "variable"
    tags = draw(st.sampled_from([0, 0, 5 << 21, 0x1234567]))
    return tl_field(name, in_type, out_type, count, tags=tags)


@st.composite
def field_list(draw: st.DrawFn, depth: int = 0) -> list[PropertyInfo]:
    names = draw(st.lists(_NAMES, min_size=1 if depth else 0, max_size=5 if depth == 0 else 3, unique=True))
    fields = []
    for name in names:
        if depth < 2 and draw(st.integers(0, 5)) == 0:
            members = draw(field_list(depth + 1))
            count = draw(st.sampled_from([None, 2, "variable"]))
            fields.append(tl_field(name, 24, members=members, count=count))
        else:
            fields.append(draw(scalar_field(name)))
    return fields


@st.composite
def field_values(draw: st.DrawFn, fields: list[PropertyInfo]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for prop in fields:
        def one(p: PropertyInfo = prop) -> st.SearchStrategy[Any]:
            return field_values(list(p.members)) if p.members is not None else value_strategy(p)

        if prop.count_in_data:
            values[prop.name] = draw(st.lists(one(), max_size=3))
        elif prop.count is not None:
            values[prop.name] = draw(st.lists(one(), min_size=prop.count, max_size=prop.count))  # type: ignore[arg-type]
        else:
            values[prop.name] = draw(one())
    return values


def expected_decoding(fields: list[PropertyInfo], values: dict[str, Any]) -> dict[str, Any]:
    """What decoding yields: the values, plus TDH's synthesized ``<name>.Length`` before BINARY."""
    out: dict[str, Any] = {}
    for prop in fields:
        value = values[prop.name]
        if prop.members is not None:
            members = list(prop.members)
            value = [expected_decoding(members, v) for v in value] if prop.is_array else expected_decoding(members, value)
        elif prop.in_type == InType.BINARY:
            out.setdefault(f"{prop.name}.Length", len(value))
        out.setdefault(prop.name, value)
    return out


@st.composite
def events(draw: st.DrawFn) -> tuple[str, int, list[PropertyInfo], dict[str, Any]]:
    fields = draw(field_list())
    return draw(_NAMES), draw(st.integers(0, 0x0FFFFFFF)), fields, draw(field_values(fields))


@settings(max_examples=250, deadline=None)
@given(events(), st.sampled_from([4, 8]))
def test_encode_decode_round_trip(event: tuple[str, int, list[PropertyInfo], dict[str, Any]], pointer_size: int) -> None:
    name, tags, fields, values = event
    metadata = encode_event_metadata(name, fields, tags=tags)
    traits = encode_provider_traits("Round.Trip", uuid.UUID(int=tags))
    schema = schema_from_tracelogging(PROVIDER, metadata, traits)
    assert (schema.event_name, schema.tags, schema.provider_name) == (name, tags, "Round.Trip")

    decoded = decode_properties(schema, pack_values(fields, values), pointer_size)
    assert decoded.ok, decoded.errors
    assert decoded.trailing == b""
    assert dict(decoded) == expected_decoding(fields, values)
    format_properties(decoded)  # every value can be rendered

    # The decoded schema describes the same event: encoding it again gives the same bytes.
    assert encode_event_metadata(schema.event_name, schema.properties, tags=schema.tags) == metadata
