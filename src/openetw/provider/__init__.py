"""The provider runtime: register providers with the trace service and write events into its pools.

The encoders and the runtime load on first use: a program that writes with a TraceLogging
provider no session enables never loads the encoders. ``activity`` is imported at once: it names
a function here and a module too, and the function must win.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openetw.provider.activity import activity, current_activity_id, new_activity_id

if TYPE_CHECKING:
    from openetw.provider.encode import EventDescriptor, EventTooLarge, ManifestEventEncoder, TraceLoggingEventEncoder
    from openetw.provider.runtime import EnableCallback, Provider, TraceLoggingEvent, TraceLoggingProvider

__all__ = [
    "EnableCallback",
    "EventDescriptor",
    "EventTooLarge",
    "ManifestEventEncoder",
    "Provider",
    "TraceLoggingEvent",
    "TraceLoggingEventEncoder",
    "TraceLoggingProvider",
    "activity",
    "current_activity_id",
    "new_activity_id",
]

_LAZY = {
    "EnableCallback": "openetw.provider.runtime",
    "EventDescriptor": "openetw.provider.encode",
    "EventTooLarge": "openetw.provider.encode",
    "ManifestEventEncoder": "openetw.provider.encode",
    "Provider": "openetw.provider.runtime",
    "TraceLoggingEvent": "openetw.provider.runtime",
    "TraceLoggingEventEncoder": "openetw.provider.encode",
    "TraceLoggingProvider": "openetw.provider.runtime",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
