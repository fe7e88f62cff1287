"""Classic providers against a real service: registration under a control GUID, the enable and
disable notification with the session's logger handle, level and flags, one session at a time,
TraceEvent records in the session file, decoded by the provider's MOF, read by dissect.etl."""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.controller import Session
from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.manifest.winmeta import InType, OutType
from openetw.provider.classic import ClassicProvider, pack_fields
from openetw.provider.fields import InvalidFieldValue
from openetw.session.errors import ClassicProviderInUse
from openetw.tdh import decode_all
from openetw.tdh.mof_file import schemas_from_mof_text
from openetw.tdh.registry import SchemaRegistry
from tests.service.harness import CommandProcess, ServiceProcess, read_events

CONTROL = uuid.UUID("3f92e6e0-9886-434e-85db-0d11d3904c0a")
TRANSFER = uuid.UUID("b49d5931-ad85-4070-b1b1-3f81f1532875")

MOF = r"""
#pragma namespace("\\\\.\\root\\wmi")
[Dynamic, Description("Contoso transfer service") : amended, Guid("{3F92E6E0-9886-434e-85DB-0D11D3904C0A}")]
class ContosoTransfer : EventTrace {};

[Dynamic, Description("Transfers") : amended, Guid("{B49D5931-AD85-4070-B1B1-3F81F1532875}"), EventVersion(2)]
class Transfer_V2 : ContosoTransfer {};

[Dynamic, EventType{1, 2}, EventTypeName{"Start", "End"} : amended]
class Transfer_V2_Start : Transfer_V2
{
    [WmiDataId(1), read] uint32 Index;
    [WmiDataId(2), read, format("x")] uint64 Bytes;
    [WmiDataId(3), read, StringTermination("Counted"), format("w")] string Path;
    [WmiDataId(4), read, extension("IPAddrV4")] object Peer;
    [WmiDataId(5), read, extension("Port")] object PeerPort;
    [WmiDataId(6), read, extension("Sid")] object User;
    [WmiDataId(7), read] boolean Compressed;
    [WmiDataId(8), read, format("w")] string Tag;
};
"""
USER = "S-1-5-21-1004336348-1177238915-682003330-1001"


def transfer_fields(index: int) -> list[tuple[Any, ...]]:
    """The payload of Transfer/Start number ``index``, as (in-type, value[, out-type])."""
    return [
        ("UINT32", index), ("UINT64", index * 4096), ("COUNTEDSTRING", f"C:\\data\\file{index}.bin"),
        ("UINT32", f"10.0.0.{index % 250}", OutType.IPV4), ("UINT16", 443 + index, OutType.PORT), ("WBEMSID", USER),
        ("BOOLEAN", index % 2 == 0), ("UNICODESTRING", f"tag-{index}"),
    ]  # fmt: skip


def expected_values(index: int) -> dict[str, Any]:
    return {
        "Index": index, "Bytes": index * 4096, "Path": f"C:\\data\\file{index}.bin",
        "Peer": ipaddress.IPv4Address(f"10.0.0.{index % 250}"), "PeerPort": 443 + index, "User": USER,
        "Compressed": index % 2 == 0, "Tag": f"tag-{index}",
    }  # fmt: skip


# The provider process: one JSON command per stdin line, one JSON answer per line.
PROGRAM = r"""
import json, os, sys, time
from openetw.manifest.winmeta import OutType
from openetw.provider.classic import ClassicProvider

calls = []
provider = None

def control(enabled, handle, level, flags):
    calls.append([enabled, handle, level, flags])

def fields(index):
    return [
        ("UINT32", index), ("UINT64", index * 4096), ("COUNTEDSTRING", f"C:\\data\\file{index}.bin"),
        ("UINT32", f"10.0.0.{index % 250}", OutType.IPV4), ("UINT16", 443 + index, OutType.PORT),
        ("WBEMSID", "S-1-5-21-1004336348-1177238915-682003330-1001"), ("BOOLEAN", index % 2 == 0),
        ("UNICODESTRING", f"tag-{index}"),
    ]

def handle(command):
    global provider
    cmd = command["cmd"]
    if cmd == "register":
        provider = ClassicProvider(command["control"], event_guids=command["events"], callback=control).register()
        return {"enabled": provider.enabled}
    if cmd == "wait":
        deadline = time.monotonic() + command.get("timeout", 10.0)
        while provider.enabled != command["value"] and time.monotonic() < deadline:
            time.sleep(0.005)
        return {"enabled": provider.enabled}
    if cmd == "state":
        return {"enabled": provider.enabled, "handle": provider.logger_handle, "level": provider.level,
                "flags": provider.flags, "calls": calls, "tid": __import__("threading").get_native_id()}
    if cmd == "trace":
        written = 0
        for index in range(command["start"], command["start"] + command["count"]):
            written += provider.trace_fields(command["guid"], command["type"], fields(index), level=command["level"], version=2)
        return {"written": written}
    if cmd == "trace_at":
        written = provider.trace_event(command["guid"], 2, bytes.fromhex(command["payload"]), level=1, version=2,
                                       use_timestamp=command["timestamp"])
        return {"written": written}
    raise ValueError(cmd)

print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    try:
        answer = handle(json.loads(line))
    except Exception as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer), flush=True)
"""


class ClassicProcess(CommandProcess):
    """The classic provider program above, answering one command at a time."""

    def __init__(self) -> None:
        super().__init__([sys.executable, "-c", PROGRAM], dict(os.environ))


@pytest.fixture
def classic_process() -> Iterator[ClassicProcess]:
    process = ClassicProcess()
    try:
        yield process
    finally:
        process.kill()


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def mof_registry() -> SchemaRegistry:
    registry = SchemaRegistry()
    for schema in schemas_from_mof_text(MOF, "transfer.mof"):
        registry.add_schema(schema, source="transfer.mof")
    return registry


# -- a provider process and its sessions -----------------------------------------------------------


def test_a_classic_provider_process_is_enabled_by_one_session_and_its_events_decode(
    service: ServiceProcess, classic_process: ClassicProcess, tmp_path: Path
) -> None:
    output = tmp_path / "classic.etl"
    producer = classic_process
    assert producer.send("register", control=str(CONTROL), events=[str(TRANSFER)]) == {"enabled": False}
    assert producer.send("trace", guid=str(TRANSFER), type=1, start=0, count=1, level=4)["written"] == 0
    with Session.start("ClassicA", output=output) as session:
        session.enable(CONTROL, level=4, any=0xABCD_0000_0000_0005)
        assert producer.send("wait", value=True)["enabled"]
        logger_id = session.info()["logger_id"]
        state = producer.send("state")
        assert state["calls"] == [[True, logger_id, 4, 5]]  # flags: MatchAnyKeyword's low 32 bits
        assert (state["handle"], state["level"], state["flags"]) == (logger_id, 4, 5)

        with Session.start("ClassicB", mode="realtime") as second:
            with pytest.raises(ClassicProviderInUse, match="already enabled in another session"):
                second.enable(CONTROL, level=5)
        with pytest.raises(ClassicProviderInUse):
            Session.start("ClassicC", output=tmp_path / "c.etl", providers=[str(CONTROL)])

        session.enable(CONTROL, level=5, any=0x30)  # the same session changes its level and flags
        assert wait_for(lambda: producer.send("state")["calls"][-1] == [True, logger_id, 5, 0x30])
        assert producer.send("trace", guid=str(TRANSFER), type=1, start=0, count=40, level=5)["written"] == 40
        stamp = time.monotonic_ns() - 5_000_000_000
        assert producer.send("trace_at", guid=str(TRANSFER), payload=pack_fields(transfer_fields(99)).hex(), timestamp=stamp)["written"]

        session.disable(CONTROL)
        assert producer.send("wait", value=False)["enabled"] is False
        state = producer.send("state")
        assert state["calls"][-1] == [False, logger_id, 0, 0]
        assert (state["handle"], state["level"], state["flags"]) == (None, 0, 0)
        assert producer.send("trace", guid=str(TRANSFER), type=1, start=100, count=5, level=5)["written"] == 0
        tid = state["tid"]

    records = read_events(output)
    assert len(records) == 41
    registry = mof_registry()
    for index, record in enumerate(records[:40]):
        assert record.kind == "classic"
        assert (record.header_type, record.provider_id, record.opcode, record.level, record.version) == (L.HEADER_TYPE_FULL_HEADER64, TRANSFER, 1, 5, 2)
        assert (record.pid, record.tid, record.kernel_time, record.user_time) == (producer.pid, tid, 0, 0)
        schema = registry.schema_for(record)
        assert schema is not None and registry.event_name(record) == "Transfer/Start"
        values = decode_all(schema, record.user_data, record.pointer_size)
        assert not values.errors and dict(values) == expected_values(index)
    stamped = records[40]
    assert (stamped.timestamp, stamped.opcode, stamped.level) == (stamp, 2, 1)  # WNODE_FLAG_USE_TIMESTAMP: kept as given
    assert registry.event_name(stamped) == "Transfer/End"
    assert dict(decode_all(registry.schema_for(stamped), stamped.user_data)) == expected_values(99)
    assert all(r.timestamp > stamp for r in records[:40])


def test_dissect_etl_reads_the_classic_records(service: ServiceProcess, classic_process: ClassicProcess, tmp_path: Path) -> None:
    dissect_etl = pytest.importorskip("dissect.etl")
    output = tmp_path / "interop.etl"
    classic_process.send("register", control=str(CONTROL), events=[str(TRANSFER)])
    with Session.start("ClassicInterop", output=output, buffer_size=16, providers=[str(CONTROL)]):
        assert classic_process.send("wait", value=True)["enabled"]
        assert classic_process.send("trace", guid=str(TRANSFER), type=2, start=0, count=300, level=4)["written"] == 300
    with open(output, "rb") as handle:
        theirs = list(dissect_etl.ETL(handle))
    assert len(theirs) == 300 + 1  # the logfile header record too
    ours = read_events(output)
    assert len(ours) == 300
    for mine, their in zip(ours, theirs[1:], strict=True):
        assert bytes(their.header.header.ProviderId) == TRANSFER.bytes_le
        assert bytes(their.header.payload) == mine.user_data


def test_the_first_session_keeps_a_classic_provider_that_registers_late(service: ServiceProcess, tmp_path: Path) -> None:
    """Two sessions may name the provider before it registers; it goes to the first one."""
    calls: list[tuple[int, ...]] = []
    with Session.start("Early", output=tmp_path / "early.etl", providers=[str(CONTROL)]) as first:
        first_logger = first.info()["logger_id"]
        with Session.start("Late", output=tmp_path / "late.etl", providers=[str(CONTROL)]):
            provider = ClassicProvider(CONTROL, [TRANSFER], lambda *args: calls.append(args)).register()
            try:
                assert wait_for(lambda: provider.enabled)
                assert provider.logger_handle == first_logger
                assert provider.trace_event(TRANSFER, 1, b"\x01\x00\x00\x00", level=2)
            finally:
                provider.unregister()
    assert calls == [(True, first_logger, 0, 0), (False, first_logger, 0, 0)]
    assert [r.provider_id for r in read_events(tmp_path / "early.etl")] == [TRANSFER]
    assert read_events(tmp_path / "late.etl") == []


def test_in_process_provider_limits_and_lost_events(service: ServiceProcess, tmp_path: Path) -> None:
    output = tmp_path / "limits.etl"
    provider = ClassicProvider(str(CONTROL), [str(TRANSFER)], name="Contoso").register()
    try:
        assert provider.control_guid == CONTROL and provider.event_guids == (TRANSFER,)
        with Session.start("Limits", output=output, providers=[str(CONTROL)]) as session:
            assert wait_for(lambda: provider.enabled)
            assert provider.trace_event(str(TRANSFER), 7, b"abc", level=9, version=3)
            assert not provider.trace_event(TRANSFER, 7, bytes(0x10000))  # over 64 KB: refused, counted lost
            assert provider.events_refused == 1
            with pytest.raises(InvalidArgument, match="out of range"):
                provider.trace_event(TRANSFER, 256, b"")
            with pytest.raises(InvalidArgument, match="must be a GUID"):
                provider.trace_event("not-a-guid", 1, b"")
            with pytest.raises(InvalidArgument, match="the payload is bytes"):
                provider.trace_event(TRANSFER, 1, "text")  # type: ignore[arg-type]
            assert provider.trace_event(TRANSFER, 8, bytearray(b"xy"))
            with pytest.raises(InvalidFieldValue, match=r"fields\[1\]"):
                provider.trace_fields(TRANSFER, 1, [("UINT8", 1), ("UINT8", 300)])
            stats = session.stop()
        assert stats["events_lost"] == 1
    finally:
        provider.unregister()
    record, second = read_events(output)
    assert (record.opcode, record.level, record.version, record.user_data) == (7, 9, 3, b"abc")
    assert record.timestamp > 0 and record.size == L.EVENT_TRACE_HEADER.size + 3
    assert (second.opcode, second.user_data) == (8, b"xy")


# -- packing without a service -------------------------------------------------------------------


def test_pack_fields_writes_what_the_decoder_reads() -> None:
    assert pack_fields([(InType.UINT16, 0x102), ("win:UInt8", 7), (8, 1)]) == b"\x02\x01\x07\x01\x00\x00\x00"
    assert pack_fields([("COUNTEDSTRING", "ab")]) == b"\x04\x00a\x00b\x00"
    assert pack_fields([("REVERSEDCOUNTEDANSISTRING", "ab")]) == b"\x00\x02ab"
    assert pack_fields([("NONNULLTERMINATEDSTRING", "ab")]) == b"a\x00b\x00"
    assert pack_fields([("UNICODECHAR", "é"), ("ANSICHAR", "x")]) == b"\xe9\x00x"
    assert pack_fields([("HEXDUMP", b"\x01\x02")]) == b"\x02\x00\x00\x00\x01\x02"
    assert pack_fields([("WBEMSID", None)]) == bytes(4)
    assert pack_fields([("WBEMSID", "S-1-5-18")])[16:] == b"\x01\x01\x00\x00\x00\x00\x00\x05\x12\x00\x00\x00"
    assert pack_fields([("SIZET", 1), ("POINTER", 2)]) == (1).to_bytes(8, "little") + (2).to_bytes(8, "little")
    assert pack_fields([("UINT16", 80, OutType.PORT)]) == b"\x00\x50"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("NOSUCHTYPE", 1)], "is not an in-type"),
        ([("UINT32",)], r"fields\[0\] is \(in_type, value"),
        ([("UINT32", 1, 9999)], "is not an out-type"),
        ([("UINT32", -1)], r"fields\[0\]"),
        ([("HEXDUMP", "text")], "HEXDUMP expects bytes"),
        ([("BINARY", 5)], "BINARY expects bytes"),
        ([("WBEMSID", "S-x")], "is not a SID"),
        ([(InType.NULL, 1)], "cannot be packed"),
    ],
)
def test_pack_fields_refuses_bad_values(fields: list[tuple[Any, ...]], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        pack_fields(fields)


def test_without_a_service_a_classic_provider_is_disabled(service_env: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    with ClassicProvider(CONTROL, [TRANSFER], lambda *a: calls.append(a)) as provider:
        assert (provider.enabled, provider.logger_handle, provider.level, provider.flags) == (False, None, 0, 0)
        assert provider.trace_event(TRANSFER, 1, b"x") is False
        assert provider.trace_fields(TRANSFER, 1, [("UINT32", 1)]) is False
    assert calls == []
    with pytest.raises(InvalidArgument, match="control GUID"):
        ClassicProvider("Contoso.Named")


# -- the file through the command line -----------------------------------------------------------


def test_dump_and_report_decode_the_classic_events_with_mof(
    service: ServiceProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openetw.cli.main import main

    output = tmp_path / "cli.etl"
    mof = tmp_path / "transfer.mof"
    mof.write_text(MOF)
    with ClassicProvider(CONTROL, [TRANSFER]) as provider:
        with Session.start("ClassicCli", output=output, providers=[str(CONTROL)]):
            assert wait_for(lambda: provider.enabled)
            for index in range(3):
                assert provider.trace_fields(TRANSFER, 1, transfer_fields(index), level=4, version=2)
    capsys.readouterr()

    assert main(["dump", "--no-installed", "--json", "--mof", str(mof), str(output)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    events = [line for line in lines if line.get("provider_name") == "ContosoTransfer"]
    assert [e["event_name"] for e in events] == ["Transfer/Start"] * 3
    assert [e["properties"]["Path"] for e in events] == [f"C:\\data\\file{i}.bin" for i in range(3)]
    assert events[2]["properties"]["Peer"] == "10.0.0.2" and events[2]["properties"]["User"] == USER

    assert main(["dump", "--no-installed", str(output)]) == 0  # without the MOF: not decoded, still listed
    assert "Transfer/Start" not in capsys.readouterr().out

    assert main(["report", "--no-installed", "--format", "csv", "--mof", str(mof), str(output)]) == 0
    out, _err = capsys.readouterr()
    assert out.count(",ContosoTransfer,Transfer/Start,") == 3, out
    assert "Index=2; Bytes=0x2000; Path=C:\\data\\file2.bin; Peer=10.0.0.2; PeerPort=445" in out
    assert main(["report", "--no-installed", "--format", "csv", "--mof", str(tmp_path / "none.mof"), str(output)]) == 2
    assert "none.mof' does not exist" in capsys.readouterr().err  # a missing input is an error, as every other
