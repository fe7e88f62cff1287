"""The viewer's full-text index finds exactly what ``needle in text`` over every event's text
finds (same rows, same order), over corpus traces and a synthetic source of 1M events, and
follows a source that grows."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

from openetw.events.decoded import DecodedRecord, decode_record
from openetw.events.registry import build_registry
from openetw.testing import EventRecordBuilder
from openetw.viewer.model import Columns
from openetw.viewer.sources import ViewerSource, event_text, open_file
from openetw.viewer.text_index import TextIndex
from tests.conftest import corpus_path


def _scan(texts: list[str], needle: str) -> np.ndarray:
    """The search as a scan of every event's text (what the index must answer the same)."""
    return np.fromiter((needle in text for text in texts), dtype=bool, count=len(texts))


def _needles(texts: list[str], rng: random.Random, count: int = 40) -> list[str]:
    """Pieces of the texts themselves (across word and field boundaries too), and some found nowhere."""
    out = ["zz-found-nowhere", "=", " ", "ü", "event", "0x"]
    while len(out) < count:
        text = rng.choice(texts)
        if not text:
            continue
        start = rng.randrange(len(text))
        out.append(text[start : start + rng.randint(1, 24)])
    return out


def _kit_events(count: int) -> list[DecodedRecord]:
    registry = build_registry((), installed=False)
    events = []
    for n in range(count):
        record = EventRecordBuilder(f"Kit.Search.Provider{n % 7}", n % 13, level=1 + n % 5, pid=100 + n % 9).add_properties(
            Path=f"C:\\Temp\\Ünïcode {n % 40}", Count=n * 7919, Name=f"Item-{n % 23} done"
        ).pack_tracelogging(f"Step{n % 5}")
        events.append(decode_record(record, registry))
    return events


class _HeldEvents(ViewerSource):
    """A source over decoded events held in a list that may grow (as a live session's)."""

    def __init__(self, events: list[DecodedRecord]) -> None:
        super().__init__("k1", "kit", build_registry((), installed=False))
        self.held = events
        self.ready.set()

    def columns(self) -> Columns:
        columns = Columns.empty()
        count = len(self.held)
        return Columns(**{name: np.zeros(count, dtype=getattr(columns, name).dtype) for name in (
            "time", "level", "provider", "event", "id", "task", "opcode", "keyword", "process", "thread", "cpu", "channel", "user")},
            labels=columns.labels)  # fmt: skip

    def events(self, rows: Iterable[int]) -> Iterator[DecodedRecord]:
        for row in rows:
            yield self.held[row]


def _source_texts(source: ViewerSource) -> list[str]:
    return [event_text(event) for event in source.events(range(len(source.columns())))]


_DIAGHUB = ("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")


@pytest.mark.parametrize("parts", [("etl", "tx", "HTTP_Server.etl"), ("evtx", "system.evtx"), _DIAGHUB])
def test_a_search_over_a_corpus_trace_finds_what_a_scan_of_every_text_finds(parts: tuple[str, ...]) -> None:
    from openetw.viewer.sources import default_registry

    source = open_file("f1", str(corpus_path(*parts)), default_registry())
    try:
        assert source.ready.wait(120) and source.error is None
        index = source.text_index(wait=120)
        assert index is not None
        texts = list(index)
        rng = random.Random(7)
        assert len(texts) == len(source.columns()) > 100
        for row in rng.sample(range(len(texts)), 100):  # each row holds its event's text
            assert texts[row] == event_text(next(source.events([row])))
        for needle in _needles(texts, rng):
            wanted = _scan(texts, needle.lower())
            found = source.search(needle.upper())  # case-insensitive: the source lowercases it
            assert found.dtype == bool and len(found) == len(texts)
            assert np.array_equal(found, wanted), needle
    finally:
        source.close()


def test_a_search_over_a_million_rows_finds_what_a_scan_finds_and_holds_each_text_once() -> None:
    distinct = [event_text(event) for event in _kit_events(600)]
    rng = np.random.default_rng(11)
    rows = 1_000_000
    texts = [distinct[code] for code in rng.integers(0, len(distinct), rows).tolist()]
    for row in range(0, rows, 997):  # texts seen once (a value unique to the event)
        texts[row] = f"{texts[row]} seq={row}"
    some = texts[:100_000]
    tracemalloc.start()  # (slows allocation down: counted over a tenth of the rows)
    try:
        part = TextIndex(some)
        part.freeze()
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert part.distinct == len(set(some))
    assert held < 4 * len(some) + 200 * part.distinct + (1 << 20)  # the codes, and each distinct text once
    index = TextIndex(texts)
    assert len(index) == rows and index.distinct == len(set(texts))
    assert index[123] == texts[123] and index[-1] == texts[-1] and list(index[5:9]) == texts[5:9]
    for needle in [*_needles(distinct, random.Random(3), 10)[5:], "seq=997 ", "seq=1000000"]:
        assert np.array_equal(index.search(needle), _scan(texts, needle)), needle


def test_the_index_follows_a_source_that_grows() -> None:
    kit = _kit_events(60)
    source = _HeldEvents(list(kit[:40]))
    assert source.text_index(wait=60) is not None
    before = source.search("provider3")
    assert np.array_equal(before, _scan(_source_texts(source), "provider3"))
    source.held.extend(kit[40:])  # events that came after the index was built
    after = source.search("PROVIDER3")
    texts = _source_texts(source)
    assert len(after) == 60 and np.array_equal(after, _scan(texts, "provider3"))
    assert after[40:].any()
    index: Any = source.text_index()
    assert len(index) == 60 and list(index) == texts


def test_a_kept_answer_is_extended_only_by_the_texts_added_since() -> None:
    index = TextIndex(["alpha one", "beta two"])
    assert index.search("two").tolist() == [False, True]
    index.extend(["gamma two", "alpha one"])
    assert index.search("two").tolist() == [False, True, True, False]
    index.freeze()
    index.append("two again")  # the table that finds a text's code is built again
    assert index.search("two").tolist() == [False, True, True, False, True] and index.distinct == 4
    assert TextIndex().search("x").tolist() == []


class _Counted(str):
    """A text that counts the needles tested against it."""

    tests = 0

    def __contains__(self, needle: object) -> bool:
        _Counted.tests += 1
        return str.__contains__(self, needle)  # type: ignore[operator]


def test_blocks_without_a_needles_trigrams_are_skipped_and_the_answer_stays_exact() -> None:
    kit = [event_text(event) for event in _kit_events(50)]
    texts = [_Counted(f"{kit[n % 50]} addr=0x{n * 2654435761 % (1 << 40):x} seq={n}") for n in range(20_000)]
    index = TextIndex(texts[:15_000])
    rng = random.Random(5)
    needles = ["seq=12345", "seq=123", "0x", "q=", "é", "ünïcode 3", "addr=0x1", *_needles(texts, rng, 30)]
    for needle in needles:
        assert np.array_equal(index.search(needle), _scan(texts[:15_000], needle)), needle
    index.extend(texts[15_000:])  # blocks made as texts come, the last one partly filled
    wanted = _scan(texts, "seq=16001 ")
    _Counted.tests = 0
    assert np.array_equal(index.search("seq=16001 "), wanted)
    assert _Counted.tests < 1000  # of 20,000 texts: only the blocks that may hold it were tested
    for needle in needles:
        assert np.array_equal(index.search(needle), _scan(texts, needle)), needle
