"""The compiled timeline encoders (``_native/_timeline.c``) against their pure twins: the same
bytes for every kind of argument value, the same names interned in the same order.

The exported files of corpus traces are pinned byte for byte by ``test_timeline_identical`` (run
on either engine); here the values a trace rarely holds are generated."""

from __future__ import annotations

import enum
import io
import ipaddress
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from openetw._native import module as native_module
from openetw.export.timeline.chrome import ChromeWriter, _args
from openetw.export.timeline.perfetto import _MAX_ARGS, PerfettoWriter

NATIVE = native_module("_timeline")
pytestmark = pytest.mark.skipif(NATIVE is None, reason="compiled core not built (or OPENETW_PURE=1)")


class Color(enum.IntEnum):
    RED = 3


class Text(str):
    pass


VALUES: list[Any] = [
    0, 1, 127, 128, 16383, 16384, 2**32, 2**53, 2**53 + 1, 2**63, 2**64 - 1, 2**64, -1, -(2**53), -(2**53) - 1,
    -(2**63), -(2**63) - 1, True, False, None, 0.0, -0.0, 1.5, 1e300, 5e-324, float("nan"), float("inf"),
    float("-inf"), "", "abc", 'quote " back \\ slash', "\n\r\t\b\f\x00\x01\x1f\x7f", "é中😀", "\ud800 lone",
    "x" * 4096, "y" * 4097, "é" * 5000, b"", b"\x00\xff\x10", b"z" * 3000, bytearray(b"\x01\x02"),
    memoryview(b"\x03\x04"), [], [1, 2, 3], (1, "a", None), list(range(2000)), ["é", "\ud800"], [[1, 2], {"a": 1}],
    [2**60, 1.5, True], {"a": 1}, uuid.UUID(int=0x1234), ipaddress.IPv4Address("10.0.0.1"),
    ipaddress.IPv6Address("::1"), datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))), Color.RED, Text("sub"), object,
]  # fmt: skip


def _argument_sets() -> list[dict[Any, Any]]:
    sets: list[dict[Any, Any]] = [{}, {f"v{index}": value for index, value in enumerate(VALUES)}]
    sets += [{"value": value} for value in VALUES]
    sets += [{"same": value, "again": value, "same2": value} for value in VALUES]  # remembered values, repeated
    sets.append({f"many{index}": index for index in range(_MAX_ARGS + 10)})
    sets.append({"é name \"q\"": 1, "\ud800": 2})
    return sets


def _pure(writer: PerfettoWriter, args: dict[str, Any], new: list[bytes]) -> bytes:
    parts: list[bytes] = []
    writer._annotations(args, parts, new)
    return b"".join(parts)


def _native(writer: PerfettoWriter, args: dict[str, Any], new: list[bytes]) -> bytes:
    assert NATIVE is not None
    found: bytes = NATIVE.perfetto_annotations(args, _MAX_ARGS, writer._arg_prefixes, writer._arg_prefix, new, writer._annotation)
    return found


def test_perfetto_annotations_are_the_pure_writers() -> None:
    pure, native = PerfettoWriter(io.BytesIO()), PerfettoWriter(io.BytesIO())
    for args in _argument_sets() * 2:  # the second round finds every name interned
        pure_new: list[bytes] = []
        native_new: list[bytes] = []
        assert _native(native, args, native_new) == _pure(pure, args, pure_new), args
        assert native_new == pure_new
    assert native._arg_names == pure._arg_names and native._arg_prefixes == pure._arg_prefixes


def test_perfetto_annotations_leave_other_values_to_python() -> None:
    seen: list[Any] = []
    writer = PerfettoWriter(io.BytesIO())

    def other(key: str, value: Any, new: list[bytes]) -> bytes:
        seen.append(value)
        return writer._annotation(key, value, new)

    assert NATIVE is not None
    NATIVE.perfetto_annotations({"a": 5, "b": "text", "c": [1], "d": -1, "e": 1.5, "f": True}, _MAX_ARGS, writer._arg_prefixes,
                                writer._arg_prefix, [], other)  # fmt: skip
    assert seen == [-1, 1.5, True]


def test_chrome_args_are_the_json_encoders() -> None:
    dumps = ChromeWriter(io.StringIO())._dumps
    taken = 0
    for args in [*_argument_sets(), {1: "not a str key"}]:
        assert NATIVE is not None
        text = NATIVE.chrome_args(args)
        if text is not None:
            taken += 1
            assert text == dumps(_args(args)), args
    assert taken >= len(VALUES)  # most values are written by the compiled core


@pytest.mark.parametrize("args", [{"a": 1}, {"a": "é\n"}, {"a": [1, "x"]}, {"a": None, "b": True, "c": 2.5, "d": b"\x01"}])
def test_chrome_args_take_the_common_values(args: dict[str, Any]) -> None:
    assert NATIVE is not None
    assert NATIVE.chrome_args(args) is not None


@pytest.mark.parametrize("value", [2**53 + 1, "y" * 4097, "\ud800", float("nan"), {"a": 1}, [{"a": 1}], uuid.UUID(int=1), Text("s")])
def test_chrome_args_leave_the_rest_to_python(value: Any) -> None:
    assert NATIVE is not None
    assert NATIVE.chrome_args({"a": value}) is None


def _items() -> list[Any]:
    from openetw.export.timeline.model import Counter, Instant, Process, Slice, SliceBegin, SliceEnd, Thread

    items: list[Any] = [Process(7, "app", 0), Thread(7, 8, "app 8", 0)]
    ts = 1_700_000_000_000_000_000
    for index, value in enumerate(VALUES * 3):
        ts += 1000
        items.append(Instant(ts, 7, 8, "cat", f"event {index % 40}", {"value": value, "n": index, "text": f"t{index % 7}"}, 4))
    for index in range(_LOTS):  # past the interned tables' bound: they start over
        ts += 1000
        items.append(Instant(ts, 7, 8, f"cat {index % 3}", f"name {index}", {f"arg {index}": index}, 4))
    span = Slice(1, ts + 1, 7, 8, "cat", "work", {"a": 1}, None, None, (ts + 1, 0))
    span.end, span.end_args = ts + 5, {"b": "done"}
    items += [SliceBegin(span), Counter(ts + 2, 7, "bytes", 12), Counter(ts + 3, 7, "ratio", 0.5), SliceEnd(span)]
    items.append(Instant(-5, 7, 8, "cat", "before 1970", {}, 4))  # a negative timestamp (late: dropped alike)
    return items


_LOTS = 40_000


def test_perfetto_files_are_the_pure_writers(monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.export.timeline import perfetto

    native = io.BytesIO()
    perfetto.write_perfetto(_items(), native)
    monkeypatch.setattr(perfetto, "_NATIVE", None)
    pure = io.BytesIO()
    perfetto.write_perfetto(_items(), pure)
    assert native.getvalue() == pure.getvalue()


def test_the_compiled_encoders_were_built_from_the_current_constants() -> None:
    from openetw.export.timeline import chrome, perfetto

    assert NATIVE is not None
    built = NATIVE.constants()
    tags = (perfetto._PACKET, perfetto._TIMESTAMP, perfetto._TRACK_EVENT, perfetto._INTERNED_DATA, perfetto._ANNOTATION,
            perfetto._UINT, perfetto._STRING_VALUE)  # fmt: skip
    names = ("packet_tag", "timestamp_tag", "track_event_tag", "interned_tag", "annotation_tag", "uint_tag", "string_tag")
    assert [bytes([built[name]]) for name in names] == list(tags)
    assert (built["perfetto_max_text"], built["chrome_max_text"], built["chrome_max_items"]) == (
        perfetto._MAX_TEXT, chrome._MAX_TEXT, chrome._MAX_ITEMS,
    )  # fmt: skip
