"""Sessions that start with the service (ETW's AutoLogger), from a small TOML or JSON file.

TOML (JSON has the same shape: ``{"session": [{...}, ...]}``; text starting with ``{`` is read
as JSON)::

    [[session]]
    name = "AppTrace"              # required
    mode = "sequential-file"       # sequential-file | circular-file | new-file | real-time
                                   # | buffering | file-real-time   (default real-time)
    kind = "user"                  # user | kernel
    file = "/var/log/app.etl"      # file modes only; new-file names hold one %d
    max_file_mb = 100
    buffer_size_kb = 64
    minimum_buffers = 4
    maximum_buffers = 256
    flush_timer = 1                # seconds, 0 for none

    [[session.provider]]
    name = "MyCompany.MyComponent" # a TraceLogging/EventSource name, or
    guid = "{...}"                 # a GUID (wins over the name when both are given)
    level = 5                      # 0..255 or always/critical/error/warning/informational/verbose
    match_any = "0xFFFF000000000000"   # integer or hex string (TOML integers stop at 2**63-1)
    match_all = 0
    properties = ["stack_trace", "sid"]  # EnableProperty names, or an integer
    event_ids = [1, 2]             # or exclude_event_ids = [...]
    pids = [1234]
    exe_names = ["app.exe"]

Unknown keys are errors (a typo should not silently drop a setting).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from typing import Any

from openetw.guids import parse_guid
from openetw.session.config import LogMode, ProviderEnable, SessionConfig, SessionKind, resolve_provider
from openetw.session.enable import EnableProperty, EnableRule, EventFilters
from openetw.session.errors import InvalidSessionConfig

__all__ = ["parse_autologger_config"]

LEVEL_NAMES = {"always": 0, "critical": 1, "error": 2, "warning": 3, "informational": 4, "info": 4, "verbose": 5}
_SESSION_KEYS = {
    "name", "mode", "kind", "file", "max_file_mb", "buffer_size_kb",
    "minimum_buffers", "maximum_buffers", "flush_timer", "provider",
}  # fmt: skip
_PROVIDER_KEYS = {
    "name", "guid", "level", "match_any", "match_all", "properties",
    "event_ids", "exclude_event_ids", "pids", "exe_names",
}  # fmt: skip
_INT_SETTINGS = ("max_file_mb", "buffer_size_kb", "minimum_buffers", "maximum_buffers", "flush_timer")


def parse_autologger_config(text: str) -> list[SessionConfig]:
    """The sessions described by ``text`` (TOML, or JSON when it starts with ``{``)."""
    document = _load(text)
    sessions = document.get("session", [])
    if set(document) - {"session"}:
        raise InvalidSessionConfig(f"unknown top-level keys: {', '.join(sorted(set(document) - {'session'}))}")
    if not isinstance(sessions, list):
        raise InvalidSessionConfig("'session' must be a list of tables")
    configs = [_session(entry, index) for index, entry in enumerate(sessions)]
    names = [c.name.casefold() for c in configs]
    if len(set(names)) != len(names):
        raise InvalidSessionConfig("two autologger sessions share a name")
    return configs


def _load(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text) if text.lstrip().startswith("{") else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        raise InvalidSessionConfig(f"autologger config does not parse: {error}") from None
    if not isinstance(document, dict):
        raise InvalidSessionConfig("autologger config must be a table")
    return document


def _session(entry: Any, index: int) -> SessionConfig:
    where = f"session #{index + 1}"
    table = _table(entry, _SESSION_KEYS, where)
    if "name" not in table:
        raise InvalidSessionConfig(f"{where}: needs a name")
    where = f"session {table['name']!r}"
    try:
        settings: dict[str, Any] = {key: _int(table[key], key) for key in _INT_SETTINGS if key in table}  # the int fields
        providers = table.get("provider", [])
        if not isinstance(providers, list):
            raise InvalidSessionConfig("'provider' must be a list of tables")
        return SessionConfig(
            name=_str(table["name"], "name"),
            mode=_enum(LogMode, table.get("mode", LogMode.REAL_TIME.value), "mode"),
            kind=_enum(SessionKind, table.get("kind", SessionKind.USER.value), "kind"),
            file_name=_str(table["file"], "file") if "file" in table else None,
            providers=tuple(_provider(p, i) for i, p in enumerate(providers)),
            **settings,
        )
    except InvalidSessionConfig as error:
        raise InvalidSessionConfig(f"{where}: {error}") from None


def _provider(entry: Any, index: int) -> ProviderEnable:
    table = _table(entry, _PROVIDER_KEYS, f"provider #{index + 1}")
    name = _str(table["name"], "name") if "name" in table else None
    if "guid" in table:
        try:
            guid = parse_guid(_str(table["guid"], "guid"))
        except ValueError:
            raise InvalidSessionConfig(f"provider #{index + 1}: {table['guid']!r} is not a GUID") from None
    elif name is not None:
        guid, _ = resolve_provider(name)
    else:
        raise InvalidSessionConfig(f"provider #{index + 1}: needs a name or a guid")
    if "event_ids" in table and "exclude_event_ids" in table:
        raise InvalidSessionConfig(f"provider #{index + 1}: event_ids and exclude_event_ids exclude each other")
    include = "exclude_event_ids" not in table
    filters = EventFilters(
        event_ids=frozenset(_ints(table.get("event_ids" if include else "exclude_event_ids", []), "event_ids")),
        event_ids_include=include,
        pids=frozenset(_ints(table.get("pids", []), "pids")),
        exe_names=frozenset(_strs(table.get("exe_names", []), "exe_names")),
    )
    rule = EnableRule(
        level=_level(table.get("level", 0)),
        match_any=_int(table.get("match_any", 0), "match_any"),
        match_all=_int(table.get("match_all", 0), "match_all"),
        properties=_properties(table.get("properties", 0)),
        filters=filters,
    )
    return ProviderEnable(guid, rule, name)


def _table(entry: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidSessionConfig(f"{where}: must be a table")
    unknown = set(entry) - allowed
    if unknown:
        raise InvalidSessionConfig(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    return entry


def _int(value: Any, what: str) -> int:
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidSessionConfig(f"{what} must be an integer or a hex string, not {value!r}")


def _ints(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise InvalidSessionConfig(f"{what} must be a list")
    return [_int(item, what) for item in value]


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidSessionConfig(f"{what} must be a string, not {value!r}")
    return value


def _strs(value: Any, what: str) -> list[str]:
    if not isinstance(value, list):
        raise InvalidSessionConfig(f"{what} must be a list")
    return [_str(item, what) for item in value]


def _enum(kind: Any, value: Any, what: str) -> Any:
    try:
        return kind(_str(value, what))
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise InvalidSessionConfig(f"{what} {value!r} is not one of {choices}") from None


def _level(value: Any) -> int:
    if isinstance(value, str) and value.lower() in LEVEL_NAMES:
        return LEVEL_NAMES[value.lower()]
    return _int(value, "level")


def _properties(value: Any) -> int:
    if not isinstance(value, list):
        return _int(value, "properties")
    flags = 0
    for item in value:
        try:
            flags |= EnableProperty[_str(item, "properties").upper()]
        except KeyError:
            choices = ", ".join(m.name.lower() for m in EnableProperty if m.name)
            raise InvalidSessionConfig(f"unknown enable property {item!r} (known: {choices})") from None
    return int(flags)
