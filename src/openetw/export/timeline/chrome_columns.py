"""Chrome trace JSON of one ``.etl`` from its index: runs of plain instant events written a run
at a time, every other record through the timeline pass (``builder``), in one stream.

The file's index (``build_index_data``, in the time order ``EtlReader.records(time_order=True)``
gives) is walked in order. A row is *plain* when the pass would make only an instant of it:
a classic, instance or manifest event (not a kernel record), without
extended data, not a Start/Stop (opcodes 1/2 of a manifest event), not a record the decode
context learns from (``from_columns._teaching``), not an event that carries a counter. Runs of
at least ``_RUN`` plain rows, met while the pass's pairing is idle (no slice open, nothing
waiting: an instant is given out at once), are written here: names and categories made once per
record identity (as the pass names it at the run's start: only the records the pass steps
teach the context), process and thread names given by the pass's own ``_Names`` where a
(process, thread) is new, each row's arguments decoded by the schema's compiled decoder and
written by ``ChromeWriter.args_text``, the ``ts`` text made from the integer nanoseconds
(``(ts - origin) / 1000`` as ``repr`` writes it), the rows composed by ``row_text``. Every other
row is built as a record (``from_columns._Trace.record``) and stepped through the pass. The
events come in the order the record-by-record export writes them, with the same text: the file
is byte-identical (a test compares both on every corpus trace).
"""

from __future__ import annotations

import json
from typing import IO, Any

import numpy as np

from openetw.consumer.columns import identity_keys
from openetw.consumer.index import KIND_CODES
from openetw.errors import OpenEtwError
from openetw.etl.reader import EtlReader
from openetw.export import row_text as T
from openetw.export.from_columns import COLUMNS_MAX_BYTES, _teaching, _Trace, _unique_identities
from openetw.export.source import Selection
from openetw.export.timeline.builder import _COUNTERS, FILETIME_UNIX_TICKS, Naming, TimelineStats, _Builder
from openetw.export.timeline.chrome import ChromeWriter
from openetw.guids import format_guid
from openetw.tdh.registry import SchemaRegistry

__all__ = ["write_chrome_from_columns"]

_CLASSIC, _INSTANCE, _EVENT = KIND_CODES["classic"], KIND_CODES["instance"], KIND_CODES["event"]
_NO_ID = 0xFFFFFFFF
_EXTENDED_INFO = 0x0001
_MANIFEST_DATA_ID = 0xFFFE
_RUN = 16  # shorter runs of plain rows are stepped through the pass (cheaper than numpy's calls)
_WINDOW = 1 << 16
_EXACT_TS = 10**15  # |ts - origin| in ns below which "k/1000" with its digits is repr's text
_FRACTIONS = [b".0"] + [("." + f"{k:03d}".rstrip("0")).encode() for k in range(1, 1000)]


def write_chrome_from_columns(
    path: str, registry: SchemaRegistry, out: IO[str], stats: TimelineStats, naming: Naming
) -> ChromeWriter | None:
    """Writes ``path``'s timeline to ``out`` as Chrome JSON (what ``write_chrome`` of ``timeline``
    writes); ``None``, nothing written, for a file to read record by record (damage, WPP,
    unknown records, files over ``COLUMNS_MAX_BYTES``)."""
    import os

    if os.path.getsize(path) > COLUMNS_MAX_BYTES:
        return None
    with EtlReader(path, strict=False) as reader:
        try:
            trace = _Trace(reader, path)
        except OpenEtwError:
            return None
        try:
            if not trace.usable():
                return None
            writer = ChromeWriter(out)
            _Pass(trace, registry, writer, stats, naming).run()
            writer.close()
            return writer
        finally:
            trace.close()


class _Pass:
    def __init__(self, trace: _Trace, registry: SchemaRegistry, writer: ChromeWriter, stats: TimelineStats,
                 naming: Naming) -> None:  # fmt: skip
        self.trace = trace
        self.writer = writer
        self.stats = stats
        self.builder = _Builder(registry, Selection(), stats, False, naming)
        rows = trace.rows
        providers = [format_guid(guid) for guid in trace.built.providers]
        kind, opcode = rows["kind"], rows["opcode"]
        own = (kind == _EVENT) & (((rows["flags"] & _EXTENDED_INFO) != 0) | (rows["id"] == _MANIFEST_DATA_ID))
        plain = (kind == _CLASSIC) | (kind == _INSTANCE) | ((kind == _EVENT) & (opcode != 1) & (opcode != 2))
        plain &= ~own & ~_teaching(rows, providers)
        self.plain = plain
        self.texts: dict[str, bytes] = {}

    def run(self) -> None:
        rows, plain = self.trace.rows, self.plain
        n = len(rows)
        for first in range(0, n, _WINDOW):
            last = min(n, first + _WINDOW)
            # runs of plain rows: [starts[k], ends[k])
            flags = np.concatenate(([False], plain[first:last], [False])).astype(np.int8)
            change = np.flatnonzero(np.diff(flags))
            starts, ends = change[0::2] + first, change[1::2] + first
            at = first
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
                self._step(at, a)
                if b - a < _RUN:
                    self._step(a, b)
                else:
                    self._run(a, b)
                at = b
            self._step(at, last)
        self._emit(self.builder.finish(n))

    def _emit(self, items: list[Any]) -> None:
        write = self.writer.write
        for item in items:
            write(item)

    def _step(self, a: int, b: int) -> None:
        """Rows ``a:b`` through the pass, record by record."""
        builder, record, write = self.builder, self.trace.record, self.writer.write
        out, step = builder.out, builder.step
        for position in range(a, b):
            step(position, record(position))
            if out:
                for item in out:
                    write(item)
                out.clear()

    def _run(self, a: int, b: int) -> None:
        """Plain rows ``a:b``: by columns while the pairing is idle."""
        trace, builder = self.trace, self.builder
        rows = trace.rows[a:b]
        if not builder.pairing.idle:
            self._step(a, b)
            return
        ts = (rows["filetime"].astype(np.int64) - FILETIME_UNIX_TICKS) * 100
        origin = self.writer.origin(int(ts[0]))  # (the run's first row is the first instant if none came yet)
        if int(np.abs(ts - origin).max()) >= _EXACT_TS:  # times too far apart for the digits' way
            self._step(a, b)
            return
        chosen = np.arange(b - a)
        lead, inverse = _unique_identities(identity_keys(rows), chosen)
        identities = []
        for row in lead.tolist():
            record = trace.record(a + row)
            schema, provider, event = builder.identity(record)
            kind = record.kind
            name = event or (f"event {record.id}" if kind == "event" else f"{kind} {record.hook_id or record.opcode}")
            counter = event is not None and name in _COUNTERS
            head = (
                b'{"ph":"i","s":"t","name":'
                + self._json(name)
                + b',"cat":'
                + self._json(builder.category(record, provider))
            )
            decoder = None if schema is None else builder.decoder(schema, record.pointer_size)
            identities.append((head + b',"ts":', decoder, counter))
        counters = np.asarray([entry[2] for entry in identities], dtype=bool)[inverse]
        if counters.any():  # an event with a counter: through the pass, the rest in runs
            cuts = np.flatnonzero(counters).tolist()
            at = a
            for cut in cuts:
                self._cut_run(at, a + cut, identities, inverse[at - a : cut])
                self._step(a + cut, a + cut + 1)
                at = a + cut + 1
            self._cut_run(at, b, identities, inverse[at - a :])
            return
        self._cut_run(a, b, identities, inverse)

    def _cut_run(self, a: int, b: int, identities: list[Any], codes: np.ndarray) -> None:
        """Rows ``a:b`` (identity ``codes``), written in pieces cut where a process or thread is
        named first (its ``M`` events before the row's instant)."""
        if b <= a:
            return
        rows = self.trace.rows[a:b]
        args, pids, tids = self._args(a, rows, identities, codes)
        unique, firsts = np.unique(np.stack([pids, tids], axis=1), axis=0, return_index=True)
        names = self.builder.names
        cuts = sorted(
            first
            for (pid, tid), first in zip(unique.tolist(), firsts.tolist(), strict=True)
            if not names.known(pid, tid)
        )
        filetimes = rows["filetime"].astype(np.int64)
        at = 0
        for cut in [*cuts, b - a]:
            self._write(a + at, a + cut, identities, codes[at:cut], args, pids, tids, at)
            if cut == b - a:
                break
            filetime = int(filetimes[cut])
            ts = (filetime - FILETIME_UNIX_TICKS) * 100
            names.ensure(int(pids[cut]), int(tids[cut]), ts, filetime, (ts, a + cut))
            self._emit(self.builder.out)
            self.builder.out.clear()
            at = cut

    def _write(self, a: int, b: int, identities: list[Any], codes: np.ndarray, args: tuple[np.ndarray, np.ndarray, bytes],
               pids: np.ndarray, tids: np.ndarray, at: int) -> None:  # fmt: skip
        """Plain rows ``a:b`` as Chrome instants, their processes and threads named (``args``,
        ``pids`` and ``tids`` of the run, row ``a`` its ``at``-th)."""
        if b <= a:
            return
        writer = self.writer
        rows = self.trace.rows[a:b]
        count = b - a
        ts = (rows["filetime"].astype(np.int64) - FILETIME_UNIX_TICKS) * 100
        origin = writer.origin(int(ts[0]))
        offsets = ts - origin
        magnitude = np.abs(offsets)
        starts, ends, data = args
        pieces = [
            T.codes(codes, [entry[0] for entry in identities]),
            T.codes((offsets < 0).astype(np.int64), [b"", b"-"]),
            T.integers(magnitude // 1000),
            T.codes(magnitude % 1000, _FRACTIONS),
            T.integers(pids[at : at + count], b',"pid":'),
            T.integers(tids[at : at + count], b',"tid":'),
            T.texts(starts[at : at + count], ends[at : at + count], data, b',"args":', b"}"),
        ]
        text = T.rows(count, pieces, b",\n")[:-2]
        writer.write_joined(text.decode("utf-8"), count, int(ts.max()))
        self.stats.instants += count
        self.builder.pairing.passed((int(ts[-1]), b - 1))

    def _args(self, a: int, rows: np.ndarray, identities: list[Any], codes: np.ndarray) -> tuple[
        tuple[np.ndarray, np.ndarray, bytes], np.ndarray, np.ndarray
    ]:  # fmt: skip
        """Each row's arguments as JSON text (its payload decoded by its schema's decoder), and its
        process and thread (those its fields name when the header has none)."""
        trace, args_text, stats, owner = self.trace, self.writer.args_text, self.stats, self.builder.owner
        blob = trace.map
        starts = trace.at[a : a + len(rows)] + rows["user_data_offset"]
        ends = starts + rows["user_data_length"]
        pids, tids = rows["pid"].astype(np.int64), rows["tid"].astype(np.int64)
        decoders = [entry[1] for entry in identities]
        parts: list[bytes] = []
        empty = b"{}"
        for i, (code, start, end, pid, tid) in enumerate(
            zip(codes.tolist(), starts.tolist(), ends.tolist(), pids.tolist(), tids.tolist(), strict=True)
        ):
            decoder = decoders[code]
            if decoder is None:
                stats.undecodable += 1
                parts.append(empty)
                fields: dict[str, Any] = {}
            else:
                fields = decoder(blob[start:end])[0]
                parts.append(args_text(fields).encode("utf-8"))
            if pid == _NO_ID or tid == _NO_ID:
                pids[i], tids[i] = owner(pid, tid, fields)
        offsets, data = T.table(parts)
        return (offsets[:-1], offsets[1:], data), pids, tids

    def _json(self, text: str) -> bytes:
        found = self.texts.get(text)
        if found is None:
            found = self.texts[text] = json.dumps(text, ensure_ascii=False).encode("utf-8")
        return found
