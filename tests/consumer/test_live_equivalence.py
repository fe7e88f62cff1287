"""One session, two ways in: a file + real-time session consumed live, then its file read back,
through the same providers, event filters and predicates: the callbacks see the same events.

Producer processes write a known mix of TraceLogging events (several event names, levels,
keywords and field values, two providers, and a third provider the trace does not enable, which
goes to the default callback). The live trace attaches before the first event is written, so the
session loses nothing in real time and the file holds exactly what was delivered live.

The file trace also starts with the session's logfile header event (EventTrace/Header), as
ProcessTrace gives it on a file; a real-time session does not deliver it (Windows does not
either: "log files contain this event but real-time sessions do not"). It goes to the file
trace's default callback, first, and is compared apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openetw.consumer import EventFilter, Provider, UserTrace
from openetw.consumer import predicates as P
from openetw.controller import Session
from openetw.etl.logfile import parse_logfile_header
from openetw.etl.relog import is_logfile_header_record
from tests.service.harness import Producer, ServiceProcess

MIX = "Contoso.Mix"
OTHER = "Contoso.Other"
UNASKED = "Contoso.Unasked"  # in the session, enabled by no provider of the trace
PER_KIND = 40

# (provider, event name, level, keyword, length of the "pad" text): what every producer writes,
# PER_KIND times each; the fields are "index" (0 .. PER_KIND - 1), "pid" and "pad" ("x" * length).
KINDS = [
    (MIX, "Start", 4, 0x1, 0),
    (MIX, "Tick", 5, 0x2, 1),
    (MIX, "Warn", 3, 0x4, 7),
    (MIX, "Verbose", 5, 0x8, 30),  # a keyword the trace's provider does not ask for
    (MIX, "Unkeyed", 4, 0x0, 4),  # keyword 0: taken unless IGNORE_KEYWORD_0
    (OTHER, "Open", 4, 0x10, 3),
    (OTHER, "Chatter", 5, 0x10, 2),  # above the trace's level for this provider
    (UNASKED, "Stray", 4, 0x1, 5),
]

Seen = tuple[Any, ...]


def _event_name(record: Any, context: Any) -> str | None:
    return context.parser_for(record).schema.event_name  # type: ignore[no-any-return]


# What the file trace's logfile header event adds to its counters (it goes to the default callback).
HEADER_EVENT_COUNTS = {
    "events_read": 1, "events_handled": 1, "events_filtered": 0, "events_unmatched": 0, "callback_errors": 0, "decode_errors": 0,
}


def build_trace(trace: UserTrace, seen: list[Seen], first_pid: int, headers: list[Any]) -> None:
    """The same providers, filters, predicates and callbacks, for the live trace and the file trace."""

    def collect(tag: str) -> Callable[[Any, Any], None]:
        def on_event(record: Any, context: Any) -> None:
            if is_logfile_header_record(record):
                headers.append((len(seen), record, _logger_name(record)))
                return
            parser = context.parser_for(record)
            schema = parser.schema
            fields = tuple(sorted(parser.as_dict().items()))
            seen.append(
                (tag, schema.provider_name, schema.event_name, record.level, record.keyword, fields, record.filetime, record.timestamp)
            )

        return on_event

    mix = Provider(MIX).level(5).any(0x1 | 0x2 | 0x4)
    mix.add_on_event_callback(collect("mix"))
    mix.add_filter(EventFilter(P.property_equals("pad", "x" * 7)).add_on_event_callback(collect("warning")))
    ticks_but_3 = P.and_(P.property_equals("pad", "x"), P.not_(P.property_equals("index", 3)))
    mix.add_filter(EventFilter([0], ticks_but_3).add_on_event_callback(collect("ticks-but-3")))
    first_or_7 = P.or_(P.process_id_is(first_pid), P.property_is("index", 7))
    mix.add_filter(EventFilter(first_or_7).add_on_event_callback(collect("first-producer-or-7")))
    zero = P.all_of([P.id_is(0), P.opcode_is(0), P.property_iequals("pad", "XXXX")])
    mix.add_filter(EventFilter(zero).add_on_event_callback(collect("zero")))
    mix.add_filter(EventFilter(P.none_of([P.id_is(0)])).add_on_event_callback(collect("never")))
    every_fifth_start = lambda r, c: _event_name(r, c) == "Start" and c.parser_for(r).parse("index") % 5 == 0  # noqa: E731
    mix.add_filter(EventFilter(every_fifth_start).add_on_event_callback(collect("start-5")))
    other = Provider(OTHER).level(4)
    other.add_on_event_callback(collect("other"))
    open_events = P.property_contains("pad", "xxx") | ~P.property_equals("index", 0)
    other.add_filter(EventFilter(open_events).add_on_event_callback(collect("other-filter")))
    trace.enable(mix)
    trace.enable(other)
    trace.set_default_event_callback(collect("default"))


def _logger_name(record: Any) -> str:
    payload = record.user_data
    return parse_logfile_header(payload, record.pointer_size, record.timestamp).logger_name


def of_producer(seen: list[Seen], pid: int) -> list[Seen]:
    return [item for item in seen if dict(item[5])["pid"] == pid]


def write_mix(producer: Producer) -> int:
    written = 0
    for provider, event, level, keyword, pad in KINDS:
        written += producer.write(provider, PER_KIND, event=event, level=level, keyword=keyword, pad=pad)
    return written


def test_live_callbacks_see_what_the_file_gives(tmp_path: Path, service: ServiceProcess, producers: Any) -> None:
    output = tmp_path / "both.etl"
    writers: list[Producer] = [producers(), producers()]
    for producer in writers:
        for name in (MIX, OTHER, UNASKED):
            producer.register(name)
    enables = [MIX, OTHER, UNASKED]  # everything goes to the session: the traces filter on their side
    with Session.start("Both", output=output, realtime=True, flush_timer=1, providers=enables) as session:
        live_seen: list[Seen] = []
        live = UserTrace(sessions=["Both"], manifests=[])
        live_headers: list[Any] = []
        build_trace(live, live_seen, writers[0].pid, live_headers)
        errors: list[BaseException] = []
        live.on_error(lambda error, record: errors.append(error))
        live.open()  # attached before the first event: nothing is lost in real time
        runner = threading.Thread(target=live.process)
        runner.start()
        try:
            for producer in writers:
                for name in enables:
                    assert producer.wait_enabled(name)
            written = sum(write_mix(producer) for producer in writers)
        finally:
            final = session.stop()  # consumers get the last buffers, then the end of the session
            runner.join(timeout=20)
            live.stop()
            live.close()
        assert not runner.is_alive()
    assert errors == []
    assert written == 2 * len(KINDS) * PER_KIND
    assert final["events_written"] == written and final["events_lost"] == 0 and final["realtime_buffers_lost"] == 0

    file_seen: list[Seen] = []
    from_file = UserTrace(files=[output], manifests=[])
    file_headers: list[Any] = []
    build_trace(from_file, file_seen, writers[0].pid, file_headers)
    from_file.start()

    streamed_seen: list[Seen] = []  # the same file without its index: records streamed one by one
    streamed = UserTrace(files=[output], manifests=[], index=False)
    build_trace(streamed, streamed_seen, writers[0].pid, [])
    streamed.start()

    assert sorted(live_seen) == sorted(file_seen)
    assert len(live_seen) == len(file_seen)
    assert streamed_seen == file_seen
    for producer in writers:  # each producer's events reach both in the order it wrote them
        assert of_producer(live_seen, producer.pid) == of_producer(file_seen, producer.pid)

    # The expected mix, so that "identical" is not "both empty" or "both wrong".
    tags: dict[str, int] = {}
    for item in file_seen:
        tags[item[0]] = tags.get(item[0], 0) + 1
    producers_count = len(writers)
    assert tags["mix"] == 4 * PER_KIND * producers_count  # Start, Tick, Warn, Unkeyed
    assert tags["warning"] == PER_KIND * producers_count
    assert tags["ticks-but-3"] == (PER_KIND - 1) * producers_count
    assert tags["first-producer-or-7"] == 4 * PER_KIND + 4 * (producers_count - 1)
    assert tags["zero"] == PER_KIND * producers_count
    assert "never" not in tags
    assert tags["start-5"] == (PER_KIND // 5) * producers_count
    assert tags["other"] == PER_KIND * producers_count
    assert tags["other-filter"] == PER_KIND * producers_count
    assert tags["default"] == PER_KIND * producers_count
    assert {item[2] for item in file_seen if item[0] == "default"} == {"Stray"}
    assert {item[2] for item in file_seen if item[0] == "warning"} == {"Warn"}

    live_stats, file_stats = live.query_stats(), from_file.query_stats()
    # The file's header event, delivered before any other event, naming the session; none live.
    assert live_headers == []
    assert [(before, name) for before, _, name in file_headers] == [(0, "Both")]
    assert file_headers[0][1].hook_id == 0
    differences = {
        counter: file_stats[counter] - live_stats[counter]
        for counter in ("events_read", "events_handled", "events_filtered", "events_unmatched", "callback_errors", "decode_errors")
    }
    assert differences == HEADER_EVENT_COUNTS
    assert live_stats["events_read"] == written
    assert file_stats["events_filtered"] == 2 * PER_KIND * producers_count  # Verbose and Chatter
