"""The text files tracefs describes its binary data with (pure: text in, objects out).

* ``events/header_page``: the layout of a ring-buffer sub-buffer (timestamp, commit, data).
* ``events/header_event``: the compressed event header (type_len / time_delta bit widths and
  the special type_len values for padding, time extend and absolute timestamps).
* ``events/<system>/<event>/format``: an event's id and its fields with offsets and sizes.

Nothing here hard-codes an offset: the ring-buffer parser and the payload decoder take every
position from these objects, so a kernel that moves a field is read correctly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from openetw.errors import TraceDataError

__all__ = [
    "ABS_TIME_TOP_BITS",
    "COMMIT_LENGTH_MASK",
    "MISSED_EVENTS",
    "MISSED_STORED",
    "EventFormat",
    "FieldFormat",
    "HeaderEvent",
    "HeaderPage",
    "parse_event_format",
    "parse_header_event",
    "parse_header_page",
]

_FIELD_LINE = re.compile(
    r"^\s*field:\s*(?P<decl>[^;]*?)\s*;\s*offset:\s*(?P<offset>\d+)\s*;\s*size:\s*(?P<size>\d+)\s*;"
    r"(?:\s*signed:\s*(?P<signed>-?\d+)\s*;)?"
)
_ARRAY_SUFFIX = re.compile(r"\[(?P<length>[^\]]*)\]\s*$")
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(\[[^\]]*\])?\s*$")
_INT_CODES = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h",
              (4, False): "I", (4, True): "i", (8, False): "Q", (8, True): "q"}

# Field kinds.
INTEGER = "integer"
STRING = "string"          # char[N]: NUL-terminated text in a fixed area
INT_ARRAY = "int_array"    # u8/u16/u32/u64[N]: a tuple of integers
DATA_LOC = "data_loc"      # __data_loc T[]: u32 (length << 16 | offset from the payload start)
REL_LOC = "rel_loc"        # __rel_loc T[]: u32 (length << 16 | offset from the end of the field)
DYNAMIC_TAIL = "tail"      # T name[] of size 0: the rest of the payload
BYTES = "bytes"            # anything else: raw bytes


@dataclass(frozen=True, slots=True)
class FieldFormat:
    """One ``field:`` line. ``element_size`` is the size of one array element (or of the value)."""

    name: str
    c_type: str
    offset: int
    size: int
    signed: bool
    kind: str
    array_length: int | None = None
    element_size: int = 0
    text: bool = False  # the elements are chars (data_loc/rel_loc/tail strings)
    struct_code: str | None = None  # for INTEGER and INT_ARRAY elements


@dataclass(frozen=True, slots=True)
class EventFormat:
    """A tracepoint's ``format`` file: ``name``, ``id``, the common fields then the event's own."""

    name: str
    id: int
    common_fields: tuple[FieldFormat, ...]
    fields: tuple[FieldFormat, ...]
    system: str = ""
    by_name: dict[str, FieldFormat] = field(default_factory=dict, compare=False, repr=False)

    @property
    def all_fields(self) -> tuple[FieldFormat, ...]:
        return self.common_fields + self.fields

    @property
    def min_payload(self) -> int:
        """Bytes a payload needs to hold every fixed-position field."""
        return max((f.offset + f.size for f in self.all_fields), default=0)

    def field(self, name: str) -> FieldFormat:
        try:
            return self.by_name[name]
        except KeyError:
            raise TraceDataError(f"event {self.name} has no field {name!r}", structure="format") from None


# What header_page does not describe: the flags in the commit word's top bits (the rest is the
# data length), and which bits of the running time an absolute timestamp keeps.
MISSED_EVENTS = 1 << 31
"""Commit flag: events were lost (overwritten) before this page."""
MISSED_STORED = 1 << 30
"""Commit flag: the number of lost events is stored after the data."""
COMMIT_LENGTH_MASK = (1 << 30) - 1
"""The commit word's data length bits."""
ABS_TIME_TOP_BITS = ~((1 << 59) - 1) & 0xFFFFFFFFFFFFFFFF
"""The bits of the running time an absolute timestamp event leaves as they were (it gives 59)."""


@dataclass(frozen=True, slots=True)
class HeaderPage:
    """Sub-buffer layout from ``events/header_page``."""

    timestamp_offset: int
    timestamp_size: int
    commit_offset: int
    commit_size: int
    data_offset: int
    data_size: int  # of a default-sized sub-buffer; a read tells the real size

    @property
    def page_size(self) -> int:
        return self.data_offset + self.data_size


@dataclass(frozen=True, slots=True)
class HeaderEvent:
    """Compressed event header from ``events/header_event``."""

    type_len_bits: int = 5
    time_delta_bits: int = 27
    padding: int = 29
    time_extend: int = 30
    time_stamp: int = 31
    data_max_type_len: int = 28


def _struct_code(size: int, signed: bool) -> str | None:
    return _INT_CODES.get((size, signed))


def _parse_field(decl: str, offset: int, size: int, signed: bool, line_offset: int) -> FieldFormat:
    name_match = _NAME.search(decl)
    if name_match is None:
        raise TraceDataError(f"no field name in {decl!r}", offset=line_offset, structure="format")
    name = name_match.group(1)
    c_type = decl[: name_match.start()].strip()
    if not c_type:
        raise TraceDataError(f"no type in field {decl!r}", offset=line_offset, structure="format")
    array = _ARRAY_SUFFIX.search(decl)
    base_type = c_type.replace("__data_loc", "").replace("__rel_loc", "").strip()
    is_char = base_type.replace("[]", "").strip() in ("char", "const char", "unsigned char", "signed char")
    if "__data_loc" in c_type or "__rel_loc" in c_type:
        kind = DATA_LOC if "__data_loc" in c_type else REL_LOC
        return FieldFormat(name, c_type, offset, size, signed, kind, text=is_char, element_size=1)
    if array is not None:
        length_text = array.group("length").strip()
        if not length_text or size == 0:
            return FieldFormat(name, c_type, offset, size, signed, DYNAMIC_TAIL, text=is_char, element_size=1)
        try:
            length = int(length_text, 0)
        except ValueError:
            length = 0
        if length <= 0 or size % length:
            return FieldFormat(name, c_type, offset, size, signed, BYTES)
        element = size // length
        if is_char and element == 1:
            return FieldFormat(name, c_type, offset, size, signed, STRING, length, 1)
        code = _struct_code(element, signed)
        if code is None:
            return FieldFormat(name, c_type, offset, size, signed, BYTES, length, element)
        return FieldFormat(name, c_type, offset, size, signed, INT_ARRAY, length, element, struct_code=code)
    code = _struct_code(size, signed)
    if code is None:
        return FieldFormat(name, c_type, offset, size, signed, BYTES, element_size=size)
    return FieldFormat(name, c_type, offset, size, signed, INTEGER, element_size=size, struct_code=code)


def parse_event_format(text: str, *, system: str = "") -> EventFormat:
    """Parses one ``events/<system>/<event>/format`` file.

    The fields before the first blank line after ``format:`` are the common ones
    (``common_type``, ``common_flags``, ``common_preempt_count``, ``common_pid``).
    """
    name: str | None = None
    event_id: int | None = None
    common: list[FieldFormat] = []
    own: list[FieldFormat] = []
    in_format = False
    section = common
    position = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("name:"):
            name = stripped[5:].strip()
        elif stripped.startswith("ID:"):
            try:
                event_id = int(stripped[3:].strip())
            except ValueError:
                raise TraceDataError(f"bad ID line {stripped!r}", offset=position, structure="format") from None
        elif stripped.startswith("format:"):
            in_format = True
        elif stripped.startswith("print fmt:"):
            in_format = False
        elif in_format and not stripped:
            if common:
                section = own
        elif in_format and stripped.startswith("field:"):
            match = _FIELD_LINE.match(line)
            if match is None:
                raise TraceDataError(f"bad field line {stripped!r}", offset=position, structure="format")
            signed = match.group("signed") not in (None, "0")
            section.append(_parse_field(match.group("decl"), int(match.group("offset")), int(match.group("size")), signed, position))
        position += len(line)
    if name is None or event_id is None:
        raise TraceDataError("format text has no name or ID", structure="format")
    if not common:
        raise TraceDataError(f"event {name} lists no fields", structure="format")
    by_name = {f.name: f for f in common + own}
    return EventFormat(name, event_id, tuple(common), tuple(own), system, by_name)


def _fields_of(text: str, structure: str) -> dict[str, FieldFormat]:
    fields: dict[str, FieldFormat] = {}
    position = 0
    for line in text.splitlines(keepends=True):
        match = _FIELD_LINE.match(line)
        if match is not None:
            signed = match.group("signed") not in (None, "0")
            parsed = _parse_field(match.group("decl"), int(match.group("offset")), int(match.group("size")), signed, position)
            fields.setdefault(parsed.name, parsed)
        position += len(line)
    return fields


def parse_header_page(text: str) -> HeaderPage:
    """Parses ``events/header_page``."""
    fields = _fields_of(text, "header_page")
    try:
        timestamp, commit, data = fields["timestamp"], fields["commit"], fields["data"]
    except KeyError as missing:
        raise TraceDataError(f"header_page has no {missing.args[0]!r} field", structure="header_page") from None
    if timestamp.size != 8 or commit.size not in (4, 8) or data.offset < commit.offset + commit.size:
        raise TraceDataError("header_page layout is not a 64-bit timestamp, a commit word and data", structure="header_page")
    return HeaderPage(timestamp.offset, timestamp.size, commit.offset, commit.size, data.offset, data.size)


_BITS = re.compile(r"^\s*(\w+)\s*:\s*(\d+)\s*bits", re.MULTILINE)
_TYPE_EQ = re.compile(r"^\s*(\w+)\s*:\s*type\s*==\s*(\d+)", re.MULTILINE)
_DATA_MAX = re.compile(r"data max type_len\s*==\s*(\d+)")


def parse_header_event(text: str) -> HeaderEvent:
    """Parses ``events/header_event``; values it does not state keep the kernel's defaults."""
    bits = {name: int(value) for name, value in _BITS.findall(text)}
    types = {name: int(value) for name, value in _TYPE_EQ.findall(text)}
    data_max = _DATA_MAX.search(text)
    header = HeaderEvent(
        type_len_bits=bits.get("type_len", 5),
        time_delta_bits=bits.get("time_delta", 27),
        padding=types.get("padding", 29),
        time_extend=types.get("time_extend", 30),
        time_stamp=types.get("time_stamp", 31),
        data_max_type_len=int(data_max.group(1)) if data_max else 28,
    )
    if header.type_len_bits + header.time_delta_bits != 32 or not 0 < header.type_len_bits < 32:
        raise TraceDataError("event header is not a 32-bit type_len/time_delta word", structure="header_event")
    return header

