"""The records an export reads: its inputs merged in time order, then what the options keep.

Inputs are ``.etl`` files and ``.evtx`` logs (through the consumer's Event Log source). Every record
gets its position in the merged order (``record`` in the tables), counted before any filter,
so a position names the same record whatever was selected. ``Selection`` keeps records of
some providers (by name or GUID) and of a time window (FILETIMEs, both ends included); unknown
(damaged) records carry no time and are kept, so that damage is still shown.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl.reader import EtlReader, merge_records
from openetw.etl.record import EventRecord
from openetw.events.sources import SourceReader, open_reader
from openetw.guids import format_guid, parse_guid

__all__ = ["EvtxInput", "Selection", "open_inputs", "merged_records"]

EvtxInput = SourceReader  # the name exports used for an .evtx input


def open_inputs(paths: Sequence[str]) -> list[Any]:
    """A lenient reader per input (damage is counted in the readers' statistics)."""
    readers: list[Any] = []
    try:
        for path in paths:
            if not os.path.exists(path):
                raise InvalidArgument(f"no such file: {path}")
            if os.path.isdir(path):
                raise InvalidArgument(f"{path} is a directory, not a trace file")
            readers.append(open_reader(path))
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers


def merged_records(readers: Sequence[Any]) -> Iterator[EventRecord]:
    """Every record of ``readers`` in one time order."""
    if len(readers) == 1:
        records: Iterator[EventRecord] = readers[0].records(time_order=True)
        return records
    if all(isinstance(reader, EtlReader) for reader in readers):
        return merge_records(readers)
    streams = [reader.records(time_order=True) for reader in readers]
    return heapq.merge(*streams, key=lambda record: record.filetime)


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records an export keeps: ``providers`` (names or GUIDs), ``start``/``end`` (FILETIMEs)."""

    providers: tuple[str, ...] = ()
    start: int | None = None
    end: int | None = None

    @property
    def everything(self) -> bool:
        return not self.providers and self.start is None and self.end is None

    def provider_sets(self) -> tuple[set[str], set[str]]:
        """GUIDs (lower-case text) and names (lower-cased) of the ``providers`` asked for."""
        guids: set[str] = set()
        names: set[str] = set()
        for text in self.providers:
            try:
                guids.add(format_guid(parse_guid(text)))
            except ValueError:
                names.add(text.lower())
        return guids, names

    def in_window(self, record: EventRecord) -> bool:
        if (self.start is None and self.end is None) or record.kind == "unknown":
            return True
        when = record.filetime
        return (self.start is None or when >= self.start) and (self.end is None or when <= self.end)
