"""perf_event_open events → NT Kernel Logger Image, PerfInfo SampledProfile and StackWalk records.

:func:`install_perf_handlers` registers, on a :class:`~openetw.kernel.classes.KernelEventMapper`,
handlers for the raw events of :class:`~openetw.kernel.perf.PerfSource` and returns the
:class:`PerfClassMapper` that keeps their state (the images each process has loaded) and writes
the Image DCStart rundown from ``/proc/<pid>/maps``.

Records, as Windows writes them (layouts of :mod:`openetw.tdh.mof_kernel_core`):

* **Image** (group 0x14, version 3, SYSTEM64 header): Load (10) from an executable MMAP2
  mapping, DCStart (3) from /proc at session start, Unload (2) when the process execs another
  program or exits. ``ImageBase`` is the address where file offset 0 would be mapped
  (mapping start − file offset), so ``address − ImageBase`` is the file offset of the code;
  ``ImageSize`` reaches the end of the executable mapping. ``FileName`` is the Linux path
  as the kernel reports it (``/usr/lib/x86_64-linux-gnu/libc.so.6``, ``[vdso]``). Checksum,
  TimeDateStamp, signature and DefaultBase are zero: ELF has none of them.
* **PerfInfo SampledProfile** (group 0x0F, opcode 46, version 2, PERFINFO64 header):
  ``InstructionPointer``, ``ThreadId``, ``Count`` = 1; **StackWalk Stack** (group 0x18,
  opcode 32, version 2, PERFINFO64 header) right after it: ``EventTimeStamp`` = the sample's
  timestamp, ``StackProcess``, ``StackThread``, then the frames innermost first, kernel frames
  before user frames (perf's context markers removed).
* **PerfInfo CollectionStart** (opcode 73, version 3) in the rundown: the sampling interval in
  100 ns units, source 0 ("Timer").
* **ImageBuildId BuildId** (openetw's classic class ``ImageBuildId``, opcode 32, version 0) after
  each Image DCStart and Load of an ELF file, when the mapper is given a ``build_ids`` reader:
  ``ImageBase``, ``ProcessId`` and the file's GNU build id, so that a reader can tell whether the
  file it names frames from is the one that ran.
* **KernelSymbols Symbol** (openetw's classic class ``KernelSymbols``, opcode 32, version 0) when
  the session stops: each kallsyms text symbol that a kernel frame of a sample fell in (address,
  size up to the next symbol, name), so that kernel frames are named from the trace itself.
"""

from __future__ import annotations

import bisect
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from openetw.errors import InvalidArgument
from openetw.etl.build import build_classic_record, build_perfinfo_record, build_system_record
from openetw.etl.record import EventRecord
from openetw.kernel.classes import PERF_FLAGS, KernelEventMapper
from openetw.kernel.perf_format import PROT_EXEC, split_callchain
from openetw.kernel.procfs import MapEntry

__all__ = ["PERF_FLAGS", "PerfClassMapper", "ProcMaps", "image_spans", "install_perf_handlers"]

IMAGE_GROUP, PERFINFO_GROUP, STACKWALK_GROUP = 0x14, 0x0F, 0x18
IMAGE_VERSION, SAMPLE_VERSION, STACKWALK_VERSION, INTERVAL_VERSION = 3, 2, 2, 3
IMAGE_LOAD, IMAGE_UNLOAD, IMAGE_DC_START = 10, 2, 3
SAMPLED_PROFILE, COLLECTION_START = 46, 73
STACK = 32
KERNEL_SYMBOLS_CLASS = uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6574")  # tdh.mof_kernel_config.KERNEL_SYMBOLS
KERNEL_SYMBOL = 32
IMAGE_BUILD_ID_CLASS = uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6575")  # tdh.mof_kernel_config.IMAGE_BUILD_ID
BUILD_ID = 32
_KERNEL_START = 0xFFFF800000000000
_MAX_KERNEL_ADDRESSES = 1 << 18

_IMAGE = struct.Struct("<QQIIIBBHQIIII")
_SAMPLE = struct.Struct("<QIHH")
_STACK_HEAD = struct.Struct("<qII")
_INTERVAL = struct.Struct("<III")


class ProcMaps(Protocol):
    """What the rundown asks /proc (see :class:`~openetw.kernel.procfs.ProcSource`)."""

    def pids(self) -> list[int]: ...
    def maps(self, pid: int) -> list[MapEntry] | None: ...
    def kernel_images(self) -> list[tuple[str, int, int]]: ...


def _wide(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass") + b"\0\0"


def _is_image_path(path: str) -> bool:
    # Files and the vDSO; anonymous executable memory (JIT code, "//anon") is no image.
    return (path.startswith("/") and not path.startswith("//")) or path == "[vdso]"


def image_spans(entries: Iterable[MapEntry]) -> list[tuple[str, int, int]]:
    """``(path, base, size)`` of each executable file mapping, one per file and base.

    ``base`` is mapping start − file offset; mappings of one file with one base (rare: several
    executable segments) are merged into one span.
    """
    spans: dict[tuple[str, int], int] = {}
    for entry in entries:
        if not entry.executable or not _is_image_path(entry.path):
            continue
        base = entry.start - entry.offset
        key = (entry.path, base)
        spans[key] = max(spans.get(key, 0), entry.end)
    return [(path, base, end - base) for (path, base), end in spans.items()]


class PerfClassMapper:
    """The state behind the perf handlers: per process, the images it has loaded."""

    def __init__(
        self, mapper: KernelEventMapper, flags: Iterable[str], interval_ns: int = 1_000_000,
        build_ids: Callable[[str], str | None] | None = None,
    ) -> None:  # fmt: skip
        self.flags = frozenset(flags)
        unknown = self.flags - PERF_FLAGS
        if unknown:
            raise InvalidArgument(f"not perf flags: {', '.join(sorted(unknown))}")
        self.mapper = mapper
        self.interval_ns = interval_ns
        # pid → {(path, base): size}
        self.images: dict[int, dict[tuple[str, int], int]] = {}
        self.kernel_addresses: set[int] = set()  # kernel frames of samples: their symbols are written at the end
        self.build_ids = build_ids  # path → GNU build id (None: no ImageBuildId records)
        self._known_build_ids: dict[str, str | None] = {}

    # -- records --------------------------------------------------------------------------------
    def _image_record(self, opcode: int, pid: int, tid: int, path: str, base: int, size: int, ts: int, cpu: int) -> EventRecord:
        payload = _IMAGE.pack(base, size, pid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + _wide(path)
        return build_system_record(
            hook_id=IMAGE_GROUP << 8 | opcode, version=IMAGE_VERSION, pid=pid, tid=tid, timestamp=ts, cpu=cpu, user_data=payload,
        )

    def _loaded(self, opcode: int, pid: int, tid: int, path: str, base: int, size: int, ts: int, cpu: int) -> list[EventRecord]:
        """An Image DCStart or Load record, and the file's build id after it when known."""
        records = [self._image_record(opcode, pid, tid, path, base, size, ts, cpu)]
        if self.build_ids is not None and path.startswith("/"):
            if path not in self._known_build_ids:
                self._known_build_ids[path] = self.build_ids(path)
            found = self._known_build_ids[path]
            if found:
                records.append(build_classic_record(
                    event_guid=IMAGE_BUILD_ID_CLASS, type=BUILD_ID, version=0, pid=pid, tid=tid, timestamp=ts, cpu=cpu,
                    user_data=struct.pack("<QI", base, pid) + bytes.fromhex(found),
                ))  # fmt: skip
        return records

    def rundown(self, proc: ProcMaps, timestamp: int, cpu: int = 0, pids: Iterable[int] | None = None) -> list[EventRecord]:
        """Image DCStart records for the executable mappings of the processes alive now, and
        the sampling interval when profiling. ``pids`` limits the processes (default: all).

        A system-wide profile (``pids`` None) also gets the kernel's text and its modules as
        images of process 0, so that kernel frames of stacks fall into an image."""
        records: list[EventRecord] = []
        if "profile" in self.flags:
            interval = max(1, self.interval_ns // 100)
            payload = _INTERVAL.pack(0, interval, interval) + _wide("Timer")
            records.append(build_perfinfo_record(
                hook_id=PERFINFO_GROUP << 8 | COLLECTION_START, version=INTERVAL_VERSION, timestamp=timestamp, cpu=cpu, user_data=payload,
            ))
        if "image" not in self.flags:
            return records
        if pids is None and "profile" in self.flags:
            for name, base, size in proc.kernel_images():
                records.append(self._image_record(IMAGE_DC_START, 0, 0, name, base, size, timestamp, cpu))
        for pid in (proc.pids() if pids is None else pids):
            entries = proc.maps(pid)
            if not entries:
                continue
            loaded = self.images.setdefault(pid, {})
            for path, base, size in image_spans(entries):
                loaded[(path, base)] = size
                records += self._loaded(IMAGE_DC_START, pid, 0, path, base, size, timestamp, cpu)
        return records

    # -- handlers -------------------------------------------------------------------------------
    def on_mmap2(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        path = v["filename"]
        if not v.get("prot", PROT_EXEC) & PROT_EXEC or not _is_image_path(path):
            return []
        pid, tid = v["pid"], v["tid"]
        base = v["addr"] - v["pgoff"]
        size = v["addr"] + v["len"] - base
        loaded = self.images.setdefault(pid, {})
        known = loaded.get((path, base))
        if known is not None and known >= size:
            return []  # another executable segment of an image already announced
        loaded[(path, base)] = size
        if "image" not in self.flags:
            return []
        return self._loaded(IMAGE_LOAD, pid, tid, path, base, size, ts, cpu)

    def on_fork(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        pid, parent = v["pid"], v["ppid"]
        if pid == parent:
            return []  # a new thread shares its process's images
        inherited = dict(self.images.get(parent, {}))
        self.images[pid] = inherited
        if "image" not in self.flags:
            return []
        # fork() copies every mapping: the child has its parent's images at the same bases.
        return [record for (path, base), size in inherited.items() for record in self._loaded(IMAGE_LOAD, pid, v["tid"], path, base, size, ts, cpu)]

    def _unload_all(self, pid: int, tid: int, ts: int, cpu: int) -> list[EventRecord]:
        loaded = self.images.pop(pid, None)
        if not loaded or "image" not in self.flags:
            return []
        return [self._image_record(IMAGE_UNLOAD, pid, tid, path, base, size, ts, cpu) for (path, base), size in loaded.items()]

    def on_comm(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if not v.get("exec"):
            return []
        # execve replaced the address space: what was loaded is gone; the new program's
        # mappings follow as MMAP2 records.
        return self._unload_all(v["pid"], v["tid"], ts, cpu)

    def on_exit(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if v["pid"] != v["tid"]:
            return []  # a thread other than the leader
        return self._unload_all(v["pid"], v["tid"], ts, cpu)

    def on_sample(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        if "profile" not in self.flags:
            return []
        pid, tid = v["pid"], v["tid"]
        records = [build_perfinfo_record(
            hook_id=PERFINFO_GROUP << 8 | SAMPLED_PROFILE, version=SAMPLE_VERSION, timestamp=ts, cpu=cpu,
            user_data=_SAMPLE.pack(v["ip"] & 0xFFFFFFFFFFFFFFFF, tid, 1, 0),
        )]
        chain = v.get("callchain")
        if chain:
            kernel, user = split_callchain(chain)
            if kernel and len(self.kernel_addresses) < _MAX_KERNEL_ADDRESSES:
                self.kernel_addresses.update(kernel)
            frames = kernel + user
            if frames:
                payload = _STACK_HEAD.pack(ts, pid, tid) + struct.pack(f"<{len(frames)}Q", *frames)
                records.append(build_perfinfo_record(
                    hook_id=STACKWALK_GROUP << 8 | STACK, version=STACKWALK_VERSION, timestamp=ts, cpu=cpu, user_data=payload,
                ))
        return records


    def symbol_rundown(self, symbols: list[tuple[int, str]], timestamp: int, cpu: int = 0) -> list[EventRecord]:
        """KernelSymbols records for the symbols (sorted ``(address, name)``, kallsyms' text
        symbols) that the kernel frames of the samples fell in."""
        if not symbols or not self.kernel_addresses:
            return []
        starts = [address for address, _name in symbols]
        used: set[int] = set()
        for address in self.kernel_addresses:
            index = bisect.bisect_right(starts, address) - 1
            if index >= 0 and address >= _KERNEL_START:
                used.add(index)
        records = []
        for index in sorted(used):
            address, name = symbols[index]
            size = min(starts[index + 1] - address, 0xFFFFFFFF) if index + 1 < len(starts) else 0
            records.append(build_classic_record(
                event_guid=KERNEL_SYMBOLS_CLASS, type=KERNEL_SYMBOL, version=0, timestamp=timestamp, cpu=cpu,
                user_data=struct.pack("<QI", address, size) + name.encode("ascii", "replace") + b"\0",
            ))  # fmt: skip
        return records


def install_perf_handlers(
    mapper: KernelEventMapper, flags: Iterable[str] = PERF_FLAGS, interval_ns: int = 1_000_000,
    build_ids: Callable[[str], str | None] | None = None,
) -> PerfClassMapper:  # fmt: skip
    """Register the perf event handlers on ``mapper``; returns their state (for the rundown).

    ``flags`` ⊆ {"image", "profile"}: which records to write. Image state is kept either way,
    so that a sample's process images are known. ``interval_ns`` is the sampling period
    written in the CollectionStart rundown record. ``build_ids`` reads an image file's GNU build
    id (``ProcSource.build_id``): given, each image event is followed by its build id.
    """
    perf = PerfClassMapper(mapper, flags, interval_ns, build_ids)
    mapper.register("perf_mmap2", perf.on_mmap2)
    mapper.register("perf_fork", perf.on_fork)
    mapper.register("perf_exit", perf.on_exit)
    mapper.register("perf_comm", perf.on_comm)
    mapper.register("perf_sample", perf.on_sample)
    return perf
