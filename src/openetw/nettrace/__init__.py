"""EventPipe traces (``.nettrace``, ``.netperf``): the container .NET writes on every OS.

A pure layer beside ``etl`` and ``evtx``: bytes in, objects out, no files opened. ``NettraceReader``
reads the container (object versions 1-5: .NET Core 2.0 to .NET 8; the block format of
version 6, .NET 9 and later) into ``NettraceEvent``s;
``openetw.nettrace.records`` turns them into ``EventRecord``s the rest of openetw reads as ETW
events.
"""

from __future__ import annotations

from openetw.nettrace.container import TraceInfo
from openetw.nettrace.metadata import EventMetadata, Field
from openetw.nettrace.reader import NettraceEvent, NettraceReader, NettraceStats

__all__ = ["EventMetadata", "Field", "NettraceEvent", "NettraceReader", "NettraceStats", "TraceInfo"]
