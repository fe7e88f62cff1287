"""Finding the PerfView view of an event: kernel and KernelTraceControl views by name, CLR
views by name, anything else shown as its schema lays it out."""

from __future__ import annotations

from typing import Any

from openetw.report.perfview.views import View, fields
from openetw.report.perfview.views_clr import CLR_VIEWS
from openetw.report.perfview.views_kernel import KERNEL_VIEWS

__all__ = ["view_for"]

_VIEWS: dict[str, View] = {**KERNEL_VIEWS, **CLR_VIEWS}

# An EventSource's manifest chunk (event 0xFFFE): the envelope, and the size of the chunk.
MANIFEST_DATA = View(fields(
    "Format@0u1:i MajorVersion@1u1:i MinorVersion@2u1:i Magic@3u1:i TotalChunks@4u2:i ChunkNumber@6u2:i "
    "PayloadLength:n",
    PayloadLength=("n", lambda data: data.record.user_data_length),
))


def view_for(key: str, record: Any, schema: Any) -> View | None:
    """The view of the event named ``key`` (``Provider/Event``), or ``None`` for the schema's own."""
    if key.endswith("/ManifestData"):
        return MANIFEST_DATA
    return _VIEWS.get(key)
