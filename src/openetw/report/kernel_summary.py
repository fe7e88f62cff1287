"""What a kernel trace says about processes: lifetimes, disk and network bytes, context switches
and system calls per process (the start of what WPA's "Processes", "Disk Usage" and "CPU Usage
(Precise)" tables show).

``KernelSummary`` takes decoded events (``DecodedRecord``) of the NT Kernel Logger's classic
classes in time order, from Linux (``openetw.kernel``) or Windows files alike:

* Process Start/DCStart/Stop/DCStop: one lifetime per process instance. A second Start of a live
  process id is an exec on Linux (the image and command line change; ``images`` keeps the
  chain); a Start after the Stop of the same id is a new process.
* Thread Start/DCStart: thread → process, for attributing the events below.
* CSwitch: switch-ins per process (of the new thread); idle is process 0. The thread switched in
  is also what runs on that CPU afterwards, which attributes PerfInfo SysClEnter (its records
  carry no process) to a process: without CSwitch events system calls stay unattributed. Some
  kernels do not record switches out of idle on some CPUs: system calls on a CPU thought idle
  (or not yet seen switching) wait for its next switch, whose OldThreadId ran them, and a switch-in
  of that thread is counted (``switches_inferred``).
* DiskIo Read/Write: bytes by the issuing thread's process (the record's process otherwise).
* TcpIp and UdpIp Send/Recv (IPv4 and IPv6): bytes by the ``PID`` field.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openetw.events.decoded import DecodedRecord
from openetw.events.text import filetime_text

__all__ = ["KernelSummary"]

_KERNEL_PROVIDERS = frozenset({"Windows Kernel", "MSNT_SystemTrace"})
_NO_ID = 0xFFFFFFFF
_TOP = 10


def _iso(filetime: int | None) -> str | None:
    if filetime is None:
        return None
    return filetime_text(filetime)


def _exit_text(code: int | None) -> str:
    """Small codes in decimal (Linux, most Windows programs), NTSTATUS-like ones in hex."""
    if code is None:
        return "-"
    return str(code) if -256 < code < 0x10000 else f"0x{code & 0xFFFFFFFF:08X}"


@dataclass(slots=True)
class _Lifetime:
    pid: int
    parent: int
    image: str
    command_line: str
    start: int | None = None          # FILETIME; None: running when the trace began
    end: int | None = None            # FILETIME of Process/Stop
    exit_code: int | None = None
    running_at_end: bool = False      # seen in the end rundown (DCStop)
    images: list[str] = field(default_factory=list)

    def learn(self, image: str, command_line: str, parent: int) -> None:
        if image:
            self.image = image
            if not self.images or self.images[-1] != image:
                self.images.append(image)
        if command_line or image:
            self.command_line = command_line
        if parent and not self.parent:
            self.parent = parent

    def as_json(self) -> dict[str, Any]:
        duration = (self.end - self.start) / 1e7 if self.start is not None and self.end is not None else None
        return {
            "pid": self.pid, "parent": self.parent, "image": self.image, "images": list(self.images),
            "command_line": self.command_line, "start_time": _iso(self.start), "end_time": _iso(self.end),
            "duration_s": duration, "exit_code": self.exit_code, "running_at_start": self.start is None,
            "running_at_end": self.end is None,
        }  # fmt: skip


class KernelSummary:
    """Accumulates per-process facts from kernel events (see the module doc)."""

    def __init__(self) -> None:
        self.process_events = 0
        self.switches_inferred = 0
        self._waiting: Counter[int] = Counter()  # cpu → system calls made while its thread was unknown
        self._lifetimes: list[_Lifetime] = []
        self._current: dict[int, _Lifetime] = {}
        self._thread_process: dict[int, int] = {}
        self._running_on: dict[int, int] = {}  # cpu → thread switched in last
        self._disk: dict[int | None, list[int]] = {}     # pid → [read bytes, write bytes, reads, writes]
        self._network: dict[int | None, list[int]] = {}  # pid → [sent, received, sends, receives]
        self._switches: Counter[int | None] = Counter()
        self._syscalls: Counter[int | None] = Counter()
        self._handlers: dict[str, Callable[[DecodedRecord], None]] = {
            "Process/Start": self._on_process_start, "Process/DCStart": self._on_process_rundown,
            "Process/Stop": self._on_process_stop, "Process/DCStop": self._on_process_end_rundown,
            "Thread/Start": self._on_thread, "Thread/DCStart": self._on_thread,
            "Thread/CSwitch": self._on_cswitch, "PerfInfo/SysClEnter": self._on_syscall,
            "DiskIO/Read": self._on_disk, "DiskIO/Write": self._on_disk,
            **{f"{group}/{op}{v6}": self._on_network for group in ("TcpIp", "UdpIp")
               for op in ("Send", "Recv") for v6 in ("", "IPV6")},
        }  # fmt: skip

    @property
    def has_processes(self) -> bool:
        """The trace held kernel Process events (the section is worth showing)."""
        return self.process_events > 0

    def add(self, event: DecodedRecord) -> None:
        handler = self._handlers.get(event.event_name or "")
        if handler is not None and event.provider_name in _KERNEL_PROVIDERS and event.decoded is not None:
            handler(event)

    # -- processes and threads ------------------------------------------------------------------
    def _process_fields(self, event: DecodedRecord) -> tuple[int, int, str, str]:
        values = event.properties
        return (
            int(values.get("ProcessID") or 0), int(values.get("ParentID") or 0),
            str(values.get("ImageFileName") or ""), str(values.get("CommandLine") or ""),
        )  # fmt: skip

    def _new(self, pid: int, parent: int, start: int | None) -> _Lifetime:
        life = _Lifetime(pid, parent, "", "", start)
        self._lifetimes.append(life)
        self._current[pid] = life
        return life

    def _on_process_start(self, event: DecodedRecord) -> None:
        self.process_events += 1
        pid, parent, image, command_line = self._process_fields(event)
        life = self._current.get(pid)
        if life is None or life.end is not None:
            life = self._new(pid, parent, event.record.filetime)
        life.learn(image, command_line, parent)  # a second Start of a live process: an exec

    def _on_process_rundown(self, event: DecodedRecord) -> None:
        self.process_events += 1
        pid, parent, image, command_line = self._process_fields(event)
        life = self._current.get(pid)
        if life is None or life.end is not None:
            life = self._new(pid, parent, None)
        life.learn(image, command_line, parent)

    def _on_process_stop(self, event: DecodedRecord) -> None:
        self.process_events += 1
        pid, parent, image, command_line = self._process_fields(event)
        life = self._current.get(pid)
        if life is None or life.end is not None:
            life = self._new(pid, parent, None)
        life.learn(image, command_line, parent)
        life.end = event.record.filetime
        status = event.properties.get("ExitStatus")
        life.exit_code = int(status) if status is not None else None

    def _on_process_end_rundown(self, event: DecodedRecord) -> None:
        self.process_events += 1
        pid, parent, image, command_line = self._process_fields(event)
        life = self._current.get(pid)
        if life is None or life.end is not None:
            life = self._new(pid, parent, None)
            life.learn(image, command_line, parent)
        life.running_at_end = True

    def _on_thread(self, event: DecodedRecord) -> None:
        values = event.properties
        tid, pid = values.get("TThreadId"), values.get("ProcessId")
        if tid is not None and pid is not None:
            self._thread_process[int(tid)] = int(pid)

    def _process_of(self, tid: int | None) -> int | None:
        if tid is None:
            return None
        if tid == 0:
            return 0  # the idle thread of each CPU
        pid = self._thread_process.get(tid)
        if pid is None and tid in self._current:
            return tid  # a process's first thread has the process's id on Linux
        return pid

    # -- CPU ------------------------------------------------------------------------------------
    def _on_cswitch(self, event: DecodedRecord) -> None:
        record = event.record
        if record.tid not in (0, _NO_ID) and record.pid != _NO_ID:
            self._thread_process.setdefault(record.tid, record.pid)
        new = event.properties.get("NewThreadID")
        if new is None:
            return
        cpu = record.cpu
        old = event.properties.get("OldThreadID")
        running = self._running_on.get(cpu)
        if old is not None and int(old) != 0 and running in (None, 0):
            # The thread switched out ran since the CPU's last known switch (to idle, or before the
            # trace): its system calls, and a switch-in the kernel did not record.
            waited = self._waiting.pop(cpu, 0)
            if waited:
                self._syscalls[self._process_of(int(old))] += waited
            if running == 0:
                self._switches[self._process_of(int(old))] += 1
                self.switches_inferred += 1
        self._running_on[cpu] = int(new)
        self._switches[self._process_of(int(new))] += 1

    def _on_syscall(self, event: DecodedRecord) -> None:
        cpu = event.record.cpu
        tid = self._running_on.get(cpu)
        if not tid:  # idle makes no system calls: the CPU's next switch says whose they are
            self._waiting[cpu] += 1
            return
        self._syscalls[self._process_of(tid)] += 1

    # -- I/O ------------------------------------------------------------------------------------
    def _on_disk(self, event: DecodedRecord) -> None:
        values = event.properties
        issuer = values.get("IssuingThreadId")
        pid = self._thread_process.get(int(issuer)) if issuer else None
        if pid is None and event.record.pid not in (0, _NO_ID):
            pid = event.record.pid
        row = self._disk.setdefault(pid, [0, 0, 0, 0])
        write = event.event_name == "DiskIO/Write"
        row[1 if write else 0] += int(values.get("TransferSize") or 0)
        row[3 if write else 2] += 1

    def _on_network(self, event: DecodedRecord) -> None:
        values = event.properties
        pid, size = values.get("PID"), values.get("size")
        if pid is None or size is None:
            return
        row = self._network.setdefault(int(pid), [0, 0, 0, 0])
        receive = "/Recv" in (event.event_name or "")
        row[1 if receive else 0] += int(size)
        row[3 if receive else 2] += 1

    # -- output ---------------------------------------------------------------------------------
    def image_of(self, pid: int | None) -> str:
        if pid is None:
            return "?"
        if pid == 0:
            return "Idle"
        life = self._current.get(pid)
        return life.image if life is not None and life.image else "?"

    def _row(self, pid: int | None, **values: int) -> dict[str, Any]:
        return {"pid": pid, "image": self.image_of(pid), **values}

    def as_json(self) -> dict[str, Any]:
        lifetimes = sorted(self._lifetimes, key=lambda life: (life.start is not None, life.start or 0, life.pid))
        disk = sorted(self._disk.items(), key=lambda item: (-(item[1][0] + item[1][1]), item[0] or 0))
        network = sorted(self._network.items(), key=lambda item: (-(item[1][0] + item[1][1]), item[0] or 0))
        return {
            "processes": [life.as_json() for life in lifetimes],
            "disk": [
                self._row(pid, bytes=r + w, read_bytes=r, write_bytes=w, reads=reads, writes=writes)
                for pid, (r, w, reads, writes) in disk
            ],
            "network": [
                self._row(pid, bytes=s + r, sent_bytes=s, received_bytes=r, sends=sends, receives=receives)
                for pid, (s, r, sends, receives) in network
            ],
            "context_switches": [self._row(pid, switches=n) for pid, n in self._switches.most_common()],
            "syscalls": [self._row(pid, syscalls=n) for pid, n in self._syscalls.most_common()],
            "syscalls_unattributed": sum(self._waiting.values()),
            "switches_inferred": self.switches_inferred,
        }

    def lines(self) -> list[str]:
        data = self.as_json()
        processes = data["processes"]
        started = sum(1 for p in processes if not p["running_at_start"])
        ended = sum(1 for p in processes if not p["running_at_end"])
        throughout = sum(1 for p in processes if p["running_at_start"] and p["running_at_end"])
        out = [
            "kernel",
            f"  processes      {len(processes)}: {started} started, {ended} exited during the trace,"
            f" {throughout} running throughout (--json lists them)",
            f"    {'pid':>7} {'parent':>7} {'exit':>10}  {'start':<28} {'end':<28} image   command line",
        ]
        for p in processes:
            if p["running_at_start"] and p["running_at_end"]:
                continue
            code = _exit_text(p["exit_code"])
            images = " > ".join(p["images"]) or p["image"] or "?"
            out.append(
                f"    {p['pid']:>7} {p['parent']:>7} {code:>10}  {p['start_time'] or '(before)':<28}"
                f" {p['end_time'] or '(after)':<28} {images}   {p['command_line']}"
            )
        out.extend(self._top("disk (bytes read + written)", data["disk"],
                             lambda r: f"{r['bytes']:>12}  read {r['read_bytes']} ({r['reads']})  written {r['write_bytes']} ({r['writes']})"))
        out.extend(self._top("network (bytes sent + received)", data["network"],
                             lambda r: f"{r['bytes']:>12}  sent {r['sent_bytes']} ({r['sends']})  received {r['received_bytes']} ({r['receives']})"))
        switches = self._top("context switches (switched in)", data["context_switches"], lambda r: f"{r['switches']:>12}")
        if data["switches_inferred"]:
            switches.append(f"    {data['switches_inferred']:>12}  of them inferred (switches out of idle the kernel did not record)")
        out.extend(switches)
        syscalls = self._top("system calls", data["syscalls"], lambda r: f"{r['syscalls']:>12}")
        if data["syscalls_unattributed"]:
            syscalls = syscalls or ["  system calls"]
            syscalls.append(f"    {data['syscalls_unattributed']:>12}  not attributed (no context switch on their CPU named their thread)")
        out.extend(syscalls)
        return out

    @staticmethod
    def _top(title: str, rows: list[dict[str, Any]], text: Callable[[dict[str, Any]], str]) -> list[str]:
        if not rows:
            return []
        out = [f"  top {title}"]
        for row in rows[:_TOP]:
            pid = "?" if row["pid"] is None else row["pid"]
            out.append(f"    {text(row)}  {pid} {row['image']}")
        if len(rows) > _TOP:
            out.append(f"    ... {len(rows) - _TOP} more (--json lists them)")
        return out
