"""``openetw export`` (traces as Parquet, CSV or JSON lines) and ``openetw sql`` (DuckDB over them)."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import click

from openetw.cli.etl_commands import load_registry, manifest_option, no_installed_option, open_readers
from openetw.cli.failure import ReportedFailure
from openetw.cli.index_options import streamed_no_index_option
from openetw.cli.progress import quiet_option, show_progress
from openetw.cli.time_options import TimeSpec, time_window_options
from openetw.events.sources import ETL, trace_format
from openetw.export import FORMATS, Selection, export_files
from openetw.export.pipeline import ExportSummary
from openetw.export.sql import layout_for, list_tables, open_database, run_query
from openetw.export.timeline import TIMELINE_FORMATS
from openetw.safeio import umask_like

FLAME_FORMATS = ("speedscope", "pprof", "folded")  # openetw.export.flame's (a test holds them equal); loaded when used


def register(cli: click.Group) -> None:
    cli.add_command(export)
    cli.add_command(sql)


class _Progress:
    """Records read and the rate, on one line of stderr when it is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._last = 0.0

    def __call__(self, records: int, seconds: float) -> None:
        if not self.enabled or (seconds - self._last < 0.5 and records % 65536):
            return
        self._last = seconds
        rate = records / seconds if seconds > 0 else 0.0
        sys.stderr.write(f"\r{records:,} records, {seconds:.1f} s, {rate:,.0f} records/s ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _selection(files: tuple[str, ...], providers: tuple[str, ...], window: TimeSpec) -> Selection:
    """The providers and the time window (relative bounds count from the .etl inputs' earliest start)."""
    if not window.given:
        return Selection(providers=providers)
    traces = [path for path in files if trace_format(path) is ETL]
    readers = open_readers(tuple(traces)) if traces else []
    try:
        span = window.resolve(readers)
    finally:
        for reader in readers:
            reader.close()
    assert span is not None
    return Selection(providers=providers, start=span.start, end=span.end)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=str))
@click.option("--to", "fmt", type=click.Choice(FORMATS + TIMELINE_FORMATS + FLAME_FORMATS), default="parquet", show_default=True,
              help="Output format.")  # fmt: skip
@click.option("-o", "--output", type=click.Path(path_type=str),
              help="Directory (parquet, csv) or file (jsonl, perfetto, chrome, speedscope, pprof, folded; "
                   "- for stdout with jsonl, chrome, speedscope and folded).")  # fmt: skip
@click.option("--endpoint", metavar="URL", help="--to otlp: the OTLP/HTTP receiver (http://host:4318; /v1/logs and /v1/traces are added).")
@click.option("--check", "check_path", metavar="FILE", type=click.Path(dir_okay=False, path_type=str),
              help="Check a Perfetto or Chrome trace file instead of exporting (exit 1 when it has problems).")  # fmt: skip
@click.option("--provider", "providers", multiple=True, metavar="NAME_OR_GUID", help="Only records of this provider (repeatable).")
@click.option("--symbols", "symbol_dirs", multiple=True, metavar="DIR",
              help="speedscope, pprof, folded: a directory of PDBs naming native Windows frames (repeatable).")  # fmt: skip
@manifest_option
@no_installed_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@quiet_option
@time_window_options
@streamed_no_index_option
def export(
    files: tuple[str, ...], fmt: str, output: str | None, endpoint: str | None, check_path: str | None,
    providers: tuple[str, ...], symbol_dirs: tuple[str, ...], manifests: tuple[str, ...], no_installed: bool,
    as_json: bool, quiet: bool, window: TimeSpec,
) -> None:  # fmt: skip
    """Write the records of FILES (merged in time order) as tables, JSON lines or a timeline.

    \b
    parquet  OUT/events.parquet: one row per record, dump --json's keys as columns, plus
             "record" (the record's position: the join key), activity ids and process name;
             OUT/<Provider>/<Event>_v<version>.parquet: "record" and one typed column per
             decoded property, per event schema; OUT/_schemas.json: the tables, their columns
             and where each schema came from
    csv      the same tables as CSV files (arrays and structs as JSON text)
    jsonl    one JSON object per record: dump --json's keys, "properties" and "record"

    \b
    perfetto  a .perfetto-trace for ui.perfetto.dev: processes and threads, Start/Stop pairs as
              slices (async where they do not nest on a thread), activity ids as flows,
              every other event an instant with its fields, counters (disk bytes, GC heap),
              CSwitch/ReadyThread as CPU scheduling, SampledProfile+StackWalk as samples
    chrome    the same timeline as Chrome trace JSON (X/b/e slices, i, C, s/f, M, P)
    otlp      to an OpenTelemetry collector (--endpoint URL, OTLP/HTTP): events as log
              records, Start/Stop pairs as spans; prints exported, refused, retried
    --check FILE checks a Perfetto or Chrome file: interned ids defined, slices nested per
    track, flows paired, timestamps monotonic per sequence.

    \b
    speedscope  the SampledProfile stacks, frames named (see openetw stacks), as
                speedscope's JSON: one sampled profile per thread
    pprof       the same as a gzip-compressed pprof profile.proto (go tool pprof)
    folded      the same as collapsed stacks (flamegraph.pl): one line per distinct
                stack, "Process (pid);outer;...;inner count"

    Records no schema decodes are in the events table only and counted in the summary.
    Needs pyarrow for parquet and csv (pip install 'openetw[export]'); otlp needs
    pip install 'openetw[otlp]'.
    """
    if check_path is not None:
        _check(check_path, as_json)
        return
    if not files:
        raise click.UsageError("give at least one FILE to export (or --check FILE)")
    if fmt in TIMELINE_FORMATS:
        _export_timeline(files, fmt, output, endpoint, providers, manifests, no_installed, as_json, quiet, window)
        return
    if fmt in FLAME_FORMATS:
        _export_flame(files, fmt, output, symbol_dirs, manifests, no_installed, as_json, window)
        return
    if output is None:
        raise click.UsageError("--output is required")
    if fmt == "jsonl" and output != "-" and os.path.isdir(output):
        raise click.BadParameter(f"{output} is a directory", param_hint="--output")
    selection = _selection(files, providers, window)
    registry = load_registry(manifests, installed=not no_installed)
    progress = _Progress(show_progress(quiet, output_is_stdout=output == "-"))
    with umask_like(*files):  # what is written takes the traces' privacy
        summary = export_files(files, output, fmt, registry=registry, selection=selection, progress=progress)
    progress.done()
    _report(summary, as_json, to_stderr=output == "-")


def _check(path: str, as_json: bool) -> None:
    from openetw.export.trace_check import check_file

    result = check_file(path)
    if as_json:
        click.echo(json.dumps(result.as_json()))
    else:
        verdict = "ok" if result.ok else f"{result.problems} problems"
        click.echo(f"{path} ({result.format}): {verdict}")
        for key, value in result.counts.items():
            click.echo(f"  {key}: {value}")
        for error in result.errors:
            click.echo(f"  problem: {error}")
    if not result.ok:
        raise ReportedFailure(f"{path}: {result.problems} problems", exit_code=1)


def _export_timeline(
    files: tuple[str, ...], fmt: str, output: str | None, endpoint: str | None, providers: tuple[str, ...],
    manifests: tuple[str, ...], no_installed: bool, as_json: bool, quiet: bool, window: TimeSpec,
) -> None:  # fmt: skip
    from openetw.export.timeline import export_timeline

    if fmt == "otlp":
        if not endpoint:
            raise click.UsageError("--to otlp needs --endpoint URL")
        output = endpoint
    elif output is None:
        raise click.UsageError("--output is required")
    elif fmt == "perfetto" and output == "-":
        raise click.BadParameter("a Perfetto trace is binary: give a file", param_hint="--output")
    elif os.path.isdir(output):
        raise click.BadParameter(f"{output} is a directory", param_hint="--output")
    selection = _selection(files, providers, window)
    registry = load_registry(manifests, installed=not no_installed)
    progress = _Progress(show_progress(quiet, output_is_stdout=output == "-"))
    with umask_like(*files):
        summary = export_timeline(files, output, fmt, registry=registry, selection=selection, progress=progress, endpoint=endpoint)
    progress.done()
    text = json.dumps(summary.as_json()) if as_json else "\n".join(summary.lines())
    click.echo(text, err=output == "-")
    for error in summary.errors[:5]:
        click.echo(f"openetw: warning: {error}", err=True)
    if summary.delivery.get("refused"):
        raise ReportedFailure(f"the receiver refused {summary.delivery['refused']} records", exit_code=1)


def _export_flame(
    files: tuple[str, ...], fmt: str, output: str | None, symbol_dirs: tuple[str, ...], manifests: tuple[str, ...],
    no_installed: bool, as_json: bool, window: TimeSpec,
) -> None:  # fmt: skip
    from openetw.cli.stacks_commands import load_file_profile
    from openetw.export.flame import write_flame

    if output is None:
        raise click.UsageError("--output is required")
    if output == "-" and fmt == "pprof":
        raise click.BadParameter("a pprof profile is binary: give a file", param_hint="--output")
    if output != "-" and os.path.isdir(output):
        raise click.BadParameter(f"{output} is a directory", param_hint="--output")
    started = time.monotonic()
    profile = load_file_profile(files, window=window, manifests=manifests, no_installed=no_installed, symbol_dirs=symbol_dirs)
    if output == "-":
        written = write_flame(fmt, profile.samples, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    else:
        with umask_like(*files), open(output, "wb") as out:
            written = write_flame(fmt, profile.samples, out)
    summary = {"inputs": list(files), "output": output, "format": fmt, "written": written,
               "seconds": round(time.monotonic() - started, 3), **profile.as_json()}  # fmt: skip
    naming = profile.naming
    text = (
        f"wrote {output} ({fmt}): {written:,} samples; {naming.frames} distinct frames, "
        f"{naming.named / naming.frames if naming.frames else 0:.1%} named"
    )
    click.echo(json.dumps(summary) if as_json else text, err=output == "-")


def _report(summary: ExportSummary, as_json: bool, *, to_stderr: bool = False) -> None:
    text = json.dumps(summary.as_json()) if as_json else "\n".join(summary.lines())
    click.echo(text, err=to_stderr)
    for error in summary.errors[:5]:
        click.echo(f"openetw: warning: {error}", err=True)


# -- sql --------------------------------------------------------------------------------------
@click.command()
@click.argument("args", nargs=-1, required=True, metavar="QUERY FILE.etl|DIR...")
@click.option("--tables", "show_tables", is_flag=True, help="List the tables and their columns instead of running a query.")
@click.option("--json", "as_json", is_flag=True, help="The rows as a JSON array of objects.")
@click.option("--csv", "as_csv", is_flag=True, help="The rows as CSV with a header line.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Where traces are exported before querying (default: $XDG_CACHE_HOME/openetw/tables).")  # fmt: skip
@manifest_option
@no_installed_option
@click.option("--no-index", "no_index", is_flag=True, help="Export the traces to a temporary folder removed after the query (nothing kept in the cache).")
def sql(
    args: tuple[str, ...], show_tables: bool, as_json: bool, as_csv: bool, cache_dir: str | None,
    manifests: tuple[str, ...], no_installed: bool, no_index: bool,
) -> None:  # fmt: skip
    """Run a SQL QUERY (DuckDB) over traces or exported layouts.

    \b
    openetw sql "SELECT provider_name, count(*) FROM events GROUP BY 1 ORDER BY 2 DESC" trace.etl
    openetw sql 'SELECT * FROM "Windows Kernel/DiskIO/Read" LIMIT 5' out/
    openetw sql --tables trace.etl

    Tables: "events" (one row per record) and "<Provider>/<Event>" (one per event, with a
    "record" column joining to events.record); quote names with a slash. A trace file is
    exported to a cache once (again only when it changes); a directory written by
    openetw export --to parquet is used as it is. Needs duckdb and pyarrow
    (pip install 'openetw[export]').
    """
    if as_json and as_csv:
        raise click.BadParameter("--json and --csv exclude each other")
    if show_tables:
        query, paths = None, list(args)
    else:
        if len(args) < 2:
            raise click.UsageError("give a QUERY and at least one FILE.etl or DIR (or --tables FILE...)")
        query, paths = args[0], list(args[1:])
    with contextlib.ExitStack() as scratch:
        if no_index:
            cache_dir = scratch.enter_context(tempfile.TemporaryDirectory(prefix="openetw-sql-"))
        directories = _layouts(paths, cache_dir, manifests, no_installed)
        connection = open_database(directories)
        try:
            if query is None:
                _print_tables(list_tables(connection), as_json)
                return
            result = run_query(connection, query)
        finally:
            connection.close()
    out = sys.stdout
    if as_json:
        out.write(json.dumps([dict(zip(result.columns, map(_json_value, row), strict=True)) for row in result.rows]) + "\n")
    elif as_csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([[_text_value(value) for value in row] for row in result.rows])
    else:
        _print_grid(result.columns, [[_text_value(value) for value in row] for row in result.rows])


def _layouts(paths: list[str], cache_dir: str | None, manifests: tuple[str, ...], no_installed: bool) -> list[str]:
    directories = [path for path in paths if os.path.isdir(path)]
    traces = [path for path in paths if not os.path.isdir(path)]
    if not traces:
        return directories

    def export_to(files: list[str], directory: str) -> None:
        registry = load_registry(manifests, installed=not no_installed)
        progress = _Progress(show_progress(False, output_is_stdout=False))
        started = time.perf_counter()
        summary = export_files(files, directory, "parquet", registry=registry, progress=progress)
        progress.done()
        if progress.enabled:
            click.echo(f"exported {summary.rows:,} events in {time.perf_counter() - started:.1f} s to {directory}", err=True)

    meta = click.get_current_context().meta
    given = [("manifest", item) for item in manifests] + [("mof", item) for item in meta.get("openetw.mof_files", ())]
    given += [("tmf", item) for item in meta.get("openetw.tmf_files", ())]
    extra = [f"{kind}={os.path.abspath(item)}" for kind, item in given] + [f"installed={not no_installed}"]
    directory, _fresh = layout_for(traces, export_to, cache_dir=cache_dir, extra=extra)
    return directories + [directory]


def _json_value(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        if isinstance(value, datetime) and value.tzinfo is not None:
            return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _text_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_json_value(value))
    plain = _json_value(value)
    return plain if isinstance(plain, str) else str(plain)


def _print_grid(columns: list[str], rows: list[list[str]]) -> None:
    widths = [len(name) for name in columns]
    for row in rows:
        for number, cell in enumerate(row):
            widths[number] = min(max(widths[number], len(cell)), 80)
    line = "  ".join(name.ljust(width) for name, width in zip(columns, widths, strict=True))
    click.echo(line.rstrip())
    click.echo("  ".join("-" * width for width in widths))
    for row in rows:
        cells = [cell if len(cell) <= 80 else cell[:77] + "..." for cell in row]
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip())
    click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def _print_tables(tables: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(tables))
        return
    for table in tables:
        name = table["table"]
        click.echo(name if name == "events" else f'"{name}"')
        for column in table["columns"]:
            click.echo(f"    {column['name']}  {column['type']}")


__all__ = ["export", "register", "sql"]
