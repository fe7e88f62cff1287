"""The provider runtime: register providers with the trace service and write events into its pools."""

from openetw.provider.activity import activity, current_activity_id, new_activity_id
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
