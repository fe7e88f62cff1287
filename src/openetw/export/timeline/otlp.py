"""The timeline sent to an OpenTelemetry collector over OTLP/HTTP (protobuf), through the
OpenTelemetry SDK's exporters (``pip install 'openetw[otlp]'``).

* Every event is a log record: ``Instant`` items, and the kernel's context switches, wake-ups and
  samples. Severity from the ETW level (1 critical → FATAL, 2 → ERROR, 3 → WARN, 4 → INFO,
  5 → DEBUG, 0 → unset); body the event's rendered message (its name when the schema has no
  message); attributes the decoded fields (``etw.field.<name>``) and the header (``etw.provider``,
  ``etw.event``, ``etw.pid``, ``etw.tid``, ``etw.level``).
* Every Start/Stop pair is a span from the Start to the Stop, its fields as attributes
  (``etw.start.<name>``, ``etw.stop.<name>``). The trace id is the 16 bytes of the root activity's
  id (the activity reached by following related activity ids up; the GUID's bytes in text order,
  so the trace id reads as the GUID without dashes); the span id the first 8 bytes of the
  span's own activity id. Where that is zero, or another activity of the export already has
  that span id, the span id is the first 8 bytes of BLAKE2b(activity id + the span's number)
  (pairs without an activity id: of its process, thread and number; their trace id is
  BLAKE2b of the root's process, thread and number). The parent is the span of the related
  activity id.

Records go in batches (``batch_size``); the SDK's exporter retries what the receiver asks to
retry (429, 502, 503, 504) within ``timeout``. ``OtlpDelivery`` counts ``exported`` records,
``refused`` ones (the receiver said no, or never answered) and ``retried`` requests.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from openetw.export._deps import require
from openetw.export.timeline.model import Instant, Item, Sample, Slice, SliceBegin, SliceEnd, Switch, Wakeup

__all__ = ["OtlpDelivery", "send_otlp"]

_SEVERITY = {1: ("FATAL", 21), 2: ("ERROR", 17), 3: ("WARN", 13), 4: ("INFO", 9), 5: ("DEBUG", 5)}
_INT64 = 1 << 63
_KEPT_SPAN_IDS = 1 << 16


@dataclass(slots=True)
class OtlpDelivery:
    exported: int = 0
    refused: int = 0
    retried: int = 0
    log_records: int = 0
    spans: int = 0

    def as_json(self) -> dict[str, int]:
        return {"exported": self.exported, "refused": self.refused, "retried": self.retried,
                "log_records": self.log_records, "spans": self.spans}  # fmt: skip


def _value(value: Any) -> Any:
    if isinstance(value, (bool, float, str)):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return str(value)


def _hash(*parts: Any) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()


def _signal_url(endpoint: str, signal: str) -> str:
    base = endpoint.rstrip("/")
    for known in ("/v1/logs", "/v1/traces"):
        if base.endswith(known):
            base = base[: -len(known)]
    return f"{base}/v1/{signal}"


class _Ids:
    """Trace and span ids of spans (see the module's rules)."""

    def __init__(self) -> None:
        self._owners: dict[bytes, bytes] = {}

    def span_id(self, span: Slice) -> int:
        activity = span.activity
        if activity is None or activity == bytes(16):
            raw = _hash("span", span.pid, span.tid, span.id)[:8]
        else:
            text_order = bytes(activity[3::-1] + activity[5:3:-1] + activity[7:5:-1] + activity[8:])
            raw = text_order[:8]
            owner = self._owners.get(raw)
            if raw == bytes(8) or (owner is not None and owner != activity):
                raw = _hash(activity, span.id)[:8]
            elif owner is None:
                if len(self._owners) >= _KEPT_SPAN_IDS:
                    self._owners.clear()
                self._owners[raw] = activity
        return int.from_bytes(raw, "big") or 1

    @staticmethod
    def trace_id(span: Slice) -> int:
        root = span
        seen = 0
        while root.parent is not None and seen < 64:
            root, seen = root.parent, seen + 1
        activity = root.activity
        if activity is None or activity == bytes(16):
            raw = _hash("trace", root.pid, root.tid, root.id)
        else:
            raw = bytes(activity[3::-1] + activity[5:3:-1] + activity[7:5:-1] + activity[8:])
        return int.from_bytes(raw, "big") or 1


class _Sender:
    def __init__(self, endpoint: str, batch_size: int, timeout: float, resource: dict[str, Any]) -> None:
        require("opentelemetry.sdk", "exporting to OTLP")
        requests = require("requests", "exporting to OTLP")
        log_module = require("opentelemetry.exporter.otlp.proto.http._log_exporter", "exporting to OTLP")
        trace_module = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", "exporting to OTLP")
        from opentelemetry._logs import LogRecord, SeverityNumber
        from opentelemetry.sdk._logs import ReadableLogRecord
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, TraceFlags

        delivery = self.delivery = OtlpDelivery()

        class CountingSession(requests.Session):  # type: ignore[misc, name-defined]
            def request(self, *args: Any, **kwargs: Any) -> Any:
                self.sent += 1
                return super().request(*args, **kwargs)

            sent = 0

        self._sessions = (CountingSession(), CountingSession())
        self._logs = log_module.OTLPLogExporter(endpoint=_signal_url(endpoint, "logs"), timeout=timeout, session=self._sessions[0])
        self._spans = trace_module.OTLPSpanExporter(endpoint=_signal_url(endpoint, "traces"), timeout=timeout, session=self._sessions[1])
        self._resource = Resource.create(resource)
        self._scope = InstrumentationScope("openetw")
        self._LogRecord, self._ReadableLogRecord, self._Severity = LogRecord, ReadableLogRecord, SeverityNumber
        self._ReadableSpan, self._SpanContext, self._flags = ReadableSpan, SpanContext, TraceFlags(TraceFlags.SAMPLED)
        self._batch_size = batch_size
        self._pending_logs: list[Any] = []
        self._pending_spans: list[Any] = []
        self._batches = 0
        self._ids = _Ids()
        self._delivery = delivery

    def log(self, ts: int, level: int, body: str, attributes: dict[str, Any]) -> None:
        severity = _SEVERITY.get(level)
        record = self._LogRecord(
            timestamp=ts, observed_timestamp=ts, body=body, attributes=attributes,
            severity_text=None if severity is None else severity[0],
            severity_number=None if severity is None else self._Severity(severity[1]),
        )  # fmt: skip
        self._pending_logs.append(self._ReadableLogRecord(record, self._resource, self._scope))
        if len(self._pending_logs) >= self._batch_size:
            self._flush_logs()

    def span(self, span: Slice) -> None:
        ids = self._ids
        trace_id = ids.trace_id(span)
        context = self._SpanContext(trace_id, ids.span_id(span), is_remote=False, trace_flags=self._flags)
        parent = None
        if span.parent is not None:
            parent = self._SpanContext(trace_id, ids.span_id(span.parent), is_remote=False, trace_flags=self._flags)
        attributes: dict[str, Any] = {"etw.provider": span.category, "etw.pid": span.pid, "etw.tid": span.tid, "etw.level": span.level}
        attributes.update({f"etw.start.{key}": _value(value) for key, value in span.args.items()})
        attributes.update({f"etw.stop.{key}": _value(value) for key, value in span.end_args.items()})
        self._pending_spans.append(self._ReadableSpan(
            span.name, context=context, parent=parent, resource=self._resource, attributes=attributes,
            start_time=span.ts, end_time=span.end, instrumentation_scope=self._scope,
        ))  # fmt: skip
        if len(self._pending_spans) >= self._batch_size:
            self._flush_spans()

    def _export(self, exporter: Any, batch: list[Any], session: Any) -> None:
        before = session.sent
        ok = exporter.export(batch)
        attempts = session.sent - before
        self._delivery.retried += max(0, attempts - 1)
        if getattr(ok, "name", str(ok)) == "SUCCESS":
            self._delivery.exported += len(batch)
        else:
            self._delivery.refused += len(batch)

    def _flush_logs(self) -> None:
        if self._pending_logs:
            batch, self._pending_logs = self._pending_logs, []
            self._delivery.log_records += len(batch)
            self._export(self._logs, batch, self._sessions[0])

    def _flush_spans(self) -> None:
        if self._pending_spans:
            batch, self._pending_spans = self._pending_spans, []
            self._delivery.spans += len(batch)
            self._export(self._spans, batch, self._sessions[1])

    def flush(self) -> None:
        self._flush_logs()
        self._flush_spans()

    def close(self) -> None:
        self.flush()
        self._logs.shutdown()
        self._spans.shutdown()


def _attributes(category: str, name: str, pid: int, tid: int, level: int, args: dict[str, Any]) -> dict[str, Any]:
    attributes = {"etw.provider": category, "etw.event": name, "etw.pid": pid, "etw.tid": tid, "etw.level": level}
    for key, value in args.items():
        attributes[f"etw.field.{key}"] = _value(value)
    return attributes


def send_otlp(items: Iterable[Item], endpoint: str, *, batch_size: int = 512, timeout: float = 10.0,
              resource: dict[str, Any] | None = None, flush_seconds: float | None = None) -> OtlpDelivery:  # fmt: skip
    """Sends ``items`` to the OTLP/HTTP receiver at ``endpoint`` (``http://host:4318``).
    ``flush_seconds``: also send what waits when an item comes that long after the last send
    (for a live session, whose batches may fill slowly)."""
    sender = _Sender(endpoint, batch_size, timeout, {"service.name": "openetw", **(resource or {})})
    last = time.monotonic()
    try:
        for item in items:
            if flush_seconds is not None and time.monotonic() - last >= flush_seconds:
                sender.flush()
                last = time.monotonic()
            kind = type(item)
            if kind is Instant:
                assert isinstance(item, Instant)
                attributes = _attributes(item.category, item.name, item.pid, item.tid, item.level, item.args)
                sender.log(item.ts, item.level, item.message or item.name, attributes)
            elif kind is SliceEnd:
                assert isinstance(item, SliceEnd)
                sender.span(item.span)
            elif kind is Switch:
                assert isinstance(item, Switch)
                sender.log(item.ts, 0, "CSwitch", {"etw.event": "Thread/CSwitch", "etw.cpu": item.cpu, "etw.field.NewThreadId": item.new_tid,
                                                  "etw.field.OldThreadId": item.old_tid, "etw.field.OldThreadWaitReason": item.wait_reason})  # fmt: skip
            elif kind is Wakeup:
                assert isinstance(item, Wakeup)
                sender.log(item.ts, 0, "ReadyThread", {"etw.event": "Thread/ReadyThread", "etw.cpu": item.cpu, "etw.field.AwakenedThreadId": item.tid})
            elif kind is Sample:
                assert isinstance(item, Sample)
                frames = [frame.name for frame in item.frames]
                sender.log(item.ts, 0, "SampledProfile", {"etw.event": "PerfInfo/SampledProfile", "etw.cpu": item.cpu, "etw.pid": item.pid,
                                                         "etw.tid": item.tid, "etw.stack": frames})  # fmt: skip
            elif kind is SliceBegin:
                continue
    finally:
        sender.close()
    return sender.delivery
