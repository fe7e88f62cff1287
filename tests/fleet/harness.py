"""The fleet tests' kit: a JetStream cluster per test (``openetw.testing.nats_cluster``), hosts
(trace services with their own host names), paced producers, the collector as a process.

Every process started here is killed when its test ends. Without ``nats-server`` the tests
skip, except under ``CI=true`` (``make system-packages`` installs it, as root).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.testing.nats_cluster import NatsCluster, find_nats_server


def need_nats_server() -> None:
    if find_nats_server() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("nats-server is missing under CI (make system-packages installs it)")
        pytest.skip("nats-server is not installed (apt-get install nats-server, or make system-packages as root)")
    pytest.importorskip("nats", reason="nats-py is not installed (pip install 'openetw[stream]')")


def make_cluster(directory: Path, size: int = 3, accounts: str | None = None) -> NatsCluster:
    need_nats_server()
    return NatsCluster(directory, size, accounts)


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    cluster = make_cluster(tmp_path / "nats", 3)
    try:
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.kill()


# -- hosts: trace services with their own host names ------------------------------------------------
PACED_PRODUCER = Path(__file__).with_name("paced_producer.py")


class Host:
    """One trace service standing for one machine of the fleet (``--host-name``)."""

    def __init__(self, directory: Path, name: str) -> None:
        import select
        import sys

        self.name = name
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.socket = directory / "control.sock"
        read_end, write_end = os.pipe()
        with open(directory / "service.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "openetw", "service", "run", "--socket", str(self.socket), "--ready-fd", str(write_end),
                 "--host-name", name, "--no-autologger"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,),
            )  # fmt: skip
        os.close(write_end)
        try:
            ready, _, _ = select.select([read_end], [], [], 20)
            if not ready or not os.read(read_end, 16).startswith(b"ready"):
                self.process.kill()
                raise RuntimeError(f"the service of {name} did not start: {(directory / 'service.log').read_text()}")
        finally:
            os.close(read_end)

    def env(self) -> dict[str, str]:
        return {**os.environ, "OPENETW_SOCKET": str(self.socket), "OPENETW_NO_AUTOSTART": "1"}

    def start_session(self, name: str, provider: str, servers: str, **stream: Any) -> Any:
        from openetw.controller import Session

        return Session.start(name, providers=[provider], socket=self.socket, autostart=False, stream=servers, flush_timer=1, **stream)

    def producer(self, provider: str, count: int, rate: float, pad: int = 0) -> subprocess.Popen[bytes]:
        import sys

        return subprocess.Popen([sys.executable, str(PACED_PRODUCER), provider.lstrip("*"), str(count), str(rate), str(pad)],
                                stdout=subprocess.PIPE, env=self.env())  # fmt: skip

    def log(self) -> str:
        return (self.directory / "service.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def written_by(process: subprocess.Popen[bytes], timeout: float = 120) -> int:
    import json

    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out
    return int(json.loads(out.decode().strip().splitlines()[-1])["written"])


class CollectorProcess:
    """``openetw collect`` in a process of its own."""

    def __init__(self, servers: str, directory: Path, *extra: str) -> None:
        import sys

        self.directory = directory
        self.log_path = directory.parent / f"{directory.name}-collector.log"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "openetw", "collect", servers, "-o", str(directory), "--json", *extra],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> dict[str, Any]:
        import json

        if self.process.poll() is None:
            self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        assert self.process.returncode == 0, self.log_path.read_text()
        return dict(json.loads(out))


def collected(directory: Path) -> dict[str, Any]:
    from openetw.fleet.status import status_of_directory

    try:
        return status_of_directory(directory)
    except Exception:  # noqa: BLE001 - no books yet
        return {"hosts": {}, "sessions": []}


def wait_until_ended(directory: Path, sessions: int, timeout: float = 60.0) -> dict[str, Any]:
    """The collector's books once ``sessions`` sessions are complete there: their end message in,
    and every sequence number either collected or counted lost by its host (a buffer delivered to
    a collector that was killed comes again only after the consumer's acknowledgement wait)."""
    deadline = time.monotonic() + timeout
    report = collected(directory)
    while time.monotonic() < deadline:
        report = collected(directory)
        if sum(1 for s in report["sessions"] if s["ended"] and s["gaps"] <= s["buffers_lost"]) >= sessions:
            return report
        time.sleep(0.3)
    raise AssertionError(f"not {sessions} sessions complete: {report}")


def events_in(directory: Path, host: str) -> list[tuple[int, int]]:
    """(pid, index) of every Tick event in a host's collected .etl files, read by openetw."""
    from openetw.etl import EtlReader
    from openetw.etl.relog import is_logfile_header_record
    from openetw.tdh import decode_all, schema_from_record

    found = []
    for path in sorted((directory / host).rglob("*.etl")):
        with EtlReader(path) as reader:
            for record in reader:
                if is_logfile_header_record(record):
                    continue
                schema = schema_from_record(record)
                if schema is None or schema.event_name != "Tick":
                    continue
                values = decode_all(schema, record.user_data)
                found.append((int(values["pid"]), int(values["index"])))
            assert reader.stats.errors == [], reader.stats.errors
    return found


def dissect_count(path: Path) -> int:
    """Records dissect.etl reads in one collected file (the logfile header record left out)."""
    from dissect.etl.etl import ETL

    with open(path, "rb") as stream:
        return sum(1 for _ in ETL(stream)) - 1


# -- messages published directly, as a host would (or a hostile one) -------------------------------
SYNTHETIC_START = 1_764_000_000_000_000


def synthetic_session(
    host: str, session: str, buffers: int, *, start: int = SYNTHETIC_START, claimed: str | None = None, nonce: str | None = None,
) -> list[tuple[str, dict[str, str], bytes]]:  # fmt: skip
    """A session's messages: its header buffer, ``buffers`` buffers of 5 records, its end
    (``claimed``: the host its headers name, when it is not the one publishing)."""
    import secrets

    from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER, message_headers
    from tests.conftest import corpus_path

    nonce = nonce if nonce is not None else secrets.token_hex(8)
    data = corpus_path("etl", "perfview", "primitive-types.etl").read_bytes()
    header, buffer = data[:8192], data[8192:16384]
    messages = []
    for sequence in range(buffers + 2):
        kind = KIND_HEADER if sequence == 0 else KIND_END if sequence == buffers + 1 else KIND_BUFFER
        payload = header if kind == KIND_HEADER else b"" if kind == KIND_END else buffer
        headers = message_headers(host=claimed or host, session=session, start=start, sequence=sequence, kind=kind, events=5,
                                  events_lost=0, buffers_lost=0, nonce=nonce)  # fmt: skip
        messages.append((f"etw.{host}.{session}", headers, payload))
    return messages
