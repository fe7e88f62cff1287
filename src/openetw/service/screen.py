"""The check every producer buffer passes before it reaches a file or a consumer.

Windows' kernel stamps each event's process id and thread id and only lets a process write for
the providers it registered. Here the producer writes its records into shared memory itself, so
the service checks each record of a buffer it takes from a producer's pool:

* framing: a header type a producer may write (EVENT_HEADER, or a classic EVENT_TRACE_HEADER /
  EVENT_INSTANCE_HEADER for a classic provider), the typed marker, a ``Size`` that holds the
  header and ends inside the buffer;
* the process id is the producer's own, as the service knows it from the socket's credentials;
* the thread id is a thread of that process (a thread that already ended cannot be told from
  a made-up one and passes; one of another process does not);
* an EVENT_HEADER names a provider the producer registered; a classic header's event GUID is
  none of the providers secured for others (see ``ProviderSecurity``).

A record that fails is dropped and counted (``events_rejected``); the records around it are
kept, in order. A record whose framing fails ends the walk: nothing after it can be framed, so
the buffer keeps the records before it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from openetw._native import module
from openetw.etl import framing as F
from openetw.etl import layouts as L

__all__ = ["ProducerIdentity", "ScreenResult", "ThreadCheck", "screen_buffer", "screen_buffer_python", "thread_of_process"]

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_BH_SIZE = F.RECORDS_START
_OFFSET_AT = F.BUFFER_OFFSET_AT
_TID_AT = L.EVENT_HEADER.offset("ThreadId")
_PID_AT = L.EVENT_HEADER.offset("ProcessId")
_GUID_AT = L.EVENT_HEADER.offset("ProviderId")
assert tuple(L.EVENT_TRACE_HEADER.offset(f) for f in ("ThreadId", "ProcessId", "Guid")) == (_TID_AT, _PID_AT, _GUID_AT)

# Header type -> the smallest record of that type (its header): what producers write, Size first.
_EVENT_HEADERS = {t: row.header_size for t, row in F.HEADER_KINDS.items() if row.kind == "event"}
_CLASSIC_HEADERS = {t: row.header_size for t, row in F.HEADER_KINDS.items() if row.kind in ("classic", "instance")}
assert all(F.HEADER_KINDS[t].size_at == F.PRODUCER_SIZE_AT for t in (*_EVENT_HEADERS, *_CLASSIC_HEADERS))
_MAX_KNOWN_THREADS = 4096
_USED_AT = tuple(L.WMI_BUFFER_HEADER.offset(name) for name in ("SavedOffset", "CurrentOffset", "Offset"))


def thread_of_process(tid: int, pid: int) -> bool:
    """False only when ``tid`` is a live thread of another process than ``pid``."""
    if tid == pid:
        return True
    try:
        with open(f"/proc/{tid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1]) == pid
    except (OSError, ValueError, IndexError):
        return True  # gone (a thread that ended) or unreadable: nothing says it is another's
    return True


@dataclass
class ThreadCheck:
    """Thread ids already found to be the producer's, so each is looked up once."""

    pid: int
    lookup: Callable[[int, int], bool] = thread_of_process
    known: set[int] = field(default_factory=set)

    def __call__(self, tid: int) -> bool:
        if tid in self.known:
            return True
        if not self.lookup(tid, self.pid):
            return False
        if len(self.known) >= _MAX_KNOWN_THREADS:
            self.known.clear()
        self.known.add(tid)
        return True


@dataclass(frozen=True)
class ProducerIdentity:
    """What a producer may write: its process id, the provider GUIDs it registered (as the
    bytes a record holds), whether it registered a classic provider, and the GUIDs secured for
    others that a classic header must not carry."""

    pid: int
    providers: frozenset[bytes]
    classic: bool = False
    secured: frozenset[bytes] = frozenset()


@dataclass(frozen=True)
class ScreenResult:
    data: bytes | bytearray  # the buffer to deliver (the one given when nothing was dropped)
    kept: int
    rejected: int
    reasons: tuple[str, ...] = ()  # the first reasons, for the service's log


_compiled = module("_write")
# For the compiled walk: the smallest record of each producer header type, EVENT_HEADER types
# then classic ones, as 2 x 256 u16 (0: not a type a producer writes).
_LEAST = struct.pack(
    "<512H", *(_EVENT_HEADERS.get(t, 0) for t in range(256)), *(_CLASSIC_HEADERS.get(t, 0) for t in range(256))
)


def _problem_text(code: int, a: int, b: int, pid: int) -> str:
    """The text of a problem the compiled walk found, as ``_check_one`` words it."""
    if code == 0:
        return "bytes after the last record"
    if code == 1:
        return "a record shorter than its header"
    if code == 2:
        return f"a record of header type {a:#x} (marker {b:#x})"
    if code == 3:
        return f"a record whose Size {a} does not fit"
    if code == 4:
        return f"process id {a} (the producer is {pid})"
    if code == 5:
        return "a provider the producer did not register"
    if code == 6:
        return "a secured provider's GUID in a classic record"
    return f"thread id {a} of another process"


def screen_buffer(data: bytes | bytearray | memoryview, identity: ProducerIdentity, thread_ok: Callable[[int], bool]) -> ScreenResult:
    """Check every record of one framed pool buffer (see the module's text); the compiled walk
    when the compiled core runs (the same answer: ``screen_buffer_python`` is the reference)."""
    if _compiled is None:
        return screen_buffer_python(data, identity, thread_ok)
    known = getattr(thread_ok, "known", None)
    kept, rejected, spans, problems = _compiled.screen(
        data, identity.pid, identity.providers, identity.secured, identity.classic, _LEAST, thread_ok, known if isinstance(known, set) else None
    )
    if not rejected:
        return ScreenResult(data if not isinstance(data, memoryview) else bytes(data), kept, 0)
    reasons = tuple(_problem_text(code, a, b, identity.pid) for code, a, b in problems)
    return _rebuilt(data if not isinstance(data, memoryview) else bytes(data), spans, kept, rejected, reasons)


def screen_buffer_python(data: bytes | bytearray | memoryview, identity: ProducerIdentity, thread_ok: Callable[[int], bool]) -> ScreenResult:
    """Check every record of one framed pool buffer (see the module's text).

    A producer mostly writes the same event from the same thread again and again: a run of
    records of one size is checked a field byte at a time across the whole run (strided slices,
    compared in C), and only a run whose fields are not all the same is walked record by record.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    size_total = len(data)
    used = min(_u32(data, _OFFSET_AT)[0], size_total)
    position = _BH_SIZE
    kept_spans: list[list[int]] = []
    kept = rejected = 0
    reasons: list[str] = []
    try_runs = True
    while position < used:
        problem, step = _check_one(data, position, used, identity, thread_ok)
        if problem is None:
            _keep(kept_spans, position, position + step)
            kept += 1
            position += step
            # The next record of the same size: look for a run (until one turns out short).
            if try_runs and position + 8 <= used and _u16(data, position)[0] == _u16(data, position - step)[0]:
                run = _uniform_run(data, position, used, identity, thread_ok)
                if run is None:
                    try_runs = False
                else:
                    count, end = run
                    _keep(kept_spans, position, end)
                    kept += count
                    position = end
            continue
        rejected += 1
        if len(reasons) < 4:
            reasons.append(problem)
        if step == 0:  # nothing after a framing failure can be framed
            break
        position += step
    if not rejected:
        return ScreenResult(data, kept, 0)
    return _rebuilt(data, kept_spans, kept, rejected, tuple(reasons))


def _rebuilt(data: bytes | bytearray, kept_spans: list[list[int]], kept: int, rejected: int, reasons: tuple[str, ...]) -> ScreenResult:
    """The buffer with only the kept records, the tail 0xFF and the used size fixed."""
    out = bytearray(data[:_BH_SIZE])
    for start, end in kept_spans:
        out += data[start:end]
    new_used = len(out)
    out += b"\xff" * (len(data) - new_used)
    for at in _USED_AT:
        struct.pack_into("<I", out, at, new_used)
    return ScreenResult(out, kept, rejected, reasons)


def _keep(spans: list[list[int]], start: int, end: int) -> None:
    if spans and spans[-1][1] == start:
        spans[-1][1] = end
    else:
        spans.append([start, end])


_HEAD = struct.Struct("<HBB4xII8x16s")  # Size, HeaderType, MarkerFlags, ThreadId, ProcessId, the GUID
assert _HEAD.size == _GUID_AT + 16
_MIN_RUN = 4


def _uniform_run(data: bytes | bytearray, position: int, used: int, identity: ProducerIdentity, thread_ok: Callable[[int], bool]) -> tuple[int, int] | None:
    """(records, end) of a run of at least ``_MIN_RUN`` records from ``position`` that all have
    the first record's size, header type, thread, process and GUID, that record being valid."""
    if position + _HEAD.size > used:
        return None
    size = _u16(data, position)[0]
    step = F.aligned(size)
    if step == 0 or position + step * _MIN_RUN > used:
        return None
    count = (used - position) // step
    last = position + (count - 1) * step
    # How many records from here keep the first one's 40 header bytes but the timestamp.
    first = data[position : position + _HEAD.size]
    for offset in (0, 1, 2, 3, *range(_TID_AT, _TID_AT + 8), *range(_GUID_AT, _GUID_AT + 16)):
        column = data[position + offset : last + offset + 1 : step]
        expected = first[offset : offset + 1]
        if column != expected * len(column):
            count = min(count, len(column) - len(column.lstrip(expected)))
            if count < _MIN_RUN:
                return None
            last = position + (count - 1) * step
    problem, one_step = _check_one(data, position, used, identity, thread_ok)
    if problem is not None or one_step != step:
        return None
    return count, position + count * step


def _check_one(data: bytes | bytearray, position: int, used: int, identity: ProducerIdentity, thread_ok: Callable[[int], bool]) -> tuple[str | None, int]:
    """(why the record at ``position`` fails or None, its 8-byte aligned size; 0 when its
    framing fails and nothing after it can be framed)."""
    if position + 8 > used:
        return "bytes after the last record", 0
    if position + _HEAD.size > used:
        return "a record shorter than its header", 0
    size, header_type, marker, tid, pid, guid = _HEAD.unpack_from(data, position)
    least = _EVENT_HEADERS.get(header_type) or (_CLASSIC_HEADERS.get(header_type) if identity.classic else None)
    if least is None or marker != F.TYPED_FLAGS:
        return f"a record of header type {header_type:#x} (marker {marker:#x})", 0
    if size < least or position + size > used:
        return f"a record whose Size {size} does not fit", 0
    step = F.aligned(size)
    if pid != identity.pid:
        return f"process id {pid} (the producer is {identity.pid})", step
    if header_type in _EVENT_HEADERS:
        if guid not in identity.providers:
            return "a provider the producer did not register", step
    elif guid in identity.secured and guid not in identity.providers:
        return "a secured provider's GUID in a classic record", step
    if tid not in getattr(thread_ok, "known", ()) and not thread_ok(tid):
        return f"thread id {tid} of another process", step
    return None, step
