"""A session as plain JSON-ready data: what ``query`` and ``list`` return."""

from __future__ import annotations

import uuid
from typing import Any

from openetw.guids import format_guid
from openetw.session.enable import EnableRule
from openetw.session.model import Session

__all__ = ["SessionInfo", "describe_session"]

SessionInfo = dict[str, Any]


def describe_session(session: Session, pools: tuple[int, ...] = ()) -> SessionInfo:
    """Settings, state, owner, enabled providers, pools and the statistics keys of one session."""
    config = session.config
    info: SessionInfo = {
        "session_id": session.session_id,
        "name": session.name,
        "kind": config.kind.value,
        "state": session.state.value,
        "mode": config.mode.value,
        "log_file_mode": config.log_file_mode,
        "logger_id": session.logger_id,
        "file_name": config.file_name,
        "max_file_mb": config.max_file_mb,
        "buffer_size_kb": config.buffer_size_kb,
        "minimum_buffers": config.minimum_buffers,
        "maximum_buffers": config.maximum_buffers,
        "flush_timer": config.flush_timer,
        "owner_uid": session.owner_uid,
        "owner_gid": session.owner_gid,
        "created_at": session.created_at,
        "started_at": session.started_at,
        "stopped_at": session.stopped_at,
        "failure": session.failure,
        "pools": list(pools),
        "providers": [_describe_rule(session, guid, rule) for guid, rule in session.rules.items()],
    }
    if config.kernel_flags:
        info["kernel_flags"] = list(config.kernel_flags)
        info["kernel_buffer_kb"] = config.kernel_buffer_kb
        info["kernel_source"] = config.kernel_source
        info["kernel_profile_rate_hz"] = config.kernel_profile_rate_hz
        if config.kernel_syscall_args:
            info["kernel_syscall_args"] = list(config.kernel_syscall_args)
        if config.kernel_syscall_args_pids:
            info["kernel_syscall_args_pids"] = list(config.kernel_syscall_args_pids)
        if config.kernel_syscall_args_execnames:
            info["kernel_syscall_args_execnames"] = list(config.kernel_syscall_args_execnames)
    info.update(session.statistics.as_dict())
    return info


def _describe_rule(session: Session, provider_guid: uuid.UUID, rule: EnableRule) -> dict[str, Any]:
    filters = rule.filters
    return {
        "guid": format_guid(provider_guid),
        "name": session.provider_names.get(provider_guid),
        "pending": provider_guid in session.pending_names,
        "level": rule.level,
        "match_any": rule.match_any,
        "match_all": rule.match_all,
        "properties": rule.properties,
        "event_ids": sorted(filters.event_ids),
        "event_ids_include": filters.event_ids_include,
        "pids": sorted(filters.pids),
        "exe_names": sorted(filters.exe_names),
    }
