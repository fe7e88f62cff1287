"""What a session is made of: kind, log mode, buffers, flush timer, initial providers; ETW's limits."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, replace
from typing import Any

from openetw.provider_names import resolve_provider_name
from openetw.session.enable import EnableRule
from openetw.session.errors import InvalidSessionConfig

__all__ = [
    "KERNEL_SOURCES",
    "LogFileMode",
    "LogMode",
    "MAX_KERNEL_SESSIONS",
    "MAX_PROFILE_RATE_HZ",
    "MAX_SESSIONS",
    "MAX_SESSIONS_PER_CLASSIC_PROVIDER",
    "MAX_SESSIONS_PER_PROVIDER",
    "ProviderEnable",
    "RESERVED_KERNEL_SLOTS",
    "RESERVED_SESSION_NAMES",
    "SessionConfig",
    "SessionKind",
    "is_reserved_name",
    "resolve_provider",
]

MAX_SESSIONS = 64
MAX_KERNEL_SESSIONS = 8
# Of the 8 kernel slots, 2 are kept for the reserved loggers so they can always start.
RESERVED_KERNEL_SLOTS = 2
RESERVED_SESSION_NAMES = ("NT Kernel Logger", "Global Logger")
MAX_SESSIONS_PER_PROVIDER = 8
MAX_SESSIONS_PER_CLASSIC_PROVIDER = 1
MAX_NAME_LENGTH = 1024
MAX_BUFFER_SIZE_KB = 1024
MAX_BUFFERS = 65536
DEFAULT_MAXIMUM_BUFFERS = 256
"""Buffers of a producer's pool by default (16 MB of 64 KB buffers). A producer writing flat out
fills 64 KB in well under 100 us, so the pool is what absorbs the time the service waits for the
CPU: 64 buffers (about 4 ms of such writing) lost 0.14-1.5% of the events of 16 producers flat
out on 2 cores, 256 lost at most 0.1% (docs/service.md, "How many buffers"). Pools use the
lowest FREE buffer first and a new pool's pages stay unused until written, so a producer that
never bursts keeps only its first few buffers in memory."""
MAX_FILE_MB = 1 << 32
MIN_KERNEL_BUFFER_KB = 4
MAX_KERNEL_BUFFER_KB = 1 << 20
DEFAULT_KERNEL_BUFFER_KB = 1024
KERNEL_SOURCES = ("auto", "tracefs", "proc_connector")
"""The kernel event sources a hosted kernel session records from (``proc-connector`` is taken
for ``proc_connector``). ``auto``: tracefs, plus perf for image loads and CPU samples."""
PROC_CONNECTOR_KERNEL_FLAGS = frozenset({"process", "thread"})
"""What the proc_connector source records: forks, execs and exits, nothing else."""
MIN_PROFILE_RATE_HZ = 1
MAX_PROFILE_RATE_HZ = 100_000
"""CPU samples per second the ``profile`` flag takes (perf's sampling frequency range)."""


def is_reserved_name(name: str) -> bool:
    return name.casefold() in {n.casefold() for n in RESERVED_SESSION_NAMES}


class LogFileMode(enum.IntFlag):
    """EVENT_TRACE_PROPERTIES.LogFileMode bits (the values ETW writes into TRACE_LOGFILE_HEADER)."""

    FILE_MODE_SEQUENTIAL = 0x0001
    FILE_MODE_CIRCULAR = 0x0002
    FILE_MODE_APPEND = 0x0004
    FILE_MODE_NEWFILE = 0x0008
    REAL_TIME_MODE = 0x0100
    BUFFERING_MODE = 0x0400
    SYSTEM_LOGGER_MODE = 0x2000000


class LogMode(enum.Enum):
    """Where a session's buffers go."""

    SEQUENTIAL_FILE = "sequential-file"
    CIRCULAR_FILE = "circular-file"
    NEW_FILE = "new-file"
    REAL_TIME = "real-time"
    BUFFERING = "buffering"
    FILE_AND_REAL_TIME = "file-real-time"

    @property
    def writes_file(self) -> bool:
        return self in _FILE_MODES

    @property
    def real_time(self) -> bool:
        return self in (LogMode.REAL_TIME, LogMode.FILE_AND_REAL_TIME)

    @property
    def log_file_mode(self) -> LogFileMode:
        return _LOG_FILE_MODE[self]


_FILE_MODES = frozenset({LogMode.SEQUENTIAL_FILE, LogMode.CIRCULAR_FILE, LogMode.NEW_FILE, LogMode.FILE_AND_REAL_TIME})
_LOG_FILE_MODE = {
    LogMode.SEQUENTIAL_FILE: LogFileMode.FILE_MODE_SEQUENTIAL,
    LogMode.CIRCULAR_FILE: LogFileMode.FILE_MODE_CIRCULAR,
    LogMode.NEW_FILE: LogFileMode.FILE_MODE_NEWFILE,
    LogMode.REAL_TIME: LogFileMode.REAL_TIME_MODE,
    LogMode.BUFFERING: LogFileMode.BUFFERING_MODE,
    LogMode.FILE_AND_REAL_TIME: LogFileMode.FILE_MODE_SEQUENTIAL | LogFileMode.REAL_TIME_MODE,
}


class SessionKind(enum.Enum):
    """Ordinary sessions take user-mode providers; kernel sessions (system loggers) also take the kernel's."""

    USER = "user"
    KERNEL = "kernel"


def resolve_provider(provider: uuid.UUID | str) -> tuple[uuid.UUID, str | None]:
    """A provider GUID, and its name when given by name (``openetw.provider_names`` without
    lookups: a GUID, or the name hash)."""
    if isinstance(provider, str) and not provider.strip():
        raise InvalidSessionConfig("a provider needs a GUID or a name")
    resolved = resolve_provider_name(provider)
    return resolved.guid, resolved.name


@dataclass(frozen=True)
class ProviderEnable:
    """One provider a configured session enables when it is created."""

    provider_guid: uuid.UUID
    rule: EnableRule = EnableRule()
    provider_name: str | None = None
    by_name: bool = False  # a name nothing knows yet: pending until a provider of that name registers

    @classmethod
    def of(cls, provider: uuid.UUID | str, rule: EnableRule = EnableRule()) -> ProviderEnable:
        if isinstance(provider, str) and not provider.strip():
            raise InvalidSessionConfig("a provider needs a GUID or a name")
        resolved = resolve_provider_name(provider)
        return cls(resolved.guid, rule, resolved.name, resolved.hashed)


@dataclass(frozen=True)
class SessionConfig:
    """The settings of one session (EVENT_TRACE_PROPERTIES, minus the statistics).

    ``max_file_mb`` 0 means no limit (sequential file only). ``flush_timer`` is in seconds, 0 for
    no timer. A ``NEW_FILE`` session's ``file_name`` holds exactly one ``%d``, replaced by the
    file's sequence number.

    A ``KERNEL`` session records the kernel events its ``kernel_flags`` name (``"process"``,
    ``"thread"``, ...: the kernel recorder checks the names) through a kernel ring buffer of
    ``kernel_buffer_kb`` per CPU (the trace service starts one only with at least one flag); an
    ordinary session has no kernel flags. ``kernel_source`` is where its kernel events come from
    (one of :data:`KERNEL_SOURCES`) and ``kernel_profile_rate_hz`` the CPU samples per second of
    the ``profile`` flag (``None``: the recorder's default, 1000). ``kernel_syscall_args`` names the
    system calls whose arguments the ``syscall_args`` flag records (names or shell patterns of
    the ``syscalls/sys_enter_<name>`` tracepoints, ``"*"`` every call; empty: the path-taking
    calls, see :class:`~openetw.kernel.bpf_args.BpfArgsSource`), and ``kernel_syscall_args_pids``
    of which processes (and the processes they start; empty: every process's) and
    ``kernel_syscall_args_execnames`` of which thread names (empty: any).
    """

    name: str
    mode: LogMode = LogMode.REAL_TIME
    kind: SessionKind = SessionKind.USER
    file_name: str | None = None
    max_file_mb: int = 0
    buffer_size_kb: int = 64
    minimum_buffers: int = 4
    maximum_buffers: int = DEFAULT_MAXIMUM_BUFFERS
    flush_timer: int = 1
    providers: tuple[ProviderEnable, ...] = ()
    kernel_flags: tuple[str, ...] = ()
    kernel_buffer_kb: int = DEFAULT_KERNEL_BUFFER_KB
    kernel_source: str = "auto"
    kernel_profile_rate_hz: int | None = None
    kernel_syscall_args: tuple[str, ...] = ()
    kernel_syscall_args_pids: tuple[int, ...] = ()
    kernel_syscall_args_execnames: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "providers", tuple(self.providers))
        object.__setattr__(self, "kernel_flags", tuple(sorted(set(self.kernel_flags))))
        object.__setattr__(self, "kernel_syscall_args", tuple(sorted(set(self.kernel_syscall_args))))
        object.__setattr__(self, "kernel_syscall_args_pids", tuple(sorted(set(self.kernel_syscall_args_pids))))
        object.__setattr__(self, "kernel_syscall_args_execnames", tuple(sorted(set(self.kernel_syscall_args_execnames))))
        object.__setattr__(self, "kernel_source", _kernel_source(self.kernel_source))
        self._check_kernel()
        _check_name(self.name)
        if not 1 <= self.buffer_size_kb <= MAX_BUFFER_SIZE_KB:
            raise InvalidSessionConfig(f"buffer size must be 1..{MAX_BUFFER_SIZE_KB} KB, not {self.buffer_size_kb}")
        if not 1 <= self.minimum_buffers <= self.maximum_buffers <= MAX_BUFFERS:
            raise InvalidSessionConfig(
                f"buffers must satisfy 1 <= minimum ({self.minimum_buffers}) <= maximum"
                f" ({self.maximum_buffers}) <= {MAX_BUFFERS}"
            )
        if not 0 <= self.flush_timer <= 86400:
            raise InvalidSessionConfig(f"flush timer must be 0..86400 seconds, not {self.flush_timer}")
        if not 0 <= self.max_file_mb <= MAX_FILE_MB:
            raise InvalidSessionConfig(f"maximum file size {self.max_file_mb} MB is out of range")
        self._check_mode()

    def _check_kernel(self) -> None:
        if any(not isinstance(flag, str) or not flag.strip() for flag in self.kernel_flags):
            raise InvalidSessionConfig("kernel flags are non-empty names")
        if self.kind is SessionKind.USER and self.kernel_flags:
            raise InvalidSessionConfig("only kernel sessions take kernel flags")
        if not MIN_KERNEL_BUFFER_KB <= self.kernel_buffer_kb <= MAX_KERNEL_BUFFER_KB:
            raise InvalidSessionConfig(
                f"kernel buffer size must be {MIN_KERNEL_BUFFER_KB}..{MAX_KERNEL_BUFFER_KB} KB per CPU, not {self.kernel_buffer_kb}"
            )
        if self.kind is SessionKind.USER and self.kernel_source != "auto":
            raise InvalidSessionConfig("only kernel sessions take a kernel event source")
        if self.kernel_source == "proc_connector" and not set(self.kernel_flags) <= PROC_CONNECTOR_KERNEL_FLAGS:
            others = ", ".join(sorted(set(self.kernel_flags) - PROC_CONNECTOR_KERNEL_FLAGS))
            raise InvalidSessionConfig(f"the proc_connector source records only the process and thread flags, not {others}")
        if any(not isinstance(call, str) or len(call) > 64 for call in self.kernel_syscall_args):
            raise InvalidSessionConfig("kernel_syscall_args are system call names or patterns")
        if any(isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 31 for pid in self.kernel_syscall_args_pids):
            raise InvalidSessionConfig("kernel_syscall_args_pids are process ids")
        if any(not isinstance(name, str) or not name for name in self.kernel_syscall_args_execnames):
            raise InvalidSessionConfig("kernel_syscall_args_execnames are process names")
        if (self.kernel_syscall_args or self.kernel_syscall_args_pids or self.kernel_syscall_args_execnames) and "syscall_args" not in self.kernel_flags:
            raise InvalidSessionConfig("kernel_syscall_args(_pids, _execnames) (whose arguments are recorded) need the syscall_args kernel flag")
        rate = self.kernel_profile_rate_hz
        if rate is None:
            return
        if self.kind is SessionKind.USER:
            raise InvalidSessionConfig("only kernel sessions take a profile rate")
        if isinstance(rate, bool) or not isinstance(rate, int) or not MIN_PROFILE_RATE_HZ <= rate <= MAX_PROFILE_RATE_HZ:
            raise InvalidSessionConfig(
                f"the profile rate must be {MIN_PROFILE_RATE_HZ}..{MAX_PROFILE_RATE_HZ} samples per second, not {rate!r}"
            )
        if "profile" not in self.kernel_flags:
            raise InvalidSessionConfig("a profile rate needs the profile kernel flag")

    def _check_mode(self) -> None:
        mode = self.mode
        if mode.writes_file and not self.file_name:
            raise InvalidSessionConfig(f"{mode.value} mode needs a file name")
        if not mode.writes_file and self.file_name is not None:
            raise InvalidSessionConfig(f"{mode.value} mode writes no file; drop the file name")
        if mode in (LogMode.CIRCULAR_FILE, LogMode.NEW_FILE) and self.max_file_mb == 0:
            raise InvalidSessionConfig(f"{mode.value} mode needs a maximum file size")
        if not mode.writes_file and self.max_file_mb:
            raise InvalidSessionConfig(f"{mode.value} mode writes no file; drop the maximum file size")
        if mode is LogMode.NEW_FILE and (self.file_name or "").count("%d") != 1:
            raise InvalidSessionConfig("new-file mode needs a file name with exactly one %d")

    @property
    def buffer_size(self) -> int:
        return self.buffer_size_kb * 1024

    @property
    def log_file_mode(self) -> int:
        flags = self.mode.log_file_mode
        if self.kind is SessionKind.KERNEL:
            flags |= LogFileMode.SYSTEM_LOGGER_MODE
        return int(flags)

    def file_name_for(self, sequence: int) -> str:
        """The name of a new-file session's ``sequence``-th file (other modes: the file name itself)."""
        if self.file_name is None:
            raise InvalidSessionConfig(f"{self.mode.value} mode writes no file")
        if self.mode is not LogMode.NEW_FILE:
            return self.file_name
        head, tail = self.file_name.split("%d")
        return f"{head}{sequence}{tail}"

    def with_changes(self, **changes: Any) -> SessionConfig:
        return replace(self, **changes)


def _kernel_source(source: object) -> str:
    """A name of :data:`KERNEL_SOURCES`; ``proc-connector`` and any case are taken too."""
    name = source.strip().lower().replace("-", "_") if isinstance(source, str) else None
    if name not in KERNEL_SOURCES:
        raise InvalidSessionConfig(f"unknown kernel event source {source!r}; choose one of {', '.join(KERNEL_SOURCES)}")
    return name


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise InvalidSessionConfig("a session needs a non-empty name")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidSessionConfig(f"session names are at most {MAX_NAME_LENGTH} characters")
    if "\0" in name or name != name.strip():
        raise InvalidSessionConfig("session names hold no NUL and no leading or trailing blanks")
