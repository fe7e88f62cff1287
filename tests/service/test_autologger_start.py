"""Sessions from an autologger file start with the service, their files opened as the file's owner."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.controller import ServiceClient, Session
from openetw.errors import AccessDenied
from openetw.ipc.paths import user_socket
from openetw.provider import TraceLoggingProvider
from openetw.service.autologger import default_autologger, read_autologger, start_autologger
from openetw.service.run import run_service as serve
from openetw.service.server import TraceService
from openetw.session import InvalidSessionConfig, LogMode
from tests.service.harness import START_TIMEOUT, ServiceProcess, indices, read_events

PROVIDER = "Test.Autologger"
OTHER_UID = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")

CONFIG = f"""
[[session]]
name = "AutoFile"
mode = "sequential-file"
file = "auto.etl"            # relative: next to this file
flush_timer = 1
[[session.provider]]
name = "{PROVIDER}"
level = "verbose"

[[session]]
name = "AutoLive"
mode = "real-time"
[[session.provider]]
name = "{PROVIDER}"

[[session]]
name = "Nowhere"
mode = "sequential-file"
file = "missing-directory/never.etl"
"""


def run_service(socket_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes] | int:
    """``openetw service run`` with ``args``: the running process once it is ready, or its exit status."""
    read_end, write_end = os.pipe()
    log = open(socket_path.parent / "service.log", "ab")  # noqa: SIM115 - closed below
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "openetw", "service", "run", *args, "--ready-fd", str(write_end)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,), env=env,
        )  # fmt: skip
    finally:
        os.close(write_end)
        log.close()
    try:
        ready, _, _ = select.select([read_end], [], [], START_TIMEOUT)
        if ready and os.read(read_end, 16).startswith(b"ready"):
            return process
    finally:
        os.close(read_end)
    try:
        return process.wait(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Services a test started; each is killed at the end."""
    running: list[subprocess.Popen[bytes]] = []
    try:
        yield running
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def start(started: list[subprocess.Popen[bytes]], socket_path: Path, config: Path) -> ServiceProcess:
    """A service on ``socket_path`` with the sessions of ``config``, ready."""
    process = run_service(socket_path, "--socket", str(socket_path), "--autologger", str(config))
    assert not isinstance(process, int), (socket_path.parent / "service.log").read_text()
    started.append(process)
    return ServiceProcess(process, socket_path, socket_path.parent)


def write_config(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def status() -> dict:
    with ServiceClient(autostart=False) as client:
        return client.call("status")


def test_the_user_services_default_file_starts_its_sessions_before_anyone_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    socket_path = user_socket()
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))  # for the clients here
    socket_path.parent.mkdir(parents=True, mode=0o700)
    config = tmp_path / "config" / "openetw" / "autologger.toml"
    config.parent.mkdir(parents=True)
    write_config(config, CONFIG)
    process = run_service(socket_path, "--user")  # no --autologger: the default file
    assert not isinstance(process, int), (socket_path.parent / "service.log").read_text()
    started.append(process)
    report = status()["autologger"]
    assert report["file"] == str(config)
    assert report["started"] == ["AutoFile", "AutoLive"]
    assert list(report["failed"]) == ["Nowhere"]  # its directory is missing; the others go on
    with TraceLoggingProvider(PROVIDER) as provider:
        assert provider.enabled  # at once: the sessions were there first
        assert wait_for(lambda: len(provider.enable_state.sessions) == 2)
        assert sum(provider.write("Tick", level=4, keyword=1, index=i) for i in range(25)) == 25
        session = Session.attach("AutoFile")
        assert session.flush()["events_written"] == 25
    info = session.info()
    assert info["file_name"] == str(config.parent / "auto.etl")  # relative to the file
    assert info["owner_uid"] == os.geteuid()
    assert ServiceProcess(process, socket_path, socket_path.parent).stop() == 0  # sessions stopped, files finished
    assert sorted(indices(config.parent / "auto.etl")) == list(range(25))


def test_a_file_others_may_write_stops_the_service_it_was_given_to(service_env: Path, tmp_path: Path, capsys) -> None:
    config = write_config(tmp_path / "autologger.toml", CONFIG, 0o666)
    assert main(["service", "run", "--socket", str(service_env), "--autologger", str(config)]) == 1
    assert "is writable by others (mode 666)" in capsys.readouterr().err
    assert not (tmp_path / "auto.etl").exists()
    assert not service_env.exists()  # nothing left listening


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o620])
def test_a_file_its_group_or_everyone_may_write_is_refused(service_env: Path, tmp_path: Path, mode: int, capsys) -> None:
    config = write_config(tmp_path / "autologger.toml", CONFIG, mode)
    assert serve(service_env, autologger=config, autologger_required=True) == 1  # refused before serving
    assert "writable by others" in capsys.readouterr().err
    assert not (tmp_path / "auto.etl").exists()
    assert not service_env.exists()


def test_a_file_in_a_directory_others_may_write_is_refused(service_env: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    config = write_config(shared / "autologger.toml", CONFIG)
    os.chmod(shared, 0o777)
    with pytest.raises(AccessDenied, match="writable by others"):
        read_autologger(config)
    os.chmod(shared, 0o1777)  # sticky: nobody replaces another's file
    assert [c.name for c in read_autologger(config).sessions] == ["AutoFile", "AutoLive", "Nowhere"]


def test_a_missing_or_broken_file_named_on_the_command_line_stops_the_service(service_env: Path, tmp_path: Path, capsys) -> None:
    assert serve(service_env, autologger=tmp_path / "none.toml", autologger_required=True) == 1
    broken = write_config(tmp_path / "broken.toml", '[[session]]\nname = "X"\nmdoe = "real-time"\n')
    assert serve(service_env, autologger=broken, autologger_required=True) == 1
    log = capsys.readouterr().err
    assert "cannot read it" in log and "unknown keys mdoe" in log


def test_reading_anchors_relative_files_and_checks_whose_file_it_is(tmp_path: Path) -> None:
    config = write_config(tmp_path / "autologger.toml", CONFIG)
    loaded = read_autologger(config)
    assert loaded.path == config
    assert loaded.owner.uid == os.geteuid()
    file_session = loaded.sessions[0]
    assert file_session.mode is LogMode.SEQUENTIAL_FILE and file_session.file_name == str(tmp_path / "auto.etl")
    assert loaded.sessions[1].file_name is None
    with pytest.raises(AccessDenied, match="belongs to uid"):
        read_autologger(config, service_euid=os.geteuid() + 4242)
    with pytest.raises(InvalidSessionConfig):
        read_autologger(write_config(tmp_path / "bad.toml", "[[session]]\nmode = 'real-time'\n"))


def test_the_default_file_is_read_only_by_a_service_on_its_standard_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    standard = user_socket()
    assert default_autologger(standard, system=False) is None  # no file yet
    config = tmp_path / "config" / "openetw" / "autologger.toml"
    config.parent.mkdir(parents=True)
    write_config(config, CONFIG)
    assert default_autologger(standard, system=False) == config
    assert default_autologger(tmp_path / "private.sock", system=False) is None


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    """A directory outside pytest's (which only root may enter), for files another user makes."""
    base = Path(tempfile.mkdtemp(prefix="openetw-autologger-"))
    os.chmod(base, 0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@as_root
def test_files_are_created_with_the_identity_of_the_files_owner(service_env: Path, started, elsewhere: Path) -> None:
    theirs = elsewhere / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, OTHER_UID)
    ours = elsewhere / "ours"
    ours.mkdir(mode=0o755)  # root's: the other user may not create files here
    config = write_config(
        elsewhere / "autologger.toml",
        f"""
[[session]]
name = "Theirs"
mode = "sequential-file"
file = "{theirs / 'trace.etl'}"
[[session.provider]]
name = "{PROVIDER}"

[[session]]
name = "Parts"
mode = "new-file"
file = "{theirs / 'part%d.etl'}"
max_file_mb = 1
flush_timer = 0
[[session.provider]]
name = "{PROVIDER}"

[[session]]
name = "NotTheirs"
mode = "sequential-file"
file = "{ours / 'trace.etl'}"
""",
    )
    os.chown(config, OTHER_UID, OTHER_UID)
    running = start(started, service_env, config)
    report = status()["autologger"]
    assert report["started"] == ["Theirs", "Parts"]
    assert "Permission denied" in report["failed"]["NotTheirs"]  # root could have; the owner may not
    assert not (ours / "trace.etl").exists()
    assert Session.attach("Theirs").info()["owner_uid"] == OTHER_UID
    total = 600
    with TraceLoggingProvider(PROVIDER) as provider:
        assert wait_for(lambda: len(provider.enable_state.sessions) == 2)
        pad = "x" * 3000  # 1.8 MB in all: the new-file session needs a second file
        assert sum(provider.write("Tick", level=4, keyword=1, index=i, pad=pad) for i in range(total)) == total
        parts_stats = Session.attach("Parts").flush()
    assert running.stop() == 0
    assert (theirs / "trace.etl").stat().st_uid == OTHER_UID
    assert sorted(indices(theirs / "trace.etl")) == list(range(total))
    parts = sorted(theirs.glob("part*.etl"))
    assert len(parts) >= 2  # the next files too were made by the owner
    assert {path.stat().st_uid for path in parts} == {OTHER_UID}
    assert sum(len(read_events(path)) for path in parts) == parts_stats["events_written"]
    assert parts_stats["events_written"] + parts_stats["events_lost"] == total


def test_sessions_that_finish_together_are_each_finished_once(tmp_path: Path) -> None:
    config = write_config(tmp_path / "autologger.toml", "".join(
        f'[[session]]\nname = "Live{n}"\nmode = "real-time"\n[[session.provider]]\nname = "{PROVIDER}"\n' for n in range(3)
    ))  # fmt: skip
    service = TraceService(tmp_path / "unused.sock")
    try:
        report = start_autologger(service, read_autologger(config))
        assert report.started == ["Live0", "Live1", "Live2"] and report.failed == {}
        assert [s.owner_uid for s in service.table] == [os.geteuid()] * 3
        # Finishing the first carries out actions that finish the others: none twice.
        service.carry_out([action for session in service.table for action in service.table.stop(session.session_id)])
        assert service.runtimes == {} and len(service.table) == 0
    finally:
        service.close()
