"""Former home of ``openetw.events.as_xml``, kept for one release: the read model holds it now."""

from __future__ import annotations

from openetw.events.as_xml import EVENT_NAMESPACE, event_xml, write_xml

__all__ = ["EVENT_NAMESPACE", "write_xml", "event_xml"]
