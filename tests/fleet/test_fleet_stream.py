"""Sessions streamed to a 3-node JetStream cluster and collected: every event delivered or counted lost."""

from __future__ import annotations

import time
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
    collector = CollectorProcess(nats_cluster.urls, out, "--to", "etl,parquet,log")
    try:
        own = tmp_path / "own" / "alpha"  # alpha writes its own file too: the file's memory holds each buffer first
        own.mkdir(parents=True)
        files_too = {"alpha": {"output": str(own / "alpha.etl")}}
        sessions = [host.start_session("Fleet", "*Fleet.App", nats_cluster.urls, buffer_size=16, **files_too.get(host.name, {}))
                    for host in hosts]  # fmt: skip
        producers = [host.producer("Fleet.App", COUNT, RATE) for host in hosts]
        written = {host.name: written_by(process) for host, process in zip(hosts, producers, strict=True)}
        finals = {host.name: session.stop() for host, session in zip(hosts, sessions, strict=True)}
        report = wait_until_ended(out, 3)
        deadline = time.monotonic() + 20
        while nats_cluster.stream_leader() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # a busy cluster may let one request time out
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
        assert sorted(events_in(tmp_path / "own", "alpha")) == sorted(events_in(out, "alpha"))  # the host's file = what was collected
        _fleet_status_shows(nats_cluster.urls, out, written)
        final = collector.stop()
        assert set(final["hosts"]) == {"alpha", "beta", "gamma"}
        _same_answers_from_duckdb_and_dask(out / "parquet", written)
        _forwarded_events_per_host(out, written)
    finally:
        collector.kill()
        for host in hosts:
            host.stop()


def _stream_info(cluster: NatsCluster) -> dict[str, object]:
    import asyncio

    from openetw.fleet.connect import StreamOptions
    from openetw.fleet.status import status_of_stream

    return asyncio.run(status_of_stream(StreamOptions.build(cluster.urls)))



def _same_answers_from_duckdb_and_dask(root: Path, written: dict[str, int]) -> None:
    """The collector's Parquet layout, read unchanged by DuckDB (openetw sql over the tree) and
    by Dask on a local cluster of worker processes: the same answers."""
    from openetw.export.sql import open_database, run_query

    connection = open_database([str(root)])
    try:
        per_host = dict(run_query(connection, "SELECT host, count(*) FROM events WHERE provider_name = 'Fleet.App' GROUP BY host").rows)
        ticks = {row[0]: (row[1], row[2], row[3]) for row in run_query(
            connection, 'SELECT host, count(*), sum("index"), count(DISTINCT pid) FROM "Fleet.App/Tick" GROUP BY host').rows}
    finally:
        connection.close()
    assert per_host == written
    assert ticks == dict.fromkeys(written, (COUNT, COUNT * (COUNT - 1) // 2, 1))

    import dask.dataframe as dd  # the test extra's
    import distributed

    def partitioned(pattern: str, columns: list[str]) -> object:
        parts = []
        for path in sorted(root.glob(pattern)):
            host = next(part.split("=", 1)[1] for part in path.parts if part.startswith("host="))
            parts.append(dd.read_parquet(str(path), columns=columns).assign(host=host))
        return dd.concat(parts)

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster):  # fmt: skip
        events = partitioned("host=*/date=*/*/events.parquet", ["provider_name"])
        dask_hosts = events[events.provider_name == "Fleet.App"].groupby("host").size().compute().to_dict()
        tick = partitioned("host=*/date=*/*/Fleet.App/Tick_v*.parquet", ["index", "pid"])
        grouped = tick.groupby("host")["index"].agg(["count", "sum"]).compute()
        pids = tick.groupby("host")["pid"].nunique().compute().to_dict()
    dask_ticks = {host: (int(row["count"]), int(row["sum"]), int(pids[host])) for host, row in grouped.iterrows()}
    assert {host: int(n) for host, n in dask_hosts.items()} == per_host
    assert dask_ticks == ticks


def _fleet_status_shows(servers: str, out: Path, written: dict[str, int]) -> None:
    """``openetw fleet status`` of the collector's directory and of the stream."""
    import json
    import subprocess
    import sys

    def status(source: str) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "openetw", "fleet", "status", source, "--json"], capture_output=True, text=True,
                              check=True)  # fmt: skip
        return dict(json.loads(done.stdout))

    local = status(str(out))
    hosts = local["hosts"]
    assert isinstance(hosts, dict)
    assert {host: item["events"] for host, item in hosts.items()} == written
    assert all(item["gaps"] == 0 and item["running"] == 0 for item in hosts.values())
    remote = status(servers)
    assert remote["replicas"] == 3 and set(remote["hosts"]) == set(written)  # type: ignore[arg-type]
    (consumer,) = remote["consumers"]  # type: ignore[misc]
    assert consumer["name"] == "openetw-collector" and consumer["pending"] == 0


def _forwarded_events_per_host(out: Path, written: dict[str, int]) -> None:
    """``--to log``: every event in the Event Log's ForwardedEvents, each with its host as Computer."""
    from collections import Counter

    from openetw.eventlog import LogStore

    events = list(LogStore(out / "logs").query("ForwardedEvents", xpath="*[System[Provider[@Name='Fleet.App']]]"))
    assert Counter(event.computer for event in events) == written
    assert {event.fields["index"] for event in events if event.computer == "alpha"} == {str(i) for i in range(COUNT)}  # type: ignore[index]
