"""The kernel trace on Linux: tracefs tracepoints, perf events and the proc connector recorded
as NT Kernel Logger events.

* :class:`KernelSession` — a kernel trace to an ``.etl`` file or a record sink (start/stop, stats),
  over the event sources its :class:`KernelSessionConfig` (flags, ``source``, ...) chooses.
* :class:`KernelEventSource` — what a source gives a session; :class:`TracefsSource` (root),
  :class:`~openetw.kernel.perf.PerfSource`, :class:`~openetw.kernel.proc_connector.ProcConnectorSource`.
* :func:`probe` (``openetw.kernel.capabilities``) — which kernel event sources this process may
  use, and why not.
* :mod:`openetw.kernel.tracefs_format`, :mod:`openetw.kernel.ringbuffer` — pure parsers of
  tracefs ``format`` files and ``trace_pipe_raw`` sub-buffers.
* :class:`KernelEventMapper` — tracepoint events → Process/Thread/CSwitch/DiskIo/TcpIp records.
"""

import sys as _sys

from openetw.kernel import capabilities as _capabilities
from openetw.kernel.capabilities import Capability, KernelCapabilities, probe
from openetw.kernel.classes import FLAG_EVENTS, KERNEL_FLAGS, KernelEventMapper, tracepoints_for
from openetw.kernel.ringbuffer import EventDecoder, PageParser, RawEvent, SubBuffer
from openetw.kernel.session import SOURCE_CHOICES, KernelSession, KernelSessionConfig
from openetw.kernel.source import KernelEventSource, RawKernelEvent, RecordSink
from openetw.kernel.tracefs import TracefsInstance, find_tracefs, remove_stale_instances
from openetw.kernel.tracefs_format import parse_event_format, parse_header_event, parse_header_page
from openetw.kernel.tracefs_source import TracefsSource

__all__ = [
    "FLAG_EVENTS",
    "KERNEL_FLAGS",
    "SOURCE_CHOICES",
    "Capability",
    "EventDecoder",
    "KernelCapabilities",
    "KernelEventMapper",
    "KernelEventSource",
    "KernelSession",
    "KernelSessionConfig",
    "PageParser",
    "RawEvent",
    "RawKernelEvent",
    "RecordSink",
    "SubBuffer",
    "TracefsInstance",
    "TracefsSource",
    "find_tracefs",
    "parse_event_format",
    "parse_header_event",
    "parse_header_page",
    "probe",
    "remove_stale_instances",
    "tracepoints_for",
]

# ``openetw.kernel.capabilities``, the module's old path, kept for one release (``probe`` here is the function)
_sys.modules.setdefault(f"{__name__}.probe", _capabilities)
