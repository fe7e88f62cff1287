"""``_tracefs_constants.h``: what the tracefs page decoder's C needs of ``kernel/tracefs_format.py``
and ``kernel/ringbuffer_batch.py``, rendered from them (see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, render
from openetw.kernel import ringbuffer_batch as B
from openetw.kernel import tracefs_format as T
from openetw.kernel.ringbuffer_plan import OPS

__all__ = ["header"]


def header() -> str:
    lines = [
        "/* the sub-buffer (kernel/tracefs_format.py) */",
        f"#define OE_COMMIT_LENGTH_MASK {T.COMMIT_LENGTH_MASK:#x}ull",
        f"#define OE_ABS_TIME_TOP_BITS {T.ABS_TIME_TOP_BITS:#x}ull",
        "",
        "/* a page time past this is damage (kernel/ringbuffer_batch.py) */",
        f"#define OE_TIME_LIMIT {B._TIME_LIMIT:#x}ll",
        "",
        "/* field kinds: OE_OP_<kind> */",
        *(define(f"OE_OP_{kind.upper()}", number) for kind, number in OPS.items()),
    ]
    return render("gen_tracefs.py", "OPENETW_TRACEFS_CONSTANTS_H", lines)
