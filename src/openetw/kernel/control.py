"""Kernel sessions that outlive the command that started them (what ``xperf -on`` / ``-stop`` do).

Each session runs in a detached recorder process (``python -m openetw.kernel.control record``)
that owns a :class:`~openetw.kernel.session.KernelSession`. The session is described by a state
file in the runtime directory (``$OPENETW_KERNEL_DIR``, else ``/run/openetw/kernel`` for root,
else ``$XDG_RUNTIME_DIR/openetw/kernel``)::

    <key>.json   settings, recorder pid (+ its start time, against pid reuse), state, statistics
    <key>.log    the recorder's stderr
    .lock        held while a session starts, so that the limits hold between processes

``SIGTERM`` to the recorder stops the session (tracing off, every CPU drained, file finished,
ftrace instance removed); ``SIGUSR1`` asks it to write fresh statistics now (it also writes
them every second). Limits are ETW's: 8 kernel sessions, 2 of the slots kept for the reserved
names ("NT Kernel Logger", "Global Logger"), which ordinary sessions may not use; ftrace
instances of other openetw kernel sessions (``openetw_*`` with a live reader) count too.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from openetw.errors import AccessDenied, InvalidArgument, OpenEtwError, SessionError, TraceDataError
from openetw.kernel.capabilities import KernelCapabilities, probe
from openetw.kernel.classes import KERNEL_FLAGS
from openetw.kernel.session import SOURCE_CHOICES, KernelSession, normalize_source
from openetw.kernel.session import privilege_refusal as privilege_refusal
from openetw.kernel.tracefs import INSTANCE_PREFIX, TracefsInstance, find_tracefs, mount_tracefs
from openetw.session.config import MAX_KERNEL_SESSIONS, RESERVED_KERNEL_SLOTS, is_reserved_name
from openetw.session.errors import NoSuchSession, SessionExists, TooManyKernelSessions

__all__ = [
    "AVAILABLE_FLAGS",
    "DEFAULT_SESSION_NAME",
    "KERNEL_DIR_ENV",
    "ORDINARY_KERNEL_SESSIONS",
    "PLANNED_FLAGS",
    "SOURCE_CHOICES",
    "KernelSessionRegistry",
    "check_session_name",
    "cli_flag_names",
    "parse_flags",
    "privilege_refusal",
    "process_start_time",
    "runtime_dir",
]

KERNEL_DIR_ENV = "OPENETW_KERNEL_DIR"
DEFAULT_SESSION_NAME = "openetw-kernel"
ORDINARY_KERNEL_SESSIONS = MAX_KERNEL_SESSIONS - RESERVED_KERNEL_SLOTS

# The command line's flag names, in the order they are listed. A name maps to the kernel flag of
# the same name or the one whose short name it is (xperf's DISK_IO is ``disk``, NETWORK ``net``...);
# which of them record is decided by what :data:`openetw.kernel.classes.KERNEL_FLAGS` holds.
_CLI_ORDER = ("process", "thread", "image", "disk", "file", "net", "cswitch", "pagefault", "syscall", "profile")
_SHORT_NAMES = {"disk_io": "disk", "network": "net", "file_io": "file", "page_fault": "pagefault"}
_EXTRA_ALIASES = {
    "proc_thread": "process", "context_switch": "cswitch", "tcpip": "net", "loader": "image",
    "fileio": "file", "diskio": "disk", "pagefaults": "pagefault", "syscalls": "syscall",
}
_LATER_FLAGS = ("hard_faults", "registry", "dpc", "interrupt", "memory", "alpc", "power")


def _flag_tables() -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """(CLI name → kernel flag for the recorded flags, alias → CLI name, CLI names not recorded yet)."""
    cli_of = {kernel: _SHORT_NAMES.get(kernel, kernel) for kernel in KERNEL_FLAGS}
    ordered = [name for name in _CLI_ORDER if name in cli_of.values()]
    ordered += sorted(name for name in cli_of.values() if name not in ordered)
    kernel_of = {cli: kernel for kernel, cli in cli_of.items()}
    available = {cli: kernel_of[cli] for cli in ordered}
    aliases = dict(_SHORT_NAMES) | _EXTRA_ALIASES
    planned = tuple(name for name in _CLI_ORDER if name not in available) + _LATER_FLAGS
    planned += tuple(long for long, short in _SHORT_NAMES.items() if short in planned)
    return available, aliases, planned


AVAILABLE_FLAGS, _ALIASES, PLANNED_FLAGS = _flag_tables()
"""``AVAILABLE_FLAGS``: command-line flag → KernelSession flag; ``PLANNED_FLAGS``: names known
from the Windows kernel logger that are not recorded on Linux yet."""
_CLI_NAME = {kernel: cli for cli, kernel in AVAILABLE_FLAGS.items()}

_ERRORS: dict[str, type[OpenEtwError]] = {
    cls.__name__: cls for cls in (AccessDenied, InvalidArgument, SessionError, TraceDataError, SessionExists)
}
_START_TIMEOUT = 30.0
_STATS_INTERVAL = 1.0


def runtime_dir() -> Path:
    """Where the state files live (see the module doc)."""
    explicit = os.environ.get(KERNEL_DIR_ENV)
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/run/openetw/kernel")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "openetw" / "kernel"
    return Path(f"/tmp/openetw-{os.getuid()}") / "kernel"


def parse_flags(flags: str | Iterable[str]) -> list[str]:
    """Command-line flag names (comma-separated or a list) → KernelSession flags, each once.

    Unknown flags and flags not recorded on Linux yet are refused with what is available; so are
    ``name=value`` items: the event source and the profile rate are settings of their own
    (``source=``/``profile_rate_hz=`` of :meth:`KernelSessionRegistry.start`, ``--source``/``--profile-rate``
    on the command line)."""
    items = flags.split(",") if isinstance(flags, str) else list(flags)
    wanted: list[str] = []
    unknown: list[str] = []
    planned: list[str] = []
    settings: list[str] = []
    for item in (i.strip().lower() for i in items):
        if not item:
            continue
        if "=" in item:
            settings.append(item)
            continue
        name = _ALIASES.get(item, item)
        if name in AVAILABLE_FLAGS:
            if AVAILABLE_FLAGS[name] not in wanted:
                wanted.append(AVAILABLE_FLAGS[name])
        elif name in PLANNED_FLAGS:
            planned.append(item)
        else:
            unknown.append(item)
    available = ", ".join(AVAILABLE_FLAGS)
    if settings:
        raise InvalidArgument(
            f"kernel flags are names, not settings: {', '.join(settings)}; the event source and the CPU sampling"
            " rate are settings of their own (--kernel-source/--source and --profile-rate on the command line,"
            f" kernel_source=/kernel_profile_rate= of Session.start); available flags: {available}"
        )
    if planned:
        raise InvalidArgument(f"kernel flag(s) {', '.join(planned)} are not recorded on Linux yet; available: {available}")
    if unknown:
        raise InvalidArgument(f"unknown kernel flag(s) {', '.join(unknown)}; available: {available}")
    if not wanted:
        raise InvalidArgument(f"give at least one kernel flag; available: {available}")
    return wanted


def cli_flag_names(flags: Iterable[str]) -> list[str]:
    return [_CLI_NAME.get(flag, flag) for flag in flags]


def check_session_name(name: str) -> None:
    """Refuses names that cannot name a state file and an ftrace instance. The reserved names
    ("NT Kernel Logger", "Global Logger") are kernel sessions' own: they take the reserved slots."""
    if not name or len(name) > 200 or "/" in name or name.startswith(".") or any(ord(c) < 32 for c in name):
        raise InvalidArgument(f"not a valid kernel session name: {name!r} (1-200 characters, no '/', no leading '.')")


# -- processes ----------------------------------------------------------------------------------


def process_start_time(pid: int) -> int | None:
    """The start time of a live, non-zombie process (clock ticks since boot), else ``None``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _alive(state: dict[str, Any]) -> bool:
    pid: int | None = state.get("pid")
    started: int | None = state.get("pid_start")
    if not pid or started is None:
        return False
    return process_start_time(pid) == started


def _live_owner(instance: Path) -> bool:
    try:
        owners = [int(p) for p in (instance / "set_event_notrace_pid").read_text().split() if p.isdigit()]
    except OSError:
        return False
    return any(_thread_group_alive(tid) for tid in owners)


def _thread_group_alive(tid: int) -> bool:
    """Whether the process a thread belongs to is alive. The owner written to tracefs is the
    reader thread; right after its process was killed the leader is already a zombie while
    the thread is still exiting, and that thread must not keep the instance alive."""
    try:
        with open(f"/proc/{tid}/status", encoding="ascii", errors="replace") as status:
            tgid = next((int(line.split()[1]) for line in status if line.startswith("Tgid:")), tid)
    except (OSError, ValueError, IndexError):
        return False
    return process_start_time(tid) is not None and process_start_time(tgid) is not None


# -- the registry -------------------------------------------------------------------------------


class KernelSessionRegistry:
    """The kernel sessions of this machine that were started through it (state files), and the
    start / query / stop operations on them from any process."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, tracefs_root: Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else runtime_dir()
        self.tracefs_root = tracefs_root

    # -- files ----------------------------------------------------------------------------------
    @staticmethod
    def key(name: str) -> str:
        return quote(name.casefold(), safe="-_.")

    def state_path(self, name: str) -> Path:
        return self.directory / f"{self.key(name)}.json"

    def log_path(self, name: str) -> Path:
        return self.directory / f"{self.key(name)}.log"

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] | None = json.loads(path.read_text(encoding="utf-8"))
            return state
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise SessionError(f"cannot read kernel session state {path}: {error}") from error

    def _states(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(SessionError):
                state = self._read(path)
                if state is not None:
                    yield path, state

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.directory / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # -- looking ----------------------------------------------------------------------------------
    def _info(self, state: dict[str, Any]) -> dict[str, Any]:
        info = dict(state)
        stats = info.get("stats") or {}
        if info.get("state") in ("starting", "running", "stopping") and not _alive(info):
            info["state"] = "crashed"
            info["failure"] = info.get("failure") or self._log_tail(info["name"]) or "the recorder process exited"
        elif info.get("state") == "running" and stats.get("state") == "failed":
            info["state"] = "failed"  # the recorder lives on, but its reader ended: nothing is recorded
            info["failure"] = info.get("failure") or stats.get("failure") or "the reader failed"
        for key in ("events_truncated",):
            info[key] = stats.get(key, 0)
        for key in ("events_read", "records_written", "events_lost", "duration_s"):
            info[key] = stats.get(key, 0)
        with contextlib.suppress(OSError):
            info["output_bytes"] = Path(info["output"]).stat().st_size
        return info

    def _log_tail(self, name: str) -> str:
        try:
            lines = self.log_path(name).read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    def list(self) -> list[dict[str, Any]]:
        """Every session with a state file, live or crashed."""
        return [self._info(state) for _, state in self._states()]

    def query(self, name: str, *, refresh: bool = True, timeout: float = 2.0) -> dict[str, Any]:
        """Settings, state and statistics of ``name``; a running recorder is asked for fresh ones."""
        state = self._read(self.state_path(name))
        if state is None:
            raise NoSuchSession(f"no kernel session named {name!r}")
        if refresh and state.get("state") == "running" and _alive(state):
            seq = state.get("seq", 0)
            with contextlib.suppress(ProcessLookupError):
                os.kill(state["pid"], signal.SIGUSR1)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                time.sleep(0.02)
                fresh = self._read(self.state_path(name))
                if fresh is None or fresh.get("seq", 0) != seq:
                    state = fresh or state
                    break
        return self._info(state)

    def running(self) -> builtins.list[str]:  # (the class has a method named list)
        """Names of live kernel sessions: this registry's and other openetw ftrace instances."""
        names = []
        ours = set()
        for _, state in self._states():
            if state.get("state") in ("starting", "running", "stopping") and _alive(state):
                names.append(state["name"])
                ours.add(f"{INSTANCE_PREFIX}{state['name']}")
        root = self.tracefs_root or find_tracefs()
        if root is not None:
            with contextlib.suppress(OSError):
                for path in sorted((root / "instances").glob(f"{INSTANCE_PREFIX}*")):
                    if path.name not in ours and _live_owner(path):
                        names.append(path.name)
        return names

    def check_capacity(self, name: str = DEFAULT_SESSION_NAME, *, pending: Iterable[str] = ()) -> None:
        """The rule of :class:`openetw.session.table.SessionTable`, machine-wide: 8 kernel sessions,
        of which the reserved names own 2 slots; every other name shares the remaining 6.

        Counted: this registry's live sessions and every other ``openetw_*`` ftrace instance with
        a live reader (the trace service's kernel sessions, other registries'), plus ``pending``
        (instance names of sessions being started whose instance does not exist yet). An instance
        named after a reserved name holds that name's slot wherever it was started."""
        running = self.running()
        if is_reserved_name(name):
            holder = f"{INSTANCE_PREFIX}{name}"
            if any(n.casefold() == holder.casefold() for n in running):
                raise SessionExists(f"a kernel session named {name!r} is running (ftrace instance {holder})")
            return  # its own slot; a second session of the name in this registry is refused as SessionExists
        counted = running + [n for n in pending if n not in running]
        ordinary = [n for n in counted if not is_reserved_name(n.removeprefix(INSTANCE_PREFIX))]
        if len(ordinary) >= ORDINARY_KERNEL_SESSIONS:
            raise TooManyKernelSessions(
                f"all {ORDINARY_KERNEL_SESSIONS} kernel session slots are in use ({', '.join(ordinary)});"
                f" {RESERVED_KERNEL_SLOTS} more of the {MAX_KERNEL_SESSIONS} are kept for the reserved loggers"
            )

    # -- starting ---------------------------------------------------------------------------------
    def start(
        self,
        name: str = DEFAULT_SESSION_NAME,
        flags: str | Iterable[str] = ("process", "thread"),
        output: str | os.PathLike[str] | None = None,
        *,
        mode: str = "file",
        buffer_size_kb: int = 4096,
        source: str = "auto",
        profile_rate_hz: int | None = None,
        capabilities: KernelCapabilities | None = None,
        timeout: float = _START_TIMEOUT,
    ) -> dict[str, Any]:
        """Starts a recorder process for a new session and returns its :meth:`query` info once it
        records. Refusals: ``InvalidArgument`` (flags, mode, source, sizes), ``AccessDenied`` (tracefs
        without root: the message lists what the account could use instead),
        ``TooManyKernelSessions``, ``SessionExists``."""
        check_session_name(name)
        kernel_flags = parse_flags(flags)
        source = normalize_source(source)
        if mode == "realtime":
            raise InvalidArgument(
                "mode realtime: a recorder of this registry writes a file; real-time kernel sessions run in the trace"
                " service (openetw.controller.kernel.start_kernel_session, `openetw kernel start --realtime`)"
            )
        if mode not in ("file", "circular"):
            raise InvalidArgument(f"unknown kernel session mode {mode!r}; use file or circular")
        if buffer_size_kb < 4:
            raise InvalidArgument("the buffer size is at least 4 KB per CPU")
        target = Path(output if output is not None else f"{name}.etl").expanduser().absolute()
        # The recorder's session, built here without starting it: flags, source and rate are
        # checked before a process is spawned.
        planned = KernelSession(kernel_flags, target, name=name, source=source, buffer_size_kb=buffer_size_kb,
                                circular=mode == "circular", profile_rate_hz=profile_rate_hz)  # fmt: skip
        mounted = None
        if planned.needs_root:
            if capabilities is None and self.tracefs_root is None and os.geteuid() == 0 and planned.reads_tracefs:
                mounted = mount_tracefs().mounted  # as root, tracefs is mounted when it is not, and the info says so
            refusal = privilege_refusal(capabilities if capabilities is not None else probe())
            if refusal is not None:
                raise refusal
        target = Path(output if output is not None else f"{name}.etl").expanduser().absolute()
        if not target.parent.is_dir():
            raise InvalidArgument(f"cannot write {target}: {target.parent} is not a directory")
        with self._locked():
            path = self.state_path(name)
            existing = self._read(path)
            if existing is not None:
                if existing.get("state") in ("starting", "running", "stopping") and _alive(existing):
                    raise SessionExists(f"a kernel session named {existing['name']!r} is running (pid {existing['pid']})")
                self._forget(existing)
            self.check_capacity(name)
            state: dict[str, Any] = {
                "name": name, "state": "starting", "pid": None, "pid_start": None, "flags": cli_flag_names(kernel_flags),
                "kernel_flags": kernel_flags, "output": str(target), "mode": mode, "buffer_size_kb": buffer_size_kb,
                "source": source, "profile_rate_hz": profile_rate_hz,
                "instance": None, "started_at": None, "stopped_at": None, "seq": 0, "stats": {}, "failure": None,
            }  # fmt: skip
            _write_state(path, state)
            try:
                self._spawn(path, name, timeout)
            except BaseException:
                final = self._read(path)
                if final is not None:
                    # A refused start removes an ftrace instance only if its recorder made it
                    # (and said so): one of that name may be another's, or in the making.
                    self._forget(final, remove_instance=final.get("instance") is not None)
                raise
        info = self.query(name, refresh=False)
        if mounted is not None:
            info["tracefs_mounted"] = mounted
        return info

    def _spawn(self, path: Path, name: str, timeout: float) -> None:
        read_end, write_end = os.pipe()
        try:
            with open(self.log_path(name), "wb") as log:
                launcher = subprocess.Popen(
                    [sys.executable, "-m", "openetw.kernel.control", "record", str(path), str(write_end)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, pass_fds=(write_end,),
                    cwd="/", start_new_session=True,
                )  # fmt: skip
            os.close(write_end)
            write_end = -1
            launcher.wait(timeout)  # the launcher forks the recorder and exits at once
            message = _read_message(read_end, timeout)
        finally:
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
        if message.get("ok"):
            return
        state = self._read(path) or {}
        if _alive(state):
            os.kill(state["pid"], signal.SIGKILL)
        error = message.get("error") or self._log_tail(name) or "the recorder process exited before it recorded"
        raise _ERRORS.get(message.get("type", ""), SessionError)(f"kernel session {name!r} did not start: {error}")

    # -- stopping ---------------------------------------------------------------------------------
    def stop(self, name: str = DEFAULT_SESSION_NAME, *, timeout: float = 60.0) -> dict[str, Any]:
        """Stops ``name`` and waits until its recorder has finished the file and exited; returns
        the final info (``state`` ``stopped``, or ``crashed``/``killed`` with ``failure``). The
        state file and log are removed, and the ftrace instance is gone afterwards."""
        path = self.state_path(name)
        state = self._read(path)
        if state is None:
            raise NoSuchSession(f"no kernel session named {name!r}")
        was_running = state.get("state") in ("starting", "running", "stopping") and _alive(state)
        killed = False
        if was_running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state["pid"], signal.SIGTERM)
            killed = not _wait_gone(state, timeout)
            if killed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(state["pid"], signal.SIGKILL)
                _wait_gone(state, 5.0)
        final = self._read(path) or state
        info = self._info(final)
        if killed:
            info["state"] = "killed"
            info["failure"] = f"the recorder did not stop within {timeout:g} s and was killed"
        self._forget(final)
        return info

    def _forget(self, state: dict[str, Any], *, remove_instance: bool = True) -> None:
        """Removes what a finished or dead session left: its ftrace instance, state and log."""
        root = self.tracefs_root or find_tracefs()
        if root is not None and remove_instance:
            instance = root / "instances" / f"{INSTANCE_PREFIX}{state['name']}"
            if instance.exists() and not _live_owner(instance):
                TracefsInstance(instance, root).remove()
        for path in (self.state_path(state["name"]), self.log_path(state["name"])):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _wait_gone(state: dict[str, Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(state):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _read_message(fd: int, timeout: float) -> dict[str, Any]:
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return {"ok": False, "error": f"the recorder did not report within {timeout:g} s"}
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data.split(b"\n", 1)[0]) if data.strip() else {}
    except ValueError:
        return {"ok": False, "error": data.decode(errors="replace")[:500]}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state, default=str), encoding="utf-8")
    os.replace(temporary, path)


# -- the recorder process -----------------------------------------------------------------------


def _record(state_path: Path, ready_fd: int) -> int:
    """The recorder: detaches, runs the session the state file describes until SIGTERM."""
    if os.fork():
        os._exit(0)  # the launcher; the starter waits for it
    os.setsid()

    # Signals are taken synchronously (sigtimedwait) by the main thread; the session's reader
    # thread inherits the blocked mask, so they never interrupt its reads.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})
    for ignored in (signal.SIGINT, signal.SIGHUP):
        signal.signal(ignored, signal.SIG_IGN)
    state = json.loads(state_path.read_text(encoding="utf-8"))
    pid = os.getpid()
    state.update(pid=pid, pid_start=process_start_time(pid))
    _write_state(state_path, state)
    session = KernelSession(
        flags=state["kernel_flags"], output=state["output"], name=state["name"],
        buffer_size_kb=state["buffer_size_kb"], circular=state["mode"] == "circular",
        source=state.get("source", "auto"), profile_rate_hz=state.get("profile_rate_hz"),
    )  # fmt: skip
    try:
        session.start()
    except BaseException as error:  # noqa: BLE001 - reported to the starter
        state.update(state="failed", failure=str(error))
        _write_state(state_path, state)
        _tell(ready_fd, {"ok": False, "error": str(error), "type": type(error).__name__})
        return 1
    state.update(state="running", started_at=time.time(), instance=None if session.instance_path is None else str(session.instance_path), stats=session.stats)
    _write_state(state_path, state)
    _tell(ready_fd, {"ok": True})
    while True:
        received = signal.sigtimedwait({signal.SIGTERM, signal.SIGUSR1}, _STATS_INTERVAL)
        if received is not None and received.si_signo == signal.SIGTERM:
            break
        state.update(stats=session.stats, seq=state["seq"] + 1)
        _write_state(state_path, state)
    state.update(state="stopping", seq=state["seq"] + 1)
    _write_state(state_path, state)
    try:
        stats = session.stop()
    except OpenEtwError as error:
        state.update(failure=str(error))
        stats = session.stats
    state.update(state="stopped", stopped_at=time.time(), stats=stats, seq=state["seq"] + 1)
    _write_state(state_path, state)
    return 0


def _tell(fd: int, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(message).encode() + b"\n")
    with contextlib.suppress(OSError):
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "record":
        print("usage: python -m openetw.kernel.control record STATE_FILE READY_FD", file=sys.stderr)
        return 2
    return _record(Path(args[1]), int(args[2]))


if __name__ == "__main__":
    sys.exit(main())
