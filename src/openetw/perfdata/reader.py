"""``PerfData``: a perf.data file as objects (pure: bytes in, objects out).

A file (``PERFILE2`` at 0) has a header naming its attribute, data and feature sections; pipe
mode (``perf record -o -``) has a 16-byte header and carries the attributes, the tracing data
and the features as records among the samples. Both are read the same way: ``records()`` walks
the data records in file order, yields each PERF_RECORD_SAMPLE as a ``Sample`` and counts the
others (``stats``), taking what the header records of pipe mode say as it meets them.

Damage never costs a good record: a record header that cannot be trusted (a size under 8 or
past the end of the data) stops the walk there with a ``PerfDataFormatError`` in ``errors``
(offset, structure, record index) and every record before it kept; a sample whose fields run
past its record is skipped and counted. Every size read from the file is checked against the
bytes that are there before anything is sliced.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import PerfDataFormatError
from openetw.perfdata import layout as P
from openetw.perfdata.tracing_data import TracingData, parse_tracing_data

__all__ = ["ClockData", "EventAttr", "PerfData", "PerfStats", "Sample", "is_perf_data"]


def is_perf_data(head: bytes) -> bool:
    """Whether bytes start a perf.data file (either byte order; file or pipe mode)."""
    return head[:8] in (P.MAGIC, P.MAGIC_SWAPPED)


@dataclass(frozen=True, slots=True)
class EventAttr:
    """One ``perf_event_attr`` and the sample ids that belong to it."""

    type: int
    config: int
    sample_period: int
    sample_type: int
    read_format: int
    flags: int
    clockid: int
    ids: tuple[int, ...] = ()
    name: str = ""
    size: int = 0

    @property
    def sample_id_all(self) -> bool:
        return bool(self.flags & P.ATTR_FLAG_SAMPLE_ID_ALL)

    @property
    def is_tracepoint(self) -> bool:
        return self.type == P.TYPE_TRACEPOINT


@dataclass(frozen=True, slots=True)
class ClockData:
    """HEADER_CLOCK_DATA: the wall-clock time that went with one reading of the sample clock."""

    clockid: int
    wall_clock_ns: int
    clockid_time_ns: int


@dataclass(slots=True)
class Sample:
    """One PERF_RECORD_SAMPLE: the fields its attribute's ``sample_type`` asked for.

    ``raw`` is the PERF_SAMPLE_RAW bytes (a tracepoint's common fields and payload), ``None``
    when the sample has none; fields the sample does not carry are ``None``."""

    attr: EventAttr
    offset: int
    record_index: int
    pid: int | None = None
    tid: int | None = None
    time: int | None = None
    cpu: int | None = None
    id: int | None = None
    stream_id: int | None = None
    period: int | None = None
    ip: int | None = None
    addr: int | None = None
    callchain: tuple[int, ...] = ()
    raw: bytes | None = None
    raw_offset: int = 0  # where ``raw`` starts in the file
    misc: int = 0


@dataclass
class PerfStats:
    """What the walk met: records by type name, samples kept and skipped, events the kernel lost."""

    records: Counter[str] = field(default_factory=Counter)
    samples: int = 0
    samples_skipped: int = 0
    events_lost: int = 0  # PERF_RECORD_LOST and LOST_SAMPLES
    bytes_read: int = 0

    @property
    def record_count(self) -> int:
        return sum(self.records.values())


_SAMPLE_ORDER = ("pid", "tid", "time", "cpu", "id", "stream_id", "period", "ip", "addr")


class _SampleLayout:
    """A ``sample_type`` (and ``read_format``) compiled: one struct for the fixed fields ahead of
    READ, then the variable parts in order."""

    __slots__ = ("names", "fixed", "order", "read", "read_group", "read_words", "callchain", "raw", "endian")

    def __init__(self, sample_type: int, read_format: int, endian: str) -> None:
        names: list[str] = []
        codes = ""
        for bit, name, code in (
            (P.SAMPLE_IDENTIFIER, "id", "Q"), (P.SAMPLE_IP, "ip", "Q"), (P.SAMPLE_TID, "pid", "ii"), (P.SAMPLE_TIME, "time", "Q"),
            (P.SAMPLE_ADDR, "addr", "Q"), (P.SAMPLE_ID, "id", "Q"), (P.SAMPLE_STREAM_ID, "stream_id", "Q"), (P.SAMPLE_CPU, "cpu", "II"),
            (P.SAMPLE_PERIOD, "period", "Q"),
        ):  # fmt: skip
            if sample_type & bit:
                codes += code
                names.append(name)
                if name == "pid":
                    names.append("tid")
                elif name == "cpu":
                    names.append("")
        self.endian = endian
        self.names = tuple(names)
        self.fixed = struct.Struct(endian + codes)
        # Where each of Sample's positional fields sits in the unpacked tuple (-1: not sampled).
        self.order = tuple(names.index(name) if name in names else -1 for name in _SAMPLE_ORDER)
        self.read = bool(sample_type & P.SAMPLE_READ)
        self.read_group = bool(read_format & P.FORMAT_GROUP)
        extra = bool(read_format & P.FORMAT_TOTAL_TIME_ENABLED) + bool(read_format & P.FORMAT_TOTAL_TIME_RUNNING)
        per_value = 1 + bool(read_format & P.FORMAT_ID) + bool(read_format & P.FORMAT_LOST)
        self.read_words = (extra, per_value)
        self.callchain = bool(sample_type & P.SAMPLE_CALLCHAIN)
        self.raw = bool(sample_type & P.SAMPLE_RAW)


class PerfData:
    """A perf.data file's header, attributes, features and data records.

    ``data`` is the whole file (``bytes``, a ``memoryview`` or a read-only mapping: slices of it
    are taken, never the whole copied). Opening reads the header, the attributes and the
    features; ``records()`` walks the data."""

    def __init__(self, data: Any, *, path: str | None = None) -> None:
        self.data = data
        self.size = len(data)
        self.path = path
        self.errors: list[PerfDataFormatError] = []  # what cost records
        self.notices: list[PerfDataFormatError] = []  # what was counted, nothing lost
        self.stats = PerfStats()
        self.attrs: list[EventAttr] = []
        self.features: dict[int, tuple[int, int]] = {}
        self.feature_data: dict[int, bytes] = {}
        self.tracing: TracingData | None = None
        self.event_names: dict[int, str] = {}  # sample id -> event name (HEADER_EVENT_DESC)
        self.strings: dict[str, str] = {}  # hostname, osrelease, version, arch, cmdline
        self.build_ids: list[tuple[int, bytes, str]] = []  # (pid, build id, file name)
        self.clock_data: ClockData | None = None
        self.clock_resolution_ns: int | None = None
        self.nr_cpus: tuple[int, int] | None = None  # available, online
        self.sample_time: tuple[int, int] | None = None  # first, last
        self._by_id: dict[int, EventAttr] = {}
        self._layouts: dict[tuple[int, int], _SampleLayout] = {}
        self._id_at: tuple[int | None, int | None] = (None, None)  # (first attribute's sample_type, id offset)
        head = bytes(data[:8])
        if head == P.MAGIC:
            self.endian = "<"
        elif head == P.MAGIC_SWAPPED:
            self.endian = ">"
        else:
            raise self._error("not a perf.data file: the first 8 bytes are not PERFILE2", 0, "perf_file_header")
        self._u32 = struct.Struct(self.endian + "I").unpack_from
        self._u64 = struct.Struct(self.endian + "Q").unpack_from
        self._event_header = struct.Struct(self.endian + "IHH").unpack_from
        if self.size < P.PIPE_HEADER_SIZE:
            raise self._error(f"the file has {self.size} bytes, fewer than a header", 0, "perf_file_header")
        header_size = self._u64(data, 8)[0]
        self.pipe = header_size == P.PIPE_HEADER_SIZE
        if self.pipe:
            self.data_offset, self.data_end = P.PIPE_HEADER_SIZE, self.size
        else:
            self._read_file_header(header_size)

    # -- helpers -------------------------------------------------------------------------------
    def _error(
        self, message: str, offset: int | None, structure: str, record_index: int | None = None
    ) -> PerfDataFormatError:
        return PerfDataFormatError(
            message, offset=offset, structure=structure, record_index=record_index, path=self.path
        )

    def _bytes(self, offset: int, size: int) -> bytes:
        return bytes(self.data[offset : offset + size])

    def _section(self, at: int, what: str) -> tuple[int, int]:
        offset, size = struct.unpack_from(self.endian + "QQ", self.data, at)
        if offset > self.size or size > self.size - offset:
            raise self._error(
                f"the {what} section ({size} bytes at {offset}) lies past the file's {self.size} bytes",
                at,
                "perf_file_header",
            )
        return offset, size

    # -- file mode -----------------------------------------------------------------------------
    def _read_file_header(self, header_size: int) -> None:
        if self.size < P.FILE_HEADER_SIZE or header_size < P.FILE_HEADER_SIZE:
            raise self._error(
                f"header of {header_size} bytes in a file of {self.size}: not a perf.data header", 8, "perf_file_header"
            )
        attr_size = self._u64(self.data, 16)[0]
        attrs_offset, attrs_size = self._section(24, "attrs")
        data_offset, data_size = struct.unpack_from(self.endian + "QQ", self.data, 40)
        if data_offset < P.FILE_HEADER_SIZE or data_offset > self.size:
            raise self._error(
                f"the data section starts at {data_offset}, outside the file's {self.size} bytes",
                40,
                "perf_file_header",
            )
        self.data_offset = data_offset
        self.data_end = data_offset + data_size  # past the end of a cut file: the walk stops there and says so
        words = struct.unpack(self.endian + "4Q", self._bytes(72, 32))  # the bitmap: u64 words in the file's order
        bits = sum(word << (64 * index) for index, word in enumerate(words))
        self._read_attrs(attrs_offset, attrs_size, attr_size)
        if self.data_end > self.size:
            self.notices.append(
                self._error(
                    f"the data section ends at {self.data_end}, past the file's {self.size} bytes: the features after it are lost",
                    40,
                    "perf_file_header",
                )
            )
        else:
            self._read_feature_table(bits, self.data_end)

    def _read_attrs(self, offset: int, size: int, entry_size: int) -> None:
        if not size:
            return
        if entry_size < P.MIN_ATTR_SIZE + 16 or entry_size > P.MAX_ATTR_SIZE + 16:
            raise self._error(f"attribute entries of {entry_size} bytes", 16, "perf_file_header")
        for index in range(size // entry_size):
            at = offset + index * entry_size
            attr_bytes = self._bytes(at, entry_size - 16)
            ids_offset, ids_size = self._section(at + entry_size - 16, "attribute ids")
            count = ids_size // 8
            ids = struct.unpack(f"{self.endian}{count}Q", self._bytes(ids_offset, count * 8)) if count else ()
            self._add_attr(self._parse_attr(attr_bytes, at), tuple(ids))

    def _parse_attr(self, raw: bytes, offset: int) -> EventAttr:
        if len(raw) < P.MIN_ATTR_SIZE:
            raise self._error(
                f"perf_event_attr of {len(raw)} bytes, fewer than {P.MIN_ATTR_SIZE}", offset, "perf_event_attr"
            )
        kind, size, config, period, sample_type, read_format, flags = struct.unpack_from(
            self.endian + "IIQQQQQ", raw, 0
        )
        clockid = struct.unpack_from(self.endian + "i", raw, 92)[0] if len(raw) >= 96 else 0
        return EventAttr(kind, config, period, sample_type, read_format, flags, clockid, size=size)

    def _add_attr(self, attr: EventAttr, ids: tuple[int, ...]) -> None:
        attr = EventAttr(
            attr.type,
            attr.config,
            attr.sample_period,
            attr.sample_type,
            attr.read_format,
            attr.flags,
            attr.clockid,
            ids,
            attr.name,
            attr.size,
        )
        self.attrs.append(attr)
        for sample_id in ids:
            self._by_id[sample_id] = attr

    def _read_feature_table(self, bits: int, table: int) -> None:
        position = table
        for feature in range(P.FEATURE_BITS):
            if not bits >> feature & 1:
                continue
            if position + 16 > self.size:
                self.notices.append(
                    self._error(f"feature table ends before feature {feature}", position, "perf_file_section")
                )
                return
            try:
                self.features[feature] = self._section(position, P.FEATURE_NAMES.get(feature, f"feature {feature}"))
            except PerfDataFormatError as error:
                self.notices.append(error)
            position += 16
        for feature, (offset, size) in self.features.items():
            self._take_feature(feature, self._bytes(offset, size), offset)

    # -- features ------------------------------------------------------------------------------
    def _take_feature(self, feature: int, raw: bytes, offset: int) -> None:
        self.feature_data[feature] = raw
        name = P.FEATURE_NAMES.get(feature, f"feature {feature}")
        try:
            if feature == P.FEATURE_TRACING_DATA:
                self.tracing = parse_tracing_data(raw, base=offset)
                self.notices.extend(self.tracing.problems)
            elif feature in P.STRING_FEATURES:
                self.strings[name.lower()] = self._header_string(raw, 0, offset)[0]
            elif feature == P.FEATURE_CMDLINE:
                self.strings["cmdline"] = " ".join(self._string_list(raw, offset))
            elif feature == P.FEATURE_NRCPUS and len(raw) >= 8:
                self.nr_cpus = (self._u32(raw, 0)[0], self._u32(raw, 4)[0])
            elif feature == P.FEATURE_EVENT_DESC:
                self._event_desc(raw, offset)
            elif feature == P.FEATURE_BUILD_ID:
                self._build_ids(raw, offset)
            elif feature == P.FEATURE_CLOCKID and len(raw) >= 8:
                self.clock_resolution_ns = self._u64(raw, 0)[0]
            elif feature == P.FEATURE_CLOCK_DATA and len(raw) >= 24:
                _version, clockid = struct.unpack_from(self.endian + "II", raw, 0)
                wall, clock = struct.unpack_from(self.endian + "QQ", raw, 8)
                self.clock_data = ClockData(clockid, wall, clock)
            elif feature == P.FEATURE_SAMPLE_TIME and len(raw) >= 16:
                self.sample_time = (self._u64(raw, 0)[0], self._u64(raw, 8)[0])
        except (PerfDataFormatError, struct.error, IndexError) as error:
            problem = error if isinstance(error, PerfDataFormatError) else self._error(f"{name}: {error}", offset, name)
            self.notices.append(problem)

    def _header_string(self, raw: bytes, pos: int, base: int) -> tuple[str, int]:
        """A ``perf_header_string``: u32 length (padding and NUL included), then the text."""
        if pos + 4 > len(raw):
            raise self._error("string length past the feature's end", base + pos, "perf_header_string")
        length = self._u32(raw, pos)[0]
        if length > len(raw) - pos - 4:
            raise self._error(f"string of {length} bytes runs past the feature's end", base + pos, "perf_header_string")
        text = raw[pos + 4 : pos + 4 + length].split(b"\0", 1)[0].decode("utf-8", "replace")
        return text, pos + 4 + length

    def _string_list(self, raw: bytes, base: int) -> list[str]:
        count = self._u32(raw, 0)[0]
        if count > len(raw):
            raise self._error(f"{count} strings in {len(raw)} bytes", base, "perf_header_string_list")
        strings, pos = [], 4
        for _ in range(count):
            text, pos = self._header_string(raw, pos, base)
            strings.append(text)
        return strings

    def _event_desc(self, raw: bytes, base: int) -> None:
        count, attr_size = struct.unpack_from(self.endian + "II", raw, 0)
        if attr_size < P.MIN_ATTR_SIZE or attr_size > P.MAX_ATTR_SIZE or count > len(raw) // attr_size:
            raise self._error(f"{count} event descriptions of {attr_size} bytes", base, "HEADER_EVENT_DESC")
        pos = 8
        for _ in range(count):
            if pos + attr_size + 4 > len(raw):
                raise self._error("event description past the feature's end", base + pos, "HEADER_EVENT_DESC")
            pos += attr_size
            nr_ids = self._u32(raw, pos)[0]
            name, pos = self._header_string(raw, pos + 4, base)
            if nr_ids > (len(raw) - pos) // 8:
                raise self._error(f"{nr_ids} ids past the feature's end", base + pos, "HEADER_EVENT_DESC")
            for index in range(nr_ids):
                self.event_names[self._u64(raw, pos + 8 * index)[0]] = name
            pos += 8 * nr_ids

    def _build_ids(self, raw: bytes, base: int) -> None:
        pos = 0
        while pos + 8 <= len(raw):
            _type, misc, size = self._event_header(raw, pos)
            if size < 36 or pos + size > len(raw):
                raise self._error(f"build id record of {size} bytes", base + pos, "build_id_event")
            pid = struct.unpack_from(self.endian + "i", raw, pos + 8)[0]
            length = raw[pos + 32] if misc & P.PERF_RECORD_MISC_BUILD_ID_SIZE and raw[pos + 32] <= 20 else 20
            build_id = raw[pos + 12 : pos + 12 + length]
            name = raw[pos + 36 : pos + size].split(b"\0", 1)[0].decode("utf-8", "replace")
            self.build_ids.append((pid, build_id, name))
            pos += size

    # -- records -------------------------------------------------------------------------------
    def attr_for(self, sample_id: int | None) -> EventAttr | None:
        if len(self.attrs) == 1:
            return self.attrs[0]
        if sample_id is None:
            return None
        return self._by_id.get(sample_id)

    def sample_ids(self) -> list[int]:
        """Every sample id an attribute lists, sorted."""
        return sorted(self._by_id)

    def event_name(self, attr: EventAttr) -> str:
        """The event's name: the tracepoint's ``system:name``, else HEADER_EVENT_DESC's."""
        if attr.is_tracepoint and self.tracing is not None:
            fmt = self.tracing.formats.get(attr.config)
            if fmt is not None:
                return f"{fmt.system}:{fmt.name}"
        for sample_id in attr.ids:
            if sample_id in self.event_names:
                return self.event_names[sample_id]
        return attr.name or f"type {attr.type} config {attr.config}"

    def _layout(self, attr: EventAttr) -> _SampleLayout:
        key = (attr.sample_type, attr.read_format)
        compiled = self._layouts.get(key)
        if compiled is None:
            compiled = self._layouts[key] = _SampleLayout(attr.sample_type, attr.read_format, self.endian)
        return compiled

    def _id_offset(self) -> int | None:
        """Where in a sample's body the attributes' common ``sample_type`` puts its id."""
        first = self.attrs[0].sample_type if self.attrs else 0
        if first & P.SAMPLE_IDENTIFIER:
            return 0
        if first & P.SAMPLE_ID:
            return 8 * sum(bool(first & bit) for bit in (P.SAMPLE_IP, P.SAMPLE_TID, P.SAMPLE_TIME, P.SAMPLE_ADDR))
        return None

    def _sample_id(self, body_start: int, end: int) -> int | None:
        """The id of a sample (``None`` when there is one attribute: no need to look)."""
        if len(self.attrs) == 1:
            return None
        key = self.attrs[0].sample_type
        if self._id_at[0] != key:
            self._id_at = (key, self._id_offset())
        at = self._id_at[1]
        if at is None:
            return None
        position = body_start + at
        if position + 8 > end:
            return None
        sample_id: int = self._u64(self.data, position)[0]
        return sample_id

    def parse_sample(self, offset: int, size: int, misc: int, record_index: int) -> Sample:
        """The PERF_RECORD_SAMPLE at ``offset``; ``PerfDataFormatError`` when its fields do not fit."""
        data, end = self.data, offset + size
        start = offset + P.EVENT_HEADER_SIZE
        attr = self.attr_for(self._sample_id(start, end))
        if attr is None:
            raise self._error(
                "sample of no known attribute (its id is in no attribute's list)",
                offset,
                "PERF_RECORD_SAMPLE",
                record_index,
            )
        layout = self._layout(attr)
        pos = start + layout.fixed.size
        if pos > end:
            raise self._error(
                f"sample of {size} bytes is shorter than its fixed fields", offset, "PERF_RECORD_SAMPLE", record_index
            )
        values = layout.fixed.unpack_from(data, start)
        fields = [values[at] if at >= 0 else None for at in layout.order]  # Sample's fields pid .. addr, in order
        sample = Sample(attr, offset, record_index, *fields)  # type: ignore[arg-type]  # (mypy cannot type a list as those fields)
        sample.misc = misc
        u64 = self._u64
        if layout.read:
            extra, per_value = layout.read_words
            if layout.read_group:
                if pos + 8 > end:
                    raise self._error("read values past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index)
                count = u64(data, pos)[0]
                if count > (end - pos) // 8:
                    raise self._error(
                        f"{count} read values past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index
                    )
                pos += 8 * (1 + extra + count * per_value)
            else:
                pos += 8 * (extra + per_value)
        if layout.callchain:
            if pos + 8 > end:
                raise self._error("callchain past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index)
            count = u64(data, pos)[0]
            if count > (end - pos - 8) // 8:
                raise self._error(
                    f"callchain of {count} entries past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index
                )
            sample.callchain = struct.unpack_from(f"{self.endian}{count}Q", data, pos + 8)
            pos += 8 + 8 * count
        if layout.raw:
            if pos + 4 > end:
                raise self._error("raw data size past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index)
            raw_size = self._u32(data, pos)[0]
            if raw_size > end - pos - 4:
                raise self._error(
                    f"raw data of {raw_size} bytes past the sample's end", pos, "PERF_RECORD_SAMPLE", record_index
                )
            sample.raw = bytes(data[pos + 4 : pos + 4 + raw_size])
            sample.raw_offset = pos + 4
        return sample

    def records(self, *, rounds: bool = False) -> Iterator[Sample | None]:
        """Every sample in file order; other records are counted in ``stats`` (and, in pipe mode,
        their attributes, tracing data and features taken). Damage goes to ``errors``.
        ``rounds=True``: a ``None`` where a FINISHED_ROUND record is (every sample before it with
        a time at most the newest time before the previous one may be put in time order)."""
        end, stats = self.data_end_in_file(), self.stats
        pos, index = self.data_offset, 0
        while pos < end:
            framed = self.frame(pos, end, index)
            if framed is None:
                break
            kind, misc, size = framed
            if kind == P.RECORD_SAMPLE:
                try:
                    sample = self.parse_sample(pos, size, misc, index)
                except PerfDataFormatError as error:
                    stats.samples_skipped += 1
                    self.errors.append(error)
                else:
                    stats.samples += 1
                    yield sample
            else:
                extra = self.other_record(kind, pos, size, index)
                if extra < 0:
                    break
                if rounds and kind == P.RECORD_FINISHED_ROUND:
                    yield None
                size += extra
            pos += size
            index += 1
        stats.bytes_read = pos - self.data_offset

    def data_end_in_file(self) -> int:
        """Where the walk of the data records stops (the data section's end, or the file's when
        it was cut: said once in ``errors``)."""
        if self.data_end > self.size:
            message = f"the data section ends at {self.data_end}, past the file's {self.size} bytes"
            if not any(error.message == message for error in self.errors):
                self.errors.append(self._error(message, 40, "perf_file_header"))
        return min(self.data_end, self.size)

    def frame(self, pos: int, end: int, index: int) -> tuple[int, int, int] | None:
        """The (type, misc, size) of the record at ``pos``, counted; ``None`` (and an error) when
        its header cannot be trusted."""
        if pos + P.EVENT_HEADER_SIZE > end:
            self.errors.append(
                self._error(f"{end - pos} bytes left, too few for a record header", pos, "perf_event_header", index)
            )
            return None
        kind, misc, size = self._event_header(self.data, pos)
        if size < P.EVENT_HEADER_SIZE or pos + size > end:
            what = "truncated" if size >= P.EVENT_HEADER_SIZE else "impossible"
            message = f"record of type {kind} and {size} bytes is {what} ({end - pos} bytes left)"
            self.errors.append(self._error(message, pos, "perf_event_header", index))
            return None
        self.stats.records[P.RECORD_NAMES.get(kind, str(kind))] += 1
        return kind, misc, size

    def other_record(self, kind: int, pos: int, size: int, index: int) -> int:
        """A record that is no sample: taken (lost counts; pipe mode's attributes, tracing data,
        features). Returns the bytes that follow it beyond its size, -1 to stop the walk."""
        if kind >= P.FIRST_USER_RECORD:
            return self._user_record(kind, pos, size, index)
        if kind == P.RECORD_LOST and size >= 24:
            self.stats.events_lost += self._u64(self.data, pos + 16)[0]
        elif kind == P.RECORD_LOST_SAMPLES and size >= 16:
            self.stats.events_lost += self._u64(self.data, pos + 8)[0]
        return 0

    def _user_record(self, kind: int, pos: int, size: int, index: int) -> int:
        """A perf tool record: bytes that follow it beyond its size (-1: stop the walk)."""
        end = min(self.data_end, self.size)
        body = pos + P.EVENT_HEADER_SIZE
        try:
            if kind == P.RECORD_HEADER_ATTR:
                attr_size = self._u32(self.data, body + 4)[0] if size >= 16 else 0
                if attr_size < P.MIN_ATTR_SIZE or body + attr_size > pos + size:
                    raise self._error(
                        f"attribute of {attr_size} bytes in a record of {size}", pos, "HEADER_ATTR", index
                    )
                attr = self._parse_attr(self._bytes(body, attr_size), body)
                count = (pos + size - body - attr_size) // 8
                self._add_attr(attr, struct.unpack_from(f"{self.endian}{count}Q", self.data, body + attr_size))
            elif kind == P.RECORD_HEADER_TRACING_DATA:
                length = self._u32(self.data, body)[0]
                padded = (length + 7) & ~7
                if pos + size + length > end:
                    self.errors.append(
                        self._error(f"tracing data of {length} bytes past the end", pos, "HEADER_TRACING_DATA", index)
                    )
                    return -1
                offset = pos + size
                self._take_feature(P.FEATURE_TRACING_DATA, self._bytes(offset, length), offset)
                return int(padded if pos + size + padded <= end else length)
            elif kind == P.RECORD_HEADER_FEATURE and size >= 16:
                feature = self._u64(self.data, body)[0]
                self._take_feature(int(feature), self._bytes(body + 8, size - 16), body + 8)
            elif kind == P.RECORD_AUXTRACE and size >= 16:
                aux_size = self._u64(self.data, body)[0]
                if pos + size + aux_size > end:
                    self.errors.append(
                        self._error(f"aux trace data of {aux_size} bytes past the end", pos, "AUXTRACE", index)
                    )
                    return -1
                return int(aux_size)
            elif kind == P.RECORD_COMPRESSED and self.stats.records["COMPRESSED"] == 1:
                self.errors.append(
                    self._error(
                        "compressed records (perf record -z) are counted, not read (their samples are lost)",
                        pos,
                        "COMPRESSED",
                        index,
                    )
                )
        except PerfDataFormatError as error:
            self.errors.append(error)
        except struct.error as error:
            self.errors.append(self._error(str(error), pos, P.RECORD_NAMES.get(kind, str(kind)), index))
        return 0
