"""The stream publisher's own costs, against scripted servers: sends that wait for room, batches
of buffers per send while the window is full, and the memory it keeps for the buffers it holds."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from openetw.fleet.connect import StreamOptions
from openetw.fleet.natsconn import ConnectionLost, PublishConnection
from openetw.fleet.publisher import RECYCLE_BYTES, WAKE_BATCH, WINDOW, StreamPublisher


def _handshake(peer: socket.socket) -> bytearray:
    """INFO, then read up to the client's PING and answer it; what the client sent so far."""
    peer.sendall(b'INFO {"server_id":"test","headers":true,"max_payload":8388608}\r\n')
    received = bytearray()
    while b"PING\r\n" not in received:
        data = peer.recv(4096)
        if not data:
            raise ConnectionError("the client went")
        received += data
    peer.sendall(b"PONG\r\n")
    return received


@contextmanager
def _server(serve: object) -> Iterator[int]:
    """A listening socket whose first connection ``serve(peer)`` handles on a thread; its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        peer, _ = listener.accept()
        with peer:
            try:
                serve(peer)  # type: ignore[operator]
            except OSError:
                pass  # the client closed first

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(10)


def test_a_send_waits_for_room_and_gives_up_on_a_server_that_takes_nothing() -> None:
    """The connected socket is non-blocking (reading costs no switch of its mode); a batch larger
    than the socket's buffers still leaves whole once the server reads, and one the server never
    reads ends the connection within its timeout."""
    chunk = bytes(range(256)) * 4096  # 1 MB
    expected = (chunk + b"\r\n") * 24
    body = bytearray()
    reading = threading.Event()

    def slow(peer: socket.socket) -> None:
        _handshake(peer)
        reading.wait(10)
        while len(body) < len(expected):
            data = peer.recv(1 << 20)
            if not data:
                return
            body.extend(data)

    with _server(slow) as port:
        connection = PublishConnection(StreamOptions.build(f"nats://127.0.0.1:{port}"), name="t", timeout=10.0)
        try:
            assert connection._sock is not None and connection._sock.gettimeout() == 0.0
            assert connection.read() == []  # nothing came: no wait
            threading.Timer(0.2, reading.set).start()
            connection._send_parts([part for _ in range(24) for part in (chunk, b"\r\n")])
        finally:
            connection.close()
    assert body == expected

    stop = threading.Event()

    def deaf(peer: socket.socket) -> None:
        _handshake(peer)
        stop.wait(10)

    with _server(deaf) as port:
        connection = PublishConnection(StreamOptions.build(f"nats://127.0.0.1:{port}"), name="t", timeout=0.5)
        try:
            with pytest.raises(ConnectionLost):
                connection._send_parts([chunk] * 64)
        finally:
            connection.close()
            stop.set()


def _jetstream(acks: threading.Event, published: list[int]) -> object:
    """A scripted JetStream: answers the stream lookup, then acknowledges each HPUB 1 ms after
    the one before (as a replicated stream paces them); counts the messages in ``published``."""

    def serve(peer: socket.socket) -> None:
        received = _handshake(peer)
        inbox = bytes(received.split(b"SUB ", 1)[1].split(b".* 1", 1)[0])
        position = 0
        sequence = 0
        while not acks.is_set():
            end = received.find(b"\r\n", position)
            if end < 0:
                data = peer.recv(1 << 16)
                if not data:
                    return
                received += data
                continue
            line = bytes(received[position:end])
            fields = line.split()
            if line.startswith((b"PUB ", b"HPUB ")):
                size = int(fields[-1])
                while len(received) < end + 2 + size + 2:
                    received += peer.recv(1 << 16)
                position = end + 2 + size + 2
                if line.startswith(b"PUB "):  # the stream's INFO: it exists
                    peer.sendall(b"MSG " + fields[2] + b' 1 13\r\n{"config":{}}\r\n')
                    continue
                sequence += 1
                published.append(int(fields[2][len(inbox) + 1 :]))
                threading.Event().wait(0.001)
                answer = b'{"stream":"ETW","seq":%d}' % sequence
                peer.sendall(b"MSG " + fields[2] + b" 1 %d\r\n" % len(answer) + answer + b"\r\n")
                continue
            position = end + 2
            if line == b"PING":
                peer.sendall(b"PONG\r\n")

    return serve


def test_buffers_leave_in_batches_while_the_window_is_full(tmp_path: Path) -> None:
    """With buffers waiting and the window full, the thread lets acknowledgements gather before
    it sends again: far fewer sends than buffers, every buffer acknowledged once, in order."""
    count = 240
    done = threading.Event()
    published: list[int] = []
    sends: list[int] = []
    with _server(_jetstream(done, published)) as port:
        publisher = StreamPublisher(StreamOptions.build(f"nats://127.0.0.1:{port}"), host="h", session="S", subject="etw.h.S",
                                    start=1, spool_path=tmp_path / "s.spool", spool_bytes=64 << 20)  # fmt: skip
        original = PublishConnection.publish

        def counted(self: PublishConnection, messages: list[tuple[str, int, bytes, bytes]]) -> None:
            sends.append(len(messages))
            original(self, messages)

        PublishConnection.publish = counted  # type: ignore[assignment,method-assign]
        try:
            publisher.begin(bytes(4096))
            for _ in range(count):
                assert publisher.offer(bytes(4096), 3)
            assert publisher.wait(60.0)
        finally:
            PublishConnection.publish = original  # type: ignore[method-assign]
            done.set()
    assert publisher.buffers_acknowledged == count and publisher.events_acknowledged == 3 * count
    assert published == list(range(count + 2))  # header, buffers, end: each once, in order
    assert max(sends) <= WINDOW
    assert len(sends) <= (count + 2) / (WAKE_BATCH / 2), sends  # without gathering: about one send per acknowledgement


def test_the_memory_of_acknowledged_buffers_is_kept_up_to_the_spool_size(tmp_path: Path) -> None:
    """Acknowledged buffers' memory takes the next buffers (no new memory for a burst the stream
    already held once), never more of it than the spool size, and what is beyond RECYCLE_BYTES
    goes back once the stream is idle."""
    size = 64 << 10
    publisher = StreamPublisher(StreamOptions.build("nats://127.0.0.1:1"), host="h", session="S", subject="etw.h.S", start=1,
                                spool_path=tmp_path / "s.spool", spool_bytes=10 << 20)  # fmt: skip
    burst = (10 << 20) // size  # as many as the spool holds
    assert burst * size > RECYCLE_BYTES
    for _ in range(2):
        for _ in range(burst):
            assert publisher.offer(bytes(size), 1)
        assert not publisher.offer(bytes(size), 1)  # the spool is full: counted lost
        held = list(publisher._incoming)
        publisher._incoming.clear()
        for item in held:
            publisher._acknowledged(item)
        assert len(publisher._recycled) == burst
        assert {id(item.payload) for item in held} == {id(memory) for memory in publisher._recycled}
    first = set(map(id, publisher._recycled))
    assert publisher.offer(bytes(size), 1) and id(publisher._incoming[-1].payload) in first  # the kept memory, not new
    publisher._trim_recycled()
    assert len(publisher._recycled) * size <= RECYCLE_BYTES
    assert publisher.buffers_lost == 2
