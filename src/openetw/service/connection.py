"""One client connection as the service sees it: non-blocking reads and a queue of frames to send."""

from __future__ import annotations

import mmap
import os
import socket
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from openetw.ipc.paths import PeerCredentials, peer_credentials
from openetw.ipc.protocol import FrameDecoder, Message, ProtocolError, encode_frame, recv_into_decoder
from openetw.service.schema import check_request, request_id_problem
from openetw.service.screen import ProducerIdentity
from openetw.session import Caller

__all__ = ["Connection", "Delivery", "OutgoingFrame", "RealtimeDelivery"]

# A real-time consumer that falls this far behind loses buffers rather than the service's memory.
MAX_QUEUED_BYTES = 64 << 20
# A real-time consumer's socket holds this much (the system's limit may make it less): the
# default (about 200 KB, three 64 KB buffers) has the service wake up every few milliseconds
# to refill it when a session is busy.
REALTIME_SEND_BUFFER = 4 << 20
# Replies and notifications waiting for a client that does not read them: past this the client
# is disconnected (a client that pipelines requests and never reads would otherwise grow the
# service without end).
MAX_PENDING_REPLY_BYTES = 4 << 20
# Buffers a consumer that acknowledges may leave unacknowledged: past this the oldest count as
# received (a consumer that never says so cannot grow the service's books without end).
MAX_UNACKNOWLEDGED = 1 << 16


@dataclass(eq=False)
class Delivery:
    """One buffer on its way to a session's sinks, and to its real-time consumers until one of them received it.

    ``taken``: a sink took it already (it counts written); ``kept``: a sink that cannot lose it
    later took it (the file, the buffering ring, a stream, a channel's log); ``owned``: it is the
    log file's own spare buffer (a file-only session's straight path), handed to the file as it is.
    ``waiting``: the consumers it was sent to that have not received it yet. A consumer that
    attached with ``acks`` says which buffers it took (``realtime_received``); for one that did
    not, a buffer counts received once the service handed it to the socket. When the last consumer
    waiting for a buffer nobody received and nothing kept goes away, its events are lost.
    """

    session_id: int
    events: int
    waiting: int = 0
    received: bool = False
    kept: bool = False
    taken: bool = False
    owned: bool = False

    def received_by_one(self) -> None:
        self.received = True
        self.waiting -= 1

    def abandoned_by_one(self) -> bool:
        """One waiting consumer went away: whether the buffer is now lost to everyone."""
        self.waiting -= 1
        return self.waiting <= 0 and not self.received and not self.kept


RealtimeDelivery = Delivery  # its name before it went to every sink


@dataclass
class OutgoingFrame:
    data: bytes
    fds: list[int] = field(default_factory=list)  # ours: duplicated into the peer, closed once sent
    sent: int = 0
    is_buffer: bool = False  # a real-time buffer (may be dropped when the consumer lags)
    delivery: Delivery | None = None  # a buffer to a consumer that does not acknowledge


class Connection:
    """A connected client: credentials, the incoming decoder, the outgoing queue and its roles."""

    def __init__(self, connection_id: int, sock: socket.socket) -> None:
        self.connection_id = connection_id
        self.sock = sock
        sock.setblocking(False)
        self.credentials: PeerCredentials = peer_credentials(sock)
        self.caller = Caller(self.credentials.uid, self.credentials.gid, self.credentials.groups)
        self.decoder = FrameDecoder(allow_notices=True)
        self.outgoing: deque[OutgoingFrame] = deque()
        self.queued_bytes = 0
        self.reply_bytes = 0  # the part of queued_bytes that is replies and notifications
        self.overflowed = False  # set once reply_bytes passed MAX_PENDING_REPLY_BYTES: drop it
        self.closed = False
        # Per session this connection consumes with acknowledgements: the buffers sent to it
        # that it has not said it received, in the order they were sent.
        self.unreceived: dict[int, deque[Delivery]] = {}
        self.registrations: set[int] = set()
        # Every provider GUID this connection ever registered (records written before an
        # unregister may still be in its pools), as the bytes a record holds.
        self.registered_guids: set[bytes] = set()
        self.registered_classic = False
        self._identity: ProducerIdentity | None = None
        self.consuming: set[int] = set()  # session ids this real-time consumer receives

    @property
    def pid(self) -> int:
        return self.credentials.pid

    def note_registration(self, provider_guid: uuid.UUID, *, classic: bool) -> None:
        self.registered_guids.add(provider_guid.bytes_le)
        self.registered_classic |= classic
        self._identity = None

    def identity(self, secured: frozenset[bytes] = frozenset()) -> ProducerIdentity:
        """What this producer may write into its pools (see ``screen``)."""
        identity = self._identity
        if identity is None or identity.secured is not secured:
            identity = ProducerIdentity(self.pid, frozenset(self.registered_guids), self.registered_classic, secured)
            self._identity = identity
        return identity

    def fileno(self) -> int:
        return self.sock.fileno()

    # -- reading -------------------------------------------------------------------------------
    def read(self) -> list[Message] | None:
        """Messages that arrived; ``None`` at end of stream. ``ProtocolError`` on bad input."""
        try:
            alive = recv_into_decoder(self.sock, self.decoder)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:  # reset by the peer, or gone in some other way
            return None
        if not alive:
            return None
        return list(self.decoder.messages())

    def take_notices(self) -> int:
        count, self.decoder.notices = self.decoder.notices, 0
        return count

    # -- writing -------------------------------------------------------------------------------
    def widen_send_buffer(self, size: int = REALTIME_SEND_BUFFER) -> None:
        """Let the socket hold ``size`` bytes on their way to the peer (a real-time consumer)."""
        try:
            if self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < size:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        except OSError:
            pass  # the default size works, only with more wakeups

    def send(
        self, body: dict[str, Any], *, fds: tuple[int, ...] = (), payload: bytes | mmap.mmap = b"", is_buffer: bool = False,
        delivery: Delivery | None = None,
    ) -> bool:  # fmt: skip
        """Queue a frame. ``fds`` are duplicated now (the caller keeps its own). A real-time
        buffer is refused (False) when the peer is too far behind; one that is queued waits for
        this consumer to receive it (``delivery``)."""
        if self.closed:
            return False
        if is_buffer and self.queued_bytes + len(payload) > MAX_QUEUED_BYTES:
            return False
        if self.overflowed:
            return False
        if fds:
            body = {**body, "fds": len(fds)}
        data = encode_frame(body, payload)
        if not is_buffer:
            if self.reply_bytes + len(data) > MAX_PENDING_REPLY_BYTES:
                self.overflowed = True  # the loop drops the connection
                return False
            self.reply_bytes += len(data)
        frame = OutgoingFrame(data, [os.dup(fd) for fd in fds], is_buffer=is_buffer)
        if delivery is not None:
            delivery.waiting += 1
            acknowledged = self.unreceived.get(delivery.session_id)
            if acknowledged is not None:
                acknowledged.append(delivery)
                if len(acknowledged) > MAX_UNACKNOWLEDGED:
                    acknowledged.popleft().received_by_one()
            else:
                frame.delivery = delivery
        self.outgoing.append(frame)
        self.queued_bytes += len(frame.data)
        return True

    def acknowledges(self, session_id: int) -> None:
        """This consumer will say which of the session's buffers it received."""
        self.unreceived.setdefault(session_id, deque())

    def received(self, session_id: int, buffers: int) -> None:
        """The consumer says it received the next ``buffers`` buffers of the session."""
        waiting = self.unreceived.get(session_id)
        while waiting and buffers > 0:
            waiting.popleft().received_by_one()
            buffers -= 1

    def take_unreceived(self) -> list[Delivery]:
        """The buffers sent to this consumer that it never received (it went away)."""
        gone = [delivery for waiting in self.unreceived.values() for delivery in waiting]
        gone += [frame.delivery for frame in self.outgoing if frame.delivery is not None]
        self.unreceived.clear()
        for frame in self.outgoing:
            frame.delivery = None
        return gone

    @property
    def wants_write(self) -> bool:
        return bool(self.outgoing) and not self.closed

    def flush_outgoing(self) -> None:
        """Send what the socket takes now. ``OSError`` (peer gone) propagates."""
        while self.outgoing:
            frame = self.outgoing[0]
            try:
                if frame.fds:
                    sent = socket.send_fds(self.sock, [frame.data[frame.sent :]], frame.fds)
                    self._close_fds(frame)
                else:
                    sent = self.sock.send(memoryview(frame.data)[frame.sent :])
            except (BlockingIOError, InterruptedError):
                return
            frame.sent += sent
            self.queued_bytes -= sent
            if frame.sent < len(frame.data):
                return
            self.outgoing.popleft()
            if frame.delivery is not None:
                frame.delivery.received_by_one()
                frame.delivery = None
            if not frame.is_buffer:
                self.reply_bytes -= len(frame.data)

    @staticmethod
    def _close_fds(frame: OutgoingFrame) -> None:
        for fd in frame.fds:
            os.close(fd)
        frame.fds = []

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for frame in self.outgoing:
            self._close_fds(frame)
        self.outgoing.clear()
        self.decoder.fail()
        try:
            self.sock.close()
        except OSError:
            pass


def check_message(message: Message) -> tuple[str, Any]:
    """(op, request id) of a request. ``ProtocolError`` when it has no operation name or an id
    no reply could echo; ``InvalidRequest`` (answered, the connection goes on) when a field
    has the wrong type or range (see ``schema``)."""
    op = message.body.get("op")
    request_id = message.body.get("id")
    problem = request_id_problem(request_id)
    if not isinstance(op, str) or problem is not None:
        message.close_fds()
        raise ProtocolError(problem or "a request needs an \"op\" string")
    check_request(message.body)
    return op, request_id
