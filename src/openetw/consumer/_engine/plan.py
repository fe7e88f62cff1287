"""Processing indexed files: decide on whole columns, build only the records someone needs.

With every source indexed, the time window, the providers' enable rules and the filters'
header predicates are evaluated on the index columns at once. A record is built only when a
callback, a predicate on its payload, an iterator or the decode context needs it; every other
record is counted from the columns. The result is the same as streaming every record through
``Dispatcher.deliver``: same callbacks in the same order, same counts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from openetw._native import module as native_module
from openetw.consumer._engine.lazy import LAZY_CLASSES, lazy_record, reuse_lazy_record
from openetw.consumer._engine.loader import RowLoader
from openetw.consumer._engine.segments import merge_windows
from openetw.consumer.dispatch import Dispatcher
from openetw.consumer.index import EtlIndex
from openetw.consumer.provider import Provider
from openetw.consumer.state import state_mask
from openetw.etl import layouts as L

__all__ = ["IndexedPlan", "admitted_rows", "merged_order"]

# What to do with a row (bits) and how to count a row the dispatcher does not see.
OBSERVE, RUNDOWN, DELIVER, UNMATCHED = 1, 2, 4, 8
HANDLED, FILTERED, NOT_MATCHED, OUTSIDE, STATE_BEFORE = 0, 1, 2, 3, 4
_COUNTED_BY_DISPATCHER = -1
_KIND_CLASSIC, _KIND_EVENT, _KIND_WPP = 3, 5, 6  # index kind codes
_EXTENDED_INFO = 0x0001
_EVENT_HEADER_SIZE = L.EVENT_HEADER.size
_EXTENDED_KEYS = 4096  # bounded, whatever a hostile trace carries
_NATIVE = native_module("_dispatch")  # the compiled twin of the delivery loop's first branch (None: pure)


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


def _schema_kinds(column: Callable[[str], np.ndarray], providers: np.ndarray) -> np.ndarray:
    """A number per row for its kind of event: provider, event id (opcode for classic records,
    hook id for kernel ones), version and header type packed into one non-negative key. Events
    with extended items may carry their own TraceLogging schema: they get ``-3 - n``, ``n``
    numbering them also by opcode, level, task, keyword and channel, and their extended items'
    bytes complete the key. -1: the row's schema is looked up on its own. ``column(name)``
    gives an index column of the rows."""
    kind = column("kind")
    event = kind == _KIND_EVENT
    every_event = bool(event.all())
    if every_event:  # no kernel or classic record: the event id is the identifier
        ident = column("id").astype(np.int64)
        key = providers + 1
    else:
        ident = np.where(event, column("id"), np.where(kind >= _KIND_CLASSIC, column("opcode"), column("hook_id"))).astype(np.int64)
        key = np.where(kind < _KIND_CLASSIC, 0, providers + 1)
    key <<= 40
    key |= ident << 24
    key |= column("version").astype(np.int64) << 8
    key |= column("header_type")
    usable = providers < (1 << 23)
    if not every_event:
        usable &= kind < _KIND_WPP
    extended = usable & event & (column("flags") & _EXTENDED_INFO != 0)
    any_extended = bool(extended.any())
    if not any_extended and usable.all():
        return key  # below 2**63: the provider number is below 2**23
    out = np.full(len(kind), -1, dtype=np.int64)
    plain = usable & ~extended
    out[plain] = key[plain]
    if any_extended:
        descriptor = (
            (column("opcode").astype(np.uint64) << np.uint64(40)) | (column("level").astype(np.uint64) << np.uint64(32))
            | (column("task").astype(np.uint64) << np.uint64(16)) | column("channel").astype(np.uint64)
        )  # fmt: skip
        out[extended] = -3 - _group_numbers(key[extended].astype(np.uint64), descriptor[extended], column("keyword")[extended])
    return out


_HASH_SLOTS = 65521  # a prime: slots of the table that numbers kinds of event


def _dense_numbers(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Non-negative ``keys`` numbered 0..n-1, equal keys alike: (numbers, n). A file has few kinds
    of event: they go to the slots of a small table (no sort) unless two of them share a slot."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64), 0
    slots = keys % _HASH_SLOTS
    owner = np.full(_HASH_SLOTS, -1, dtype=np.int64)
    owner[slots] = keys
    if not np.array_equal(owner.take(slots), keys):  # two kinds in one slot
        _, numbers = np.unique(keys, return_inverse=True)
        numbers = numbers.reshape(-1)
        return numbers, int(numbers.max()) + 1
    number_of = np.cumsum(owner >= 0) - 1
    return number_of.take(slots), int(number_of[-1]) + 1


def _group_numbers(*columns: np.ndarray) -> np.ndarray:
    """A number per row, the same for rows equal in every column (``np.unique(axis=0)``'s
    inverse, without its slow comparisons of whole rows)."""
    order = np.lexsort(columns[::-1])
    changed = np.zeros(len(order), dtype=bool)
    for column in columns:
        ordered = column[order]
        changed[1:] |= ordered[1:] != ordered[:-1]
    numbers = np.empty(len(order), dtype=np.int64)
    numbers[order] = np.cumsum(changed)
    return numbers


def _lanes(route: np.ndarray, kinds: np.ndarray, header_types: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Rows numbered densely by (route, kind of event, header type): the numbers, and the three
    values of each number. Through a table of every combination when that is small, else a sort."""
    if not len(route):
        return np.zeros(0, dtype=np.int64), []
    low, high = int(kinds.min()), int(kinds.max())
    routes = int(route.max()) + 3  # route -2 is the lowest
    code = ((kinds - low) * 256 + header_types) * routes + (route + 2)
    size = (high - low + 1) * 256 * routes
    if size <= 2 * len(code) + (1 << 16):
        present = np.zeros(size, dtype=bool)
        present[code] = True
        codes = np.flatnonzero(present)
        number_of = np.cumsum(present) - 1
        numbers = number_of[code]
    else:
        codes, numbers = np.unique(code, return_inverse=True)
    keys = []
    for value in codes.tolist():
        rest, lane_route = divmod(value, routes)
        kind, header_type = divmod(rest, 256)
        keys.append((lane_route - 2, kind + low, header_type))
    return numbers.reshape(-1), keys


def _groups(providers: list[Provider]) -> list[list[Provider]]:
    by_guid: dict[object, list[Provider]] = {}
    for provider in providers:
        by_guid.setdefault(provider.guid, []).append(provider)
    return list(by_guid.values())


def _group_column(index: EtlIndex, groups: list[list[Provider]], provider_column: np.ndarray | None = None) -> np.ndarray:
    """The provider group of each row (-1: no enabled provider)."""
    table = np.full(len(index.providers) + 1, -1, dtype=np.int64)  # the extra -1 serves provider -1
    for number, group in enumerate(groups):
        row = index.provider_row(group[0].guid)
        if row is not None:
            table[row] = number
    groups_of: np.ndarray = table[index.records["provider"] if provider_column is None else provider_column]
    return groups_of


class _Columns:
    """Index rows seen column by column, each column copied out contiguous once: the rows are
    wide and packed, so a pass over one field of them reads them all."""

    __slots__ = ("rows", "_copies")

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows
        self._copies: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def copied(self, name: str) -> np.ndarray | None:
        """Column ``name`` if it was copied out already."""
        return self._copies.get(name)

    def __getitem__(self, name: str) -> np.ndarray:
        found = self._copies.get(name)
        if found is None:
            found = self._copies[name] = np.ascontiguousarray(self.rows[name])
        return found


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


def run_indexed(indexes: list[EtlIndex], dispatcher: Dispatcher) -> None:
    """Deliver indexed files a window of blocks at a time (``merge_windows``): memory follows a
    block, not the files. One file's blocks after the time window are counted unread."""
    stats = dispatcher.stats
    high = dispatcher.window.high if dispatcher.window.end is not None else None
    for window in merge_windows([index.segments() for index in indexes]):
        count = sum(len(segment) for segment in window)
        if dispatcher.stopping:
            stats.events_not_processed += count
            continue
        summary = window[0].summary if len(window) == 1 else None
        if high is not None and summary is not None and summary["filetime"][0] > high:
            stats.events_read += count
            stats.events_outside_window += count
            continue
        IndexedPlan(window, dispatcher).run()  # type: ignore[arg-type]


class IndexedPlan:
    """What to do with every record of indexed sources, decided up front (see the module doc)."""

    def __init__(self, indexes: list[EtlIndex], dispatcher: Dispatcher) -> None:
        self.indexes = indexes
        self.dispatcher = dispatcher
        self.groups = _groups(dispatcher.providers)
        self._columns = [_Columns(index.records) for index in indexes]
        plans = [self._plan_file(index, columns) for index, columns in zip(indexes, self._columns, strict=True)]
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

    def _plan_file(self, index: EtlIndex, rows: _Columns) -> _FilePlan:
        d = self.dispatcher
        n = len(rows)
        filetime = rows["filetime"]
        window = d.window
        before = filetime < window.low if window.start is not None else np.zeros(n, dtype=bool)
        after = filetime > window.high if window.end is not None else np.zeros(n, dtype=bool)
        inside = ~before & ~after
        state = state_mask(rows, index.providers)
        group_of = _group_column(index, self.groups, rows["provider"])
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
                needed |= rule & self._needs_record(provider, index.records)  # filters' own masks see the rows
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
        loaders: list[RowLoader] = [index.loader() for index in self.indexes]
        done = len(self.actions)
        try:
            stopped_at = self._deliver(positions, loaders)
            if stopped_at is not None:
                done = stopped_at
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

    def _selected_columns(self, positions: np.ndarray) -> tuple[Callable[[str], np.ndarray], np.ndarray]:
        """``column(name)``: the index column ``name`` of the rows at ``positions`` (merged
        order), made contiguous; and their provider numbers in one table of every file's
        providers. Only the columns asked for are gathered (index rows are wide and packed)."""
        files, rows = self.files[positions], self.rows[positions]
        gathered: dict[str, np.ndarray] = {}
        if len(self.indexes) == 1:
            records = self._columns[0]
            everything = len(rows) == len(records)  # one file, every row: rows == arange

            def one_file_column(name: str) -> np.ndarray:
                found = gathered.get(name)
                if found is None:
                    if everything:
                        found = records[name]
                    else:  # from the column copied out already, else straight from the packed rows
                        copied = records.copied(name)
                        found = (copied if copied is not None else records.rows[name]).take(rows)
                    gathered[name] = found
                return found

            return one_file_column, one_file_column("provider").astype(np.int64)
        mine = [files == number for number in range(len(self.indexes))]

        def column(name: str) -> np.ndarray:
            found = gathered.get(name)
            if found is None:
                found = np.empty(len(positions), dtype=self.indexes[0].records.dtype[name])
                for number, columns in enumerate(self._columns):
                    found[mine[number]] = columns[name][rows[mine[number]]]
                gathered[name] = found
            return found

        providers = np.empty(len(positions), dtype=np.int64)
        table: dict[object, int] = {}
        provider_column = column("provider")
        for number, index in enumerate(self.indexes):
            remap = np.asarray([table.setdefault(guid, len(table)) for guid in index.providers] + [-1], dtype=np.int64)
            providers[mine[number]] = remap[provider_column[mine[number]]]
        return column, providers

    def _deliver(self, positions: np.ndarray, loaders: list[RowLoader]) -> int | None:
        """The loop over the records to build; returns where ``stop()`` ended it (else ``None``).

        Records of one kind of event (same provider, id or opcode or hook, version, header type,
        and no extended items) share one schema lookup, done for the first of them. This loop
        runs once per delivered event: it is written for speed (only the index columns it reads
        are gathered and turned into Python objects; kinds of event are numbered densely, so
        that their schema entries sit in a list; a buffer's bytes looked up when the buffer
        changes; locals; one branch for the usual record: built from its buffer, handed to the
        single callback of a single provider).
        """
        d = self.dispatcher
        stats = d.stats
        context = d.context
        column, providers = self._selected_columns(positions)
        kinds = column("kind")
        kind_of = _schema_kinds(column, providers)
        # Kinds of event shared by several rows, numbered 0..n-1 (negative codes stay as they are).
        shared = kind_of >= 0
        if shared.all():
            dense, kind_count = _dense_numbers(kind_of)
        else:
            numbers, kind_count = _dense_numbers(kind_of[shared])
            dense = kind_of.copy()
            dense[shared] = numbers
        entries: list[Any] = [None] * kind_count
        extended_entries: dict[tuple[int, bytes], Any] = {}
        generation = context.generation

        def entry_for(record: Any, schema_kind: int, generation: int) -> tuple[Any, int]:
            """The schema entry of ``record`` (and the context's generation it is valid for),
            found now; every entry found before is dropped when the schemas may be stale."""
            if context.generation != generation:
                entries[:] = [None] * kind_count
                extended_entries.clear()
            entry = context.delivery_entry(record)
            if context.generation != generation:
                entries[:] = [None] * kind_count
                extended_entries.clear()
            if schema_kind >= 0:
                entries[schema_kind] = entry
            return entry, context.generation

        single = len(loaders) == 1
        caches = [loader._cache for loader in loaders]
        record_contexts = [loader.context for loader in loaders]
        record_context = record_contexts[0]
        references_of = context.references  # the switch: without object reuse, never a take-over
        prime, let_go = context.prime, context.let_go
        make_record, reuse_record = lazy_record, reuse_lazy_record
        lazy = LAZY_CLASSES
        callback_failed = d.callback_failed
        # A group of one provider without an executable filter needs no second look; with only
        # callbacks (no filters, no iterator) they are called right here.
        simple = [group if len(group) == 1 and not group[0].needs_process_name else None for group in self.groups]
        direct = [
            group[0].callbacks if group is not None and not group[0].filters and d.sink is None else None for group in simple
        ]  # fmt: skip
        actions = self.actions[positions]
        # Records built the long way: WPP and unknown records.
        built_apart = kinds >= _KIND_WPP
        # Where a record's bytes are: its file (in a merge) and buffer, as one number.
        files = np.zeros(len(positions), dtype=np.int64) if single else self.files[positions].astype(np.int64)
        places = (files << 32) | column("buffer").astype(np.int64)
        # What to do: a direct provider's callbacks (its group number), or -1: the general path.
        plain = (actions == DELIVER) & ~built_apart
        route = np.where(plain, self.group[positions], -1)
        if len(direct):
            no_direct = np.asarray([callbacks is None for callbacks in direct] + [True])
            route[no_direct[route]] = -1
        # Rows built the long way and sent down the general path: -2.
        route[built_apart] = -2
        only_callback = [callbacks[0] if callbacks is not None and len(callbacks) == 1 else None for callbacks in direct]
        # Rows of one route, kind of event and header type share a lane: (callback, route, kind,
        # record class). The usual row, handled by the loop's first branch, is built from its
        # buffer, of a kind whose schema entry is shared, for a provider with a single direct
        # callback: its lane's callback (None: every other row).
        lane_of, lane_keys = _lanes(route, dense, column("header_type").astype(np.int64))
        lanes: list[tuple[Any, int, int, Any]] = [
            (only_callback[lane_route] if lane_route >= 0 and kind >= 0 else None, lane_route, kind, lazy.get(header_type))
            for lane_route, kind, header_type in lane_keys
        ]  # fmt: skip
        # Rows of one file come in time order, the buffers of every processor taking turns: a
        # buffer's bytes are looked up when a row of another buffer comes (a buffer's rows all
        # have the buffer's processor number).
        count = len(positions)
        lane_array = np.ascontiguousarray(lane_of, dtype=np.int64)
        offsets, sizes = column("offset").astype(np.int64), column("size").astype(np.int64)
        user_data_offsets = column("user_data_offset").astype(np.int64)
        cpus = column("cpu").astype(np.int64)
        # The compiled loop takes the rows of lanes with a single direct callback (the first
        # branch below) and hands back the first row it leaves to this loop: with it, the few
        # rows left here read the arrays; without it, every row does, from lists.
        native = _NATIVE
        lane_list: Any = lane_array
        offset_list: Any = offsets
        size_list: Any = sizes
        user_data_offset_list: Any = user_data_offsets
        place_list: Any = places
        cpu_list: Any = cpus
        if native is None:
            lane_list, offset_list, size_list, user_data_offset_list = lane_array.tolist(), offsets.tolist(), sizes.tolist(), user_data_offsets.tolist()
            place_list, cpu_list = places.tolist(), cpus.tolist()

        def buffer_of(place: int) -> tuple[bytes, Any]:
            file, buffer = place >> 32, place & 0xFFFFFFFF
            data = caches[file].get(buffer)
            if data is None:
                data = loaders[file].buffer_data(buffer)
            return data, record_contexts[file]

        compiled = [callback is not None for callback, _, _, _ in lanes]
        reuse = references_of is sys.getrefcount
        progress = np.zeros(1, dtype=np.int64)
        done = 0
        current = -1  # the place of the buffer whose bytes are at hand
        buffer = cpu = -1
        data = b""
        spare, spare_place = None, -1  # a record nothing holds, of the buffer at spare_place
        try:
            row = 0
            while row < count:
                done = row
                lane = int(lane_list[done])
                if native is not None and compiled[lane]:
                    try:
                        done, spare, spare_place = native.deliver(
                            lanes, entries, lane_array, offsets, sizes, user_data_offsets, places, cpus, done, count, buffer_of, context, d,
                            callback_failed, generation, reuse, spare, spare_place, progress,
                        )  # fmt: skip
                    except BaseException:
                        done = int(progress[0])
                        raise
                    if done >= count:
                        break
                    lane = int(lane_list[done])
                row = done + 1
                if d.stopping:
                    return int(positions[done])
                offset, size, user_data_offset = int(offset_list[done]), int(size_list[done]), int(user_data_offset_list[done])
                callback, group, schema_kind, record_class = lanes[lane]
                place = int(place_list[done])
                if place != current and group != -2:
                    current, buffer, cpu = place, place & 0xFFFFFFFF, int(cpu_list[done])
                    data, record_context = buffer_of(place)
                if callback is not None:
                    record = spare
                    if record is not None and record.__class__ is record_class and spare_place == place:
                        # The record before, of this buffer, that nobody kept: only where it
                        # is changes (and its header is to be unpacked again).
                        spare = None
                        reuse_record(record, offset, size, user_data_offset)
                    else:
                        record = make_record(record_class, data, offset, size, cpu, record_context, buffer, user_data_offset)
                    entry = entries[schema_kind]
                    if entry is None or context.generation != generation:
                        entry, generation = entry_for(record, schema_kind, generation)
                    prime(record, entry)
                    try:
                        callback(record, context)
                    except Exception as error:  # noqa: BLE001 - user code: reported, processing goes on
                        callback_failed(error, record)
                        continue
                    # Nothing but this loop and the context holds the record any more (the
                    # references: ``record``, the argument, ``context._primed_record``, and
                    # after ``parser_for(record)`` the context's record and its parser's,
                    # that parser held by the context alone): the next record of this
                    # buffer takes it over, as making and freeing an object costs more.
                    references = references_of(record)
                    if references == 3 or (references == 5 and let_go(record)):
                        spare, spare_place = record, place
                    continue
                if group != -2:
                    record = make_record(record_class, data, offset, size, cpu, record_context, buffer, user_data_offset)
                else:
                    record = loaders[place >> 32].record(int(self.rows[positions[done]]))
                if schema_kind >= 0:
                    entry = entries[schema_kind]
                    if entry is None or context.generation != generation:
                        entry, generation = entry_for(record, schema_kind, generation)
                    prime(record, entry)
                elif schema_kind != -1:  # an event with extended items: its kind and their bytes
                    if context.generation != generation:
                        entries[:] = [None] * kind_count
                        extended_entries.clear()
                        generation = context.generation
                    pos = record._pos
                    key = (schema_kind, record._raw[pos + _EVENT_HEADER_SIZE : pos + record.user_data_offset])
                    entry = extended_entries.get(key)
                    if entry is None:
                        if len(extended_entries) >= _EXTENDED_KEYS:
                            extended_entries.clear()
                        entry, generation = entry_for(record, -1, generation)
                        extended_entries[key] = entry
                    prime(record, entry)
                if group >= 0:
                    callback = only_callback[group]
                    if callback is not None:
                        try:
                            callback(record, context)
                        except Exception as error:  # noqa: BLE001 - user code: reported, processing goes on
                            callback_failed(error, record)
                    else:
                        for callback in direct[group] or ():
                            try:
                                callback(record, context)
                            except Exception as error:  # noqa: BLE001
                                callback_failed(error, record)
                else:
                    self._deliver_one(record, int(actions[done]), int(self.group[positions[done]]), simple)
            done = count
        finally:
            # The records handed to direct callbacks, counted once (the rest count themselves).
            stats.events_handled += int(np.count_nonzero(route[:done] >= 0))
        return None

    def _deliver_one(self, record: Any, action: int, group: int, simple: list[list[Provider] | None]) -> None:
        """Every case but the usual one: state to learn, rundown, filters, iterators, unmatched."""
        d = self.dispatcher
        if action == DELIVER:
            providers = simple[group]
            if providers is not None:
                d.deliver_admitted(record, providers)
                return
        if action & OBSERVE:
            entry = d.context.primed_entry(record)  # the schema found for this kind of record, if any
            d.observe(record, None if entry is None else entry[0])
            d.context.refresh()
        if action & RUNDOWN:
            self._rundown(record)
        if action & DELIVER:
            admitted = d.admitted_of(record, self.groups[group])
            if admitted:
                d.deliver_admitted(record, admitted)
            else:
                d.stats.events_filtered += 1
        elif action & UNMATCHED:
            d.deliver_unmatched(record)

    def _rundown(self, record: object) -> None:
        d = self.dispatcher
        callback = d.rundown_callback
        if callback is None:
            return
        try:
            callback(record, d.context)
        except Exception as error:  # noqa: BLE001 - user code: reported, processing goes on
            d.callback_failed(error, record)
