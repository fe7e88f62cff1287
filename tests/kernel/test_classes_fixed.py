"""System call records built column-wise (KernelEventMapper.map_fixed) against map_events."""

from __future__ import annotations

import numpy as np

from openetw.kernel import KernelEventMapper
from openetw.kernel.ringbuffer import FixedEvents


def _batch(events, names=("sys_enter", "sys_exit", "other")):
    kinds = np.array([names.index(name) for _, name, _ in events], dtype=np.int64)
    columns = {field: np.array([v.get(field, 0) & 0xFFFFFFFFFFFFFFFF for _, _, v in events], dtype=np.uint64) for field in ("id", "ret")}
    signed = {(kind, field): True for kind in range(len(names)) for field in ("id", "ret")}
    return FixedEvents(3, names, kinds, np.array([ts for ts, _, _ in events], dtype=np.int64), columns, signed)


EVENTS = [
    (100, "sys_enter", {"id": 39}), (105, "sys_exit", {"ret": -38}), (110, "sys_enter", {"id": -1}),
    (111, "sys_exit", {"ret": 1 << 40}), (120, "sys_enter", {"id": 0}), (130, "sys_exit", {"ret": 0}),
]


def _one_by_one(events):
    raws = []
    mapper = KernelEventMapper({"syscall"})
    mapper.map_events([(ts, 3, name, v) for ts, name, v in events], lambda record: True,
                      lambda raw, cpu, ts: raws.append((raw, cpu, ts)) or True)  # fmt: skip
    return raws


def test_the_block_holds_the_records_map_events_writes_one_by_one():
    block, row_size, timestamps = KernelEventMapper({"syscall"}).map_fixed(_batch(EVENTS))
    raws = _one_by_one(EVENTS)
    assert row_size == 24 and len(block) == 24 * len(EVENTS)
    assert block == b"".join(raw + bytes(-len(raw) % 8) for raw, _, _ in raws)
    assert timestamps.tolist() == [ts for _, _, ts in raws]


def test_events_of_other_names_are_left_out_and_counted():
    mapper = KernelEventMapper({"syscall"})
    block, _, timestamps = mapper.map_fixed(_batch(EVENTS[:2] + [(107, "other", {})] + EVENTS[2:]))
    assert block == mapper.map_fixed(_batch(EVENTS))[0]
    assert timestamps.tolist() == [ts for ts, _, _ in EVENTS]
    assert mapper.unmapped == 1


def test_fixed_events_follow_the_flag_and_registered_handlers():
    assert KernelEventMapper({"process"}).fixed_events() == {}
    mapper = KernelEventMapper({"syscall", "process"})
    assert mapper.fixed_events() == {"sys_enter": ("id",), "sys_exit": ("ret",)}
    mapper.register("sys_exit", lambda ts, cpu, v: [])
    assert mapper.fixed_events() == {"sys_enter": ("id",)}
    block, _, _ = mapper.map_fixed(_batch(EVENTS))
    assert len(block) == 24 * 3 and mapper.unmapped == 3
