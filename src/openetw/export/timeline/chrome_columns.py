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
(process, thread) is new (a row without them in its header is given the thread its fields name
and that thread's process, looked up once per distinct thread), each schema's payloads of the run
decoded into columns by its column plan (``tdh.columns.decode_columns``) and their ``args`` text
composed from the columns (the rows the plan cannot read, and schemas with a FILETIME, by the
decoded dicts and ``ChromeWriter.args_text``), the ``ts`` text made from the integer nanoseconds
(``(ts - origin) / 1000`` as ``repr`` writes it), the rows composed by ``row_text``. Every other
row is built as a record (``from_columns._Trace.record``) and stepped through the pass. The
events come in the order the record-by-record export writes them, with the same text: the file
is byte-identical (a test compares both on every corpus trace and on made traces).
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import replace
from typing import IO, Any

import numpy as np

from openetw.consumer.columns import identity_keys
from openetw.consumer.index import KIND_CODES, build_index_data
from openetw.errors import OpenEtwError
from openetw.etl.reader import EtlReader
from openetw.events.stacks import StackKeys
from openetw.events.trace_state import TraceState
from openetw.export import row_text as T
from openetw.export.from_columns import COLUMNS_MAX_BYTES, _teaching, _Trace, _unique_identities
from openetw.export.source import Selection
from openetw.export.timeline.builder import (
    _COUNTERS,
    _THREAD_FIELDS,
    FILETIME_UNIX_TICKS,
    Naming,
    TimelineStats,
    _Builder,
)
from openetw.export.timeline.chrome import ChromeWriter
from openetw.guids import format_guid
from openetw.tdh.columns import STEPS, FieldColumns, decode_columns
from openetw.tdh.registry import SchemaRegistry

__all__ = ["write_chrome_from_columns"]

_CLASSIC, _INSTANCE, _EVENT = KIND_CODES["classic"], KIND_CODES["instance"], KIND_CODES["event"]
_SYSTEM, _COMPACT, _PERFINFO = KIND_CODES["system"], KIND_CODES["compact"], KIND_CODES["perfinfo"]
_PERFINFO_GROUP, _SAMPLE = 0x0F, 46  # SampledProfile
_NO_ID = 0xFFFFFFFF
_EXTENDED_INFO = 0x0001
_MANIFEST_DATA_ID = 0xFFFE
_RUN = 16  # shorter runs of plain rows are stepped through the pass (cheaper than numpy's calls)
_WINDOW = 1 << 16
_EXACT_TS = 10**15  # |ts - origin| in ns below which "k/1000" with its digits is repr's text
_INTEGER_KINDS = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})
_TEXT_STEPS = frozenset({STEPS["guid"], STEPS["utf16z"], STEPS["ansiz"], STEPS["counted_utf16"]})
_JSON_INT = 1 << 53  # chrome._plain: integers beyond are written as strings
_INF = float("inf")
_MAX_TEXT = 4096  # chrome._plain: text cut to this many characters
_FRACTIONS = [b".0"] + [("." + f"{k:03d}".rstrip("0")).encode() for k in range(1, 1000)]


def write_chrome_from_columns(
    path: str, registry: SchemaRegistry, output: Callable[[], ContextManager[IO[str]]], stats: TimelineStats,
    naming: Naming, progress: Callable[[int, float], None] | None = None,
) -> ChromeWriter | None:  # fmt: skip
    """Writes ``path``'s timeline as Chrome JSON (what ``write_chrome`` of ``timeline`` writes) to
    the stream ``output`` opens; ``None``, nothing opened, for a file to read record by record
    (damage, WPP, unknown records, files over ``COLUMNS_MAX_BYTES``), with kernel CPU samples
    (whose frames a first pass names) or mostly kernel records. ``progress`` is told the rows
    done and the seconds spent after each window of rows; the young generations are collected
    then."""
    writer: ChromeWriter | None = write_from_columns(path, registry, output, stats, naming, progress, ChromeWriter, _Pass)
    return writer


def write_from_columns(
    path: str, registry: SchemaRegistry, output: Callable[[], ContextManager[Any]], stats: TimelineStats,
    naming: Naming, progress: Callable[[int, float], None] | None, make_writer: Callable[[Any], Any],
    pass_class: type[_Pass],
) -> Any:  # fmt: skip
    """The column walk both timeline formats share: the writer ``make_writer`` makes over the
    stream ``output`` opens, fed by ``pass_class``; ``None``, nothing opened, for a file to read
    record by record."""
    if os.path.getsize(path) > COLUMNS_MAX_BYTES:
        return None
    with EtlReader(path, strict=False) as reader:
        try:
            built = build_index_data(path)
            if _sampled(built.records) or _mostly_kernel(built.records):  # (before buffers are inflated)
                return None
            trace = _Trace(reader, path, built)
        except OpenEtwError:
            return None
        try:
            if not trace.usable():
                return None
            naming = replace(
                naming, state=TraceState(registry, learn_manifests=False, learn_threads=False), keys=StackKeys()
            )
            with output() as out:
                writer = make_writer(out)
                pass_class(trace, registry, writer, stats, naming).run(progress)
                writer.close()
            return writer
        finally:
            trace.close()


def _mostly_kernel(rows: np.ndarray) -> bool:
    """Whether most of ``rows`` are kernel records: records built from the index one by one for
    the pass cost more than the reader's, and the runs between them would be few."""
    kind = rows["kind"]
    kernel = np.count_nonzero((kind == _SYSTEM) | (kind == _COMPACT) | (kind == _PERFINFO))
    return bool(kernel * 2 > len(rows))


def _sampled(rows: np.ndarray) -> bool:
    """Whether a kernel SampledProfile record is among ``rows``."""
    kind = rows["kind"]
    kernel = (kind == _SYSTEM) | (kind == _COMPACT) | (kind == _PERFINFO)
    return bool(np.any(kernel & (rows["hook_id"] >> 8 == _PERFINFO_GROUP) & (rows["opcode"] == _SAMPLE)))


class _Pass:
    def __init__(self, trace: _Trace, registry: SchemaRegistry, writer: ChromeWriter, stats: TimelineStats,
                 naming: Naming) -> None:  # fmt: skip
        self.trace = trace
        self.writer = writer
        self.stats = stats
        self.builder = _Builder(registry, Selection(), stats, False, naming)
        rows = trace.columns  # contiguous: each column read once, not the rows' stride
        providers = [format_guid(guid) for guid in trace.built.providers]
        kind, opcode = rows["kind"], rows["opcode"]
        own = (kind == _EVENT) & (((rows["flags"] & _EXTENDED_INFO) != 0) | (rows["id"] == _MANIFEST_DATA_ID))
        plain = (kind == _CLASSIC) | (kind == _INSTANCE) | ((kind == _EVENT) & (opcode != 1) & (opcode != 2))
        plain &= ~own & ~_teaching(rows, providers)
        self.plain = plain
        self.texts: dict[str, bytes] = {}

    def run(self, progress: Callable[[int, float], None] | None) -> None:
        rows, plain = self.trace.rows, self.plain
        n = len(rows)
        started = time.perf_counter()
        for first in range(0, n, _WINDOW):
            gc.collect(1)
            if progress is not None:
                progress(first, time.perf_counter() - started)
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
        writer.write_joined(T.rows(count, pieces, b",\n")[:-2], count, int(ts.max()))
        self.stats.instants += count
        self.builder.pairing.passed((int(ts[-1]), b - 1))

    def _args(self, a: int, rows: np.ndarray, identities: list[Any], codes: np.ndarray) -> tuple[
        tuple[np.ndarray, np.ndarray, bytes], np.ndarray, np.ndarray
    ]:  # fmt: skip
        """Each row's arguments as JSON text, and its process and thread (those its fields name when
        the header has none): each identity's rows decoded together into columns by its schema's
        column plan (``decode_columns``), the rows without one by its decoder, one by one."""
        trace, stats, owner = self.trace, self.stats, self.builder.owner
        blob = trace.map
        count = len(rows)
        starts = trace.at[a : a + count] + rows["user_data_offset"]
        lengths = rows["user_data_length"].astype(np.int64)
        pids, tids = rows["pid"].astype(np.int64), rows["tid"].astype(np.int64)
        orphans = (pids == _NO_ID) | (tids == _NO_ID)
        begin = np.zeros(count, dtype=np.int64)
        end = np.zeros(count, dtype=np.int64)
        parts: list[bytes] = []
        size = 0
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(identities) + 1))
        for code, (_, decoder, _) in enumerate(identities):
            mine = order[bounds[code] : bounds[code + 1]]
            if not len(mine):
                continue
            if decoder is None:
                stats.undecodable += len(mine)
                parts.append(b"{}")
                begin[mine], end[mine] = size, size + 2
                size += 2
                threads, named = np.zeros(len(mine), dtype=np.int64), np.zeros(len(mine), dtype=bool)
            else:
                data, first, last, (threads, named) = _columns_text(
                    self.writer, decoder, blob, starts[mine], lengths[mine]
                )
                parts.append(data)
                begin[mine], end[mine] = size + first, size + last
                size += len(data)
            lost = np.flatnonzero(orphans[mine])
            if len(lost):  # a header without them: the thread the fields name, and its process
                rows_lost, named_lost = mine[lost], named[lost]
                pids[rows_lost], tids[rows_lost] = 0, 0
                distinct, inverse = np.unique(threads[lost][named_lost], return_inverse=True)
                if len(distinct):
                    found = np.asarray(
                        [owner(_NO_ID, _NO_ID, {"ThreadId": tid}) for tid in distinct.tolist()], dtype=np.int64
                    )
                    pids[rows_lost[named_lost]], tids[rows_lost[named_lost]] = found[inverse, 0], found[inverse, 1]
        return (begin, end, b"".join(parts)), pids, tids

    def _json(self, text: str) -> bytes:
        found = self.texts.get(text)
        if found is None:
            found = self.texts[text] = json.dumps(text, ensure_ascii=False).encode("utf-8")
        return found


def _columns_text(writer: ChromeWriter, decoder: Any, blob: Any, starts: np.ndarray, lengths: np.ndarray) -> tuple[
    bytes, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]
]:  # fmt: skip
    """The ``args`` JSON text of one schema's payloads (what ``ChromeWriter.args_text`` gives of
    each decoded dict): (the texts, where each row's starts and ends in them, the thread each
    row's fields name (the first integer of ``_THREAD_FIELDS``) and whether one does)."""
    columns = decode_columns(decoder, blob, starts, lengths)
    n = len(columns)
    texts = _core_texts(columns)
    redo = np.ones(n, dtype=bool) if texts is None else np.zeros(n, dtype=bool)
    redo[columns.fallback] = True
    if texts is None:
        data, offsets = b"", np.zeros(n + 1, dtype=np.int64)
    else:
        data, offsets = T.rows_with_offsets(n, texts, b"")
    begin, end = offsets[:-1].copy(), offsets[1:].copy()
    threads, named = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if texts is not None:  # the first of the fields that is an integer, as the pass picks it
        found = [k for k, (name, kind) in enumerate(zip(columns.names, columns.types, strict=True))
                 if kind in _INTEGER_KINDS and name in _THREAD_FIELDS]  # fmt: skip
        if found:
            k = min(found, key=lambda k: _THREAD_FIELDS.index(columns.names[k]))
            threads[:] = np.frombuffer(columns.raw[k], dtype=np.dtype(columns.types[k]))  # type: ignore[index]
            named[:] = True
    if redo.any():  # these rows' dicts, their texts after the others
        values = dict(zip(columns.fallback.tolist(), columns.values, strict=True))
        extra: list[bytes] = []
        size = len(data)
        for row in np.flatnonzero(redo).tolist():
            fields = values.get(row)
            if fields is None:
                start = int(starts[row])
                fields = decoder(bytes(blob[start : start + int(lengths[row])]))[0]
            text = writer.args_text(fields).encode("utf-8")
            begin[row], end[row] = size, size + len(text)
            extra.append(text)
            size += len(text)
            tid = next((fields[name] for name in _THREAD_FIELDS if isinstance(fields.get(name), int)), None)
            threads[row], named[row] = (0, False) if tid is None else (tid, True)
        data = data + b"".join(extra)
    return data, begin, end, (threads, named)


def _core_texts(columns: FieldColumns) -> list[T.Piece] | None:
    """The pieces of each row's ``{"name":value,...}`` from the core's columns, or ``None`` when a
    column is of a kind written here by the decoded values (FILETIMEs: their text is a date's)."""
    if columns.raw is None or columns.plan is None or len(set(columns.names)) != len(columns.names):
        return None
    pieces: list[T.Piece] = []
    steps = columns.plan.steps
    for k, (name, kind, raw) in enumerate(zip(columns.names, columns.types, columns.raw, strict=True)):
        key = ("{" if k == 0 else ",").encode() + json.dumps(name, ensure_ascii=False).encode("utf-8") + b":"
        piece = _column_pieces(kind, steps[2 * k], raw, len(columns), key)
        if piece is None:
            return None
        pieces.extend(piece)
    pieces.append(T.constant(b"}" if pieces else b"{}"))
    return pieces


def _column_pieces(kind: str | None, step: int, raw: Any, n: int, key: bytes) -> list[T.Piece] | None:
    """One column as ``key`` + the JSON value ``chrome._plain`` gives, per row."""
    if kind in _INTEGER_KINDS:
        values = np.frombuffer(raw, dtype=np.dtype(kind))
        if kind in ("int64", "uint64"):
            inside = (values <= _JSON_INT) if kind == "uint64" else ((values <= _JSON_INT) & (values >= -_JSON_INT))
            if not inside.all():  # beyond a double's integers: a string
                return [
                    T.integers(values, key, valid=inside, null=b""),
                    T.integers(values, key + b'"', b'"', valid=~inside, null=b""),
                ]
        return [T.integers(values, key)]
    if kind == "bool":
        return [T.codes(np.frombuffer(raw, dtype=np.uint8).astype(np.int64) != 0, [b"false", b"true"], key)]
    if kind in ("float32", "float64"):
        values = np.frombuffer(raw, dtype=np.dtype(kind)).tolist()
        entries = [
            repr(value).encode() if value == value and value not in (_INF, -_INF) else b'"' + str(value).encode() + b'"'
            for value in values
        ]  # fmt: skip
        offsets, data = T.table(entries)
        return [T.texts(offsets[:-1], offsets[1:], data, key)]
    if step in _TEXT_STEPS:
        offsets32, data = raw
        offsets = np.frombuffer(offsets32, dtype=np.int32).astype(np.int64)
        starts, ends = offsets[:-1].copy(), offsets[1:].copy()
        raw_bytes = np.frombuffer(data, dtype=np.uint8)
        special = (raw_bytes < 0x20) | (raw_bytes == 0x22) | (raw_bytes == 0x5C)
        counts = np.concatenate(([0], np.cumsum(special, dtype=np.int64)))
        plain = ((counts[ends] - counts[starts]) == 0) & (ends - starts <= _MAX_TEXT)
        if plain.all():
            return [T.texts(starts, ends, data, key + b'"', b'"')]
        escaped: list[bytes] = []
        size = len(data)
        view = bytes(data)
        for i in np.flatnonzero(~plain).tolist():
            text = view[int(starts[i]) : int(ends[i])].decode("utf-8")[:_MAX_TEXT]
            encoded = json.dumps(text, ensure_ascii=False).encode("utf-8")[1:-1]
            starts[i], ends[i] = size, size + len(encoded)
            escaped.append(encoded)
            size += len(encoded)
        return [T.texts(starts, ends, view + b"".join(escaped), key + b'"', b'"')]
    return None
