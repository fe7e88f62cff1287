"""Consuming events, in krabsetw's model: traces, providers, filters, predicates, schemas, parsers.

``UserTrace`` reads ``.etl`` files (several merged in time order, within a time window) and
live real-time sessions of the trace service; ``Provider`` says which events a trace
wants and who gets them; ``EventFilter`` and ``openetw.consumer.predicates`` narrow them down;
callbacks get ``(record, context)`` and read properties through ``context.parser_for(record)``.
Besides callbacks: ``trace.events()`` (iterator), ``trace.events_async()`` and
``trace.batches()`` (numpy arrays over the file's ``EtlIndex``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openetw._moved import keep_old_paths as _keep_old_paths

if TYPE_CHECKING:
    from openetw.consumer import predicates
    from openetw.consumer.batches import Batch
    from openetw.consumer.context import TraceContext
    from openetw.consumer.errors import (
        EventsDropped,
        KernelTraceUnavailable,
        LiveSessionUnavailable,
        PropertyNotFound,
        PropertyTypeMismatch,
        TraceStateError,
    )
    from openetw.consumer.index import EtlIndex
    from openetw.consumer.iteration import Event
    from openetw.consumer.kernel_trace import KernelProvider, KernelTrace
    from openetw.consumer.live import LiveSessionSource
    from openetw.consumer.parser import Parser, Property, Schema
    from openetw.consumer.predicates import Predicate
    from openetw.consumer.provider import EventFilter, Provider
    from openetw.consumer.sources import FileSource, RecordSource, Source, records_from_buffer
    from openetw.consumer.stats import SourceStatistics, TraceStatistics
    from openetw.consumer.trace import UserTrace
    from openetw.session.enable import EnableProperty

__all__ = [
    "Batch",
    "EnableProperty",
    "EtlIndex",
    "Event",
    "EventFilter",
    "EventsDropped",
    "FileSource",
    "KernelProvider",
    "KernelTrace",
    "KernelTraceUnavailable",
    "LiveSessionSource",
    "LiveSessionUnavailable",
    "Parser",
    "Predicate",
    "Property",
    "PropertyNotFound",
    "PropertyTypeMismatch",
    "Provider",
    "RecordSource",
    "Schema",
    "Source",
    "SourceStatistics",
    "TraceContext",
    "TraceStateError",
    "TraceStatistics",
    "UserTrace",
    "predicates",
    "records_from_buffer",
]

# Each name loads its module on first use, so that importing one module of the package (or the
# package) loads nothing else: a command pays at start-up for the modules it uses only.
_LAZY: dict[str, str] = {
    "predicates": "openetw.consumer.predicates",
    "Batch": "openetw.consumer.batches",
    "TraceContext": "openetw.consumer.context",
    "EventsDropped": "openetw.consumer.errors",
    "KernelTraceUnavailable": "openetw.consumer.errors",
    "LiveSessionUnavailable": "openetw.consumer.errors",
    "PropertyNotFound": "openetw.consumer.errors",
    "PropertyTypeMismatch": "openetw.consumer.errors",
    "TraceStateError": "openetw.consumer.errors",
    "EtlIndex": "openetw.consumer.index",
    "Event": "openetw.consumer.iteration",
    "KernelProvider": "openetw.consumer.kernel_trace",
    "KernelTrace": "openetw.consumer.kernel_trace",
    "LiveSessionSource": "openetw.consumer.live",
    "Parser": "openetw.consumer.parser",
    "Property": "openetw.consumer.parser",
    "Schema": "openetw.consumer.parser",
    "Predicate": "openetw.consumer.predicates",
    "EventFilter": "openetw.consumer.provider",
    "Provider": "openetw.consumer.provider",
    "FileSource": "openetw.consumer.sources",
    "RecordSource": "openetw.consumer.sources",
    "Source": "openetw.consumer.sources",
    "records_from_buffer": "openetw.consumer.sources",
    "SourceStatistics": "openetw.consumer.stats",
    "TraceStatistics": "openetw.consumer.stats",
    "UserTrace": "openetw.consumer.trace",
    "EnableProperty": "openetw.session.enable",
}


# ``openetw.consumer.stream_source``, the old path of ``openetw.fleet.source``, kept for one release.
_keep_old_paths(__name__, "", {"stream_source": "openetw.fleet.source"})


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
