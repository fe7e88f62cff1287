"""Channels and logs, pure: which log an event's channel lands in, how a log is set up, which
channel session listens for it.

Windows: imported standard channels (``System``, ``Application``, ``Security`` and winmeta's)
land in the built-in logs; a defined channel is its own log, named by its ``name``. Admin and
Operational channels are enabled from the start; Analytic and Debug channels are disabled until
enabled. All Admin channels share one session (``EventLog-Admin``), all Operational channels
another (``EventLog-Operational``); each enabled Analytic or Debug channel is a session of its
own (``EventLog-<channel>``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from openetw.eventlog.model import LogConfig
from openetw.manifest.model import Channel

__all__ = [
    "BUILTIN_LOGS",
    "ChannelSpec",
    "channel_specs",
    "default_config",
    "log_file_name",
    "log_name_from_file",
    "session_name",
]

BUILTIN_LOGS = ("Application", "System", "Security", "Setup")
_STANDARD = {"system": "System", "application": "Application", "security": "Security", "setup": "Setup"}
SESSION_PREFIX = "EventLog-"


@dataclass(frozen=True)
class ChannelSpec:
    """One channel of an installed provider, as the Event Log sees it."""

    provider_guid: str
    provider_name: str
    channel_value: int  # the descriptor's channel byte
    keyword_bit: int  # the keyword bit mc gives the channel's events (0: none)
    log: str  # the log its events land in
    type: str  # Admin, Operational, Analytic, Debug
    enabled: bool
    isolation: str


def log_for_channel(channel: Channel) -> str:
    """The log a channel's events go to (imported standard channels: the built-in log)."""
    name = channel.name
    if channel.imported or channel.standard:
        return _STANDARD.get(name.lower(), name)
    return _STANDARD.get(name.lower(), name)


def channel_specs(provider_guid: str, provider_name: str, channels: list[Channel]) -> list[ChannelSpec]:
    """The channels of one provider (mc's keyword bits: the first channel bit 63, ...)."""
    specs = []
    for index, channel in enumerate(channels):
        log = log_for_channel(channel)
        kind = (channel.type.value if channel.type is not None else None) or ("Admin" if log in ("System", "Application", "Security") else "Operational")
        enabled = kind in ("Admin", "Operational") or channel.enabled
        isolation = channel.isolation or ("System" if log in ("System", "Security") else "Application")
        specs.append(ChannelSpec(
            provider_guid, provider_name, channel.value or 0, (1 << (63 - index)) if index < 8 else 0,
            log, kind, enabled, isolation,
        ))  # fmt: skip
    return specs


def session_name(spec_type: str, log: str) -> str:
    """The reserved session name that listens for a channel."""
    if spec_type in ("Admin", "Operational"):
        return SESSION_PREFIX + spec_type
    return SESSION_PREFIX + log


def default_config(log: str, kind: str, isolation: str, *, system: bool, owner: int, readers: int, writers: int | None) -> LogConfig:
    """A new log's settings. In the machine service System and Security are root's (System also
    written by ``writers``), read by root and ``readers``; Application-isolation logs are written
    by anyone and read by ``readers`` (and by each user for the events that user wrote). A
    per-user service treats its owner as the owner of everything."""
    if log in ("System", "Security") or isolation in ("System", "Custom"):
        config = LogConfig(owner=owner, group=readers, mode=0o640, writers=writers if log != "Security" else None, isolation=isolation, type=kind)
    else:
        config = LogConfig(owner=owner, group=readers, mode=0o662, isolation="Application", type=kind)
    if kind in ("Analytic", "Debug"):
        config = replace(config, enabled=False, retention="retain")
    return config if system else replace(config, owner=owner)


def log_file_name(log: str) -> str:
    """The database file a log lives in (``/`` written ``%4``, as Windows names its files)."""
    return log.replace("%", "%25").replace("/", "%4") + ".db"


def log_name_from_file(file_name: str) -> str:
    stem = file_name[: -len(".db")] if file_name.endswith(".db") else file_name
    return stem.replace("%4", "/").replace("%25", "%")
