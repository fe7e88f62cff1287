"""Inputs both ``.evtx`` engines are fed, and what reading them gives: every corpus ``.evtx``,
mutated copies of the small ones, template bombs.

Used by the equivalence tests (the pure path against the compiled one, in one process) and by
the sanitizer run, which feeds the same cases to a build of ``_evtx.c`` under AddressSanitizer.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

from openetw.errors import EvtxFormatError, OpenEtwError
from openetw.evtx import EvtxReader
from tests.evtx import fuzzing, hostile

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "evtx"
SMALL = ["Security_short_selected.evtx", "new-user-security.evtx", "Application_no_crc32.evtx", "pyevtx_issue_38.evtx"]


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.evtx"))


def _error(error: BaseException | None) -> Any:
    if error is None:
        return None
    if isinstance(error, EvtxFormatError):
        return (str(error), error.offset, error.chunk_index, error.structure, error.record_id)
    return (type(error).__name__, str(error))


def _try(call: Any) -> Any:
    try:
        return call()
    except OpenEtwError as error:
        return ("error", _error(error))


def read(data: bytes, *, decode_every: int = 1) -> Any:
    """Everything a reader of ``data`` gives: every record (its id, place, XML or error), and for
    every ``decode_every``-th one its header and properties (asked for in the middle of the walk),
    then the errors, notices, counts and chunk facts."""
    try:
        reader = EvtxReader(data, path="case.evtx")
    except EvtxFormatError as error:
        return ("file header", _error(error))
    records = []
    for number, record in enumerate(reader.records(damaged=True)):
        row: list[Any] = [record.record_id, record.file_offset, record.torn, _error(record.damage), _try(record.xml)]
        if number % decode_every == 0:
            row.append(_try(record.header_fields))
            row.append(_try(record.properties))
        records.append(row)
    stats = {name: value for name, value in vars(reader.stats).items() if not isinstance(value, list)}
    return (
        records,
        [_error(error) for error in reader.errors],
        [_error(error) for error in reader.losses],
        stats,
        [dataclasses.asdict(info) for info in reader.chunk_infos],
    )


def mutated_cases(seed: int, per_file: int) -> list[tuple[str, bytes]]:
    """(label, bytes): ``per_file`` mutations of each small corpus file, by the evtx fuzz's mutators."""
    out = []
    for name in SMALL:
        data = (CORPUS / name).read_bytes()
        rng = random.Random(f"{seed}:{name}")
        for i in range(per_file):
            mutation, damaged = fuzzing.mutate(data, rng)
            out.append((f"{name} #{i} {mutation}", damaged))
    return out


def binxml_cases(seed: int, count: int) -> list[tuple[str, bytes]]:
    """Bytes flipped inside the records of the first chunks of larger files (BinXml damage:
    names, template offsets, value sizes and types, tokens)."""
    out = []
    for name in ("system.evtx", "security.evtx", "sysmon.evtx"):
        data = (CORPUS / name).read_bytes()[: 0x1000 + 2 * 0x10000]
        rng = random.Random(f"{seed}:{name}")
        for i in range(count):
            damaged = bytearray(data)
            chunk = 0x1000 + rng.randrange(2) * 0x10000
            for _ in range(rng.randint(1, 6)):
                damaged[chunk + rng.randrange(0x200, 0x10000)] = rng.choice((0, 0xFF, rng.randrange(256)))
            out.append((f"{name} #{i} BinXml bytes", bytes(damaged)))
    return out


def bomb_cases() -> list[tuple[str, bytes]]:
    return [(f"template bomb depth {depth}", hostile.template_bomb_file(depth)) for depth in (3, 14, 24)]
