"""Kernel records with stacks, built by hand as Windows lays them out (tests' helpers)."""

from __future__ import annotations

import struct
import uuid

from openetw.etl.build import build_classic_record, build_event_record, build_perfinfo_record, build_system_record
from openetw.etl.record import EventRecord

SAMPLE_HOOK, CSWITCH_HOOK = 0x0F2E, 0x0524
STACK, KEY_DELETE, KEY_RUNDOWN, KEY_KERNEL, KEY_USER = 0x1820, 0x1823, 0x1824, 0x1825, 0x1826
KERNEL_BASE = 0xFFFFF800_00000000
USER_PROVIDER = uuid.UUID("6a7f2c10-1111-4a5b-9c8d-0123456789ab")


def sample(ts: int, tid: int, ip: int, cpu: int = 0) -> EventRecord:
    return build_perfinfo_record(hook_id=SAMPLE_HOOK, timestamp=ts, cpu=cpu, user_data=struct.pack("<QIHH", ip, tid, 1, 0))


def cswitch(ts: int, new_tid: int, old_tid: int) -> EventRecord:
    return build_perfinfo_record(hook_id=CSWITCH_HOOK, timestamp=ts, user_data=struct.pack("<II", new_tid, old_tid) + bytes(16))


def stack(ts: int, pid: int, tid: int, frames: list[int], at: int | None = None) -> EventRecord:
    payload = struct.pack("<qII", ts, pid, tid) + struct.pack(f"<{len(frames)}Q", *frames)
    return build_perfinfo_record(hook_id=STACK, timestamp=ts + 1 if at is None else at, user_data=payload)


def key_reference(kernel: bool, ts: int, pid: int, tid: int, key: int, at: int | None = None) -> EventRecord:
    payload = struct.pack("<qIIQ", ts, pid, tid, key)
    return build_perfinfo_record(hook_id=KEY_KERNEL if kernel else KEY_USER, timestamp=ts + 1 if at is None else at, user_data=payload)


def key_definition(at: int, key: int, frames: list[int], rundown: bool = False) -> EventRecord:
    payload = struct.pack("<Q", key) + struct.pack(f"<{len(frames)}Q", *frames)
    return build_perfinfo_record(hook_id=KEY_RUNDOWN if rundown else KEY_DELETE, timestamp=at, user_data=payload)


def image_load(ts: int, pid: int, base: int, size: int, path: str, opcode: int = 10) -> EventRecord:
    payload = struct.pack("<QQIIIBBHQIIII", base, size, pid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) + path.encode("utf-16-le") + b"\0\0"
    return build_system_record(hook_id=0x1400 | opcode, version=3, pid=pid, timestamp=ts, user_data=payload)


def user_event(ts: int, pid: int, tid: int, extended: tuple = ()) -> EventRecord:  # type: ignore[type-arg]
    return build_event_record(provider_id=USER_PROVIDER, id=7, pid=pid, tid=tid, timestamp=ts, extended=extended)


IMAGE_ID = uuid.UUID("b3e675d7-2554-4f18-830b-2762732560de")


def dbg_id_rsds(ts: int, pid: int, base: int, guid: uuid.UUID, age: int, pdb_name: str) -> EventRecord:
    """KernelTraceControl ImageID/DbgID_RSDS, as merging writes it after an image event."""
    payload = struct.pack("<QI", base, pid) + guid.bytes_le + struct.pack("<I", age) + pdb_name.encode() + b"\0"
    return build_classic_record(event_guid=IMAGE_ID, type=36, version=2, pid=pid, timestamp=ts, user_data=payload)


IMAGE_BUILD_ID = uuid.UUID("0e6c4d7a-51b1-4c0e-9f3e-6f70656e6575")


def build_id_record(ts: int, pid: int, base: int, build_id: str) -> EventRecord:
    """openetw's ImageBuildId/BuildId, as its Linux kernel trace writes it after an image event."""
    payload = struct.pack("<QI", base, pid) + bytes.fromhex(build_id)
    return build_classic_record(event_guid=IMAGE_BUILD_ID, type=32, version=0, pid=pid, timestamp=ts, user_data=payload)
