"""FileIo records from the file system calls: Create, Read, Write, Flush, Cleanup and Close (an
event class of :class:`~openetw.kernel.classes.KernelEventMapper`).

Each call's enter event gives the arguments (descriptor, explicit position, open flags), its
exit event the result; one call per thread is in progress at a time. The mapper follows each
process's descriptors (``dup`` shares one file description and its position, exec forgets
close-on-exec ones, exit forgets them all) so that reads and writes name the file and offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.classes_base import (
    FILE_CLEANUP,
    FILE_CLOSE,
    FILE_CREATE,
    FILE_FLUSH,
    FILE_READ,
    FILE_WRITE,
    FILEIO_GROUP,
    FILEIO_VERSION,
    MapperState,
    wide_string,
)

__all__ = ["FILE_SYSCALLS", "FileEvents", "OpenFile", "file_fields_used", "file_key"]

_OPEN_EXITS = frozenset({"sys_exit_open", "sys_exit_openat", "sys_exit_openat2", "sys_exit_creat"})

# System calls the ``file_io`` flag follows: name → (kind, fd field, explicit position field).
FILE_SYSCALLS: Mapping[str, tuple[str, str | None, str | None]] = {
    "open": ("open", None, None), "openat": ("open", None, None), "openat2": ("open", None, None),
    "creat": ("open", None, None),
    "read": ("read", "fd", None), "readv": ("read", "fd", None),
    "pread64": ("read", "fd", "pos"), "preadv": ("read", "fd", "pos_l"), "preadv2": ("read", "fd", "pos_l"),
    "write": ("write", "fd", None), "writev": ("write", "fd", None),
    "pwrite64": ("write", "fd", "pos"), "pwritev": ("write", "fd", "pos_l"), "pwritev2": ("write", "fd", "pos_l"),
    "lseek": ("seek", "fd", None),
    "close": ("close", "fd", None), "close_range": ("close_range", "fd", None),
    "fsync": ("flush", "fd", None), "fdatasync": ("flush", "fd", None),
    "dup": ("dup", "fildes", None), "dup2": ("dup", "oldfd", None), "dup3": ("dup", "oldfd", None),
}


_O_WRONLY, _O_CREAT, _O_EXCL, _O_TRUNC, _O_APPEND, _O_CLOEXEC = 0o1, 0o100, 0o200, 0o1000, 0o2000, 0o2000000
_FILE_OPEN, _FILE_CREATE, _FILE_OPEN_IF, _FILE_OVERWRITE, _FILE_OVERWRITE_IF = 1, 2, 3, 4, 5
_SHARE_ALL = 0x7  # FILE_SHARE_READ | WRITE | DELETE: Linux never locks a file against other opens
_EBADF = 9
_CLOSE_RANGE_CLOEXEC = 0x4

_FILE_CREATE_HEAD = struct.Struct("<QQIIII")
_FILE_SIMPLE = struct.Struct("<QQQI")
_FILE_RW = struct.Struct("<QQQQIII")


class OpenFile:
    """A descriptor the mapper follows: its FileObject key and the description's file position.

    Descriptors made by dup() share the object (one open file description, one position).
    """

    __slots__ = ("key", "position", "close_on_exec")

    def __init__(self, key: int, position: int | None, close_on_exec: bool) -> None:
        self.key = key
        self.position = position  # None: not known (O_APPEND, or moved where the mapper cannot see)
        self.close_on_exec = close_on_exec


def file_key(pid: int, fd: int) -> int:
    """The FileObject/FileKey of descriptor ``fd`` of process ``pid``: ``pid << 32 | fd``."""
    return (pid & 0xFFFFFFFF) << 32 | (fd & 0xFFFFFFFF)


def _is_file_path(path: str) -> bool:
    """A /proc fd target naming a file in the directory tree (not a device, pipe, socket, anon inode)."""
    if not path.startswith("/"):
        return False
    return not path.startswith("/dev/") or path.startswith("/dev/shm/")


def _create_disposition(flags: int) -> int:
    if flags & _O_CREAT:
        if flags & _O_EXCL:
            return _FILE_CREATE
        return _FILE_OVERWRITE_IF if flags & _O_TRUNC else _FILE_OPEN_IF
    return _FILE_OVERWRITE if flags & _O_TRUNC else _FILE_OPEN


def file_fields_used() -> dict[str, frozenset[str]]:
    """Tracepoint name → the fields the file system call handlers read."""
    used: dict[str, frozenset[str]] = {}
    for call, (_, fd_field, position_field) in FILE_SYSCALLS.items():
        wanted = {"common_pid"}
        wanted.update(f for f in (fd_field, position_field) if f is not None)
        if call in ("open", "openat", "dup3", "close_range"):
            wanted.add("flags")
        if call in ("dup2", "dup3"):
            wanted.add("newfd")
        if call == "close_range":
            wanted.add("max_fd")
        used[f"sys_enter_{call}"] = frozenset(wanted)
        used[f"sys_exit_{call}"] = frozenset({"common_pid", "ret"})
    return used


class FileEvents(MapperState):
    """Each process's open descriptors and the file system call each thread is in."""

    def on_arrival(self, events: list[tuple[int, int, str, Mapping[str, Any]]]) -> None:
        """Look up, the moment events are read (before they wait to be mapped in time order),
        what /proc knows only briefly: the file a new descriptor names, kept in the event as
        ``fd_path``. The descriptor may be closed by the time its open is mapped."""
        if "file_io" not in self.flags:
            return
        fd_path = getattr(self.proc, "fd_path", None)
        if fd_path is None:
            return
        for _, _, name, values in events:
            if name in _OPEN_EXITS and values["ret"] >= 0 and isinstance(values, dict):
                values["fd_path"] = fd_path(values["common_pid"], values["ret"])

    # -- files ----------------------------------------------------------------------------------
    # The enter event gives the arguments (descriptor, explicit position, open flags), the exit
    # event the result; one call per thread is in progress at a time.
    def _file_enter_handler(
        self, call: str, kind: str, fd_field: str | None, position_field: str | None,
    ) -> Callable[[int, int, Mapping[str, Any]], list[EventRecord]]:
        calls = self._file_calls
        no_records: list[EventRecord] = []
        fd_key = fd_field or ""  # (every kind that reads a descriptor has its field)

        def on_enter(ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
            position = v[position_field] if position_field is not None else None
            if position is not None and position >= 1 << 63:
                position = None  # preadv2/pwritev2 with -1: the file position
            if kind == "open":
                flags = v["flags"] if call in ("open", "openat") else (_O_CREAT | _O_WRONLY | _O_TRUNC if call == "creat" else None)
                calls[v["common_pid"]] = (call, -1, None, flags)
            elif kind == "dup":
                new_fd = v["newfd"] if call != "dup" else -1
                calls[v["common_pid"]] = (call, v[fd_key], new_fd, v["flags"] if call == "dup3" else None)
            elif kind == "close_range":
                calls[v["common_pid"]] = (call, v["fd"], v["max_fd"], v["flags"])
            else:
                calls[v["common_pid"]] = (call, v[fd_key], position, None)
            return no_records

        return on_enter

    def _file_exit_handler(self, call: str, kind: str) -> Callable[[int, int, Mapping[str, Any]], list[EventRecord]]:
        calls = self._file_calls
        no_records: list[EventRecord] = []

        def on_exit(ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
            tid = v["common_pid"]
            pending = calls.pop(tid, None)
            if pending is None or pending[0] != call:
                return no_records  # the enter was before the session (or lost)
            ret = v["ret"]
            _, fd, argument, flags = pending
            pid = self.process_of(tid)
            if kind == "open":
                return self._file_opened(pid, tid, ts, cpu, ret, flags, v.get("fd_path"))
            files = self._files.get(pid)
            if kind == "close_range":
                if ret == 0 and files:
                    assert argument is not None
                    for known in [f for f in files if fd <= f <= argument]:
                        if flags is not None and flags & _CLOSE_RANGE_CLOEXEC:
                            files[known].close_on_exec = True
                        else:
                            del files[known]
                return no_records
            if kind == "dup":
                if ret >= 0 and files is not None:
                    if ret in files:
                        del files[ret]  # dup2/dup3 closed what the new descriptor named
                    source = files.get(fd)
                    if source is not None and ret != fd:
                        files[ret] = source
                return no_records
            if not files:
                return no_records
            opened = files.get(fd)
            if opened is None:
                return no_records
            if kind == "close":
                if ret != -_EBADF:
                    del files[fd]  # closed even when close() fails with EINTR or EIO
                if ret != 0:
                    return no_records
                simple = _FILE_SIMPLE.pack(0, opened.key, opened.key, tid)
                return [
                    self._record(FILEIO_GROUP, FILE_CLEANUP, FILEIO_VERSION, tid, ts, cpu, simple, pid=pid),
                    self._record(FILEIO_GROUP, FILE_CLOSE, FILEIO_VERSION, tid, ts, cpu, simple, pid=pid),
                ]
            if ret < 0:
                return no_records
            if kind == "seek":
                opened.position = ret
                return no_records
            if kind == "flush":
                if ret != 0:
                    return no_records
                payload = _FILE_SIMPLE.pack(0, opened.key, opened.key, tid)
                return [self._record(FILEIO_GROUP, FILE_FLUSH, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]
            if argument is not None:
                offset = argument
            else:
                offset = opened.position if opened.position is not None else 0
                if opened.position is not None:
                    opened.position += ret
            opcode = FILE_READ if kind == "read" else FILE_WRITE
            payload = _FILE_RW.pack(offset, 0, opened.key, opened.key, tid, ret & 0xFFFFFFFF, 0)
            return [self._record(FILEIO_GROUP, opcode, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]

        return on_exit

    def _file_opened(self, pid: int, tid: int, ts: int, cpu: int, fd: int, flags: int | None, path: str | None = None) -> list[EventRecord]:
        if fd < 0:
            return []
        files = self._files.setdefault(pid, {})
        files.pop(fd, None)
        if path is None:
            fd_path = getattr(self.proc, "fd_path", None)
            path = fd_path(pid, fd) if fd_path is not None else None
        if path is not None and not _is_file_path(path):
            return []
        known_flags = flags if flags is not None else 0
        key = file_key(pid, fd)
        # openat2's flags sit behind a user pointer: position and close-on-exec are unknown.
        position = None if flags is None or flags & _O_APPEND else 0
        files[fd] = OpenFile(key, position, flags is None or bool(flags & _O_CLOEXEC))
        options = _create_disposition(known_flags) << 24 if flags is not None else 0
        payload = _FILE_CREATE_HEAD.pack(0, key, tid, options, 0, _SHARE_ALL) + wide_string(path or "")
        return [self._record(FILEIO_GROUP, FILE_CREATE, FILEIO_VERSION, tid, ts, cpu, payload, pid=pid)]
