"""Counts per provider and event, time range, events lost, and what could not be decoded.

A ``Summary`` takes events one at a time (``add``) and reports them as plain data (``as_json``)
or as text (``lines``). "Decoded" means a schema was found and every property decoded; every
other record counts for its provider (name, else GUID, else kind) in ``undecoded_providers``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from openetw.events.decoded import DecodedRecord
from openetw.events.text import filetime_text
from openetw.report.kernel_summary import KernelSummary


def _iso(filetime: int) -> str:
    return filetime_text(filetime)  # a damaged timestamp no calendar date holds: FILETIME(n)

__all__ = ["Summary", "summarize"]


@dataclass(slots=True)
class _Tally:
    count: int = 0
    first: int | None = None
    last: int | None = None

    def add(self, filetime: int | None) -> None:
        self.count += 1
        if filetime is None:
            return
        if self.first is None or filetime < self.first:
            self.first = filetime
        if self.last is None or filetime > self.last:
            self.last = filetime

    def times(self) -> dict[str, str | None]:
        return {
            "first_time": _iso(self.first) if self.first is not None else None,
            "last_time": _iso(self.last) if self.last is not None else None,
        }


@dataclass(slots=True)
class _ProviderTally:
    label: str
    guid: str | None
    total: _Tally = field(default_factory=_Tally)
    events: dict[str, _Tally] = field(default_factory=dict)
    undecoded: int = 0
    failures: Counter[str] = field(default_factory=Counter)


class Summary:
    """Accumulates the summary of a stream of ``DecodedRecord``s."""

    def __init__(self, events_lost: int = 0, buffers_lost: int = 0) -> None:
        self.events_lost = events_lost
        self.buffers_lost = buffers_lost
        self.records = 0
        self.decoded = 0
        self._providers: dict[str, _ProviderTally] = {}
        self._time = _Tally()
        self.kernel = KernelSummary()

    def add(self, event: DecodedRecord) -> None:
        record = event.record
        self.records += 1
        self.kernel.add(event)
        label = event.provider_label
        tally = self._providers.get(label)
        if tally is None:
            guid = str(record.provider_id) if record.provider_guid_bytes is not None else None
            tally = self._providers[label] = _ProviderTally(label, guid)
        when = record.filetime if record.kind != "unknown" else None
        if when is not None:
            self._time.add(when)
        tally.total.add(when)
        name = event.event_name or _fallback_event_name(event)
        tally.events.setdefault(name, _Tally()).add(when)
        if event.is_decoded:
            self.decoded += 1
            return
        tally.undecoded += 1
        if event.schema is None:
            tally.failures["no schema"] += 1
        else:
            for prop in event.errors:
                tally.failures[f"property {prop!r} not decoded"] += 1

    def add_all(self, events: Iterable[DecodedRecord]) -> Summary:
        for event in events:
            self.add(event)
        return self

    @property
    def undecoded_providers(self) -> dict[str, int]:
        tallies = sorted(self._providers.values(), key=lambda t: (-t.undecoded, t.label))
        return {t.label: t.undecoded for t in tallies if t.undecoded}

    def as_json(self) -> dict[str, Any]:
        providers = []
        for tally in sorted(self._providers.values(), key=lambda t: (-t.total.count, t.label)):
            providers.append({
                "provider": tally.label,
                **({"guid": tally.guid} if tally.guid else {}),
                "records": tally.total.count,
                "undecoded": tally.undecoded,
                **tally.total.times(),
                "events": [
                    {"event": name, "count": item.count, **item.times()}
                    for name, item in sorted(tally.events.items(), key=lambda pair: (-pair[1].count, pair[0]))
                ],
                **({"failures": dict(tally.failures.most_common())} if tally.failures else {}),
            })
        data = {
            "records": self.records,
            "decoded": self.decoded,
            "undecoded": self.records - self.decoded,
            "undecoded_providers": self.undecoded_providers,
            "events_lost": self.events_lost,
            "buffers_lost": self.buffers_lost,
            **self._time.times(),
            "providers": providers,
        }
        if self.kernel.has_processes:  # a kernel trace: processes, disk, network, CPU by process
            data["kernel"] = self.kernel.as_json()
        return data

    def lines(self) -> list[str]:
        data = self.as_json()
        share = 100.0 * data["decoded"] / data["records"] if data["records"] else 100.0
        out = [
            f"records        {data['records']}   decoded {data['decoded']} ({share:.1f}%)",
            f"time           {data['first_time'] or '-'} .. {data['last_time'] or '-'}",
            f"lost           {data['events_lost']} events, {data['buffers_lost']} buffers",
            "providers",
        ]
        for provider in data["providers"]:
            undecoded = f"   ({provider['undecoded']} not decoded)" if provider["undecoded"] else ""
            out.append(f"  {provider['records']:>9}  {provider['provider']}{undecoded}")
            for item in provider["events"]:
                span = f"{item['first_time'] or '-'} .. {item['last_time'] or '-'}"
                out.append(f"    {item['count']:>9}  {item['event']}   {span}")
            for reason, count in provider.get("failures", {}).items():
                out.append(f"    {count:>9}  not decoded: {reason}")
        if self.kernel.has_processes:
            out.extend(self.kernel.lines())
        return out


def _fallback_event_name(event: DecodedRecord) -> str:
    record = event.record
    if record.kind in ("system", "compact", "perfinfo"):
        return f"hook 0x{record.hook_id or 0:04x} v{record.version}"
    if record.kind in ("classic", "instance"):
        return f"Opcode({record.opcode}) v{record.version}"
    if record.kind == "unknown":
        return "unknown record"
    return f"EventID({record.id}) v{record.version}"


def summarize(events: Iterable[DecodedRecord], events_lost: int = 0, buffers_lost: int = 0) -> Summary:
    return Summary(events_lost, buffers_lost).add_all(events)
