"""Giving the kernel-trace reader the CPU it needs (I/O shell).

Under CONFIG_SCHED_AUTOGROUP every session (setsid) is one scheduling group with an equal
share of the CPU, and ``nice`` inside a group only orders its own tasks: a reader competing
with a busy group waits in the run queue while the per-CPU rings fill, and the kernel drops
events. Writing a nice value to ``/proc/self/autogroup`` raises the whole group's weight (it
applies to every process of the recording process's session). Without autogroup, the nice
value counts; Linux keeps it per thread, so call :func:`boost_reader` from the reader thread.
A process in the kernel's default autogroup (started outside any setsid session, as under some
container runtimes) cannot reweigh it (the kernel answers EINVAL): then the thread's nice value
is raised instead.
"""

from __future__ import annotations

import errno
import os

__all__ = ["READER_NICE", "boost_reader"]

READER_NICE = -10
"""The nice value asked for (the group's weight becomes ~10x a default group's)."""

_AUTOGROUP_ENABLED = "/proc/sys/kernel/sched_autogroup_enabled"
_AUTOGROUP = "/proc/self/autogroup"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _reason(error: OSError) -> str:
    if error.errno in (errno.EPERM, errno.EACCES):
        return "not permitted (needs CAP_SYS_NICE or root)"
    return error.strerror or str(error)


def boost_reader(nice: int = READER_NICE) -> str | None:
    """Raises the recording process's scheduling priority; returns what was done or why not.

    Returns ``None`` when there is nothing to do (the priority is already at least ``nice``).
    Never raises for a refusal: a session still records at normal priority. Without autogroup
    only the calling thread's nice value changes.
    """
    autogroup = _read(_AUTOGROUP)
    if autogroup is not None and _read(_AUTOGROUP_ENABLED) == "1":
        # "/autogroup-202 nice 0"
        parts = autogroup.split()
        current = int(parts[-1]) if len(parts) >= 3 and parts[-2] == "nice" and parts[-1].lstrip("-").isdigit() else None
        if current is not None and current <= nice:
            return None
        try:
            _write_autogroup_nice(nice)
        except OSError as error:
            refused = f"autogroup nice {nice} {_reason(error)}"
            return _boost_thread(nice, refused)
        return f"autogroup {parts[0] if parts else ''} nice {current if current is not None else '?'} -> {nice}"
    return _boost_thread(nice, "no autogroup")


def _boost_thread(nice: int, why: str) -> str | None:
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError as error:
        return f"reader priority unchanged: {why}; {_reason(error)}"
    if current <= nice:
        return None
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as error:
        return f"reader priority unchanged: {why}; thread nice {nice} {_reason(error)}"
    return f"thread nice {current} -> {nice} ({why})"


def _write_autogroup_nice(nice: int) -> None:
    with open(_AUTOGROUP, "w", encoding="ascii") as f:
        f.write(str(nice))
