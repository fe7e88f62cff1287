"""Autologger configs (TOML and JSON) become session configs that a table can create."""

from __future__ import annotations

import json
import uuid

import pytest

from openetw.guids import provider_guid_from_name
from openetw.session import (
    ROOT,
    EnableProperty,
    InvalidSessionConfig,
    LogMode,
    SessionKind,
    SessionTable,
    parse_autologger_config,
)

TOML = """
[[session]]
name = "AppTrace"
mode = "new-file"
file = "/var/log/app-%d.etl"
max_file_mb = 100
buffer_size_kb = 128
minimum_buffers = 8
maximum_buffers = 32
flush_timer = 5

[[session.provider]]
name = "MyCompany.MyComponent"
level = "verbose"
match_any = "0xFFFF000000000000"
properties = ["stack_trace", "sid"]
event_ids = [1, 2]

[[session.provider]]
guid = "{11111111-2222-3333-4444-555555555555}"
level = 3
exclude_event_ids = [7]
pids = [42]
exe_names = ["app.exe"]

[[session]]
name = "Live"
"""


def test_toml_config() -> None:
    app, live = parse_autologger_config(TOML)
    assert app.name == "AppTrace" and app.mode is LogMode.NEW_FILE and app.kind is SessionKind.USER
    assert app.file_name_for(3) == "/var/log/app-3.etl"
    assert (app.max_file_mb, app.buffer_size_kb, app.minimum_buffers, app.maximum_buffers, app.flush_timer) == (
        100, 128, 8, 32, 5,
    )  # fmt: skip
    by_name, by_guid = app.providers
    assert by_name.provider_guid == provider_guid_from_name("MyCompany.MyComponent")
    assert by_name.provider_name == "MyCompany.MyComponent"
    assert by_name.rule.level == 5 and by_name.rule.match_any == 0xFFFF000000000000
    assert by_name.rule.properties == EnableProperty.STACK_TRACE | EnableProperty.SID
    assert by_name.rule.filters.event_ids == {1, 2} and by_name.rule.filters.event_ids_include
    assert by_guid.provider_guid == uuid.UUID("11111111-2222-3333-4444-555555555555")
    assert not by_guid.rule.filters.event_ids_include and by_guid.rule.filters.event_ids == {7}
    assert by_guid.rule.filters.pids == {42} and by_guid.rule.filters.exe_names == {"app.exe"}
    assert live.mode is LogMode.REAL_TIME and live.providers == ()


def test_json_config_is_the_same_shape() -> None:
    document = {
        "session": [
            {"name": "Kern", "kind": "kernel", "mode": "circular-file", "file": "/tmp/k.etl", "max_file_mb": 5,
             "provider": [{"guid": "9e814aad-3204-11d2-9a82-006008a86939", "match_any": 255}]},
        ]
    }  # fmt: skip
    (kern,) = parse_autologger_config(json.dumps(document))
    assert kern.kind is SessionKind.KERNEL and kern.mode is LogMode.CIRCULAR_FILE
    assert kern.log_file_mode == 0x2 | 0x2000000
    assert kern.providers[0].rule.match_any == 255


def test_configured_sessions_start_with_their_providers() -> None:
    table = SessionTable()
    for session_config in parse_autologger_config(TOML):
        table.create(session_config, ROOT)
        table.start(session_config.name)
    guid = provider_guid_from_name("MyCompany.MyComponent")
    app = table.session("AppTrace").session_id
    assert table.sessions_for(guid, 5, 1 << 48, 1) == (app,)
    assert table.sessions_for(guid, 5, 1 << 48, 3) == ()
    assert table.sessions_for(uuid.UUID(int=0x11111111222233334444555555555555), 3, 0, 1, 42, "/x/APP.EXE") == (app,)


def test_empty_config_has_no_sessions() -> None:
    assert parse_autologger_config("") == []
    assert parse_autologger_config("{}") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[session]]\nmode = 'real-time'\n", "needs a name"),
        ("[[session]]\nname = 'A'\ncolour = 1\n", "unknown keys colour"),
        ("[[session]]\nname = 'A'\nmode = 'tape'\n", "mode 'tape' is not one of"),
        ("[[session]]\nname = 'A'\nmode = 'sequential-file'\n", "needs a file name"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nlevel = 1\n", "needs a name or a guid"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nguid = 'nope'\n", "is not a GUID"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nname = 'P'\nproperties = ['teleport']\n", "unknown enable property"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nname = 'P'\nevent_ids = [1]\nexclude_event_ids = [2]\n", "exclude each other"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nname = 'P'\nmatch_any = 'lots'\n", "match_any must be"),
        ("[[session]]\nname = 'A'\n[[session.provider]]\nname = 'P'\nlevel = 300\n", "level 300"),
        ("[[session]]\nname = 'A'\n[[session]]\nname = 'a'\n", "share a name"),
        ("[[session]]\nname = 'A'\nbuffer_size_kb = 4096\n", "buffer size"),
        ("session = 3\n", "list of tables"),
        ("other = 1\n", "unknown top-level keys"),
        ("[[session]\n", "does not parse"),
        ("{\"session\": [", "does not parse"),
    ],
)
def test_bad_configs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidSessionConfig, match=message):
        parse_autologger_config(text)


def test_errors_name_the_session() -> None:
    with pytest.raises(InvalidSessionConfig, match=r"session 'Broken': .*needs a file name"):
        parse_autologger_config("[[session]]\nname = 'Broken'\nmode = 'circular-file'\n")
