"""Former home of ``openetw.events.text``, kept for one release: the read model holds it now."""

from __future__ import annotations

from openetw.events.text import json_properties, json_value

__all__ = ["json_value", "json_properties"]
