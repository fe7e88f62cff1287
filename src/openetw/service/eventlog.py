"""Moved to ``openetw.eventlog.service`` and ``openetw.eventlog.sink`` (the Event Log's half of the
trace service belongs to the Event Log's package); kept for one release."""

from openetw.eventlog.service import READERS_GROUP, WRITERS_GROUP, EventLogService, import_evtx, install_event_log
from openetw.eventlog.sink import ChannelRuntime, ChannelSink

__all__ = ["READERS_GROUP", "WRITERS_GROUP", "ChannelRuntime", "ChannelSink", "EventLogService", "import_evtx", "install_event_log"]
