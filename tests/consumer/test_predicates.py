"""Predicates and combinators, on records from the test kit, one by one and on index columns."""

from __future__ import annotations

import numpy as np
import pytest

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P
from openetw.consumer.index import EtlIndex
from openetw.testing import EventRecordBuilder, push_records
from tests.consumer.helpers import every_kind, write_etl

PROVIDER = "Contoso.Predicates"


def _record(event_id: int = 1, **properties: object) -> object:
    builder = EventRecordBuilder(PROVIDER, event_id, version=2, opcode=3, pid=42, level=4)
    builder.add_properties(properties)
    return builder.pack_tracelogging("Sample")


@pytest.fixture
def context() -> object:
    return UserTrace(manifests=[]).context


def test_header_predicates(context: object) -> None:
    record = _record(7)
    assert P.id_is(7)(record, context) and not P.id_is(8)(record, context)
    assert P.opcode_is(3)(record, context) and not P.opcode_is(0)(record, context)
    assert P.version_is(2)(record, context) and not P.version_is(1)(record, context)
    assert P.process_id_is(42)(record, context) and not P.process_id_is(41)(record, context)
    assert P.any_event(record, context) and not P.no_event(record, context)


def test_property_predicates(context: object) -> None:
    record = _record(Path="C:\\Windows\\System32\\Notepad.exe", Count=3, Flag=True)
    assert P.property_is("Count", 3)(record, context)
    assert not P.property_is("Count", 3.0)(record, context)  # typed: a float is not the int
    assert not P.property_is("Flag", 1)(record, context)  # nor is a bool
    assert P.property_is("Flag", True)(record, context)
    assert P.property_equals("Path", "C:\\Windows\\System32\\Notepad.exe")(record, context)
    assert not P.property_equals("Path", "c:\\windows\\system32\\notepad.exe")(record, context)
    assert P.property_iequals("Path", "c:\\windows\\system32\\notepad.exe")(record, context)
    assert P.property_equals("Count", 3)(record, context) and P.property_equals("Count", "3")(record, context)
    assert P.property_contains("Path", "System32")(record, context)
    assert not P.property_contains("Path", "system32")(record, context)
    assert P.property_icontains("Path", "SYSTEM32")(record, context)
    assert P.property_starts_with("Path", "C:\\")(record, context)
    assert P.property_istarts_with("Path", "c:\\windows")(record, context)
    assert P.property_ends_with("Path", ".exe")(record, context)
    assert P.property_iends_with("Path", "NOTEPAD.EXE")(record, context)
    assert not P.property_equals("Missing", "x")(record, context)
    assert not P.property_is("Missing", None)(record, context)


def test_combinators(context: object) -> None:
    record = _record(5, Name="abc")
    yes, no = P.id_is(5), P.id_is(6)
    assert P.and_(yes, P.property_equals("Name", "abc"))(record, context)
    assert not P.and_(yes, no)(record, context)
    assert P.or_(no, yes)(record, context) and not P.or_(no, no)(record, context)
    assert P.not_(no)(record, context) and not P.not_(yes)(record, context)
    assert P.all_of([yes, P.opcode_is(3), P.version_is(2)])(record, context)
    assert P.all_of([])(record, context) and not P.any_of([])(record, context)
    assert P.any_of([no, P.version_is(9), yes])(record, context)
    assert P.none_of([no, P.version_is(9)])(record, context) and not P.none_of([no, yes])(record, context)
    assert (yes & ~no | no)(record, context)
    plain = lambda record, context: record.pid == 42  # noqa: E731 - a plain callable is a predicate too
    assert P.and_(plain, yes)(record, context) and not P.and_(plain, no)(record, context)


def test_combinators_stop_early(context: object) -> None:
    calls: list[str] = []

    def spy(name: str, result: bool) -> P.Predicate:
        return P.Predicate(lambda record, context: calls.append(name) or result)

    record = _record()
    P.all_of([spy("a", False), spy("b", True)])(record, context)
    P.any_of([spy("c", True), spy("d", True)])(record, context)
    assert calls == ["a", "c"]


def test_property_predicates_need_the_context() -> None:
    with pytest.raises(TypeError):
        P.property_is("Count", 3)(_record(Count=3), None)


def test_filters_with_predicates_through_a_trace() -> None:
    trace = UserTrace(manifests=[])
    provider = Provider(PROVIDER)
    got: dict[str, list[int]] = {"big": [], "ids": [], "both": []}
    big = EventFilter(P.property_is("Count", 10))
    big.add_on_event_callback(lambda record, context: got["big"].append(record.id))
    ids = EventFilter([1, 3])
    ids.add_on_event_callback(lambda record, context: got["ids"].append(record.id))
    both = EventFilter([1, 2], P.not_(P.property_is("Count", 10)))
    both.add_on_event_callback(lambda record, context: got["both"].append(record.id))
    for event_filter in (big, ids, both):
        provider.add_filter(event_filter)
    trace.enable(provider)
    records = [_record(i, Count=10 if i % 2 else 0) for i in (1, 2, 3, 4)]
    stats = push_records(trace, records)
    assert got == {"big": [1, 3], "ids": [1, 3], "both": [2]}
    assert stats["events_handled"] == 4


def test_masks_agree_with_record_by_record(tmp_path: object) -> None:
    path = write_etl(tmp_path / "kinds.etl", every_kind(160))  # type: ignore[operator]
    index = EtlIndex.open(path)
    predicates = [
        P.id_is(3), P.opcode_is(1), P.version_is(2), P.process_id_is(200), P.any_event, P.no_event,
        P.and_(P.id_is(2), P.version_is(1)), P.or_(P.opcode_is(2), P.process_id_is(4)), P.not_(P.id_is(0)),
        P.none_of([P.id_is(1), P.id_is(2)]), P.all_of([]), P.any_of([]),
    ]  # fmt: skip
    with index.loader() as loader:
        records = list(loader.records(np.arange(len(index))))
    for predicate in predicates:
        mask = predicate.mask(index.records)
        assert mask is not None, predicate
        assert mask.tolist() == [predicate(record, None) for record in records], predicate
    assert P.property_is("x", 1).mask(index.records) is None
    assert P.and_(P.id_is(1), P.property_is("x", 1)).mask(index.records) is None
