"""Process and Thread records: fork, exec, new threads, exit codes, fatal signals and the
rundown of what runs when a session starts (an event class of
:class:`~openetw.kernel.classes.KernelEventMapper`).

Linux reports a process's end in pieces: ``exit_group()`` gives the code, a default-action
signal may kill it instead, and ``sched_process_exit`` of the last thread ends it; the mapper
keeps each piece until the end comes.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.classes_base import (
    MAX_SYSTEM_PAYLOAD,
    PROCESS_DC_START,
    PROCESS_END,
    PROCESS_GROUP,
    PROCESS_START,
    PROCESS_VERSION,
    THREAD_DC_START,
    THREAD_END,
    THREAD_GROUP,
    THREAD_START,
    THREAD_VERSION,
    MapperState,
    ansi_string,
    unix_user_sid,
    wide_string,
)
from openetw.kernel.procfs import ProcessInfo

__all__ = ["ProcessEvents", "ProcessState"]

_CLONE_THREAD = 0x00010000
_SIG_DFL = 0
_NON_FATAL_DEFAULT = frozenset({17, 18, 19, 20, 21, 22, 23, 28})  # CHLD CONT STOP TSTP TTIN TTOU URG WINCH

_PROCESS_HEAD = struct.Struct("<QIIIiQI")
_THREAD = struct.Struct("<II7QI4B")


def _exit_code(raw: int) -> int:
    """exit()/exit_group() argument (an ``int`` in an 8-byte slot) as a signed 32-bit code."""
    code = raw & 0xFFFFFFFF
    return code - (1 << 32) if code & 0x80000000 else code


class ProcessState:
    """What the mapper knows of a process: Process records repeat it at start, exec and end."""

    __slots__ = ("pid", "parent", "image", "command_line", "uid")

    def __init__(self, pid: int, parent: int, image: str, command_line: str, uid: int | None) -> None:
        self.pid = pid
        self.parent = parent
        self.image = image
        self.command_line = command_line
        self.uid = uid


class ProcessEvents(MapperState):
    """Process and Thread start, end and rundown, and the thread → process table they keep."""

    # -- rundown --------------------------------------------------------------------------------
    def rundown(self, processes: Iterable[ProcessInfo], timestamp: int, cpu: int = 0) -> list[EventRecord]:
        """Process/Thread DCStart records for the processes alive when the session starts."""
        records: list[EventRecord] = []
        for info in processes:
            state = ProcessState(info.pid, info.parent_pid, info.image, info.command_line, info.uid)
            self._processes[info.pid] = state
            for thread in info.threads:
                self._tgid[thread.tid] = info.pid
            if "process" in self.flags:
                records.append(self._process_record(PROCESS_DC_START, state, 0, info.pid, timestamp, cpu))
            if "thread" in self.flags:
                for thread in info.threads:
                    records.append(self._thread_record(THREAD_DC_START, info.pid, thread.tid, thread.name, timestamp, cpu, thread.tid))
        return records


    # -- process and thread ---------------------------------------------------------------------
    def _process_record(self, opcode: int, state: ProcessState, exit_status: int, tid: int, ts: int, cpu: int) -> EventRecord:
        head = _PROCESS_HEAD.pack(0, state.pid, state.parent, 0, exit_status, 0, 0) + unix_user_sid(state.uid)
        image = ansi_string(state.image)
        command_line = wide_string(state.command_line)
        room = MAX_SYSTEM_PAYLOAD - len(head) - 4  # the two empty strings after the command line
        if len(image) + len(command_line) > room:
            # As ETW does with a field over its limits: cut it (the image name first keeps its
            # start), so that one huge command line costs neither the record nor the session.
            self.truncated += 1
            image = image[: min(len(image), room // 4) - 1] + b"\0" if len(image) > room // 4 else image
            chars = max(0, (room - len(image)) // 2 - 1)
            command_line = wide_string(state.command_line.encode("utf-16-le", "surrogatepass")[: 2 * chars].decode("utf-16-le", "ignore"))
        payload = head + image + command_line + wide_string("") + wide_string("")
        return self._record(PROCESS_GROUP, opcode, PROCESS_VERSION, tid, ts, cpu, payload, pid=state.pid)

    def _thread_record(self, opcode: int, pid: int, tid: int, name: str, ts: int, cpu: int, context_tid: int) -> EventRecord:
        del name  # Thread V3 as Windows 8 logs it: no ThreadName
        payload = _THREAD.pack(pid, tid, 0, 0, 0, 0, 0, 0, 0, 0, 8, 5, 2, 0)
        return self._record(THREAD_GROUP, opcode, THREAD_VERSION, context_tid, ts, cpu, payload, pid=pid)

    def _on_newtask(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        creator, tid = v["common_pid"], v["pid"]
        if v["clone_flags"] & _CLONE_THREAD:
            pid = self.process_of(creator)
            self._tgid[tid] = pid
            if "thread" in self.flags:
                return [self._thread_record(THREAD_START, pid, tid, v["comm"], ts, cpu, creator)]
            return []
        self._tgid[tid] = tid
        return []

    def _on_fork(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        parent_tid, child = v["parent_pid"], v["child_pid"]
        if self._tgid.get(child, child) != child:
            return []  # a thread: task_newtask reported it
        self._tgid[child] = child
        parent_pid = self.process_of(parent_tid)
        parent = self._processes.get(parent_pid)
        state = ProcessState(
            child, parent_pid, parent.image if parent else v["parent_comm"],
            parent.command_line if parent else "", parent.uid if parent else None,
        )
        later = self._processes.get(child)
        if later is not None and later.parent in (0, parent_pid):
            # The child's exec was read first (pages of different CPUs arrive out of order):
            # keep what the exec taught, learn the parent.
            later.parent = parent_pid
        else:
            self._processes[child] = state
        records = []
        if "process" in self.flags:
            records.append(self._process_record(PROCESS_START, state, 0, parent_tid, ts, cpu))
        if "thread" in self.flags:
            records.append(self._thread_record(THREAD_START, child, child, v["child_comm"], ts, cpu, parent_tid))
        return records

    def _on_exec(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        pid = v["pid"]
        self._tgid[pid] = pid
        files = self._files.get(pid)
        if files:
            for fd in [fd for fd, f in files.items() if f.close_on_exec]:
                del files[fd]
        if not self.flags & {"process", "thread"}:
            return []
        state = self._processes.get(pid)
        if state is None:
            parent = self._parent_from_proc(pid)
            state = self._processes[pid] = ProcessState(pid, parent, "", "", None)
        state.image = os.path.basename(v["filename"]) or v["filename"]
        command_line = self.proc.command_line(pid) if self.proc is not None else None
        state.command_line = command_line if command_line is not None else ""
        if self.proc is not None:
            uid_text = self.proc.status(pid).get("Uid", "").split()
            if uid_text and uid_text[0].isdigit():
                state.uid = int(uid_text[0])
        if "process" not in self.flags:
            return []
        # Linux gives a live process a new image; the process is announced again with it.
        return [self._process_record(PROCESS_START, state, 0, pid, ts, cpu)]

    def _parent_from_proc(self, pid: int) -> int:
        if self.proc is None:
            return 0
        value = self.proc.status(pid).get("PPid", "")
        return int(value) if value.isdigit() else 0

    def _on_exit_group(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._exit_codes[self.process_of(v["common_pid"])] = _exit_code(v["error_code"])
        return []

    def _on_thread_exit_call(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._thread_exit[v["common_pid"]] = _exit_code(v["error_code"])
        return []

    def _on_signal(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if v["sa_handler"] == _SIG_DFL and v["sig"] not in _NON_FATAL_DEFAULT:
            self._fatal_signal[self.process_of(v["common_pid"])] = v["sig"]
        return []

    def _on_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        return self._task_exit(v["pid"], v["comm"], bool(v["group_dead"]), ts, cpu)

    # -- for sources that report threads and exits in their own terms (the proc connector) ----
    def learn_thread(self, tid: int, tgid: int) -> None:
        """Note that thread ``tid`` belongs to process ``tgid`` (a source's event said so)."""
        self._tgid[tid] = tgid

    def thread_ended(self, pid: int, tid: int, ts: int, cpu: int) -> list[EventRecord]:
        """Thread End of thread ``tid`` of process ``pid`` (not the process's last thread), and
        the mapper forgets that thread. Also for threads the session never saw start."""
        self._thread_exit.pop(tid, None)
        self._file_calls.pop(tid, None)
        self._tgid.pop(tid, None)
        if "thread" not in self.flags:
            return []
        return [self._thread_record(THREAD_END, pid, tid, "", ts, cpu, tid)]

    def process_ended(self, pid: int, exit_code: int, ts: int, cpu: int, *, parent: int | None = None) -> list[EventRecord]:
        """The end of process ``pid`` with ``exit_code`` (its last thread exited): Thread End of
        the leader and Process End. ``parent`` names the parent of a process the session did
        not see start (/proc no longer knows an exited process's parent)."""
        self._exit_codes[pid] = exit_code
        return self._task_exit(pid, "", True, ts, cpu, parent=parent)

    def _task_exit(self, tid: int, comm: str, group_dead: bool, ts: int, cpu: int, *, parent: int | None = None) -> list[EventRecord]:
        pid = self.process_of(tid)
        records = []
        if "thread" in self.flags:
            records.append(self._thread_record(THREAD_END, pid, tid, comm, ts, cpu, tid))
        thread_code = self._thread_exit.pop(tid, None)
        self._file_calls.pop(tid, None)
        if group_dead:
            state = self._processes.pop(pid, None)
            code = self._exit_codes.pop(pid, None)
            if code is None:
                code = thread_code
            signal = self._fatal_signal.pop(pid, None)
            if code is None:
                code = 128 + signal if signal is not None else 0
            if "process" in self.flags:
                if state is None:
                    state = ProcessState(pid, parent if parent is not None else self._parent_from_proc(pid), comm, "", None)
                records.append(self._process_record(PROCESS_END, state, code, tid, ts, cpu))
            self._files.pop(pid, None)
            for known_tid in [t for t, g in self._tgid.items() if g == pid]:
                del self._tgid[known_tid]
        else:
            self._tgid.pop(tid, None)
        return records

