"""``RecordBatch``: one chunk's event records as columns, an ``EvtxRecord`` only when asked.

``EvtxReader.batches()`` gives the records ``records()`` yields, a chunk at a time, without an
object per record: their positions in the chunk, sizes, record ids, written times (FILETIME)
and XML texts, each a column. The compiled twin fills the columns in one call per run of
records it accepts; a record it leaves to the pure parser is kept as the ``EvtxRecord`` that
parser made (its ``xml`` entry is ``None``: ``xml_text(i)`` renders it, or raises the same
``EvtxFormatError`` as ``record(i).xml()``).

Beside the XML the walk reads each record's ``<System>`` facts (``header``, ``fact``) and its
``EventData`` fields (``event_data``, ``data_columns``: the names come from the record's template,
the values are typed): a row whose shape the walk does not take is read from the pure tree, so
every row gives the values ``record(i).header`` and ``record(i).properties()`` give.
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from openetw.evtx.fields import column_values, field_text, field_value
from openetw.evtx.record import NATIVE_PARSED, EvtxHeader, EvtxRecord

if TYPE_CHECKING:
    from openetw.evtx.reader import ChunkState

__all__ = ["INT_FACTS", "DataColumns", "RecordBatch"]

INT_FACTS = (
    "event_id", "qualifiers", "version", "level", "task", "opcode", "keywords", "time_created",
    "record_id", "process_id", "thread_id",
)  # fmt: skip
"""The integer facts, in the order of a row of ``system_ints``."""
_WIDTH = len(INT_FACTS)
_SYS_OK, _SYS_QUALIFIERS = 1, 2
_GUID_FACTS = ("provider_guid", "activity_id", "related_activity_id")
_NO_GUID = bytes(16)
UNREAD = 0xFFFFFFFF
"""A row's EventData shape when the walk left its fields to the pure tree."""


class DataColumns:
    """The EventData fields of the rows that share one set of names, a column per name."""

    __slots__ = ("names", "rows", "columns")

    def __init__(self, names: tuple[str, ...], rows: list[int], columns: list[list[Any]]) -> None:
        self.names = names
        self.rows = rows  # the batch rows, in order
        self.columns = columns  # one list of values per name, a value per row

    def __repr__(self) -> str:
        return f"<DataColumns {len(self.rows)} rows {self.names}>"


class RecordBatch:
    """The records of one chunk, in walk order (record-id order inside the chunk)."""

    __slots__ = (
        "_chunk", "path", "positions", "sizes", "record_ids", "written_times", "xml", "_records",
        "system_flags", "system_ints", "system_guids", "provider_names", "event_source_names",
        "channels", "computers", "user_ids", "data_shapes", "data_starts", "data_fields", "data_names",
    )  # fmt: skip

    def __init__(self, chunk: ChunkState, path: str | None = None) -> None:
        self._chunk = chunk
        self.path = path
        self.positions = array("I")  # where each record starts in its chunk
        self.sizes = array("I")
        self.record_ids = array("Q")
        self.written_times = array("Q")
        self.xml: list[str | None] = []  # None: ``xml_text`` renders it (or says why it cannot)
        self._records: dict[int, EvtxRecord] = {}
        # <System> facts as the compiled walk read them; a row whose flag lacks bit 0 was not read
        self.system_flags = array("I")  # bit 0: read; bit 1: Qualifiers present; bits 2-4: GUIDs present
        self.system_ints = array("Q")  # INT_FACTS per row
        self.system_guids = bytearray()  # three GUIDs per row (bytes_le), zero when absent
        self.provider_names: list[str | None] = []
        self.event_source_names: list[str | None] = []
        self.channels: list[str | None] = []
        self.computers: list[str | None] = []
        self.user_ids: list[str | None] = []
        # EventData as the compiled walk read it: a shape per row (UNREAD: the pure tree's), the
        # index of its first field, the fields (type, chunk offset, size each), and the names of
        # each shape (the chunk's: shapes are numbered per chunk)
        self.data_shapes = array("I")
        self.data_starts = array("I")
        self.data_fields = array("I")
        self.data_names: list[tuple[str, ...]] = []

    def extend_columns(
        self, positions: bytes, sizes: bytes, ids: bytes, written: bytes, xml: list[str | None],
        system: tuple[Any, ...] | None = None, data: tuple[Any, ...] | None = None,
    ) -> None:  # fmt: skip
        """Adds a run of records: packed u32 positions and sizes, u64 ids and written times, the
        walk's ``<System>`` columns and its EventData fields (none: the pure tree's)."""
        self.positions.frombytes(positions)
        self.sizes.frombytes(sizes)
        self.record_ids.frombytes(ids)
        self.written_times.frombytes(written)
        self.xml.extend(xml)
        count = len(xml)
        if data is None:
            self.data_shapes.frombytes(b"\xff" * (4 * count))
            self.data_starts.frombytes(bytes(4 * count))
        else:
            shapes, starts, fields, self.data_names = data
            self.data_shapes.frombytes(shapes)
            base = len(self.data_fields) // 3
            if base:
                self.data_starts.extend(array("I", [start + base for start in array("I", starts)]))
            else:
                self.data_starts.frombytes(starts)
            self.data_fields.frombytes(fields)
        if system is None:
            self._unread(count)
            return
        ints, flags, guids, providers, sources, channels, computers, users = system
        self.system_ints.frombytes(ints)
        self.system_flags.frombytes(flags)
        self.system_guids += guids
        self.provider_names.extend(providers)
        self.event_source_names.extend(sources)
        self.channels.extend(channels)
        self.computers.extend(computers)
        self.user_ids.extend(users)

    def _unread(self, count: int) -> None:
        self.system_flags.extend([0] * count)
        self.system_ints.extend([0] * (_WIDTH * count))
        self.system_guids += bytes(48 * count)
        for column in (self.provider_names, self.event_source_names, self.channels, self.computers, self.user_ids):
            column.extend([None] * count)

    def append_record(self, record: EvtxRecord) -> None:
        """Adds a record the reader made one at a time (kept as it is)."""
        self._records[len(self.xml)] = record
        self.positions.append(record._pos)
        self.sizes.append(record._size)
        self.record_ids.append(record.record_id)
        self.written_times.append(record.written_time)
        self.xml.append(record._xml)
        self._unread(1)
        self.data_shapes.append(UNREAD)
        self.data_starts.append(0)

    def __len__(self) -> int:
        return len(self.xml)

    @property
    def chunk_index(self) -> int:
        return self._chunk.index

    @property
    def chunk_offset(self) -> int:
        """Where the chunk starts in the file (a record's file offset is this plus its position)."""
        return self._chunk.offset

    def file_offsets(self) -> list[int]:
        base = self._chunk.offset
        return [base + pos for pos in self.positions]

    def record(self, i: int) -> EvtxRecord:
        """The ``EvtxRecord`` of row ``i`` (made on first request, then kept)."""
        record = self._records.get(i)
        if record is None:
            record = EvtxRecord(
                self._chunk, self.positions[i], self.sizes[i], self.record_ids[i], self.written_times[i],
                NATIVE_PARSED, self.path, None, self.xml[i],
            )  # fmt: skip
            record._facts = (self, i)  # its header and fields from the walk's columns where it read them
            self._records[i] = record
        return record

    def records(self) -> Iterator[EvtxRecord]:
        for i in range(len(self.xml)):
            yield self.record(i)

    def xml_text(self, i: int) -> str:
        """Row ``i`` as ``wevtutil qe /f:xml`` prints it; ``EvtxFormatError`` as ``record(i).xml()``."""
        text = self.xml[i]
        return text if text is not None else self.record(i).xml()

    def xml_texts(self) -> Iterator[str]:
        """Every row's XML in order (``EvtxFormatError`` at the first whose values are damaged)."""
        for i, text in enumerate(self.xml):
            yield text if text is not None else self.record(i).xml()

    def header(self, i: int) -> EvtxHeader:
        """Row ``i``'s ``<System>`` facts, the values ``record(i).header`` gives."""
        if not self.system_flags[i] & _SYS_OK:
            return self.record(i).header
        header = EvtxHeader()
        flags = self.system_flags[i]
        row = self.system_ints[_WIDTH * i : _WIDTH * (i + 1)]
        (header.event_id, qualifiers, header.version, header.level, header.task, header.opcode, header.keywords,
         time_created, record_id, header.process_id, header.thread_id) = row  # fmt: skip
        header.qualifiers = qualifiers if flags & _SYS_QUALIFIERS else None
        header.time_created = time_created or self.written_times[i]
        header.record_id = record_id or self.record_ids[i]
        guids = self.system_guids
        for g, name in enumerate(_GUID_FACTS):
            if flags & (4 << g):
                at = 16 * (3 * i + g)
                setattr(header, name, uuid.UUID(bytes_le=bytes(guids[at : at + 16])))
        header.provider_name = self.provider_names[i] or ""
        header.event_source_name = self.event_source_names[i]
        header.channel = self.channels[i] or ""
        header.computer = self.computers[i] or ""
        header.user_id = self.user_ids[i]
        return header

    def fact(self, name: str) -> list[Any]:
        """One ``EvtxHeader`` fact of every row (``"provider_name"``, ``"time_created"``...), as
        ``header(i)`` gives it, without a header object per row the walk read."""
        if name in INT_FACTS:
            k = INT_FACTS.index(name)
            values: list[Any] = self.system_ints[k::_WIDTH].tolist()
            if name == "time_created":
                values = [value or written for value, written in zip(values, self.written_times, strict=True)]
            elif name == "record_id":
                values = [value or record_id for value, record_id in zip(values, self.record_ids, strict=True)]
            elif name == "qualifiers":
                values = [value if flags & _SYS_QUALIFIERS else None for value, flags in zip(values, self.system_flags, strict=True)]
        elif name in ("provider_name", "channel", "computer"):
            values = [text or "" for text in getattr(self, name + "s")]
        elif name in ("event_source_name", "user_id"):
            values = list(getattr(self, name + "s"))
        else:
            values = [getattr(self.header(i), name) if flags & _SYS_OK else None for i, flags in enumerate(self.system_flags)]
        for i in self.unread_rows():
            values[i] = getattr(self.header(i), name)
        return values

    def has_data(self, i: int) -> bool:
        """The walk read row ``i``'s EventData (else ``event_data`` asks the pure tree)."""
        return self.data_shapes[i] != UNREAD

    def event_data(self, i: int, *, text: bool = False) -> dict[str, Any]:
        """Row ``i``'s ``EventData`` / ``UserData`` values by name: ``record(i).properties()``
        (``text=True``: ``text_properties()``)."""
        shape = self.data_shapes[i]
        if shape == UNREAD:
            record = self.record(i)
            return record.text_properties() if text else record.properties()
        names = self.data_names[shape]
        fields, data, k = self.data_fields, self._chunk.data, 3 * self.data_starts[i]
        decode = field_text if text else field_value
        return {name: decode(fields[k + 3 * j], data, fields[k + 3 * j + 1], fields[k + 3 * j + 2]) for j, name in enumerate(names)}

    def data_columns(self, *, text: bool = False) -> list[DataColumns]:
        """Every row's ``event_data`` grouped by its names, a column of values per name (in the
        order each set of names first occurs; a row the walk did not read joins the group of its
        names)."""
        groups: dict[tuple[str, ...], DataColumns] = {}
        by_shape: dict[int, list[int]] = {}
        unread: list[int] = []
        for i, shape in enumerate(self.data_shapes):
            if shape == UNREAD:
                unread.append(i)
                names: tuple[str, ...] = tuple(self.event_data(i, text=text))
            else:
                names = self.data_names[shape]
                by_shape.setdefault(shape, []).append(i)
            if names not in groups:
                groups[names] = DataColumns(names, [], [[] for _ in names])
        for shape, rows in by_shape.items():
            group = groups[self.data_names[shape]]
            starts = self.data_starts
            first = [starts[i] for i in rows]
            for j, column in enumerate(group.columns):
                column.extend(column_values(self._chunk.data, self.data_fields, [k + j for k in first], text=text))
            group.rows.extend(rows)
        for i in unread:
            values = self.event_data(i, text=text)
            group = groups[tuple(values)]
            group.rows.append(i)
            for column, value in zip(group.columns, values.values(), strict=True):
                column.append(value)
        for group in groups.values():
            if len(by_shape) + len(unread) > 1 and group.rows != sorted(group.rows):
                order = sorted(range(len(group.rows)), key=group.rows.__getitem__)
                group.rows = [group.rows[k] for k in order]
                group.columns = [[column[k] for k in order] for column in group.columns]
        return list(groups.values())

    def headers(self) -> Iterator[EvtxHeader]:
        for i in range(len(self.xml)):
            yield self.header(i)

    def unread_rows(self) -> list[int]:
        """The rows whose facts the walk left to the pure tree."""
        return [i for i, flags in enumerate(self.system_flags) if not flags & _SYS_OK]

    def __repr__(self) -> str:
        return f"<RecordBatch chunk={self._chunk.index} records={len(self.xml)}>"
