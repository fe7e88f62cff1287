"""A generated provider's ``write_<event>`` becomes the event's own generated writer on its first
write: the same bytes as the general path, keyword calls, the sessions' rules as they change,
errors naming event, field and parameter, activities; and the method when a parameter's name
would hide a name the writer uses."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from openetw.mc import InvalidEventValue
from openetw.mc.runtime import EventInfo, ManifestProvider
from openetw.provider import activity
from openetw.provider.encode import EventDescriptor, ManifestEventEncoder
from openetw.session import EnableRule, EnableState, EventFilters
from tests.mc.samples import FakePool, enable, widget_module

COUNTED = EventDescriptor(7, 0, 16, 4, 0, 0, 0x10)
SHADOWING = EventDescriptor(8, 0, 16, 4, 0, 0, 0x10)
FIELDS = (("Count", 8), ("Total", 10), ("Name", 1))  # UInt32, UInt64, UnicodeString


class CountingProvider(ManifestProvider):
    GUID = uuid.UUID("0d9b1b9e-3f0a-4f5e-9d0e-2a7c7c1f9a11")
    NAME = "Test-Fast-Writer"
    EVENTS = (
        EventInfo("counted", "Counted", COUNTED, FIELDS, ("count", "total", "name")),
        EventInfo("shadowing", "Shadowing", SHADOWING, (("Len", 1),), ("len",)),  # the writer calls len()
    )
    counted_enabled: bool = False
    shadowing_enabled: bool = False

    def write_counted(self, count: int, total: int, name: str) -> bool:
        return self.counted_enabled and self._write_event(0, (count, total, name))

    def write_shadowing(self, len: str) -> bool:  # noqa: A002 - a manifest field called "Len"
        return self.shadowing_enabled and self._write_event(1, (len,))


def reference(values: Any, record: bytes) -> bytes:
    encoder = ManifestEventEncoder(CountingProvider.GUID, COUNTED, [(name, in_type) for name, in_type in FIELDS])
    tid, pid, timestamp = struct.unpack_from("<IIq", record, 8)
    return encoder.encode_general(values, timestamp=timestamp, pid=pid, tid=tid)


def test_the_first_write_installs_the_events_own_writer_with_the_same_bytes() -> None:
    provider = CountingProvider()
    assert "write_counted" not in vars(provider)
    (pool,) = enable(provider, EnableRule()).values()
    assert provider.write_counted(1, 2, "first")  # the method: it installs the writer
    installed = vars(provider)["write_counted"]
    assert provider.write_counted is installed
    assert provider.write_counted(3, 4, "second")
    assert provider.write_counted(count=5, total=6, name="by keyword")
    assert provider.write_counted(7, name="mixed", total=8)
    rows = [(1, 2, "first"), (3, 4, "second"), (5, 6, "by keyword"), (7, 8, "mixed")]
    assert pool.records == [reference(row, record) for row, record in zip(rows, pool.records, strict=True)]
    with pytest.raises(TypeError):
        provider.write_counted(1, 2)  # a missing argument, as for any Python call


def test_the_writer_follows_the_sessions_rules_as_they_change() -> None:
    provider = CountingProvider()
    pools = enable(provider, EnableRule())
    assert provider.write_counted(1, 2, "on")
    enable(provider, EnableRule(level=3))  # the event's level 4 is too verbose now
    assert provider.counted_enabled is False and provider.write_counted(1, 2, "off") is False
    enable(provider, EnableRule(filters=EventFilters(event_ids=frozenset({7}), event_ids_include=False)))
    assert provider.write_counted(1, 2, "excluded") is False
    two = enable(provider, EnableRule(), EnableRule(match_any=0x10))
    assert provider.write_counted(3, 4, "both") is True
    assert [len(pool.records) for pool in two.values()] == [1, 1]
    provider._apply_state(EnableState.from_sessions([]), {}, notify=False)
    assert provider.write_counted(5, 6, "none") is False
    assert len(pools[1].records) == 1


def test_bad_values_through_the_installed_writer_name_the_parameter() -> None:
    provider = CountingProvider()
    (pool,) = enable(provider, EnableRule()).values()
    assert provider.write_counted(1, 2, "fine")
    with pytest.raises(InvalidEventValue) as caught:
        provider.write_counted(-1, 2, "negative")
    assert "field 'Count' (parameter count)" in str(caught.value) and caught.value.event == "Counted"
    with pytest.raises(InvalidEventValue, match="parameter name"):
        provider.write_counted(1, 2, "with\0nul")
    assert len(pool.records) == 1


def test_an_activity_is_carried_by_the_installed_writer() -> None:
    provider = CountingProvider()
    (pool,) = enable(provider, EnableRule()).values()
    assert provider.write_counted(1, 2, "outside")
    with activity() as current:
        assert provider.write_counted(3, 4, "inside")
    assert [uuid.UUID(bytes_le=r[0x40:0x50]) for r in pool.records] == [uuid.UUID(int=0), current]


def test_a_parameter_hiding_a_name_the_writer_uses_keeps_the_method() -> None:
    provider = CountingProvider()
    (pool,) = enable(provider, EnableRule()).values()
    assert provider.write_shadowing("a") and provider.write_shadowing(len="b")
    assert "write_shadowing" not in vars(provider)
    assert [r[0x50:] for r in pool.records] == ["a\0".encode("utf-16-le"), "b\0".encode("utf-16-le")]


def test_a_generated_module_writes_through_its_installed_writers() -> None:
    provider = widget_module().provider
    pools = enable(provider, EnableRule())
    for _ in range(3):
        assert provider.write_items_seen(2, [1, 2], "label", 1)
    assert "write_items_seen" in vars(provider)
    records = pools[1].records
    assert len(records) == 3 and records[0][0x50:] == records[2][0x50:]


def test_a_pool_given_later_is_used() -> None:
    provider = CountingProvider()
    enable(provider, EnableRule())
    assert provider.write_counted(1, 2, "first pool")
    later = FakePool()
    enable(provider, EnableRule(), pools={1: later})
    assert provider.write_counted(3, 4, "second pool")
    assert len(later.records) == 1
