"""An ftrace instance per kernel session, and the per-CPU ``trace_pipe_raw`` reader (I/O shell).

``TracefsInstance.create("name", ...)`` makes ``instances/openetw_<name>`` with its own ring
buffer (size, ``trace_clock``, overwrite mode), excludes the reading process from tracing
(``set_event_notrace_pid``, else every read() would be traced), enables the tracepoints asked
for and hands out a :class:`RingReader`. ``remove()`` deletes the instance; instances left by a
crashed session are found by :func:`remove_stale_instances` (their notrace pid is dead).

Several processes create and remove instances at the same time (sessions of the trace service,
tools, test runs), so the notrace pid is the first thing written after ``mkdir``: it records the
owner. An instance without one yet is another process's in the making and is left alone for
:data:`OWNERLESS_GRACE_S` seconds; an instance removed by someone else meanwhile counts as removed.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from openetw.errors import AccessDenied, InvalidArgument, SessionError
from openetw.kernel.ringbuffer import EventDecoder, PageParser
from openetw.kernel.tracefs_format import EventFormat, parse_event_format, parse_header_event, parse_header_page

__all__ = ["CpuStats", "RingReader", "TracefsInstance", "TracefsMount", "find_tracefs", "mount_tracefs", "remove_stale_instances"]

DEFAULT_ROOT = Path("/sys/kernel/tracing")
DEBUGFS_ROOT = Path("/sys/kernel/debug")
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8  # <sys/mount.h>: as systemd mounts tracefs and debugfs
INSTANCE_PREFIX = "openetw_"
_PARTIAL_FRACTION = 8  # a page with more than 1/8 free is the writer's current page
OWNERLESS_GRACE_S = 60.0
"""How long an instance with no owner recorded yet is taken for one being made (its creator
writes the owner right after ``mkdir``); older ones are left from a crash and removed."""
_GONE = (errno.ENOENT, errno.ENODEV)  # removed by another process meanwhile


def find_tracefs() -> Path | None:
    """The tracefs mount point, or ``None`` when tracefs is not mounted."""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) > 2 and parts[2] == "tracefs":
                    return Path(parts[1])
    except OSError:
        pass
    legacy = Path("/sys/kernel/debug/tracing")
    return legacy if (legacy / "instances").is_dir() else None


@dataclass(frozen=True, slots=True)
class TracefsMount:
    """Where tracefs is, and what :func:`mount_tracefs` mounted to get it (``None``: it was there)."""

    root: Path
    mounted: str | None = None

    def describe(self) -> str:
        """One line for the user: ``"mounted tracefs at /sys/kernel/tracing (it was not mounted)"``."""
        if self.mounted is None:
            return f"tracefs at {self.root}"
        return f"mounted {self.mounted} (it was not mounted); tracefs at {self.root}"


def _mount(source: str, target: Path, fstype: str) -> str | None:
    """mount(2); ``None`` when it worked, else the reason."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.mount(source.encode(), str(target).encode(), fstype.encode(), _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    if result == 0:
        return None
    code = ctypes.get_errno()
    return f"mount -t {fstype} {source} {target}: {os.strerror(code)}"


def mount_tracefs() -> TracefsMount:
    """tracefs, mounted first when it is not, as libtracefs and trace-cmd do: tracefs on
    ``/sys/kernel/tracing``; when that fails (a kernel before 4.1 has no such directory),
    debugfs on ``/sys/kernel/debug``, whose ``tracing`` directory the kernel mounts tracefs on
    itself. Needs CAP_SYS_ADMIN (root); raises ``AccessDenied`` without it and ``SessionError``
    when neither mount gives a tracefs, with both reasons."""
    found = find_tracefs()
    if found is not None:
        return TracefsMount(found)
    if os.geteuid() != 0:
        raise AccessDenied(f"tracefs: not mounted, and mounting it needs root (mount -t tracefs nodev {DEFAULT_ROOT})")
    reasons = []
    if DEFAULT_ROOT.is_dir():
        failure = _mount("nodev", DEFAULT_ROOT, "tracefs")
        if failure is None:
            return TracefsMount(DEFAULT_ROOT, f"tracefs at {DEFAULT_ROOT}")
        reasons.append(failure)
    else:
        reasons.append(f"{DEFAULT_ROOT} does not exist")
    debug_mounted = _is_mounted(DEBUGFS_ROOT, "debugfs")
    if not debug_mounted:
        failure = _mount("nodev", DEBUGFS_ROOT, "debugfs")
        if failure is not None:
            reasons.append(failure)
            raise SessionError(f"tracefs: not mounted, and mounting it failed ({'; '.join(reasons)})")
    legacy = DEBUGFS_ROOT / "tracing"
    if (legacy / "instances").is_dir():  # the kernel mounts tracefs here when it is first looked at
        return TracefsMount(legacy, None if debug_mounted else f"debugfs at {DEBUGFS_ROOT}")
    reasons.append(f"{legacy} has no tracefs")
    raise SessionError(f"tracefs: not mounted, and mounting it failed ({'; '.join(reasons)})")


def _is_mounted(target: Path, fstype: str) -> bool:
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            return any(len(p) > 2 and p[1] == str(target) and p[2] == fstype for p in (line.split() for line in mounts))
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class CpuStats:
    """``per_cpu/cpuN/stats`` of an instance."""

    entries: int = 0
    overrun: int = 0
    commit_overrun: int = 0
    dropped_events: int = 0
    read_events: int = 0
    bytes: int = 0

    @property
    def lost(self) -> int:
        """Events the kernel could not keep: dropped (buffer full) plus overwritten."""
        return self.dropped_events + self.overrun + self.commit_overrun


def _parse_stats(text: str) -> CpuStats:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if value.isdigit():
            values[key.strip().replace(" ", "_")] = int(value)
    return CpuStats(**{k: values.get(k, 0) for k in CpuStats.__dataclass_fields__})


def _write(path: Path, text: str) -> None:
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
    except PermissionError as error:
        raise AccessDenied(f"tracefs: cannot write {path}: needs root") from error
    except OSError as error:
        raise SessionError(f"tracefs: writing {text.strip()!r} to {path} failed: {error.strerror}") from error


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class TracefsInstance:
    """One ftrace instance (``instances/openetw_<name>``) owned by this process."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path = path
        self.root = root
        self.name = path.name

    @classmethod
    def create(
        cls,
        name: str,
        *,
        root: Path | None = None,
        buffer_size_kb: int = 4096,
        circular: bool = False,
        clock: str = "mono",
        buffer_percent: int = 25,
        exclude_pids: Iterable[int] = (),
    ) -> TracefsInstance:
        if not name or "/" in name or name.startswith("."):
            raise InvalidArgument(f"not a valid kernel session name: {name!r}")
        root = root or find_tracefs()
        if root is None:
            raise SessionError("tracefs: not mounted (mount -t tracefs nodev /sys/kernel/tracing)")
        instances = root / "instances"
        if not os.access(instances, os.W_OK):
            raise AccessDenied("tracefs: needs root")
        path = instances / f"{INSTANCE_PREFIX}{name}"
        try:
            path.mkdir()
        except FileExistsError:
            raise SessionError(f"tracefs: instance {path.name} already exists (a session of that name runs)") from None
        except OSError as error:
            raise SessionError(f"tracefs: cannot create {path}: {error.strerror}") from error
        instance = cls(path, root)
        try:
            # The owner first: until it is written, other processes take the instance for one in the making.
            instance.exclude_tasks(exclude_pids)
            _write(path / "tracing_on", "0")
            _write(path / "buffer_size_kb", str(buffer_size_kb))
            _write(path / "trace_clock", clock)
            _write(path / "options" / "overwrite", "1" if circular else "0")
            if (path / "buffer_percent").exists():
                _write(path / "buffer_percent", str(buffer_percent))
        except BaseException:
            instance.remove()
            raise
        return instance

    # -- events ---------------------------------------------------------------------------------
    def available(self, event: str) -> bool:
        return (self.path / "events" / event / "enable").exists()

    def enable(self, events: Iterable[str]) -> list[str]:
        """Enables ``system/event`` tracepoints; returns those this kernel does not have."""
        missing = []
        for event in events:
            if self.available(event):
                _write(self.path / "events" / event / "enable", "1")
            else:
                missing.append(event)
        return missing

    def event_format(self, event: str) -> EventFormat:
        system = event.split("/", 1)[0]
        return parse_event_format((self.root / "events" / event / "format").read_text(), system=system)

    def decoder(self, events: Iterable[str], fields: Mapping[str, Iterable[str]] | None = None) -> EventDecoder:
        """A decoder for ``events``; ``fields`` (event name → field names) limits what it decodes."""
        return EventDecoder((self.event_format(e) for e in events if self.available(e)), fields=fields)

    def page_parser(self) -> PageParser:
        events = self.root / "events"
        return PageParser(parse_header_page((events / "header_page").read_text()), parse_header_event((events / "header_event").read_text()))

    def exclude_tasks(self, tids: Iterable[int]) -> None:
        """Stops tracing these tasks (thread ids): the reader's own syscalls must not be traced."""
        wanted = sorted(set(tids))
        if wanted:
            _write(self.path / "set_event_notrace_pid", " ".join(map(str, wanted)))

    # -- control --------------------------------------------------------------------------------
    def start(self) -> None:
        _write(self.path / "tracing_on", "1")

    def stop(self) -> None:
        _write(self.path / "tracing_on", "0")

    @property
    def cpus(self) -> list[int]:
        return sorted(int(p.name[3:]) for p in (self.path / "per_cpu").iterdir() if p.name[3:].isdigit())

    @property
    def subbuffer_size(self) -> int:
        try:
            return int((self.path / "buffer_subbuf_size_kb").read_text()) * 1024
        except (OSError, ValueError):
            return os.sysconf("SC_PAGE_SIZE")

    def cpu_stats(self) -> dict[int, CpuStats]:
        return {cpu: _parse_stats((self.path / "per_cpu" / f"cpu{cpu}" / "stats").read_text()) for cpu in self.cpus}

    def reader(self, parser: PageParser) -> RingReader:
        return RingReader(self, parser)

    def remove(self) -> None:
        """Disables everything and deletes the instance (idempotent)."""
        if not self.path.exists():
            return
        for setting, value in (("tracing_on", "0"), ("events/enable", "0")):
            try:
                (self.path / setting).write_text(value)
            except OSError:
                pass
        for attempt in range(50):
            try:
                self.path.rmdir()
                return
            except OSError as error:
                if error.errno in _GONE:
                    return
                if error.errno != errno.EBUSY or attempt == 49:
                    raise SessionError(f"tracefs: cannot remove {self.path}: {error.strerror}") from error
                time.sleep(0.02)


def remove_stale_instances(root: Path | None = None, *, grace_s: float = OWNERLESS_GRACE_S) -> list[str]:
    """Removes ``openetw_*`` instances left by crashed sessions; returns the names this call removed.

    An instance is stale when every owner recorded in its ``set_event_notrace_pid`` is dead, or
    when it has no owner and was made more than ``grace_s`` seconds ago. Instances another
    process removes meanwhile are skipped, and so are those still busy (a reader holds them open).
    """
    root = root or find_tracefs()
    if root is None or not (root / "instances").is_dir():
        return []
    removed = []
    for path in sorted((root / "instances").glob(f"{INSTANCE_PREFIX}*")):
        try:
            made = path.stat()
            owners = [int(p) for p in (path / "set_event_notrace_pid").read_text().split() if p.isdigit()]
        except OSError:
            continue  # gone meanwhile
        if owners:
            if any(_pid_alive(pid) for pid in owners):
                continue
        elif time.time() - made.st_ctime < grace_s:
            continue  # its creator has not written the owner yet
        if _remove_stale(path, made.st_ino):
            removed.append(path.name)
    return removed


def _remove_stale(path: Path, inode: int) -> bool:
    """Removes one stale instance; ``False`` when another process removed (or re-made) it meanwhile or it is busy."""
    try:
        if path.stat().st_ino != inode:
            return False  # removed and made again under the same name: not the stale one
    except OSError:
        return False
    for setting in ("tracing_on", "events/enable"):
        try:
            (path / setting).write_text("0")
        except OSError:
            pass
    try:
        path.rmdir()
    except OSError as error:
        if error.errno in _GONE or error.errno == errno.EBUSY:
            return False
        raise SessionError(f"tracefs: cannot remove stale instance {path}: {error.strerror}") from error
    return True


class RingReader:
    """Reads sub-buffers from every CPU of an instance with ``poll()`` and a flush timeout.

    A CPU is drained until its buffer is empty or a read returns a partly filled page (the
    page the kernel is writing); reading on would return a few events per read and spin.
    """

    def __init__(self, instance: TracefsInstance, parser: PageParser) -> None:
        self.instance = instance
        self._commit_offset = parser.header_page.commit_offset
        self._data_offset = parser.header_page.data_offset
        self.page_size = instance.subbuffer_size
        self._fds: dict[int, int] = {}
        for cpu in instance.cpus:
            path = instance.path / "per_cpu" / f"cpu{cpu}" / "trace_pipe_raw"
            self._fds[cpu] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._poll = select.poll()
        for fd in self._fds.values():
            self._poll.register(fd, select.POLLIN)
        self.reads = 0
        self.pages = 0
        self.watermark = 0  # every event older than this (trace clock) has been read

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _drain(self, cpu: int, fd: int, until_empty: bool) -> Iterator[bytes]:
        threshold = self.page_size // _PARTIAL_FRACTION
        while True:
            try:
                page = os.read(fd, self.page_size)
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EINTR):
                    return
                raise SessionError(f"tracefs: reading cpu{cpu} failed: {error.strerror}") from error
            self.reads += 1
            if not page:
                return
            self.pages += 1
            yield page
            if not until_empty and self._free_space(page) > threshold:
                return

    def is_partial(self, page: bytes) -> bool:
        """Whether ``page`` is the one the kernel was still writing (more than 1/8 free)."""
        return self._free_space(page) > self.page_size // _PARTIAL_FRACTION

    def _free_space(self, page: bytes) -> int:
        start = self._commit_offset
        commit = int.from_bytes(page[start : start + 4], "little") & ((1 << 30) - 1)
        return len(page) - self._data_offset - commit

    def read(self, timeout: float | None) -> list[tuple[int, bytes]]:
        """Waits up to ``timeout`` s for data, then drains every CPU once: ``[(cpu, page)]``."""
        if timeout is None or timeout > 0:
            self._poll.poll(None if timeout is None else int(timeout * 1000))
        return self.read_now(until_empty=False)

    def read_now(self, *, until_empty: bool) -> list[tuple[int, bytes]]:
        pages: list[tuple[int, bytes]] = []
        started = time.monotonic_ns()
        for cpu, fd in self._fds.items():
            pages.extend((cpu, page) for page in self._drain(cpu, fd, until_empty))
        self.watermark = started
        return pages
