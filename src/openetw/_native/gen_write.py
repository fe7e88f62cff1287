"""``_write_constants.h``: what the write side's C needs of ``etl/layouts.py`` and
``ipc/pool.py`` (the pool's layout and the WMI_BUFFER_HEADER a producer fills in), rendered from
them (see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, render
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.ipc import pool as P

__all__ = ["header"]


def header() -> str:
    B = L.WMI_BUFFER_HEADER
    lines = [
        "/* WMI_BUFFER_HEADER (etl/layouts.py): where each field sits */",
        define("OE_BUFFER_HEADER_SIZE", L.BUFFER_HEADER_SIZE),
        *(define(f"OE_BH_{name.upper()}_AT", B.offset(name)) for name, _ in B.fields),
        define("OE_BH_KERNELPOINTERS_SIZE", B.size - B.offset("KernelPointers")),
        define("OE_BUFFER_FLAG_EVENTS_LOST", L.BUFFER_FLAG_EVENTS_LOST),
        define("OE_BUFFER_FLAG_PROCESSOR_INDEX", L.BUFFER_FLAG_PROCESSOR_INDEX),
        define("OE_PRODUCER_FLAGS", P._PRODUCER_FLAGS),
        define("OE_BUFFER_TYPE_GENERIC", L.BUFFER_TYPE_GENERIC),
        define("OE_BUFFER_STATE_WRITTEN", P._BUFFER_STATE_WRITTEN),
        "",
        "/* the buffer pool (ipc/pool.py) */",
        define("OE_POOL_HEADER_SIZE", P.POOL_HEADER_SIZE),
        define("OE_POOL_STATE_OFFSET", P.STATE_OFFSET),
        define("OE_POOL_MAX_RECORD_SIZE", P.MAX_RECORD_SIZE),
        define("OE_POOL_MIN_RECORD", 8),
        *(define(f"OE_POOL_{name.upper()}_AT", P.POOL_HEADER.offset(name)) for name in ("EventsLost", "EventsRefused", "BuffersCompleted")),
        *(define(f"OE_STATE_{name}", value) for name, value in (("FREE", P.FREE), ("FILLING", P.FILLING), ("FULL", P.FULL), ("TAKEN", P.TAKEN))),
        "",
        "/* the producer records the service screens (etl/layouts.py, etl/framing.py) */",
        define("OE_RECORD_ALIGNMENT", F.RECORD_ALIGNMENT),
        define("OE_TYPED_FLAGS", F.TYPED_FLAGS),
        *(
            define(f"OE_EH_{name.upper()}_AT", L.EVENT_HEADER.offset(name))
            for name in ("Size", "HeaderType", "MarkerFlags", "ThreadId", "ProcessId", "TimeStamp", "ProviderId")
        ),
        define("OE_EH_PROVIDERID_SIZE", L.EVENT_HEADER.offset("Id") - L.EVENT_HEADER.offset("ProviderId")),
    ]
    return render("openetw/_native/gen_write.py", "OPENETW_WRITE_CONSTANTS_H", lines)
