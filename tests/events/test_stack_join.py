"""Stacks joined to their events: same thread and timestamp, compressed stacks resolved."""

from __future__ import annotations

import struct

from openetw.etl.extended import EXT_STACK_KEY64, ExtendedItem, stack_trace_item
from openetw.events.frames import FrameNamer
from openetw.events.stacks import collect_stacks, event_matches
from openetw.events.trace_state import TraceState, module_name
from tests.events.kernel_records import (
    KERNEL_BASE,
    cswitch,
    image_load,
    key_definition,
    key_reference,
    sample,
    stack,
    user_event,
)  # fmt: skip

K1, K2 = KERNEL_BASE + 0x100, KERNEL_BASE + 0x200
U1, U2, U3 = 0x7FF6_0000_1010, 0x7FF6_0000_2020, 0x7FF6_0000_3030


def test_a_full_stack_joins_the_sample_of_its_thread_and_time() -> None:
    records = [sample(100, 7, K1), sample(100, 8, U1, cpu=1), stack(100, 40, 8, [U1, U2]), stack(100, 40, 7, [K1, K2])]
    stacks, collector = collect_stacks(records)
    by_thread = {entry.tid: entry for entry in stacks}
    assert by_thread[7].addresses == (K1, K2) and by_thread[8].addresses == (U1, U2)
    assert by_thread[8].cpu == 1 and by_thread[8].pid == 40 and by_thread[8].event == "SampledProfile"
    assert collector.stats.samples == 2 and collector.stats.samples_with_stacks == 2 and collector.stats.unmatched_stacks == 0


def test_a_stack_of_another_thread_or_time_joins_nothing() -> None:
    stacks, collector = collect_stacks([sample(100, 7, K1), stack(100, 40, 9, [U1]), stack(101, 40, 7, [U1])])
    assert stacks == [] and collector.stats.unmatched_stacks == 2


def test_compressed_stacks_resolve_to_the_next_definition_of_their_key_kernel_part_first() -> None:
    records = [
        sample(100, 7, U1), key_reference(False, 100, 40, 7, 0xAA), key_reference(True, 100, 40, 7, 0xBB),
        key_definition(150, 0xAA, [U1, U2]),  # the user key deleted: defined, and free for reuse
        sample(200, 7, U3), key_reference(False, 200, 40, 7, 0xAA),
        key_definition(300, 0xAA, [U3], rundown=True), key_definition(300, 0xBB, [K1, K2], rundown=True),
    ]  # fmt: skip
    stacks, collector = collect_stacks(records)
    assert [entry.addresses for entry in stacks] == [(K1, K2, U1, U2), (U3,)]
    assert collector.stats.key_references == 3 and collector.stats.keys_defined == 3 and collector.stats.unresolved_keys == 0


def test_a_key_never_defined_is_counted_and_the_rest_of_the_stack_kept() -> None:
    stacks, collector = collect_stacks([sample(100, 7, U1), key_reference(True, 100, 40, 7, 0xCC), stack(100, 40, 7, [U1])])
    assert [entry.addresses for entry in stacks] == [(U1,)] and collector.stats.unresolved_keys == 1


def test_a_user_stack_logged_before_its_event_still_joins_it() -> None:
    """A merged trace may put a thread's user-stack record ahead of its event."""
    stacks, _ = collect_stacks([key_reference(False, 100, 40, 7, 0xAA, at=90), sample(100, 7, U1), key_definition(300, 0xAA, [U1])])
    assert [(entry.tid, entry.addresses) for entry in stacks] == [(7, (U1,))]


def test_a_cswitch_stack_is_the_new_threads() -> None:
    stacks, _ = collect_stacks([cswitch(100, 12, 13), stack(100, 40, 12, [K1])])
    assert [(entry.event, entry.tid) for entry in stacks] == [("CSwitch", 12)]


def test_user_events_carry_their_stacks_in_extended_items() -> None:
    key_item = ExtendedItem(EXT_STACK_KEY64, struct.pack("<QQ", 1, 0xDD))
    records = [user_event(100, 40, 7, (stack_trace_item(1, [U1, U2]),)), user_event(110, 40, 7, (key_item,)), key_definition(200, 0xDD, [U3])]
    stacks, collector = collect_stacks(records)
    assert [(entry.pid, entry.addresses) for entry in stacks] == [(40, (U1, U2)), (40, (U3,))]
    assert collector.stats.extended_stacks == 2


def test_frames_are_named_by_the_image_that_held_them_then() -> None:
    records = [
        image_load(10, 40, 0x7FF6_0000_0000, 0x10000, "C:\\Windows\\System32\\app.dll"),
        image_load(50, 40, 0x7FF6_0000_0000, 0x10000, "C:\\Windows\\System32\\app.dll", opcode=2),  # unloaded
        image_load(60, 40, 0x7FF6_0000_0000, 0x8000, "C:\\Windows\\System32\\other.dll"),
        image_load(0, 0, KERNEL_BASE, 0x100000, "\\SystemRoot\\system32\\ntoskrnl.exe", opcode=3),
    ]  # fmt: skip
    state = TraceState().learn(records)
    namer = FrameNamer(state)
    when_loaded = records[0].filetime + 1
    assert namer.name(40, U1, when_loaded).label == "app!+0x1010"
    namer = FrameNamer(state)
    assert namer.name(40, U1, records[2].filetime + 1).label == "other!+0x1010"
    assert namer.name(40, K1).label == "ntoskrnl!+0x100"  # the kernel's images serve every process
    assert namer.name(40, 0x1234).label == "?!0x1234"
    assert namer.stats.frames == 3 and namer.stats.in_images == 2 and namer.stats.named == 0


def test_names_and_matching() -> None:
    assert module_name("C:\\Windows\\assembly\\NativeImages\\mscorlib.ni.dll") == "mscorlib"
    assert module_name("/usr/lib/x86_64-linux-gnu/libc.so.6") == "libc.so.6"
    assert event_matches("Microsoft-Windows-Kernel-File/Create", "create") and not event_matches("CSwitch", "Switch")


def test_kernel_frames_are_named_by_kallsyms_of_the_same_boot_only() -> None:
    base = 0xFFFFFFFF_81000000
    kallsyms = f"{base:016x} T _text\n{base + 0x100:016x} T do_syscall_64\n{base + 0x400:016x} t irq_exit\n"
    state = TraceState().learn([image_load(0, 0, base, 0x200000, "[kernel.kallsyms]", opcode=3)])
    frame = FrameNamer(state, kallsyms=kallsyms).name(40, base + 0x123)
    assert (frame.label, frame.offset, frame.source) == ("[kernel.kallsyms]!do_syscall_64", 0x23, "kallsyms-now")
    moved = kallsyms.replace(f"{base:016x} T _text", f"{base - 0x1000:016x} T _text")  # another boot: _text elsewhere
    assert FrameNamer(state, kallsyms=moved).name(40, base + 0x123).label == "[kernel.kallsyms]!+0x123"


def test_jit_frames_are_named_by_a_perf_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "perf-40.map").write_text("7f0000001000 100 jitted_hot\n")
    frame = FrameNamer(TraceState(), perf_map_dir=tmp_path).name(40, 0x7F0000001010)
    assert (frame.label, frame.source) == ("perf-40.map!jitted_hot", "perf-map")


def test_short_and_damaged_stack_records_are_skipped_not_guessed() -> None:
    from openetw.etl.build import build_perfinfo_record
    from tests.events.kernel_records import KEY_DELETE, KEY_USER, STACK

    damaged = [
        build_perfinfo_record(hook_id=STACK, timestamp=101, user_data=b"\x01\x02"),  # shorter than its head
        build_perfinfo_record(hook_id=STACK, timestamp=101, user_data=struct.pack("<qII", 100, 40, 7)),  # no frames
        build_perfinfo_record(hook_id=KEY_USER, timestamp=101, user_data=struct.pack("<qII", 100, 40, 7) + b"\x01"),  # key cut
        build_perfinfo_record(hook_id=KEY_DELETE, timestamp=102, user_data=b"\x05"),  # definition cut
        build_perfinfo_record(hook_id=0x0F2E, timestamp=100, user_data=b"\x00"),  # a sample cut short
    ]  # fmt: skip
    stacks, collector = collect_stacks([sample(100, 7, U1), *damaged, stack(100, 40, 7, [U1, U2])])
    assert [(entry.tid, entry.addresses) for entry in stacks] == [(7, (U1, U2))]
    assert collector.stats.keys_defined == 0 and collector.stats.samples == 2
