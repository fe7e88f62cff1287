"""Session settings, enable rules and enable states as JSON objects, and back (both sides use these).

Everything coming from a peer is checked here: a wrong type or an out-of-range value becomes
``InvalidSessionConfig`` (the request fails) and never reaches the session table unchecked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openetw.session.enable import EnableRule, EnableState, EventFilters, SessionEnable
from openetw.session.errors import InvalidSessionConfig

if TYPE_CHECKING:
    from openetw.session.config import SessionConfig

__all__ = [
    "CONFIG_FIELDS",
    "config_from_json",
    "config_to_json",
    "enable_state_from_json",
    "enable_state_to_json",
    "filters_from_json",
    "filters_to_json",
    "rule_from_json",
]

# SessionConfig attributes carried as JSON fields of the same name, with their types. A field a
# peer leaves out takes SessionConfig's default, so a request written before a field existed
# still reads (kernel_source, kernel_profile_rate_hz came later than the rest).
CONFIG_FIELDS: dict[str, type] = {
    "name": str,
    "file_name": str,
    "max_file_mb": int,
    "buffer_size_kb": int,
    "minimum_buffers": int,
    "maximum_buffers": int,
    "flush_timer": int,
    "kernel_buffer_kb": int,
    "kernel_source": str,
    "kernel_profile_rate_hz": int,
}


def _checked(body: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidSessionConfig(f"{key} must be an integer, not {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise InvalidSessionConfig(f"{key} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def config_to_json(config: SessionConfig) -> dict[str, Any]:
    body: dict[str, Any] = {key: getattr(config, key) for key in CONFIG_FIELDS}
    body["mode"] = config.mode.value
    body["kind"] = config.kind.value
    body["kernel_flags"] = list(config.kernel_flags)
    if config.kernel_syscall_args:
        body["kernel_syscall_args"] = list(config.kernel_syscall_args)
    if config.kernel_syscall_args_pids:
        body["kernel_syscall_args_pids"] = list(config.kernel_syscall_args_pids)
    if config.kernel_syscall_args_execnames:
        body["kernel_syscall_args_execnames"] = list(config.kernel_syscall_args_execnames)
    return body


def config_from_json(body: Any) -> SessionConfig:
    if not isinstance(body, dict):
        raise InvalidSessionConfig("a session configuration must be an object")
    changes = config_changes_from_json(body)
    if "name" not in changes:
        raise InvalidSessionConfig("a session needs a name")
    from openetw.session.config import SessionConfig  # controllers and the service only: a provider never loads it

    return SessionConfig(**changes)


def config_changes_from_json(body: dict[str, Any]) -> dict[str, Any]:
    """Only the settings present in ``body``, typed (for UPDATE as well as for creation)."""
    from openetw.session.config import LogMode, SessionKind

    changes: dict[str, Any] = {}
    for key, kind in CONFIG_FIELDS.items():
        if key in body:
            changes[key] = _checked(body, key, kind)
    if changes.get("kernel_source", "") is None:
        del changes["kernel_source"]
    if "mode" in body:
        try:
            changes["mode"] = LogMode(body["mode"])
        except ValueError:
            raise InvalidSessionConfig(f"unknown log mode {body['mode']!r}") from None
    if "kind" in body:
        try:
            changes["kind"] = SessionKind(body["kind"])
        except ValueError:
            raise InvalidSessionConfig(f"unknown session kind {body['kind']!r}") from None
    if "kernel_flags" in body and body["kernel_flags"] is not None:
        flags = body["kernel_flags"]
        if not isinstance(flags, list) or any(not isinstance(flag, str) for flag in flags):
            raise InvalidSessionConfig("kernel_flags must be a list of strings")
        changes["kernel_flags"] = tuple(flags)
    for key in ("kernel_syscall_args", "kernel_syscall_args_execnames"):
        if body.get(key) is not None:
            names = body[key]
            if not isinstance(names, list) or any(not isinstance(name, str) for name in names):
                raise InvalidSessionConfig(f"{key} must be a list of strings")
            changes[key] = tuple(names)
    if body.get("kernel_syscall_args_pids") is not None:
        changes["kernel_syscall_args_pids"] = tuple(_int_list(body, "kernel_syscall_args_pids"))
    return changes


def _int_list(body: dict[str, Any], key: str) -> frozenset[int]:
    values = body.get(key) or []
    if not isinstance(values, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise InvalidSessionConfig(f"{key} must be a list of integers")
    return frozenset(values)


def filters_to_json(filters: EventFilters) -> dict[str, Any]:
    return {
        "event_ids": sorted(filters.event_ids),
        "event_ids_include": filters.event_ids_include,
        "pids": sorted(filters.pids),
        "exe_names": sorted(filters.exe_names),
    }


def filters_from_json(body: Any) -> EventFilters:
    if body is None:
        return EventFilters()
    if not isinstance(body, dict):
        raise InvalidSessionConfig("filters must be an object")
    exe_names = body.get("exe_names") or []
    if not isinstance(exe_names, list) or any(not isinstance(n, str) for n in exe_names):
        raise InvalidSessionConfig("exe_names must be a list of strings")
    include = body.get("event_ids_include", True)
    if not isinstance(include, bool):
        raise InvalidSessionConfig("event_ids_include must be true or false")
    return EventFilters(_int_list(body, "event_ids"), include, _int_list(body, "pids"), frozenset(exe_names))


def rule_from_json(body: dict[str, Any]) -> EnableRule:
    return EnableRule(
        _checked(body, "level", int, 0),
        _checked(body, "match_any", int, 0),
        _checked(body, "match_all", int, 0),
        _checked(body, "properties", int, 0),
        filters_from_json(body.get("filters")),
    )


def enable_state_to_json(state: EnableState) -> dict[str, Any]:
    """What a provider process needs: the combined check and, per session, its pool and rule."""
    return {
        "enabled": state.enabled,
        "max_level": state.max_level,
        "any_keyword": state.any_keyword,
        "sessions": [
            {
                "session_id": entry.session_id,
                "logger_id": entry.logger_id,
                "level": entry.level,
                "match_any": entry.match_any,
                "match_all": entry.match_all,
                "properties": entry.properties,
                "filters": filters_to_json(entry.filters),
            }
            for entry in state.sessions
        ],
    }


def enable_state_from_json(body: Any) -> EnableState:
    if not isinstance(body, dict):
        raise InvalidSessionConfig("an enable state must be an object")
    entries = []
    for item in body.get("sessions") or []:
        if not isinstance(item, dict):
            raise InvalidSessionConfig("an enable state's sessions must be objects")
        entries.append(
            SessionEnable(_checked(item, "session_id", int, 0), _checked(item, "logger_id", int, 0), rule_from_json(item))
        )
    return EnableState.from_sessions(entries)
