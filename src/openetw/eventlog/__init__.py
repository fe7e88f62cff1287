"""The Event Log: channels that always listen, durable per-channel logs, queries.

Public API (stable; the web viewer and the fleet collector code against it):

* ``LogStore(directory)`` (``store``): ``.names()``, ``.logs()`` -> ``[(name, LogInfo)]``,
  ``.create(log, LogConfig)``, ``.ensure(log, LogConfig)``, ``.config(log)``,
  ``.set_config(log, LogConfig)``, ``.append(log, [NewEvent]) -> AppendResult``,
  ``.query(log, *, xpath=None, count=None, reverse=False, after_record_id=None, text=None)``
  -> iterator of ``StoredEvent``, ``.query_file(path, ...)``, ``.info(log) -> LogInfo``,
  ``.clear(log)``, ``.archives(log)``, ``.note_lost(log, n)``, ``.note_refused(log, n)``;
* ``NewEvent`` / ``StoredEvent`` (``model``): the ``<System>`` facts as attributes, ``record``
  (the whole EVENT_RECORD bytes, or the ``.evtx`` record's when ``format == "evtx"``), ``fields``,
  ``message``; ``StoredEvent.record_id``; ``event_xml(event)`` renders it (``render``);
* ``LogConfig``, ``LogInfo``, ``AppendResult`` (``model``);
* ``parse_query`` / ``parse_query_list`` / ``parse_filter``: the Event Log's XPath subset (the read model's, ``openetw.events.xpath``);
* ``default_logs_dir(system)`` (``paths``): where a service keeps its logs.

Pure modules: ``model``, ``xpath``, ``retention``, ``access``, ``channels``, ``render``; shells:
``store`` (SQLite files), ``paths``.
"""

from __future__ import annotations

from openetw.eventlog.model import AppendResult, LogConfig, LogInfo, NewEvent, StoredEvent
from openetw.eventlog.paths import default_logs_dir
from openetw.eventlog.render import event_node, event_xml, from_etw_record, from_evtx_record
from openetw.eventlog.store import LogStore
from openetw.events.xpath import Query, QueryList, parse_filter, parse_query, parse_query_list

__all__ = [
    "AppendResult",
    "LogConfig",
    "LogInfo",
    "LogStore",
    "NewEvent",
    "Query",
    "QueryList",
    "StoredEvent",
    "default_logs_dir",
    "event_node",
    "event_xml",
    "from_etw_record",
    "from_evtx_record",
    "parse_filter",
    "parse_query",
    "parse_query_list",
]
