"""``openetw report``: decoded events of .etl files, as tracerpt and PerfView write them."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO

import click

from openetw.cli.etl_commands import (
    load_registry,
    manifest_option,
    no_installed_option,
    open_readers,
    raise_if_damaged,
    records_of,
    warn_about,
)
from openetw.cli.index_options import streamed_no_index_option
from openetw.cli.progress import quiet_option, show_progress, with_progress
from openetw.cli.time_options import TimeSpec, time_window_options, within
from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord
from openetw.events.as_csv import write_csv
from openetw.events.as_json import write_json
from openetw.events.as_xml import write_xml
from openetw.events.decoded import DecodedRecord, decode_records
from openetw.report import PerfViewReport, Summary
from openetw.tdh.context import DecodeContext

FORMATS = ("summary", "csv", "xml", "json", "perfview")


def register(cli: click.Group) -> None:
    cli.add_command(report)


def _first_pass(files: tuple[str, ...]) -> Iterator[EventRecord]:
    """Every record of ``files`` in time order, for learning what the trace says about itself.
    Read on readers of their own, so that a damaged file is reported once (by the last pass)."""
    readers = open_readers(files)
    try:
        yield from records_of(readers, time_order=True)
    finally:
        for reader in readers:
            reader.close()


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    try:
        stream = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115 - closed below
    except OSError as error:
        raise click.BadParameter(f"cannot write {path}: {error.strerror or error}", param_hint="--output") from None
    with stream:
        yield stream


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="summary", show_default=True, help="What to write.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None, help="Write here instead of stdout.")
@manifest_option
@no_installed_option
@click.option("--json", "as_json", is_flag=True, help="The summary as one JSON document; with --format json, JSON lines (other formats refuse it).")
@click.option("--first-per-type", is_flag=True, help="With --format perfview: one line per event name, its count and its first event as XML.")
@quiet_option
@time_window_options
@streamed_no_index_option
def report(files: tuple[str, ...], fmt: str, output: str | None, manifests: tuple[str, ...], no_installed: bool, as_json: bool,
           first_per_type: bool, quiet: bool, window: TimeSpec) -> None:  # fmt: skip
    """Decode every event of each FILE (merged in time order) and write a report.

    \b
    summary   events per provider and event, time range, events lost, what did not decode
    csv       one row per event: time, provider, event, descriptor, pid/tid, process, cpu, fields
    xml       tracerpt's <Events> document (System, EventData, RenderingInfo per event)
    json      one JSON object per event (dump --json's keys plus "properties")
    perfview  the text of PerfView's TraceEvent parsing tests (EVENT and COUNT lines); with
              --first-per-type the text of its EventPipe parsing tests: "Provider/Event, count,
              <Event .../>", the first event of each name as TraceEvent's XML

    Events are decoded with installed manifests, --manifest files, TraceLogging metadata,
    the kernel's classic layouts, and what the trace itself carries (EventSource manifests,
    TDH metadata). Process names come from the trace's kernel and Kernel-Process events,
    learnt from the whole trace also when --start/--end keep only a part of it.
    """
    if first_per_type and fmt != "perfview":
        raise click.BadParameter("--first-per-type is a form of --format perfview", param_hint="--first-per-type")
    if as_json and fmt not in ("summary", "json"):
        raise click.BadParameter(f"--format {fmt} has no JSON form (use --format json or summary)", param_hint="--json")
    readers = open_readers(files)
    span = window.resolve(readers)
    registry = load_registry(manifests, installed=not no_installed)
    if fmt == "perfview":
        from openetw.events.trace_state import TraceState

        context: DecodeContext = TraceState(registry)  # the one trace-state tracker
    else:
        context = DecodeContext(registry)
    records = within(with_progress(records_of(readers, time_order=True), readers, show_progress(quiet, output_is_stdout=output is None)), span)
    with _output(output) as out:
        if fmt == "perfview" and first_per_type:
            from openetw.report.perfview.first_events import first_event_lines

            for line in first_event_lines(records, registry, context):
                out.write(line + "\n")
        elif fmt == "perfview":
            perfview = PerfViewReport(registry, context)
            perfview.learn(_first_pass(files))
            for line in perfview.event_lines(records):
                out.write(line + "\n")
            for line in perfview.count_lines():  # known once every event was seen
                out.write(line + "\n")
        else:
            context.learn(_first_pass(files))
            events = decode_records(records, registry, context, observe=False)
            if fmt == "summary":
                _write_summary(out, events, readers, as_json)
            else:
                writer: Callable[[Iterable[DecodedRecord], TextIO], int] = {"csv": write_csv, "xml": write_xml, "json": write_json}[fmt]
                writer(events, out)
    warn_about(registry)
    raise_if_damaged(readers)


def _write_summary(out: TextIO, events: Iterable[DecodedRecord], readers: list[EtlReader], as_json: bool) -> None:
    summary = Summary(
        events_lost=sum(reader.header.events_lost for reader in readers),
        buffers_lost=sum(reader.header.buffers_lost for reader in readers),
    )
    summary.add_all(events)
    if as_json:
        data = summary.as_json()
        data["files"] = [reader.path for reader in readers]
        out.write(json.dumps(data) + "\n")
        return
    for reader in readers:
        out.write(f"{reader.path}\n")
    for line in summary.lines():
        out.write(line + "\n")


__all__ = ["FORMATS", "register", "report"]
