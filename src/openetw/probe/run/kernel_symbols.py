"""What the kernel probes read from the machine: system call names (the kernel headers), kernel
symbols (``/proc/kallsyms``) and a process's thread group and name (``/proc``)."""

from __future__ import annotations

import bisect
import re

__all__ = ["comm_from_proc", "kernel_symbol", "syscall_names", "tgid_from_proc"]

_UNISTD = ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h")
_NR = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$", re.MULTILINE)

_names_cache: dict[int, str] | None = None


def syscall_names() -> dict[int, str]:
    """System call number -> name (x86-64), from the kernel headers."""
    global _names_cache
    if _names_cache is None:
        names: dict[int, str] = {}
        for path in _UNISTD:
            try:
                with open(path, encoding="ascii", errors="replace") as header:
                    text = header.read()
            except OSError:
                continue
            names = {int(number): name for name, number in _NR.findall(text)}
            break
        _names_cache = names
    return _names_cache


_kallsyms: tuple[list[int], list[str]] | None = None


def kernel_symbol(address: int) -> str:
    """``kernel`symbol+0xoff`` from ``/proc/kallsyms`` (root sees the addresses), else the address."""
    global _kallsyms
    if _kallsyms is None:
        entries: list[tuple[int, str]] = []
        try:
            with open("/proc/kallsyms", encoding="ascii", errors="replace") as table:
                for line in table:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in "tTwW":
                        value = int(parts[0], 16)
                        if value:
                            entries.append((value, parts[2]))
        except OSError:
            pass
        entries.sort()
        _kallsyms = ([a for a, _ in entries], [n for _, n in entries])
    addresses, names = _kallsyms
    at = bisect.bisect_right(addresses, address) - 1
    if at < 0:
        return f"0x{address:x}"
    return f"kernel`{names[at]}+0x{address - addresses[at]:x}"


def tgid_from_proc(tid: int) -> int | None:
    try:
        with open(f"/proc/{tid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def comm_from_proc(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            return comm.read().strip()
    except OSError:
        return ""
