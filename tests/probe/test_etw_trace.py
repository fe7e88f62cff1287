"""``etw_trace(...)``: every ``etw_*`` type written through a session and decoded back, and
nothing written when no session listens."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from openetw.controller import Session
from openetw.probe.lang.errors import ProbeCompileError
from openetw.probe.lang.etw_types import ETW_TYPES
from openetw.probe.lang.program import compile_script
from openetw.tdh import schema_from_record
from tests.conftest import corpus_path
from tests.service.harness import ServiceProcess, decoded, read_events

NAME = "Probe.Test.Types"
GUID = "1fe9a6a1-5e6a-5d27-d5d6-2ff2b2cd5b26"  # not the name's hash: written as given, with a warning

# (etw type, field name, D value, decoded value)
FIELDS = [
    ("etw_string", "S", '"wide text"', "wide text"),
    ("etw_mbcsstring", "M", '"ansi text"', "ansi text"),
    ("etw_int8", "I8", "(int8_t)-8", -8),
    ("etw_uint8", "U8", "(uint8_t)200", 200),
    ("etw_int16", "I16", "(int16_t)-1600", -1600),
    ("etw_uint16", "U16", "(uint16_t)60000", 60000),
    ("etw_int32", "I32", "-70000", -70000),
    ("etw_uint32", "U32", "(uint32_t)4000000000", 4000000000),
    ("etw_int64", "I64", "(int64_t)-5000000000", -5000000000),
    ("etw_uint64", "U64", "(uint64_t)0xfffffffffffffff0", 0xFFFFFFFFFFFFFFF0),
    ("etw_float", "F", "3", 3.0),
    ("etw_double", "D", "7", 7.0),
    ("etw_bool32", "B32", "1", True),
    ("etw_hexint32", "H32", "0xdeadbeef", 0xDEADBEEF),
    ("etw_hexint64", "H64", "(int64_t)0x123456789a", 0x123456789A),
    ("etw_countedmbcsstring", "CM", '"counted"', "counted"),
    ("etw_intptr", "IP", "(int64_t)-12", -12),
    ("etw_uintptr", "UP", "(uint64_t)12", 12),
    ("etw_pointer", "P", "(uint64_t)0x7ffe0000", 0x7FFE0000),
    ("etw_char16", "C16", "(uint16_t)65", 65),
    ("etw_char8", "C8", "(uint8_t)66", 66),
    ("etw_bool8", "B8", "(uint8_t)1", True),
    ("etw_hexint8", "H8", "(uint8_t)0x7f", 0x7F),
    ("etw_hexint16", "H16", "(uint16_t)0xbeef", 0xBEEF),
    ("etw_pid", "Pid", "4321", 4321),
    ("etw_tid", "Tid", "8765", 8765),
    ("etw_mbcsxml", "X", '"<a>1</a>"', "<a>1</a>"),
    ("etw_mbcsjson", "J", '"{\\"k\\": 1}"', '{"k": 1}'),
    ("etw_countedmbcsxml", "CX", '"<b/>"', "<b/>"),
    ("etw_countedmbcsjson", "CJ", '"[1]"', "[1]"),
    ("etw_win32error", "W32", "5", 5),
    ("etw_ntstatus", "NT", "(int32_t)0xc0000001", -1073741823),
    ("etw_hresult", "HR", "(int32_t)0x80004005", -2147467259),
]


def program(fields: list[tuple[str, str, str, object]]) -> str:
    triples = "".join(f', "{kind}", "{name}", {value}' for kind, name, value, _ in fields)
    struct = ', "etw_struct", "Pair", 2, "etw_int32", "A", -5, "etw_string", "B", "inner"'
    return f'BEGIN {{ etw_trace("{NAME}", "{GUID}", "AllTypes", 4, 0x10{struct}{triples}); exit(0); }}'


def test_the_table_is_complete() -> None:
    assert {kind for kind, *_ in FIELDS} | {"etw_struct"} == set(ETW_TYPES)


def test_every_type_round_trips_through_a_session(service: ServiceProcess, tmp_path: Path) -> None:
    trace = tmp_path / "types.etl"
    session = Session.start("probe-types", trace, providers=[(GUID, {"level": 5, "any": 0x10})])
    try:
        result = subprocess.run(
            [sys.executable, "-m", "openetw", "probe", "--file", str(corpus_path("etl", "tx", "Process.etl")), "-q", "-n", program(FIELDS)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        session.stop()
    assert result.returncode == 0, result.stderr
    assert "not its name's hash" in result.stderr
    (record,) = read_events(trace)
    ((provider, event, values),) = decoded([record])
    assert (provider, event) == (NAME, "AllTypes")
    assert values["Pair"] == {"A": -5, "B": "inner"}
    for _kind, name, _value, expected in FIELDS:
        assert values[name] == expected, name
    # Each field keeps the in-type and out-type its etw type names (how a decoder shows it).
    properties = {p.name: p for p in schema_from_record(record).properties}
    for kind, name, _value, _expected in FIELDS:
        assert (properties[name].in_type, properties[name].out_type or None) == (
            ETW_TYPES[kind].in_type, ETW_TYPES[kind].out_type or properties[name].out_type or None), name
    assert list(values) == ["Pair"] + [name for _, name, _, _ in FIELDS]


def test_nothing_is_written_without_a_listener(service: ServiceProcess, tmp_path: Path) -> None:
    from openetw.probe.run.etw_writer import EtwTraceWriter

    warnings: list[str] = []
    writer = EtwTraceWriter(warn=warnings.append)
    spec = (("etw_int32", "N", 0),)
    try:
        writer.write(NAME, GUID, "Unheard", 4, 0x10, spec, (1,))
        assert (writer.written, writer.skipped) == (0, 1)
        trace = tmp_path / "late.etl"
        session = Session.start("probe-listener", trace, providers=[(GUID, {"level": 5, "any": 0x10})])
        try:
            provider = writer.providers[(NAME, GUID)]
            deadline = time.monotonic() + 20
            while not provider.is_enabled(4, 0x10) and time.monotonic() < deadline:
                time.sleep(0.01)  # the service tells the provider it is enabled
            writer.write(NAME, GUID, "Heard", 4, 0x10, spec, (2,))
            writer.write(NAME, GUID, "OtherKeyword", 4, 0x20, spec, (3,))
        finally:
            session.stop()
    finally:
        writer.close()
    assert (writer.written, writer.skipped) == (1, 2)
    assert [(event, values) for _, event, values in decoded(read_events(trace))] == [("Heard", {"N": 2})]


@pytest.mark.parametrize(("text", "message"), [
    ('etw_trace("P", "not-a-guid", "E", 1, 0)', "is not a provider GUID"),
    ('etw_trace("P", "aad330cc-4bb9-588a-b252-08276853af02", "E", 1, 0, "etw_nope", "F", 1)', "must be one of"),
    ('etw_trace("P", "aad330cc-4bb9-588a-b252-08276853af02", "E", 1, 0, "etw_int32", "F")', "come in threes"),
    ('etw_trace("P", "aad330cc-4bb9-588a-b252-08276853af02", "E", 1, 0, "etw_int32", "F", "text")', "takes an integer"),
    ('etw_trace("P", "aad330cc-4bb9-588a-b252-08276853af02", "E", 1, 0, "etw_string", "F", 1)', "takes a string"),
    ('etw_trace("P", "aad330cc-4bb9-588a-b252-08276853af02", "E", 1, 0, "etw_struct", "S", 2, "etw_int8", "a", 1)', "more member"),
])  # fmt: skip
def test_bad_calls_are_compile_errors(text: str, message: str) -> None:
    with pytest.raises(ProbeCompileError, match=message):
        compile_script(f"BEGIN {{ {text}; }}")
