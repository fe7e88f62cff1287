"""System call arguments and path strings at the call's entry, read in the kernel by a small BPF
program (I/O shell; the ``syscall_args`` flag, root only).

The per-call tracepoints (``syscalls/sys_enter_openat`` ...) give a path argument as a pointer
into the caller's memory, and on kernels without kprobes or eprobes nothing in tracefs follows
it. So, as DTrace's ``copyinstr`` does, the string is copied while the call enters: a BPF
program (built here instruction by instruction, no compiler needed) is attached to the enter
tracepoint of each call asked for (one ``perf_event_open`` event each +
``PERF_EVENT_IOC_SET_BPF``: it then runs on every CPU; one program per kind of call, shared by
the tracepoints of that kind). ``calls`` names them (names or shell patterns of
``syscalls/sys_enter_<name>``; ``stat`` finds ``newstat``); by default the path-taking calls of
:data:`~openetw.kernel.classes_args.PATH_SYSCALLS`. ``"*"`` (or ``""``) asks for every call: then
one program on ``raw_syscalls/sys_enter``, whose record holds every call's number and six
arguments, records the arguments of all of them, and the path-taking calls' own programs add
their paths (a path-taking call then has two records, one after the other: the reader of the
records keeps the one with the paths, see :func:`~openetw.kernel.classes_args.same_call`).

Each call writes one record into a BPF ring buffer: CLOCK_MONOTONIC time, thread and process,
CPU, call number, the six argument slots (88 bytes), and for a path-taking call up to two paths
of at most 255 bytes (600 bytes; ``bpf_probe_read_user_str``; a path it cannot read, a page not
in memory, has a negative length). A record the ring has no room for is counted by the program
in a counter map: :meth:`BpfArgsSource.lost`. A call asked for whose tracepoint the kernel does
not have (or refuses) is listed in :attr:`BpfArgsSource.missing`; its entries carry no
arguments record.

Events: ``(time, cpu, "syscall_args", {"tid", "pid", "nr", "args", "paths"})``, ``paths`` the
path argument index → its text or ``None`` (unread); a record without paths (the most common by
far) is ``{"tid", "pid", "payload"}``, the arguments record's payload
(:mod:`~openetw.kernel.classes_args`) as the program wrote it.
"""

from __future__ import annotations

import ctypes
import fnmatch
import mmap
import os
import re
import select
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from openetw.errors import AccessDenied, SessionError
from openetw.kernel import perf_format as F
from openetw.kernel.classes_args import PATH_SYSCALLS
from openetw.kernel.perf import online_cpus, perf_event_open
from openetw.kernel.source import RawKernelEvent

__all__ = ["EVERY_CALL", "RECORD_SIZE", "BpfArgsSource", "build_program", "enter_calls"]

_BPF = 321  # x86_64
_MAP_CREATE, _MAP_LOOKUP, _PROG_LOAD = 0, 1, 5
_RINGBUF, _ARRAY, _PERCPU_ARRAY = 27, 2, 6
_TRACEPOINT_PROG = 5
_SET_BPF = 0x40042408  # PERF_EVENT_IOC_SET_BPF
_IOC_ENABLE, _IOC_DISABLE = 0x2400, 0x2401
_UPDATE, _CURRENT_COMM = 2, 16  # bpf_map_update_elem, bpf_get_current_comm
_HASH = 1
_MAP_UPDATE = 2
_LOOKUP, _KTIME, _PID_TGID, _CPU_ID, _READ_USER_STR, _RINGBUF_OUTPUT = 1, 5, 14, 8, 114, 130
_BUSY, _DISCARD = 1 << 31, 1 << 30
PATH_BYTES = 256
_PATHS_AT = 88
RECORD_SIZE = _PATHS_AT + 2 * PATH_BYTES
EVERY_CALL = "*"
"""The ``calls`` of every system call (``syscall:::entry``)."""
_EVERY_CALL_TRACEPOINT = "raw_syscalls/sys_enter"
# time, tid, pid, then the arguments record's payload without paths (nr, 0, args: bytes 16..72), path
# lengths, path argument indices (+1, a byte each), cpu.
_HEAD = struct.Struct("<QIII4x6QiiII")
_PAYLOAD_HEAD = struct.Struct("<QII56s12xI")  # time, tid, pid, the payload, cpu
_LENGTH = struct.Struct("<I")
_PAGE = mmap.PAGESIZE
_MAX_PROCESSES = 65536  # traced processes (and threads: a thread's clone is a fork to the tracepoint)
_WATERMARK_LAG_NS = 5_000_000
READ_LIMIT = 1_024  # records one read takes from the ring at most (the session reads its other sources in between)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.restype = ctypes.c_int
_libc.ioctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def _map_fd(dst: int, fd: int) -> bytes:
    return _insn(0x18, dst, 1, 0, fd) + _insn(0, 0, 0, 0, 0)  # ld_imm64 with BPF_PSEUDO_MAP_FD


def build_program(paths: tuple[int, ...], scratch_fd: int, ring_fd: int, drops_fd: int, arguments: int = 6, pids_fd: int = -1,
                  comms_fd: int = -1) -> bytes:  # fmt: skip
    """The BPF program for one call of ``arguments`` arguments, of which ``paths`` are path
    strings (at most two). It reads no further into the tracepoint's record than the call's
    arguments (the kernel refuses to attach a program that would). With ``pids_fd`` (a hash
    map of process ids), it records the calls of those processes only; with ``comms_fd`` (a hash
    map of 16-byte thread names, NUL-padded), the calls of threads of those names only."""
    r0, r1, r2, r3, r4, r6, r7, fp = 0, 1, 2, 3, 4, 6, 7, 10
    out: list[bytes] = [_insn(0xBF, r6, r1)]  # r6 = ctx
    exit_jumps = []
    if pids_fd >= 0:
        out += [
            _insn(0x85, imm=_PID_TGID), _insn(0x77, r0, 0, 0, 32), _insn(0x63, fp, r0, -8),  # *(u32 *)(fp - 8) = pid
            *[_map_fd(r1, pids_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -8), _insn(0x85, imm=_LOOKUP),
        ]  # fmt: skip
        exit_jumps.append(len(out))
        out.append(b"")  # if r0 == 0 goto out: not a traced process
    if comms_fd >= 0:
        out += [
            _insn(0xBF, r1, fp), _insn(0x07, r1, 0, 0, -24), _insn(0xB7, r2, 0, 0, 16), _insn(0x85, imm=_CURRENT_COMM),
            *[_map_fd(r1, comms_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -24), _insn(0x85, imm=_LOOKUP),
        ]  # fmt: skip
        exit_jumps.append(len(out))
        out.append(b"")  # if r0 == 0 goto out: a thread of another name
    out += [
        _insn(0x62, fp, 0, -4, 0),  # *(u32 *)(fp - 4) = 0: the maps' key
        *[_map_fd(r1, scratch_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -4), _insn(0x85, imm=_LOOKUP),
    ]  # fmt: skip
    exit_jumps.append(len(out))
    out.append(b"")  # if r0 == 0 goto out (patched below)
    out += [
        _insn(0xBF, r7, r0),
        _insn(0x85, imm=_KTIME), _insn(0x7B, r7, r0, 0),  # time
        _insn(0x85, imm=_PID_TGID), _insn(0x7B, r7, r0, 8),  # tid, pid
        _insn(0x85, imm=_CPU_ID), _insn(0x63, r7, r0, 84),
        _insn(0x61, r1, r6, 8), _insn(0x63, r7, r1, 16),  # __syscall_nr
        _insn(0x62, r7, 0, 20, 0),  # then as the arguments record's payload has it (classes_args): no paths
    ]  # fmt: skip
    for index in range(6):
        if index < arguments:
            out += [_insn(0x79, r1, r6, 16 + 8 * index), _insn(0x7B, r7, r1, 24 + 8 * index)]
        else:
            out += [_insn(0x7A, r7, 0, 24 + 8 * index, 0)]  # *(u64 *)(r7 + ...) = 0
    indices = sum((index + 1) << 8 * slot for slot, index in enumerate(paths[:2]))
    out.append(_insn(0x62, r7, 0, 80, indices))
    for slot in range(2):
        if slot < len(paths):
            out += [
                _insn(0xBF, r1, r7), _insn(0x07, r1, 0, 0, _PATHS_AT + PATH_BYTES * slot), _insn(0xB7, r2, 0, 0, PATH_BYTES),
                _insn(0x79, r3, r6, 16 + 8 * paths[slot]), _insn(0x85, imm=_READ_USER_STR), _insn(0x63, r7, r0, 72 + 4 * slot),
            ]  # fmt: skip
        else:
            out.append(_insn(0x62, r7, 0, 72 + 4 * slot, -1))
    size = RECORD_SIZE if paths else _PATHS_AT  # a call without paths: its head alone
    out += [*[_map_fd(r1, ring_fd)], _insn(0xBF, r2, r7), _insn(0xB7, r3, 0, 0, size), _insn(0xB7, r4, 0, 0, 0),
            _insn(0x85, imm=_RINGBUF_OUTPUT)]  # fmt: skip
    exit_jumps.append(len(out))
    out.append(b"")  # if r0 == 0 goto out: written
    out += [*[_map_fd(r1, drops_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -4), _insn(0x85, imm=_LOOKUP)]
    exit_jumps.append(len(out))
    out.append(b"")
    out += [_insn(0xB7, r1, 0, 0, 1), _insn(0xDB, r0, r1, 0, 0)]  # lock *(u64 *)(r0 + 0) += 1: a record dropped
    return _with_exit(out, exit_jumps)


def _with_exit(out: list[bytes], exit_jumps: list[int]) -> bytes:
    """``out`` and ``return 0``, each of ``exit_jumps`` (an empty part) made ``if r0 == 0 goto`` it."""
    sizes = [len(part) // 8 if part else 1 for part in out]  # jumps count instructions (ld_imm64 is two)
    end = sum(sizes)
    for at in exit_jumps:
        position = sum(sizes[:at])
        out[at] = _insn(0x15, 0, 0, end - position - 1, 0)
    out += [_insn(0xB7, 0, 0, 0, 0), _insn(0x95)]
    return b"".join(out)


def build_fork_program(pids_fd: int, child_offset: int) -> bytes:
    """The BPF program for ``sched/sched_process_fork`` that adds a traced process's children
    (the ``child_pid`` field at ``child_offset``) to the ``pids_fd`` hash map."""
    r0, r1, r2, r3, r4, r6, fp = 0, 1, 2, 3, 4, 6, 10
    out: list[bytes] = [
        _insn(0xBF, r6, r1),
        _insn(0x85, imm=_PID_TGID), _insn(0x77, r0, 0, 0, 32), _insn(0x63, fp, r0, -4),  # the forking process
        *[_map_fd(r1, pids_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -4), _insn(0x85, imm=_LOOKUP),
    ]  # fmt: skip
    exit_jumps = [len(out)]
    out.append(b"")
    out += [
        _insn(0x61, r1, r6, child_offset), _insn(0x63, fp, r1, -8), _insn(0x62, fp, 0, -12, 1),
        *[_map_fd(r1, pids_fd)], _insn(0xBF, r2, fp), _insn(0x07, r2, 0, 0, -8), _insn(0xBF, r3, fp), _insn(0x07, r3, 0, 0, -12),
        _insn(0xB7, r4, 0, 0, 0), _insn(0x85, imm=_UPDATE),
    ]  # fmt: skip
    return _with_exit(out, exit_jumps)


def enter_calls(available: Iterable[str], calls: Iterable[str] | None) -> tuple[list[str], list[str], bool]:
    """``(found, missing, every)``: the calls of ``available`` (names of ``sys_enter_<name>``)
    that ``calls`` names (see the module doc), the path-taking ones first; the names matching
    none; whether every call is asked for (``found`` then holds the path-taking calls only)."""
    names = sorted(set(available))
    wanted = list(PATH_SYSCALLS) if calls is None else [c.strip() for c in calls]
    every = any(c in ("", EVERY_CALL) for c in wanted)
    if every:
        return [c for c in PATH_SYSCALLS if c in names], [], True
    found: list[str] = []
    missing: list[str] = []
    for call in wanted:
        matched = fnmatch.filter(names, call) if any(ch in call for ch in "*?[") else \
            [name for name in (call, f"new{call}") if name in names][:1]  # fmt: skip
        if not matched:
            missing.append(call)
        found.extend(name for name in matched if name not in found)
    return sorted(found, key=lambda name: (name not in PATH_SYSCALLS, name)), missing, False


def _available_calls(root: Path) -> list[str]:
    try:
        return [entry.name.removeprefix("sys_enter_") for entry in (root / "events" / "syscalls").iterdir()
                if entry.name.startswith("sys_enter_")]  # fmt: skip
    except OSError:
        return []


def _bpf(command: int, attr: bytes) -> int:
    buffer = ctypes.create_string_buffer(attr, len(attr))
    result: int = _libc.syscall(ctypes.c_long(_BPF), ctypes.c_int(command), buffer, ctypes.c_uint(len(attr)))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _map_create(kind: int, key_size: int, value_size: int, entries: int) -> int:
    return _bpf(_MAP_CREATE, struct.pack("<IIIII", kind, key_size, value_size, entries, 0).ljust(72, b"\0"))


def _load(program: bytes, name: str) -> int:
    code = ctypes.create_string_buffer(program, len(program))
    license_text = ctypes.create_string_buffer(b"GPL")  # bpf_probe_read_user_str is for GPL programs
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack("<IIQQIIQII16s", _TRACEPOINT_PROG, len(program) // 8, ctypes.addressof(code), ctypes.addressof(license_text),
                       1, len(log), ctypes.addressof(log), 0, 0, name.encode()[:15]).ljust(144, b"\0")  # fmt: skip
    try:
        return _bpf(_PROG_LOAD, attr)
    except OSError as error:
        detail = log.value.decode(errors="replace").strip().splitlines()[-3:]
        raise SessionError(f"bpf: loading the arguments program for {name} failed: {error.strerror} ({' / '.join(detail)})") from None


class BpfArgsSource:
    """The ``syscall_args`` events from BPF programs on the enter tracepoints (see the module doc)."""

    name = "bpf"

    def __init__(self, tracefs_root: Path | None = None, *, calls: Iterable[str] | None = None, pids: Iterable[int] | None = None,
                 execnames: Iterable[str] | None = None, ring_kb: int = 16384) -> None:  # fmt: skip
        """``calls``: the system calls whose arguments are recorded (see the module doc); ``None``:
        the path-taking ones. ``pids``: only the calls of these processes and of the processes
        they start while recorded (their forks, followed by a program on
        ``sched/sched_process_fork``); ``None``: every process's. ``execnames``: only the calls of
        threads of these names (the kernel's ``comm``, at most 15 bytes); ``None``: of any name."""
        self.tracefs_root = tracefs_root
        self.calls = None if calls is None else tuple(calls)
        self.pids = None if pids is None else tuple(pids)
        self.execnames = None if execnames is None else tuple(execnames)
        self.ring_size = 1 << max(12, (ring_kb * 1024 - 1).bit_length())
        self._fds: list[int] = []
        self._events: list[int] = []
        self._maps: list[int] = []
        self._drops_fd = -1
        self._ring_fd = -1
        self._consumer: mmap.mmap | None = None
        self._producer: mmap.mmap | None = None
        self._watermark = 0
        self.missing: list[str] = []
        self.attached: list[str] = []
        self.behind = False  # the last read left records in the ring

    def start(self) -> None:
        from openetw.kernel.tracefs import find_tracefs

        if os.geteuid() != 0:
            raise AccessDenied("bpf: the system call arguments need root")
        root = self.tracefs_root or find_tracefs()
        if root is None:
            raise SessionError("bpf: the enter tracepoints' ids are in tracefs, which is not mounted")
        try:
            scratch = _map_create(_PERCPU_ARRAY, 4, RECORD_SIZE, 1)
            self._maps.append(scratch)
            self._ring_fd = _map_create(_RINGBUF, 0, 0, self.ring_size)
            self._maps.append(self._ring_fd)
            self._drops_fd = _map_create(_ARRAY, 4, 8, 1)
            self._maps.append(self._drops_fd)
        except OSError as error:
            raise SessionError(f"bpf: cannot create the maps: {error.strerror}") from None
        self._consumer = mmap.mmap(self._ring_fd, _PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._producer = mmap.mmap(self._ring_fd, _PAGE + 2 * self.ring_size, mmap.MAP_SHARED, mmap.PROT_READ, offset=_PAGE)
        cpus = online_cpus()
        pids_fd = self._traced_processes(root, cpus[0]) if self.pids is not None else -1
        comms_fd = self._traced_names() if self.execnames is not None else -1
        found, missing, every = enter_calls(_available_calls(root), self.calls)
        self.missing += [f"syscalls/sys_enter_{call}" for call in missing]
        programs: dict[tuple[tuple[int, ...], int], int] = {}  # one program per kind of call, shared by its tracepoints
        tracepoints = [(f"syscalls/sys_enter_{call}", PATH_SYSCALLS.get(call, ())) for call in found]
        if every:
            tracepoints.append((_EVERY_CALL_TRACEPOINT, ()))
        for tracepoint_name, paths in tracepoints:
            id_file = root / "events" / tracepoint_name / "id"
            try:
                tracepoint = int(id_file.read_text())
                fields = (id_file.parent / "format").read_text().count("field:")
            except (OSError, ValueError):
                self.missing.append(tracepoint_name)
                continue
            # After the 4 common fields and the call number (raw_syscalls: one array of six).
            arguments = 6 if tracepoint_name == _EVERY_CALL_TRACEPOINT else max(0, fields - 5)
            program = programs.get((paths, arguments))
            if program is None:
                program = programs[(paths, arguments)] = _load(
                    build_program(paths, scratch, self._ring_fd, self._drops_fd, arguments, pids_fd, comms_fd), f"args_{len(programs)}")
                self._fds.append(program)
            # Disabled until every program is attached.
            attr = F.pack_attr(F.PerfAttr(type=2, config=tracepoint, sample_period=1, sample_type=0, flags=1))
            # A program attached to a tracepoint runs wherever the tracepoint fires: one event (on the
            # first CPU) holds it; a second attach of it to the same tracepoint is refused (EEXIST).
            try:
                fd = perf_event_open(attr, -1, cpus[0])
            except OSError as error:
                if not paths and tracepoint_name != _EVERY_CALL_TRACEPOINT:
                    self.missing.append(tracepoint_name)  # its entries are counted without arguments; not fatal
                    continue
                raise SessionError(f"bpf: perf_event_open of {tracepoint_name}: {error.strerror}") from None
            self._events.append(fd)
            if _libc.ioctl(fd, _SET_BPF, program) < 0:
                code = ctypes.get_errno()
                raise SessionError(f"bpf: attaching the program to {tracepoint_name}: {os.strerror(code)}")
            self.attached.append(tracepoint_name)
        for fd in self._events:
            _libc.ioctl(fd, _IOC_ENABLE, 0)

    def _traced_processes(self, root: Path, cpu: int) -> int:
        """The map of the processes whose calls are recorded, with ``pids`` in it, and the program
        that adds their children as they fork."""
        assert self.pids is not None
        try:
            pids_fd = _map_create(_HASH, 4, 4, _MAX_PROCESSES)
        except OSError as error:
            raise SessionError(f"bpf: cannot create the process map: {error.strerror}") from None
        self._maps.append(pids_fd)
        for pid in self.pids:
            key, value = ctypes.c_uint32(pid), ctypes.c_uint32(1)
            _bpf(_MAP_UPDATE, struct.pack("<IIQQQ", pids_fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0))
        fork = root / "events" / "sched" / "sched_process_fork"
        try:
            tracepoint = int((fork / "id").read_text())
            child = re.search(r"field:pid_t child_pid;\s*offset:(\d+);", (fork / "format").read_text())
        except (OSError, ValueError):
            child = None
        if child is None:
            raise SessionError("bpf: sched/sched_process_fork (to follow the traced processes' children) is missing")
        program = _load(build_fork_program(pids_fd, int(child.group(1))), "args_fork")
        self._fds.append(program)
        attr = F.pack_attr(F.PerfAttr(type=2, config=tracepoint, sample_period=1, sample_type=0, flags=1))
        try:
            fd = perf_event_open(attr, -1, cpu)
        except OSError as error:
            raise SessionError(f"bpf: perf_event_open of sched/sched_process_fork: {error.strerror}") from None
        self._events.append(fd)
        if _libc.ioctl(fd, _SET_BPF, program) < 0:
            raise SessionError(f"bpf: attaching the program to sched/sched_process_fork: {os.strerror(ctypes.get_errno())}")
        return pids_fd

    def _traced_names(self) -> int:
        """The map of the thread names whose calls are recorded."""
        assert self.execnames is not None
        try:
            comms_fd = _map_create(_HASH, 16, 4, max(1, len(self.execnames)))
        except OSError as error:
            raise SessionError(f"bpf: cannot create the name map: {error.strerror}") from None
        self._maps.append(comms_fd)
        for name in self.execnames:
            key = ctypes.create_string_buffer(name.encode("utf-8", errors="replace")[:15].ljust(16, b"\0"), 16)
            value = ctypes.c_uint32(1)
            _bpf(_MAP_UPDATE, struct.pack("<IIQQQ", comms_fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0))
        return comms_fd

    def read(self, timeout: float) -> list[RawKernelEvent]:
        """What the ring holds, at most ``READ_LIMIT`` records: the session reads its other
        sources in between (their rings overflowing would lose system calls, this one's only
        arguments, counted), and, while :attr:`behind` says more wait, without waiting."""
        now = time.monotonic_ns()
        events = self._read_ring(READ_LIMIT)
        if not events and timeout > 0 and self._ring_fd >= 0:
            poller = select.epoll()
            try:
                poller.register(self._ring_fd, select.EPOLLIN)
                poller.poll(timeout)
            finally:
                poller.close()
            now = time.monotonic_ns()
            events = self._read_ring(READ_LIMIT)
        self.behind = len(events) >= READ_LIMIT
        if self.behind:
            now = events[-1][0] + _WATERMARK_LAG_NS  # more wait in the ring: read up to this one only
        self._watermark = max(self._watermark, now - _WATERMARK_LAG_NS)
        return events

    @property
    def watermark(self) -> int:
        return self._watermark

    def stop(self) -> None:
        for fd in self._events:
            _libc.ioctl(fd, _IOC_DISABLE, 0)

    def drain(self) -> list[RawKernelEvent]:
        events = self._read_ring()
        self._watermark = 1 << 62
        return events

    def statistics(self) -> dict[str, Any]:
        """The tracepoints the programs run on (``syscall_args_tracepoints``, a count) and those
        asked for that are missing (``syscall_args_missing``)."""
        return {"syscall_args_tracepoints": len(self.attached), "syscall_args_missing": list(self.missing)}

    def lost(self) -> int:
        if self._drops_fd < 0:
            return 0
        key = ctypes.c_uint32(0)
        value = ctypes.c_uint64(0)
        attr = struct.pack("<IIQQQ", self._drops_fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0)
        try:
            _bpf(_MAP_LOOKUP, attr)
        except OSError:
            return 0
        return int(value.value)

    def close(self) -> None:
        for fd in self._events + self._fds:
            os.close(fd)
        self._events, self._fds = [], []
        for view in (self._consumer, self._producer):
            if view is not None:
                view.close()
        self._consumer = self._producer = None
        for fd in self._maps:
            os.close(fd)
        self._maps = []
        self._ring_fd = self._drops_fd = -1

    def _read_ring(self, limit: int = 1 << 62) -> list[RawKernelEvent]:
        consumer, producer = self._consumer, self._producer
        if consumer is None or producer is None:
            return []
        mask = self.ring_size - 1
        position = struct.unpack_from("<Q", consumer, 0)[0]
        end = struct.unpack_from("<Q", producer, 0)[0]
        events: list[RawKernelEvent] = []
        append, length_of, head_of = events.append, _LENGTH.unpack_from, _PAYLOAD_HEAD.unpack_from
        while position < end and len(events) < limit:
            at = _PAGE + (position & mask)
            length = length_of(producer, at)[0]
            if length & _BUSY:
                break
            size = length & ~(_BUSY | _DISCARD)
            if length & _DISCARD or size < _PATHS_AT:
                pass
            elif size == _PATHS_AT:  # the most common record, without paths: as few steps as can be
                when, tid, pid, payload, cpu = head_of(producer, at + 8)
                append((when, cpu, "syscall_args", {"tid": tid, "pid": pid, "payload": payload}))
            else:
                events.append(_event(producer[at + 8 : at + 8 + min(size, RECORD_SIZE)]))
            position += (size + 8 + 7) & ~7
        struct.pack_into("<Q", consumer, 0, position)
        return events


def _event(raw: bytes) -> RawKernelEvent:
    when, tid, pid, number, *rest = _HEAD.unpack_from(raw, 0)
    args, lengths, indices, cpu = tuple(rest[:6]), rest[6:8], rest[8], rest[9]
    paths: dict[int, str | None] = {}
    for slot in range(2):
        index = (indices >> 8 * slot & 0xFF) - 1
        if index < 0:
            continue
        length = lengths[slot]
        start = _PATHS_AT + PATH_BYTES * slot
        paths[index] = raw[start : start + length - 1].decode("utf-8", errors="replace") if length > 0 else None
    return when, cpu, "syscall_args", {"tid": tid, "pid": pid, "nr": number, "args": args, "paths": paths}
