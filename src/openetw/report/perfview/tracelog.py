"""Which events PerfView's TraceLog and its GeneralParsing test leave out, and how it names them.

TraceLog (the ETLX converter) takes bookkeeping events out of the event stream once it has
used them: stack walks, thread and file-name rundown, CLR method rundown and IL maps, CLR stack
events, idle-thread CPU samples. The test that wrote the baselines then skips whole providers
(``DotNet``, most of ``MSNT_SystemTrace``, dynamically parsed CLR-private events) before it
counts anything. Names: kernel and classic events by PerfView's kernel tables
(``Windows Kernel/Process/DCStart``), manifest and self-describing events by their schema
(``Provider/Task/Opcode``), an EventSource's manifest chunks as ``ManifestData``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from openetw.report.perfview.views_clr import CLR_EVENT_NAMES
from openetw.tdh.mof_kernel import TDH_KERNEL, event_full_name, find_layout
from openetw.tdh.schema import Schema

if TYPE_CHECKING:
    from openetw.etl.record import EventRecord

__all__ = ["event_identity", "skipped_by_test", "removed_by_tracelog"]

CLR_PROVIDER = uuid.UUID("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4")
CLR_RUNDOWN_PROVIDER = uuid.UUID("a669021c-c450-4609-a035-5af59af4df18")
CLR_PRIVATE_PROVIDER = uuid.UUID("763fd754-7086-4dfe-95eb-c01a46faf4ca")
_PRIVATE_NAME = "Microsoft-Windows-DotNETRuntimePrivate"
_KEPT_SYSTEM_TRACE = frozenset({"SystemConfig/Platform", "Image/KernelBase"})
_MANIFEST_DATA_ID = 0xFFFE

_STACK_WALK_GROUP = 0x18
_THREAD_GROUP = 0x05
_FILE_GROUP = 0x04
_PERF_INFO_GROUP = 0x0F
_SAMPLE_OPCODE = 46
_FILE_NAME_OPCODES = frozenset({0, 32, 35, 36})
_THREAD_RUNDOWN_OPCODES = frozenset({3, 4})

# CLR events TraceLog keeps only as symbol and stack information.
_CLR_STACK = 82
_CLR_METHOD_LOAD_VERBOSE, _CLR_METHOD_UNLOAD_VERBOSE = 143, 144
_CLR_METHOD_DC_START_VERBOSE_V2, _CLR_METHOD_DC_STOP_VERBOSE_V2 = 139, 140
_CLR_IL_TO_NATIVE_MAP = 190
_RUNDOWN_METHOD_DC_START_VERBOSE, _RUNDOWN_METHOD_DC_STOP_VERBOSE = 143, 144
_RUNDOWN_IL_MAP_DC_START, _RUNDOWN_IL_MAP_DC_STOP = 149, 150
_PRIVATE_STACK = 151
_METHOD_DYNAMIC, _METHOD_JITTED = 0x1, 0x8


def _kernel_identity(key: Any, opcode: int, version: int) -> tuple[str, str]:
    match = find_layout(key, opcode, version)
    if match is None:
        return TDH_KERNEL, f"Opcode({opcode})"
    full = event_full_name(match.mof_class, match.event)
    provider, _, name = full.partition("/")
    return provider, name


def event_identity(record: Any, schema: Schema | None, registry_name: str | None = None) -> tuple[str, str]:
    """(provider name, event name) as PerfView shows them."""
    kind = record.kind
    if kind in ("system", "compact", "perfinfo"):
        return _kernel_identity((record.hook_id or 0) >> 8, record.opcode, record.version)
    if kind in ("classic", "instance") and find_layout(record.provider_id, record.opcode, record.version) is not None:
        return _kernel_identity(record.provider_id, record.opcode, record.version)
    provider = (schema.provider_name if schema is not None else None) or registry_name
    if provider is None:
        provider = str(record.provider_id) if record.provider_guid_bytes is not None else record.kind
    if kind == "event" and record.id == _MANIFEST_DATA_ID and record.opcode == 254:
        return provider, "ManifestData"
    renamed = CLR_EVENT_NAMES.get((provider, record.id))
    if renamed is not None:
        return provider, renamed
    if schema is not None and schema.event_name:
        return provider, CLR_EVENT_NAMES.get((provider, schema.event_name), schema.event_name)
    return provider, f"EventID({record.id})"


def skipped_by_test(provider: str, event: str, schema: Schema | None) -> bool:
    """Events the GeneralParsing test ignores before counting (output depends on the machine)."""
    if provider == "DotNet":
        return True
    if provider == _PRIVATE_NAME:
        return schema is None or event.startswith("EventID")
    if provider == TDH_KERNEL:
        return event not in _KEPT_SYSTEM_TRACE
    return False


def _method_flags(props: Any) -> int:
    flags = props.get("MethodFlags") if props is not None else None
    return flags if isinstance(flags, int) else 0


def removed_by_tracelog(record: EventRecord, props: Any) -> bool:
    """Bookkeeping events TraceLog consumes and does not keep in its event stream."""
    kind = record.kind
    if kind in ("system", "compact", "perfinfo"):
        group, opcode = (record.hook_id or 0) >> 8, record.opcode
        if group == _STACK_WALK_GROUP:
            return True
        if group == _THREAD_GROUP and opcode in _THREAD_RUNDOWN_OPCODES:
            return True
        if group == _FILE_GROUP and opcode in _FILE_NAME_OPCODES:
            return True
        if group == _PERF_INFO_GROUP and opcode == _SAMPLE_OPCODE and props is not None:
            return props.get("ThreadId") == 0 and not props.get("Reserved", 0) & 0x3
        return False
    if kind != "event" or record.provider_guid_bytes is None:
        return False
    provider, event_id = record.provider_id, record.id
    if provider == CLR_PROVIDER:
        if event_id in (_CLR_STACK, _CLR_IL_TO_NATIVE_MAP, _CLR_METHOD_DC_START_VERBOSE_V2, _CLR_METHOD_DC_STOP_VERBOSE_V2):
            return True
        if event_id == _CLR_METHOD_LOAD_VERBOSE:
            return not _method_flags(props) & (_METHOD_DYNAMIC | _METHOD_JITTED)
        if event_id == _CLR_METHOD_UNLOAD_VERBOSE:
            return not _method_flags(props) & _METHOD_JITTED
        return False
    if provider == CLR_RUNDOWN_PROVIDER:
        if event_id in (_RUNDOWN_METHOD_DC_STOP_VERBOSE, _RUNDOWN_IL_MAP_DC_START, _RUNDOWN_IL_MAP_DC_STOP):
            return True
        if event_id == _RUNDOWN_METHOD_DC_START_VERBOSE:
            return not _method_flags(props) & (_METHOD_DYNAMIC | _METHOD_JITTED)
        return False
    if provider == CLR_PRIVATE_PROVIDER:
        return event_id == _PRIVATE_STACK
    return False
