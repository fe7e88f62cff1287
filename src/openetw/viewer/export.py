"""The filtered set of a source written as CSV, JSON lines, XML, ``.evtx`` or ``.etl``.

CSV, JSON and XML are what ``openetw report`` writes (one row, object or ``<Event>`` per event);
``.evtx`` is what ``openetw relog -o x.evtx`` writes; ``.etl`` copies each selected record byte
for byte, as ``openetw relog`` does (an ``.etl`` source or a live session). A log writes its own
(``LogSource.export_rows``): as ``openetw log query`` prints and ``log export`` writes, and its
stored ETW records as an ``.etl``.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from openetw.errors import InvalidArgument
from openetw.etl.record import EventRecord

__all__ = ["EXPORT_FORMATS", "export"]

EXPORT_FORMATS = {"csv": "text/csv", "json": "application/x-ndjson", "xml": "application/xml", "evtx": "application/octet-stream",
                  "etl": "application/octet-stream"}  # fmt: skip


class _Selected:
    """The selected records of a source with the interface ``relog`` reads."""

    def __init__(self, source: Any, rows: np.ndarray) -> None:
        self.source = source
        self.rows = rows
        self.path = source.name
        header = getattr(getattr(source, "_index", None), "header", None) or getattr(getattr(source, "_live", None), "header", None)
        self.header = header

    def records(self, time_order: bool = True) -> Iterator[EventRecord]:
        yield from self.source.records(self.rows)

    @property
    def context(self) -> Any:
        """The records' context (their clock), for a source with no logfile header of its own."""
        first = next(iter(self.source.records(self.rows[:1])), None)
        return first.context if first is not None else None


def export(source: Any, rows: np.ndarray, fmt: str) -> bytes:
    """The rows of ``source`` in format ``fmt`` (see the module doc), as bytes."""
    if fmt not in EXPORT_FORMATS:
        raise InvalidArgument(f"no export format {fmt!r}; formats are {', '.join(EXPORT_FORMATS)}")
    own = getattr(source, "export_rows", None)
    if own is not None:  # a log: its events as ``log query`` prints them
        data: bytes = own(rows, fmt)
        return data
    if fmt in ("csv", "json", "xml"):
        from openetw.events.as_csv import write_csv
        from openetw.events.as_json import write_json
        from openetw.events.as_xml import write_xml

        writer = {"csv": write_csv, "json": write_json, "xml": write_xml}[fmt]
        out = io.StringIO()
        writer(source.events(rows.tolist()), out)
        return out.getvalue().encode("utf-8")
    selected = _Selected(source, rows)
    fd, path = tempfile.mkstemp(prefix="openetw-viewer-", suffix=f".{fmt}")
    os.close(fd)
    try:
        if fmt == "evtx":
            from openetw.export.evtx_relog import relog_to_evtx

            relog_to_evtx([source.name], path, registry=source.registry, readers=[selected])
        else:
            if selected.header is None and not getattr(getattr(source, "format", None), "etw_records", False):
                raise InvalidArgument(f"{source.name} holds Event Log records: export it as .evtx, XML, JSON or CSV")
            from openetw.etl.relog import relog

            relog([selected], path)  # a reader's interface, over chosen records
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)
