"""Processing indexed files: decide on whole columns, build only the records someone needs.

With every source indexed, the time window, the providers' enable rules and the filters'
header predicates are evaluated on the index columns at once. A record is built only when a
callback, a predicate on its payload, an iterator or the decode context needs it; every other
record is counted from the columns. The result is the same as streaming every record through
``Dispatcher.deliver``: same callbacks in the same order, same counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from openetw.consumer.dispatch import Dispatcher
from openetw.consumer.index import EtlIndex
from openetw.consumer.provider import Provider
from openetw.consumer.state import state_mask

__all__ = ["IndexedPlan", "admitted_rows", "merged_order"]

# What to do with a row (bits) and how to count a row the dispatcher does not see.
OBSERVE, RUNDOWN, DELIVER, UNMATCHED = 1, 2, 4, 8
HANDLED, FILTERED, NOT_MATCHED, OUTSIDE, STATE_BEFORE = 0, 1, 2, 3, 4
_COUNTED_BY_DISPATCHER = -1


def merged_order(indexes: list[EtlIndex]) -> tuple[np.ndarray, np.ndarray]:
    """(file number, row) of every record of ``indexes`` in merged time order.

    One file keeps its own (reader) order; several are merged by wall-clock time, ties going to
    the earlier file, as ``merge_records`` and ``openetw relog`` merge them.
    """
    if len(indexes) == 1:
        n = len(indexes[0].records)
        return np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    filetimes = np.concatenate([index.records["filetime"] for index in indexes])
    files = np.concatenate([np.full(len(index.records), number, dtype=np.int64) for number, index in enumerate(indexes)])
    rows = np.concatenate([np.arange(len(index.records), dtype=np.int64) for index in indexes])
    order = np.argsort(filetimes, kind="stable")
    return files[order], rows[order]


def _groups(providers: list[Provider]) -> list[list[Provider]]:
    by_guid: dict[object, list[Provider]] = {}
    for provider in providers:
        by_guid.setdefault(provider.guid, []).append(provider)
    return list(by_guid.values())


def _group_column(index: EtlIndex, groups: list[list[Provider]]) -> np.ndarray:
    """The provider group of each row (-1: no enabled provider)."""
    table = np.full(len(index.providers) + 1, -1, dtype=np.int64)  # the extra -1 serves provider -1
    for number, group in enumerate(groups):
        row = index.provider_row(group[0].guid)
        if row is not None:
            table[row] = number
    return table[index.records["provider"]]


def admitted_rows(index: EtlIndex, providers: list[Provider]) -> np.ndarray:
    """Rows some enabled provider's rule admits (all rows when no provider is enabled)."""
    if not providers:
        return np.ones(len(index.records), dtype=bool)
    rows = index.records
    admitted = np.zeros(len(rows), dtype=bool)
    group_of = _group_column(index, _groups(providers))
    for number, group in enumerate(_groups(providers)):
        mine = group_of == number
        for provider in group:
            admitted |= mine & provider.rule_mask(rows)
    return admitted


@dataclass
class _FilePlan:
    actions: np.ndarray
    count_as: np.ndarray
    groups: np.ndarray


class IndexedPlan:
    """What to do with every record of indexed sources, decided up front (see the module doc)."""

    def __init__(self, indexes: list[EtlIndex], dispatcher: Dispatcher) -> None:
        self.indexes = indexes
        self.dispatcher = dispatcher
        self.groups = _groups(dispatcher.providers)
        plans = [self._plan_file(index) for index in indexes]
        files, rows = merged_order(indexes)
        self.files = files
        self.rows = rows
        if len(indexes) == 1:
            plan = plans[0]
            self.actions, self.count_as, self.group = plan.actions, plan.count_as, plan.groups
        else:
            self.actions = np.concatenate([p.actions for p in plans])
            self.count_as = np.concatenate([p.count_as for p in plans])
            self.group = np.concatenate([p.groups for p in plans])
            offsets = np.cumsum([0] + [len(index.records) for index in indexes])[:-1]
            flat = offsets[files] + rows
            self.actions, self.count_as, self.group = self.actions[flat], self.count_as[flat], self.group[flat]

    def _plan_file(self, index: EtlIndex) -> _FilePlan:
        d = self.dispatcher
        rows = index.records
        n = len(rows)
        filetime = rows["filetime"]
        window = d.window
        before = filetime < window.low if window.start is not None else np.zeros(n, dtype=bool)
        after = filetime > window.high if window.end is not None else np.zeros(n, dtype=bool)
        inside = ~before & ~after
        state = state_mask(rows, index.providers)
        group_of = _group_column(index, self.groups)
        matched = group_of >= 0
        admitted = np.zeros(n, dtype=bool)
        needed = np.zeros(n, dtype=bool)
        for number, group in enumerate(self.groups):
            mine = matched & (group_of == number)
            if not mine.any():
                continue
            for provider in group:
                rule = mine & provider.rule_mask(rows)
                admitted |= rule
                needed |= rule & self._needs_record(provider, rows)
        count_as = np.full(n, HANDLED, dtype=np.int8)
        actions = np.zeros(n, dtype=np.int8)
        observe = state & inside & d.learn_state
        actions[observe] |= OBSERVE
        deliver = inside & matched & admitted & needed
        actions[deliver] |= DELIVER
        count_as[deliver] = _COUNTED_BY_DISPATCHER
        count_as[inside & matched & ~admitted] = FILTERED
        unmatched = inside & ~matched
        if d.default_callback is not None or (d.sink is not None and not self.groups):
            actions[unmatched] |= UNMATCHED
            count_as[unmatched] = _COUNTED_BY_DISPATCHER
        else:
            count_as[unmatched] = NOT_MATCHED
        count_as[before & ~state] = OUTSIDE
        count_as[after] = OUTSIDE
        state_before = before & state
        count_as[state_before] = STATE_BEFORE
        actions[state_before] = (OBSERVE if d.learn_state else 0) | (RUNDOWN if d.rundown_callback is not None else 0)
        return _FilePlan(actions, count_as, group_of)

    def _needs_record(self, provider: Provider, rows: np.ndarray) -> np.ndarray:
        """Rows of ``provider`` someone must see as records (callbacks, iterators, payload predicates)."""
        if provider.callbacks or provider.needs_process_name or self.dispatcher.sink is not None:
            return np.ones(len(rows), dtype=bool)
        needed = np.zeros(len(rows), dtype=bool)
        for event_filter in provider.filters:
            if not event_filter.callbacks:
                continue
            mask = event_filter.mask(rows)
            if mask is None:
                return np.ones(len(rows), dtype=bool)
            needed |= mask
        return needed

    def run(self) -> None:
        """Build and deliver the records that need it, in merged time order; count the rest."""
        d = self.dispatcher
        stats = d.stats
        positions = np.flatnonzero(self.actions)
        loaders = [index.loader() for index in self.indexes]
        try:
            streams = [self._stream(loader, number, positions) for number, loader in enumerate(loaders)]
            done = len(self.actions)
            actions = self.actions[positions].tolist()
            groups = self.group[positions].tolist()
            if len(streams) == 1:
                records = streams[0]
            else:
                records = (next(streams[file]) for file in self.files[positions].tolist())
            observe_state = d.observe
            deliver = d.deliver_admitted
            # A group of one provider without an executable filter needs no second look.
            simple = [group if len(group) == 1 and not group[0].needs_process_name else None for group in self.groups]
            for position, action, group, record in zip(positions.tolist(), actions, groups, records):
                if d.stopping:
                    done = position
                    break
                if action == DELIVER:
                    providers = simple[group]
                    if providers is not None:
                        deliver(record, providers)
                        continue
                if action & OBSERVE:
                    observe_state(record)
                if action & RUNDOWN:
                    self._rundown(record)
                if action & DELIVER:
                    admitted = d.admitted_of(record, self.groups[group])
                    if admitted:
                        deliver(record, admitted)
                    else:
                        stats.events_filtered += 1
                elif action & UNMATCHED:
                    d.deliver_unmatched(record)
        finally:
            for loader in loaders:
                loader.close()
        counted = self.count_as[:done]
        tally = np.bincount(counted[counted >= 0].astype(np.int64), minlength=5)
        if d.sink is None:
            stats.events_handled += int(tally[HANDLED])
        stats.events_filtered += int(tally[FILTERED])
        stats.events_unmatched += int(tally[NOT_MATCHED])
        stats.events_outside_window += int(tally[OUTSIDE])
        stats.state_events_before_window += int(tally[STATE_BEFORE])
        stats.events_read += done
        stats.events_not_processed += len(self.actions) - done

    def _stream(self, loader: object, number: int, positions: np.ndarray) -> Iterator[object]:
        mine = positions[self.files[positions] == number]
        return loader.records(self.rows[mine])  # type: ignore[attr-defined, no-any-return]

    def _rundown(self, record: object) -> None:
        d = self.dispatcher
        callback = d.rundown_callback
        if callback is None:
            return
        try:
            callback(record, d.context)
        except Exception as error:  # noqa: BLE001 - user code: reported, processing goes on
            d.callback_failed(error, record)
