"""perf_event_open data, as bytes: ``perf_event_attr`` packing and the records of a perf ring.

Pure: no system calls. :mod:`openetw.kernel.perf` opens the events and maps the rings; this
module builds the attribute block it passes to the kernel and parses what the kernel wrote
into the data area of a ring (``include/uapi/linux/perf_event.h``).

A ring's data area is a power-of-two circular buffer; ``data_head`` and ``data_tail`` are free-
running byte counters, so the unread bytes are ``[tail, head)`` modulo the area's size and a
record may straddle the end of the area. :func:`ring_bytes` joins the two parts;
:func:`parse_records` cuts them into records. Every record is 8-byte aligned and starts with
``{u32 type; u16 misc; u16 size}``; side-band records (MMAP2, COMM, FORK, ...) end with the
``sample_id`` trailer when ``sample_id_all`` is set, whose fields follow the event's
``sample_type``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from openetw.errors import TraceDataError

__all__ = [
    "DEFAULT_SAMPLE_TYPE",
    "PerfAttr",
    "PerfRecord",
    "RingParser",
    "pack_attr",
    "parse_records",
    "ring_bytes",
    "split_callchain",
]

# perf_event_attr.type / config
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_DUMMY = 9

# perf_event_attr.sample_type bits
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_IDENTIFIER = 1 << 16
_SUPPORTED_SAMPLE_TYPE = (
    SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_CALLCHAIN | SAMPLE_ID | SAMPLE_CPU
    | SAMPLE_PERIOD | SAMPLE_STREAM_ID | SAMPLE_IDENTIFIER
)
DEFAULT_SAMPLE_TYPE = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_CALLCHAIN
"""What a sampling event of this project asks for (side-band trailers then carry TID, TIME, CPU)."""

# perf_event_attr flag bits (the bit-field word after read_format)
FLAG_DISABLED = 1 << 0
FLAG_INHERIT = 1 << 1
FLAG_EXCLUDE_USER = 1 << 4
FLAG_EXCLUDE_KERNEL = 1 << 5
FLAG_EXCLUDE_HV = 1 << 6
FLAG_EXCLUDE_IDLE = 1 << 7
FLAG_MMAP = 1 << 8
FLAG_COMM = 1 << 9
FLAG_FREQ = 1 << 10
FLAG_ENABLE_ON_EXEC = 1 << 12
FLAG_TASK = 1 << 13
FLAG_WATERMARK = 1 << 14
FLAG_MMAP_DATA = 1 << 17
FLAG_SAMPLE_ID_ALL = 1 << 18
FLAG_EXCLUDE_CALLCHAIN_KERNEL = 1 << 21
FLAG_EXCLUDE_CALLCHAIN_USER = 1 << 22
FLAG_MMAP2 = 1 << 23
FLAG_COMM_EXEC = 1 << 24
FLAG_USE_CLOCKID = 1 << 25
FLAG_CONTEXT_SWITCH = 1 << 26

# Record types
RECORD_MMAP = 1
RECORD_LOST = 2
RECORD_COMM = 3
RECORD_EXIT = 4
RECORD_THROTTLE = 5
RECORD_UNTHROTTLE = 6
RECORD_FORK = 7
RECORD_SAMPLE = 9
RECORD_MMAP2 = 10
RECORD_LOST_SAMPLES = 13
RECORD_SWITCH = 14
RECORD_SWITCH_CPU_WIDE = 15

# header.misc bits
MISC_CPUMODE_MASK = 0x7
MISC_KERNEL = 1
MISC_USER = 2
MISC_COMM_EXEC = 1 << 13
MISC_SWITCH_OUT = 1 << 13
MISC_SWITCH_OUT_PREEMPT = 1 << 14
MISC_MMAP_BUILD_ID = 1 << 14

# Callchain context markers: values at or above PERF_CONTEXT_MAX (-4095 as u64).
CONTEXT_HV = (1 << 64) - 32
CONTEXT_KERNEL = (1 << 64) - 128
CONTEXT_USER = (1 << 64) - 512
CONTEXT_MAX = (1 << 64) - 4095

PROT_EXEC = 0x4

# struct perf_event_mmap_page: offsets of the ring control words in the first page.
MMAP_PAGE_DATA_HEAD = 1024
MMAP_PAGE_DATA_TAIL = 1032
MMAP_PAGE_DATA_OFFSET = 1040
MMAP_PAGE_DATA_SIZE = 1048

ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5: up to sample_max_stack; older fields zero-extended by the kernel
_ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHH")
assert _ATTR.size == ATTR_SIZE

_HEADER = struct.Struct("<IHH")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TWO_U32 = struct.Struct("<II")
_MMAP2_HEAD = struct.Struct("<IIQQQ")
_MMAP2_INODE = struct.Struct("<IIQQ")
_MMAP2_PROT = struct.Struct("<II")
_MMAP_HEAD = struct.Struct("<IIQQQ")
_TASK = struct.Struct("<IIIIQ")
_LOST = struct.Struct("<QQ")
_THROTTLE = struct.Struct("<QQQ")


@dataclass(frozen=True, slots=True)
class PerfAttr:
    """The ``perf_event_attr`` fields this project sets; everything else is zero."""

    type: int = PERF_TYPE_SOFTWARE
    config: int = PERF_COUNT_SW_DUMMY
    sample_period: int = 0
    """Period, or frequency in Hz when ``FLAG_FREQ`` is in ``flags``."""
    sample_type: int = DEFAULT_SAMPLE_TYPE
    flags: int = 0
    wakeup: int = 0
    """``wakeup_events``, or ``wakeup_watermark`` in bytes when ``FLAG_WATERMARK`` is set."""
    clockid: int = 0
    sample_max_stack: int = 0


def pack_attr(attr: PerfAttr) -> bytes:
    """The ``perf_event_attr`` block (``PERF_ATTR_SIZE_VER5`` bytes) for ``attr``."""
    return _ATTR.pack(
        attr.type, ATTR_SIZE, attr.config, attr.sample_period, attr.sample_type, 0, attr.flags,
        attr.wakeup, 0, 0, 0, 0, 0, 0, attr.clockid, 0, 0, attr.sample_max_stack, 0,
    )


def unpack_attr(raw: bytes) -> PerfAttr:
    """Inverse of :func:`pack_attr` (for tests and diagnostics)."""
    if len(raw) < ATTR_SIZE:
        raise TraceDataError(f"perf_event_attr of {len(raw)} bytes, expected {ATTR_SIZE}")
    f = _ATTR.unpack_from(raw)
    return PerfAttr(type=f[0], config=f[2], sample_period=f[3], sample_type=f[4], flags=f[6], wakeup=f[7], clockid=f[14], sample_max_stack=f[17])


class PerfRecord(NamedTuple):
    """One parsed ring record.

    ``kind`` is the record name (``"mmap2"``, ``"sample"``, ``"fork"``, ``"exit"``, ``"comm"``,
    ``"lost"``, ``"throttle"``, ``"unthrottle"``, ``"switch"``, ``"lost_samples"``, ``"mmap"``)
    and ``values`` its fields. ``time``/``cpu``/``pid``/``tid`` come from the record itself for
    samples and from the ``sample_id`` trailer for side-band records (``None`` when the
    sample_type does not carry them).
    """

    kind: str
    misc: int
    time: int | None
    cpu: int | None
    values: dict[str, object]


def ring_bytes(data: bytes | memoryview, tail: int, head: int) -> bytes:
    """The unread bytes ``[tail, head)`` of a ring data area, joined across its end.

    ``tail`` and ``head`` are the free-running counters of the mmap page. Raises
    :class:`TraceDataError` when they cannot describe this area (head behind tail, more unread
    than the area holds, misaligned).
    """
    size = len(data)
    if size == 0 or size & (size - 1):
        raise TraceDataError(f"perf ring data area of {size} bytes is not a power of two")
    if head < tail:
        raise TraceDataError(f"perf ring head {head} is behind its tail {tail}")
    if head - tail > size:
        raise TraceDataError(f"perf ring claims {head - tail} unread bytes in a {size}-byte area")
    if (head | tail) & 7:
        raise TraceDataError(f"perf ring positions {tail}..{head} are not 8-byte aligned")
    start, end = tail & (size - 1), head & (size - 1)
    if head == tail:
        return b""
    if start < end:
        return bytes(data[start:end])
    return bytes(data[start:]) + bytes(data[:end])


def split_callchain(ips: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Kernel frames and user frames of a callchain (context markers removed), innermost first."""
    kernel: list[int] = []
    user: list[int] = []
    target = kernel
    for ip in ips:
        if ip >= CONTEXT_MAX:
            if ip == CONTEXT_USER:
                target = user
            elif ip == CONTEXT_KERNEL:
                target = kernel
            else:
                target = []  # hypervisor and guest frames: not kept
            continue
        target.append(ip)
    return kernel, user


class RingParser:
    """Parses the records of rings whose events share one ``sample_type`` (with ``sample_id_all``)."""

    def __init__(self, sample_type: int = DEFAULT_SAMPLE_TYPE, sample_id_all: bool = True) -> None:
        unsupported = sample_type & ~_SUPPORTED_SAMPLE_TYPE
        if unsupported:
            raise TraceDataError(f"sample_type bits {unsupported:#x} are not parsed")
        self.sample_type = sample_type
        self.sample_id_all = sample_id_all
        st = sample_type
        # Trailer size: every present field is 8 bytes.
        id_bits = (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER)
        self._id_size = 8 * sum(bool(st & bit) for bit in id_bits) if sample_id_all else 0

    # -- trailer --------------------------------------------------------------------------------
    def _sample_id(self, raw: bytes, end: int) -> tuple[int | None, int | None, int | None, int | None]:
        """(pid, tid, time, cpu) of the sample_id trailer ending at ``end``."""
        if not self.sample_id_all:
            return None, None, None, None
        pos = end - self._id_size
        st = self.sample_type
        pid = tid = time = cpu = None
        if st & SAMPLE_TID:
            pid, tid = _TWO_U32.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_TIME:
            (time,) = _U64.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_ID:
            pos += 8
        if st & SAMPLE_STREAM_ID:
            pos += 8
        if st & SAMPLE_CPU:
            (cpu,) = _U32.unpack_from(raw, pos)
        return pid, tid, time, cpu

    # -- records --------------------------------------------------------------------------------
    def parse(self, raw: bytes) -> list[PerfRecord]:
        """Every record in ``raw`` (whole records, as :func:`ring_bytes` returns them)."""
        records: list[PerfRecord] = []
        pos, total = 0, len(raw)
        while pos < total:
            if total - pos < _HEADER.size:
                raise TraceDataError(f"perf record header cut at byte {pos} of {total}")
            rtype, misc, size = _HEADER.unpack_from(raw, pos)
            if size < _HEADER.size or size & 7 or pos + size > total:
                raise TraceDataError(f"perf record of type {rtype} at byte {pos} has bad size {size} ({total - pos} bytes left)")
            try:
                record = self._record(rtype, misc, raw, pos + _HEADER.size, pos + size)
            except (struct.error, IndexError, ValueError) as exc:
                raise TraceDataError(f"perf record of type {rtype} at byte {pos} (size {size}) is damaged: {exc}") from exc
            if record is not None:
                records.append(record)
            pos += size
        return records

    def _side_band_end(self, body: int, end: int, fixed: int) -> int:
        id_end = end - self._id_size
        if id_end < body + fixed:
            raise ValueError(f"{end - body} bytes cannot hold {fixed} fixed bytes and a {self._id_size}-byte sample_id")
        return id_end

    def _record(self, rtype: int, misc: int, raw: bytes, body: int, end: int) -> PerfRecord | None:
        if rtype == RECORD_SAMPLE:
            return self._sample(misc, raw, body, end)
        if rtype == RECORD_MMAP2:
            id_end = self._side_band_end(body, end, _MMAP2_HEAD.size + 24 + _MMAP2_PROT.size)
            pid, tid, addr, length, pgoff = _MMAP2_HEAD.unpack_from(raw, body)
            pos = body + _MMAP2_HEAD.size
            values: dict[str, object] = {"pid": pid, "tid": tid, "addr": addr, "len": length, "pgoff": pgoff}
            if misc & MISC_MMAP_BUILD_ID:
                id_size = raw[pos]
                if id_size > 20:
                    raise ValueError(f"build id of {id_size} bytes")
                values["build_id"] = bytes(raw[pos + 4 : pos + 4 + id_size])
            else:
                maj, minor, ino, generation = _MMAP2_INODE.unpack_from(raw, pos)
                values.update(maj=maj, min=minor, ino=ino, ino_generation=generation)
            pos += 24
            prot, flags = _MMAP2_PROT.unpack_from(raw, pos)
            values.update(prot=prot, flags=flags, filename=_c_string(raw, pos + 8, id_end))
            return self._side_band("mmap2", misc, raw, end, values)
        if rtype == RECORD_MMAP:
            id_end = self._side_band_end(body, end, _MMAP_HEAD.size)
            pid, tid, addr, length, pgoff = _MMAP_HEAD.unpack_from(raw, body)
            values = {"pid": pid, "tid": tid, "addr": addr, "len": length, "pgoff": pgoff,
                      "filename": _c_string(raw, body + _MMAP_HEAD.size, id_end)}
            return self._side_band("mmap", misc, raw, end, values)
        if rtype in (RECORD_FORK, RECORD_EXIT):
            self._side_band_end(body, end, _TASK.size)
            pid, ppid, tid, ptid, time = _TASK.unpack_from(raw, body)
            values = {"pid": pid, "ppid": ppid, "tid": tid, "ptid": ptid, "time": time}
            return self._side_band("fork" if rtype == RECORD_FORK else "exit", misc, raw, end, values, time)
        if rtype == RECORD_COMM:
            id_end = self._side_band_end(body, end, 8)
            pid, tid = _TWO_U32.unpack_from(raw, body)
            values = {"pid": pid, "tid": tid, "comm": _c_string(raw, body + 8, id_end), "exec": bool(misc & MISC_COMM_EXEC)}
            return self._side_band("comm", misc, raw, end, values)
        if rtype == RECORD_LOST:
            self._side_band_end(body, end, _LOST.size)
            event_id, lost = _LOST.unpack_from(raw, body)
            return self._side_band("lost", misc, raw, end, {"id": event_id, "lost": lost})
        if rtype == RECORD_LOST_SAMPLES:
            self._side_band_end(body, end, 8)
            (lost,) = _U64.unpack_from(raw, body)
            return self._side_band("lost_samples", misc, raw, end, {"lost": lost})
        if rtype in (RECORD_THROTTLE, RECORD_UNTHROTTLE):
            self._side_band_end(body, end, _THROTTLE.size)
            time, event_id, stream_id = _THROTTLE.unpack_from(raw, body)
            kind = "throttle" if rtype == RECORD_THROTTLE else "unthrottle"
            return self._side_band(kind, misc, raw, end, {"time": time, "id": event_id, "stream_id": stream_id}, time)
        if rtype == RECORD_SWITCH:
            self._side_band_end(body, end, 0)
            return self._side_band("switch", misc, raw, end, _switch_values(misc, None, None))
        if rtype == RECORD_SWITCH_CPU_WIDE:
            self._side_band_end(body, end, 8)
            other_pid, other_tid = _TWO_U32.unpack_from(raw, body)
            return self._side_band("switch", misc, raw, end, _switch_values(misc, other_pid, other_tid))
        return None  # record types this project does not ask for (AUX, KSYMBOL, ...)

    def _side_band(self, kind: str, misc: int, raw: bytes, end: int, values: dict[str, object], own_time: int | None = None) -> PerfRecord:
        pid, tid, time, cpu = self._sample_id(raw, end)
        if pid is not None:
            values.setdefault("pid", pid)
            values.setdefault("tid", tid)
            values["sample_pid"], values["sample_tid"] = pid, tid
        return PerfRecord(kind, misc, time if time is not None else own_time, cpu, values)

    def _sample(self, misc: int, raw: bytes, pos: int, end: int) -> PerfRecord:
        st = self.sample_type
        values: dict[str, object] = {}
        time = cpu = None
        if st & SAMPLE_IDENTIFIER:
            pos += 8
        if st & SAMPLE_IP:
            (values["ip"],) = _U64.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_TID:
            values["pid"], values["tid"] = _TWO_U32.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_TIME:
            (time,) = _U64.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_ADDR:
            (values["addr"],) = _U64.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_ID:
            pos += 8
        if st & SAMPLE_STREAM_ID:
            pos += 8
        if st & SAMPLE_CPU:
            (cpu,) = _U32.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_PERIOD:
            (values["period"],) = _U64.unpack_from(raw, pos)
            pos += 8
        if st & SAMPLE_CALLCHAIN:
            (count,) = _U64.unpack_from(raw, pos)
            pos += 8
            if pos + 8 * count > end:
                raise ValueError(f"callchain of {count} entries overruns the record")
            values["callchain"] = struct.unpack_from(f"<{count}Q", raw, pos)
            pos += 8 * count
        if pos > end:
            raise ValueError("sample fields overrun the record")
        values["user"] = (misc & MISC_CPUMODE_MASK) == MISC_USER
        return PerfRecord("sample", misc, time, cpu, values)


def _switch_values(misc: int, other_pid: int | None, other_tid: int | None) -> dict[str, object]:
    return {"out": bool(misc & MISC_SWITCH_OUT), "preempt": bool(misc & MISC_SWITCH_OUT_PREEMPT), "other_pid": other_pid, "other_tid": other_tid}


def _c_string(raw: bytes, start: int, end: int) -> str:
    field = raw[start:end]
    nul = field.find(b"\0")
    if nul < 0:
        raise ValueError("string without a terminating NUL")
    return bytes(field[:nul]).decode("utf-8", "surrogateescape")


def parse_records(data: bytes | memoryview, tail: int, head: int, sample_type: int = DEFAULT_SAMPLE_TYPE) -> list[PerfRecord]:
    """Records in ``[tail, head)`` of a ring data area (a convenience over :class:`RingParser`)."""
    return RingParser(sample_type).parse(ring_bytes(data, tail, head))
