"""Building perf ring records by hand, and loading the captured ring."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from openetw.kernel import perf_format as F

DATA = Path(__file__).parent / "data" / "perf"


def captured_ring() -> tuple[bytes, dict]:
    return (DATA / "ring-cpu0.data").read_bytes(), json.loads((DATA / "ring-cpu0.json").read_text())


def record(rtype: int, body: bytes, misc: int = 0) -> bytes:
    body += b"\0" * (-len(body) % 8)
    return struct.pack("<IHH", rtype, misc, 8 + len(body)) + body


def sample_id(pid: int, tid: int, time: int, cpu: int) -> bytes:
    """The trailer for DEFAULT_SAMPLE_TYPE (TID, TIME, CPU)."""
    return struct.pack("<IIQII", pid, tid, time, cpu, 0)


def c_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return raw + b"\0" * (-len(raw) % 8)


def mmap2(
    pid: int, tid: int, addr: int, length: int, pgoff: int, filename: str, time: int, cpu: int = 0, prot: int = 5, build_id: bytes | None = None
) -> bytes:
    head = struct.pack("<IIQQQ", pid, tid, addr, length, pgoff)
    if build_id is None:
        ident, misc = struct.pack("<IIQQ", 254, 0, 1234, 0), 0
    else:
        ident, misc = bytes([len(build_id), 0, 0, 0]) + build_id.ljust(20, b"\0"), F.MISC_MMAP_BUILD_ID
    body = head + ident + struct.pack("<II", prot, 2) + c_string(filename) + sample_id(pid, tid, time, cpu)
    return record(F.RECORD_MMAP2, body, misc | F.MISC_USER)


def task(rtype: int, pid: int, ppid: int, tid: int, ptid: int, time: int, cpu: int = 0) -> bytes:
    return record(rtype, struct.pack("<IIIIQ", pid, ppid, tid, ptid, time) + sample_id(pid, tid, time, cpu))


def comm(pid: int, tid: int, name: str, time: int, exec_: bool = True, cpu: int = 0) -> bytes:
    misc = F.MISC_COMM_EXEC if exec_ else 0
    return record(F.RECORD_COMM, struct.pack("<II", pid, tid) + c_string(name) + sample_id(pid, tid, time, cpu), misc)


def sample(ip: int, pid: int, tid: int, time: int, cpu: int, chain: tuple[int, ...] = (), user: bool = True) -> bytes:
    body = struct.pack("<QIIQII", ip, pid, tid, time, cpu, 0) + struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
    return record(F.RECORD_SAMPLE, body, F.MISC_USER if user else F.MISC_KERNEL)


def lost(count: int, time: int, cpu: int = 0) -> bytes:
    return record(F.RECORD_LOST, struct.pack("<QQ", 7, count) + sample_id(0, 0, time, cpu))


def place(records: bytes, size: int, start: int) -> tuple[bytes, int, int]:
    """A data area of ``size`` bytes holding ``records`` from free-running position ``start``
    (wrapping at the end); returns (area, tail, head)."""
    area = bytearray(b"\xee" * size)
    for i, byte in enumerate(records):
        area[(start + i) % size] = byte
    return bytes(area), start, start + len(records)
