"""Classic (WMI/MOF) providers: RegisterTraceGuids, the enable/disable notification, TraceEvent.

::

    def control(enabled, logger_handle, level, flags):
        print("tracing" if enabled else "stopped", logger_handle, level, hex(flags))

    provider = ClassicProvider(CONTROL_GUID, event_guids=[TRANSFER_GUID], callback=control).register()
    if provider.enabled and provider.level >= 4:
        provider.trace_event(TRANSFER_GUID, 1, payload, level=4)
        provider.trace_fields(TRANSFER_GUID, 2, [("UINT32", 7), ("UNICODESTRING", "done")])

A classic provider is registered under its control GUID and tagged classic, so the service lets
one session at a time enable it: a second session's enable is refused (the controller raises
``openetw.session.errors.ClassicProviderInUse``). The enabling session's logger handle (its
logger id, as ETW's handle carries it in its low bits), enable level and enable flags are given
to the callback and kept in ``logger_handle``, ``level`` and ``flags``. The flags are the
session's MatchAnyKeyword cut to its low 32 bits, which is how ETW hands keywords to a classic
provider. A new level or new flags from the same session call the callback again; a disable
calls it with ``enabled`` false and the handle of the session that let go. ``capture_state``
requests mean nothing to a classic provider and are ignored.

``trace_event`` is TraceEvent: an EVENT_TRACE_HEADER (FULL_HEADER64, the event GUID, Type,
Level, Version, thread and process ids, a timestamp, Kernel/UserTime 0) and the payload go to
the enabling session as they are, whatever their level: as in ETW, a classic provider checks
``level`` and ``flags`` itself. The event GUID is not checked against ``event_guids`` (ETW does
not either). ``use_timestamp`` is WNODE_FLAG_USE_TIMESTAMP: the caller's own TimeStamp, in the
session's clock (openetw's QPC is CLOCK_MONOTONIC in nanoseconds), is kept instead of the
current time. A record over 64 KB is refused and counted lost in the session.
"""

from __future__ import annotations

import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.etl.intypes import InType, OutType
from openetw.etl.payload import InvalidFieldValue, PayloadPacker
from openetw.etl.schema import PropertyInfo
from openetw.guids import parse_guid
from openetw.ipc.pool import PoolWriter
from openetw.provider.link import link
from openetw.provider.runtime import _ProviderBase, _write_all
from openetw.session import EnableState

__all__ = ["ClassicCallback", "ClassicProvider", "pack_fields"]

ClassicCallback = Callable[[bool, int, int, int], None]
"""``callback(enabled, logger_handle, level, flags)``"""

_HEADER = L.EVENT_TRACE_HEADER
_MAX_RECORD = 0xFFFF
_FLAGS_MASK = 0xFFFFFFFF
_monotonic_ns = time.monotonic_ns
_native_id = threading.get_native_id


def _guid(value: uuid.UUID | str, what: str) -> uuid.UUID:
    try:
        return parse_guid(value)
    except (ValueError, AttributeError, TypeError):
        raise InvalidArgument(f"{what} must be a GUID, not {value!r}") from None


class ClassicProvider(_ProviderBase):
    """A classic provider known by its control GUID; ``event_guids`` are the classes it traces."""

    classic = True  # the link registers it as such (one session at a time)

    def __init__(
        self,
        control_guid: uuid.UUID | str,
        event_guids: Iterable[uuid.UUID | str] = (),
        callback: ClassicCallback | None = None,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(_guid(control_guid, "the control GUID"), name, None)
        self.event_guids: tuple[uuid.UUID, ...] = tuple(_guid(g, "an event GUID") for g in event_guids)
        self.logger_handle: int | None = None
        self.level = 0
        self.flags = 0
        self._classic_callback = callback
        self._writes: tuple[Callable[[bytes, int, int], bool], ...] = ()
        self._guid_bytes: dict[Any, bytes] = {g: g.bytes_le for g in self.event_guids}

    @property
    def control_guid(self) -> uuid.UUID:
        return self.guid

    # -- the enable notification ---------------------------------------------------------------
    def _apply_state(self, state: EnableState, writers: dict[int, PoolWriter], *, notify: bool = True) -> None:
        previous = self._state
        released = self.logger_handle
        entry = state.sessions[0] if state.sessions else None
        self._state = state
        if entry is not None:
            self.logger_handle, self.level, self.flags = entry.logger_id, entry.level, entry.match_any & _FLAGS_MASK
        else:
            self.logger_handle, self.level, self.flags = None, 0, 0
        self._refresh_writers(writers)
        if not notify or state == previous or self._classic_callback is None:
            return
        if entry is not None:
            self._notify(True, entry.logger_id, self.level, self.flags)
        elif previous.sessions:
            self._notify(False, released if released is not None else 0, 0, 0)

    def _notify(self, enabled: bool, handle: int, level: int, flags: int) -> None:
        assert self._classic_callback is not None
        try:
            self._classic_callback(enabled, handle, level, flags)
        except Exception as exc:  # noqa: BLE001 - the callback is the application's; the runtime goes on
            print(f"openetw: control callback of {self.name or self.guid} failed: {exc!r}", file=sys.stderr)

    def _refresh_writers(self, writers: dict[int, PoolWriter]) -> None:
        super()._refresh_writers(writers)
        self._writes = tuple(write for _, write in self._routing[0])

    # -- TraceEvent ----------------------------------------------------------------------------
    def trace_event(
        self,
        event_guid: uuid.UUID | str,
        type: int,  # noqa: A002 - EVENT_TRACE_HEADER.Class.Type, named as ETW names it
        payload: bytes | bytearray | memoryview = b"",
        *,
        level: int = 0,
        version: int = 0,
        use_timestamp: int | None = None,
    ) -> bool:
        """TraceEvent: whether the enabling session took the event."""
        if not self.enabled:
            return False
        writes = self._writes
        if not writes:
            return False
        try:
            guid_bytes = self._guid_bytes.get(event_guid)
            data = payload if isinstance(payload, bytes) else bytes(payload)  # ``type`` is the event type here
        except TypeError:
            raise InvalidArgument(f"the payload is bytes and the event GUID a GUID, not {event_guid!r}, {payload!r:.40}") from None
        if guid_bytes is None:
            guid_bytes = self._remember_guid(event_guid)
        now = _monotonic_ns()
        timestamp = now if use_timestamp is None else use_timestamp
        size = _HEADER.size + len(data)
        if size > _MAX_RECORD:
            return self._refuse(writes, now)
        try:
            header = _HEADER.pack(
                size, L.HEADER_TYPE_FULL_HEADER64, L.MARKER_FLAGS_TYPED, type, level, version,
                _native_id(), link().pid, timestamp, guid_bytes, 0, 0,
            )  # fmt: skip
        except struct.error as exc:
            raise InvalidArgument(f"type (0..255), level (0..255), version (0..65535) or timestamp out of range: {exc}") from None
        return _write_all(writes, header + data, now)

    def trace_fields(
        self,
        event_guid: uuid.UUID | str,
        type: int,  # noqa: A002
        fields: Sequence[tuple[Any, ...]],
        *,
        level: int = 0,
        version: int = 0,
        use_timestamp: int | None = None,
    ) -> bool:
        """``trace_event`` with the payload packed from ``(in_type, value[, out_type])`` pairs,
        in-types as ``InType`` members, their names (``"UINT32"``, ``"win:UInt32"``) or numbers."""
        if not self.enabled:
            return False
        return self.trace_event(event_guid, type, pack_fields(fields), level=level, version=version, use_timestamp=use_timestamp)

    def _remember_guid(self, event_guid: uuid.UUID | str) -> bytes:
        raw = _guid(event_guid, "the event GUID").bytes_le
        if len(self._guid_bytes) < 1024:
            self._guid_bytes[event_guid] = raw
        return raw


# -- packing field values ------------------------------------------------------------------------

_U32 = struct.Struct("<I")
_Packer = Callable[[Any], bytes]
_packers: dict[tuple[int, int | None], _Packer] = {}
# MOF-only in-types written as the manifest type with the same bytes (u16 byte count + text).
_SAME_AS = {InType.COUNTEDSTRING: InType.MANIFEST_COUNTEDSTRING, InType.COUNTEDANSISTRING: InType.MANIFEST_COUNTEDANSISTRING}
_REVERSED = frozenset({InType.REVERSEDCOUNTEDSTRING, InType.REVERSEDCOUNTEDANSISTRING})
_UNCOUNTED = frozenset({InType.NONNULLTERMINATEDSTRING, InType.NONNULLTERMINATEDANSISTRING})


def _in_type(value: Any) -> InType:
    try:
        if isinstance(value, str):
            from openetw.manifest.winmeta import (
                IN_TYPE_NAMES,  # a winmeta name ("win:UInt32"): the manifest layer knows them
            )

            found = IN_TYPE_NAMES.get(value)
            return found if found is not None else InType[value.strip().upper()]
        return InType(value)
    except (KeyError, ValueError):
        raise InvalidArgument(f"{value!r} is not an in-type") from None


def _payload_packer(in_type: InType, out_type: OutType | None, length: int | None = None) -> _Packer:
    packer = PayloadPacker([PropertyInfo("value", in_type, out_type, length=length)], pointer_size=8)
    return lambda value: packer.pack((value,))


def _strip_count(counted: _Packer, reverse: bool) -> _Packer:
    """Re-uses a counted-string packer for the big-endian count or for no count at all."""

    def pack(value: Any) -> bytes:
        raw = counted(value)
        return (raw[1::-1] + raw[2:]) if reverse else raw[2:]

    return pack


def _hexdump(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidFieldValue("value", f"HEXDUMP expects bytes, not {type(value).__name__}")
    return _U32.pack(len(value)) + bytes(value)


def _wbemsid(sid: _Packer) -> _Packer:
    """The kernel's SID blob: 4 zero bytes for none, else a TOKEN_USER (SID pointer, attributes)
    and the SID. The pointer is self-relative (16: the SID right after it), never 0."""

    def pack(value: Any) -> bytes:
        if value is None:
            return bytes(4)
        return struct.pack("<QQ", 16, 0) + sid(value)

    return pack


def _packer_for(in_type: InType, out_type: OutType | None) -> _Packer:
    key = (int(in_type), None if out_type is None else int(out_type))
    found = _packers.get(key)
    if found is not None:
        return found
    if in_type in _SAME_AS:
        found = _payload_packer(_SAME_AS[in_type], out_type)
    elif in_type in _REVERSED or in_type in _UNCOUNTED:
        wide = in_type in (InType.REVERSEDCOUNTEDSTRING, InType.NONNULLTERMINATEDSTRING)
        counted = _payload_packer(InType.MANIFEST_COUNTEDSTRING if wide else InType.MANIFEST_COUNTEDANSISTRING, None)
        found = _strip_count(counted, reverse=in_type in _REVERSED)
    elif in_type == InType.UNICODECHAR:
        found = _payload_packer(InType.UNICODESTRING, None, length=1)
    elif in_type == InType.ANSICHAR:
        found = _payload_packer(InType.ANSISTRING, None, length=1)
    elif in_type == InType.HEXDUMP:
        found = _hexdump
    elif in_type == InType.WBEMSID:
        found = _wbemsid(_payload_packer(InType.SID, None))
    elif in_type == InType.BINARY and out_type != OutType.IPV6:
        found = _binary
    else:
        try:
            found = _payload_packer(in_type, out_type)
        except InvalidArgument:
            raise InvalidArgument(f"in-type {in_type.name} cannot be packed") from None
    if len(_packers) < 256:
        _packers[key] = found
    return found


def _binary(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidFieldValue("value", f"BINARY expects bytes, not {type(value).__name__}")
    return bytes(value)


def pack_fields(fields: Sequence[tuple[Any, ...]]) -> bytes:
    """The payload of ``(in_type, value[, out_type])`` pairs, as a 64-bit producer writes it."""
    parts = []
    for index, spec in enumerate(fields):
        if not isinstance(spec, (tuple, list)) or len(spec) not in (2, 3):
            raise InvalidArgument(f"fields[{index}] is (in_type, value[, out_type]), not {spec!r}")
        in_type = _in_type(spec[0])
        try:
            out_type = OutType(spec[2]) if len(spec) == 3 and spec[2] is not None else None
        except ValueError:
            raise InvalidArgument(f"fields[{index}]: {spec[2]!r} is not an out-type") from None
        try:
            parts.append(_packer_for(in_type, out_type)(spec[1]))
        except InvalidFieldValue as exc:
            raise InvalidFieldValue(f"fields[{index}]", exc.message) from None
    return b"".join(parts)
