"""Events of ``.etl`` and ``.evtx`` files written as a new ``.evtx`` (``openetw relog -o x.evtx``, the viewer's export).

``.evtx`` records keep their content; ``.etl`` events are decoded and written with their
properties as ``EventData``.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from openetw.safeio import create_output

if TYPE_CHECKING:
    from openetw.evtx.writer import EvtxWriter

__all__ = ["relog_to_evtx"]


def relog_to_evtx(files: Iterable[str], output: str, *, registry: Any, readers: list[Any], file_mode: int = 0o666) -> EvtxWriter:
    """Write the events of ``readers`` (``.etl`` and ``.evtx``), merged in time order, as ``output``.

    ``.evtx`` records keep their content; ``.etl`` events are decoded with ``registry`` and
    written with their properties as ``EventData``. Chunks are written as they fill; the file
    header last. ``output`` is created with ``file_mode`` at most (``safeio.create_output``).
    """
    from openetw.events.decoded import decode_record
    from openetw.evtx.events import event_header
    from openetw.evtx.writer import EvtxWriter
    from openetw.tdh.context import DecodeContext

    context = DecodeContext(registry)
    streams = [reader.records(time_order=True) for reader in readers]
    merged = heapq.merge(*streams, key=lambda record: record.filetime) if len(streams) > 1 else streams[0]
    writer = EvtxWriter()
    with os.fdopen(create_output(output, file_mode), "wb") as out:
        out.write(writer.file_header(dirty=True))
        for record in merged:
            if record.kind == "evtx":
                writer.add_record(record)
            elif record.kind != "unknown":
                context.observe(record)
                event = decode_record(record, registry, context)
                schema = event.schema
                header = event_header(
                    record,
                    provider_name=event.provider_name,
                    provider_id=getattr(schema, "provider_id", None),
                    channel=getattr(schema, "channel_name", None),
                )
                writer.add_event(header, event.properties)
            for chunk in writer.take_chunks():
                out.write(chunk)
        for chunk in writer.finish():
            out.write(chunk)
        out.seek(0)
        out.write(writer.file_header())
    return writer
