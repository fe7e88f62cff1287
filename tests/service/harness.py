"""Real processes for the service, provider and controller tests: a private service per test,
producer processes driven over stdin, and reading what reached a session's file.

Every process started here is killed when its test ends, whatever happened.
"""

from __future__ import annotations

import codecs
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openetw.etl import EtlReader
from openetw.etl.record import EventRecord
from openetw.etl.relog import is_logfile_header_record
from openetw.tdh import decode_all, schema_from_record

PRODUCER_PROGRAM = Path(__file__).with_name("producer_program.py")
START_TIMEOUT = 20.0
ANSWER_TIMEOUT = 30.0  # only a hung child gets near this


@dataclass
class ServiceProcess:
    process: subprocess.Popen[bytes]
    socket: Path
    directory: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM: the service finishes its sessions and exits; returns its status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=15)


def start_service(socket_path: Path) -> ServiceProcess:
    read_end, write_end = os.pipe()
    log = open(socket_path.parent / "service.log", "ab")  # noqa: SIM115 - closed below
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket_path), "--ready-fd", str(write_end)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,),
        )  # fmt: skip
    finally:
        os.close(write_end)
        log.close()
    try:
        ready, _, _ = select.select([read_end], [], [], START_TIMEOUT)
        if not ready or not os.read(read_end, 16).startswith(b"ready"):
            process.kill()
            process.wait()
            raise RuntimeError(f"the service did not start: {(socket_path.parent / 'service.log').read_text()}")
    finally:
        os.close(read_end)
    return ServiceProcess(process, socket_path, socket_path.parent)


@pytest.fixture
def service_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private socket path in OPENETW_SOCKET (no service yet) and no autostart."""
    socket_path = tmp_path / "control.sock"
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    return socket_path


@pytest.fixture
def service(service_env: Path) -> Iterator[ServiceProcess]:
    running = start_service(service_env)
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture
def reachable(service_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServiceProcess, Path]]:
    """A service whose socket another user can reach, and a directory that user owns."""
    base = Path(tempfile.mkdtemp(prefix="openetw-access-"))
    socket_path = base / "run" / "control.sock"
    socket_path.parent.mkdir()
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    running = start_service(socket_path)
    theirs = base / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    try:
        for directory in (base, socket_path.parent):
            os.chmod(directory, 0o711)
        os.chmod(socket_path, 0o666)
        yield running, theirs
    finally:
        running.kill()
        shutil.rmtree(base, ignore_errors=True)


def need_tracefs() -> None:
    if os.geteuid() != 0:
        pytest.skip("kernel sessions need root (tracefs is root's only)")
    from openetw.kernel import find_tracefs

    if find_tracefs() is None:
        result = subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], capture_output=True, check=False)
        if find_tracefs() is None:
            pytest.skip(f"tracefs is not mounted and mounting failed: {result.stderr.decode(errors='replace').strip()}")


@pytest.fixture
def kernel_service(service_env: Path) -> Iterator[ServiceProcess]:
    need_tracefs()
    running = start_service(service_env)
    try:
        yield running
    finally:
        running.kill()
        kill_recorders(running.pid)


def kill_recorders(service_pid: int) -> None:
    """Kernel recorders are children of the service, in their own process groups: a killed service leaves them."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"openetw.service.kernel_recorder" in cmdline and int(stat[1]) in (service_pid, 1):
            try:
                os.kill(int(entry.name), 15)
            except ProcessLookupError:
                pass


class CommandProcess:
    """A child process answering one JSON command per line on its stdin with one JSON line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, bufsize=0,
        )  # fmt: skip
        self.pid = int(self._read()["ready"])

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], ANSWER_TIMEOUT)
        if not ready:
            raise TimeoutError(f"{self.process.args[-1]} did not answer")
        line = self.process.stdout.readline()
        if not line:
            raise EOFError(f"{self.process.args[-1]} exited with {self.process.wait(timeout=5)}")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, cmd: str, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps({"cmd": cmd, **fields}) + "\n").encode())
        answer = self._read()
        if "error" in answer:
            raise AssertionError(f"{cmd} failed: {answer['error']}")
        return answer

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class Producer(CommandProcess):
    """A producer process (``producer_program.py``) answering one command at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__([sys.executable, str(PRODUCER_PROGRAM)], env)

    def register(self, name: str, **fields: Any) -> bool:
        return bool(self.send("register", name=name, **fields)["enabled"])

    def wait_enabled(self, name: str, value: bool = True, timeout: float = 10.0) -> bool:
        return bool(self.send("wait_enabled", name=name, value=value, timeout=timeout)["enabled"])

    def wait_sessions(self, name: str, count: int, timeout: float = 10.0) -> int:
        """Wait until ``count`` sessions enable the provider here (its pools are mapped by then)."""
        return int(self.send("wait_sessions", name=name, count=count, timeout=timeout)["sessions"])

    def write(self, name: str, count: int, **fields: Any) -> int:
        return int(self.send("write", name=name, count=count, **fields)["written"])


@pytest.fixture
def producers() -> Iterator[Any]:
    """``producers()`` starts a producer process; all of them are killed at the end."""
    started: list[Producer] = []

    def start() -> Producer:
        producer = Producer(dict(os.environ))
        started.append(producer)
        return producer

    try:
        yield start
    finally:
        for producer in started:
            producer.kill()


def read_events(path: Path | str) -> list[EventRecord]:
    """The event records of a session file (the logfile header left out), read strictly."""
    with EtlReader(path) as reader:
        records = [r for r in reader if not is_logfile_header_record(r)]
        assert reader.stats.errors == [], reader.stats.errors
        assert reader.stats.unknown_records == 0
    return records


def decoded(records: list[EventRecord]) -> list[tuple[str | None, str | None, dict[str, Any]]]:
    """(provider name, event name, field values) of TraceLogging records, decoded by openetw.tdh."""
    out = []
    for record in records:
        schema = schema_from_record(record)
        assert schema is not None, "not a TraceLogging event"
        out.append((schema.provider_name, schema.event_name, dict(decode_all(schema, record.user_data).items())))
    return out


def indices(path: Path | str, event: str | None = None, pid: int | None = None) -> list[int]:
    """The ``index`` field of the file's events (of one event name / producer when given)."""
    found = []
    for _, name, fields in decoded(read_events(path)):
        if (event is None or name == event) and (pid is None or fields.get("pid") == pid):
            found.append(fields["index"])
    return found


OTHER_UID = 65534  # nobody


def as_other_user(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` in a forked child that dropped every privilege to ``OTHER_UID``; what it
    returned, or ``{"error": ...}``. The child may not read this interpreter's files, so the
    codecs it needs are loaded here first."""
    for codec in ("utf-16-be", "utf-16-le", "utf-8", "cp1252", "ascii", "latin-1"):
        codecs.lookup(codec)  # not "".encode(codec): ascii, latin-1 and utf-8 take a path that imports nothing
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            os.write(write_end, json.dumps(work()).encode())
            status = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")  # type: ignore[no-any-return]
