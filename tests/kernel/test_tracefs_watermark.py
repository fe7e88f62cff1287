"""The tracefs source's watermark waits for a CPU whose last page was partly filled."""

from __future__ import annotations

from openetw.kernel.tracefs_source import LATE_PAGE_ALLOWANCE_NS, TracefsSource


class ScriptedReader:
    """Drains given as lists of (cpu, page); a page is ``(partial, [timestamps])``."""

    def __init__(self) -> None:
        self.watermark = 0
        self.next_pages: list = []

    def read(self, timeout):
        pages, self.next_pages = self.next_pages, []
        return pages

    def is_partial(self, page) -> bool:
        return page[0]


class ScriptedParser:
    def decode_into(self, page, cpu, decoder, out):
        out.extend((ts, cpu, "event", {}) for ts in page[1])
        return 0, 0, 0


def scripted_source() -> tuple[TracefsSource, ScriptedReader]:
    source = TracefsSource("t_watermark", [])
    reader = ScriptedReader()
    source._reader, source._parser, source._decoder = reader, ScriptedParser(), object()  # type: ignore[assignment]
    return source, reader


def drain(source: TracefsSource, reader: ScriptedReader, started: int, pages: list) -> list[int]:
    reader.watermark, reader.next_pages = started, pages
    return [event[0] for event in source.read(0)]


def test_a_partly_read_page_holds_the_watermark_at_its_last_event():
    source, reader = scripted_source()
    assert drain(source, reader, 1_000, [(0, (True, [100, 200])), (1, (False, [150, 900]))]) == [100, 150, 200, 900]
    assert source.watermark == 200  # cpu0 may still hand over events after 200
    assert drain(source, reader, 2_000, [(1, (True, [1_500]))]) == [1_500]
    assert source.watermark == 200  # cpu0 said nothing since: still waiting for it
    drain(source, reader, 3_000, [(0, (False, [250, 2_900]))])
    assert source.watermark == 1_500  # cpu0's page was full: now cpu1's partial page holds it
    drain(source, reader, 4_000, [(1, (False, [3_500]))])
    assert source.watermark == 4_000  # nothing partly read: the drain's start


def test_the_wait_for_an_idle_cpu_is_bounded():
    source, reader = scripted_source()
    drain(source, reader, 1_000, [(0, (True, [500]))])
    assert source.watermark == 500
    late = 500 + LATE_PAGE_ALLOWANCE_NS + 5_000
    drain(source, reader, late, [])
    assert source.watermark == late - LATE_PAGE_ALLOWANCE_NS
    drain(source, reader, late - 10, [])
    assert source.watermark == late - LATE_PAGE_ALLOWANCE_NS  # never goes back
