"""``.evtx`` files in ``openetw info``, ``dump``, ``report`` and ``relog``.

``EvtxFileReader`` gives an ``.evtx`` file the face the file commands use for ``.etl`` readers
(records in time order, statistics with the errors met, a header with nothing lost), so that
the commands take both kinds of file. ``evtx_summary`` is what ``info`` shows of an ``.evtx``;
``relog_to_evtx`` writes the events of ``.etl`` and ``.evtx`` files as a new ``.evtx``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from openetw.consumer.evtx_files import is_evtx_file, map_file
from openetw.errors import InvalidArgument
from openetw.events.sources import EVTX, SourceReader
from openetw.evtx.reader import EvtxReader

if TYPE_CHECKING:
    from openetw.export.evtx_relog import relog_to_evtx

__all__ = ["EvtxFileReader", "evtx_summary", "is_evtx_file", "print_evtx_summary", "relog_to_evtx"]


# ``relog_to_evtx`` lives in ``openetw.export.evtx_relog`` (the viewer writes .evtx too); named
# here on first use, so that reading a file's summary loads no export module.
_LAZY = {"relog_to_evtx": "openetw.export.evtx_relog"}


def __getattr__(name: str) -> object:
    from openetw._lazy import load

    return load(__name__, _LAZY, globals(), name)


class EvtxFileReader(SourceReader):
    """An ``.evtx`` file with the interface of the ``.etl`` reader the file commands use."""

    def __init__(self, path: str) -> None:
        super().__init__(path, EVTX)


def evtx_summary(path: str) -> dict[str, Any]:
    """Header facts and counts of an ``.evtx`` file (``info``)."""
    reader = EvtxReader(map_file(path), path=path)
    h = reader.header
    providers: Counter[str] = Counter()
    first = last = None
    first_time = last_time = None
    records = 0
    for batch in reader.batches(data=False):  # the compiled walk's <System> columns (no EventData): no record object per event
        if not len(batch):
            continue
        records += len(batch)
        providers.update(name or "-" for name in batch.fact("provider_name"))
        low, high = min(batch.record_ids), max(batch.record_ids)
        first = low if first is None else min(first, low)
        last = high if last is None else max(last, high)
        times = batch.fact("time_created")
        first_time = min(times) if first_time is None else min(first_time, *times)
        last_time = max(times) if last_time is None else max(last_time, *times)
    chunks = reader.chunk_infos
    return {
        "path": path,
        "format": "evtx",
        "version": f"{h.major_version}.{h.minor_version}",
        "header_chunks": h.number_of_chunks,
        "chunks": sum(1 for c in chunks if c.state == "ok"),
        "unused_blocks": sum(1 for c in chunks if c.state == "unused"),
        "damaged_chunks": [c.index for c in chunks if c.state == "damaged"],
        "flags": h.flags,
        "dirty": h.dirty,
        "full": h.full,
        "next_record_id": h.next_record_identifier,
        "records": records,
        "damaged_records": reader.stats.records_damaged,
        "first_record_id": first,
        "last_record_id": last,
        "first_time": _time(first_time),
        "last_time": _time(last_time),
        "crc_mismatches": reader.stats.crc_mismatches,
        "providers": [{"provider": name, "records": count} for name, count in providers.most_common()],
        "records_outside_header": reader.stats.records_outside_header,
        "errors": [str(e) for e in reader.losses],
        "notices": [str(e) for e in reader.notices],
    }


def _time(filetime: int | None) -> str | None:
    from openetw.events.text import filetime_text

    return None if filetime is None else filetime_text(filetime)


def print_evtx_summary(s: dict[str, Any]) -> None:
    echo = click.echo
    flags = ", ".join(name for name, on in (("dirty", s["dirty"]), ("full", s["full"])) if on) or "clean"
    echo(s["path"])
    echo(f"  format         evtx {s['version']}   flags 0x{s['flags']:x} ({flags})")
    damaged = f", damaged {s['damaged_chunks']}" if s["damaged_chunks"] else ""
    echo(f"  chunks         {s['chunks']} (header says {s['header_chunks']}), {s['unused_blocks']} unused{damaged}")
    echo(f"  records        {s['records']}   ids {s['first_record_id']} .. {s['last_record_id']}   next {s['next_record_id']}")
    echo(f"  time           {s['first_time']} .. {s['last_time']}")
    if s["damaged_records"] or s["crc_mismatches"] or s["records_outside_header"]:
        echo(
            f"  damaged        {s['damaged_records']} records skipped, {s['crc_mismatches']} CRC32 mismatches, "
            f"{s['records_outside_header']} records kept outside their chunk header's range"
        )
    echo("  providers")
    for p in s["providers"]:
        echo(f"    {p['records']:>9}  {p['provider']}")


def check_output(files: Iterable[str], output: str) -> None:
    if any(os.path.abspath(output) == os.path.abspath(path) for path in files):
        raise InvalidArgument("the output must not be one of the inputs")
