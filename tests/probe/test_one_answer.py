"""Every aggregation gives one value whatever the path that computes it: column-wise or record by
record, indexed or streamed (``--no-index``), compiled or pure reading. D's rule, decided once:
a field is a value of its declared type, and an aggregation keeps 64 bits, wrapped, unsigned only
for 64-bit unsigned types (``uint64_t``, pointers)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.probe.lang.aggregate import wrap64
from openetw.testing import EventRecordBuilder
from tests.probe.helpers import json_records, run_probe

PROVIDER = "0b9d7a51-1c2e-4f3a-9d8e-6f5a4b3c2d1e"
# in-type -> (manifest type, size, signed, struct code); one event id each
TYPES = {
    "win:Int8": (1, True, "b"), "win:UInt8": (1, False, "B"), "win:Int16": (2, True, "h"), "win:UInt16": (2, False, "H"),
    "win:Int32": (4, True, "i"), "win:UInt32": (4, False, "I"), "win:Int64": (8, True, "q"), "win:UInt64": (8, False, "Q"),
    "win:Pointer": (8, False, "Q"), "win:HexInt64": (8, False, "Q"),
}  # fmt: skip
EVENT_IDS = {name: n + 1 for n, name in enumerate(TYPES)}
MANIFEST = """<?xml version='1.0' encoding='utf-8' standalone='yes'?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"
    xmlns:win="http://manifests.microsoft.com/win/2004/08/windows/events" xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <instrumentation><events>
    <provider name="Test-One-Answer" guid="{{{}}}" symbol="TestOneAnswer" resourceFileName="t.dll" messageFileName="t.dll">
      <templates>{}</templates>
      <events>{}</events>
    </provider>
  </events></instrumentation>
</instrumentationManifest>
""".format(
    PROVIDER,
    "".join(f'<template tid="t{n}"><data name="F" inType="{name}"/></template>' for name, n in EVENT_IDS.items()),
    "".join(f'<event value="{n}" symbol="E{n}" level="win:Informational" template="t{n}"/>' for n in EVENT_IDS.values()),
)
PROGRAM = "etw:Test-One-Answer::%d { @s[tid] = sum(args->F); @lo[tid] = min(args->F); @hi = max(args->F); @n[tid] = count(); }"
# avg has no column-wise path: it is checked record by record and streamed
AVG = "etw:Test-One-Answer::%d { @mean = avg(args->F); }"


def _values(in_type: str) -> st.SearchStrategy[int]:
    size, signed, _ = TYPES[in_type]
    low, high = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if signed else (0, (1 << (8 * size)) - 1)
    return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, high // 2 + 1]))


@st.composite
def traces(draw: Any) -> tuple[str, list[int]]:
    in_type = draw(st.sampled_from(sorted(TYPES)))
    return in_type, draw(st.lists(_values(in_type), min_size=1, max_size=12))


def _write(directory: Path, in_type: str, values: list[int]) -> tuple[Path, Path]:
    path, manifest = directory / "t.etl", directory / "t.man"
    manifest.write_text(MANIFEST)
    clock = linux_trace_clock()
    code = "<" + TYPES[in_type][2]
    with EtlWriter(path, header=new_logfile_header(clock=clock, buffer_size=4096, number_of_processors=2)) as writer:
        for n, value in enumerate(values):
            builder = EventRecordBuilder(PROVIDER, EVENT_IDS[in_type], level=4, keyword=0, pid=7, tid=100 + n % 2, cpu=n % 2,
                                         timestamp=clock.reference_timestamp + n * 1000)  # fmt: skip
            writer.write(builder.pack(struct.pack(code, value)))
    return path, manifest


def _expected(in_type: str, values: list[int]) -> dict[str, Any]:
    size, signed, _ = TYPES[in_type]
    unsigned = size == 8 and not signed
    by_tid: dict[int, list[int]] = {}
    for n, value in enumerate(values):
        by_tid.setdefault(100 + n % 2, []).append(value)
    return {
        "@s": {str(tid): wrap64(sum(v), unsigned) for tid, v in by_tid.items()},
        "@lo": {str(tid): min(v) for tid, v in by_tid.items()},
        "@hi": max(values),
        "@n": {str(tid): len(v) for tid, v in by_tid.items()},
    }  # fmt: skip


def _answer(path: Path, manifest: Path, in_type: str, *, index: bool, columnar: bool, text: str = PROGRAM) -> dict[str, Any]:
    """The program's JSON maps over ``path`` through one path (asserting that it was taken)."""
    from openetw.probe.lang.descriptions import parse_description
    from openetw.probe.lang.program import compile_script
    from openetw.probe.run.adapter import Catalog, TraceFiles, schema_registry
    from openetw.probe.run.runner import ProbeRun

    files = TraceFiles([path], manifests=schema_registry([str(manifest)]), index=index)
    catalog = Catalog.scan(files)

    def fields_of(specs: list[str]) -> Any:
        found = [f for identity, f, _ in catalog.items() if f and any(parse_description(s).match(identity) for s in specs)]
        return found[0] if found else None

    out: list[str] = []
    program = compile_script(text % EVENT_IDS[in_type], fields_of=fields_of)
    run = ProbeRun(program, files, write=out.append, json_mode=True, quiet=True, columnar=columnar, catalog=catalog)
    assert run.run() == 0
    assert run.ran_columnar == (index and columnar and text is PROGRAM)
    records = json_records("".join(out))
    return {name: value for r in records if r["type"] in ("map", "stats") for name, value in r["data"].items()}


PATHS = {"column-wise": (True, True), "record by record": (True, False), "streamed (--no-index)": (False, False)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_each_aggregation_has_one_value_through_every_path(trace: tuple[str, list[int]], tmp_path_factory: pytest.TempPathFactory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    in_type, values = trace
    path, manifest = _write(tmp_path_factory.mktemp("one"), in_type, values)
    expected = _expected(in_type, values)
    for engine in ("native", "pure"):
        with monkeypatch.context() as patch:
            if engine == "pure":
                patch.setenv("OPENETW_PURE", "1")
            else:
                patch.delenv("OPENETW_PURE", raising=False)
            for name, (index, columnar) in PATHS.items():
                got = _answer(path, manifest, in_type, index=index, columnar=columnar)
                assert got == expected, (engine, name, in_type, values, json.dumps(got))
                if not columnar:
                    got = _answer(path, manifest, in_type, index=index, columnar=False, text=AVG)
                    total = wrap64(sum(values), TYPES[in_type][0] == 8 and not TYPES[in_type][1])
                    assert got == {"@mean": {"count": len(values), "average": total // len(values), "total": total}}, (engine, name, in_type, values)


def test_the_command_gives_the_same_sum_of_pointers_with_and_without_the_index(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    values = [0xFFFFF80012340000, 0xFFFFF80056780000, 0x7FF600000000, 0xFFFFF800ABCD0000]
    path, manifest = _write(tmp_path, "win:Pointer", values)
    program = PROGRAM % EVENT_IDS["win:Pointer"]
    answers = []
    for extra in ((), ("--no-index",)):
        status, out, err = run_probe(capsys, "--file", str(path), "--manifest", str(manifest), "-q", "-f", "json", *extra, "-n", program)
        assert status == 0, err
        answers.append([r for r in json_records(out) if r["type"] in ("map", "stats")])
    assert answers[0] == answers[1]
    assert {"type": "map", "data": {"@hi": 0xFFFFF800ABCD0000}} in answers[0]
    assert {"type": "map", "data": {"@s": {"100": (values[0] + values[2]) % (1 << 64), "101": (values[1] + values[3]) % (1 << 64)}}} in answers[0]
