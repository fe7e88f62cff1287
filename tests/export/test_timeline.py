"""Traces as timelines: Perfetto and Chrome exports re-read by independent readers and checked."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.etl.reader import EtlReader
from openetw.events.profile import load_profile
from openetw.export.timeline import export_timeline
from openetw.export.trace_check import check_chrome, check_file, check_perfetto
from openetw.report.stacks import by_name
from tests.conftest import corpus_path
from tests.export.conftest import registry
from tests.export.timeline_traces import activity_trace, kernel_sched_trace

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

NET = ("perfview", "net.4.5.2.x64.etl")
KERNEL = ("etl-parser", "ShutdownPerfDiagLogger.etl")
EPOCH_TICKS = 116_444_736_000_000_000
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3


def _records(path: Path) -> list:
    with EtlReader(str(path), strict=False) as reader:
        return list(reader.records(time_order=True))


def plain_pairs(path: Path, counted: Counter | None = None) -> list[tuple[int, int]]:
    """Start/Stop pairs, plainly: same provider, task, process and activity id (the thread
    without one); a second Start of a key replaces the first. (begin, end) in ns since 1970.
    ``counted`` gets the number of records per (kind, hook id)."""
    opened: dict[tuple, int] = {}
    pairs = []
    with EtlReader(str(path), strict=False) as reader:
        records = list(reader.records(time_order=True)) if counted is None else reader.records(time_order=True)
        for record in records:
            if counted is not None:
                counted[(record.kind, record.hook_id)] += 1
            if record.kind != "event" or record.opcode not in (1, 2):
                continue
            activity = record.activity_guid_bytes
            key = (record.provider_guid_bytes, record.task, record.pid, activity if activity != bytes(16) else ("tid", record.tid))
            ns = (record.filetime - EPOCH_TICKS) * 100
            if record.opcode == 1:
                opened[key] = ns
            elif key in opened:
                pairs.append((opened.pop(key), ns))
    return sorted(pairs)


def _parse(path: Path):  # type: ignore[no-untyped-def]
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


def _proto_slices(trace, unpaired: list | None = None) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    stacks: dict[int, list[int]] = {}
    slices = []
    arg_names: dict[int, str] = {}
    for packet in trace.packet:
        if packet.sequence_flags & 1:
            arg_names.clear()
        arg_names.update((entry.iid, entry.name) for entry in packet.interned_data.debug_annotation_names)
        if packet.HasField("track_event"):
            event = packet.track_event
            if event.type == SLICE_BEGIN:
                stacks.setdefault(event.track_uuid, []).append(packet.timestamp)
            elif event.type == SLICE_END:
                began = stacks[event.track_uuid].pop()
                if not any(arg_names.get(arg.name_iid) == "unpaired" for arg in event.debug_annotations):
                    slices.append((began, packet.timestamp))
                elif unpaired is not None:  # a long Start whose Stop never came (ended where the trace did)
                    unpaired.append(began)
    return sorted(slices)


@pytest.fixture(scope="module")
def net_facts() -> tuple[list[tuple[int, int]], Counter]:
    """The net trace's plain Start/Stop pairs and its records per (kind, hook id), in one pass."""
    counted: Counter = Counter()
    return plain_pairs(corpus_path("etl", *NET), counted), counted


@pytest.fixture(scope="module")
def net_perfetto(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("timeline") / "net.perfetto-trace"
    summary = export_timeline([str(corpus_path("etl", *NET))], str(out), "perfetto", registry=registry())
    return out, summary


def test_net_trace_to_perfetto_reparses_checks_and_pairs_as_plain_python(net_perfetto, net_facts) -> None:  # type: ignore[no-untyped-def]
    out, summary = net_perfetto
    expected, counted = net_facts
    trace = _parse(out)
    assert len(trace.packet) == summary.written
    kinds = Counter(packet.WhichOneof("data") for packet in trace.packet)
    samples = counted[("perfinfo", 0x0F2E)]
    assert kinds["perf_sample"] == samples == summary.stats.samples
    unpaired: list[int] = []
    assert expected and _proto_slices(trace, unpaired) == expected
    result = check_perfetto(str(out))
    assert result.ok, result.errors
    assert result.counts["slices"] == len(expected) + len(unpaired) and result.counts["perf_samples"] == samples
    # the processes are named from the trace's rundown
    names = {packet.track_descriptor.process.process_name for packet in trace.packet
             if packet.HasField("track_descriptor") and packet.track_descriptor.HasField("process")}  # fmt: skip
    assert any(name.lower().startswith("perfview") for name in names) or len(names) > 10
    # samples whose stack came carry it (compressed StackKey stacks resolved), outermost frame first
    deep = [p for p in trace.packet if p.HasField("interned_data") and any(len(c.frame_ids) > 1 for c in p.interned_data.callstacks)]
    assert deep and summary.stats.samples_with_stacks == 6318 and summary.stats.unresolved_keys == 0
    # frames named (function_names), in mappings with paths and build ids (the images' PDB identities)
    names, frames, mappings, build_ids = set(), [], [], set()
    for packet in trace.packet:
        interned = packet.interned_data
        names.update(entry.str.decode() for entry in interned.function_names)
        frames.extend(interned.frames)
        mappings.extend(interned.mappings)
        build_ids.update(entry.str.decode() for entry in interned.build_ids)
    assert "mscorlib!System.DateTime.get_Now" in names and any(name.startswith("ntoskrnl!+0x") for name in names)
    assert frames and all(frame.function_name_id and frame.mapping_id for frame in frames)
    assert any(frame.rel_pc for frame in frames) and all(mapping.path_string_ids for mapping in mappings)
    assert any(mapping.build_id for mapping in mappings) and all(len(build_id) == 33 for build_id in build_ids)
    # counters: disk bytes only grow
    counter_values = [p.track_event.counter_value for p in trace.packet if p.HasField("track_event") and p.track_event.type == 4]
    assert counter_values


def test_kernel_scheduling_as_perfetto_etw_events(tmp_path: Path) -> None:
    source = kernel_sched_trace(tmp_path / "sched.etl")
    out = tmp_path / "sched.perfetto-trace"
    summary = export_timeline([str(source)], str(out), "perfetto")
    records = _records(source)
    switches: dict[int, list[tuple[int, int]]] = {}
    ready = 0
    for record in records:
        if record.hook_id == 0x0524:
            new, old = struct.unpack_from("<II", record.user_data)
            switches.setdefault(record.cpu, []).append((new, old))
        ready += record.hook_id == 0x0532
    exported: dict[int, list[tuple[int, int]]] = {}
    woken = 0
    for packet in _parse(out).packet:
        if packet.HasField("etw_events"):
            for event in packet.etw_events.event:
                if event.HasField("c_switch"):
                    exported.setdefault(packet.etw_events.cpu, []).append((event.c_switch.new_thread_id, event.c_switch.old_thread_id))
                woken += event.HasField("ready_thread")
    assert exported == switches and len(switches) == 3
    assert woken == ready == summary.stats.wakeups > 0
    result = check_file(str(out))
    assert result.ok, result.errors
    assert result.counts["cswitch_per_cpu"] == {str(cpu): len(items) for cpu, items in sorted(switches.items())}
    assert result.counts["perf_samples"] == summary.stats.samples


def test_a_corpus_kernel_trace_to_perfetto(tmp_path: Path) -> None:
    source = corpus_path("etl", *KERNEL)
    out = tmp_path / "kernel.perfetto-trace"
    summary = export_timeline([str(source)], str(out), "perfetto")
    trace = _parse(out)
    switches = sum(1 for record in _records(source) if record.hook_id == 0x0524)
    exported = sum(len(p.etw_events.event) for p in trace.packet if p.HasField("etw_events"))
    assert exported == switches == summary.stats.switches
    result = check_perfetto(str(out))
    assert result.ok, result.errors
    threads = [p.track_descriptor.thread for p in trace.packet if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")]
    assert len(threads) > 100 and all(thread.pid >= 0 for thread in threads)


def test_activities_become_flows_and_cross_thread_pairs_async(tmp_path: Path) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    out = tmp_path / "requests.perfetto-trace"
    summary = export_timeline([str(source)], str(out), "perfetto")
    trace = _parse(out)
    assert _proto_slices(trace) == plain_pairs(source)
    assert summary.stats.slices == 60 and summary.stats.lost_stops == 1
    flows_out = [flow for p in trace.packet if p.HasField("track_event") for flow in p.track_event.flow_ids]
    flows_in = [flow for p in trace.packet if p.HasField("track_event") for flow in p.track_event.terminating_flow_ids]
    assert len(flows_out) == 40 and sorted(flows_out) == sorted(flows_in)
    async_tracks = [p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")
                    and not p.track_descriptor.HasField("thread") and not p.track_descriptor.HasField("process")]  # fmt: skip
    # the four Render operations that ended on another thread: async, one after the other on one reused track
    assert len(async_tracks) == 1 and async_tracks[0].name == "Render"
    on_async = [p for p in trace.packet if p.HasField("track_event") and p.track_event.track_uuid == async_tracks[0].uuid]
    assert [p.track_event.type for p in on_async] == [SLICE_BEGIN, SLICE_END] * 4
    assert check_perfetto(str(out)).ok
    chrome = tmp_path / "requests.json"
    export_timeline([str(source)], str(chrome), "chrome")
    document = json.loads(chrome.read_text())
    phases = Counter(event["ph"] for event in document["traceEvents"])
    assert phases["X"] == 56 and phases["b"] == phases["e"] == 4 and phases["s"] == phases["f"] == 40
    assert check_chrome(str(chrome)).ok


def test_net_trace_to_chrome_json(tmp_path: Path, net_facts) -> None:  # type: ignore[no-untyped-def]
    source = corpus_path("etl", *NET)
    out = tmp_path / "net.json"
    summary = export_timeline([str(source)], str(out), "chrome", registry=registry())
    document = json.loads(out.read_text())
    events = document["traceEvents"]
    assert len(events) == summary.written
    slices = [event for event in events if event["ph"] in ("X", "b")]
    unpaired = [event for event in events if event["ph"] == "e" and event.get("args", {}).get("unpaired")]
    assert len(slices) - len(unpaired) == len(net_facts[0])
    assert {event["name"] for event in events if event["ph"] == "M"} == {"process_name", "thread_name"}
    assert any(event["ph"] == "P" and "sf" in event for event in events) and document["stackFrames"]
    result = check_chrome(str(out))
    assert result.ok, result.errors
    # the samples' frames are those openetw stacks shows: every SampledProfile with a stack has
    # them all, on its thread, and the busiest .NET methods of By Name are among stackFrames
    profile = load_profile(_records(source), registry=registry())
    frames = document["stackFrames"]

    def names(node: int | None) -> tuple[str, ...]:
        out = []
        while node is not None:
            out.append(frames[str(node)]["name"])
            node = frames[str(node)].get("parent")
        return tuple(out)  # innermost first

    exported = Counter((event["tid"], names(event.get("sf"))) for event in events if event["ph"] == "P")
    wanted = Counter((sample.tid, tuple(frame.label for frame in sample.frames)) for sample in profile.samples)
    assert len(profile.samples) == summary.stats.samples_with_stacks == 6318
    assert not wanted - exported
    managed = {frame.label for sample in profile.samples for frame in sample.frames if frame.source == "managed"}
    busiest = sorted((row for row in by_name(profile.samples) if row.name in managed), key=lambda row: -row.inclusive)[:20]
    exported_names = {frame["name"] for frame in frames.values()}
    assert len(busiest) == 20 and {row.name for row in busiest} <= exported_names
    assert "mscorlib!System.DateTime.get_Now" in {row.name for row in busiest}


def test_checker_finds_what_is_wrong(tmp_path: Path) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    good = tmp_path / "good.perfetto-trace"
    export_timeline([str(source)], str(good), "perfetto")
    trace = _parse(good)
    # a packet's interned data lost: the names it defined are used undefined
    broken = pb.Trace()
    broken.CopyFrom(trace)
    first = next(p for p in broken.packet if p.HasField("interned_data") and p.interned_data.event_names)
    first.ClearField("interned_data")
    (tmp_path / "a").write_bytes(broken.SerializeToString())
    assert any("not interned" in error for error in check_perfetto(str(tmp_path / "a")).errors)
    # a slice end lost: its slice never ends; time going back on a sequence
    broken.CopyFrom(trace)
    ends = [p for p in broken.packet if p.HasField("track_event") and p.track_event.type == SLICE_END]
    ends[3].track_event.type = INSTANT
    ends[5].timestamp = 1
    (tmp_path / "b").write_bytes(broken.SerializeToString())
    errors = check_perfetto(str(tmp_path / "b")).errors
    assert any("never ended" in error for error in errors) and any("before" in error for error in errors)
    # a flow that never arrives
    broken.CopyFrom(trace)
    arriving = next(p for p in broken.packet if p.HasField("track_event") and p.track_event.terminating_flow_ids)
    arriving.track_event.ClearField("terminating_flow_ids")
    (tmp_path / "c").write_bytes(broken.SerializeToString())
    assert any("flow" in error for error in check_perfetto(str(tmp_path / "c")).errors)
    (tmp_path / "d").write_bytes(b"\x0a\x05\x40")
    assert not check_file(str(tmp_path / "d")).ok
    chrome = {"traceEvents": [
        {"ph": "X", "name": "a", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 5, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 2},
        {"ph": "s", "id": 7, "ts": 1, "pid": 1, "tid": 1},
        {"ph": "C", "name": "c", "ts": 1, "pid": 1, "args": {"value": "x"}},
    ]}  # fmt: skip
    (tmp_path / "e.json").write_text(json.dumps(chrome))
    result = check_file(str(tmp_path / "e.json"))
    assert result.format == "chrome" and result.problems == 4, result.errors


def test_cli_export_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    out = tmp_path / "requests.perfetto-trace"
    assert main(["export", str(source), "--to", "perfetto", "-o", str(out), "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "perfetto" and summary["timeline"]["slices"] == 60 and summary["bytes"] == out.stat().st_size
    assert main(["export", "--check", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    (tmp_path / "bad.json").write_text('{"traceEvents": [{"ph": "E", "ts": 1, "pid": 1, "tid": 1}]}')
    assert main(["export", "--check", str(tmp_path / "bad.json")]) == 1
    assert "problem" in capsys.readouterr().out
    assert main(["export", str(source), "--to", "otlp"]) == 2
    assert "--endpoint" in capsys.readouterr().err
    # --symbols reaches the timelines: a directory that is not there is refused before reading
    assert main(["export", str(source), "--to", "chrome", "-o", str(tmp_path / "t.json"), "--symbols", str(tmp_path / "none")]) == 2
    assert "--symbols" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    assert main(["export", str(source), "--to", "chrome", "-o", str(tmp_path / "t.json"), "--symbols", str(tmp_path), "-q"]) == 0
    assert check_file(str(tmp_path / "t.json")).ok
