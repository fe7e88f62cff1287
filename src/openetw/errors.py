"""One exception hierarchy for the whole project.

Library code raises these; only the CLI's entry point turns them into exit codes and messages.
``UsageError``-style misuse (a caller passing the wrong thing) is kept apart from bad input
(a damaged file, a hostile manifest), as h11 does.
"""

from __future__ import annotations


class OpenEtwError(Exception):
    """Base of every error openetw raises on purpose."""

    exit_code = 1


class InvalidArgument(OpenEtwError, ValueError):
    """The caller asked for something that cannot be done (misuse, not bad input)."""

    exit_code = 2


class EtlFormatError(OpenEtwError):
    """An ``.etl`` file (or buffer) does not follow the format.

    ``offset`` is the absolute file offset where the problem was found, ``buffer_index`` the
    index of the buffer being read (``None`` before the first buffer), ``structure`` the layout
    being read (``WMI_BUFFER_HEADER``, ``EVENT_HEADER``, ...).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        buffer_index: int | None = None,
        structure: str | None = None,
        path: str | None = None,
    ) -> None:
        self.message = message
        self.offset = offset
        self.buffer_index = buffer_index
        self.structure = structure
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        return _located(self.message, self.path, self.offset, ("buffer", self.buffer_index), self.structure)


class CompressionError(EtlFormatError):
    """A compressed buffer does not inflate to what its header promises."""


class ManifestError(OpenEtwError):
    """An instrumentation manifest is malformed, hostile or violates mc.exe's rules."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        element: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.element = element
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path or "<manifest>"
        if self.line is not None:
            where += f":{self.line}"
        if self.element:
            where += f": <{self.element}>"
        return f"{where}: {self.message}"


class DecodeError(OpenEtwError):
    """A property or event payload could not be decoded with its schema."""

    def __init__(self, message: str, *, property_name: str | None = None, offset: int | None = None) -> None:
        self.message = message
        self.property_name = property_name
        self.offset = offset
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        if self.property_name:
            parts.append(f"property {self.property_name!r}")
        if self.offset is not None:
            parts.append(f"payload offset {self.offset}")
        return f"{', '.join(parts)}: {self.message}" if parts else self.message


class SessionError(OpenEtwError):
    """A trace session request was refused (limits, state, unknown session)."""


class AccessDenied(SessionError):
    """The caller's credentials do not allow the request."""

    exit_code = 1


class ServiceError(OpenEtwError):
    """The trace service could not be reached or answered with a protocol error."""


class PropertyDecodeError(DecodeError):
    """One property of an event could not be decoded; ``raw`` keeps the bytes it covered.

    When the property's end is unknown (the payload ends early, a count cannot be resolved),
    ``raw`` holds everything from the property's start to the end of the payload.
    """

    def __init__(
        self,
        message: str,
        *,
        property_name: str | None = None,
        offset: int | None = None,
        raw: bytes = b"",
    ) -> None:
        self.raw = raw
        super().__init__(message, property_name=property_name, offset=offset)


class TraceDataError(OpenEtwError):
    """Raw kernel trace data (a tracefs ring-buffer page, a ``format`` file) is malformed.

    ``offset`` is the byte offset inside the page or text where the problem was found,
    ``structure`` the layout being read (``sub-buffer``, ``event header``, ``format``...).
    """

    exit_code = 2

    def __init__(self, message: str, *, offset: int | None = None, structure: str | None = None) -> None:
        self.message = message
        self.offset = offset
        self.structure = structure
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.structure:
            where.append(self.structure)
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


class EvtxFormatError(OpenEtwError):
    """An ``.evtx`` file (Windows Event Log) does not follow the format.

    ``offset`` is the absolute file offset of the problem, ``chunk_index`` the 64 KiB chunk being
    read (``None`` in the file header), ``structure`` the layout being read (``file header``,
    ``chunk header``, ``event record``, ``BinXml``, ``template``, ...), ``record_id`` the event
    record's identifier when one was read.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        chunk_index: int | None = None,
        structure: str | None = None,
        record_id: int | None = None,
        path: str | None = None,
    ) -> None:
        self.message = message
        self.offset = offset
        self.chunk_index = chunk_index
        self.structure = structure
        self.record_id = record_id
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        return _located(
            self.message, self.path, self.offset, ("chunk", self.chunk_index), ("record", self.record_id), self.structure
        )


class PerfDataFormatError(OpenEtwError):
    """A ``perf.data`` file (or an EventHeader event in it) does not follow the format.

    ``offset`` is the absolute file offset of the problem, ``structure`` the layout being read
    (``perf_file_header``, ``perf_event_header``, ``PERF_RECORD_SAMPLE``, ``HEADER_TRACING_DATA``,
    ``eventheader``, ...), ``record_index`` the data record being read (counted from 0).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        structure: str | None = None,
        record_index: int | None = None,
        path: str | None = None,
    ) -> None:
        self.message = message
        self.offset = offset
        self.structure = structure
        self.record_index = record_index
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        return _located(self.message, self.path, self.offset, ("record", self.record_index), self.structure)


class UserEventsUnavailable(OpenEtwError):
    """This kernel cannot take ``user_events`` (no ``user_events_data`` in tracefs, or it refused
    the registration): EventHeader events cannot be published here."""


def _located(message: str, path: str | None, offset: int | None, *rest: tuple[str, int | None] | str | None) -> str:
    """``message`` after where it was found: the path, ``offset 0x…``, then each numbered place
    (``("buffer", 3)`` reads ``buffer 3``) and the structure, leaving out what is unknown."""
    where = [path] if path else []
    if offset is not None:
        where.append(f"offset 0x{offset:x}")
    for item in rest:
        if isinstance(item, tuple):
            if item[1] is not None:
                where.append(f"{item[0]} {item[1]}")
        elif item:
            where.append(item)
    prefix = ", ".join(where)
    return f"{prefix}: {message}" if prefix else message


class NettraceFormatError(OpenEtwError):
    """An EventPipe trace (``.nettrace``, ``.netperf``) does not follow the format.

    ``offset`` is the absolute file offset of the problem, ``block`` the index of the
    FastSerialization object (or V6 block) being read, counting the Trace object as 0 (``None``
    in the stream header), ``structure`` the layout being read (``stream header``,
    ``Trace``, ``EventBlock``, ``event header``, ``metadata``, ``StackBlock``, ``SPBlock``, ...).
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        block: int | None = None,
        structure: str | None = None,
        path: str | None = None,
    ) -> None:
        self.message = message
        self.offset = offset
        self.block = block
        self.structure = structure
        self.path = path
        super().__init__(str(self))

    def __str__(self) -> str:
        return _located(self.message, self.path, self.offset, ("block", self.block), self.structure)


class SymbolFormatError(OpenEtwError):
    """A symbol file (PDB, ELF, a ``perf-PID.map`` or kallsyms text) does not follow its format.

    ``offset`` is where in the file (or in the PDB stream ``stream``) the problem was found,
    ``structure`` the layout being read (``MSF superblock``, ``DBI header``, ``section header``...).
    """

    exit_code = 2

    def __init__(
        self, message: str, *, offset: int | None = None, structure: str | None = None, path: str | None = None,
        stream: int | None = None,
    ) -> None:  # fmt: skip
        self.message = message
        self.offset = offset
        self.structure = structure
        self.path = path
        self.stream = stream
        super().__init__(str(self))

    def __str__(self) -> str:
        return _located(self.message, self.path, self.offset, ("stream", self.stream), self.structure)


class EventLogError(OpenEtwError):
    """An Event Log request failed: an unknown log, a damaged log database, a refused setting."""

    exit_code = 2


class EventLogWriteError(EventLogError):
    """A log could not store events (a full disk, a failing file): ``lost`` of them were
    counted lost in its books (or will be, at its next write)."""

    def __init__(self, message: str, lost: int = 0) -> None:
        super().__init__(message)
        self.lost = lost


class XPathError(EventLogError, InvalidArgument):
    """A query is outside the Event Log's XPath subset, or malformed; ``column`` is 1-based."""

    exit_code = 2

    def __init__(self, message: str, column: int | None = None) -> None:
        self.message = message
        self.column = column
        super().__init__(f"column {column}: {message}" if column is not None else message)
