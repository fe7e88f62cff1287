"""The logfile header record (EventTrace group 0, type 0) that opens every ETL file."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from openetw.errors import EtlFormatError
from openetw.etl import layouts as L
from openetw.etl.clock import TraceClock, filetime_to_iso

LOGFILE_HEADER_HOOK_ID = 0x0000


@dataclass(frozen=True, slots=True)
class LogfileHeader:
    """TRACE_LOGFILE_HEADER with the logger and log file names that follow it."""

    buffer_size: int
    version: int
    provider_version: int
    number_of_processors: int
    end_time: int
    timer_resolution: int
    maximum_file_size: int
    log_file_mode: int
    buffers_written: int
    start_buffers: int
    pointer_size: int
    events_lost: int
    cpu_speed_mhz: int
    boot_time: int
    perf_freq: int
    start_time: int
    clock_type: int
    buffers_lost: int
    logger_name: str = ""
    logfile_name: str = ""
    time_zone: bytes = field(default=b"\0" * 172, repr=False)
    logger_name_ptr: int = 0
    logfile_name_ptr: int = 0
    reference_timestamp: int = 0  # the header record's own timestamp
    header_record_pointer_size: int = 8

    @property
    def os_version(self) -> tuple[int, int, int, int]:
        """(major, minor, sub, subminor) as stored in ``Version``."""
        v = self.version
        return (v & 0xFF, (v >> 8) & 0xFF, (v >> 16) & 0xFF, (v >> 24) & 0xFF)

    @property
    def os_version_text(self) -> str:
        major, minor, _, _ = self.os_version
        return f"{major}.{minor}"

    @property
    def compressed(self) -> bool:
        return bool(self.log_file_mode & L.EVENT_TRACE_COMPRESSED_MODE)

    @property
    def clock(self) -> TraceClock:
        return TraceClock(self.clock_type, self.start_time, self.reference_timestamp, self.perf_freq, self.cpu_speed_mhz)

    @property
    def clock_name(self) -> str:
        return {L.CLOCK_QPC: "QPC", L.CLOCK_SYSTEM_TIME: "SystemTime", L.CLOCK_CPU_CYCLE: "CPUCycle"}.get(
            self.clock_type, f"unknown({self.clock_type})"
        )

    def with_(self, **changes: Any) -> LogfileHeader:
        return replace(self, **changes)

    def as_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "time_zone"}
        out["os_version"] = ".".join(str(p) for p in self.os_version)
        out["clock"] = self.clock_name
        out["compressed"] = self.compressed
        out["start_time_iso"] = filetime_to_iso(self.start_time) if self.start_time > 0 else None
        out["end_time_iso"] = filetime_to_iso(self.end_time) if self.end_time > 0 else None
        return out


def _read_utf16z(data: bytes, pos: int, end: int) -> tuple[str, int]:
    """A NUL-terminated UTF-16LE string starting at ``pos``; returns (text, position after the NUL)."""
    cursor = pos
    while cursor + 2 <= end:
        if data[cursor] == 0 and data[cursor + 1] == 0:
            return data[pos:cursor].decode("utf-16-le", "replace"), cursor + 2
        cursor += 2
    return data[pos:end].decode("utf-16-le", "replace"), end


def parse_logfile_header(payload: bytes, pointer_size: int, reference_timestamp: int, *, file_offset: int = 0) -> LogfileHeader:
    """Parse the payload of the logfile header record (everything after its SYSTEM header)."""
    layout = L.trace_logfile_header(pointer_size)
    if len(payload) < layout.size:
        raise EtlFormatError(
            f"logfile header payload is {len(payload)} bytes, needs {layout.size}",
            offset=file_offset,
            buffer_index=0,
            structure=layout.name,
        )
    v = layout.as_dict(layout.unpack_from(payload, 0))
    logger_name, pos = _read_utf16z(payload, layout.size, len(payload))
    logfile_name, _ = _read_utf16z(payload, pos, len(payload))
    return LogfileHeader(
        buffer_size=v["BufferSize"],
        version=v["Version"],
        provider_version=v["ProviderVersion"],
        number_of_processors=v["NumberOfProcessors"],
        end_time=v["EndTime"],
        timer_resolution=v["TimerResolution"],
        maximum_file_size=v["MaximumFileSize"],
        log_file_mode=v["LogFileMode"],
        buffers_written=v["BuffersWritten"],
        start_buffers=v["StartBuffers"],
        pointer_size=v["PointerSize"],
        events_lost=v["EventsLost"],
        cpu_speed_mhz=v["CpuSpeedInMHz"],
        boot_time=v["BootTime"],
        perf_freq=v["PerfFreq"],
        start_time=v["StartTime"],
        clock_type=v["ReservedFlags"],
        buffers_lost=v["BuffersLost"],
        logger_name=logger_name,
        logfile_name=logfile_name,
        time_zone=v["TimeZone"],
        logger_name_ptr=v["LoggerName"],
        logfile_name_ptr=v["LogFileName"],
        reference_timestamp=reference_timestamp,
        header_record_pointer_size=pointer_size,
    )


def encode_logfile_header(header: LogfileHeader, pointer_size: int | None = None) -> bytes:
    """The logfile header record's payload: TRACE_LOGFILE_HEADER, then both names NUL-terminated."""
    width = pointer_size or header.header_record_pointer_size
    layout = L.trace_logfile_header(width)
    body = layout.pack_dict(
        {
            "BufferSize": header.buffer_size,
            "Version": header.version,
            "ProviderVersion": header.provider_version,
            "NumberOfProcessors": header.number_of_processors,
            "EndTime": header.end_time,
            "TimerResolution": header.timer_resolution,
            "MaximumFileSize": header.maximum_file_size,
            "LogFileMode": header.log_file_mode,
            "BuffersWritten": header.buffers_written,
            "StartBuffers": header.start_buffers,
            "PointerSize": header.pointer_size,
            "EventsLost": header.events_lost,
            "CpuSpeedInMHz": header.cpu_speed_mhz,
            "LoggerName": header.logger_name_ptr,
            "LogFileName": header.logfile_name_ptr,
            "TimeZone": header.time_zone[:172].ljust(172, b"\0"),
            "Padding": b"\0" * 4,
            "BootTime": header.boot_time,
            "PerfFreq": header.perf_freq,
            "StartTime": header.start_time,
            "ReservedFlags": header.clock_type,
            "BuffersLost": header.buffers_lost,
        }
    )
    names = (header.logger_name + "\0").encode("utf-16-le") + (header.logfile_name + "\0").encode("utf-16-le")
    return body + names
