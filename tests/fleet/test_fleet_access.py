"""Who may write into the fleet's subjects: NATS accounts and users, each host on its own subjects."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openetw.fleet.connect import FleetError, StreamOptions, connect, ensure_stream
from tests.fleet.harness import Host, NatsCluster, make_cluster

HOST_API = '"$JS.API.INFO", "$JS.API.STREAM.INFO.ETW", "$JS.API.STREAM.CREATE.ETW"'
ACCOUNTS = f"""
accounts {{
  FLEET {{
    jetstream: enabled
    users: [
      {{user: alpha, password: "alpha-secret", permissions: {{publish: {{allow: ["etw.alpha.>", {HOST_API}]}}, subscribe: {{allow: ["_INBOX.>"]}}}}}}
      {{user: beta, password: "beta-secret", permissions: {{publish: {{allow: ["etw.beta.>", {HOST_API}]}}, subscribe: {{allow: ["_INBOX.>"]}}}}}}
      {{user: collector, password: "collector-secret", permissions: {{publish: {{allow: ["$JS.API.>", "$JS.ACK.>"]}}, subscribe: {{allow: ["_INBOX.>"]}}}}}}
      {{user: viewer, password: "viewer-secret", permissions: {{publish: {{deny: ["etw.>"]}}, subscribe: {{allow: [">"]}}}}}}
    ]
  }}
}}
"""


@pytest.fixture
def secured(tmp_path: Path) -> Any:
    cluster = make_cluster(tmp_path / "nats", 1, accounts=ACCOUNTS)
    try:
        cluster.start()
        cluster.wait_ready(user="collector", password="collector-secret")
        yield cluster
    finally:
        cluster.kill()


def _options(cluster: NatsCluster, user: str | None) -> StreamOptions:
    if user is None:
        return StreamOptions.build(cluster.urls)
    return StreamOptions(tuple(cluster.urls.split(",")), user=user, password=f"{user}-secret")


async def _try_publish(options: StreamOptions, subject: str) -> str:
    """"stored" when the stream took the message, else why not."""
    try:
        client = await connect(options, name="access test", reconnect=False)
    except FleetError as exc:
        return f"refused: {exc}"
    try:
        await client.jetstream(timeout=1.0).publish(subject, b"x", timeout=1.0, stream="ETW")
        return "stored"
    except Exception as exc:  # noqa: BLE001 - a permissions violation shows as no acknowledgement
        return f"not stored: {type(exc).__name__}"
    finally:
        await client.close()


async def _subjects(options: StreamOptions) -> dict[str, int]:
    client = await connect(options, name="access test", reconnect=False)
    try:
        info = await client.jsm().stream_info("ETW", subjects_filter=">")
        return dict(info.state.subjects or {})
    finally:
        await client.close()


async def _make_stream(options: StreamOptions) -> None:
    client = await connect(options, name="access test", reconnect=False)
    try:
        await ensure_stream(client.jetstream())
    finally:
        await client.close()


def test_only_each_host_writes_its_own_subjects(secured: NatsCluster, tmp_path: Path) -> None:
    admin = _options(secured, "collector")
    asyncio.run(_make_stream(admin))
    assert asyncio.run(_try_publish(_options(secured, None), "etw.alpha.x")).startswith("refused")  # no credentials: no connection
    assert asyncio.run(_try_publish(_options(secured, "viewer"), "etw.alpha.x")).startswith("not stored")
    assert asyncio.run(_try_publish(_options(secured, "alpha"), "etw.beta.x")).startswith("not stored")
    assert asyncio.run(_try_publish(_options(secured, "alpha"), "etw.alpha.x")) == "stored"
    assert asyncio.run(_subjects(admin)) == {"etw.alpha.x": 1}

    # A host's service streams with the user and password file given to `openetw session start`.
    host = Host(tmp_path / "alpha", "alpha")
    try:
        password = tmp_path / "alpha.password"
        password.write_text("alpha-secret\n")
        base = [sys.executable, "-m", "openetw", "session", "start", "--socket", str(host.socket), "-p", "*Fleet.Access",
                "--stream", secured.urls, "--user", "alpha", "--password-file", str(password)]  # fmt: skip
        subprocess.run([*base[:5], "Own", *base[5:]], check=True, capture_output=True, env=host.env())
        # A subject naming another host is refused at the start (the collector would refuse its messages).
        other = subprocess.run([*base[:5], "Other", *base[5:], "--subject", "etw.beta.{session}"], capture_output=True, text=True,
                               env=host.env(), check=False)  # fmt: skip
        assert other.returncode == 2 and "etw.<host>." in other.stderr, other.stderr
        assert asyncio.run(_wait_for(admin, "etw.alpha.Own"))
        assert not any(subject.startswith("etw.beta.") for subject in asyncio.run(_subjects(admin)))
    finally:
        host.stop()


async def _wait_for(options: StreamOptions, subject: str, timeout: float = 15.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if subject in await _subjects(options):
            return True
        await asyncio.sleep(0.2)
    return False


@pytest.fixture
def operator_mode(tmp_path: Path) -> Any:
    """One JetStream server trusting an operator (decentralized authentication: JWTs, no
    passwords), and the operator to make users' credentials files with."""
    from tests.fleet.nats_jwt import Operator

    operator = Operator()
    cluster = make_cluster(tmp_path / "nats", 1, accounts=operator.server_config(tmp_path))
    try:
        cluster.start()
        yield cluster, operator
    finally:
        cluster.kill()


def test_credentials_files_authenticate_hosts_and_the_collector(operator_mode: Any, tmp_path: Path) -> None:
    cluster, operator = operator_mode
    alpha = operator.user("alpha", tmp_path, publish=["etw.alpha.>", "$JS.API.INFO", "$JS.API.STREAM.INFO.ETW", "$JS.API.STREAM.CREATE.ETW"],
                          subscribe=["_INBOX.>"])  # fmt: skip
    collector = operator.user("collector", tmp_path, publish=["$JS.API.>", "$JS.ACK.>"], subscribe=["_INBOX.>"])
    admin = StreamOptions.build(cluster.urls, creds_file=collector)
    cluster.wait_ready(**{key: value for key, value in admin.connect_kwargs().items() if key != "servers"})
    asyncio.run(_make_stream(admin))
    assert asyncio.run(_try_publish(_options(cluster, None), "etw.alpha.x")).startswith("refused")  # no credentials
    alpha_options = StreamOptions.build(cluster.urls, creds_file=alpha)
    assert asyncio.run(_try_publish(alpha_options, "etw.beta.x")).startswith("not stored")
    assert asyncio.run(_try_publish(alpha_options, "etw.alpha.x")) == "stored"

    # A host's service streams with the credentials file given to `openetw session start`, and
    # the collector reads what it streamed with its own.
    host = Host(tmp_path / "alpha", "alpha")
    try:
        base = [sys.executable, "-m", "openetw", "session", "start", "--socket", str(host.socket), "-p", "*Fleet.Access",
                "--stream", cluster.urls, "--creds", str(alpha)]  # fmt: skip
        subprocess.run([*base[:5], "Own", *base[5:]], check=True, capture_output=True, env=host.env())
        assert asyncio.run(_wait_for(admin, "etw.alpha.Own"))
        status = subprocess.run([sys.executable, "-m", "openetw", "fleet", "status", cluster.urls, "--creds", str(collector), "--json"],
                                capture_output=True, text=True, env=host.env(), check=False)  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert "alpha" in status.stdout
    finally:
        host.stop()
