"""``_evtx_constants.h``: what the ``.evtx`` record parser's C needs of ``evtx/layout.py``,
``evtx/binxml.py``, ``evtx/values.py`` and ``evtx/render.py``, rendered from them (see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, render
from openetw.evtx import binxml as B
from openetw.evtx import layout as L
from openetw.evtx import render as R
from openetw.evtx import values as V

__all__ = ["header"]

_TOKENS = (
    "EOF", "OPEN_START", "CLOSE_START", "CLOSE_EMPTY", "END_ELEMENT", "VALUE", "ATTRIBUTE", "CDATA", "CHAR_REF",
    "ENTITY_REF", "PI_TARGET", "PI_DATA", "TEMPLATE_INSTANCE", "NORMAL_SUBSTITUTION", "OPTIONAL_SUBSTITUTION",
    "FRAGMENT_HEADER",
)  # fmt: skip

_TYPES = (
    "NULL", "STRING", "ANSI_STRING", "INT8", "UINT8", "INT16", "UINT16", "INT32", "UINT32", "INT64", "UINT64",
    "REAL32", "REAL64", "BOOL", "BINARY", "GUID", "SIZE_T", "FILETIME", "SYSTEMTIME", "SID", "HEX_INT32",
    "HEX_INT64", "EVT_HANDLE", "BINXML", "EVT_XML", "ARRAY",
)  # fmt: skip


def header() -> str:
    lines = [
        "/* the chunk and its records (evtx/layout.py) */",
        define("OE_EVTX_CHUNK_SIZE", L.CHUNK_SIZE),
        define("OE_EVTX_CHUNK_HEADER_SIZE", L.CHUNK_HEADER_SIZE),
        define("OE_EVTX_CHUNK_HEADER_FIELDS_SIZE", L.CHUNK_HEADER_FIELDS_SIZE),
        define("OE_EVTX_RECORD_HEADER_SIZE", L.RECORD_HEADER_SIZE),
        define("OE_EVTX_MIN_RECORD_SIZE", L.MIN_RECORD_SIZE),
        "#define OE_EVTX_RECORD_MAGIC \"" + "".join(f"\\x{byte:02x}" for byte in L.RECORD_MAGIC) + "\"",
        "",
        "/* BinXml tokens and bounds (evtx/binxml.py) */",
        *(define(f"OE_TOKEN_{name}", getattr(B, f"TOKEN_{name}")) for name in _TOKENS),
        define("OE_TOKEN_FLAG_MORE", B.FLAG_MORE),
        define("OE_MAX_DEPTH", B.MAX_DEPTH),
        define("OE_MAX_FRAGMENTS", B.MAX_FRAGMENTS),
        "",
        "/* value types (evtx/values.py) */",
        *(define(f"OE_VT_{name}", getattr(V, name)) for name in _TYPES),
        "",
        "/* bytes of one item of a fixed-size type, 0 for the others (values.FIXED_SIZES) */",
        "#define OE_FIXED_SIZES { " + ", ".join(f"[{t:#x}] = {size}" for t, size in sorted(V.FIXED_SIZES.items())) + " }",
        "",
        "/* the expansion bound (evtx/render.py) */",
        define("OE_MAX_EXPANSION", R.MAX_EXPANSION),
        define("OE_CHARS_PER_BYTE", R._CHARS_PER_BYTE),
    ]
    return render("gen_evtx.py", "OPENETW_EVTX_CONSTANTS_H", lines)
