"""Former home of ``openetw.events.decoded``, kept for one release: the read model holds it now."""

from __future__ import annotations

from openetw.events.decoded import DecodedRecord, decode_record, decode_records, provider_key

__all__ = ["ReportEvent", "decode_record", "decode_records", "provider_key"]

ReportEvent = DecodedRecord  # the decoded event's former name
