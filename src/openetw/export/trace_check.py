"""``openetw export --check``: is a Perfetto trace or a Chrome trace JSON file well formed?

Written from the formats' rules, apart from the writers (it shares none of their code):

* Perfetto (``Trace`` protobuf, read with its own small wire reader): every interned id a
  packet uses (event names, categories, argument names, callstacks, frames, function names,
  mappings, mapping paths) was defined on its sequence since the sequence's state was last
  cleared; every track event's track was described first; slices nest per track (an end
  closes the track's innermost open slice, none stays open); flows are paired (each flow id
  leaves once and arrives once); packet timestamps never go back within a sequence, nor ETW
  event timestamps within a processor.
* Chrome JSON: ``B``/``E`` nest per thread in time order, ``X`` slices nest per thread, ``b``/``e``
  pair per category and id, ``s``/``f`` flows pair by id, counters carry numbers, samples name
  frames of ``stackFrames``.
"""

from __future__ import annotations

import json
import mmap
import os
from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import InvalidArgument

__all__ = ["CheckResult", "check_chrome", "check_file", "check_perfetto"]

_MAX_MESSAGES = 50


@dataclass(slots=True)
class CheckResult:
    """What the check found: ``problems`` counts every problem, ``errors`` says the first ones."""

    path: str
    format: str
    problems: int = 0
    errors: list[str] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problems == 0

    def error(self, text: str) -> None:
        self.problems += 1
        if len(self.errors) < _MAX_MESSAGES:
            self.errors.append(text)

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "ok": self.ok, "problems": self.problems,
                "errors": self.errors, "counts": self.counts}  # fmt: skip


def check_file(path: str) -> CheckResult:
    """Checks ``path``: Chrome JSON when it starts with ``{`` or ``[``, else a Perfetto trace."""
    if not os.path.isfile(path):
        raise InvalidArgument(f"no such file: {path}")
    with open(path, "rb") as stream:
        head = stream.read(64).lstrip()
    if head[:1] in (b"{", b"["):
        return check_chrome(path)
    return check_perfetto(path)


# -- protobuf wire ------------------------------------------------------------------------------
class _Malformed(Exception):
    pass


def _varint(data: Any, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint longer than 10 bytes")


def _fields(data: Any, pos: int, end: int) -> list[tuple[int, int, Any]]:
    """(number, wire type, value): an int, or (start, end) of a length-delimited field."""
    out: list[tuple[int, int, Any]] = []
    value: Any
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise _Malformed("truncated fixed64")
            value = int.from_bytes(data[pos : pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise _Malformed(f"field {number} runs past its message")
            value = (pos, pos + length)
            pos += length
        elif wire == 5:
            value = int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        else:
            raise _Malformed(f"wire type {wire} in field {number}")
        out.append((number, wire, value))
    return out


def _repeated(data: Any, items: list[tuple[int, int, Any]], number: int, fixed: bool = False) -> list[int]:
    """A repeated scalar field's values, packed or not."""
    values: list[int] = []
    for num, wire, value in items:
        if num != number:
            continue
        if wire != 2:
            values.append(value)
            continue
        pos, end = value
        while pos < end:
            if fixed:
                values.append(int.from_bytes(data[pos : pos + 8], "little"))
                pos += 8
            else:
                item, pos = _varint(data, pos, end)
                values.append(item)
    return values


def _first(items: list[tuple[int, int, Any]], number: int) -> Any:
    for num, _, value in items:
        if num == number:
            return value
    return None


# InternedData field -> table name
_INTERNED = {1: "event_categories", 2: "event_names", 3: "debug_annotation_names", 5: "function_names", 6: "frames",
             7: "callstacks", 16: "build_ids", 17: "mapping_paths", 19: "mappings"}  # fmt: skip


class _Perfetto:
    def __init__(self, data: Any, result: CheckResult) -> None:
        self.data = data
        self.result = result
        self.state: dict[int, dict[str, set[int]]] = {}
        self.last_ts: dict[int, int] = {}
        self.tracks: set[int] = set()
        self.counter_tracks: set[int] = set()
        self.open: dict[int, list[int]] = {}
        self.flows_out: Tally[int] = Tally()
        self.flows_in: Tally[int] = Tally()
        self.etw_last: dict[int, int] = {}
        self.tally: Tally[str] = Tally()
        self.switches: Tally[int] = Tally()

    def run(self) -> None:
        data, end = self.data, len(self.data)
        pos = index = 0
        while pos < end:
            key, pos = _varint(data, pos, end)
            length, pos = _varint(data, pos, end)
            if key != 0x0A:
                raise _Malformed(f"top-level field {key >> 3} is not Trace.packet")
            if pos + length > end:
                raise _Malformed(f"packet {index} runs past the end of the file")
            self.packet(index, pos, pos + length)
            pos += length
            index += 1
        for track, stack in self.open.items():
            if stack:
                self.result.error(f"track {track}: {len(stack)} slices never ended")
        for flow in set(self.flows_out) | set(self.flows_in):
            leaving, arriving = self.flows_out[flow], self.flows_in[flow]
            if leaving != 1 or arriving != 1:
                self.result.error(f"flow {flow} leaves {leaving} times and arrives {arriving} times")
        self.tally["packets"] = index

    def packet(self, index: int, start: int, end: int) -> None:
        data, error = self.data, self.result.error
        items = _fields(data, start, end)
        seq = _first(items, 10) or 0
        flags = _first(items, 13) or 0
        ts = _first(items, 8)
        state = self.state.setdefault(seq, {})
        if flags & 1 or _first(items, 41):
            state.clear()
            state["_cleared"] = set()
        if ts is not None:
            last = self.last_ts.get(seq)
            if last is not None and ts < last:
                error(f"packet {index}: timestamp {ts} before {last} on sequence {seq}")
            self.last_ts[seq] = ts
        interned = _first(items, 12)
        if interned is not None:
            if "_cleared" not in state:
                error(f"packet {index}: interned data on sequence {seq} before its state was cleared")
            self.interned(index, state, interned)
        uses_state = flags & 2
        for number, _, value in items:
            if number == 60:
                self.descriptor(value)
            elif number == 11:
                self.track_event(index, state, value, ts)
                if not uses_state and interned is None and seq == 0:
                    pass
            elif number == 66:
                self.tally["perf_samples"] += 1
                sample = _fields(data, *value)
                stack = _first(sample, 4)
                if stack is not None and stack not in state.get("callstacks", ()):
                    error(f"packet {index}: callstack {stack} not interned on sequence {seq}")
            elif number == 95:
                self.etw(index, value)

    def interned(self, index: int, state: dict[str, set[int]], span: tuple[int, int]) -> None:
        data, error = self.data, self.result.error
        entries: list[tuple[str, list[tuple[int, int, Any]]]] = []
        for number, _, value in _fields(data, *span):
            table = _INTERNED.get(number)
            if table is None:
                continue
            entry = _fields(data, *value)
            iid = _first(entry, 1)
            if not iid:
                error(f"packet {index}: a {table} entry without an iid")
                continue
            state.setdefault(table, set()).add(iid)
            entries.append((table, entry))
        for table, entry in entries:
            refs: list[tuple[str, list[int]]] = []
            if table == "frames":
                refs = [("function_names", _repeated(data, entry, 2)), ("mappings", _repeated(data, entry, 3))]
            elif table == "callstacks":
                refs = [("frames", _repeated(data, entry, 2))]
            elif table == "mappings":
                refs = [("mapping_paths", _repeated(data, entry, 7)), ("build_ids", _repeated(data, entry, 2))]
            for target, ids in refs:
                for iid in ids:
                    if iid not in state.get(target, ()):
                        error(f"packet {index}: {table} entry {_first(entry, 1)} uses {target} {iid}, never interned")

    def descriptor(self, span: tuple[int, int]) -> None:
        items = _fields(self.data, *span)
        uuid = _first(items, 1)
        if uuid is None:
            self.result.error("a track descriptor without a uuid")
            return
        parent = _first(items, 5)
        if parent is not None and parent not in self.tracks:
            self.result.error(f"track {uuid}: parent {parent} not described before it")
        self.tracks.add(uuid)
        if _first(items, 8) is not None:
            self.counter_tracks.add(uuid)
        self.tally["tracks"] += 1

    def track_event(self, index: int, state: dict[str, set[int]], span: tuple[int, int], ts: int | None) -> None:
        data, error = self.data, self.result.error
        items = _fields(data, *span)
        self.tally["track_events"] += 1
        if ts is None:
            error(f"packet {index}: a track event without a timestamp")
        track = _first(items, 11)
        if track is None or track not in self.tracks:
            error(f"packet {index}: track {track} was not described")
        name = _first(items, 10)
        if name is not None and name not in state.get("event_names", ()):
            error(f"packet {index}: event name {name} not interned")
        for category in _repeated(data, items, 3):
            if category not in state.get("event_categories", ()):
                error(f"packet {index}: category {category} not interned")
        for number, _, value in items:
            if number == 4:
                arg = _first(_fields(data, *value), 1)
                if arg is not None and arg not in state.get("debug_annotation_names", ()):
                    error(f"packet {index}: argument name {arg} not interned")
        kind = _first(items, 9)
        stack = self.open.setdefault(track or 0, [])
        if kind == 1:
            stack.append(index)
            self.tally["slices"] += 1
        elif kind == 2:
            if not stack:
                error(f"packet {index}: a slice end on track {track} with no slice open")
            else:
                stack.pop()
        elif kind == 3:
            self.tally["instants"] += 1
        elif kind == 4:
            self.tally["counters"] += 1
            if track not in self.counter_tracks:
                error(f"packet {index}: a counter value on track {track}, not a counter track")
        for flow in _repeated(data, items, 47, fixed=True) + _repeated(data, items, 36):
            self.flows_out[flow] += 1
        for flow in _repeated(data, items, 48, fixed=True) + _repeated(data, items, 42):
            self.flows_in[flow] += 1

    def etw(self, index: int, span: tuple[int, int]) -> None:
        data = self.data
        bundle = _fields(data, *span)
        cpu = _first(bundle, 1) or 0
        for number, _, value in bundle:
            if number != 2:
                continue
            event = _fields(data, *value)
            when = _first(event, 1)
            if when is None:
                self.result.error(f"packet {index}: an ETW event without a timestamp")
                continue
            last = self.etw_last.get(cpu)
            if last is not None and when < last:
                self.result.error(f"packet {index}: ETW event at {when} before {last} on CPU {cpu}")
            self.etw_last[cpu] = when
            if _first(event, 2) is not None:
                self.switches[cpu] += 1
            elif _first(event, 3) is not None:
                self.tally["ready_threads"] += 1
            self.tally["etw_events"] += 1


def check_perfetto(path: str) -> CheckResult:
    """Checks a Perfetto trace file (see the module's rules)."""
    result = CheckResult(path, "perfetto")
    with open(path, "rb") as stream:
        if os.fstat(stream.fileno()).st_size == 0:
            result.error("the file is empty")
            return result
        with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data:
            walk = _Perfetto(data, result)
            try:
                walk.run()
            except _Malformed as problem:
                result.error(f"malformed protobuf: {problem}")
    result.counts = dict(walk.tally)
    result.counts["cswitch_per_cpu"] = {str(cpu): count for cpu, count in sorted(walk.switches.items())}
    return result


# -- Chrome JSON --------------------------------------------------------------------------------
def check_chrome(path: str) -> CheckResult:
    """Checks a Chrome Trace Event Format JSON file (see the module's rules)."""
    result = CheckResult(path, "chrome")
    error = result.error
    try:
        with open(path, encoding="utf-8") as stream:
            document = json.load(stream)
    except (ValueError, UnicodeDecodeError) as problem:
        error(f"not JSON: {problem}")
        return result
    frames: dict[str, Any]
    if isinstance(document, list):
        events, frames = document, {}
    elif isinstance(document, dict) and isinstance(document.get("traceEvents"), list):
        events, frames = document["traceEvents"], document.get("stackFrames") or {}
    else:
        error("neither a JSON array of events nor an object with traceEvents")
        return result
    tally: Tally[str] = Tally()
    open_b: dict[tuple[Any, Any], list[tuple[float, Any]]] = {}
    last_b: dict[tuple[Any, Any], float] = {}
    complete: dict[tuple[Any, Any], list[tuple[float, float, int]]] = {}
    async_open: Tally[tuple[Any, Any]] = Tally()
    flows_out: Tally[Any] = Tally()
    flows_in: Tally[Any] = Tally()
    for frame_id, frame in frames.items():
        parent = frame.get("parent") if isinstance(frame, dict) else None
        if parent is not None and str(parent) not in frames:
            error(f"stack frame {frame_id}: parent {parent} not defined")
    for number, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
            error(f"event {number}: not an object with a ph")
            continue
        ph = event["ph"]
        tally[ph] += 1
        when = event.get("ts")
        if ph == "M":
            continue
        if not isinstance(when, (int, float)):
            error(f"event {number} ({ph}): no numeric ts")
            continue
        ts = float(when)
        thread = (event.get("pid"), event.get("tid"))
        if ph == "B":
            open_b.setdefault(thread, []).append((ts, event.get("name")))
        elif ph == "E":
            stack = open_b.get(thread)
            if not stack:
                error(f"event {number}: E with no B open on thread {thread}")
            else:
                began, _ = stack.pop()
                if ts < began:
                    error(f"event {number}: E at {ts} before its B at {began}")
        elif ph == "X":
            dur = event.get("dur", 0)
            if not isinstance(dur, (int, float)) or dur < 0:
                error(f"event {number}: X with dur {dur!r}")
                continue
            complete.setdefault(thread, []).append((ts, dur, number))
        elif ph in ("b", "e"):
            key = (event.get("cat"), event.get("id"))
            if key[1] is None:
                error(f"event {number}: async {ph} without an id")
            elif ph == "b":
                async_open[key] += 1
            elif async_open[key] <= 0:
                error(f"event {number}: e with no b open for {key}")
            else:
                async_open[key] -= 1
        elif ph == "s":
            flows_out[event.get("id")] += 1
        elif ph == "f":
            flows_in[event.get("id")] += 1
        elif ph == "C":
            args = event.get("args")
            if not isinstance(args, dict) or not all(isinstance(value, (int, float)) for value in args.values()):
                error(f"event {number}: a counter whose args are not numbers")
        elif ph == "P":
            node = event.get("sf")
            if node is not None and str(node) not in frames:
                error(f"event {number}: sample frame {node} not in stackFrames")
        if ph in ("B", "E"):
            previous = last_b.get(thread)
            if previous is not None and ts < previous:
                error(f"event {number}: {ph} at {ts} before the thread's previous B/E at {previous}")
            last_b[thread] = ts
    for thread, stack in open_b.items():
        if stack:
            error(f"thread {thread}: {len(stack)} B events never ended")
    for thread, slices in complete.items():
        slices.sort(key=lambda item: (item[0], -item[1]))
        ends: list[float] = []
        for ts, dur, number in slices:
            while ends and ends[-1] <= ts:
                ends.pop()
            end = ts + dur
            if ends and end > ends[-1] + 1e-6:
                error(f"event {number}: X slice on thread {thread} overlaps its enclosing slice")
            ends.append(end)
    for key, count in async_open.items():
        if count:
            error(f"async slice {key}: {count} b events never ended")
    for flow in set(flows_out) | set(flows_in):
        if flows_out[flow] != 1 or flows_in[flow] != 1:
            error(f"flow {flow} starts {flows_out[flow]} times and finishes {flows_in[flow]} times")
    result.counts = {"events": len(events), "by_phase": dict(sorted(tally.items())), "stack_frames": len(frames)}
    return result
