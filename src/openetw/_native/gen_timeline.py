"""``_timeline_constants.h``: what the timeline encoders' C needs of ``export/timeline/perfetto.py``
(the protobuf tags and bounds of the Perfetto writer) and ``export/timeline/chrome.py`` (the bounds
of a Chrome argument), rendered from them (see ``gen.py``)."""

from __future__ import annotations

from openetw._native.gen import define, render
from openetw.export.timeline import chrome as C
from openetw.export.timeline import perfetto as P

__all__ = ["header"]


def header() -> str:
    lines = [
        "/* Perfetto: tags, one byte each (export/timeline/perfetto.py) */",
        define("OE_PACKET_TAG", P._PACKET[0]),
        define("OE_TIMESTAMP_TAG", P._TIMESTAMP[0]),
        define("OE_TRACK_EVENT_TAG", P._TRACK_EVENT[0]),
        define("OE_INTERNED_TAG", P._INTERNED_DATA[0]),
        define("OE_ANNOTATION_TAG", P._ANNOTATION[0]),
        define("OE_UINT_TAG", P._UINT[0]),
        define("OE_STRING_TAG", P._STRING_VALUE[0]),
        "",
        "/* the longest text an argument keeps, in characters */",
        define("OE_PERFETTO_MAX_TEXT", P._MAX_TEXT),
        "",
        "/* Chrome: an argument's text and list bounds (export/timeline/chrome.py) */",
        define("OE_CHROME_MAX_TEXT", C._MAX_TEXT),
        define("OE_CHROME_MAX_ITEMS", C._MAX_ITEMS),
    ]
    return render("gen_timeline.py", "OPENETW_TIMELINE_CONSTANTS_H", lines)
