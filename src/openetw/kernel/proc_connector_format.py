"""The proc connector's wire format: subscribe messages and process events (pure, no I/O).

The proc connector (``NETLINK_CONNECTOR``, group ``CN_IDX_PROC``) multicasts one netlink
message per process event: ``nlmsghdr`` (16 bytes) + ``cn_msg`` (20 bytes: id idx/val, seq, ack,
len, flags) + ``proc_event`` (``what``, ``cpu``, ``timestamp_ns`` = ktime_get_ns, i.e.
CLOCK_MONOTONIC, then a union per event kind). All integers are in the host's byte order.

``cn_msg.seq`` counts the messages each CPU sent while anyone listened (``proc_event.cpu`` says
which CPU): a jump in one CPU's sequence is events this socket never received.
:class:`SequenceTracker` counts them.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import InvalidArgument, TraceDataError

__all__ = [
    "CN_IDX_PROC",
    "CN_VAL_PROC",
    "EVENT_NAMES",
    "NETLINK_CONNECTOR",
    "PROC_CN_MCAST_IGNORE",
    "PROC_CN_MCAST_LISTEN",
    "ProcEvent",
    "SequenceTracker",
    "decode_wait_status",
    "parse_datagram",
    "subscribe_message",
]

NETLINK_CONNECTOR = 11
CN_IDX_PROC, CN_VAL_PROC = 1, 1
PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE = 1, 2

_NLMSG_NOOP, _NLMSG_ERROR, _NLMSG_DONE = 1, 2, 3
_NO_CPU = 0xFFFFFFFF  # kernels before 6.x send their subscription answer with cpu = -1

_NLMSGHDR = struct.Struct("=IHHII")      # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")       # idx, val, seq, ack, len, flags
_EVENT_HEAD = struct.Struct("=IIQ")      # what, cpu, timestamp_ns
_OP = struct.Struct("=I")

# what → (raw event name, union layout, field names)
_ACK = 0x00000000
_LAYOUTS: dict[int, tuple[str, struct.Struct, tuple[str, ...]]] = {
    _ACK: ("proc_ack", struct.Struct("=I"), ("err",)),
    0x00000001: ("proc_fork", struct.Struct("=iiii"), ("parent_pid", "parent_tgid", "child_pid", "child_tgid")),
    0x00000002: ("proc_exec", struct.Struct("=ii"), ("pid", "tgid")),
    0x00000004: ("proc_uid", struct.Struct("=iiII"), ("pid", "tgid", "ruid", "euid")),
    0x00000040: ("proc_gid", struct.Struct("=iiII"), ("pid", "tgid", "rgid", "egid")),
    0x00000080: ("proc_sid", struct.Struct("=ii"), ("pid", "tgid")),
    0x00000100: ("proc_ptrace", struct.Struct("=iiii"), ("pid", "tgid", "tracer_pid", "tracer_tgid")),
    0x00000200: ("proc_comm", struct.Struct("=ii16s"), ("pid", "tgid", "comm")),
    0x40000000: ("proc_coredump", struct.Struct("=iiii"), ("pid", "tgid", "parent_pid", "parent_tgid")),
    0x80000000: ("proc_exit", struct.Struct("=iiIiii"), ("pid", "tgid", "exit_status", "exit_signal", "parent_pid", "parent_tgid")),
}
UNKNOWN_EVENT = "proc_unknown"
EVENT_NAMES: tuple[str, ...] = tuple(name for name, _, _ in _LAYOUTS.values()) + (UNKNOWN_EVENT,)
"""Every raw event name :func:`parse_datagram` gives (``proc_ack`` answers a subscription)."""


@dataclass(frozen=True, slots=True)
class ProcEvent:
    """One proc connector message.

    ``name`` is ``proc_fork``, ``proc_exec``, ``proc_exit``, ... (see :data:`EVENT_NAMES`);
    ``proc_unknown`` for a ``what`` this module does not know (``values["what"]`` says which).
    ``seq`` and ``ack`` are the ``cn_msg`` fields; ``cpu`` is ``None`` when the kernel gave none.
    """

    name: str
    what: int
    cpu: int | None
    timestamp_ns: int
    seq: int
    ack: int
    values: Mapping[str, Any] = field(default_factory=dict)


def subscribe_message(op: int = PROC_CN_MCAST_LISTEN, *, seq: int = 0, ack: int = 0, port_id: int = 0) -> bytes:
    """The datagram that starts (``PROC_CN_MCAST_LISTEN``) or stops (``..._IGNORE``) the events.

    The kernel answers with a ``proc_ack`` event whose ``ack`` is ``ack + 1`` and whose ``err``
    is 0 or an errno (EPERM before Linux 6.6 without CAP_NET_ADMIN).
    """
    if op not in (PROC_CN_MCAST_LISTEN, PROC_CN_MCAST_IGNORE):
        raise InvalidArgument(f"unknown proc connector operation {op}")
    body = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, _OP.size, 0) + _OP.pack(op)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), _NLMSG_DONE, 0, seq & 0xFFFFFFFF, port_id) + body


def decode_wait_status(status: int) -> tuple[int, int, bool]:
    """``(exit_code, signal, core_dumped)`` from a wait status (``task->exit_code``).

    ``exit_code`` is what ETW's ExitStatus holds on Linux: the ``exit()`` value (its low 8 bits:
    that is all a wait status keeps), or 128 + the signal number for a process a signal killed.
    """
    status &= 0xFFFFFFFF
    signal = status & 0x7F
    if signal == 0:
        return (status >> 8) & 0xFF, 0, False
    if signal == 0x7F:  # a stopped task: not an exit, but keep the number it carries
        return (status >> 8) & 0xFF, 0, False
    return 128 + signal, signal, bool(status & 0x80)


def _event(body: memoryview, base: int) -> ProcEvent:
    _idx, _val, seq, ack, length, _flags = _CN_MSG.unpack_from(body, 0)
    data = body[_CN_MSG.size :]
    if length > len(data):
        raise TraceDataError(f"cn_msg says {length} bytes of data, {len(data)} present", offset=base + 16, structure="cn_msg")
    if length < _EVENT_HEAD.size:
        raise TraceDataError(f"proc_event of {length} bytes, shorter than its {_EVENT_HEAD.size}-byte header", offset=base + 16, structure="proc_event")
    what, cpu, timestamp = _EVENT_HEAD.unpack_from(data, 0)
    layout = _LAYOUTS.get(what)
    if layout is None:
        return ProcEvent(UNKNOWN_EVENT, what, None if cpu == _NO_CPU else cpu, timestamp, seq, ack, {"what": what})
    name, shape, names = layout
    if length < _EVENT_HEAD.size + shape.size:
        raise TraceDataError(
            f"{name} needs {_EVENT_HEAD.size + shape.size} bytes, the message has {length}",
            offset=base + 16 + _CN_MSG.size, structure="proc_event",
        )
    values: dict[str, Any] = dict(zip(names, shape.unpack_from(data, _EVENT_HEAD.size), strict=True))
    if name == "proc_comm":
        values["comm"] = values["comm"].split(b"\0", 1)[0].decode("utf-8", "replace")
    elif name == "proc_exit":
        values["exit_code"], values["signal"], values["core_dumped"] = decode_wait_status(values["exit_status"])
    return ProcEvent(name, what, None if cpu == _NO_CPU else cpu, timestamp, seq, ack, values)


def parse_datagram(data: bytes | bytearray | memoryview) -> list[ProcEvent]:
    """Every proc connector event in one received datagram (usually one).

    Netlink no-op messages and messages of other connector ids are skipped; anything truncated
    or inconsistent raises :class:`~openetw.errors.TraceDataError`.
    """
    view = memoryview(data).cast("B")
    events: list[ProcEvent] = []
    offset = 0
    while offset < len(view):
        if len(view) - offset < _NLMSGHDR.size:
            raise TraceDataError(f"{len(view) - offset} bytes left, a netlink header needs {_NLMSGHDR.size}", offset=offset, structure="nlmsghdr")
        length, kind, _flags, _seq, _pid = _NLMSGHDR.unpack_from(view, offset)
        if length < _NLMSGHDR.size or offset + length > len(view):
            raise TraceDataError(f"netlink message length {length} does not fit the {len(view) - offset} bytes left", offset=offset, structure="nlmsghdr")
        if kind == _NLMSG_ERROR:
            raise TraceDataError("netlink error message on the proc connector socket", offset=offset, structure="nlmsghdr")
        body = view[offset + _NLMSGHDR.size : offset + length]
        if kind != _NLMSG_NOOP:
            if len(body) < _CN_MSG.size:
                raise TraceDataError(f"netlink message of {length} bytes cannot hold a cn_msg", offset=offset, structure="cn_msg")
            idx, val = struct.unpack_from("=II", body, 0)
            if (idx, val) == (CN_IDX_PROC, CN_VAL_PROC):
                events.append(_event(body, offset))
        offset += (length + 3) & ~3
    return events


class SequenceTracker:
    """Counts the events a listener missed, from each CPU's ``cn_msg.seq``.

    Every message a CPU sends while anyone listens (subscription answers included) takes the
    next number of that CPU's counter, so the first number seen per CPU is the baseline and
    every later jump of more than one is messages lost. A number that goes backwards (the
    counter cannot) resets the baseline without counting.
    """

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        self.lost = 0

    def observe(self, cpu: int | None, seq: int) -> int:
        """Messages missed just before this one (0 when none, or when ``cpu`` is unknown)."""
        if cpu is None:
            return 0
        last = self._last.get(cpu)
        self._last[cpu] = seq
        if last is None:
            return 0
        step = (seq - last) & 0xFFFFFFFF
        if step == 0 or step > 0x7FFFFFFF:
            return 0
        self.lost += step - 1
        return step - 1
