"""The compiled row walk (``_native/_nettrace.c walk``) gives what the pure walk gives, and the
records the trace source makes from its columns are the per-event path's.

Every corpus trace (rows of versions 2-5, compressed and uncompressed headers; the large ones cut
to their first 4 MiB), generated compressed rows, and mutated copies of the small traces are read
by ``NettraceReader`` twice, the compiled walk on and off: the same headers, payloads, stacks
and losses (message, offset, block) in the same order.
"""

from __future__ import annotations

import random
import struct
from dataclasses import astuple
from pathlib import Path
from typing import Any

import pytest

from openetw._native import module
from openetw.errors import NettraceFormatError
from openetw.nettrace import events
from openetw.nettrace.cursor import Cursor
from openetw.nettrace.reader import NettraceReader
from openetw.testing.fuzz_nettrace import mutate
from tests.conftest import corpus_path
from tests.nettrace.v6_file import varuint

NATIVE = module("_nettrace")
pytestmark = pytest.mark.skipif(NATIVE is None, reason="the compiled core is not built (or OPENETW_PURE=1)")

CUT = 4 << 20
GENERATED = 60  # cases per mode (the sanitizer run takes fewer)


def _read(data: bytes, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any]]:
    monkeypatch.setattr(events, "_NATIVE", NATIVE if compiled else None)
    try:
        reader = NettraceReader(data)
    except NettraceFormatError as exc:  # the Trace object itself: both engines share that code
        return [], [type(exc).__name__, str(exc)]
    rows = [(astuple(event.header), event.payload, event.raw_stack, event.block) for event in reader.events()]
    losses = [(str(loss), loss.offset, loss.block, loss.structure) for loss in reader.losses]
    return rows, losses + [astuple(reader.stats)]


def _names() -> list[str]:
    return sorted(path.name[: -len(".zip")] for path in Path(corpus_path("nettrace", "SOURCES.md")).parent.glob("*.zip"))


@pytest.mark.parametrize("name", _names())
def test_compiled_walk_equals_pure_on_the_corpus(name: str, trace_file: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = trace_file(name).read_bytes()[:CUT]
    compiled = _read(data, True, monkeypatch)
    assert compiled[0], name
    assert compiled == _read(data, False, monkeypatch), name


SMALL = ["eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf", "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace", "only_managed_samples.nettrace"]
LEGACY = [
    "eventpipe-dotnetcore2.1-linux-x64-objver3.netperf",
    "eventpipe-dotnetcore2.1-linux-x64-tracelogging.netperf",
    "eventpipe-dotnetcore2.0-linux-objver2.netperf",
]


@pytest.mark.parametrize("name", SMALL)
def test_compiled_walk_equals_pure_on_damage(name: str, trace_file: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    data = trace_file(name).read_bytes()[: 48 << 10]
    rng = random.Random(name)
    for _ in range(12):
        damaged = mutate(data, rng)
        assert _read(damaged, True, monkeypatch) == _read(damaged, False, monkeypatch)


def _compressed_rows(rng: random.Random, count: int) -> bytes:
    out = bytearray()
    for _ in range(count):
        flags = rng.getrandbits(8)
        out.append(flags)
        if flags & events.FLAG_METADATA_ID:
            out += varuint(rng.choice([0, 1, 127, 128, 1 << 31]))
        if flags & events.FLAG_CAPTURE_THREAD_AND_SEQUENCE:
            out += varuint(rng.choice([0, 5, 1 << 32 - 1])) + varuint(rng.getrandbits(64)) + varuint(rng.getrandbits(rng.choice([3, 32])))
        if flags & events.FLAG_THREAD_ID:
            out += varuint(rng.getrandbits(rng.choice([7, 64])))
        if flags & events.FLAG_STACK_ID:
            out += varuint(rng.getrandbits(rng.choice([7, 32])))
        out += varuint(rng.getrandbits(rng.choice([6, 40, 64])))
        if flags & events.FLAG_ACTIVITY_ID:
            out += rng.randbytes(16)
        if flags & events.FLAG_RELATED_ACTIVITY_ID:
            out += rng.randbytes(16)
        size = rng.choice([0, 3, 200])
        if flags & events.FLAG_DATA_LENGTH:
            out += varuint(size)
            out += rng.randbytes(size)
    return bytes(out)


def _fixed_rows(rng: random.Random, mode: int, count: int) -> bytes:
    out = bytearray()
    for _ in range(count):
        payload = rng.randbytes(rng.choice([0, 5, 64]))
        extra = rng.randbytes(rng.choice([0, 3, 8, 12]))  # versions 1-3: a stack (size, bytes) or padding
        if mode == events.WALK_V3:
            if len(extra) >= 4 and rng.random() < 0.7:
                extra = struct.pack("<i", rng.choice([len(extra) - 4, 2, 100, -1])) + extra[4:]
            size = events._V3.size - 4 + len(payload) + len(extra)
            ids = (rng.getrandbits(31), rng.getrandbits(32) - (1 << 31), rng.getrandbits(63))
            out += events._V3.pack(size, *ids, rng.randbytes(16), rng.randbytes(16), len(payload)) + payload + extra
        else:
            size = events._V4.size - 4 + len(payload)
            head = events._V4.pack(
                size, rng.getrandbits(32), rng.getrandbits(31), rng.getrandbits(63), rng.getrandbits(63) - (1 << 62),
                rng.getrandbits(31) - (1 << 30), rng.getrandbits(31), rng.getrandbits(63), rng.randbytes(16), rng.randbytes(16), len(payload),
            )
            out += head + payload + bytes(-len(out + head + payload) % 4)
        if rng.random() < 0.05:
            out += rng.randbytes(3)  # damage: the next row is misaligned
    return bytes(out)


@pytest.mark.parametrize("mode", [events.WALK_V4_COMPRESSED, events.WALK_V4, events.WALK_V3])
def test_compiled_walk_equals_pure_on_generated_rows(mode: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(mode)
    block = struct.pack("<hh", 4, 1 if mode == events.WALK_V4_COMPRESSED else 0)
    for case in range(GENERATED):
        if mode == events.WALK_V4_COMPRESSED:
            body = _compressed_rows(rng, 40)
        else:
            body = _fixed_rows(rng, mode, 20)
        content = block + body
        if case % 3 == 0:
            content = content[: rng.randrange(len(content) + 1)]
        outcomes = []
        for compiled in (True, False):
            monkeypatch.setattr(events, "_NATIVE", NATIVE if compiled else None)
            rows: list[Any] = []
            cur = Cursor(content, base=case * 3)
            try:
                rows.extend(astuple(h) for h in (events.rows_v3(cur) if mode == events.WALK_V3 else events.iter_headers(cur, 4)))
                rows.append(("end", cur.pos))
            except NettraceFormatError as exc:
                rows.append((str(exc), exc.offset))
            outcomes.append(rows)
        assert outcomes[0] == outcomes[1], case


def _records(path: Path, columns: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    from openetw.consumer.nettrace_source import NettraceFileSource

    monkeypatch.setattr(NettraceReader, "has_row_columns", property(lambda self: columns and self.info.version < 4))
    source = NettraceFileSource(path)
    source.open()
    try:
        made = [(bytes(r._raw[r._pos : r._pos + r._size]), r._h, r.cpu) for r in source.records()]
        return made, [(str(e), e.offset, e.block) for e in source.errors()], source.statistics()
    finally:
        source.close()


@pytest.mark.parametrize("name", LEGACY)
def test_records_from_columns_are_the_per_event_records(name: str, trace_file: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = trace_file(name).read_bytes()[: 3 << 20]
    rng = random.Random(name)
    for index, variant in enumerate([data, *(mutate(data[: 64 << 10], rng) for _ in range(6))]):
        path = tmp_path / f"{index}.netperf"
        path.write_bytes(variant)
        try:
            from_columns = _records(path, True, monkeypatch)
        except NettraceFormatError:  # the Trace object itself (shared code)
            with pytest.raises(NettraceFormatError):
                _records(path, False, monkeypatch)
            continue
        assert from_columns == _records(path, False, monkeypatch), (name, index)
        if index == 0:
            assert len(from_columns[0]) >= 10


def test_the_compiled_constants_are_the_pythons() -> None:
    assert NATIVE is not None
    expected = {name: getattr(events, name) for name in NATIVE.constants() if hasattr(events, name)}
    expected.update(V3_ROW=events._V3.size, V4_ROW=events._V4.size, ACTIVITY=len(events.NULL_ACTIVITY))
    assert NATIVE.constants() == expected
