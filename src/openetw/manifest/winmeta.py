"""winmeta.xml built in: the standard levels, opcodes, keywords, channels and the data types.

``InType`` and ``OutType`` carry TDH's numbers (``TDH_INTYPE_*`` / ``TDH_OUTTYPE_*``), the ones a
compiled template stores and ``TRACE_EVENT_INFO`` reports; they live with the type table in
``openetw.etl.intypes`` (so a provider writes without loading the manifest model) and are
re-exported here.
Names in manifests (``win:UInt32``, ``xs:hexBinary``) map to them through ``IN_TYPE_NAMES`` and
``OUT_TYPE_NAMES``; spellings real files use that winmeta does not define go through
``resolve_in_type`` / ``resolve_out_type``, which say why they were accepted.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from openetw.etl.intypes import FIXED_SIZES as FIXED_SIZES
from openetw.etl.intypes import InType as InType
from openetw.etl.intypes import OutType as OutType

IN_TYPE_NAMES: dict[str, InType] = {
    "win:UnicodeString": InType.UNICODESTRING,
    "win:AnsiString": InType.ANSISTRING,
    "win:Int8": InType.INT8,
    "win:UInt8": InType.UINT8,
    "win:Int16": InType.INT16,
    "win:UInt16": InType.UINT16,
    "win:Int32": InType.INT32,
    "win:UInt32": InType.UINT32,
    "win:Int64": InType.INT64,
    "win:UInt64": InType.UINT64,
    "win:Float": InType.FLOAT,
    "win:Double": InType.DOUBLE,
    "win:Boolean": InType.BOOLEAN,
    "win:Binary": InType.BINARY,
    "win:GUID": InType.GUID,
    "win:Pointer": InType.POINTER,
    "win:FILETIME": InType.FILETIME,
    "win:SYSTEMTIME": InType.SYSTEMTIME,
    "win:SID": InType.SID,
    "win:HexInt32": InType.HEXINT32,
    "win:HexInt64": InType.HEXINT64,
    "win:CountedUnicodeString": InType.MANIFEST_COUNTEDSTRING,
    "win:CountedAnsiString": InType.MANIFEST_COUNTEDANSISTRING,
    "win:CountedBinary": InType.MANIFEST_COUNTEDBINARY,
}

# Names real manifests use for real types, with the reason they are accepted.
_IN_TYPE_ALIASES: dict[str, tuple[InType, str]] = {
    "win:CountedUtf16String": (InType.MANIFEST_COUNTEDSTRING, "TraceEvent's name for win:CountedUnicodeString"),
    "win:CountedMbcsString": (InType.MANIFEST_COUNTEDANSISTRING, "TraceEvent's name for win:CountedAnsiString"),
    "win:CountedString": (InType.MANIFEST_COUNTEDSTRING, "non-winmeta name for win:CountedUnicodeString"),
    # MOF-style names seen in manifests derived from kernel MOF classes.
    "win:WString": (InType.UNICODESTRING, "MOF name for win:UnicodeString"),
    "win:String": (InType.ANSISTRING, "MOF name for win:AnsiString"),
    "win:SInt8": (InType.INT8, "MOF name for win:Int8"),
    "win:SInt16": (InType.INT16, "MOF name for win:Int16"),
    "win:SInt32": (InType.INT32, "MOF name for win:Int32"),
    "win:SInt64": (InType.INT64, "MOF name for win:Int64"),
    "win:SizeT": (InType.SIZET, "TDH type SIZET, not a winmeta name"),
    "win:WChar": (InType.UNICODECHAR, "TDH type UNICODECHAR, not a winmeta name"),
    "win:IPAddrV4": (InType.UINT32, "MOF IPAddrV4 (network-order UInt32)"),
    "win:IPAddrV6": (InType.BINARY, "MOF IPAddrV6 (16 bytes)"),
}

# Types whose payload cannot be described: TraceEvent's regenerated manifests write the struct
# marker (``win:Struct``) or raw numbers in place of struct properties and drop their members.
OPAQUE_STRUCT_IN_TYPE_NAMES = frozenset({"win:Struct"})

OUT_TYPE_NAMES: dict[str, OutType] = {
    "xs:string": OutType.STRING,
    "xs:dateTime": OutType.DATETIME,
    "xs:byte": OutType.BYTE,
    "xs:unsignedByte": OutType.UNSIGNEDBYTE,
    "xs:short": OutType.SHORT,
    "xs:unsignedShort": OutType.UNSIGNEDSHORT,
    "xs:int": OutType.INT,
    "xs:unsignedInt": OutType.UNSIGNEDINT,
    "xs:long": OutType.LONG,
    "xs:unsignedLong": OutType.UNSIGNEDLONG,
    "xs:float": OutType.FLOAT,
    "xs:double": OutType.DOUBLE,
    "xs:boolean": OutType.BOOLEAN,
    "xs:GUID": OutType.GUID,
    "xs:hexBinary": OutType.HEXBINARY,
    "win:HexInt8": OutType.HEXINT8,
    "win:HexInt16": OutType.HEXINT16,
    "win:HexInt32": OutType.HEXINT32,
    "win:HexInt64": OutType.HEXINT64,
    "win:PID": OutType.PID,
    "win:TID": OutType.TID,
    "win:Port": OutType.PORT,
    "win:IPv4": OutType.IPV4,
    "win:IPv6": OutType.IPV6,
    "win:SocketAddress": OutType.SOCKETADDRESS,
    "win:CIMDateTime": OutType.CIMDATETIME,
    "win:ETWTIME": OutType.ETWTIME,
    "win:Xml": OutType.XML,
    "win:ErrorCode": OutType.ERRORCODE,
    "win:Win32Error": OutType.WIN32ERROR,
    "win:NTSTATUS": OutType.NTSTATUS,
    "win:HResult": OutType.HRESULT,
    "win:DateTimeCultureInsensitive": OutType.CULTURE_INSENSITIVE_DATETIME,
    "win:Json": OutType.JSON,
    "win:Utf8": OutType.UTF8,
    "win:Pkcs7WithTypeInfo": OutType.PKCS7_WITH_TYPE_INFO,
    "win:CodePointer": OutType.CODE_POINTER,
    "win:DateTimeUtc": OutType.DATETIME_UTC,
}

_OUT_TYPE_ALIASES: dict[str, tuple[OutType, str]] = {
    "xs:HexInt8": (OutType.HEXINT8, "no such type; win:HexInt8 is the real name"),
    "xs:HexInt16": (OutType.HEXINT16, "no such type; win:HexInt16 is the real name"),
    "xs:HexInt32": (OutType.HEXINT32, "no such type; win:HexInt32 is the real name"),
    "xs:HexInt64": (OutType.HEXINT64, "no such type; win:HexInt64 is the real name"),
    "win:GUID": (OutType.GUID, "no such output type; xs:GUID is the real name"),
    "win:DateTime": (OutType.DATETIME, "no such output type; xs:dateTime is the real name"),
}

_STRINGS = (OutType.STRING, OutType.XML, OutType.JSON)
# Output types each input type documents; the first is the default.
OUT_TYPES_FOR: dict[InType, tuple[OutType, ...]] = {
    InType.UNICODESTRING: _STRINGS,
    InType.ANSISTRING: (*_STRINGS, OutType.UTF8),
    InType.INT8: (OutType.BYTE, OutType.STRING),
    InType.UINT8: (OutType.UNSIGNEDBYTE, OutType.STRING, OutType.BOOLEAN, OutType.HEXINT8),
    InType.INT16: (OutType.SHORT,),
    InType.UINT16: (OutType.UNSIGNEDSHORT, OutType.PORT, OutType.HEXINT16, OutType.STRING),
    InType.INT32: (OutType.INT, OutType.HRESULT),
    InType.UINT32: (
        OutType.UNSIGNEDINT, OutType.PID, OutType.TID, OutType.IPV4, OutType.ETWTIME,
        OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HEXINT32, OutType.ERRORCODE, OutType.HRESULT,
    ),
    InType.INT64: (OutType.LONG,),
    InType.UINT64: (OutType.UNSIGNEDLONG, OutType.ETWTIME, OutType.HEXINT64),
    InType.FLOAT: (OutType.FLOAT,),
    InType.DOUBLE: (OutType.DOUBLE,),
    InType.BOOLEAN: (OutType.BOOLEAN,),
    InType.BINARY: (OutType.HEXBINARY, OutType.IPV6, OutType.SOCKETADDRESS, OutType.PKCS7_WITH_TYPE_INFO),
    InType.GUID: (OutType.GUID,),
    InType.POINTER: (OutType.HEXINT64, OutType.CODE_POINTER),
    InType.FILETIME: (OutType.DATETIME, OutType.CULTURE_INSENSITIVE_DATETIME, OutType.DATETIME_UTC),
    InType.SYSTEMTIME: (OutType.DATETIME, OutType.CULTURE_INSENSITIVE_DATETIME, OutType.DATETIME_UTC),
    InType.SID: (OutType.STRING,),
    InType.HEXINT32: (OutType.HEXINT32, OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HRESULT),
    InType.HEXINT64: (OutType.HEXINT64,),
    InType.MANIFEST_COUNTEDSTRING: _STRINGS,
    InType.MANIFEST_COUNTEDANSISTRING: (*_STRINGS, OutType.UTF8),
    InType.MANIFEST_COUNTEDBINARY: (
        OutType.HEXBINARY, OutType.IPV6, OutType.SOCKETADDRESS, OutType.PKCS7_WITH_TYPE_INFO,
    ),
}

# Only these input types may carry a value or bit map.
MAPPABLE_IN_TYPES = frozenset({InType.UINT8, InType.UINT16, InType.UINT32, InType.HEXINT32})


def default_out_type(in_type: InType) -> OutType:
    """The output type TDH uses when a field names none (``OutType.NULL`` when unknown)."""
    allowed = OUT_TYPES_FOR.get(in_type)
    return allowed[0] if allowed else OutType.NULL


class TypeResolution(NamedTuple):
    """A type name resolved to its code; ``note`` says why a non-winmeta name was accepted."""

    code: int
    note: str | None = None


_NUMERIC_TYPE = re.compile(r"^(?:win:)?(\d{1,4})$")


def resolve_in_type(name: str) -> TypeResolution | None:
    """The ``InType`` for a manifest ``inType`` name, or ``None`` when it names nothing known.

    Accepts winmeta names, the TraceEvent/MOF spellings real manifests use, and bare numbers.
    ``win:Struct`` and numbers that are not manifest types resolve to ``InType.NULL`` with a
    note: TraceEvent writes them where a struct's members were lost, so the payload is opaque.
    """
    found = IN_TYPE_NAMES.get(name)
    if found is not None:
        return TypeResolution(found)
    alias = _IN_TYPE_ALIASES.get(name)
    if alias is not None:
        return TypeResolution(alias[0], f"inType {name!r} is not a winmeta name ({alias[1]})")
    if name in OPAQUE_STRUCT_IN_TYPE_NAMES:
        return TypeResolution(InType.NULL, f"inType {name!r} marks a struct whose members were not written")
    numeric = _NUMERIC_TYPE.match(name)
    if numeric:
        number = int(numeric.group(1))
        # TraceEvent names every type up to 23, so its bare numbers (24 and up) are struct
        # descriptors read as types; only a number it could not have written is trusted.
        if 1 <= number <= 23:
            return TypeResolution(InType(number), f"inType {name!r} is a bare TDH number ({InType(number).name})")
        return TypeResolution(InType.NULL, f"inType {name!r} is not a type (a struct whose members were not written)")
    for known, code in IN_TYPE_NAMES.items():
        if known.lower() == name.lower():
            return TypeResolution(code, f"inType {name!r} is spelled {known!r} in winmeta")
    return None


def resolve_out_type(name: str) -> TypeResolution | None:
    """The ``OutType`` for a manifest ``outType`` name, or ``None`` when it names nothing known."""
    found = OUT_TYPE_NAMES.get(name)
    if found is not None:
        return TypeResolution(found)
    alias = _OUT_TYPE_ALIASES.get(name)
    if alias is not None:
        return TypeResolution(alias[0], f"outType {name!r}: {alias[1]}")
    for known, code in OUT_TYPE_NAMES.items():
        if known.lower() == name.lower() or known.split(":")[1].lower() == name.split(":")[-1].lower():
            return TypeResolution(code, f"outType {name!r} is spelled {known!r} in winmeta")
    return None


class StandardItem(NamedTuple):
    """A winmeta level, opcode, keyword, task or channel."""

    name: str
    value: int
    symbol: str
    message_id: int | None


LEVELS: dict[str, StandardItem] = {
    item.name: item
    for item in (
        StandardItem("win:LogAlways", 0, "WINEVENT_LEVEL_LOG_ALWAYS", 0x50000000),
        StandardItem("win:Critical", 1, "WINEVENT_LEVEL_CRITICAL", 0x50000001),
        StandardItem("win:Error", 2, "WINEVENT_LEVEL_ERROR", 0x50000002),
        StandardItem("win:Warning", 3, "WINEVENT_LEVEL_WARNING", 0x50000003),
        StandardItem("win:Informational", 4, "WINEVENT_LEVEL_INFO", 0x50000004),
        StandardItem("win:Verbose", 5, "WINEVENT_LEVEL_VERBOSE", 0x50000005),
    )
}
# winmeta's message strings where they differ from the item's name without ``win:``.
MESSAGE_TEXT: dict[str, str] = {
    "win:LogAlways": "Log Always",
    "win:Informational": "Information",
    "win:DC_Start": "DCStart",
    "win:DC_Stop": "DCStop",
}
# The standard levels' text by value (Event Viewer's Level column).
LEVEL_TEXT: dict[int, str] = {item.value: MESSAGE_TEXT.get(name, name.removeprefix("win:")) for name, item in LEVELS.items()}
# Level names real manifests use that winmeta does not define.
LEVEL_ALIASES: dict[str, str] = {"win:Always": "win:LogAlways"}

OPCODES: dict[str, StandardItem] = {
    item.name: item
    for item in (
        StandardItem("win:Info", 0, "WINEVENT_OPCODE_INFO", 0x30000000),
        StandardItem("win:Start", 1, "WINEVENT_OPCODE_START", 0x30010000),
        StandardItem("win:Stop", 2, "WINEVENT_OPCODE_STOP", 0x30020000),
        StandardItem("win:DC_Start", 3, "WINEVENT_OPCODE_DC_START", 0x30030000),
        StandardItem("win:DC_Stop", 4, "WINEVENT_OPCODE_DC_STOP", 0x30040000),
        StandardItem("win:Extension", 5, "WINEVENT_OPCODE_EXTENSION", 0x30050000),
        StandardItem("win:Reply", 6, "WINEVENT_OPCODE_REPLY", 0x30060000),
        StandardItem("win:Resume", 7, "WINEVENT_OPCODE_RESUME", 0x30070000),
        StandardItem("win:Suspend", 8, "WINEVENT_OPCODE_SUSPEND", 0x30080000),
        StandardItem("win:Send", 9, "WINEVENT_OPCODE_SEND", 0x30090000),
        StandardItem("win:Receive", 240, "WINEVENT_OPCODE_RECEIVE", 0x30F00000),
    )
}

TASK_NONE = StandardItem("win:None", 0, "WINEVENT_TASK_NONE", 0x70000000)

KEYWORDS: dict[str, StandardItem] = {
    item.name: item
    for item in (
        StandardItem("win:AnyKeyword", 0, "WINEVT_KEYWORD_ANY", 0x10000000),
        StandardItem("win:ResponseTime", 1 << 48, "WINEVENT_KEYWORD_RESPONSE_TIME", 0x10000031),
        StandardItem("win:WDIContext", 1 << 49, "WINEVENT_KEYWORD_WDI_CONTEXT", 0x10000032),
        StandardItem("win:WDIDiag", 1 << 50, "WINEVENT_KEYWORD_WDI_DIAG", 0x10000033),
        StandardItem("win:SQM", 1 << 51, "WINEVENT_KEYWORD_SQM", 0x10000034),
        StandardItem("win:AuditFailure", 1 << 52, "WINEVENT_KEYWORD_AUDIT_FAILURE", 0x10000035),
        StandardItem("win:AuditSuccess", 1 << 53, "WINEVENT_KEYWORD_AUDIT_SUCCESS", 0x10000036),
        StandardItem("win:CorrelationHint", 1 << 54, "WINEVENT_KEYWORD_CORRELATION_HINT", 0x10000037),
        StandardItem("win:EventlogClassic", 1 << 55, "WINEVENT_KEYWORD_EVENTLOG_CLASSIC", 0x10000038),
    )
}
# Bits 48-63 belong to Microsoft; providers declare keywords in bits 0-47.
RESERVED_KEYWORD_BITS = 0xFFFF_0000_0000_0000

CHANNELS: dict[str, StandardItem] = {
    item.name: item
    for item in (
        StandardItem("TraceClassic", 0, "WINEVENT_CHANNEL_CLASSIC_TRACE", 0x90000001),
        StandardItem("System", 8, "WINEVENT_CHANNEL_GLOBAL_SYSTEM", 0x00000102),
        StandardItem("Application", 9, "WINEVENT_CHANNEL_GLOBAL_APPLICATION", 0x00000100),
        StandardItem("Security", 10, "WINEVENT_CHANNEL_GLOBAL_SECURITY", 0x00000101),
        StandardItem("TraceLogging", 11, "WINEVENT_CHANNEL_TRACELOGGING", 0x90000002),
        StandardItem("ProviderMetadata", 12, "WINEVENT_CHANNEL_PROVIDERMETADATA", 0x90000003),
    )
}


def standard_channel(name: str) -> StandardItem | None:
    """A winmeta channel by name, with or without the ``win:`` prefix."""
    return CHANNELS.get(name.removeprefix("win:"))


CHANNEL_TYPES = ("Admin", "Operational", "Analytic", "Debug")
CUSTOM_LEVEL_RANGE = range(16, 256)
CUSTOM_OPCODE_RANGE = range(10, 240)
