"""Fuzzing the EventPipe reader: mutated copies of real ``.nettrace``/``.netperf`` files.

``mutate(data, rng)`` damages a copy the way damage comes: bytes flipped, FastSerialization tags
and block sizes and counts (version 6: block headers) set to edge values, cuts, insertions,
deletions, a block repeated.
``check(data)`` reads it as the trace source does (container, events, records, decoding every
payload) and returns the problems found: an error that is not ``NettraceFormatError``, a read
over its memory bound, losses without a location. An empty list: the reader held.
``tests/nettrace/test_fuzz.py`` runs a few in CI.
"""

from __future__ import annotations

import random
import tracemalloc

from openetw.errors import NettraceFormatError, OpenEtwError

__all__ = ["MEMORY_BOUND", "check", "mutate"]

# The file, the events held for sorting between sequence points, their records: a few times the
# file at most (the corpus files fuzzed are small); past this, memory follows the damage.
MEMORY_BOUND = 96 << 20
_EDGES = (0, 1, 3, 4, 5, 6, 0x7F, 0x80, 0xFF, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
_MARKERS = (b"EventBlock", b"MetadataBlock", b"StackBlock", b"SPBlock", b"Trace")


def _object_fields(data: bytearray) -> list[int]:
    """Offsets of the int32 that follows each object's type (its size), and of its type tags;
    in a version 6 stream, of each block header and the first words of its content."""
    found: list[int] = []
    if data[:12] == b"Nettrace\0\0\0\0":
        at = 20
        while at + 4 <= len(data) and len(found) < 4096:
            found.extend((at, at + 4, at + 6))
            at += 4 + (int.from_bytes(data[at : at + 4], "little") & 0xFFFFFF)
        return [offset for offset in found if offset < len(data) - 4]
    for marker in _MARKERS:
        at = data.find(marker)
        while at != -1 and len(found) < 4096:
            found.append(at + len(marker) + 1)  # past the type's EndObject tag: the block size
            found.append(at - 14)  # the type's BeginObject tag
            at = data.find(marker, at + 1)
    return [offset for offset in found if 0 <= offset < len(data) - 4]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A damaged copy of ``data`` (one to three kinds of damage)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if len(out) < 64:
            break
        kind = rng.choice(("flip", "flip", "field", "field", "cut", "insert", "delete", "repeat"))
        fields = _object_fields(out)
        if kind == "flip":
            for _ in range(rng.randint(1, 8)):
                out[rng.randrange(32, len(out))] ^= rng.randint(1, 255)
        elif kind == "field" and fields:
            at = rng.choice(fields) + rng.choice((0, 0, 4, 8, 12))
            value = rng.choice(_EDGES) if rng.random() < 0.7 else rng.getrandbits(32)
            if at + 4 <= len(out):
                out[at : at + 4] = value.to_bytes(4, "little")
        elif kind == "cut":
            del out[rng.randrange(32, len(out)) :]
        elif kind == "insert":
            at = rng.randrange(32, len(out))
            out[at:at] = rng.randbytes(rng.choice((1, 4, 16, 4096)))
        elif kind == "delete":
            at = rng.randrange(32, len(out))
            del out[at : at + rng.choice((1, 4, 16, 4096))]
        elif kind == "repeat" and len(fields) > 2:
            start, end = sorted(rng.sample(fields, 2))
            if end - start < 1 << 20:
                out[end:end] = out[start:end] * rng.randint(1, 3)
    return bytes(out)


def _read(data: bytes) -> tuple[int, list[NettraceFormatError]]:
    from openetw.nettrace.reader import NettraceReader
    from openetw.nettrace.records import RecordBuilder
    from openetw.tdh.context import DecodeContext
    from openetw.tdh.registry import SchemaRegistry

    reader = NettraceReader(data, path="<fuzzed>")
    builder = RecordBuilder(reader.info, source="<fuzzed>")
    registry = SchemaRegistry(kernel=False, builtin=True)
    context = DecodeContext(registry)
    count = 0
    for event in reader.events():
        record = builder.record(event)
        schema = context.schema_for(record)
        if schema is not None:
            dict(registry.decode(schema, record.user_data, record.pointer_size).items())
        count += 1
    return count, [*reader.losses, *reader.notices]


def check(data: bytes) -> list[str]:
    """Problems reading ``data`` (empty: none)."""
    problems: list[str] = []
    tracemalloc.start()
    try:
        try:
            _, errors = _read(data)
            for error in errors:
                if error.offset is None and error.structure is None:
                    problems.append(f"a loss without a location: {error}")
        except NettraceFormatError as exc:
            if exc.offset is None:
                problems.append(f"a header error without an offset: {exc}")
        except OpenEtwError as exc:
            problems.append(f"{type(exc).__name__} (not NettraceFormatError): {exc}")
        except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
            problems.append(f"{type(exc).__name__}: {exc}")
        _, peak = tracemalloc.get_traced_memory()
        if peak > MEMORY_BOUND:
            problems.append(f"peak memory {peak} bytes over {MEMORY_BOUND}")
    finally:
        tracemalloc.stop()
    return problems

