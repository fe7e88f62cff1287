"""Decoding tracefs event payloads by their ``format`` files — pure.

:class:`EventDecoder` knows every event format of a session by id; it reads an event's type
from its payload and decodes the fields (all, or only those a mapper reads). Each format is
compiled once (``_CompiledFormat``): one ``struct`` for the fixed fields, then fix-ups for
strings, arrays and ``__data_loc``/``__rel_loc`` fields. The page walkers of
:mod:`openetw.kernel.ringbuffer` and :mod:`openetw.kernel.ringbuffer_batch` use the compiled
formats directly.

Damaged input raises :class:`~openetw.errors.TraceDataError` and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from openetw.errors import TraceDataError
from openetw.kernel.tracefs_format import (
    BYTES,
    DATA_LOC,
    DYNAMIC_TAIL,
    INT_ARRAY,
    INTEGER,
    REL_LOC,
    STRING,
    EventFormat,
    FieldFormat,
)

if TYPE_CHECKING:
    from openetw.kernel.ringbuffer import SubBuffer

__all__ = ["EventDecoder"]


def _cstring(raw: bytes) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    return raw.decode("utf-8", "replace")


class _CompiledFormat:
    """One event format turned into a struct for its fixed fields plus per-field fix-ups.

    ``wanted`` limits the decoded fields (the others are skipped by the struct); ``None`` decodes
    all. A format without strings, arrays or dynamic fields decodes with one ``unpack_from``
    and one ``dict(zip())``.
    """

    __slots__ = ("format", "name", "names", "struct", "unpack_from", "fixups", "min_payload", "simple", "arrays", "single")

    def __init__(self, fmt: EventFormat, wanted: frozenset[str] | None = None) -> None:
        self.format = fmt
        self.name = fmt.name
        chosen = [f for f in fmt.all_fields if wanted is None or f.name in wanted]
        fixed = sorted((f for f in chosen if f.kind != DYNAMIC_TAIL), key=lambda f: f.offset)
        codes = ["<"]
        names: list[str] = []
        fixups: list[tuple[int, FieldFormat]] = []
        arrays: list[tuple[int, int]] = []  # (index in the flat tuple, element count)
        position = 0
        flat_index = 0
        overlapping: list[FieldFormat] = []
        for f in fixed:
            if f.offset < position:
                overlapping.append(f)
                continue
            if f.offset > position:
                codes.append(f"{f.offset - position}x")
            if f.kind == INTEGER:
                codes.append(f.struct_code or "")
            elif f.kind in (DATA_LOC, REL_LOC):
                codes.append("I")
                fixups.append((len(names), f))
            elif f.kind == INT_ARRAY:
                count = f.array_length or 0
                codes.append(f"{count}{f.struct_code}")
                arrays.append((flat_index, count))
                flat_index += count - 1
            else:  # STRING, BYTES
                codes.append(f"{f.size}s")
                if f.kind == STRING:
                    fixups.append((len(names), f))
            names.append(f.name)
            flat_index += 1
            position = f.offset + f.size
        self.struct = struct.Struct("".join(codes))
        self.unpack_from = self.struct.unpack_from
        self.names = tuple(names)
        self.min_payload = fmt.min_payload
        self.arrays = tuple(arrays)
        for f in overlapping:  # never seen in practice; decoded one by one
            fixups.append((-1, f))
        for f in chosen:
            if f.kind == DYNAMIC_TAIL:
                fixups.append((-1, f))
        self.fixups = tuple(fixups)
        self.simple = not fixups and not arrays
        # One plain field (a lean system call's id or ret): a one-entry dict without zip().
        self.single = names[0] if self.simple and len(names) == 1 else None

    def _too_short(self, length: int) -> TraceDataError:
        return TraceDataError(
            f"{self.format.name} payload of {length} bytes is shorter than its {self.min_payload}-byte layout",
            structure="payload",
        )

    def decode(self, payload: bytes) -> dict[str, Any]:
        return self.decode_at(payload, 0, len(payload))

    def decode_at(self, page: bytes, start: int, length: int) -> dict[str, Any]:
        """The values of the payload at ``page[start:start + length]`` (no copy of the payload)."""
        if length < self.min_payload:
            raise self._too_short(length)
        flat = self.unpack_from(page, start)
        if self.simple:
            return dict(zip(self.names, flat, strict=True))
        if self.arrays:
            grouped: list[Any] = []
            cursor = 0
            for index, count in self.arrays:
                grouped.extend(flat[cursor:index])
                grouped.append(flat[index : index + count])
                cursor = index + count
            grouped.extend(flat[cursor:])
            flat = tuple(grouped)
        values = dict(zip(self.names, flat, strict=True))
        for _, f in self.fixups:
            if f.kind == STRING:
                values[f.name] = _cstring(values[f.name])
            elif f.kind in (DATA_LOC, REL_LOC):
                values[f.name] = self._dynamic(page, start, length, f, values[f.name])
            elif f.kind == DYNAMIC_TAIL:
                tail = page[start + f.offset : start + length]
                values[f.name] = _cstring(tail) if f.text else tail
            elif f.kind == INTEGER:  # an overlapping field
                values[f.name] = struct.unpack_from("<" + (f.struct_code or "B"), page, start + f.offset)[0]
            elif f.kind == BYTES:
                values[f.name] = page[start + f.offset : start + f.offset + f.size]
        return values

    def _dynamic(self, page: bytes, base: int, length: int, f: FieldFormat, word: int) -> str | bytes:
        size = word >> 16
        start = word & 0xFFFF
        if f.kind == REL_LOC:
            start += f.offset + f.size
        if start + size > length:
            raise TraceDataError(
                f"{self.format.name}.{f.name} points at {start}+{size}, past the {length}-byte payload",
                offset=f.offset, structure="payload",
            )
        raw = page[base + start : base + start + size]
        return _cstring(raw) if f.text else raw


class EventDecoder:
    """Decodes payloads of the events it knows, by ``common_type``.

    ``fields`` (event name → field names) limits what is decoded for those events: a consumer
    that reads few fields (the mapper, see
    :meth:`~openetw.kernel.classes.KernelEventMapper.fields_used`) skips the cost of the rest.
    Events not named there are decoded whole.
    """

    def __init__(self, formats: Iterable[EventFormat], fields: Mapping[str, Iterable[str]] | None = None) -> None:
        self._compiled: dict[int, _CompiledFormat] = {}
        self.formats: dict[int, EventFormat] = {}
        self._type_reader: tuple[struct.Struct, int] | None = None
        self._fields = {name: frozenset(names) for name, names in (fields or {}).items()}
        self._native_plan: list[Any] | None = None  # what the compiled page decoder is given (ringbuffer_plan.py)
        for fmt in formats:
            self.add(fmt)

    def add(self, fmt: EventFormat) -> None:
        common_type = fmt.by_name.get("common_type")
        if common_type is None or common_type.kind != INTEGER or common_type.size not in (2, 4):
            raise TraceDataError(f"event {fmt.name} has no integer common_type field", structure="format")
        reader = (struct.Struct("<" + (common_type.struct_code or "H").upper()), common_type.offset)
        if self._type_reader is None:
            self._type_reader = reader
        elif self._type_reader[1] != reader[1] or self._type_reader[0].format != reader[0].format:
            raise TraceDataError(f"event {fmt.name} places common_type differently", structure="format")
        self._compiled[fmt.id] = _CompiledFormat(fmt, self._fields.get(fmt.name))
        self._native_plan = None
        self.formats[fmt.id] = fmt

    @property
    def by_name(self) -> Mapping[str, EventFormat]:
        return {fmt.name: fmt for fmt in self.formats.values()}

    def event_type(self, payload: bytes) -> int | None:
        """The payload's ``common_type``; ``None`` before any format was added."""
        if self._type_reader is None:
            return None
        reader, offset = self._type_reader
        if len(payload) < offset + reader.size:
            raise TraceDataError("payload too short for common_type", structure="payload")
        return int(reader.unpack_from(payload, offset)[0])

    def decode(self, payload: bytes) -> tuple[EventFormat, dict[str, Any]] | None:
        """``(format, values)``, or ``None`` for an event type this decoder was not given."""
        event_type = self.event_type(payload)
        compiled = None if event_type is None else self._compiled.get(event_type)
        if compiled is None:
            return None
        return compiled.format, compiled.decode(payload)

    def decode_events(self, sub: SubBuffer, cpu: int, out: list[tuple[int, int, str, dict[str, Any]]]) -> tuple[int, int]:
        """Appends ``(timestamp, cpu, name, values)`` for every event of ``sub`` to ``out``.

        Returns ``(unknown, damaged)``: events of types this decoder was not given, and events
        whose payload did not fit their format (skipped, as :meth:`decode` would raise).
        """
        if self._type_reader is None:
            return len(sub.events), 0
        reader, type_offset = self._type_reader
        type_end = type_offset + reader.size
        read_type = reader.unpack_from
        compiled_of = self._compiled.get
        page = sub.page
        append = out.append
        unknown = damaged = 0
        for timestamp, offset, length in sub.events:
            if length < type_end:
                damaged += 1
                continue
            compiled = compiled_of(read_type(page, offset + type_offset)[0])
            if compiled is None:
                unknown += 1
                continue
            if compiled.simple:
                if length < compiled.min_payload:
                    damaged += 1
                    continue
                append((timestamp, cpu, compiled.name, dict(zip(compiled.names, compiled.unpack_from(page, offset), strict=True))))
                continue
            try:
                values = compiled.decode_at(page, offset, length)
            except TraceDataError:
                damaged += 1
                continue
            append((timestamp, cpu, compiled.name, values))
        return unknown, damaged

