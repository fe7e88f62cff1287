"""The fleet's parts without a server: message names, the spool's order, the collector's books."""

from __future__ import annotations

from pathlib import Path

import pytest

from openetw.errors import InvalidArgument
from openetw.etl import EtlReader
from openetw.fleet.check import Checked, check_message
from openetw.fleet.connect import StreamOptions, parse_servers
from openetw.fleet.spool import Item, Spool
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER, message_headers, parse_headers, subject_for


def test_subjects_ids_and_headers() -> None:
    assert subject_for("etw.{host}.{session}", "web-01.example", "My Trace") == "etw.web-01_example.My_Trace"
    for bad in ("other.{host}", "etw.{nope}", "etw.*.{session}", "etw", "etw.{session}.{host}", "etw.{host}", "etw.x.{session}"):
        with pytest.raises(InvalidArgument):
            subject_for(bad, "h", "s")
    headers = message_headers(host="h", session="s", start=7, sequence=3, kind=KIND_BUFFER, events=5, events_lost=2,
                              buffers_lost=1, gap=(1, 2))  # fmt: skip
    assert headers["Nats-Msg-Id"] == "h:s:7:3"
    assert message_headers(host="h", session="s", start=7, sequence=3, kind=KIND_BUFFER, events=5, events_lost=2, buffers_lost=1,
                           nonce="n1")["Nats-Msg-Id"] == "h:s:7:3:n1"  # fmt: skip
    info = parse_headers(headers)
    assert (info.key, info.sequence, info.events, info.events_lost, info.buffers_lost, info.gap) == (("h", "s", 7), 3, 5, 2, 1, (1, 2))
    with pytest.raises(InvalidArgument):
        parse_headers({"Openetw-Host": "h"})
    assert parse_servers("nats://a:1,b:2") == ["nats://a:1", "nats://b:2"]
    with pytest.raises(InvalidArgument):
        parse_servers("http://a:1")
    with pytest.raises(InvalidArgument):
        StreamOptions.build("nats://a:1", user="u")  # no password


def test_spool_keeps_order_across_memory_and_disk(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s.spool")
    for sequence in range(10):
        spool.push(Item(sequence, KIND_BUFFER, bytes([sequence]) * 100, sequence, 0, 0, (sequence, sequence) if sequence == 4 else None))
        if sequence % 3 == 0:
            spool.spill(150)  # all but the newest item or so goes to disk
    assert spool.spilled > 0
    popped = [spool.pop() for _ in range(10)]
    assert [item.sequence for item in popped if item] == list(range(10))
    assert all(item is not None and item.payload == bytes([item.sequence]) * 100 for item in popped)
    assert popped[4] is not None and popped[4].gap == (4, 4)
    assert spool.pop() is None
    spool.close()
    assert not (tmp_path / "s.spool").exists()


def _corpus_buffers() -> tuple[bytes, bytes]:
    """A logfile header buffer and one buffer of 5 records (8 KB buffers)."""
    from tests.conftest import corpus_path

    data = corpus_path("etl", "perfview", "primitive-types.etl").read_bytes()
    return data[:8192], data[8192:16384]


def _message(kind: str, sequence: int, payload: bytes, host: str = "h", session: str = "S") -> Checked:
    headers = message_headers(host=host, session=session, start=1, sequence=sequence, kind=kind, events=5, events_lost=0, buffers_lost=0)
    return check_message(f"etw.{host}.{session}", headers, payload)


def test_store_drops_duplicates_and_survives_a_crash(tmp_path: Path) -> None:
    header, payload = _corpus_buffers()
    store = FleetStore(tmp_path, rotate_bytes=8192 * 3)
    assert store.add(_message(KIND_BUFFER, 1, payload)) == "later"  # before its header
    assert store.add(_message(KIND_HEADER, 0, header)) == "written"
    for sequence in (1, 2, 3):
        assert store.add(_message(KIND_BUFFER, sequence, payload)) == "written"
    assert store.add(_message(KIND_BUFFER, 2, payload)) == "duplicate"
    store.commit()
    assert store.add(_message(KIND_BUFFER, 4, payload)) == "written"  # not committed: a crash loses it
    store.close()

    again = FleetStore(tmp_path, rotate_bytes=8192 * 3)
    assert again.add(_message(KIND_BUFFER, 3, payload)) == "duplicate"
    assert again.add(_message(KIND_BUFFER, 4, payload)) == "written"
    assert again.add(_message(KIND_BUFFER, 6, payload)) == "written"
    assert again.add(_message(KIND_END, 7, b"")) == "written"
    again.commit()
    report = again.report()
    (session,) = report["sessions"]
    assert (session["buffers"], session["events"], session["gaps"], session["gap_ranges"]) == (5, 25, 1, [[5, 5]])
    assert len(session["files"]) == 3  # header + 2 buffers per file: rotated
    sizes = [(tmp_path / name).stat().st_size for name in session["files"]]
    assert sizes == [8192 * 3, 8192 * 3, 8192 * 2]
    with EtlReader(tmp_path / session["files"][0]) as reader:
        assert reader.header.buffers_written == 3
        assert sum(1 for _ in reader) > 10
    again.close()


def test_command_line_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from openetw.cli.main import main

    assert main(["session", "start", "X", "--subject", "etw.{host}", "--socket", str(tmp_path / "none.sock")]) == 2
    assert "go with --stream" in capsys.readouterr().err
    assert main(["collect", "nats://127.0.0.1:1", "-o", str(tmp_path / "out"), "--to", "etl,csv"]) == 2
    assert "unknown output csv" in capsys.readouterr().err
    assert main(["fleet", "status", str(tmp_path / "nothing-here")]) == 2
    assert main(["trace", "--host", "a", "-p", "X"]) == 2
    assert "go with --stream" in capsys.readouterr().err


def test_deploy_examples_are_valid_server_configurations() -> None:
    import subprocess

    from tests.fleet.harness import need_nats_server

    need_nats_server()
    from openetw.testing.nats_cluster import find_nats_server

    deploy = Path(__file__).resolve().parents[2] / "deploy" / "fleet"
    for name in ("etw-n1.conf", "etw-n2.conf", "etw-n3.conf"):
        done = subprocess.run([str(find_nats_server()), "-c", str(deploy / name), "-t"], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


def test_event_log_batch_appended_once_across_a_crash(tmp_path: Path) -> None:
    """The books announce a batch before it goes to the Event Log; a collector that stopped
    right after (or right before) the append appends it once when it starts again."""
    from openetw.fleet.to_log import FORWARDED_LOG
    header, buffer = _corpus_buffers()

    store = FleetStore(tmp_path, outputs=frozenset({"etl", "log"}))
    store.add(_message(KIND_HEADER, 0, header))
    store.add(_message(KIND_BUFFER, 1, buffer))
    store.commit()
    logged = store.log.written()
    assert logged == 6
    # The next batch: announced in the books, then the collector stops before the append.
    store.add(_message(KIND_BUFFER, 2, buffer))

    def stop_here(events: object) -> None:
        raise SystemExit("the collector stops here")

    store.log.append = stop_here
    with pytest.raises(SystemExit):
        store.commit()
    store.close()
    again = FleetStore(tmp_path, outputs=frozenset({"etl", "log"}))
    assert again.log.written() == 12  # appended on start, once
    again.close()
    assert FleetStore(tmp_path, outputs=frozenset({"etl", "log"})).log.written() == 12  # and never again
    assert sum(1 for _ in again.log.store.query(FORWARDED_LOG)) == 12


def test_the_publishers_header_block_says_what_wire_says(tmp_path: Path) -> None:
    """The header block the publisher encodes (fixed fields once, numbers per message) reads
    back as ``wire.message_headers`` plus the expected stream, gap and all."""

    from openetw.fleet.publisher import EXPECTED_STREAM, StreamPublisher

    publisher = StreamPublisher(StreamOptions.build("nats://127.0.0.1:1"), host="web 01", session="S.1", subject="etw.web_01.S_1",
                                start=17, spool_path=tmp_path / "s.spool", spool_bytes=1 << 20)  # fmt: skip
    for item in (Item(5, KIND_BUFFER, b"x", 9, 3, 2, (3, 4)), Item(0, KIND_HEADER, b"h", 0, 0, 0, None)):
        block = publisher._headers(item).decode()
        assert block.startswith("NATS/1.0\r\n") and block.endswith("\r\n\r\n")
        fields = dict(line.split(": ", 1) for line in block.split("\r\n")[1:] if line)
        expected = message_headers(host="web 01", session="S.1", start=17, sequence=item.sequence, kind=item.kind, events=item.events,
                                   events_lost=item.events_lost, buffers_lost=item.buffers_lost, gap=item.gap, nonce=publisher.nonce)
        assert fields == {**expected, EXPECTED_STREAM: "ETW"}  # fmt: skip


def test_the_publishing_connection_reads_answers_however_they_arrive() -> None:
    """Against a scripted server: the handshake, two publishes in one send, then answers cut at
    awkward places among a PING (answered), an -ERR (kept) and a 503 (a refusal)."""
    import socket
    import threading

    from openetw.fleet.natsconn import PublishConnection

    listener = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.sendall(b'INFO {"server_id":"test","headers":true,"max_payload":1048576}\r\n')
            while b"PING\r\n" not in received:
                received.extend(peer.recv(4096))
            inbox = received.split(b"SUB ", 1)[1].split(b".* 1", 1)[0]
            peer.sendall(b"PONG\r\n")
            while received.count(b"HPUB") < 2:
                received.extend(peer.recv(1 << 16))
            ack = b'{"stream":"ETW","seq":41}'
            script = (b"PING\r\nMSG " + inbox + b".1 1 " + str(len(ack)).encode() + b"\r\n" + ack + b"\r\n-ERR 'Permissions Violation'\r\n"
                      + b"HMSG " + inbox + b".2 1 30 30\r\nNATS/1.0 503 No Responders\r\n\r\n\r\n")  # fmt: skip
            for cut in (3, 30, 47, len(script)):
                peer.sendall(script[:cut])
                script = script[cut:]
                threading.Event().wait(0.05)
            while b"PONG" not in received[received.find(b"HPUB"):]:
                received.extend(peer.recv(4096))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    connection = PublishConnection(StreamOptions.build(f"nats://127.0.0.1:{listener.getsockname()[1]}"), name="t", timeout=5.0)
    try:
        connection.publish([("etw.h.s", 1, b"NATS/1.0\r\nA: b\r\n\r\n", b"payload one"), ("etw.h.s", 2, b"NATS/1.0\r\n\r\n", bytearray(b"two"))])
        answers: list[tuple[int, str | None]] = []
        while len(answers) < 2 and connection.wait(5.0):
            answers += connection.read()
        assert answers == [(1, None), (2, "no stream leader answers (503)")]
        assert connection.errors == ["Permissions Violation"]
        server.join(5.0)
        assert not server.is_alive()  # it saw the PONG that answered its PING
        sent = bytes(received)
        assert b"HPUB etw.h.s " in sent and b"NATS/1.0\r\nA: b\r\n\r\npayload one\r\n" in sent and b"NATS/1.0\r\n\r\ntwo\r\n" in sent
    finally:
        connection.close()
        listener.close()
