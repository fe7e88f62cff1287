"""Layouts of the NT Kernel Logger's core classes: EventTrace, Process, Thread, Image,
PageFault (PerfView's "Memory"), PerfInfo and StackWalk.

Field names follow PerfView where it shows the raw field (``ProcessID``, ``PageDirectoryBase``,
``FileKey``, ...) and the kernel's MOF/TDH names elsewhere. Sources: the Vista kernel MOF and
TraceEvent's kernel parser (microsoft/perfview), Microsoft Learn's MOF class pages, TDH
metadata of recent Windows builds, checked against the sample traces in the corpus.
"""

from __future__ import annotations

import uuid

from openetw.tdh.mof_kernel_types import (
    ANSISTRING,
    BINARY,
    GUID,
    HEXINT8,
    HEXINT16,
    HEXINT32,
    HEXINT64,
    INT8,
    INT32,
    INT64,
    NTSTATUS,
    POINTER,
    REST,
    SIZET,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    UNICODESTRING,
    WBEMSID,
    MofClass,
    MofEvent,
    versions,
)
from openetw.tdh.mof_kernel_types import (
    MofField as F,
)

KERNEL = "Windows Kernel"
TDH_KERNEL = "MSNT_SystemTrace"
"""Provider name PerfView shows for kernel events its own parser does not define."""

# --- EventTrace (group 0): the logfile header and session bookkeeping -----------------------

_GROUP_MASKS = tuple(F(f"GroupMask{i}", UINT32, HEXINT32) for i in range(1, 9))

_HEADER = (
    F("BufferSize", UINT32),
    F("Version", UINT32, HEXINT32),
    F("ProviderVersion", UINT32),
    F("NumberOfProcessors", UINT32),
    F("EndTime", INT64),
    F("TimerResolution", UINT32),
    F("MaxFileSize", UINT32),
    F("LogFileMode", UINT32, HEXINT32),
    F("BuffersWritten", UINT32),
    F("StartBuffers", UINT32),
    F("PointerSize", UINT32),
    F("EventsLost", UINT32),
    F("CPUSpeed", UINT32),
    # Two pointer-sized fields; small integers rather than real pointers since Windows 7.
    F("LoggerName", POINTER),
    F("LogFileName", POINTER),
    # TIME_ZONE_INFORMATION (172 bytes: Bias i32 first) plus 4 bytes of padding on both widths.
    F("TimeZoneInformation", BINARY, length=176),
    F("BootTime", INT64),
    F("PerfFreq", INT64),
    F("StartTime", INT64),
    F("ReservedFlags", UINT32, HEXINT32),
    F("BuffersLost", UINT32),
    # PerfView shows these two as SessionName and LogFileName.
    F("SessionNameString", UNICODESTRING),
    F("LogFileNameString", UNICODESTRING),
)

EVENT_TRACE = MofClass(
    uuid.UUID("68fdd900-4a3e-11d1-84f4-0000f80464e3"), KERNEL, "EventTrace", 0x00,
    versions((0, 1, 2), {0: "Header"}, _HEADER)
    + versions((0, 1), {5: "Extension", 32: "EndExtension"}, _GROUP_MASKS)
    + versions((2,), {5: "Extension", 32: "EndExtension"},
               _GROUP_MASKS + (F("KernelEventVersion", UINT32, HEXINT32),))
    + versions((0, 1, 2), {8: "RundownComplete"}, ())
    + (
        MofEvent(64, 2, "DbgIdRSDS", (F("Guid", GUID), F("Age", UINT32), F("PdbName", ANSISTRING)),
                 provider_name=TDH_KERNEL),
        MofEvent(66, 2, "BuildInfo", (F("BuildString", ANSISTRING),), provider_name=TDH_KERNEL),
        MofEvent(67, 2, "ProviderBinaryPath", (
            F("GuidCount", UINT32), F("Guid", GUID, count="GuidCount"), F("BinaryPath", UNICODESTRING),
        ), provider_name=TDH_KERNEL),
        MofEvent(80, 2, "PartitionInfoExtension", (
            F("EventVersion", UINT16),
            F("Reserved", UINT16),
            F("PartitionType", UINT32),
            F("QpcOffsetFromRoot", INT64),
            F("PartitionId", GUID),
            F("ParentId", GUID),
        ), provider_name=TDH_KERNEL),
        MofEvent(82, 2, "LastDroppedTimes", (
            F("TimeStampCount", UINT32), F("Padding", UINT32), F("TimeStamp", UINT64, count="TimeStampCount"),
        ), provider_name=TDH_KERNEL),
    ),
)

# --- Process (group 3) -----------------------------------------------------------------------

_PROCESS_EVENTS = {1: "Start", 2: "Stop", 3: "DCStart", 4: "DCStop"}
_PROCESS_WITH_DEFUNCT = {**_PROCESS_EVENTS, 39: "Defunct"}

_PROCESS_V0 = (
    F("ProcessID", POINTER),
    F("ParentID", POINTER),
    F("UserSID", WBEMSID),
    F("ImageFileName", ANSISTRING),
)
_PROCESS_V1 = (
    F("PageDirectoryBase", POINTER),
    F("ProcessID", UINT32),
    F("ParentID", UINT32),
    F("SessionID", UINT32),
    F("ExitStatus", INT32),
    F("UserSID", WBEMSID),
    F("ImageFileName", ANSISTRING),
)
_PROCESS_HEAD = (
    F("UniqueProcessKey", POINTER),
    F("ProcessID", UINT32),
    F("ParentID", UINT32),
    F("SessionID", UINT32),
    F("ExitStatus", INT32),
)
_PROCESS_V2 = _PROCESS_HEAD + (
    F("UserSID", WBEMSID),
    F("ImageFileName", ANSISTRING),
    F("CommandLine", UNICODESTRING),
)
# V3 adds the page directory (TDH: DirectoryTableBase; PerfView: PageDirectoryBase).
_PROCESS_V3 = _PROCESS_HEAD + (F("PageDirectoryBase", POINTER),) + _PROCESS_V2[5:]
_PROCESS_V4 = _PROCESS_HEAD + (
    F("PageDirectoryBase", POINTER),
    F("Flags", UINT32, HEXINT32),
    F("UserSID", WBEMSID),
    F("ImageFileName", ANSISTRING),
    F("CommandLine", UNICODESTRING),
    F("PackageFullName", UNICODESTRING),
    F("ApplicationID", UNICODESTRING),
)
_PROCESS_COUNTERS = (
    F("ProcessID", UINT32),
    F("MemoryCount", UINT32),  # TDH: PageFaultCount
    F("HandleCount", UINT32),
    F("Reserved", UINT32),
) + tuple(
    F(name, SIZET)
    for name in (
        "PeakVirtualSize", "PeakWorkingSetSize", "PeakPagefileUsage", "QuotaPeakPagedPoolUsage",
        "QuotaPeakNonPagedPoolUsage", "VirtualSize", "WorkingSetSize", "PagefileUsage",
        "QuotaPagedPoolUsage", "QuotaNonPagedPoolUsage", "PrivatePageCount",
    )
)

PROCESS = MofClass(
    uuid.UUID("3d6fa8d0-fe05-11d0-9dda-00c04fd7ba7c"), KERNEL, "Process", 0x03,
    versions((0,), _PROCESS_EVENTS, _PROCESS_V0)
    + versions((1,), _PROCESS_EVENTS, _PROCESS_V1)
    + versions((2,), _PROCESS_WITH_DEFUNCT, _PROCESS_V2)
    + versions((3,), _PROCESS_WITH_DEFUNCT, _PROCESS_V3)
    + versions((4,), _PROCESS_WITH_DEFUNCT, _PROCESS_V4)
    # V5 is logged for Defunct only: the V4 layout then the exit time.
    + (MofEvent(39, 5, "Defunct", _PROCESS_V4 + (F("ExitTime", INT64),)),)
    + versions((2,), {32: "PerfCtr", 33: "PerfCtrRundown"}, _PROCESS_COUNTERS)
    + (
        MofEvent(11, 2, "Terminate", (F("ProcessId", UINT32),), provider_name=TDH_KERNEL),
        MofEvent(35, 2, "InSwap", (F("DirectoryTableBase", POINTER), F("ProcessId", UINT32)),
                 provider_name=TDH_KERNEL),
    ),
)

# --- Thread (group 5) ------------------------------------------------------------------------

_THREAD_EVENTS = {1: "Start", 2: "Stop", 3: "DCStart", 4: "DCStop"}
_THREAD_IDS = (F("ProcessId", UINT32), F("TThreadId", UINT32))
_THREAD_STACKS = tuple(
    F(name, POINTER) for name in ("StackBase", "StackLimit", "UserStackBase", "UserStackLimit")
)
_THREAD_V2 = _THREAD_IDS + _THREAD_STACKS + (
    F("StartAddr", POINTER),
    F("Win32StartAddr", POINTER),
    F("TebBase", POINTER),
    F("SubProcessTag", UINT32, HEXINT32),
)
# From V3 the pointer after the stacks is the thread's affinity (TDH name "Affinity"); PerfView
# still calls it StartAddr and shows e.g. StartAddr=0x000000ff, so the name is kept.
_THREAD_PRIORITIES = (
    F("BasePriority", UINT8),
    F("PagePriority", UINT8),
    F("IoPriority", UINT8),
    F("ThreadFlags", UINT8, HEXINT8),
)
# Windows 8 logs V3 without ThreadName; Windows 10 (18362) logs V3 with it.
_THREAD_V3 = _THREAD_V2 + _THREAD_PRIORITIES + (F("ThreadName", UNICODESTRING, optional=True),)
_THREAD_V4 = _THREAD_V2 + _THREAD_PRIORITIES + (F("ThreadName", UNICODESTRING),)

_CSWITCH = (
    F("NewThreadID", UINT32),
    F("OldThreadID", UINT32),
    F("NewThreadPriority", INT8),
    F("OldThreadPriority", INT8),
    F("PreviousCState", UINT8),
    F("SpareByte", INT8),
    F("OldThreadWaitReason", INT8),
    F("OldThreadWaitMode", INT8),  # TDH V3+: ThreadFlags
    F("OldThreadState", INT8),
    F("OldThreadWaitIdealProcessor", INT8),
    F("NewThreadWaitTime", UINT32),
    F("Reserved", UINT32),
)
_PRIORITY_CHANGE = (F("ThreadId", UINT32), F("OldPriority", UINT8), F("NewPriority", UINT8), F("Reserved", UINT16))

THREAD = MofClass(
    uuid.UUID("3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c"), KERNEL, "Thread", 0x05,
    versions((0,), _THREAD_EVENTS, (F("TThreadId", UINT32), F("ProcessId", UINT32)))
    + versions((1,), {1: "Start", 3: "DCStart"}, _THREAD_IDS + _THREAD_STACKS + (
        F("StartAddr", POINTER), F("Win32StartAddr", POINTER), F("WaitMode", INT8),
    ))
    + versions((1,), {2: "Stop", 4: "DCStop"}, _THREAD_IDS)
    + versions((2,), _THREAD_EVENTS, _THREAD_V2)
    + versions((3,), _THREAD_EVENTS, _THREAD_V3)
    + versions((4,), _THREAD_EVENTS, _THREAD_V4)
    + versions((2, 3, 4), {36: "CSwitch"}, _CSWITCH)
    + versions((2,), {37: "CompCS"}, ())
    + versions((2, 3), {50: "ReadyThread"}, (
        F("AwakenedThreadID", UINT32),
        F("AdjustReason", INT8),
        F("AdjustIncrement", INT8),
        F("Flags", INT8),
        F("Reserved", INT8),
    ), task_name="Dispatcher")
    + versions((2, 3), {62: "Enqueue"}, (F("Entry", POINTER), F("ThreadId", UINT32)))
    + versions((2, 3), {63: "Dequeue"}, (
        F("ThreadId", UINT32), F("Count", UINT32), F("Entries", POINTER, count="Count"),
    ))
    + versions((2, 3), {72: "SetName"}, (F("ProcessId", UINT32), F("ThreadId", UINT32), F("ThreadName", UNICODESTRING)))
    + versions((3,), {48: "SetPriority", 49: "SetBasePriority", 51: "SetPagePriority", 52: "SetIoPriority"},
               _PRIORITY_CHANGE, provider_name=TDH_KERNEL)
    + (
        MofEvent(53, 2, "ThreadAffinity", (
            F("Affinity", POINTER), F("ThreadId", UINT32), F("Group", UINT16), F("Reserved", UINT16),
        ), provider_name=TDH_KERNEL),
        MofEvent(57, 2, "WorkerThread", (
            F("TThreadId", UINT32), F("StartTime", INT64), F("ThreadRoutine", POINTER),
        ), provider_name=TDH_KERNEL),
    ),
)

# --- Image (group 0x14; also logged as HookId 0x030A) ---------------------------------------

_IMAGE_EVENTS = {10: "Load", 2: "Unload", 3: "DCStart", 4: "DCStop"}
_IMAGE_HEAD = (
    F("ImageBase", POINTER),
    F("ImageSize", SIZET),
    F("ProcessId", UINT32),
    F("ImageChecksum", UINT32),
    F("TimeDateStamp", UINT32),
)
_IMAGE_TAIL = (
    F("DefaultBase", POINTER),
    F("Reserved1", UINT32),
    F("Reserved2", UINT32),
    F("Reserved3", UINT32),
    F("Reserved4", UINT32),
    F("FileName", UNICODESTRING),
)
_IMAGE_V2 = _IMAGE_HEAD + (F("Reserved0", UINT32),) + _IMAGE_TAIL
_IMAGE_V3 = _IMAGE_HEAD + (F("SignatureLevel", UINT8), F("SignatureType", UINT8), F("Reserved0", UINT16)) + _IMAGE_TAIL

IMAGE = MofClass(
    uuid.UUID("2cb15d1d-5fc1-11d2-abe1-00a0c911f518"), KERNEL, "Image", 0x14,
    (
        MofEvent(10, 0, "Load", (
            F("BaseAddress", POINTER), F("ModuleSize", UINT32), F("ImageFileName", UNICODESTRING),
        )),
        MofEvent(10, 1, "Load", (
            F("ImageBase", POINTER), F("ImageSize", SIZET), F("ProcessId", UINT32),
            F("FileName", UNICODESTRING),
        )),
    )
    + versions((2,), _IMAGE_EVENTS, _IMAGE_V2)
    + versions((3,), _IMAGE_EVENTS, _IMAGE_V3)
    + versions((2, 3), {33: "KernelBase"}, (F("ImageBase", POINTER),), provider_name=TDH_KERNEL)
    + versions((2, 3), {34: "HypercallPage"}, (F("HypercallPageVa", POINTER),), provider_name=TDH_KERNEL),
)

# --- PageFault (group 2; PerfView's task "Memory") -------------------------------------------

_FAULTS = {
    10: "TransitionFault", 11: "DemandZeroFault", 12: "CopyOnWrite",
    13: "GuardMemory", 14: "HardMemory", 15: "AccessViolation",
}

PAGE_FAULT = MofClass(
    uuid.UUID("3d6fa8d3-fe05-11d0-9dda-00c04fd7ba7c"), KERNEL, "Memory", 0x02,
    versions((2,), _FAULTS, (F("VirtualAddress", POINTER), F("ProgramCounter", POINTER)))
    + versions((2,), {32: "HardFault"}, (
        F("InitialTime", INT64),  # QPC value when the read started
        F("ReadOffset", UINT64, HEXINT64),
        F("VirtualAddress", POINTER),
        F("FileKey", POINTER),  # TDH: FileObject
        F("TThreadId", UINT32),
        F("ByteCount", UINT32),
    ))
    + versions((2,), {98: "Alloc", 99: "Free"}, (
        F("BaseAddr", POINTER),
        F("Length", SIZET),
        F("ProcessId", UINT32),
        F("Flags", UINT32, HEXINT32),
    ), task_name="VirtualMem")
    + versions((2,), {100: "HeapRangeRundown"}, (
        F("HeapHandle", POINTER), F("HRFlags", UINT32, HEXINT32), F("HRPid", UINT32),
        F("HRRangeCount", UINT32),
    ))
    + versions((2,), {101: "HeapRangeCreate"}, (
        F("HeapHandle", POINTER), F("FirstRangeSize", SIZET), F("HRCreateFlags", UINT32, HEXINT32),
    ))
    + versions((2,), {102: "HeapRangeReserve", 103: "HeapRangeRelease"}, (
        F("HeapHandle", POINTER), F("HeapRangeAddress", POINTER), F("HeapRangeSize", SIZET),
    ))
    + versions((2,), {104: "HeapRangeDestroy"}, (F("HeapHandle", POINTER),))
    + versions((2,), {105: "ImageLoadBacked"}, (
        F("FileKey", POINTER), F("DeviceChar", UINT32, HEXINT32),
        F("FileChar", UINT16, HEXINT16), F("LoadFlags", UINT16, HEXINT16),
    )),
)

# --- PerfInfo (group 0x0F): samples, system calls, interrupts, DPCs --------------------------

_INTERVAL = (F("SampleSource", UINT32), F("NewInterval", UINT32), F("OldInterval", UINT32))
_DPC = (F("InitialTime", INT64), F("Routine", POINTER))
# Recent TDH metadata types Vector as u16 at offset 13 (the Vista MOF had u8 Vector, u16 Reserved).
_ISR = _DPC + (F("ReturnValue", UINT8), F("Vector", UINT16), F("Reserved", UINT8))

PERF_INFO = MofClass(
    uuid.UUID("ce1dbfb4-137e-4da6-87b0-3f59aa102cbc"), KERNEL, "PerfInfo", 0x0F,
    versions((2, 3), {46: "Sample"}, (
        # Reserved holds PerfView's ExecutingDPC/ExecutingISR/Priority bits and Rank.
        F("InstructionPointer", POINTER), F("ThreadId", UINT32), F("Count", UINT16), F("Reserved", UINT16),
    ))
    + versions((2, 3), {47: "PMCSample"}, (
        F("InstructionPointer", POINTER), F("ThreadId", UINT32), F("ProfileSource", UINT16),
        F("Reserved", UINT16),
    ))
    + versions((2,), {72: "SetInterval", 73: "CollectionStart", 74: "CollectionEnd"}, _INTERVAL)
    + versions((3,), {72: "SetInterval", 73: "CollectionStart", 74: "CollectionEnd"},
               _INTERVAL + (F("SourceName", UNICODESTRING),))
    + versions((2, 3), {51: "SysClEnter"}, (F("SysCallAddress", POINTER),))
    + versions((2, 3), {52: "SysClExit"}, (F("SysCallNtStatus", UINT32, NTSTATUS),))
    + versions((2, 3), {67: "ISR"}, _ISR)
    + versions((2, 3), {50: "ISR"}, _ISR + (F("MessageNumber", UINT32),))
    + versions((2, 3), {66: "ThreadedDPC", 68: "DPC", 69: "TimerDPC"}, _DPC)
    + versions((2, 3), {58: "DebuggerEnabled"}, ()),
)

# --- StackWalk (group 0x18) ------------------------------------------------------------------

_STACK_OF = (F("EventTimeStamp", INT64), F("StackProcess", UINT32), F("StackThread", UINT32))

STACK_WALK = MofClass(
    uuid.UUID("def2fe46-7bd6-4b80-bd94-f57fe20d0ce3"), KERNEL, "StackWalk", 0x18,
    # Stack1..StackN: as many return addresses as the payload holds (96 at most).
    versions((0, 1, 2), {32: "Stack"}, _STACK_OF + (F("Stack", POINTER, count=REST),))
    + versions((2,), {35: "KeyDelete", 36: "KeyRundown"}, (
        F("StackKey", POINTER), F("Stack", POINTER, count=REST),
    ))
    + versions((2,), {37: "StackKeyKernel", 38: "StackKeyUser"}, _STACK_OF + (F("StackKey", POINTER),)),
)

CORE_CLASSES = (EVENT_TRACE, PROCESS, THREAD, IMAGE, PAGE_FAULT, PERF_INFO, STACK_WALK)
