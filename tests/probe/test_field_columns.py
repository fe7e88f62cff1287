"""Event fields read column-wise through the compiled core's field columns give what record by
record gives: fields after strings, payloads the core leaves to the Python decoder, payloads that
do not hold the field (the run then goes record by record), and both engines of the reader."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.testing import EventRecordBuilder
from tests.conftest import corpus_path

PROVIDER = "5d0c8a2e-7b31-4c6f-a9e4-3f2b1d0c9e8a"
MANIFEST = f"""<?xml version='1.0' encoding='utf-8' standalone='yes'?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"
    xmlns:win="http://manifests.microsoft.com/win/2004/08/windows/events" xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <instrumentation><events>
    <provider name="Test-Field-Columns" guid="{{{PROVIDER}}}" symbol="TestFieldColumns" resourceFileName="t.dll" messageFileName="t.dll">
      <templates>
        <template tid="t1"><data name="Name" inType="win:UnicodeString"/><data name="Tag" inType="win:AnsiString"/>
          <data name="Size" inType="win:UInt32"/><data name="Delta" inType="win:Int16"/><data name="Base" inType="win:Pointer"/></template>
        <template tid="t2"><data name="Size" inType="win:UInt32"/><data name="Count" inType="win:Int64"/></template>
      </templates>
      <events>
        <event value="1" symbol="E1" level="win:Informational" template="t1"/>
        <event value="2" symbol="E2" level="win:Informational" template="t2"/>
      </events>
    </provider>
  </events></instrumentation>
</instrumentationManifest>
"""
NAMES = ["", "a", "héllo wörld", "\U0001f600 x", "long " * 20]
PROGRAM = ("etw:Test-Field-Columns::1 /args->Size != 3 && args->Delta > -100/"
           " { @s[tid] = sum(args->Size); @b = max(args->Base); @k[args->Delta] = count(); @q = quantize(args->Delta); }"
           " etw:Test-Field-Columns::1, etw:Test-Field-Columns::2 { @a[probename] = avg(args->Size); @n[cpu] = min(args->Size); }"
           " etw:Test-Field-Columns::2 /args->Count < 0 || args->Size > 5/ { @c[args->Size] = sum(args->Count); }")  # fmt: skip


def _utf16z(text: str) -> bytes:
    return text.encode("utf-16-le", "surrogatepass") + b"\0\0"


def _payloads(count: int, *, short: bool) -> list[tuple[int, bytes]]:
    """(event id, payload): event 1 with strings of every kind before its fields (a lone
    surrogate and non-ASCII ANSI text among them: the Python decoder's rows), event 2 fixed."""
    out = []
    for n in range(count):
        name = _utf16z(NAMES[n % len(NAMES)]) if n % 7 else "x\ud800y".encode("utf-16-le", "surrogatepass") + b"\0\0"
        tag = (b"caf\xe9" if n % 5 == 0 else b"tag%d" % n) + b"\0"
        fields = struct.pack("<IhQ", n * 37 % 11, (n * 13) % 300 - 150, (n * 0x9E3779B97F4A7C15) & (1 << 64) - 1)
        out.append((1, name + tag + fields))
        out.append((2, struct.pack("<Iq", n % 9, (n - count // 2) * 1_000_000_007)))
    if short:
        out.insert(len(out) // 2, (1, _utf16z("cut") + b"t\0" + b"\1\0"))  # Size cut short: not in this payload
    return out


def _write(directory: Path, *, short: bool = False, count: int = 60) -> tuple[Path, Path]:
    path, manifest = directory / "fields.etl", directory / "fields.man"
    manifest.write_text(MANIFEST)
    clock = linux_trace_clock()
    with EtlWriter(path, header=new_logfile_header(clock=clock, buffer_size=4096, number_of_processors=2)) as writer:
        for n, (event_id, payload) in enumerate(_payloads(count, short=short)):
            builder = EventRecordBuilder(PROVIDER, event_id, level=4, keyword=0, pid=7, tid=100 + n % 3, cpu=n % 2,
                                         timestamp=clock.reference_timestamp + n * 1000)  # fmt: skip
            writer.write(builder.pack(payload))
    return path, manifest


def _answer(path: Path, manifests: Any, text: str, *, columnar: bool, before_run: Any = None) -> tuple[dict[str, Any], int, int, bool]:
    from openetw.probe.lang.descriptions import parse_description
    from openetw.probe.lang.program import compile_script
    from openetw.probe.lang.schema_types import merge_fields
    from openetw.probe.run.adapter import Catalog, TraceFiles
    from openetw.probe.run.runner import ProbeRun

    files = TraceFiles([path], manifests=manifests)
    catalog = Catalog.scan(files)

    def fields_of(specs: list[str]) -> Any:
        merged = None
        for identity, fields, _ in catalog.items():
            if fields and any(parse_description(s).match(identity) for s in specs):
                merged = dict(fields) if merged is None else merge_fields(merged, fields)
        return merged

    run = ProbeRun(compile_script(text, fields_of=fields_of), files, write=lambda s: None, quiet=True, columnar=columnar,
                   catalog=catalog, warn=lambda s: None)  # fmt: skip
    if before_run is not None:
        before_run()
    run.run()
    answer = {name: dict(entry[1]) for name, entry in run.output.aggregations.items()}
    return answer, run.firings, run.runtime_errors, run.ran_columnar


def _registry(manifest: Path) -> Any:
    from openetw.probe.run.adapter import schema_registry

    return schema_registry([str(manifest)])


def test_fields_after_strings_are_read_column_wise_with_the_values_record_by_record_gives(tmp_path: Path) -> None:
    path, manifest = _write(tmp_path)
    by_columns = _answer(path, _registry(manifest), PROGRAM, columnar=True)
    by_records = _answer(path, _registry(manifest), PROGRAM, columnar=False)
    assert by_columns[3] and not by_records[3]
    assert by_columns[:3] == by_records[:3]
    assert by_columns[0]["s"] and by_columns[0]["c"] and by_columns[2] == 0


def test_fields_are_read_through_only_the_index_columns_they_need(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.consumer._engine.blocks import StoredIndex
    from openetw.consumer.index_trust import HEADER_COLUMNS, PLACE_CHECKED

    path, manifest = _write(tmp_path)
    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "37")
    expected = _answer(path, _registry(manifest), PROGRAM, columnar=False)
    asked: set[str] = set()
    columns = StoredIndex.columns

    def spy(self: Any, number: int, names: Any) -> Any:
        asked.update(names)
        return columns(self, number, names)

    def watch() -> None:  # (the catalog, made before, reads whole blocks)
        monkeypatch.setattr(StoredIndex, "columns", spy)
        monkeypatch.setattr(StoredIndex, "block", lambda self, number: pytest.fail("a whole block read"))

    got = _answer(path, _registry(manifest), PROGRAM, columnar=True, before_run=watch)
    assert got[3] and got[:3] == expected[:3]
    needed = {"provider", "id", "opcode", "level", "keyword", "kind", "version", "tid", "cpu", *PLACE_CHECKED}  # @s[tid], @n[cpu]
    assert asked == needed
    assert HEADER_COLUMNS - asked >= {"timestamp", "pid", "task", "channel", "flags", "hook_id"}  # never inflated


def test_a_payload_without_the_field_sends_the_run_record_by_record(tmp_path: Path) -> None:
    path, manifest = _write(tmp_path, short=True)
    text = "BEGIN { @s[0] = sum(5); } " + PROGRAM
    by_columns = _answer(path, _registry(manifest), text, columnar=True)
    by_records = _answer(path, _registry(manifest), text, columnar=False)
    assert not by_columns[3]  # tried column-wise, then record by record from where BEGIN left the aggregations
    assert by_columns[:3] == by_records[:3]
    assert by_records[2] == 2 and by_records[0]["s"][0] == 5


def test_the_reader_gives_one_answer_with_and_without_the_compiled_core(tmp_path: Path) -> None:
    from openetw.events.registry import build_registry
    from openetw.probe.run.fields import ColumnsUnreadable, field_reader
    from openetw.tdh.compiled import CompiledSchema

    _, manifest = _write(tmp_path, count=1)
    registry = build_registry([str(manifest)], installed=False)
    registry.load_everything()
    schemas = {schema.event_id: schema for schema in registry.schemas() if str(schema.provider_id) == PROVIDER}
    payloads = _payloads(40, short=False)
    for event_id, name, expected in ((1, "Size", "<u4"), (1, "Delta", "<i2"), (1, "Base", "<u8"), (2, "Size", "<u4"), (2, "Count", "<i8")):
        reader = field_reader(schemas[event_id], 8, name)
        assert reader is not None and reader.dtype == np.dtype(expected)
        assert (reader.offset is None) == (event_id == 1)  # after strings: no fixed place
        assert reader.pointer_dependent == (name == "Base")
        mine = [p for e, p in payloads if e == event_id]
        blob = b"".join(mine)
        starts = np.cumsum([0] + [len(p) for p in mine[:-1]])
        lengths = np.array([len(p) for p in mine])
        core, pure = reader.read(blob, starts, lengths), reader.read(blob, starts, lengths, pure=True)
        assert core.tolist() == pure.tolist()
        decode = CompiledSchema(schemas[event_id], 8)
        assert core.tolist() == [decode(p)[0][name] for p in mine]
        with pytest.raises(ColumnsUnreadable):
            reader.read(blob, starts[:1], np.array([2]), pure=True)
        with pytest.raises(ColumnsUnreadable):
            reader.read(blob, starts[:1], np.array([2]))
    assert field_reader(schemas[1], 8, "Name") is None and field_reader(schemas[1], 8, "Nope") is None


def test_a_corpus_field_after_a_string_is_read_column_wise() -> None:
    """.NET's GCAllocationTick (version 4): HeapIndex comes after the TypeName string."""
    path = corpus_path("etl", "perfview", "gcevents.etl")
    text = ("etw:Microsoft-Windows-DotNETRuntime::10 /args->HeapIndex < 64/"
            " { @c[args->HeapIndex] = count(); @s[probename] = sum(args->AllocationAmount); @m = max(args->HeapIndex); }")  # fmt: skip
    by_columns = _answer(path, [], text, columnar=True)
    by_records = _answer(path, [], text, columnar=False)
    assert by_columns[3]
    assert by_columns[:3] == by_records[:3] and by_columns[0]["c"] and by_columns[1] == 12


@pytest.mark.parametrize("strsize", [None, 6])
def test_string_keys_are_read_column_wise_with_the_text_record_by_record_gives(tmp_path: Path, strsize: int | None) -> None:
    """Text of every kind (non-ASCII, a lone surrogate: the Python decoder's rows), cut to
    ``strsize`` as the compiled clause cuts it (texts that differ past it are one key)."""
    path, manifest = _write(tmp_path)
    text = ("etw:Test-Field-Columns::1 /args->Size != 3/ { @n[args->Name] = count(); @t[args->Tag, tid] = sum(args->Size);"
            " @m[args->Name, args->Delta] = max(args->Base); }")  # fmt: skip
    if strsize is not None:
        text = f"#pragma D option strsize={strsize}\n" + text
    by_columns = _answer(path, _registry(manifest), text, columnar=True)
    by_records = _answer(path, _registry(manifest), text, columnar=False)
    assert by_columns[3] and not by_records[3]
    assert by_columns[:3] == by_records[:3]
    names = set(by_columns[0]["n"])
    assert len(names) >= 5 and (strsize is None or max(len(n) for n in names) == strsize - 1)


def test_a_corpus_string_key_is_read_column_wise() -> None:
    path = corpus_path("etl", "perfview", "gcevents.etl")
    text = "etw:Microsoft-Windows-DotNETRuntime::10 { @c[args->TypeName] = count(); @s[args->TypeName, args->HeapIndex] = sum(args->AllocationAmount); }"
    by_columns = _answer(path, [], text, columnar=True)
    by_records = _answer(path, [], text, columnar=False)
    assert by_columns[3]
    assert by_columns[:3] == by_records[:3] and len(by_columns[0]["c"]) > 1


def test_payloads_outside_the_bytes_are_unreadable_not_a_crash() -> None:
    from openetw.probe.run.fields import ColumnsUnreadable, FieldReader

    reader = FieldReader(None, 8, "F", bytes([1, 4]), np.dtype("<u4"), 4, 0)
    assert reader.read(b"\1\0\0\0\2\0\0\0", np.array([0, 4]), np.array([4, 4])).tolist() == [1, 2]
    for starts, lengths in (([6], [4]), ([-1], [4]), ([0], [-4])):
        for pure in (False, True):
            with pytest.raises(ColumnsUnreadable):
                reader.read(b"\1\0\0\0\2\0\0\0", np.array(starts), np.array(lengths), pure=pure)
