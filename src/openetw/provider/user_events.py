"""A TraceLogging provider's events published to Linux ``user_events`` as EventHeader events
(Microsoft's "ETW on Linux": ``perf record -e user_events:Provider_L5K1`` records them and
openetw reads them back from the perf.data, as LinuxTracepoints' decoders do).

::

    events = TraceLoggingProvider("MyCompany_MyComponent").user_events()  # UserEventsUnavailable without them
    events.write("Started", level=4, keyword=0x1, port=8080, name="api")
    events.close()

Each (level, keyword) pair is one tracepoint, ``Provider_L<level>K<keyword>``, registered on
first use (``DIAG_IOCSREG`` on ``/sys/kernel/tracing/user_events_data``, kernel 6.4 or later);
``write`` sends the event only while a session has the tracepoint enabled (the kernel sets a bit
this process watches). A kernel without ``user_events`` (no ``user_events_data``: built without
CONFIG_USER_EVENTS, or tracefs not mounted) raises ``UserEventsUnavailable`` saying so;
``user_events_status()`` tells the same without raising.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openetw.errors import InvalidArgument, UserEventsUnavailable
from openetw.perfdata import eventheader as EH
from openetw.perfdata.encode import command_string, encode_event

__all__ = [
    "TRACEFS_ROOTS",
    "UserEventsProvider",
    "UserEventsStatus",
    "fields_for",
    "registration",
    "user_events_status",
]

TRACEFS_ROOTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
DIAG_IOCSREG = (3 << 30) | (8 << 16) | (ord("*") << 8)  # _IOWR('*', 0, struct user_reg *)
_USER_REG = struct.Struct("<IBBHQQI")  # size, enable_bit, enable_size, flags, enable_addr, name_args, write_index


@dataclass(frozen=True, slots=True)
class UserEventsStatus:
    """Whether this kernel takes ``user_events``: ``path`` of ``user_events_data``, or ``reason``."""

    available: bool
    path: str | None
    reason: str


def user_events_status(roots: Sequence[str] = TRACEFS_ROOTS) -> UserEventsStatus:
    """Whether ``user_events_data`` is in a tracefs under ``roots`` and this process may write it."""
    for root in roots:
        path = os.path.join(root, "user_events_data")
        if os.path.exists(path):
            if not os.access(path, os.W_OK):
                return UserEventsStatus(False, path, f"{path} is not writable by this user")
            return UserEventsStatus(True, path, "")
    where = ", ".join(roots)
    return UserEventsStatus(
        False,
        None,
        f"this kernel has no user_events: no user_events_data under {where} "
        "(a kernel built with CONFIG_USER_EVENTS, 6.4 or later, with tracefs mounted, has it)",
    )


def registration(enable_addr: int, name_args: int, enable_bit: int = 0) -> bytes:
    """A ``struct user_reg`` for ``DIAG_IOCSREG`` (the kernel fills in ``write_index``)."""
    return _USER_REG.pack(_USER_REG.size, enable_bit, 4, 0, enable_addr, name_args, 0)


def fields_for(values: dict[str, Any]) -> tuple[list[EH.EhField], list[Any]]:
    """EventHeader fields typed from Python values: bool, int (64-bit signed), float, str, bytes,
    ``uuid.UUID``, and lists of ints or of str."""
    fields, ordered = [], []
    for name, value in values.items():
        if isinstance(value, bool):
            field = EH.EhField(name, EH.VALUE8, EH.BOOLEAN)
            value = int(value)
        elif isinstance(value, int):
            field = EH.EhField(name, EH.VALUE64, EH.SIGNED_INT)
        elif isinstance(value, float):
            field = EH.EhField(name, EH.VALUE64, EH.FLOAT)
        elif isinstance(value, str):
            field = EH.EhField(name, EH.STRING_LENGTH16_CHAR8 if "\0" in value else EH.ZSTRING_CHAR8)
        elif isinstance(value, (bytes, bytearray)):
            field = EH.EhField(name, EH.BINARY_LENGTH16_CHAR8, EH.HEX_BYTES)
        elif isinstance(value, uuid.UUID):
            field = EH.EhField(name, EH.VALUE128, EH.UUID)
        elif isinstance(value, (list, tuple)) and all(
            isinstance(item, int) and not isinstance(item, bool) for item in value
        ):
            field = EH.EhField(name, EH.VALUE64, EH.SIGNED_INT, count="variable")
        elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
            field = EH.EhField(name, EH.STRING_LENGTH16_CHAR8, count="variable")
        else:
            raise InvalidArgument(f"field {name!r}: no EventHeader type for {type(value).__name__}")
        fields.append(field)
        ordered.append(value)
    return fields, ordered


class _Tracepoint:
    __slots__ = ("enabled", "name", "write_index")

    def __init__(self, name: str, write_index: int, enabled: Any) -> None:
        self.name, self.write_index, self.enabled = name, write_index, enabled


class UserEventsProvider:
    """One provider's EventHeader tracepoints on this kernel's ``user_events``."""

    def __init__(self, name: str, *, roots: Sequence[str] = TRACEFS_ROOTS) -> None:
        command_string(name, 1, 0)  # a provider name a tracepoint can carry, or InvalidArgument
        status = user_events_status(roots)
        if not status.available or status.path is None:
            raise UserEventsUnavailable(status.reason)
        self.name = name
        try:
            self._fd: int | None = os.open(status.path, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as error:
            raise UserEventsUnavailable(f"{status.path}: {error.strerror}") from None
        self._tracepoints: dict[tuple[int, int], _Tracepoint] = {}

    def tracepoint(self, level: int, keyword: int) -> _Tracepoint:
        """The tracepoint of a level and keyword, registered on first use."""
        key = (level, keyword)
        found = self._tracepoints.get(key)
        if found is None:
            if self._fd is None:
                raise InvalidArgument("the provider is closed")
            command = ctypes.create_string_buffer(command_string(self.name, level, keyword).encode("ascii"))
            enabled = ctypes.c_uint32(0)
            request = bytearray(registration(ctypes.addressof(enabled), ctypes.addressof(command)))
            try:
                fcntl.ioctl(self._fd, DIAG_IOCSREG, request)
            except OSError as error:
                reason = (
                    "it does not take registrations" if error.errno in (errno.ENOTTY, errno.EINVAL) else error.strerror
                )
                raise UserEventsUnavailable(
                    f"user_events refused the tracepoint {command.value.decode().split(' ', 1)[0]!r}: {reason}"
                ) from None
            write_index = _USER_REG.unpack(bytes(request))[6]
            found = self._tracepoints[key] = _Tracepoint(command.value.decode(), write_index, enabled)
        return found

    def enabled(self, level: int = 5, keyword: int = 0) -> bool:
        return bool(self.tracepoint(level, keyword).enabled.value)

    def write(self, event_name: str, level: int = 5, keyword: int = 0, opcode: int = 0, **fields: Any) -> bool:
        """TraceLoggingWrite to user_events: False when no session has the tracepoint enabled."""
        tracepoint = self.tracepoint(level, keyword)
        if not tracepoint.enabled.value or self._fd is None:
            return False
        declared, values = fields_for(fields)
        event = encode_event(event_name, declared, values, level=level, opcode=opcode)
        os.writev(self._fd, [struct.pack("<I", tracepoint.write_index), event])
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> UserEventsProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
