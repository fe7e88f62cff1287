"""Inputs both ``.evtx`` engines are fed, and what reading them gives: every corpus ``.evtx``,
mutated copies of the small ones, template bombs.

Used by the equivalence tests (the pure path against the compiled one, in one process) and by
the sanitizer run, which feeds the same cases to a build of ``_evtx.c`` under AddressSanitizer.
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial
from pathlib import Path
from typing import Any

from openetw.errors import EvtxFormatError, OpenEtwError
from openetw.evtx import EvtxReader
from tests.evtx import fuzzing, hostile

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "evtx"
SMALL = ["Security_short_selected.evtx", "new-user-security.evtx", "Application_no_crc32.evtx", "pyevtx_issue_38.evtx"]


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.evtx"))


def _error(error: BaseException | None) -> Any:
    if error is None:
        return None
    if isinstance(error, EvtxFormatError):
        return (str(error), error.offset, error.chunk_index, error.structure, error.record_id)
    return (type(error).__name__, str(error))


def _try(call: Any) -> Any:
    try:
        return call()
    except OpenEtwError as error:
        return ("error", _error(error))


def read(data: bytes, *, decode_every: int = 1, batches: bool = False) -> Any:
    """Everything a reader of ``data`` gives: every record (its id, place, XML or error), and for
    every ``decode_every``-th one its header and properties (asked for in the middle of the walk),
    then the errors, notices, counts and chunk facts. ``batches``: read through
    ``EvtxReader.batches`` (columns, a record made only for the header and properties)."""
    try:
        reader = EvtxReader(data, path="case.evtx")
    except EvtxFormatError as error:
        return ("file header", _error(error))
    records = []
    if batches:
        number = 0
        for batch in reader.batches(damaged=True):
            offsets = batch.file_offsets()
            for i in range(len(batch)):
                record = batch.record(i)
                assert (record.record_id, record.written_time) == (batch.record_ids[i], batch.written_times[i])
                row: list[Any] = [batch.record_ids[i], offsets[i], record.torn, _error(record.damage), _try(partial(batch.xml_text, i))]
                if number % decode_every == 0:
                    row.append(_try(record.header_fields))
                    row.append(_try(record.properties))
                records.append(row)
                number += 1
    for number, record in enumerate(() if batches else reader.records(damaged=True)):
        row = [record.record_id, record.file_offset, record.torn, _error(record.damage), _try(record.xml)]
        if number % decode_every == 0:
            row.append(_try(record.header_fields))
            row.append(_try(record.properties))
        records.append(row)
    stats = {name: value for name, value in vars(reader.stats).items() if not isinstance(value, list)}
    return (
        records,
        [_error(error) for error in reader.errors],
        [_error(error) for error in reader.losses],
        stats,
        [dataclasses.asdict(info) for info in reader.chunk_infos],
    )


def mutated_cases(seed: int, per_file: int) -> list[tuple[str, bytes]]:
    """(label, bytes): ``per_file`` mutations of each small corpus file, by the evtx fuzz's mutators."""
    out = []
    for name in SMALL:
        data = (CORPUS / name).read_bytes()
        rng = random.Random(f"{seed}:{name}")
        for i in range(per_file):
            mutation, damaged = fuzzing.mutate(data, rng)
            out.append((f"{name} #{i} {mutation}", damaged))
    return out


def binxml_cases(seed: int, count: int) -> list[tuple[str, bytes]]:
    """Bytes flipped inside the records of the first chunks of larger files (BinXml damage:
    names, template offsets, value sizes and types, tokens)."""
    out = []
    for name in ("system.evtx", "security.evtx", "sysmon.evtx"):
        data = (CORPUS / name).read_bytes()[: 0x1000 + 2 * 0x10000]
        rng = random.Random(f"{seed}:{name}")
        for i in range(count):
            damaged = bytearray(data)
            chunk = 0x1000 + rng.randrange(2) * 0x10000
            for _ in range(rng.randint(1, 6)):
                damaged[chunk + rng.randrange(0x200, 0x10000)] = rng.choice((0, 0xFF, rng.randrange(256)))
            out.append((f"{name} #{i} BinXml bytes", bytes(damaged)))
    return out


def bomb_cases() -> list[tuple[str, bytes]]:
    return [(f"template bomb depth {depth}", hostile.template_bomb_file(depth)) for depth in (3, 14, 24)]


def generated_file(count: int = 400) -> bytes:
    """A dirty ``.evtx`` of ``count`` events by openetw's writer (several chunks, EventData of
    strings, integers, booleans and hex-printed sizes)."""
    import uuid

    from openetw.evtx.record import EvtxHeader
    from openetw.evtx.writer import EvtxWriter

    header = EvtxHeader()
    header.provider_name, header.provider_guid = "Generated-Provider", uuid.UUID("3c0e1f0a-4b59-4e4e-9d0b-1f0d6c0a2b77")
    header.channel, header.computer, header.user_id = "Application", "gen-host", "S-1-5-18"
    header.level, header.process_id, header.thread_id, header.keywords = 4, 4321, 8765, 0x8000000000000000
    header.time_created = 133_000_000_000_000_000
    writer = EvtxWriter()
    chunks = []
    for i in range(count):
        header.event_id = 200 + i % 5
        header.time_created += 10_000
        writer.add_event(header, {"Index": i, "Message": f"event <{i}> & more", "Ok": i % 2 == 0, "Mask": 0xFF00 + i})
        chunks.extend(writer.take_chunks())
    chunks.extend(writer.finish())
    return writer.file_header(dirty=True) + b"".join(chunks)


def generated_cases(seed: int, count: int) -> list[tuple[str, bytes]]:
    """(label, bytes): a generated file as written, with a stale chunk header (ids outside its
    range, CRC32s that disagree, a torn record), and ``count`` mutations of it."""
    data = generated_file()
    stale = bytearray(data)
    base = 0x1000
    struct_q = int.to_bytes
    stale[base + 24 : base + 32] = struct_q(5, 8, "little")  # first id: records 1..4 fall outside
    stale[base + 32 : base + 40] = struct_q(50, 8, "little")  # last id: the rest of the chunk too
    stale[base + 124] ^= 0xFF  # header CRC32
    records = fuzzing._records(stale, base + 0x10000)
    if len(records) > 3:
        pos = records[2]
        size = int.from_bytes(stale[pos + 4 : pos + 8], "little")
        stale[pos + size - 4] ^= 0x01  # the copy of its size at its end: a torn record
    rng = random.Random(f"{seed}:generated")
    out = [("generated", data), ("generated, stale chunk header", bytes(stale))]
    for i in range(count):
        mutation, damaged = fuzzing.mutate(bytes(stale), rng)
        out.append((f"generated #{i} {mutation}", damaged))
    return out


def varied_headers_file(count: int = 120) -> bytes:
    """A generated ``.evtx`` whose ``<System>`` facts vary from event to event: qualifiers,
    event source names, activity ids, user SIDs present or not, names beyond ASCII."""
    import uuid

    from openetw.evtx.record import EvtxHeader
    from openetw.evtx.writer import EvtxWriter

    writer = EvtxWriter()
    chunks = []
    for i in range(count):
        header = EvtxHeader()
        header.provider_name = ("Généré-Provider", "Other", "")[i % 3]
        header.provider_guid = uuid.UUID(int=i * 0x1234567890ABCDEF) if i % 4 else None
        header.event_source_name = "Source" if i % 5 == 0 else None
        header.event_id, header.version, header.level, header.task, header.opcode = i, i % 3, i % 6, i * 7, i % 11
        header.qualifiers = 16384 + i if i % 2 else None
        header.keywords = (1 << 63) | i if i % 3 else 0
        header.time_created = 133_000_000_000_000_000 + i * 10_000 if i % 7 else 0
        header.activity_id = uuid.UUID(int=i + 1) if i % 2 else None
        header.related_activity_id = uuid.UUID(int=(i + 1) << 64) if i % 3 == 0 else None
        header.process_id, header.thread_id = 4 * i, 4 * i + 1
        header.channel, header.computer = ("Application", "Système")[i % 2], f"host-{i % 4}"
        header.user_id = ("S-1-5-18", None, "S-1-5-21-1-2-3-1001")[i % 3]
        writer.add_event(header, {"Index": i})
        chunks.extend(writer.take_chunks())
    chunks.extend(writer.finish())
    return writer.file_header() + b"".join(chunks)


def headers(data: bytes, *, batches: bool = False) -> Any:
    """Every record's ``<System>`` facts: from ``RecordBatch.header`` (the walk's columns, no
    record made first) or from each ``EvtxRecord``'s tree."""
    try:
        reader = EvtxReader(data, path="case.evtx")
    except EvtxFormatError as error:
        return ("file header", _error(error))
    if batches:
        return [batch.header(i).as_dict() for batch in reader.batches(damaged=True) for i in range(len(batch))]
    return [record.header.as_dict() for record in reader.records(damaged=True)]


def varied_fields_file(count: int = 250) -> bytes:
    """A generated ``.evtx`` whose ``EventData`` takes every shape the walk reads (values of each
    type, bytes that do not fit their type, empty values, literal text, unnamed ``Data``, other
    elements, arrays, ``UserData``) and some it leaves to the tree (repeated names, mixed content,
    nested ``UserData`` elements)."""
    import uuid

    from openetw.evtx import values as V
    from openetw.evtx.render import Value, XmlNode
    from openetw.evtx.writer import EVENT_NAMESPACE, EvtxWriter

    typed = [
        (V.INT8, b"\xfe"), (V.UINT8, b"\xfe"), (V.INT16, b"\xfe\xff"), (V.UINT16, b"\xfe\xff"), (V.INT32, b"\xfe\xff\xff\xff"),
        (V.UINT32, b"\x07\x00\x00\x00"), (V.INT64, b"\xfe" + b"\xff" * 7), (V.UINT64, b"\xff" * 8), (V.REAL32, b"\x00\x00\xc0\x3f"),
        (V.REAL64, b"\x00" * 7 + b"\x40"), (V.BOOL, b"\x01\x00\x00\x00"), (V.BINARY, b"\x00\x01\xff"), (V.GUID, uuid.UUID(int=7).bytes_le),
        (V.SIZE_T, b"\x10\x00\x00\x00\x00\x00\x00\x00"), (V.FILETIME, (133_000_000_000_000_000).to_bytes(8, "little")),
        (V.SYSTEMTIME, bytes.fromhex("e8070200010002000300040005000600")), (V.SID, bytes.fromhex("010100000000000512000000")),
        (V.HEX_INT32, b"\xff\x00\x00\x00"), (V.HEX_INT64, b"\x01" * 8), (V.STRING, "text\x00".encode("utf-16-le")),
        (V.ANSI_STRING, b"ansi\x00"), (V.UINT32, b"\x01\x02\x03"), (V.GUID, b"\x01\x02"), (V.FILETIME, b"\xff" * 8),
        (V.STRING, b"a\x00b"), (V.STRING, b""), (V.EVT_HANDLE, b"\x05\x00\x00\x00"),
    ]  # fmt: skip

    def data(name: str | None, leaves: list[object]) -> XmlNode:
        return XmlNode("Data", {"Name": [name]} if name is not None else {}, list(leaves))

    writer = EvtxWriter()
    chunks = []
    for i in range(count):
        system = XmlNode("System", {}, [
            XmlNode("Provider", {"Name": [Value(V.STRING, "Fields".encode("utf-16-le"))]}),
            XmlNode("EventID", {}, [Value(V.UINT16, (i % 9).to_bytes(2, "little"))]),
            XmlNode("TimeCreated", {"SystemTime": [Value(V.FILETIME, (133_000_000_000_000_000 + i).to_bytes(8, "little"))]}),
            XmlNode("EventRecordID", {}, [Value(V.UINT64, bytes(8))]),
        ])  # fmt: skip
        kind = i % 9
        value_type, raw = typed[i // 9 % len(typed)]
        children: list[object] = [system]
        if kind == 0:  # one typed value of each kind in turn, beside fixed ones
            children.append(XmlNode("EventData", {}, [data("Value", [Value(value_type, raw)]), data("Index", [Value(V.UINT32, i.to_bytes(4, "little"))])]))
        elif kind == 1:  # literal text, an empty element, unnamed elements, another element's name
            children.append(XmlNode("EventData", {}, [
                data("Literal", [f"text {i} é"]), data("Empty", []), data(None, [Value(value_type, raw)]), data("", [Value(V.UINT8, b"\x01")]),
                XmlNode("Binary", {}, [Value(V.BINARY, bytes([i % 256]) * 3)]),
            ]))  # fmt: skip
        elif kind == 2:  # a name repeated: the dict keeps its first place and its last value
            children.append(XmlNode("EventData", {}, [data("Same", [Value(V.UINT32, b"\x01\x00\x00\x00")]), data("Other", []), data("Same", ["last"])]))
        elif kind == 3 and i % 2:  # an array: one element per item, the same name twice
            children.append(XmlNode("EventData", {}, [data("Items", [Value(V.UINT16 | V.ARRAY, b"\x01\x00\x02\x00")])]))
        elif kind == 3:  # unnamed items (an empty string and a zero are no value), beside a named value
            items = [Value(V.STRING | V.ARRAY, "one\x00\x00three\x00".encode("utf-16-le")), Value(V.UINT32 | V.ARRAY, bytes(4) + b"\x05\x00\x00\x00")]
            children.append(XmlNode("EventData", {}, [data(None, [items[i // 2 % 2]]), data("After", [Value(value_type, raw)])]))
        elif kind == 4:  # mixed content
            children.append(XmlNode("EventData", {}, [data("Mixed", ["before ", Value(V.UINT32, b"\x02\x00\x00\x00")])]))
        elif kind == 5 and i % 2:  # UserData: the fields of its first element, nested ones as dicts
            group = XmlNode("Group", {}, [XmlNode("Deep", {}, [Value(V.UINT8, b"\x04")])])
            children.append(XmlNode("UserData", {}, [XmlNode("Inner", {}, [XmlNode("Field", {}, [Value(V.UINT32, b"\x03\x00\x00\x00")]), group])]))
        elif kind == 5:
            fields = [XmlNode("Field", {}, [Value(value_type, raw)]), XmlNode("Note", {"Kind": ["x"]}, ["literal"]), XmlNode("None", {}, [])]
            children.append(XmlNode("UserData", {}, [XmlNode("Flat", {"xmlns": ["urn:flat"]}, fields), XmlNode("Second", {}, [])]))
        elif kind == 6:  # no EventData at all
            pass
        elif kind == 7:  # a value left out (a null substitution): the element is empty
            children.append(XmlNode("EventData", {}, [data("Null", [Value(V.NULL, b"")]), data("Value", [Value(value_type, raw)])]))
        else:  # names beyond ASCII, a string with its terminator
            children.append(XmlNode("EventData", {}, [data("Größe", [Value(V.STRING, f"wert {i}\x00".encode("utf-16-le"))])]))
        writer.add_tree([XmlNode("Event", {"xmlns": [EVENT_NAMESPACE]}, children)])
        chunks.extend(writer.take_chunks())
    chunks.extend(writer.finish())
    return writer.file_header() + b"".join(chunks)


def _tree_items(record: Any, text: bool) -> list[Any]:
    from openetw.evtx.record import properties_from_tree

    return list(properties_from_tree(record.tree(), text=text).items())


def _batch_items(batch: Any, i: int, text: bool) -> list[Any]:
    return list(batch.event_data(i, text=text).items())


def fields(data: bytes, *, batches: bool = False) -> Any:
    """Every record's ``EventData`` values and texts: from ``RecordBatch.event_data`` and
    ``data_columns`` (the walk's fields) or from each ``EvtxRecord``'s tree; a record whose
    values are damaged gives its error."""
    try:
        reader = EvtxReader(data, path="case.evtx")
    except EvtxFormatError as error:
        return ("file header", _error(error))
    rows: list[Any] = []
    if not batches:
        for record in reader.records():
            rows.append((_try(partial(_tree_items, record, False)), _try(partial(_tree_items, record, True))))
        return rows
    for batch in reader.batches():
        by_row: dict[int, list[Any]] = {}
        for text in (False, True):
            try:
                groups = batch.data_columns(text=text)
            except EvtxFormatError:
                groups = []  # a damaged row: compared one at a time below
            for group in groups:
                for j, row in enumerate(group.rows):
                    by_row.setdefault(row, []).append(list(zip(group.names, (column[j] for column in group.columns), strict=True)))
        for i in range(len(batch)):
            one = (_try(partial(_batch_items, batch, i, False)), _try(partial(_batch_items, batch, i, True)))
            if i in by_row:
                assert tuple(by_row[i]) == one, i
            rows.append(one)
    return rows
