"""The control protocol's framing (pure) and descriptor passing over a real socket pair."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openetw.ipc.protocol import (
    FRAME_HEADER,
    MAGIC,
    MAX_JSON,
    NOTICE,
    PROTOCOL_VERSION,
    Channel,
    FrameDecoder,
    ProtocolError,
    encode_frame,
    recv_into_decoder,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 64), 1 << 64) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
bodies = st.dictionaries(st.text(max_size=10), json_values, max_size=5)


def test_a_frame_is_magic_version_lengths_json_payload() -> None:
    frame = encode_frame({"op": "query"}, b"\x01\x02")
    magic, version, json_length, payload_length = FRAME_HEADER.unpack_from(frame, 0)
    assert (magic, version, payload_length) == (MAGIC, PROTOCOL_VERSION, 2)
    assert frame[FRAME_HEADER.size : FRAME_HEADER.size + json_length] == b'{"op":"query"}'
    assert frame.endswith(b"\x01\x02")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(bodies, st.binary(max_size=64)), min_size=1, max_size=5), st.integers(1, 50))
def test_feeding_in_pieces_yields_the_same_messages(messages: list[tuple[dict, bytes]], piece: int) -> None:
    stream = b"".join(encode_frame(body, payload) for body, payload in messages)
    decoder = FrameDecoder(max_payload=1 << 20)
    got = []
    for start in range(0, len(stream), piece):
        decoder.feed(stream[start : start + piece])
        got += [(m.body, m.payload) for m in decoder.messages()]
    assert got == messages


def test_notices_between_frames_are_counted_for_producers_only() -> None:
    stream = NOTICE * 3 + encode_frame({"op": "a"}) + NOTICE + encode_frame({"op": "b"})
    decoder = FrameDecoder(allow_notices=True)
    decoder.feed(stream)
    assert [m.body["op"] for m in decoder.messages()] == ["a", "b"]
    assert decoder.notices == 4
    strict = FrameDecoder()
    strict.feed(NOTICE)
    with pytest.raises(ProtocolError, match="notices"):
        list(strict.messages())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"XYZ" + bytes(9), "magic"),
        (b"O!", "magic"),
        (FRAME_HEADER.pack(MAGIC, 9, 2, 0) + b"{}", "version"),
        (FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, MAX_JSON + 1, 0), "exceeds"),
        (FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 2, 5) + b"{}12345", "payload"),
        (FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 4, 0) + b"null", "not an object"),
        (FRAME_HEADER.pack(MAGIC, PROTOCOL_VERSION, 3, 0) + b"{x}", "JSON"),
        (encode_frame({"op": "x", "fds": 1}), "claims 1 descriptors"),
        (encode_frame({"op": "x", "fds": -1}), "descriptor count"),
        (encode_frame({"op": "x", "fds": True}), "descriptor count"),
    ],
)
def test_bad_input_is_a_protocol_error_and_drops_the_rest(data: bytes, message: str) -> None:
    decoder = FrameDecoder()
    decoder.feed(data + encode_frame({"op": "after"}))
    with pytest.raises(ProtocolError, match=message):
        list(decoder.messages())
    assert decoder.failed
    assert list(decoder.messages()) == []


def test_oversized_outgoing_messages_are_refused() -> None:
    with pytest.raises(ProtocolError):
        encode_frame({"blob": "x" * MAX_JSON})


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_ever_raise_protocol_error(data: bytes) -> None:
    decoder = FrameDecoder(allow_notices=True, max_payload=64)
    decoder.feed(data)
    try:
        list(decoder.messages())
    except ProtocolError:
        pass


def test_descriptors_travel_with_their_frame() -> None:
    left, right = socket.socketpair()
    read_end, write_end = os.pipe()
    try:
        channel = Channel(left)
        channel.send({"op": "one"})
        channel.send({"op": "two"}, fds=[write_end])
        decoder = FrameDecoder()
        messages = []
        while len(messages) < 2:
            assert recv_into_decoder(right, decoder)
            messages += list(decoder.messages())
        assert [m.body["op"] for m in messages] == ["one", "two"]
        assert messages[0].fds == []
        passed = messages[1].take_fd()
        os.write(passed, b"through")
        os.close(passed)
        assert os.read(read_end, 16) == b"through"
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        left.close()
        right.close()


def test_unclaimed_descriptors_are_closed_when_the_decoder_fails() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    decoder = FrameDecoder()
    decoder.feed(b"junk", [write_end])
    with pytest.raises(ProtocolError):
        list(decoder.messages())
    with pytest.raises(OSError):
        os.fstat(write_end)


def test_poll_returns_nothing_on_timeout_and_none_once_closed() -> None:
    left, right = socket.socketpair()
    channel = Channel(left)
    assert channel.poll(0.01) == []
    right.sendall(encode_frame({"event": "x"}))
    assert [m.body for m in channel.poll(1.0) or []] == [{"event": "x"}]
    right.close()
    assert channel.poll(1.0) is None
    channel.close()
