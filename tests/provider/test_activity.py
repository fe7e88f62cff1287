"""Activity ids follow the context: blocks, nesting, threads started with a copied context, asyncio tasks."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import uuid

import pytest

from openetw.errors import InvalidArgument
from openetw.guids import NULL_GUID
from openetw.provider.activity import activity, claim_activity_ids, current_activity_id, new_activity_id


def test_outside_any_activity_the_id_is_null_and_nothing_is_related() -> None:
    assert current_activity_id() == NULL_GUID
    assert claim_activity_ids() == (NULL_GUID, None)


def test_new_activity_ids_are_random_version_4() -> None:
    first, second = new_activity_id(), new_activity_id()
    assert first != second
    assert first.version == 4


def test_a_block_sets_a_new_id_and_restores_the_previous_one() -> None:
    with activity() as inner:
        assert inner != NULL_GUID
        assert current_activity_id() == inner
    assert current_activity_id() == NULL_GUID


def test_a_given_id_is_used_as_it_is() -> None:
    wanted = uuid.UUID("11111111-2222-3333-4444-555555555555")
    with activity(wanted) as inner:
        assert inner == wanted
        assert current_activity_id() == wanted


def test_the_previous_id_is_related_for_the_first_event_only() -> None:
    with activity() as outer:
        with activity() as inner:
            assert claim_activity_ids() == (inner, outer)
            assert claim_activity_ids() == (inner, None)
        # Back in the outer block: its own transfer (from null) never existed, nothing is carried.
        assert claim_activity_ids() == (outer, None)


def test_an_explicit_related_id_replaces_the_previous_one() -> None:
    origin = uuid.uuid4()
    with activity(related=origin) as inner:
        assert claim_activity_ids() == (inner, origin)


def test_the_outer_transfer_is_still_pending_after_an_inner_block() -> None:
    origin = uuid.uuid4()
    with activity(related=origin) as outer:
        with activity():
            pass
        assert claim_activity_ids() == (outer, origin)


def test_the_id_is_restored_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError):
        with activity():
            raise RuntimeError("boom")
    assert current_activity_id() == NULL_GUID


def test_ids_must_be_uuids() -> None:
    with pytest.raises(InvalidArgument):
        with activity("not-a-uuid"):  # type: ignore[arg-type]
            pass
    with pytest.raises(InvalidArgument):
        with activity(related="x"):  # type: ignore[arg-type]
            pass


def test_a_thread_started_with_a_copied_context_sees_the_activity() -> None:
    seen: list[tuple[uuid.UUID, uuid.UUID | None]] = []
    origin = uuid.uuid4()
    with activity(related=origin) as outer:
        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(lambda: seen.append(claim_activity_ids()),))
        worker.start()
        worker.join()
        # The worker wrote first and took the transfer: one event in the whole block carries it.
        assert claim_activity_ids() == (outer, None)
    assert seen == [(outer, origin)]


def test_a_plain_thread_starts_outside_any_activity() -> None:
    seen: list[uuid.UUID] = []
    with activity():
        worker = threading.Thread(target=lambda: seen.append(current_activity_id()))
        worker.start()
        worker.join()
    assert seen == [NULL_GUID]


def test_exactly_one_event_carries_the_transfer_across_threads() -> None:
    results: list[uuid.UUID | None] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def write() -> None:
        barrier.wait()
        related = claim_activity_ids()[1]
        with lock:
            results.append(related)

    origin = uuid.uuid4()
    with activity(related=origin):
        workers = [threading.Thread(target=contextvars.copy_context().run, args=(write,)) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert sorted(results, key=lambda item: item is None) == [origin, None, None, None]


def test_asyncio_tasks_inherit_and_keep_their_own_activity() -> None:
    async def child(expected_parent: uuid.UUID) -> tuple[uuid.UUID, uuid.UUID]:
        inherited = current_activity_id()
        with activity() as own:
            await asyncio.sleep(0)
            assert current_activity_id() == own
            assert claim_activity_ids() == (own, expected_parent)
        return inherited, current_activity_id()

    async def main() -> None:
        with activity() as parent:
            results = await asyncio.gather(child(parent), child(parent))
            assert results == [(parent, parent), (parent, parent)]
            assert current_activity_id() == parent

    asyncio.run(main())
    assert current_activity_id() == NULL_GUID
