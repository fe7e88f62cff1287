"""Every streamed message checked before anything reads it: who sent it, what it says it is,
whether its bytes are what it says.

A message comes from a host's NATS user, which may publish on ``etw.<its host>.>`` only: the
subject is what NATS authenticated, the ``Openetw-*`` headers are what the host claims. So:

* the subject is ``etw.<host>.<...>`` and the headers' host, as a subject token, is that
  ``<host>``; the session's token is one of the subject's later tokens (a forged identity is
  refused, whatever the headers say);
* the headers are all there, numbers in range: a sequence below ``MAX_SEQUENCE``, a gap that
  ends before the message's own sequence, names of printable characters and bounded length;
* the kind fits the sequence: ``header`` is sequence 0, a ``buffer`` is 1 or more, ``end``
  carries no payload;
* a ``header`` payload is a logfile header buffer: its BufferSize is its length, its first
  record a SYSTEM logfile header record that fits, the logfile header's BufferSize the same;
* a ``buffer`` payload is a framed ETL buffer: BufferSize its length, Offset inside it, not
  compressed, and its records framed one after the other (``frame``, the walk of ``framing.walk``). Like the service
  screening a producer's buffer, a record that cannot be framed ends the walk: the records
  before it are kept (the buffer rebuilt without the rest, counted as damaged), a buffer with
  none is refused.

``BadMessage`` says why a message is refused (``reason`` a short word the collector counts by,
the text for people). Nothing here does I/O.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from openetw import _native
from openetw.errors import InvalidArgument
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.fleet.wire import (
    H_BUFFERS_LOST,
    H_EVENTS,
    H_EVENTS_LOST,
    H_GAP,
    H_HOST,
    H_KIND,
    H_SEQUENCE,
    H_SESSION,
    H_START,
    KIND_BUFFER,
    KIND_END,
    KIND_HEADER,
    MessageInfo,
    subject_token,
)

__all__ = [
    "MAX_NAME", "MAX_PAYLOAD", "MAX_SEQUENCE", "BadMessage", "Checked", "check_buffer", "check_header_buffer", "check_message", "frame",
    "subject_host",
]  # fmt: skip

MAX_SEQUENCE = 1 << 48  # a host numbering 10,000 buffers a second reaches it in 890 years
MAX_COUNT = 1 << 62
MAX_NAME = 256
MAX_PAYLOAD = L.ETW_MAX_BUFFER_SIZE
_u32 = struct.Struct("<I").unpack_from
_u16 = struct.Struct("<H").unpack_from
_USED_AT = tuple(L.WMI_BUFFER_HEADER.offset(name) for name in ("SavedOffset", "CurrentOffset", "Offset"))
_FLAG_AT = L.WMI_BUFFER_HEADER.offset("BufferFlag")
_LOGFILE_RECORD_AT = L.BUFFER_HEADER_SIZE
_SMALLEST_HEADER_BUFFER = L.BUFFER_HEADER_SIZE + L.SYSTEM_TRACE_HEADER.size + L.trace_logfile_header(4).size


class BadMessage(InvalidArgument):
    """A message the collector does not store: ``reason`` is what it is counted as."""

    def __init__(self, reason: str, text: str) -> None:
        self.reason = reason
        self.text = text
        super().__init__(f"{reason}: {text}")


@dataclass(frozen=True)
class Checked:
    """A message that passed: its headers read, its payload (rebuilt when records were cut),
    the records it holds, and why records were cut (None: none were)."""

    info: MessageInfo
    payload: bytes
    records: int
    damage: str | None = None


def subject_host(subject: str) -> str:
    """The host token of a fleet subject (``etw.<host>.<...>``), or ``BadMessage``."""
    tokens = subject.split(".")
    if len(tokens) < 3 or tokens[0] != "etw" or not all(tokens):
        raise BadMessage("subject", f"{subject[:120]!r} is not etw.<host>.<session>")
    return tokens[1]


def check_message(subject: str, headers: Mapping[str, str] | None, payload: bytes) -> Checked:
    """The message as the collector may store it, or ``BadMessage`` (see the module's text).
    What depends on the session's books (its header came, its buffer size, its end) is the
    store's to check."""
    host_token = subject_host(subject)
    info = _read_headers(headers)
    if subject_token(info.host) != host_token:
        raise BadMessage("identity", f"host {info.host[:64]!r} in the headers, but published on {subject[:120]!r}")
    if subject_token(info.session) not in subject.split(".")[2:]:
        raise BadMessage("identity", f"session {info.session[:64]!r} in the headers, but published on {subject[:120]!r}")
    if len(payload) > MAX_PAYLOAD:
        raise BadMessage("size", f"{len(payload)} bytes (an ETL buffer holds at most {MAX_PAYLOAD})")
    if info.kind == KIND_HEADER:
        if info.sequence != 0:
            raise BadMessage("kind", f"a header at sequence {info.sequence} (headers are sequence 0)")
        check_header_buffer(payload)
        return Checked(info, bytes(payload), 0)
    if info.sequence == 0:
        raise BadMessage("kind", f"a {info.kind} at sequence 0 (the header's)")
    if info.kind == KIND_END:
        if payload:
            raise BadMessage("kind", f"an end with {len(payload)} bytes of payload")
        return Checked(info, b"", 0)
    rebuilt, records, damage = check_buffer(payload)
    return Checked(info, rebuilt, records, damage)


def check_header_buffer(payload: bytes) -> None:
    """``BadMessage`` unless ``payload`` is a logfile header buffer the store can patch and a
    reader can open: sizes that agree, the SYSTEM logfile header record where it belongs."""
    size = len(payload)
    if size < _SMALLEST_HEADER_BUFFER:
        raise BadMessage("header", f"{size} bytes, shorter than a logfile header buffer ({_SMALLEST_HEADER_BUFFER})")
    if _u32(payload, F.BUFFER_SIZE_AT)[0] != size:
        raise BadMessage("header", f"BufferSize {_u32(payload, F.BUFFER_SIZE_AT)[0]} in a buffer of {size} bytes")
    used = _u32(payload, F.BUFFER_OFFSET_AT)[0]
    if not F.RECORDS_START < used <= size:
        raise BadMessage("header", f"Offset {used:#x} outside the buffer's records")
    marker = _u32(payload, _LOGFILE_RECORD_AT)[0]
    row = F.kind_of_marker(marker)
    if row is None or row.kind != "system" or not F.is_typed(marker >> F.MARKER_FLAGS_SHIFT):
        raise BadMessage("header", f"the first record's marker {marker:#010x} is not a SYSTEM header")
    layout = L.trace_logfile_header(row.pointer_size)
    record_size = _u16(payload, _LOGFILE_RECORD_AT + 4)[0]
    if record_size < L.SYSTEM_TRACE_HEADER.size + layout.size or _LOGFILE_RECORD_AT + record_size > used:
        raise BadMessage("header", f"a logfile header record of {record_size} bytes does not fit")
    logfile_at = _LOGFILE_RECORD_AT + L.SYSTEM_TRACE_HEADER.size
    declared = _u32(payload, logfile_at + layout.offset("BufferSize"))[0]
    if declared != size:
        raise BadMessage("header", f"the logfile header says buffers of {declared} bytes, its buffer has {size}")


def check_buffer(payload: bytes) -> tuple[bytes, int, str | None]:
    """``(buffer, records, damage)``: the buffer's framed records, the buffer rebuilt without
    what follows a record that cannot be framed (``damage`` says what), or ``BadMessage`` when
    the buffer's own header is wrong or no record is framed before the damage."""
    size = len(payload)
    if size < F.RECORDS_START:
        raise BadMessage("buffer", f"{size} bytes, shorter than a buffer header")
    if _u32(payload, F.BUFFER_SIZE_AT)[0] != size:
        raise BadMessage("buffer", f"BufferSize {_u32(payload, F.BUFFER_SIZE_AT)[0]} in a buffer of {size} bytes")
    used = _u32(payload, F.BUFFER_OFFSET_AT)[0]
    if not F.RECORDS_START <= used <= size:
        raise BadMessage("buffer", f"Offset {used:#x} outside the buffer")
    if _u16(payload, _FLAG_AT)[0] & L.BUFFER_FLAG_COMPRESSED:
        raise BadMessage("buffer", "a compressed buffer (hosts stream them as they are in the pools)")
    records, cut, damage = frame(payload, used)
    if damage is None:
        return bytes(payload), records, None
    if records == 0:
        raise BadMessage("buffer", f"no record framed ({damage})")
    cut = min(cut, used)
    out = bytearray(payload[:cut]) + b"\xff" * (size - cut)
    for at in _USED_AT:
        struct.pack_into("<I", out, at, cut)
    return bytes(out), records, damage


@functools.cache
def _framing_rows() -> dict[int, tuple[int, int]]:
    """Marker key (``marker >> 16``) -> (where Size sits, the header's size), for every key
    ``framing.kind_of_marker`` frames (made when the pure walk first runs)."""
    rows = {}
    for key in range(1 << 16):
        row = F.kind_of_marker(key << F.MARKER_KEY_SHIFT)
        if row is not None:
            rows[key] = (row.size_at, row.header_size)
    return rows


_ONE_BUFFER_AT = struct.pack("<q", 0)


def frame(payload: bytes, used: int) -> tuple[int, int, str | None]:
    """``(records, end, damage)``: how many records are framed one after the other from the
    buffer header up to ``used``, where the last one ends (aligned), and what stopped the walk
    short (None: nothing). ``framing.walk`` is the reference; the compiled core's walk
    (``_read.chains``) runs it for every buffer the collector takes, ``frame_python`` is its
    pure twin (and says what the damage is, when there is some)."""
    native = _native.module("_read")
    if native is None or not 0 <= used <= len(payload):
        return frame_python(payload, used)
    _, sizes, _, stops = native.chains(payload, _ONE_BUFFER_AT, struct.pack("<q", used))
    stop = struct.unpack("<q", stops)[0]
    if stop + 4 <= used and _u32(payload, stop)[0] != F.END_OF_DATA:
        return frame_python(payload, used)  # damaged (rare): the reference walk says how
    return len(sizes) // 8, stop, None


def frame_python(payload: bytes, used: int) -> tuple[int, int, str | None]:
    """``frame`` in pure Python: one table lookup and two reads per record."""
    length = len(payload)
    with memoryview(payload) as view, view[: length & ~3].cast("I") as words, view[: length & ~1].cast("H") as halves:
        rows, position, records = _framing_rows(), F.RECORDS_START, 0
        while position + 4 <= used:
            marker = words[position >> 2]
            if marker == F.END_OF_DATA:
                break
            row = rows.get(marker >> F.MARKER_KEY_SHIFT)
            if row is None:
                return records, position, f"no record header at this position (marker {marker:#010x})"
            size_at, header_size = row
            if position + header_size > used:
                return records, position, "record header runs past the buffer's data"
            size = halves[(position + size_at) >> 1]
            if size < header_size or position + size > used:
                return records, position, f"record size {size:#x} is out of range"
            records += 1
            position += (size + F.RECORD_ALIGNMENT - 1) & -F.RECORD_ALIGNMENT
        return records, position, None


def _read_headers(headers: Mapping[str, str] | None) -> MessageInfo:
    if not headers:
        raise BadMessage("headers", "no openetw headers")

    def text(name: str) -> str:
        value = headers.get(name)
        if not isinstance(value, str) or not value:
            raise BadMessage("headers", f"{name} missing")
        if len(value) > MAX_NAME or not value.isprintable():
            raise BadMessage("headers", f"{name} is not a name ({len(value)} characters)")
        return value

    def number(name: str, default: str | None = None, *, top: int = MAX_COUNT) -> int:
        value = headers.get(name, default)
        if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 20:
            raise BadMessage("headers", f"{name} is not a number: {str(value)[:40]!r}")
        result = int(value)
        if result >= top:
            raise BadMessage("sequence" if name == H_SEQUENCE else "headers", f"{name} {result} is out of range")
        return result

    kind = headers.get(H_KIND, KIND_BUFFER)
    if kind not in (KIND_HEADER, KIND_BUFFER, KIND_END):
        raise BadMessage("kind", f"kind {str(kind)[:40]!r}")
    sequence = number(H_SEQUENCE, top=MAX_SEQUENCE)
    gap = None
    gap_text = headers.get(H_GAP)
    if gap_text:
        first_text, _, last_text = str(gap_text).partition("-")
        if not (first_text.isascii() and first_text.isdigit() and last_text.isascii() and last_text.isdigit()) or len(gap_text) > 41:
            raise BadMessage("headers", f"{H_GAP} {str(gap_text)[:40]!r}")
        first, last = int(first_text), int(last_text)
        if not 0 < first <= last < sequence:
            raise BadMessage("sequence", f"a gap {first}-{last} that does not end before sequence {sequence}")
        gap = (first, last)
    return MessageInfo(
        host=text(H_HOST),
        session=text(H_SESSION),
        start=number(H_START),
        sequence=sequence,
        kind=kind,
        events=number(H_EVENTS, "0"),
        events_lost=number(H_EVENTS_LOST, "0"),
        buffers_lost=number(H_BUFFERS_LOST, "0"),
        gap=gap,
    )
