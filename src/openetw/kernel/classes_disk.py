"""DiskIo records: a block request's issue and completion joined into one Read, Write or Flush
with its response time (an event class of :class:`~openetw.kernel.classes.KernelEventMapper`).

The issuing thread is the one that submitted the request: a request the block layer queued
(``block_rq_insert``) is often issued later by a kernel worker, so the thread that inserted it
is kept until it is issued."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from openetw.etl.record import EventRecord
from openetw.kernel.classes_base import DISK_FLUSH, DISK_GROUP, DISK_READ, DISK_VERSION, DISK_WRITE, MapperState

__all__ = ["DiskEvents"]

_DISK = struct.Struct("<IIIIqQQqI")


class DiskEvents(MapperState):
    """Block requests in flight, keyed by device and sector, until they complete."""

    @staticmethod
    def _request_key(v: Mapping[str, Any]) -> tuple[int, int]:
        # A flush carries no sector (0 at issue, all ones at completion): one per device.
        return (v["dev"], -1) if "F" in v["rwbs"] and v["nr_sector"] == 0 else (v["dev"], v["sector"])

    def _on_block_insert(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        self._disk_queued[self._request_key(v)] = v["common_pid"]
        if len(self._disk_queued) > 65536:  # issues lost: forget the oldest
            self._disk_queued.pop(next(iter(self._disk_queued)))
        return []

    def _on_block_issue(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        key = self._request_key(v)
        submitter = self._disk_queued.pop(key, 0) or v["common_pid"]
        self._disk_in_flight[key] = (ts, submitter, v["bytes"], v["nr_sector"])
        if len(self._disk_in_flight) > 65536:  # completions lost: forget the oldest
            self._disk_in_flight.pop(next(iter(self._disk_in_flight)))
        return []

    def _on_block_complete(self, ts: int, cpu: int, v: Mapping[str, Any]) -> list[EventRecord]:
        rwbs = v["rwbs"]
        issued = self._disk_in_flight.pop(self._request_key(v), None)
        if "F" in rwbs and v["nr_sector"] == 0:
            opcode = DISK_FLUSH
        elif v["nr_sector"] == 0:
            return []  # the data-less tail of a FUA/pre-flush write: its data was reported
        elif "R" in rwbs:
            opcode = DISK_READ
        elif "W" in rwbs:
            opcode = DISK_WRITE
        else:
            return []  # discards and other requests have no NT counterpart
        if issued is None:
            issue_ts, issuer, size = ts, 0, v["nr_sector"] * 512
        else:
            issue_ts, issuer, issued_bytes, sectors = issued
            size = issued_bytes or sectors * 512
        response = max(0, ts - issue_ts)
        if opcode == DISK_FLUSH:
            payload = struct.pack("<IIqQI", v["dev"], 0, response, 0, issuer)
        else:
            offset = v["sector"] * 512 if v["sector"] != 0xFFFFFFFFFFFFFFFF else 0
            payload = _DISK.pack(v["dev"], 0, size, 0, offset, 0, 0, response, issuer)
        tid = issuer or v["common_pid"]
        return [self._record(DISK_GROUP, opcode, DISK_VERSION, tid, ts, cpu, payload)]

