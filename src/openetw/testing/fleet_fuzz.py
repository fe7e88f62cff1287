"""Hostile NATS messages for the collector's message check, beside good sessions.

``run(iterations, seed, directory)`` feeds ``openetw.fleet.collector.take_batch`` batches in
which every good session's messages (two hosts, each a header, buffers and an end, in order)
are mixed with ``iterations`` hostile ones: random subjects and headers, headers forging the
good hosts' names, numbers out of range, header buffers of random bytes, good buffers
bit-flipped, cut short or lengthened, kinds that do not fit their sequence. Hostile messages
come on the subjects of a host of their own (``mallory``) or forge the good hosts' names in
their headers, so a good host's data can only be refused or kept, never displaced.

It returns what a check needs: the answers counted, what the store reported, and what the
good sessions should hold. ``tests/fleet/test_fleet_check.py`` runs it for a few seconds;
``benchmarks/fuzz_fleet.py --iterations N`` at any scale.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openetw.etl import framing as F
from openetw.fleet.check import check_buffer
from openetw.fleet.collector import ACK, TERM, Incoming, take_batch
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER, message_headers

__all__ = ["FuzzResult", "GOOD_HOSTS", "run"]

GOOD_HOSTS = ("web-01", "web-02")
HOSTILE_HOST = "mallory"


@dataclass
class FuzzResult:
    answers: Counter[str] = field(default_factory=Counter)
    report: dict[str, Any] = field(default_factory=dict)
    good_buffers: int = 0  # per good session
    good_records: int = 0  # per good session
    crashes: list[str] = field(default_factory=list)


def _good_session(host: str, header: bytes, buffer: bytes, buffers: int) -> list[Incoming]:
    subject = f"etw.{host}.Payroll"
    messages = []
    for sequence in range(buffers + 2):
        kind = KIND_HEADER if sequence == 0 else KIND_END if sequence == buffers + 1 else KIND_BUFFER
        payload = header if kind == KIND_HEADER else b"" if kind == KIND_END else buffer
        headers = message_headers(host=host, session="Payroll", start=1_700_000_000_000_000, sequence=sequence, kind=kind,
                                  events=5, events_lost=0, buffers_lost=0)  # fmt: skip
        messages.append(Incoming(subject, headers, payload))
    return messages


def _hostile(rng: random.Random, header: bytes, buffer: bytes) -> Incoming:
    kind = rng.choice((KIND_HEADER, KIND_BUFFER, KIND_BUFFER, KIND_END, "junk"))
    sequence = rng.choice((0, 0, 1, 2, 3, rng.randrange(64), rng.randrange(64), rng.randrange(1 << 20), (1 << 48) + rng.randrange(9), (1 << 64) - 1))
    claimed = rng.choice((HOSTILE_HOST, HOSTILE_HOST, HOSTILE_HOST, HOSTILE_HOST, *GOOD_HOSTS))
    headers: dict[str, str] = message_headers(
        host=claimed, session=rng.choice(("Payroll", "Evil", "Evil", "x" * 300)), start=rng.choice((1, 1_700_000_000_000_000, rng.randrange(1 << 63))),
        sequence=sequence, kind=kind if kind != "junk" else KIND_BUFFER, events=rng.randrange(1 << 40), events_lost=rng.randrange(9),
        buffers_lost=rng.randrange(9), gap=(rng.randrange(5), rng.randrange(1 << 50)) if rng.random() < 0.2 else None,
    )  # fmt: skip
    if kind == "junk":
        headers["Openetw-Kind"] = rng.choice(("", "HEADER", "\x00", "end\n", "x" * 1000))
    for _ in range(rng.choice((0, 0, 0, 0, 0, 1, 2))):  # a header gone, or its value damaged
        name = rng.choice(sorted(headers))
        if rng.random() < 0.5:
            del headers[name]
        else:
            headers[name] = rng.choice(("", "-1", "1e9", "0x10", "9" * 40, " 7", "7-", "\u00e9", str(rng.randrange(1 << 70))))
    payload = _payload(rng, header, buffer, kind)
    subject = f"etw.{HOSTILE_HOST}.{headers.get('Openetw-Session', 'Evil')}"
    if rng.random() < 0.15:
        subject = rng.choice((f"etw.{HOSTILE_HOST}.Evil", f"etw.{HOSTILE_HOST}", "etw..x", "other.x.y", f"etw.{HOSTILE_HOST}.Evil.more"))
    return Incoming(subject, headers if rng.random() > 0.02 else None, payload, rng.choice((1, 1, 2, 40)), rng.randrange(1, 1 << 30))


def _payload(rng: random.Random, header: bytes, buffer: bytes, kind: str) -> bytes:
    choice = rng.randrange(8)
    if choice == 0:
        return rng.randbytes(rng.choice((0, 1, 100, 104, 8192)))
    base = bytearray(header if kind == KIND_HEADER or rng.random() < 0.2 else buffer)
    if choice == 1:
        return bytes(base[: rng.randrange(len(base))])
    if choice == 2:
        return bytes(base) + rng.randbytes(rng.randrange(1, 64))
    if choice == 3:  # a field of the buffer header or the first records: a size, an offset, a marker
        at = rng.randrange(0, F.RECORDS_START + 0x200, 2)
        struct.pack_into("<H", base, at, rng.choice((0, 1, 0xFFFF, rng.randrange(1 << 16))))
        return bytes(base)
    if choice == 4:
        return b""
    for _ in range(rng.randrange(1, 16)):  # bits flipped anywhere
        base[rng.randrange(len(base))] ^= 1 << rng.randrange(8)
    return bytes(base)


def run(iterations: int, seed: int, directory: Path, corpus: Path, *, buffers: int = 40, batch: int = 64) -> FuzzResult:
    """``iterations`` hostile messages among two good sessions of ``buffers`` buffers each,
    through ``take_batch`` and a ``FleetStore`` in ``directory``, committed batch by batch.
    ``corpus`` is an .etl file of 8 KB buffers: its first two are the good sessions' header
    buffer and buffer."""
    rng = random.Random(seed)
    data = corpus.read_bytes()
    header, buffer = data[:8192], data[8192:16384]
    good = [_good_session(host, header, buffer, buffers) for host in GOOD_HOSTS]
    hostile = [_hostile(rng, header, buffer) for _ in range(iterations)]
    stream: list[Incoming] = []
    while any(good) or hostile:  # each good session in its own order, everything interleaved
        pick = rng.randrange(len(good) + 1)
        if pick < len(good) and good[pick]:
            stream.append(good[pick].pop(0))
        elif hostile:
            stream.append(hostile.pop())
    result = FuzzResult(good_buffers=buffers)
    result.good_records = check_buffer(buffer)[1] * buffers
    store = FleetStore(directory)
    try:
        pending: list[Incoming] = []
        while stream or pending:
            messages = pending + stream[:batch]
            del stream[:batch]
            answers = take_batch(store, messages)
            store.commit()
            pending = [message for message, answer in zip(messages, answers, strict=True) if answer not in (ACK, TERM)]
            pending = [Incoming(m.subject, m.headers, m.data, m.delivered + 1, m.stream_sequence) for m in pending]
            result.answers.update(answers)
        result.report = store.report()
    finally:
        store.close()
    return result
