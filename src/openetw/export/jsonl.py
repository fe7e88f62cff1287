"""``--to jsonl``: one JSON object per record, ``dump --json``'s keys plus ``record``.

A row form rather than the table layout: ``OUT`` is one file (``-`` for standard output),
each line the record as ``dump --json`` prints it (with ``properties`` when decoded) and its
position in the merged time order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import IO

from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord
from openetw.events.as_json import event_to_json
from openetw.events.decoded import decode_record
from openetw.export.pipeline import ExportSummary, Progress
from openetw.export.source import Selection
from openetw.guids import format_guid
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry

__all__ = ["export_jsonl"]


def export_jsonl(
    readers: list[EtlReader],
    records: Iterable[EventRecord],
    registry: SchemaRegistry,
    out: IO[str],
    summary: ExportSummary,
    *,
    selection: Selection | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Writes ``records`` to ``out`` as JSON lines; returns ``summary`` filled in."""
    selection = selection if selection is not None else Selection()
    started = time.perf_counter()
    context = DecodeContext(registry, learn_threads=False, learn_images=False)  # process names are all it asks for
    guids, names = selection.provider_sets()
    position = -1
    for position, record in enumerate(records):
        if record.kind != "unknown":
            context.observe(record)
        if not selection.in_window(record):
            continue
        event = decode_record(record, registry, context)
        if selection.providers:
            guid = format_guid(record.provider_id) if record.provider_guid_bytes is not None else None
            name = (event.provider_name or "").lower()
            if guid not in guids and name not in names:
                continue
        data = {"record": position, **event_to_json(event)}
        out.write(json.dumps(data) + "\n")
        summary.rows += 1
        if event.schema is None:
            summary.undecodable += 1
        else:
            summary.decoded += 1
            if event.decoded is not None and event.decoded.errors:
                summary.property_errors += 1
        if progress is not None and position % 65536 == 65535:
            progress(position + 1, time.perf_counter() - started)
    summary.records += position + 1
    summary.errors.extend(str(error) for reader in readers for error in reader.stats.errors)
    summary.seconds += time.perf_counter() - started
    if progress is not None:
        progress(position + 1, summary.seconds)
    return summary
