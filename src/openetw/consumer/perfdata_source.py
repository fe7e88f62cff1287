"""``perf.data`` files as a trace source: tracepoint samples as TraceLogging ``EventRecord``s.

``perf record`` files (``PERFILE2``, file or pipe mode) are mapped, not read whole. Their
samples sit in per-CPU batches; the source gives them in time order as ``perf report`` does:
held until a FINISHED_ROUND record shows no older one can follow (at most ``MAX_HELD`` held:
past that the oldest go first, counted in ``notices()``). ``time_order=False`` gives file order
(what ``perf script`` and LinuxTracepoints' ``perf-decode`` print).
EventHeader events (``user_events``: Linux's ETW) become the TraceLogging events they describe,
plain tracepoints TraceLogging events of their system and name (``openetw.perfdata.transcode``).

Timestamps stay in the sample clock (nanoseconds); the logfile header this source gives
(``header``) converts them to wall-clock time through HEADER_CLOCK_DATA when the file has it
(``perf record -k CLOCK``), else reads the sample clock as time since 1970.
Damage: what cost records (a truncated record, a sample whose payload does not decode) is in
``losses()``; what was only counted (a feature section that did not parse) in ``notices()``.
"""

from __future__ import annotations

import heapq
import mmap
import os
from collections.abc import Iterator
from typing import Any

from openetw.consumer.evtx_files import map_file
from openetw.consumer.sources import Source
from openetw.consumer.stats import SourceStatistics
from openetw.errors import InvalidArgument, PerfDataFormatError
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock, filetime_to_iso, unix_ns_to_filetime
from openetw.etl.logfile import LogfileHeader
from openetw.etl.record import EventRecord, RecordContext
from openetw.perfdata.reader import PerfData, Sample
from openetw.perfdata.transcode import Transcoder

__all__ = ["PerfDataSource", "perf_clock", "perf_logfile_header"]

NS_PER_SECOND = 1_000_000_000
MAX_HELD = 1 << 18  # samples (a few hundred bytes each) held for time order, at most
NOMINAL_CPU_MHZ = 1000  # perf.data does not say; ETL readers (dissect.etl) divide by it whatever the clock


def perf_clock(perf: PerfData) -> TraceClock:
    """The sample clock (ns) as a QPC clock of 1 GHz anchored at HEADER_CLOCK_DATA's wall time."""
    clock = perf.clock_data
    if clock is not None and clock.wall_clock_ns:
        return TraceClock(
            L.CLOCK_QPC, unix_ns_to_filetime(clock.wall_clock_ns), clock.clockid_time_ns, NS_PER_SECOND, NOMINAL_CPU_MHZ
        )
    return TraceClock(L.CLOCK_QPC, unix_ns_to_filetime(0), 0, NS_PER_SECOND, NOMINAL_CPU_MHZ)


def perf_logfile_header(perf: PerfData, path: str) -> LogfileHeader:
    """A logfile header for the file's facts (what ``info`` shows and ``relog`` writes); its
    clock is the records' clock, so a relogged file keeps their timestamps as they are."""
    clock = perf_clock(perf)
    _, last = perf.sample_time or (0, 0)
    cpus = perf.nr_cpus[1] if perf.nr_cpus else 0
    return LogfileHeader(
        buffer_size=64 * 1024, version=0, provider_version=0, number_of_processors=cpus,
        end_time=clock.to_filetime(last) if last else 0, timer_resolution=0, maximum_file_size=0, log_file_mode=0,
        buffers_written=0, start_buffers=0, pointer_size=8, events_lost=perf.stats.events_lost, cpu_speed_mhz=NOMINAL_CPU_MHZ,
        boot_time=0, perf_freq=NS_PER_SECOND, start_time=clock.start_time,
        clock_type=L.CLOCK_QPC, buffers_lost=0, logger_name=perf.strings.get("hostname", ""), logfile_name=path,
        reference_timestamp=clock.reference_timestamp,
    )  # fmt: skip


class PerfDataSource(Source):
    """Every sample of a ``perf.data`` file, as ``EventRecord``s."""

    def __init__(self, path: str | os.PathLike[str], *, time_order: bool = True) -> None:
        self.path = os.fspath(path)
        self.time_order = time_order
        self.held_past_limit = 0
        self.name = self.path
        self.perf: PerfData | None = None
        self._data: Any = None
        self._skipped: list[PerfDataFormatError] = []
        self._records = 0

    def open(self) -> None:
        self._data = map_file(self.path)
        self.perf = PerfData(self._data, path=self.path)
        clock = perf_clock(self.perf)
        if self.perf.clock_data is None and self.perf.sample_time is not None:
            self.perf.notices.append(
                PerfDataFormatError(
                    "no HEADER_CLOCK_DATA: sample times read as time since 1970",
                    structure="perf_file_header",
                    path=self.path,
                )
            )
        self.context = RecordContext(clock, pointer_size=8, source=self.path)
        self.header = perf_logfile_header(self.perf, self.path)

    def facts(self) -> dict[str, Any]:
        """What the file says, in the terms of an ``.etl`` logfile header (``openetw info``)."""
        perf = self.perf
        if perf is None:
            return {}
        strings = perf.strings
        version = " ".join(
            part for part in ("perf.data" + (" (pipe)" if perf.pipe else ""), f"perf {strings['version']}" if "version" in strings else "",
                              f"Linux {strings['osrelease']}" if "osrelease" in strings else "", strings.get("arch", "")) if part
        )  # fmt: skip
        clock = perf_clock(perf)
        facts: dict[str, Any] = {
            "logger_name": strings.get("hostname") or "perf", "logfile_name": self.path, "version": version, "pointer_size": 8,
            "number_of_processors": perf.nr_cpus[1] if perf.nr_cpus else None, "clock": "QPC", "clock_type": L.CLOCK_QPC,
            "perf_freq": NS_PER_SECOND, "events_lost": perf.stats.events_lost,
        }  # fmt: skip
        if perf.sample_time is not None:
            facts["start_time"] = filetime_to_iso(clock.to_filetime(perf.sample_time[0]))
            facts["end_time"] = filetime_to_iso(clock.to_filetime(perf.sample_time[1]))
        return facts

    def records(self) -> Iterator[EventRecord]:
        perf = self.perf
        if perf is None or self.context is None:
            raise InvalidArgument("open() the source before reading its records")
        transcoder = Transcoder(perf, self.context)
        if self.time_order:
            yield from self._in_time_order(transcoder)
        else:
            for sample in perf.records():
                if sample is not None:
                    record = self._record(transcoder, sample)
                    if record is not None:
                        yield record
        self.header = perf_logfile_header(perf, self.path)  # now with the events the kernel lost

    def _record(self, transcoder: Transcoder, sample: Sample) -> EventRecord | None:
        try:
            record = transcoder.record(sample)
        except PerfDataFormatError as error:
            if error.record_index is None:  # an EventHeader event's damage: say which record it is in
                error = PerfDataFormatError(
                    error.message,
                    offset=error.offset,
                    structure=error.structure,
                    record_index=sample.record_index,
                    path=self.path,
                )
            self._skipped.append(error)
            return None
        self._records += 1
        return record

    def _in_time_order(self, transcoder: Transcoder) -> Iterator[EventRecord]:
        assert self.perf is not None
        held: list[tuple[int, int, Sample]] = []
        newest = limit = -1
        for sequence, sample in enumerate(self.perf.records(rounds=True)):
            if sample is None:  # FINISHED_ROUND: what is older than the round before it is final
                while held and held[0][0] <= limit:
                    record = self._record(transcoder, heapq.heappop(held)[2])
                    if record is not None:
                        yield record
                limit = newest
                continue
            time = sample.time or 0
            newest = max(newest, time)
            heapq.heappush(held, (time, sequence, sample))
            if len(held) > MAX_HELD:
                self.held_past_limit += 1
                record = self._record(transcoder, heapq.heappop(held)[2])
                if record is not None:
                    yield record
        while held:
            record = self._record(transcoder, heapq.heappop(held)[2])
            if record is not None:
                yield record
        if self.held_past_limit:
            self.perf.notices.append(PerfDataFormatError(
                f"{self.held_past_limit} samples given before a FINISHED_ROUND showed them final (more than {MAX_HELD} held)",
                structure="FINISHED_ROUND", path=self.path,
            ))  # fmt: skip

    def statistics(self) -> SourceStatistics:
        stats = SourceStatistics()
        if self.perf is not None:
            stats.records = stats.events_written = self._records
            stats.events_lost = self.perf.stats.events_lost
            stats.format_errors = len(self.perf.errors) + len(self._skipped)
        return stats

    def errors(self) -> list[PerfDataFormatError]:  # type: ignore[override]
        return self.losses() + self.notices()

    def losses(self) -> list[PerfDataFormatError]:
        """What cost records: the walk's damage and the samples whose payload did not decode."""
        return (list(self.perf.errors) if self.perf is not None else []) + self._skipped

    def notices(self) -> list[PerfDataFormatError]:
        """What was only counted: feature sections that did not parse, a missing clock."""
        return list(self.perf.notices) if self.perf is not None else []

    def close(self) -> None:
        data, self._data = self._data, None
        self.perf = None
        if isinstance(data, mmap.mmap):
            try:
                data.close()
            except BufferError:
                pass

    def __repr__(self) -> str:
        return f"<PerfDataSource {self.path}>"
