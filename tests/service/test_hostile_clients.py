"""Clients that attack the control socket: the service stays up, its memory stays bounded and a
session recording meanwhile (the witness) counts every event exactly."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.controller import ServiceClient, Session
from openetw.ipc.protocol import FRAME_HEADER, MAGIC, PROTOCOL_VERSION
from openetw.service.connection import MAX_PENDING_REPLY_BYTES
from tests.service.harness import Producer, ServiceProcess, indices

WITNESS = "Test.Witness"
OPS = ["query", "list", "status", "providers", "enable", "disable", "update", "flush", "register", "unregister",
       "pool_closed", "flushed", "start_session", "stop_session", "capture_state", "realtime", "kernel_stats"]  # fmt: skip


def _frame(json_bytes: bytes, payload_length: int = 0, *, version: int = PROTOCOL_VERSION, json_length: int | None = None) -> bytes:
    length = len(json_bytes) if json_length is None else json_length
    return FRAME_HEADER.pack(MAGIC, version, length, payload_length) + json_bytes


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(path))
    return sock


def _drain_until_closed(sock: socket.socket, limit: float = 5.0) -> bool:
    """Whether the service closed the connection within ``limit`` seconds (what it sent is read)."""
    deadline = time.monotonic() + limit
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(1 << 16):
                return True
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


# Values a peer may put anywhere: JSON's own, numbers JSON cannot hold, huge and deep ones.
_NASTY_NUMBERS = st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" * 400, "-" + "9" * 30, "1.5", "-1", "0"])
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70), st.text(max_size=30),
    st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip
_VALUES = st.recursive(_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_FIELD = st.sampled_from(["id", "session", "provider", "name", "classic", "registration", "pool_id", "token", "config",
                          "changes", "providers", "level", "match_any", "filters", "stats", "events", "fds", "error"])  # fmt: skip


@st.composite
def hostile_frames(draw: st.DrawFn) -> bytes:
    """One connection's worth of bytes: frames with fields of any type, numbers JSON cannot hold,
    lying lengths, truncation and garbage."""
    body: dict[str, object] = {"op": draw(st.sampled_from(OPS) | st.text(max_size=10))}
    for key in draw(st.lists(_FIELD, max_size=5, unique=True)):
        body[key] = draw(_VALUES)
    text = json.dumps(body, allow_nan=True)
    if draw(st.booleans()):  # a raw number where JSON would not put one
        field = draw(st.sampled_from(["id", "registration", "pool_id", "token", "level", "session"]))
        text = text[:-1] + ("," if len(body) else "") + f'"{field}":{draw(_NASTY_NUMBERS)}' + "}"
    data = text.encode()
    kind = draw(st.sampled_from(["whole", "whole", "truncated", "lying-length", "payload", "version", "garbage", "pipelined"]))
    if kind == "truncated":
        return _frame(data)[: draw(st.integers(0, len(data) + FRAME_HEADER.size - 1))]
    if kind == "lying-length":
        return _frame(data, json_length=draw(st.integers(0, 1 << 32 - 1)))
    if kind == "payload":
        return _frame(data, draw(st.integers(1, 1 << 32 - 1)))
    if kind == "version":
        return _frame(data, version=draw(st.integers(0, 255)))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=64))
    if kind == "pipelined":
        return _frame(data) * draw(st.integers(2, 50))
    return _frame(data)


def test_a_protocol_fuzz_leaves_the_service_up_bounded_and_the_witness_exact(service: ServiceProcess, producers, tmp_path: Path) -> None:
    output = tmp_path / "witness.etl"
    producer: Producer = producers()
    producer.register(WITNESS)
    written = 0
    with Session.start("Witness", output=output, providers=[WITNESS]) as witness:
        assert producer.wait_enabled(WITNESS)
        written += producer.write(WITNESS, 500)
        rss_before = _rss_kb(service.pid)

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(hostile_frames(), st.booleans())
        def attack(data: bytes, hang_up: bool) -> None:
            sock = _connect(service.socket)
            try:
                try:
                    sock.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                if hang_up:
                    sock.shutdown(socket.SHUT_WR)
            finally:
                sock.close()
            assert service.process.poll() is None, data[:200]

        attack()
        written += producer.write(WITNESS, 500, start=500)
        with ServiceClient() as client:  # the service still answers
            assert client.call("status")["sessions"] >= 1
        assert service.process.poll() is None
        assert _rss_kb(service.pid) - rss_before < 64 * 1024
    stats = witness.query()
    assert written == 1000
    assert stats["events_written"] == 1000 and stats["events_lost"] == 0
    assert sorted(indices(output)) == list(range(1000))


@pytest.mark.parametrize("raw_id", ["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1" * 100, "[1]", "{}", "true"])
def test_an_id_no_reply_could_carry_closes_that_connection_only(service: ServiceProcess, tmp_path: Path, raw_id: str) -> None:
    with Session.start("Bystander", output=tmp_path / "b.etl") as bystander:
        sock = _connect(service.socket)
        sock.sendall(_frame(f'{{"op":"status","id":{raw_id}}}'.encode()))
        assert _drain_until_closed(sock)
        sock.close()
        assert service.process.poll() is None
        assert bystander.query()["events_written"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"op": "query", "id": 7, "session": ["x"]},
        {"op": "enable", "id": 7, "session": "Bystander", "provider": "P", "level": -1},
        {"op": "unregister", "id": 7, "registration": "one"},
        {"op": "start_session", "id": 7, "config": {"name": "S", "buffer_size_kb": 1 << 80}},
        {"op": "query", "id": 7, "session": "S", "deep": [[[[[[[[[[[1]]]]]]]]]]]},
    ],
)
def test_a_request_of_the_wrong_shape_is_answered_with_an_error(service: ServiceProcess, tmp_path: Path, body: dict) -> None:
    with ServiceClient() as client:
        reply = client.channel.request(body.pop("op"), **{k: v for k, v in body.items() if k != "id"})
        assert reply["ok"] is False and reply["error"]["type"] == "InvalidRequest", reply
        assert client.call("status")["pid"] == service.pid  # the connection goes on


def test_a_client_that_pipelines_and_never_reads_is_dropped_at_the_bound(service: ServiceProcess) -> None:
    rss_before = _rss_kb(service.pid)
    sock = _connect(service.socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    # Each request's error reply names the 60 KB session it did not find.
    request = _frame(json.dumps({"op": "query", "id": 1, "session": "s" * 60000}).encode())
    sent = 0
    sock.settimeout(5)
    try:
        while sent < 4 * MAX_PENDING_REPLY_BYTES:
            sock.sendall(request)
            sent += len(request)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass
    assert sent < 4 * MAX_PENDING_REPLY_BYTES, "the service kept a client that never reads"
    sock.close()
    assert service.process.poll() is None
    assert _rss_kb(service.pid) - rss_before < 4 * MAX_PENDING_REPLY_BYTES // 1024 + 32 * 1024
    with ServiceClient() as client:
        assert client.call("status")["pid"] == service.pid
