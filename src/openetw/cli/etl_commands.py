"""``openetw info``, ``dump`` and ``relog``: the ETL file as it is stored."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from openetw._native import engine as native_engine
from openetw.cli.evtx_commands import evtx_summary, print_evtx_summary
from openetw.cli.failure import ReportedFailure
from openetw.cli.index_options import streamed_no_index_option
from openetw.cli.naming import RecordNamer
from openetw.cli.progress import quiet_option, show_progress, with_progress
from openetw.cli.time_options import TimeSpec, time_window_options
from openetw.errors import EtlFormatError, EvtxFormatError, InvalidArgument
from openetw.etl.reader import EtlReader, merge_records
from openetw.etl.record import EventRecord
from openetw.events.sources import EVTX, SourceReader, open_reader
from openetw.guids import format_guid
from openetw.safeio import mode_like

if TYPE_CHECKING:
    from openetw.events.decoded import DecodedRecord
    from openetw.events.registry import LazyManifestRegistry

_file_argument = click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
_manifest_files_option = click.option(
    "--manifest",
    "manifests",
    multiple=True,
    metavar="FILE|DIR",
    type=click.Path(exists=True, path_type=str),
    help="Decode with this manifest, or every *.xml / *.man file in this directory (repeatable; "
    "later ones win over earlier ones and over installed manifests).",
)
_MOF_FILES = "openetw.mof_files"


def _remember_mof_files(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    ctx.meta[_MOF_FILES] = value


# ``--mof`` rides along with ``--manifest``: its files reach ``load_registry`` through the click
# context, so every command taking manifests takes MOF files too without a parameter of its own.
_mof_files_option = click.option(
    "--mof",
    multiple=True,
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, path_type=str),
    expose_value=False,
    callback=_remember_mof_files,
    help="Decode classic events with the MOF classes of this file (repeatable; wins over manifests).",
)


_TMF_FILES = "openetw.tmf_files"


def _remember_tmf_files(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    ctx.meta[_TMF_FILES] = value


# ``--tmf`` rides along the same way as ``--mof``.
_tmf_files_option = click.option(
    "--tmf",
    multiple=True,
    metavar="FILE|DIR",
    type=click.Path(exists=True, path_type=str),
    expose_value=False,
    callback=_remember_tmf_files,
    help="Decode WPP (TraceMessage) events with this TMF file, or every *.tmf file in this directory "
    "(repeatable; later ones win).",
)


def manifest_option(command: Any) -> Any:
    """``--manifest FILE|DIR``, ``--mof FILE`` and ``--tmf FILE|DIR`` (all repeatable)."""
    return _manifest_files_option(_mof_files_option(_tmf_files_option(command)))

no_installed_option = click.option(
    "--no-installed", is_flag=True, help="Do not use the installed manifests (openetw manifest install)."
)


def register(cli: click.Group) -> None:
    cli.add_command(info)
    cli.add_command(dump)
    cli.add_command(relog_command)


def open_readers(files: tuple[str, ...]) -> list[Any]:
    """A lenient reader per file (damage is reported by ``raise_if_damaged`` once the output is written)."""
    readers = []
    for path in files:
        if not os.path.exists(path):
            raise InvalidArgument(f"no such file: {path}")
        if os.path.isdir(path):
            raise InvalidArgument(f"{path} is a directory, not an .etl file")
        readers.append(open_reader(path))
    return readers


def load_registry(manifests: tuple[str, ...], *, installed: bool = True) -> LazyManifestRegistry:
    """The registry ``--manifest`` (and ``--mof``, ``--tmf``) describe, warning on stderr about what did not load."""
    context = click.get_current_context(silent=True)
    meta = context.meta if context is not None else {}
    from openetw.events.registry import build_registry  # (the manifest and schema layers: loaded when a command reads)

    registry = build_registry(manifests, installed=installed, mof=meta.get(_MOF_FILES, ()), tmf=meta.get(_TMF_FILES, ()))
    warn_about(registry)
    return registry


def warn_about(registry: LazyManifestRegistry) -> None:
    """One warning line per manifest that did not load (files are parsed as they are needed)."""
    for error in registry.errors:
        click.echo(f"openetw: warning: {error}", err=True)
    registry.errors.clear()


def raise_if_damaged(readers: list[EtlReader]) -> None:
    for notice in (notice for reader in readers for notice in getattr(reader.stats, "notices", ())):
        click.echo(f"openetw: warning: {notice}", err=True)
    errors = [err for reader in readers for err in reader.stats.errors]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ReportedFailure(f"{errors[0]}{more}")


# -- info -----------------------------------------------------------------------------------------
@click.command()
@_file_argument
@click.option("--json", "as_json", is_flag=True, help="One JSON document: an object for one FILE, a list of them for several.")
@manifest_option
@no_installed_option
@quiet_option
@streamed_no_index_option
def info(files: tuple[str, ...], as_json: bool, manifests: tuple[str, ...], no_installed: bool, quiet: bool) -> None:
    """Logfile header facts and record counts of each FILE.

    Shows the logger name, OS version and build, pointer size, clock, start and end time, buffer
    size and count, events and buffers lost, compression, then records by header kind and by
    provider. Providers are named by their TraceLogging metadata, the kernel's classes, installed
    manifests and --manifest files. In --json, "records" counts every trace record, the logfile
    header record included, and "engine" says which engine read it ("native": the compiled core;
    "python": the pure path, as OPENETW_PURE=1 forces).
    """
    readers = open_readers(files)
    registry = load_registry(manifests, installed=not no_installed)
    summaries = []
    for reader in readers:
        if isinstance(reader, SourceReader) and reader.format is EVTX:
            summary = evtx_summary(reader.path)
            reader.stats.errors = [EvtxFormatError(e) for e in summary["errors"]]
            reader.stats.notices = [EvtxFormatError(e) for e in summary["notices"]]
            if not as_json:
                print_evtx_summary(summary)
                continue
        else:
            summary = _summarize(reader, RecordNamer(registry), show_progress(quiet, output_is_stdout=False))
        if as_json:
            summary["engine"] = native_engine()  # which engine read it: "native" (compiled core) or "python"
            summaries.append(summary)
        else:
            _print_summary(summary)
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, sort_keys=False))
    raise_if_damaged(readers)


def _summarize(reader: EtlReader, namer: RecordNamer, progress: bool = False) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    providers: Counter[str] = Counter()
    names: dict[str, str] = {}
    records = 0
    first = last = None
    for record in with_progress(reader, [reader], progress):
        records += 1
        last = record
        if first is None:
            first = record
        kinds[record.kind] += 1
        key = _source_label(record)
        providers[key] += 1
        if key not in names:
            name = namer.provider_name(record)
            if name:
                names[key] = name
    if isinstance(reader, SourceReader):
        return {
            "path": reader.path, **_source_facts(reader, first, last), "records": records, "kinds": dict(kinds.most_common()),
            "providers": [
                {"provider": key, **({"name": names[key]} if key in names else {}), "records": count}
                for key, count in providers.most_common()
            ],
            "unknown_records": 0, "skipped_bytes": 0,
            "errors": [str(err) for err in [*reader.source.losses(), *reader.source.notices()]],
        }  # fmt: skip
    h = reader.header
    stats = reader.stats
    return {
        "path": reader.path,
        "logger_name": h.logger_name,
        "logfile_name": h.logfile_name,
        "os_version": h.os_version_text,
        "os_build": h.provider_version,
        "version": ".".join(str(part) for part in h.os_version),
        "pointer_size": h.pointer_size,
        "number_of_processors": h.number_of_processors,
        "clock": h.clock_name,
        "clock_type": h.clock_type,
        "perf_freq": h.perf_freq,
        "start_time": h.as_json()["start_time_iso"],
        "end_time": h.as_json()["end_time_iso"],
        "buffer_size": h.buffer_size,
        "buffers": h.buffers_written,
        "buffers_read": stats.buffers,
        "compressed": h.compressed,
        "compressed_buffers": stats.compressed_buffers,
        "log_file_mode": h.log_file_mode,
        "events_lost": h.events_lost,
        "buffers_lost": h.buffers_lost,
        "records": records,
        "kinds": dict(kinds.most_common()),
        "providers": [
            {"provider": key, **({"name": names[key]} if key in names else {}), "records": count}
            for key, count in providers.most_common()
        ],
        "unknown_records": stats.unknown_records,
        "skipped_bytes": stats.skipped_bytes,
        "errors": [str(err) for err in stats.errors],
    }


def _source_facts(reader: SourceReader, first: EventRecord | None, last: EventRecord | None) -> dict[str, Any]:
    """The header facts of a trace that is no ``.etl``: what its source says (``facts()``), the
    times of its first and last records; what it does not say is ``None``."""
    facts: dict[str, Any] = {
        "logger_name": reader.format.description, "logfile_name": None, "os_version": None, "os_build": None, "version": None,
        "pointer_size": None, "number_of_processors": None, "clock": None, "clock_type": None, "perf_freq": None,
        "start_time": first.time_iso if first is not None else None, "end_time": last.time_iso if last is not None else None,
        "buffer_size": None, "buffers": None, "buffers_read": reader.source.statistics().buffers, "compressed": False,
        "compressed_buffers": 0, "log_file_mode": None, "events_lost": reader.source.statistics().events_lost, "buffers_lost": 0,
    }  # fmt: skip
    described = getattr(reader.source, "facts", None)
    if described is not None:
        facts.update(described())
    return facts


def _source_label(record: EventRecord) -> str:
    """The summary's name for a record's source (its text predates ``events.decoded.provider_key``'s and is kept)."""
    if record.provider_guid_bytes is not None:
        return format_guid(record.provider_id)
    if record.hook_id is not None:
        return f"hook group 0x{(record.hook_id >> 8):02x}"
    return record.kind


def _print_summary(s: dict[str, Any]) -> None:
    echo = click.echo
    echo(f"{s['path']}")
    echo(f"  logger         {s['logger_name'] or '-'}   file {s['logfile_name'] or '-'}")
    if s["os_version"] is not None:
        echo(f"  OS             {s['os_version']} build {s['os_build']}   pointer size {s['pointer_size']}   processors {s['number_of_processors']}")
    else:  # a trace that is no .etl: its format and version
        echo(f"  format         {s['version'] or '-'}   pointer size {s['pointer_size']}   processors {s['number_of_processors']}")
    echo(f"  clock          {s['clock']} (PerfFreq {s['perf_freq']})")
    echo(f"  time           {s['start_time']} .. {s['end_time']}")
    compressed = f"compressed ({s['compressed_buffers']} buffers)" if s["compressed"] else "uncompressed"
    if s["buffer_size"] is not None:
        echo(f"  buffers        {s['buffers']} of {s['buffer_size']} bytes, {s['buffers_read']} read, {compressed}")
    else:
        echo(f"  blocks         {s['buffers_read']} read")
    echo(f"  lost           {s['events_lost']} events, {s['buffers_lost']} buffers")
    echo(f"  records        {s['records']}   " + ", ".join(f"{k} {v}" for k, v in s["kinds"].items()))
    if s["unknown_records"] or s["skipped_bytes"]:
        echo(f"  damaged        {s['unknown_records']} unknown records, {s['skipped_bytes']} bytes skipped")
    echo("  providers")
    for p in s["providers"]:
        label = f"{p['name']} ({p['provider']})" if "name" in p else p["provider"]
        echo(f"    {p['records']:>9}  {label}")


# -- dump -----------------------------------------------------------------------------------------
@click.command()
@_file_argument
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record.")
@click.option("--time-order", is_flag=True, help="Merge buffers (and files) into time order.")
@click.option("--provider", "providers", multiple=True, metavar="NAME_OR_GUID", help="Only records of this provider (repeatable).")
@click.option("--limit", type=click.IntRange(min=0), default=None, metavar="N", help="Stop after N records.")
@manifest_option
@no_installed_option
@quiet_option
@time_window_options
@streamed_no_index_option
def dump(
    files: tuple[str, ...], as_json: bool, time_order: bool, providers: tuple[str, ...], limit: int | None,
    manifests: tuple[str, ...], no_installed: bool, quiet: bool, window: TimeSpec,
) -> None:
    """One line per record of each FILE: time, provider, event, pid/tid, cpu, size, payload,
    then the decoded fields ({name=value; ...}) and the event's message.

    Records are decoded with installed manifests, --manifest files, TraceLogging metadata,
    the kernel's classic layouts and what the trace carries (EventSource manifests, TDH
    metadata). With --json each object has "properties" (decoded values) when the record could
    be decoded, and "errors" (property -> why) when some property could not.
    With several files and --time-order the files are merged into one time order.
    Every record is one line: newlines and other control characters in values are escaped.
    """
    from openetw.events.as_json import event_to_json
    from openetw.events.decoded import decode_record
    from openetw.tdh.context import DecodeContext
    from openetw.tdh.format import one_line

    readers = open_readers(files)
    registry = load_registry(manifests, installed=not no_installed)
    context = DecodeContext(registry)
    namer = RecordNamer(registry)
    wanted, matched = _provider_filter(providers, namer)
    span = window.resolve(readers)
    shown = 0
    out = sys.stdout  # not click.echo: it flushes after every line
    records = with_progress(records_of(readers, time_order=time_order), readers, show_progress(quiet))
    try:
        for record in records:
            if record.kind != "unknown":
                context.observe(record)
            if wanted is not None and not wanted(record):
                continue
            if span is not None and not (record.kind == "unknown" or span.contains(record.filetime)):
                continue
            if limit is not None and shown >= limit:
                break
            shown += 1
            event = decode_record(record, registry, context)
            if as_json:
                provider = event.provider_name or namer.provider_name(record)
                name = event.event_name or namer.event_name(record)
                out.write(json.dumps(event_to_json(event, provider, name)) + "\n")
            else:
                out.write(one_line(record_line(record, namer) + _decoded_text(event)) + "\n")
    finally:
        out.flush()
    warn_about(registry)
    raise_if_damaged(readers)
    missing = [text for text in providers if text not in matched]
    if missing and limit is None:
        names = ", ".join(repr(text) for text in missing)
        raise InvalidArgument(f"no provider {names} in {', '.join(files)} (`openetw info` lists the providers of a file)")




def _decoded_text(event: DecodedRecord) -> str:
    """`` {name=value; ...}`` and `` "message"`` for a decoded record (empty otherwise)."""
    if event.decoded is None and event.record.kind != "evtx":
        return ""
    values = event.text_properties()
    parts = [f"{name}={value}" for name, value in values.items()]
    parts += [f"{name}=<error: {message}>" for name, message in event.errors.items() if name not in values]
    text = " {" + "; ".join(parts) + "}"
    message = event.message
    if message:
        text += " " + json.dumps(" ".join(message.split()), ensure_ascii=False)
    return text


def records_of(readers: list[EtlReader], *, time_order: bool) -> Iterator[EventRecord]:
    """The records of every reader: one after the other, or merged into one time order."""
    if time_order:
        if len(readers) == 1:
            return readers[0].records(time_order=True)
        return merge_records(readers)
    return (record for reader in readers for record in reader)


def _provider_filter(providers: tuple[str, ...], namer: RecordNamer) -> tuple[Any, set[str]]:
    """A predicate for ``dump --provider`` and the set of the texts that matched a record so far.
    GUIDs (a malformed one is an error) match the record's provider id; names match the
    provider's name as the record or a manifest gives it; ``*Name`` matches the name's hash."""
    from openetw.provider_names import resolve_provider_name

    if not providers:
        return None, set()
    by_guid: dict[str, str] = {}
    by_name: dict[str, str] = {}
    for text in providers:
        resolved = resolve_provider_name(text)
        if resolved.source == "hash":
            by_name[text.strip().lower()] = text
            by_guid.setdefault(format_guid(resolved.guid), text)  # an unnamed record of that name's hash
        else:
            by_guid[format_guid(resolved.guid)] = text
    matched: set[str] = set()

    def accept(record: EventRecord) -> bool:
        if record.provider_guid_bytes is not None:
            found = by_guid.get(format_guid(record.provider_id))
            if found is not None:
                matched.add(found)
                return True
        name = record.provider_name if record.kind == "evtx" else namer.provider_name(record)  # type: ignore[attr-defined]
        found = by_name.get(name.lower()) if name else None
        if found is not None:
            matched.add(found)
            return True
        return False

    return accept, matched


def record_to_json(record: EventRecord, namer: RecordNamer) -> dict[str, Any]:
    """The record's header facts as ``dump --json`` prints them (without decoded properties)."""
    from openetw.events.as_json import record_fields

    return record_fields(record, namer.provider_name(record), namer.event_name(record))


def record_line(record: EventRecord, namer: RecordNamer) -> str:
    when = record.time_iso if record.kind != "unknown" else "-" * 28
    provider = (record.provider_name if record.kind == "evtx" else None) or namer.provider_name(record)  # type: ignore[attr-defined]
    provider = provider or (format_guid(record.provider_id) if record.provider_guid_bytes is not None else record.kind)
    event = namer.event_name(record)
    if record.kind in ("system", "compact", "perfinfo"):
        ident = f"hook=0x{record.hook_id:04x} v{record.version}"
    elif record.kind in ("classic", "instance"):
        ident = f"type={record.opcode} level={record.level} v{record.version}"
    else:
        ident = f"id={record.id} v{record.version} op={record.opcode} lvl={record.level} kw=0x{record.keyword:x}"
    if event:
        ident = f"{event} {ident}"
    preview = record.user_data[:16].hex(" ")
    return f"{when} {provider} {ident} pid={record.pid} tid={record.tid} cpu={record.cpu} size={record.size} [{preview}]"


# -- relog ----------------------------------------------------------------------------------------
@click.command("relog")
@_file_argument
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str), help="The .etl or .evtx file to write.")
@click.option("--buffer-size", type=click.IntRange(min=1), default=None, metavar="KB", help="Buffer size of the output in KB (default: the inputs').")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: output, records, buffers, records_refused.")
@streamed_no_index_option
def relog_command(files: tuple[str, ...], output: str, buffer_size: int | None, as_json: bool) -> None:
    """Merge FILES in time order and rewrite them as one uncompressed .etl file.

    Every record keeps its bytes and pointer size; the logfile header is written anew, with the
    events and buffers lost of all inputs added up.

    An OUTPUT ending in .evtx is a Windows Event Log file instead: .etl events are decoded (with
    the installed manifests) and written with their properties as EventData, .evtx records keep
    their content; record ids are numbered from 1. FILES may be .etl and .evtx files, and
    .NET EventPipe traces (.nettrace, .netperf), whose events relog to either as ETW events.
    """
    readers = open_readers(files)
    if any(os.path.abspath(output) == os.path.abspath(path) for path in files):
        raise click.BadParameter("the output must not be one of the inputs", param_hint="--output")
    private = mode_like(*files)  # the output is at most as open as the most private input
    if output.lower().endswith(".evtx"):
        from openetw.export.evtx_relog import relog_to_evtx

        written = relog_to_evtx(files, output, registry=load_registry((), installed=True), readers=readers, file_mode=private)
        if as_json:
            click.echo(json.dumps({"output": output, "records": written.records_written, "chunks": written.chunks_written}))
        else:
            click.echo(f"wrote {output}: {written.records_written} records, {written.chunks_written} chunks")
        raise_if_damaged(readers)
        return
    refused = [reader for reader in readers if isinstance(reader, SourceReader) and not reader.format.etw_records]
    if refused:
        raise click.BadParameter(f"{refused[0].format.description} files relog to an .evtx output only", param_hint="--output")
    from openetw.etl.relog import relog

    result = relog(readers, output, buffer_size=buffer_size * 1024 if buffer_size else None, file_mode=private)
    if as_json:
        click.echo(json.dumps({
            "output": output, "records": result.records_written + 1, "records_relogged": result.records_written,
            "buffers": result.buffers_written, "records_refused": result.records_refused,
        }))  # fmt: skip
    else:
        click.echo(
            f"wrote {output}: {result.records_written + 1} records ({result.records_written} relogged + logfile header), "
            f"{result.buffers_written} buffers" + (f", {result.records_refused} damaged records left out" if result.records_refused else "")
        )
    raise_if_damaged(readers)


__all__ = [
    "EtlFormatError",
    "load_registry",
    "manifest_option",
    "no_installed_option",
    "open_readers",
    "raise_if_damaged",
    "record_line",
    "record_to_json",
    "records_of",
    "register",
    "warn_about",
]
