"""The compiled tracefs page decoder (``openetw._native._tracefs``) against the pure one
(``kernel/ringbuffer_batch.py``): the same events, columns, counts and page times on the captured
pages, on damaged copies of them, on pages built by hand with every header type and field kind,
and on pages of a live kernel trace."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw import _native as native
from openetw.kernel import KernelEventMapper
from openetw.kernel import ringbuffer_batch as batch
from openetw.kernel.ringbuffer import EventDecoder, FixedLayouts, PageParser
from openetw.kernel.tracefs_format import parse_event_format
from tests.kernel import pages as P
from tests.kernel.conftest import tracefs_root  # noqa: F401 - the fixture the live test takes

_tracefs = native.module("_tracefs")
if _tracefs is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled tracefs decoder must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_tracefs is None, reason=f"compiled tracefs decoder not active: {native.reason()}")

FLAGS = ("process", "thread", "cswitch", "disk_io", "network", "syscall", "file_io", "page_fault")
PARSER = P.captured_parser()

# Every field kind the C decodes: integers of each size and sign, a char area, an integer array,
# raw bytes, __data_loc and __rel_loc strings and bytes, and a dynamic tail.
KINDS_FORMAT = """name: kinds
ID: 901
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:s8 a;\toffset:8;\tsize:1;\tsigned:1;
\tfield:u8 b;\toffset:9;\tsize:1;\tsigned:0;
\tfield:short c;\toffset:10;\tsize:2;\tsigned:1;
\tfield:u32 d;\toffset:12;\tsize:4;\tsigned:0;
\tfield:long e;\toffset:16;\tsize:8;\tsigned:1;
\tfield:char name[8];\toffset:24;\tsize:8;\tsigned:0;
\tfield:u16 ports[2];\toffset:32;\tsize:4;\tsigned:0;
\tfield:__data_loc char[] path;\toffset:36;\tsize:4;\tsigned:0;
\tfield:__rel_loc u8[] blob;\toffset:40;\tsize:4;\tsigned:0;
\tfield:u8 raw[3];\toffset:44;\tsize:3;\tsigned:0;
\tfield:char tail[];\toffset:48;\tsize:0;\tsigned:0;

print fmt: "%d", REC->a
"""
OVERLAP_FORMAT = """name: overlap
ID: 902
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u32 whole;\toffset:8;\tsize:4;\tsigned:0;
\tfield:u16 half;\toffset:8;\tsize:2;\tsigned:0;

print fmt: "%d", REC->whole
"""


@contextmanager
def pure() -> Iterator[None]:
    saved = batch._native
    batch._native = _Pure()  # type: ignore[assignment]
    try:
        yield
    finally:
        batch._native = saved


class _Pure:
    @staticmethod
    def module(name: str) -> None:
        return None


def _decoder(lean: bool) -> EventDecoder:
    formats = list(P.captured_decoder().formats.values())
    formats += [parse_event_format(text, system="test") for text in (KINDS_FORMAT, OVERLAP_FORMAT)]
    return EventDecoder(formats, fields=KernelEventMapper(FLAGS).fields_used() if lean else None)


def _outcome(parser: PageParser, pages: list[bytes], cpu: int, decoder: EventDecoder, fixed: FixedLayouts | None) -> Any:
    out: list[Any] = []
    result = parser.decode_batch(pages, cpu, decoder, out, fixed)
    columns = None
    if result.fixed is not None:
        f = result.fixed
        assert f.kinds.dtype == np.int64 and f.timestamps.dtype == np.int64
        columns = (f.names, f.kinds.tolist(), f.timestamps.tolist(), {k: (v.dtype.str, v.tolist()) for k, v in f.columns.items()}, dict(f.signed), f.events())
    return out, columns, result.discarded, result.unknown, result.damaged, result.page_errors, result.last_timestamps


def assert_alike(pages: list[bytes], cpu: int = 0, parser: PageParser = PARSER) -> None:
    for lean in (False, True):
        decoder = _decoder(lean)
        for fixed in (None, FixedLayouts(decoder, KernelEventMapper(FLAGS).fixed_events())):
            fast = _outcome(parser, pages, cpu, decoder, fixed)
            with pure():
                reference = _outcome(parser, pages, cpu, decoder, fixed)
            assert fast == reference


def _kinds_payload(path: bytes, blob: bytes, tail: bytes, name: bytes = b"abc\0zzzz") -> bytes:
    body = (
        (901).to_bytes(2, "little") + b"\1\0" + (-7).to_bytes(4, "little", signed=True)
        + (-3).to_bytes(1, "little", signed=True) + b"\xfe" + (-2).to_bytes(2, "little", signed=True)
        + (0xDEADBEEF).to_bytes(4, "little") + (-(1 << 40)).to_bytes(8, "little", signed=True) + name
        + (80).to_bytes(2, "little") + (443).to_bytes(2, "little")
    )  # fmt: skip
    dynamic_at = 48 + len(tail)
    loc = (len(path) << 16) | dynamic_at
    rel = (len(blob) << 16) | (dynamic_at + len(path) - 44)
    payload = body + loc.to_bytes(4, "little") + rel.to_bytes(4, "little") + b"xyz\0" + tail + path + blob
    return payload + bytes(-len(payload) % 4)


def test_captured_pages_decode_alike() -> None:
    by_cpu: dict[int, list[bytes]] = {}
    for cpu, page in P.captured_pages():
        by_cpu.setdefault(cpu, []).append(page)
    for cpu, pages in by_cpu.items():
        assert_alike(pages, cpu)
        for page in pages:
            assert_alike([page], cpu)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_captured_pages_decode_alike(data: st.DataObject) -> None:
    captured = P.captured_pages()
    cpu, page = captured[data.draw(st.integers(0, len(captured) - 1))]
    raw = bytearray(page)
    for _ in range(data.draw(st.integers(0, 6))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.sampled_from([len(raw), len(raw) - 1, len(raw) - 3, 64, 20, 15, 0]))
    assert_alike([bytes(raw[:cut]), page], cpu)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("kinds"), st.binary(max_size=12), st.binary(max_size=6), st.binary(max_size=9), st.integers(0, 1 << 20)),
            st.tuples(st.just("overlap"), st.integers(0, 1 << 32 - 1), st.integers(0, 1 << 20)),
            st.tuples(st.just("short"), st.integers(0, 40)),
            st.tuples(st.just("unknown"), st.integers(0, 0xFFFF)),
            st.tuples(st.just("extend"), st.integers(0, 1 << 40)),
            st.tuples(st.just("absolute"), st.integers(0, (1 << 59) - 1)),
            st.tuples(st.just("discarded"), st.integers(1, 5)),
        ),
        max_size=12,
    ),
    st.integers(0, (1 << 62) + 5),
    st.booleans(),
)
def test_pages_of_every_header_type_and_field_kind_decode_alike(items: list[tuple[Any, ...]], start: int, tail_padding: bool) -> None:
    events = []
    for item in items:
        kind = item[0]
        if kind == "kinds":
            events.append(P.data_event(_kinds_payload(item[1].replace(b"\0", b"a") + b"\0", item[2], item[3]), item[4] % (1 << 27)))
        elif kind == "overlap":
            events.append(P.data_event((902).to_bytes(2, "little") + bytes(6) + item[1].to_bytes(4, "little"), item[2] % (1 << 27)))
        elif kind == "short":
            events.append(P.data_event((901).to_bytes(2, "little") + bytes(2 + 4 * (item[1] // 4))))
        elif kind == "unknown":
            events.append(P.data_event(item[1].to_bytes(2, "little") + bytes(6)))
        elif kind == "extend":
            events.append(P.time_extend(item[1]))
        elif kind == "absolute":
            events.append(P.absolute(item[1]))
        else:
            events.append(P.discarded(item[1] * 4))
    try:
        page = P.page(start, *events, tail_padding=tail_padding)
    except (ValueError, OverflowError, AssertionError):
        return
    assert_alike([page, page[:-4], page])


def test_live_pages_decode_alike(tracefs_root: Any) -> None:  # noqa: F811
    from openetw.kernel.classes import tracepoints_for
    from openetw.kernel.tracefs import TracefsInstance

    points = tracepoints_for(FLAGS)
    instance = TracefsInstance.create(f"native_{os.getpid()}", root=tracefs_root, buffer_size_kb=1024)
    try:
        instance.enable(points)
        parser = instance.page_parser()
        decoder = instance.decoder(points, fields=KernelEventMapper(FLAGS).fields_used())
        reader = instance.reader(parser)
        instance.start()
        subprocess.run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do ls / >/dev/null; cat /proc/self/status >/dev/null; done"], check=True)
        pages = reader.read(0.5)
        instance.stop()
        pages += reader.read_now(until_empty=True)
        reader.close()
    finally:
        instance.remove()
    by_cpu: dict[int, list[bytes]] = {}
    for cpu, page in pages:
        by_cpu.setdefault(cpu, []).append(page)
    assert by_cpu, "the live trace read no pages"
    for cpu, cpu_pages in by_cpu.items():
        for lean_decoder in (decoder, instance.decoder(points)):
            for fixed in (None, FixedLayouts(lean_decoder, KernelEventMapper(FLAGS).fixed_events())):
                fast = _outcome(parser, cpu_pages, cpu, lean_decoder, fixed)
                with pure():
                    reference = _outcome(parser, cpu_pages, cpu, lean_decoder, fixed)
                assert fast == reference
