"""Sessions that start with the service (ETW's AutoLogger), from a configuration file.

The file's format is ``openetw.session.parse_autologger_config``'s. Where it is:

* ``openetw service run --autologger FILE`` names it;
* otherwise the per-user service reads ``$XDG_CONFIG_HOME/openetw/autologger.toml``
  (``~/.config/...`` when the variable is unset) and the system service
  ``/etc/openetw/autologger.toml``, when the file exists and the service listens on its standard
  socket (a private service, on a socket of its own, starts no sessions unless told to).

No controller is there to pass output descriptors, so the service opens the files itself, with
the identity of the configuration file's owner (user, primary group, supplementary groups),
the way it opens a new-file session's next files. That owner also owns the sessions: they
control and query them as if they had started them. A file that others can change is refused
(writable by its group or by everyone, or in such a directory without the sticky bit), and so
is, for a per-user service, a file that belongs to another user. Relative output names are
taken from the configuration file's directory.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from openetw.errors import AccessDenied, OpenEtwError
from openetw.ipc.paths import SYSTEM_SOCKET, user_socket
from openetw.session import Caller, SessionConfig, parse_autologger_config

if TYPE_CHECKING:
    from openetw.service.server import TraceService

__all__ = [
    "SYSTEM_AUTOLOGGER",
    "AutologgerFile",
    "AutologgerReport",
    "default_autologger",
    "read_autologger",
    "start_autologger",
    "start_autologger_file",
    "user_autologger",
]

SYSTEM_AUTOLOGGER = Path("/etc/openetw/autologger.toml")
MAX_CONFIG_BYTES = 1 << 20
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


def user_autologger() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(config_home) if config_home and os.path.isabs(config_home) else Path.home() / ".config"
    return base / "openetw" / "autologger.toml"


def default_autologger(socket_path: Path, *, system: bool) -> Path | None:
    """The configuration a service on ``socket_path`` reads by itself, or ``None``: only a
    service on its scope's standard socket has one, and only when the file exists."""
    standard = SYSTEM_SOCKET if system else user_socket()
    if Path(socket_path) != standard:
        return None
    candidate = SYSTEM_AUTOLOGGER if system else user_autologger()
    return candidate if candidate.exists() else None


@dataclass(frozen=True)
class AutologgerFile:
    """A configuration file read and checked: where it is, whose it is, the sessions it describes."""

    path: Path
    owner: Caller
    sessions: tuple[SessionConfig, ...]


@dataclass
class AutologgerReport:
    """What became of a configuration file's sessions (the service's ``status`` shows it)."""

    path: str
    started: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # session name (or "*": the file) -> why

    def as_json(self) -> dict[str, object]:
        return {"file": self.path, "started": list(self.started), "failed": dict(self.failed)}


def read_autologger(path: Path | str, *, service_euid: int | None = None) -> AutologgerFile:
    """Read and check a configuration file. ``AccessDenied`` when others could have written it
    (or, for a per-user service, it is another user's); ``InvalidSessionConfig`` when it does not
    parse; ``OSError`` when it cannot be read."""
    path = Path(os.path.abspath(path))
    euid = os.geteuid() if service_euid is None else service_euid
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AccessDenied(f"{path} is not a regular file")
        if info.st_mode & _WRITABLE_BY_OTHERS:
            raise AccessDenied(f"{path} is writable by others (mode {stat.S_IMODE(info.st_mode):o}); `chmod go-w` it")
        if euid != 0 and info.st_uid != euid:
            raise AccessDenied(f"{path} belongs to uid {info.st_uid}; this service (uid {euid}) only takes its own user's file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise AccessDenied(f"{path} is over {MAX_CONFIG_BYTES} bytes")
        _check_directory(path.parent)
        data = os.read(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AccessDenied(f"{path} is not UTF-8 text: {exc}") from None
    sessions = tuple(_anchored(config, path.parent) for config in parse_autologger_config(text))
    return AutologgerFile(path, owner_of(info.st_uid, info.st_gid), sessions)


def _check_directory(directory: Path) -> None:
    info = directory.stat()
    if info.st_mode & _WRITABLE_BY_OTHERS and not info.st_mode & stat.S_ISVTX:
        raise AccessDenied(f"{directory} is writable by others: anyone could replace the autologger file in it")


def _anchored(config: SessionConfig, directory: Path) -> SessionConfig:
    if config.file_name is None or os.path.isabs(config.file_name):
        return config
    return config.with_changes(file_name=str(directory / config.file_name))


def owner_of(uid: int, fallback_gid: int) -> Caller:
    """The identity of user ``uid``: primary group and supplementary groups (the file's group
    alone for a uid with no passwd entry)."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return Caller(uid, fallback_gid)
    try:
        groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = frozenset()
    return Caller(uid, entry.pw_gid, groups)


def start_autologger(service: TraceService, autologger: AutologgerFile) -> AutologgerReport:
    """Start every session of the file, each on its own: one that cannot start (its file cannot
    be created by the owner, a kernel session for a user other than root, ...) is reported and
    the others go on."""
    from openetw.service.handlers import begin_session, open_output_as

    report = AutologgerReport(str(autologger.path))
    for config in autologger.sessions:
        try:
            fd = open_output_as(autologger.owner, config.file_name_for(1)) if config.mode.writes_file else -1
            begin_session(service, config, autologger.owner, fd)
        except (OpenEtwError, OSError) as exc:
            report.failed[config.name] = str(exc)
        else:
            report.started.append(config.name)
    return report


def start_autologger_file(service: TraceService, path: Path, *, log: Callable[[str], None]) -> bool:
    """Read ``path`` and start its sessions; the outcome goes to ``service.autologger`` and to
    ``log``. False when the file itself cannot be used (a session that cannot start is only
    reported)."""
    try:
        autologger = read_autologger(path)
    except (OpenEtwError, OSError) as exc:
        reason = str(exc) if isinstance(exc, OpenEtwError) else f"cannot read it: {exc.strerror or exc}"
        log(f"autologger {path}: {reason}")
        service.autologger = AutologgerReport(str(path), failed={"*": reason})
        return False
    report = service.autologger = start_autologger(service, autologger)
    for name, reason in report.failed.items():
        log(f"autologger session {name!r} not started: {reason}")
    if report.started:
        log(f"autologger {path}: started {', '.join(report.started)} as uid {autologger.owner.uid}")
    return True
