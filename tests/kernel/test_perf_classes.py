"""perf raw events → Image, PerfInfo SampledProfile and StackWalk records that decode."""

from __future__ import annotations

import collections
import os
import sys

import pytest

from openetw.errors import InvalidArgument
from openetw.kernel import perf_format as F
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_perf import image_spans, install_perf_handlers
from openetw.kernel.procfs import ProcSource, parse_maps
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry

from . import perf_records as R

REGISTRY = SchemaRegistry()

MAPS = """\
55d0c0a00000-55d0c0a04000 r--p 00000000 fe:00 260257                     /usr/bin/demo
55d0c0a04000-55d0c0a0a000 r-xp 00004000 fe:00 260257                     /usr/bin/demo
55d0c0a0a000-55d0c0a0c000 r--p 0000a000 fe:00 260257                     /usr/bin/demo
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f1000000000-7f1000028000 r--p 00000000 fe:00 338900                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000028000-7f10001bd000 r-xp 00028000 fe:00 338900                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f10001bd000-7f1000215000 r--p 001bd000 fe:00 338900                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000300000-7f1000301000 rwxp 00000000 00:00 0
7f1000400000-7f1000402000 r-xp 00000000 00:00 0                          [vdso]
7f1000500000-7f1000501000 r-xp 00000000 fe:00 77                         /tmp/a file with spaces (deleted)
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
"""


class FakeMaps:
    def __init__(self, maps: dict[int, str | None]):
        self._maps = maps

    def pids(self):
        return sorted(self._maps)

    def maps(self, pid):
        text = self._maps.get(pid)
        return None if text is None else parse_maps(text)

    def kernel_images(self):
        return [("[kernel.kallsyms]", 0xFFFFFFFF81000000, 0x1209988), ("[e1000]", 0xFFFFFFFFC0000000, 0x4000)]


def decoded(records):
    out = []
    for record in records:
        schema = REGISTRY.schema_for(record)
        assert schema is not None, record
        values = dict(decode_properties(schema, record.user_data, record.pointer_size))
        assert not any(isinstance(v, Exception) for v in values.values()), values
        out.append((schema.event_name, record, values))
    return out


def setup(flags=("image", "profile"), interval_ns=1_000_000):
    mapper = KernelEventMapper({"process"})
    return mapper, install_perf_handlers(mapper, flags, interval_ns)


def test_parse_maps_reads_paths_with_spaces_and_anonymous_lines():
    entries = parse_maps(MAPS + "garbage line\n")
    assert len(entries) == 11
    libc_text = entries[5]
    assert (libc_text.start, libc_text.end, libc_text.perms, libc_text.offset, libc_text.inode) == (0x7F1000028000, 0x7F10001BD000, "r-xp", 0x28000, 338900)
    assert entries[7].path == "" and entries[7].executable
    assert entries[9].path == "/tmp/a file with spaces (deleted)"


def test_image_spans_one_per_file_and_base():
    spans = image_spans(parse_maps(MAPS))
    assert spans == [
        ("/usr/bin/demo", 0x55D0C0A00000, 0xA000),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7F1000000000, 0x1BD000),
        ("[vdso]", 0x7F1000400000, 0x2000),
        ("/tmp/a file with spaces (deleted)", 0x7F1000500000, 0x1000),
    ]


def test_rundown_writes_image_dcstart_and_the_sampling_interval():
    _, perf = setup(interval_ns=1_003_009)
    records = decoded(perf.rundown(FakeMaps({1: MAPS, 2: "", 3: None}), 5_000, cpu=1))
    names = [name for name, _, _ in records]
    assert names == ["PerfInfo/CollectionStart"] + ["Image/DCStart"] * 6
    _, _interval_record, interval = records[0]
    kernel = [(v["ProcessId"], v["FileName"], v["ImageBase"], v["ImageSize"]) for _, _, v in records[1:3]]
    assert kernel == [(0, "[kernel.kallsyms]", 0xFFFFFFFF81000000, 0x1209988), (0, "[e1000]", 0xFFFFFFFFC0000000, 0x4000)]
    records = records[2:]
    assert (interval["SampleSource"], interval["NewInterval"], interval["OldInterval"], interval["SourceName"]) == (0, 10030, 10030, "Timer")
    _, record, libc = records[2]
    assert (libc["ImageBase"], libc["ImageSize"], libc["ProcessId"], libc["FileName"]) == (0x7F1000000000, 0x1BD000, 1, "/usr/lib/x86_64-linux-gnu/libc.so.6")
    assert (libc["ImageChecksum"], libc["TimeDateStamp"], libc["DefaultBase"]) == (0, 0, 0)
    assert (record.hook_id, record.version, record.timestamp, record.pid) == (0x1403, 3, 5_000, 1)
    assert set(perf.images) == {1}


def test_image_only_rundown_has_no_interval_nor_kernel_and_pids_limit_it():
    _, perf = setup(flags=("image",))
    records = decoded(perf.rundown(FakeMaps({1: MAPS, 2: MAPS}), 0, pids=[2]))
    assert [n for n, _, _ in records] == ["Image/DCStart"] * 4
    assert {v["ProcessId"] for _, _, v in records} == {2}


def test_image_load_fork_exec_and_exit():
    mapper, perf = setup()
    events = [
        ("perf_mmap2", 10, {"pid": 50, "tid": 51, "addr": 0x7F0000028000, "len": 0x195000, "pgoff": 0x28000, "prot": 5, "filename": "/usr/lib/libc.so.6"}),
        ("perf_mmap2", 11, {"pid": 50, "tid": 51, "addr": 0x7F0000028000, "len": 0x195000, "pgoff": 0x28000, "prot": 5, "filename": "/usr/lib/libc.so.6"}),
        ("perf_mmap2", 12, {"pid": 50, "tid": 51, "addr": 0x7F0000900000, "len": 0x1000, "pgoff": 0, "prot": 5, "filename": "//anon"}),
        ("perf_mmap2", 13, {"pid": 50, "tid": 51, "addr": 0x7F0000A00000, "len": 0x1000, "pgoff": 0, "prot": 3, "filename": "/data.bin"}),
        ("perf_fork", 14, {"pid": 50, "ppid": 50, "tid": 52, "ptid": 51}),  # a thread
        ("perf_fork", 15, {"pid": 60, "ppid": 50, "tid": 60, "ptid": 51}),  # a process
        ("perf_comm", 16, {"pid": 60, "tid": 60, "comm": "rename", "exec": False}),
        ("perf_comm", 17, {"pid": 60, "tid": 60, "comm": "true", "exec": True}),
        ("perf_mmap2", 18, {"pid": 60, "tid": 60, "addr": 0x401000, "len": 0x1000, "pgoff": 0x1000, "prot": 5, "filename": "/bin/true"}),
        ("perf_exit", 19, {"pid": 50, "ppid": 50, "tid": 52, "ptid": 52}),  # the thread
        ("perf_exit", 20, {"pid": 60, "ppid": 50, "tid": 60, "ptid": 50}),
    ]
    records = decoded(r for name, ts, v in events for r in mapper.map(name, ts, 1, v))
    summary = [(n, r.timestamp, v["ProcessId"], v["ImageBase"], v["ImageSize"], v["FileName"]) for n, r, v in records]
    assert summary == [
        ("Image/Load", 10, 50, 0x7F0000000000, 0x1BD000, "/usr/lib/libc.so.6"),
        ("Image/Load", 15, 60, 0x7F0000000000, 0x1BD000, "/usr/lib/libc.so.6"),
        ("Image/Unload", 17, 60, 0x7F0000000000, 0x1BD000, "/usr/lib/libc.so.6"),
        ("Image/Load", 18, 60, 0x400000, 0x2000, "/bin/true"),
        ("Image/Unload", 20, 60, 0x400000, 0x2000, "/bin/true"),
    ]
    first = records[0][1]
    assert (first.hook_id, first.version, first.pid, first.tid, first.cpu) == (0x140A, 3, 50, 51, 1)
    assert mapper.unmapped == 0
    assert set(perf.images) == {50}


def test_sample_becomes_sampled_profile_and_stack_walk():
    mapper, _ = setup()
    chain = (F.CONTEXT_KERNEL, 0xFFFFFFFF81000010, 0xFFFFFFFF81000020, F.CONTEXT_USER, 0x401234, 0x401500, 0x7F0000030000)
    records = decoded(mapper.map("perf_sample", 777, 1, {"ip": 0xFFFFFFFF81000010, "pid": 60, "tid": 61, "callchain": chain, "user": False}))
    assert [n for n, _, _ in records] == ["PerfInfo/Sample", "StackWalk/Stack"]
    (_, sample_record, sample), (_, stack_record, stack) = records
    assert (sample["InstructionPointer"], sample["ThreadId"], sample["Count"], sample["Reserved"]) == (0xFFFFFFFF81000010, 61, 1, 0)
    assert (sample_record.hook_id, sample_record.version, sample_record.timestamp, sample_record.cpu) == (0x0F2E, 2, 777, 1)
    assert (stack["EventTimeStamp"], stack["StackProcess"], stack["StackThread"]) == (777, 60, 61)
    assert list(stack["Stack"]) == [0xFFFFFFFF81000010, 0xFFFFFFFF81000020, 0x401234, 0x401500, 0x7F0000030000]
    assert (stack_record.hook_id, stack_record.version, stack_record.timestamp) == (0x1820, 2, 777)


def test_sample_without_callchain_has_no_stack_and_image_only_writes_no_samples():
    mapper, _ = setup()
    assert [n for n, _, _ in decoded(mapper.map("perf_sample", 1, 0, {"ip": 0x1000, "pid": 0, "tid": 0}))] == ["PerfInfo/Sample"]
    mapper, _ = setup(flags=("image",))
    assert mapper.map("perf_sample", 1, 0, {"ip": 0x1000, "pid": 0, "tid": 0, "callchain": (F.CONTEXT_USER, 0x1000)}) == []


def test_captured_ring_maps_to_records_that_decode():
    data, meta = R.captured_ring()
    mapper, _ = setup()
    names = collections.Counter()
    for record in F.parse_records(data, meta["tail"], meta["head"], meta["sample_type"]):
        raw = dict(record.values)
        for name, _, _ in decoded(mapper.map("perf_" + record.kind, record.time, record.cpu, raw)):
            names[name] += 1
    # 7 children: parent had no known images (no rundown), exec unloads nothing; each loads
    # dash, ld.so, vdso and libc and unloads them at exit.
    assert names == {"Image/Load": 28, "Image/Unload": 28, "PerfInfo/Sample": 26, "StackWalk/Stack": 26}


def test_unknown_perf_flag_is_refused():
    with pytest.raises(InvalidArgument, match="cswitch"):
        setup(flags=("image", "cswitch"))


def test_proc_source_maps_of_this_process():
    proc = ProcSource()
    entries = proc.maps(os.getpid())
    assert entries is not None
    assert any(e.executable and e.path == os.path.realpath(sys.executable) for e in entries)
    assert proc.maps(2**22 + 12345) is None
    assert os.getpid() in proc.pids()
