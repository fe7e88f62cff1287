"""The machine service's logs against other users and a full disk: a flood by ``nobody`` into
Application keeps root's events and the bound; after the flood, an auto-backup rollover and an
import, ``nobody`` can open none of the files in the logs' folder; --text works through the
service; and on a full file system every event the store cannot keep is counted lost."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.errors import EventLogError
from openetw.eventlog import LogStore
from tests.eventlog.test_channels_access import in_child, start, wait_until
from tests.service.harness import OTHER_UID, ServiceProcess, as_other_user

MANIFEST = Path(__file__).resolve().parent / "data" / "shared.man"
FLOOD = 60_000
BOUND = 1 << 20
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0 and os.environ.get("CI") != "true", reason="needs root: the machine service, nobody, a tmpfs")


def generated(directory: Path) -> ModuleType:
    assert main(["mc", str(MANIFEST), "-o", str(directory)]) == 0
    sys.path.insert(0, str(directory))
    try:
        sys.modules.pop("openetw_test_shared", None)
        return importlib.import_module("openetw_test_shared")
    finally:
        sys.path.remove(str(directory))


def write(events: ModuleType, count: int, first: int = 0) -> Callable[[], dict[str, Any]]:
    def work() -> dict[str, Any]:
        with events.provider as provider:
            written = sum(provider.write_application_event(first + n) for n in range(count))
        return {"written": written, "uid": os.getuid()}

    return work


def call(op: str, **body: Any) -> dict[str, Any]:
    from openetw.controller.client import ServiceClient

    with ServiceClient(autostart=False) as client:
        return client.call(op, **body)  # type: ignore[no-any-return]


def written_now(store: LogStore, log: str = "Application") -> int:
    """The log's ``written``; -1 in the instant an auto-backup puts its new database in place."""
    try:
        return store.info(log).written
    except EventLogError:
        return -1


def on_disk(directory: Path, log: str) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.name.startswith(log + ".db"))


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="openetw-eventlog-"))
    os.chmod(base, 0o711)
    monkeypatch.setenv("OPENETW_DATA_DIR", str(base / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(base / "run" / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    (base / "run").mkdir()
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


@ROOT_ONLY
def test_a_flood_by_nobody_keeps_roots_events_and_nobody_reads_no_file(machine: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "install", "--system", str(MANIFEST)]) == 0
    events = generated(machine / "gen")
    service = start(machine / "run" / "control.sock", system=True)
    try:
        os.chmod(machine / "run", 0o711)
        os.chmod(machine / "run" / "control.sock", 0o666)
        logs = machine / "data" / "system" / "logs"
        store = LogStore(logs)
        call("log_set", log="Application", settings={"max_size": BOUND})
        assert in_child(write(events, 50)) == {"written": 50, "uid": 0}
        assert as_other_user(write(events, FLOOD, first=1000)) == {"written": FLOOD, "uid": OTHER_UID}
        wait_until(lambda: store.info("Application").written == FLOOD + 50, "the flood stored or counted")

        info = store.info("Application")
        uids = [event.uid for event in store.query("Application")]
        assert uids.count(0) == 50, (info, len(uids))  # root's events kept
        share = info.writers[str(OTHER_UID)]
        assert share["overwritten"] == FLOOD - uids.count(OTHER_UID) > 0 and share["refused"] == 0
        assert on_disk(logs, "Application") <= BOUND * 1.1
        capsys.readouterr()
        assert main(["log", "get", "Application", "--info", "--json", "--logs-dir", str(logs)]) == 0
        assert json.loads(capsys.readouterr().out)["writers"][str(OTHER_UID)] == share

        def search() -> dict[str, Any]:  # --text through the service, as one who may not read the files
            from openetw.errors import OpenEtwError

            answers: dict[str, Any] = {}
            found = call("log_query", log="Application", text="event", count=5, reverse=True)["events"]
            answers["found"] = [(e["uid"], e["message"]) for e in found]
            try:
                call("log_query", log="Application", text="name:value")
            except OpenEtwError as exc:
                answers["bad"] = f"{type(exc).__name__}: {exc}"
            return answers

        wait_until(lambda: store.pending("Application") == 0, "rendered")
        answers = as_other_user(search)
        assert answers["found"] == [[OTHER_UID, f"Application event {1000 + FLOOD - 1 - n}"] for n in range(5)]
        assert answers["bad"].startswith("InvalidArgument: not a text query")

        call("log_set", log="Application", settings={"retention": "autobackup", "max_size": 256 << 10})
        assert in_child(write(events, 6000)) == {"written": 6000, "uid": 0}
        wait_until(lambda: written_now(store) == FLOOD + 6050, "the rollover stored")
        assert len(store.archives("Application")) >= 2, (store.info("Application"), on_disk(logs, "Application"))
        exported = machine / "exported.evtx"
        assert main(["log", "export", "Application", str(exported), "--logs-dir", str(logs)]) == 0
        assert main(["log", "import", str(exported), "--log", "Imported"]) == 0
        capsys.readouterr()
        assert store.info("Imported").records > 0

        files = sorted(p for p in logs.iterdir())
        assert {p.name.split(".db")[0] for p in files} >= {"Application", "System", "Security", "Imported"}
        assert any(p.name.endswith("-wal") for p in files) and any(p.name.startswith("Archive-") for p in files)
        assert [p.name for p in files if p.stat().st_mode & 0o077] == []

        def walk() -> dict[str, Any]:
            opened = []
            for path in files:
                try:
                    os.close(os.open(path, os.O_RDONLY))
                    opened.append(path.name)
                except PermissionError:
                    pass
            return {"opened": opened, "listed": len(os.listdir(logs))}

        assert as_other_user(walk) == {"opened": [], "listed": len(files)}
    finally:
        service.kill()


@pytest.fixture
def full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted (by this test, unmounted by it) as the service's data directory."""
    mount = tmp_path / "data"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs: {done.stderr}")
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    monkeypatch.setenv("OPENETW_DATA_DIR", str(mount))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@ROOT_ONLY
def test_on_a_full_disk_every_event_is_stored_or_counted_lost(full_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "install", str(MANIFEST)]) == 0
    events = generated(full_disk.parent / "gen")
    service: ServiceProcess = start(full_disk.parent / "control.sock", system=False)
    try:
        store = LogStore(full_disk / "logs")
        assert in_child(write(events, 10)) == {"written": 10, "uid": 0}
        wait_until(lambda: store.info("Application").records == 10, "the first events stored")
        filler = full_disk / "filler"
        with open(filler, "wb") as out:  # the file system full but for a little
            try:
                while True:
                    out.write(b"\0" * (64 << 10))
                    out.flush()
            except OSError:
                pass
        written = 20_000
        assert in_child(write(events, written, first=10)) == {"written": written, "uid": 0}
        wait_until(lambda: call("log_info", log="Application")["info"]["written"] == written + 10, "every event stored or counted")
        info = call("log_info", log="Application")["info"]
        assert info["lost"] > 0 and info["refused"] == 0 and info["stored"] + info["lost"] == written + 10
        assert info["stored"] >= info["records"] >= 10
        assert "counted lost" in (full_disk.parent / "service.log").read_text()
        direct = store.info("Application")  # what `log get --info` reads from the files: the same books
        assert (direct.written, direct.lost, direct.stored) == (info["written"], info["lost"], info["stored"])

        filler.unlink()  # room again: the books of what was lost are written with the next events
        assert in_child(write(events, 1, first=99_999)) == {"written": 1, "uid": 0}
        wait_until(lambda: store.info("Application").written == written + 11, "the books written")
        books = store.info("Application")
        assert (books.lost, books.stored) == (info["lost"], info["stored"] + 1)
        assert "stores again" in (full_disk.parent / "service.log").read_text()
    finally:
        service.kill()


def test_a_damaged_log_is_set_aside_when_the_service_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    assert main(["manifest", "install", str(MANIFEST)]) == 0
    events = generated(tmp_path / "gen")
    logs = tmp_path / "data" / "logs"
    store = LogStore(logs)
    store.create("Application")
    size = (logs / "Application.db").stat().st_size
    with open(logs / "Application.db", "r+b") as database:  # half overwritten
        database.write(b"\xa5" * (size // 2))
    service = start(tmp_path / "control.sock", system=False)
    try:
        aside = [p.name for p in logs.iterdir() if p.name.startswith("Application.db.damaged-")]
        assert len(aside) == 1
        assert "is damaged" in (tmp_path / "service.log").read_text()
        assert in_child(write(events, 3))["written"] == 3
        wait_until(lambda: written_now(store) == 3 and store.info("Application").records == 3, "stored in the new log")
    finally:
        service.kill()
