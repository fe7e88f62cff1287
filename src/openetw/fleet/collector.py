"""``openetw collect``: the fleet's stream written to disk, per host and session.

A durable pull consumer (``openetw-collector`` unless named otherwise) on the stream; it waits
for the stream when it does not exist yet. Each fetched batch goes to the ``FleetStore``, is
committed (fsync), and only then acknowledged: a collector killed at any point loses nothing
(unacknowledged messages come again) and duplicates nothing (the store's books know every
sequence it holds, beyond JetStream's two-minute de-duplication window).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from openetw.errors import InvalidArgument
from openetw.fleet.connect import StreamOptions, connect, require_nats
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import STREAM_SUBJECTS, parse_headers

__all__ = ["DEFAULT_DURABLE", "collect"]

DEFAULT_DURABLE = "openetw-collector"
BATCH = 128
ACK_WAIT = 5.0  # a message not acknowledged this long after delivery is delivered again


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
            later = []
            for message in messages:
                try:
                    info = parse_headers(message.headers)
                except InvalidArgument:
                    continue  # not a session's message: acknowledged and left
                if store.add(info, message.data) == "later":
                    later.append(message)
            store.commit()
            if on_commit is not None:
                on_commit(store)
            for message in messages:
                try:
                    if message in later:
                        await message.nak(delay=0.5)
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
