"""The Event Log's logs in the viewer: the tree as Windows groups it, the Sample Driver's
System-log events with their messages, the XML as the log prints it, access, and the tail."""

from __future__ import annotations

import itertools
import json
import os
import re
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.clock import filetime_to_iso
from openetw.etl.reader import EtlReader
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.eventlog import LogConfig, LogStore, event_xml, from_etw_record, from_evtx_record
from openetw.events.decoded import decode_record
from openetw.events.registry import build_registry
from tests.conftest import corpus_path
from tests.evtx.readers import crate_records
from tests.viewer.conftest import openetw_json

DRIVER = Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml"
DRIVER_GUID = uuid.UUID("b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6")
MESSAGES = ["Driver Loaded", "IRP A Occurred", "Driver Unloaded"]


def _driver_events(path: Path) -> list[Any]:
    """The Sample Driver's three events (StartEvent, SampleEventA, UnloadEvent) as an .etl's records."""
    clock = linux_trace_clock()
    name = "\\Device\\EventDrv"
    payloads = [struct.pack("<H", len(name) * 2) + name.encode("utf-16-le") + b"\0\0" + struct.pack("<I", 0), b"", struct.pack("<Q", 0x1234)]
    with EtlWriter(str(path), header=new_logfile_header(clock=clock)) as writer:
        for number, (opcode, payload) in enumerate(zip((1, 0, 2), payloads, strict=True)):
            writer.write(build_event_record(provider_id=DRIVER_GUID, id=number + 1, channel=8, level=4, opcode=opcode, keyword=1 << 63,
                                            timestamp=time.monotonic_ns(), pid=7, tid=7, user_data=payload))  # fmt: skip
    with EtlReader(str(path)) as reader:
        return [record for record in reader if record.kind == "event"]


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LogStore]:
    directory = tmp_path / "logs"
    monkeypatch.setenv("OPENETW_LOGS_DIR", str(directory))
    store = LogStore(directory)
    registry = build_registry([str(DRIVER)], installed=False)
    store.create("System")
    events = []
    for record in _driver_events(tmp_path / "drv.etl"):
        decoded = decode_record(record, registry)
        events.append(from_etw_record(record, provider_name=decoded.provider_name, channel="System", fields=decoded.text_properties(),
                                      message=decoded.message, computer="viewer-test"))  # fmt: skip
    store.append("System", events)
    store.create("Microsoft-Windows-Kernel-Power/Thermal-Operational")
    store.create("Application")
    yield store


def _ready(page: Any, server: Any) -> None:
    page.goto(server.url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)


def test_the_sample_drivers_system_log_events_show_with_their_messages(
    page: Any, serve: Any, artifacts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The real path: the manifest installed, the service's channel sessions listening, the
    driver writing; the viewer reads the System log the service keeps."""
    from tests.service.harness import start_service

    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "control.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    monkeypatch.delenv("OPENETW_LOGS_DIR", raising=False)
    subprocess.run([sys.executable, "-m", "openetw", "manifest", "install", str(DRIVER)], check=True, capture_output=True, timeout=60)
    service = start_service(tmp_path / "control.sock")
    try:
        subprocess.run([sys.executable, str(DRIVER.parent / "sample_driver.py"), "--requests", "1", "--interval", "0"],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        store = LogStore(tmp_path / "data" / "logs")
        deadline = time.monotonic() + 30
        while (not store.exists("System") or len(list(store.query("System"))) < 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        server = serve()
        _ready(page, server)
        tree = page.text_content("#tree")
        assert tree.index("Windows Logs") < tree.index("System") < tree.index("Applications and Services Logs")
        page.click("#tree li[data-log='System']")
        page.wait_for_function("window.__viewer.state.source && window.__viewer.state.source.kind === 'log'")
        page.wait_for_function("window.__viewer.idle() && document.querySelectorAll('#rows .row').length === 3")
        pick = ("rows => rows.map(r => [r.querySelector('.c-provider').textContent, r.querySelector('.c-id').textContent, "
                "r.querySelector('.c-message').textContent])")
        assert page.eval_on_selector_all("#rows .row", pick) == [["Sample Driver", str(n + 1), m] for n, m in enumerate(MESSAGES)]
        page.click("#rows .row[data-index='0']")
        page.wait_for_function("document.getElementById('detail').dataset.row === '0'")
        assert page.text_content("#detail-message") == "Driver Loaded"
        page.click("#tab-details")
        page.check("#xml-view")
        printed = subprocess.run([sys.executable, "-m", "openetw", "log", "query", "System", "--format", "xml"], check=True,
                                 capture_output=True, text=True, timeout=60).stdout  # fmt: skip
        first = next(line for line in printed.splitlines() if line.startswith("<Event "))
        assert page.text_content("#detail-xml") == first
        page.screenshot(path=str(artifacts / "system-log-sample-driver.png"))
        # the driver runs again: its events arrive on the open page
        subprocess.run([sys.executable, str(DRIVER.parent / "sample_driver.py"), "--requests", "1", "--interval", "0"],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        page.wait_for_function("window.__viewer.state.total === 6", timeout=30_000)
        assert page.get_attribute("#lost", "data-events-lost") == "0"
        page.goto("about:blank")
    finally:
        service.kill()


def test_a_logs_rows_facets_and_export_over_http(serve: Any, logs: LogStore) -> None:
    import http.client

    server = serve()
    info = server.viewer.open_log("System")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)

    def get(path: str) -> Any:
        connection.request("GET", path, headers=server.client_headers())
        response = connection.getresponse()
        return response.status, response.read()

    status, body = get(f"/api/s/{info.id}/facets")
    facets = json.loads(body)["facets"]
    assert status == 200 and facets["provider"] == [{"value": 0, "label": "Sample Driver", "count": 3}]
    assert {e["label"]: e["count"] for e in facets["channel"]} == {"System": 3}
    status, body = get(f"/api/s/{info.id}/rows?xpath=" + "*[System[EventID=2]]".replace("[", "%5B").replace("]", "%5D"))
    assert [row["message"] for row in json.loads(body)["rows"]] == ["IRP A Occurred"]
    status, body = get(f"/api/s/{info.id}/rows?xpath=" + "*%5BSystem//Level=2%5D")
    assert status == 400 and "descendant axis" in json.loads(body)["error"]  # the log's own XPath subset, as log query says
    status, body = get(f"/api/s/{info.id}/export?format=json")
    exported = [json.loads(line) for line in body.decode().splitlines()]
    assert [event["message"] for event in exported] == MESSAGES
    assert exported == [event.to_json() for event in logs.query("System")]
    status, body = get(f"/api/s/{info.id}/export?format=xml")
    assert body.decode().splitlines()[1] == event_xml(next(logs.query("System", count=1)))
    status, body = get(f"/api/s/{info.id}/export?format=parquet")
    assert status == 400 and "no export format" in json.loads(body)["error"]
    status, body = get(f"/api/s/{info.id}/rows?q=unloaded")
    assert [row["id"] for row in json.loads(body)["rows"]] == [3]
    # the search covers field values too: a value no message holds finds exactly its events
    assert not any("0x1234" in (event.message or "") or "eventdrv" in (event.message or "").lower() for event in logs.query("System"))
    for needle, ids in (("0x1234", [3]), ("EventDrv", [1]), ("eventd", [1]), ("driver 0x1234", [3]), ("loaded 0x1234", []), ("0x12345", [])):
        status, body = get(f"/api/s/{info.id}/rows?q=" + needle.replace(" ", "%20"))
        assert status == 200 and [row["id"] for row in json.loads(body)["rows"]] == ids, needle
        assert ids == [e.event_id for e in logs.query("System") if all(
            any(token.lower().startswith(word.lower()) for token in re.findall(r"\w+", " ".join([e.message or "", *map(str, (e.fields or {}).values())])))
            for word in needle.split())]  # fmt: skip


def test_a_log_this_user_may_not_read_is_refused(serve: Any, logs: LogStore) -> None:
    from openetw.errors import InvalidArgument

    logs.set_config("Application", LogConfig(owner=os.getuid() + 1, group=os.getgid() + 1, mode=0o600, isolation="System"))
    server = serve()
    if os.getuid() == 0:
        assert server.viewer.open_log("Application").kind == "log"  # root reads every log
        return
    with pytest.raises(InvalidArgument, match="access denied"):
        server.viewer.open_log("Application")


def _evtx_events(path: Path) -> list[tuple[int, str, dict[str, str]]]:
    """(EventID, TimeCreated, EventData by name) of each record the Rust ``evtx`` reader reads."""
    from xml.etree import ElementTree

    ns = "{http://schemas.microsoft.com/win/2004/08/events/event}"
    out = []
    for _, text in crate_records(path):
        root = ElementTree.fromstring(text)
        created = root.find(f"{ns}System/{ns}TimeCreated")
        data = {item.get("Name", ""): item.text or "" for item in root.iter(f"{ns}Data")}
        out.append((int(root.findtext(f"{ns}System/{ns}EventID") or -1), created.get("SystemTime", "") if created is not None else "", data))
    return out


def _micro_iso(filetime: int) -> str:
    """TimeCreated as the Rust reader prints it: microseconds (FILETIME truncated)."""
    return filetime_to_iso(filetime)[:26] + "Z"


def test_a_filtered_log_exports_as_evtx_and_etl_with_exactly_its_events(serve: Any, logs: LogStore, tmp_path: Path) -> None:
    import http.client

    import dissect.etl

    server = serve()
    info = server.viewer.open_log("System")
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    xpath = "*[System[EventID=1 or EventID=3]]".replace("[", "%5B").replace("]", "%5D").replace(" ", "%20").replace("=", "%3D")

    def export(fmt: str) -> Path:
        connection.request("GET", f"/api/s/{info.id}/export?format={fmt}&xpath={xpath}", headers=server.client_headers())
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200, body
        assert response.getheader("Content-Disposition") == f'attachment; filename="System-filtered.{fmt}"'
        path = tmp_path / f"filtered.{fmt}"
        path.write_bytes(body)
        return path

    wanted = list(logs.query("System", xpath="*[System[EventID=1 or EventID=3]]"))
    assert [event.event_id for event in wanted] == [1, 3]
    # .evtx: what log export writes, read back by the independent Rust reader
    assert _evtx_events(export("evtx")) == [(e.event_id, _micro_iso(e.time_created), e.fields or {}) for e in wanted]
    # .etl: the stored records, byte for byte but their timestamp, which is TimeCreated
    etl = export("etl")
    dumped = [r for r in openetw_json("dump", str(etl), "--json", "--quiet", "--manifest", str(DRIVER), "--no-installed") if r["kind"] == "event"]
    assert [(r["timestamp"], r["id"], r["provider_id"], r["pid"], r["message"], list(r["properties"])) for r in dumped] == [
        (e.time_created, e.event_id, e.provider_guid, e.pid, e.message, list(e.fields or {})) for e in wanted]  # fmt: skip
    with etl.open("rb") as f:
        theirs = [r.header for r in dissect.etl.ETL(f) if r.header.provider_id.bytes == DRIVER_GUID.bytes_le]
    assert len(theirs) == len(wanted)
    stamp = L.EVENT_HEADER.offset("TimeStamp")
    for header, event in zip(theirs, wanted, strict=True):
        assert header.header.TimeDelta == event.time_created
        raw = event.record
        assert header.header.Size == len(raw) and header.header.Id == event.event_id
        assert bytes(header.payload) == raw[L.EVENT_HEADER.size :]
        assert raw[:stamp] + struct.pack("<q", event.time_created) + raw[stamp + 8 :] == bytes(header.header.dumps()) + bytes(header.payload)
    # events imported from .evtx files carry no ETW record: an .etl export of them is refused, clearly
    logs.append("System", [from_evtx_record(record) for record in _evtx_file_records(2)])
    deadline = time.monotonic() + 30
    while len(info.columns()) < 5 and time.monotonic() < deadline:  # the log is tailed
        time.sleep(0.05)
    connection.request("GET", f"/api/s/{info.id}/export?format=etl", headers=server.client_headers())
    response = connection.getresponse()
    assert response.status == 400 and "hold no ETW record" in json.loads(response.read())["error"]


def test_exporting_a_filtered_log_from_the_page_writes_exactly_its_events(page: Any, serve: Any, logs: LogStore, tmp_path: Path) -> None:
    server = serve()
    _ready(page, server)
    page.click("#tree li[data-log='System']")
    page.wait_for_function("window.__viewer.state.source && window.__viewer.state.source.kind === 'log' && window.__viewer.idle()")
    page.fill("#xpath", "*[System[EventID!=2]]")
    page.press("#xpath", "Enter")
    page.wait_for_function("window.__viewer.idle() && document.getElementById('status').dataset.total === '2'")
    wanted = list(logs.query("System", xpath="*[System[EventID!=2]]"))
    for fmt in ("etl", "evtx"):
        page.select_option("#export-format", fmt)
        with page.expect_download() as download:
            page.click("#export")
        path = tmp_path / f"page-export.{fmt}"
        download.value.save_as(path)
        assert download.value.suggested_filename == f"System-filtered.{fmt}"
        if fmt == "etl":
            dumped = [r for r in openetw_json("dump", str(path), "--json", "--quiet", "--manifest", str(DRIVER), "--no-installed") if r["kind"] == "event"]
            assert [(r["timestamp"], r["id"], r["message"]) for r in dumped] == [(e.time_created, e.event_id, e.message) for e in wanted]
        else:
            assert _evtx_events(path) == [(e.event_id, _micro_iso(e.time_created), e.fields or {}) for e in wanted]
    # Find over a log reaches field values: DeviceObjPtr 0x1234 is in no message
    page.fill("#search", "0x1234")
    page.press("#search", "Enter")
    page.wait_for_function("window.__viewer.idle() && document.getElementById('status').dataset.total === '1'")
    assert page.eval_on_selector_all("#rows .row .c-id", "cells => cells.map(c => c.textContent)") == ["3"]
    assert page.errors == []


def _evtx_file_records(count: int) -> list[Any]:
    from openetw.consumer.evtx_source import map_file
    from openetw.evtx import EvtxReader

    return list(itertools.islice(EvtxReader(map_file(str(corpus_path("evtx", "system.evtx")))).records(), count))
