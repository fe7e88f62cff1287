"""Made traces for the timeline column tests: the shapes a column walk must hand over to the
record-by-record pass or write itself (slices open over runs, counters, threads named mid-run,
records without a thread in their header, text to escape, integers past 2**53, NaN and infinities,
FILETIMEs, GUIDs, events of no schema)."""

from __future__ import annotations

import math
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from openetw.etl.intypes import InType
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import PropertyInfo, Schema
from openetw.testing import EventRecordBuilder

PROVIDER = uuid.UUID("6f0a3c7e-2b1d-4e55-9a10-3c1f2d4e5a6b")
ORPHAN = 0xFFFFFFFF


def shapes_registry(schemas: dict[str, Schema]) -> SchemaRegistry:
    made = SchemaRegistry()
    for schema in schemas.values():
        made.add_schema(schema)
    return made


def shape_schemas() -> dict[str, Schema]:
    def schema(event_id: int, name: str, *properties: PropertyInfo, opcode: int = 0, task: int = 0) -> Schema:
        return Schema(PROVIDER, event_id=event_id, opcode=opcode, task=task, provider_name="Contoso-Shapes", event_name=name,
                      properties=properties)  # fmt: skip

    return {
        "plain": schema(
            1,
            "Work/Step",
            PropertyInfo("Count", InType.UINT32),
            PropertyInfo("Big", InType.UINT64),
            PropertyInfo("Signed", InType.INT64),
            PropertyInfo("Ratio", InType.DOUBLE),
            PropertyInfo("Small", InType.FLOAT),
            PropertyInfo("Flag", InType.BOOLEAN),
            PropertyInfo("Text", InType.UNICODESTRING),
            PropertyInfo("Id", InType.GUID),
        ),
        "thread": schema(
            2, "Work/Handoff", PropertyInfo("ThreadId", InType.UINT32), PropertyInfo("Note", InType.UNICODESTRING)
        ),
        "timed": schema(3, "Work/Timed", PropertyInfo("When", InType.FILETIME), PropertyInfo("Count", InType.UINT16)),
        "start": schema(4, "Request/Start", PropertyInfo("Url", InType.UNICODESTRING), opcode=1, task=7),
        "stop": schema(5, "Request/Stop", PropertyInfo("Status", InType.UINT32), opcode=2, task=7),
        "counter": schema(
            6,
            "GarbageCollection/GCHeapStats",
            PropertyInfo("GenerationSize0", InType.UINT64),
            PropertyInfo("GenerationSize1", InType.UINT64),
        ),
    }


def write_shapes_trace(path: Path, schemas: dict[str, Schema], seed: int) -> None:
    rng = random.Random(seed)
    texts = ["plain", 'quote " and \\ back', "line\nbreak\ttab\x01", "ünïcödé ✓", "x" * 5000, ""]
    header = new_logfile_header(clock=linux_trace_clock(), logger_name="Shapes")
    base = time.monotonic_ns()
    open_requests: dict[int, int] = {}
    with EtlWriter(path, header=header) as writer:
        for step in range(3000):
            pid = rng.choice([40, 41, 42]) if step > 200 else 40
            tid = pid * 10 + rng.randrange(3 if step < 1500 else 6)
            at = base + step * 1000

            def event(kind: str, values: dict[str, object], *, owner: tuple[int, int] = (pid, tid)) -> None:
                builder = EventRecordBuilder(PROVIDER, pid=owner[0], tid=owner[1], timestamp=at)  # noqa: B023
                writer.write(builder.add_properties(values).pack_manifest(schemas[kind]))

            roll = rng.random()
            if 800 < step < 2200 and roll < 0.02:
                if tid in open_requests:
                    event("stop", {"Status": 200})
                    del open_requests[tid]
                else:
                    event("start", {"Url": f"/item/{step}"})
                    open_requests[tid] = step
            elif roll < 0.03:
                event("counter", {"GenerationSize0": rng.randrange(1 << 20), "GenerationSize1": rng.randrange(1 << 20)})
            elif roll < 0.06:
                event(
                    "thread",
                    {"ThreadId": rng.choice([400, 401, 410, 0]), "Note": rng.choice(texts)},
                    owner=(ORPHAN, ORPHAN),
                )
            elif roll < 0.08:
                when = datetime(2024, 5, 6, 7, 8, 9, rng.randrange(1_000_000), tzinfo=UTC)
                event("timed", {"When": when, "Count": rng.randrange(1 << 16)})
            elif roll < 0.09:  # a provider without a schema: no arguments
                writer.write(
                    EventRecordBuilder(uuid.UUID(int=12345), 9, pid=pid, tid=tid, timestamp=at).pack(b"\x01\x02")
                )
            else:
                event("plain", {
                    "Count": rng.randrange(1 << 32), "Big": rng.choice([5, (1 << 53) + rng.randrange(1 << 10), (1 << 64) - 1]),
                    "Signed": rng.choice([-7, -(1 << 60), 1 << 53, -(1 << 53)]),
                    "Ratio": rng.choice([0.1, -2.5, 1e300, math.inf, math.nan, 3.0]), "Small": rng.choice([0.5, 1.25, -3.0]),
                    "Flag": rng.random() < 0.5, "Text": rng.choice(texts), "Id": uuid.UUID(int=rng.getrandbits(128)),
                })  # fmt: skip
