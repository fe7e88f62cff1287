"""``openetw collect --to log``: the fleet's events stored in the Event Log, as forwarded events.

Every event of every host goes to one log, ``ForwardedEvents`` (the Windows Event Collector's),
in ``DIR/logs`` (``openetw log query --logs-dir DIR/logs ForwardedEvents``), its ``Computer``
the host that wrote it, its fields and message rendered with the installed manifests (and the
events' own TraceLogging metadata). ``openetw log set --logs-dir DIR/logs ForwardedEvents``
changes its size and retention.

Each batch's events are appended in one transaction after the batch's ``.etl`` data is on disk;
the collector's books say, before the append, how many events the log had taken ever
(``LogInfo.written``) and which buffers the batch held, so a collector that stops between the
append and its books finds out which it was and appends once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from openetw.errors import OpenEtwError

__all__ = ["FORWARDED_LOG", "LogOutput"]

FORWARDED_LOG = "ForwardedEvents"


class LogOutput:
    def __init__(self, directory: str | Path) -> None:
        from openetw.eventlog import LogConfig, LogStore

        self.store = LogStore(directory)
        self.store.ensure(FORWARDED_LOG, LogConfig(owner=os.geteuid(), group=os.getegid(), mode=0o640, isolation="Custom", type="Operational"))
        self._registry: Any = None

    def written(self) -> int:
        """Events the log took ever (stored, refused by its retention, or counted lost)."""
        return int(self.store.info(FORWARDED_LOG).written)

    def events(self, host: str, header: bytes, buffers: list[bytes]) -> list[Any]:
        """The ``NewEvent``s of one session's buffers (its logfile header buffer first)."""
        from openetw.etl import EtlReader
        from openetw.etl.relog import is_logfile_header_record
        from openetw.eventlog import from_etw_record
        from openetw.events.decoded import decode_record

        if self._registry is None:
            from openetw.events.registry import build_registry

            self._registry = build_registry()
        events = []
        with EtlReader(bytes(header) + b"".join(buffers), strict=False) as reader:
            for record in reader:
                if is_logfile_header_record(record):
                    continue
                fields, message, name = None, None, None
                try:
                    decoded = decode_record(record, self._registry)
                    fields = decoded.text_properties() if decoded.decoded is not None else None
                    message, name = decoded.message, decoded.provider_name
                except (OpenEtwError, ValueError, KeyError, IndexError):
                    pass  # stored as it came: the record's bytes and System facts
                events.append(from_etw_record(record, provider_name=name, channel=FORWARDED_LOG, fields=fields, message=message,
                                              computer=host))  # fmt: skip
        return events

    def append(self, events: list[Any]) -> None:
        if events:
            self.store.append(FORWARDED_LOG, events)
