"""``openetw collect``: the fleet's stream written to disk, per host and session.

A durable pull consumer (``openetw-collector`` unless named otherwise) on the stream; it waits
for the stream when it does not exist yet. Each fetched batch goes to the ``FleetStore``, is
committed (fsync), and only then acknowledged: a collector killed at any point loses nothing
(unacknowledged messages come again) and duplicates nothing (the store's books know every
sequence it holds, beyond JetStream's two-minute de-duplication window).

Every message is checked before anything reads it (``openetw.fleet.check``, then the store's
books): a bad one is counted for the host whose subject it came on, named in the books with its
reason, and terminated (JetStream delivers it no more; it stays in the stream, found by its
stream sequence, until retention removes it), and the batch goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from openetw.errors import InvalidArgument
from openetw.fleet.check import BadMessage, check_message
from openetw.fleet.connect import StreamOptions, connect, require_nats
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import STREAM_SUBJECTS

__all__ = ["ACK", "DEFAULT_DURABLE", "NAK", "TERM", "Incoming", "collect", "take_batch"]

DEFAULT_DURABLE = "openetw-collector"
BATCH = 128
ACK_WAIT = 5.0  # a message not acknowledged this long after delivery is delivered again
LATER_DELAY = 0.5
# A buffer whose session's header never comes is delivered again this many times (about 15 s
# at LATER_DELAY), then set aside: a header always precedes its buffers in the stream.
LATER_DELIVERIES = 30
# Buffers waiting for their header, per host: a host whose header publish is retried has at
# most the publisher's 32 outstanding buffers ahead of it. More are refused at once, so no host
# holds the consumer's outstanding acknowledgements (and so everyone's delivery) with them.
LATER_PER_HOST = 128
ACK, NAK, TERM = "ack", "nak", "term"


@dataclass(frozen=True)
class Incoming:
    """One delivered message, as the batch handling sees it (no NATS object)."""

    subject: str
    headers: Mapping[str, str] | None
    data: bytes
    delivered: int = 1  # how many times JetStream has delivered it, this time included
    stream_sequence: int = 0


def take_batch(store: FleetStore, messages: list[Incoming]) -> list[str]:
    """Each message checked and added to ``store`` (not committed); what to answer each with
    once the batch is committed: ``ACK``, ``NAK`` (later) or ``TERM`` (refused, counted)."""
    answers = []
    for message in messages:
        host = message.subject.split(".")[1] if message.subject.count(".") >= 2 else "?"
        waiting = store.waiting.setdefault(host, set())
        try:
            checked = check_message(message.subject, message.headers, message.data)
            outcome = store.add(checked)
            if outcome == "later":
                if message.delivered >= LATER_DELIVERIES:
                    raise BadMessage("no-header", f"the header of {checked.info.host!r}/{checked.info.session!r} never came")
                if message.stream_sequence not in waiting and len(waiting) >= LATER_PER_HOST:
                    raise BadMessage("no-header", f"more than {LATER_PER_HOST} buffers of {host!r} wait for their sessions' headers")
                waiting.add(message.stream_sequence)
                answers.append(NAK)
                continue
        except BadMessage as bad:
            store.reject(host, bad.reason, bad.text, subject=message.subject, stream_sequence=message.stream_sequence)
            outcome = TERM
        waiting.discard(message.stream_sequence)
        if not waiting:
            del store.waiting[host]
        answers.append(TERM if outcome == TERM else ACK)
    return answers


def _incoming(message: Any) -> Incoming:
    try:
        metadata = message.metadata
        delivered, stream_sequence = int(metadata.num_delivered or 1), int(metadata.sequence.stream or 0)
    except Exception:  # noqa: BLE001 - not a JetStream reply subject: read it as a first delivery
        delivered, stream_sequence = 1, 0
    return Incoming(message.subject, message.headers, message.data, delivered, stream_sequence)


async def _wait_for_stream(js: Any, name: str, stop: Callable[[], bool]) -> bool:
    from nats.js.errors import NotFoundError

    while not stop():
        try:
            await js.stream_info(name)
            return True
        except NotFoundError:
            pass
        except Exception:  # noqa: BLE001 - no leader yet, a timeout: try again
            pass
        await asyncio.sleep(0.5)
    return False


async def collect(
    options: StreamOptions, store: FleetStore, *, durable: str = DEFAULT_DURABLE, stop: Callable[[], bool] = lambda: False,
    idle_exit: float | None = None, on_commit: Callable[[FleetStore], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Collect until ``stop()`` (or, with ``idle_exit``, until every session seen has ended and
    nothing came for that many seconds); returns the store's report."""
    require_nats()
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    if not durable or any(c in durable for c in ". *>"):
        raise InvalidArgument(f"consumer name {durable!r}: no dots, spaces or wildcards")
    client = await connect(options, name="openetw collector")
    try:
        js = client.jetstream(timeout=5.0)
        if not await _wait_for_stream(js, options.stream, stop):
            return store.report()
        config = ConsumerConfig(
            durable_name=durable, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL, ack_wait=ACK_WAIT,
            max_ack_pending=4096, filter_subject=STREAM_SUBJECTS,
        )  # fmt: skip
        subscription = None
        last_message = time.monotonic()
        while not stop():
            if subscription is None:
                try:
                    subscription = await js.pull_subscribe(STREAM_SUBJECTS, durable=durable, stream=options.stream, config=config)
                except Exception:  # noqa: BLE001 - the cluster electing a leader: try again
                    await asyncio.sleep(0.5)
                    continue
            try:
                messages = await subscription.fetch(BATCH, timeout=1.0)
            except Exception:  # noqa: BLE001 - a timeout (nothing new) or a cluster change
                messages = []
            if not messages:
                if idle_exit is not None and store.sessions and all(b.ended for b in store.sessions.values()) \
                        and time.monotonic() - last_message >= idle_exit:  # fmt: skip
                    break
                continue
            last_message = time.monotonic()
            answers = take_batch(store, [_incoming(message) for message in messages])
            store.commit()
            if on_commit is not None:
                on_commit(store)
            for message, answer in zip(messages, answers, strict=True):
                try:
                    if answer == NAK:
                        await message.nak(delay=LATER_DELAY)
                    elif answer == TERM:
                        await message.term()
                    else:
                        await message.ack()
                except Exception:  # noqa: BLE001 - unacknowledged: delivered again, dropped as a duplicate
                    pass
        return store.report()
    finally:
        try:
            await asyncio.wait_for(client.close(), 3.0)
        except Exception:  # noqa: BLE001
            pass
