"""perf.data files and EventHeader events, pure: bytes in, objects out.

* :class:`~openetw.perfdata.reader.PerfData` — a ``perf record`` file (``PERFILE2``; file or pipe
  mode): header, attributes, feature sections (tracing data, event descriptions, build ids,
  clock), data records walked and counted, samples parsed by their ``sample_type``.
* :mod:`openetw.perfdata.eventheader` — EventHeader (``user_events``, Linux's ETW): tracepoint
  names, headers, extensions, metadata and payload decoding; :mod:`openetw.perfdata.encode`
  writes them.
* :mod:`openetw.perfdata.transcode` — samples as TraceLogging ``EventRecord``s, so every reader
  of ``.etl`` reads them (``openetw.consumer.perfdata_source`` is the file source).
"""

from openetw.perfdata.eventheader import (
    EhEvent,
    EhField,
    TracepointName,
    decode_fields,
    parse_event,
    parse_tracepoint_name,
)
from openetw.perfdata.reader import EventAttr, PerfData, Sample, is_perf_data

__all__ = [
    "EhEvent",
    "EhField",
    "EventAttr",
    "PerfData",
    "Sample",
    "TracepointName",
    "decode_fields",
    "is_perf_data",
    "parse_event",
    "parse_tracepoint_name",
]
