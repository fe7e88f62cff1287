"""The XPath's column back end under its former name: it is ``openetw.events.xpath.columns`` now
(kept here for one release)."""

from __future__ import annotations

from openetw.events.xpath.columns import EventColumns, condition_mask, select_rows

__all__ = ["EventColumns", "condition_mask", "select_rows"]
