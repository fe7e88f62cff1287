"""A publishing connection to NATS for a streamed session's buffers: the protocol's few commands
on one socket (non-blocking once connected: a send waits for room itself), driven by the
publishing thread without an event loop.

Why not nats-py's ``js.publish``: it costs a task, a future, a timer, a header dictionary
checked key by key and two copies of the payload per message, about as much CPU as the whole
service spends writing that buffer to a file. Here a batch of buffers leaves in one
``sendmsg`` (each buffer's own bytes, not copied), and the stream's acknowledgements come back
on one subscription, read as they arrive: ``<inbox>.<token>`` names the publish each answers.

What it speaks (the NATS client protocol): ``INFO`` / ``CONNECT`` (user and password, or a
credentials file's JWT with the server's nonce signed by its seed through ``nkeys``; ``tls://``
servers and servers that require TLS wrapped in TLS), ``SUB``, ``HPUB``, ``PING``/``PONG``, and
it reads ``MSG``/``HMSG`` (acknowledgements, API answers), ``-ERR`` and ``INFO`` (other servers
of the cluster, tried when the one in use goes). The stream is made as ``connect.ensure_stream``
makes it, by the same JetStream API calls: so the trace service never loads nats-py.
"""

from __future__ import annotations

import base64
import json
import secrets
import select
import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from openetw.fleet.connect import FleetError, StreamOptions
from openetw.fleet.wire import STREAM_SUBJECTS

__all__ = ["Ack", "ConnectionLost", "PublishConnection", "encode_headers"]

_CRLF = b"\r\n"
_MAX_LINE = 1 << 16  # a protocol line longer than this is not NATS talking
_IOV_MAX = 1024
_STREAM_NOT_FOUND, _STREAM_NAME_IN_USE = 10059, 10058  # JetStream's err_code values


class ConnectionLost(FleetError):
    """The server closed the connection, or it broke: whatever was in flight gets no answer."""


Ack = tuple[int, str | None]  # (token, None when stored, or why not)


def encode_headers(headers: dict[str, str]) -> bytes:
    """A NATS header block (``NATS/1.0``, one ``Name: value`` line each, a blank line)."""
    lines = ["NATS/1.0"]
    for name, value in headers.items():
        lines.append(f"{name}: {value.strip().replace(chr(13), ' ').replace(chr(10), ' ')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class PublishConnection:
    """One connection to one server of ``options.servers`` (the first that takes us, from
    ``start``), subscribed to its own reply inbox."""

    def __init__(self, options: StreamOptions, *, name: str, timeout: float, start: int = 0, extra_servers: Sequence[str] = ()) -> None:
        self.options = options
        self.name = name
        self.timeout = timeout
        self.discovered: list[str] = list(extra_servers)  # servers the cluster named in INFO
        self.server_index = start
        self._sock: socket.socket | None = None
        self._tls = False
        self._buffer = bytearray()
        self._pos = 0
        self.errors: list[str] = []  # -ERR texts, newest last
        prefix = "_INBOX"
        if options.user is not None and options.creds is None:
            from openetw.fleet.connect import inbox_prefix

            prefix = inbox_prefix(options.user)
        self.inbox = f"{prefix}.{secrets.token_hex(11)}"
        self._inbox_bytes = self.inbox.encode() + b"."
        self.received_any = False  # anything at all read since the publisher last looked
        self._request_token = 1 << 62  # above every sequence number (those are below 2^48)
        self._connect_all()

    # -- connecting ------------------------------------------------------------------------------
    def _servers(self) -> list[str]:
        servers = list(self.options.servers)
        servers += [url for url in self.discovered if url not in servers]
        return servers

    def _connect_all(self) -> None:
        servers = self._servers()
        failures = []
        for offset in range(len(servers)):
            index = (self.server_index + offset) % len(servers)
            try:
                self._connect(servers[index])
                self.server_index = index
                return
            except (OSError, ValueError, FleetError) as exc:
                self.close()
                failures.append(f"{servers[index]}: {exc or type(exc).__name__}")
        raise FleetError("cannot connect to " + "; ".join(failures))

    def _connect(self, url: str) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        sock = socket.create_connection((host, port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._tls = sock, False
        self._buffer.clear()
        self._pos = 0
        line = self._read_line()
        if not line.startswith(b"INFO "):
            raise FleetError(f"not a NATS server (it said {line[:40]!r})")
        info = json.loads(line[5:])
        if parts.scheme == "tls" or info.get("tls_required"):
            context = ssl.create_default_context()
            self._sock = context.wrap_socket(sock, server_hostname=host)
            self._tls = True
        self._note_servers(info)
        connect: dict[str, Any] = {
            "verbose": False, "pedantic": False, "lang": "python3", "version": "openetw", "protocol": 1, "name": self.name,
            "headers": True, "no_responders": True,
        }  # fmt: skip
        if self.options.creds is not None:
            jwt, seed = _read_creds(self.options.creds)
            nonce = info.get("nonce")
            if nonce is None:
                raise FleetError("the server sent no nonce to sign")
            import nkeys  # type: ignore[import-untyped]

            keys = nkeys.from_seed(bytearray(seed.encode()))
            connect["jwt"] = jwt
            connect["sig"] = base64.b64encode(keys.sign(nonce.encode())).decode()
            keys.wipe()
        elif self.options.user is not None:
            connect["user"], connect["pass"] = self.options.user, self.options.password or ""
        self._send(b"CONNECT " + json.dumps(connect).encode() + _CRLF + b"SUB " + self.inbox.encode() + b".* 1\r\nPING\r\n")
        while True:
            line = self._read_line()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise FleetError(line[4:].strip().strip(b"'").decode(errors="replace"))
            if line.startswith(b"INFO "):
                self._note_servers(json.loads(line[5:]))
            elif line == b"PING":
                self._send(b"PONG\r\n")
        if not self._tls:
            # Non-blocking from here: reading what came costs no switch of the socket's mode
            # (two system calls a read); a send waits for room itself (``_send_parts``).
            sock.setblocking(False)

    def _note_servers(self, info: dict[str, Any]) -> None:
        scheme = "tls" if self._tls else "nats"
        for address in info.get("connect_urls") or []:
            url = f"{scheme}://{address}"
            if url not in self.discovered and url not in self.options.servers:
                self.discovered.append(url)

    def _read_line(self) -> bytes:
        while True:
            end = self._buffer.find(_CRLF, self._pos)
            if end >= 0:
                line = bytes(self._buffer[self._pos : end])
                self._pos = end + 2
                return line
            if len(self._buffer) - self._pos > _MAX_LINE:
                raise FleetError("a protocol line too long")
            self._fill()

    def _fill(self) -> None:
        assert self._sock is not None
        try:
            data = self._sock.recv(1 << 18)
        except (BlockingIOError, ssl.SSLWantReadError):
            raise BlockingIOError from None  # nothing more to read now
        except OSError as exc:  # a timeout too
            raise ConnectionLost(f"connection lost: {exc}") from None
        if not data:
            raise ConnectionLost("the server closed the connection")
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data
        self.received_any = True

    # -- publishing ------------------------------------------------------------------------------
    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def publish(self, messages: Iterable[tuple[str, int, bytes, bytes | bytearray]]) -> None:
        """Send each ``(subject, token, header block, payload)`` at once, in order; their
        acknowledgements come back through ``read``."""
        parts: list[bytes | bytearray] = []
        for subject, token, header, payload in messages:
            parts.append(f"HPUB {subject} {self.inbox}.{token} {len(header)} {len(header) + len(payload)}\r\n".encode())
            parts.append(header)
            if payload:
                parts.append(payload)
            parts.append(_CRLF)
        self._send_parts(parts)

    def _send(self, data: bytes) -> None:
        self._send_parts([data])

    def _send_parts(self, parts: list[bytes | bytearray]) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionLost("not connected")
        try:
            if self._tls:
                sock.sendall(b"".join(parts))
                return
            views = [memoryview(part) for part in parts]
            deadline: float | None = None
            while views:
                try:
                    sent = sock.sendmsg(views[:_IOV_MAX])
                except BlockingIOError:  # the socket's send buffer is full: wait for room, within the timeout
                    if deadline is None:
                        deadline = time.monotonic() + self.timeout
                    _, writable, _ = select.select([], [sock], [], max(deadline - time.monotonic(), 0.0))
                    if not writable:
                        raise TimeoutError("the server takes nothing") from None
                    continue
                deadline = None
                while views and sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                if sent:
                    views[0] = views[0][sent:]
        except OSError as exc:  # a timeout too: part of a command may have left, the connection is unusable
            raise ConnectionLost(f"connection lost: {exc or type(exc).__name__}") from None

    def read(self) -> list[Ack]:
        """What the server has sent so far (never waits): the acknowledgements among it. A
        ``-ERR`` is kept in ``errors``; the server closing the connection is ``ConnectionLost``."""
        return [(token, _ack_error(header, payload)) for token, header, payload in self._read_replies()]

    def request(self, subject: str, payload: bytes = b"") -> tuple[bytes, bytes]:
        """One request (a JetStream API call) answered within the connection's timeout:
        ``(header block, payload)`` of the answer; ``FleetError`` when none comes."""
        self._request_token += 1
        token = self._request_token
        self._send(f"PUB {subject} {self.inbox}.{token} {len(payload)}\r\n".encode() + payload + _CRLF)
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            if self.wait(left):
                for answered, header, body in self._read_replies():
                    if answered == token:
                        return header, body
        raise FleetError(f"no answer to {subject} in {self.timeout:g} s")

    def ensure_stream(self, name: str) -> None:
        """The stream ``name`` as ``connect.ensure_stream`` makes it (subjects ``etw.>``, file
        storage, min(3, cluster size) replicas, a two-minute duplicate window), through the
        JetStream API on this connection; an existing one is used as it is."""
        error = _api_error(*self.request(f"$JS.API.STREAM.INFO.{name}"))
        if error is None:
            return
        if error[0] != _STREAM_NOT_FOUND:
            raise FleetError(f"the stream {name}: {error[1]}")
        for replicas in (3, 2, 1):
            config = {
                "name": name, "subjects": [STREAM_SUBJECTS], "discard": "old", "discard_new_per_subject": False, "max_msgs_per_subject": -1,
                "max_msg_size": -1, "storage": "file", "num_replicas": replicas, "no_ack": False, "duplicate_window": 120_000_000_000,
                "sealed": False, "deny_delete": False, "deny_purge": False, "allow_rollup_hdrs": False, "max_age": 0,
            }  # fmt: skip - what nats-py's StreamConfig sends for connect.ensure_stream's stream
            error = _api_error(*self.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode()))
            if error is None:
                return
            if error[0] == _STREAM_NAME_IN_USE:  # made meanwhile by another host
                return
        assert error is not None
        raise FleetError(f"cannot create the stream {name}: {error[1]}")

    def _read_replies(self) -> list[tuple[int, bytes, bytes]]:
        sock = self._sock
        if sock is None:
            raise ConnectionLost("not connected")
        if self._tls:  # a plain socket stays non-blocking once connected; this one only for the read
            sock.setblocking(False)
            try:
                self._fill_available()
            finally:
                if self._sock is not None:
                    self._sock.settimeout(self.timeout)
        else:
            self._fill_available()
        return self._parse()

    def _fill_available(self) -> None:
        while True:
            try:
                self._fill()
            except BlockingIOError:
                return
            except ConnectionLost:
                if self._pos < len(self._buffer):
                    return  # answer what came before the end first; the next read finds the end
                raise
            if not self._tls and len(self._buffer) - self._pos < (1 << 18):
                return

    def _parse(self) -> list[tuple[int, bytes, bytes]]:
        acks: list[tuple[int, bytes, bytes]] = []
        buffer, pos = self._buffer, self._pos
        while True:
            end = buffer.find(_CRLF, pos)
            if end < 0:
                if len(buffer) - pos > _MAX_LINE:
                    raise ConnectionLost("a protocol line too long")
                break
            line = bytes(buffer[pos:end])
            if line.startswith((b"MSG ", b"HMSG ")):
                fields = line.split()
                headers = line.startswith(b"H")
                try:
                    total = int(fields[-1])
                    header_length = int(fields[-2]) if headers else 0
                except (ValueError, IndexError):
                    raise ConnectionLost(f"a malformed message line {line[:80]!r}") from None
                if end + 2 + total + 2 > len(buffer):
                    break
                body = bytes(buffer[end + 2 : end + 2 + total])
                pos = end + 2 + total + 2
                subject = fields[1]
                if subject.startswith(self._inbox_bytes):
                    try:
                        token = int(subject[len(self._inbox_bytes) :])
                    except ValueError:
                        continue
                    acks.append((token, body[:header_length], body[header_length:]))
                continue
            pos = end + 2
            if line == b"PING":
                self._send(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                self.errors.append(line[4:].strip().strip(b"'").decode(errors="replace"))
                del self.errors[:-8]
            elif line.startswith(b"INFO "):
                try:
                    self._note_servers(json.loads(line[5:]))
                except ValueError:
                    pass
        self._pos = pos
        if pos == len(buffer):
            buffer.clear()
            self._pos = 0
        return acks

    def wait(self, timeout: float, *others: int) -> bool:
        """Wait until the server sent something (or one of ``others`` is readable), at most
        ``timeout`` s; True when the connection has something to read."""
        if self._tls and isinstance(self._sock, ssl.SSLSocket) and self._sock.pending():
            return True  # decrypted already: the socket shows nothing more to read
        fds = [fd for fd in (self.fileno(), *others) if fd >= 0]
        readable, _, _ = select.select(fds, [], [], max(timeout, 0.0))
        return self.fileno() in readable

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None


def _api_error(header: bytes, payload: bytes) -> tuple[int, str] | None:
    """None for a JetStream API answer without an error; else (err_code, text)."""
    status = header.split(b"\r\n", 1)[0].split() if header else []
    if len(status) >= 2 and status[1] != b"200":
        raise FleetError("JetStream does not answer (no meta leader, or not enabled)" if status[1] == b"503" else f"status {status[1]!r}")
    try:
        answer = json.loads(payload)
    except ValueError:
        raise FleetError("an answer that is not JetStream's") from None
    error = answer.get("error") if isinstance(answer, dict) else None
    if not error:
        return None
    return int(error.get("err_code") or error.get("code") or 0), f"{error.get('description', 'error')} ({error.get('err_code', '?')})"


def _ack_error(header: bytes, payload: bytes) -> str | None:
    """None for a stored message's acknowledgement; else what the answer said."""
    if header:
        status = header.split(b"\r\n", 1)[0].split()
        if len(status) >= 2 and status[1].isdigit() and status[1] != b"200":
            code = status[1].decode()
            return "no stream leader answers (503)" if code == "503" else f"status {code}"
    if not payload.startswith(b"{"):
        return "an answer that is not JetStream's"
    if b'"error"' in payload:
        try:
            error = json.loads(payload).get("error") or {}
            return f"{error.get('description', 'error')} ({error.get('err_code', error.get('code', '?'))})"
        except (ValueError, AttributeError):
            return "an error"
    if b'"seq"' not in payload:
        return "an answer that is not JetStream's"
    return None


def _read_creds(text: str) -> tuple[str, str]:
    """The JWT and the seed of a NATS credentials file's text."""
    jwt = seed = None
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "BEGIN NATS USER JWT" in line and index + 1 < len(lines):
            jwt = lines[index + 1].strip()
        elif "BEGIN USER NKEY SEED" in line and index + 1 < len(lines):
            seed = lines[index + 1].strip()
    if not jwt or not seed:
        raise FleetError("the credentials file holds no user JWT and seed")
    return jwt, seed
