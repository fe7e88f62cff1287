"""DecodeContext: process/thread/image names learned from kernel events, in-trace manifests and metadata."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.etl import EtlReader
from openetw.etl.build import build_classic_record, build_event_record, build_perfinfo_record, build_system_record
from openetw.manifest.winmeta import InType, OutType
from openetw.tdh.context import DecodeContext, process_name_from_image
from openetw.tdh.decode import decode_properties
from openetw.tdh.event_info import map_from_event_map_info, schema_from_event_info
from openetw.tdh.registry import SchemaRegistry
from tests.conftest import corpus_path

PROCESS_START, PROCESS_END, PROCESS_DC_START, PROCESS_DC_END = 0x0301, 0x0302, 0x0303, 0x0304
THREAD_DC_START, THREAD_END = 0x0503, 0x0502
IMAGE_LOAD, IMAGE_UNLOAD = 0x030A, 0x1402
METADATA_CLASS = uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671")


def process_payload(pid: int, image: str, parent: int = 4, command_line: str = "") -> bytes:
    """Process V3 on x64: key, pid, parent, session, exit status, directory base, SID, name, command line."""
    head = struct.pack("<QIIIiQ", 0xFFFFFA8000000000 + pid, pid, parent, 1, 259, 0x1000)
    return head + struct.pack("<I", 0) + image.encode("ascii") + b"\0" + (command_line + "\0").encode("utf-16-le")


def thread_payload(pid: int, tid: int) -> bytes:
    """Thread V3 on x64: ids, four stacks, affinity, start, TEB, sub-process tag, priorities (no name)."""
    return struct.pack("<II7QI4B", pid, tid, 0, 0, 0, 0, 0xFF, 0x7FF000, 0x7FFE0000, 0, 8, 5, 2, 0)


def image_payload(pid: int, base: int, size: int, name: str) -> bytes:
    """Image V2 on x64: base, size, pid, checksum, time stamp, reserved, default base, reserved x4, name."""
    return struct.pack("<QQIIIIQ4I", base, size, pid, 0, 0, 0, base, 0, 0, 0, 0) + (name + "\0").encode("utf-16-le")


def process(hook: int, when: int, pid: int, image: str, *, header_pid: int = 0) -> object:
    return build_system_record(hook_id=hook, version=3, timestamp=when, pid=header_pid, user_data=process_payload(pid, image))


def fed(*records: object) -> DecodeContext:
    return DecodeContext(SchemaRegistry()).learn(records)


# -- process names ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("image", "name"),
    [("svchost.exe", "svchost"), ("C:\\Windows\\System32\\smss.exe", "smss"), ("Test.x64.exe", "Test.x64"), ("Idle", "Idle"), ("System", "System")],
)
def test_process_name_is_the_image_without_extension(image: str, name: str) -> None:
    assert process_name_from_image(image) == name


def test_rundown_names_a_process_for_the_whole_trace_before_it_too() -> None:
    context = fed(process(PROCESS_DC_START, 500, 0, "Idle"), process(PROCESS_DC_START, 501, 4, "System"))
    assert context.process_name(0, 10) == "Idle"
    assert context.process_name(4, 10) == "System"
    assert context.process_name(4, 10_000) == "System"
    assert context.process_name(8, 10) is None


def test_a_start_names_the_process_from_its_start_and_the_end_keeps_it_for_the_end_record() -> None:
    context = fed(process(PROCESS_START, 100, 3676, "Test.x64.exe"), process(PROCESS_END, 900, 3676, "Test.x64.exe"))
    assert context.process_name(3676, 99) is None
    assert context.process_name(3676, 100) == "Test.x64"
    assert context.process_name(3676, 900) == "Test.x64"  # the end record itself
    assert context.process_name(3676, 901) is None


def test_a_reused_pid_gets_the_name_of_the_process_alive_at_the_time() -> None:
    context = fed(
        process(PROCESS_DC_START, 10, 700, "first.exe"),
        process(PROCESS_END, 200, 700, "first.exe"),
        process(PROCESS_START, 300, 700, "second.exe"),
    )
    assert context.process_name(700, 150) == "first"
    assert context.process_name(700, 250) is None
    assert context.process_name(700, 400) == "second"


def test_a_rundown_end_names_a_process_that_started_before_the_trace() -> None:
    context = fed(process(PROCESS_DC_END, 5000, 1188, "svchost.exe"))
    assert context.process_name(1188, 1) == "svchost"


def test_defunct_names_nothing() -> None:
    defunct = build_perfinfo_record(hook_id=0x0327, version=4, timestamp=50, user_data=process_payload(616, "smss.exe"))
    assert fed(defunct).process_name(616, 50) is None


def test_streaming_observe_names_the_records_after_what_it_learned() -> None:
    context = DecodeContext(SchemaRegistry())
    start = process(PROCESS_START, 100, 42, "app.exe")
    event = build_event_record(provider_id=uuid.uuid4(), pid=42, timestamp=150)
    context.observe(start)
    context.observe(event)
    assert context.process_name_of(event) == "app"


# -- threads and images -------------------------------------------------------------------------------
def test_thread_rundown_gives_the_thread_its_process() -> None:
    context = fed(
        build_system_record(hook_id=THREAD_DC_START, version=3, timestamp=10, user_data=thread_payload(4, 44)),
        build_system_record(hook_id=THREAD_END, version=3, timestamp=900, user_data=thread_payload(4, 44)),
    )
    assert context.thread_process(44, 500) == 4
    assert context.thread_process(44, 901) is None
    assert context.thread_process(45, 500) is None


def test_images_are_found_by_address_while_they_are_loaded() -> None:
    context = fed(
        build_system_record(hook_id=IMAGE_LOAD, version=2, timestamp=100, user_data=image_payload(42, 0x10000, 0x2000, "C:\\app.dll")),
        build_system_record(hook_id=IMAGE_UNLOAD, version=2, timestamp=500, user_data=image_payload(42, 0x10000, 0x2000, "C:\\app.dll")),
    )
    found = context.image_at(42, 0x11234, 200)
    assert found is not None and found.file_name == "C:\\app.dll"
    assert context.image_at(42, 0x12000, 200) is None  # one past the end
    assert context.image_at(42, 0x11234, 600) is None  # unloaded


# -- what the trace carries ----------------------------------------------------------------------------
EVENT_SOURCE_MANIFEST = """<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
 <instrumentation><events>
  <provider name="Demo-Source" guid="{11111111-2222-3333-4444-555555555555}" symbol="Demo" resourceFileName="d" messageFileName="d">
   <tasks><task name="Work" value="1"/></tasks>
   <templates><template tid="WorkArgs"><data name="count" inType="win:Int32"/><data name="what" inType="win:UnicodeString"/></template></templates>
   <events><event value="1" version="0" task="Work" opcode="win:Start" level="win:Informational" template="WorkArgs"/></events>
  </provider>
 </events></instrumentation>
</instrumentationManifest>"""


def manifest_chunks(provider: uuid.UUID, xml: bytes, pieces: int) -> list[object]:
    size = -(-len(xml) // pieces)
    chunks = [xml[i : i + size] for i in range(0, len(xml), size)]
    return [
        build_event_record(
            provider_id=provider, id=0xFFFE, opcode=254, task=0xFFFE, timestamp=10 + n,
            user_data=struct.pack("<BBBBHH", 1, 1, 0, 0x5B, len(chunks), n) + chunk,
        )
        for n, chunk in enumerate(chunks)
    ]


@pytest.mark.parametrize("pieces", [1, 3])
def test_an_event_source_manifest_in_the_trace_decodes_its_events(pieces: int) -> None:
    provider = uuid.UUID("11111111-2222-3333-4444-555555555555")
    event = build_event_record(provider_id=provider, id=1, opcode=1, task=1, timestamp=100, user_data=struct.pack("<i", 7) + "hi\0".encode("utf-16-le"))
    context = DecodeContext(SchemaRegistry())
    assert context.schema_for(event) is None
    context.learn(manifest_chunks(provider, EVENT_SOURCE_MANIFEST.encode(), pieces))
    assert context.manifests_learned == 1
    schema = context.schema_for(event)
    assert schema is not None and schema.event_name == "Work/Start"
    assert dict(decode_properties(schema, event.user_data)) == {"count": 7, "what": "hi"}
    envelope = context.schema_for(manifest_chunks(provider, EVENT_SOURCE_MANIFEST.encode(), pieces)[0])
    assert envelope is not None and envelope.event_name == "ManifestData"


def test_a_damaged_manifest_in_the_trace_is_recorded_not_raised() -> None:
    provider = uuid.uuid4()
    context = DecodeContext(SchemaRegistry()).learn(manifest_chunks(provider, b"<instrumentationManifest><oops", 1))
    assert context.manifests_learned == 0
    assert len(context.manifest_errors) == 1


def _utf16z(text: str) -> bytes:
    return (text + "\0").encode("utf-16-le")


def event_info_blob(provider: uuid.UUID) -> bytes:
    """A TRACE_EVENT_INFO for event 7 v1: Count (u32), Name (string), Kind (u32, map "KindMap")."""
    strings: list[bytes] = []
    names_at: dict[str, int] = {}
    base = 112 + 3 * 24

    def place(text: str) -> int:
        if text not in names_at:
            names_at[text] = base + sum(len(s) for s in strings)
            strings.append(_utf16z(text))
        return names_at[text]

    provider_name, task, opcode = place("Demo-Provider"), place("Job"), place("win:Start")
    props = [
        ("Count", InType.UINT32, OutType.NULL, 0), ("Name", InType.UNICODESTRING, OutType.NULL, 0),
        ("Kind", InType.UINT32, OutType.NULL, place("KindMap")),
    ]
    offsets = [provider_name, 0, 0, 0, task, opcode, 0, 0, 0, 0, 0, 0]
    head = provider.bytes_le + bytes(16) + struct.pack("<HBBBBHQ", 7, 1, 0, 4, 1, 3, 0) + struct.pack("<I", 0)
    head += struct.pack("<12I", *offsets) + struct.pack("<III", 3, 3, 0)
    body = b"".join(struct.pack("<IIHHIHHI", 0, place(name), int(i), int(o), m, 1, 0, 0) for name, i, o, m in props)
    return head + body + b"".join(strings)


def event_map_blob() -> bytes:
    entries = [(1, "One"), (2, "Two")]
    name_offset = 16 + 8 * len(entries)
    texts = _utf16z("KindMap")
    table = b""
    for value, text in entries:
        table += struct.pack("<II", name_offset + len(texts), value)
        texts += _utf16z(text)
    return struct.pack("<IIII", name_offset, 1, len(entries), 0) + table + texts


def test_tdh_metadata_in_the_trace_describes_events_no_manifest_knows() -> None:
    provider = uuid.uuid4()
    schema = schema_from_event_info(event_info_blob(provider), {"KindMap": map_from_event_map_info(event_map_blob())})
    assert schema is not None
    assert (schema.provider_name, schema.event_name, schema.event_id, schema.version) == ("Demo-Provider", "Job/Start", 7, 1)
    assert [p.name for p in schema.properties] == ["Count", "Name", "Kind"]
    assert schema.maps["KindMap"].lookup(2) == "Two"

    context = DecodeContext(SchemaRegistry()).learn([
        build_classic_record(event_guid=METADATA_CLASS, type=32, user_data=event_info_blob(provider)),
        build_classic_record(event_guid=METADATA_CLASS, type=33, user_data=provider.bytes_le + event_map_blob()),
    ])
    event = build_event_record(provider_id=provider, id=7, version=1, opcode=1, task=3)
    found = context.schema_for(event)
    assert found is not None and found.event_name == "Job/Start" and context.is_carried(found)
    assert found.maps["KindMap"].lookup(1) == "One"


@pytest.mark.parametrize("cut", [0, 50, 111, 150, 183])
def test_tdh_metadata_cut_before_its_properties_end_describes_nothing(cut: int) -> None:
    assert schema_from_event_info(event_info_blob(uuid.uuid4())[:cut]) is None


def test_tdh_metadata_cut_in_its_strings_still_describes_the_layout() -> None:
    blob = event_info_blob(uuid.uuid4())
    schema = schema_from_event_info(blob[: 112 + 3 * 24 + 6])
    assert schema is not None and len(schema.properties) == 3


# -- a real trace --------------------------------------------------------------------------------------
def test_process_names_of_a_real_trace() -> None:
    path = corpus_path("etl", "perfview", "net.4.5.2.x64.etl")
    context = DecodeContext(SchemaRegistry())
    with EtlReader(path) as reader:
        context.learn(reader.records(time_order=True))
    names = {info.pid: info.name for info in context.processes}
    assert names[0] == "Idle" and names[4] == "System"
    assert names[3676] == "Test.x64" and names[3988] == "PerfView"
    test_app = context.process(3676)
    assert test_app is not None and test_app.start > 0 and test_app.end < 1 << 62  # started and ended in the trace
    assert context.carried_schemas == 61  # KernelTraceControl MetaData/EventInfo records
    assert context.manifests_learned == 3  # PerfView, TPL and FrameworkEventSource manifests


# -- hostile metadata ----------------------------------------------------------------------------------
_VALID_INFO = event_info_blob(uuid.UUID(int=7))


@given(st.binary(max_size=400))
@settings(max_examples=150, deadline=None)
def test_random_bytes_never_break_the_metadata_parsers(blob: bytes) -> None:
    schema = schema_from_event_info(blob)
    if schema is not None:
        decode_properties(schema, blob).decode_all()
    map_from_event_map_info(blob)


@given(st.lists(st.tuples(st.integers(0, len(_VALID_INFO) - 1), st.integers(0, 255)), min_size=1, max_size=8))
@settings(max_examples=150, deadline=None)
def test_mutated_metadata_gives_a_schema_or_nothing(mutations: list[tuple[int, int]]) -> None:
    blob = bytearray(_VALID_INFO)
    for offset, value in mutations:
        blob[offset] = value
    schema = schema_from_event_info(bytes(blob))
    if schema is not None:
        decode_properties(schema, bytes(range(64))).decode_all()


@given(st.binary(max_size=64), st.integers(0, 5), st.integers(0, 5))
@settings(max_examples=100, deadline=None)
def test_odd_manifest_chunks_are_ignored_or_recorded(payload: bytes, total: int, number: int) -> None:
    record = build_event_record(
        provider_id=uuid.UUID(int=9), id=0xFFFE, opcode=254, user_data=struct.pack("<BBBBHH", 1, 1, 0, 0x5B, total, number) + payload
    )
    context = DecodeContext(SchemaRegistry()).learn([record])
    assert context.manifests_learned == 0
