"""Column-wise decoding of fixed-layout events (PageParser.decode_batch) against the per-event path."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import TraceDataError
from openetw.kernel import KernelEventMapper
from openetw.kernel.ringbuffer import EventDecoder, FixedLayouts
from openetw.kernel.tracefs_format import parse_event_format

from . import pages as P

PARSER = P.captured_parser()
FLAGS = ("process", "thread", "cswitch", "disk_io", "network", "syscall")

SYS_ENTER_FORMAT = """name: sys_enter
ID: 443
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;

print fmt: "NR %ld", REC->id
"""
NOTE_FORMAT = """name: note
ID: 900
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u16 small;\toffset:8;\tsize:2;\tsigned:1;
\tfield:char text[120];\toffset:10;\tsize:120;\tsigned:0;

print fmt: "%d", REC->small
"""


def _captured_decoder(extra=()):
    formats = list(P.captured_decoder().formats.values())
    formats += [parse_event_format(text, system="test") for text in extra]
    return EventDecoder(formats, fields=KernelEventMapper(FLAGS).fields_used())


def _by_cpu(cpu_pages):
    grouped = {}
    for cpu, raw in cpu_pages:
        grouped.setdefault(cpu, []).append(raw)
    return grouped


def _per_event(pages, cpu, decoder):
    """decode_into page by page; a damaged page is dropped whole, as a reader drops it."""
    out, counts, errors = [], [0, 0, 0], 0
    for raw in pages:
        try:
            found = PARSER.decode_into(raw, cpu, decoder, out)
        except TraceDataError:
            errors += 1
            continue
        counts = [a + b for a, b in zip(counts, found, strict=True)]
    return out, counts, errors


def _check_same(pages, cpu, decoder, fixed_events):
    expected, (discarded, unknown, damaged), errors = _per_event(pages, cpu, decoder)
    fixed = FixedLayouts(decoder, fixed_events)
    out = []
    result = PARSER.decode_batch(pages, cpu, decoder, out, fixed)
    columns = result.fixed.events() if result.fixed is not None else []
    assert out == [e for e in expected if e[2] not in fixed.names]
    assert columns == [e for e in expected if e[2] in fixed.names]
    assert (result.discarded, result.unknown, result.damaged, result.page_errors) == (discarded, unknown, damaged, errors)
    plain = []
    assert PARSER.decode_batch(pages, cpu, decoder, plain).fixed is None
    assert plain == expected
    return result, expected


def test_captured_pages_decode_the_same_column_wise():
    decoder = _captured_decoder()
    total = 0
    for cpu, pages in _by_cpu(P.captured_pages()).items():
        result, expected = _check_same(pages, cpu, decoder, {"sys_exit": ("ret",)})
        assert result.fixed is not None and result.fixed.cpu == cpu
        assert list(result.fixed.timestamps) == sorted(result.fixed.timestamps)
        total += len(result.fixed)
        assert result.last_timestamps[-1] == expected[-1][0]
    assert total == 808  # every sys_exit of the captured pages


def _enter(event_id: int, pid: int = 7) -> bytes:
    return struct.pack("<HBBiq6Q", 443, 0, 0, pid, event_id, *range(6))


def _exit(ret: int, pid: int = 7) -> bytes:
    return struct.pack("<HBBiqq", 442, 0, 0, pid, 0, ret)


def _note(small: int) -> bytes:
    return struct.pack("<HBBih120s2x", 900, 0, 0, 9, small, b"hello")


def test_hand_built_pages_with_clock_events_padding_and_damage():
    decoder = _captured_decoder([SYS_ENTER_FORMAT, NOTE_FORMAT])
    exit_id = decoder.by_name["sys_exit"].id
    assert exit_id == 442
    pages = [
        P.page(1_000, P.data_event(_enter(39), 5), P.data_event(_exit(-38), 3), P.time_extend(1 << 30),
               P.data_event(_enter(-1), 2), P.discarded(12, 4), P.data_event(_exit(12345), 1)),
        P.page(5_000_000_000, P.absolute(7_000_000_000), P.data_event(_enter(1)),
               P.data_event(_note(-3), 2),  # 136 bytes: the long form (type_len 0)
               P.data_event(struct.pack("<HBBi", 777, 0, 0, 1)),  # a type no format names
               P.data_event(struct.pack("<HBBi", 443, 0, 0, 1)),  # sys_enter cut short: damaged
               P.data_event(_exit(0), 8), tail_padding=True),
        P.page(9_000_000_000, P.data_event(_exit(1)), struct.pack("<I", 28) + b"\0" * 20),  # runs past the data
        P.page(9_500_000_000, P.data_event(_enter(60), 1), P.data_event(_exit(3), 1)),
    ]
    result, expected = _check_same(pages, 1, decoder, {"sys_enter": ("id",), "sys_exit": ("ret",)})
    assert result.page_errors == 1 and result.unknown == 1 and result.damaged == 1 and result.discarded == 1
    fixed = result.fixed
    assert fixed is not None and fixed.names == ("sys_enter", "sys_exit")
    values = [(name, v) for _, _, name, v in fixed.events()]
    assert values[:4] == [("sys_enter", {"id": 39}), ("sys_exit", {"ret": -38}), ("sys_enter", {"id": -1}), ("sys_exit", {"ret": 12345})]
    assert fixed.columns["id"][2] == 0xFFFFFFFFFFFFFFFF  # the 64 bits of -1
    times = fixed.timestamps.tolist()
    assert times[:4] == [1_005, 1_008, 1_010 + (1 << 30), 1_015 + (1 << 30)]
    assert times[4] == 7_000_000_000
    assert result.last_timestamps == [times[3], 7_000_000_010, None, 9_500_000_002]
    notes = [v for _, _, name, v in expected if name == "note"]
    assert notes and notes[0]["small"] == -3 and notes[0]["text"] == "hello"


def test_fixed_layouts_take_only_known_events_with_integer_fields():
    decoder = _captured_decoder([SYS_ENTER_FORMAT, NOTE_FORMAT])
    fixed = FixedLayouts(decoder, {"sys_exit": ("ret",), "note": ("small", "text"), "missing": ("x",)})
    assert fixed.names == ("sys_exit",)
    assert list(fixed.kind_of(np.array([442, 900, 443, 70000]))) == [0, -1, -1, -1]
    assert not FixedLayouts(decoder, {})


def test_a_batch_of_no_pages_or_only_padding():
    decoder = _captured_decoder()
    fixed = FixedLayouts(decoder, {"sys_exit": ("ret",)})
    out = []
    assert PARSER.decode_batch([], 0, decoder, out, fixed).fixed is None
    result = PARSER.decode_batch([P.page(5, tail_padding=True), b"short"], 0, decoder, out, fixed)
    assert result.fixed is None and out == [] and result.page_errors == 1
    assert result.last_timestamps == [None, None]


@pytest.mark.parametrize("cut", [4096 - 8, 100])
def test_a_page_shorter_than_its_commit_is_dropped(cut):
    decoder = _captured_decoder()
    raw = P.page(1, *[P.data_event(_exit(n)) for n in range(100)])
    good = P.page(2, P.data_event(_exit(5)))
    broken = struct.pack("<QQ", 1, 4096) + raw[16:cut]
    out = []
    result = PARSER.decode_batch([broken, good], 0, decoder, out, FixedLayouts(decoder, {"sys_exit": ("ret",)}))
    assert result.page_errors == 1
    assert result.fixed is not None and result.fixed.events() == [(2, 0, "sys_exit", {"ret": 5})]


def test_a_page_time_out_of_range_is_dropped_as_damage():
    decoder = _captured_decoder()
    out = []
    result = PARSER.decode_batch([P.page(1 << 63, P.data_event(_exit(1))), P.page(7, P.data_event(_exit(2), 1))], 0, decoder, out,
                                 FixedLayouts(decoder, {"sys_exit": ("ret",)}))  # fmt: skip
    assert result.page_errors == 1
    assert result.fixed is not None and result.fixed.events() == [(8, 0, "sys_exit", {"ret": 2})]


_PIECES = st.one_of(
    st.builds(lambda n, d: P.data_event(_enter(n), d), st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, (1 << 27) - 1)),
    st.builds(lambda n, d: P.data_event(_exit(n), d), st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 1000)),
    st.builds(lambda n, d: P.data_event(_note(n), d), st.integers(-(1 << 15), (1 << 15) - 1), st.integers(0, 1000)),
    st.builds(P.time_extend, st.integers(0, 1 << 40)),
    st.builds(P.absolute, st.integers(0, 1 << 50)),
    st.builds(P.discarded, st.sampled_from([4, 12, 60]), st.integers(1, 1000)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1 << 50), st.lists(_PIECES, max_size=40), st.booleans()), min_size=1, max_size=4))
def test_random_pages_decode_the_same_column_wise(spec):
    decoder = _captured_decoder([SYS_ENTER_FORMAT, NOTE_FORMAT])
    pages = []
    for base, pieces, tail in spec:
        while len(b"".join(pieces)) > P.PAGE_SIZE - 32:
            pieces = pieces[:-1]
        pages.append(P.page(base, *pieces, tail_padding=tail))
    _check_same(pages, 0, decoder, {"sys_enter": ("id",), "sys_exit": ("ret",)})


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("size", [1, 2, 4, 8])
@pytest.mark.parametrize("shift", [0, 1, 4])
def test_gathered_integers_at_aligned_and_odd_positions(size, signed, shift):
    from openetw.kernel.ringbuffer_batch import _gather

    values = [0, 1, (1 << (8 * size - 1)) - 1, 1 << (8 * size - 1), (1 << (8 * size)) - 1]
    positions = [shift + 16 * k for k in range(len(values))]
    joined = bytearray(16 * len(values) + 16)
    for position, value in zip(positions, values, strict=True):
        joined[position : position + size] = value.to_bytes(size, "little")
    got = _gather(bytes(joined), np.array(positions, dtype=np.int64), size, signed).tolist()
    top = 1 << (8 * size - 1)
    expected = [(v - 2 * top if signed and v >= top else v) & 0xFFFFFFFFFFFFFFFF for v in values]
    assert got == expected
