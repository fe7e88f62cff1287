"""System call arguments and path strings (the ``syscall_args`` flag): an openetw record beside
SysClEnter for each call of the path-taking system calls (an event class of
:class:`~openetw.kernel.classes.KernelEventMapper`).

Windows' SysClEnter keeps only the called address; DTrace's ``syscall::openat:entry`` sees the
arguments and ``copyinstr(arg1)`` the path. The per-call tracepoints give a path only as a
pointer into the caller's memory, so the strings are copied while the call enters, by a BPF
program (:mod:`openetw.kernel.bpf_args`); its events (``syscall_args``) become these records.

The record (PerfInfo group, opcode :data:`SYSCALL_ARGS`, version 0, thread and process of the
caller): u32 call number, u8 mask of the arguments that are paths, u8 mask of those that could
not be read (counted in ``strings_unread``), u16 0, six u64 arguments, then each readable path
as UTF-8 ending in NUL, in argument order. Paths are cut at 255 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl.record import EventRecord
from openetw.kernel.classes_base import PERFINFO_GROUP, MapperState

__all__ = ["PATH_SYSCALLS", "SYSCALL_ARGS", "SYSCALL_ARGS_HOOK", "SyscallArgEvents", "parse_syscall_args", "same_call"]

SYSCALL_ARGS = 0x78
"""PerfInfo opcode of the arguments record (unused by Windows' PerfInfo events)."""
SYSCALL_ARGS_HOOK = PERFINFO_GROUP << 8 | SYSCALL_ARGS
_VERSION = 0
_HEAD = struct.Struct("<IBBH6Q")
_SYSTEM_HEADER = L.SYSTEM_TRACE_HEADER.struct
_SYSTEM64, _TYPED = L.HEADER_TYPE_SYSTEM64, F.TYPED_FLAGS

PATH_SYSCALLS: Mapping[str, tuple[int, ...]] = {
    "open": (0,), "openat": (1,), "openat2": (1,), "creat": (0,), "execve": (0,), "execveat": (1,),
    "newstat": (0,), "newlstat": (0,), "newfstatat": (1,), "statx": (1,),
    "access": (0,), "faccessat": (1,), "faccessat2": (1,), "unlink": (0,), "unlinkat": (1,),
    "mkdir": (0,), "mkdirat": (1,), "rmdir": (0,), "rename": (0, 1), "renameat": (1, 3), "renameat2": (1, 3),
    "chdir": (0,), "readlink": (0,), "readlinkat": (1,), "truncate": (0,), "chmod": (0,), "fchmodat": (1,),
    "chown": (0,), "fchownat": (1,), "symlink": (0, 1), "symlinkat": (0, 2), "link": (0, 1), "linkat": (1, 3),
}  # fmt: skip
"""The calls the ``syscall_args`` flag records: call → the arguments that are path strings."""


def parse_syscall_args(user_data: bytes) -> tuple[int, tuple[int, ...], dict[int, str | None]]:
    """(call number, the six arguments, path argument index → its string or ``None`` unread)."""
    number, paths, unread, _, *args = _HEAD.unpack_from(user_data, 0)
    strings: dict[int, str | None] = {}
    at = _HEAD.size
    for index in range(6):
        if not paths >> index & 1:
            continue
        if unread >> index & 1:
            strings[index] = None
            continue
        end = user_data.find(b"\0", at)
        end = len(user_data) if end < 0 else end
        strings[index] = user_data[at:end].decode("utf-8", errors="replace")
        at = end + 1
    return number, tuple(args), strings


Parsed = tuple[int, tuple[int, ...], dict[int, str | None]]


def same_call(first: Parsed, second: Parsed) -> bool:
    """Whether two records of one thread, one right after the other (:func:`parse_syscall_args`),
    are of one call: with every call recorded, a path-taking call has the record of
    ``raw_syscalls/sys_enter`` (no paths) and its own (with its paths), of the same call number
    and path pointers. (Their other arguments may differ: the call's own tracepoint has only the
    call's arguments and sign-extends an ``int``, ``raw_syscalls`` gives six registers as they were.)"""
    if first[0] != second[0] or bool(first[2]) == bool(second[2]):
        return False
    paths = first[2] or second[2]
    return all(first[1][index] == second[1][index] for index in paths)


class SyscallArgEvents(MapperState):
    """Maps the ``syscall_args`` events (:class:`~openetw.kernel.bpf_args.BpfArgsSource`) to the arguments record."""

    strings_unread = 0

    def _syscall_args_parts(self, v: Mapping[str, Any]) -> tuple[int, int | None, bytes]:
        """(thread, process or None, payload) of a ``syscall_args`` event."""
        tid = int(v["tid"])
        pid = int(v.get("pid") or 0) or None
        if pid is not None:
            self._tgid.setdefault(tid, pid)
        payload = v.get("payload")
        if payload is not None:
            return tid, pid, payload
        paths: Mapping[int, str | None] = v["paths"]
        path_mask = unread = 0
        texts = []
        for index in sorted(paths):
            path_mask |= 1 << index
            text = paths[index]
            if text is None:
                unread |= 1 << index
                self.strings_unread += 1
            else:
                texts.append(text.encode("utf-8", errors="replace").replace(b"\0", b"") + b"\0")
        args = [int(a) & 0xFFFFFFFFFFFFFFFF for a in v["args"]][:6]
        args += [0] * (6 - len(args))
        return tid, pid, _HEAD.pack(int(v["nr"]) & 0xFFFFFFFF, path_mask, unread, 0, *args) + b"".join(texts)

    def _on_syscall_args(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        tid, pid, payload = self._syscall_args_parts(v)
        return [self._record(PERFINFO_GROUP, SYSCALL_ARGS, _VERSION, tid, ts, cpu, payload, pid=pid)]

    def _syscall_args_raw(self, ts: int, v: Mapping[str, Any]) -> bytes:
        """The bytes of :meth:`_on_syscall_args`'s record (a sink's fast path)."""
        tid, pid, payload = self._syscall_args_parts(v)
        size = _SYSTEM_HEADER.size + len(payload)
        header = _SYSTEM_HEADER.pack(_VERSION, _SYSTEM64, _TYPED, size, SYSCALL_ARGS_HOOK, tid,
                                     self.process_of(tid) if pid is None else pid, ts, 0, 0)  # fmt: skip
        return header + payload
