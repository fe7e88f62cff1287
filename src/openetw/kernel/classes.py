"""Linux tracepoints → NT Kernel Logger records (Process, Thread, CSwitch, DiskIo, TcpIp, UdpIp,
FileIo, PageFault, SysCall).

Each record is a SYSTEM64 (PERFINFO64 for system calls) kernel record whose HookId, version
and payload follow the layouts in :mod:`openetw.tdh.mof_kernel`, so the project's decoder,
dissect.etl and PerfView read them as Windows kernel events. Timestamps are the tracepoint's
``trace_clock=mono`` time in nanoseconds: the QPC of a file written with
:func:`openetw.etl.writer.linux_trace_clock`.

The mapper keeps the state tracepoints do not carry (thread → process, exit codes, block
requests in flight, socket endpoints, open files, system calls in progress). It does no I/O
itself: /proc lookups go through the ``proc`` object given to it (a
:class:`~openetw.kernel.procfs.ProcSource` or a test double). See docs/kernel.md for what each
field means on Linux.

This module holds the flags, the tracepoints each needs and the dispatch (which handler maps
which event); each event class is a module of its own, joined here as one mapper:

* :mod:`~openetw.kernel.classes_base` — hook groups, versions and opcodes; the shared state and
  the record builder;
* :mod:`~openetw.kernel.classes_process` — Process and Thread, rundown, exit codes;
* :mod:`~openetw.kernel.classes_cpu` — CSwitch, SysCall (also column-wise) and PageFault;
* :mod:`~openetw.kernel.classes_disk` — DiskIo;
* :mod:`~openetw.kernel.classes_net` — TcpIp and UdpIp;
* :mod:`~openetw.kernel.classes_files` — FileIo and the descriptors each process holds;
* :mod:`~openetw.kernel.classes_perf`, :mod:`~openetw.kernel.classes_proc` — handlers other
  sources (perf_event_open, the proc connector) register on a mapper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.record import EventRecord
from openetw.kernel.classes_args import SyscallArgEvents
from openetw.kernel.classes_base import ProcLookup, unix_user_sid, windows_priority
from openetw.kernel.classes_cpu import CpuEvents
from openetw.kernel.classes_disk import DiskEvents
from openetw.kernel.classes_files import FILE_SYSCALLS, FileEvents, file_fields_used, file_key
from openetw.kernel.classes_net import NetworkEvents
from openetw.kernel.classes_process import ProcessEvents

__all__ = [
    "FLAG_EVENTS",
    "BPF_FLAGS",
    "KERNEL_FLAGS",
    "KernelEventMapper",
    "PERF_FLAGS",
    "ProcLookup",
    "file_key",
    "tracepoints_for",
    "unix_user_sid",
    "windows_priority",
]

FLAG_EVENTS: Mapping[str, tuple[str, ...]] = {
    "process": ("sched/sched_process_fork", "sched/sched_process_exec", "sched/sched_process_exit",
                "task/task_newtask", "syscalls/sys_enter_exit_group", "syscalls/sys_enter_exit",
                "signal/signal_deliver"),
    "thread": ("sched/sched_process_exit", "task/task_newtask"),
    "cswitch": ("sched/sched_switch",),
    "disk_io": ("block/block_rq_insert", "block/block_rq_issue", "block/block_rq_complete"),
    "network": ("sock/inet_sock_set_state", "sock/sock_send_length", "sock/sock_recv_length"),
    "syscall": ("raw_syscalls/sys_enter", "raw_syscalls/sys_exit"),
    # exec and exit forget a process's descriptors (close-on-exec, exit closes everything)
    "file_io": tuple(f"syscalls/sys_{side}_{call}" for call in FILE_SYSCALLS for side in ("enter", "exit"))
    + ("sched/sched_process_exec", "sched/sched_process_exit"),
    "page_fault": ("exceptions/page_fault_user", "exceptions/page_fault_kernel"),
}
"""The tracepoints each tracefs kernel flag needs (``system/event``)."""
PERF_FLAGS = frozenset({"image", "profile"})
"""Flags recorded from perf_event_open by the perf source: they need no tracepoints."""
BPF_FLAGS = frozenset({"syscall_args"})
"""Flags recorded by BPF programs (``openetw.kernel.bpf_args``): the arguments and path strings
of the path-taking system calls (``classes_args``)."""
KERNEL_FLAGS = frozenset(FLAG_EVENTS) | PERF_FLAGS | BPF_FLAGS
"""Every kernel flag the project knows."""


def tracepoints_for(flags: Iterable[str]) -> list[str]:
    """The tracepoints to enable for ``flags``, each once, in a stable order.

    Flags recorded without tracepoints (:data:`PERF_FLAGS`) contribute none; unknown names raise.
    """
    wanted: list[str] = []
    for flag in flags:
        if flag not in KERNEL_FLAGS:
            raise InvalidArgument(f"unknown kernel flag {flag!r}; known: {', '.join(sorted(KERNEL_FLAGS))}")
        for event in FLAG_EVENTS.get(flag, ()):
            if event not in wanted:
                wanted.append(event)
    return wanted


_NO_RAW_HANDLERS: dict[str, Callable[[int, Mapping[str, Any]], bytes]] = {}


class KernelEventMapper(ProcessEvents, CpuEvents, DiskEvents, NetworkEvents, FileEvents, SyscallArgEvents):
    """Turns decoded tracepoint events into NT Kernel Logger records, keeping the state needed.

    Each event class (a base class here) maps its own events; this class says which handler
    takes which event name and runs them in order."""

    def __init__(self, flags: Iterable[str], proc: ProcLookup | None = None) -> None:
        flags = frozenset(flags)
        unknown = flags - KERNEL_FLAGS
        if unknown:
            raise InvalidArgument(f"unknown kernel flags: {', '.join(sorted(unknown))}")
        super().__init__(flags, proc)
        # The hot events, packed straight to record bytes for a sink that takes them (map_events).
        self._raw_handlers: dict[str, Callable[[int, Mapping[str, Any]], bytes]] = {
            "sys_enter": self._sys_enter_raw,
            "sys_exit": self._sys_exit_raw,
            "sched_switch": self._switch_raw,
            "syscall_args": self._syscall_args_raw,
        }
        self._handlers: dict[str, Callable[[int, int, Mapping[str, Any]], list[EventRecord]]] = {
            "sched_process_fork": self._on_fork,
            "task_newtask": self._on_newtask,
            "sched_process_exec": self._on_exec,
            "sched_process_exit": self._on_exit,
            "sys_enter_exit_group": self._on_exit_group,
            "sys_enter_exit": self._on_thread_exit_call,
            "signal_deliver": self._on_signal,
            "sched_switch": self._on_switch,
            "block_rq_insert": self._on_block_insert,
            "block_rq_issue": self._on_block_issue,
            "block_rq_complete": self._on_block_complete,
            "inet_sock_set_state": self._on_sock_state,
            "sock_send_length": self._on_sock_send,
            "sock_recv_length": self._on_sock_recv,
            "sys_enter": self._on_sys_enter,
            "sys_exit": self._on_sys_exit,
            "page_fault_user": self._on_page_fault,
            "page_fault_kernel": self._on_page_fault,
        }
        for call, (kind, fd_field, position_field) in FILE_SYSCALLS.items():
            self._handlers[f"sys_enter_{call}"] = self._file_enter_handler(call, kind, fd_field, position_field)
            self._handlers[f"sys_exit_{call}"] = self._file_exit_handler(call, kind)
        self._handlers["syscall_args"] = self._on_syscall_args


    def register(self, name: str, handler: Callable[[int, int, Mapping[str, Any]], list[EventRecord]]) -> None:
        """Map raw events called ``name`` (from any source) with ``handler(timestamp, cpu, values)``."""
        self._handlers[name] = handler
        self._registered.add(name)
        self._raw_handlers.pop(name, None)

    def fields_used(self) -> dict[str, frozenset[str]]:
        """Tracepoint name → the fields the built-in handler reads (for a lean
        :class:`~openetw.kernel.ringbuffer.EventDecoder`). Events given to :meth:`register`
        are left out: they are decoded whole."""
        used = dict(_FIELDS_USED)
        used.update(file_fields_used())
        for name in self._registered:
            used.pop(name, None)
        return used


    # -- dispatch -------------------------------------------------------------------------------
    def map(self, name: str, timestamp: int, cpu: int, values: Mapping[str, Any]) -> list[EventRecord]:
        """Records for one decoded tracepoint event (often none, sometimes several)."""
        handler = self._handlers.get(name)
        if handler is None:
            self.unmapped += 1
            return []
        return handler(timestamp, cpu, values)

    def map_events(
        self,
        events: Iterable[tuple[int, int, str, Mapping[str, Any]]],
        write: Callable[[EventRecord], bool],
        write_raw: Callable[[bytes, int, int], bool] | None = None,
    ) -> int:
        """Maps raw events ``(timestamp, cpu, name, values)`` in order, giving each record to
        ``write``; returns how many records were accepted. The same records as :meth:`map` per event.

        With ``write_raw(raw, cpu, timestamp)`` (a sink's fast path, e.g.
        :meth:`EtlWriter.write_raw <openetw.etl.writer.EtlWriter.write_raw>`), system calls and
        context switches go to it as packed record bytes, without record objects."""
        get = self._handlers.get
        raw_get = self._raw_handlers.get if write_raw is not None else _NO_RAW_HANDLERS.get
        written = unmapped = 0
        for timestamp, cpu, name, values in events:
            raw_handler = raw_get(name)
            if raw_handler is not None:
                written += write_raw(raw_handler(timestamp, values), cpu, timestamp)  # type: ignore[misc]
                continue
            handler = get(name)
            if handler is None:
                unmapped += 1
                continue
            for record in handler(timestamp, cpu, values):
                written += write(record)
        self.unmapped += unmapped
        return written


# Fields each built-in handler reads (the file system calls are added by fields_used()).
_FIELDS_USED: Mapping[str, frozenset[str]] = {name: frozenset(fields) for name, fields in {
    "sched_process_fork": ("parent_pid", "child_pid", "parent_comm", "child_comm"),
    "task_newtask": ("common_pid", "pid", "clone_flags", "comm"),
    "sched_process_exec": ("pid", "filename"),
    "sched_process_exit": ("pid", "comm", "group_dead"),
    "sys_enter_exit_group": ("common_pid", "error_code"),
    "sys_enter_exit": ("common_pid", "error_code"),
    "signal_deliver": ("common_pid", "sa_handler", "sig"),
    "sched_switch": ("prev_state", "prev_pid", "next_pid", "prev_prio", "next_prio"),
    "block_rq_insert": ("common_pid", "dev", "rwbs", "nr_sector", "sector"),
    "block_rq_issue": ("common_pid", "dev", "rwbs", "nr_sector", "sector", "bytes"),
    "block_rq_complete": ("common_pid", "dev", "rwbs", "nr_sector", "sector"),
    "inet_sock_set_state": ("common_pid", "skaddr", "protocol", "family", "oldstate", "newstate",
                            "saddr", "daddr", "saddr_v6", "daddr_v6", "sport", "dport"),
    "sock_send_length": ("common_pid", "sk", "family", "protocol", "ret", "flags"),
    "sock_recv_length": ("common_pid", "sk", "family", "protocol", "ret", "flags"),
    "sys_enter": ("id",),
    "sys_exit": ("ret",),
    "page_fault_user": ("common_pid", "address", "ip", "error_code"),
    "page_fault_kernel": ("common_pid", "address", "ip", "error_code"),
}.items()}
