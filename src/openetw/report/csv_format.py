"""Former home of ``openetw.events.as_csv``, kept for one release: the read model holds it now."""

from __future__ import annotations

from openetw.events.as_csv import CSV_COLUMNS, event_row, write_csv

__all__ = ["CSV_COLUMNS", "event_row", "write_csv"]
