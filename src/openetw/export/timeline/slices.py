"""Start/Stop pairing and the reorder buffer that keeps the timeline in time order.

Pairing (TraceEvent's rule): a Start (opcode 1) and a Stop (opcode 2) pair when they have the
same provider, task, process and activity id; records without an activity id pair per thread
instead. A second Start of an open key replaces the first (the first is lost: it becomes an
instant), and a Stop without a Start is an instant. The parent of a span is the span whose
activity id is the Start's related activity id (a flow from parent to child).

A span is known only when its Stop comes, but it must appear where it began: items wait in a
heap keyed by ``(ts, record position)`` until every span that began before them has ended.
``limit`` bounds the wait: when that many items wait, the oldest open slices are committed as
async slices (their begin given out now, their end when the Stop comes), so memory stays flat
whatever the trace and no pair is lost.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from openetw.export.timeline.model import Instant, Item, Slice, SliceBegin, SliceEnd

__all__ = ["Pairing", "pair_key"]

_KEPT_ACTIVITIES = 4096
_KEPT_PER_THREAD = 32
_ZERO = bytes(16)


def pair_key(provider: bytes | None, task: int, pid: int, tid: int, activity: bytes | None) -> tuple[Any, ...]:
    """What a Start and its Stop share: provider, task, process and activity id (thread without one)."""
    if activity is None or activity == _ZERO:
        return (provider, task, pid, "thread", tid)
    return (provider, task, pid, activity)


class Pairing:
    """Turns Starts, Stops and other items into the timeline's ordered stream (``emit``)."""

    def __init__(self, emit: Callable[[Item], None], *, limit: int = 1 << 16) -> None:
        self._emit = emit
        self._limit = limit
        self._open: dict[tuple[Any, ...], Slice] = {}
        self._open_heap: list[tuple[tuple[int, int], int, Slice]] = []
        # items waiting, in (ts, position, arrival) order: those that came in order in a queue,
        # the others (a sample given out after its stack) in a heap; the next is the least head
        self._waiting: list[tuple[int, int, int, Item]] = []
        self._queue: deque[tuple[int, int, int, Item]] = deque()
        self._tie = 0
        self._by_activity: OrderedDict[bytes, Slice] = OrderedDict()
        self._thread_slices: dict[int, list[Slice]] = {}
        self._next_id = 1
        self.slices = 0
        self.lost_starts = 0
        self.lost_stops = 0
        self.committed = 0
        self._last = (0, 0)

    # -- the stream ---------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """Whether no slice is open and nothing waits: an item pushed now is given out at once."""
        return not self._open and not self._open_heap and not self._waiting and not self._queue

    def passed(self, key: tuple[int, int]) -> None:
        """Items up to ``key`` were given out past the pairing, which was ``idle`` (as ``push``
        would have given them)."""
        self._last = key

    def push(self, key: tuple[int, int], item: Item) -> None:
        """``item`` at ``key`` = (ts, record position): given out once no open slice began before it."""
        self._last = key
        waiting, queue, heap = self._waiting, self._queue, self._open_heap
        if not heap and not waiting and not queue:
            self._emit(item)
            return
        self._wait(key, item)
        first = queue[0] if queue and (not waiting or queue[0] < waiting[0]) else waiting[0]
        mark = heap[0][0] if heap else None
        if mark is not None and (first[0] > mark[0] or (first[0] == mark[0] and first[1] >= mark[1])):
            # the oldest waiting item did not begin before the oldest open slice: none is given out
            span = heap[0][2]
            if not span.committed and self._open.get(span.pair) is span:
                if len(waiting) + len(queue) > self._limit:
                    self._give_up_oldest()
                return
        self._release()
        if len(waiting) + len(queue) > self._limit:
            self._give_up_oldest()

    def _wait(self, key: tuple[int, int], item: Item) -> None:
        self._tie += 1
        entry = (key[0], key[1], self._tie, item)
        queue = self._queue
        if not queue or entry > queue[-1]:  # the arrival number decides before the item is compared
            queue.append(entry)
        else:
            heapq.heappush(self._waiting, entry)

    def _watermark(self) -> tuple[int, int] | None:
        heap, open_ = self._open_heap, self._open
        while heap and (heap[0][2].committed or open_.get(heap[0][2].pair) is not heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _release(self) -> None:
        mark = self._watermark()
        waiting, queue, emit = self._waiting, self._queue, self._emit
        while waiting or queue:
            from_queue = bool(queue) and (not waiting or queue[0] < waiting[0])
            first = queue[0] if from_queue else waiting[0]
            if mark is not None and (first[0], first[1]) >= mark:
                break
            item = queue.popleft()[3] if from_queue else heapq.heappop(waiting)[3]
            if type(item) is SliceBegin and item.span.lost:
                item = _as_instant(item.span, "Start")
            emit(item)

    def _give_up_oldest(self) -> None:
        while len(self._waiting) + len(self._queue) > self._limit // 2 and self._open_heap:
            mark = self._watermark()
            if mark is None:
                break
            oldest = self._open_heap[0][2]
            oldest.committed, oldest.thread = True, False
            self.committed += 1
            self._release()

    def _lose(self, span: Slice, key: tuple[int, int]) -> None:
        """An open slice that will never be paired: its begin is given out as an instant, or,
        when it was committed already, it ends at ``key`` marked ``{"unpaired": true}``."""
        del self._open[span.pair]
        self.lost_starts += 1
        if not span.committed:
            span.lost = True
            return
        span.end, span.end_key, span.end_args = key[0], key, {"unpaired": True}
        self._wait(key, SliceEnd(span))

    # -- pairs --------------------------------------------------------------------------------
    def start(self, key: tuple[int, int], pair: tuple[Any, ...], ts: int, pid: int, tid: int, category: str, name: str,
              args: dict[str, Any], activity: bytes | None, related: bytes | None, level: int) -> None:  # fmt: skip
        """A Start: opens a slice (replacing, as lost, an open one of the same pair key)."""
        self._last = key
        previous = self._open.get(pair)
        if previous is not None:
            self._lose(previous, key)
        span = Slice(self._next_id, ts, pid, tid, category, name, args, activity, related, key, level)
        self._next_id += 1
        span.pair = pair
        if related is not None and related != _ZERO:
            span.parent = self._by_activity.get(related)
        if activity is not None and activity != _ZERO:
            self._by_activity[activity] = span
            self._by_activity.move_to_end(activity)
            if len(self._by_activity) > _KEPT_ACTIVITIES:
                self._by_activity.popitem(last=False)
        self._open[pair] = span
        if len(self._open) > self._limit:  # Starts that never stop: the oldest are given up
            for oldest in list(itertools.islice(self._open.values(), len(self._open) - self._limit // 2)):
                self._lose(oldest, key)
        heapq.heappush(self._open_heap, (key, span.id, span))
        self._wait(key, SliceBegin(span))

    def open_slice(self, pair: tuple[Any, ...]) -> Slice:
        """The span open for ``pair`` (after ``start``)."""
        return self._open[pair]

    def stop(self, key: tuple[int, int], pair: tuple[Any, ...], ts: int, tid: int, args: dict[str, Any]) -> bool:
        """A Stop: closes its span (``False`` when no Start is open for it)."""
        self._last = key
        span = self._open.pop(pair, None)
        if span is None:
            self.lost_stops += 1
            return False
        span.end, span.end_tid, span.end_args, span.end_key = ts, tid, args, key
        if not span.committed:
            span.thread = tid == span.tid and self._nests(span)
        self.slices += 1
        self._wait(key, SliceEnd(span))
        self._release()
        return True

    def _nests(self, span: Slice) -> bool:
        """Whether ``span`` (closing after every span accepted on its thread) nests with them."""
        accepted = self._thread_slices.setdefault(span.tid, [])
        begin = span.begin_key
        for other in accepted:
            if other.begin_key < begin < other.end_key:
                return False
        accepted.append(span)
        if len(accepted) > _KEPT_PER_THREAD:
            del accepted[0]
        return True

    def finish(self) -> None:
        """The end of the trace: open slices are lost; everything waiting is given out."""
        for span in list(self._open.values()):
            self._lose(span, self._last)
        self._open_heap.clear()
        self._release()


def _as_instant(span: Slice, what: str) -> Instant:
    return Instant(span.ts, span.pid, span.tid, span.category, f"{span.name}/{what}", span.args, span.level)
