"""Stacks of a real Windows trace: PerfView's net.4.5.2.x64.etl (kernel StackWalk with compressed
stacks, image rundown, the .NET runtime's method events)."""

from __future__ import annotations

import struct
from collections import Counter
from functools import cache

from openetw.etl.reader import EtlReader
from openetw.events.profile import Profile, load_profile
from openetw.events.stacks import collect_stacks
from openetw.report.stacks import by_name
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path

_SAMPLE_HOOK, _STACKWALK_GROUP = 0x0F2E, 0x18
_CLR_PROVIDERS = {"Microsoft-Windows-DotNETRuntime", "Microsoft-Windows-DotNETRuntimeRundown"}

# The busiest managed frames of the test program, as PerfView shows them (module!Namespace.Method).
EXPECTED_MANAGED = [
    "Test.x64!Test.Program.Main",
    "mscorlib!System.DateTime.get_Now",
    "mscorlib!System.TimeZoneInfo.GetDateTimeNowUtcOffsetFromUtc",
    "mscorlib!System.TimeZoneInfo.GetIsDaylightSavingsFromUtc",
    "mscorlib!System.TimeZoneInfo.TransitionTimeToDateTime",
    "mscorlib!System.DateTime.GetDatePart",
]


def _path() -> str:
    return str(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))


@cache
def _profile() -> Profile:
    with EtlReader(_path()) as reader:
        return load_profile(reader.records(time_order=True), registry=SchemaRegistry())


def test_every_sample_with_a_stackwalk_has_frames() -> None:
    """The samples a StackWalk record names (by thread and timestamp, full or compressed)."""
    samples: set[tuple[int, int]] = set()
    stacked: set[tuple[int, int]] = set()
    with EtlReader(_path()) as reader:
        for record in reader.records(time_order=True):
            if record.kind != "perfinfo":
                continue
            if record.hook_id == _SAMPLE_HOOK:
                samples.add((struct.unpack_from("<I", record.user_data, 8)[0], record.timestamp))
            elif record.hook_id >> 8 == _STACKWALK_GROUP and record.opcode in (32, 37, 38):
                when, _pid, tid = struct.unpack_from("<qII", record.user_data)
                stacked.add((tid, when))
    expected = samples & stacked
    with EtlReader(_path()) as reader:
        joined, collector = collect_stacks(reader.records(time_order=True))
    got = {(entry.tid, entry.timestamp) for entry in joined if entry.event == "SampledProfile"}
    assert len(expected) > 6000
    assert got == expected
    assert all(entry.addresses for entry in joined)
    assert collector.stats.unresolved_keys == 0 and collector.stats.unmatched_stacks == 0
    profile = _profile()
    assert len(profile.samples) == collector.stats.samples_with_stacks >= len(expected)
    assert all(sample.frames for sample in profile.samples)


def test_the_share_of_frames_named_by_the_image_rundown_is_reported() -> None:
    naming = _profile().naming
    report = naming.as_json()
    assert report["frames"] == naming.frames > 5000
    assert 0.85 < report["image_share"] <= 1.0  # measured: 92.1%
    assert naming.by_source["image"] + naming.by_source["managed"] + naming.by_source["unknown"] == naming.frames


def test_managed_frames_are_named_from_the_method_events_of_the_same_file() -> None:
    registry = SchemaRegistry()
    methods: set[str] = set()
    with EtlReader(_path()) as reader:
        for record in reader.records(time_order=True):
            if record.kind != "event" or record.id not in (143, 144):
                continue
            schema = registry.schema_for(record)
            if schema is None or schema.provider_name not in _CLR_PROVIDERS:
                continue
            values = dict(decode_properties(schema, record.user_data, record.pointer_size))
            methods.add(f"{values['MethodNamespace']}.{values['MethodName']}")
    rows = by_name(_profile().samples)
    managed = [row for row in rows if row.name.split("!", 1)[-1] in methods]
    busiest = [row.name for row in sorted(managed, key=lambda row: -row.inclusive)[: len(EXPECTED_MANAGED)]]
    assert busiest == EXPECTED_MANAGED
    assert all(name.split("!", 1)[1] in methods for name in EXPECTED_MANAGED)
    assert _profile().naming.by_source["managed"] > 500


def test_events_other_than_samples_have_their_stacks_too() -> None:
    events = Counter(_profile().events)
    assert events["SampledProfile"] > 6000
    assert events["DiskIO/ReadInit"] > 1000 and events["Microsoft-Windows-Kernel-File/Create"] > 500
