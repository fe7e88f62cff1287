"""The collector's message check without a server: poison, forgery, damage, first writer wins,
and a few seconds of fuzz through the batch handling (``openetw.testing.fleet_fuzz``)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from openetw.etl import layouts as L
from openetw.fleet.check import BadMessage, check_message
from openetw.fleet.collector import ACK, LATER_DELIVERIES, NAK, TERM, Incoming, take_batch
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import KIND_BUFFER, KIND_END, KIND_HEADER, message_headers
from tests.conftest import corpus_path

CORPUS = ("etl", "perfview", "primitive-types.etl")


def _buffers() -> tuple[bytes, bytes]:
    data = corpus_path(*CORPUS).read_bytes()
    return data[:8192], data[8192:16384]


def _headers(host: str, sequence: int, kind: str, session: str = "Payroll", **extra: object) -> dict[str, str]:
    return message_headers(host=host, session=session, start=5, sequence=sequence, kind=kind, events=5, events_lost=0, buffers_lost=0,
                           **extra)  # type: ignore[arg-type]  # fmt: skip


def _reason(subject: str, headers: dict[str, str] | None, payload: bytes) -> str:
    with pytest.raises(BadMessage) as caught:
        check_message(subject, headers, payload)
    return caught.value.reason


def test_poison_and_forged_messages_are_refused_with_their_reason() -> None:
    header, buffer = _buffers()
    subject = "etw.web-02.Payroll"
    # The header that stopped the collector: 100 random bytes marked as a header.
    assert _reason(subject, _headers("web-02", 0, KIND_HEADER), os.urandom(100)) == "header"
    # Identity: the subject is what NATS authenticated; headers that disagree are refused.
    assert _reason("etw.web-01.Payroll", _headers("web-02", 1, KIND_BUFFER), buffer) == "identity"
    assert _reason(subject, _headers("web-02", 1, KIND_BUFFER, session="Other"), buffer) == "identity"
    assert _reason("etw.web-02", _headers("web-02", 1, KIND_BUFFER), buffer) == "subject"
    # Kinds that do not fit their sequence, numbers out of range, a gap past the message.
    assert _reason(subject, _headers("web-02", 3, KIND_HEADER), header) == "kind"
    assert _reason(subject, _headers("web-02", 0, KIND_BUFFER), buffer) == "kind"
    assert _reason(subject, _headers("web-02", 4, KIND_END), b"x") == "kind"
    assert _reason(subject, _headers("web-02", 1 << 60, KIND_BUFFER), buffer) == "sequence"
    assert _reason(subject, _headers("web-02", 5, KIND_BUFFER, gap=(3, 9)), buffer) == "sequence"
    assert _reason(subject, {**_headers("web-02", 2, KIND_BUFFER), "Openetw-Start": "-1"}, buffer) == "headers"
    assert _reason(subject, None, buffer) == "headers"
    # Buffers whose own header is wrong.
    assert _reason(subject, _headers("web-02", 1, KIND_BUFFER), buffer[:4096]) == "buffer"
    compressed = bytearray(buffer)
    struct.pack_into("<H", compressed, L.WMI_BUFFER_HEADER.offset("BufferFlag"), L.BUFFER_FLAG_COMPRESSED)
    assert _reason(subject, _headers("web-02", 1, KIND_BUFFER), bytes(compressed)) == "buffer"
    good = check_message(subject, _headers("web-02", 1, KIND_BUFFER), buffer)
    assert (good.records, good.damage, good.payload) == (5, None, buffer)


def test_a_damaged_buffer_keeps_the_records_before_the_damage() -> None:
    _, buffer = _buffers()
    whole = check_message("etw.h.S", _headers("h", 1, KIND_BUFFER, session="S"), buffer)
    damaged = bytearray(buffer)
    third = 0x48
    for _ in range(2):  # the third record's Size made impossible
        third += (struct.unpack_from("<H", damaged, third)[0] + 7) & ~7
    struct.pack_into("<H", damaged, third, 0xFFF0)
    checked = check_message("etw.h.S", _headers("h", 1, KIND_BUFFER, session="S"), bytes(damaged))
    assert (whole.records, checked.records) == (5, 2) and checked.damage is not None
    assert len(checked.payload) == len(buffer) and checked.payload[0x48:third] == buffer[0x48:third]
    assert checked.payload[third:] == b"\xff" * (len(buffer) - third)
    assert struct.unpack_from("<I", checked.payload, 0x30)[0] == third  # Offset: the end of what is kept


def test_first_writer_wins_and_bad_messages_are_set_aside(tmp_path: Path) -> None:
    header, buffer = _buffers()
    store = FleetStore(tmp_path, outputs=frozenset({"etl", "log"}))

    def message(host: str, sequence: int, kind: str, payload: bytes, subject_host: str | None = None, delivered: int = 1) -> Incoming:
        return Incoming(f"etw.{subject_host or host}.Payroll", _headers(host, sequence, kind), payload, delivered, 100 + sequence)

    answers = take_batch(store, [
        message("web-02", 0, KIND_HEADER, header),
        message("web-02", 0, KIND_HEADER, os.urandom(100)),  # poison: refused, the batch goes on
        message("web-02", 1, KIND_BUFFER, buffer),
        message("web-02", 2, KIND_BUFFER, buffer, subject_host="web-01"),  # web-01 forging web-02: refused
        message("web-02", 1, KIND_BUFFER, buffer[:8000] + bytes(192)),  # the same sequence again: never replaced
        message("web-02", 3, KIND_BUFFER, buffer[:4096]),
        message("ghost", 1, KIND_BUFFER, buffer),  # no header yet: later
        message("ghost", 2, KIND_BUFFER, buffer, delivered=LATER_DELIVERIES),  # no header after many deliveries: refused
        message("web-02", 4, KIND_END, b""),
        message("web-02", 5, KIND_BUFFER, buffer),  # after the end
    ])  # fmt: skip
    assert answers == [ACK, TERM, ACK, TERM, ACK, TERM, NAK, TERM, ACK, TERM]
    store.commit()
    store.close()
    again = FleetStore(tmp_path)  # the counts are in the books
    report = again.report()
    (session,) = report["sessions"]
    assert (session["buffers"], session["events"], session["duplicates"]) == (1, 5, 1)
    with open(tmp_path / session["files"][0], "rb") as stream:
        assert stream.read()[8192:] == buffer  # the first writer's bytes
    assert report["rejected"]["web-02"]["reasons"] == {"header": 1, "buffer": 1, "sequence": 1}
    assert report["rejected"]["web-01"]["reasons"] == {"identity": 1}
    assert report["rejected"]["ghost"]["reasons"] == {"no-header": 1}
    assert report["hosts"]["web-01"]["rejected"] == 1
    from openetw.fleet.status import status_of_directory

    assert status_of_directory(tmp_path)["hosts"]["web-02"]["rejected"] == 3
    again.close()
    # ForwardedEvents: web-02's own events, nothing web-01 sent as web-02.
    from openetw.fleet.to_log import FORWARDED_LOG

    logged = list(store.log.store.query(FORWARDED_LOG))
    assert len(logged) == len(store.log.events("web-02", header, [buffer])) and {event.computer for event in logged} == {"web-02"}


def test_fuzzed_messages_are_counted_and_good_sessions_kept(tmp_path: Path) -> None:
    from openetw.testing.fleet_fuzz import GOOD_HOSTS, run

    result = run(4000, seed=20261129, directory=tmp_path, corpus=corpus_path(*CORPUS))
    sessions = {s["host"]: s for s in result.report["sessions"]}
    for host in GOOD_HOSTS:
        good = sessions[host]
        assert (good["buffers"], good["events"], good["gaps"], good["ended"]) == (result.good_buffers, result.good_records, 0, True)
    refused = sum(entry["messages"] for entry in result.report["rejected"].values())
    assert refused == result.answers[TERM] > 2500
    assert set(result.answers) <= {ACK, TERM, NAK}


def test_the_collectors_walk_frames_as_the_reference_walk() -> None:
    """``check.frame`` (the compiled walk where it is built) and its pure twin against
    ``framing.walk`` on buffers damaged at random."""
    import random

    from openetw.etl import framing as F
    from openetw.fleet.check import frame, frame_python

    rng = random.Random(11)
    _, buffer = _buffers()
    for _ in range(3000):
        data = bytearray(buffer)
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(0x48, 0x48 + 0x300)
            data[at] = rng.randrange(256) if rng.random() < 0.5 else data[at] ^ (1 << rng.randrange(8))
        used = rng.choice((struct.unpack_from("<I", buffer, 0x30)[0], rng.randrange(0x48, len(data) + 1)))
        records, end, damage = frame(bytes(data), used)
        assert frame_python(bytes(data), used) == (records, end, damage)
        framed = [item for item in F.walk(bytes(data), data_end=used, buffer_size=len(data)) if isinstance(item, F.Framed)]
        stopped = any(not isinstance(item, F.Framed) for item in F.walk(bytes(data), data_end=used, buffer_size=len(data)))
        assert records == len(framed) and (damage is not None) == stopped
        if framed:
            assert end == framed[-1].pos + F.aligned(framed[-1].size)


def test_the_compiled_walk_frames_every_marker_as_the_pure_walk() -> None:
    """One record behind every marker key there is (header type and flags): the compiled walk
    frames exactly the records the pure one does, and stops where it stops."""
    from openetw import _native
    from openetw.etl import framing as F
    from openetw.fleet.check import frame, frame_python

    if _native.module("_read") is None:
        pytest.skip("the compiled core is not built here")
    framed = 0
    base = bytearray(b"\xff" * 512)
    struct.pack_into("<II", base, 0, len(base), 0)
    for key in range(1 << 16):
        data = bytearray(base)
        struct.pack_into("<HH", data, F.RECORDS_START, 0x58, key)  # Size first (producer records), then the key
        for at in (4, 6, 8):  # where other kinds keep their Size
            struct.pack_into("<H", data, F.RECORDS_START + at, 0x58)
        used = F.RECORDS_START + 0x58 + 8
        result = frame(bytes(data), used)
        assert result == frame_python(bytes(data), used), hex(key)
        framed += result[0] > 0
    assert framed > 1000  # the shapes framed: the comparison covered records, not only refusals


def test_buffers_waiting_for_a_header_are_bounded_per_host(tmp_path: Path) -> None:
    from openetw.fleet.collector import LATER_PER_HOST

    _, buffer = _buffers()
    store = FleetStore(tmp_path)
    flood = [Incoming("etw.mallory.S", _headers("mallory", n, KIND_BUFFER, session="S"), buffer, 1, n) for n in range(1, LATER_PER_HOST + 11)]
    other = Incoming("etw.web-01.S", _headers("web-01", 1, KIND_BUFFER, session="S"), buffer, 1, 9999)
    answers = take_batch(store, [*flood, other])
    assert answers == [NAK] * LATER_PER_HOST + [TERM] * 10 + [NAK]  # another host's buffer still waits
    assert take_batch(store, flood[:1]) == [NAK]  # one already waiting may wait again
    assert store.rejected["mallory"]["reasons"] == {"no-header": 10}
    # Refusals are counted per host, for a bounded number of hosts (then together).
    from openetw.fleet.store import OTHER_HOSTS, REJECTED_HOSTS_KEPT

    for index in range(REJECTED_HOSTS_KEPT + 5):
        store.reject(f"h{index}", "subject", "x")
    assert len(store.rejected) == REJECTED_HOSTS_KEPT + 1 and store.rejected[OTHER_HOSTS]["messages"] == 6
    store.close()


def test_open_sessions_per_host_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.fleet import store as store_module

    monkeypatch.setattr(store_module, "OPEN_SESSIONS_PER_HOST", 3)
    header, _ = _buffers()
    store = FleetStore(tmp_path)
    headers = [Incoming(f"etw.h.S{n}", _headers("h", 0, KIND_HEADER, session=f"S{n}"), header, 1, n + 1) for n in range(5)]
    assert take_batch(store, headers) == [ACK, ACK, ACK, TERM, TERM]
    # A session that ends makes room.
    assert take_batch(store, [Incoming("etw.h.S0", _headers("h", 1, KIND_END, session="S0"), b"", 1, 10), headers[4]]) == [ACK, ACK]
    assert store.rejected["h"]["reasons"] == {"sessions": 2}
    store.close()
