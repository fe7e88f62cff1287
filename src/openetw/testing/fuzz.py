"""Fuzzing the ``.etl`` parser: mutated copies of real files read by both engines.

``mutate(data, rng)`` damages a copy of a file the way damage comes: bytes flipped, fields of
buffer and record headers set to edge values, cuts, insertions, deletions, a buffer repeated.
``check(data)`` reads it as every reader does (strict and lenient, file and time order, the
whole-file index and the index's first pass, whose rows must be the same) with the compiled core
and with the pure-Python reference, and returns the problems found: an error that is not the
project's own, engines or passes that disagree, a read over its memory bound. An empty list: the parser held. ``tests/etl/test_fuzz.py`` runs a few in CI;
``benchmarks/fuzz_etl.py --iterations N`` runs many.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

from openetw.errors import EtlFormatError, OpenEtwError
from openetw.etl import framing as F
from openetw.etl import layouts as L

__all__ = ["MEMORY_BOUND", "check", "mutate", "pure_engine"]

# A read may hold the file, a few inflated buffers (at most ETW's 16 MiB each) and its time-order
# window (16 MiB): past this, memory follows the damage, which must never happen.
MEMORY_BOUND = 160 << 20
_EDGES = (0, 1, 7, 8, 0x47, 0x48, 0x49, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A damaged copy of ``data`` (one to three kinds of damage)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("flip", "field", "field", "record", "cut", "insert", "delete", "repeat"))
        if len(out) < 2 * L.BUFFER_HEADER_SIZE:
            break
        starts = _buffer_starts(out)
        if len(starts) > 1 and rng.random() < 0.8:
            starts = starts[1:]  # mostly past the header buffer, whose damage ends every read early
        past_header = starts[0] if starts[0] < len(out) else 0
        if kind == "flip":
            for _ in range(rng.randint(1, 8)):
                out[rng.randrange(past_header, len(out))] ^= rng.randint(1, 255)
        elif kind == "field" and starts:
            at = rng.choice(starts)
            name, code = rng.choice(L.WMI_BUFFER_HEADER.fields[:-1])
            _put(out, at + L.WMI_BUFFER_HEADER.offset(name), code, rng.choice(_EDGES) if rng.random() < 0.7 else rng.getrandbits(32))
        elif kind == "record" and starts:
            at = rng.choice(starts) + L.BUFFER_HEADER_SIZE + 8 * rng.randrange(64)
            if at + 8 <= len(out):
                _put(out, at + rng.choice((0, 2, 4)), "H", rng.choice(_EDGES) & 0xFFFF)
        elif kind == "cut":
            del out[rng.randrange(L.BUFFER_HEADER_SIZE, len(out)) :]
        elif kind == "insert":
            at = rng.randrange(len(out))
            out[at:at] = rng.randbytes(rng.choice((1, 8, 0x48, 4096)))
        elif kind == "delete":
            at = rng.randrange(len(out))
            del out[at : at + rng.choice((1, 8, 0x48, 4096))]
        elif kind == "repeat" and len(starts) > 1:
            first = rng.randrange(1, len(starts))
            end = starts[first + 1] if first + 1 < len(starts) else len(out)
            out[end:end] = out[starts[first] : end] * rng.randint(1, 3)
    return bytes(out)


def _put(out: bytearray, at: int, code: str, value: int) -> None:
    width = {"H": 2, "h": 2, "I": 4, "i": 4, "q": 8, "Q": 8}.get(code)
    if width is not None and at + width <= len(out):
        out[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")


def _buffer_starts(data: bytearray) -> list[int]:
    """Where the file's buffers start, as their BufferSize fields chain them (up to 4,096)."""
    starts: list[int] = []
    at = 0
    while at + L.BUFFER_HEADER_SIZE <= len(data) and len(starts) < 4096:
        starts.append(at)
        size = int.from_bytes(data[at + F.BUFFER_SIZE_AT : at + F.BUFFER_SIZE_AT + 4], "little")
        if size < L.BUFFER_HEADER_SIZE:
            break
        at += size
    return starts


@contextlib.contextmanager
def pure_engine() -> Iterator[None]:
    """The pure-Python reference instead of the compiled core, for the length of the block."""
    from openetw.consumer._engine import index_build, index_walk
    from openetw.etl import lzxpress, reader

    saved = reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress
    reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress = None, None, None, lzxpress.decompress_python
    try:
        yield
    finally:
        reader._NATIVE, index_walk._NATIVE, index_build._NATIVE, lzxpress.decompress = saved


def _reading(data: bytes, strict: bool, time_order: bool) -> Callable[[], Any]:
    def read() -> Any:
        from openetw.etl.reader import EtlReader

        digest = hashlib.blake2b(digest_size=16)
        count = 0
        with EtlReader(data, strict=strict) as reader:
            try:
                for record in reader.records(time_order=time_order):
                    digest.update(bytes(record.raw))
                    digest.update(b"%d %d %d|" % (record.buffer_index, record.cpu, record.timestamp if record.kind != "unknown" else -1))
                    count += 1
            finally:
                s = reader.stats
                facts = (count, digest.hexdigest(), s.buffers, s.compressed_buffers, s.records, s.unknown_records, s.skipped_bytes,
                         s.time_order_violations, [(str(e), e.offset, e.buffer_index, e.structure) for e in s.errors])  # fmt: skip
        return facts

    return read


def _indexing(data: bytes) -> Callable[[], Any]:
    def index() -> Any:
        from openetw.consumer._engine.index_build import build_index_data

        built = build_index_data(data)
        return _rows_digest([built.records], built.exact_time_order), built.errors, built.read_stats, built.providers

    return index


def _rows_digest(pieces: list[Any], exact: bool) -> str:
    """The rows, in their order when the time order is exact; else as a set (a buffer whose own
    records go back in time: the first pass replays the reader's merge only on the rows it has
    not given out yet, so the order may differ from the whole-file index's)."""
    import numpy as np

    raw = b"".join(piece.tobytes() for piece in pieces)
    if not exact and pieces:
        size = pieces[0].dtype.itemsize
        raw = np.sort(np.frombuffer(raw, dtype=np.dtype((np.void, size)))).tobytes()
    return hashlib.blake2b(raw + bytes([exact]), digest_size=16).hexdigest()


def _first_pass(data: bytes) -> Callable[[], Any]:
    def first_pass() -> Any:
        """The index's first pass (with a small chunk setting: rows spill to disk) over the file
        written to a private temporary file."""
        from openetw.consumer._engine.streaming import StreamingBuild

        fd, path = tempfile.mkstemp(prefix="openetw-fuzz-", suffix=".etl")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            build = StreamingBuild(path, chunk_bytes=1 << 16)
            pieces = [rows for rows, _ in build.pieces()]
            return _rows_digest(pieces, build.exact_time_order), build.errors, build.read_stats, build.providers
        finally:
            os.unlink(path)

    return first_pass


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """A call's value, or its project error (type, message, place); other errors propagate."""
    try:
        return "value", call()
    except OpenEtwError as err:
        if isinstance(err, EtlFormatError):  # (its message without the path: the first pass reads a temporary copy)
            return type(err).__name__, (err.message, (err.offset, err.buffer_index, err.structure))
        return type(err).__name__, (str(err), None)


def check(data: bytes, *, engines: tuple[str, ...] = ("native", "pure"), measure_memory: bool = True) -> list[str]:
    """The problems a mutated file shows (see the module doc); ``engines``: those to run
    (``"native"`` only counts where the compiled core is active)."""
    from openetw._native import module as native_module

    calls = {
        **{f"read strict={strict} time_order={time_order}": _reading(data, strict, time_order) for strict in (True, False) for time_order in (False, True)},
        "index": _indexing(data),
        "first pass": _first_pass(data),
    }  # fmt: skip
    problems: list[str] = []
    results: dict[str, dict[str, tuple[str, Any]]] = {}
    for engine in engines:
        if engine == "native" and native_module("_read") is None:
            continue
        context = pure_engine() if engine == "pure" else contextlib.nullcontext()
        mine: dict[str, tuple[str, Any]] = {}
        with context:
            for name, call in calls.items():
                if measure_memory:
                    tracemalloc.start()
                try:
                    mine[name] = _outcome(call)
                except Exception as error:  # noqa: BLE001 - any other error is what a fuzzer looks for
                    problems.append(f"{engine} {name}: {type(error).__name__}: {error}")
                finally:
                    if measure_memory:
                        peak = tracemalloc.get_traced_memory()[1]
                        tracemalloc.stop()
                        if peak > MEMORY_BOUND + 4 * len(data):
                            problems.append(f"{engine} {name}: {peak >> 20} MB at its peak")
        results[engine] = mine
        whole, first = mine.get("index"), mine.get("first pass")
        if whole is not None and first is not None and whole[0] == first[0] == "value" and whole[1] != first[1]:
            problems.append(f"{engine}: the first pass and the whole-file index disagree: {_short(whole[1])} against {_short(first[1])}")
    if len(results) == 2:
        native, pure = results.values()
        for name in calls:
            if name in native and name in pure and native[name] != pure[name]:
                problems.append(f"the engines disagree on {name}: {_short(native[name])} against {_short(pure[name])}")
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 300 else text[:300] + "..."
