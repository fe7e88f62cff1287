"""``openetw probe`` over ``.evtx`` logs: probes by provider GUID, header-only ``arg0``, decoded properties."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from openetw.consumer import UserTrace
from openetw.consumer.evtx_source import EvtxFileSource
from tests.conftest import corpus_path
from tests.probe.helpers import json_records, run_probe


def _map(records: list[dict[str, Any]], name: str) -> Any:
    for record in records:
        if record["type"] == "map" and name in record["data"]:
            return record["data"][name]
    raise AssertionError(f"no map record for {name}: {records}")


def _records(path: Path) -> list[Any]:
    source = EvtxFileSource(path)
    source.open()
    try:
        return [r for r in source.records() if r.provider_guid_bytes is not None]
    finally:
        source.close()


@pytest.fixture(scope="module")
def security() -> Path:
    return corpus_path("evtx", "security.evtx")


@pytest.fixture(scope="module")
def security_records(security: Path) -> list[Any]:
    return _records(security)


def test_counts_by_event_id_equal_a_plain_count(capsys: Any, security: Path, security_records: list[Any]) -> None:
    status, out, err = run_probe(capsys, "--file", str(security), "-f", "json",
                                 "-n", "etw::: { @[probename] = count(); @p[probemod] = count(); }")  # fmt: skip
    assert (status, err) == (0, "")
    records = json_records(out)
    assert _map(records, "@") == {str(k): v for k, v in Counter(r.id for r in security_records).items()}
    assert _map(records, "@p") == dict(Counter(str(r.provider_id) for r in security_records))
    assert len(security_records) > 100


def test_level_keyword_and_id_match_as_a_plain_filter(capsys: Any, security: Path, security_records: list[Any]) -> None:
    first = security_records[0]
    guid, level, keyword = str(first.provider_id), first.level, first.keyword
    description = f"etw:{guid}:0x{level:02x}_0x{keyword:016x}:"
    status, out, _ = run_probe(capsys, "--file", str(security), "-f", "json", "-n", description + " { @[probename] = count(); }")
    expected = Counter(str(r.id) for r in security_records
                       if str(r.provider_id) == guid and r.level <= level and (r.keyword & keyword or not r.keyword))  # fmt: skip
    assert status == 0 and _map(json_records(out), "@") == dict(expected)
    event_id = Counter(r.id for r in security_records).most_common(1)[0][0]
    status, out, _ = run_probe(capsys, "--file", str(security), "-q", "-n", f"etw:::{event_id} {{ @ = count(); }} END {{ printa(\"%@d\", @); }}")
    assert (status, out) == (0, str(sum(r.id == event_id for r in security_records)))


def test_a_predicate_on_a_property(capsys: Any, security: Path, security_records: list[Any]) -> None:
    wanted = [r for r in security_records if r.id == 4624]
    assert wanted, "the log has logons"
    by_user = Counter(r.properties()["TargetUserName"] for r in wanted if r.properties()["LogonType"] == 5)
    program = 'etw:::4624 /args->LogonType == 5/ { @[args->TargetUserName] = count(); @t = sum(args->LogonType); }'
    status, out, err = run_probe(capsys, "--file", str(security), "-f", "json", "-n", program)
    assert (status, err) == (0, "")
    records = json_records(out)
    assert _map(records, "@") == dict(by_user) and sum(by_user.values()) > 0
    assert _map(records, "@t") == 5 * sum(by_user.values())


def test_arg0_is_the_event_header_alone(capsys: Any, security: Path, security_records: list[Any]) -> None:
    header = (
        "etw::: { h = (struct nt`_EVENT_HEADER *)arg0; "
        'printf("%d %d %d\\n", h->EventDescriptor.Id, h->Size, h->ProcessId); }'
    )
    status, out, _ = run_probe(capsys, "--file", str(security), "-q", "-n", header)
    assert status == 0
    assert out.splitlines() == [f"{r.id} 80 {r.pid}" for r in security_records]


def test_a_field_typed_as_a_string_is_a_compile_error_in_integer_use(capsys: Any, security: Path) -> None:
    status, _, err = run_probe(capsys, "--file", str(security), "-n", "etw:::4624 { @ = sum(args->TargetUserName); }")
    assert status == 2 and "needs an integer" in err


def test_list_names_providers_events_and_fields(capsys: Any, security: Path, security_records: list[Any]) -> None:
    status, out, _ = run_probe(capsys, "--file", str(security), "-l", "-f", "json")
    assert status == 0
    rows = json_records(out)
    assert sum(row["events"] for row in rows) == len(security_records)
    logon = [row for row in rows if row["name"] == "4624"]
    assert logon and all(row["provider_name"] == "Microsoft-Windows-Security-Auditing" for row in logon)
    assert any("TargetUserName:string" in row["fields"] and "LogonType:int64_t" in row["fields"] for row in logon)
    status, out, _ = run_probe(capsys, "--file", str(security), "-l", "etw:Microsoft-Windows-Security-Auditing::4624")
    assert status == 0 and "4624" in out and "1100" not in out


def test_evtx_and_etl_files_merge_in_time_order(capsys: Any, security: Path) -> None:
    # A log keeps its records in the order it wrote them (TimeCreated may step back a little);
    # files merge by time, as the consumer merges them.
    paths = [security, corpus_path("evtx", "system.evtx"), corpus_path("etl", "etl-parser", "lxcore_kernel.etl")]
    status, out, _ = run_probe(capsys, *[a for p in paths for a in ("--file", str(p))], "-q",
                               "-n", 'etw::: { printf("t %d %s\\n", walltimestamp, probemod); }')  # fmt: skip
    assert status == 0
    fired = [line.split()[1:] for line in out.splitlines() if line.startswith("t ")]
    expected: list[list[str]] = []

    def take(record: Any, context: Any) -> None:
        if record.provider_guid_bytes is not None:
            expected.append([str((record.filetime - 116444736000000000) * 100), str(record.provider_id)])

    trace = UserTrace(files=paths, manifests=[])
    trace.set_default_event_callback(take)
    trace.start()
    assert fired == expected
    logged = [str(r.provider_id) for path in paths[:2] for r in _records(path)]
    assert set(logged) <= {guid for _, guid in fired} and len(fired) > len(logged)


def test_a_field_some_records_leave_empty_reads_as_an_empty_string(capsys: Any, security: Path, security_records: list[Any]) -> None:
    logons = [r.properties() for r in security_records if r.id == 4624]
    empty = sum(p["WorkstationName"] in (None, "") for p in logons)
    assert any(p["WorkstationName"] is None for p in logons) and empty < len(logons)  # some logons give no name
    program = 'etw:::4624 /args->WorkstationName == ""/ { @e = count(); } etw:::4624 { @n = count(); }'
    status, out, _ = run_probe(capsys, "--file", str(security), "-f", "json", "-n", program)
    records = json_records(out)
    assert status == 0 and (_map(records, "@e"), _map(records, "@n")) == (empty, len(logons))
