"""perf_event_open as a kernel event source: image mappings, process side-band and CPU samples.

:class:`PerfSource` opens one perf event per CPU, maps its ring and turns the ring's records
into raw kernel events (see :mod:`openetw.kernel.source`):

=================  ==========================================================================
``perf_mmap2``     an executable file mapping (``pid, tid, addr, len, pgoff, prot, filename``...)
``perf_fork``      a new process or thread (``pid, ppid, tid, ptid``)
``perf_exit``      a thread ended (``pid, ppid, tid, ptid``)
``perf_comm``      a task's name changed (``pid, tid, comm, exec``: ``exec`` when by execve)
``perf_sample``    a CPU sample (``ip, pid, tid, callchain, user``)
=================  ==========================================================================

Timestamps are CLOCK_MONOTONIC nanoseconds (``use_clockid``), the timeline tracefs events of
a session use. Two scopes:

* **system-wide** (``target_pid=None``): ``pid=-1`` on every online CPU. Needs CAP_PERFMON (or
  CAP_SYS_ADMIN) or ``perf_event_paranoid`` ≤ 0.
* **own children** (``target_pid=<pid>``): that process and everything it starts later
  (``inherit=1``), user mode only (``exclude_kernel=1``). This is what an unprivileged user
  gets with ``perf_event_paranoid=2``. Inherited events may not share a per-task ring, so
  there is still one event per CPU (``pid=<pid>, cpu=N``). :class:`HeldCommand` starts a
  command that waits until its events are open.

The rings are read without a lock: ``data_head`` is read once (an aligned 8-byte load), the
records below it are copied, then ``data_tail`` is stored. On x86-64 loads are not reordered
with older loads and stores are not reordered with older loads, which is exactly the
``smp_rmb()`` / ``smp_mb()`` pairing the perf ABI asks of readers; other architectures would
need real barriers and are refused.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import select
import time
from collections.abc import Sequence
from typing import Any

from openetw.errors import AccessDenied, InvalidArgument, SessionError, TraceDataError
from openetw.kernel import perf_format as F
from openetw.kernel.source import RawKernelEvent

__all__ = ["HeldCommand", "PerfSource", "online_cpus"]

_SYSCALL_PERF_EVENT_OPEN = {"x86_64": 298}
_PERF_FLAG_FD_CLOEXEC = 1 << 3
_IOC_ENABLE = 0x2400
_IOC_DISABLE = 0x2401
_CLOCK_MONOTONIC = 1
_PAGE = mmap.PAGESIZE
_NEVER = (1 << 63) - 1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.restype = ctypes.c_int
_libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong)


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """The online CPU numbers (``0-3,6`` style list), else ``range(os.cpu_count())``."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def perf_event_open(attr: bytes, pid: int, cpu: int, group_fd: int = -1, flags: int = _PERF_FLAG_FD_CLOEXEC) -> int:
    """The perf_event_open system call; raises ``OSError`` with the kernel's errno."""
    number = _SYSCALL_PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise SessionError(f"perf_event_open is supported on x86_64 only, not {platform.machine()}")
    buffer = ctypes.create_string_buffer(attr, len(attr))
    fd: int = _libc.syscall(ctypes.c_long(number), buffer, ctypes.c_int(pid), ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


def _ioctl(fd: int, request: int) -> None:
    if _libc.ioctl(fd, request, 0) < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class _Ring:
    """One event's fd and mapped ring."""

    def __init__(self, fd: int, cpu: int, data_pages: int) -> None:
        self.fd = fd
        self.cpu = cpu
        self.size = data_pages * _PAGE
        self.map = mmap.mmap(fd, _PAGE + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._head = ctypes.c_uint64.from_buffer(self.map, F.MMAP_PAGE_DATA_HEAD)
        self._tail = ctypes.c_uint64.from_buffer(self.map, F.MMAP_PAGE_DATA_TAIL)
        self._view = memoryview(self.map)
        self.data = self._view[_PAGE : _PAGE + self.size]

    def unread(self) -> tuple[bytes, int]:
        """The bytes between tail and head, and the head to store once they are used."""
        head = self._head.value  # one aligned load; x86-64 keeps the data loads after it
        tail = self._tail.value
        return F.ring_bytes(self.data, tail, head), head

    def consumed(self, head: int) -> None:
        self._tail.value = head  # a store after the loads of the records: not reordered on x86-64

    def skip(self) -> None:
        self._tail.value = self._head.value

    def close(self) -> None:
        del self._head, self._tail
        self.data.release()
        self._view.release()
        self.map.close()
        os.close(self.fd)


class PerfSource:
    """perf_event_open rings of every online CPU as a :class:`~openetw.kernel.source.KernelEventSource`.

    ``image``: MMAP2 (executable mappings), FORK, EXIT and COMM records. ``profile``: cpu-clock
    samples every ``1/frequency`` s of CPU time with IP, thread, time, CPU and, when
    ``callchains``, the call chain (kernel and user; user only in own-children mode).
    ``ring_pages`` is the data area per CPU in pages (a power of two).
    """

    name = "perf"

    def __init__(
        self,
        *,
        image: bool = True,
        profile: bool = False,
        frequency: int = 1000,
        callchains: bool = True,
        target_pid: int | None = None,
        cpus: Sequence[int] | None = None,
        ring_pages: int = 256,
        max_stack: int = 0,
        watermark_slack_ns: int = 5_000_000,
    ) -> None:
        if not image and not profile:
            raise InvalidArgument("a perf source needs image or profile")
        if ring_pages <= 0 or ring_pages & (ring_pages - 1):
            raise InvalidArgument(f"ring_pages must be a power of two, not {ring_pages}")
        if profile and not 1 <= frequency <= 100_000:
            raise InvalidArgument(f"sampling frequency {frequency} Hz is outside 1..100000")
        self.image = image
        self.profile = profile
        self.frequency = frequency
        self.callchains = callchains
        self.target_pid = target_pid
        self.cpus = list(cpus) if cpus is not None else online_cpus()
        self.ring_pages = ring_pages
        self.max_stack = max_stack
        self.watermark_slack_ns = watermark_slack_ns
        self.sample_type = F.DEFAULT_SAMPLE_TYPE if callchains else F.DEFAULT_SAMPLE_TYPE & ~F.SAMPLE_CALLCHAIN
        self._parser = F.RingParser(self.sample_type)
        self._rings: list[_Ring] = []
        self._poll = select.poll()
        self._watermark = 0
        self._last_time = 0
        self._lost = 0
        self._stopped = False
        self.counts: dict[str, int] = {"records": 0, "samples": 0, "side_band": 0, "throttled": 0, "damaged_reads": 0, "bytes": 0}

    # -- setup ----------------------------------------------------------------------------------
    @property
    def interval_ns(self) -> int:
        """The sampling period in nanoseconds of CPU time (cpu-clock counts nanoseconds)."""
        return max(1, 1_000_000_000 // self.frequency)

    def attr(self) -> F.PerfAttr:
        """The event attributes this source opens (one per CPU)."""
        flags = F.FLAG_DISABLED | F.FLAG_SAMPLE_ID_ALL | F.FLAG_USE_CLOCKID | F.FLAG_WATERMARK
        if self.image:
            flags |= F.FLAG_MMAP | F.FLAG_MMAP2 | F.FLAG_COMM | F.FLAG_COMM_EXEC | F.FLAG_TASK
        if self.target_pid is not None:
            flags |= F.FLAG_INHERIT | F.FLAG_EXCLUDE_KERNEL | F.FLAG_EXCLUDE_HV | F.FLAG_EXCLUDE_CALLCHAIN_KERNEL
        if self.profile:
            config, period = F.PERF_COUNT_SW_CPU_CLOCK, self.interval_ns
        else:
            config, period = F.PERF_COUNT_SW_DUMMY, 1
        return F.PerfAttr(
            type=F.PERF_TYPE_SOFTWARE, config=config, sample_period=period, sample_type=self.sample_type,
            flags=flags, wakeup=max(_PAGE, self.ring_pages * _PAGE // 4), clockid=_CLOCK_MONOTONIC,
            sample_max_stack=self.max_stack,
        )

    def start(self) -> None:
        if self._rings:
            raise SessionError("perf source already started")
        attr = F.pack_attr(self.attr())
        pid = -1 if self.target_pid is None else self.target_pid
        try:
            for cpu in self.cpus:
                try:
                    fd = perf_event_open(attr, pid, cpu)
                except OSError as exc:
                    raise self._open_error(exc, cpu) from exc
                try:
                    ring = _Ring(fd, cpu, self.ring_pages)
                except OSError as exc:
                    os.close(fd)
                    hint = ""
                    if exc.errno == errno.EPERM:
                        hint = " (unprivileged rings count against kernel.perf_event_mlock_kb and RLIMIT_MEMLOCK: use fewer ring_pages)"
                    raise SessionError(f"perf ring of CPU {cpu} ({self.ring_pages} pages) cannot be mapped: {exc.strerror}{hint}") from exc
                self._rings.append(ring)
                self._poll.register(fd, select.POLLIN)
            self._watermark = time.monotonic_ns() - self.watermark_slack_ns
            for ring in self._rings:
                _ioctl(ring.fd, _IOC_ENABLE)
        except BaseException:
            self.close()
            raise

    def _open_error(self, exc: OSError, cpu: int) -> Exception:
        scope = "system-wide" if self.target_pid is None else f"process {self.target_pid}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            hint = " (own-children mode works unprivileged)" if self.target_pid is None else ""
            return AccessDenied(f"perf_event_open {scope} on CPU {cpu}: {exc.strerror}; perf_event_paranoid={_paranoid()}{hint}")
        if exc.errno == errno.ESRCH:
            return SessionError(f"perf_event_open: process {self.target_pid} does not exist")
        if exc.errno == errno.ENOENT or exc.errno == errno.ENOSYS:
            return SessionError(f"perf_event_open: this kernel has no software perf events ({exc.strerror})")
        return SessionError(f"perf_event_open {scope} on CPU {cpu}: {exc.strerror}")

    # -- reading --------------------------------------------------------------------------------
    def read(self, timeout: float) -> list[RawKernelEvent]:
        started = time.monotonic_ns()
        events = self._read_rings()
        if not events and timeout > 0 and not self._stopped and self._rings:
            self._poll.poll(max(0, int(timeout * 1000)))
            started = time.monotonic_ns()
            events = self._read_rings()
        # Anything stamped before ``started`` is either read now or being written this instant.
        self._watermark = max(self._watermark, started - self.watermark_slack_ns)
        return events

    @property
    def watermark(self) -> int:
        return self._watermark

    def stop(self) -> None:
        self._stopped = True
        for ring in self._rings:
            try:
                _ioctl(ring.fd, _IOC_DISABLE)
            except OSError:
                pass

    def drain(self) -> list[RawKernelEvent]:
        events = self._read_rings()
        self._watermark = _NEVER
        return events

    def lost(self) -> int:
        return self._lost

    def close(self) -> None:
        rings, self._rings = self._rings, []
        for ring in rings:
            try:
                self._poll.unregister(ring.fd)
            except (KeyError, ValueError):
                pass
            ring.close()

    def _read_rings(self) -> list[RawKernelEvent]:
        events: list[RawKernelEvent] = []
        for ring in self._rings:
            try:
                raw, head = ring.unread()
                records = self._parser.parse(raw)
            except TraceDataError:
                self.counts["damaged_reads"] += 1
                ring.skip()
                continue
            ring.consumed(head)
            self.counts["bytes"] += len(raw)
            self._to_events(records, ring.cpu, events)
        events.sort(key=_timestamp)
        return events

    def _to_events(self, records: list[F.PerfRecord], ring_cpu: int, out: list[RawKernelEvent]) -> None:
        counts = self.counts
        counts["records"] += len(records)
        for record in records:
            kind = record.kind
            if kind == "lost" or kind == "lost_samples":
                self._lost += int(record.values["lost"])  # type: ignore[call-overload]
                continue
            if kind == "throttle":
                counts["throttled"] += 1
                continue
            if kind == "unthrottle":
                continue
            stamp = record.time if record.time is not None else self._last_time
            self._last_time = stamp
            cpu = record.cpu if record.cpu is not None else ring_cpu
            if kind == "sample":
                counts["samples"] += 1
            else:
                counts["side_band"] += 1
            values: dict[str, Any] = record.values
            out.append((stamp, cpu, "perf_" + kind, values))


def _timestamp(event: RawKernelEvent) -> int:
    return event[0]


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


# A closed pipe without the release byte (the tracer died or cancelled) ends the holder.
_HOLD_SCRIPT = 'read -r _ <&3 || exit 125; exec 3<&-; exec "$@"'
_HOLD_FD = 3


class HeldCommand:
    """A command started but held before it runs, so that perf events can be opened on it.

    The process is ``/bin/sh`` waiting on a pipe (as fd 3); :meth:`release` lets it ``exec``
    the command (same pid), so the trace sees the command's exec, its mappings and everything
    it starts::

        held = HeldCommand(["make", "-j2"])
        source = PerfSource(target_pid=held.pid, profile=True)
        source.start()
        held.release()
        status = held.wait()
    """

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        if not argv:
            raise InvalidArgument("an empty command line")
        read_end, self._write_end = os.pipe()
        spare = -1
        try:
            if read_end == _HOLD_FD:  # dup2 onto itself would keep close-on-exec
                spare = read_end
                read_end = os.dup(read_end)
            self.pid = os.posix_spawn(
                "/bin/sh", ["/bin/sh", "-c", _HOLD_SCRIPT, "openetw-held", *argv],
                dict(os.environ) if env is None else env,
                file_actions=[(os.POSIX_SPAWN_DUP2, read_end, _HOLD_FD)],
            )
        except OSError as exc:
            os.close(self._write_end)
            self._write_end = -1
            raise SessionError(f"cannot start {argv[0]!r}: {exc.strerror}") from exc
        finally:
            os.close(read_end)
            if spare >= 0:
                os.close(spare)
        self.returncode: int | None = None

    def release(self) -> None:
        """Let the command run. Idempotent."""
        if self._write_end >= 0:
            try:
                os.write(self._write_end, b"\n")
            except BrokenPipeError:
                pass  # the holder died already; wait() tells how
            finally:
                os.close(self._write_end)
                self._write_end = -1

    def cancel(self) -> None:
        """Do not run the command: the holder exits with status 125. Idempotent."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status (``-signal`` when killed); ``None`` if still running after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            flags = 0 if deadline is None else os.WNOHANG
            pid, status = os.waitpid(self.pid, flags)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() >= deadline:
                return None
            else:
                time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass

    def __enter__(self) -> HeldCommand:
        return self

    def __exit__(self, *exc: object) -> None:
        released = self._write_end < 0
        self.cancel()  # never released: the holder exits without running the command
        if self.wait(timeout=0 if released else 5) is None:
            self.kill()
            self.wait()
