"""ELF frames are named only from the file that ran: the build id the trace recorded decides."""

from __future__ import annotations

from pathlib import Path

from openetw.events.frames import FrameNamer
from openetw.events.trace_state import TraceState
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_perf import install_perf_handlers
from openetw.kernel.procfs import ProcSource
from openetw.symbols.elf import build_id_of_head, read_elf
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.events.kernel_records import build_id_record, image_load
from tests.symbols.test_elf_and_text import compiled

BASE = 0x5555_0000_0000


def _function_address(binary: Path, name: str) -> int:
    elf = read_elf(binary.read_bytes())
    vaddr = elf.symbols.addresses[elf.symbols.names.index(name)]
    offset = next(off + vaddr - start for off, start, size in elf.segments if start <= vaddr < start + size)
    return BASE + offset  # as openetw records bases: mapping start − file offset


def test_the_build_id_is_read_from_the_start_of_the_file(tmp_path: Path) -> None:
    binary = compiled(tmp_path)
    expected = read_elf(binary.read_bytes()).build_id
    assert expected is not None
    assert build_id_of_head(binary.read_bytes()[: 1 << 16]) == expected == ProcSource.build_id(str(binary))
    assert build_id_of_head(b"not an elf file at all" * 4) is None and ProcSource.build_id(str(tmp_path)) is None


def test_image_events_are_followed_by_their_build_id(tmp_path: Path) -> None:
    binary = compiled(tmp_path)
    perf = install_perf_handlers(KernelEventMapper({"process"}), ("image",), build_ids=ProcSource.build_id)
    records = perf.on_mmap2(10, 0, {"filename": str(binary), "pid": 40, "tid": 40, "addr": BASE + 0x1000, "pgoff": 0x1000, "len": 0x2000})
    registry = SchemaRegistry()
    names = [registry.schema_for(record).event_name for record in records]  # type: ignore[union-attr]
    assert names == ["Image/Load", "ImageBuildId/BuildId"]
    schema = registry.schema_for(records[1])
    assert schema is not None
    values = dict(decode_properties(schema, records[1].user_data, 8))
    assert values == {"ImageBase": BASE, "ProcessId": 40, "BuildId": bytes.fromhex(read_elf(binary.read_bytes()).build_id or "")}
    assert install_perf_handlers(KernelEventMapper({"process"}), ("image",)).on_mmap2(
        10, 0, {"filename": str(binary), "pid": 41, "tid": 41, "addr": BASE + 0x1000, "pgoff": 0x1000, "len": 0x2000}
    )[-1].kind == "system"  # no reader given: no build id record


def test_frames_of_another_build_are_not_named(tmp_path: Path) -> None:
    binary = compiled(tmp_path)
    build_id = read_elf(binary.read_bytes()).build_id
    assert build_id is not None
    address = _function_address(binary, "second_function") + 2
    image = image_load(10, 40, BASE, 0x10000, str(binary))
    same = FrameNamer(TraceState().learn([image, build_id_record(10, 40, BASE, build_id)]))
    assert same.name(40, address).label == "program!second_function"
    other = "00" * 20
    namer = FrameNamer(TraceState().learn([image, build_id_record(10, 40, BASE, other)]))
    frame = namer.name(40, address)
    assert frame.function is None and frame.label.startswith("program!+0x")
    assert namer.stats.symbol_errors == [f"{binary}: build id {build_id} is not the traced {other}"]
