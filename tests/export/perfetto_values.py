"""A Perfetto trace as values: each sequence's timestamped packets in order, interned names
resolved, and the track descriptors as a multiset (they carry no time). Two files with equal
values read the same in Perfetto, however their sequences' packets interleave."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def perfetto_values(path: Path) -> tuple[dict[int, list[Any]], Counter]:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    sequences: dict[int, list[Any]] = {}
    descriptors: Counter = Counter()
    tables: dict[int, dict[str, dict[int, Any]]] = {}
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            descriptors[packet.track_descriptor.SerializeToString(deterministic=True)] += 1
            continue
        sequence = packet.trusted_packet_sequence_id
        interned = tables.setdefault(sequence, {})
        if packet.sequence_flags & 1:
            interned.clear()
        data = packet.interned_data
        for field, entries in data.ListFields():
            table = interned.setdefault(field.name, {})
            for entry in entries:
                table[entry.iid] = entry

        def named(table: str, iid: int, interned: dict[str, dict[int, Any]] = interned) -> Any:
            entry = interned.get(table, {}).get(iid)
            return None if entry is None else entry.name
        if packet.HasField("track_event"):
            event = packet.track_event
            args = []
            for annotation in event.debug_annotations:
                which = annotation.WhichOneof("value")
                args.append((named("debug_annotation_names", annotation.name_iid), which, getattr(annotation, which) if which else None))
            value = (
                packet.timestamp, event.type, event.track_uuid, tuple(named("event_categories", c) for c in event.category_iids),
                named("event_names", event.name_iid) if event.name_iid else None, tuple(args),
                event.counter_value if event.HasField("counter_value") else None,
                event.double_counter_value if event.HasField("double_counter_value") else None,
                tuple(event.flow_ids), tuple(event.terminating_flow_ids),
            )  # fmt: skip
        elif packet.HasField("perf_sample"):
            sample = packet.perf_sample
            stack = interned.get("callstacks", {}).get(sample.callstack_iid)
            frames = []
            for frame_id in stack.frame_ids if stack is not None else ():
                frame = interned["frames"][frame_id]
                mapping = interned["mappings"][frame.mapping_id]
                path = interned["mapping_paths"][mapping.path_string_ids[0]].str if mapping.path_string_ids else None
                build = interned["build_ids"][mapping.build_id].str if mapping.build_id else None
                frames.append((interned["function_names"][frame.function_name_id].str, path, build, mapping.start, frame.rel_pc))
            value = (packet.timestamp, sample.cpu, sample.pid, sample.tid, tuple(frames))
        else:
            copy = pb.TracePacket()
            copy.CopyFrom(packet)
            copy.ClearField("sequence_flags")
            copy.ClearField("first_packet_on_sequence")
            value = copy.SerializeToString(deterministic=True)
        sequences.setdefault(sequence, []).append(value)
    return sequences, descriptors
