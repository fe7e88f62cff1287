"""Consuming events, in krabsetw's model: traces, providers, filters, predicates, schemas, parsers.

``UserTrace`` reads ``.etl`` files (several merged in time order, within a time window) and
live real-time sessions of the trace service; ``Provider`` says which events a trace
wants and who gets them; ``EventFilter`` and ``openetw.consumer.predicates`` narrow them down;
callbacks get ``(record, context)`` and read properties through ``context.parser_for(record)``.
Besides callbacks: ``trace.events()`` (iterator), ``trace.events_async()`` and
``trace.batches()`` (numpy arrays over the file's ``EtlIndex``).
"""

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
