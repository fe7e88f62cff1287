"""``openetw probe`` over trace files: aggregations against plain computations, probes, NUMA."""

from __future__ import annotations

import os
import statistics
import struct
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from openetw.probe.lang.aggregate import llquantize_bucket, lquantize_bucket, quantize_bucket
from tests.conftest import corpus_path
from tests.probe.helpers import json_records, plain_events, run_probe

NUMA_PROVIDER = "d1d93ef7-e1f2-4f45-9943-03d245fe6c00"
OUR_PROVIDER = "5e0b3c1a-7f4d-4d6e-9a0b-1c2d3e4f5a6b"
COUNTERS = ("TotalPageCount", "SmallFreePageCount", "SmallZeroPageCount", "MediumFreePageCount", "MediumZeroPageCount",
            "LargeFreePageCount", "LargeZeroPageCount", "HugeFreePageCount", "HugeZeroPageCount")  # fmt: skip
NUMA_MANIFEST = f"""<?xml version="1.0" encoding="utf-8"?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"
    xmlns:win="http://manifests.microsoft.com/win/2004/08/windows/events" xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <instrumentation><events>
    <provider name="OpenEtw-Test-NumaMemory" guid="{{{OUR_PROVIDER}}}" symbol="NUMA" resourceFileName="n.dll" messageFileName="n.dll">
      <templates>
        <template tid="MemNodeInfo">
          <data name="PartitionId" inType="win:UInt32"/>
          <data name="Count" inType="win:UInt32"/>
          <struct name="Nodes" count="Count">
            <data name="NodeNumber" inType="win:UInt32"/>
            {"".join(f'<data name="{name}" inType="win:UInt64"/>' for name in COUNTERS)}
          </struct>
        </template>
      </templates>
      <events><event value="12" symbol="MemNodeInfo" level="win:Informational" template="MemNodeInfo"/></events>
    </provider>
  </events></instrumentation>
</instrumentationManifest>
"""


@pytest.fixture(scope="module")
def process_etl() -> Path:
    return corpus_path("etl", "tx", "Process.etl")


@pytest.fixture(scope="module")
def events(process_etl: Path) -> list[dict[str, Any]]:
    return plain_events(process_etl)


def _map(records: list[dict[str, Any]], kind: str, name: str) -> Any:
    for record in records:
        if record["type"] == kind and name in record["data"]:
            return record["data"][name]
    raise AssertionError(f"no {kind} record for {name}: {records}")


def test_every_aggregation_equals_a_plain_computation(capsys: Any, process_etl: Path, events: list[dict[str, Any]]) -> None:
    program = """
    etw:::generic_event {
        @c[probemod] = count(); @s[probemod, probename] = sum(pid); @mn[cpu] = min(tid); @mx[cpu] = max(tid);
        @a[probemod] = avg(tid); @d[probemod] = stddev(tid); @q = quantize(tid); @l = lquantize(cpu, 0, 8, 2);
        @ll = llquantize(tid, 10, 1, 3, 10);
    }"""
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-f", "json", "-n", program)
    assert status == 0
    records = json_records(out)
    by_guid: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_guid[e["guid"]].append(e)
    assert _map(records, "map", "@c") == {g: len(v) for g, v in by_guid.items()}
    sums: Counter[str] = Counter()
    for e in events:
        sums[f"{e['guid']},generic_event"] += e["pid"]
    assert _map(records, "map", "@s") == dict(sums)
    by_cpu: dict[int, list[int]] = defaultdict(list)
    for e in events:
        by_cpu[e["cpu"]].append(e["tid"])
    assert _map(records, "map", "@mn") == {str(c): min(v) for c, v in by_cpu.items()}
    assert _map(records, "map", "@mx") == {str(c): max(v) for c, v in by_cpu.items()}
    stats = _map(records, "stats", "@a")
    for guid, group in by_guid.items():
        tids = [e["tid"] for e in group]
        assert stats[guid] == {"count": len(tids), "average": sum(tids) // len(tids), "total": sum(tids)}
        assert _map(records, "stats", "@d")[guid]["stddev"] == int(statistics.pstdev(tids))
    quantized = Counter(quantize_bucket(e["tid"]) for e in events)
    assert {b["min"]: b["count"] for b in _map(records, "hist", "@q")} == {k if k >= 0 else 2 * k + 1: v for k, v in quantized.items()}
    linear = Counter(lquantize_bucket(e["cpu"], 0, 8, 2) for e in events)
    assert [(b.get("min"), b["count"]) for b in _map(records, "hist", "@l")] == [
        (None if k < 0 else k, v) for k, v in sorted(linear.items())]  # fmt: skip
    loglinear = Counter(llquantize_bucket(e["tid"], 10, 1, 3, 10) for e in events)
    assert sum(b["count"] for b in _map(records, "hist", "@ll")) == sum(loglinear.values())
    assert len(_map(records, "hist", "@ll")) == len(loglinear)


def test_printa_forms_and_text_output(capsys: Any, process_etl: Path, events: list[dict[str, Any]]) -> None:
    program = """#pragma D option quiet
    #pragma D option aggsortkey
    etw:::generic_event { @n[probemod] = count(); @t[probemod] = sum(tid); }
    END { printa("%s %@d %@d\\n", @n, @t); trunc(@n, 1); printa(@n); normalize(@t, 2); printa("%-36s|%@8d\\n", @t); }"""
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-n", program)
    assert status == 0
    counts = Counter(e["guid"] for e in events)
    tids: Counter[str] = Counter()
    for e in events:
        tids[e["guid"]] += e["tid"]
    lines = out.splitlines()
    expected = [f"{g} {counts[g]} {tids[g]}" for g in sorted(counts)]
    assert lines[: len(expected)] == expected
    top = max(counts, key=lambda g: (counts[g], g))
    assert f"  {top}  {counts[top]:>8}" in out
    assert all(f"{g:<36}|{tids[g] // 2:>8}" in out for g in counts)


def test_probe_descriptions_filter_as_a_plain_filter(capsys: Any, process_etl: Path, events: list[dict[str, Any]]) -> None:
    guid, level = events[0]["guid"], max(e["level"] for e in events)
    keyword = next((e["keyword"] for e in events if e["keyword"]), 1)
    description = f"etw:{guid}:0x{level:02x}_0x{keyword:016x}:"
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-f", "json", "-n", f"{description} {{ @[probename] = count(); }}")
    assert status == 0
    expected: Counter[str] = Counter(
        str(e["id"]) for e in events
        if e["guid"] == guid and (not e["level"] or e["level"] <= level) and (not e["keyword"] or e["keyword"] & keyword)
    )  # fmt: skip
    assert expected and _map(json_records(out), "map", "@") == dict(expected)
    first_id = events[0]["id"]
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-f", "json", "-n",
                               f"etw:{guid[:8]}*::{first_id} {{ @ = count(); }} etw:::? {{ @one = count(); }}")  # fmt: skip
    records = json_records(out)
    assert _map(records, "map", "@") == sum(1 for e in events if e["guid"] == guid and e["id"] == first_id)
    assert _map(records, "map", "@one") == sum(1 for e in events if e["id"] < 10)


def test_list_names_providers_events_and_fields(capsys: Any) -> None:
    path = corpus_path("etl", "etl-parser", "lxcore_kernel.etl")
    status, out, _ = run_probe(capsys, "--file", str(path), "-l", "-f", "json")
    assert status == 0
    rows = json_records(out)
    assert rows and rows[0]["provider_name"] == "Microsoft.Windows.Subsystem.LxCore"
    assert rows[0]["event_name"] == "BreakPoint" and "Message:string" in rows[0]["fields"]
    status, out, _ = run_probe(capsys, "--file", str(path), "-l", "etw:nothing::")
    assert status == 0 and "LxCore" not in out
    status, out, _ = run_probe(capsys, "--file", str(path), "-q", "-n",
                               'etw:Microsoft.Windows.Subsystem.*::BreakPoint { printf("%s:%d %s", args->Function, args->Line, args->Message); }')  # fmt: skip
    assert status == 0 and "LxpInstanceStart:2659 [0xc0000034] LxpInstanceInitialize\n" in out
    status, _, err = run_probe(capsys, "--file", str(path), "-n", "etw:::BreakPoint { @ = sum(args->Nope); }")
    assert status == 2 and "has no field 'Nope'" in err


def test_exit_codes_begin_end_and_runtime_errors(capsys: Any, process_etl: Path) -> None:
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-q", "-n",
                               'BEGIN { printf("begin\\n"); } etw::: { n++; } etw::: /n == 5/ { exit(7); } END { printf("end %d\\n", n); }')  # fmt: skip
    assert status == 7 and out == "begin\nend 5\n"
    status, _, err = run_probe(capsys, "--file", str(process_etl), "-q", "-n", "etw::: { x = 1 / (pid - pid); }")
    assert status == 1 and "division by zero" in err and "line 1" in err and "runtime errors" in err
    status, _, err = run_probe(capsys, "--file", str(process_etl), "-q", "-n", "BEGIN { x = 1; }\netw:::? { @ = sum(x / (pid - pid)); }")
    assert status == 1 and "(line 2): division by zero" in err
    status, _, err = run_probe(capsys, "--file", str(process_etl), "-n", "etw::: { x = ; }")
    assert status == 2 and "<-n>:1:14: expected an expression" in err
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "-q", "-n", "tick-1s { @ = count(); } END { printa(\"%@d\\n\", @); }")
    assert status == 0 and int(out.strip()) >= 1


def test_the_seeds_numa_script_runs_with_only_its_provider_changed(capsys: Any, tmp_path: Path) -> None:
    from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
    from openetw.testing import EventRecordBuilder

    seeds = corpus_path().parent / "seeds"  # the seeds sit beside the corpus
    matches = sorted(seeds.glob("002_*.txt")) if seeds.exists() else []
    if not matches:
        if os.environ.get("CI") == "true":
            pytest.fail(f"seed 002 missing under CI: {seeds}")
        pytest.skip(f"seed 002 not beside the checkout: {seeds}")
    text = matches[0].read_text(encoding="utf-8")
    script = "typedef" + text.split("```dtrace\ntypedef", 1)[1].split("```", 1)[0]
    ours = OUR_PROVIDER
    script = script.replace(NUMA_PROVIDER, ours)
    manifest = tmp_path / "numa.man"
    manifest.write_text(NUMA_MANIFEST, encoding="utf-8")
    (tmp_path / "numa.d").write_text(script, encoding="utf-8")
    nodes = [(1, [0xAB98D, 0, 0x1BEC, 0, 0x5A, 0, 0, 0, 0]), (2, [7, 6, 5, 4, 3, 2, 1, 0, 9])]
    payload = struct.pack("<II", 0, len(nodes)) + b"".join(struct.pack("<I9Q", n, *c) for n, c in nodes)
    record = EventRecordBuilder(ours, 12, level=4, pid=8, tid=9, timestamp=10_000).pack(payload)
    path = tmp_path / "numa.etl"
    with EtlWriter(path, header=new_logfile_header(clock=linux_trace_clock(), buffer_size=4096, number_of_processors=1)) as writer:
        writer.write(record)
    status, out, _ = run_probe(capsys, "--file", str(path), "-s", str(tmp_path / "numa.d"))
    assert status == 1  # the script ends with exit(1)
    assert "Partition ID: 0 \nCount: 2 \nNode number: 1\nm_nodeinfo {\n    uint64_t TotalPageCount = 0xab98d\n" in out
    assert "    uint64_t SmallZeroPageCount = 0x1bec\n" in out
    assert "Node Number: 2 \nm_nodeinfo {\n    uint64_t TotalPageCount = 0x7\n" in out
    assert "    uint64_t HugeZeroPageCount = 0x9\n}" in out
    assert "0xff_0xffffffffffffffff:12" in out
    header = (
        "etw::: { h = (struct nt`_EVENT_HEADER *)arg0; "
        'printf("%d %d %d %d", h->EventDescriptor.Id, h->ProcessId, h->Size, sizeof(struct nt`_EVENT_HEADER)); }'
    )
    status, out, _ = run_probe(capsys, "--file", str(path), "-q", "-n", header)
    assert out == f"12 8 {80 + len(payload)} 80"
    status, out, _ = run_probe(capsys, "--file", str(path), "--manifest", str(manifest), "-l", "-f", "json")
    (row,) = json_records(out)
    assert (row["provider_name"], row["event_name"], row["name"]) == ("OpenEtw-Test-NumaMemory", "MemNodeInfo", "12")
    assert row["fields"] == ["PartitionId:uint32_t", "Count:uint32_t"]  # the node array is not a scalar field
    status, out, _ = run_probe(capsys, "--file", str(path), "--manifest", str(manifest), "-q", "-n",
                               "typedef struct { struct nt`_EVENT_HEADER _EH; uint32_t PartitionId; uint32_t Count; } kmi;"
                               ' etw:OpenEtw-Test-NumaMemory::MemNodeInfo { printf("%d/%d", args->Count, ((kmi *)arg0)->Count); }')  # fmt: skip
    assert (status, out) == (0, "2/2")


def test_several_files_merge_in_time_order(capsys: Any, process_etl: Path, events: list[dict[str, Any]]) -> None:
    other = corpus_path("etl", "etl-parser", "lxcore_kernel.etl")
    program = "etw::: { @[probemod] = count(); } etw::: /pid == 0/ { @z = count(); }"
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "--file", str(other), "-f", "json", "-n", program)
    assert status == 0
    expected = Counter(e["guid"] for e in events + plain_events(other))
    assert _map(json_records(out), "map", "@") == dict(expected)
    status, out, _ = run_probe(capsys, "--file", str(process_etl), "--file", str(other), "-q", "-n",
                               'etw::: { printf("%d\\n", walltimestamp); }')  # fmt: skip
    times = [int(line) for line in out.split()]
    assert len(times) == len(expected and events) + len(plain_events(other)) and times == sorted(times)


def test_no_index_writes_nothing_and_gives_the_same_output(capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, process_etl: Path) -> None:
    trace = tmp_path / "trace" / "Process.etl"
    trace.parent.mkdir()
    trace.write_bytes(process_etl.read_bytes())
    cache = tmp_path / "cache"
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(cache))
    program = "etw:::generic_event { @[probemod, probename] = count(); @s[probemod] = sum(arg0 ? 1 : 0); }"
    counted = "etw:::generic_event { @[probemod] = count(); }"  # header columns only: the indexed path counts by columns

    def written() -> list[str]:
        return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())

    streamed = [run_probe(capsys, "--no-index", "--file", str(trace), "-q", "-f", "json", "-n", text) for text in (program, counted)]
    assert [status for status, _, _ in streamed] == [0, 0]
    assert written() == ["trace/Process.etl"]
    for list_args in (["-l"], ["-l", "-n", "etw:::"]):
        status, listed, _ = run_probe(capsys, "--no-index", "--file", str(trace), *list_args)
        assert status == 0 and listed.strip()
    assert written() == ["trace/Process.etl"]
    indexed = [run_probe(capsys, "--file", str(trace), "-q", "-f", "json", "-n", text) for text in (program, counted)]
    assert [json_records(out) for _, out, _ in streamed] == [json_records(out) for _, out, _ in indexed]
    assert json_records(streamed[1][1])
    assert written() != ["trace/Process.etl"]  # the same runs with the index keep one


def test_arg0_is_the_event_record_header_windows_lays_out() -> None:
    from types import SimpleNamespace

    from openetw.probe.run.runner import event_header_bytes

    provider, activity = bytes(range(16)), bytes(range(16, 32))
    record = SimpleNamespace(kind="event", user_data=b"\x01\x02\x03", kernel_time=7, user_time=9, flags=0x1,
                             event_property=0x2, tid=11, pid=12, filetime=13, provider_guid_bytes=provider, id=14,
                             version=15, channel=16, level=17, opcode=18, task=19, keyword=20,
                             activity_guid_bytes=activity)  # fmt: skip
    data = event_header_bytes(record)
    # EVENT_RECORD.EventHeader as a consumer sees it: 80 bytes, HeaderType a reserved 0, then the user data
    assert struct.unpack_from("<HHHHIIq", data) == (83, 0, 0x41, 2, 11, 12, 13)
    assert data[24:40] == provider and data[64:80] == activity
    assert struct.unpack_from("<HBBBBHQII", data, 40) == (14, 15, 16, 17, 18, 19, 20, 7, 9)
    assert data[80:] == b"\x01\x02\x03"
