"""``UserTrace(files=[...])`` takes ``.evtx`` files as it takes ``.etl``: providers, filters,
predicates and ``Parser`` over Event Log records."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path
from typing import Any

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P
from openetw.errors import EvtxFormatError
from openetw.evtx import EvtxReader
from tests.conftest import corpus_path

SECURITY = "Microsoft-Windows-Security-Auditing"
SECURITY_GUID = uuid.UUID("54849625-5478-4994-a5ba-3e3b0328c30d")


def test_every_record_reaches_the_default_callback() -> None:
    path = corpus_path("evtx", "security.evtx")
    got: list[Any] = []
    trace = UserTrace(files=[path], manifests=[])
    trace.set_default_event_callback(lambda record, context: got.append(record))
    trace.start()
    assert len(got) == 2261
    assert {r.kind for r in got} == {"evtx"}
    assert [r.record_id for r in got] == list(range(1, 2262))
    first = got[0]
    assert first.provider_id == SECURITY_GUID and first.id == 4608 and first.pid == 456 and first.tid == 460
    assert first.time_iso.startswith("2016-07-08T18:12:51.68164")
    assert first.user_data == b"" and first.has_user_data is False
    stats = trace.query_stats()
    assert stats["events_read"] == stats["events_handled"] == 2261


def test_provider_event_filter_predicate_and_parser() -> None:
    path = corpus_path("evtx", "security.evtx")
    expected = [
        r for r in EvtxReader(path.read_bytes()).records()
        if r.header.event_id == 4624 and r.properties().get("TargetUserName") == "SYSTEM"
    ]  # fmt: skip
    assert expected
    seen: list[tuple[int, str, Any, str | None]] = []

    def on_logon(record: Any, context: Any) -> None:
        parser = context.parser_for(record)
        seen.append((record.record_id, parser.parse("TargetUserName"), parser.try_parse("LogonType"), parser.schema.provider_name))
        assert parser.try_parse("NoSuchProperty", "absent") == "absent"
        assert {p.name: p.value for p in parser.properties()} == parser.as_dict() == record.properties()

    provider = Provider(SECURITY_GUID)
    provider.add_filter(EventFilter([4624], P.property_equals("TargetUserName", "SYSTEM")).add_on_event_callback(on_logon))
    trace = UserTrace(files=[path], manifests=[])
    trace.enable(provider)
    trace.start()
    assert [s[0] for s in seen] == [r.record_id for r in expected]
    assert all(s[1] == "SYSTEM" and s[3] == SECURITY for s in seen)


def test_evtx_and_etl_files_merge_in_time_order(tmp_path: Path) -> None:
    files = [corpus_path("evtx", "system.evtx"), corpus_path("etl", "tx", "HTTP_Server.etl"), corpus_path("evtx", "sysmon.evtx")]
    got: list[Any] = []
    trace = UserTrace(files=files, manifests=[])
    trace.set_default_event_callback(lambda record, context: got.append((record.kind, record.filetime)))
    trace.start()
    kinds = {kind for kind, _ in got}
    assert {"evtx", "event"} <= kinds
    assert sum(1 for kind, _ in got if kind == "evtx") == 1881 + 358


def test_damage_reaches_the_error_handlers() -> None:
    errors: list[BaseException] = []
    trace = UserTrace(files=[corpus_path("evtx", "sample_with_a_bad_chunk_magic.evtx")], manifests=[])
    trace.on_error(lambda error, record: errors.append(error))
    count = []
    trace.set_default_event_callback(lambda record, context: count.append(1))
    trace.start()
    assert len(count) >= 270
    located = [e for e in errors if isinstance(e, EvtxFormatError) and e.structure == "chunk header" and "signature" in e.message]
    assert [e.chunk_index for e in located] == [6, 10]


def test_a_provider_name_found_in_the_file_resolves() -> None:
    """A classic source ("Service Control Manager") has no GUID in its records: its name, as the
    file carries it, selects its events (hashing it would select none)."""
    path = corpus_path("evtx", "system.evtx")
    expected = [r.record_id for r in EvtxReader(path.read_bytes()).records() if r.header.provider_name == "Service Control Manager"]
    assert expected
    got: list[int] = []
    provider = Provider("service control manager")
    provider.add_on_event_callback(lambda record, context: got.append(record.record_id))
    trace = UserTrace(files=[path], manifests=[])
    trace.enable(provider)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "the name was hashed" warning: the file knows the name
        trace.start()
    assert got == expected


def test_the_file_source_gives_its_records_as_batches() -> None:
    # A wrapped, damaged log: the batches hold what records() yields, in the same (chunk) order,
    # with the same losses and notices.
    from openetw.events.sources import EVTX, open_source

    path = corpus_path("evtx", "2-vss_0-Microsoft-Windows-RemoteDesktopServices-RdpCoreTS%4Operational.evtx")
    by_record, by_batch = open_source(path, as_format=EVTX), open_source(path, as_format=EVTX)
    by_record.open()
    by_batch.open()
    try:
        expected = [(record.record_id, record.file_offset, record.xml()) for record in by_record.records()]
        got = [
            (batch.record_ids[i], offset, batch.xml_text(i))
            for batch in by_batch.batches()  # type: ignore[attr-defined]
            for i, offset in enumerate(batch.file_offsets())
        ]
        assert len(got) == len(expected) > 1900 and got == expected
        assert [str(e) for e in by_batch.losses()] == [str(e) for e in by_record.losses()] != []
        assert [str(e) for e in by_batch.notices()] == [str(e) for e in by_record.notices()]
    finally:
        by_record.close()
        by_batch.close()
