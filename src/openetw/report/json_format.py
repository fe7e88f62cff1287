"""Former home of ``openetw.events.as_json``, kept for one release: the read model holds it now."""

from __future__ import annotations

from openetw.events.as_json import event_to_json, record_fields, write_json

__all__ = ["event_to_json", "record_fields", "write_json"]
