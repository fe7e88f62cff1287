"""Kernel, KernelTraceControl and SysConfig events as TraceEvent's kernel parser shows them.

Where the parser's view differs from the byte layout: process, thread, disk and network events
take their PID/TID from the payload (PERFINFO records carry none: the thread's process is looked
up); images show ``BuildTime`` (their TimeDateStamp as a date) instead of reserved fields;
disk and hard-fault events show elapsed times and the file name of their file key; kernel
paths (``\\Device\\HarddiskVolume2\\``, ``\\SystemRoot\\``) become DOS paths through the
trace's volume mapping. Some fields are read where TraceEvent reads them rather than what the
layout says is there: UdpIp IPv4 events keep version 0's field names over version 1's offsets
(``context`` is PID and size read as one pointer), TcpIp receives read ``connid`` before
``seqnum``, a disk flush takes its thread id from the low half of its response time, ImageID's
``ProcessID`` is read from the upper half of ``ImageSize`` (so it is always 0). Those are
reproduced here on purpose, for the ``perfview`` format only.
"""

from __future__ import annotations

from typing import Any

from openetw.report.perfview import dotnet
from openetw.report.perfview.views import EventInput, View, fields, unix_time

__all__ = ["KERNEL_VIEWS"]

K = "Windows Kernel"
KTC = "KernelTraceControl"

PROCESS_FLAGS = {0: "None", 1: "PackageFullName", 2: "Wow64", 4: "Protected"}
FILE_ATTRIBUTES = {
    0x1: "FILE_ATTRIBUTE_READONLY", 0x2: "FILE_ATTRIBUTE_HIDDEN", 0x4: "FILE_ATTRIBUTE_SYSTEM",
    0x10: "FILE_ATTRIBUTE_DIRECTORY", 0x20: "FILE_ATTRIBUTE_ARCHIVE", 0x40: "FILE_ATTRIBUTE_DEVICE",
    0x80: "FILE_ATTRIBUTE_NORMAL", 0x100: "FILE_ATTRIBUTE_TEMPORARY", 0x200: "FILE_ATTRIBUTE_SPARSE_FILE",
    0x400: "FILE_ATTRIBUTE_REPARSE_POINT", 0x800: "FILE_ATTRIBUTE_COMPRESSED", 0x1000: "FILE_ATTRIBUTE_OFFLINE",
    0x2000: "FILE_ATTRIBUTE_NOT_CONTENT_INDEXED", 0x4000: "FILE_ATTRIBUTE_ENCRYPTED",
}  # fmt: skip
CREATE_DISPOSITION = {
    0: "SUPERSEDE", 1: "OPEN_EXISTING", 2: "CREATE_NEW", 3: "OPEN_ALWAYS", 4: "TRUNCATE_EXISTING", 5: "CREATE_ALWAYS",
}  # fmt: skip
FILE_SHARE = {0: "None", 1: "Read", 2: "Write", 3: "ReadWrite", 4: "Delete"}
IRP_FLAGS = {
    0: "None", 0x1: "Nocache", 0x2: "MountCompletion", 0x4: "SynchronousApi", 0x8: "AssociatedIrp",
    0x10: "BufferedIo", 0x20: "DeallocateBuffer", 0x40: "SynchronousPagingIo", 0x80: "CreateOperation",
    0x100: "ReadOperation", 0x200: "WriteOperation", 0x400: "CloseOperation", 0x800: "DeferIoCompletion",
    0x1000: "ObQueryName", 0x2000: "HoldDeviceQueue",
}  # fmt: skip
IO_PRIORITY = {0: "Notset", 1: "Verylow", 2: "Low", 3: "Normal", 4: "High", 5: "Critical"}
_IRP_FLAGS_MASK = 0x1FFFF


def _payload(name: str) -> Any:
    def get(data: EventInput) -> Any:
        value = data.get(name)
        return dotnet.as_signed(value, 32) if isinstance(value, int) else None

    return get


def _minus_one(data: EventInput) -> int:
    return -1


def _thread_owner(tid_source: Any) -> Any:
    """PID of the process owning the thread whose id ``tid_source`` gives (-1 when unknown)."""

    def get(data: EventInput) -> int:
        tid = tid_source(data)
        if tid is None or data.state is None:
            return -1
        pid = data.state.thread_process(tid & 0xFFFFFFFF, data.record)
        return -1 if pid is None else pid

    return get


def _raw_u32(offset: int) -> Any:
    def get(data: EventInput) -> int | None:
        payload = data.record.user_data
        return int.from_bytes(payload[offset : offset + 4], "little") if offset + 4 <= len(payload) else None

    return get


def _dos_path(source: str) -> Any:
    def get(data: EventInput) -> str:
        name = data.get(source)
        if not isinstance(name, str):
            return ""
        return data.state.dos_path(name) if data.state is not None else name

    return get


def _key_file_name(data: EventInput) -> str:
    state = data.state
    if state is None:
        return ""
    return state.dos_path(state.file_name(data.get("FileKey"), data.record))


def _qpc_msec(data: EventInput, ticks: Any) -> float | None:
    clock = data.record.context.clock
    if not isinstance(ticks, int) or clock.perf_freq <= 0:
        return None
    return ticks * 1000.0 / clock.perf_freq


def _disk_elapsed(data: EventInput) -> float | None:
    return _qpc_msec(data, data.get("HighResResponseTime"))


def _disk_service(data: EventInput) -> float | None:
    elapsed = _disk_elapsed(data)
    state = data.state
    if elapsed is None or state is None:
        return elapsed
    return state.shown_disk_service_msec(data.record, data.get("DiskNumber"), elapsed)


def _hard_fault_elapsed(data: EventInput) -> float | None:
    start = data.get("InitialTime")
    return _qpc_msec(data, data.record.timestamp - start) if isinstance(start, int) else None


def _build_time(data: EventInput) -> Any:
    return unix_time(data.get("TimeDateStamp"))


def _irp_flags(data: EventInput) -> int:
    flags = data.get("IrpFlags")
    return flags & _IRP_FLAGS_MASK if isinstance(flags, int) else 0


def _io_priority(data: EventInput) -> int:
    flags = data.get("IrpFlags")
    return (flags >> 17) & 7 if isinstance(flags, int) else 0


def _thread_parent(header: str) -> Any:
    def get(data: EventInput) -> int:
        record = data.record
        if record.opcode != 1:  # only a thread start knows who created it
            return -1
        return dotnet.as_signed(getattr(record, header), 32)

    return get


def _service_process_name(data: EventInput) -> str:
    """The name of the service's process as the trace knows it (the payload's when it does not)."""
    pid = data.get("ProcessID")
    state = data.state
    found = state.context.process_name(pid, data.record.filetime) if state is not None and isinstance(pid, int) else None
    if found:
        return found
    name = data.get("ProcessName")
    return name if isinstance(name, str) else ""


def _create_options(data: EventInput) -> int:
    options = data.get("CreateOptions")
    return options & 0xFFFFFF if isinstance(options, int) else 0


def _create_disposition(data: EventInput) -> int:
    options = data.get("CreateOptions")
    return options >> 24 if isinstance(options, int) else 0


def _utc_offset(data: EventInput) -> int:
    zone = data.get("TimeZoneInformation")
    if isinstance(zone, (bytes, bytearray)) and len(zone) >= 4:
        return int.from_bytes(zone[:4], "little", signed=True)
    return 0


def _image_tid(data: EventInput) -> int | None:
    """Image loads keep the header's thread; unloads and rundown show none."""
    return None if data.record.opcode == 10 else -1


_PROCESS = View(
    fields(
        "ProcessID:i ParentID:i ImageFileName:s PageDirectoryBase:a Flags:F SessionID:i ExitStatus:i "
        "UniqueProcessKey:a CommandLine:s PackageFullName:s ApplicationID:s"
    ),
    {"Flags": PROCESS_FLAGS},
    pid=_payload("ProcessID"),
    tid=_minus_one,
)
_PROCESS_COUNTERS = View(
    fields(
        "ProcessID:i MemoryCount:i HandleCount:i PeakVirtualSize:l PeakWorkingSetSize:l PeakPagefileUsage:l "
        "QuotaPeakPagedPoolUsage:l QuotaPeakNonPagedPoolUsage:l VirtualSize:l WorkingSetSize:l PagefileUsage:l "
        "QuotaPagedPoolUsage:l QuotaNonPagedPoolUsage:l PrivatePageCount:l"
    ),
    pid=_payload("ProcessID"),
    tid=_minus_one,
)
_THREAD = View(
    fields(
        "StackBase:a StackLimit:a UserStackBase:a UserStackLimit:a StartAddr:a Win32StartAddr:a TebBase:a "
        "SubProcessTag:i BasePriority:i PagePriority:i IoPriority:i ThreadFlags:i ThreadName:s ParentThreadID:i "
        "ParentProcessID:i",
        ParentThreadID=("i", _thread_parent("tid")),
        ParentProcessID=("i", _thread_parent("pid")),
    ),
    pid=_payload("ProcessId"),
    tid=_payload("TThreadId"),
)
_IMAGE = View(
    fields(
        "ImageBase:a ImageSize:i ImageChecksum:i TimeDateStamp:i DefaultBase:a BuildTime:d FileName:s",
        BuildTime=("d", _build_time),
        FileName=("s", _dos_path("FileName")),
    ),
    pid=_payload("ProcessId"),
    tid=_image_tid,
)
_DISK_IO = View(
    fields(
        "DiskNumber:i IrpFlags:F Priority:e TransferSize:i ByteOffset:l Irp:a ElapsedTimeMSec:f "
        "DiskServiceTimeMSec:f FileKey:a FileName:s",
        IrpFlags=("F", _irp_flags),
        Priority=("e", _io_priority),
        ElapsedTimeMSec=("f", _disk_elapsed),
        DiskServiceTimeMSec=("f", _disk_service),
        FileName=("s", _key_file_name),
    ),
    {"IrpFlags": IRP_FLAGS, "Priority": IO_PRIORITY},
    pid=_thread_owner(_payload("IssuingThreadId")),
    tid=_payload("IssuingThreadId"),
)
_DISK_FLUSH = View(
    fields(
        "DiskNumber:i IrpFlags:F Irp:a ElapsedTimeMSec:f",
        IrpFlags=("F", _irp_flags),
        ElapsedTimeMSec=("f", _disk_elapsed),
    ),
    {"IrpFlags": IRP_FLAGS},
    pid=_thread_owner(_raw_u32(8)),
    tid=_raw_u32(8),
)
_IRP_ONLY = View(fields("Irp:a"))
_GROUP_MASKS = View(fields(" ".join(f"GroupMask{i}:i" for i in range(1, 9)) + " KernelEventVersion:i"))
_NO_FIELDS = View(())
_SAMPLE = View(
    fields(
        "InstructionPointer:a ProcessorNumber:i Priority:i ExecutingDPC:b ExecutingISR:b Rank:i Count:i",
        ProcessorNumber=("i", lambda data: data.record.cpu),
        Priority=("i", lambda data: (data.get("Reserved", 0) & 0xFF) >> 3),
        ExecutingDPC=("b", lambda data: data.get("Reserved", 0) & 0x1),
        ExecutingISR=("b", lambda data: data.get("Reserved", 0) & 0x2),
        Rank=("i", lambda data: (data.get("Reserved", 0) >> 2) & 0x1),
    ),
    pid=_thread_owner(_payload("ThreadId")),
    tid=_payload("ThreadId"),
)
_SAMPLE_INTERVAL = View(fields("SampleSource:i NewInterval:i OldInterval:i"))
_HARD_FAULT = View(
    fields(
        "ElapsedTimeMSec:f ReadOffset:l VirtualAddress:a FileKey:a ByteCount:i FileName:s",
        ElapsedTimeMSec=("f", _hard_fault_elapsed),
        FileName=("s", _key_file_name),
    ),
    pid=_thread_owner(_payload("TThreadId")),
    tid=_payload("TThreadId"),
)
_TCP_SEND_V6 = View(
    fields(
        "size@4u4:i daddr:s saddr:s dport@40b2:i sport@42b2:i startime@44u4:i endtime@48u4:i seqnum@52u4:i "
        "connid@56p:a"
    ),
    pid=_payload("PID"),
    tid=_minus_one,
)
_TCP_RECV_V6 = View(
    fields("size@4u4:i daddr:s saddr:s dport@40b2:i sport@42b2:i connid@44p:a seqnum@48+1u4:i"),
    pid=_payload("PID"),
    tid=_minus_one,
)
_UDP_V4 = View(
    fields("context@0p:a saddr:s sport@18b2:i size@4u4:i daddr:s dport@16b2:i dsize@20u4:i"),
    pid=_payload("PID"),
    tid=_minus_one,
)
_UDP_V6 = View(
    fields("size@4u4:i dport@40b2:i sport@42b2:i seqnum@44u4:i connid@48p:a"),
    pid=_payload("PID"),
    tid=_minus_one,
)

KERNEL_FILE_CREATE = View(
    fields(
        "IrpPtr=Irp:a FileObject:a CreateOptions:F CreateDisposition:e FileAttributes=CreateAttributes:F "
        "ShareAccess:F FileName:s",
        CreateOptions=("F", _create_options),
        CreateDisposition=("e", _create_disposition),
        FileName=("s", _dos_path("FileName")),
    ),
    {"CreateOptions": FILE_ATTRIBUTES, "CreateDisposition": CREATE_DISPOSITION, "FileAttributes": FILE_ATTRIBUTES,
     "ShareAccess": FILE_SHARE},
)

KERNEL_VIEWS: dict[str, View] = {
    "Microsoft-Windows-Kernel-File/Create": KERNEL_FILE_CREATE,
    f"{K}/EventTrace": View(fields(
        "BufferSize:i Version:i ProviderVersion:i NumberOfProcessors:i EndTime:d TimerResolution:i MaxFileSize:i "
        "LogFileMode:i BuffersWritten:i StartBuffers:i PointerSize:i EventsLost:i CPUSpeed:i BootTime:d PerfFreq:l "
        "StartTime:d ReservedFlags:i BuffersLost:i SessionName=SessionNameString:s LogFileName=LogFileNameString:s "
        "UtcOffsetMinutes:i",
        UtcOffsetMinutes=("i", _utc_offset),
    )),
    f"{K}/EventTrace/Extension": _GROUP_MASKS,
    f"{K}/EventTrace/EndExtension": _GROUP_MASKS,
    f"{K}/EventTrace/RundownComplete": _NO_FIELDS,
    **{f"{K}/Process/{name}": _PROCESS for name in ("Start", "Stop", "DCStart", "DCStop", "Defunct")},
    f"{K}/Process/PerfCtr": _PROCESS_COUNTERS,
    f"{K}/Process/PerfCtrRundown": _PROCESS_COUNTERS,
    **{f"{K}/Thread/{name}": _THREAD for name in ("Start", "Stop", "DCStart", "DCStop")},
    **{f"{K}/Image/{name}": _IMAGE for name in ("Load", "Unload", "DCStart", "DCStop")},
    f"{K}/DiskIO/Read": _DISK_IO,
    f"{K}/DiskIO/Write": _DISK_IO,
    f"{K}/DiskIO/ReadInit": _IRP_ONLY,
    f"{K}/DiskIO/WriteInit": _IRP_ONLY,
    f"{K}/DiskIO/FlushInit": _IRP_ONLY,
    f"{K}/DiskIO/FlushBuffers": _DISK_FLUSH,
    f"{K}/PerfInfo/Sample": _SAMPLE,
    f"{K}/PerfInfo/CollectionStart": _SAMPLE_INTERVAL,
    f"{K}/PerfInfo/CollectionEnd": _SAMPLE_INTERVAL,
    f"{K}/PerfInfo/SetInterval": _SAMPLE_INTERVAL,
    f"{K}/Memory/HardFault": _HARD_FAULT,
    f"{K}/TcpIp/SendIPV6": _TCP_SEND_V6,
    f"{K}/TcpIp/RecvIPV6": _TCP_RECV_V6,
    f"{K}/UdpIp/Send": _UDP_V4,
    f"{K}/UdpIp/Recv": _UDP_V4,
    f"{K}/UdpIp/SendIPV6": _UDP_V6,
    f"{K}/UdpIp/RecvIPV6": _UDP_V6,
    f"{K}/SystemConfig/CPU": View(fields(
        "MHz:i NumberOfProcessors:i MemSize:i PageSize:i AllocationGranularity:i ComputerName:s DomainName:s "
        "HyperThreadingFlag:a"
    )),
    f"{K}/SystemConfig/PnP": View(fields("DeviceID:s DeviceDescription:s FriendlyName:s PdoName:s ServiceName:s")),
    f"{K}/SystemConfig/Services": View(
        fields(
            "ServiceName:s DisplayName:s ProcessName:s ProcessID:i ServiceState:i SubProcessTag:i",
            ProcessName=("s", _service_process_name),
        ),
        pid=_payload("ProcessID"),
    ),
    f"{K}/SystemConfig/NIC": View(fields(
        "PhysicalAddrLen:i PhysicalAddr:l Ipv4Index:i Ipv6Index:i NICDescription:s IpAddresses:s DnsServerAddresses:s"
    )),
    f"{K}/SystemConfig/LogDisk": View(fields(
        "StartOffset:l PartitionSize:l DiskNumber:i Size:i DriveType:i DriveLetterString:s PartitionNumber:i "
        "SectorsPerCluster:i BytesPerSector:i NumberOfFreeClusters:l TotalNumberOfClusters:l FileSystem:s VolumeExt:i"
    )),
    f"{K}/SystemConfig/PhyDisk": View(fields(
        "DiskNumber:i BytesPerSector:i SectorsPerTrack:i TracksPerCylinder:i Cylinders:l SCSIPort:i SCSIPath:i "
        "SCSITarget:i SCSILun:i Manufacturer:s PartitionCount:i WriteCacheEnabled:i BootDriveLetter:s Spare:s"
    )),
    f"{K}/SystemConfig/Power": View(fields("S1:i S2:i S3:i S4:i S5:i")),
    f"{K}/SystemConfig/IDEChannel": View(fields(
        "TargetID:i DeviceType:i DeviceTimingMode:i LocationInformationLen:i LocationInformation:s"
    )),
    f"{K}/SystemConfig/Network": View(fields("TcbTablePartitions:i MaxHashTableSize:i MaxUserPort:i TcpTimedWaitDelay:i")),
    f"{K}/SysConfig/BuildInfo": View(fields("InstallDate:d BuildLab:s ProductName:s")),
    f"{K}/SysConfig/SystemPaths": View(fields("SystemDirectory:s SystemWindowsDirectory:s")),
    f"{K}/SysConfig/UnknownVolume": View(fields("Value:s")),
    f"{K}/SysConfig/VolumeMapping": View(fields("NtPath:s DosPath:s")),
    f"{K}/SysConfig/Opcode(37)": _NO_FIELDS,
    f"{KTC}/ImageID": View(fields(
        "ImageBase:a ImageSize:i ProcessID@8+1u4:i TimeDateStamp:i BuildTime:d OriginalFileName:s",
        BuildTime=("d", _build_time),
    )),
    f"{KTC}/ImageID/None": _NO_FIELDS,
    f"{KTC}/ImageID/DbgID_RSDS": View(fields("ImageBase:a GuidSig:g Age:i PDBFileName:s")),
    f"{KTC}/ImageID/DbgID_ILRSDS": View(fields("ImageBase:a GuidSig:g Age:i PDBFileName:s")),
    f"{KTC}/ImageID/FileVersion": View(fields(
        "ImageSize:i TimeDateStamp:i BuildTime:d OrigFileName:s FileDescription:s FileVersion:s BinFileVersion:s "
        "VerLanguage:s ProductName:s CompanyName:s ProductVersion:s FileId:s ProgramId:s",
        BuildTime=("d", _build_time),
    )),
    f"{KTC}/MetaData/EventInfo": _NO_FIELDS,
    f"{KTC}/MetaData/EventMapInfo": _NO_FIELDS,
}
