"""LZXPRESS plain LZ77: [MS-XCA] examples, every length encoding, round trips, hostile input, real buffers."""

from __future__ import annotations

import random
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import CompressionError, InvalidArgument
from openetw.etl.lzxpress import compress, decompress
from tests.conftest import corpus_path

HEADER_SIZE = 0x48
BUFFER_FLAG_COMPRESSED = 0x40
COMPRESSED_FILES = ["net.4.5.2.x64.etl", "SelfDescribingSingleEvent.etl"]

ALPHABET = b"abcdefghijklmnopqrstuvwxyz"
ALPHABET_COMPRESSED = bytes.fromhex("3f000000") + ALPHABET
ABC_300_COMPRESSED = bytes.fromhex("ffffff1f 616263 1700 0f ff 2601")


def compressed_buffers(path) -> list[tuple[int, bytes, int]]:
    """(buffer index, compressed payload, inflated size) of each compressed buffer of an .etl file."""
    data = path.read_bytes()
    found = []
    position = index = 0
    while position < len(data):
        buffer_size, data_end = struct.unpack_from("<I44xI", data, position)
        (flags,) = struct.unpack_from("<H", data, position + 0x34)
        assert buffer_size >= HEADER_SIZE, f"buffer {index} at {position:#x}: BufferSize {buffer_size:#x}"
        if flags & BUFFER_FLAG_COMPRESSED:
            payload = data[position + HEADER_SIZE : position + buffer_size]
            found.append((index, payload, data_end - HEADER_SIZE))
        position += buffer_size
        index += 1
    assert position == len(data), "buffers do not end at the end of the file"
    return found


@pytest.fixture(scope="module")
def net_buffers() -> list[tuple[int, bytes, int]]:
    return compressed_buffers(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))


def one_long_match(length: int) -> bytes:
    """Data that the compressor must encode as the literal "a" and one match (distance 1, ``length``)."""
    return b"a" * (1 + length)


# --- [MS-XCA] section 3.1 and 2.4.4 examples -------------------------------------------------


def test_spec_example_literals_only():
    assert decompress(ALPHABET_COMPRESSED, 26) == ALPHABET
    assert compress(ALPHABET) == ALPHABET_COMPRESSED


def test_spec_example_abc_300_bytes():
    assert decompress(ABC_300_COMPRESSED, 300) == b"abc" * 100
    assert compress(b"abc" * 100) == ABC_300_COMPRESSED


def test_spec_example_overlapping_match():
    # [literal: "a"][match: offset=1, length=5]; the flag word is read from its top bit down.
    stream = bytes.fromhex("ffffff7f 61 0200")
    assert decompress(stream, 6) == b"aaaaaa"
    assert compress(b"aaaaaa") == stream


def test_accepts_bytearray_and_memoryview():
    assert decompress(bytearray(ABC_300_COMPRESSED), 300) == b"abc" * 100
    assert decompress(memoryview(b"xx" + ABC_300_COMPRESSED)[2:], 300) == b"abc" * 100


def test_empty():
    assert compress(b"") == b"\xff\xff\xff\xff"
    assert decompress(b"\xff\xff\xff\xff", 0) == b""
    assert decompress(b"", 0) == b""


# --- every length form --------------------------------------------------------------------------

MATCH_ENCODINGS = [
    (3, "0000"),  # 3-bit field
    (9, "0600"),
    (10, "0700 00"),  # 4-bit field
    (24, "0700 0e"),
    (25, "0700 0f 00"),  # byte
    (279, "0700 0f fe"),
    (280, "0700 0f ff 1501"),  # 16-bit field holding length - 3
    (65538, "0700 0f ff ffff"),
    (65539, "0700 0f ff 0000 00000100"),  # 32-bit field
    (200_003, "0700 0f ff 0000 400d0300"),
]


@pytest.mark.parametrize(("length", "match_hex"), MATCH_ENCODINGS)
def test_each_length_form(length, match_hex):
    stream = bytes.fromhex("ffffff7f 61") + bytes.fromhex(match_hex)  # flags: literal, match, padding
    assert compress(one_long_match(length)) == stream
    assert decompress(stream, 1 + length) == one_long_match(length)


def test_two_long_matches_share_one_length_byte():
    data = b"a" * 11 + b"b" * 13  # "a", match of 10 (nibble 0), "b", match of 12 (nibble 2)
    stream = bytes.fromhex("ffffff5f 61 0700 20 62 0700")
    assert compress(data) == stream
    assert decompress(stream, len(data)) == data


def test_trailing_flag_word_after_exactly_32_symbols():
    data = bytes(range(32))
    stream = compress(data)
    assert stream == bytes(4) + data + b"\xff\xff\xff\xff"
    assert decompress(stream, 32) == data


def test_match_at_maximum_distance():
    block = random.Random(7).randbytes(8192)
    stream = compress(block + block[:100])
    assert stream.endswith(bytes.fromhex("ffff 0f 4b"))  # distance 8192, length 100
    assert decompress(stream, 8292) == block + block[:100]


def test_no_match_beyond_maximum_distance():
    block = random.Random(8).randbytes(8193)
    data = block + block[:100]
    stream = compress(data)
    assert not stream.endswith(bytes.fromhex("ffff 0f 4b"))
    assert decompress(stream, len(data)) == data


# --- round trips ----------------------------------------------------------------------------------

repetitive = st.lists(
    st.tuples(st.binary(min_size=1, max_size=6), st.integers(min_value=1, max_value=400)), max_size=12
).map(lambda parts: b"".join(chunk * count for chunk, count in parts))


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_round_trip_random(data):
    assert decompress(compress(data), len(data)) == data


@settings(max_examples=150, deadline=None)
@given(repetitive)
def test_round_trip_repetitive(data):
    assert decompress(compress(data), len(data)) == data


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([b"ab", b"abc", b"x" * 70, bytes(range(40))]), max_size=400).map(b"".join))
def test_round_trip_reuses_far_and_near_matches(data):
    assert decompress(compress(data), len(data)) == data


@pytest.mark.parametrize("length", [65_536, 70_000, 300_000])
def test_round_trip_long_runs(length):
    data = b"Z" * length + b"pattern" * (length // 7) + b"end"
    assert decompress(compress(data), len(data)) == data


@settings(max_examples=60, deadline=None)
@given(repetitive)
def test_compressed_output_matches_independent_decoder(data):
    lzxpress = pytest.importorskip("dissect.util.compression.lzxpress")
    assert lzxpress.decompress(compress(data))[: len(data)] == data


class StreamBuilder:
    """Encodes chosen symbols the plain way (one at a time, as [MS-XCA] 2.3 describes), including
    the longer-than-needed 16/32-bit length fields a compressor may choose, and keeps the
    expected output by copying matches byte by byte."""

    def __init__(self) -> None:
        self.stream = bytearray(4)
        self.expected = bytearray()
        self.flag_word_at = self.flag_count = self.flags = self.half_byte_at = 0

    def literal(self, value: int) -> None:
        self.stream.append(value)
        self.expected.append(value)
        self._flag(0)

    def match(self, distance: int, length: int, long_field: str | None = None) -> None:
        self.stream += ((distance - 1) << 3 | min(length - 3, 7)).to_bytes(2, "little")
        if length >= 280 and not long_field:
            long_field = "16"
        if length >= 10:
            nibble = 15 if long_field else min(length - 10, 15)
            if self.half_byte_at:
                self.stream[self.half_byte_at] |= nibble << 4
                self.half_byte_at = 0
            else:
                self.half_byte_at = len(self.stream)
                self.stream.append(nibble)
            if long_field == "16":
                self.stream += b"\xff" + (length - 3).to_bytes(2, "little")
            elif long_field == "32":
                self.stream += b"\xff\x00\x00" + (length - 3).to_bytes(4, "little")
            elif nibble == 15:
                self.stream.append(length - 25)
        for _ in range(length):
            self.expected.append(self.expected[-distance])
        self._flag(1)

    def _flag(self, bit: int) -> None:
        self.flags = self.flags << 1 | bit
        self.flag_count += 1
        if self.flag_count == 32:
            self.stream[self.flag_word_at : self.flag_word_at + 4] = self.flags.to_bytes(4, "little")
            self.flag_word_at = len(self.stream)
            self.stream += bytes(4)
            self.flags = self.flag_count = 0

    def finish(self) -> bytes:
        padding = 32 - self.flag_count
        flags = self.flags << padding | ((1 << padding) - 1)
        self.stream[self.flag_word_at : self.flag_word_at + 4] = flags.to_bytes(4, "little")
        return bytes(self.stream)


symbol = st.one_of(
    st.integers(0, 255),
    st.tuples(st.integers(1, 8192), st.integers(3, 300), st.sampled_from([None, None, "16", "32"])),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(symbol, max_size=120))
def test_decodes_any_valid_symbol_sequence(symbols):
    builder = StreamBuilder()
    for item in symbols:
        if isinstance(item, int) or not builder.expected:
            builder.literal(item if isinstance(item, int) else 0x41)
            continue
        distance, length, long_field = item
        if long_field and length < 25:  # the 16/32-bit fields start at length 25
            long_field = None
        builder.match(min(distance, len(builder.expected)), length, long_field)
    stream = builder.finish()
    assert decompress(stream, len(builder.expected)) == builder.expected


# --- damaged and hostile input -----------------------------------------------------------------


def raises_compression_error(data: bytes, output_size: int) -> CompressionError:
    with pytest.raises(CompressionError) as info:
        decompress(data, output_size)
    return info.value


@pytest.mark.parametrize("data", [b"hello hello hello, " * 40 + b"x" * 500, bytes(range(64)), ALPHABET * 9])
def test_truncation_at_every_position(data):
    stream = compress(data)
    for cut in range(len(stream)):
        try:
            result = decompress(stream[:cut], len(data))
        except CompressionError as error:
            assert 0 <= error.offset <= cut
        else:
            # Only a final flag word holding nothing but padding may go missing.
            assert result == data and cut >= len(stream) - 4 and stream[-4:] == b"\xff" * 4


def test_truncated_real_buffer(net_buffers):
    _, stream, size = net_buffers[5]
    for cut in (0, 3, 4, 100, len(stream) // 2, len(stream) - 5):
        error = raises_compression_error(stream[:cut], size)
        assert "ends after" in error.message
        assert 0 <= error.offset <= cut


def test_match_before_start_of_output():
    stream = bytes.fromhex("ffffff7f 61 0800")  # "a", then a match of distance 2
    error = raises_compression_error(stream, 4)
    assert "before the start" in error.message
    assert error.offset == 5


def test_long_length_field_too_small():
    stream = bytes.fromhex("ffffff7f 61 0700 0f ff 1500")  # 16-bit field 21
    error = raises_compression_error(stream, 30)
    assert "length field" in error.message
    assert error.offset == 9


def test_huge_match_length_is_refused_without_allocating():
    stream = bytes.fromhex("ffffff7f 61 0700 0f ff 0000 ffffffff")
    tracemalloc.start()
    try:
        error = raises_compression_error(stream, 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "overruns" in error.message
    assert peak < 1_000_000


def test_output_size_too_large():
    error = raises_compression_error(ABC_300_COMPRESSED, 301)
    assert "ends after 300 of 301" in error.message


def test_output_size_too_small():
    with pytest.raises(CompressionError, match="overruns the output"):
        decompress(ABC_300_COMPRESSED, 299)
    with pytest.raises(CompressionError, match="past the expected 11"):
        decompress(compress(b"abc" * 4), 11)
    with pytest.raises(CompressionError, match="past the expected 10"):
        decompress(ALPHABET_COMPRESSED, 10)


def test_data_left_over():
    with pytest.raises(CompressionError, match="5 bytes of compressed data left") as info:
        decompress(compress(bytes(range(32))) + b"x", 32)
    assert info.value.offset == 36


def test_negative_output_size_is_misuse():
    with pytest.raises(InvalidArgument):
        decompress(b"", -1)


def test_all_match_flags_stay_bounded():
    # Every symbol a maximal byte-length match: the output must not grow far past output_size.
    stream = b"\xff\xff\xff\x7f" + b"a" + (b"\x07\x00\xff\xfe" + b"\x07\x00\xfe") * 16
    tracemalloc.start()
    try:
        raises_compression_error(stream, 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=70_000))
def test_random_input_only_raises_compression_error(data, output_size):
    try:
        result = decompress(data, output_size)
    except CompressionError as error:
        assert error.offset is not None and 0 <= error.offset <= len(data)
    else:
        assert len(result) == output_size


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_flipped_bytes_of_real_buffers(net_buffers, data):
    _, stream, size = net_buffers[data.draw(st.integers(0, len(net_buffers) - 1), label="buffer")]
    damaged = bytearray(stream)
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        position = data.draw(st.integers(0, len(damaged) - 1), label="position")
        damaged[position] ^= data.draw(st.integers(1, 255), label="xor")
    try:
        result = decompress(damaged, size)
    except CompressionError as error:
        assert error.offset is not None and 0 <= error.offset <= len(damaged)
    else:
        assert len(result) == size


# --- real compressed buffers --------------------------------------------------------------------


@pytest.mark.parametrize("name", COMPRESSED_FILES)
def test_real_buffers_inflate_to_their_offset(name):
    buffers = compressed_buffers(corpus_path("etl", "perfview", name))
    assert buffers and all(index > 0 for index, _, _ in buffers)
    for index, stream, size in buffers:
        inflated = decompress(stream, size)
        assert len(inflated) == size
        (first_header,) = struct.unpack_from("<I", inflated)
        assert first_header >> 24 & 0xC0 == 0xC0, f"buffer {index}: first record header {first_header:#x}"


def test_net_file_has_359_compressed_buffers_of_64_kib(net_buffers):
    assert len(net_buffers) == 359
    assert max(size for _, _, size in net_buffers) <= 0x10000 - HEADER_SIZE
    assert sum(size for _, _, size in net_buffers) == 23_016_304


def test_real_buffers_match_independent_decoder(net_buffers):
    lzxpress = pytest.importorskip("dissect.util.compression.lzxpress")
    for index, stream, size in net_buffers:
        assert decompress(stream, size) == lzxpress.decompress(stream)[:size], f"buffer {index}"


def test_real_buffers_recompress(net_buffers):
    for _, stream, size in net_buffers[:: len(net_buffers) // 3]:
        inflated = decompress(stream, size)
        assert decompress(compress(inflated), size) == inflated
