"""What PerfView's parsers know about a trace when they show an event.

TraceEvent converts a whole trace before anything is shown, so its lookups see the whole
trace: a file key's name, a .NET type id's name (``BulkType``), even from events later than the
one shown. ``learn`` takes those facts from a first pass, the disk events' times among them.

Disk service time (``DiskServiceTimeMSec``) follows TraceEvent's rule exactly. The state is one
list for all disks, in trace order, of (disk number, time) for every DiskIO Read, Write and
FlushBuffers event of the whole trace, and one index into it shared by all disks. Reading the
value of a Read or Write at time T on disk D scans the list from that index (from the start when
T is not after the entry there) up to the first entry at or after T, remembers the last entry of
disk D passed on the way, and leaves the index at the entry where it stopped. The service time
is ``min(ElapsedTimeMSec, T - that entry's time)``, with time 0 (the trace's start) when no entry
of D was passed. PerfView's baseline reads each value twice (``PayloadValue``, then
``PayloadString``, which calls ``PayloadValue`` again) and prints the second read: the first
leaves the index at the event's own entry, so the second starts over from the list's start and
sees the last event of D before T, even when another disk's I/O was shown in between (one read
alone would skip the entries of D before that I/O). Times are milliseconds from the trace's
start, as doubles.

Lookups by key and time take the name valid at that time, else the first one given later
(rundown at the end of a trace names what was open all along).
"""

from __future__ import annotations

import bisect
from fractions import Fraction
from typing import Any

from openetw.etl.layouts import CLOCK_CPU_CYCLE, CLOCK_QPC
from openetw.tdh.context import DecodeContext

__all__ = ["PerfViewState", "relative_msec"]

_DISK_GROUP, _FILE_GROUP, _THREAD_GROUP = 0x01, 0x04, 0x05
_FILE_NAME_OPCODES = frozenset({0, 32, 35, 36})
_DISK_COMPLETIONS = frozenset({10, 11, 14})
_CLR_BULK_TYPE = 15
_CLR_PROVIDER_BYTES = bytes.fromhex("230d3ce1bccc124e931bd9cc2eee27e4")
_SYS_CONFIG_BYTES = bytes.fromhex("91ee799bfdb5c041a2434248e266e9d0")
_VOLUME_MAPPING = 35
_MUP = "\\device\\mup\\"


def relative_msec(record: Any) -> Fraction:
    """Milliseconds from the trace's start (TraceEvent's ``TimeStampRelativeMSec``), exact."""
    clock = record.context.clock
    delta = record.timestamp - clock.reference_timestamp
    if clock.clock_type == CLOCK_QPC and clock.perf_freq > 0:
        return Fraction(delta * 1000, clock.perf_freq)
    if clock.clock_type == CLOCK_CPU_CYCLE and clock.cpu_speed_mhz > 0:
        return Fraction(delta, clock.cpu_speed_mhz * 1000)
    return Fraction(delta, 10_000)


class _History:
    """Values of a key over time: the one valid at a time, else the next one given."""

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[list[int], list[str]]] = {}

    def add(self, key: Any, when: int, value: str) -> None:
        times, values = self._entries.setdefault(key, ([], []))
        index = bisect.bisect_right(times, when)
        times.insert(index, when)
        values.insert(index, value)

    def get(self, key: Any, when: int) -> str | None:
        found = self._entries.get(key)
        if found is None:
            return None
        times, values = found
        index = bisect.bisect_right(times, when)
        return values[index - 1] if index else values[0]


class PerfViewState:
    """What PerfView's views look up beyond the trace's processes, threads and images, which
    come from the trace-state tracker (``openetw.events.trace_state.TraceState``) given."""

    def __init__(self, context: DecodeContext) -> None:
        self.context = context
        self.file_names = _History()
        self.type_names: dict[tuple[int, int], str] = {}
        self.disk_events: list[tuple[int, float]] = []  # (disk number, msec) of every disk event, in trace order
        self.disk_event_index = 0
        self.volume_map: list[tuple[str, str]] = []

    # -- the first pass ----------------------------------------------------------------------
    def learn(self, record: Any, props: dict[str, Any]) -> None:
        kind = record.kind
        if kind in ("system", "compact", "perfinfo"):
            group = (record.hook_id or 0) >> 8
            if group == _DISK_GROUP and record.opcode in _DISK_COMPLETIONS:
                disk = props.get("DiskNumber")
                if isinstance(disk, int):
                    self.disk_events.append((disk, float(relative_msec(record))))
            elif group == _FILE_GROUP and record.opcode in _FILE_NAME_OPCODES:
                key, name = props.get("FileKey"), props.get("FileName")
                if isinstance(key, int) and isinstance(name, str):
                    self.file_names.add(key, record.timestamp, name)
        elif kind in ("classic", "instance") and record.provider_guid_bytes == _SYS_CONFIG_BYTES:
            if record.opcode == _VOLUME_MAPPING:
                nt_path, dos_path = props.get("NtPath"), props.get("DosPath")
                if isinstance(nt_path, str) and isinstance(dos_path, str) and nt_path and dos_path:
                    self.volume_map.append((nt_path.lower(), dos_path))
                    self.volume_map.sort(key=lambda pair: -len(pair[0]))
        elif kind == "event" and record.id == _CLR_BULK_TYPE and record.provider_guid_bytes == _CLR_PROVIDER_BYTES:
            for item in props.get("Values") or ():
                if isinstance(item, dict) and isinstance(item.get("TypeID"), int):
                    name = item.get("TypeName", item.get("Name"))
                    self.type_names.setdefault((record.pid, item["TypeID"]), str(name or ""))

    # -- in order ----------------------------------------------------------------------------
    def observe(self, record: Any, props: dict[str, Any]) -> None:
        """Called after an event is shown (nothing of TraceEvent's state depends on it yet)."""

    def disk_service_msec(self, record: Any, disk: Any, elapsed: float) -> float:
        """A DiskIO Read or Write's ``DiskServiceTimeMSec`` by TraceEvent's rule (module doc).
        Moves the shared index: call it once per event shown, in order."""
        now = float(relative_msec(record))
        last = 0.0
        events = self.disk_events
        if events:
            index = self.disk_event_index
            if now <= events[index][1]:
                index = 0
            while index < len(events):
                number, when = events[index]
                if now <= when:
                    self.disk_event_index = index
                    break
                if number == disk:
                    last = when
                index += 1
        return min(elapsed, now - last)

    def shown_disk_service_msec(self, record: Any, disk: Any, elapsed: float) -> float:
        """The ``DiskServiceTimeMSec`` PerfView's baseline prints: it reads each payload value
        twice (``PayloadValue``, then ``PayloadString``, which reads it again) and prints the
        second; the first read has moved the shared index (module doc)."""
        self.disk_service_msec(record, disk, elapsed)
        return self.disk_service_msec(record, disk, elapsed)

    def dos_path(self, path: str) -> str:
        """A kernel path in DOS form, as TraceEvent shows it: through the trace's volume mapping
        (``\\Device\\HarddiskVolume2\\`` -> ``C:\\``), network paths as UNC, paths from the root of
        the system volume on its drive."""
        lowered = path.lower()
        for nt_path, dos_path in self.volume_map:
            if lowered.startswith(nt_path):
                return dos_path + path[len(nt_path) :]
        if lowered.startswith(_MUP):
            return "\\\\" + path[len(_MUP) :]
        if lowered.startswith("\\windows\\"):
            return self._system_drive() + path
        return path

    def _system_drive(self) -> str:
        for nt_path, dos_path in self.volume_map:
            if nt_path == "\\systemroot\\" and len(dos_path) >= 2 and dos_path[1] == ":":
                return dos_path[:2]
        return "C:"

    # -- lookups -----------------------------------------------------------------------------
    def file_name(self, key: Any, record: Any) -> str:
        if not isinstance(key, int):
            return ""
        return self.file_names.get(key, record.timestamp) or ""

    def type_name(self, pid: int, type_id: Any) -> str:
        return self.type_names.get((pid, type_id), "") if isinstance(type_id, int) else ""

    def thread_process(self, tid: Any, record: Any) -> int | None:
        if not isinstance(tid, int):
            return None
        return self.context.thread_process(tid, record.filetime)
