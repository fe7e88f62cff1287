"""The kernel trace on Linux: tracefs tracepoints recorded as NT Kernel Logger events.

* :class:`KernelSession` — a kernel trace to an ``.etl`` file (start/stop, stats).
* :func:`probe` — which kernel event sources this process may use, and why not.
* :mod:`openetw.kernel.tracefs_format`, :mod:`openetw.kernel.ringbuffer` — pure parsers of
  tracefs ``format`` files and ``trace_pipe_raw`` sub-buffers.
* :class:`KernelEventMapper` — tracepoint events → Process/Thread/CSwitch/DiskIo/TcpIp records.
"""

from openetw.kernel.classes import FLAG_EVENTS, KERNEL_FLAGS, KernelEventMapper, tracepoints_for
from openetw.kernel.probe import Capability, KernelCapabilities, probe
from openetw.kernel.ringbuffer import EventDecoder, PageParser, RawEvent, SubBuffer
from openetw.kernel.session import KernelSession
from openetw.kernel.tracefs import TracefsInstance, find_tracefs, remove_stale_instances
from openetw.kernel.tracefs_format import parse_event_format, parse_header_event, parse_header_page

__all__ = [
    "FLAG_EVENTS",
    "KERNEL_FLAGS",
    "Capability",
    "EventDecoder",
    "KernelCapabilities",
    "KernelEventMapper",
    "KernelSession",
    "PageParser",
    "RawEvent",
    "SubBuffer",
    "TracefsInstance",
    "find_tracefs",
    "parse_event_format",
    "parse_header_event",
    "parse_header_page",
    "probe",
    "remove_stale_instances",
    "tracepoints_for",
]
