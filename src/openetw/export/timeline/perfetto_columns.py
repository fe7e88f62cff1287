"""A Perfetto trace of one ``.etl`` from its index: runs of plain instant events made into
track events straight from the index's rows, every other record through the timeline pass
(``builder``), in one stream.

The walk is ``chrome_columns``'s (the same selection of *plain* rows, the same runs while the
pass's pairing is idle, events with a counter and short runs stepped through the pass). A
plain row of a run is not built as a record nor stepped: its name and category come once per
record identity, its fields from the identity's compiled decoder over the payload the index
points at, its process and thread from the header (or the thread its fields name, as the pass
gives it), its process and thread named by the pass's own ``_Names`` where they are new; the
``Instant`` goes to the ``PerfettoWriter`` as the pass would give it. The packets are those of
the record-by-record export, in the same order with the same values (a test decodes both with
``tests/export/perfetto_values.py`` on every corpus trace and on made traces).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import IO, Any

import numpy as np

from openetw.consumer.columns import identity_keys
from openetw.export.from_columns import _Trace, _unique_identities
from openetw.export.timeline.builder import _COUNTERS, FILETIME_UNIX_TICKS, Naming, TimelineStats
from openetw.export.timeline.chrome_columns import _Pass, write_from_columns
from openetw.export.timeline.model import Instant
from openetw.export.timeline.perfetto import PerfettoWriter
from openetw.tdh.registry import SchemaRegistry

__all__ = ["write_perfetto_from_columns"]

_NO_ID = 0xFFFFFFFF


def write_perfetto_from_columns(
    path: str, registry: SchemaRegistry, output: Callable[[], ContextManager[IO[bytes]]], stats: TimelineStats,
    naming: Naming, progress: Callable[[int, float], None] | None = None,
) -> PerfettoWriter | None:  # fmt: skip
    """Writes ``path``'s timeline as a Perfetto trace (what ``write_perfetto`` of ``timeline``
    writes, packet values alike) to the stream ``output`` opens; ``None``, nothing opened, for a
    file to read record by record (as ``write_chrome_from_columns`` decides)."""
    writer: PerfettoWriter | None = write_from_columns(
        path, registry, output, stats, naming, progress, PerfettoWriter, _PerfettoPass
    )
    return writer


class _PerfettoPass(_Pass):
    def __init__(self, trace: _Trace, registry: SchemaRegistry, writer: PerfettoWriter, stats: TimelineStats,
                 naming: Naming) -> None:  # fmt: skip
        super().__init__(trace, registry, writer, stats, naming)  # type: ignore[arg-type]

    def _run(self, a: int, b: int) -> None:
        """Plain rows ``a:b``: made into instants here while the pairing is idle."""
        trace, builder = self.trace, self.builder
        if not builder.pairing.idle:
            self._step(a, b)
            return
        rows = trace.rows[a:b]
        lead, inverse = _unique_identities(identity_keys(rows), np.arange(b - a))
        identities: list[tuple[str, str, Any, bool]] = []
        for row in lead.tolist():
            record = trace.record(a + row)
            schema, provider, event = builder.identity(record)
            kind = record.kind
            name = event or (f"event {record.id}" if kind == "event" else f"{kind} {record.hook_id or record.opcode}")
            decoder = None if schema is None else builder.decoder(schema, record.pointer_size)
            identities.append(
                (name, builder.category(record, provider), decoder, event is not None and name in _COUNTERS)
            )
        blob = trace.map
        starts = (trace.at[a:b] + rows["user_data_offset"]).tolist()
        lengths = rows["user_data_length"].tolist()
        filetimes = rows["filetime"].astype(np.int64).tolist()
        pids, tids, levels = rows["pid"].tolist(), rows["tid"].tolist(), rows["level"].tolist()
        names, owner, stats, pairing = builder.names, builder.owner, self.stats, builder.pairing
        out, write = builder.out, self.writer.write
        for k, code in enumerate(inverse.tolist()):
            name, category, decoder, counter = identities[code]
            position = a + k
            if counter:  # an event with a counter: through the pass
                self._step(position, position + 1)
                continue
            if decoder is None:
                stats.undecodable += 1
                args: dict[str, Any] = {}
            else:
                start = starts[k]
                args = decoder(bytes(blob[start : start + lengths[k]]))[0]
            pid, tid = pids[k], tids[k]
            if pid == _NO_ID or tid == _NO_ID:
                pid, tid = owner(pid, tid, args)
            filetime = filetimes[k]
            ts = (filetime - FILETIME_UNIX_TICKS) * 100
            key = (ts, position)
            names.ensure(pid, tid, ts, filetime, key)
            if out:
                for item in out:
                    write(item)
                out.clear()
            write(Instant(ts, pid, tid, category, name, args, levels[k], None, None))
            stats.instants += 1
            pairing.passed(key)
