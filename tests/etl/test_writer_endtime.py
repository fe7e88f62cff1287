"""EndTime is the last event's time, wherever the writer's clock was anchored."""

from __future__ import annotations

import io
import uuid

import pytest

from openetw.etl import EtlReader
from openetw.etl.build import build_event_record
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header


@pytest.mark.parametrize("offset", [-5_000_000_000, 0, 5_000_000_000])
def test_end_time_follows_the_last_event(offset: int) -> None:
    clock = linux_trace_clock()
    out = io.BytesIO()
    last = clock.reference_timestamp + offset + 999
    with EtlWriter(out, header=new_logfile_header(clock=clock, buffer_size=4096)) as writer:
        for i in range(1000):
            writer.write(build_event_record(provider_id=uuid.UUID(int=1), id=1, timestamp=clock.reference_timestamp + offset + i))
    with EtlReader(out.getvalue()) as reader:
        assert reader.header.end_time == clock.to_filetime(last)


def test_a_file_without_events_keeps_its_opening_end_time() -> None:
    clock = linux_trace_clock()
    out = io.BytesIO()
    EtlWriter(out, header=new_logfile_header(clock=clock, buffer_size=4096)).close()
    with EtlReader(out.getvalue()) as reader:
        assert reader.header.end_time == 0
        assert next(iter(reader)).kind == "system"
