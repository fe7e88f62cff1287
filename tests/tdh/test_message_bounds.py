"""A message is bounded before it is built: past MAX_MESSAGE_CHARS its pieces are only counted,
and an insert used many times is formatted once (work and memory follow the limit and the
message as written, not what it would expand to)."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from openetw.manifest import messages
from openetw.manifest.messages import MAX_INSERT_WIDTH, MAX_MESSAGE_CHARS, TruncatedMessage
from openetw.tdh import format as tdh_format

INSERTS = 200_000
MESSAGE = "%1!1024s!" * INSERTS  # each insert clamped to 1024 characters: 205 MB if built whole
EXPANDED = INSERTS * MAX_INSERT_WIDTH


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counting(*args: Any) -> Any:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("render", ["tdh", "manifest"])
def test_many_wide_inserts_cost_the_limit_only(render: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if render == "tdh":
        calls = _counted(monkeypatch, tdh_format, "_printf")
        fill = lambda: tdh_format.format_message(MESSAGE, ["x"])  # noqa: E731
    else:
        calls = _counted(monkeypatch, messages, "_format_insert")
        fill = lambda: messages.format_message(MESSAGE, ["x"])  # noqa: E731
    tracemalloc.start()
    try:
        text = fill()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(text, TruncatedMessage) and text.cut == EXPANDED - MAX_MESSAGE_CHARS
    assert text.endswith("[message truncated]") and len(text) == MAX_MESSAGE_CHARS + len(messages.TRUNCATION_MARK)
    assert text[:MAX_INSERT_WIDTH] == "x".rjust(MAX_INSERT_WIDTH)
    assert len(calls) == 1  # formatted once, used 200,000 times
    assert peak < 64 << 20 < EXPANDED  # the message as written and its pieces, not 205 MB


def test_a_bounded_message_reads_as_before() -> None:
    assert tdh_format.format_message("%1 and %2%n%1!5d!", [7, "b"]) == "7 and b\n    7"
    assert messages.format_message("%1 and %2%n%1!5d!", [7, "b"]) == "7 and b\n    7"
    exact = "y" * MAX_MESSAGE_CHARS
    assert not isinstance(tdh_format.format_message("%1", [exact]), TruncatedMessage)
    over = tdh_format.format_message("%1%1", [exact])
    assert isinstance(over, TruncatedMessage) and over.cut == MAX_MESSAGE_CHARS and over.startswith(exact)
