"""The indexed plan's helpers: rows numbered by lane."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.consumer._engine.plan import _dense_numbers, _lanes

_ROWS = st.lists(
    st.tuples(st.integers(-2, 4), st.one_of(st.integers(0, 30), st.just(-1), st.integers(-5000, -3)), st.integers(0, 255)), min_size=1, max_size=60,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_ROWS)
def test_rows_share_a_lane_exactly_when_route_kind_and_header_type_agree(rows: list[tuple[int, int, int]]) -> None:
    route, kinds, header_types = (np.asarray(column, dtype=np.int64) for column in zip(*rows, strict=True))
    numbers, keys = _lanes(route, kinds, header_types)
    assert sorted(set(numbers.tolist())) == list(range(len(keys)))  # dense
    assert [keys[number] for number in numbers.tolist()] == rows


def test_no_rows_no_lanes() -> None:
    empty = np.zeros(0, dtype=np.int64)
    numbers, keys = _lanes(empty, empty, empty)
    assert len(numbers) == 0 and keys == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 40), st.integers(0, 2**62), st.sampled_from([5, 5 + 65521, 5 + 2 * 65521])), max_size=80))
def test_kinds_are_numbered_densely_and_alike_when_equal(keys: list[int]) -> None:
    numbers, count = _dense_numbers(np.asarray(keys, dtype=np.int64))
    assert count == len(set(keys))
    assert sorted(set(numbers.tolist())) == list(range(count))
    pairs = set(zip(keys, numbers.tolist(), strict=True))
    assert len(pairs) == count  # one number per key, one key per number
