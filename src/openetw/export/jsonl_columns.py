"""``--to jsonl`` from columns: the lines ``openetw.export.jsonl`` writes record by record, made a
window of rows at a time from the tables ``from_columns`` builds.

``export_jsonl_from_columns`` runs ``from_columns`` with a writer that takes, per window of rows,
the ``events`` table (and the rows' FILETIMEs) and then each schema's decoded batch of those rows
(every batch flushed with its window), and writes the window's lines in record order. A line is
``{"record": ..., <dump --json's keys>, "properties": {...}}`` built by ``row_text`` from the
columns: names, kinds and GUIDs as texts made once per distinct value, numbers and times written
by the compiled core. Properties come from the batch's columns when every value there is what
``json_properties`` writes for the decoded value (integers, booleans, floats, text, binary; no
property errors, no value that did not fit its column, no message); otherwise the batch's payloads
are decoded record by record with the schema's decoder, as the record-by-record export does.
A test compares both exports byte for byte on every corpus trace.

When ``from_columns`` leaves a trace to the record-by-record path (``False``), nothing was
written and ``export_jsonl`` writes it.
"""

from __future__ import annotations

import json
from typing import IO, Any

import numpy as np

from openetw.etl.reader import EtlReader
from openetw.events.text import json_properties, json_value
from openetw.export import row_text as T
from openetw.export._deps import require
from openetw.export.from_columns import export_from_columns
from openetw.export.pipeline import ExportSummary, Progress
from openetw.export.source import Selection
from openetw.export.tables import DecodedBatch, SchemaTable
from openetw.export.types import json_equivalent
from openetw.manifest.messages import TruncatedMessage
from openetw.tdh.format import format_event_message
from openetw.tdh.registry import SchemaRegistry

__all__ = ["export_jsonl_from_columns"]

_ASCII_PLAIN = r"^[\x20\x21\x23-\x5b\x5d-\x7e]*$"  # no escape needed: printable ASCII but " and \
_ASCII_BACKSLASHED = r"^[\x20\x21\x23-\x7e]*$"  # printable ASCII but ": only a backslash to escape (doubled)


def export_jsonl_from_columns(
    reader: EtlReader, registry: SchemaRegistry, out: IO[str], summary: ExportSummary, *,
    selection: Selection | None = None, progress: Progress | None = None,
) -> bool:  # fmt: skip
    """Writes ``reader``'s file to ``out`` as ``export_jsonl`` would; ``False`` (nothing written) for
    the traces ``from_columns`` leaves to the record-by-record path."""
    pa = require("pyarrow", "exporting JSON lines from columns")
    writer = _LinesWriter(pa, out)
    errors_before = len(summary.errors)
    done = export_from_columns(reader, registry, writer, summary, selection=selection, progress=progress, flush_rows=1)
    if done:
        # what export_jsonl counts: no tables, no untyped values, the readers' errors only
        summary.tables = 0
        summary.untyped_values = 0
        del summary.errors[errors_before + len(reader.stats.errors) :]
    return done


class _LinesWriter:
    """A ``TableWriter`` for ``from_columns`` that writes JSON lines (see the module doc)."""

    suffix = ".jsonl"

    def __init__(self, pa: Any, out: IO[str]) -> None:
        self.pa = pa
        self.pc = require("pyarrow.compute", "exporting JSON lines from columns")
        self.out = out
        self._window: tuple[Any, np.ndarray] | None = None
        self._batches: list[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]] = []

    # -- the TableWriter protocol, and the two calls from_columns makes when a writer has them ----
    def write_events(self, table: Any) -> None:  # pragma: no cover - from_columns calls write_window
        raise NotImplementedError

    def write_table(self, info: SchemaTable, table: Any) -> None:  # pragma: no cover - from_columns calls decoded
        raise NotImplementedError

    def write_window(self, table: Any, filetime: np.ndarray) -> None:
        self._flush()
        self._window = (table, np.ascontiguousarray(filetime, dtype=np.int64))

    def decoded(
        self, info: SchemaTable, batch: DecodedBatch, decoder: Any, blob: Any, starts: np.ndarray, lengths: np.ndarray
    ) -> None:
        records = np.asarray(batch.table.column("record").to_numpy(), dtype=np.int64)
        self._batches.append((records, *self._properties(info, batch, decoder, blob, starts, lengths)))

    def finish(self, layout: dict[str, Any]) -> None:
        self._flush()

    # -- lines -------------------------------------------------------------------------------
    def _flush(self) -> None:
        if self._window is None:
            return
        table, filetime = self._window
        batches, self._batches, self._window = self._batches, [], None
        n = table.num_rows
        records = _numbers(table, "record")
        pieces = [T.integers(records, b'{"record": ')]
        pieces.append(self._named(table, "kind", b', "kind": '))
        for name in ("provider_id", "provider_name", "event_name"):
            pieces.append(self._named(table, name, f', "{name}": '.encode(), skip_empty=True))
        for name in ("id", "version", "channel", "level", "opcode", "task", "keyword"):
            pieces.append(T.integers(_numbers(table, name), f', "{name}": '.encode()))
        hook = table.column("hook_id")
        pieces.append(T.integers(_numbers(table, "hook_id"), b', "hook_id": ', valid=_valid(hook), null=b""))
        for name in ("pid", "tid", "cpu", "timestamp"):
            pieces.append(T.integers(_numbers(table, name), f', "{name}": '.encode()))
        pieces.append(T.filetimes(filetime, b', "time": "', b'"'))
        pieces.append(T.integers(_numbers(table, "size"), b', "size": '))
        pieces.append(self._named(table, "activity_id", b', "activity_id": ', skip_empty=True))
        pieces.append(self._named(table, "related_activity_id", b', "related_activity_id": ', skip_empty=True))
        pieces.append(self._extended(table.column("extended")))
        pieces.append(T.integers(_numbers(table, "pointer_size"), b', "pointer_size": '))
        pieces.append(T.integers(_numbers(table, "user_data_length"), b', "user_data_length": '))
        pieces.append(self._named(table, "process_name", b', "process_name": ', skip_empty=True))
        pieces.append(self._placed(records, batches))
        pieces.append(T.constant(b"}"))
        text = T.rows(n, pieces, b"\n")
        binary = getattr(self.out, "buffer", None)
        if binary is not None:  # the lines are ASCII (json.dumps' escapes): the bytes go as they are
            self.out.flush()
            binary.write(text)
        else:
            self.out.write(text.decode("ascii"))

    def _named(self, table: Any, name: str, key: bytes, *, skip_empty: bool = False) -> T.Piece:
        """A text column as ``key`` + its JSON text, texts made once per distinct value (null, and
        with ``skip_empty`` the empty text, write nothing: the key is left out)."""
        encoded = table.column(name).combine_chunks().dictionary_encode()
        entries = [
            b"" if value is None or (skip_empty and not value) else key + json.dumps(value).encode("ascii")
            for value in encoded.dictionary.to_pylist()
        ]
        indices = encoded.indices
        numbers = indices.fill_null(len(entries)).to_numpy(zero_copy_only=False)
        return T.codes(numbers, [*entries, b""])

    def _extended(self, column: Any) -> T.Piece:
        values = column.to_pylist()
        entries: list[bytes] = [b""]
        numbers = np.zeros(len(values), dtype=np.int64)
        for i, value in enumerate(values):
            if value:
                numbers[i] = len(entries)
                entries.append(b', "extended": ' + json.dumps(value).encode("ascii"))
        return T.codes(numbers, entries)

    def _placed(self, records: np.ndarray, batches: list[tuple[np.ndarray, bytes, np.ndarray, np.ndarray]]) -> T.Piece:
        """Each row's properties text (from the batches of its window; nothing without a schema)."""
        n = len(records)
        starts = np.zeros(n, dtype=np.int64)
        ends = np.zeros(n, dtype=np.int64)
        valid = np.zeros(n, dtype=np.uint8)
        base = 0
        for rows_of, data, begin, end in batches:
            where = np.searchsorted(records, rows_of)
            starts[where] = base + begin
            ends[where] = base + end
            valid[where] = 1
            base += len(data)
        return T.texts(starts, ends, b"".join(batch[1] for batch in batches), valid=valid, null=b"")

    # -- properties ----------------------------------------------------------------------------
    def _properties(
        self, info: SchemaTable, batch: DecodedBatch, decoder: Any, blob: Any, starts: np.ndarray, lengths: np.ndarray
    ) -> tuple[bytes, np.ndarray, np.ndarray]:
        """Each row's ``, "properties": {...}`` (and ``errors``, ``message``) as JSON text: (the
        texts, where each row's starts and ends in them)."""
        table = batch.table
        n = table.num_rows
        schema = decoder.schema
        names = [prop.name for prop in schema.properties]
        columnar = (
            not batch.property_errors and not batch.untyped_values and schema.message is None
            and [prop for _, prop, _ in info.columns] == names and len(set(names)) == len(names)
        )  # fmt: skip
        pieces: list[T.Piece] | None = [T.constant(b', "properties": {')] if columnar else None
        missing = np.zeros(n, dtype=bool)  # a null may be a property the payload ended before (no key at all)
        if pieces is not None:
            for k, (column, prop, kind) in enumerate(info.columns):
                key = (b", " if k else b"") + json.dumps(prop).encode("ascii") + b": "
                values = table.column(column)
                piece = self._value(values, key) if json_equivalent(kind) else None
                if piece is None:
                    pieces = None
                    break
                pieces.append(piece)
                if values.null_count:
                    missing |= values.is_null().to_numpy(zero_copy_only=False)
        if pieces is None:
            missing[:] = True
            data, offsets = b"", np.zeros(n + 1, dtype=np.int64)
        else:
            pieces.append(T.constant(b"}"))
            data, offsets = T.rows_with_offsets(n, pieces, b"")
        begin, end = offsets[:-1].copy(), offsets[1:].copy()
        if missing.any():  # these rows decoded record by record, their texts after the others
            view = memoryview(blob)
            size = len(data)
            parts = [data]
            for i in np.flatnonzero(missing).tolist():
                start, length = int(starts[i]), int(lengths[i])
                text = _record_properties(decoder.decode(bytes(view[start : start + length])))
                begin[i], end[i] = size, size + len(text)
                parts.append(text)
                size += len(text)
            data = b"".join(parts)
        return data, begin, end

    def _value(self, column: Any, key: bytes) -> T.Piece | None:
        """One property column as ``key`` + JSON value per row, or ``None`` for a type left to the decoder."""
        pa = self.pa
        array = column.combine_chunks()
        kind = array.type
        null = key + b"null"
        valid = _valid(array)
        if pa.types.is_integer(kind):
            wide = pa.uint64() if pa.types.is_unsigned_integer(kind) else pa.int64()
            numbers = array.cast(wide).fill_null(0).to_numpy(zero_copy_only=False)
            return T.integers(numbers, key, valid=valid, null=null)
        if pa.types.is_boolean(kind):
            numbers = array.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
            return T.codes(numbers, [b"false", b"true"], key, valid=valid, null=null)
        if pa.types.is_floating(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            entries = [json.dumps(json_value(value)).encode("ascii") for value in array.to_pylist()]
            offsets, data = T.table(entries)
            return T.texts(offsets[:-1], offsets[1:], data, key, valid=valid, null=null)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return self._strings(array, key, valid, null)
        return None

    def _strings(self, array: Any, key: bytes, valid: np.ndarray | None, null: bytes) -> T.Piece:
        """Text as JSON strings: the column's own bytes where nothing needs escaping, else ``json.dumps``."""
        pa, pc = self.pa, self.pc
        n = len(array)
        wide = array.cast(pa.large_string())
        offsets = np.frombuffer(wide.buffers()[1], dtype=np.int64)[wide.offset : wide.offset + n + 1]
        data_buffer = wide.buffers()[2]
        data = b"" if data_buffer is None else data_buffer
        starts, ends = offsets[:-1].copy(), offsets[1:].copy()
        plain = pc.match_substring_regex(wide, _ASCII_PLAIN).fill_null(True).to_numpy(zero_copy_only=False)
        if plain.all():
            return T.texts(starts, ends, data, key + b'"', b'"', valid=valid, null=null)
        # paths: every backslash doubled at once, json.dumps only for the rest
        backslashed = pc.match_substring_regex(wide, _ASCII_BACKSLASHED).fill_null(True).to_numpy(zero_copy_only=False)
        if backslashed.any():
            wide = pc.replace_substring(wide, "\\", "\\\\")
            offsets = np.frombuffer(wide.buffers()[1], dtype=np.int64)[wide.offset : wide.offset + n + 1]
            data_buffer = wide.buffers()[2]
            data = b"" if data_buffer is None else data_buffer
            starts, ends = offsets[:-1].copy(), offsets[1:].copy()
            plain = backslashed
        escaped: list[bytes] = []
        size = len(data)
        for i in np.flatnonzero(~plain).tolist():
            text = json.dumps(array[i].as_py()).encode("ascii")[1:-1]
            starts[i], ends[i] = size, size + len(text)
            escaped.append(text)
            size += len(text)
        return T.texts(starts, ends, bytes(data) + b"".join(escaped), key + b'"', b'"', valid=valid, null=null)


def _numbers(table: Any, name: str) -> np.ndarray:
    numbers: np.ndarray = table.column(name).combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)
    return numbers


def _valid(column: Any) -> np.ndarray | None:
    if column.null_count == 0:
        return None
    mask: np.ndarray = column.is_valid().to_numpy(zero_copy_only=False)
    return mask


def _record_properties(decoded: Any) -> bytes:
    """What ``event_to_json`` adds for a decoded record: properties, errors, message."""
    out: dict[str, Any] = {"properties": json_properties(decoded)}
    errors = {name: error.message for name, error in decoded.errors.items()}
    if errors:
        out["errors"] = errors
    message = format_event_message(decoded)
    if message is not None:
        out["message"] = message
        if isinstance(message, TruncatedMessage):
            out["message_truncated"] = message.cut
    return b", " + json.dumps(out).encode("ascii")[1:-1]
