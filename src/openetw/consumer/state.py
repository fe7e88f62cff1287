"""State records: the events a decoder learns from (process, thread and image lifetimes and
rundown, manifests and TDH metadata carried in the trace).

They are exactly the records ``openetw.tdh.context.DecodeContext.observe`` learns something
from. A time window never hides them from the decode context: state records before the window
still build the process table (and reach a rundown callback), so names inside the window are
right.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

__all__ = ["is_state_record", "state_mask"]

_LIFETIME = (1, 2, 3, 4)  # Start, End, DCStart, DCEnd
_IMAGE = (10, 2, 3, 4)  # Load, Unload, DCStart, DCEnd
# (kernel group, opcodes); image loads are logged under the Process group with opcode 10.
_KERNEL_STATE = {0x03: (*_LIFETIME, 10), 0x05: _LIFETIME, 0x14: _IMAGE}
_KERNEL_PROCESS_PROVIDER = uuid.UUID("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716")
_KERNEL_PROCESS_IDS = (1, 2)  # ProcessStart, ProcessStop
_METADATA_CLASS = uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671")
_METADATA_OPCODES = (32, 33)  # EventInfo, EventMapInfo
_MANIFEST_DATA_ID, _MANIFEST_DATA_OPCODE = 0xFFFE, 254
_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_KIND_KERNEL_CODES = (0, 1, 2)  # index kind codes of system, compact, perfinfo
_KIND_CLASSIC, _KIND_INSTANCE, _KIND_EVENT = 3, 4, 5


def is_state_record(record: Any) -> bool:
    kind = record.kind
    if kind in _KERNEL_KINDS:
        opcodes = _KERNEL_STATE.get((record.hook_id or 0) >> 8)
        return opcodes is not None and record.opcode in opcodes
    if kind == "event":
        if record.id == _MANIFEST_DATA_ID:
            return record.opcode == _MANIFEST_DATA_OPCODE  # type: ignore[no-any-return]
        return record.id in _KERNEL_PROCESS_IDS and record.provider_id == _KERNEL_PROCESS_PROVIDER
    if kind in ("classic", "instance"):
        return record.opcode in _METADATA_OPCODES and record.provider_id == _METADATA_CLASS
    return False


def _kernel_table() -> np.ndarray:
    """Whether a kernel record of (group, opcode) is a state record, at ``(group << 8) | opcode``."""
    table = np.zeros((256, 256), dtype=bool)
    for group, opcodes in _KERNEL_STATE.items():
        table[group, list(opcodes)] = True
    return table.reshape(-1)  # at (group << 8) | opcode


_KERNEL_TABLE = _kernel_table()


def state_mask(rows: Any, providers: list[uuid.UUID]) -> np.ndarray:
    """``is_state_record`` over index rows, or anything giving their columns by field name
    (``providers``: the index's provider table)."""
    kind = rows["kind"]
    opcode = rows["opcode"]
    mask = np.zeros(len(rows), dtype=bool)
    kernel = kind <= max(_KIND_KERNEL_CODES)
    if kernel.any():
        mask |= kernel & _KERNEL_TABLE.take((rows["hook_id"] & 0xFF00) | opcode)
    event = kind == _KIND_EVENT
    ids = rows["id"]
    mask |= event & (ids == _MANIFEST_DATA_ID) & (opcode == _MANIFEST_DATA_OPCODE)
    if _KERNEL_PROCESS_PROVIDER in providers:
        start_or_stop = (ids == _KERNEL_PROCESS_IDS[0]) | (ids == _KERNEL_PROCESS_IDS[1])
        mask |= event & (rows["provider"] == providers.index(_KERNEL_PROCESS_PROVIDER)) & start_or_stop
    if _METADATA_CLASS in providers:
        classic = (kind == _KIND_CLASSIC) | (kind == _KIND_INSTANCE)
        info = (opcode == _METADATA_OPCODES[0]) | (opcode == _METADATA_OPCODES[1])
        mask |= classic & (rows["provider"] == providers.index(_METADATA_CLASS)) & info
    return mask
