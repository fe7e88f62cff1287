"""The public names of ``openetw`` and of every subpackage, pinned (trio's way).

A package's public names are its ``__all__``; every one of them must exist, and every public
class or function its ``__init__`` defines must be listed there. This list is the
contract: moving, adding or dropping a public name changes it here too, deliberately. A new
subpackage is pinned here when it is added (a package with nothing to export pins ``()``).
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import openetw

PUBLIC_NAMES: dict[str, tuple[str, ...]] = {
    "openetw": (
        "AccessDenied", "DecodeError", "EtlFormatError", "EtwLoggingHandler", "InvalidArgument", "ManifestError",
        "OpenEtwError", "Provider", "ServiceError", "Session", "SessionError", "TraceLoggingProvider",
        "provider_guid_from_name",
    ),
    "openetw._native": ("ENGINE", "PURE_VARIABLE", "engine", "module", "reason"),
    "openetw.cli": (),
    "openetw.consumer": (
        "Batch", "EnableProperty", "EtlIndex", "Event", "EventFilter", "EventsDropped", "FileSource",
        "KernelProvider", "KernelTrace", "KernelTraceUnavailable", "LiveSessionSource", "LiveSessionUnavailable",
        "Parser", "Predicate", "Property", "PropertyNotFound", "PropertyTypeMismatch", "Provider", "RecordSource",
        "Schema", "Source", "SourceStatistics", "TraceContext", "TraceStateError", "TraceStatistics", "UserTrace",
        "predicates", "records_from_buffer",
    ),
    "openetw.controller": (
        "RealtimeConsumer", "ServiceClient", "Session", "list_sessions", "parse_mode", "provider_security",
        "registered_providers", "secure_provider", "spawn_service",
    ),
    "openetw.etl": (
        "BufferInfo", "ClassicRecord", "CompactRecord", "EtlReader", "EventHeaderRecord", "EventRecord",
        "ExtendedItem", "InstanceRecord", "LogfileHeader", "MessageRecord", "PerfInfoRecord", "ReadStatistics",
        "RecordContext", "StackTrace", "SystemRecord", "TraceClock", "UnknownRecord", "filetime_to_datetime",
        "filetime_to_iso", "merge_records", "read_records",
    ),
    "openetw.eventlog": (
        "AppendResult", "LogConfig", "LogInfo", "LogStore", "NewEvent", "Query", "QueryList", "StoredEvent",
        "default_logs_dir", "event_node", "event_xml", "from_etw_record", "from_evtx_record", "parse_filter",
        "parse_query", "parse_query_list",
    ),
    "openetw.evtx": (
        "ChunkInfo", "EvtxFormatError", "EvtxHeader", "EvtxReader", "EvtxRecord", "EvtxWriter", "FileHeader",
        "ReadStatistics", "read_file_header",
    ),
    "openetw.perfdata": (
        "EhEvent", "EhField", "EventAttr", "PerfData", "Sample", "TracepointName", "decode_fields", "is_perf_data",
        "parse_event", "parse_tracepoint_name",
    ),
    "openetw.nettrace": ("EventMetadata", "Field", "NettraceEvent", "NettraceReader", "NettraceStats", "TraceInfo"),
    "openetw.export": (
        "ExportSummary", "FORMATS", "MissingDependency", "Progress", "Selection", "TableWriter", "export_files",
    ),
    "openetw.fleet": ("FleetError", "StreamOptions"),
    "openetw.ipc": (),
    "openetw.kernel": (
        "Capability", "EventDecoder", "FLAG_EVENTS", "KERNEL_FLAGS", "KernelCapabilities", "KernelEventMapper",
        "KernelEventSource", "KernelSession", "KernelSessionConfig", "PageParser", "RawEvent", "RawKernelEvent", "RecordSink",
        "SOURCE_CHOICES", "SubBuffer", "TracefsInstance", "TracefsSource", "find_tracefs", "parse_event_format",
        "parse_header_event", "parse_header_page", "probe", "remove_stale_instances", "tracepoints_for",
    ),
    "openetw.manifest": (
        "Channel", "ChannelType", "Diagnostic", "Event", "Field", "InType", "Keyword", "Level", "Manifest", "Map",
        "MapEntry", "MapKind", "Opcode", "OutType", "ParseResult", "Provider", "Severity", "StringTable", "Task",
        "Template", "format_message", "inserts_used", "load_manifest", "load_manifests", "parse_manifest",
        "validate",
    ),
    "openetw.mc": (
        "BANNER", "CompiledModule", "EventInfo", "GeneratedModule", "InvalidEventValue", "ManifestProvider",
        "McResult", "channel_keyword", "compile_manifests", "generate_from_file", "generate_module", "load_module",
        "manifest_schemas", "module_name",
    ),
    "openetw.probe": (
        "Description", "EventIdentity", "Output", "ProbeCompileError", "ProbeProgram", "ProbeRuntimeError",
        "compile_script", "parse_description",
    ),
    "openetw.probing": ("ProbeRun", "run_probe_program"),
    "openetw.provider": (
        "EnableCallback", "EventDescriptor", "EventTooLarge", "ManifestEventEncoder", "Provider",
        "TraceLoggingEvent", "TraceLoggingEventEncoder", "TraceLoggingProvider", "activity", "current_activity_id",
        "new_activity_id",
    ),
    "openetw.report": (
        "CSV_COLUMNS", "EVENT_NAMESPACE", "PerfViewReport", "ReportEvent", "Summary", "decode_record",
        "decode_records", "event_row", "event_to_json", "event_xml", "json_properties", "json_value",
        "perfview_lines", "provider_key", "record_fields", "summarize", "write_csv", "write_json", "write_xml",
    ),
    "openetw.service": (),
    "openetw.session": (
        "ALL_KEYWORDS", "AccessDenied", "Action", "COUNTER_KEYS", "Caller", "CaptureState", "ClassicProviderInUse",
        "ClosePool", "Command", "DISABLED", "EnableProperty", "EnableRule", "EnableState", "EventFilters",
        "FinishSession", "FlushSession", "GAUGE_KEYS", "InvalidSessionConfig", "InvalidSessionState",
        "LogFileMode", "LogMode", "MAX_KERNEL_SESSIONS", "MAX_SESSIONS", "MAX_SESSIONS_PER_CLASSIC_PROVIDER",
        "MAX_SESSIONS_PER_PROVIDER", "NoSuchRegistration", "NoSuchSession", "NotifyProvider", "OpenPool",
        "ProviderEnable", "ProviderNotEnabled", "ProviderRegistry", "RESERVED_KERNEL_SLOTS",
        "RESERVED_SESSION_NAMES", "ROOT", "Registration", "ReservedSessionName", "STATISTICS_KEYS", "Session",
        "SessionConfig", "SessionEnable", "SessionError", "SessionExists", "SessionKind", "SessionState",
        "SessionStatistics", "SessionTable", "SessionUpdated", "SnapshotToFile", "StartSession", "TRANSITIONS",
        "TooManyKernelSessions", "TooManySessions", "TooManySessionsForProvider", "next_state",
        "parse_autologger_config", "resolve_provider",
    ),
    "openetw.store": (
        "DATA_DIR_ENV", "EventKey", "InstalledProvider", "ManifestRegistry", "ManifestRejected", "ManifestStore",
        "MergedProvider", "Override", "Scope", "SourcedEvent", "default_data_dirs", "event_view", "find_merged",
        "merge_manifests", "provider_view", "read_manifest", "read_manifests",
    ),
    "openetw.tdh": (
        "CompiledSchema", "DecodedEvent", "EventMap", "MapEntry", "PropertyInfo", "ProviderTraits", "REST",
        "Schema", "compile_schema", "decode_all", "decode_properties", "encode_event_metadata",
        "encode_provider_traits", "format_event_message", "format_message", "format_properties", "format_property",
        "format_value", "pack_values", "parse_event_metadata", "parse_provider_traits",
        "schema_from_manifest_event", "schema_from_mof", "schema_from_record", "schema_from_tracelogging",
        "schemas_from_manifest", "tl_field",
    ),
    "openetw.events": (),
    "openetw.symbols": (),
    "openetw.viewer": (),
    "openetw.testing": (
        "EventRecordBuilder", "infer_field", "manifest_schema", "pack_template", "push_record", "push_records",
    ),
}


SUBPACKAGES = sorted("openetw." + m.name for m in pkgutil.iter_modules(openetw.__path__) if m.ispkg)


def test_every_subpackage_is_pinned() -> None:
    missing = [name for name in SUBPACKAGES if name not in PUBLIC_NAMES]
    assert not missing, f"pin the public names of {missing} in PUBLIC_NAMES"
    gone = [name for name in PUBLIC_NAMES if name != "openetw" and name not in SUBPACKAGES]
    assert not gone, f"{gone} are pinned but no longer exist"


@pytest.mark.parametrize("package", sorted(PUBLIC_NAMES))
def test_public_names_are_the_pinned_ones(package: str) -> None:
    module = importlib.import_module(package)
    exported = tuple(sorted(getattr(module, "__all__", ())))
    assert exported == PUBLIC_NAMES[package]
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert getattr(module, name) is not None, f"{package}.{name} is listed but does not resolve"


@pytest.mark.parametrize("package", sorted(PUBLIC_NAMES))
def test_nothing_public_is_left_out(package: str) -> None:
    module = importlib.import_module(package)
    listed = set(getattr(module, "__all__", ()))
    stray = [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and name not in listed and not isinstance(value, types.ModuleType) and _defined_in(value, package)
    ]
    assert not stray, f"{package} has public names outside __all__: {stray}"


def _defined_in(value: object, package: str) -> bool:
    """Whether ``value`` (a class or function) was defined by the package's ``__init__`` itself:
    names it imports from its own modules for its own use are theirs, not its public API."""
    return getattr(value, "__module__", None) == package
