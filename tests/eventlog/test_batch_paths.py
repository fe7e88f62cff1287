"""The Event Log's batch paths give what its per-event paths give: a drain's rows built from the
buffers' header columns (``records.collect_batch``) against the per-record walk (``collect_rows``),
stored rows included, and rendering many records at once (``EtwRenderer.records``) against
rendering each stored event by itself, the full-text indexes included; on generated bursts and on
the corpus's events."""

from __future__ import annotations

import os
import random
import sqlite3
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from openetw.etl.build import build_event_record
from openetw.etl.clock import TraceClock
from openetw.etl.layouts import CLOCK_QPC, HEADER_TYPE_EVENT_HEADER32, HEADER_TYPE_EVENT_HEADER64
from openetw.etl.reader import EtlReader
from openetw.eventlog import LogConfig, fieldtext
from openetw.eventlog.model import StoredEvent
from openetw.eventlog.records import Route, collect_batch, collect_rows
from openetw.eventlog.rendering import etw_renderer
from openetw.eventlog.rows import ColumnRows
from openetw.eventlog.store import LogStore, RecordSource
from openetw.ipc.pool import BufferPool
from tests.conftest import corpus_path

CLOCK = TraceClock(CLOCK_QPC, 133_000_000_000_000_000, 5_000, 10_000_000)
PROVIDERS = [uuid.UUID(int=0x6C1F0D2E5B7A4E439D1C2F8E4A7B9C00 + n) for n in range(3)]
CORPUS_FILES = [("krabsetw", "powershell.etl"), ("tx", "HTTP_Server.etl"), ("tx", "Process.etl"), ("etl-parser", "AMSITrace.etl")]
CORPUS_EVENTS = 1000  # per file


def pool_buffers(records: list[tuple[bytes, int]], buffer_size: int = 64 * 1024) -> list[bytes]:
    """``records`` (whole record, timestamp) written through a producer's pool, as its buffers."""
    pool = BufferPool.create(buffer_size, 16, logger_id=1, producer_pid=os.getpid(), flush_interval_ms=0)
    out: list[bytes] = []
    try:
        writer = pool.writer()
        for raw, timestamp in records:
            while not writer.write(raw, timestamp):
                for index in pool.full_buffers():
                    out.append(pool.take(index))
                    pool.release(index)
        writer.flush()
        for index in pool.full_buffers():
            out.append(pool.take(index))
    finally:
        pool.close()
    return out


def generated(count: int, seed: int) -> list[tuple[bytes, int]]:
    """A burst of many shapes: three providers, channels 16-19, every level, keywords with and
    without the channel bits, activity ids on some, payloads of 0 to 300 bytes."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        record = build_event_record(
            provider_id=rng.choice(PROVIDERS), id=rng.randrange(1, 6), version=rng.randrange(2), channel=rng.randrange(16, 20),
            level=rng.randrange(6), opcode=rng.randrange(3), task=rng.randrange(70000) & 0xFFFF,
            keyword=rng.choice([1 << 63, 1 << 62, 0, (1 << 63) | rng.getrandbits(40), rng.getrandbits(64)]), pid=rng.randrange(1 << 32),
            tid=rng.randrange(1 << 32), timestamp=rng.randrange(1 << 40) if n % 97 else 0,
            activity_id=uuid.UUID(int=rng.getrandbits(128) if n % 3 == 0 else 0), user_data=rng.randbytes(rng.randrange(300)),
        )  # fmt: skip
        out.append((record.raw, record.timestamp))
    return out


def corpus_records() -> list[tuple[bytes, int]]:
    out = []
    for folder, name in CORPUS_FILES:
        kept = 0
        with EtlReader(corpus_path("etl", folder, name), strict=False) as reader:
            for record in reader.records():
                if record.kind == "event" and record.raw[2] in (HEADER_TYPE_EVENT_HEADER32, HEADER_TYPE_EVENT_HEADER64):
                    out.append((record.raw, record.timestamp))
                    kept += 1
                    if kept == CORPUS_EVENTS:
                        break
    return out


def routes_for(records: list[tuple[bytes, int]], seed: int) -> dict[tuple[bytes, int], Route | None]:
    """Every (provider, channel) of ``records`` routed: to one of three logs, filtered by level or
    keywords, refused, or to no log."""
    rng = random.Random(seed)
    routes: dict[tuple[bytes, int], Route | None] = {}
    for raw, _ in records:
        key = (raw[24:40], raw[42 + 1])
        if key not in routes:
            name = str(uuid.UUID(bytes_le=key[0]))
            choice = rng.randrange(6)
            routes[key] = None if choice == 0 else Route(
                f"Log{rng.randrange(3)}", f"Provider-{name[:8]}", name, rng.choice([None, 2, 4]) if choice == 1 else None,
                rng.choice([1 << 63, (1 << 63) | 0xFF]) if choice == 2 else None, choice != 3,
            )  # fmt: skip
    return routes


def plain(runs: dict[str, list[Any]]) -> dict[str, list[tuple[Route, list[tuple[Any, ...]]]]]:
    return {log: [(route, list(rows)) for route, rows in log_runs] for log, log_runs in runs.items() if log_runs}


def stored_rows(directory: Path, runs: dict[str, list[Any]], refused: dict[str, int]) -> dict[str, list[tuple[Any, ...]]]:
    store = LogStore(directory)
    out = {}
    for log in sorted(set(runs) | set(refused)):
        store.create(log, LogConfig(max_size=256 << 20))
        sources = [(RecordSource(route.provider_name, route.provider_guid, log, "host", 0), rows) for route, rows in runs.get(log, [])]
        store.append_records(log, sources, refused=refused.get(log, 0))
        db = sqlite3.connect(store.path(log))
        out[log] = db.execute("SELECT * FROM events ORDER BY record_id").fetchall()
        out[log].append(db.execute("SELECT value FROM meta WHERE key IN ('written', 'refused') ORDER BY key").fetchall())
        db.close()
    return out


def check_collect(records: list[tuple[bytes, int]], seed: int, tmp_path: Path) -> None:
    buffers = pool_buffers(records)
    routes = routes_for(records, seed)
    per_event: dict[str, list[Any]] = defaultdict(list)
    per_event_refused: dict[str, int] = defaultdict(int)
    for buffer in buffers:
        collect_rows(buffer, routes, per_event, per_event_refused, CLOCK)
    batched: dict[str, list[Any]] = defaultdict(list)
    batched_refused: dict[str, int] = defaultdict(int)
    for start in range(0, len(buffers), 3):  # drains of a few buffers each
        collect_batch(buffers[start : start + 3], routes, batched, batched_refused, CLOCK)
    assert all(isinstance(rows, ColumnRows) for log_runs in batched.values() for _, rows in log_runs)
    assert plain(batched) == plain(per_event)
    assert dict(batched_refused) == dict(per_event_refused)
    assert sum(len(rows) for log_runs in per_event.values() for _, rows in log_runs) > len(records) // 4
    assert stored_rows(tmp_path / "batch", batched, batched_refused) == stored_rows(tmp_path / "each", per_event, per_event_refused)


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_bursts_give_the_same_rows(seed: int, tmp_path: Path) -> None:
    check_collect(generated(2000, seed), seed, tmp_path)


def test_corpus_events_give_the_same_rows(tmp_path: Path) -> None:
    check_collect(corpus_records(), 7, tmp_path)


def test_one_route_takes_the_single_key_path(tmp_path: Path) -> None:
    """A drain of one provider's one channel (the usual one), filtered by level."""
    records = [
        (build_event_record(provider_id=PROVIDERS[0], id=1, channel=16, level=n % 6, keyword=1 << 63, timestamp=n, user_data=bytes(n % 9)).raw, n)
        for n in range(2000)
    ]  # fmt: skip
    buffers = pool_buffers(records, buffer_size=8 * 1024)
    routes = {(PROVIDERS[0].bytes_le, 16): Route("Only", "P", str(PROVIDERS[0]), 3, None, True)}
    per_event: dict[str, list[Any]] = defaultdict(list)
    batched: dict[str, list[Any]] = defaultdict(list)
    refused: dict[str, int] = defaultdict(int)
    for buffer in buffers:
        collect_rows(buffer, routes, per_event, refused, CLOCK)
    collect_batch(buffers, routes, batched, refused, CLOCK)
    assert plain(batched) == plain(per_event) and len(batched["Only"]) == 1
    assert len(batched["Only"][0][1]) == len([n for n in range(2000) if n % 6 <= 3])
    # one run of 1,334 rows: stored by 256-row inserts laid out column by column, and the rest
    assert stored_rows(tmp_path / "batch", batched, {}) == stored_rows(tmp_path / "each", per_event, {})


# -- rendering ---------------------------------------------------------------------------------------
def rendered_log(directory: Path, records: list[bytes], renderer: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """``records`` stored unrendered, then rendered by ``renderer``: the events' rows and both
    full-text indexes' data."""
    store = LogStore(directory)
    store.create("L", LogConfig(max_size=256 << 20))
    runs = [(RecordSource("P", None, "L", "host", 0), [(n, 1, 0, 4, 0, 0, 0, 1, 1, None, raw) for n, raw in enumerate(records)])]
    store.append_records("L", runs)  # type: ignore[arg-type]
    while store.render_pending("L", renderer, 500) == 500:
        pass
    assert store.pending("L") == 0
    db = sqlite3.connect(store.path("L"))
    try:
        events = db.execute("SELECT * FROM events ORDER BY record_id").fetchall()
        messages = db.execute("SELECT rowid FROM messages WHERE messages MATCH 'a* OR e* OR s* OR 1* OR 0*' ORDER BY rowid").fetchall()
        fields = db.execute("SELECT * FROM field_text_data ORDER BY id").fetchall()
        return events, messages, fields
    finally:
        db.close()


def field_tokens(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.tokens USING fts5vocab(main, field_text, instance)")
    try:
        return db.execute("SELECT term, doc, col, offset FROM temp.tokens ORDER BY doc, offset").fetchall()
    finally:
        db.execute("DROP TABLE temp.tokens")


def check_render(records: list[bytes], registry: Any, tmp_path: Path) -> None:
    batch = etw_renderer(registry)
    assert hasattr(batch, "records")

    def each(event: StoredEvent) -> Any:  # the same renderer without its batch form
        return batch(event)

    by_batch = rendered_log(tmp_path / "batch", records, batch)
    by_event = rendered_log(tmp_path / "each", records, each)
    assert by_batch == by_event
    # the field values' text given to the index is what SQLite makes of the stored fields
    db = sqlite3.connect(tmp_path / "batch" / "L.db")
    try:
        given = field_tokens(db)
        db.execute("DROP TABLE field_text")
        assert fieldtext.ensure(db)  # made and filled by SQLite from the stored column
        assert field_tokens(db) == given and len(given) > len(records)
    finally:
        db.close()
    assert sum(1 for row in by_batch[0] if row[-4] is not None) > len(records) // 2  # most have fields


def test_rendering_corpus_events_in_batches_gives_each_ones_rendering(tmp_path: Path) -> None:
    from openetw.tdh.from_files import build_registry

    registry = build_registry([corpus_path("manifests", "Win10-17134")])
    check_render([raw for raw, _ in corpus_records()], registry, tmp_path)


def test_rendering_generated_events_in_batches_gives_each_ones_rendering(tmp_path: Path) -> None:
    """A manifest of five events (messages with inserts, with and without a ``!spec!``, one
    longer than a message is kept, a map, a hexadecimal out-type, one without a template), and
    records none of it knows, short payloads, extended items."""
    from openetw.manifest.parser import parse_manifest
    from openetw.tdh.from_files import build_registry

    provider = PROVIDERS[0]
    manifest = f"""<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"><instrumentation><events>
 <provider name="Batch-Test" guid="{{{provider}}}" symbol="B" resourceFileName="b" messageFileName="b">
  <maps><valueMap name="Colour"><map value="1" message="$(string.red)"/><map value="2" message="$(string.green)"/></valueMap></maps>
  <templates><template tid="T"><data name="Count" inType="win:UInt32"/><data name="Name" inType="win:UnicodeString"/>
   <data name="Colour" inType="win:UInt8" map="Colour"/><data name="Flags" inType="win:UInt32" outType="win:HexInt32"/></template></templates>
  <events><event value="1" level="win:Informational" template="T" message="$(string.counted)"/>
   <event value="2" level="win:Error" template="T"/><event value="3" level="win:Warning" message="$(string.plain)"/>
   <event value="4" level="win:Informational" template="T" message="$(string.inserts)"/>
   <event value="5" level="win:Informational" template="T" message="$(string.long)"/></events>
 </provider></events></instrumentation>
 <localization><resources culture="en-US"><stringTable><string id="counted" value="Counted %1 for %2 (%3, %4!x!) %1"/>
  <string id="plain" value="Nothing to insert"/><string id="inserts" value="%2 counted %1, %3 and %4; %2 again, %9 missing, %%5 kept"/>
  <string id="long" value="{'%2 ' * 4000}"/><string id="red" value="Red"/><string id="green" value="Green"/></stringTable></resources></localization>
</instrumentationManifest>"""
    registry = build_registry(manifests=[parse_manifest(manifest).manifest])
    rng = random.Random(5)
    records = []
    for n in range(1500):
        payload = n.to_bytes(4, "little") + f"name {n}".encode("utf-16-le") + b"\0\0" + bytes([n % 4]) + rng.getrandbits(32).to_bytes(4, "little")
        if n % 50 == 0:
            payload = payload[: rng.randrange(len(payload))]  # cut short
        event_id = 1 + n % 6  # event 6: no schema
        records.append(build_event_record(provider_id=provider if n % 7 else PROVIDERS[1], id=event_id, channel=16, level=4, timestamp=n,
                                          user_data=payload).raw)  # fmt: skip
    check_render(records, registry, tmp_path)
