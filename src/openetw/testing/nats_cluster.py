"""A JetStream cluster of ``nats-server`` processes on free loopback ports, for tests and
benchmarks of the fleet: ``NatsCluster(directory, size).start()``, ``kill()``, a node's
``kill()`` / ``start()`` again (its store directory kept), ``stream_leader()``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["NatsCluster", "NatsNode", "find_nats_server", "free_ports"]


def find_nats_server() -> str | None:
    """The ``nats-server`` program, or None."""
    found = shutil.which("nats-server")
    if found:
        return found
    for candidate in ("/usr/sbin/nats-server", "/usr/bin/nats-server"):
        if os.path.exists(candidate):
            return candidate
    return None


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class NatsNode:
    def __init__(self, binary: str, name: str, config: Path, port: int, log: Path) -> None:
        self.binary, self.name, self.config, self.port, self.log = binary, name, config, port, log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([self.binary, "-c", str(self.config)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"nats-server {self.name} exited: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.05)
        raise RuntimeError(f"nats-server {self.name} did not listen")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


class NatsCluster:
    """``size`` JetStream servers in one cluster (size 1: a single server), optionally with accounts."""

    def __init__(self, directory: Path, size: int = 3, accounts: str | None = None) -> None:
        binary = find_nats_server()
        if binary is None:
            raise RuntimeError("nats-server is not installed")
        self.directory = directory
        ports = free_ports(size * 2)
        client_ports, route_ports = ports[:size], ports[size:]
        self.nodes: list[NatsNode] = []
        for index in range(size):
            name = f"n{index + 1}"
            store = directory / name
            store.mkdir(parents=True, exist_ok=True)
            lines = [
                f"server_name: {name}",
                f"listen: 127.0.0.1:{client_ports[index]}",
                f'jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 1GB }}',
            ]
            if size > 1:
                routes = ", ".join(f"nats://127.0.0.1:{p}" for i, p in enumerate(route_ports) if i != index)
                lines.append(f"cluster {{ name: etwtest, listen: 127.0.0.1:{route_ports[index]}, routes: [{routes}] }}")
            if accounts:
                lines.append(accounts)
            config = directory / f"{name}.conf"
            config.write_text("\n".join(lines) + "\n")
            self.nodes.append(NatsNode(binary, name, config, client_ports[index], directory / f"{name}.log"))

    @property
    def urls(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def node(self, name: str) -> NatsNode:
        return next(node for node in self.nodes if node.name == name)

    def wait_ready(self, timeout: float = 30.0, **connect: Any) -> None:
        """Until JetStream answers (a cluster has elected its meta leader)."""
        asyncio.run(_wait_ready(self.urls, timeout, connect))

    def stream_leader(self, stream: str = "ETW", **connect: Any) -> str | None:
        """The node that leads ``stream``; None while the stream does not exist or the cluster
        does not answer (a busy or electing cluster lets a request time out: ask again)."""
        return asyncio.run(_stream_leader(self.urls, stream, connect))


async def _wait_ready(urls: str, timeout: float, connect: dict[str, Any]) -> None:
    import nats

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            client = await nats.connect(urls.split(","), connect_timeout=1, allow_reconnect=False, **connect)
            try:
                await client.jetstream().account_info()
                return
            finally:
                await client.close()
        except Exception as exc:  # noqa: BLE001
            last = exc
            await asyncio.sleep(0.3)
    raise RuntimeError(f"JetStream not ready: {last}")


async def _stream_leader(urls: str, stream: str, connect: dict[str, Any]) -> str | None:
    import nats
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as RequestTimeout
    from nats.js.errors import NotFoundError

    client = await nats.connect(urls.split(","), connect_timeout=1, allow_reconnect=False, **connect)
    try:
        try:
            info = await client.jetstream().stream_info(stream)
        except (NotFoundError, RequestTimeout, NoRespondersError):
            return None
        return info.cluster.leader if info.cluster else None
    finally:
        await client.close()


