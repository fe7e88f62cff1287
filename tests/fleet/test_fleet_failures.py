"""The fleet survives its failures: a stream leader killed, the collector killed, the whole
cluster stopped (the hosts' spools hold, or count exactly what they could not hold)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.fleet.harness import CollectorProcess, Host, NatsCluster, events_in, wait_until_ended, written_by


def _check_exact(out: Path, host: str, written: int, count: int) -> dict[str, object]:
    from tests.fleet.harness import collected

    report = collected(out)
    item = report["hosts"][host]
    events = events_in(out, host)
    assert len(events) == len(set(events)), "an event collected twice"
    assert item["events"] == len(events) == written == count, item
    assert item["gaps"] == 0 and item["events_lost"] == 0
    return item


def test_stream_leader_killed_and_back(tmp_path: Path, nats_cluster: NatsCluster) -> None:
    host = Host(tmp_path / "alpha", "alpha")
    out = tmp_path / "fleet"
    collector = CollectorProcess(nats_cluster.urls, out)
    try:
        session = host.start_session("Failover", "*Fleet.Failover", nats_cluster.urls, buffer_size=8)
        producer = host.producer("*Fleet.Failover", 4000, 800)
        deadline = time.monotonic() + 20
        while (leader := nats_cluster.stream_leader()) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leader is not None
        time.sleep(1.5)
        nats_cluster.node(leader).kill()
        time.sleep(2.0)
        nats_cluster.node(leader).start()
        written = written_by(producer)
        session.stop()
        wait_until_ended(out, 1)
        _check_exact(out, "alpha", written, 4000)
    finally:
        collector.kill()
        host.stop()


def test_collector_killed_and_restarted(tmp_path: Path, nats_cluster: NatsCluster) -> None:
    host = Host(tmp_path / "alpha", "alpha")
    out = tmp_path / "fleet"
    collector = CollectorProcess(nats_cluster.urls, out, "--to", "etl,log")
    try:
        session = host.start_session("Restart", "*Fleet.Restart", nats_cluster.urls, buffer_size=8)
        producer = host.producer("*Fleet.Restart", 4000, 800)
        time.sleep(2.5)
        collector.kill()  # SIGKILL: whatever it had not committed is delivered again
        time.sleep(1.0)
        collector = CollectorProcess(nats_cluster.urls, out, "--to", "etl,log")
        written = written_by(producer)
        session.stop()
        wait_until_ended(out, 1)
        item = _check_exact(out, "alpha", written, 4000)
        assert item["buffers"] > 10
        from openetw.eventlog import LogStore

        logged = [int(e.fields["index"]) for e in LogStore(out / "logs").query("ForwardedEvents") if e.fields and "index" in e.fields]
        assert sorted(logged) == list(range(4000))  # the Event Log too: once each
    finally:
        collector.kill()
        host.stop()


def test_cluster_down_spool_holds_or_counts_exactly(tmp_path: Path, nats_cluster: NatsCluster) -> None:
    """The whole cluster stops for 10 s while two hosts write: one with room in its spool gets
    everything through in order; one with a tiny spool loses buffers, and written = collected +
    counted lost, exactly, with the gap reported."""
    roomy, tiny = Host(tmp_path / "roomy", "roomy"), Host(tmp_path / "tiny", "tiny")
    out = tmp_path / "fleet"
    collector = CollectorProcess(nats_cluster.urls, out)
    try:
        held = roomy.start_session("Outage", "*Fleet.Roomy", nats_cluster.urls, buffer_size=8, spool_size=1)
        squeezed = tiny.start_session("Outage", "*Fleet.Tiny", nats_cluster.urls, buffer_size=8, spool_size=0.05)
        producers = [roomy.producer("*Fleet.Roomy", 4500, 300), tiny.producer("*Fleet.Tiny", 4500, 300)]
        time.sleep(2.0)
        nats_cluster.kill()
        time.sleep(9.5)
        during = held.stream_state()
        assert during is not None
        time.sleep(0.5)
        nats_cluster.start()
        written = [written_by(process) for process in producers]
        final_roomy, final_tiny = held.stop(), squeezed.stop()
        assert not during["reachable"] and during["spilled_items"] > 0, during  # the disk held them
        report = wait_until_ended(out, 2, timeout=90)

        _check_exact(out, "roomy", written[0], 4500)
        assert final_roomy["events_lost"] == 0
        indices = [index for _, index in events_in(out, "roomy")]
        assert indices == sorted(indices)  # replayed in order

        item = report["hosts"]["tiny"]
        events = events_in(out, "tiny")
        assert len(events) == len(set(events)) == item["events"]
        assert item["events_lost"] > 0 and item["gaps"] > 0
        assert written[1] == item["events"] + item["events_lost"]
        assert item["events_lost"] == final_tiny["events_lost"]
        session = next(s for s in report["sessions"] if s["host"] == "tiny")
        assert session["gaps"] == item["buffers_lost"] == final_tiny["realtime_buffers_lost"]
        from openetw.etl import EtlReader

        with EtlReader(out / session["files"][-1]) as reader:  # the collected file says what its host lost
            assert (reader.header.events_lost, reader.header.buffers_lost) == (item["events_lost"], item["buffers_lost"])
    finally:
        collector.kill()
        roomy.stop()
        tiny.stop()
