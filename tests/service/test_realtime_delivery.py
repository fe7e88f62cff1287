"""How the service's loop hands frames to a real-time consumer's socket.

The loop pauses after taking producers' buffers (so that one wakeup takes several); frames
queued for clients, real-time buffers above all, must keep going out during that pause, or a
consumer gets one socket buffer's worth per pause however fast it reads.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from openetw.ipc.protocol import Channel, encode_frame
from openetw.service.connection import REALTIME_SEND_BUFFER
from openetw.service.server import TraceService

BUFFER = bytes(range(256)) * 256  # one 64 KB buffer's worth of payload
QUEUED = 40  # frames: far more than a socket of default size holds


def _service_with_a_consumer(tmp_path: Path) -> tuple[TraceService, socket.socket, socket.socket]:
    service = TraceService(tmp_path / "control.sock")  # not listening: the loop's parts alone
    ours, peer = socket.socketpair()
    return service, ours, peer


def test_queued_buffers_go_out_while_the_loop_pauses(tmp_path: Path) -> None:
    service, ours, peer = _service_with_a_consumer(tmp_path)
    try:
        connection = service.adopt_connection(ours)
        for _ in range(QUEUED):
            assert connection.send({"event": "buffer", "session_id": 1}, payload=BUFFER, is_buffer=True)
        service._pause_until = time.monotonic() + 0.05
        service._pause_after_draining()
        assert len(connection.outgoing) < QUEUED  # the socket took what it could meanwhile
        peer.setblocking(False)
        first = peer.recv(1 << 20)
        assert first  # and the consumer can read it
    finally:
        service.close()
        peer.close()


def test_the_frames_sent_during_a_pause_arrive_whole_and_in_order(tmp_path: Path) -> None:
    service, ours, peer = _service_with_a_consumer(tmp_path)
    try:
        connection = service.adopt_connection(ours)
        for number in range(QUEUED):
            connection.send({"event": "buffer", "session_id": 1, "n": number}, payload=BUFFER, is_buffer=True)
        channel = Channel(peer)
        received: list[int] = []
        for _ in range(20 * QUEUED):  # every pause sends at least one frame: far more rounds than needed
            if len(received) == QUEUED:
                break
            service._pause_until = time.monotonic() + 0.01
            service._pause_after_draining()
            while len(received) < QUEUED and channel.has_message():
                message = channel.receive()
                assert message is not None and message.payload == BUFFER
                received.append(message.body["n"])
        assert received == list(range(QUEUED))
        assert connection.queued_bytes == 0
    finally:
        service.close()
        peer.close()


def test_a_real_time_consumers_socket_is_widened(tmp_path: Path) -> None:
    service, ours, peer = _service_with_a_consumer(tmp_path)
    try:
        connection = service.adopt_connection(ours)
        before = ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        connection.widen_send_buffer()
        after = ours.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        system_limit = int(Path("/proc/sys/net/core/wmem_max").read_text())
        assert after >= min(REALTIME_SEND_BUFFER, system_limit)
        assert after >= before
    finally:
        service.close()
        peer.close()


def test_a_consumer_can_wait_a_while_for_the_next_frame() -> None:
    ours, peer = socket.socketpair()
    try:
        channel = Channel(peer)
        assert not channel.has_message()  # nothing sent: no wait by default
        ours.sendall(encode_frame({"event": "buffer", "session_id": 1}, BUFFER))
        assert channel.has_message(60.0)  # already there: answers at once
        message = channel.receive()
        assert message is not None and message.payload == BUFFER
        ours.close()
        assert channel.has_message(60.0)  # the end of the stream is news too
        assert channel.receive() is None
    finally:
        peer.close()
