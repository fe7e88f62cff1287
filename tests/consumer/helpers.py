"""Records and files for consumer tests: test-kit records, synthetic ETL files, corpus paths."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable
from pathlib import Path

from openetw.etl import EtlReader
from openetw.etl import layouts as L
from openetw.etl.build import (
    build_classic_record,
    build_event_record,
    build_message_record,
    build_perfinfo_record,
    build_system_record,
)
from openetw.etl.clock import TraceClock
from openetw.etl.record import EventRecord
from openetw.etl.writer import EtlWriter, new_logfile_header
from tests.conftest import corpus_path

START_TIME = 133_000_000_000_000_000  # FILETIME, 2022
REFERENCE = 5_000_000
CLOCK = TraceClock(L.CLOCK_QPC, START_TIME, REFERENCE, 10_000_000)  # 1 QPC tick = 1 FILETIME tick
PROVIDER_A = uuid.UUID("3a5e4f4c-1b2d-4c6e-9f80-112233445566")
PROVIDER_B = uuid.UUID("d43dddd3-c2aa-4a2e-8dd4-a8fb61b77615")
CLASSIC = uuid.UUID("9b79ee91-b5fd-41c0-a243-4248e266e9d0")

PROCESS_ETL = ("tx", "Process.etl")
DIAGHUB = "perfview/diaghub-dotnetcore3.1-win-x64-diagsession"
KERNEL_PROCESS_MANIFEST = ("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml")


def corpus_etl(*parts: str) -> Path:
    return corpus_path("etl", *parts)


def diaghub_files() -> list[Path]:
    return [corpus_etl(*DIAGHUB.split("/"), name) for name in ("diaghub.etl", "diaghub.kernel.1.etl", "diaghub.user_injected.1.etl")]


def every_kind(count: int, *, step: int = 1000, cpus: int = 3) -> list[EventRecord]:
    """``count`` records cycling through every header kind, in time order, on several processors."""
    records = []
    for n in range(count):
        ts = REFERENCE + (n + 1) * step
        cpu = n % cpus
        payload = struct.pack("<IQ", n, n * 3) + bytes(n % 13)
        kind = n % 8
        if kind == 0:
            record = build_event_record(
                provider_id=PROVIDER_A, id=n % 7, version=1, level=n % 6, opcode=n % 3, task=n % 5, keyword=1 << (n % 4),
                pid=100 + n % 4, tid=7, timestamp=ts, cpu=cpu, user_data=payload,
            )
        elif kind == 1:
            record = build_event_record(provider_id=PROVIDER_B, id=n % 5, timestamp=ts, cpu=cpu, user_data=payload, pointer_size=4, pid=200)
        elif kind == 2:
            record = build_system_record(hook_id=0x0301, version=3, pid=4, tid=8, timestamp=ts, cpu=cpu, user_data=payload)
        elif kind == 3:
            record = build_system_record(hook_id=0x0524, version=2, timestamp=ts, cpu=cpu, user_data=payload, compact=True)
        elif kind == 4:
            record = build_perfinfo_record(hook_id=0x0F2E, timestamp=ts, cpu=cpu, user_data=payload)
        elif kind == 5:
            record = build_classic_record(event_guid=CLASSIC, type=n % 40, level=4, version=2, pid=9, tid=10, timestamp=ts, cpu=cpu, user_data=payload)
        elif kind == 6:
            record = build_classic_record(event_guid=CLASSIC, type=1, timestamp=ts, cpu=cpu, user_data=payload, instance=(n, n + 1, PROVIDER_B))
        else:
            record = build_message_record(message_number=n % 100, message_guid=PROVIDER_A, sequence=n, timestamp=ts, pid=11, tid=12, cpu=cpu, user_data=payload)
        records.append(record)
    return records


def write_etl(path: Path, records: Iterable[EventRecord], *, buffer_size: int = 4096, processors: int = 4) -> Path:
    header = new_logfile_header(clock=CLOCK, buffer_size=buffer_size, number_of_processors=processors)
    with EtlWriter(path, header=header) as writer:
        for record in records:
            writer.write(record)
    return path


def reader_raws(*paths: Path) -> list[tuple[str, int, int, bytes]]:
    """(kind, cpu, buffer index, raw bytes) of every record, as ``EtlReader`` gives them in time order."""
    out = []
    for path in paths:
        with EtlReader(path, strict=False) as reader:
            out.extend((r.kind, r.cpu, r.buffer_index, r.raw) for r in reader.records(time_order=True))
    return out


def describe(records: Iterable[EventRecord]) -> list[tuple[str, int, int, bytes]]:
    return [(r.kind, r.cpu, r.buffer_index, r.raw) for r in records]
