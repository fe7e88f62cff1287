"""Layouts of the machine-description events: the kernel's SystemConfig class (group 0x0B,
logged at the end of a kernel session) and the classic events that xperf/KernelTraceControl
merges into a trace: SysConfig, ImageID, MetaData and WinSat.

The merged events are EVENT_TRACE_HEADER ("classic") records, identified by GUID; they have
no kernel group.
"""

from __future__ import annotations

import uuid

from openetw.tdh.mof_kernel_core import KERNEL, TDH_KERNEL
from openetw.tdh.mof_kernel_types import (
    ANSISTRING,
    BINARY,
    FILETIME,
    GUID,
    HEXINT16,
    HEXINT32,
    HEXINT64,
    INT64,
    POINTER,
    REST,
    SIZET,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    UNICODESTRING,
    MofClass,
    MofEvent,
    versions,
)
from openetw.tdh.mof_kernel_types import (
    MofField as F,
)

KERNEL_TRACE_CONTROL = "KernelTraceControl"


def _wchars(name: str, count: int) -> F:
    """A WCHAR[count] member: NUL-padded UTF-16."""
    return F(name, UNICODESTRING, length=count)


def _strings(*names: str) -> tuple[F, ...]:
    return tuple(F(name, UNICODESTRING) for name in names)


# --- SystemConfig (group 0x0B) ---------------------------------------------------------------

_CPU_HEAD = (
    F("MHz", UINT32),
    F("NumberOfProcessors", UINT32),
    F("MemSize", UINT32),
    F("PageSize", UINT32),
    F("AllocationGranularity", UINT32),
    _wchars("ComputerName", 256),
)
_CPU_V2 = _CPU_HEAD + (_wchars("DomainName", 134), F("HyperThreadingFlag", POINTER))
_CPU_V3 = _CPU_V2 + (
    F("HighestUserAddress", POINTER),
    F("ProcessorArchitecture", UINT16),
    F("ProcessorLevel", UINT16),
    F("ProcessorRevision", UINT16, HEXINT16),
    F("PaeEnabled", UINT8),
    F("NxEnabled", UINT8),
    F("MemorySpeed", UINT32),
)
_PHYSICAL_DISK = (
    F("DiskNumber", UINT32),
    F("BytesPerSector", UINT32),
    F("SectorsPerTrack", UINT32),
    F("TracksPerCylinder", UINT32),
    F("Cylinders", UINT64),
    F("SCSIPort", UINT32),
    F("SCSIPath", UINT32),
    F("SCSITarget", UINT32),
    F("SCSILun", UINT32),
    _wchars("Manufacturer", 256),
    F("PartitionCount", UINT32),
    F("WriteCacheEnabled", UINT8),
    F("Pad", UINT8),
    _wchars("BootDriveLetter", 3),
    _wchars("Spare", 2),
)
_LOGICAL_DISK = (
    F("StartOffset", UINT64),
    F("PartitionSize", UINT64),
    F("DiskNumber", UINT32),
    F("Size", UINT32),
    F("DriveType", UINT32),
    _wchars("DriveLetterString", 4),
    F("Pad1", UINT32),
    F("PartitionNumber", UINT32),
    F("SectorsPerCluster", UINT32),
    F("BytesPerSector", UINT32),
    F("Pad2", UINT32),
    F("NumberOfFreeClusters", INT64),
    F("TotalNumberOfClusters", INT64),
    _wchars("FileSystem", 16),
    F("VolumeExt", UINT32),
)
_SERVICES_V2 = (
    F("ProcessID", UINT32),
    F("ServiceState", UINT32),
    F("SubProcessTag", UINT32, HEXINT32),
) + _strings("ServiceName", "DisplayName", "ProcessName")
_IRQ_TAIL = (F("IRQNum", UINT32), F("DeviceDescriptionLen", UINT32), F("DeviceDescription", UNICODESTRING))
_PNP_LENGTHS = (F("IDLength", UINT32), F("DescriptionLength", UINT32), F("FriendlyNameLength", UINT32))
_PNP_NAMES = _strings("DeviceID", "DeviceDescription", "FriendlyName")
_PNP_FILTERS = (
    F("UpperFilters", UNICODESTRING, count="UpperFiltersCount"),
    F("LowerFilters", UNICODESTRING, count="LowerFiltersCount"),
)
_PNP_V4_HEAD = (F("ClassGuid", GUID), F("UpperFiltersCount", UINT32), F("LowerFiltersCount", UINT32))
_PNP_V4_STRINGS = _PNP_NAMES + _strings("PdoName", "ServiceName") + _PNP_FILTERS


def _tdh(opcode: int, name: str, fields: tuple[F, ...], version: int = 2) -> MofEvent:
    """An event PerfView's kernel parser does not define (it shows it as MSNT_SystemTrace)."""
    return MofEvent(opcode, version, name, fields, provider_name=TDH_KERNEL)


SYSTEM_CONFIG = MofClass(
    uuid.UUID("01853a65-418f-4f36-aefc-dc0f1d2fd235"), KERNEL, "SystemConfig", 0x0B,
    versions((0, 1), {10: "CPU"}, _CPU_HEAD + (_wchars("DomainName", 132), F("HyperThreadingFlag", POINTER)))
    + versions((2,), {10: "CPU"}, _CPU_V2)
    + versions((3,), {10: "CPU"}, _CPU_V3)
    + versions((0, 1, 2), {11: "PhyDisk"}, _PHYSICAL_DISK)
    + versions((0, 1), {12: "LogDisk"}, _LOGICAL_DISK)
    + versions((2,), {12: "LogDisk"}, _LOGICAL_DISK + (F("Pad3", UINT32),))
    + versions((2,), {13: "NIC"}, (
        F("PhysicalAddr", UINT64, HEXINT64),
        F("PhysicalAddrLen", UINT32),
        F("Ipv4Index", UINT32),
        F("Ipv6Index", UINT32),
    ) + _strings("NICDescription", "IpAddresses", "DnsServerAddresses"))
    + versions((0, 1, 2), {14: "Video"}, (
        F("MemorySize", UINT32),
        F("XResolution", UINT32),
        F("YResolution", UINT32),
        F("BitsPerPixel", UINT32),
        F("VRefresh", UINT32),
        _wchars("ChipType", 256),
        _wchars("DACType", 256),
        _wchars("AdapterString", 256),
        _wchars("BiosString", 256),
        _wchars("DeviceID", 256),
        F("StateFlags", UINT32, HEXINT32),
    ))
    + versions((2,), {15: "Services"}, _SERVICES_V2)
    + versions((3,), {15: "Services"}, _SERVICES_V2 + _strings("LoadOrderGroup", "SvchostGroup"))
    + versions((0, 1, 2), {16: "Power"}, tuple(
        F(name, UINT8) for name in ("S1", "S2", "S3", "S4", "S5", "Pad1", "Pad2", "Pad3")
    ))
    + versions((2,), {17: "Network"}, (
        F("TcbTablePartitions", UINT32),
        F("MaxHashTableSize", UINT32),
        F("MaxUserPort", UINT32),
        F("TcpTimedWaitDelay", UINT32),
    ))
    + versions((0, 1, 2), {21: "IRQ"}, (F("IRQAffinity", UINT64, HEXINT64),) + _IRQ_TAIL)
    + versions((3,), {21: "IRQ"}, (
        F("IRQAffinity", UINT64, HEXINT64), F("IRQGroup", UINT16), F("Reserved", UINT16),
    ) + _IRQ_TAIL)
    + versions((0, 1, 2), {22: "PnP"}, _PNP_LENGTHS + _PNP_NAMES)
    + versions((3,), {22: "PnP"}, _PNP_LENGTHS + _PNP_NAMES + _strings("PdoName"))
    + versions((4,), {22: "PnP"}, _PNP_V4_HEAD + _PNP_V4_STRINGS)
    + versions((5,), {22: "PnP"}, _PNP_V4_HEAD + (
        F("DevStatus", UINT32, HEXINT32), F("DevProblem", UINT32),
    ) + _PNP_V4_STRINGS)
    + versions((2,), {23: "IDEChannel"}, (
        F("TargetID", UINT32),
        F("DeviceType", UINT32, HEXINT32),
        F("DeviceTimingMode", UINT32, HEXINT32),
        F("LocationInformationLen", UINT32),
        F("LocationInformation", UNICODESTRING),
    ))
    + (
        _tdh(18, "OpticalDisk", (
            F("DiskNumber", UINT16),
            F("BusType", UINT16),
            F("DeviceType", UINT16),
            F("MediaType", UINT16),
            F("StartingOffset", UINT64),
            F("Size", UINT64),
            F("NumberOfFreeBlocks", UINT64),
            F("TotalNumberOfBlocks", UINT64),
            F("NextWritableAddress", UINT64),
            F("NumberOfSessions", UINT32),
            F("NumberOfTracks", UINT32),
            F("BytesPerSector", UINT32),
            F("DiscStatus", UINT16),
            F("LastSessionStatus", UINT16),
            F("DriveLetter", UNICODESTRING),
            F("FileSystemName", UNICODESTRING),
            F("DeviceName", ANSISTRING),
            F("ManufacturerName", ANSISTRING),
        )),
        _tdh(24, "NumaNode", (F("NodeCount", UINT32), F("NodeMap", UINT64, HEXINT64, count="NodeCount"))),
        _tdh(25, "Platform", _strings("SystemManufacturer", "SystemProductName", "BiosDate", "BiosVersion")),
        _tdh(26, "ProcessorGroup", (F("GroupCount", UINT32), F("Affinity", POINTER, count="GroupCount"))),
        _tdh(27, "ProcessorNumber", (
            F("ProcessorCount", UINT32), F("ProcessorNumber", UINT32, count="ProcessorCount"),
        )),
        _tdh(28, "DPI", (F("MachineDPI", UINT32), F("UserDPI", UINT32))),
        _tdh(29, "CodeIntegrity", (F("CodeIntegrityInfo", UINT32, HEXINT32),)),
        _tdh(30, "TelemetryConfiguration", (F("MachineId", GUID),)),
        _tdh(33, "DeviceFamily", (F("UAPInfo", UINT64, HEXINT64), F("DeviceFamily", UINT32), F("DeviceForm", UINT32))),
        _tdh(34, "FlightIds", _strings("UpdateId", "FlightIdList")),
        # The recent TDH metadata lists VendorIdentifier before ProcessorIdentifier; the data
        # (Windows 10 19041) has the 128-character identifier first.
        _tdh(35, "Processors", (
            F("ProcessorIndex", UINT32),
            F("FeatureSet", UINT32, HEXINT32),
            F("ProcessorSpeed", UINT32),
            _wchars("ProcessorName", 64),
            _wchars("ProcessorIdentifier", 128),
            _wchars("VendorIdentifier", 16),
        )),
        _tdh(36, "VirtualizationConfigInfo", tuple(
            F(name, UINT8) for name in ("VbsEnabled", "HvciEnabled", "HyperVisorEnabled", "Reserved")
        )),
        _tdh(37, "BootConfigInfo", (
            F("BootFlags", UINT64, HEXINT64),
            F("FirmwareType", UINT32),
            F("SecureBootEnabled", UINT8),
            F("SecureBootCapable", UINT8),
            F("Reserved1", UINT8),
            F("Reserved2", UINT8),
        )),
    ),
)

# --- Classic events merged in by xperf / KernelTraceControl ----------------------------------

SYS_CONFIG = MofClass(
    uuid.UUID("9b79ee91-b5fd-41c0-a243-4248e266e9d0"), KERNEL, "SysConfig", None,
    (
        MofEvent(32, 0, "BuildInfo", (F("InstallDate", FILETIME),) + _strings("BuildLab", "ProductName")),
        MofEvent(33, 0, "SystemPaths", _strings("SystemDirectory", "SystemWindowsDirectory")),
        MofEvent(34, 0, "UnknownVolume", _strings("Value")),
        MofEvent(35, 0, "VolumeMapping", _strings("NtPath", "DosPath")),
        # Unnamed in PerfView. Its 16 bytes repeat SystemConfig/DeviceFamily of the same
        # session (UAPInfo = 10.0.19041.450 packed as 16-bit parts, DeviceFamily 3, DeviceForm 0).
        MofEvent(37, 0, "Opcode(37)", (
            F("UAPInfo", UINT64, HEXINT64), F("DeviceFamily", UINT32), F("DeviceForm", UINT32),
        )),
    ),
)

_IMAGE_KEY = (F("ImageBase", POINTER), F("ProcessId", UINT32))
_PDB_SIGNATURE = _IMAGE_KEY + (F("GuidSig", GUID), F("Age", UINT32), F("PDBFileName", ANSISTRING))

IMAGE_ID = MofClass(
    uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de"), KERNEL_TRACE_CONTROL, "ImageID", None,
    versions((2,), {0: "Info"}, (
        F("ImageBase", POINTER),
        F("ImageSize", SIZET),
        F("ProcessID", UINT32),  # always 0
        F("TimeDateStamp", UINT32),
        F("OriginalFileName", UNICODESTRING),
    ))
    + versions((2,), {32: "None"}, _IMAGE_KEY)
    + versions((2,), {36: "DbgID_RSDS", 37: "DbgID_ILRSDS"}, _PDB_SIGNATURE)
    + versions((2,), {38: "DbgPPDB"}, _IMAGE_KEY + (
        F("TimeDateStamp", UINT32), F("MajorVersion", UINT16), F("MinorVersion", UINT16),
    ))
    + versions((1,), {40: "DbgDeterm"}, _IMAGE_KEY)
    + versions((0,), {64: "FileVersion"}, (F("ImageSize", UINT32), F("TimeDateStamp", UINT32)) + _strings(
        "OrigFileName", "FileDescription", "FileVersion", "BinFileVersion", "VerLanguage",
        "ProductName", "CompanyName", "ProductVersion", "FileId", "ProgramId",
    )),
)

META_DATA = MofClass(
    uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671"), KERNEL_TRACE_CONTROL, "MetaData", None,
    (
        # A TRACE_EVENT_INFO (starting with the provider GUID) describing another provider's event.
        MofEvent(32, 0, "EventInfo", (F("TraceEventInfo", BINARY, length=REST),)),
        MofEvent(33, 0, "EventMapInfo", (F("ProviderId", GUID), F("EventMapInfo", BINARY, length=REST))),
    ),
)

WIN_SAT = MofClass(
    uuid.UUID("ed54dff8-c409-4cf6-bf83-05e1e61a09c4"), KERNEL_TRACE_CONTROL, "WinSat", None,
    # An LZNT1-compressed UTF-16 XML document of UncompressedSize bytes.
    versions((0,), {33: "WinSPR", 35: "Metrics", 37: "SystemConfig"}, (
        F("State", UINT32), F("UncompressedSize", UINT32), F("CompressedXml", BINARY, length=REST),
    )),
)

# --- openetw's own: the kernel symbols a Linux trace's samples hit, recorded when it stops --------

KERNEL_SYMBOLS = MofClass(
    uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6574"), "openetw", "KernelSymbols", None,
    # One kallsyms text symbol a kernel frame fell in: its address and the bytes up to the next symbol.
    versions((0,), {32: "Symbol"}, (F("Address", UINT64, HEXINT64), F("Size", UINT32), F("Name", ANSISTRING))),
)

IMAGE_BUILD_ID = MofClass(
    uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6575"), "openetw", "ImageBuildId", None,
    # After an Image DCStart or Load of an ELF file: the GNU build id its notes held then.
    versions((0,), {32: "BuildId"}, (F("ImageBase", UINT64, HEXINT64), F("ProcessId", UINT32), F("BuildId", BINARY, length=REST))),
)

CONFIG_CLASSES = (SYSTEM_CONFIG, SYS_CONFIG, IMAGE_ID, META_DATA, WIN_SAT, KERNEL_SYMBOLS, IMAGE_BUILD_ID)
