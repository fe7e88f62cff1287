"""The timeline in Chrome's Trace Event Format (JSON), written as it comes.

``{"traceEvents": [...], "displayTimeUnit": "ns", "stackFrames": {...}, "otherData": {...}}``;
``ts``/``dur`` in microseconds from the first item (``otherData.start_unix_ns`` is that
instant). Process and thread names are ``M`` events; slices on their thread are ``X`` (complete)
events, async slices ``b``/``e`` pairs (``cat`` and ``id``); instants ``i`` (thread scope);
counters ``C``; a span's parent is linked by an ``s``/``f`` flow (``id`` the child's span id);
each CPU is a thread of the "CPUs" process whose ``X`` slices are the threads it ran (from
CSwitch), wake-ups (ReadyThread) are instants on the woken thread; callstack samples are ``P``
events whose ``sf`` names a node of ``stackFrames``.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Iterable
from typing import IO, Any

from openetw._native import module as native_module
from openetw.export.timeline.model import (
    Counter,
    Frame,
    Instant,
    Item,
    Process,
    Sample,
    SliceBegin,
    SliceEnd,
    Switch,
    Thread,
    Wakeup,
)

__all__ = ["CPU_PID", "ChromeWriter", "write_chrome"]

CPU_PID = 0x7FFFFFFF
"""The pid of the "CPUs" process (one thread per processor)."""
_MAX_FRAMES = 1 << 20
_MAX_TEXT = 4096
_MAX_ITEMS = 256  # of a list
_NATIVE = native_module("_timeline")


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is int:
        return value if -(1 << 53) <= value <= 1 << 53 else str(value)
    if kind is str:
        return value[:_MAX_TEXT]
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else value[:_MAX_TEXT]
    if isinstance(value, int):
        return value if -(1 << 53) <= value <= 1 << 53 else str(value)
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value[: _MAX_TEXT // 2]).hex()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value[:_MAX_ITEMS]]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return str(value)[:_MAX_TEXT]


def _args(args: dict[str, Any]) -> dict[str, Any]:
    return {key: _plain(value) for key, value in args.items()}


def _json_encoder() -> Callable[[Any], str]:
    """Compact JSON text of an event (what ``json.JSONEncoder.encode`` gives), with the C encoder
    made once rather than once per event."""
    plain = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    try:
        encode = make({}, plain.default, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    except TypeError:  # another signature: the encoder's own way
        return plain.encode
    join = "".join

    def dumps(value: Any) -> str:
        return join(encode(value, 0))

    return dumps


class ChromeWriter:
    """Writes timeline items to a text stream as Chrome trace events."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._chunks: list[str] = []
        self._origin: int | None = None
        self._first = True
        self._dumps = _json_encoder()
        self._running: dict[int, tuple[int, int, int]] = {}
        self._names: dict[int, str] = {}
        self._cpus: set[int] = set()
        self._frames: dict[tuple[int | None, str], int] = {}
        self._frame_list: list[str] = []
        self._last = 0
        self._texts: dict[str, str] = {}  # names and categories as JSON strings
        self.events = 0
        self._out.write('{"traceEvents":[\n')

    def _us(self, ts: int) -> float:
        if self._origin is None:
            self._origin = ts
        if ts > self._last:
            self._last = ts
        return (ts - self._origin) / 1000

    def _event(self, event: dict[str, Any]) -> None:
        text = self._dumps(event)
        self._chunks.append(text if self._first else ",\n" + text)
        self._first = False
        self.events += 1
        if len(self._chunks) >= 4096:
            self._out.write("".join(self._chunks))
            self._chunks.clear()

    def _text(self, text: str) -> str:
        found = self._texts.get(text)
        if found is None:
            if len(self._texts) >= 1 << 14:
                self._texts.clear()
            found = self._texts[text] = self._dumps(text)
        return found

    def _event_text(self, text: str) -> None:
        """``_event`` of an event already in JSON (what ``self._dumps`` makes of its dict)."""
        self._chunks.append(text if self._first else ",\n" + text)
        self._first = False
        self.events += 1
        if len(self._chunks) >= 4096:
            self._out.write("".join(self._chunks))
            self._chunks.clear()

    def origin(self, ts: int) -> int:
        """The time ``ts`` fields count from: the first item's (``ts`` when none came yet)."""
        if self._origin is None:
            self._origin = ts
        return self._origin

    def write_joined(self, data: bytes, count: int, latest: int) -> None:
        """``count`` events already in JSON (UTF-8), joined by ``",\n"`` (the latest at ``latest``
        ns): what ``write`` makes of the items one by one. A text stream over a binary one is
        given the bytes as they are."""
        if not count:
            return
        separator = b"" if self._first else b",\n"
        self._first = False
        self.events += count
        if latest > self._last:
            self._last = latest
        binary = getattr(self._out, "buffer", None)
        if binary is None:
            self._chunks.append((separator + data).decode("utf-8"))
            if len(self._chunks) >= 4096:
                self._out.write("".join(self._chunks))
                self._chunks.clear()
            return
        self._out.write("".join(self._chunks))
        self._chunks.clear()
        self._out.flush()
        binary.write(separator)
        binary.write(data)

    def args_text(self, args: dict[str, Any]) -> str:
        """The JSON text of ``_args(args)``: by the compiled core when it takes them all."""
        if _NATIVE is not None:
            text: str | None = _NATIVE.chrome_args(args)
            if text is not None:
                return text
        return self._dumps(_args(args))

    def _frame_node(self, frames: tuple[Frame, ...]) -> int | None:
        """The ``stackFrames`` node of the innermost frame (nodes made as needed, the outermost
        first): a node is a frame's name under its caller's node, its category the module."""
        parent: int | None = None
        for frame in reversed(frames):
            name, module = frame.name, frame.module
            key = (parent, name)
            node = self._frames.get(key)
            if node is None:
                if len(self._frames) >= _MAX_FRAMES:
                    return None
                node = self._frames[key] = len(self._frames) + 1
                entry: dict[str, Any] = {"name": name, "category": module if module != "?" else "unknown"}
                if parent is not None:
                    entry["parent"] = str(parent)
                self._frame_list.append(f'"{node}":{self._dumps(entry)}')
            parent = node
        return parent

    def write(self, item: Item) -> None:
        kind = type(item)
        if kind is Instant:
            assert isinstance(item, Instant)
            text = self._texts
            name, category = text.get(item.name) or self._text(item.name), text.get(item.category) or self._text(item.category)
            self._event_text(
                f'{{"ph":"i","s":"t","name":{name},"cat":{category},"ts":{self._us(item.ts)!r},"pid":{item.pid:d},'
                f'"tid":{item.tid:d},"args":{self.args_text(item.args)}}}'
            )  # fmt: skip
        elif kind is SliceBegin:
            assert isinstance(item, SliceBegin)
            span = item.span
            ts = self._us(span.ts)
            if span.parent is not None:
                parent = span.parent
                flow: dict[str, Any] = {"ph": "s", "name": span.name, "cat": "flow", "id": span.id, "ts": ts, "pid": parent.pid, "tid": parent.tid}
                self._event(flow)
                self._event({"ph": "f", "bp": "e", "name": span.name, "cat": "flow", "id": span.id, "ts": ts,
                             "pid": span.pid, "tid": span.tid})  # fmt: skip
            args = _args(span.args)
            if span.end_args and span.thread:
                args["stop"] = _args(span.end_args)
            if span.thread:
                self._event({"ph": "X", "name": span.name, "cat": span.category, "ts": ts, "dur": (span.end - span.ts) / 1000,
                             "pid": span.pid, "tid": span.tid, "args": args})  # fmt: skip
            else:
                self._event({"ph": "b", "name": span.name, "cat": span.category, "id": span.id, "ts": ts, "pid": span.pid,
                             "tid": span.tid, "args": args})  # fmt: skip
        elif kind is SliceEnd:
            assert isinstance(item, SliceEnd)
            span = item.span
            if not span.thread:
                self._event({"ph": "e", "name": span.name, "cat": span.category, "id": span.id, "ts": self._us(span.end),
                             "pid": span.pid, "tid": span.end_tid, "args": _args(span.end_args)})  # fmt: skip
        elif kind is Counter:
            assert isinstance(item, Counter)
            self._event({"ph": "C", "name": item.name, "ts": self._us(item.ts), "pid": item.pid, "args": {"value": item.value}})
        elif kind is Switch:
            assert isinstance(item, Switch)
            ts = self._us(item.ts)
            if item.cpu not in self._cpus:
                self._cpus.add(item.cpu)
                if len(self._cpus) == 1:
                    self._event({"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "CPUs"}})
                self._event({"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": item.cpu, "args": {"name": f"CPU {item.cpu}"}})
            previous = self._running.get(item.cpu)
            if previous is not None and previous[1] != 0:
                started, tid, pid = previous
                self._event({"ph": "X", "name": f"{self._names.get(pid, pid)} {tid}", "cat": "sched", "ts": self._us(started),
                             "dur": ts - self._us(started), "pid": CPU_PID, "tid": item.cpu, "args": {"pid": pid, "tid": tid}})  # fmt: skip
            self._running[item.cpu] = (item.ts, item.new_tid, item.new_pid)
        elif kind is Wakeup:
            assert isinstance(item, Wakeup)
            self._event({"ph": "i", "s": "t", "name": "ReadyThread", "cat": "sched", "ts": self._us(item.ts), "pid": item.pid,
                         "tid": item.tid, "args": {"cpu": item.cpu, "waker_tid": item.waker_tid, "adjust_reason": item.adjust_reason,
                                                   "adjust_increment": item.adjust_increment}})  # fmt: skip
        elif kind is Sample:
            assert isinstance(item, Sample)
            ts = self._us(item.ts)
            node = self._frame_node(item.frames)
            self._event_text(
                f'{{"ph":"P","name":"sample","cat":"cpu","ts":{ts!r},"pid":{item.pid:d},"tid":{item.tid:d},'
                f'"args":{{"cpu":{item.cpu:d}}}' + ("}" if node is None else f',"sf":{node:d}}}')
            )  # fmt: skip
        elif kind is Process:
            assert isinstance(item, Process)
            self._names[item.pid] = item.name
            self._event({"ph": "M", "name": "process_name", "pid": item.pid, "tid": 0, "args": {"name": item.name}})
        elif kind is Thread:
            assert isinstance(item, Thread)
            self._event({"ph": "M", "name": "thread_name", "pid": item.pid, "tid": item.tid, "args": {"name": item.name}})

    def close(self) -> None:
        for cpu, (started, tid, pid) in sorted(self._running.items()):
            if tid != 0 and self._origin is not None:
                self._event({"ph": "X", "name": f"{self._names.get(pid, pid)} {tid}", "cat": "sched", "ts": self._us(started),
                             "dur": (self._last - started) / 1000, "pid": CPU_PID, "tid": cpu, "args": {"pid": pid, "tid": tid}})  # fmt: skip
        self._out.write("".join(self._chunks))
        self._chunks.clear()
        other = {"source": "openetw", "start_unix_ns": self._origin}
        self._out.write('\n],"displayTimeUnit":"ns","stackFrames":{')
        for start in range(0, len(self._frame_list), 4096):
            self._out.write(("," if start else "") + ",".join(self._frame_list[start : start + 4096]))
        self._out.write('},"otherData":' + self._dumps(other) + "}\n")


def write_chrome(items: Iterable[Item], out: IO[str]) -> ChromeWriter:
    """Writes ``items`` to ``out``; returns the writer (its ``events``)."""
    writer = ChromeWriter(out)
    write = writer.write
    for item in items:
        write(item)
    writer.close()
    return writer
