"""Records and parsers a callback keeps stay those of their own event.

The per-event loop takes over the record (and ``parser_for`` the parser) of the event before
when nothing else holds it: whatever a callback keeps, in any way, must not change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from openetw.consumer import Provider, UserTrace
from openetw.manifest import load_manifest
from tests.conftest import corpus_path
from tests.consumer.helpers import KERNEL_PROCESS_MANIFEST, corpus_etl

PROCESS_ETL = ("tx", "Process.etl")
DIAGHUB = ("perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")
IMAGE_ID = "b3e675d7-2554-4f18-830b-2762732560de"


def facts(record: Any, parser: Any, prop: str) -> tuple[Any, ...]:
    return (record.id, record.opcode, record.timestamp, record.pid, bytes(record.user_data), parser.try_parse(prop))


def run(parts: tuple[str, ...], provider_name: str, callback: Callable[[Any, Any], None]) -> None:
    manifests = [load_manifest(corpus_path(*KERNEL_PROCESS_MANIFEST)).manifest]
    trace = UserTrace(files=[corpus_etl(*parts)], manifests=manifests)
    provider = Provider(provider_name)
    provider.add_on_event_callback(callback)
    trace.enable(provider)
    trace.start()


CASES = [(PROCESS_ETL, "Microsoft-Windows-Kernel-Process", "ProcessID"), (DIAGHUB, IMAGE_ID, "ImageSize")]


@pytest.mark.parametrize(("parts", "provider_name", "prop"), CASES, ids=["Process.etl", "diaghub.etl"])
def test_kept_records_and_parsers_keep_their_event(parts: tuple[str, ...], provider_name: str, prop: str) -> None:
    seen: list[tuple[Any, ...]] = []
    run(parts, provider_name, lambda record, context: seen.append(facts(record, context.parser_for(record), prop)))
    assert len(seen) > 1000

    kept_records: dict[int, Any] = {}
    kept_parsers: dict[int, Any] = {}
    header_read: list[int] = []
    count = 0

    def keeping(record: Any, context: Any) -> None:
        nonlocal count
        n = count
        count += 1
        if n % 4 == 1:
            header_read.append(record.tid)  # the header unpacked, then the record let go
        if n % 3 == 0:
            kept_records[n] = record
        if n % 5 == 0:
            kept_parsers[n] = context.parser_for(record)  # the parser (and through it the record) kept
        elif n % 7 == 0:
            context.parser_for(record).schema  # noqa: B018 - a parser that made its schema
        elif n % 2 == 0:
            context.parser_for(record).try_parse(prop)

    run(parts, provider_name, keeping)
    assert count == len(seen)
    for n, record in kept_records.items():
        assert facts(record, record_parser(record, kept_parsers.get(n)), prop)[:5] == seen[n][:5]
    for n, parser in kept_parsers.items():
        assert parser.record is kept_records.get(n, parser.record)
        assert facts(parser.record, parser, prop) == seen[n]
    assert len({id(record) for record in kept_records.values()}) == len(kept_records)
    assert len({id(parser) for parser in kept_parsers.values()}) == len(kept_parsers)


def record_parser(record: Any, parser: Any) -> Any:
    class _NoParser:
        def try_parse(self, name: str) -> None:
            return None

    return parser if parser is not None else _NoParser()


def test_header_fields_of_every_event_while_records_are_taken_over() -> None:
    # Nothing kept: each event's record may be the one before, taken over. Its header fields
    # must be this event's, whether or not the event before had unpacked its header.
    seen: list[tuple[Any, ...]] = []
    run(PROCESS_ETL, "Microsoft-Windows-Kernel-Process", lambda record, context: seen.append(facts(record, context.parser_for(record), "ProcessID")))
    again: list[tuple[Any, ...]] = []
    count = 0

    def alternating(record: Any, context: Any) -> None:
        nonlocal count
        count += 1
        if count % 2:
            again.append((record.id, record.opcode, record.timestamp, record.pid, bytes(record.user_data), None))
        else:
            again.append((None, None, None, None, None, context.parser_for(record).try_parse("ProcessID")))

    run(PROCESS_ETL, "Microsoft-Windows-Kernel-Process", alternating)
    assert len(again) == len(seen)
    for n, (mine, reference) in enumerate(zip(again, seen, strict=True)):
        if n % 2 == 0:
            assert mine[:5] == reference[:5]
        else:
            assert mine[5] == reference[5]


@pytest.mark.parametrize("index", [True, False], ids=["indexed", "streamed"])
def test_without_object_reuse_the_same_events_and_values(index: bool) -> None:
    # The path Python 3.14 takes (no reference counts to trust), switched on here on every Python.
    path = corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")
    seen = []
    for reuse in (True, False):
        got: list[tuple[object, ...]] = []
        kept: list[object] = []
        trace = UserTrace(files=[path], manifests=[], index=index, reuse_objects=reuse)
        provider = Provider("b3e675d7-2554-4f18-830b-2762732560de")

        def on_event(record: object, context: object, got: list[tuple[object, ...]] = got, kept: list[object] = kept) -> None:
            got.append((record.raw, context.parser_for(record).try_parse("ImageSize")))  # type: ignore[attr-defined]
            if len(got) % 1000 == 0:
                kept.append(record)

        provider.add_on_event_callback(on_event)
        trace.enable(provider)
        assert trace._prepare().context.reuse_objects is (reuse and sys.implementation.name == "cpython")
        trace.start()
        assert [r.raw for r in kept] == [raw for raw, _ in got[999::1000]]  # type: ignore[attr-defined]
        seen.append(got)
    assert seen[0] == seen[1] and len(seen[0]) == 62341
