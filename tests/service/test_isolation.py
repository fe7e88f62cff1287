"""Sessions are isolated from one another and from other users, and a bad client harms only itself.

* ETW's limits hold through the real service: 8 sessions per provider, 64 sessions in all, each
  refused with its own error class;
* another user can neither steer nor read your session, nor read its files (owner-only);
* malformed and oversized messages close their own connection only, while a well-behaved
  controller goes on working at the same time.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import RealtimeConsumer, ServiceClient, Session, list_sessions
from openetw.ipc.protocol import FRAME_HEADER, MAGIC, MAX_JSON, PROTOCOL_VERSION, encode_frame
from openetw.session import MAX_SESSIONS, MAX_SESSIONS_PER_PROVIDER, TooManySessions, TooManySessionsForProvider
from tests.service.guarantee_helpers import poll_until, refusal
from tests.service.harness import (
    Producer,
    ServiceProcess,
    as_other_user,
    start_service,
)

PROVIDER = "Test.Isolation"


def _stop_all(sessions: list[Session]) -> None:
    for session in sessions:
        try:
            session.stop()
        except Exception:  # noqa: BLE001 - cleaning up after a failed assertion
            pass


# -- limits --------------------------------------------------------------------------------------


def test_the_ninth_session_on_one_provider_is_refused_with_its_own_error(service: ServiceProcess, producers) -> None:
    producer: Producer = producers()
    producer.register(PROVIDER)
    sessions: list[Session] = []
    try:
        for number in range(MAX_SESSIONS_PER_PROVIDER):
            sessions.append(Session.start(f"Eight{number}", mode="realtime", providers=[PROVIDER]))
        assert producer.wait_sessions(PROVIDER, MAX_SESSIONS_PER_PROVIDER) == MAX_SESSIONS_PER_PROVIDER
        with pytest.raises(TooManySessionsForProvider) as refused:
            Session.start("Ninth", mode="realtime", providers=[PROVIDER])
        assert refused.type is TooManySessionsForProvider
        assert len(list_sessions()) == MAX_SESSIONS_PER_PROVIDER, "the refused session left nothing behind"

        with Session.start("Ninth", mode="realtime") as ninth:  # the same limit through EnableTraceEx2
            with pytest.raises(TooManySessionsForProvider) as refused:
                ninth.enable(PROVIDER)
            assert refused.type is TooManySessionsForProvider
            ninth.enable("Test.Isolation.Another")  # other providers are not affected
        assert producer.wait_sessions(PROVIDER, MAX_SESSIONS_PER_PROVIDER) == MAX_SESSIONS_PER_PROVIDER

        sessions.pop(0).stop()
        assert producer.wait_sessions(PROVIDER, MAX_SESSIONS_PER_PROVIDER - 1) == MAX_SESSIONS_PER_PROVIDER - 1
        sessions.append(Session.start("Ninth", mode="realtime", providers=[PROVIDER]))  # room again
        assert producer.wait_sessions(PROVIDER, MAX_SESSIONS_PER_PROVIDER) == MAX_SESSIONS_PER_PROVIDER
    finally:
        _stop_all(sessions)


def test_the_65th_session_is_refused_with_its_own_error(service: ServiceProcess) -> None:
    sessions: list[Session] = []
    try:
        for number in range(MAX_SESSIONS):
            sessions.append(Session.start(f"Slot{number}", mode="realtime"))
        with pytest.raises(TooManySessions, match="64") as refused:
            Session.start("Sixty-fifth", mode="realtime")
        assert refused.type is TooManySessions
        assert len(list_sessions()) == MAX_SESSIONS
        sessions.pop().stop()
        sessions.append(Session.start("Sixty-fifth", mode="realtime"))
    finally:
        _stop_all(sessions)


# -- another user --------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")


@pytest.fixture
def shared_service(service_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServiceProcess, Path]]:
    """A service another user can reach, and a directory that user may enter but not list: only a
    file's own mode keeps that user out of it."""
    base = Path(tempfile.mkdtemp(prefix="openetw-isolation-"))
    socket_path = base / "run" / "control.sock"
    socket_path.parent.mkdir()
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    running = start_service(socket_path)
    traces = base / "traces"
    traces.mkdir()
    try:
        for directory in (base, socket_path.parent, traces):
            os.chmod(directory, 0o711)
        os.chmod(socket_path, 0o666)
        yield running, traces
    finally:
        running.kill()
        shutil.rmtree(base, ignore_errors=True)


def _intrude(session: str, files: list[str]) -> dict[str, Any]:
    """Everything another user might try on ``session`` and its files: what each one met."""
    report: dict[str, Any] = {}
    with ServiceClient(autostart=False) as client:
        attempts = {
            "query": lambda: client.call("query", session=session),
            "flush": lambda: client.call("flush", session=session),
            "update": lambda: client.call("update", session=session, changes={"flush_timer": 5}),
            "enable": lambda: client.call("enable", session=session, provider=PROVIDER, level=5, match_any=0, match_all=0),
            "disable": lambda: client.call("disable", session=session, provider=PROVIDER),
            "capture_state": lambda: client.call("capture_state", session=session, provider=PROVIDER),
            "stop": lambda: client.call("stop_session", session=session),
        }
        for name, attempt in attempts.items():
            report[name] = refusal(attempt)
        report["visible"] = [s["name"] for s in client.call("list")["sessions"]]
    report["attach"] = refusal(lambda: Session.attach(session))
    report["consume"] = refusal(lambda: RealtimeConsumer(session))
    for path in files:
        report[os.path.basename(path)] = refusal(lambda: open(path, "rb").close())  # noqa: B023 - called at once, in the loop
    return report


@needs_root
def test_another_user_cannot_steer_query_or_read_your_session(shared_service: tuple[ServiceProcess, Path], producers) -> None:
    _, traces = shared_service
    producer: Producer = producers()
    producer.register(PROVIDER)
    output = traces / "private.etl"
    with Session.start("Private", output=output, realtime=True, flush_timer=0, providers=[PROVIDER]) as private:
        assert producer.wait_enabled(PROVIDER)
        assert producer.write(PROVIDER, 50) == 50
        private.flush()
        before = private.info()
        info = output.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()

        report = as_other_user(lambda: _intrude("Private", [str(output)]))

        denied = dict.fromkeys(("query", "flush", "update", "enable", "disable", "capture_state", "stop", "attach", "consume"), "AccessDenied")
        assert report == {**denied, "visible": [], "private.etl": "PermissionError"}
        after = private.info()  # untouched: still running, same settings, same rule
        assert after["state"] == before["state"] == "running"
        assert after["flush_timer"] == before["flush_timer"]
        assert after["providers"] == before["providers"]
        assert private.query()["events_written"] == 50
    with open(output, "rb") as handle:  # the owner reads it
        assert handle.read(4)


@needs_root
def test_every_file_of_a_new_file_session_is_its_owners_only(shared_service: tuple[ServiceProcess, Path], producers) -> None:
    """The first file comes from the controller, the next ones from the service: all owner-only."""
    _, traces = shared_service
    producer: Producer = producers()
    producer.register(PROVIDER)
    pattern = traces / "part%d.etl"
    with Session.start("Parts", output=pattern, mode="newfile", max_size=1, flush_timer=0, providers=[PROVIDER]) as parts:
        assert producer.wait_enabled(PROVIDER)
        start = 0
        while not (traces / "part2.etl").exists():
            assert start < 100_000, "two files never appeared"
            producer.write(PROVIDER, 2000, start=start, pad=200)
            parts.query()  # takes what the producer filled
            start += 2000
    files = sorted(traces.glob("part*.etl"))
    assert {stat.S_IMODE(path.stat().st_mode) for path in files} == {0o600}
    report = as_other_user(lambda: {path.name: refusal(lambda: open(path, "rb").close()) for path in files})  # noqa: B023 - called at once, in the loop
    assert report == {path.name: "PermissionError" for path in files}


# -- bad clients ---------------------------------------------------------------------------------


def _frame(json_bytes: bytes, payload: bytes = b"", *, version: int = PROTOCOL_VERSION) -> bytes:
    return FRAME_HEADER.pack(MAGIC, version, len(json_bytes), len(payload)) + json_bytes + payload


BAD_MESSAGES: dict[str, bytes] = {
    "bad magic": b"XYZ" + bytes(9),
    "http": b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
    "next version": _frame(b"{}", version=PROTOCOL_VERSION + 1),
    "oversized json": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, MAX_JSON + 1, 0) + b"{" * 4096,
    "largest length": FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 0xFFFFFFFF, 0xFFFFFFFF),
    "a payload": _frame(b'{"op":"status","id":1}', b"x" * 100),
    "not json": _frame(b"{op: status}"),
    "json list": _frame(b'[{"op":"status"}]'),
    "json string": _frame(b'"status"'),
    "not utf-8": _frame(b'{"op":"\xff"}'),
    "deep nesting": _frame(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "nan": _frame(b'{"op":"status","id":NaN,"fds":NaN}'),
    "unknown op": encode_frame({"op": "format_disk", "id": 1}),
    "op not a string": encode_frame({"op": ["status"], "id": 1}),
    "fds claimed, none sent": encode_frame({"op": "start_session", "id": 1, "fds": 1, "config": {"name": "x", "mode": "file"}}),
    "fds negative": encode_frame({"op": "status", "id": 1, "fds": -1}),
    "fds not a number": encode_frame({"op": "status", "id": 1, "fds": "1"}),
    "fds too many": encode_frame({"op": "status", "id": 1, "fds": 1000}),
    "valid, then garbage": encode_frame({"op": "status", "id": 7}) + b"\x00" * 64,  # may be answered first
    "random bytes": os.urandom(1 << 20),
}


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def _send_and_wait_for_close(sock: socket.socket, data: bytes, fds: list[int] | None = None) -> bytes:
    """Send ``data`` (the service may hang up before it took all of it) and read until it does;
    what the service answered before closing."""
    try:
        if fds:
            sent = socket.send_fds(sock, [data], fds)
            data = data[sent:]
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _open_descriptors(pid: int) -> dict[str, str]:
    """The process's descriptors (number: what it is); gone ones are skipped."""
    found = {}
    for number in os.listdir(f"/proc/{pid}/fd"):
        try:
            found[number] = os.readlink(f"/proc/{pid}/fd/{number}")
        except FileNotFoundError:
            pass
    return found


class SteadyController(threading.Thread):
    """A well-behaved controller: start, query, flush and stop sessions again and again."""

    def __init__(self, directory: Path) -> None:
        super().__init__(name="steady-controller", daemon=True)
        self.directory = directory
        self.finish = threading.Event()
        self.cycles = 0
        self.failures: list[BaseException] = []

    def run(self) -> None:
        try:
            while not self.finish.is_set() or self.cycles < 3:
                output = self.directory / f"steady{self.cycles}.etl"
                with Session.start(f"Steady{self.cycles}", output=output) as session:
                    assert session.query()["events_written"] == 0
                    session.flush()
                assert output.stat().st_size > 0
                self.cycles += 1
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.failures.append(exc)


def test_bad_messages_close_their_own_connection_while_a_controller_keeps_working(service: ServiceProcess, tmp_path: Path) -> None:
    steady = SteadyController(tmp_path)
    bystander = ServiceClient()  # connected before any bad client, used between them
    stalled = _connect(service.socket)  # half a frame, never finished: must hold nobody up
    stalled.sendall(FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 1000, 0) + b'{"op":')
    poll_until(lambda: bystander.call("status")["connections"] == 2, what="both connections to be accepted")
    baseline = _open_descriptors(service.pid)
    steady.start()
    try:
        answers: dict[str, bytes] = {}
        for name, garbage in BAD_MESSAGES.items():
            answers[name] = _send_and_wait_for_close(_connect(service.socket), garbage)
            assert bystander.call("status")["pid"] == service.pid, name
        with _connect(service.socket) as flood:  # descriptors beyond what a frame may carry
            files = [os.open(os.devnull, os.O_RDONLY) for _ in range(32)]
            try:
                _send_and_wait_for_close(flood, encode_frame({"op": "status", "id": 1, "fds": 4}), files)
            finally:
                for fd in files:
                    os.close(fd)
        with _connect(service.socket) as unread:  # asks a lot, reads nothing, then leaves
            unread.sendall(encode_frame({"op": "list", "id": 1}) * 5000)
            time.sleep(0.05)
        with _connect(service.socket) as trickle:  # a good request a byte at a time is answered
            for byte in encode_frame({"op": "status", "id": 9}):
                trickle.send(bytes([byte]))
            trickle.shutdown(socket.SHUT_WR)
            assert b'"id":9' in _send_and_wait_for_close(trickle, b"")
    finally:
        steady.finish.set()
        steady.join(timeout=30)
    stalled.close()
    bystander.close()
    assert steady.failures == [] and steady.cycles >= 3
    assert all(answer == b"" for name, answer in answers.items() if name != "valid, then garbage")
    assert service.process.poll() is None
    # Every bad connection, and every descriptor sent along, is closed in the service.
    def only_the_baseline_is_left() -> bool:
        now = _open_descriptors(service.pid)
        return now.items() <= baseline.items() and len(now) <= len(baseline) - 2  # the bystander's and the stalled one's gone

    poll_until(only_the_baseline_is_left, what="the service to close every connection and descriptor")
    with ServiceClient() as client:
        status = client.call("status")
        assert (status["connections"], status["sessions"]) == (1, 0)


def test_requests_with_bad_values_are_refused_and_the_connection_kept(service: ServiceProcess) -> None:
    refused = {
        "config not an object": {"op": "start_session", "config": "fast"},
        "name not a string": {"op": "start_session", "config": {"name": 7, "mode": "real-time"}},
        "unknown mode": {"op": "start_session", "config": {"name": "x", "mode": "telepathy"}},
        "huge buffer": {"op": "start_session", "config": {"name": "x", "mode": "real-time", "buffer_size_kb": 2**70}},
        "buffer as text": {"op": "start_session", "config": {"name": "x", "mode": "real-time", "buffer_size_kb": "64"}},
        "negative flush": {"op": "start_session", "config": {"name": "x", "mode": "real-time", "flush_timer": -1}},
        "providers not a list": {"op": "start_session", "config": {"name": "x", "mode": "real-time"}, "providers": 5},
        "huge level": {"op": "start_session", "config": {"name": "x", "mode": "real-time"}, "providers": [{"provider": PROVIDER, "level": 2**70}]},
        "negative keyword": {"op": "start_session", "config": {"name": "x", "mode": "real-time"}, "providers": [{"provider": PROVIDER, "match_any": -1}]},
        "session not a string": {"op": "query", "session": ["x"]},
        "no such session": {"op": "stop_session", "session": "nobody's"},
        "registration not a number": {"op": "unregister", "registration": "1"},
    }
    with ServiceClient() as client:
        for name, body in refused.items():
            reply = client.channel.request(body["op"], **{k: v for k, v in body.items() if k != "op"})
            assert reply["ok"] is False, name
            assert "internal error" not in reply["error"]["message"], (name, reply)
        assert client.call("status")["sessions"] == 0  # the same connection, still answered
