"""Which format a trace file is in, and the one way to open it as records.

Every command and ``UserTrace(files=...)`` asks this table, so a new container (an EventPipe
``.nettrace``, a ``perf.data``) is one row here and one ``Source`` class, and every reader of
traces takes it. A file is told by its first bytes; its name decides only when the bytes say
nothing (an empty or unreadable file); anything else is read as ``.etl``, whose reader reports
what it is not.

The table is light on purpose (no numpy, no readers): a command asks it before it knows which
machinery to load. ``open_source`` loads the one ``Source`` class the file needs.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openetw.consumer.sources import Source
    from openetw.errors import OpenEtwError

__all__ = ["TraceFormat", "SourceReader", "formats", "open_reader", "open_source", "register_format", "trace_format"]

_SNIFF_BYTES = 64


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """One kind of trace file: how to tell it, and the ``Source`` that reads it.

    ``magics`` are ``(offset, bytes)`` pairs, any of which identifies the format; ``source`` is
    ``"module:Class"``, a ``Source`` taking the path (and, when ``indexed``, the index options
    ``index``, ``index_dir``, ``index_beside`` of ``.etl`` files)."""

    name: str
    description: str
    source: str
    magics: tuple[tuple[int, bytes], ...] = ()
    suffixes: tuple[str, ...] = ()
    indexed: bool = False
    names_providers: bool = False  # records carry their provider's name (matched by it, not by a hashed GUID)
    etw_records: bool = True  # its records are EVENT_RECORDs an .etl file can hold (relog copies them)

    def matches(self, head: bytes) -> bool:
        return any(head[offset : offset + len(magic)] == magic for offset, magic in self.magics)

    def source_class(self) -> type[Source]:
        module, _, name = self.source.partition(":")
        cls: type[Source] = getattr(importlib.import_module(module), name)
        return cls

    def open(self, path: str | os.PathLike[str], **options: Any) -> Source:
        """A ``Source`` for ``path`` (not yet opened); index options reach only indexed formats."""
        cls = self.source_class()
        if self.indexed:
            return cls(path, **options)  # type: ignore[call-arg]
        return cls(path)  # type: ignore[call-arg]


ETL = TraceFormat(
    name="etl",
    description="ETW trace log (.etl)",
    source="openetw.consumer.sources:FileSource",
    suffixes=(".etl",),
    indexed=True,
)

EVTX = TraceFormat(
    name="evtx",
    description="Windows Event Log file (.evtx)",
    source="openetw.consumer.evtx_source:EvtxFileSource",
    magics=((0, b"ElfFile\x00"),),
    suffixes=(".evtx",),
    names_providers=True,
    etw_records=False,
)

PERFDATA = TraceFormat(
    name="perfdata",
    description="Linux perf.data (perf record; EventHeader user_events as TraceLogging)",
    source="openetw.consumer.perfdata_source:PerfDataSource",
    magics=((0, b"PERFILE2"), (0, b"2ELIFREP")),  # file and pipe mode share the magic; the other byte order
    suffixes=(".data",),
    names_providers=True,
)

NETTRACE = TraceFormat(
    name="nettrace",
    description=".NET EventPipe trace (.nettrace, .netperf)",
    source="openetw.consumer.nettrace_source:NettraceFileSource",
    magics=((0, b"Nettrace"), (0, b"\x14\x00\x00\x00!FastSerialization.1")),
    suffixes=(".nettrace", ".netperf"),
)

_FORMATS: list[TraceFormat] = [EVTX, NETTRACE, PERFDATA]


def register_format(trace_format: TraceFormat) -> None:
    """Add a format (tried before ``.etl``, the fallback); a format of the same name is replaced."""
    _FORMATS[:] = [known for known in _FORMATS if known.name != trace_format.name]
    _FORMATS.append(trace_format)


def formats() -> list[TraceFormat]:
    """Every format this table knows, ``.etl`` last."""
    return [*_FORMATS, ETL]


def _head(path: str | os.PathLike[str]) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(_SNIFF_BYTES)
    except OSError:
        return None


def trace_format(path: str | os.PathLike[str]) -> TraceFormat:
    """The format of the file at ``path``: by its first bytes, by its name when they say nothing."""
    head = _head(path)
    if head:
        for known in _FORMATS:
            if known.matches(head):
                return known
        return ETL
    name = os.fspath(path).lower()
    for known in _FORMATS:
        if name.endswith(known.suffixes):
            return known
    return ETL


def open_source(path: str | os.PathLike[str], **options: Any) -> Source:
    """The ``Source`` for a trace file of any known format (``options``: ``.etl``'s index options)."""
    return trace_format(path).open(path, **options)


@dataclass
class _Lost:
    events_lost: int = 0
    buffers_lost: int = 0


@dataclass
class _ReaderStats:
    errors: list[OpenEtwError] = field(default_factory=list)  # what was lost: a command fails
    notices: list[OpenEtwError] = field(default_factory=list)  # what was only counted: a warning
    buffers: int = 0
    compressed_buffers: int = 0
    unknown_records: int = 0
    skipped_bytes: int = 0


class SourceReader:
    """A non-``.etl`` source with the interface of the ``.etl`` reader the file commands use:
    ``records(time_order=True)``, ``stats.errors`` (what was lost) and ``stats.notices`` (what was
    counted and kept), ``header`` (the source's ``LogfileHeader`` when it gives one, else just the
    lost counts), ``close()``."""

    def __init__(self, path: str, trace_format: TraceFormat | None = None) -> None:
        self.path = path
        self.format = trace_format or globals()["trace_format"](path)
        self.stats = _ReaderStats()
        self.source = self.format.open(path)
        self.source.open()
        self.header: Any = self.source.header or _Lost()

    def records(self, time_order: bool = True) -> Iterator[Any]:
        """Every record, in the source's order (time order, or the order the log wrote them)."""
        try:
            yield from self.source.records()
        finally:
            self.stats.errors = list(self.source.losses())
            self.stats.notices = list(self.source.notices())
            self.header = self.source.header or self.header

    def __iter__(self) -> Iterator[Any]:
        return self.records()

    @property
    def context(self) -> Any:
        """The ``RecordContext`` of the source's records (their clock, pointer size), if it has one."""
        return getattr(self.source, "context", None)

    def close(self) -> None:
        self.source.close()


def open_reader(path: str) -> Any:
    """A lenient reader for a trace file: ``EtlReader`` for ``.etl``, a ``SourceReader`` otherwise
    (damage is counted in the reader's statistics, reported once the output is written)."""
    found = trace_format(path)
    if found is ETL:
        from openetw.etl.reader import EtlReader

        return EtlReader(path, strict=False)
    return SourceReader(path, found)
