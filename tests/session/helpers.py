"""Small builders shared by the session tests."""

from __future__ import annotations

import uuid

from openetw.session import Caller, LogMode, SessionConfig, SessionKind, SessionTable

ALICE = Caller(1000, 1000)
BOB = Caller(1001, 1001)
PROVIDER = uuid.UUID("11111111-2222-3333-4444-555555555555")
OTHER_PROVIDER = uuid.UUID("66666666-7777-8888-9999-000000000000")


def config(name: str = "Trace", **settings: object) -> SessionConfig:
    return SessionConfig(name, **settings)  # type: ignore[arg-type]


def file_config(name: str = "FileTrace", **settings: object) -> SessionConfig:
    settings.setdefault("mode", LogMode.SEQUENTIAL_FILE)
    settings.setdefault("file_name", f"/tmp/{name}.etl")
    return SessionConfig(name, **settings)  # type: ignore[arg-type]


def kernel_config(name: str) -> SessionConfig:
    return SessionConfig(name, kind=SessionKind.KERNEL)


def running_table(*names: str, owner: Caller = ALICE) -> SessionTable:
    table = SessionTable()
    for name in names:
        table.create(config(name), owner)
        table.start(name)
    return table
