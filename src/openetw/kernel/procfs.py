"""What /proc tells about processes and threads: the rundown at session start and the
details tracepoints do not carry (command line, thread group, user).

Every function tolerates a process that vanishes while it is read: it returns ``None`` or
skips the process.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

__all__ = ["MapEntry", "ProcessInfo", "ProcSource", "ThreadInfo", "parse_maps"]


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


@dataclass(frozen=True, slots=True)
class MapEntry:
    """One line of ``/proc/<pid>/maps``."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str

    @property
    def executable(self) -> bool:
        return "x" in self.perms


def parse_maps(text: str) -> list[MapEntry]:
    """The lines of a ``/proc/<pid>/maps`` file; lines that do not parse are skipped."""
    entries = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        low, _, high = parts[0].partition("-")
        try:
            entries.append(MapEntry(
                int(low, 16), int(high, 16), parts[1], int(parts[2], 16), int(parts[4]),
                parts[5] if len(parts) > 5 else "",
            ))
        except ValueError:
            continue
    return entries


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

    def fd_path(self, pid: int, fd: int) -> str | None:
        """What descriptor ``fd`` of process ``pid`` names (the target of ``/proc/<pid>/fd/<fd>``):
        a path for a file, ``"pipe:[...]"``/``"socket:[...]"``/``"anon_inode:..."`` for others;
        ``None`` once the descriptor or the process is gone (or another user's, without root)."""
        try:
            return os.readlink(os.path.join(self.root, str(pid), "fd", str(fd)))
        except OSError:
            return None

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

    def pids(self) -> list[int]:
        """The process ids in /proc, in order (threads are not listed there)."""
        try:
            return sorted(int(name) for name in os.listdir(self.root) if name.isdigit())
        except OSError:
            return []

    def maps(self, pid: int) -> list[MapEntry] | None:
        """The memory mappings of a process; ``None`` when it is gone or unreadable, ``[]`` for kernel threads."""
        raw = self._read(str(pid), "maps")
        return None if raw is None else parse_maps(raw.decode("utf-8", "surrogateescape"))

    def kernel_images(self) -> list[tuple[str, int, int]]:
        """``(name, base, size)`` of the kernel's text (its init text included: the idle tasks'
        stacks end there) and of each loaded module; ``[]`` when the addresses are hidden
        (``kptr_restrict``, not root)."""
        images: list[tuple[str, int, int]] = []
        start = end = 0
        try:
            with open(os.path.join(self.root, "kallsyms"), "rb") as f:
                for line in f:  # core kernel symbols come first, in address order, then the modules'
                    parts = line.split()
                    if len(parts) != 3:
                        if len(parts) > 3:  # a module's symbol: the core kernel's are all read
                            break
                        continue
                    if parts[2] in (b"_text", b"_stext") and not start:
                        start = int(parts[0], 16)
                    elif parts[2] == b"_etext" and not end:
                        end = int(parts[0], 16)
                    elif parts[2] == b"_einittext":  # the init text (start_kernel, under the idle tasks' stacks)
                        end = max(end, int(parts[0], 16))
                        break
        except (OSError, ValueError):
            return []
        if not start or end <= start:
            return []
        images.append(("[kernel.kallsyms]", start, end - start))
        raw = self._read("modules")
        for module in (raw or b"").decode("utf-8", "replace").splitlines():
            fields = module.split()
            if len(fields) < 6 or not fields[1].isdigit():
                continue
            try:
                address = int(fields[5], 16)
            except ValueError:
                continue
            if address:
                images.append((f"[{fields[0]}]", address, int(fields[1])))
        return images

    @staticmethod
    def build_id(path: str) -> str | None:
        """The GNU build id of the ELF file at ``path`` (from its first 64 KiB), else None."""
        from openetw.symbols.elf import build_id_of_head

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return build_id_of_head(os.pread(fd, 1 << 16, 0))
        except OSError:
            return None
        finally:
            os.close(fd)

    def kernel_symbols(self) -> list[tuple[int, str]]:
        """``(address, name)`` of the kernel's text symbols (kallsyms types t, T, w, W), sorted;
        ``[]`` when the addresses are hidden."""
        symbols: list[tuple[int, str]] = []
        try:
            with open(os.path.join(self.root, "kallsyms"), "rb") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in (b"t", b"T", b"w", b"W"):
                        address = int(parts[0], 16)
                        if address:
                            symbols.append((address, parts[2].decode("ascii", "replace")))
        except (OSError, ValueError):
            return []
        symbols.sort()
        return symbols

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
