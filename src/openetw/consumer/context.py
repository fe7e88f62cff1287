"""``TraceContext``: what callbacks get besides the record (krabsetw's ``trace_context``).

It finds schemas (``schema_for``), parsers (``parser_for``) and process names for records; the
schema and parser of the record being delivered are made once and shared by every callback and
predicate that asks for them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from openetw.consumer.parser import Parser, Plans, Schema, plans_for_pointer_size, plans_of
from openetw.errors import OpenEtwError
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import Schema as TdhSchema

__all__ = ["TraceContext"]

ErrorReporter = Callable[[BaseException, Any], None]
_MISSING: Any = object()
_new_parser = object.__new__
_EXTENDED_INFO = 0x0001
_SCHEMA_CACHE_LIMIT = 1 << 16
_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_CLASSIC_KINDS = frozenset({"classic", "instance"})


def _unknown_references(obj: object) -> int:
    return -1  # never what the caller expects: nothing is taken over


# Taking over an object nobody else holds relies on CPython counting every reference, the
# argument of ``getrefcount`` included; from 3.14 on some references may go uncounted.
REUSE_OBJECTS = sys.implementation.name == "cpython" and sys.version_info < (3, 14)
"""Whether records and parsers nobody holds are taken over for the next event, by default (the
switch is ``TraceContext.reuse_objects``, or ``UserTrace(reuse_objects=...)``)."""
references = sys.getrefcount if REUSE_OBJECTS else _unknown_references


def _ignore(error: BaseException, record: Any) -> None:
    return None


class TraceContext:
    """Schemas, parsers and process names for the records of one trace."""

    def __init__(
        self, decode_context: DecodeContext, *, trace: Any = None, report: ErrorReporter = _ignore, reuse_objects: bool | None = None,
    ) -> None:  # fmt: skip
        self.decode_context = decode_context
        self.references: Any = _unknown_references
        self.reuse_objects = REUSE_OBJECTS if reuse_objects is None else reuse_objects
        self.trace = trace
        self._report = report
        self._record: Any = None  # the record ``parser_for`` last gave a parser for, and that parser
        self._parser: Parser | None = None
        self._primed_record: Any = None
        self._primed: tuple[TdhSchema | None, Plans | None] | None = None
        self._schemas: dict[tuple[Any, ...], tuple[TdhSchema | None, Plans | None]] = {}
        self._learned = self._carried = -1
        self.generation = 0  # changes whenever the schemas found so far may be stale

    @property
    def reuse_objects(self) -> bool:
        """Whether a record or parser that nothing else holds is taken over for the next event
        (the path without it is what Python 3.14 and later, or another interpreter, take)."""
        return self.references is not _unknown_references

    @reuse_objects.setter
    def reuse_objects(self, value: bool) -> None:
        if value and sys.implementation.name != "cpython":
            value = False  # only CPython's reference counts say that nothing else holds an object
        self.references = sys.getrefcount if value else _unknown_references

    def let_go(self, record: Any) -> bool:
        """Forget ``record`` when this context alone holds it and the parser made for it (that
        parser held by nothing else): the caller may then take the record over."""
        if self._record is record and self.references(self._parser) == 2:
            self._record = None
            return True
        return False

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
        elif kind == "evtx":
            return None, None  # an Event Log record carries its decoded properties
        else:
            return self._lookup(record), None
        self.refresh()
        found = self._schemas.get(key)
        if found is None:
            if len(self._schemas) >= _SCHEMA_CACHE_LIMIT:
                self._schemas.clear()  # bounded, whatever a hostile trace carries
                self.generation += 1
            tdh = self._lookup(record)
            found = self._schemas[key] = (tdh, plans_of(tdh) if tdh is not None else None)
        return found

    def refresh(self) -> None:
        """Forget the schemas found so far when the trace taught the decode context new ones."""
        decode_context = self.decode_context
        if decode_context.manifests_learned != self._learned or decode_context.carried_schemas != self._carried:
            self._schemas.clear()
            self._learned, self._carried = decode_context.manifests_learned, decode_context.carried_schemas
            self.generation += 1

    def entry_of(self, record: Any) -> tuple[TdhSchema | None, Plans | None]:
        """(decoding schema, fixed-offset readers) of ``record``, from the cache when known."""
        return self._entry(record)

    def delivery_entry(self, record: Any) -> tuple[TdhSchema | None, Plans | None]:
        """The entry the delivery primes ``record`` with: ``entry_of``'s, its fixed-offset readers
        those of the record's pointer size alone (no choice left to each read)."""
        tdh, plans = self._entry(record)
        return tdh, None if plans is None else plans_for_pointer_size(plans, record.pointer_size)

    def prime(self, record: Any, entry: tuple[TdhSchema | None, Plans | None] | None) -> None:
        """``record`` is the one being delivered and ``entry`` its schema entry (from
        ``entry_of`` on a record of the same kind), so that ``parser_for`` need not look it up."""
        self._primed_record, self._primed = record, entry

    def primed_entry(self, record: Any) -> tuple[TdhSchema | None, Plans | None] | None:
        """The entry ``prime`` gave for ``record`` (``None`` if it was not primed)."""
        return self._primed if record is self._primed_record else None

    def _lookup(self, record: Any) -> TdhSchema | None:
        try:
            return self.decode_context.schema_for(record)
        except OpenEtwError as error:
            self._report(error, record)
            return None

    def forget_schemas(self) -> None:
        """Look schemas up again (after adding manifests to the registry by hand)."""
        self._schemas.clear()
        self.generation += 1

    def schema_for(self, record: Any) -> Schema:
        return self.parser_for(record).schema

    def parser_for(self, record: Any) -> Parser:
        parser = self._parser
        if record is self._record:
            return parser  # type: ignore[return-value]
        entry = self._primed if record is self._primed_record else None
        if entry is None:
            entry = self._entry(record)
        # This runs once per event. The parser of the record before is taken over when nothing
        # but this context holds it (references: ``self._parser``, ``parser``, the argument) and
        # it was only used for fixed-offset reads: making and freeing an object costs more.
        if parser is not None and parser._plain and self.references(parser) == 3:
            parser.record = record
            parser._entry = entry
        else:  # Parser.of(record, *entry, self), inlined
            parser = self._parser = _new_parser(Parser)
            parser.record = record
            parser._entry = entry
            parser._context = self
            parser._plain = True
        self._record = record
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
