""".NET runtime events as TraceEvent's hand-written CLR parsers show them.

The parsers follow the runtime's manifest but not everywhere: every integer is an ``int`` or a
``long`` (``ClrInstanceID=8``, ``AllocationAmount64=109,120`` although the manifest asks for
hex), only some 64-bit values are addresses, some fields move (``GC/Start`` shows ``Reason``
before ``Depth``), some are renamed (``Promoted`` for ``Bytes``), some computed
(``ModuleILFileName``, the heap totals of ``GC/HeapStats``, a finalized object's type name
from earlier ``BulkType`` events), and fields of versions an event does not have show as the
type's default or, for a few classes, empty. Enumerations without a manifest map use
TraceEvent's own enums (below).
"""

from __future__ import annotations

import ntpath
from typing import Any

from openetw.report.perfview.views import EventInput, View, fields

__all__ = ["CLR_VIEWS", "CLR_EVENT_NAMES"]

RUNTIME = "Microsoft-Windows-DotNETRuntime"
RUNDOWN = "Microsoft-Windows-DotNETRuntimeRundown"
PRIVATE = "Microsoft-Windows-DotNETRuntimePrivate"

# Events TraceEvent names differently from the manifest's task/opcode (or that the manifests
# in hand do not define): (provider, event id or manifest name) -> name.
CLR_EVENT_NAMES: dict[tuple[str, int | str], str] = {
    (RUNTIME, 21): "GC/BulkSurvivingObjectRanges",
    (RUNTIME, 22): "GC/BulkMovedObjectRanges",
    (RUNTIME, 23): "GC/GenerationRange",
    (RUNTIME, 200): "GarbageCollection/IncreaseMemoryPressure",
    (RUNTIME, 202): "GC/MarkWithType",
    (RUNTIME, 208): "GC/LOHCompact",
    (RUNTIME, 209): "GC/FitBucketInfo",
    (RUNDOWN, 10): "GC/SettingsRundown",
    (RUNDOWN, "TieredCompilation/SettingsDCStart"): "TieredCompilationRundown/SettingsDCStart",
}

GC_REASON = {
    0: "AllocSmall", 1: "Induced", 2: "LowMemory", 3: "Empty", 4: "AllocLarge", 5: "OutOfSpaceSOH",
    6: "OutOfSpaceLOH", 7: "InducedNotForced", 8: "Internal", 9: "InducedLowMemory", 10: "InducedCompacting",
    11: "LowMemoryHost", 12: "PMFullGC", 13: "LowMemoryHostBlocking",
}  # fmt: skip
GC_GLOBAL_MECHANISMS = {0: "None", 1: "Concurrent", 2: "Compaction", 4: "Promotion", 8: "Demotion", 16: "CardBundles"}
GC_PAUSE_MODE = {0: "Batch", 1: "Interactive", 2: "LowLatency", 3: "SustainedLowLatency", 4: "NoGC"}
GC_SEGMENT_TYPE = {0: "SmallObjectHeap", 1: "LargeObjectHeap", 2: "ReadOnlyHeap", 3: "PinnedObjectHeap"}
STARTUP_MODE = {0: "None", 1: "ManagedExe", 2: "HostedCLR", 4: "IJW", 8: "COMActivated", 16: "Other"}
ASSEMBLY_FLAGS = {0: "None", 1: "DomainNeutral", 2: "Dynamic", 4: "Native", 8: "Collectible", 16: "ReadyToRun"}
APP_DOMAIN_FLAGS = {0: "None", 1: "Default", 2: "Executable", 4: "Shared"}
TIERED_COMPILATION_FLAGS = {0: "None", 1: "QuickJit", 2: "QuickJitForLoops", 4: "TieredPGO", 8: "ReadyToRun"}
GC_SETTINGS_BITS = {
    0: "None", 1: "GCSettingsConcurrent", 2: "GCSettingsLargePages", 4: "GCSettingsFrozenSegs",
    8: "GCSettingsHardLimitSpecified", 16: "GCSettingsNoAffinitize",
}  # fmt: skip
NGEN_BIND_REASON = dict(enumerate((
    "START_BIND", "NO_INDEX", "SYSTEM_ASSEMBLY_NOT_AVAILABLE", "NO_NATIVE_IMAGE", "REJECT_CONFIG_MASK", "FAIL",
    "INDEX_CORRUPTION", "REJECT_TIMESTAMP", "REJECT_NATIVEIMAGE_NOT_FOUND", "REJECT_IL_SIG", "REJECT_LOADER_EVAL_FAIL",
    "MISSING_FOUND", "REJECT_HOSTASM", "REJECT_IL_NOT_FOUND", "REJECT_APPBASE_NOT_FILE",
    "BIND_DEPEND_REJECT_REF_DEF_MISMATCH", "BIND_DEPEND_REJECT_NGEN_SIG", "APPLY_EXTERNAL_RELOCS_FAILED",
    "SYSTEM_ASSEMBLY_NATIVEIMAGE_NOT_AVAILABLE", "ASSEMBLY_HAS_DIFFERENT_GRANT",
)))  # fmt: skip
BUCKET_KIND = {0: "LargestFreeListItems", 1: "PlugsInCondemned"}
# gc_heap_compact_reason / gc_heap_expand_mechanism: the event carries one bit per reason.
COMPACT_REASONS = (
    "compact_low_ephemeral", "compact_high_frag", "compact_no_gaps", "compact_loh_forced", "compact_last_gc",
    "compact_induced_compacting", "compact_fragmented_gen0", "compact_high_mem_load", "compact_high_mem_frag",
    "compact_vhigh_mem_frag", "compact_no_gc_mode",
)  # fmt: skip
EXPAND_MECHANISMS = (
    "expand_reuse_normal", "expand_reuse_bestfit", "expand_new_seg_ep", "expand_new_seg", "expand_no_memory",
    "expand_next_full_gc",
)  # fmt: skip


def _bit_reason(names: tuple[str, ...], value: Any) -> str:
    if not isinstance(value, int):
        return ""
    bits = value & 0x7FFFFFFF
    if not bits:
        return "not_specified"
    index = (bits & -bits).bit_length() - 1
    return names[index] if index < len(names) else str(index)


def _module_file_name(data: EventInput) -> str:
    path = data.get("ModuleILPath")
    return ntpath.basename(path) if isinstance(path, str) else ""


def _heap_total(prefix: str, generations: int) -> Any:
    def compute(data: EventInput) -> int:
        return sum(data.get(f"{prefix}{gen}", 0) or 0 for gen in range(generations))

    return compute


def _gc_depth(data: EventInput) -> int:
    if data.get("TotalPromotedSize2"):
        return 2
    if data.get("TotalPromotedSize1"):
        return 1
    return 0


def _type_name(data: EventInput) -> str:
    state = data.state
    type_id = data.get("TypeID")
    return state.type_name(data.record.pid, type_id) if state is not None else ""


def _first_bulk_type(member: str) -> Any:
    def compute(data: EventInput) -> Any:
        values = data.get("Values")
        if isinstance(values, list) and values and isinstance(values[0], dict):
            first = values[0]
            return first.get(member, first.get("Name")) if member == "TypeName" else first.get(member)
        return None

    return compute


def _allocation_object_size(data: EventInput) -> int:
    """Version 4 appends the object's size (8 bytes) after the fields the manifests know."""
    payload = data.record.user_data
    if data.record.version >= 4 and len(payload) >= 8:
        return int.from_bytes(payload[-8:], "little")
    return 0


def _mechanism(names: tuple[str, ...], source: str) -> Any:
    def compute(data: EventInput) -> str:
        return _bit_reason(names, data.get(source))

    return compute


_LOADER_PHASE = fields(
    "AppDomainID:i LoadContextID:i FromLoaderCache:i DynamicLoad:i AssemblyCodebase:s AssemblyName:s ClrInstanceID:i"
)
_MODULE = fields(
    "ModuleID:l AssemblyID:l ModuleFlags:p ModuleILPath:s ModuleNativePath:s ManagedPdbSignature:g ManagedPdbAge:i "
    "ManagedPdbBuildPath:s NativePdbSignature:g NativePdbAge:i NativePdbBuildPath:s ModuleILFileName:s",
    ModuleILFileName=("s", _module_file_name),
)
_DOMAIN_MODULE = fields("ModuleID:l AssemblyID:l AppDomainID:l ModuleFlags:p ModuleILPath:s ModuleNativePath:s ClrInstanceID:i")
_ASSEMBLY = fields("AssemblyID:l AppDomainID:l AssemblyFlags:F FullyQualifiedAssemblyName:s BindingID:l ClrInstanceID:i")
_APP_DOMAIN = fields("AppDomainID:l AppDomainFlags:F AppDomainName:s AppDomainIndex:i ClrInstanceID:i")
_METHOD_VERBOSE = fields(
    "MethodID:l ModuleID:l MethodStartAddress:a MethodSize:i MethodToken:i MethodFlags:p MethodNamespace:s "
    "MethodName:s MethodSignature:s ClrInstanceID:i ReJITID:l OptimizationTier:s",
    OptimizationTier=("s", lambda data: "Unknown"),
)
_RUNTIME_START = fields(
    "ClrInstanceID:i Sku:p BclMajorVersion:i BclMinorVersion:i BclBuildNumber:i BclQfeNumber:i VMMajorVersion:i "
    "VMMinorVersion:i VMBuildNumber:i VMQfeNumber:i StartupFlags:p StartupMode:e CommandLine:s ComObjectGuid:g "
    "RuntimeDllPath:s"
)
_CLR_ONLY = fields("ClrInstanceID:i")
_HEAP_MARK = fields("HeapNum:i ClrInstanceID:i")


def _view(spec: Any, **enums: dict[int, str]) -> View:
    return View(spec, {"AssemblyFlags": ASSEMBLY_FLAGS, "AppDomainFlags": APP_DOMAIN_FLAGS, **enums})


CLR_VIEWS: dict[str, View] = {
    f"{RUNTIME}/Runtime/Start": _view(_RUNTIME_START, StartupMode=STARTUP_MODE),
    f"{RUNDOWN}/Runtime/Start": _view(_RUNTIME_START, StartupMode=STARTUP_MODE),
    f"{RUNTIME}/GC/CreateSegment": _view(fields("Address:a Size:a Type:e ClrInstanceID:i"), Type=GC_SEGMENT_TYPE),
    f"{RUNTIME}/GC/AllocationTick": _view(fields(
        "AllocationAmount:i AllocationKind:p ClrInstanceID:i AllocationAmount64:l TypeID:a TypeName:s HeapIndex:i "
        "Address:a ObjectSize:l",
        ObjectSize=("l", _allocation_object_size),
    )),
    f"{RUNTIME}/GC/Start": _view(fields("Count:i Reason:p Depth:i Type:p ClrInstanceID:i ClientSequenceNumber:l")),
    f"{RUNTIME}/GC/Stop": _view(fields("Count:i Depth:i ClrInstanceID:i")),
    f"{RUNTIME}/GC/MarkWithType": _view(fields("HeapNum:i ClrInstanceID:i Type:i Promoted=Bytes:l")),
    f"{RUNTIME}/GC/PinObjectAtGCTime": _view(fields("HandleID:a ObjectID:a ObjectSize:l TypeName:s ClrInstanceID:i")),
    f"{RUNTIME}/GC/FinalizeObject": _view(fields(
        "TypeName:s ObjectID:a TypeID:a ClrInstanceID:i", TypeName=("s", _type_name)
    )),
    f"{RUNTIME}/GC/HeapStats": _view(fields(
        "TotalHeapSize:l TotalPromoted:l Depth:i GenerationSize0:l TotalPromotedSize0:l GenerationSize1:l "
        "TotalPromotedSize1:l GenerationSize2:l TotalPromotedSize2:l GenerationSize3:l TotalPromotedSize3:l "
        "FinalizationPromotedSize:l FinalizationPromotedCount:l PinnedObjectCount:i SinkBlockCount:i "
        "GCHandleCount:i ClrInstanceID:i GenerationSize4:l TotalPromotedSize4:l",
        TotalHeapSize=("l", _heap_total("GenerationSize", 5)),
        TotalPromoted=("l", _heap_total("TotalPromotedSize", 5)),
        Depth=("i", _gc_depth),
    )),
    f"{RUNTIME}/GC/GenerationRange": _view(fields(
        "Generation:i RangeStart:a RangeUsedLength:a RangeReservedLength:a ClrInstanceID:i"
    )),
    f"{RUNTIME}/GC/BulkMovedObjectRanges": _view(fields("Index:i Count:i ClrInstanceID:i")),
    f"{RUNTIME}/GC/BulkSurvivingObjectRanges": _view(fields("Index:i Count:i ClrInstanceID:i")),
    f"{RUNTIME}/GC/FitBucketInfo": _view(
        fields("ClrInstanceID@0u2:i BucketKind@2u2:e TotalSize@4u8:l Count@12u2:i"), BucketKind=BUCKET_KIND
    ),
    f"{RUNTIME}/GC/LOHCompact": _view(fields("ClrInstanceID@0u2:i Count@2u2:i")),
    f"{RUNTIME}/GC/GlobalHeapHistory": _view(
        fields(
            "FinalYoungestDesired:l NumHeaps:i CondemnedGeneration:i Gen0ReductionCount:i Reason:e "
            "GlobalMechanisms:F ClrInstanceID:i PauseMode:e? MemoryPressure:i? CondemnReasons0:i? CondemnReasons1:i? "
            "Count@46u4:i?"
        ),
        Reason=GC_REASON, GlobalMechanisms=GC_GLOBAL_MECHANISMS, PauseMode=GC_PAUSE_MODE,
    ),
    f"{PRIVATE}/GC/GlobalHeapHistory": _view(
        fields(
            "FinalYoungestDesired:l NumHeaps:i CondemnedGeneration:i Gen0ReductionCount:i Reason:e "
            "GlobalMechanisms:F ClrInstanceID:i PauseMode:e? MemoryPressure:i? CondemnReasons0:i? CondemnReasons1:i? "
            "Count:i?"
        ),
        Reason=GC_REASON, GlobalMechanisms=GC_GLOBAL_MECHANISMS, PauseMode=GC_PAUSE_MODE,
    ),
    f"{RUNTIME}/GC/PerHeapHistory": _view(fields(
        "ClrInstanceID:i FreeListAllocated:l FreeListRejected:l EndOfSegAllocated:l CondemnedAllocated:l "
        "PinnedAllocated:l PinnedAllocatedAdvance:l RunningFreeListEfficiency:i CondemnReasons0:i CondemnReasons1:i "
        "CompactMechanisms:s ExpandMechanisms:s ConcurrentCompactMechanisms:s? HeapIndex:i ExtraGen0Commit:l "
        "Count:i MemoryPressure:i?",
        CompactMechanisms=("s", _mechanism(COMPACT_REASONS, "CompactMechanisms")),
        ExpandMechanisms=("s", _mechanism(EXPAND_MECHANISMS, "ExpandMechanisms")),
        ConcurrentCompactMechanisms=("s?", lambda data: None),
        MemoryPressure=("i?", lambda data: None),
    )),
    f"{RUNTIME}/Type/BulkType": _view(fields(
        "Count:i ClrInstanceID:i TypeID_0:a TypeName_0:s",
        TypeID_0=("a", _first_bulk_type("TypeID")),
        TypeName_0=("s", _first_bulk_type("TypeName")),
    )),
    f"{RUNTIME}/Loader/ModuleLoad": _view(_MODULE),
    f"{RUNTIME}/Loader/ModuleUnload": _view(_MODULE),
    f"{RUNDOWN}/Loader/ModuleDCStop": _view(_MODULE),
    f"{RUNDOWN}/Loader/ModuleDCStart": _view(_MODULE),
    f"{RUNTIME}/Loader/DomainModuleLoad": _view(_DOMAIN_MODULE),
    f"{RUNDOWN}/Loader/DomainModuleDCStop": _view(_DOMAIN_MODULE),
    f"{RUNDOWN}/Loader/DomainModuleDCStart": _view(_DOMAIN_MODULE),
    f"{RUNTIME}/Loader/AssemblyLoad": _view(_ASSEMBLY),
    f"{RUNTIME}/Loader/AssemblyUnload": _view(_ASSEMBLY),
    f"{RUNDOWN}/Loader/AssemblyDCStop": _view(_ASSEMBLY),
    f"{RUNDOWN}/Loader/AssemblyDCStart": _view(_ASSEMBLY),
    f"{RUNTIME}/Loader/AppDomainLoad": _view(_APP_DOMAIN),
    f"{RUNTIME}/Loader/AppDomainUnload": _view(_APP_DOMAIN),
    f"{RUNDOWN}/Loader/AppDomainDCStop": _view(_APP_DOMAIN),
    f"{RUNDOWN}/Loader/AppDomainDCStart": _view(_APP_DOMAIN),
    f"{RUNTIME}/Method/LoadVerbose": _view(_METHOD_VERBOSE),
    f"{RUNTIME}/Method/UnloadVerbose": _view(_METHOD_VERBOSE),
    f"{RUNTIME}/Method/JittingStarted": _view(fields(
        "MethodID:l ModuleID:l MethodToken:i MethodILSize:i MethodNamespace:s MethodName:s MethodSignature:s ClrInstanceID:i"
    )),
    f"{RUNTIME}/AppDomainResourceManagement/ThreadCreated": _view(fields(
        "ManagedThreadID:l AppDomainID:l Flags:i ManagedThreadIndex:i OSThreadID:i ClrInstanceID:i"
    )),
    f"{RUNTIME}/Exception/Start": _view(fields(
        "ExceptionType:s ExceptionMessage:s ExceptionEIP:a ExceptionHRESULT:i ExceptionFlags:p ClrInstanceID:i"
    )),
    f"{RUNTIME}/GarbageCollection/IncreaseMemoryPressure": _view(fields("BytesAllocated:l ClrInstanceID:i")),
    f"{RUNTIME}/GC/TerminateConcurrentThread": _view(_CLR_ONLY),
    f"{RUNDOWN}/Method/DCStopInit": _view(_CLR_ONLY),
    f"{RUNDOWN}/Method/DCStopComplete": _view(_CLR_ONLY),
    f"{RUNDOWN}/Method/DCStartInit": _view(_CLR_ONLY),
    f"{RUNDOWN}/Method/DCStartComplete": _view(_CLR_ONLY),
    f"{RUNDOWN}/GC/SettingsRundown": _view(
        fields(
            "HardLimit@0u8:l LOHThreshold@8u8:l PhysicalMemoryConfig@16u8:l Gen0MinBudgetConfig@24u8:l "
            "Gen0MaxBudgetConfig@32u8:l HighMemPercentConfig@40u4:i BitSettings@44u4:F ClrInstanceID@48u2:i"
        ),
        BitSettings=GC_SETTINGS_BITS,
    ),
    f"{RUNDOWN}/TieredCompilationRundown/SettingsDCStart": _view(
        fields("ClrInstanceID:i Flags:F"), Flags=TIERED_COMPILATION_FLAGS
    ),
    f"{PRIVATE}/GC/Settings": _view(fields("SegmentSize:l LargeObjectSegmentSize:l ServerGC:b ClrInstanceID:i")),
    f"{PRIVATE}/Binding/FusionMessage": _view(fields("ClrInstanceID:i Prepend:b Message:s")),
    f"{PRIVATE}/NgenBinder/NgenBind": _view(
        fields("ClrInstanceID:i BindingID:l ReasonCode:e AssemblyName:s"), ReasonCode=NGEN_BIND_REASON
    ),
    **{
        f"{PRIVATE}/Binding/{phase}": _view(_LOADER_PHASE)
        for phase in (
            "LoaderMappingPhaseStart", "LoaderMappingPhaseStop", "LoaderAssemblyInitPhaseStart",
            "LoaderAssemblyInitPhaseStop", "LoaderDeliverEventPhaseStart", "LoaderDeliverEventsPhaseStop",
            "NgenPhaseStart", "NgenPhaseStop", "LoaderPhaseStart", "LoaderPhaseStop",
        )
    },
    **{f"{PRIVATE}/GC/{mark}": _view(_HEAP_MARK) for mark in ("MarkStackRoots", "MarkFinalizeQueueRoots", "MarkHandles", "MarkCards")},
    **{f"{RUNTIME}/GC/{mark}": _view(_HEAP_MARK) for mark in ("MarkStackRoots", "MarkFinalizeQueueRoots", "MarkHandles", "MarkCards")},
}
