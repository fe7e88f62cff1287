"""The compiled delivery loop (``openetw._native._dispatch``) against the pure loop of the plan.

Over every corpus .etl, the busiest provider's callbacks and a second provider's see the same
records (bytes, header fields, a parsed property), in the same order, with the same counts, on
both engines; and the cases the compiled loop hands back to Python — a callback that raises, a
trace stopped from a callback, records a callback keeps, no object reuse — behave the same.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import openetw._native as native
from openetw.consumer import EtlIndex, Provider, UserTrace
from openetw.consumer._engine import plan
from tests.native import cases

_dispatch = native.module("_dispatch")
if _dispatch is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled delivery loop must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_dispatch is None, reason=f"compiled delivery loop not active: {native.reason()}")

Seen = list[tuple[Any, ...]]


def _busiest(path: Path, count: int = 2) -> list[str]:
    index = EtlIndex.open(path)
    index.ensure_built()
    codes = np.concatenate([segment.records["provider"] for segment in index.segments()])
    codes = codes[codes >= 0]
    ranked = np.argsort(-np.bincount(codes), kind="stable")[:count] if len(codes) else []
    return [str(index.providers[int(code)]) for code in ranked]


def _run(
    path: Path, guids: list[str], compiled: bool, monkeypatch: pytest.MonkeyPatch, *, on_event: Callable[..., Any] | None = None,
    stop_after: int = -1, **options: Any,
) -> tuple[Seen, dict[str, Any]]:  # fmt: skip
    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    seen: Seen = []
    trace = UserTrace(files=[path], manifests=None, **options)
    for number, guid in enumerate(guids):
        provider = Provider(guid)

        def record_it(record: Any, context: Any, number: int = number) -> None:
            # Every 8th record is parsed (a parser held by the context, as well as the record);
            # the others are not: the two ways a record is taken over for the next one.
            value = None
            if len(seen) % 8 == 0:
                parser = context.parser_for(record)
                names = parser.schema.property_names
                value = repr(parser.try_parse(names[0])) if names else None
            seen.append((number, zlib.crc32(record.raw), record.timestamp, record.pid, zlib.crc32(record.user_data), value))
            if on_event is not None:
                on_event(record, context, trace)
            if len(seen) == stop_after:
                trace.stop()

        provider.add_on_event_callback(record_it)
        trace.enable(provider)
    trace.start()
    return seen, trace.query_stats()


@pytest.mark.parametrize("path", cases.corpus_files(), ids=lambda path: path.name)
def test_every_corpus_file_delivers_the_same_on_both_loops(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guids = _busiest(path)
    if not guids:
        pytest.skip("no provider in this file")
    compiled, compiled_stats = _run(path, guids, True, monkeypatch)
    pure, pure_stats = _run(path, guids, False, monkeypatch)
    assert compiled == pure
    assert compiled_stats == pure_stats
    assert compiled_stats["events_handled"] >= len(compiled) > 0


DIAGHUB = cases.CORPUS / "perfview" / "diaghub-dotnetcore3.1-win-x64-diagsession" / "diaghub.etl"
BUSIEST = "b3e675d7-2554-4f18-830b-2762732560de"


def test_a_raising_callback_is_reported_and_delivery_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def raise_every_seventh(record: Any, context: Any, trace: Any) -> None:
        if record.timestamp % 7 == 0:
            raise ValueError("seventh")

    results = []
    for compiled in (True, False):
        seen, stats = _run(DIAGHUB, [BUSIEST], compiled, monkeypatch, on_event=raise_every_seventh, stop_after=5000)
        results.append((seen, stats))
        assert stats["callback_errors"] > 0
    assert results[0] == results[1]


def test_a_trace_stopped_from_a_callback_stops_at_the_same_record(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = _run(DIAGHUB, [BUSIEST], True, monkeypatch, stop_after=1000)
    pure = _run(DIAGHUB, [BUSIEST], False, monkeypatch, stop_after=1000)
    assert len(compiled[0]) == 1000
    assert compiled == pure
    assert compiled[1]["events_not_processed"] > 0


@pytest.mark.parametrize("reuse", [True, False], ids=["reuse", "no-reuse"])
def test_kept_records_stay_what_they_were(reuse: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[Any, bytes]] = []

    def keep_some(record: Any, context: Any, trace: Any) -> None:
        if record.timestamp % 13 == 0:
            kept.append((record, record.raw))

    seen, _ = _run(DIAGHUB, [BUSIEST], True, monkeypatch, on_event=keep_some, stop_after=5000, reuse_objects=reuse)
    assert kept and all(record.raw == raw for record, raw in kept)
    assert len({id(record) for record, _ in kept}) == len(kept)
    pure, _ = _run(DIAGHUB, [BUSIEST], False, monkeypatch, stop_after=5000, reuse_objects=reuse)
    assert seen == pure


def test_the_compiled_loop_checks_its_columns() -> None:
    assert _dispatch is not None
    ints = np.zeros(4, dtype=np.int64)
    with pytest.raises(TypeError):
        _dispatch.deliver([], [], np.zeros(4, dtype=np.int32), ints, ints, ints, ints, ints, 0, 4, None, None, None, None, 0, True, None, -1, ints[:1].copy())
    with pytest.raises(IndexError):
        _dispatch.deliver([], [], ints, ints, ints, ints, ints, ints, 0, 5, None, None, None, None, 0, True, None, -1, ints[:1].copy())


NET = cases.CORPUS / "perfview" / "net.4.5.2.x64.etl"
SAMPLES = "ce1dbfb4-137e-4da6-87b0-3f59aa102cbc"  # the kernel's samples: every processor's buffers take turns


def test_the_compiled_loop_goes_on_across_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _dispatch is not None
    entered = 0

    def deliver(*args: Any) -> Any:
        nonlocal entered
        entered += 1
        return _dispatch.deliver(*args)

    class Counting:
        pass

    counting = Counting()
    counting.deliver = deliver  # type: ignore[attr-defined]
    monkeypatch.setattr(plan, "_NATIVE", counting)
    calls = 0

    def on_event(record: Any, context: Any) -> None:
        nonlocal calls
        calls += 1

    trace = UserTrace(files=[NET], manifests=None)
    provider = Provider(SAMPLES)
    provider.add_on_event_callback(on_event)
    trace.enable(provider)
    trace.start()
    # The rows alternate between buffers: a loop that stopped at each buffer's end would be
    # entered about once per callback.
    assert calls > 50_000
    assert entered * 50 < calls


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure"])
def test_the_state_a_trace_learns_is_what_its_records_say(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # State records are observed with the schema the plan found for their kind: the processes
    # and images learned are those of observing every record of the file in order.
    from openetw.etl import EtlReader

    monkeypatch.setattr(plan, "_NATIVE", _dispatch if compiled else None)
    trace = UserTrace(files=[NET], manifests=None)
    provider = Provider(SAMPLES)
    provider.add_on_event_callback(lambda record, context: None)
    trace.enable(provider)
    trace.start()
    learned = trace.context.decode_context
    reference = UserTrace(files=[NET], manifests=None).context.decode_context
    with EtlReader(NET) as reader:
        reference.learn(reader.records(time_order=True))
    assert learned.processes == reference.processes
    pids = {info.pid for info in reference.processes} | {0}
    assert sum(len(reference.images(pid)) for pid in pids) > 100
    for pid in pids:
        assert learned.images(pid) == reference.images(pid)
