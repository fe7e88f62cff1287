"""The curated public API: what ``openetw.consumer`` and ``openetw.testing`` offer, and nothing by accident."""

from __future__ import annotations

import logging
import types

import pytest

import openetw.consumer
import openetw.consumer.predicates
import openetw.testing
from openetw.consumer import Provider, UserTrace
from openetw.testing import EventRecordBuilder, push_records

CONSUMER = {
    "Batch", "EnableProperty", "EtlIndex", "Event", "EventFilter", "EventsDropped", "FileSource", "KernelProvider", "KernelTrace",
    "KernelTraceUnavailable", "LiveSessionSource", "LiveSessionUnavailable", "Parser", "Predicate", "Property",
    "PropertyNotFound", "PropertyTypeMismatch", "Provider", "RecordSource", "Schema", "Source", "SourceStatistics",
    "TraceContext", "TraceStateError", "TraceStatistics", "UserTrace", "predicates", "records_from_buffer",
}  # fmt: skip
PREDICATES = {
    "Predicate", "all_of", "and_", "any_event", "any_of", "as_predicate", "id_is", "no_event", "none_of", "not_",
    "opcode_is", "or_", "process_id_is", "property_contains", "property_ends_with", "property_equals",
    "property_icontains", "property_iends_with", "property_iequals", "property_is", "property_istarts_with",
    "property_starts_with", "version_is",
}  # fmt: skip
TESTING = {"EventRecordBuilder", "infer_field", "manifest_schema", "pack_template", "push_record", "push_records"}


@pytest.mark.parametrize(("module", "expected"), [(openetw.consumer, CONSUMER), (openetw.consumer.predicates, PREDICATES), (openetw.testing, TESTING)])
def test_public_names(module: types.ModuleType, expected: set[str]) -> None:
    assert set(module.__all__) == expected
    for name in expected:
        assert getattr(module, name) is not None
    # Everything else public there comes from elsewhere (typing, numpy, ...), not from openetw.
    accidental = {
        name for name, value in vars(module).items()
        if not name.startswith("_") and name not in expected and str(getattr(value, "__module__", "")).startswith("openetw")
    }  # fmt: skip
    assert not accidental


def test_errors_without_a_handler_are_logged_not_hidden(caplog: pytest.LogCaptureFixture) -> None:
    trace = UserTrace(manifests=[])
    provider = Provider("Contoso.Logged")
    provider.add_on_event_callback(lambda record, context: 1 / 0)
    trace.enable(provider)
    record = EventRecordBuilder("Contoso.Logged", 1).add_property("n", 1).pack_tracelogging()
    with caplog.at_level(logging.WARNING, logger="openetw.consumer"):
        stats = push_records(trace, [record] * 15)
    assert stats["callback_errors"] == 15
    messages = [r.getMessage() for r in caplog.records if r.name == "openetw.consumer"]
    assert len(messages) == 11 and "division by zero" in messages[0] and "counted in query_stats" in messages[-1]
