"""TcpIp and UdpIp records from the ``sock`` tracepoints (an event class of
:class:`~openetw.kernel.classes.KernelEventMapper`).

A TCP socket's state changes tell its endpoints and owner (``connect()`` runs in the caller, an
accepted socket belongs to the listener of its port); send and receive lengths then name the
socket only, so the mapper keeps each socket until it closes. UDP tracepoints carry no addresses.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.classes_base import (
    TCP_ACCEPT,
    TCP_CONNECT,
    TCP_DISCONNECT,
    TCP_IPV6_OFFSET,
    TCP_RECV,
    TCP_SEND,
    TCPIP_GROUP,
    TCPIP_VERSION,
    UDP_RECV,
    UDPIP_GROUP,
    UDPIP_VERSION,
    MapperState,
)

__all__ = ["NetworkEvents", "Socket"]

_TCP_ESTABLISHED, _TCP_SYN_SENT, _TCP_SYN_RECV, _TCP_CLOSE, _TCP_LISTEN = 1, 2, 3, 7, 10
_TCP_CLOSING_STATES = frozenset({4, 5, 6, 8, 9, 11})  # FIN_WAIT1/2, TIME_WAIT, CLOSE_WAIT, LAST_ACK, CLOSING
_AF_INET, _AF_INET6, _IPPROTO_TCP, _IPPROTO_UDP = 2, 10, 6, 17
_MSG_PEEK = 0x2

_TCP_IDS = struct.Struct("<II")
_PORTS = struct.Struct(">HH")
_SEQ_CONN = struct.Struct("<IQ")
_SEND_TIMES = struct.Struct("<II")
_CONNECT_OPTIONS = struct.Struct("<HHHHIhh")
_V4_ZERO = bytes(8)
_V6_ZERO = bytes(32)
_NO_PORTS = bytes(4)


class Socket:
    """A TCP socket the mapper follows: its owner process and endpoints."""

    __slots__ = ("owner", "family", "saddr", "daddr", "sport", "dport")

    def __init__(self, owner: int, family: int, saddr: bytes, daddr: bytes, sport: int, dport: int) -> None:
        self.owner = owner
        self.family = family
        self.saddr = saddr
        self.daddr = daddr
        self.sport = sport
        self.dport = dport


class NetworkEvents(MapperState):
    """TCP connect, accept, disconnect, send and receive; UDP send and receive."""

    def _endpoints(self, v: Mapping[str, Any]) -> tuple[int, bytes, bytes]:
        if v["family"] == _AF_INET6:
            return _AF_INET6, bytes(v["saddr_v6"]), bytes(v["daddr_v6"])
        return _AF_INET, bytes(v["saddr"]), bytes(v["daddr"])

    def _tcp_record(self, opcode: int, sk: int, size: int, tid: int, ts: int, cpu: int, pid: int) -> EventRecord | None:
        sock = self._sockets.get(sk)
        if sock is None:
            return None
        if sock.family == _AF_INET6:
            opcode += TCP_IPV6_OFFSET
        head = _TCP_IDS.pack(pid, size) + sock.daddr + sock.saddr + _PORTS.pack(sock.dport, sock.sport)
        if opcode in (TCP_SEND, TCP_SEND + TCP_IPV6_OFFSET):
            head += _SEND_TIMES.pack(0, 0)
        elif opcode in (TCP_CONNECT, TCP_ACCEPT, TCP_CONNECT + TCP_IPV6_OFFSET, TCP_ACCEPT + TCP_IPV6_OFFSET):
            head += _CONNECT_OPTIONS.pack(0, 0, 0, 0, 0, 0, 0)
        payload = head + _SEQ_CONN.pack(0, sk)
        return self._record(TCPIP_GROUP, opcode, TCPIP_VERSION, tid, ts, cpu, payload, pid=pid)

    def _on_sock_state(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if v["protocol"] != _IPPROTO_TCP:
            return []
        sk, old, new, tid = v["skaddr"], v["oldstate"], v["newstate"], v["common_pid"]
        family, saddr, daddr = self._endpoints(v)
        known = self._sockets.get(sk)
        owner = known.owner if known is not None else 0
        if new == _TCP_LISTEN:
            self._listeners[v["sport"]] = self.process_of(tid)
            return []
        if old == _TCP_LISTEN and new == _TCP_CLOSE:
            self._listeners.pop(v["sport"], None)
            return []
        if old == _TCP_CLOSE and new == _TCP_SYN_SENT:
            owner = self.process_of(tid)  # connect() runs in the caller's context
        elif new == _TCP_SYN_RECV:
            owner = self._listeners.get(v["sport"], 0)
        self._sockets[sk] = Socket(owner, family, saddr, daddr, v["sport"], v["dport"])
        record: EventRecord | None = None
        if new == _TCP_ESTABLISHED and old == _TCP_SYN_SENT:
            record = self._tcp_record(TCP_CONNECT, sk, 0, tid, ts, cpu, owner)
        elif new == _TCP_ESTABLISHED and old == _TCP_SYN_RECV:
            record = self._tcp_record(TCP_ACCEPT, sk, 0, tid, ts, cpu, owner)
        elif old == _TCP_ESTABLISHED and (new in _TCP_CLOSING_STATES or new == _TCP_CLOSE):
            record = self._tcp_record(TCP_DISCONNECT, sk, 0, tid, ts, cpu, owner)
        if new == _TCP_CLOSE:
            self._sockets.pop(sk, None)
        return [record] if record is not None else []

    def _on_sock_send(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._sock_length(TCP_SEND, ts, cpu, v)

    def _on_sock_recv(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._sock_length(TCP_RECV, ts, cpu, v)

    def _sock_length(self, opcode: int, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        protocol = v["protocol"]
        if protocol == _IPPROTO_UDP:
            return self._udp_record(opcode, ts, cpu, v)
        sock = self._sockets.get(v["sk"])
        if protocol != _IPPROTO_TCP or v["ret"] <= 0 or sock is None:
            return []
        tid = v["common_pid"]
        pid = self.process_of(tid)
        if sock.owner == 0:
            sock.owner = pid
        record = self._tcp_record(opcode, v["sk"], v["ret"], tid, ts, cpu, pid)
        return [record] if record is not None else []

    def _udp_record(self, opcode: int, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        # UDP_SEND/RECV equal TCP_SEND/RECV (10/11); the tracepoints carry no addresses or ports.
        size = v["ret"]
        if size <= 0 or (opcode == UDP_RECV and v["flags"] & _MSG_PEEK):
            return []
        tid = v["common_pid"]
        pid = self.process_of(tid)
        if v["family"] == _AF_INET6:
            opcode += TCP_IPV6_OFFSET
            addresses = _V6_ZERO
        else:
            addresses = _V4_ZERO
        payload = _TCP_IDS.pack(pid, size) + addresses + _NO_PORTS + _SEQ_CONN.pack(0, v["sk"])
        return [self._record(UDPIP_GROUP, opcode, UDPIP_VERSION, tid, ts, cpu, payload, pid=pid)]
