"""Proc connector events → the NT Kernel Logger's Process and Thread records.

:func:`install_proc_connector_handlers` registers handlers for the raw events of
:class:`~openetw.kernel.proc_connector.ProcConnectorSource` on a
:class:`~openetw.kernel.classes.KernelEventMapper`. They hand each event to the mapper's own
tracepoint handlers in the shape those expect, so process state, parent images, command lines,
uids and records are made in one place whatever the source:

* ``proc_fork`` of a new process → ``sched_process_fork`` (Process Start with the parent's
  image; Thread Start of its first thread with the ``thread`` flag); of a thread →
  ``task_newtask`` (Thread Start).
* ``proc_exec`` → ``sched_process_exec`` with the image read from ``/proc/<pid>/exe`` (else the
  task name) through ``mapper.proc``; the mapper reads the command line and uid there too.
* ``proc_exit`` → Thread End for a thread; for the process the exit status (the ``exit()``
  value, or 128 + signal) and ``sched_process_exit`` with ``group_dead`` when its last known
  thread is gone (the proc connector does not say which exit ends the group).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.procfs import ProcessInfo

__all__ = ["ProcConnectorHandlers", "install_proc_connector_handlers"]

_CLONE_THREAD = 0x00010000
_EARLY_EXITS_KEPT = 65536
_NOT_MAPPED = ("proc_comm", "proc_uid", "proc_gid", "proc_sid", "proc_ptrace", "proc_coredump")


class ProcConnectorHandlers:
    """The proc connector handlers of one mapper, and the thread bookkeeping they need.

    A process ends when its leader has exited and every thread of it this object knows (from
    forks seen, and from :meth:`note_processes` for those alive at the start) has exited too.
    """

    def __init__(self, mapper: KernelEventMapper) -> None:
        self.mapper = mapper
        self._threads: dict[int, set[int]] = {}  # tgid → its live threads other than the leader
        self._leader_gone: dict[int, int] = {}  # tgid → leader's exit code, other threads still running
        # Tasks whose exit was mapped before the rundown was noted: a /proc scan made before
        # that exit still lists them, and they must not be waited for.
        self._early_exits: set[int] | None = set()

    def install(self) -> ProcConnectorHandlers:
        register = self.mapper.register
        register("proc_fork", self.on_fork)
        register("proc_exec", self.on_exec)
        register("proc_exit", self.on_exit)
        for name in _NOT_MAPPED:
            register(name, self._no_record)
        return self

    def note_processes(self, processes: Iterable[ProcessInfo]) -> None:
        """Learn the threads of the processes of a rundown (call with the list given to
        :meth:`KernelEventMapper.rundown`), so that a process ends with its last thread."""
        early = self._early_exits or set()
        self._early_exits = None
        for info in processes:
            if info.pid in early:
                continue
            others = {thread.tid for thread in info.threads if thread.tid != info.pid and thread.tid not in early}
            if others:
                self._threads[info.pid] = others

    # -- handlers -------------------------------------------------------------------------------
    def on_fork(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        mapper = self.mapper
        child, tgid = v["child_pid"], v["child_tgid"]
        if child != tgid:
            # A thread. The event's parent is the process's parent, not the creating thread.
            self._threads.setdefault(tgid, set()).add(child)
            return mapper.map("task_newtask", ts, cpu, {"common_pid": tgid, "pid": child, "clone_flags": _CLONE_THREAD, "comm": ""})
        self._threads.pop(child, None)
        self._leader_gone.pop(child, None)
        parent_tid, parent_tgid = v["parent_pid"], v["parent_tgid"]
        if parent_tid != parent_tgid and mapper.process_of(parent_tid) != parent_tgid:
            parent_tid = parent_tgid  # the forking thread is not known: name its process
        parent_image = (mapper.proc.image(parent_tgid) if mapper.proc is not None else None) or ""
        return mapper.map("sched_process_fork", ts, cpu, {
            "parent_pid": parent_tid, "child_pid": child, "parent_comm": parent_image, "child_comm": "",
        })

    def on_exec(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        mapper = self.mapper
        pid = v["tgid"]  # the exec'ing thread has become the leader
        self._threads.pop(pid, None)  # exec ended every other thread (their exits were reported)
        self._leader_gone.pop(pid, None)  # a non-leader exec: the old leader's exit ended nothing
        image = (mapper.proc.image(pid) if mapper.proc is not None else None) or ""
        return mapper.map("sched_process_exec", ts, cpu, {"pid": pid, "filename": image})

    def on_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        tid, tgid, code = v["pid"], v["tgid"], v["exit_code"]
        if self._early_exits is not None:
            self._early_exits.add(tid)
            if len(self._early_exits) > _EARLY_EXITS_KEPT:
                self._early_exits = None  # no rundown is coming
        mapper = self.mapper
        mapper.learn_thread(tid, tgid)  # /proc no longer knows an exited thread's process
        parent = v.get("parent_tgid")
        if tid == tgid:
            if self._threads.get(tgid):
                self._leader_gone[tgid] = code  # the parent's wait() reports the leader's status
                return []
            self._threads.pop(tgid, None)
            return mapper.process_ended(tgid, code, ts, cpu, parent=parent)
        threads = self._threads.get(tgid)
        if threads is not None:
            threads.discard(tid)
        # Also for a thread this session never saw start: the event names its process.
        records = mapper.thread_ended(tgid, tid, ts, cpu)
        if not threads and tgid in self._leader_gone:
            self._threads.pop(tgid, None)
            records += mapper.process_ended(tgid, self._leader_gone.pop(tgid), ts, cpu, parent=parent)
        return records

    @staticmethod
    def _no_record(ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return []


def install_proc_connector_handlers(mapper: KernelEventMapper) -> ProcConnectorHandlers:
    """Registers the proc connector's event handlers on ``mapper``; returns them (for
    :meth:`ProcConnectorHandlers.note_processes`)."""
    return ProcConnectorHandlers(mapper).install()
