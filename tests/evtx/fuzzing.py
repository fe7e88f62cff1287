"""Mutations of ``.evtx`` files for the fuzz test and ``benchmarks/fuzz_evtx.py``.

Each mutation aims at a structure the reader must distrust: any byte (bit flips), the end of
the file (truncation), record sizes and their copies, template definition offsets, name offsets,
substitution descriptors, chunk header fields, and 4 KiB pages spliced from another chunk (a
volume shadow copy's mix of two writes). ``consume`` reads, renders and decodes everything as
the readers do; only ``OpenEtwError``s may come out of it.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from openetw.errors import EvtxFormatError, OpenEtwError
from openetw.evtx import EvtxReader
from openetw.evtx import layout as L

_EDGES = (0, 1, 0x18, 0x1C, 0x200, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _chunks(data: bytearray) -> int:
    return max(0, (len(data) - L.FILE_HEADER_SIZE) // L.CHUNK_SIZE)


def _chunk_base(data: bytearray, rng: random.Random) -> int:
    return L.FILE_HEADER_SIZE + rng.randrange(max(1, _chunks(data))) * L.CHUNK_SIZE


def _records(data: bytearray, base: int) -> list[int]:
    """Chunk offsets of record signatures in the chunk at ``base``."""
    found, pos = [], data.find(L.RECORD_MAGIC, base + L.CHUNK_HEADER_SIZE, base + L.CHUNK_SIZE)
    while pos >= 0 and len(found) < 512:
        found.append(pos)
        pos = data.find(L.RECORD_MAGIC, pos + 4, base + L.CHUNK_SIZE)
    return found


def bit_flips(data: bytearray, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 32)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def truncate(data: bytearray, rng: random.Random) -> None:
    del data[rng.randrange(len(data)) :]


def record_sizes(data: bytearray, rng: random.Random) -> None:
    records = _records(data, _chunk_base(data, rng))
    for pos in rng.sample(records, min(len(records), rng.randint(1, 4))):
        size = struct.unpack_from("<I", data, pos + 4)[0]
        value = rng.choice(_EDGES + (size + rng.randint(-64, 64) & 0xFFFFFFFF,))
        if rng.random() < 0.5:
            struct.pack_into("<I", data, pos + 4, value)
        elif pos + size <= len(data) and size >= 4:
            struct.pack_into("<I", data, pos + size - 4, value)  # the copy at its end


def template_offsets(data: bytearray, rng: random.Random) -> None:
    """A template instance's definition offset (or id) pointed elsewhere: another definition, a
    record, the chunk header, past the chunk, the instance itself."""
    base = _chunk_base(data, rng)
    chunk = bytes(data[base : base + L.CHUNK_SIZE])
    instances = [i for i in range(L.CHUNK_HEADER_SIZE, len(chunk) - 10) if chunk[i] == 0x0C and chunk[i + 1] == 0x01][:4096]
    if not instances:
        return bit_flips(data, rng)
    offsets = [struct.unpack_from("<I", chunk, i + 6)[0] for i in instances]
    for index in rng.sample(range(len(instances)), min(len(instances), rng.randint(1, 3))):
        at = base + instances[index]
        choice = rng.randrange(4)
        if choice == 0:
            struct.pack_into("<I", data, at + 6, rng.choice(offsets))
        elif choice == 1:
            struct.pack_into("<I", data, at + 6, rng.choice(_EDGES + (instances[index], instances[index] + 10 + rng.randint(1, 64))))
        elif choice == 2:
            struct.pack_into("<I", data, at + 2, rng.getrandbits(32))  # the template id
        elif at + 34 <= len(data):
            struct.pack_into("<I", data, at + 10 + 4 + 16, rng.choice(_EDGES))  # an inline definition's size


def name_and_value_fields(data: bytearray, rng: random.Random) -> None:
    """Element name offsets and substitution descriptors (size, type) set to edge values."""
    base = _chunk_base(data, rng)
    for _ in range(rng.randint(1, 8)):
        pos = base + rng.randrange(L.CHUNK_HEADER_SIZE, L.CHUNK_SIZE - 4)
        token = data[pos] if pos < len(data) else 0
        if token in (0x01, 0x41) and pos + 11 <= len(data):
            struct.pack_into("<I", data, pos + 7, rng.choice(_EDGES))
        elif pos + 4 <= len(data):
            struct.pack_into("<HBx", data, pos, rng.choice((0, 1, 0xFFFF, 0x8000)), rng.choice((0x01, 0x21, 0x81, 0x0E, 0x13, 0xFF)))


def chunk_header(data: bytearray, rng: random.Random) -> None:
    base = _chunk_base(data, rng)
    field = rng.choice((8, 16, 24, 32, 44, 48, 52, 120, 124))
    if base + field + 8 <= len(data):
        if field in (8, 16, 24, 32):
            struct.pack_into("<Q", data, base + field, rng.choice((0, 1, 2**63, 2**64 - 1, rng.getrandbits(64))))
        else:
            struct.pack_into("<I", data, base + field, rng.choice(_EDGES))


def spliced_pages(data: bytearray, rng: random.Random) -> None:
    """4 KiB pages of one chunk copied over another (or over itself, shifted)."""
    if _chunks(data) < 1:
        return truncate(data, rng)
    source, target = _chunk_base(data, rng), _chunk_base(data, rng)
    for _ in range(rng.randint(1, 4)):
        page = rng.randrange(L.CHUNK_SIZE // 4096) * 4096
        other = rng.randrange(L.CHUNK_SIZE // 4096) * 4096 if source == target else page
        data[target + page : target + page + 4096] = data[source + other : source + other + 4096]


MUTATIONS: list[Callable[[bytearray, random.Random], None]] = [
    bit_flips, truncate, record_sizes, template_offsets, name_and_value_fields, chunk_header, spliced_pages,
]  # fmt: skip


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    mutation = rng.choice(MUTATIONS)
    out = bytearray(data)
    mutation(out, rng)
    return mutation.__name__, bytes(out)


def consume(data: bytes) -> tuple[int, int]:
    """Read, render and decode every record as the readers do: (records kept, errors met).
    Raises only what is not an ``OpenEtwError`` (a bug) or the file header's own error."""
    try:
        reader = EvtxReader(data, path="fuzzed.evtx")
    except EvtxFormatError:
        return 0, 1
    kept = errors = 0
    for record in reader.records(damaged=True):
        try:
            record.xml()
            record.properties()
            record.text_properties()
            _ = record.header.event_id, record.provider_name, record.time_iso, record.provider_id
            kept += 1
        except OpenEtwError as error:
            assert isinstance(error, EvtxFormatError) and error.offset is not None, error
            errors += 1
    for error in reader.errors:
        assert error.offset is not None and error.structure, error
    return kept, errors + len(reader.errors)
