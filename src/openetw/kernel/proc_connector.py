"""Process events from the proc connector: the kernel source any account may use.

The proc connector (netlink ``NETLINK_CONNECTOR``, multicast group ``CN_IDX_PROC``) tells every
listener about every fork, exec and exit of the machine, with a CLOCK_MONOTONIC timestamp.
Since Linux 6.6 it needs no privilege (before, CAP_NET_ADMIN); only listeners in the initial
user and pid namespaces get events. :class:`ProcConnectorSource` is a
:class:`~openetw.kernel.source.KernelEventSource` over it: ``proc_fork``, ``proc_exec``,
``proc_exit``, ``proc_comm``, ``proc_uid``, ... raw events (see
:mod:`openetw.kernel.proc_connector_format` for their values), mapped to Process and Thread
records by :mod:`openetw.kernel.classes_proc`.

Loss: the socket's receive queue can overflow (``recv`` fails with ENOBUFS) and the kernel
can fail to allocate a message; both show as jumps in a CPU's message sequence, counted by
:meth:`ProcConnectorSource.lost`.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time
from typing import Any

from openetw.errors import AccessDenied, InvalidArgument, SessionError, TraceDataError
from openetw.kernel.proc_connector_format import (
    CN_IDX_PROC,
    NETLINK_CONNECTOR,
    PROC_CN_MCAST_IGNORE,
    PROC_CN_MCAST_LISTEN,
    ProcEvent,
    SequenceTracker,
    parse_datagram,
    subscribe_message,
)
from openetw.kernel.source import RawKernelEvent

__all__ = ["ProcConnectorSource"]

_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_ACK = "proc_ack"


class ProcConnectorSource:
    """Every process fork/exec/exit of the machine, from one netlink socket.

    ``receive_buffer`` is the socket buffer asked for (root may exceed ``net.core.rmem_max``,
    others get at most that); ``reorder_window_ns`` how long after its timestamp an event may
    still be on its way to the socket (the watermark stays that far behind the last empty read);
    ``exact_loss`` reads every CPU's message sequence at start and stop (see
    :meth:`_reveal_sequences`), so losses before a CPU's first event and after its last count.
    """

    name = "proc_connector"

    def __init__(
        self,
        *,
        receive_buffer: int = 8 << 20,
        max_batch: int = 8192,
        reorder_window_ns: int = 20_000_000,
        subscribe_timeout: float = 1.0,
        exact_loss: bool = True,
    ) -> None:
        if receive_buffer < 4096 or max_batch < 1 or reorder_window_ns < 0 or subscribe_timeout <= 0:
            raise InvalidArgument("receive_buffer >= 4096, max_batch >= 1, reorder_window_ns >= 0 and subscribe_timeout > 0 needed")
        self.requested_receive_buffer = receive_buffer
        self.max_batch = max_batch
        self.reorder_window_ns = reorder_window_ns
        self.subscribe_timeout = subscribe_timeout
        self.exact_loss = exact_loss
        self.receive_buffer = 0
        self._sock: socket.socket | None = None
        self._poll: Any = None
        self._buffer = bytearray(65536)
        self._sequences = SequenceTracker()
        self._pending: list[RawKernelEvent] = []
        self._watermark = 0
        self._listening = False
        self._stop_ns: int | None = None
        self._cookie = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
        self._answers_numbered = False
        self._emptied = False
        self._answer: int | None = None
        self.counters: dict[str, int] = {
            "messages": 0, "events": 0, "acks": 0, "unknown_events": 0, "overruns": 0,
            "parse_errors": 0, "reads": 0,
        }

    # -- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._sock is not None:
            raise SessionError("the proc connector source is already started")
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, NETLINK_CONNECTOR)
        except OSError as error:
            raise SessionError(f"proc connector: no netlink connector socket ({error.strerror})") from error
        self._sock = sock
        self._size_receive_buffer(sock)
        try:
            sock.bind((0, CN_IDX_PROC))
        except PermissionError as error:
            raise AccessDenied("proc connector: this account may not listen (before Linux 6.6 it needs CAP_NET_ADMIN)") from error
        except OSError as error:
            raise SessionError(f"proc connector: cannot join the process-event group ({error.strerror})") from error
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        self._send(PROC_CN_MCAST_LISTEN)
        self._listening = True
        self._await_answer()
        self._reveal_sequences()
        self._watermark = time.monotonic_ns() - self.reorder_window_ns

    def read(self, timeout: float) -> list[RawKernelEvent]:
        sock = self._require()
        events, self._pending = self._pending, []
        if not events and self._poll.poll(max(0, int(timeout * 1000))) == []:
            self._watermark = max(self._watermark, time.monotonic_ns() - self.reorder_window_ns)
            return []
        events.extend(self._receive(sock))
        events.sort(key=lambda event: event[0])
        return events

    @property
    def watermark(self) -> int:
        return self._watermark

    def stop(self) -> None:
        if self._sock is None or self._stop_ns is not None:
            return
        self._stop_ns = time.monotonic_ns()
        # Empty the queue first: the answers that reveal the sequences must find room in it.
        self._pending.extend(self._receive_all(self._sock))
        self._reveal_sequences()
        self._ignore()

    def drain(self) -> list[RawKernelEvent]:
        if self._sock is None:
            return []
        events, self._pending = self._pending, []
        events.extend(self._receive_all(self._sock))
        if self._stop_ns is not None:
            events = [event for event in events if event[0] <= self._stop_ns]
        events.sort(key=lambda event: event[0])
        return events

    def lost(self) -> int:
        """Messages missed by sequence (ENOBUFS overruns show there); at least one per overrun."""
        return max(self._sequences.lost, self.counters["overruns"])

    def close(self) -> None:
        if self._sock is None:
            return
        try:
            self._ignore()
        finally:
            self._sock.close()
            self._sock = None

    @property
    def stats(self) -> dict[str, int]:
        """Counters: messages, events, acks, unknown_events, overruns (ENOBUFS), sequence_lost, ..."""
        stats = dict(self.counters)
        stats["sequence_lost"] = self._sequences.lost
        stats["receive_buffer"] = self.receive_buffer
        return stats

    def __enter__(self) -> ProcConnectorSource:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inside ---------------------------------------------------------------------------------
    def _require(self) -> socket.socket:
        if self._sock is None:
            raise SessionError("the proc connector source is not started")
        return self._sock

    def _size_receive_buffer(self, sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, self.requested_receive_buffer)
        except OSError:
            try:  # without CAP_NET_ADMIN: capped at net.core.rmem_max
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.requested_receive_buffer)
            except OSError:
                pass
        self.receive_buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)

    def _send(self, op: int) -> None:
        assert self._sock is not None
        self._sock.send(subscribe_message(op, seq=0, ack=self._cookie))

    def _ignore(self) -> None:
        if self._listening and self._sock is not None:
            self._listening = False
            try:
                self._send(PROC_CN_MCAST_IGNORE)
            except OSError:
                pass

    def _reveal_sequences(self) -> None:
        """Makes every CPU this thread may run on send one answer now, so each CPU's sequence
        is known at start (losses before its first event count) and at stop (losses after its
        last event count).

        Since Linux 6.6 the answer to a subscription is numbered from the counter of the CPU
        that handled it, which is the sender's (netlink hands the message to the connector in
        the sender's context), and a repeated LISTEN changes nothing else. Older kernels send
        unnumbered answers (``cpu`` -1) and count every LISTEN as a new listener: skipped there.
        """
        if not (self.exact_loss and self._answers_numbered and self._listening and hasattr(os, "sched_setaffinity")):
            return
        try:
            allowed = os.sched_getaffinity(0)
        except OSError:
            return
        try:
            for cpu in sorted(allowed):
                try:
                    os.sched_setaffinity(0, {cpu})
                    self._send(PROC_CN_MCAST_LISTEN)
                except OSError:
                    continue
        finally:
            try:
                os.sched_setaffinity(0, allowed)
            except OSError:
                pass

    def _await_answer(self) -> None:
        """Waits for the kernel's answer to our LISTEN; events that come first are kept."""
        assert self._sock is not None
        deadline = time.monotonic() + self.subscribe_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SessionError(
                    "proc connector: the kernel did not answer the subscription "
                    "(process events reach only listeners in the initial user and pid namespaces)"
                )
            if not self._poll.poll(int(left * 1000) + 1):
                continue
            self._pending.extend(self._receive(self._sock, answer_to=self._cookie + 1))
            answer, self._answer = self._answer, None
            if answer is None:
                continue
            if answer == errno.EPERM:
                raise AccessDenied("proc connector: the kernel refused this account (before Linux 6.6 it needs CAP_NET_ADMIN)")
            if answer != 0:
                raise SessionError(f"proc connector: subscription refused ({os.strerror(answer)})")
            return

    def _receive_all(self, sock: socket.socket) -> list[RawKernelEvent]:
        events: list[RawKernelEvent] = []
        self._emptied = False
        while not self._emptied:
            events.extend(self._receive(sock))
        return events

    def _receive(self, sock: socket.socket, answer_to: int | None = None) -> list[RawKernelEvent]:
        """The events of up to ``max_batch`` messages readable now. The ``err`` of the answer
        whose ack is ``answer_to`` goes to ``self._answer``."""
        self.counters["reads"] += 1
        started = time.monotonic_ns()
        found: list[RawKernelEvent] = []
        drained = False
        buffer, view = self._buffer, memoryview(self._buffer)
        for _ in range(self.max_batch):
            try:
                size = sock.recv_into(buffer)
            except BlockingIOError:
                drained = True
                break
            except OSError as error:
                if error.errno == errno.ENOBUFS:
                    self.counters["overruns"] += 1
                    continue
                raise SessionError(f"proc connector: receive failed ({error.strerror})") from error
            try:
                messages = parse_datagram(view[:size])
            except TraceDataError:
                self.counters["parse_errors"] += 1
                continue
            for message in messages:
                self._count(message)
                if message.name == _ACK:
                    if answer_to is not None and message.ack == answer_to:
                        self._answer = message.values["err"]
                        self._answers_numbered = message.cpu is not None
                    continue
                found.append((message.timestamp_ns, message.cpu or 0, message.name, message.values))
        self._emptied = drained
        if drained:
            self._watermark = max(self._watermark, started - self.reorder_window_ns)
        return found

    def _count(self, message: ProcEvent) -> None:
        counters = self.counters
        counters["messages"] += 1
        self._sequences.observe(message.cpu, message.seq)
        if message.name == _ACK:
            counters["acks"] += 1
        elif message.name == "proc_unknown":
            counters["unknown_events"] += 1
            counters["events"] += 1
        else:
            counters["events"] += 1
