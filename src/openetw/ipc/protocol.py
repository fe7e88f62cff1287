"""The control protocol between the trace service and its clients (controllers, providers, consumers).

Wire format, over a Unix stream socket::

    frame   = b"OET" version:u8 json_length:u32le payload_length:u32le json payload
    notice  = b"!"                      (one byte: "a buffer of mine is FULL", producers only)

``json`` is one UTF-8 JSON object (at most ``MAX_JSON`` bytes); ``payload`` is raw bytes (whole
ETL buffers sent to real-time consumers; the service accepts none). File descriptors travel as
SCM_RIGHTS with the first bytes of their frame; the JSON object says how many in ``"fds"``.

Requests carry ``"op"`` and a client-chosen ``"id"``; the answer carries the same ``"id"`` and
either ``"ok": true`` plus results or ``"ok": false`` plus ``"error": {"type", "message"}``.
Messages the service sends on its own (enable notifications, pools, real-time buffers) carry
``"event"`` instead of ``"id"``.

``FrameDecoder`` is pure: bytes and descriptors in, ``Message``s out. Anything malformed,
oversized or unexpected raises ``ProtocolError``; the service then closes that connection only.
``Channel`` is the thin blocking socket wrapper the clients use.
"""

from __future__ import annotations

import array
import json
import mmap
import os
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import ServiceError

__all__ = [
    "FRAME_HEADER",
    "MAGIC",
    "MAX_FDS",
    "MAX_JSON",
    "MAX_PAYLOAD",
    "NOTICE",
    "PROTOCOL_VERSION",
    "Channel",
    "FrameDecoder",
    "Message",
    "ProtocolError",
    "encode_frame",
    "error_reply",
    "recv_into_decoder",
]

MAGIC = b"OET"
PROTOCOL_VERSION = 1
NOTICE = b"!"
FRAME_HEADER = struct.Struct("<3sBII")
MAX_JSON = 1 << 20
MAX_PAYLOAD = 16 << 20  # the largest ETL buffer a session may have
MAX_FDS = 4  # per frame
_RECV_SIZE = 256 * 1024
_FD_SIZE = array.array("i").itemsize


class ProtocolError(ServiceError):
    """A peer broke the protocol: bad magic, wrong version, oversized or malformed message."""


@dataclass
class Message:
    """One decoded frame: the JSON object, the descriptors it carried and its payload."""

    body: dict[str, Any]
    fds: list[int] = field(default_factory=list)
    payload: bytes = b""

    def close_fds(self) -> None:
        """Close descriptors nobody took (a refused request must not leak them)."""
        while self.fds:
            try:
                os.close(self.fds.pop())
            except OSError:
                pass

    def take_fd(self) -> int:
        """The first descriptor, now owned by the caller."""
        if not self.fds:
            raise ProtocolError(f"{self.body.get('op') or self.body.get('event')!r} needs a file descriptor")
        return self.fds.pop(0)


def encode_frame(body: dict[str, Any], payload: bytes | mmap.mmap = b"") -> bytes:
    """The bytes of one frame. ``body`` must serialise to at most ``MAX_JSON`` bytes."""
    data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_JSON:
        raise ProtocolError(f"message of {len(data)} bytes exceeds the {MAX_JSON}-byte limit")
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {len(payload)} bytes exceeds the {MAX_PAYLOAD}-byte limit")
    return FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, len(data), len(payload)) + data + payload


def error_reply(request_id: Any, error: BaseException) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": {"type": type(error).__name__, "message": str(error)}}


class FrameDecoder:
    """Incremental decoder: ``feed(bytes, fds)``, then iterate ``messages()``.

    ``allow_notices`` accepts the one-byte FULL notice (counted in ``notices``);
    ``max_payload`` bounds the binary payload (0: none accepted). Descriptors are queued in
    arrival order and handed to frames in order; a frame claiming more than arrived, or
    descriptors nobody claims, is a protocol error.
    """

    def __init__(self, *, allow_notices: bool = False, max_payload: int = 0) -> None:
        self._buffer = bytearray()
        self._fds: deque[int] = deque()
        self.allow_notices = allow_notices
        self.max_payload = max_payload
        self.notices = 0
        self.failed = False

    def feed(self, data: bytes, fds: Sequence[int] = ()) -> None:
        self._buffer += data
        self._fds.extend(fds)
        if len(self._fds) > 64:
            self.fail()
            raise ProtocolError("peer sent more descriptors than any message claims")

    def messages(self) -> Iterator[Message]:
        """Every complete message buffered; raises ``ProtocolError`` on bad input."""
        buffer = self._buffer
        while buffer:
            if buffer[:1] == NOTICE:
                if not self.allow_notices:
                    self.fail()
                    raise ProtocolError("buffer notices are only for producers")
                # Coalesce a run of notices: the reader only needs to know there was one.
                run = len(buffer) - len(buffer.lstrip(NOTICE))
                del buffer[:run]
                self.notices += run
                continue
            if len(buffer) < FRAME_HEADER.size:
                if not MAGIC.startswith(bytes(buffer[:3])):
                    self.fail()
                    raise ProtocolError(f"bad frame magic {bytes(buffer[:3])!r}")
                return
            magic, version, json_length, payload_length = FRAME_HEADER.unpack_from(buffer, 0)
            if magic != MAGIC:
                self.fail()
                raise ProtocolError(f"bad frame magic {magic!r}")
            if version != PROTOCOL_VERSION:
                self.fail()
                raise ProtocolError(f"protocol version {version} is not {PROTOCOL_VERSION}")
            if json_length > MAX_JSON:
                self.fail()
                raise ProtocolError(f"message of {json_length} bytes exceeds the {MAX_JSON}-byte limit")
            if payload_length > self.max_payload:
                self.fail()
                raise ProtocolError(f"payload of {payload_length} bytes exceeds the {self.max_payload}-byte limit")
            end = FRAME_HEADER.size + json_length + payload_length
            if len(buffer) < end:
                return
            body = self._parse_json(bytes(buffer[FRAME_HEADER.size : FRAME_HEADER.size + json_length]))
            payload = bytes(buffer[FRAME_HEADER.size + json_length : end])
            del buffer[:end]
            yield Message(body, self._claim_fds(body), payload)

    def _parse_json(self, data: bytes) -> dict[str, Any]:
        try:
            body = json.loads(data.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite_float)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self.fail()
            raise ProtocolError(f"message is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            self.fail()
            raise ProtocolError(f"message is a JSON {type(body).__name__}, not an object")
        return body

    def _claim_fds(self, body: dict[str, Any]) -> list[int]:
        wanted = body.get("fds", 0)
        if not isinstance(wanted, int) or isinstance(wanted, bool) or not 0 <= wanted <= MAX_FDS:
            self.fail()
            raise ProtocolError(f"bad descriptor count {wanted!r}")
        if wanted > len(self._fds):
            self.fail()
            raise ProtocolError(f"message claims {wanted} descriptors, {len(self._fds)} arrived")
        return [self._fds.popleft() for _ in range(wanted)]

    def fail(self) -> None:
        """Drop everything buffered and close the queued descriptors."""
        self.failed = True
        self._buffer.clear()
        while self._fds:
            try:
                os.close(self._fds.popleft())
            except OSError:
                pass

    @property
    def pending_fds(self) -> int:
        return len(self._fds)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):  # 1e999: JSON has no infinity, and no reply could carry one
        raise ValueError(f"{text[:40]} is out of a double's range")
    return value


_INF = float("inf")


def recv_into_decoder(sock: socket.socket, decoder: FrameDecoder) -> bool:
    """One ``recvmsg`` into ``decoder``; False at end of stream. Descriptors that arrive truncated
    (more than the ancillary buffer holds) are a protocol error."""
    data, ancdata, flags, _ = sock.recvmsg(_RECV_SIZE, socket.CMSG_SPACE(16 * _FD_SIZE))
    fds: list[int] = []
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(cdata) - len(cdata) % _FD_SIZE
            fds.extend(array.array("i", cdata[:usable]))
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        decoder.fail()
        raise ProtocolError("descriptors were truncated")
    if not data and not fds:
        return False
    decoder.feed(data, fds)
    return True


class Channel:
    """A blocking client connection: send requests (with descriptors), read messages.

    Sending is serialised by a lock so threads can share the channel; ``notice()`` never blocks
    (it gives up when another thread is sending or the socket buffer is full: the service also
    scans its pools on every flush-timer tick).
    """

    def __init__(self, sock: socket.socket, *, allow_payload: bool = True) -> None:
        self.sock = sock
        self._decoder = FrameDecoder(max_payload=MAX_PAYLOAD if allow_payload else 0)
        self._send_lock = threading.Lock()
        self._pending: deque[Message] = deque()
        self._next_id = 1
        self.closed = False

    @classmethod
    def connect(cls, path: str, *, timeout: float | None = 5.0) -> Channel:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.settimeout(None)
        except OSError:
            sock.close()
            raise
        return cls(sock)

    def fileno(self) -> int:
        return self.sock.fileno()

    def has_message(self, timeout: float = 0.0) -> bool:
        """Whether ``receive()`` would return at once: a message already read, or bytes waiting
        (or arriving within ``timeout`` seconds)."""
        if self._pending:
            return True
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
        except (OSError, ValueError):  # closed meanwhile
            return False
        return bool(ready)

    def new_id(self) -> int:
        with self._send_lock:
            request_id = self._next_id
            self._next_id += 1
        return request_id

    def send(self, body: dict[str, Any], fds: Sequence[int] = ()) -> None:
        if fds:
            body = {**body, "fds": len(fds)}
        frame = encode_frame(body)
        with self._send_lock:
            if fds:
                sent = socket.send_fds(self.sock, [frame], list(fds))
                if sent < len(frame):
                    self.sock.sendall(frame[sent:])
            else:
                self.sock.sendall(frame)

    def notice(self) -> bool:
        """Send the one-byte FULL notice if that can be done at once."""
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            return self.sock.send(NOTICE, socket.MSG_DONTWAIT) == 1
        except OSError:
            return False
        finally:
            self._send_lock.release()

    def receive(self) -> Message | None:
        """The next message, blocking; ``None`` when the service closed the connection."""
        while not self._pending:
            if self.closed:
                return None
            try:
                alive = recv_into_decoder(self.sock, self._decoder)
            except (ConnectionResetError, ProtocolError):
                alive = False
            if not alive:
                self.closed = True
                return None
            self._pending.extend(self._decoder.messages())
        return self._pending.popleft()

    def poll(self, timeout: float | None) -> list[Message] | None:
        """Messages that arrive within ``timeout`` seconds ([] if none); ``None`` once the peer closed."""
        if self._pending:
            pending = list(self._pending)
            self._pending.clear()
            return pending
        if self.closed:
            return None
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return []
        messages: list[Message] | None
        try:
            alive = recv_into_decoder(self.sock, self._decoder)
            messages = list(self._decoder.messages()) if alive else None
        except (OSError, ProtocolError):
            messages = None
        if messages is None:
            self.closed = True
        return messages

    def request(self, op: str, fds: Sequence[int] = (), **fields: Any) -> dict[str, Any]:
        """Send a request and wait for its answer (only for channels nobody else reads)."""
        request_id = self.new_id()
        try:
            self.send({"op": op, "id": request_id, **fields}, fds)
        except (BrokenPipeError, ConnectionResetError):
            # The service may have refused this connection before reading a byte: its reason waits.
            pass
        while True:
            message = self.receive()
            if message is None:
                raise ServiceError(f"the trace service closed the connection during {op!r}")
            body = message.body
            if body.get("id") == request_id or (body.get("refused") is True and "id" not in body):
                message.close_fds()
                return body
            message.close_fds()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        self._decoder.fail()
