"""The kernel symbols a Linux trace records when it stops, and frames named from them."""

from __future__ import annotations

from openetw.events.frames import FrameNamer
from openetw.events.trace_state import TraceState
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_perf import install_perf_handlers
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.events.kernel_records import image_load

BASE = 0xFFFFFFFF_81000000
SYMBOLS = [(BASE, "_text"), (BASE + 0x100, "do_syscall_64"), (BASE + 0x400, "irq_exit"), (BASE + 0x900, "schedule")]


def test_only_the_symbols_samples_hit_are_written_and_they_name_the_frames() -> None:
    perf = install_perf_handlers(KernelEventMapper({"process"}), ("image", "profile"))
    # a sample: two kernel frames, then (after perf's user context marker) a user frame
    chain = (0xFFFFFFFFFFFFFF80, BASE + 0x123, BASE + 0x410, 0xFFFFFFFFFFFFFE00, 0x401000)
    samples = perf.on_sample(1000, 0, {"pid": 40, "tid": 41, "ip": BASE + 0x123, "callchain": chain})
    records = perf.symbol_rundown(SYMBOLS, 2000)
    registry = SchemaRegistry()
    decoded = []
    for record in records:
        schema = registry.schema_for(record)
        assert schema is not None and schema.event_name == "KernelSymbols/Symbol"
        decoded.append(dict(decode_properties(schema, record.user_data, record.pointer_size)))
    assert decoded == [
        {"Address": BASE + 0x100, "Size": 0x300, "Name": "do_syscall_64"},
        {"Address": BASE + 0x400, "Size": 0x500, "Name": "irq_exit"},
    ]
    state = TraceState().learn([image_load(0, 0, BASE, 0x1000000, "[kernel.kallsyms]", opcode=3), *samples, *records])
    namer = FrameNamer(state)  # no kallsyms text: the trace's own symbols
    assert [namer.name(40, address).label for address in (BASE + 0x123, BASE + 0x410)] == [
        "[kernel.kallsyms]!do_syscall_64", "[kernel.kallsyms]!irq_exit",
    ]  # fmt: skip
    assert perf.symbol_rundown([], 2000) == []
