"""Classic kernel (MOF) layout tables: consistency, lookups, and fit against real traces.

The corpus check walks uncompressed .etl files with a small header walker of its own and, for
every SYSTEM/PERFINFO (and classic EVENT_TRACE_HEADER) record, measures the payload with the
layout: fixed fields by size, strings up to their NUL, SIDs by their sub-authority count,
counted arrays by the referenced field. A layout fits when that walk ends exactly at the end
of the payload.
"""

from __future__ import annotations

import struct
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

import pytest

from openetw.errors import InvalidArgument
from openetw.tdh.mof_kernel import (
    GROUP_GUIDS,
    HOOK_ALIASES,
    KERNEL_CLASSES,
    REST,
    LayoutMatch,
    MofEvent,
    MofField,
    event_full_name,
    find_class,
    find_layout,
)
from openetw.tdh.mof_kernel_types import FIXED_SIZES, IN_TYPES, OUT_TYPES, POINTER_SIZED
from tests.conftest import corpus_path

PROCESS = uuid.UUID("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c")
IMAGE = uuid.UUID("2cb15d1d-5fc1-11d2-abe1-00a0c911f518")
IMAGE_ID = uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de")
META_DATA = uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671")
SYS_CONFIG = uuid.UUID("9b79ee91-b5fd-41c0-a243-4248e266e9d0")

DIAGHUB = ("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession")
KERNEL_FILES = [
    (*DIAGHUB, "diaghub.kernel.1.etl"),
    ("etl", "etl-parser", "ShutdownPerfDiagLogger.etl"),
]


# --- the tables themselves -----------------------------------------------------------------


def test_class_guids_are_unique():
    guids = [cls.guid for cls in KERNEL_CLASSES]
    assert len(guids) == len(set(guids))


def test_groups_are_unique_and_match_the_group_table():
    groups = [cls.group for cls in KERNEL_CLASSES if cls.group is not None]
    assert len(groups) == len(set(groups))
    for cls in KERNEL_CLASSES:
        if cls.group is not None:
            assert GROUP_GUIDS[cls.group] == cls.guid


def test_every_guid_opcode_version_is_defined_once():
    seen = Counter((cls.guid, ev.opcode, ev.version) for cls in KERNEL_CLASSES for ev in cls.events)
    assert [key for key, n in seen.items() if n > 1] == []


def test_fields_use_known_types_and_resolvable_references():
    for cls in KERNEL_CLASSES:
        for event in cls.events:
            where = event_full_name(cls, event), event.version
            names = [field.name for field in event.fields]
            assert len(names) == len(set(names)), where
            for index, field in enumerate(event.fields):
                assert field.in_type in IN_TYPES, (where, field)
                assert field.out_type is None or field.out_type in OUT_TYPES, (where, field)
                if field.in_type == "BINARY":
                    assert field.length is not None, (where, field)
                for ref in (field.length, field.count):
                    if isinstance(ref, str) and ref != REST:
                        assert ref in names[:index], (where, field)
                if REST in (field.length, field.count):
                    assert index == len(event.fields) - 1, (where, field)
                if field.optional:
                    assert all(later.optional for later in event.fields[index:]), (where, field)


def test_type_names_are_tdh_enum_members():
    winmeta = pytest.importorskip("openetw.manifest.winmeta")
    for cls in KERNEL_CLASSES:
        for event in cls.events:
            for field in event.fields:
                assert field.in_type in winmeta.InType.__members__, field
                if field.out_type is not None:
                    assert field.out_type in winmeta.OutType.__members__, field


# --- lookups ---------------------------------------------------------------------------------


def test_find_layout_by_group_and_by_guid_agree():
    by_group = find_layout(0x03, 1, 4)
    by_guid = find_layout(PROCESS, 1, 4)
    by_text = find_layout("{3D6FA8D0-FE05-11D0-9DDA-00C04FD7BA7C}", 1, 4)
    assert by_group == by_guid == by_text
    assert by_group is not None
    assert by_group.mof_class.task_name == "Process"
    assert by_group.event.event_name == "Start"
    assert not by_group.version_fallback
    assert [f.name for f in by_group.event.fields][:8] == [
        "UniqueProcessKey", "ProcessID", "ParentID", "SessionID", "ExitStatus", "PageDirectoryBase",
        "Flags", "UserSID",
    ]


def test_find_layout_falls_back_to_the_highest_lower_version():
    exact = find_layout(0x03, 1, 4)
    newer = find_layout(0x03, 1, 9)
    assert isinstance(newer, LayoutMatch)
    assert newer.version_fallback
    assert exact is not None and newer.event is exact.event
    assert find_layout(IMAGE_ID, 0, 1) is None  # no version at or below 1


def test_find_layout_unknown_class_or_opcode():
    assert find_layout(0x7F, 1, 2) is None
    assert find_layout(uuid.uuid4(), 1, 2) is None
    assert find_layout(0x03, 200, 2) is None
    assert find_class(0x7F) is None
    assert find_class(0x10) is None  # Heap: a known group without layouts here
    assert 0x10 in GROUP_GUIDS


def test_find_layout_rejects_text_that_is_not_a_guid():
    with pytest.raises(InvalidArgument):
        find_layout("Process", 1, 2)


def test_process_group_hook_10_is_an_image_load():
    assert HOOK_ALIASES[(0x03, 10)] == (0x14, 10)
    match = find_layout(0x03, 10, 3)
    assert match is not None
    assert match.mof_class.guid == IMAGE
    assert event_full_name(match.mof_class, match.event) == "Windows Kernel/Image/Load"


@pytest.mark.parametrize(
    ("key", "opcode", "version", "name"),
    [
        (0x00, 0, 2, "Windows Kernel/EventTrace"),
        (0x00, 5, 2, "Windows Kernel/EventTrace/Extension"),
        (0x00, 8, 2, "Windows Kernel/EventTrace/RundownComplete"),
        (0x03, 2, 4, "Windows Kernel/Process/Stop"),
        (0x03, 4, 4, "Windows Kernel/Process/DCStop"),
        (0x03, 33, 2, "Windows Kernel/Process/PerfCtrRundown"),
        (0x05, 1, 3, "Windows Kernel/Thread/Start"),
        (0x05, 50, 2, "Windows Kernel/Dispatcher/ReadyThread"),
        (0x01, 13, 3, "Windows Kernel/DiskIO/WriteInit"),
        (0x02, 32, 2, "Windows Kernel/Memory/HardFault"),
        (0x02, 98, 2, "Windows Kernel/VirtualMem/Alloc"),
        (0x0F, 46, 2, "Windows Kernel/PerfInfo/Sample"),
        (0x0F, 73, 3, "Windows Kernel/PerfInfo/CollectionStart"),
        (0x06, 27, 2, "Windows Kernel/TcpIp/RecvIPV6"),
        (0x08, 11, 2, "Windows Kernel/UdpIp/Recv"),
        (0x0B, 13, 2, "Windows Kernel/SystemConfig/NIC"),
        (0x0B, 25, 2, "MSNT_SystemTrace/SystemConfig/Platform"),
        (0x14, 33, 2, "MSNT_SystemTrace/Image/KernelBase"),
        (SYS_CONFIG, 33, 0, "Windows Kernel/SysConfig/SystemPaths"),
        (SYS_CONFIG, 37, 0, "Windows Kernel/SysConfig/Opcode(37)"),
        (IMAGE_ID, 0, 2, "KernelTraceControl/ImageID"),
        (IMAGE_ID, 32, 2, "KernelTraceControl/ImageID/None"),
        (IMAGE_ID, 36, 2, "KernelTraceControl/ImageID/DbgID_RSDS"),
        (IMAGE_ID, 37, 2, "KernelTraceControl/ImageID/DbgID_ILRSDS"),
        (IMAGE_ID, 64, 0, "KernelTraceControl/ImageID/FileVersion"),
        (META_DATA, 32, 0, "KernelTraceControl/MetaData/EventInfo"),
        (META_DATA, 33, 0, "KernelTraceControl/MetaData/EventMapInfo"),
    ],
)
def test_names_match_perfview_baselines(key, opcode, version, name):
    match = find_layout(key, opcode, version)
    assert match is not None
    assert not match.version_fallback
    assert event_full_name(match.mof_class, match.event) == name


def test_field_names_shown_by_perfview():
    """Fields PerfView prints in net.4.5.2.x64.baseline.txt for events read from raw data."""
    expectations = {
        (0x03, 1, 4): {"ProcessID", "ParentID", "ImageFileName", "PageDirectoryBase", "Flags", "SessionID",
                       "ExitStatus", "UniqueProcessKey", "CommandLine", "PackageFullName", "ApplicationID"},
        (0x05, 1, 3): {"StackBase", "StackLimit", "UserStackBase", "UserStackLimit", "StartAddr",
                       "Win32StartAddr", "TebBase", "SubProcessTag", "BasePriority", "PagePriority",
                       "IoPriority", "ThreadFlags", "ThreadName"},
        (0x14, 3, 2): {"ImageBase", "ImageSize", "ImageChecksum", "TimeDateStamp", "DefaultBase", "FileName"},
        (0x01, 10, 3): {"DiskNumber", "IrpFlags", "TransferSize", "ByteOffset", "Irp", "FileKey"},
        (0x02, 32, 2): {"ReadOffset", "VirtualAddress", "FileKey", "ByteCount"},
        (0x0F, 73, 3): {"SampleSource", "NewInterval", "OldInterval"},
        (0x0B, 10, 3): {"MHz", "NumberOfProcessors", "MemSize", "PageSize", "AllocationGranularity",
                        "ComputerName", "DomainName", "HyperThreadingFlag"},
        (0x0B, 15, 2): {"ServiceName", "DisplayName", "ProcessName", "ProcessID", "ServiceState", "SubProcessTag"},
        (0x0B, 22, 4): {"DeviceID", "DeviceDescription", "FriendlyName", "PdoName", "ServiceName"},
        (0x0B, 23, 2): {"TargetID", "DeviceType", "DeviceTimingMode", "LocationInformationLen",
                        "LocationInformation"},
        (0x03, 32, 2): {"ProcessID", "MemoryCount", "HandleCount", "PeakVirtualSize", "PrivatePageCount"},
        (IMAGE_ID, 36, 2): {"ImageBase", "GuidSig", "Age", "PDBFileName"},
        (IMAGE_ID, 0, 2): {"ImageBase", "ImageSize", "ProcessID", "TimeDateStamp", "OriginalFileName"},
        (SYS_CONFIG, 34, 0): {"Value"},
    }
    for (key, opcode, version), names in expectations.items():
        match = find_layout(key, opcode, version)
        assert match is not None, (key, opcode, version)
        missing = names - {field.name for field in match.event.fields}
        assert not missing, (key, opcode, version, missing)


def test_static_sizes_of_well_known_layouts():
    def size(key, opcode, version, pointer_size):
        match = find_layout(key, opcode, version)
        assert match is not None
        return match.event.static_size(pointer_size)

    assert size(0x05, 36, 2, 4) == size(0x05, 36, 2, 8) == (24, False)  # CSwitch has no pointers
    assert size(0x03, 1, 4, 4) == (28, True)
    assert size(0x03, 1, 4, 8) == (36, True)
    assert size(0x05, 1, 2, 4) == (40, False)
    assert size(0x05, 1, 2, 8) == (68, False)
    assert size(0x05, 1, 3, 8) == (72, True)  # ThreadName is optional in V3
    assert size(0x0B, 10, 2, 8) == (808, False)
    assert size(0x0B, 10, 3, 8) == (828, False)
    assert size(0x0B, 11, 2, 8) == (568, False)
    assert size(0x0B, 14, 2, 8) == (2584, False)
    assert size(0x00, 0, 2, 4)[0] == 0x110  # TRACE_LOGFILE_HEADER, strings follow
    assert size(0x00, 0, 2, 8)[0] == 0x118


# --- fit against real traces ----------------------------------------------------------------


@dataclass
class Record:
    kind: str  # "system" (SYSTEM/COMPACT/PERFINFO header) or "classic" (EVENT_TRACE_HEADER)
    key: int | uuid.UUID  # kernel group, or event GUID
    opcode: int
    version: int
    pointer_size: int
    payload: bytes


_SYSTEM_HEADERS = {0x01: (0x20, 4), 0x02: (0x20, 8), 0x03: (0x18, 4), 0x04: (0x18, 8), 0x10: (0x10, 4), 0x11: (0x10, 8)}
_CLASSIC_HEADERS = {0x0A: (0x30, 4), 0x14: (0x30, 8), 0x0B: (0x48, 4), 0x15: (0x48, 8)}


def walk_records(data: bytes) -> Iterator[Record]:
    """Records of an uncompressed .etl file (buffers stepped by their BufferSize)."""
    position = 0
    while position + 0x48 <= len(data):
        buffer_size, = struct.unpack_from("<I", data, position)
        end, = struct.unpack_from("<I", data, position + 0x30)
        if buffer_size == 0:
            break
        offset = position + 0x48
        limit = position + min(end, buffer_size)
        while offset + 4 <= limit:
            marker, = struct.unpack_from("<I", data, offset)
            if marker == 0xFFFFFFFF:
                break
            header_type = (marker >> 16) & 0xFF
            flags = marker >> 24
            if flags & 0xC0 == 0xC0 and header_type in _SYSTEM_HEADERS:
                header_size, pointer_size = _SYSTEM_HEADERS[header_type]
                size, hook = struct.unpack_from("<HH", data, offset + 4)
                version = marker & 0xFFFF
                extra = 8 + 8 * ((version >> 8) & 7) if version & 0x8000 else 0
                payload = data[offset + header_size + extra: offset + size]
                yield Record("system", hook >> 8, hook & 0xFF, version & 0xFF, pointer_size, payload)
            elif flags & 0xC0 == 0xC0 and header_type in _CLASSIC_HEADERS:
                header_size, pointer_size = _CLASSIC_HEADERS[header_type]
                size, = struct.unpack_from("<H", data, offset)
                opcode, _level, version = struct.unpack_from("<BBH", data, offset + 4)
                guid = uuid.UUID(bytes_le=data[offset + 0x18: offset + 0x28])
                yield Record("classic", guid, opcode, version, pointer_size, data[offset + header_size: offset + size])
            else:
                size, = struct.unpack_from("<H", data, offset)
            if size == 0:
                break
            offset += (size + 7) & ~7
        position += buffer_size


class Misfit(Exception):
    pass


def _integer(field: MofField, payload: bytes, at: int, pointer_size: int) -> int:
    size = pointer_size if field.in_type in POINTER_SIZED else FIXED_SIZES[field.in_type]
    return int.from_bytes(payload[at: at + size], "little")


def _string_end(payload: bytes, at: int, unit: int) -> int:
    """End of a NUL-terminated string; one that runs to the end of the payload ends there."""
    position = at
    while position + unit <= len(payload):
        if payload[position: position + unit] == b"\0" * unit:
            return position + unit
        position += unit
    return len(payload)


def _item_end(field: MofField, payload: bytes, at: int, pointer_size: int, values: dict[str, int]) -> int:
    in_type = field.in_type
    if in_type in FIXED_SIZES:
        return at + FIXED_SIZES[in_type]
    if in_type in POINTER_SIZED:
        return at + pointer_size
    length = values[field.length] if isinstance(field.length, str) and field.length != REST else field.length
    if length == REST:
        return len(payload)
    if in_type in ("UNICODESTRING", "ANSISTRING"):
        unit = 2 if in_type == "UNICODESTRING" else 1
        return at + unit * length if length is not None else _string_end(payload, at, unit)
    if in_type == "BINARY":
        return at + length
    if in_type == "WBEMSID":
        if payload[at: at + 4] == b"\0\0\0\0":
            return at + 4
        at += 2 * pointer_size
        in_type = "SID"
    if in_type == "SID":
        if at + 8 > len(payload):
            raise Misfit("truncated SID")
        return at + 8 + 4 * payload[at + 1]
    raise Misfit(f"no size rule for {in_type}")


def payload_end(event: MofEvent, payload: bytes, pointer_size: int) -> int:
    """Where the layout says the payload ends (raises Misfit when it runs past the data)."""
    at = 0
    values: dict[str, int] = {}
    for field in event.fields:
        if field.optional and at == len(payload):
            break
        if field.count is None:
            end = _item_end(field, payload, at, pointer_size, values)
            if (field.in_type in FIXED_SIZES or field.in_type in POINTER_SIZED) and end <= len(payload):
                values[field.name] = _integer(field, payload, at, pointer_size)
        elif field.count == REST:
            end = at
            while end < len(payload):
                end = _item_end(field, payload, end, pointer_size, values)
        else:
            end = at
            for _ in range(field.count if isinstance(field.count, int) else values[field.count]):
                end = _item_end(field, payload, end, pointer_size, values)
        if end > len(payload):
            raise Misfit(f"{field.name} runs past the payload")
        at = end
    return at


@dataclass
class FitReport:
    total: int = 0
    with_layout: int = 0
    exact: int = 0
    missing: Counter = dataclass_field(default_factory=Counter)
    misfits: Counter = dataclass_field(default_factory=Counter)

    def table(self) -> str:
        lines = [f"{'kind':8} {'group/guid':38} {'opcode':>6} {'ver':>4} {'count':>6}  problem"]
        for problem, counter in (("no layout", self.missing), ("size mismatch", self.misfits)):
            for (kind, key, opcode, version), n in sorted(counter.items(), key=str):
                shown = f"0x{key:02X}" if isinstance(key, int) else str(key)
                lines.append(f"{kind:8} {shown:38} {opcode:>6} {version:>4} {n:>6}  {problem}")
        return "\n".join(lines)


def measure(records: Iterator[Record], kind: str) -> FitReport:
    report = FitReport()
    for record in records:
        if record.kind != kind:
            continue
        report.total += 1
        ident = (record.kind, record.key, record.opcode, record.version)
        match = find_layout(record.key, record.opcode, record.version)
        if match is None:
            report.missing[ident] += 1
            continue
        report.with_layout += 1
        fixed, variable = match.event.static_size(record.pointer_size)
        try:
            fits = payload_end(match.event, record.payload, record.pointer_size) == len(record.payload)
        except Misfit:
            fits = False
        fixed_ok = fixed <= len(record.payload) if variable else fixed == len(record.payload)
        if fits and fixed_ok:
            report.exact += 1
        else:
            report.misfits[ident] += 1
    return report


@pytest.mark.parametrize("parts", KERNEL_FILES, ids=lambda parts: parts[-1])
def test_kernel_records_have_layouts_that_fit(parts: tuple[str, ...]):
    data = Path(corpus_path(*parts)).read_bytes()
    report = measure(walk_records(data), "system")
    print(f"\n{parts[-1]}: {report.total} SYSTEM/PERFINFO records, {report.with_layout} with a layout, "
          f"{report.exact} fit exactly\n{report.table()}")
    assert report.total > 10_000
    assert report.with_layout >= 0.95 * report.total, report.table()
    assert report.exact >= 0.95 * report.total, report.table()


def test_merged_classic_records_have_layouts_that_fit():
    data = Path(corpus_path(*DIAGHUB, "diaghub.etl")).read_bytes()
    report = measure(walk_records(data), "classic")
    print(f"\ndiaghub.etl: {report.total} classic records, {report.with_layout} with a layout, "
          f"{report.exact} fit exactly\n{report.table()}")
    assert report.total == 62_378
    assert report.exact == report.total, report.table()


def test_walker_sees_the_logfile_header_first():
    data = Path(corpus_path(*KERNEL_FILES[1])).read_bytes()
    first = next(walk_records(data))
    assert (first.kind, first.key, first.opcode, first.version, first.pointer_size) == ("system", 0, 0, 2, 8)
    match = find_layout(first.key, first.opcode, first.version)
    assert match is not None
    assert payload_end(match.event, first.payload, 8) == len(first.payload)


def test_a_misfit_is_detected():
    match = find_layout(0x05, 36, 2)
    assert match is not None
    with pytest.raises(Misfit):
        payload_end(match.event, bytes(20), 8)
    assert payload_end(match.event, bytes(28), 8) == 24  # 4 bytes left over: would count as a misfit
