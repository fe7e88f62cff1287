"""LZXPRESS plain LZ77 ([MS-XCA] sections 2.3 and 2.4), the codec of compressed ETL buffers.

A compressed buffer (``BufferFlag`` 0x40) holds this stream after its 0x48-byte
``WMI_BUFFER_HEADER``; it inflates to exactly ``Offset - 0x48`` bytes.

Stream layout: a little-endian 32-bit flag word announces the next 32 symbols, consumed from
its most significant bit down. A 0 bit is one literal byte; a 1 bit is a match, a little-endian
16-bit token whose high 13 bits are ``distance - 1`` and whose low 3 bits are ``length - 3``.
The 3-bit value 7 means "longer": 4 more bits follow (a new byte whose low nibble is used, the
next long match then uses its high nibble), 15 there means a byte follows, 255 there means a
16-bit field follows holding ``length - 3``, and a 16-bit 0 means a 32-bit field holds it instead.
After the last symbol the remaining flag bits are set to 1.

The decoder is written for CPython's interpreter: a flag byte is expanded through a table into
the literal-run lengths before each of its matches, literal runs and matches are copied as
slices, and damaged input is caught by checks per group of 32 symbols rather than per symbol
(see ``decompress``).
"""

from __future__ import annotations

from collections.abc import Callable

from openetw._native import module
from openetw.errors import CompressionError, InvalidArgument

__all__ = ["compress", "decompress", "decompress_python"]

MIN_MATCH = 3
MAX_DISTANCE = 8192  # 13 bits + 1
# [MS-XCA] 2.4.4 rejects a 16/32-bit length field below 7 + 15 (the lengths the 3-bit and 4-bit
# fields could not hold); values up to 276 would fit the byte field but are accepted.
_SMALLEST_LENGTH_FIELD = 22
_MAX_LENGTH_FIELD = 0xFFFFFFFF


def _flag_byte_tables() -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """For each flag byte (bits taken from the top): literal runs before each match, and the trailing run."""
    runs_before_matches = []
    trailing_literals = []
    for flag_byte in range(256):
        runs = []
        run = 0
        for bit in range(7, -1, -1):
            if flag_byte >> bit & 1:
                runs.append(run)
                run = 0
            else:
                run += 1
        runs_before_matches.append(tuple(runs))
        trailing_literals.append(run)
    return tuple(runs_before_matches), tuple(trailing_literals)


_RUNS_BEFORE_MATCHES, _TRAILING_LITERALS = _flag_byte_tables()


def decompress_python(data: bytes | bytearray | memoryview, output_size: int) -> bytes:
    """Inflate ``data`` to exactly ``output_size`` bytes (the pure-Python reference of ``decompress``).

    Raises ``CompressionError`` (``offset`` = position in ``data``) when the input ends early,
    a match reaches before the start of the output, a length field is malformed, the output
    would exceed ``output_size``, or more than a final flag word of input is left over.
    Never allocates more than about ``output_size`` + 10 KiB.
    """
    if output_size < 0:
        raise InvalidArgument(f"output_size must not be negative, got {output_size}")
    src = bytes(data)
    src_len = len(src)
    runs_before_matches = _RUNS_BEFORE_MATCHES
    trailing_literals = _TRAILING_LITERALS
    out = bytearray()
    produced = 0
    ip = 0
    group_start = 0
    half_byte_at = 0  # position of a length byte whose high nibble is still unused; 0 = none
    # The end of the input is found by the IndexError of the first indexed read past it, not
    # by a check per symbol. Literal runs are slices, which never fail, but one cut short
    # leaves ``ip`` past the end so the next read (a match token or flag word) does.
    # A well-formed stream that ends mid-group stops this way, on its first padding 1 bit.
    try:
        while produced < output_size:
            group_start = ip
            # A match can only reach before the output start while fewer than MAX_DISTANCE
            # bytes exist; after that the check per match is skipped.
            guarded = produced < MAX_DISTANCE
            flag_bytes = (src[ip + 3], src[ip + 2], src[ip + 1], src[ip])
            ip += 4
            for flag_byte in flag_bytes:
                for run in runs_before_matches[flag_byte]:
                    if run:
                        out += src[ip : ip + run]
                        ip += run
                    token_at = ip
                    token = src[ip] | src[ip + 1] << 8
                    ip += 2
                    length = (token & 7) + 3  # literals, not MIN_MATCH: no global lookups here
                    if length == 10:  # 3-bit field 7: the length continues in the next bytes
                        if half_byte_at:
                            nibble = src[half_byte_at] >> 4
                            half_byte_at = 0
                        else:
                            nibble = src[ip] & 15
                            half_byte_at = ip
                            ip += 1
                        if nibble < 15:
                            length = nibble + 10
                        else:
                            length = src[ip]
                            ip += 1
                            if length < 255:
                                length += 25
                            else:
                                length, ip = _long_length(src, ip, output_size - len(out))
                    back = -1 - (token >> 3)
                    if guarded and len(out) + back < 0:
                        raise CompressionError(
                            f"match distance {-back} reaches before the start of the output "
                            f"({len(out)} bytes so far)",
                            offset=token_at,
                        )
                    rest = back + length
                    if rest < 0:
                        out += out[back:rest]
                    else:  # the match overlaps its own output: repeat the last -back bytes
                        out += (out[back:] * (length // -back + 1))[:length]
                run = trailing_literals[flag_byte]
                if run:
                    out += src[ip : ip + run]
                    ip += run
            produced = len(out)
            if produced > output_size:
                raise CompressionError(
                    f"data inflates past the expected {output_size} bytes", offset=group_start
                )
    except IndexError:
        produced = len(out)
    if produced < output_size:
        raise CompressionError(
            f"compressed data ends after {produced} of {output_size} bytes", offset=min(ip, src_len)
        )
    if produced > output_size:
        raise CompressionError(f"data inflates past the expected {output_size} bytes", offset=group_start)
    if src_len - ip > 4:
        raise CompressionError(
            f"{src_len - ip} bytes of compressed data left after {output_size} bytes of output", offset=ip
        )
    return bytes(out)


_native = module("_read")
decompress: Callable[[bytes | bytearray | memoryview, int], bytes] = (
    _native.inflate if _native is not None else decompress_python
)
"""``decompress_python``'s twin in C when the compiled core runs (``openetw._native``): same
output, same ``CompressionError`` messages and offsets."""


def _long_length(src: bytes, ip: int, room: int) -> tuple[int, int]:
    """Match length and next input position for the 16-bit (if 0: 32-bit) length field at ``ip``."""
    field = src[ip] | src[ip + 1] << 8
    end = ip + 2
    if not field:
        field = src[ip + 2] | src[ip + 3] << 8 | src[ip + 4] << 16 | src[ip + 5] << 24
        end = ip + 6
    if field < _SMALLEST_LENGTH_FIELD:
        raise CompressionError(
            f"long match length field holds {field}, below {_SMALLEST_LENGTH_FIELD}", offset=ip
        )
    length = field + MIN_MATCH
    if length > room:
        raise CompressionError(f"match of {length} bytes overruns the output ({room} bytes left)", offset=ip)
    return length, end


_CHAIN_DEPTH = 16  # candidates tried per position; more gains little on ETL data
_LONGEST_MATCH = _MAX_LENGTH_FIELD + MIN_MATCH


def compress(data: bytes | bytearray | memoryview) -> bytes:
    """Compress ``data``: greedy longest match over hash chains of 3-byte prefixes.

    The output follows [MS-XCA] 2.3 exactly, padding included, so that
    ``decompress(compress(d), len(d)) == d``.
    """
    src = bytes(data)
    size = len(src)
    out = bytearray(4)  # the first flag word, filled in when its 32 symbols are known
    flag_word_at = 0
    flags = 0
    flag_count = 0
    half_byte_at = 0
    latest: dict[bytes, int] = {}  # 3-byte prefix -> its latest position
    earlier = [-1] * size  # position -> previous position with the same prefix
    last_match_start = size - MIN_MATCH
    pos = 0
    while pos < size:
        length = distance = 0
        if pos <= last_match_start:
            length, distance = _longest_match(src, pos, latest, earlier)
        if length >= MIN_MATCH:
            half_byte_at = _put_match(out, length, distance, half_byte_at)
            for inside in range(pos + 1, min(pos + length, last_match_start + 1)):
                key = src[inside : inside + MIN_MATCH]
                earlier[inside] = latest.get(key, -1)
                latest[key] = inside
            pos += length
            flags = flags << 1 | 1
        else:
            out.append(src[pos])
            pos += 1
            flags <<= 1
        flag_count += 1
        if flag_count == 32:
            out[flag_word_at : flag_word_at + 4] = flags.to_bytes(4, "little")
            flag_word_at = len(out)
            out += bytes(4)
            flags = flag_count = 0
    padding = 32 - flag_count
    flags = flags << padding | ((1 << padding) - 1)
    out[flag_word_at : flag_word_at + 4] = flags.to_bytes(4, "little")
    return bytes(out)


def _longest_match(src: bytes, pos: int, latest: dict[bytes, int], earlier: list[int]) -> tuple[int, int]:
    """(length, distance) of the longest earlier match for ``pos`` (length 0: none); remembers ``pos``."""
    limit = min(len(src) - pos, _LONGEST_MATCH)
    best_length = best_distance = 0
    key = src[pos : pos + MIN_MATCH]
    earlier[pos] = candidate = latest.get(key, -1)
    latest[key] = pos
    tries = _CHAIN_DEPTH
    while candidate >= 0 and pos - candidate <= MAX_DISTANCE and tries:
        tries -= 1
        # A candidate can only win if it also matches the byte the best one stopped at.
        if src[candidate + best_length] == src[pos + best_length]:
            length = _common_length(src, candidate, pos, limit)
            if length > best_length:
                best_length, best_distance = length, pos - candidate
                if length == limit:
                    break
        candidate = earlier[candidate]
    return best_length, best_distance


def _common_length(src: bytes, a: int, b: int, limit: int) -> int:
    """Length of the common prefix of ``src[a:]`` and ``src[b:]`` (``a < b``), at most ``limit``.

    Compares slices of doubling size and halves the size on a mismatch, so a long match costs
    a logarithmic number of comparisons. Overlap (``a + n > b``) is fine: the bytes compared
    are the original ones, which is what an overlapping copy reproduces.
    """
    n = 0
    step = 8
    while n < limit:
        if step > limit - n:
            step = limit - n
        if src[a + n : a + n + step] == src[b + n : b + n + step]:
            n += step
            step <<= 1
        elif step > 1:
            step >>= 1
        else:
            break
    return n


def _put_match(out: bytearray, length: int, distance: int, half_byte_at: int) -> int:
    """Append the encoding of one match; return the new shared-nibble position (0: none)."""
    extra = length - MIN_MATCH
    token = (distance - 1) << 3
    if extra < 7:
        out += (token | extra).to_bytes(2, "little")
        return half_byte_at
    out += (token | 7).to_bytes(2, "little")
    extra -= 7
    nibble = min(extra, 15)
    if half_byte_at:
        out[half_byte_at] |= nibble << 4
        half_byte_at = 0
    else:
        half_byte_at = len(out)
        out.append(nibble)
    if extra >= 15:
        extra -= 15
        if extra < 255:
            out.append(extra)
        else:
            out.append(255)
            if length - MIN_MATCH < 0x10000:
                out += (length - MIN_MATCH).to_bytes(2, "little")
            else:
                out += bytes(2) + (length - MIN_MATCH).to_bytes(4, "little")
    return half_byte_at
