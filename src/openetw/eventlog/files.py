"""Queries over files rather than logs: an ``.evtx`` file read in place (``log query FILE.evtx``).

The events come out as ``StoredEvent``s (``format == "evtx"``, ``record_id`` the file's
EventRecordID), tested with the same XPath evaluator the logs use. The file is opened as every
source is (``openetw.events.sources``), so the read model's damage policy decides which records
are kept: what cost records is reported in ``errors``, what was only counted (CRC32 mismatches,
stale chunk headers) in ``notices``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from openetw.errors import EvtxFormatError
from openetw.eventlog.model import StoredEvent
from openetw.eventlog.render import evtx_node, from_evtx_record
from openetw.eventlog.store import now_filetime
from openetw.events.sources import EVTX, damage_of, open_source
from openetw.events.xpath import Query, QueryList, parse_filter

__all__ = ["EvtxQuery"]


class EvtxQuery:
    """The events of one ``.evtx`` file that a query selects, in record-id order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._source: Any = self._open()  # a file that cannot be read fails here
        self.errors: list[EvtxFormatError] = []
        self.notices: list[EvtxFormatError] = []

    def _open(self) -> Any:
        source = open_source(self.path, as_format=EVTX)  # named .evtx: read as one, whatever its bytes
        source.open()
        return source

    def events(
        self, *, xpath: str | Query | QueryList | None = None, count: int | None = None, reverse: bool = False,
        after_record_id: int | None = None, now: int | None = None,
    ) -> Iterator[StoredEvent]:  # fmt: skip
        query = parse_filter(xpath) if isinstance(xpath, str) else xpath
        now = now_filetime() if now is None else now
        source, self._source = self._source or self._open(), None  # each reading counts its own damage
        records: Any = sorted(source.records(), key=lambda r: r.record_id, reverse=reverse)
        taken = 0
        for record in records:
            if after_record_id is not None and (record.record_id <= after_record_id if not reverse else record.record_id >= after_record_id):
                continue
            if query is not None:
                try:
                    node = evtx_node(record)
                except EvtxFormatError as error:
                    self.errors.append(error)
                    continue
                if node is None or not query.matches(node, now):
                    continue
            new = from_evtx_record(record)
            event = StoredEvent(**vars(new), record_id=record.record_id, log=os.path.basename(self.path))
            yield event
            taken += 1
            if count is not None and taken >= count:
                break
        damage = damage_of(source)
        self.errors.extend(damage.losses)
        self.notices.extend(damage.notices)
