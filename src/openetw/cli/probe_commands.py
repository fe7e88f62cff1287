"""``openetw probe``: D programs over trace files (Windows DTrace's ``etw`` probes)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from openetw.cli.failure import ReportedFailure
from openetw.cli.index_options import index_beside_option
from openetw.errors import InvalidArgument
from openetw.probe.lang.descriptions import parse_description
from openetw.probe.lang.errors import ProbeCompileError
from openetw.probe.lang.program import compile_script
from openetw.probe.lang.schema_types import merge_fields
from openetw.probe.lang.types import Type

_HELP = """Run a D program over trace files (clauses fire on the files' events in time order), or
live without --file: etw probes over running providers, kernel probes (root) over the kernel trace.

\b
  openetw probe --file t.etl -n 'etw:::generic_event { @[probemod] = count(); }'
  openetw probe --file t.etl -s script.d -q -f json 42 "text"   # $1=42, $2=text
  openetw probe --file t.etl -l                 # the probes (events) the file has
  openetw probe --file t.etl -l 'etw:*Kernel*::'
  openetw probe -c ./app -n 'etw:My.Provider::generic_event { @[probename] = count(); }'
  openetw probe -n 'syscall:::entry { @[execname] = count(); }'   # root; Ctrl-C ends it

Probes: etw:<provider guid|name>:<level>_<keyword>:<event id|name|generic_event> (empty
fields and * ? wildcards match anything), BEGIN, END, ERROR, tick-N (trace time),
interval:<unit>:<n>; live also syscall::<name>:entry|return, proc:::exec-success|exit|create,
sched:::on-cpu|off-cpu, io:::start|done, tcp:::send|receive, profile-N, and etw_trace(...).
Live args->Field is typed from installed manifests and --manifest files. Kernel probes infer
the context switches the kernel did not record (counted at the end as "switches inferred").
The language and the -f json records are described in docs/probe.md.
Exit status: 0, 1 after runtime errors or when the trace service ended the run's sessions, 2 on
a usage or compile error, or exit(n)'s n.
"""


def register(cli: click.Group) -> None:
    cli.add_command(probe_command)


@click.command("probe", help=_HELP)
@click.option("-n", "programs", multiple=True, metavar="PROGRAM", help="Program text (repeatable; joined in order).")
@click.option("-s", "script", type=click.Path(dir_okay=False, path_type=str), metavar="FILE.d", help="Program file.")
@click.option("-l", "--list", "list_pattern", is_flag=False, flag_value="", default=None, metavar="[PATTERN]",
              help="List the probes the files have (matching PATTERN, or -n's descriptions), with provider and event names and fields; "
                   "without --file, the events installed manifests and --manifest files declare.")  # fmt: skip
@click.option("--file", "files", multiple=True, type=click.Path(dir_okay=False, path_type=str), metavar="X.etl|X.evtx",
              help="Trace file or Event Log (.evtx) file (repeatable; merged in time order). Without one, the probes are live.")  # fmt: skip
@click.option("-p", "target_pid", type=int, metavar="PID", help="Live: trace this process's events only ($target is PID); end when it exits.")
@click.option("-c", "target_command", metavar="CMD", help="Live: run CMD, trace its events only ($target is its pid); end when it exits, with its status.")
@click.option("-w", "destructive", is_flag=True, help="Allow destructive actions (system(), stop()).")
@click.option("--manifest", "manifests", multiple=True, type=click.Path(path_type=str), metavar="FILE|DIR",
              help="Decode with this manifest (repeatable); installed manifests are used too.")  # fmt: skip
@click.option("-o", "output_path", type=click.Path(dir_okay=False, path_type=str), metavar="FILE", help="Write output here.")
@click.option("-q", "quiet", is_flag=True, help="Quiet: only what the program prints (no CPU/ID/FUNCTION:NAME lines).")
@click.option("-f", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format (json: NDJSON).")
@click.option("-x", "settings", multiple=True, metavar="OPTION=VALUE",
              help="Option: strsize, aggsize, aggsortkey, aggsortrev, quiet, switchrate, bufsize, codegen, destructive.")  # fmt: skip
@click.option("--json", "json_flag", is_flag=True, help="Same as -f json.")
@click.option("--no-index", "no_index", is_flag=True,
              help="Read the files in one streamed pass that writes no index (beside them or in the cache).")  # fmt: skip
@index_beside_option
@click.argument("macros", nargs=-1)
def probe_command(programs: tuple[str, ...], script: str | None, list_pattern: str | None, files: tuple[str, ...],
                  manifests: tuple[str, ...], output_path: str | None, quiet: bool, fmt: str,
                  settings: tuple[str, ...], json_flag: bool, no_index: bool, macros: tuple[str, ...],
                  target_pid: int | None, target_command: str | None, destructive: bool, index_beside: bool | None) -> None:  # fmt: skip
    from openetw.probe.run.adapter import Catalog, TraceFiles, schema_registry
    from openetw.probe.run.runner import ProbeRun

    json_mode = fmt == "json" or json_flag
    options = {}
    for item in settings:
        name, sep, value = item.partition("=")
        options[name.strip()] = value if sep else ""
    if not files:
        if list_pattern is not None:
            # Live: the events the installed manifests and --manifest files declare.
            patterns = [list_pattern] if list_pattern else _descriptions_of("\n".join(programs)) if programs else [""]
            _list(Catalog.from_manifests(manifests), patterns, json_mode)
            return
        _run_live(programs, script, macros, options, output_path, quiet, json_mode, target_pid, target_command, destructive, manifests)
        return
    if target_pid is not None or target_command is not None:
        raise InvalidArgument("-p and -c trace live processes: drop --file")
    if no_index and index_beside:
        raise click.UsageError("--no-index and --index-beside exclude each other")
    trace_files = TraceFiles(files, manifests=schema_registry(list(manifests)), index=not no_index, index_beside=index_beside)
    if list_pattern is not None:
        patterns = [list_pattern] if list_pattern else _descriptions_of("\n".join(programs)) if programs else [""]
        _list(Catalog.scan(trace_files), patterns, json_mode)
        return
    text, name = _program_text(programs, script)
    started = time.perf_counter()
    scanned: Catalog | None = None
    catalog: list[Any] | None = None
    if "args->" in text or "args ->" in text:
        scanned = Catalog.scan(trace_files)
        catalog = scanned.items()

    from openetw.probe.run.providers import PROBE_PROVIDERS

    program = compile_script(text, name=name, macros=list(macros), fields_of=_fields_from(catalog), options=options,
                             providers=frozenset(PROBE_PROVIDERS), destructive=destructive)  # fmt: skip
    for clause in program.clauses:
        for desc in clause.descriptions:
            if desc.provider in PROBE_PROVIDERS and not PROBE_PROVIDERS[desc.provider].over_files:
                raise ProbeCompileError(f"{desc.text}: {desc.provider} probes are live: drop --file", line=clause.line, source=name)
    compile_seconds = time.perf_counter() - started
    if program.options["codegen"]:
        click.echo(program.python_source, err=True)
    handle: Any = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout  # noqa: SIM115
    try:
        run = ProbeRun(program, trace_files, write=handle.write, json_mode=json_mode, quiet=quiet, catalog=scanned, destructive=destructive)
        run.compile_seconds = compile_seconds  # type: ignore[attr-defined]
        status = run.run()
        handle.flush()
    finally:
        if output_path:
            handle.close()
    if status:
        raise ReportedFailure("", exit_code=status)


def _fields_from(catalog: list[Any] | None) -> Any:
    """What ``args->`` may name for a clause's probes: the fields of the catalog's events they match, merged."""

    def fields_of(specs: list[str]) -> dict[str, Any] | None:
        merged: dict[str, Any] | None = None
        descriptions = [parse_description(spec) for spec in specs]
        for identity, fields, _count in catalog or []:
            if fields is None or not any(d.special is None and d.match(identity) for d in descriptions):
                continue
            merged = dict(fields) if merged is None else merge_fields(merged, fields)
        return merged

    return fields_of


def _program_text(programs: tuple[str, ...], script: str | None) -> tuple[str, str]:
    if script and programs:
        raise InvalidArgument("give the program with -n or -s, not both")
    if script:
        try:
            with open(script, encoding="utf-8") as source:
                return source.read(), script
        except OSError as error:
            raise InvalidArgument(f"{script}: {error.strerror}") from None
    if programs:
        # A bare description (dtrace -n 'etw:...:12') is a clause with the default action.
        return "\n".join(p if "{" in p or "/" in p else p + " { }" for p in programs), "<-n>"
    raise InvalidArgument("no program: give -n 'PROGRAM' or -s FILE.d (or -l to list probes)")


def _run_live(programs: tuple[str, ...], script: str | None, macros: tuple[str, ...], options: dict[str, str], output_path: str | None,
              quiet: bool, json_mode: bool, target_pid: int | None, target_command: str | None, destructive: bool,
              manifests: tuple[str, ...] = ()) -> None:  # fmt: skip
    """Live probes: etw probes over running providers, kernel probes over the kernel trace.
    ``args->`` names the fields the installed manifests and ``manifests`` declare."""
    import signal

    from openetw.probe.run.adapter import Catalog, schema_registry
    from openetw.probe.run.kernel_probes import (
        FAMILIES,
        kernel_flags_for,
        profile_rate,
        syscall_args_calls,
        syscall_args_execnames,
        uses_call_arguments,
    )
    from openetw.probe.run.live import LiveSessions, LiveTarget
    from openetw.probe.run.providers import PROBE_PROVIDERS
    from openetw.probe.run.runner import ProbeRun

    text, name = _program_text(programs, script)
    if target_pid is not None and target_command is not None:
        raise InvalidArgument("give -p PID or -c CMD, not both")
    target = LiveTarget(pid=target_pid) if target_pid is not None else LiveTarget(command=target_command) if target_command else None
    catalog = Catalog.from_manifests(manifests).items() if "args->" in text or "args ->" in text else None
    try:
        program = compile_script(text, name=name, macros=list(macros), options=options, providers=frozenset(PROBE_PROVIDERS),
                                 destructive=destructive, target=target.pid if target is not None else None,
                                 fields_of=_fields_from(catalog))  # fmt: skip
        if program.options["codegen"]:
            click.echo(program.python_source, err=True)
        descriptions = [d for clause in program.clauses for d in clause.descriptions]
        etw = [d for d in descriptions if d.special is None and d.provider not in FAMILIES]
        sampling = [d for d in descriptions if d.special == "timer" and d.name.startswith("profile-")]
        families = [f for f in FAMILIES if f != "profile" and any(d.provider == f for d in descriptions)] + (["profile"] if sampling else [])
        flags = kernel_flags_for(families, syscall_args=uses_call_arguments(text))
        sessions = LiveSessions(etw, kernel_flags=flags, profile_rate=profile_rate(sampling), target=target,
                                kernel_syscall_args=syscall_args_calls(descriptions) if "syscall_args" in flags else None,
                                kernel_syscall_args_execnames=syscall_args_execnames(program.tree, program.clauses)
                                if "syscall_args" in flags and program.tree is not None else None,
                                manifests=schema_registry(list(manifests)),
                                kernel_buffer_kb=max(1024, program.options["bufsize"] // 1024),
                                ready=lambda text: click.echo(f"openetw probe: {text}; Ctrl-C ends the run", err=True))  # fmt: skip
    except BaseException:
        if target is not None and target.process is not None:
            target.process.kill()
            target.close()
        raise
    handle: Any = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout  # noqa: SIM115
    previous = signal.signal(signal.SIGINT, lambda *_: sessions.stop())
    try:
        run = ProbeRun(program, sessions, write=handle.write, json_mode=json_mode, quiet=quiet,
                       target_pid=target.pid if target is not None else None, destructive=destructive)  # fmt: skip
        status = run.run()
        handle.flush()
    finally:
        signal.signal(signal.SIGINT, previous)
        if output_path:
            handle.close()
    if target is not None and target.status is not None and not run.exited:
        status = target.status or status
    if status:
        raise ReportedFailure("", exit_code=status)


def _descriptions_of(text: str) -> list[str]:
    """The probe descriptions of a program's clauses (``-l -n PROGRAM``), or the text itself
    when it is a bare description (``-l -n 'etw:::12'``)."""
    from openetw.probe.lang.parser import parse

    try:
        program = parse(text, name="<-n>")
    except ProbeCompileError:
        return [text.strip()]
    return [spec.text for clause in program.clauses for spec in clause.probes] or [""]


def _list(catalog: Any, patterns: list[str], json_mode: bool) -> None:
    try:
        descriptions = [parse_description(p) for p in patterns if p]
    except ValueError as error:
        raise ProbeCompileError(str(error)) from None
    rows = []
    for identity, fields, count in catalog.items():
        probe = identity.guid, identity.function, str(identity.id)
        if descriptions and not any(d.special is None and d.match(identity) for d in descriptions):
            continue
        rows.append({
            "provider": "etw", "module": probe[0], "function": probe[1], "name": probe[2],
            "provider_name": identity.provider_name, "event_name": identity.event_name, "events": count,
            "fields": _field_names(fields) if fields is not None else None,
        })  # fmt: skip
    rows.sort(key=lambda r: (r["provider_name"] or "", r["module"], int(r["name"]), r["function"]))
    if json_mode:
        for number, row in enumerate(rows, 1):
            click.echo(json.dumps({"id": number, **row}))
        return
    click.echo(f"{'ID':>5} {'PROVIDER':<8} {'MODULE':<36} {'FUNCTION':<23} {'NAME':<6} EVENTS")
    for number, row in enumerate(rows, 1):
        click.echo(f"{number:>5} {row['provider']:<8} {row['module']:<36} {row['function']:<23} {row['name']:<6} {row['events']}")
        named = row["provider_name"] or "?"
        click.echo(f"{'':>5}   {named} / {row['event_name'] or '?'}" + (f"  ({', '.join(row['fields'])})" if row["fields"] else ""))


def _field_names(fields: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for name, ty in fields.items():
        if isinstance(ty, dict):
            out.extend(_field_names(ty, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}:{ty}" if isinstance(ty, Type) else f"{prefix}{name}")
    return out
