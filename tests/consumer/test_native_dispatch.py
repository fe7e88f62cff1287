"""The compiled delivery loop (``openetw._native._dispatch``) against the pure loop of the plan.

Over every corpus .etl, the busiest provider's callbacks and a second provider's see the same
records (bytes, header fields, a parsed property), in the same order, with the same counts, on
both engines; and the cases the compiled loop hands back to Python — a callback that raises, a
trace stopped from a callback, records a callback keeps, no object reuse — behave the same.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import openetw._native as native
from openetw.consumer import EtlIndex, Provider, UserTrace
from openetw.consumer._engine import plan
from tests.native import cases

_dispatch = native.module("_dispatch")
if _dispatch is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled delivery loop must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_dispatch is None, reason=f"compiled delivery loop not active: {native.reason()}")

Seen = list[tuple[Any, ...]]


def _busiest(path: Path, count: int = 2) -> list[str]:
    index = EtlIndex.open(path)
    index.ensure_built()
    codes = np.concatenate([segment.records["provider"] for segment in index.segments()])
    codes = codes[codes >= 0]
    ranked = np.argsort(-np.bincount(codes), kind="stable")[:count] if len(codes) else []
    return [str(index.providers[int(code)]) for code in ranked]


def _run(
    path: Path, guids: list[str], compiled: bool, monkeypatch: pytest.MonkeyPatch, *, on_event: Callable[..., Any] | None = None,
    stop_after: int = -1, **options: Any,
) -> tuple[Seen, dict[str, Any]]:  # fmt: skip
    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    seen: Seen = []
    trace = UserTrace(files=[path], manifests=None, **options)
    for number, guid in enumerate(guids):
        provider = Provider(guid)

        def record_it(record: Any, context: Any, number: int = number) -> None:
            # Every 8th record is parsed (a parser held by the context, as well as the record);
            # the others are not: the two ways a record is taken over for the next one.
            value = None
            if len(seen) % 8 == 0:
                parser = context.parser_for(record)
                names = parser.schema.property_names
                value = repr(parser.try_parse(names[0])) if names else None
            seen.append((number, zlib.crc32(record.raw), record.timestamp, record.pid, zlib.crc32(record.user_data), value))
            if on_event is not None:
                on_event(record, context, trace)
            if len(seen) == stop_after:
                trace.stop()

        provider.add_on_event_callback(record_it)
        trace.enable(provider)
    trace.start()
    return seen, trace.query_stats()


@pytest.mark.parametrize("path", cases.corpus_files(), ids=lambda path: path.name)
def test_every_corpus_file_delivers_the_same_on_both_loops(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guids = _busiest(path)
    if not guids:
        pytest.skip("no provider in this file")
    compiled, compiled_stats = _run(path, guids, True, monkeypatch)
    pure, pure_stats = _run(path, guids, False, monkeypatch)
    assert compiled == pure
    assert compiled_stats == pure_stats
    assert compiled_stats["events_handled"] >= len(compiled) > 0


DIAGHUB = cases.CORPUS / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
BUSIEST = "b3e675d7-2554-4f18-830b-2762732560de"


def test_a_raising_callback_is_reported_and_delivery_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def raise_every_seventh(record: Any, context: Any, trace: Any) -> None:
        if record.timestamp % 7 == 0:
            raise ValueError("seventh")

    results = []
    for compiled in (True, False):
        seen, stats = _run(DIAGHUB, [BUSIEST], compiled, monkeypatch, on_event=raise_every_seventh, stop_after=5000)
        results.append((seen, stats))
        assert stats["callback_errors"] > 0
    assert results[0] == results[1]


def test_a_trace_stopped_from_a_callback_stops_at_the_same_record(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _run(DIAGHUB, [BUSIEST], True, monkeypatch, stop_after=1000)
    pure = _run(DIAGHUB, [BUSIEST], False, monkeypatch, stop_after=1000)
    assert len(compiled[0]) == 1000
    assert compiled == pure
    assert compiled[1]["events_not_processed"] > 0


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no-reuse"])
def test_kept_records_stay_what_they_were(reuse: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[Any, bytes]] = []

    def keep_some(record: Any, context: Any, trace: Any) -> None:
        if record.timestamp % 13 == 0:
            kept.append((record, record.raw))

    seen, _ = _run(DIAGHUB, [BUSIEST], True, monkeypatch, on_event=keep_some, stop_after=5000, reuse_objects=reuse)
    assert kept and all(record.raw == raw for record, raw in kept)
    assert len({id(record) for record, _ in kept}) == len(kept)
    pure, _ = _run(DIAGHUB, [BUSIEST], False, monkeypatch, stop_after=5000, reuse_objects=reuse)
    assert seen == pure


def test_the_compiled_loop_checks_its_columns() -> None:
    assert _dispatch is not None
    ints = np.zeros(4, dtype=np.int64)
    with pytest.raises(TypeError):
        _dispatch.deliver([], [], np.zeros(4, dtype=np.int32), ints, ints, ints, ints, ints, 0, 4, None, None, None, None, 0, True, None, -1, ints[:1].copy())
    with pytest.raises(IndexError):
        _dispatch.deliver([], [], ints, ints, ints, ints, ints, ints, 0, 5, None, None, None, None, 0, True, None, -1, ints[:1].copy())


NET = cases.CORPUS / "perfview" / "net.4.5.2.x64.etl"
SAMPLES = "ce1dbfb4-137e-4da6-87b0-3f59aa102cbc"  # the kernel's samples: every processor's buffers take turns


def test_the_compiled_loop_goes_on_across_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _dispatch is not None
    entered = 0

    def deliver(*args: Any) -> Any:
        nonlocal entered
        entered += 1
        return _dispatch.deliver(*args)

    class Counting:
        pass

    counting = Counting()
    counting.deliver = deliver  # type: ignore[attr-defined]
    monkeypatch.setattr(plan, "_NATIVE", counting)
    calls = 0

    def on_event(record: Any, context: Any) -> None:
        nonlocal calls
        calls += 1

    trace = UserTrace(files=[NET], manifests=None)
    provider = Provider(SAMPLES)
    provider.add_on_event_callback(on_event)
    trace.enable(provider)
    trace.start()
    # The rows alternate between buffers: a loop that stopped at each buffer's end would be
    # entered about once per callback.
    assert calls > 50_000
    assert entered * 50 < calls


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_the_state_a_trace_learns_is_what_its_records_say(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # State records are observed with the schema the plan found for their kind: the processes
    # and images learned are those of observing every record of the file in order.
    from openetw.etl import EtlReader

    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    trace = UserTrace(files=[NET], manifests=None)
    provider = Provider(SAMPLES)
    provider.add_on_event_callback(lambda record, context: None)
    trace.enable(provider)
    trace.start()
    learned = trace.context.decode_context
    reference = UserTrace(files=[NET], manifests=None).context.decode_context
    with EtlReader(NET) as reader:
        reference.learn(reader.records(time_order=True))
    assert learned.processes == reference.processes
    pids = {info.pid for info in reference.processes} | {0}
    assert sum(len(reference.images(pid)) for pid in pids) > 100
    for pid in pids:
        assert learned.images(pid) == reference.images(pid)


_PARSED_RECORDS = 4000  # per run: enough rows of every kind after the first


def _parse_all(path: Path, guids: list[str], compiled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Seen, int]:
    """The first records' properties (up to 8 each) through ``try_parse`` and ``parse``, an
    absent name too; and how many records had values the compiled loop read from their rows."""
    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    seen: Seen = []
    read_from_rows = 0
    trace = UserTrace(files=[path], manifests=None)

    def parse_all(record: Any, context: Any) -> None:
        nonlocal read_from_rows
        tdh = context.tdh_schema_for(record)
        names = [prop.name for prop in tdh.properties][:8] if tdh is not None else []
        parser = context.parser_for(record)
        read_from_rows += bool(parser._values)
        values: list[Any] = [repr(parser.try_parse(name, "absent")) for name in [*names, "NoSuchProperty"]]
        for name in names[:2]:
            try:
                values.append(repr(parser.parse(name)))
            except Exception as error:  # noqa: BLE001 - the error is what is compared
                values.append(type(error).__name__)
        values.append(repr(parser.try_parse(names[0], type=int)) if names else None)
        seen.append((zlib.crc32(record.raw), *values))
        if len(seen) == _PARSED_RECORDS:
            trace.stop()

    for guid in guids:
        provider = Provider(guid)
        provider.add_on_event_callback(parse_all)
        trace.enable(provider)
    trace.start()
    return seen, read_from_rows


@pytest.mark.parametrize("path", [DIAGHUB, NET, *[path for path in cases.corpus_files()[:4] if path.name != DIAGHUB.name]], ids=lambda path: path.name)
def test_properties_read_from_the_rows_are_what_the_parser_reads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The compiled loop reads the properties asked of a kind of event from each later row of
    # that kind into the parser it makes ready: the values are the pure loop's.
    guids = _busiest(path)
    if not guids:
        pytest.skip("no provider in this file")
    compiled, read_from_rows = _parse_all(path, guids, True, monkeypatch)
    pure, none_read = _parse_all(path, guids, False, monkeypatch)
    assert compiled == pure
    assert none_read == 0
    if path in (DIAGHUB, NET):
        assert read_from_rows > len(compiled) // 2


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no-reuse"])
def test_a_kept_parser_keeps_its_records_values(reuse: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[Any, Any]] = []
    monkeypatch.setattr(plan, "_NATIVE", _dispatch)
    trace = UserTrace(files=[DIAGHUB], manifests=None, reuse_objects=reuse)

    def keep_parsers(record: Any, context: Any) -> None:
        parser = context.parser_for(record)
        value = parser.try_parse("ImageSize")
        if len(kept) < 500 and record.timestamp % 5 == 0:
            kept.append((parser, value))
        if len(kept) == 500:
            trace.stop()

    provider = Provider(BUSIEST)
    provider.add_on_event_callback(keep_parsers)
    trace.enable(provider)
    trace.start()
    assert len(kept) == 500
    assert len({id(parser) for parser, _ in kept}) == len(kept)
    assert all(parser.try_parse("ImageSize") == value for parser, value in kept)
    assert sum(value is not None for _, value in kept) > 50


def test_every_scalar_type_read_from_the_rows_is_what_the_parser_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Events of one provider, a schema of every fixed-size scalar (each number width and sign,
    # FLOAT and DOUBLE, pointers at both sizes, the types whose values are not plain numbers)
    # per event id, with payloads of random bytes, some of them too short: the compiled loop's
    # values, and what it leaves to ``parse``, are the pure loop's.
    import random

    from openetw.etl.build import build_event_record
    from openetw.etl.intypes import InType, OutType
    from openetw.tdh.schema import PropertyInfo
    from openetw.tdh.schema import Schema as TdhSchema
    from tests.consumer.helpers import PROVIDER_A, REFERENCE, write_etl

    scalars = [
        (InType.INT8, None), (InType.UINT8, None), (InType.INT16, None), (InType.UINT16, OutType.PORT), (InType.INT32, None),
        (InType.UINT32, None), (InType.HEXINT32, None), (InType.INT64, None), (InType.UINT64, None), (InType.FLOAT, None),
        (InType.DOUBLE, None), (InType.POINTER, None), (InType.SIZET, None), (InType.BOOLEAN, None), (InType.GUID, None),
        (InType.FILETIME, None), (InType.UINT8, OutType.BOOLEAN), (InType.UINT32, OutType.IPV4), (InType.UNICODESTRING, None),
        (InType.UINT32, None),
    ]  # fmt: skip
    rng = random.Random(7)
    schemas = {}
    for event_id in range(4):
        chosen = rng.sample(scalars, 12) if event_id else scalars
        props = tuple(PropertyInfo(f"p{n}", in_type, out_type) for n, (in_type, out_type) in enumerate(chosen))
        schemas[event_id] = TdhSchema(PROVIDER_A, event_id=event_id, properties=props)

    records = []
    for n in range(2400):
        event_id = n % 4
        length = rng.choice([0, 3, 17, 40, 90, 120, 200])
        records.append(build_event_record(
            provider_id=PROVIDER_A, id=event_id, timestamp=REFERENCE + (n + 1) * 100, cpu=n % 2, pointer_size=4 if n % 3 == 0 else 8,
            user_data=rng.randbytes(length),
        ))  # fmt: skip
    path = write_etl(tmp_path / "scalars.etl", records)
    compiled_seen, read_from_rows = _parse_with(path, PROVIDER_A, schemas, True, monkeypatch)
    pure_seen, none_read = _parse_with(path, PROVIDER_A, schemas, False, monkeypatch)
    assert len(compiled_seen) == 2400
    assert compiled_seen == pure_seen
    assert none_read == 0 and read_from_rows > 2000


def _parse_with(path: Path, provider_id: Any, schemas: dict[int, Any], compiled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Seen, int]:
    """Every property of every record of ``path`` through ``parse`` and ``try_parse``, the schemas
    by event id being ``schemas``; and how many records had values read from their rows."""
    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    seen: Seen = []
    read_from_rows = 0
    trace = UserTrace(files=[path], manifests=[])
    trace.context._lookup = lambda record: schemas.get(record.id)  # type: ignore[method-assign]

    def parse_all(record: Any, context: Any) -> None:
        nonlocal read_from_rows
        parser = context.parser_for(record)
        read_from_rows += bool(parser._values)
        values: list[Any] = []
        for prop in schemas[record.id].properties:
            try:
                values.append(repr(parser.parse(prop.name)))
            except Exception as error:  # noqa: BLE001 - the error is what is compared
                values.append(type(error).__name__)
            values.append(repr(parser.try_parse(prop.name, "absent")))
        seen.append((record.id, len(record.user_data), *values))

    provider = Provider(str(provider_id))
    provider.add_on_event_callback(parse_all)
    trace.enable(provider)
    trace.start()
    return seen, read_from_rows
