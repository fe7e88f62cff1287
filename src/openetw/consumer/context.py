"""``TraceContext``: what callbacks get besides the record (krabsetw's ``trace_context``).

It finds schemas (``schema_for``), parsers (``parser_for``) and process names for records; the
schema and parser of the record being delivered are made once and shared by every callback and
predicate that asks for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openetw.consumer.parser import Parser, Plans, Schema, plans_of
from openetw.errors import OpenEtwError
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema as TdhSchema

__all__ = ["TraceContext"]

ErrorReporter = Callable[[BaseException, Any], None]
_MISSING: Any = object()
_EXTENDED_INFO = 0x0001
_SCHEMA_CACHE_LIMIT = 1 << 16
_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_CLASSIC_KINDS = frozenset({"classic", "instance"})


def _ignore(error: BaseException, record: Any) -> None:
    return None


class TraceContext:
    """Schemas, parsers and process names for the records of one trace."""

    def __init__(self, decode_context: DecodeContext, *, trace: Any = None, report: ErrorReporter = _ignore) -> None:
        self.decode_context = decode_context
        self.trace = trace
        self._report = report
        self._record: Any = None
        self._schema: Schema | None = None
        self._parser: Parser | None = None
        self._schemas: dict[tuple[Any, ...], tuple[TdhSchema | None, Plans | None]] = {}
        self._learned = self._carried = -1

    @property
    def registry(self) -> SchemaRegistry:
        return self.decode_context.registry

    def tdh_schema_for(self, record: Any) -> TdhSchema | None:
        """The decoding schema of ``record`` (``None`` when none is known or its metadata is damaged).

        Found once per (provider, event, version); what the trace teaches the decode context
        (manifests and metadata it carries) makes the next lookups fresh.
        """
        return self._entry(record)[0]

    def _entry(self, record: Any) -> tuple[TdhSchema | None, Plans | None]:
        kind = record.kind
        if kind == "event":
            key: tuple[Any, ...] = (record.provider_guid_bytes, record.id, record.version)
            if record.flags & _EXTENDED_INFO:
                # A TraceLogging schema is its metadata (never the event id alone): key on the blobs.
                metadata, traits = record.tracelogging_blobs()
                if metadata is not None:
                    key += (record.opcode, record.level, record.task, record.keyword, record.channel, metadata, traits)
        elif kind in _KERNEL_KINDS:
            key = (record.hook_id, record.version)
        elif kind in _CLASSIC_KINDS:
            key = (record.provider_guid_bytes, record.opcode, record.version, None)
        else:
            return self._lookup(record), None
        decode_context = self.decode_context
        if decode_context.manifests_learned != self._learned or decode_context.carried_schemas != self._carried:
            self._schemas.clear()
            self._learned, self._carried = decode_context.manifests_learned, decode_context.carried_schemas
        found = self._schemas.get(key)
        if found is None:
            if len(self._schemas) >= _SCHEMA_CACHE_LIMIT:
                self._schemas.clear()  # bounded, whatever a hostile trace carries
            tdh = self._lookup(record)
            found = self._schemas[key] = (tdh, plans_of(tdh) if tdh is not None else None)
        return found

    def _lookup(self, record: Any) -> TdhSchema | None:
        try:
            return self.decode_context.schema_for(record)
        except OpenEtwError as error:
            self._report(error, record)
            return None

    def forget_schemas(self) -> None:
        """Look schemas up again (after adding manifests to the registry by hand)."""
        self._schemas.clear()

    def schema_for(self, record: Any) -> Schema:
        if record is self._record:
            if self._schema is None:
                self._schema = self._parser.schema if self._parser is not None else Schema(record, self, tdh=self._entry(record)[0])
            return self._schema
        schema = Schema(record, self, tdh=self._entry(record)[0])
        self._record, self._schema, self._parser = record, schema, None
        return schema

    def parser_for(self, record: Any) -> Parser:
        if record is self._record:
            if self._parser is not None:
                return self._parser
            parser = Parser(self._schema) if self._schema is not None else Parser.of(record, *self._entry(record), self)
        else:
            parser = Parser.of(record, *self._entry(record), self)
            self._record, self._schema = record, None
        self._parser = parser
        return parser

    def provider_name_of(self, record: Any) -> str | None:
        try:
            return self.registry.provider_name(record)
        except OpenEtwError:
            return None

    def process_name(self, pid: int, when: int | None = None) -> str | None:
        """The image name without extension (``svchost``) of ``pid`` at FILETIME ``when``."""
        return self.decode_context.process_name(pid, when)

    def process_name_of(self, record: Any) -> str | None:
        """The name of the process that logged ``record``, as far as the trace has told so far."""
        return self.decode_context.process_name_of(record)

    def executable_of(self, record: Any) -> str | None:
        """The executable file name (``svchost.exe``) of the record's process, when known."""
        info = self.decode_context.process(record.pid, record.filetime)
        if info is None or not info.image:
            return None
        return info.image.replace("\\", "/").rsplit("/", 1)[-1]
