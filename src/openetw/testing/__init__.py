"""The test kit: build records as providers write them and push them through a trace's real
providers, filters, predicates and callbacks (krabsetw's ``testing`` namespace).

::

    trace = UserTrace(manifests=[])
    provider = Provider("MyCompany.MyComponent")
    provider.add_on_event_callback(seen.append)
    trace.enable(provider)
    push_records(trace, [EventRecordBuilder("MyCompany.MyComponent", 1).add_property("x", 1).pack_tracelogging()])
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from openetw.testing.builder import EventRecordBuilder, infer_field, manifest_schema
from openetw.testing.packing import pack_template

__all__ = ["EventRecordBuilder", "infer_field", "manifest_schema", "pack_template", "push_record", "push_records"]


def push_records(trace: Any, records: Iterable[Any]) -> dict[str, Any]:
    """Deliver ``records`` through ``trace`` as if a source gave them (time window, state
    learning, providers' enable rules, filters, callbacks, error handling), in the order given.

    The trace needs no source and is not started; returns ``trace.query_stats()``. With
    ``stop_on_callback_error`` the first callback error is raised here.
    """
    dispatcher = trace._prepare()
    for record in records:
        if dispatcher.stopping:
            break
        dispatcher.deliver(record)
    if dispatcher.failure is not None:
        failure, dispatcher.failure = dispatcher.failure, None
        raise failure
    return trace.query_stats()  # type: ignore[no-any-return]


def push_record(trace: Any, record: Any) -> dict[str, Any]:
    return push_records(trace, [record])
