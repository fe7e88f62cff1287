"""``_nettrace_constants.h``: what the EventBlock walk's C needs of ``nettrace/events.py`` (the
header-compression flags and the fixed row sizes of versions 1-3 and 4-5), rendered from it
(see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, render
from openetw.nettrace import events as E

__all__ = ["header"]


def header() -> str:
    lines = [
        "/* header compression: the flags byte of a row (nettrace/events.py) */",
        define("OE_NT_FLAG_METADATA_ID", E.FLAG_METADATA_ID),
        define("OE_NT_FLAG_CAPTURE_THREAD_AND_SEQUENCE", E.FLAG_CAPTURE_THREAD_AND_SEQUENCE),
        define("OE_NT_FLAG_THREAD_ID", E.FLAG_THREAD_ID),
        define("OE_NT_FLAG_STACK_ID", E.FLAG_STACK_ID),
        define("OE_NT_FLAG_ACTIVITY_ID", E.FLAG_ACTIVITY_ID),
        define("OE_NT_FLAG_RELATED_ACTIVITY_ID", E.FLAG_RELATED_ACTIVITY_ID),
        define("OE_NT_FLAG_SORTED", E.FLAG_SORTED),
        define("OE_NT_FLAG_DATA_LENGTH", E.FLAG_DATA_LENGTH),
        "",
        "/* fixed rows: versions 1-3 and 4-5 uncompressed, in bytes */",
        define("OE_NT_V3_ROW", E._V3.size),
        define("OE_NT_V4_ROW", E._V4.size),
        define("OE_NT_ACTIVITY", len(E.NULL_ACTIVITY)),
        "",
        "/* the walk's modes (nettrace/events.py WALK_*) */",
        define("OE_NT_WALK_V3", E.WALK_V3),
        define("OE_NT_WALK_V4", E.WALK_V4),
        define("OE_NT_WALK_V4_COMPRESSED", E.WALK_V4_COMPRESSED),
    ]
    return render("gen_nettrace.py", "OPENETW_NETTRACE_CONSTANTS_H", lines)
