"""Activity ids: ETW's per-thread activity id, carried in a ``ContextVar``.

Windows keeps the current activity id in the thread (``EventActivityIdControl``). Here it lives
in a ``contextvars.ContextVar``, so it follows whatever the context follows: asyncio tasks
(each task starts with a copy of its creator's context) and threads started through
``contextvars.copy_context().run``. A plain ``threading.Thread`` starts with an empty context,
hence with the null activity id, as a new Windows thread does.

``with activity():`` opens an activity for a block: a new id (random, or the one given) becomes
current, and the id that was current before becomes the *related* activity id of the first
event written in the block: the transfer event (``EventWriteTransfer``'s RelatedActivityId,
carried as a RELATED_ACTIVITYID extended item). A null id is never carried as related.

"First event" means the first across every context sharing the block: a task or thread started
inside the block that writes before the block's own code does takes the transfer. The claim is
one ``list.pop`` (atomic under the GIL), so exactly one event carries it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from openetw.errors import InvalidArgument
from openetw.guids import NULL_GUID

__all__ = ["activity", "activity_state", "activity_variable", "claim_activity_ids", "current_activity_id", "new_activity_id"]


class _Activity:
    """The current activity id and, until an event takes it, the related id to transfer from."""

    __slots__ = ("id", "pending_related")

    def __init__(self, activity_id: uuid.UUID, related: uuid.UUID | None) -> None:
        self.id = activity_id
        self.pending_related: list[uuid.UUID] = [] if related is None or related == NULL_GUID else [related]


_NO_ACTIVITY = _Activity(NULL_GUID, None)
_current: ContextVar[_Activity] = ContextVar("openetw_activity", default=_NO_ACTIVITY)
# For the write path: the current state, whose ``id`` an event carries and whose non-empty
# ``pending_related`` says ``claim_activity_ids`` has a transfer to hand out.
activity_state = _current.get
# The variable itself, for the compiled write path (it reads it as ``activity_state`` does).
activity_variable = _current


def new_activity_id() -> uuid.UUID:
    """A fresh random activity id (``EVENT_ACTIVITY_CTRL_CREATE_ID``)."""
    return uuid.uuid4()


def current_activity_id() -> uuid.UUID:
    """The activity id events written now carry (``NULL_GUID`` outside any activity)."""
    return _current.get().id


def claim_activity_ids() -> tuple[uuid.UUID, uuid.UUID | None]:
    """(activity id, related activity id) for the event about to be written.

    The related id is returned once per ``activity()`` block, to the first event that asks;
    afterwards (and outside any block) it is ``None``.
    """
    state = _current.get()
    pending = state.pending_related
    if pending:
        try:
            return state.id, pending.pop()
        except IndexError:  # another thread took it between the test and the pop
            pass
    return state.id, None


@contextmanager
def activity(id: uuid.UUID | None = None, related: uuid.UUID | None = None) -> Iterator[uuid.UUID]:  # noqa: A002 - ETW's name
    """Make ``id`` (a new random id if ``None``) the current activity id for the block.

    ``related`` defaults to the activity id current before the block; the first event written
    in the block carries it as its related activity id. Yields the block's activity id; the
    previous one is current again after the block, however it ends.
    """
    if id is not None and not isinstance(id, uuid.UUID):
        raise InvalidArgument(f"an activity id is a uuid.UUID, not {type(id).__name__}")
    if related is not None and not isinstance(related, uuid.UUID):
        raise InvalidArgument(f"a related activity id is a uuid.UUID, not {type(related).__name__}")
    activity_id = new_activity_id() if id is None else id
    previous = _current.get()
    token = _current.set(_Activity(activity_id, previous.id if related is None else related))
    try:
        yield activity_id
    finally:
        _current.reset(token)
