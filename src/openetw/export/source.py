"""The records an export reads: its inputs merged in time order, then what the options keep.

Inputs are ``.etl`` files (and ``.evtx`` logs once the Event Log reader is there). Every record
gets its position in the merged order (``record`` in the tables), counted before any filter,
so a position names the same record whatever was selected. ``Selection`` keeps records of
some providers (by name or GUID) and of a time window (FILETIMEs, both ends included); unknown
records carry no time and are kept only without a window.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from openetw.errors import InvalidArgument
from openetw.etl.reader import EtlReader, merge_records
from openetw.etl.record import EventRecord
from openetw.guids import format_guid, parse_guid

__all__ = ["Selection", "open_inputs", "merged_records"]


def open_inputs(paths: Sequence[str]) -> list[EtlReader]:
    """A lenient reader per input (damage is counted in the readers' statistics)."""
    readers = []
    for path in paths:
        if not os.path.exists(path):
            raise InvalidArgument(f"no such file: {path}")
        if os.path.isdir(path):
            raise InvalidArgument(f"{path} is a directory, not a trace file")
        if path.lower().endswith(".evtx"):
            readers.append(_evtx_reader(path))
            continue
        readers.append(EtlReader(path, strict=False))
    return readers


def _evtx_reader(path: str) -> EtlReader:
    try:
        from openetw import evtx  # noqa: F401 - the Event Log reader, when installed
    except ImportError:
        raise InvalidArgument(f"{path}: reading .evtx logs needs openetw's Event Log reader (openetw.evtx), not in this build") from None
    raise InvalidArgument(f"{path}: .evtx inputs are not supported by export yet")


def merged_records(readers: Sequence[EtlReader]) -> Iterator[EventRecord]:
    """Every record of ``readers`` in one time order."""
    if len(readers) == 1:
        return readers[0].records(time_order=True)
    return merge_records(readers)


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
        if self.start is None and self.end is None:
            return True
        if record.kind == "unknown":
            return False
        when = record.filetime
        return (self.start is None or when >= self.start) and (self.end is None or when <= self.end)
