"""Sessions streamed to a 3-node JetStream cluster and collected: every event delivered or counted lost."""

from __future__ import annotations

from pathlib import Path

from tests.fleet.harness import (
    CollectorProcess,
    Host,
    NatsCluster,
    dissect_count,
    events_in,
    wait_until_ended,
    written_by,
)

RATE = 1500  # events a second per producer: far below what one host takes
COUNT = 3000


def _hosts(tmp_path: Path, names: list[str]) -> list[Host]:
    return [Host(tmp_path / name, name) for name in names]


def test_three_hosts_streamed_and_collected_exactly(tmp_path: Path, nats_cluster: NatsCluster) -> None:
    hosts = _hosts(tmp_path, ["alpha", "beta", "gamma"])
    out = tmp_path / "fleet"
    collector = CollectorProcess(nats_cluster.urls, out, "--to", "etl,parquet")
    try:
        sessions = [host.start_session("Fleet", f"*Fleet.{host.name}", nats_cluster.urls, buffer_size=16) for host in hosts]
        producers = [host.producer(f"Fleet.{host.name}", COUNT, RATE) for host in hosts]
        written = {host.name: written_by(process) for host, process in zip(hosts, producers, strict=True)}
        finals = {host.name: session.stop() for host, session in zip(hosts, sessions, strict=True)}
        report = wait_until_ended(out, 3)
        assert nats_cluster.stream_leader() is not None
        info = _stream_info(nats_cluster)
        assert info["replicas"] == 3
        for host in hosts:
            item = report["hosts"][host.name]
            events = events_in(out, host.name)
            assert len(events) == len(set(events))  # nothing twice
            assert item["events"] == len(events) == written[host.name], (host.name, item, finals[host.name])
            assert item["gaps"] == 0 and item["events_lost"] == 0
            assert sorted(index for _, index in events) == list(range(COUNT))
            files = sorted((out / host.name).rglob("*.etl"))
            assert sum(dissect_count(path) for path in files) == written[host.name]
        final = collector.stop()
        assert set(final["hosts"]) == {"alpha", "beta", "gamma"}
    finally:
        collector.kill()
        for host in hosts:
            host.stop()


def _stream_info(cluster: NatsCluster) -> dict[str, object]:
    import asyncio

    from openetw.fleet.connect import StreamOptions
    from openetw.fleet.status import status_of_stream

    return asyncio.run(status_of_stream(StreamOptions.build(cluster.urls)))

