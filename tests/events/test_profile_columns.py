"""The CPU samples of a file from its index's columns are those of the per-record path: same
samples, same frames, same By Name rows, same counts (a generated trace with compressed stacks,
and PerfView's net.4.5.2 trace)."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.consumer.index import EtlIndex
from openetw.etl.build import build_perfinfo_record
from openetw.etl.extended import stack_trace_item
from openetw.etl.reader import EtlReader
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.events.profile import Profile, load_profile
from openetw.events.profile_columns import SampleTable, load_file_profile
from openetw.report.stacks import by_name
from tests.conftest import corpus_path
from tests.events.kernel_records import (
    KERNEL_BASE,
    STACK,
    cswitch,
    image_load,
    key_definition,
    key_reference,
    sample,
    stack,
    user_event,
)  # fmt: skip

APP, OTHER = 0x7FF6_0000_0000, 0x7FF7_0000_0000


def _generated(path: Path, *, keys: bool = True) -> None:
    """Three threads sampled, stacks whole or compressed (kernel and user keys, a key deleted
    and reused, the rest defined at rundown), a context switch and a user event with stacks of
    their own, a user stack logged before its sample, a damaged stack record. ``keys=False``:
    every stack whole (no key references: the compiled join's case), a sample taken twice at one
    timestamp on one thread."""
    clock = linux_trace_clock()
    base = clock.reference_timestamp
    rng = random.Random(7)
    records: list[Any] = [
        image_load(base, 40, APP, 0x10000, "C:\\app\\app.exe"),
        image_load(base + 1, 41, OTHER, 0x8000, "C:\\app\\other.dll"),
        image_load(base + 2, 0, KERNEL_BASE, 0x100000, "\\SystemRoot\\system32\\ntoskrnl.exe", opcode=3),
    ]
    user_stacks = [[APP + 0x100 * rng.randrange(1, 60) for _ in range(rng.randrange(1, 6))] for _ in range(8)]
    kernel_stacks = [[KERNEL_BASE + 0x40 * rng.randrange(1, 90) for _ in range(rng.randrange(1, 4))] for _ in range(3)]
    definitions: dict[int, list[int]] = {}
    when = base + 100
    for n in range(240):
        when += rng.randrange(2, 9)
        tid, pid = rng.choice(((7, 40), (8, 40), (9, 41)))
        shape = n % 6 if keys else (0, 1, 2)[n % 3]
        if shape == 5:  # the user stack comes first (a merged trace)
            records.append(key_reference(False, when, pid, tid, 0xA0 + n % 3, at=when - 1))
            definitions[0xA0 + n % 3] = rng.choice(user_stacks)
        records.append(sample(when, tid, APP, cpu=n % 2))
        if not keys and n == 70:
            records.append(sample(when, tid, APP + 0x10, cpu=1))  # the same thread and time: the first sample takes the stack
        if shape in (0, 1):
            records.append(stack(when, pid, tid, rng.choice(kernel_stacks) + rng.choice(user_stacks)))
        elif shape == 2:
            records.append(stack(when, pid, tid, rng.choice(user_stacks)))
            records.append(stack(when, pid, tid, rng.choice(kernel_stacks)))  # kernel part after the user part
        elif shape in (3, 4):
            records.append(key_reference(True, when, pid, tid, 0xB0 + n % 2))
            records.append(key_reference(False, when, pid, tid, 0xC0 + n % 4))
            definitions.setdefault(0xB0 + n % 2, rng.choice(kernel_stacks))
            definitions.setdefault(0xC0 + n % 4, rng.choice(user_stacks))
        if n == 120:  # a user key deleted (defined) mid-trace, then reused
            records.append(key_definition(when + 1, 0xC1, [APP + 0x4242]))
        if n % 40 == 0:
            records.append(cswitch(when, 9, 7))
            records.append(stack(when, 41, 9, [OTHER + 0x10]))  # also thread 9's: the first event of that thread and time
            records.append(user_event(when + 1, 40, 8, (stack_trace_item(1, [APP + 0x777]),)))
        if n == 50:
            records.append(build_perfinfo_record(hook_id=STACK, timestamp=when + 2, user_data=struct.pack("<qII", when, 40, tid)))
    records.sort(key=lambda record: record.timestamp)
    for key, frames in definitions.items():
        records.append(key_definition(when + 10, key, frames, rundown=True))
    with EtlWriter(path, header=new_logfile_header(clock=clock, buffer_size=4096, number_of_processors=2)) as writer:
        for record in records:
            writer.write(record)


def _per_record(path: Path) -> Profile:
    with EtlReader(str(path)) as reader:
        return load_profile(reader.records(time_order=True))


def _same(path: Path, cache: Path) -> Profile:
    reference = _per_record(path)
    fast = load_file_profile(path, index=EtlIndex.open(path, cache_dir=cache))
    assert isinstance(fast.samples, SampleTable)
    assert [(s.pid, s.tid, s.process, s.filetime, s.event, s.frames) for s in fast.samples] == [
        (s.pid, s.tid, s.process, s.filetime, s.event, s.frames) for s in reference.samples
    ]
    for grouped in (False, True):
        assert [(r.name, r.exclusive, r.inclusive) for r in by_name(fast.samples, group_modules=grouped)] == [
            (r.name, r.exclusive, r.inclusive) for r in by_name(reference.samples, group_modules=grouped)
        ]
    assert fast.stacks.as_json() == reference.stacks.as_json()
    assert list(fast.events.items()) == list(reference.events.items())
    assert fast.naming.as_json() == reference.naming.as_json() and fast.total == reference.total
    return fast


def test_a_generated_trace_with_compressed_stacks(tmp_path: Path) -> None:
    path = tmp_path / "generated.etl"
    _generated(path)
    fast = _same(path, tmp_path / "cache")
    assert fast.stacks.key_references > 0 and fast.stacks.samples_with_stacks == 240 and fast.events["CSwitch"] == 6
    samples = fast.samples
    assert samples[-1] == list(samples)[-1] and samples[1:3] == [samples[1], samples[2]]
    with pytest.raises(IndexError):
        samples[len(samples)]
    assert samples.frame_count == sum(len(sample.frames) for sample in samples)  # type: ignore[attr-defined]


def test_filters_match_the_per_record_path(tmp_path: Path) -> None:
    path = tmp_path / "generated.etl"
    _generated(path)
    index = EtlIndex.open(path, cache_dir=tmp_path / "cache")
    with EtlReader(str(path)) as reader:
        records = list(reader.records(time_order=True))
    middle = records[len(records) // 2].filetime
    for options in ({"thread": 8}, {"process": "41"}, {"start": middle}, {"end": middle}):
        expected = load_profile(records, **options)  # type: ignore[arg-type]
        got = load_file_profile(path, index=index, **options)  # type: ignore[arg-type]
        assert [(s.tid, s.filetime, s.frames) for s in got.samples] == [(s.tid, s.filetime, s.frames) for s in expected.samples]
    other = load_file_profile(path, event="CSwitch")  # not the column path: the per-record one
    assert [s.event for s in other.samples] == ["CSwitch"] * 6 and not isinstance(other.samples, SampleTable)


def test_perfview_net_trace(tmp_path: Path) -> None:
    path = corpus_path("etl", "perfview", "net.4.5.2.x64.etl")
    fast = _same(path, tmp_path)
    assert fast.total == 6318 and fast.stacks.key_references > 0


def test_the_compiled_join_equals_the_numpy_join_and_the_per_record_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stacks without key references go through ``_native/_stacks.c``: the same values as the
    numpy join (the reference) and as the per-record path."""
    from openetw.events import profile_columns

    if profile_columns._NATIVE is None:
        pytest.skip("the compiled core is not built")
    path = tmp_path / "whole.etl"
    _generated(path, keys=False)
    calls: list[int] = []
    compiled = profile_columns._NATIVE

    class Counted:
        def join_gather(self, *args: Any) -> Any:
            calls.append(1)
            return compiled.join_gather(*args)

    monkeypatch.setattr(profile_columns, "_NATIVE", Counted())
    fast = _same(path, tmp_path / "cache")
    assert calls and fast.stacks.samples_with_stacks == 240 and fast.stacks.key_references == 0
    monkeypatch.setattr(profile_columns, "_NATIVE", None)
    reference = _same(path, tmp_path / "cache")
    for name in ("pid", "tid", "filetime", "stack_of", "stack_offsets", "stack_frames"):
        assert np.array_equal(getattr(fast.samples, name), getattr(reference.samples, name)), name
    assert fast.samples.frames == reference.samples.frames  # type: ignore[attr-defined]


def test_the_compiled_join_keeps_to_the_numpy_join_on_damaged_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes of a whole-stack trace changed at random: both joins give the same samples and
    counts, or the same project error."""
    from openetw.errors import OpenEtwError
    from openetw.events import profile_columns

    compiled = profile_columns._NATIVE
    if compiled is None:
        pytest.skip("the compiled core is not built")
    path = tmp_path / "whole.etl"
    _generated(path, keys=False)
    genuine = path.read_bytes()
    rng = random.Random(11)
    read = 0
    for number in range(12):
        damaged = bytearray(genuine)
        for _ in range(rng.randrange(1, 30)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        target = tmp_path / f"damaged{number}.etl"
        target.write_bytes(bytes(damaged))
        outcomes = []
        for engine in (compiled, None):
            monkeypatch.setattr(profile_columns, "_NATIVE", engine)
            try:
                found = load_file_profile(target, index=EtlIndex.open(target, save=False))
                outcomes.append(([(s.pid, s.tid, s.filetime, s.frames) for s in found.samples], found.stacks.as_json(), found.events))
            except OpenEtwError as error:
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1], number
        read += isinstance(outcomes[0], tuple) and len(outcomes[0][0]) > 0
    assert read  # some damaged files still have samples to join
