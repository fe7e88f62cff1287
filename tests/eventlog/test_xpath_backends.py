"""One Event Log XPath (``openetw.events.xpath``), every back end, every kind of source: the
store's SQL, the record evaluator over event trees and the viewer's columns give the same events
for one table of queries on a log (its SQLite store), on an ``.evtx`` file (read in place, and as
the viewer's source) and on an ``.etl`` file holding the same events (through the viewer's
columns and the record evaluator, as ``log query FILE.etl`` builds the trees). Among the queries:
the filter XML Event Viewer's "Filter Current Log" writes (lower-case ``band``, decimal masks,
``timediff``, custom ranges, ``Suppress``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from openetw.eventlog import LogStore, NewEvent, StoredEvent, event_node, parse_filter
from openetw.eventlog.export import write_evtx
from openetw.eventlog.files import EvtxQuery
from openetw.events.xpath import QueryList
from openetw.events.xpath import QueryList as ReadModelQueryList
from openetw.evtx.values import filetime_text
from tests.eventlog.events import BASE_TIME, made_events

HOUR = 3600 * 10_000_000
NOW = BASE_TIME + HOUR + 150 * 10_000_000  # the first 150 events of a log are older than an hour
SIDS = ("S-1-5-18", "S-1-5-21-1004336348-1177238915-682003330-1001", None)


def _since(seconds: int) -> str:
    return filetime_text(BASE_TIME + seconds * 10_000_000)


def _events(count: int, seed: int, channel: str) -> list[NewEvent]:
    events = made_events(count, seed=seed)
    for index, event in enumerate(events):
        event.channel = channel
        event.user_sid = SIDS[index % 3]
        event.version = index % 2
        event.computer = "web-01" if index % 4 else "db-01"
    return events


def _view(selects: str, suppresses: str = "", path: str = "Application") -> str:
    """A filter as Event Viewer's XML tab shows it (its spacing and escapes kept)."""
    suppress = f'\n    <Suppress Path="{path}">{suppresses}</Suppress>' if suppresses else ""
    return f'<QueryList>\n  <Query Id="0" Path="{path}">\n    <Select Path="{path}">{selects}</Select>{suppress}\n  </Query>\n</QueryList>'


EVENT_VIEWER = [
    _view("*[System[(Level=1  or Level=2 or Level=3)]]"),
    _view("*[System[(Level=4 or Level=0)]]"),
    _view("*[System[(EventID=1 or  (EventID &gt;= 5 and EventID &lt;= 8) )]]"),
    _view("*[System[(Level=4 or Level=0)]]", "*[System[(EventID=3)]]"),
    _view("*[System[band(Keywords,4611686018427387904)]]"),
    _view("*[System[band(Keywords,9223372036854775808)]]"),
    _view("*[System[band(Keywords,13835058055282163712)]]"),
    _view("*[System[TimeCreated[timediff(@SystemTime) &lt;= 3600000]]]"),
    _view("*[System[TimeCreated[timediff(@SystemTime) &lt;= 43200000]]]"),
    _view(f"*[System[TimeCreated[@SystemTime&gt;='{_since(20)}' and @SystemTime&lt;='{_since(80)}']]]"),
    _view("*[System[Provider[@Name='Alpha' or @Name='Beta']]]"),
    _view("*[System[Provider[@Name='Microsoft-Windows-Gamma'] and Task = 2]]"),
    _view("*[System[Security[@UserID='S-1-5-18']]]"),
    _view("*[System[Provider[@Name='Beta'] and (Level=2 or Level=3 or Level=4) and (EventID=4 or EventID=7)"
          " and TimeCreated[timediff(@SystemTime) &lt;= 3600000]]]"),
    _view("*[EventData[Data[@Name='name']='pear']]"),
    _view("*[System[Level=4] and EventData[Data[@Name='name']='plum']]"),
    _view("*[System[(Level=2 or Level=4)]]", "*[EventData[Data[@Name='flag']='true']]"),
]
SELECTORS = [
    "*",
    "*[System[Level=2]]",
    "*[System[Level!=4]]",
    "*[System/Level>=3]",
    "Event/System[Level<=2 and EventID!=1]",
    "*[System[EventID=3 or EventID=7]]",
    "*[System[(EventID>=2 and EventID<5) or Level=1]]",
    "*[System[Band(Keywords, 16)]]",
    "*[System[Band(Keywords, 0x10)]]",
    "*[System[band(Keywords, 0x8000000000000000) and Level=4]]",
    "*[System[Task=1 and Opcode=2]]",
    "*[System[Version=1]]",
    "*[System[Computer='db-01']]",
    "*[System[Channel='Application']]",
    "*[System[Channel='application']]",
    "*[System[EventRecordID>100 and EventRecordID<=140]]",
    "*[System[Execution[@ProcessID=103]]]",
    "*[System[Execution[@ProcessID=103 and @ThreadID>=1005]]]",
    "*[System[Provider[@Name='Alpha']] and System[Level=4]]",
    "*[System[Provider[@Name!='Alpha']]]",
    "*[System[Security[@UserID='S-1-5-21-1004336348-1177238915-682003330-1001']]]",
    "*[System[TimeCreated[timediff(@SystemTime) > 3600000]]]",
    f"*[System[TimeCreated[@SystemTime<'{_since(30)}']]]",
    f"*[System[TimeCreated[timediff(@SystemTime, '{_since(100)}') <= 10000]]]",
    "*[EventData[Data[@Name='index']<10]]",
    "*[EventData[Data[2]='apple']]",
    "*[EventData[Data[position()=1]=5]]",
    "*[EventData[Data='plum'] and System[Band(Keywords, 16)]]",
    "*[System[Level=2] or EventData[Data[@Name='name']='apple']]",
    "*[System[Level=5]]",
]
QUERIES = EVENT_VIEWER + SELECTORS


def test_the_table_holds_forty_queries_and_every_filter_event_viewer_writes() -> None:
    assert len(QUERIES) >= 40
    written = "\n".join(EVENT_VIEWER)
    for construct in ("band(Keywords,", "timediff(@SystemTime) &lt;=", "@SystemTime&gt;=", "<Suppress", "Security[@UserID=", "EventData[", "EventID &gt;="):
        assert construct in written


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[LogStore, dict[str, list[StoredEvent]], Path]:
    folder = tmp_path_factory.mktemp("xpath-backends")
    store = LogStore(folder / "logs")
    for log, seed in (("Application", 4), ("System", 9)):
        store.create(log)
        store.append(log, _events(300, seed, log))
    stored = {log: list(store.query(log, now=NOW)) for log in ("Application", "System")}
    evtx = folder / "Application.evtx"
    with open(evtx, "wb") as out:
        write_evtx(stored["Application"], out)
    return store, stored, evtx


def _by_evaluator(text: str, events: list[StoredEvent], log: str) -> list[int]:
    query = parse_filter(text)
    if isinstance(query, QueryList):
        return [e.record_id for e in events if query.matches(event_node(e), NOW, log)]
    return [e.record_id for e in events if query.matches(event_node(e), NOW)]


def _by_viewer_columns(store: LogStore, text: str, events: list[StoredEvent]) -> list[int]:
    from openetw.viewer.logs import _COLUMN_SQL, _grown
    from openetw.viewer.model import Columns
    from openetw.viewer.xpath import xpath_rows

    db = store.open("Application")
    try:
        rows = db.execute(_COLUMN_SQL.format(own=""), (0,)).fetchall()
    finally:
        db.close()
    columns, ids = _grown(Columns.empty(), rows, {name: {} for name in ("provider", "event", "channel", "user")}, "Application")
    by_id = {e.record_id: e for e in events}
    mask = xpath_rows(text, columns, lambda chosen: (event_node(by_id[int(ids[row])]) for row in chosen), now=NOW)
    return [int(ids[row]) for row in np.flatnonzero(mask)]


def _by_viewer_evtx_source(path: Path, text: str) -> list[int]:
    from openetw.viewer.sources import EvtxSource, default_registry
    from openetw.viewer.xpath import xpath_rows

    source = EvtxSource("s1", str(path), default_registry())
    assert source.ready.wait(30), "the .evtx source loads"
    columns = source.columns()
    mask = xpath_rows(text, columns, source.event_nodes, now=NOW)
    return [int(event.record.record_id) for event in source.events(np.flatnonzero(mask))]


@pytest.mark.parametrize("text", QUERIES)
def test_every_back_end_selects_the_same_events(logs: tuple[LogStore, dict[str, list[StoredEvent]], Path], text: str) -> None:
    store, stored, evtx = logs
    events = stored["Application"]
    expected = _by_evaluator(text, events, "Application")
    assert [e.record_id for e in store.query("Application", xpath=text, now=NOW)] == expected, "the store's SQL"
    assert _by_viewer_columns(store, text, events) == expected, "the viewer's columns"
    assert [e.record_id for e in EvtxQuery(evtx).events(xpath=text, now=NOW)] == expected, "an .evtx file in place"
    assert _by_viewer_evtx_source(evtx, text) == expected, "the viewer's .evtx source"


# Facts an .etl's events do not carry as the log's do (no channel, computer or user; an EventRecordID
# is the record's position in the file, its header record first): on the .etl these queries are held
# to the evaluator only, not to the log.
_LOG_ONLY = ("Channel", "Computer", "Security", "EventRecordID")


@pytest.fixture(scope="module")
def etl_trace(logs: tuple[LogStore, dict[str, list[StoredEvent]], Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The Application log's events as a TraceLogging ``.etl`` (same providers, descriptors,
    processes, times and fields), opened as the viewer opens it, with each record's ``Event``
    tree as ``log query FILE.etl`` builds it."""
    from openetw.etl import layouts as L
    from openetw.etl.clock import TraceClock
    from openetw.etl.reader import EtlReader
    from openetw.etl.writer import EtlWriter, new_logfile_header
    from openetw.eventlog import from_etw_record
    from openetw.events.decoded import decode_record
    from openetw.events.registry import build_registry
    from openetw.testing import EventRecordBuilder
    from openetw.viewer.sources import EtlSource

    _, stored, _ = logs
    path = tmp_path_factory.mktemp("xpath-etl") / "application.etl"
    clock = TraceClock(L.CLOCK_QPC, BASE_TIME, 0, 10_000_000)  # a QPC tick is a FILETIME tick from BASE_TIME
    with open(path, "wb") as out, EtlWriter(out, header=new_logfile_header(clock=clock)) as writer:
        for event in stored["Application"]:
            builder = EventRecordBuilder(
                event.provider, event.event_id, event.version, opcode=event.opcode, level=event.level, task=event.task,
                keyword=event.keywords, pid=event.pid, tid=event.tid, timestamp=event.time_created - BASE_TIME,
            )  # fmt: skip
            writer.write(builder.add_properties(event.fields).pack_tracelogging())
    registry = build_registry(installed=False)
    trees = []
    with EtlReader(str(path)) as reader:
        for number, record in enumerate(reader.records(time_order=True), 1):  # the header record is the first
            if record.kind != "event":
                continue
            decoded = decode_record(record, registry)
            new = from_etw_record(record, provider_name=decoded.provider_label, channel="", fields=decoded.text_properties() or None)
            trees.append((int(decoded.text_properties()["index"]), event_node(StoredEvent(**vars(new), record_id=number, log="application.etl"))))
    source = EtlSource("etl", str(path), registry, {"save": False})
    assert source.ready.wait(60) and source.error is None, source.error
    return source, trees


def _indexes(events: list[StoredEvent], ids: list[int]) -> list[int]:
    by_id = {e.record_id: e for e in events}
    return [int(by_id[i].fields["index"]) for i in ids]  # type: ignore[index]


def _etl_evaluator(text: str, trees: list[tuple[int, Any]]) -> list[int]:
    query = parse_filter(text)
    if isinstance(query, QueryList):
        return [index for index, node in trees if query.matches(node, NOW, "Application")]
    return [index for index, node in trees if query.matches(node, NOW)]


def _etl_viewer_columns(source: Any, text: str) -> tuple[list[int], list[int]]:
    """The ``index`` fields of the events the viewer's columns select, and of those the record
    evaluator selects on the viewer's own trees of every row (the file's header record is a row
    of the viewer's, with no ``index``)."""
    from openetw.viewer.xpath import xpath_rows

    columns = source.columns()
    by_columns = np.flatnonzero(xpath_rows(text, columns, source.event_nodes, now=NOW))
    query = parse_filter(text)
    rows = np.arange(len(columns))
    if isinstance(query, QueryList):
        picked = [row for row, node in zip(rows, source.event_nodes(rows), strict=True) if node is not None and query.matches(node, NOW, "Application")]
    else:
        picked = [row for row, node in zip(rows, source.event_nodes(rows), strict=True) if node is not None and query.matches(node, NOW)]
    assert by_columns.tolist() == [int(row) for row in picked], "the viewer's columns and the evaluator on its trees"

    def indexes(chosen: Any) -> list[int]:
        return [int(event.properties["index"]) for event in source.events(chosen) if "index" in event.properties]

    return indexes(by_columns), indexes(np.asarray(picked, dtype=np.int64))


@pytest.mark.parametrize("text", QUERIES)
def test_an_etl_of_the_same_events_selects_them_too(
    logs: tuple[LogStore, dict[str, list[StoredEvent]], Path], etl_trace: Any, text: str,
) -> None:  # fmt: skip
    _, stored, _ = logs
    source, trees = etl_trace
    by_columns, by_trees = _etl_viewer_columns(source, text)
    by_records = _etl_evaluator(text, trees)
    assert by_columns == by_trees == by_records, "the .etl: viewer columns, viewer trees, log query's trees"
    if not any(fact in text for fact in _LOG_ONLY):
        events = stored["Application"]
        assert by_records == _indexes(events, _by_evaluator(text, events, "Application")), "the .etl and the log"


def test_the_read_models_xpath_is_the_event_logs() -> None:
    """The names the Event Log exported are the read model's own objects (kept one release)."""
    import openetw.eventlog.xpath as former
    import openetw.eventlog.xpath_columns as former_columns
    from openetw.events import xpath
    from openetw.events.xpath import columns

    assert QueryList is ReadModelQueryList
    for name in ("Query", "QueryList", "XmlElement", "parse_filter", "parse_query", "parse_query_list", "condition_sql", "QUERY_COLUMNS"):
        assert getattr(former, name) is getattr(xpath, name)
    for name in former_columns.__all__:
        assert getattr(former_columns, name) is getattr(columns, name)


def test_the_queries_select_something_and_not_everything(logs: tuple[LogStore, dict[str, list[StoredEvent]], Path]) -> None:
    """The table is not vacuous: most queries select some events and leave others."""
    _, stored, _ = logs
    events = stored["Application"]
    partial = [text for text in QUERIES if 0 < len(_by_evaluator(text, events, "Application")) < len(events)]
    assert len(partial) >= len(QUERIES) - 4  # '*', the last 12 hours, Channel='Application' and its lower-case twin


def test_a_query_list_over_two_logs_merges_them_in_time_order(logs: tuple[LogStore, dict[str, list[StoredEvent]], Path], tmp_path: Path) -> None:
    """``log query --query-file`` with no log reads the logs the Paths name, as ``wevtutil qe /sq``."""
    from openetw.cli.main import cli

    store, stored, _ = logs
    text = ('<QueryList>\n  <Query Id="0" Path="Application">\n    <Select Path="Application">*[System[(Level=1 or Level=2)]]</Select>\n'
            '    <Select Path="System">*[System[band(Keywords,16)]]</Select>\n    <Suppress Path="System">*[System[(EventID=3)]]</Suppress>\n'
            '  </Query>\n</QueryList>')  # fmt: skip
    query_file = tmp_path / "filter.xml"
    query_file.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    result = CliRunner(env=env).invoke(cli, ["log", "query", "--query-file", str(query_file), "--logs-dir", str(store.directory), "--json"])
    assert result.exit_code == 0, result.output
    got = [(item["channel"], item["record_id"]) for item in map(json.loads, result.output.splitlines())]
    application = [e for e in stored["Application"] if e.level in (1, 2)]
    system = [e for e in stored["System"] if e.keywords & 16 and e.event_id != 3]
    wanted = sorted(application + system, key=lambda e: (e.time_created, e.channel != "Application", e.record_id))
    assert got == [(e.channel, e.record_id) for e in wanted]
    assert {channel for channel, _ in got} == {"Application", "System"}
    # the same list given to one log selects only what its Paths say for that log
    one = CliRunner(env=env).invoke(cli, ["log", "query", "System", "--query-file", str(query_file), "--logs-dir", str(store.directory), "--json"])
    assert [json.loads(line)["record_id"] for line in one.output.splitlines()] == [e.record_id for e in system]


@pytest.mark.parametrize("text", [text for text in EVENT_VIEWER if "timediff" not in text])
def test_log_query_takes_event_viewers_filter_xml(logs: tuple[LogStore, dict[str, list[StoredEvent]], Path], text: str) -> None:
    """Pasted from Event Viewer's XML tab into ``log query --query`` (timediff's filters are in the
    table above: the command measures from the clock, not from a fixed now)."""
    from openetw.cli.main import cli

    store, stored, _ = logs
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    result = CliRunner(env=env).invoke(cli, ["log", "query", "Application", "--query", text, "--logs-dir", str(store.directory), "--json"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["record_id"] for line in result.output.splitlines()] == _by_evaluator(text, stored["Application"], "Application")


def test_the_etl_queries_select_something_and_not_everything(etl_trace: Any) -> None:
    """The .etl half of the table is not vacuous either: its events carry the fields and facts
    the queries test."""
    _, trees = etl_trace
    partial = [text for text in QUERIES if 0 < len(_etl_evaluator(text, trees)) < len(trees)]
    assert len(partial) >= len(QUERIES) - 8  # '*', the last 12 hours, and what an .etl has not (channel, computer, user)
