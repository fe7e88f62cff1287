"""The compiled twin of each event's generated ``write_fast`` against the generated function:
for random fields and values (in range, out of range, of other types, text with NUL, lone
surrogates and characters past the BMP), in every write form, the same results and the same
record bytes, whether the record goes to a Python write function or straight into a pool.

The write forms: ``Provider.write(event, ...)`` (a tuple of values), ``TraceLoggingProvider.write``
(a dict of fields, with the variant's level, keyword and opcode), a declared event's and an
mc-generated ``write_<event>`` (positional, and by argument name).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from types import FunctionType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.etl.intypes import InType, OutType
from openetw.ipc.pool import POOL_HEADER, BufferPool, PoolWriter
from openetw.provider import activity
from openetw.provider import runtime as R
from openetw.provider.activity import activity_variable
from openetw.provider.encode import ManifestEventEncoder, TraceLoggingEventEncoder

_write = native.module("_write")
needs_native = pytest.mark.skipif(
    _write is None and os.environ.get("CI") != "true", reason=f"compiled write side not active here: {native.reason()}"
)
GUID = uuid.UUID("6a2b9c3e-0b0e-4f6e-9a59-2f4b1c7d8e91")
CLOCK_VALUE = 0x1234_5678_9ABC

FIELD_TYPES = [
    (InType.INT8, None), (InType.UINT8, None), (InType.INT16, None), (InType.UINT16, None), (InType.INT32, None),
    (InType.UINT32, None), (InType.INT64, None), (InType.UINT64, None), (InType.FLOAT, None), (InType.DOUBLE, None),
    (InType.BOOLEAN, None), (InType.GUID, None), (InType.UNICODESTRING, None), (InType.ANSISTRING, OutType.UTF8),
    (InType.HEXINT32, None), (InType.HEXINT64, None), (InType.POINTER, None), (InType.UINT16, OutType.PORT),
    (InType.ANSISTRING, None), (InType.FILETIME, None),
]  # fmt: skip
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12) | st.sampled_from(["", "a\0b", "\ud800x", "\U0001f600", "ünï"])
VALUES = st.one_of(
    st.integers(-(2**64), 2**64),
    st.integers(-300, 300),
    st.floats(allow_nan=False, width=64) | st.just(1e300),
    st.booleans(),
    TEXT,
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    st.just(None),
    st.binary(max_size=4),
)
FIELDS = st.lists(st.sampled_from(FIELD_TYPES), min_size=0, max_size=5)
TL_FIELDS = st.lists(st.sampled_from([t for t in FIELD_TYPES if t[0] != InType.POINTER]), min_size=0, max_size=5)


def pool_bytes(pool: BufferPool) -> bytes:
    """The pool's bytes, its random Identity (a name, no state) zeroed: two pools compare by state."""
    data = bytearray(pool.view)
    at = POOL_HEADER.offset("Identity")
    data[at : at + 8] = bytes(8)
    return bytes(data)


def generated(made: tuple[Any, dict[str, Any]], names: dict[str, Any]) -> Callable[..., Any]:
    code, namespace = made
    return FunctionType(code, {**namespace, **R._FAST_WRITE_NAMES, "CLOCK": lambda: CLOCK_VALUE, **names})


def twin(made: tuple[Any, dict[str, Any]], python: Callable[..., Any], route: list[Any]) -> Callable[..., Any] | None:
    plan = made[1]["NATIVE_PLAN"]
    if plan is None:
        return None
    assert _write is not None
    names = R._FAST_WRITE_NAMES
    return _write.FastWrite(plan, python, route, activity_variable, names["NO_ACTIVITY"], names["PID"], lambda: CLOCK_VALUE, names["UNMAPPED"])  # type: ignore[no-any-return]


Maker = Callable[[Callable[..., Any]], tuple[Callable[..., Any], Callable[..., Any] | None]]
Calls = list[tuple[tuple[Any, ...], dict[str, Any]]]
FieldTypes = list[tuple[InType, OutType | None]]


def call_all(function: Callable[..., Any], calls: Calls) -> list[Any]:
    results = []
    for args, kwargs in calls:
        try:
            results.append(function(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the two must fail alike too
            results.append((type(exc).__name__, str(exc)))
    return results


class Collector:
    """A Python write function: keeps each record; every third write says it was not written."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def __call__(self, record: bytes, timestamp: int, cpu: int = 0) -> bool:
        self.got.append((bytes(record), timestamp, cpu))
        return len(self.got) % 3 != 0


def both(make: Maker, calls: Calls) -> None:
    """Every call through the generated function and its twin, writing to a list, then to a pool."""
    seen = []
    for sink in ("list", "pool"):
        for engine in ("python", "native"):
            collect = Collector()
            got = collect.got
            pool = BufferPool.create(2048, 3, logger_id=1, producer_pid=1, flush_interval_ms=0)
            writer = PoolWriter(pool, engine=engine)
            python, compiled = make(collect if sink == "list" else writer.write)
            function = compiled if engine == "native" else python
            if function is None:
                pool.close()
                return  # no compiled plan for these fields: the generated function is all there is
            got += call_all(function, calls)
            writer.flush()
            got.append(pool_bytes(pool))
            pool.close()
            seen.append(got)
    assert seen[0] == seen[1]
    assert seen[2] == seen[3]


_INT_RANGES = {
    InType.INT8: (-128, 127), InType.UINT8: (0, 255), InType.INT16: (-(2**15), 2**15 - 1), InType.UINT16: (0, 2**16 - 1),
    InType.INT32: (-(2**31), 2**31 - 1), InType.UINT32: (0, 2**32 - 1), InType.HEXINT32: (0, 2**32 - 1), InType.BOOLEAN: (-(2**31), 2**31 - 1),
    InType.INT64: (-(2**63), 2**63 - 1), InType.UINT64: (0, 2**64 - 1), InType.HEXINT64: (0, 2**64 - 1), InType.POINTER: (0, 2**64 - 1),
}  # fmt: skip


def fitting(in_type: InType) -> st.SearchStrategy[Any]:
    """Values the field takes as they are (mostly), at the edges of its range too."""
    if in_type in _INT_RANGES:
        low, high = _INT_RANGES[in_type]
        return st.integers(low, high) | st.sampled_from([low, high]) | st.booleans()
    if in_type in (InType.FLOAT, InType.DOUBLE):
        return st.floats(allow_nan=False, width=32 if in_type == InType.FLOAT else 64) | st.integers(-(2**70), 2**70)
    if in_type == InType.GUID:
        return st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
    return TEXT


def values_for(draw: st.DrawFn, types: FieldTypes) -> tuple[Any, ...]:
    return tuple(draw(fitting(in_type) if draw(st.integers(0, 9)) else VALUES) for in_type, _ in types)


@needs_native
@settings(max_examples=80, deadline=None)
@given(data=st.data(), types=FIELDS)
def test_manifest_and_positional_writes_match_the_generated_function(data: st.DataObject, types: FieldTypes) -> None:
    fields = [(f"f{i}", in_type, out_type) if out_type is not None else (f"f{i}", in_type) for i, (in_type, out_type) in enumerate(types)]
    encoder = ManifestEventEncoder(GUID, (7, 1, 16, 4, 2, 3, 0x10), fields)
    calls = [(values_for(data.draw, types), {}) for _ in range(6)]

    def by_tuple(write: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
        made = encoder.fast_writer_code()
        python = generated(made, {"WRITE": write})
        return python, twin(made, python, [write])

    both(by_tuple, [((values,), {}) for values, _ in calls])

    def positional(write: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
        made = encoder.fast_writer_code(positional=True, argument_names=[f"a{i}" for i in range(len(types))])
        route = [write]
        python = generated(made, {"ROUTE": route, "GENERAL": lambda values: ("general", values)})
        return python, twin(made, python, route)

    keyword_calls = [((), {f"a{i}": value for i, value in enumerate(values)}) for values, _ in calls[:2]]
    both(positional, [*calls, *keyword_calls, ((1,) * (len(types) + 1), {})])


@needs_native
@settings(max_examples=60, deadline=None)
@given(data=st.data(), types=TL_FIELDS, variant=st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 2)))
def test_tracelogging_writes_by_name_match_the_generated_function(data: st.DataObject, types: FieldTypes, variant: tuple[int, int, int]) -> None:
    fields = [(f"f{i}", in_type, out_type) if out_type is not None else (f"f{i}", in_type) for i, (in_type, out_type) in enumerate(types)]
    encoder = TraceLoggingEventEncoder("Test.Native", "Counted", fields, level=variant[0], keyword=variant[1], opcode=variant[2])
    first = values_for(data.draw, types)
    names = [f"f{i}" for i in range(len(types))]
    calls = []
    for _ in range(6):
        values = data.draw(st.sampled_from([first, values_for(data.draw, types)]))
        fields_given = dict(zip(names, values, strict=True))
        if data.draw(st.booleans()):
            fields_given = dict(reversed(fields_given.items()))
        level, keyword, opcode = data.draw(st.sampled_from([variant, (variant[0] + 1, variant[1], variant[2]), (True, variant[1], variant[2])]))
        calls.append(((fields_given, level, keyword, opcode), {}))

    def by_name(write: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any] | None]:
        made = encoder.fast_writer_code(tuple(map(type, first)), names, variant=variant)
        python = generated(made, {"WRITE": write})
        return python, twin(made, python, [write])

    both(by_name, calls)


@needs_native
def test_inside_an_activity_the_twin_leaves_the_write_to_the_general_path() -> None:
    encoder = ManifestEventEncoder(GUID, (7, 1, 16, 4, 2, 3, 0x10), [("a", InType.UINT32)])
    made = encoder.fast_writer_code(positional=True)
    route: list[Any] = [lambda record, timestamp, cpu: True]
    python = generated(made, {"ROUTE": route, "GENERAL": lambda values: ("general", values)})
    compiled = twin(made, python, route)
    assert compiled is not None
    assert compiled(5) is True
    with activity():
        assert compiled(5) == ("general", (5,))
    route[0] = None
    assert compiled(5) is False


def _records(pool: BufferPool) -> list[bytes]:
    """Every record in the pool's FULL buffers, in order."""
    pool.writer().flush()
    found = []
    for index in pool.full_buffers():
        data = pool.take(index)
        pool.release(index)
        used = int.from_bytes(data[0x30:0x34], "little")
        position = 0x48
        while position < used:
            size = int.from_bytes(data[position : position + 2], "little")
            found.append(data[position : position + size])
            position += (size + 7) & ~7
    return found


def _enabled(provider: Any, pool: BufferPool) -> None:
    from openetw.session import EnableRule, EnableState, SessionEnable

    provider._apply_state(EnableState.from_sessions([SessionEnable(1, 1, EnableRule(level=5))]), {1: pool.writer()}, notify=False)


TL_CALLS = st.lists(
    st.tuples(
        st.sampled_from(["Counted", "Other"]),
        st.sampled_from([(), (4,), (4, 0x10), (4, 0x10, 0)]),
        st.sampled_from([{}, {"level": 4}, {"level": 4, "keyword": 0x10}, {"keyword": 0x10, "level": 4, "opcode": 0}, {"level": 3}]),
        st.lists(st.sampled_from(["count", "total", "name", "extra"]), unique=True, max_size=4),
        st.integers(0, 2**64),
        TEXT,
    ),
    max_size=25,
)


@needs_native
@settings(max_examples=40, deadline=None)
@given(calls=TL_CALLS)
def test_tracelogging_provider_write_matches_the_pure_provider(calls: list[Any]) -> None:
    from openetw.provider import TraceLoggingProvider

    outcomes = []
    saved = R._compiled
    saved_clock, saved_monotonic = R._FAST_WRITE_NAMES["CLOCK"], R._monotonic_ns
    R._FAST_WRITE_NAMES["CLOCK"] = R._monotonic_ns = lambda: CLOCK_VALUE  # type: ignore[assignment]
    try:
        for compiled in (saved, None):
            R._compiled = compiled
            with BufferPool.create(64 * 1024, 8, logger_id=1, producer_pid=1, flush_interval_ms=0) as pool:
                provider = TraceLoggingProvider("Test.NativeWrite")
                assert (type(provider.__dict__.get("write")).__name__ == "TraceLoggingWrite") == (compiled is not None)
                _enabled(provider, pool)
                results = []
                for name, positional, keywords, fields, number, text in calls:
                    values = {"count": number & 0xFFFFFFFF, "total": number, "name": text, "extra": 1.5}
                    given = {**{k: v for k, v in keywords.items() if not positional or k not in ("level", "keyword", "opcode")[: len(positional)]},
                             **{field: values[field] for field in fields}}  # fmt: skip
                    results.append(call_all(provider.write, [((name, *positional), given)]))
                outcomes.append((results, _records(pool)))
    finally:
        R._compiled = saved
        R._FAST_WRITE_NAMES["CLOCK"], R._monotonic_ns = saved_clock, saved_monotonic  # type: ignore[assignment]
    assert outcomes[0] == outcomes[1]


MANIFEST_CALLS = st.lists(
    st.tuples(
        st.sampled_from(["event", "single", "other", "descriptor", "list"]),
        st.lists(VALUES | fitting(InType.UINT32) | TEXT, max_size=4),
        st.booleans(),  # the values as one mapping by field name
    ),
    max_size=25,
)


@needs_native
@settings(max_examples=40, deadline=None)
@given(calls=MANIFEST_CALLS, disable_at=st.integers(0, 30))
def test_provider_write_matches_the_pure_provider(calls: list[Any], disable_at: int) -> None:
    from openetw.provider import Provider
    from openetw.session import DISABLED

    outcomes = []
    saved = R._compiled
    saved_clock, saved_monotonic = R._FAST_WRITE_NAMES["CLOCK"], R._monotonic_ns
    R._FAST_WRITE_NAMES["CLOCK"] = R._monotonic_ns = lambda: CLOCK_VALUE  # type: ignore[assignment]
    try:
        for compiled in (saved, None):
            R._compiled = compiled
            with BufferPool.create(64 * 1024, 8, logger_id=1, producer_pid=1, flush_interval_ms=0) as pool:
                provider = Provider(GUID)
                assert (type(provider.__dict__.get("write")).__name__ == "ProviderWrite") == (compiled is not None)
                events = {
                    "event": provider.event((7, 1, 16, 4, 2, 3, 0x10), [("count", InType.UINT32), ("total", InType.UINT64), ("name", InType.UNICODESTRING)]),
                    "single": provider.event((8, 0, 16, 4, 0, 0, 0x10), [("name", InType.UNICODESTRING)]),
                    "other": provider.event((9, 0, 16, 5, 0, 0, 0x20), []),
                    "descriptor": R.EventDescriptor(10, 0, 16, 4, 0, 0, 0x10),
                    "list": [11, 0, 16, 4, 0, 0, 0x10],
                }
                _enabled(provider, pool)
                results = []
                for number, (which, values, by_name) in enumerate(calls):
                    if number == disable_at:
                        provider._apply_state(DISABLED, {}, notify=False)
                    event = events[which]
                    if by_name and isinstance(event, ManifestEventEncoder):
                        given: tuple[Any, ...] = ({field.name: value for field, value in zip(event.fields, values, strict=False)},)
                    elif which in ("descriptor", "list"):
                        given = tuple(value for value in values if isinstance(value, bytes))
                    else:
                        given = tuple(values)
                    results.append(call_all(provider.write, [((event, *given), {})]))
                outcomes.append((results, _records(pool)))
    finally:
        R._compiled = saved
        R._FAST_WRITE_NAMES["CLOCK"], R._monotonic_ns = saved_clock, saved_monotonic  # type: ignore[assignment]
    assert outcomes[0] == outcomes[1]
