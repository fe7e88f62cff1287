"""What /proc tells about processes and threads: the rundown at session start and the
details tracepoints do not carry (command line, thread group, user).

Every function tolerates a process that vanishes while it is read: it returns ``None`` or
skips the process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ProcessInfo", "ProcSource", "ThreadInfo"]


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    tid: int
    name: str


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    parent_pid: int
    image: str
    command_line: str
    uid: int | None
    threads: tuple[ThreadInfo, ...] = ()


class ProcSource:
    """Reads /proc (or another root with the same layout, for tests)."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def _read(self, *parts: str) -> bytes | None:
        try:
            with open(os.path.join(self.root, *parts), "rb") as f:
                return f.read()
        except OSError:
            return None

    def command_line(self, pid: int) -> str | None:
        """The arguments joined by spaces; ``None`` when unreadable, ``""`` for kernel threads."""
        raw = self._read(str(pid), "cmdline")
        if raw is None:
            return None
        return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")

    def comm(self, pid: int, tid: int | None = None) -> str | None:
        raw = self._read(str(pid), "task", str(tid), "comm") if tid is not None else self._read(str(pid), "comm")
        return None if raw is None else raw.rstrip(b"\n").decode("utf-8", "replace")

    def status(self, tid: int) -> dict[str, str]:
        raw = self._read(str(tid), "status")
        if raw is None:
            return {}
        fields: dict[str, str] = {}
        for line in raw.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        return fields

    def thread_group(self, tid: int) -> int | None:
        """The process (thread group) id of a thread, while it lives."""
        value = self.status(tid).get("Tgid")
        return int(value) if value and value.isdigit() else None

    def image(self, pid: int) -> str | None:
        """The executable's file name (``/proc/<pid>/exe``), else the task name."""
        try:
            target = os.readlink(os.path.join(self.root, str(pid), "exe"))
        except OSError:
            return self.comm(pid)
        return os.path.basename(target.removesuffix(" (deleted)")) or self.comm(pid)

    def process(self, pid: int) -> ProcessInfo | None:
        status = self.status(pid)
        if not status or status.get("Tgid") != str(pid):
            return None
        try:
            parent = int(status.get("PPid", "0"))
        except ValueError:
            parent = 0
        uid_text = status.get("Uid", "").split()
        uid = int(uid_text[0]) if uid_text and uid_text[0].isdigit() else None
        threads = []
        try:
            tids = sorted(int(name) for name in os.listdir(os.path.join(self.root, str(pid), "task")) if name.isdigit())
        except OSError:
            tids = [pid]
        for tid in tids:
            threads.append(ThreadInfo(tid, self.comm(pid, tid) or ""))
        return ProcessInfo(
            pid=pid,
            parent_pid=parent,
            image=self.image(pid) or status.get("Name", ""),
            command_line=self.command_line(pid) or "",
            uid=uid,
            threads=tuple(threads),
        )

    def processes(self) -> list[ProcessInfo]:
        """Every live process, in pid order."""
        try:
            pids = sorted(int(name) for name in os.listdir(self.root) if name.isdigit())
        except OSError:
            return []
        found = []
        for pid in pids:
            info = self.process(pid)
            if info is not None:
                found.append(info)
        return found
