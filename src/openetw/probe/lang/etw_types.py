"""The field types of ``etw_trace(...)``: Windows DTrace's ``etw_*`` names as TraceLogging fields.

``etw_trace(provider_name, provider_guid, event_name, level, keyword, type, name, value, ...)``
takes its fields as (etw type, field name, value) triples. Each type is a TraceLogging in-type
with the out-type TraceLoggingProvider.h's macro of that name gives it (``etw_pid`` is a UINT32
shown as a process id, ``etw_mbcsjson`` an ANSI string holding JSON, ...). ``etw_struct``'s
value is the number of fields that follow and belong to the struct. Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from openetw.etl.intypes import InType, OutType

__all__ = ["ETW_TYPES", "EtwType"]


@dataclass(frozen=True)
class EtwType:
    """One ``etw_*`` type: the TraceLogging field it writes and the D value it takes."""

    name: str
    in_type: InType | None  # None: etw_struct
    out_type: OutType | None
    value: str  # "int", "string", "float" (an integer converted), "count" (etw_struct)
    bits: int = 0  # integers: the field's width, the value is truncated to it
    signed: bool = False


def _int(name: str, in_type: InType, bits: int, signed: bool, out_type: OutType | None = None) -> EtwType:
    return EtwType(name, in_type, out_type, "int", bits, signed)


_COUNTED_ANSI = InType.MANIFEST_COUNTEDANSISTRING  # TraceLogging's TlgInCOUNTEDANSISTRING (23)

ETW_TYPES: dict[str, EtwType] = {
    t.name: t
    for t in (
        EtwType("etw_struct", None, None, "count"),
        EtwType("etw_string", InType.UNICODESTRING, None, "string"),
        EtwType("etw_mbcsstring", InType.ANSISTRING, None, "string"),
        _int("etw_int8", InType.INT8, 8, True),
        _int("etw_uint8", InType.UINT8, 8, False),
        _int("etw_int16", InType.INT16, 16, True),
        _int("etw_uint16", InType.UINT16, 16, False),
        _int("etw_int32", InType.INT32, 32, True),
        _int("etw_uint32", InType.UINT32, 32, False),
        _int("etw_int64", InType.INT64, 64, True),
        _int("etw_uint64", InType.UINT64, 64, False),
        EtwType("etw_float", InType.FLOAT, None, "float"),
        EtwType("etw_double", InType.DOUBLE, None, "float"),
        _int("etw_bool32", InType.BOOLEAN, 32, True),
        _int("etw_hexint32", InType.HEXINT32, 32, False),
        _int("etw_hexint64", InType.HEXINT64, 64, False),
        EtwType("etw_countedmbcsstring", _COUNTED_ANSI, None, "string"),
        _int("etw_intptr", InType.INT64, 64, True),
        _int("etw_uintptr", InType.UINT64, 64, False),
        _int("etw_pointer", InType.UINT64, 64, False, OutType.HEXINT64),
        _int("etw_char16", InType.UINT16, 16, False, OutType.STRING),
        _int("etw_char8", InType.UINT8, 8, False, OutType.STRING),
        _int("etw_bool8", InType.UINT8, 8, False, OutType.BOOLEAN),
        _int("etw_hexint8", InType.UINT8, 8, False, OutType.HEXINT8),
        _int("etw_hexint16", InType.UINT16, 16, False, OutType.HEXINT16),
        _int("etw_pid", InType.UINT32, 32, False, OutType.PID),
        _int("etw_tid", InType.UINT32, 32, False, OutType.TID),
        EtwType("etw_mbcsxml", InType.ANSISTRING, OutType.XML, "string"),
        EtwType("etw_mbcsjson", InType.ANSISTRING, OutType.JSON, "string"),
        EtwType("etw_countedmbcsxml", _COUNTED_ANSI, OutType.XML, "string"),
        EtwType("etw_countedmbcsjson", _COUNTED_ANSI, OutType.JSON, "string"),
        _int("etw_win32error", InType.UINT32, 32, False, OutType.WIN32ERROR),
        _int("etw_ntstatus", InType.INT32, 32, True, OutType.NTSTATUS),
        _int("etw_hresult", InType.INT32, 32, True, OutType.HRESULT),
    )
}
"""Every ``etw_*`` type of Windows DTrace's table, by name."""
