"""The deployed accounts (``deploy/fleet/etw-accounts.conf``) give each user exactly its role:
every JetStream operation outside it is tried with each user and refused by the server, and
each role still does its work (hosts stream, the collector collects, the viewer reads)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from openetw.fleet.connect import FleetError, StreamOptions, connect, ensure_stream, inbox_prefix
from tests.fleet.harness import NatsCluster, make_cluster, synthetic_session

DEPLOYED = Path(__file__).resolve().parents[2] / "deploy" / "fleet" / "etw-accounts.conf"
USERS = ("web-01", "web-02", "collector", "viewer")
DURABLE = "openetw-collector"
_CONFIG = json.dumps({"name": "ETW", "subjects": ["etw.>"], "max_msgs": 1}).encode()
_DURABLE_CONFIG = json.dumps({"stream_name": "ETW", "config": {"durable_name": DURABLE, "name": DURABLE, "ack_policy": "none",
                                                                "deliver_policy": "new", "filter_subject": "etw.>"}}).encode()  # fmt: skip

# Every operation tried, and the roles it belongs to.
OPERATIONS: dict[str, tuple[bytes, frozenset[str]]] = {
    "$JS.API.STREAM.DELETE.ETW": (b"", frozenset()),
    "$JS.API.STREAM.PURGE.ETW": (b"", frozenset()),
    "$JS.API.STREAM.UPDATE.ETW": (_CONFIG, frozenset()),
    "$JS.API.STREAM.CREATE.ETW": (_CONFIG, frozenset({"web-01", "web-02"})),  # refused by the server: the stream exists
    "$JS.API.STREAM.CREATE.OTHER": (json.dumps({"name": "OTHER", "subjects": ["other.>"]}).encode(), frozenset()),
    "$JS.API.STREAM.MSG.DELETE.ETW": (b'{"seq": 1}', frozenset()),
    "$JS.API.STREAM.MSG.GET.ETW": (b'{"seq": 1}', frozenset()),
    "$JS.API.DIRECT.GET.ETW": (b'{"seq": 1}', frozenset()),
    "$JS.API.STREAM.SNAPSHOT.ETW": (b'{"deliver_subject": "_INBOX.snap"}', frozenset()),
    "$JS.API.STREAM.RESTORE.ETW": (b"{}", frozenset()),
    "$JS.API.STREAM.LEADER.STEPDOWN.ETW": (b"", frozenset()),
    "$JS.API.STREAM.PEER.REMOVE.ETW": (b'{"peer": "n1"}', frozenset()),
    "$JS.API.STREAM.NAMES": (b"", frozenset()),
    "$JS.API.STREAM.LIST": (b"", frozenset()),
    "$JS.API.STREAM.INFO.ETW": (b"", frozenset({"web-01", "web-02", "collector", "viewer"})),
    "$JS.API.INFO": (b"", frozenset({"web-01", "web-02", "collector", "viewer"})),
    f"$JS.API.CONSUMER.DELETE.ETW.{DURABLE}": (b"", frozenset()),
    f"$JS.API.CONSUMER.CREATE.ETW.{DURABLE}.etw.>": (_DURABLE_CONFIG, frozenset({"collector"})),
    f"$JS.API.CONSUMER.DURABLE.CREATE.ETW.{DURABLE}": (_DURABLE_CONFIG, frozenset({"collector"})),
    "$JS.API.CONSUMER.CREATE.ETW.evil": (b"{}", frozenset()),
    "$JS.API.CONSUMER.DURABLE.CREATE.ETW.evil": (b"{}", frozenset()),
    "$JS.API.CONSUMER.CREATE.ETW": (_DURABLE_CONFIG, frozenset({"viewer"})),  # ephemeral only: the durable is refused
    f"$JS.API.CONSUMER.MSG.NEXT.ETW.{DURABLE}": (b'{"batch": 1, "no_wait": true}', frozenset({"collector"})),
    f"$JS.API.CONSUMER.INFO.ETW.{DURABLE}": (b"", frozenset({"collector"})),
    f"$JS.API.CONSUMER.LEADER.STEPDOWN.ETW.{DURABLE}": (b"", frozenset()),
    "$JS.API.CONSUMER.LIST.ETW": (b"", frozenset({"viewer"})),
    f"$JS.ACK.ETW.{DURABLE}.1.1.1.0.0.0": (b"+ACK", frozenset({"collector"})),
    "$JS.API.META.LEADER.STEPDOWN": (b"", frozenset()),
    "$JS.API.SERVER.REMOVE": (b'{"peer": "n1"}', frozenset()),
    "$JS.API.ACCOUNT.PURGE.FLEET": (b"", frozenset()),
    "etw.web-01.Payroll": (b"x", frozenset({"web-01"})),
    "etw.web-02.Payroll": (b"x", frozenset({"web-02"})),
    "etw-other.x": (b"x", frozenset()),
}


def deployed_accounts() -> str:
    """The deployed file, each user's placeholder hash replaced by a test password: the
    permissions are the file's own, byte for byte."""
    text = DEPLOYED.read_text()
    replaced, count = re.subn(r'\{ user: ([\w-]+), password: "[^"]*"', lambda m: f'{{ user: {m[1]}, password: "{m[1]}-secret"', text)
    assert count == len(USERS) and all(f"user: {user}," in text for user in USERS)
    return replaced


def _options(cluster: NatsCluster, user: str) -> StreamOptions:
    return StreamOptions(tuple(cluster.urls.split(",")), user=user, password=f"{user}-secret")


@pytest.fixture
def deployed(tmp_path: Path) -> Any:
    cluster = make_cluster(tmp_path / "nats", 1, accounts=deployed_accounts())
    try:
        cluster.start()
        cluster.wait_ready(user="viewer", password="viewer-secret", inbox_prefix=inbox_prefix("viewer"))
        yield cluster
    finally:
        cluster.kill()


def forbidden_subscriptions(user: str) -> list[str]:
    """Other users' inboxes, everyone's, and (but for the viewer) the fleet's subjects."""
    subjects = ["_INBOX.>", "$JS.>", ">", *(f"_INBOX.{other}.>" for other in USERS if other != user)]
    return subjects if user == "viewer" else [*subjects, "etw.>", "etw.web-01.>"]


async def _forbidden_refused(options: StreamOptions, subjects: list[str], subscriptions: list[str]) -> set[str]:
    """Sends every one of ``subjects`` and subscribes to each of ``subscriptions``; returns those
    the server refused as a permissions violation (a subscription as ``SUB <subject>``)."""
    refused: set[str] = set()
    everything = asyncio.Event()
    expected = {*subjects, *(f"SUB {subject}" for subject in subscriptions)}
    # nats-py hands the error over in lower case
    by_lower = {subject.lower(): subject for subject in subjects} | {f"sub {s.lower()}": f"SUB {s}" for s in subscriptions}

    async def on_error(error: Exception) -> None:
        found = re.search(r'permissions violation for (publish|subscription) to "([^"]+)"', str(error), re.IGNORECASE)
        if found:
            key = found[2].lower() if found[1].lower() == "publish" else f"sub {found[2].lower()}"
            if key in by_lower:
                refused.add(by_lower[key])
            if refused >= expected:
                everything.set()

    client = await connect(options, name="permissions test", reconnect=False, error_cb=on_error)
    try:
        for subject in subjects:
            await client.publish(subject, OPERATIONS[subject][0], reply=client.new_inbox())
        for subject in subscriptions:
            await client.subscribe(subject)
        await client.flush()
        try:
            await asyncio.wait_for(everything.wait(), 20.0)
        except TimeoutError:
            pass
        return refused
    finally:
        await client.close()


async def _state(options: StreamOptions) -> tuple[int, Any]:
    """The stream's message count and the collector's consumer's configuration."""
    client = await connect(options, name="permissions test", reconnect=False)
    try:
        jsm = client.jsm(timeout=5.0)
        info = await jsm.stream_info("ETW")
        consumer = next(item for item in await jsm.consumers_info("ETW") if item.name == DURABLE)
        return info.state.messages, consumer.config
    finally:
        await client.close()


async def _viewer_reads(options: StreamOptions) -> tuple[int, int]:
    """The viewer's work: stream information, and an ephemeral consumer reading messages; and
    its attempt at creating the collector's durable through the ephemeral API, refused."""
    from nats.js.errors import APIError

    client = await connect(options, name="viewer", reconnect=False)
    try:
        js = client.jetstream(timeout=5.0)
        info = await js.stream_info("ETW")
        got: list[Any] = []
        done = asyncio.Event()

        async def on_message(message: Any) -> None:
            got.append(message)
            done.set()

        subscription = await js.subscribe("etw.>", stream="ETW", ordered_consumer=True, cb=on_message)
        await asyncio.wait_for(done.wait(), 10.0)
        await subscription.unsubscribe()
        with pytest.raises(APIError):
            await client.jsm(timeout=5.0)._api_request("$JS.API.CONSUMER.CREATE.ETW", _DURABLE_CONFIG, timeout=5.0)
        return info.state.messages, len(got)
    finally:
        await client.close()


def test_each_deployed_account_does_its_role_and_nothing_else(deployed: NatsCluster, tmp_path: Path) -> None:
    from openetw.fleet.collector import collect
    from openetw.fleet.status import status_of_stream
    from openetw.fleet.store import FleetStore

    # Hosts stream (web-01 makes the stream), the collector collects, the viewer reads.
    session = synthetic_session("web-01", "Payroll", 3)
    asyncio.run(_publish_as(_options(deployed, "web-01"), session))
    store = FleetStore(tmp_path / "fleet")
    report = asyncio.run(collect(_options(deployed, "collector"), store, idle_exit=0.5, stop=_deadline(60)))
    store.close()
    assert report["hosts"]["web-01"]["events"] == 15 and not report["rejected"]
    messages, received = asyncio.run(_viewer_reads(_options(deployed, "viewer")))
    assert messages == len(session) and received >= 1
    status = asyncio.run(status_of_stream(_options(deployed, "viewer")))
    assert DURABLE in [consumer["name"] for consumer in status["consumers"]]
    before = asyncio.run(_state(_options(deployed, "viewer")))

    # Every operation outside a user's role: refused by the server, for each user.
    for user in USERS:
        forbidden = sorted(subject for subject, (_, roles) in OPERATIONS.items() if user not in roles)
        subscriptions = forbidden_subscriptions(user)
        refused = asyncio.run(_forbidden_refused(_options(deployed, user), forbidden, subscriptions))
        expected = {*forbidden, *(f"SUB {subject}" for subject in subscriptions)}
        assert refused == expected, (user, sorted(expected - refused))
    with pytest.raises(FleetError):  # and no connection without credentials
        asyncio.run(connect(StreamOptions.build(deployed.urls), name="anonymous", reconnect=False))
    after = asyncio.run(_state(_options(deployed, "viewer")))
    assert after == before  # the stream, its messages and the collector's consumer as they were


def _deadline(seconds: float) -> Any:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() > end


async def _publish_as(options: StreamOptions, messages: list[tuple[str, dict[str, str], bytes]]) -> None:
    client = await connect(options, name="host", reconnect=False)
    try:
        js = client.jetstream(timeout=10.0)
        await ensure_stream(js)
        for subject, headers, payload in messages:
            await js.publish(subject, payload, headers=headers, stream="ETW", timeout=10.0)
    finally:
        await client.close()
