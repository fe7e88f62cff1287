"""Providers, filters and callbacks through a trace's real delivery, and what happens on errors."""

from __future__ import annotations

from typing import Any

import pytest

from openetw.consumer import (
    EnableProperty,
    EventFilter,
    KernelTrace,
    Provider,
    TraceStateError,
    UserTrace,
)
from openetw.consumer import predicates as P
from openetw.errors import InvalidArgument
from openetw.guids import provider_guid_from_name
from openetw.manifest import load_manifest
from openetw.testing import EventRecordBuilder, manifest_schema, push_records
from tests.conftest import corpus_path
from tests.consumer.helpers import KERNEL_PROCESS_MANIFEST

A, B, C = "Contoso.A", "Contoso.B", "Contoso.C"


def event(provider: str, event_id: int = 1, **header: Any) -> Any:
    return EventRecordBuilder(provider, event_id, **header).add_property("n", event_id).pack_tracelogging(f"E{event_id}")


def test_provider_filter_and_default_callbacks_in_order() -> None:
    trace = UserTrace(manifests=[])
    calls: list[tuple[str, str, int]] = []
    a = Provider(A)
    a.add_on_event_callback(lambda r, c: calls.append(("a", c.schema_for(r).provider_name, r.id)))
    only_two = EventFilter([2])
    only_two.add_on_event_callback(lambda r, c: calls.append(("a:2", c.schema_for(r).event_name, r.id)))
    a.add_filter(only_two)
    b = Provider(B)
    b.add_on_event_callback(lambda r, c: calls.append(("b", c.schema_for(r).provider_name, r.id)))
    trace.enable(a)
    trace.enable(b)
    trace.set_default_event_callback(lambda r, c: calls.append(("default", c.schema_for(r).provider_name, r.id)))
    stats = push_records(trace, [event(A, 1), event(B, 1), event(A, 2), event(C, 3)])
    assert calls == [("a", A, 1), ("b", B, 1), ("a", A, 2), ("a:2", "E2", 2), ("default", C, 3)]
    assert stats["events_read"] == 4 and stats["events_handled"] == 4 and stats["events_unmatched"] == 0


def test_without_a_default_callback_unclaimed_events_are_counted_unmatched() -> None:
    trace = UserTrace(manifests=[])
    trace.enable(Provider(A))
    stats = push_records(trace, [event(A), event(B), event(C)])
    assert (stats["events_handled"], stats["events_unmatched"]) == (1, 2)


def test_provider_by_guid_and_by_name_match_the_same_events() -> None:
    trace = UserTrace(manifests=[])
    seen: list[str] = []
    by_guid = Provider(str(provider_guid_from_name(A)))
    by_guid.add_on_event_callback(lambda r, c: seen.append("guid"))
    by_name = Provider(A)
    by_name.add_on_event_callback(lambda r, c: seen.append("name"))
    trace.enable(by_guid)
    trace.enable(by_name)
    push_records(trace, [event(A)])
    assert seen == ["guid", "name"]
    assert by_name.guid == by_guid.guid == provider_guid_from_name(A)


@pytest.mark.parametrize(
    ("configure", "admitted"),
    [
        (lambda p: p.level(3), [0, 1, 2, 3, 5, 6, 7]),
        (lambda p: p.any(0b0110), [0, 1, 2, 3, 4, 6, 7]),  # keyword 0 always passes
        (lambda p: p.any(0b0110).all(0b0100), [0, 2, 3, 4, 7]),
        (lambda p: p.any(0b0110).trace_flags(EnableProperty.IGNORE_KEYWORD_0), [1, 2, 3, 4, 6, 7]),
        (lambda p: p.event_ids([1, 4]), [1, 4]),
        (lambda p: p.event_ids([1, 4], include=False), [0, 2, 3, 5, 6, 7]),
        (lambda p: p.process_ids([11]), [1, 3, 5, 7]),
    ],
)
def test_enable_rules_are_applied_to_events(configure: Any, admitted: list[int]) -> None:
    trace = UserTrace(manifests=[])
    provider = Provider(A)
    configure(provider)
    seen: list[int] = []
    provider.add_on_event_callback(lambda r, c: seen.append(r.id))
    trace.enable(provider)
    keywords = [0, 0b10, 0b100, 0b110, 0b1100, 0b1, 0b10, 0b100]
    levels = [1, 1, 2, 3, 4, 1, 1, 2]
    records = [event(A, i, level=levels[i], keyword=keywords[i], pid=11 if i % 2 else 10) for i in range(8)]
    stats = push_records(trace, records)
    assert seen == admitted
    assert stats["events_handled"] == len(admitted) and stats["events_filtered"] == 8 - len(admitted)


def test_executable_filter_uses_the_process_names_the_trace_learned() -> None:
    manifest = load_manifest(corpus_path(*KERNEL_PROCESS_MANIFEST)).manifest
    start = manifest_schema(manifest, 1, version=0)

    def process_start(pid: int, image: str) -> Any:
        values = {"ProcessID": pid, "CreateTime": 0, "ParentProcessID": 4, "SessionID": 1, "ImageName": image}
        return EventRecordBuilder(start.provider_id, pid=4, timestamp=10).add_properties(values).pack_manifest(start)

    trace = UserTrace(manifests=[manifest])
    provider = Provider(A).exe_names(["Notepad.exe"])
    seen: list[int] = []
    provider.add_on_event_callback(lambda r, c: seen.append(r.pid))
    trace.enable(provider)
    trace.set_default_event_callback(lambda r, c: None)
    records = [process_start(77, "\\Device\\HarddiskVolume2\\Windows\\notepad.exe"), process_start(78, "\\Windows\\cmd.exe")]
    records += [event(A, pid=pid, timestamp=20) for pid in (77, 78, 79)]
    stats = push_records(trace, records)
    assert seen == [77, 79]  # 79: no process event names it, so the filter is left to the producer side
    assert stats["events_filtered"] == 1
    assert provider.enable_rule.filters.exe_names == frozenset({"notepad.exe"})


def test_out_of_range_settings_fail_when_enabled() -> None:
    trace = UserTrace(manifests=[])
    with pytest.raises(InvalidArgument):
        trace.enable(Provider(A).level(300))
    with pytest.raises(InvalidArgument):
        trace.enable(Provider(A).process_ids(range(20)))
    with pytest.raises(InvalidArgument):
        Provider("")
    with pytest.raises(InvalidArgument):
        Provider(A).add_on_event_callback("not callable")  # type: ignore[arg-type]


def test_a_raising_callback_does_not_stop_processing() -> None:
    trace = UserTrace(manifests=[])
    provider = Provider(A)
    seen: list[int] = []
    errors: list[tuple[str, int | None]] = []

    def fragile(record: Any, context: Any) -> None:
        if record.id == 2:
            raise ValueError("boom")
        seen.append(record.id)

    provider.add_on_event_callback(fragile)
    provider.add_on_event_callback(lambda r, c: seen.append(-r.id))  # later callbacks still run
    broken_filter = EventFilter(P.Predicate(lambda r, c: 1 / (r.id - 3) > 0))
    broken_filter.add_on_event_callback(lambda r, c: None)
    provider.add_filter(broken_filter)
    trace.enable(provider)
    trace.on_error(lambda error, record: errors.append((type(error).__name__, record.id if record is not None else None)))
    stats = push_records(trace, [event(A, i) for i in (1, 2, 3, 4)])
    assert seen == [1, -1, -2, 3, -3, 4, -4]
    assert errors == [("ValueError", 2), ("ZeroDivisionError", 3)]
    assert stats["callback_errors"] == 2 and stats["events_handled"] == 4


def test_stop_on_callback_error_stops_and_raises() -> None:
    trace = UserTrace(manifests=[], stop_on_callback_error=True)
    provider = Provider(A)
    seen: list[int] = []

    def fragile(record: Any, context: Any) -> None:
        seen.append(record.id)
        if record.id == 2:
            raise KeyError("boom")

    provider.add_on_event_callback(fragile)
    trace.enable(provider)
    with pytest.raises(KeyError):
        push_records(trace, [event(A, i) for i in (1, 2, 3, 4)])
    assert seen == [1, 2]
    assert trace.query_stats()["callback_errors"] == 1


def test_a_broken_error_handler_stops_the_trace() -> None:
    trace = UserTrace(manifests=[])
    provider = Provider(A)
    provider.add_on_event_callback(lambda r, c: 1 / 0)
    trace.enable(provider)
    trace.on_error(lambda error, record: [][1])
    with pytest.raises(IndexError):
        push_records(trace, [event(A, 1), event(A, 2)])
    assert trace.query_stats()["events_read"] == 1


def test_a_kernel_trace_needs_kernel_flags_and_is_live(tmp_path: Any) -> None:
    with pytest.raises(InvalidArgument, match="needs a kernel provider"):
        KernelTrace().open()
    with pytest.raises(InvalidArgument, match="unknown kernel flag"):
        KernelTrace(flags=["bogus"])
    with pytest.raises(InvalidArgument, match="UserTrace"):
        KernelTrace(files=[tmp_path / "a.etl"])
    with pytest.raises(InvalidArgument):
        UserTrace(files=[tmp_path / "a.etl"], sessions=["x"])


def test_trace_states() -> None:
    trace = UserTrace(manifests=[])
    with pytest.raises(TraceStateError):
        trace.process()
    with pytest.raises(InvalidArgument):
        trace.enable("Contoso.A")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        UserTrace(start_time=10, end_time=5)
    with pytest.raises(InvalidArgument):
        UserTrace(start_time="yesterday")  # type: ignore[arg-type]


def test_providers_and_callbacks_set_after_looking_at_the_context_count() -> None:
    trace = UserTrace(manifests=[])
    assert trace.context.schema_for(event(A)).event_name == "E1"
    seen: list[str] = []
    provider = Provider(A)
    provider.add_on_event_callback(lambda r, c: seen.append("a"))
    trace.enable(provider)
    trace.set_default_event_callback(lambda r, c: seen.append("default"))
    push_records(trace, [event(A), event(B)])
    assert seen == ["a", "default"]
