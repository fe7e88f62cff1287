"""Flame graph files: speedscope JSON, pprof (parsed with profile.proto through protobuf), folded."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from openetw.events.frames import Frame
from openetw.events.profile import StackSample
from openetw.export.flame import FLAME_FORMATS, write_flame, write_folded, write_pprof, write_speedscope


def sample(labels: list[str], pid: int = 10, tid: int = 11, addresses: list[int] | None = None) -> StackSample:
    """Frames given outermost first."""
    frames = []
    for index, label in enumerate(reversed(labels)):
        module, _, function = label.partition("!")
        address = addresses[::-1][index] if addresses else 0x1000 + 16 * len(label) + index
        frames.append(Frame(module, function or None, 0, address, "test"))
    return StackSample(pid, tid, f"app ({pid})", 133_000_000_000_000_000, "SampledProfile", tuple(frames))


SAMPLES = [
    sample(["app!main", "app!work", "lib!hot"]),
    sample(["app!main", "app!work", "lib!hot"]),
    sample(["app!main", "app!idle"], tid=12),
    sample(["app!main", "lib!cold"], pid=20, tid=21),
]


def test_speedscope_has_a_sampled_profile_per_thread_root_first() -> None:
    out = io.BytesIO()
    assert write_speedscope(SAMPLES, out) == 4
    document = json.loads(out.getvalue())
    assert document["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    names = [frame["name"] for frame in document["shared"]["frames"]]
    profiles = {profile["name"]: profile for profile in document["profiles"]}
    assert set(profiles) == {"app (10) thread 11", "app (10) thread 12", "app (20) thread 21"}
    busy = profiles["app (10) thread 11"]
    assert busy["type"] == "sampled" and busy["endValue"] == 2 and busy["weights"] == [1, 1]
    assert [names[index] for index in busy["samples"][0]] == ["app!main", "app!work", "lib!hot"]


def test_folded_lines_sum_to_the_sample_count() -> None:
    out = io.BytesIO()
    assert write_folded(SAMPLES, out) == 4
    lines = out.getvalue().decode().splitlines()
    assert lines[0] == "app (10);app!main;app!work;lib!hot 2"
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines) == len(SAMPLES)


PROFILE_PROTO = {
    # message → (field name, number, type, repeated, message type) from google/pprof's profile.proto
    "Profile": [
        ("sample_type", 1, "message", True, "ValueType"), ("sample", 2, "message", True, "Sample"),
        ("mapping", 3, "message", True, "Mapping"), ("location", 4, "message", True, "Location"),
        ("function", 5, "message", True, "Function"), ("string_table", 6, "string", True, None),
        ("drop_frames", 7, "int64", False, None), ("keep_frames", 8, "int64", False, None),
        ("time_nanos", 9, "int64", False, None), ("duration_nanos", 10, "int64", False, None),
        ("period_type", 11, "message", False, "ValueType"), ("period", 12, "int64", False, None),
        ("comment", 13, "int64", True, None), ("default_sample_type", 14, "int64", False, None),
    ],
    "ValueType": [("type", 1, "int64", False, None), ("unit", 2, "int64", False, None)],
    "Sample": [
        ("location_id", 1, "uint64", True, None), ("value", 2, "int64", True, None), ("label", 3, "message", True, "Label"),
    ],
    "Label": [("key", 1, "int64", False, None), ("str", 2, "int64", False, None), ("num", 3, "int64", False, None),
              ("num_unit", 4, "int64", False, None)],
    "Mapping": [
        ("id", 1, "uint64", False, None), ("memory_start", 2, "uint64", False, None), ("memory_limit", 3, "uint64", False, None),
        ("file_offset", 4, "uint64", False, None), ("filename", 5, "int64", False, None), ("build_id", 6, "int64", False, None),
        ("has_functions", 7, "bool", False, None), ("has_filenames", 8, "bool", False, None),
        ("has_line_numbers", 9, "bool", False, None), ("has_inline_frames", 10, "bool", False, None),
    ],
    "Location": [
        ("id", 1, "uint64", False, None), ("mapping_id", 2, "uint64", False, None), ("address", 3, "uint64", False, None),
        ("line", 4, "message", True, "Line"), ("is_folded", 5, "bool", False, None),
    ],
    "Line": [("function_id", 1, "uint64", False, None), ("line", 2, "int64", False, None)],
    "Function": [
        ("id", 1, "uint64", False, None), ("name", 2, "int64", False, None), ("system_name", 3, "int64", False, None),
        ("filename", 4, "int64", False, None), ("start_line", 5, "int64", False, None),
    ],
}  # fmt: skip


def parse_pprof(data: bytes):  # type: ignore[no-untyped-def]
    """The profile, decoded by protobuf from profile.proto's description (proto3: packed repeats)."""
    descriptor_pb2 = pytest.importorskip("google.protobuf.descriptor_pb2")
    descriptor_pool = pytest.importorskip("google.protobuf.descriptor_pool")
    message_factory = pytest.importorskip("google.protobuf.message_factory")
    types = descriptor_pb2.FieldDescriptorProto
    kinds = {"message": types.TYPE_MESSAGE, "string": types.TYPE_STRING, "int64": types.TYPE_INT64,
             "uint64": types.TYPE_UINT64, "bool": types.TYPE_BOOL}  # fmt: skip
    file = descriptor_pb2.FileDescriptorProto(name="profile_test.proto", package="perftools.profiles", syntax="proto3")
    for message, fields in PROFILE_PROTO.items():
        proto = file.message_type.add(name=message)
        for name, number, kind, repeated, type_name in fields:
            field = proto.field.add(name=name, number=number, type=kinds[kind],
                                    label=types.LABEL_REPEATED if repeated else types.LABEL_OPTIONAL)  # fmt: skip
            if type_name:
                field.type_name = f".perftools.profiles.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))
    profile = cls()
    profile.ParseFromString(gzip.decompress(data))
    return profile


def pprof_stacks(profile) -> dict[tuple[str, ...], int]:  # type: ignore[no-untyped-def]
    strings = list(profile.string_table)
    functions = {function.id: strings[function.name] for function in profile.function}
    locations = {location.id: functions[location.line[0].function_id] for location in profile.location}
    stacks: dict[tuple[str, ...], int] = {}
    for entry in profile.sample:
        key = tuple(locations[location] for location in entry.location_id)
        stacks[key] = stacks.get(key, 0) + entry.value[0]
    return stacks


def test_pprof_parses_with_profile_proto() -> None:
    out = io.BytesIO()
    assert write_pprof(SAMPLES, out) == 4
    profile = parse_pprof(out.getvalue())
    strings = list(profile.string_table)
    assert strings[0] == "" and strings[profile.sample_type[0].type] == "samples" and strings[profile.sample_type[0].unit] == "count"
    stacks = pprof_stacks(profile)
    assert stacks[("lib!hot", "app!work", "app!main")] == 2  # innermost first, as pprof wants
    assert sum(stacks.values()) == 4
    labels = {strings[label.key]: (strings[label.str] if label.str else label.num) for label in profile.sample[3].label}
    assert labels == {"process": "app (20)", "thread": 21, "pid": 20}
    assert {strings[mapping.filename] for mapping in profile.mapping} == {"app", "lib"}


def test_every_format_is_reachable_by_name() -> None:
    from openetw.cli.export_commands import FLAME_FORMATS as CLI_FORMATS

    assert CLI_FORMATS == FLAME_FORMATS
    for fmt in FLAME_FORMATS:
        assert write_flame(fmt, SAMPLES, io.BytesIO()) == 4
