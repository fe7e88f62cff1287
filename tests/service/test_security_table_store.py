"""The provider security table outlives the service: saved owner-only and atomically when root
changes it, read back at start; a damaged or foreign-owned file is refused, with a line in the
service's log, and the defaults still apply."""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import ServiceClient
from openetw.guids import format_guid, provider_guid_from_name
from openetw.ipc.paths import SYSTEM_SOCKET, user_socket
from openetw.service.security_store import SECURITY_FILE, load_provider_security, security_table_path
from openetw.session.security import DEFAULT_SECURED, ProviderSecurity
from tests.service.harness import OTHER_UID, start_service

PAYROLL = "Test.Payroll"
SECURITY_AUDITING = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")


@pytest.fixture
def socket_path(service_env: Path) -> Path:
    """A private service's socket (not started): its table goes beside it."""
    return service_env


def _table(socket_path: Path) -> dict[str, Any]:
    with ServiceClient(socket_path, autostart=False) as client:
        rows = client.call("providers")["security"]
    return {row["guid"]: row for row in rows}


def _secure_payroll(socket_path: Path) -> None:
    with ServiceClient(socket_path, autostart=False) as client:
        client.call("secure_provider", provider=PAYROLL, owners=[{"kind": "user", "id": OTHER_UID}])


def _restart_and_read(socket_path: Path) -> tuple[dict[str, Any], str]:
    log = socket_path.parent / "service.log"
    before = log.stat().st_size if log.exists() else 0
    running = start_service(socket_path)
    try:
        table = _table(socket_path)
    finally:
        assert running.stop() == 0
    return table, log.read_bytes()[before:].decode(errors="replace")


def _assert_defaults_only(table: dict[str, Any]) -> None:
    assert set(table) == {format_guid(guid) for guid in DEFAULT_SECURED}
    assert table[format_guid(SECURITY_AUDITING)]["owners"] == [{"kind": "user", "id": 0}]


def test_the_table_survives_a_restart_of_the_service(socket_path: Path) -> None:
    path = socket_path.parent / SECURITY_FILE
    running = start_service(socket_path)
    try:
        assert not path.exists()  # nothing saved until root changes something
        _secure_payroll(socket_path)
    finally:
        assert running.stop() == 0
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{SECURITY_FILE}.")]  # no temporary left
    table, log = _restart_and_read(socket_path)
    payroll = table[format_guid(provider_guid_from_name(PAYROLL))]
    assert payroll["name"] == PAYROLL
    assert payroll["owners"] == [{"kind": "user", "id": 0}, {"kind": "user", "id": OTHER_UID}]
    assert table[format_guid(SECURITY_AUDITING)]["owners"] == [{"kind": "user", "id": 0}]
    assert "refused" not in log


@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b'{"format": 1, "providers": [{"guid": "nope", "owners": []}]}',
     b'{"format": 2, "providers": []}', b'{"format": 1, "providers": [{"guid": "' + str(uuid.uuid4()).encode() + b'", "owners": [{"kind": "x", "id": 1}]}]}'],
    ids=["empty", "not-json", "bad-guid", "other-format", "bad-owner"],
)  # fmt: skip
def test_a_damaged_table_is_refused_and_the_defaults_apply(socket_path: Path, damage: bytes) -> None:
    path = socket_path.parent / SECURITY_FILE
    path.write_bytes(damage)
    os.chmod(path, 0o600)
    table, log = _restart_and_read(socket_path)
    _assert_defaults_only(table)
    assert f"provider security table {path} refused (damaged" in log


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_a_table_owned_by_someone_else_is_refused(socket_path: Path) -> None:
    path = socket_path.parent / SECURITY_FILE
    running = start_service(socket_path)
    try:
        _secure_payroll(socket_path)
    finally:
        running.stop()
    os.chown(path, OTHER_UID, OTHER_UID)
    table, log = _restart_and_read(socket_path)
    _assert_defaults_only(table)
    assert f"owned by uid {OTHER_UID}" in log


def test_a_table_others_may_write_or_a_symlink_is_refused(tmp_path: Path) -> None:
    saved = ProviderSecurity()
    saved.secure(provider_guid_from_name(PAYROLL), [], name=PAYROLL, caller_uid=0)
    path = tmp_path / SECURITY_FILE
    path.write_text(json.dumps(saved.as_document()))
    os.chmod(path, 0o600)
    lines: list[str] = []
    assert load_provider_security(path, lines.append).is_secured(provider_guid_from_name(PAYROLL))
    assert lines == []
    os.chmod(path, 0o666)
    assert not load_provider_security(path, lines.append).is_secured(provider_guid_from_name(PAYROLL))
    assert "others may write it" in lines[-1]
    os.chmod(path, 0o600)
    link = tmp_path / "link.json"
    link.symlink_to(path)
    table = load_provider_security(link, lines.append)
    assert not table.is_secured(provider_guid_from_name(PAYROLL)) and table.is_secured(SECURITY_AUDITING)
    assert "refused" in lines[-1]


def test_where_each_service_keeps_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert security_table_path(SYSTEM_SOCKET, system=True) == Path("/var/lib/openetw") / SECURITY_FILE
    assert security_table_path(user_socket(), system=False) == tmp_path / "state" / "openetw" / SECURITY_FILE
    assert security_table_path(tmp_path / "run" / "control.sock", system=False) == tmp_path / "run" / SECURITY_FILE
    assert security_table_path(tmp_path / "run" / "control.sock", system=True) == tmp_path / "run" / SECURITY_FILE


def test_a_table_that_cannot_be_saved_is_said_and_the_change_holds_until_the_service_stops(socket_path: Path) -> None:
    from openetw.errors import ServiceError

    blocker = socket_path.parent / SECURITY_FILE
    blocker.mkdir()  # neither read nor replaced: a directory
    running = start_service(socket_path)
    try:
        with pytest.raises(ServiceError, match="could not be saved to"):
            _secure_payroll(socket_path)
        assert format_guid(provider_guid_from_name(PAYROLL)) in _table(socket_path)  # it holds meanwhile
    finally:
        running.stop()
    log = (socket_path.parent / "service.log").read_text()
    assert "refused (not a regular file)" in log and "not saved to" in log
