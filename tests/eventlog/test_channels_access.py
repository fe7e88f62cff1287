"""Channels against a running service: an Analytic channel enabled and disabled, and, as
``nobody`` against the machine service, who may read and write which log."""

from __future__ import annotations

import importlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.eventlog import LogStore
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "data" / "channels.man"
OPERATIONAL = "OpenEtw-Test-Channels/Operational"
ANALYTIC = "OpenEtw-Test-Channels/Analytic"


def start(socket_path: Path, *, system: bool) -> ServiceProcess:
    read_end, write_end = os.pipe()
    log = open(socket_path.parent / "service.log", "ab")  # noqa: SIM115 - closed below
    command = [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket_path), "--ready-fd", str(write_end)]
    process = subprocess.Popen(command + (["--system"] if system else []), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               pass_fds=(write_end,))  # fmt: skip
    os.close(write_end)
    log.close()
    ready, _, _ = select.select([read_end], [], [], 20)
    started = bool(ready) and os.read(read_end, 16).startswith(b"ready")
    os.close(read_end)
    if not started:
        process.kill()
        raise RuntimeError((socket_path.parent / "service.log").read_text())
    return ServiceProcess(process, socket_path, socket_path.parent)


def generated(directory: Path) -> ModuleType:
    assert main(["mc", str(MANIFEST), "-o", str(directory)]) == 0
    sys.path.insert(0, str(directory))
    try:
        sys.modules.pop("openetw_test_channels", None)
        return importlib.import_module("openetw_test_channels")
    finally:
        sys.path.remove(str(directory))


def in_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` in a forked child (root), as ``as_other_user`` runs it as nobody."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            os.write(write_end, json.dumps(work()).encode())
        except BaseException as exc:  # noqa: BLE001
            os.write(write_end, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data or b"{}")  # type: ignore[no-any-return]


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    yield tmp_path


def test_an_analytic_channel_listens_only_while_enabled_and_enabling_clears_it(private: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "install", str(MANIFEST)]) == 0
    events = generated(private / "gen")
    capsys.readouterr()
    service = start(private / "control.sock", system=False)
    try:
        store = LogStore(private / "data" / "logs")
        assert not store.config(ANALYTIC).enabled and store.config(OPERATIONAL).enabled
        provider = events.provider
        with provider:
            assert provider.operational_event_enabled and not provider.analytic_event_enabled
            assert provider.write_analytic_event(1) is False  # disabled: the provider sees it
            assert provider.write_operational_event(1)
        wait_until(lambda: store.info(OPERATIONAL).records == 1, "the operational event is stored")
        assert store.info(ANALYTIC).written == 0

        assert main(["log", "set", ANALYTIC, "--enabled", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["enabled"] is True
        with provider:
            wait_until(lambda: provider.analytic_event_enabled, "the provider sees the analytic channel enabled")
            assert all(provider.write_analytic_event(n) for n in range(2, 6))
        wait_until(lambda: store.info(ANALYTIC).records == 4 and store.pending(ANALYTIC) == 0, "the analytic events are stored and rendered")
        assert [e.message for e in store.query(ANALYTIC)] == [f"Analytic event {n}" for n in range(2, 6)]
        sessions = json.loads(main(["session", "list", "--json"]) == 0 and capsys.readouterr().out)
        assert {"EventLog-Admin", "EventLog-Operational", f"EventLog-{ANALYTIC}"} <= {s["name"] for s in sessions}

        assert main(["log", "set", ANALYTIC, "--disabled"]) == 0
        with provider:
            wait_until(lambda: not provider.analytic_event_enabled, "the provider sees the analytic channel disabled")
            assert provider.write_analytic_event(6) is False
        assert main(["log", "set", ANALYTIC, "--enabled"]) == 0  # enabling clears it
        capsys.readouterr()
        info = store.info(ANALYTIC)
        assert (info.records, info.written, info.stored) == (0, 4, 4)
    finally:
        service.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the machine service and become nobody")
def test_nobody_against_the_machine_service(monkeypatch: pytest.MonkeyPatch) -> None:
    base = Path(tempfile.mkdtemp(prefix="openetw-eventlog-"))
    os.chmod(base, 0o711)
    monkeypatch.setenv("OPENETW_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(base / "run" / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    (base / "run").mkdir()
    assert main(["manifest", "install", "--system", str(MANIFEST)]) == 0
    events = generated(base / "gen")
    service = start(base / "run" / "control.sock", system=True)
    try:
        os.chmod(base / "run", 0o711)
        os.chmod(base / "run" / "control.sock", 0o666)
        logs = base / "data" / "system" / "logs"
        store = LogStore(logs)
        assert {"System", "Security", "Application", OPERATIONAL} <= set(store.names())

        def write(count: int) -> Callable[[], dict[str, Any]]:
            def work() -> dict[str, Any]:
                with events.provider as provider:
                    system = [provider.write_system_event(n) for n in range(count)]
                    operational = [provider.write_operational_event(n) for n in range(count)]
                return {"system": system, "operational": operational, "uid": os.getuid()}

            return work

        assert as_other_user(write(5)) == {"system": [True] * 5, "operational": [True] * 5, "uid": OTHER_UID}
        assert in_child(write(2))["uid"] == 0
        wait_until(lambda: store.info(OPERATIONAL).records == 7 and store.info("System").records == 2 and store.pending(OPERATIONAL) == 0,
                   "events stored and rendered")
        system = store.info("System")
        assert (system.records, system.refused, system.written) == (2, 5, 7)  # nobody's 5 refused, root's 2 stored
        assert {e.uid for e in store.query("System")} == {0}

        def read() -> dict[str, Any]:
            from openetw.controller.client import ServiceClient
            from openetw.errors import OpenEtwError

            answers: dict[str, Any] = {}
            with ServiceClient(autostart=False) as client:
                for log in ("System", "Security", OPERATIONAL):
                    try:
                        reply = client.call("log_query", log=log)
                        answers[log] = [(e["uid"], e["message"]) for e in reply["events"]]
                    except OpenEtwError as exc:
                        answers[log] = f"{type(exc).__name__}: {exc}"
            try:
                LogStore(logs).info("System")
                answers["direct"] = "read"
            except Exception as exc:  # noqa: BLE001
                answers["direct"] = type(exc).__name__
            return answers

        answers = as_other_user(read)
        assert answers["System"].startswith("AccessDenied") and "may not read the log 'System'" in answers["System"]
        assert answers["Security"].startswith("AccessDenied")
        assert answers[OPERATIONAL] == [[OTHER_UID, f"Operational event {n}"] for n in range(5)]  # its own, not root's
        assert answers["direct"] == "EventLogError"
    finally:
        service.kill()
        subprocess.run(["rm", "-rf", str(base)], check=False)
