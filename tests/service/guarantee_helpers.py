"""Real processes for the guarantee tests: producers that write at the same moment, a real-time
consumer in a process of its own, what a session's files hold buffer by buffer, and a forked
child that acts as another user.

Run as ``python -m tests.service.guarantee_helpers consume SESSION [DELAY]`` this module is the
consumer process: one JSON line when attached, one per buffer received, one at the end with
every (pid, index) it read.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.logfile import LogfileHeader
from openetw.etl.relog import is_logfile_header_record
from openetw.tdh import decode_all, schema_from_record

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT = 30.0  # only a hung child gets near this

Event = tuple[int, int]  # (producer pid, index)


# -- producers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Writes:
    """What producers reported: how many writes they made and how many returned True."""

    attempts: int
    returned_true: int

    @property
    def returned_false(self) -> int:
        return self.attempts - self.returned_true

    def __add__(self, other: Writes) -> Writes:
        return Writes(self.attempts + other.attempts, self.returned_true + other.returned_true)


def begin_all(producers: Iterable[Any], cmd: str, **fields: Any) -> None:
    """Send one command to every producer without waiting (``answers`` reads the answers)."""
    line = (json.dumps({"cmd": cmd, **fields}) + "\n").encode()
    for producer in producers:
        producer.process.stdin.write(line)


def answers(producers: Iterable[Any]) -> list[dict[str, Any]]:
    found = [producer._read() for producer in producers]
    for answer in found:
        if "error" in answer:
            raise AssertionError(f"a producer failed: {answer['error']}")
    return found


def send_all(producers: Iterable[Any], cmd: str, **fields: Any) -> list[dict[str, Any]]:
    """Send one command to every producer before reading any answer, so they run at once."""
    started = list(producers)
    begin_all(started, cmd, **fields)
    return answers(started)


def begin_writes(producers: Iterable[Any], name: str, count: int, *, start: int = 0, pad: int = 40) -> None:
    """Every producer starts writing ``count`` events (``index`` from ``start``); see ``writes_of``."""
    begin_all(producers, "write", name=name, count=count, start=start, pad=pad)


def writes_of(producers: Iterable[Any], count: int) -> Writes:
    found = answers(producers)
    return Writes(count * len(found), sum(int(answer["written"]) for answer in found))


def write_at_once(producers: Iterable[Any], name: str, count: int, *, start: int = 0, pad: int = 40) -> Writes:
    """Every producer writes ``count`` events at the same time; what they reported."""
    started = list(producers)
    begin_writes(started, name, count, start=start, pad=pad)
    return writes_of(started, count)


def register_all(producers: Iterable[Any], name: str) -> None:
    send_all(producers, "register", name=name)


def wait_enabled_all(producers: Iterable[Any], name: str, value: bool = True) -> None:
    for answer in send_all(producers, "wait_enabled", name=name, value=value, timeout=10.0):
        assert answer["enabled"] is value


def poll_until(check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.01, what: str = "a condition") -> Any:
    """``check()``'s first truthy value; AssertionError when the deadline passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


# -- what a file holds ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BufferSummary:
    """One data buffer of a file: its producer's SequenceNumber, the producer, its events."""

    sequence: int
    pid: int
    indices: tuple[int, ...]

    @property
    def records(self) -> int:
        return len(self.indices)


@dataclass
class FileContent:
    """A session file: its header, its events and its data buffers in file order."""

    header: LogfileHeader
    events: list[Event]
    buffers: list[BufferSummary]
    record_sizes: set[int] = field(default_factory=set)

    @property
    def data_buffers(self) -> int:
        return len(self.buffers)


def event_of(record: Any) -> Event:
    schema = schema_from_record(record)
    assert schema is not None, "not a TraceLogging event"
    fields = dict(decode_all(schema, record.user_data).items())
    return int(fields["pid"]), int(fields["index"])


def read_file(path: Path | str) -> FileContent:
    """Read strictly: no error, no unknown record."""
    with EtlReader(path) as reader:
        infos = {info.index: info for info, _ in reader.buffers()}
    per_buffer: dict[int, list[Event]] = {}
    with EtlReader(path) as reader:
        events = []
        sizes = set()
        for record in reader:
            if is_logfile_header_record(record):
                continue
            event = event_of(record)
            assert event[0] == record.pid
            per_buffer.setdefault(record.buffer_index, []).append(event)
            events.append(event)
            sizes.add(record.size)
        assert reader.stats.errors == [], reader.stats.errors
        assert reader.stats.unknown_records == 0
        header = reader.header
    buffers = []
    for index, info in sorted(infos.items()):
        if info.buffer_type == L.BUFFER_TYPE_HEADER:
            continue
        found = per_buffer.get(index, [])
        pids = {pid for pid, _ in found}
        assert len(pids) == 1, f"buffer {index} holds the events of {len(pids)} producers"
        buffers.append(BufferSummary(info.sequence_number, pids.pop(), tuple(i for _, i in found)))
    return FileContent(header, events, buffers, sizes)


def records_per_full_buffer(buffer_size: int, record_size: int) -> int:
    """How many records of one size a pool buffer holds (records are 8-byte aligned)."""
    return (buffer_size - L.BUFFER_HEADER_SIZE) // ((record_size + 7) & ~7)


def ring_accounting(content: FileContent, buffers_delivered: int, buffer_size: int) -> dict[str, int]:
    """What a circular file or a buffering snapshot lost to overwriting, buffer by buffer.

    The service counts buffers, not the events in the buffers it overwrote. They are known all
    the same: every event has the same size and no flush happened while producers wrote, so
    every buffer but each producer's last holds exactly ``per_buffer`` records, and the
    overwritten buffers, older than everything kept, are whole.
    """
    assert len(content.record_sizes) == 1, f"events of several sizes: {content.record_sizes}"
    per_buffer = records_per_full_buffer(buffer_size, next(iter(content.record_sizes)))
    last_of: dict[int, int] = {}
    for buffer in content.buffers:
        last_of[buffer.pid] = max(last_of.get(buffer.pid, 0), buffer.sequence)
    for buffer in content.buffers:
        if buffer.sequence != last_of[buffer.pid]:
            assert buffer.records == per_buffer, f"{buffer.sequence} of pid {buffer.pid}: {buffer.records} records, not {per_buffer}"
    # The newest buffers survive: each producer's kept buffers are the end of its sequence.
    for pid, last in last_of.items():
        kept = sorted(buffer.sequence for buffer in content.buffers if buffer.pid == pid)
        assert kept == list(range(last - len(kept) + 1, last + 1)), f"pid {pid} kept {kept}"
    overwritten = buffers_delivered - content.data_buffers
    return {"per_buffer": per_buffer, "overwritten_buffers": overwritten, "overwritten_events": overwritten * per_buffer}


# -- a real-time consumer in a process of its own ------------------------------------------------


class ConsumerProcess:
    """``python -m tests.service.guarantee_helpers consume SESSION DELAY``, read line by line."""

    def __init__(self, session: str, *, delay: float = 0.0, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.service.guarantee_helpers", "consume", session, str(delay)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO, env=env if env is not None else dict(os.environ),
        )  # fmt: skip
        self.pid = self.process.pid
        self.records = 0
        self.buffers = 0
        self.final: dict[str, Any] | None = None
        first = self._read()
        if "error" in first:
            self.kill()
            raise AssertionError(f"the consumer could not attach: {first['error']}")
        assert first == {"attached": True}, first

    def _read(self, timeout: float = ANSWER_TIMEOUT) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError("the consumer did not answer")
        line = self.process.stdout.readline()
        if not line:
            raise EOFError(f"the consumer exited with {self.process.wait(timeout=5)}")
        message = json.loads(line)
        self.records = message.get("records", self.records)
        self.buffers = message.get("buffers", self.buffers)
        if "end" in message:
            self.final = message
        return message

    def wait_records(self, at_least: int) -> None:
        while self.records < at_least:
            self._read()

    def result(self) -> list[Event]:
        """Every event it read, once the session ended."""
        while self.final is None:
            self._read()
        assert self.process.wait(timeout=10) == 0
        return [tuple(event) for event in self.final["events"]]  # type: ignore[misc]

    def sigkill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _consume(session: str, delay: float) -> int:
    from openetw.controller import RealtimeConsumer

    try:
        consumer = RealtimeConsumer(session)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps({"attached": True}), flush=True)
    events: list[Event] = []
    seen_buffers = 0
    for record in consumer.records():
        if consumer.buffers_received != seen_buffers:
            seen_buffers = consumer.buffers_received
            print(json.dumps({"buffers": seen_buffers, "records": len(events)}), flush=True)
            if delay:
                time.sleep(delay)
        events.append(event_of(record))
    print(json.dumps({"end": True, "buffers": consumer.buffers_received, "records": len(events), "events": events}), flush=True)
    return 0


# -- another user --------------------------------------------------------------------------------



def refusal(call: Callable[[], Any]) -> str:
    """The class name of what ``call()`` raised, or ``"allowed"``."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the name is the answer
        return type(exc).__name__
    return "allowed"


if __name__ == "__main__":
    if sys.argv[1:2] != ["consume"]:
        sys.exit("usage: python -m tests.service.guarantee_helpers consume SESSION [DELAY]")
    sys.exit(_consume(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0.0))
