"""A trace file's CPU samples with named stacks, from the index's columns: ``load_profile``'s
result without a Python object per record.

``load_file_profile(path)`` reads the file's index (``consumer.index.EtlIndex``) and works on
its columns with numpy:

* the records that tell processes, threads, images, .NET methods and symbols (anything but
  samples, StackWalk records, CSwitch and ReadyThread) feed the ``TraceState`` one by one;
* ``SampledProfile`` records and ``StackWalk`` ``Stack``/``StackKeyKernel``/``StackKeyUser``
  records are read from the file's bytes as arrays; a stack record joins the sample with its
  ``EventTimeStamp`` and ``StackThread`` (kernel part before user part, parts in file order),
  a key resolves to the first ``KeyDelete``/``KeyRundown`` definition of that key at or after
  the reference, else the last one (``events.stacks``'s rules);
* frames are one address array with offsets per sample; each distinct (process, address) is
  named once by ``FrameNamer`` (at the time of the first sample that holds it, as the
  per-record path names it) and mapped back;
* ``SampleTable`` gives the samples as ``StackSample``s when asked (lazily) and computes By Name
  by counting on arrays.

What it does not take the fast way (other events than ``SampledProfile``, a process asked by
name) goes through ``events.profile.load_profile`` over the file's records.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from openetw._native import module as native_module
from openetw.etl import layouts as L
from openetw.events.frames import Frame, FrameNamer
from openetw.events.profile import Profile, StackSample, load_profile, process_label
from openetw.events.stacks import EventStack, StackCollector, StackStats
from openetw.events.trace_state import TraceState
from openetw.tdh.registry import SchemaRegistry

__all__ = ["SampleTable", "load_file_profile"]

_STACKWALK, _PERFINFO, _THREAD, _PROCESS, _IMAGE = 0x18, 0x0F, 0x05, 0x03, 0x14
_STACK, _KEY_DELETE, _KEY_RUNDOWN, _KEY_KERNEL, _KEY_USER = 32, 35, 36, 37, 38
_SAMPLE, _CSWITCH, _READY_THREAD = 46, 36, 50
_NO_ID = 0xFFFFFFFF
_POINTER32_TYPES = (L.HEADER_TYPE_SYSTEM32, L.HEADER_TYPE_COMPACT32, L.HEADER_TYPE_PERFINFO32)
_POINTER_SIZES = np.full(256, 8, dtype=np.int64)
_POINTER_SIZES[list(_POINTER32_TYPES)] = 4
_BUFFER_COMPRESSED = L.BUFFER_FLAG_COMPRESSED
_KERNEL_PART, _USER_PART = 0, 1
_NATIVE = native_module("_stacks")
_COLUMNS = ("timestamp", "filetime", "provider", "pid", "tid", "buffer", "offset", "user_data_offset", "user_data_length", "id",
            "hook_id", "flags", "kind", "header_type")  # fmt: skip


class SampleTable(Sequence[StackSample]):
    """Samples as columns: ``pid``, ``tid``, ``filetime`` and the stack (``stack_of``) per
    sample; stack ``k``'s frames are ``frames[i]`` for ``i`` in
    ``stack_frames[stack_offsets[k]:stack_offsets[k + 1]]``, innermost first. Indexing gives
    ``StackSample``s, built when asked."""

    def __init__(self, state: TraceState, pid: np.ndarray, tid: np.ndarray, filetime: np.ndarray, stack_of: np.ndarray,
                 stack_offsets: np.ndarray, stack_frames: np.ndarray, frames: list[Frame]) -> None:  # fmt: skip
        self.state = state
        self.pid, self.tid, self.filetime, self.stack_of = pid, tid, filetime, stack_of
        self.stack_offsets, self.stack_frames, self.frames = stack_offsets, stack_frames, frames
        self._labels: dict[tuple[int, int], str] = {}
        self._stacks: dict[int, tuple[Frame, ...]] = {}

    def __len__(self) -> int:
        return len(self.pid)

    @property
    def total(self) -> int:
        """The samples' weight (each weighs 1)."""
        return len(self.pid)

    @property
    def frame_count(self) -> int:
        """Frames over all samples (with repeats)."""
        return int(np.diff(self.stack_offsets)[self.stack_of].sum()) if len(self.stack_of) else 0

    def _stack(self, number: int) -> tuple[Frame, ...]:
        found = self._stacks.get(number)
        if found is None:
            ids = self.stack_frames[int(self.stack_offsets[number]) : int(self.stack_offsets[number + 1])].tolist()
            found = self._stacks[number] = tuple(self.frames[i] for i in ids)
        return found

    def _sample(self, at: int) -> StackSample:
        pid, when = int(self.pid[at]), int(self.filetime[at])
        label = self._labels.get((pid, when))
        if label is None:
            label = self._labels[(pid, when)] = process_label(self.state, pid, when)
        return StackSample(pid, int(self.tid[at]), label, when, "SampledProfile", self._stack(int(self.stack_of[at])))

    @overload
    def __getitem__(self, at: int) -> StackSample: ...
    @overload
    def __getitem__(self, at: slice) -> list[StackSample]: ...
    def __getitem__(self, at: int | slice) -> StackSample | list[StackSample]:
        if isinstance(at, slice):
            return [self._sample(i) for i in range(*at.indices(len(self)))]
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError(at)
        return self._sample(at)

    def __iter__(self) -> Iterator[StackSample]:
        for at in range(len(self)):
            yield self._sample(at)

    def name_counts(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """By Name's counts: (names, exclusive, inclusive), one entry per name."""
        names: dict[str, int] = {}
        label_of = np.asarray([names.setdefault(frame.label, len(names)) for frame in self.frames], dtype=np.int64)
        count = len(names)
        weights = np.bincount(self.stack_of, minlength=len(self.stack_offsets) - 1)
        lengths = np.diff(self.stack_offsets)
        exclusive = np.zeros(count, dtype=np.int64)
        inclusive = np.zeros(count, dtype=np.int64)
        full = np.flatnonzero(lengths > 0)
        if len(full):
            labels = label_of[self.stack_frames]
            np.add.at(exclusive, labels[self.stack_offsets[full]], weights[full])
            # a name counts once per stack: distinct (stack, name) pairs
            stack_at = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
            pairs = np.unique(stack_at * count + labels)
            np.add.at(inclusive, pairs % count, weights[pairs // count])
        return list(names), exclusive, inclusive


def _file_bytes(index: Any, path: str, buffer_numbers: np.ndarray) -> tuple[Any, np.ndarray, Any]:
    """The bytes that hold buffers ``buffer_numbers`` and where each buffer's data starts in
    them (by buffer number); the mapping to close."""
    table = index.buffers
    base = np.zeros(int(table["index"].max()) + 1 if len(table) else 1, dtype=np.int64)
    if len(table) and not np.any(table["flags"] & _BUFFER_COMPRESSED) and os.path.getsize(path) > 0:
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
        base[table["index"]] = table["file_offset"]
        return np.frombuffer(mapped, dtype=np.uint8), base, mapped
    parts: list[bytes] = []
    at = 0
    for number in np.unique(buffer_numbers).tolist():
        data = index.file_buffers.buffer_data(number)
        base[number] = at
        parts.append(data)
        at += len(data)
    return np.frombuffer(b"".join(parts), dtype=np.uint8), base, None


def _read_u(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Little-endian unsigned integers of ``width`` bytes at positions ``at``."""
    if not len(at):
        return np.zeros(0, dtype=np.uint64)
    dtype = "<u8" if width == 8 else "<u4"
    if not np.any(at & (width - 1)):  # aligned (records are): one gather through a wider view
        whole = data[: len(data) - len(data) % width].view(dtype)
        values: np.ndarray = whole[at // width].astype(np.uint64)
        return values
    gathered = data[at[:, None] + np.arange(width, dtype=np.int64)]
    return gathered.view(dtype).reshape(-1).astype(np.uint64)


def _addresses(data: np.ndarray, start: np.ndarray, count: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The addresses of many records (``count`` of ``width`` bytes from ``start``) as one array
    and the offsets of each record's run."""
    offsets = np.zeros(len(count) + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    total = int(offsets[-1])
    if len(width) and np.all(width == width[0]):  # one pointer size (a trace's usual case)
        size = int(width[0])
        return _read_u(data, np.repeat(start - offsets[:-1] * size, count) + np.arange(total, dtype=np.int64) * size, size), offsets
    out = np.zeros(total, dtype=np.uint64)
    each_width = np.repeat(width, count)
    within = np.arange(len(out), dtype=np.int64) - np.repeat(offsets[:-1], count)
    positions = np.repeat(start, count) + within * each_width
    for size in (4, 8):
        chosen = np.flatnonzero(each_width == size)
        if len(chosen):
            out[chosen] = _read_u(data, positions[chosen], size)
    return out, offsets


_TELLING_CLASSES = (
    "b3e675d7-2554-4f18-830b-2762732560de",  # KernelTraceControl ImageID (DbgID_RSDS)
    "0e6c4d7a-51b1-4c0e-9f3e-6f70656e6574",  # openetw's KernelSymbols
    "0e6c4d7a-51b1-4c0e-9f3e-6f70656e6575",  # openetw's ImageBuildId
    "bbccf6c1-6cd1-48c4-80ff-839482e37671",  # TDH metadata of the trace's events
)
_CLR = ("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4", "a669021c-c450-4609-a035-5af59af4df18")  # runtime, rundown
_CLR_IDS = (143, 144, 151, 152, 153, 154)  # method load/unload (verbose), module and domain-module events
_KERNEL_PROCESS = "22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716"
_MANIFEST_DATA_ID = 0xFFFE


def _telling(index: Any, rows: dict[str, np.ndarray], chosen: np.ndarray) -> np.ndarray:
    """Which records other than kernel ones ``TraceState`` learns from (its ``observe``): .NET
    method and module events, the kernel process provider's, manifests the trace carries,
    image identities, kernel symbols, build ids and TDH metadata: of the rows ``chosen``."""
    providers = [str(guid) for guid in index.providers]
    provider, event_id = rows["provider"][chosen], rows["id"][chosen]

    def rows_of(wanted: Iterable[str]) -> np.ndarray:
        numbers = [at for at, guid in enumerate(providers) if guid in wanted]
        return np.isin(provider, numbers)

    kind = rows["kind"][chosen]
    event = kind == 5
    clr = event & rows_of(_CLR) & np.isin(event_id, _CLR_IDS)
    told = clr | (event & rows_of((_KERNEL_PROCESS,))) | (event & (event_id == _MANIFEST_DATA_ID))
    wanted: np.ndarray = told | (np.isin(kind, (3, 4)) & rows_of(_TELLING_CLASSES))
    return wanted


def _fallback(path: str, **options: Any) -> Profile:
    from openetw.etl.reader import EtlReader

    with EtlReader(path) as reader:
        return load_profile(reader.records(time_order=True), **options)


def load_file_profile(
    path: str | os.PathLike[str], *, registry: SchemaRegistry | None = None, event: str | None = "SampledProfile",
    process: str | None = None, thread: int | None = None, start: int | None = None, end: int | None = None,
    symbol_dirs: Iterable[str | os.PathLike[str]] = (), kallsyms: str | None = None,
    perf_map_dir: str | os.PathLike[str] | None = None, elf: bool = True, index: Any = None,
) -> Profile:  # fmt: skip
    """``load_profile`` of the records of the file ``path`` (same arguments), from its index
    (``index``: an ``EtlIndex`` of it already open, else opened, kept in the user's cache)."""
    source = os.fspath(path)
    options: dict[str, Any] = {
        "registry": registry, "event": event, "process": process, "thread": thread, "start": start, "end": end,
        "symbol_dirs": symbol_dirs, "kallsyms": kallsyms, "perf_map_dir": perf_map_dir, "elf": elf,
    }  # fmt: skip
    if event is None or event.lower() not in ("sampledprofile", "perfinfo/sampledprofile") or (process is not None and not process.isdigit()):
        return _fallback(source, **options)
    if index is None:
        from openetw.consumer.index import EtlIndex

        index = EtlIndex.open(source)
    rows = index.columns(_COLUMNS)
    kind, hook = rows["kind"], rows["hook_id"].astype(np.int64)
    group, opcode = hook >> 8, hook & 0xFF
    kernel = kind <= 2
    is_sample = kernel & (group == _PERFINFO) & (opcode == _SAMPLE)
    walk = kernel & (group == _STACKWALK)
    is_stack = walk & np.isin(opcode, (_STACK, _KEY_KERNEL, _KEY_USER))
    is_key = walk & np.isin(opcode, (_KEY_DELETE, _KEY_RUNDOWN))
    quiet = kernel & (((group == _THREAD) & np.isin(opcode, (_CSWITCH, _READY_THREAD))) | ~np.isin(group, (_PROCESS, _THREAD, _IMAGE)))
    state = TraceState(registry)
    not_kernel = np.flatnonzero(~kernel)
    told = np.union1d(not_kernel[_telling(index, rows, not_kernel)], np.flatnonzero(kernel & ~quiet))
    loader = index.loader()
    for record in loader.records(told):
        state.observe(record)

    needed = np.flatnonzero(is_sample | is_stack | is_key)
    data, base, mapped = _file_bytes(index, source, rows["buffer"][needed])
    try:
        width_of = _POINTER_SIZES[rows["header_type"]]
        begin = base[rows["buffer"].astype(np.int64)] + rows["offset"].astype(np.int64) + rows["user_data_offset"].astype(np.int64)
        length = rows["user_data_length"].astype(np.int64)
        inside = begin + length <= len(data)  # a record the bytes at hand do not hold (a damaged index) is read as empty
        if not np.all(inside):
            length = np.where(inside, length, 0)
        # a sample that shares its timestamp with another event may lose a stack to it: those go the per-record way
        own = ~(is_sample | walk) & (kind != 7)
        contested = _shared(rows["timestamp"][is_sample], rows["timestamp"][own])
        profile = _join(state, rows, data, begin, length, width_of, is_sample, is_stack, is_key, opcode, contested)
        del data
    finally:
        if mapped is not None:
            mapped.close()
    stats, s_pid, s_tid, s_filetime, unmatched, frame_addresses, frame_offsets, first_sample, s_keys = profile
    events, extra = _other_events(index, rows, state, unmatched, is_sample | walk, is_sample & _within(rows["timestamp"], contested),
                                  is_key, stats, first_sample)  # fmt: skip
    frame_starts, frame_lengths = frame_offsets[:-1], np.diff(frame_offsets)
    if extra:
        s_keys = np.concatenate([s_keys, np.asarray([key for key, _ in extra], dtype=np.int64)])
        joined = [found for _, found in extra]
        s_pid = np.concatenate([s_pid, np.asarray([found.pid for found in joined], dtype=np.int64)])
        s_tid = np.concatenate([s_tid, np.asarray([found.tid for found in joined], dtype=np.int64)])
        s_filetime = np.concatenate([s_filetime, np.asarray([found.filetime for found in joined], dtype=np.int64)])
        frame_starts = np.concatenate([frame_starts, len(frame_addresses) + np.cumsum([0] + [len(found.addresses) for found in joined[:-1]])])
        frame_lengths = np.concatenate([frame_lengths, np.asarray([len(found.addresses) for found in joined], dtype=np.int64)])
        frame_addresses = np.concatenate([frame_addresses, np.asarray([a for found in joined for a in found.addresses], dtype=np.uint64)])
        by_key = np.argsort(s_keys, kind="stable")
        s_pid, s_tid, s_filetime, frame_starts, frame_lengths = (array[by_key] for array in (s_pid, s_tid, s_filetime, frame_starts, frame_lengths))
    keep = np.ones(len(s_pid), dtype=bool)
    if start is not None:
        keep &= s_filetime >= start
    if end is not None:
        keep &= s_filetime <= end
    if thread is not None:
        keep &= s_tid == thread
    if process is not None:
        keep &= s_pid == int(process)
    with_stack = len(s_pid)
    chosen = np.flatnonzero(keep)
    pids = s_pid[chosen].astype(np.int64)
    lengths = frame_lengths[chosen]
    starts = frame_starts[chosen]
    # one representative sample per distinct stack (process and addresses)
    stack_of, representatives = _distinct_stacks(frame_addresses, starts, lengths, pids)
    rep_lengths = lengths[representatives]
    stack_offsets = np.zeros(len(representatives) + 1, dtype=np.int64)
    np.cumsum(rep_lengths, out=stack_offsets[1:])
    addresses = frame_addresses[_runs(starts[representatives], rep_lengths, stack_offsets)]
    # name each distinct (process, address) once, at the first sample that holds it
    namer = FrameNamer(state, symbol_dirs=symbol_dirs, kallsyms=kallsyms, perf_map_dir=perf_map_dir, elf=elf)
    frames: list[Frame] = []
    frame_ids = np.zeros(0, dtype=np.int64)
    if len(addresses):
        frame_pid = np.repeat(pids[representatives], rep_lengths)
        address_values, address_ids = np.unique(addresses, return_inverse=True)
        pid_values, pid_ids = np.unique(frame_pid, return_inverse=True)
        pair_keys = pid_ids.reshape(-1).astype(np.int64) * len(address_values) + address_ids.reshape(-1)
        pair_values, first_at, inverse = np.unique(pair_keys, return_index=True, return_inverse=True)
        order = np.argsort(first_at, kind="stable")
        stack_at = np.repeat(np.arange(len(representatives), dtype=np.int64), rep_lengths)
        whens = s_filetime[chosen][representatives[stack_at[first_at[order]]]]
        distinct_pid = pid_values[pair_values // len(address_values)][order]
        distinct_address = address_values[pair_values % len(address_values)][order]
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        for pid, address, when in zip(distinct_pid.tolist(), distinct_address.tolist(), whens.tolist(), strict=True):
            frames.append(namer.name(pid, address, when))
        frame_ids = rank[inverse.reshape(-1)]
    samples = SampleTable(
        state, pids, s_tid[chosen].astype(np.int64), s_filetime[chosen], stack_of, stack_offsets, frame_ids, frames,
    )  # fmt: skip
    if with_stack:
        events["SampledProfile"] = with_stack
    else:
        events.pop("SampledProfile", None)
    return Profile(samples, state, stats, namer.stats, events)  # type: ignore[arg-type]


class _Learned:
    """A ``TraceState`` that has seen the trace already: a second look at a record teaches nothing."""

    def __init__(self, state: TraceState) -> None:
        self._state = state

    def observe(self, record: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


def _other_events(
    index: Any, rows: dict[str, np.ndarray], state: TraceState, unmatched: np.ndarray, sampled: np.ndarray, contested: np.ndarray,
    is_key: np.ndarray, stats: StackStats, first_sample: int | None,
) -> tuple[dict[str, int], list[tuple[int, EventStack]]]:  # fmt: skip
    """The events other than samples that have stacks, counted by name (``Profile.events``), by
    the per-record ``StackCollector`` over the few records that may have them: the stack
    records no sample took, the events at their timestamps, events with extended items; and
    the stats that adds to. The samples ``contested`` (sharing their timestamp with another
    event) are joined there too: they come back with their place in the order of samples."""
    part_rows, part_when, part_tid = unmatched
    stamps = np.unique(part_when)
    events_of_their_own = np.flatnonzero(rows["kind"] == 5)
    extended = events_of_their_own[(rows["flags"][events_of_their_own] & 0x0001) != 0]  # EVENT_HEADER_FLAG_EXTENDED_INFO
    chosen = np.flatnonzero(contested)
    if len(stamps):
        chosen = np.union1d(chosen, np.flatnonzero(~sampled & _within(rows["timestamp"], stamps)))
    chosen = np.union1d(chosen, extended)
    if not len(chosen) and not len(part_rows):
        return {}, []
    collector = StackCollector(_Learned(state))  # type: ignore[arg-type]
    fed = np.union1d(np.union1d(chosen, part_rows), np.flatnonzero(is_key))
    sample_row: dict[tuple[int, int], int] = {}
    for row, record in zip(fed.tolist(), index.loader().records(fed), strict=True):
        if contested[row]:
            data, width = record.user_data, record.pointer_size
            tid = int.from_bytes(data[width : width + 4], "little") if len(data) >= width + 4 else record.tid
            sample_row.setdefault((record.timestamp, tid), row)
        collector.observe(record)
    joined = collector.finish()
    first_part: dict[tuple[int, int], int] = {}
    for row, when, tid in zip(part_rows.tolist(), part_when.tolist(), part_tid.tolist(), strict=True):
        first_part.setdefault((when, tid), row)
    events: dict[str, int] = {}
    extra: list[tuple[int, EventStack]] = []
    for stack in joined:
        if stack.event == "SampledProfile":
            events.setdefault("SampledProfile", 0)
            row = sample_row.get((stack.timestamp, stack.tid), 0)
            extra.append((max(row, first_part.get((stack.timestamp, stack.tid), row)), stack))
            continue
        if first_sample is not None and stack.timestamp > first_sample and "SampledProfile" not in events:
            events["SampledProfile"] = 0  # where the samples come in the per-record path's order
        events[stack.event] = events.get(stack.event, 0) + 1
    found = collector.stats
    stats.events_with_stacks += found.events_with_stacks
    stats.samples_with_stacks += found.samples_with_stacks
    stats.extended_stacks += found.extended_stacks
    stats.unmatched_stacks += found.unmatched_stacks
    stats.unresolved_keys += found.unresolved_keys
    stats.key_references += found.key_references
    return events, extra


def _within(values: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is one of ``chosen`` (sorted, distinct, few)."""
    if not len(chosen):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(chosen, values), len(chosen) - 1)
    found: np.ndarray = chosen[at] == values
    return found


def _shared(many: np.ndarray, few: np.ndarray) -> np.ndarray:
    """The values of ``many`` that ``few`` has too, sorted, once each."""
    few = np.unique(few)
    return np.unique(many[_within(many, few)])


def _runs(starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i]`` of every run, one after another
    (``offsets``: the runs' cumulative lengths, from 0)."""
    total = int(offsets[-1])
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)


def _distinct_stacks(addresses: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's stack (a number, in order of first appearance) and the first sample of
    each stack. Stacks are told apart by a hash of process and addresses, every frame then
    checked against its stack's first sample (a sample whose hash met another stack's keeps a
    stack of its own)."""
    count = len(starts)
    if not count:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = addresses[_runs(starts, lengths, offsets)] if not np.array_equal(starts, offsets[:-1]) else addresses[: int(offsets[-1])]
    depth = np.arange(len(values), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    rng = np.random.default_rng(0x0E7B)
    mix = rng.integers(1, 1 << 62, size=int(lengths.max()) + 1, dtype=np.int64).astype(np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        hashed = (values ^ (values >> np.uint64(29))) * mix[depth]
        summed = np.zeros(count, dtype=np.uint64)
        full = lengths > 0
        summed[full] = np.add.reduceat(hashed, offsets[:-1][full]) if len(hashed) else 0
        keys = summed ^ (pids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (lengths.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9))
    _unique, first_at, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    by_first = np.argsort(first_at, kind="stable")
    renumber = np.empty(len(by_first), dtype=np.int64)
    renumber[by_first] = np.arange(len(by_first), dtype=np.int64)
    stack_of = renumber[inverse]
    representatives = first_at[by_first]
    rep = representatives[stack_of]
    same = (lengths[rep] == lengths) & (pids[rep] == pids)
    if np.all(same):
        mine = values
        theirs = addresses[np.repeat(starts[rep], lengths) + depth]
        if np.array_equal(mine, theirs):
            return stack_of, representatives
    return np.arange(count, dtype=np.int64), np.arange(count, dtype=np.int64)


def _join_compiled(
    state: TraceState, rows: dict[str, np.ndarray], data: np.ndarray, stats: StackStats, parts: tuple[np.ndarray, ...],
    opcode: np.ndarray, length: np.ndarray, width_of: np.ndarray, is_key: np.ndarray, contested: np.ndarray,
) -> tuple[StackStats, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int | None, np.ndarray]:  # fmt: skip
    """``_join``'s result by the compiled join (``_native/_stacks.c``) when no stack part is a
    key reference: the same values, the sample-to-part join and the gathering of addresses in
    one pass over the parts."""
    assert _NATIVE is not None
    sample_rows, s_time, s_tid, s_pid, stack_rows, when, part_pid, part_tid, head, count, w = parts
    key_rows = np.flatnonzero(is_key)
    stats.keys_defined = int((length[key_rows] >= width_of[key_rows]).sum())
    first_address = np.zeros(len(stack_rows), dtype=np.uint64)
    for size in (4, 8):
        pick = np.flatnonzero(w == size)
        first_address[pick] = _read_u(data, head[pick] + 16, size)
    kernel_bit = np.where(w == 8, np.uint64(1) << np.uint64(63), np.uint64(1) << np.uint64(31))
    rank = np.where((first_address & kernel_bit) != 0, _KERNEL_PART, _USER_PART).astype(np.int64)
    free = ~_within(s_time, contested) if len(contested) else np.ones(len(sample_rows), dtype=bool)
    pieces = _NATIVE.join_gather(
        data, sample_rows.astype(np.int64), np.ascontiguousarray(s_time, dtype=np.int64), s_tid, free.view(np.uint8),
        stack_rows.astype(np.int64), when, part_tid, rank, np.ascontiguousarray(head + 16, dtype=np.int64), count.astype(np.int64),
        w.astype(np.int64), len(rows["kind"]),
    )  # fmt: skip
    target, with_frames, order_key, first_part = (np.frombuffer(piece, dtype=np.int64) for piece in pieces[:4])
    offsets = np.frombuffer(pieces[4], dtype=np.int64)
    addresses = np.frombuffer(pieces[5], dtype=np.uint64)
    stats.key_references = stats.unresolved_keys = stats.unmatched_stacks = 0
    stats.events_with_stacks = stats.samples_with_stacks = len(with_frames)
    pids = part_pid[first_part].astype(np.int64)
    for i in np.flatnonzero(pids == _NO_ID).tolist():
        sample = int(with_frames[i])
        pid = int(s_pid[sample])
        pids[i] = pid if pid != -1 else state.thread_process(max(int(s_tid[sample]), 0), int(rows["filetime"][sample_rows[sample]])) or 0
    tids = s_tid[with_frames]
    tids[tids == -1] = 0
    filetimes = rows["filetime"][sample_rows[with_frames]]
    unmatched = np.stack([stack_rows[target < 0], when[target < 0], part_tid[target < 0]])
    first_sample = int(s_time[with_frames[0]]) if len(with_frames) else None
    return stats, pids, tids, filetimes, unmatched, addresses, offsets, first_sample, order_key


def _join(
    state: TraceState, rows: dict[str, np.ndarray], data: np.ndarray, begin: np.ndarray, length: np.ndarray, width_of: np.ndarray,
    is_sample: np.ndarray, is_stack: np.ndarray, is_key: np.ndarray, opcode: np.ndarray, contested: np.ndarray,
) -> tuple[StackStats, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int | None, np.ndarray]:  # fmt: skip
    """Samples joined to their stack records (module doc): stats; per sample with a stack its
    pid, tid and filetime; the rows of the stack records no sample took; the addresses and
    their offsets per sample; the timestamp of the first sample with a stack."""
    stats = StackStats(records=len(rows["kind"]))
    # samples: the sampled thread is in the payload (after the instruction pointer)
    sample_rows = np.flatnonzero(is_sample)
    stats.samples = len(sample_rows)
    s_width = width_of[sample_rows]
    s_tid = rows["tid"][sample_rows].astype(np.int64)
    has_tid = length[sample_rows] >= s_width + 4
    if np.any(has_tid):
        at = sample_rows[has_tid]
        s_tid[has_tid] = _read_u(data, begin[at] + width_of[at], 4).astype(np.int64)
    s_tid[s_tid == _NO_ID] = -1
    s_time = rows["timestamp"][sample_rows]
    s_pid = rows["pid"][sample_rows].astype(np.int64)
    s_pid[s_pid == _NO_ID] = -1

    # stack records: EventTimeStamp, StackProcess, StackThread, then addresses or a key
    stack_rows = np.flatnonzero(is_stack & (length >= 16))
    stats.stack_records = len(stack_rows)
    w = width_of[stack_rows]
    head = begin[stack_rows]
    when = _read_u(data, head, 8).astype(np.int64)
    part_pid = _read_u(data, head + 8, 4).astype(np.int64)
    part_tid = _read_u(data, head + 12, 4).astype(np.int64)
    op = opcode[stack_rows]
    count = np.where(op == _STACK, (length[stack_rows] - 16) // w, 0)
    is_ref = (op != _STACK) & (length[stack_rows] >= 16 + w)
    present = (count > 0) | is_ref
    stack_rows, w, head, when, part_pid, part_tid, op, count, is_ref = (
        array[present] for array in (stack_rows, w, head, when, part_pid, part_tid, op, count, is_ref)
    )
    if _NATIVE is not None and not np.any(is_ref):
        compiled = (sample_rows, s_time, s_tid, s_pid, stack_rows, when, part_pid, part_tid, head, count, w)
        return _join_compiled(state, rows, data, stats, compiled, opcode, length, width_of, is_key, contested)
    direct, direct_offsets = _addresses(data, head + 16, count, w)
    first_address = direct[direct_offsets[:-1][count > 0]]
    rank = np.where(op == _KEY_USER, _USER_PART, _KERNEL_PART)
    kernel_bit = np.where(w == 8, np.uint64(1) << np.uint64(63), np.uint64(1) << np.uint64(31))
    rank[count > 0] = np.where((first_address & kernel_bit[count > 0]) != 0, _KERNEL_PART, _USER_PART)

    # join: the sample of the same timestamp and thread (the first such sample)
    free = np.flatnonzero(~_within(s_time, contested)) if len(contested) else np.arange(len(sample_rows), dtype=np.int64)
    order = free[np.lexsort((s_tid[free], s_time[free]))]
    sorted_time, sorted_tid = s_time[order], s_tid[order]
    left = np.searchsorted(sorted_time, when, side="left")
    right = np.searchsorted(sorted_time, when, side="right")
    target = np.full(len(stack_rows), -1, dtype=np.int64)
    # within the run of one timestamp, the first sample of the thread
    single = np.flatnonzero(right - left == 1)
    hit = sorted_tid[left[single]] == part_tid[single]
    target[single[hit]] = order[left[single[hit]]]
    for place in np.flatnonzero(right - left > 1).tolist():
        run = np.flatnonzero(sorted_tid[left[place] : right[place]] == part_tid[place])
        if len(run):
            target[place] = order[left[place] + run[0]]
    matched = target >= 0
    stats.key_references = int((is_ref & matched).sum())  # the others: counted with the events they join
    stats.unmatched_stacks = 0  # parts of other events are not counted here

    # keys: each reference resolves to the first definition at or after it, else the last
    key_rows = np.flatnonzero(is_key)
    kw = width_of[key_rows]
    enough = length[key_rows] >= kw
    key_rows, kw = key_rows[enough], kw[enough]
    stats.keys_defined = len(key_rows)
    key_value = np.zeros(len(key_rows), dtype=np.uint64)
    for size in (4, 8):
        pick = np.flatnonzero(kw == size)
        key_value[pick] = _read_u(data, begin[key_rows[pick]], size)
    key_count = (length[key_rows] - kw) // kw
    defined, defined_offsets = _addresses(data, begin[key_rows] + kw, key_count, kw)
    ref_key = np.zeros(len(stack_rows), dtype=np.uint64)
    for size in (4, 8):
        pick = np.flatnonzero(is_ref & (w == size))
        ref_key[pick] = _read_u(data, head[pick] + 16, size)
    resolved = np.full(len(stack_rows), -1, dtype=np.int64)  # the definition a reference uses
    references = np.flatnonzero(is_ref & matched)
    if len(references) and len(key_rows):
        def_time = rows["timestamp"][key_rows]
        by_key = np.lexsort((np.arange(len(key_rows)), def_time, key_value))
        keys_sorted, times_sorted = key_value[by_key], def_time[by_key]
        ref_time = s_time[target[references]]
        lo = np.searchsorted(keys_sorted, ref_key[references], side="left")
        hi = np.searchsorted(keys_sorted, ref_key[references], side="right")
        for place, first, last, moment in zip(references.tolist(), lo.tolist(), hi.tolist(), ref_time.tolist(), strict=True):
            if first == last:
                continue
            found = first + int(np.searchsorted(times_sorted[first:last], moment, side="left"))
            resolved[place] = by_key[found if found < last else last - 1]
    unresolved = is_ref & matched & (resolved < 0)
    stats.unresolved_keys = int(unresolved.sum())

    # each part's addresses: direct, or its key's definition
    part_count = np.where(is_ref, np.where(resolved >= 0, key_count[np.maximum(resolved, 0)] if len(key_count) else 0, 0), count)
    part_start = np.where(is_ref, np.where(resolved >= 0, defined_offsets[:-1][np.maximum(resolved, 0)] if len(key_count) else 0, 0),
                          direct_offsets[:-1])  # fmt: skip
    source_is_key = is_ref
    used = np.flatnonzero(matched)
    # a sample's parts: kernel before user, each rank in file order
    by_sample = used[np.lexsort((stack_rows[used], rank[used], target[used]))]
    joined_sample = target[by_sample]
    n = part_count[by_sample]
    total = np.zeros(len(sample_rows), dtype=np.int64)
    np.add.at(total, joined_sample, n)
    # the sample's process: the first attached part's StackProcess, else the sample's, else the thread's
    first_part = np.full(len(sample_rows), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_part, target[used], stack_rows[used])
    attached = first_part < np.iinfo(np.int64).max
    with_frames = np.flatnonzero(total > 0)
    stats.events_with_stacks = stats.samples_with_stacks = len(with_frames)
    # in the order the per-record path joins them: when the first part met its sample
    order_key = np.maximum(sample_rows[with_frames], first_part[with_frames])
    by_key = np.argsort(order_key, kind="stable")
    with_frames, order_key = with_frames[by_key], order_key[by_key]
    pids = np.full(len(with_frames), _NO_ID, dtype=np.int64)
    has_part = attached[with_frames]
    pids[has_part] = part_pid[np.searchsorted(stack_rows, first_part[with_frames[has_part]])]
    for i in np.flatnonzero(pids == _NO_ID).tolist():
        sample = int(with_frames[i])
        pid = int(s_pid[sample])
        pids[i] = pid if pid != -1 else state.thread_process(max(int(s_tid[sample]), 0), int(rows["filetime"][sample_rows[sample]])) or 0
    # the addresses, sample by sample
    slot = np.full(len(sample_rows), -1, dtype=np.int64)
    slot[with_frames] = np.arange(len(with_frames), dtype=np.int64)
    keep_parts = np.flatnonzero((slot[joined_sample] >= 0) & (n > 0))
    parts = by_sample[keep_parts]
    part_slot = slot[target[parts]]
    order2 = np.argsort(part_slot, kind="stable")
    parts, part_slot = parts[order2], part_slot[order2]
    counts = part_count[parts]
    offsets = np.zeros(len(with_frames) + 1, dtype=np.int64)
    np.add.at(offsets, part_slot + 1, counts)
    np.cumsum(offsets, out=offsets)
    ends = np.cumsum(counts)
    keyed = np.any(source_is_key[parts])
    if not keyed and np.array_equal(part_start[parts], ends - counts):  # the direct stacks in order, nothing between
        addresses = direct[: int(ends[-1]) if len(ends) else 0]
    elif not keyed:
        addresses = direct[np.repeat(part_start[parts] - (ends - counts), counts) + np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)]
    else:
        position = np.repeat(part_start[parts] - (ends - counts), counts) + np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64)
        from_key = np.repeat(source_is_key[parts], counts)
        addresses = np.where(from_key, defined[np.where(from_key, position, 0)] if len(defined) else 0,
                             direct[np.where(from_key, 0, position)] if len(direct) else 0).astype(np.uint64)  # fmt: skip
    tids = s_tid[with_frames]
    tids[tids == -1] = 0
    filetimes = rows["filetime"][sample_rows[with_frames]]
    unmatched = np.stack([stack_rows[target < 0], when[target < 0], part_tid[target < 0]])
    first_sample = int(s_time[with_frames[0]]) if len(with_frames) else None
    return stats, pids, tids, filetimes, unmatched, addresses, offsets, first_sample, order_key
