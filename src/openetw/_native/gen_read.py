"""``_read_constants.h``: what the read side's C needs of ``etl/layouts.py``, ``etl/framing.py``
and ``etl/lzxpress.py``, rendered from them (see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, layout_fields, render
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl import lzxpress as Z
from openetw.tdh import columns as C

__all__ = ["KIND_NUMBERS", "header"]

KIND_NUMBERS = {"system": 0, "compact": 1, "perfinfo": 2, "classic": 3, "instance": 4, "event": 5, "wpp": 6}
"""The C's number for each ``HeaderKind.kind``."""


def _field_offsets(prefix: str, layout: L.Layout, names: tuple[str, ...]) -> list[str]:
    return [define(f"OE_{prefix}_{name.upper()}_AT", layout.offset(name)) for name in names]


def header() -> str:
    B = L.WMI_BUFFER_HEADER
    lines = [
        "/* WMI_BUFFER_HEADER (etl/layouts.py) */",
        define("OE_BUFFER_HEADER_SIZE", L.BUFFER_HEADER_SIZE),
        *(define(f"OE_BUFFER_{name.upper()}_AT", B.offset(name)) for name in ("BufferSize", "Offset", "BufferFlag", "TimeStamp")),
        define("OE_BUFFER_FLAG_COMPRESSED", L.BUFFER_FLAG_COMPRESSED),
        define("OE_ETW_MAX_BUFFER_SIZE", L.ETW_MAX_BUFFER_SIZE),
        "",
        "/* the marker and the chain (etl/framing.py) */",
        define("OE_MARKER_TYPE_SHIFT", F.MARKER_TYPE_SHIFT),
        define("OE_MARKER_FLAGS_SHIFT", F.MARKER_FLAGS_SHIFT),
        define("OE_MARKER_KEY_SHIFT", F.MARKER_KEY_SHIFT),
        define("OE_TYPED_FLAGS_MASK", F.TYPED_FLAGS_MASK),
        define("OE_MESSAGE_FLAGS_MASK", F.MESSAGE_FLAGS_MASK),
        define("OE_MESSAGE_FLAGS", F.MESSAGE_FLAGS),
        f"#define OE_END_OF_DATA {F.END_OF_DATA:#x}u",
        define("OE_RECORD_ALIGNMENT", F.RECORD_ALIGNMENT),
        define("OE_RECORDS_START", F.RECORDS_START),
        "",
        "/* one row per header type: X(header type, kind, header size, where Size sits, struct codes, structure) */",
        "#define OE_HEADER_KINDS(X) \\",
    ]
    for header_type, row in sorted(F.HEADER_KINDS.items()):
        lines.append(
            f'    X({header_type:#04x}, {KIND_NUMBERS[row.kind]}, {row.header_size:#x}, {row.size_at}, '
            f'"{layout_fields(row.layout)}", "{row.structure}") \\'
        )
    lines[-1] = lines[-1].rstrip(" \\")
    m = F.MESSAGE_KIND
    lines += [
        "",
        "/* WPP messages (framed by their marker flags, whatever the header type) */",
        define("OE_MESSAGE_KIND", KIND_NUMBERS[m.kind]),
        define("OE_MESSAGE_HEADER_SIZE", m.header_size),
        define("OE_MESSAGE_SIZE_AT", m.size_at),
        define("OE_MESSAGE_FIELDS", layout_fields(m.layout)),
        define("OE_MESSAGE_STRUCTURE", m.structure),
        "",
        "/* where the index pass reads header fields (etl/layouts.py): OE_<structure>_<field> */",
        *_field_offsets("SYSTEM", L.SYSTEM_TRACE_HEADER, ("Version", "HookId", "ThreadId", "ProcessId", "SystemTime")),
        *_field_offsets("PERFINFO", L.PERFINFO_TRACE_HEADER, ("Version", "HookId", "SystemTime")),
        *_field_offsets("CLASSIC", L.EVENT_TRACE_HEADER, ("Type", "Level", "Version", "ThreadId", "ProcessId", "TimeStamp", "Guid")),
        *_field_offsets("EVENT", L.EVENT_HEADER, (
            "Flags", "ThreadId", "ProcessId", "TimeStamp", "ProviderId", "Id", "Version", "Channel", "Level", "Opcode", "Task", "Keyword",
        )),
        define("OE_EVENT_HEADER_SIZE", L.EVENT_HEADER.size),
        define("OE_EVENT_HEADER_FLAG_EXTENDED_INFO", L.EVENT_HEADER_FLAG_EXTENDED_INFO),
        define("OE_EXTENDED_ITEM_SIZE", L.EVENT_HEADER_EXTENDED_ITEM.size),
        define("OE_EXTENDED_ITEM_SIZE_AT", L.EVENT_HEADER_EXTENDED_ITEM.offset("ItemSize")),
        define("OE_EXTENDED_ITEM_LINKAGE_AT", L.EVENT_HEADER_EXTENDED_ITEM.offset("Linkage")),
        "",
        "/* LZXPRESS plain LZ77 (etl/lzxpress.py) */",
        define("OE_LZ_MIN_MATCH", Z.MIN_MATCH),
        define("OE_LZ_MAX_DISTANCE", Z.MAX_DISTANCE),
        define("OE_LZ_SMALLEST_LENGTH_FIELD", Z._SMALLEST_LENGTH_FIELD),
        "",
        "/* the steps of a schema's column plan (tdh/columns.py) */",
        *(define(f"OE_COL_{name.upper()}", code) for name, code in C.STEPS.items()),
        f"#define OE_COL_FILETIME_TO_UNIX_MICROS {C.FILETIME_TO_UNIX_MICROS}LL",
    ]
    return render("openetw/_native/gen_read.py", "OPENETW_READ_CONSTANTS_H", lines)
