"""WPP trace message formats (TMF): how ``TraceMessage`` (WPP) events are named, decoded and formatted.

A WPP event carries only its message GUID, its message number and the raw argument bytes; the
TMF file (``<message GUID>.tmf``, extracted from the PDB) says what they mean::

    // PDB: d:\\src\\tracedrv.pdb                       <- comments
    1606d1a7-1682-57d1-65f7-36693800e096 tracedrv // SRC=tracedrv.c MJ= MN=
    #typev tracedrv_c123 10 "%0IOCTL = %10!d!" //   LEVEL=TRACE_LEVEL_INFORMATION FLAGS=TRACE_IOCTL FUNC=Ioctl
    {
    ioctlCode, ItemLong -- 10
    }

The header line opens the messages of a message GUID and names its component; each ``#typev``
line is one message (name, number, FormatMessage-style format, ``// KEY=value`` tail); the block
lists the arguments in payload order as ``<C expression>, <Item type>[(parameters)] -- <number>``.
Argument numbers start at 10 (``%10`` is the first argument; ``%1``..``%9`` are the prefix
variables: ``%1`` the component, ``%2`` the message name, the others per-record facts).

``parse_tmf`` turns the text into ``TmfMessage``s; ``schema_from_tmf`` makes the ``Schema`` of
one (source ``"wpp"``, ``provider_id`` and ``decode_guid`` the message GUID, ``event_id`` the
message number). Its ``message`` is the format with a leading ``%0`` (the prefix) dropped, the
arguments renumbered ``%1``..``%n`` in payload order with their ``!printf!`` specs kept,
``%1``/``%2`` and ``%!NAME!`` macros (``FUNC``, ``LEVEL``, ``FLAGS``, ``COMPNAME``, any key of
the tail) filled in, and the per-record prefix variables (``%3``..``%9``) left as literal text.

Item types (``_SIMPLE`` and the families below it) follow their payload layout: little-endian
and packed; ``ItemPtr`` takes the producer's pointer size; ``String``/``WString`` end at a NUL;
``PString``/``PWString``/``HEXDump`` start with a u16 byte count (``DSWString``: big-endian);
``IPAddr`` and ``Port`` are in network order; ``Sid`` is a TOKEN_USER then the SID;
``CharHidden(n)``/``WChar(n)`` are n characters. ``ListByte``/``Short``/``Long(a,b=5,c)`` name
values (counted from 0, an explicit ``=value`` restarting the count), ``SetByte``/``Short``/
``Long(a,b)`` name bit positions, ``Enum(Name)`` is a 4-byte C enum whose values live in the PDB
(shown as numbers). An unknown item type does not fail the file: decoding reports that argument
as an error and stops there, its size being unknown. Argument lines are in payload order.

This module is pure except ``read_tmf_path`` at the end, the edge that opens files.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from openetw.errors import ManifestError
from openetw.etl.intypes import InType, OutType
from openetw.tdh.schema import EventMap, MapEntry, PropertyInfo, Schema

__all__ = [
    "MAX_TMF_CHARS",
    "TmfArgument",
    "TmfError",
    "TmfMessage",
    "convert_format",
    "decode_tmf_bytes",
    "parse_tmf",
    "read_tmf_path",
    "schema_from_tmf",
    "schemas_from_tmf",
]

MAX_TMF_CHARS = 16 * 1024 * 1024
_MAX_NUMBER = 0xFFFF  # message numbers are u16 in the MESSAGE header
_FIRST_ARGUMENT = 10


class TmfError(ManifestError):
    """A TMF file is malformed."""

    def __str__(self) -> str:
        where = self.path or "<tmf>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class TmfArgument:
    """One argument line: ``expression, item_type(parameters) -- number``, and its property."""

    expression: str
    item_type: str
    parameters: tuple[str, ...] | None
    number: int
    line: int
    prop: PropertyInfo
    event_map: EventMap | None = None


@dataclass(frozen=True)
class TmfMessage:
    """One ``#typev`` message of a TMF file."""

    guid: uuid.UUID
    number: int
    name: str
    format: str  # as written, prefix marker and WPP numbering included
    message: str  # the format as a FormatMessage string over the arguments (%1..%n)
    component: str | None
    arguments: tuple[TmfArgument, ...]
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)  # the tail's KEY=value
    source_file: str | None = None  # SRC= of the header line
    line: int = 0
    path: str | None = None

    @property
    def function(self) -> str | None:
        return self.attributes.get("FUNC") or None

    @property
    def level_name(self) -> str | None:
        return _levels(self.attributes)[0]

    @property
    def flags_name(self) -> str | None:
        return _levels(self.attributes)[1]


# -- item types -----------------------------------------------------------------------------------

# name -> (in-type, out-type, fixed length)
_SIMPLE: dict[str, tuple[InType, OutType | None, int | None]] = {
    "ItemChar": (InType.INT8, None, None), "ItemUChar": (InType.UINT8, None, None),
    "ItemShort": (InType.INT16, None, None), "ItemUShort": (InType.UINT16, None, None),
    "ItemLong": (InType.INT32, None, None), "ItemULong": (InType.UINT32, None, None),
    "ItemULongX": (InType.UINT32, OutType.HEXINT32, None),
    "ItemLongLong": (InType.INT64, None, None), "ItemULongLong": (InType.UINT64, None, None),
    "ItemLongLongX": (InType.INT64, OutType.HEXINT64, None), "ItemLongLongXX": (InType.UINT64, OutType.HEXINT64, None),
    "ItemLongLongO": (InType.UINT64, None, None),
    "ItemDouble": (InType.DOUBLE, None, None),
    "ItemPtr": (InType.POINTER, None, None),
    "ItemString": (InType.ANSISTRING, None, None), "ItemWString": (InType.UNICODESTRING, None, None),
    "ItemPString": (InType.COUNTEDANSISTRING, None, None), "ItemPWString": (InType.COUNTEDSTRING, None, None),
    "ItemDSWString": (InType.REVERSEDCOUNTEDSTRING, None, None),
    "ItemNWString": (InType.NONNULLTERMINATEDSTRING, None, None),
    "ItemGuid": (InType.GUID, None, None), "ItemCLSID": (InType.GUID, None, None),
    "ItemIID": (InType.GUID, None, None), "ItemLIBID": (InType.GUID, None, None),
    "ItemNTSTATUS": (InType.UINT32, OutType.NTSTATUS, None), "ItemNDIS_STATUS": (InType.UINT32, OutType.NTSTATUS, None),
    "ItemWINERROR": (InType.UINT32, OutType.WIN32ERROR, None), "ItemHRESULT": (InType.UINT32, OutType.HRESULT, None),
    "ItemNDIS_OID": (InType.UINT32, OutType.HEXINT32, None),
    "ItemIPAddr": (InType.UINT32, OutType.IPV4, None), "ItemPort": (InType.UINT16, OutType.PORT, None),
    "ItemIPV6Addr": (InType.BINARY, OutType.IPV6, 16),
    "ItemTimestamp": (InType.FILETIME, None, None),
    "ItemTimeDelta": (InType.INT64, None, None), "ItemWaitTime": (InType.INT64, None, None),
    "ItemChar4": (InType.NONNULLTERMINATEDANSISTRING, None, 4),
    "ItemSid": (InType.WBEMSID, None, None),
    "ItemHEXDump": (InType.MANIFEST_COUNTEDBINARY, None, None), "ItemHexDump": (InType.MANIFEST_COUNTEDBINARY, None, None),
}  # fmt: skip
_LIST_OR_SET = re.compile(r"Item(List|Set)(Byte|Short|Long)")
_SIZED = {"Byte": (InType.UINT8, 1), "Short": (InType.UINT16, 2), "Long": (InType.UINT32, 4)}
_COUNTED_CHARS = {"ItemCharHidden": InType.NONNULLTERMINATEDANSISTRING, "ItemWChar": InType.NONNULLTERMINATEDSTRING}
_ENUMS = {"ItemEnum": (InType.INT32, None), "ItemFlagsEnum": (InType.UINT32, OutType.HEXINT32)}

_LEVELS = {
    "TRACE_LEVEL_NONE": 0, "TRACE_LEVEL_CRITICAL": 1, "TRACE_LEVEL_FATAL": 1, "TRACE_LEVEL_ERROR": 2,
    "TRACE_LEVEL_WARNING": 3, "TRACE_LEVEL_INFORMATION": 4, "TRACE_LEVEL_VERBOSE": 5,
    "TRACE_LEVEL_RESERVED6": 6, "TRACE_LEVEL_RESERVED7": 7, "TRACE_LEVEL_RESERVED8": 8, "TRACE_LEVEL_RESERVED9": 9,
}  # fmt: skip


def _level_value(text: str | None) -> int | None:
    if text is None:
        return None
    if text.upper() in _LEVELS:
        return _LEVELS[text.upper()]
    value = _integer(text)
    return value if value is not None and 0 <= value <= 255 else None


def _levels(attributes: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(LEVEL, FLAGS) of a tail; swapped back when ``DoTraceMessage`` wrote them the other way round."""
    level = attributes.get("LEVEL") or attributes.get("TRACELEVEL") or None
    flags = attributes.get("FLAGS") or attributes.get("FLAG") or None
    if _level_value(level) is None and _level_value(flags) is not None:
        level, flags = flags, level
    return level, flags


def _integer(text: str) -> int | None:
    """A decimal or ``0x`` hexadecimal integer, optionally negative; ``None`` for anything else."""
    body = text.strip()
    sign = -1 if body.startswith("-") else 1
    body = body[1:] if sign < 0 else body
    if not body or len(body) > 32:
        return None
    try:
        return sign * (int(body[2:], 16) if body[:2].lower() == "0x" else int(body, 10))
    except ValueError:
        return None


class _Where:
    """Where an error is: the file and the line being read."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.line = 0

    def error(self, message: str, line: int | None = None) -> TmfError:
        return TmfError(message, path=self.path, line=line or self.line or None)


def _names(where: _Where, item: str, parameters: tuple[str, ...], *, bits: int) -> tuple[MapEntry, ...]:
    """The entries of a list (values) or set (bit positions): ``a,b=5,c`` numbers a=0, b=5, c=6."""
    entries: list[MapEntry] = []
    next_value = 0
    for text in parameters:
        name, equals, value_text = text.partition("=")
        name = name.strip()
        if not name:
            continue  # "a,,b": empty names are skipped, as strtok does
        if equals:
            value = _integer(value_text)
            if value is None:
                raise where.error(f"{item}: value {value_text.strip()!r} of {name!r} is not an integer")
            next_value = value
        if bits:
            if not 0 <= next_value < bits:
                raise where.error(f"{item}: bit {next_value} of {name!r} is outside the {bits}-bit value")
            entries.append(MapEntry(1 << next_value, name))
        else:
            entries.append(MapEntry(next_value, name))
        next_value += 1
    return tuple(entries)


def _property(where: _Where, name: str, item: str, parameters: tuple[str, ...] | None) -> tuple[PropertyInfo, EventMap | None]:
    """The property (and map) of one argument of item type ``item``."""
    simple = _SIMPLE.get(item)
    if simple is not None:
        if parameters is not None:
            raise where.error(f"{item} takes no parameters")
        in_type, out_type, length = simple
        return PropertyInfo(name, in_type, out_type, length=length), None
    listed = _LIST_OR_SET.fullmatch(item)
    if listed is not None:
        if parameters is None:
            raise where.error(f"{item} needs its names in parentheses")
        in_type, width = _SIZED[listed.group(2)]
        bits = 8 * width if listed.group(1) == "Set" else 0
        event_map = EventMap(name, "bit" if bits else "value", _names(where, item, parameters, bits=bits))
        return PropertyInfo(name, in_type, map_name=name), event_map
    if item in _ENUMS:
        if not parameters or not parameters[0].strip():
            raise where.error(f"{item} needs the enum's name in parentheses")
        in_type, out_type = _ENUMS[item]
        return PropertyInfo(name, in_type, out_type), None
    if item in _COUNTED_CHARS:
        count = _integer(parameters[0]) if parameters and len(parameters) == 1 else None
        if count is None or not 0 <= count <= 0xFFFF:
            raise where.error(f"{item} needs a character count in parentheses")
        return PropertyInfo(name, _COUNTED_CHARS[item], length=count), None
    return PropertyInfo(name, InType.NULL, problem=f"WPP item type {item} is not supported"), None


# -- lines ----------------------------------------------------------------------------------------

_GUID = re.compile(r"\{?([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})\}?(?=\s|$)")
_TYPEV = re.compile(r"#typev\s+(\S+)\s+(\d+)\s+\"")
_ITEM_NAME = re.compile(r"Item\w+")
_QUOTE_THEN_TAIL = re.compile(r"\"\s*//")


def _tail(text: str) -> dict[str, str]:
    """``KEY=value`` pairs of a ``//`` tail (keys upper-cased; a value runs up to the next key)."""
    pairs: dict[str, str] = {}
    key = None
    for token in text.split():
        name, equals, value = token.partition("=")
        if equals and re.fullmatch(r"[A-Za-z_]\w*", name):
            key = name.upper()
            pairs[key] = value
        elif key is not None:
            pairs[key] = f"{pairs[key]} {token}".strip()
    return pairs


def _split_typev(where: _Where, text: str) -> tuple[str, int, str, dict[str, str]]:
    """(name, message number, format, tail) of a ``#typev`` line."""
    match = _TYPEV.match(text)
    if match is None:
        raise where.error('expected #typev <name> <number> "<format>"')
    number = int(match.group(2)) if len(match.group(2)) <= 6 else _MAX_NUMBER + 1
    if number > _MAX_NUMBER:
        raise where.error(f"message number {match.group(2)} is over {_MAX_NUMBER}")
    rest = text[match.end() :]
    close = rest.rfind('"')
    if close < 0:
        raise where.error("the format string has no closing quote")
    after = rest[close + 1 :].strip()
    if after and not after.startswith("//"):
        ends = list(_QUOTE_THEN_TAIL.finditer(rest))  # a quote inside the tail
        if not ends:
            raise where.error(f"unexpected text after the format string: {after[:40]!r}")
        close = ends[-1].start()
        after = rest[close + 1 :].strip()
    return match.group(1), number, rest[:close], _tail(after[2:]) if after else {}


def _split_argument(where: _Where, text: str) -> tuple[str, str, tuple[str, ...] | None, int]:
    """(expression, item type, parameters, number) of ``expr, ItemType(params) -- number``."""
    head, dashes, number_text = text.rpartition("--")
    number_text = number_text.strip()
    if not dashes or not number_text.isdigit() or len(number_text) > 6:
        raise where.error(f"expected '<expression>, <Item type> -- <number>', not {text[:60]!r}")
    number = int(number_text)
    if number < _FIRST_ARGUMENT:
        raise where.error(f"argument number {number}: arguments are numbered from {_FIRST_ARGUMENT}")
    head = head.rstrip()
    parameters = None
    if head.endswith(")"):
        open_at = head.rfind("(")
        parameters = tuple(part.strip() for part in head[open_at + 1 : -1].split(","))
        head = head[:open_at]
    expression, comma, item = head.rpartition(",")
    item = item.strip()
    if not comma or _ITEM_NAME.fullmatch(item) is None:
        raise where.error(f"no item type (Item...) after the expression in {text[:60]!r}")
    return expression.strip(), item, parameters, number


def _property_name(expression: str, position: int, taken: set[str]) -> str:
    """The C expression when it names the argument usefully and uniquely, else ``Arg<position>``."""
    name = " ".join(expression.split())
    if not name or name == "Arg" or name in taken:
        name = f"Arg{position}"
        suffix = 1
        while name in taken:
            suffix += 1
            name = f"Arg{position}_{suffix}"
    taken.add(name)
    return name


# -- format strings -------------------------------------------------------------------------------

_PERCENT = re.compile(r"%(?:%|!(\w+)!|(\d{1,2})(?:!([^!\n]*)!)?)")


def _literal(text: str) -> str:
    return text.replace("%", "%%")


def convert_format(fmt: str, positions: Mapping[int, int], *, component: str | None, name: str, attributes: Mapping[str, str]) -> str:
    """The WPP ``fmt`` as a FormatMessage string whose ``%k`` is the k-th argument in payload order.

    ``positions`` maps WPP argument numbers (10, 11, ...) to 1-based payload positions. Raises
    ``ValueError`` for an argument number no argument line defines.
    """
    out: list[str] = []
    position = 0
    for match in _PERCENT.finditer(fmt):
        out.append(fmt[position : match.start()])
        position = match.end()
        macro, digits, spec = match.groups()
        if macro is not None:
            value = attributes.get(macro.upper())
            if value is None and macro.upper() == "COMPNAME":
                value = component
            out.append(_literal(value or ""))
        elif digits is None:
            out.append("%%")
        elif (number := int(digits)) == 0:
            if match.start() != 0:  # a leading %0 is the prefix; elsewhere FormatMessage ends there
                out.append("%0")
        elif number < _FIRST_ARGUMENT:
            prefix = {1: component or "", 2: name}.get(number)
            out.append(_literal(prefix) if prefix is not None else f"%%{number}")
        else:
            index = positions.get(number)
            if index is None:
                raise ValueError(f"the format refers to %{number}, which no argument line defines")
            if index > 99:
                raise ValueError(f"argument %{number} is argument {index}: FormatMessage inserts stop at 99")
            following = fmt[position : position + 1]
            if spec is None and (following.isdigit() or following == "!"):
                spec = "s"  # keep "%1" from swallowing the text after it
            out.append(f"%{index}" + (f"!{spec}!" if spec is not None else ""))
    out.append(fmt[position:])
    return "".join(out)


# -- parsing --------------------------------------------------------------------------------------


@dataclass
class _Pending:
    """A ``#typev`` whose argument block is being read."""

    guid: uuid.UUID
    component: str | None
    source_file: str | None
    name: str
    number: int
    format: str
    attributes: dict[str, str]
    line: int
    arguments: list[TmfArgument] = field(default_factory=list)
    in_block: bool = False


def parse_tmf(text: str | bytes, path: str | None = None) -> list[TmfMessage]:
    """The messages of TMF ``text`` (bytes: UTF-16 with a BOM, UTF-8, else cp1252), in file order."""
    if isinstance(text, (bytes, bytearray)):
        text = decode_tmf_bytes(bytes(text), path)
    if len(text) > MAX_TMF_CHARS:
        raise TmfError(f"TMF text of {len(text)} characters is over the {MAX_TMF_CHARS} accepted", path=path)
    return list(_parse(text, _Where(path)))


def _parse(text: str, where: _Where) -> Iterator[TmfMessage]:
    header: tuple[uuid.UUID, str | None, str | None] | None = None
    pending: _Pending | None = None
    seen: dict[tuple[uuid.UUID, int], int] = {}
    for where.line, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if "\0" in line:
            raise where.error("NUL character in the text (binary data?)")
        if pending is not None and pending.in_block:
            if line == "}":
                yield _finish(pending, where, seen)
                pending = None
            elif line.startswith("#typev") or line == "{":
                raise where.error(f"{line.split()[0]} inside the argument block of message {pending.number} (missing '}}')")
            elif line and not line.startswith("//"):
                pending.arguments.append(_argument(where, line, pending.arguments))
            continue
        if not line or line.startswith("//") or line in ("TMF:", "PUBLIC_TMF:"):
            continue
        if line == "{":
            if pending is None:
                raise where.error("'{' without a #typev line before it")
            pending.in_block = True
            continue
        if line == "}":
            raise where.error("'}' without a '{'")
        if pending is not None:  # a #typev without an argument block: a message without arguments
            yield _finish(pending, where, seen)
            pending = None
        if line.startswith("#typev"):
            if header is None:
                raise where.error("#typev before any message GUID line")
            name, number, fmt, attributes = _split_typev(where, line)
            pending = _Pending(header[0], header[1], header[2], name, number, fmt, attributes, where.line)
        elif line.startswith("#"):
            continue  # other directives carry nothing a decoder needs
        elif (guid := _GUID.match(line)) is not None:
            body, _, tail = line[guid.end() :].partition("//")
            header = (uuid.UUID(guid.group(1)), body.strip() or None, _tail(tail).get("SRC") or None)
        else:
            raise where.error(f"unexpected line {line[:60]!r}")
    if pending is not None:
        if pending.in_block:
            raise where.error(f"the argument block of message {pending.number} is not closed", pending.line)
        yield _finish(pending, where, seen)


def _argument(where: _Where, line: str, earlier: list[TmfArgument]) -> TmfArgument:
    expression, item, parameters, number = _split_argument(where, line)
    for other in earlier:
        if other.number == number:
            raise where.error(f"argument number {number} is defined twice (first on line {other.line})")
    taken = {other.prop.name for other in earlier}
    name = _property_name(expression, len(earlier) + 1, taken)
    prop, event_map = _property(where, name, item, parameters)
    return TmfArgument(expression, item, parameters, number, where.line, prop, event_map)


def _finish(pending: _Pending, where: _Where, seen: dict[tuple[uuid.UUID, int], int]) -> TmfMessage:
    key = (pending.guid, pending.number)
    if key in seen:
        raise where.error(f"message {pending.number} of {pending.guid} is defined twice (first on line {seen[key]})", pending.line)
    seen[key] = pending.line
    positions = {argument.number: index for index, argument in enumerate(pending.arguments, 1)}
    try:
        message = convert_format(pending.format, positions, component=pending.component, name=pending.name, attributes=pending.attributes)
    except ValueError as exc:
        raise where.error(f"message {pending.number}: {exc}", pending.line) from None
    return TmfMessage(
        guid=pending.guid, number=pending.number, name=pending.name, format=pending.format, message=message,
        component=pending.component, arguments=tuple(pending.arguments), attributes=pending.attributes,
        source_file=pending.source_file, line=pending.line, path=where.path,
    )  # fmt: skip


# -- schemas --------------------------------------------------------------------------------------


def schema_from_tmf(message: TmfMessage) -> Schema:
    """The schema of one WPP message (found by message GUID and message number)."""
    level_name, flags_name = message.level_name, message.flags_name
    flags_value = _integer(flags_name) if flags_name else None
    anonymous = message.name.startswith("Unknown_")  # public TMFs name every message this way
    return Schema(
        provider_id=message.guid,
        event_id=message.number,
        level=_level_value(level_name) or 0,
        keyword=flags_value if flags_value is not None and flags_value >= 0 else 0,
        provider_name=message.component,
        event_name=(message.function or message.name) if anonymous else message.name,
        level_name=level_name,
        keyword_names=(flags_name,) if flags_name and flags_value is None else (),
        message=message.message,
        properties=tuple(argument.prop for argument in message.arguments),
        maps={argument.event_map.name: argument.event_map for argument in message.arguments if argument.event_map is not None},
        source="wpp",
        decode_guid=message.guid,
    )


def schemas_from_tmf(text: str | bytes, path: str | None = None) -> list[Schema]:
    """``schema_from_tmf`` of every message of TMF ``text``."""
    return [schema_from_tmf(message) for message in parse_tmf(text, path)]


def decode_tmf_bytes(data: bytes, path: str | None = None) -> str:
    """TMF text from file bytes: UTF-16 with a byte order mark, UTF-8, else cp1252."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise TmfError(f"not valid UTF-16: {exc.reason}", path=path) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


# -- files (the I/O edge) -------------------------------------------------------------------------


def read_tmf_path(path: str | Path) -> tuple[list[TmfMessage], list[TmfError]]:
    """The messages of a TMF file, or of every ``*.tmf`` file of a directory (in name order),
    and an error per file that could not be read or parsed (the others still count)."""
    from openetw.safeio import read_regular_file

    target = Path(path)
    if target.is_dir():
        try:
            files = sorted(entry for entry in target.iterdir() if entry.suffix.lower() == ".tmf" and entry.is_file())
        except OSError as exc:
            return [], [TmfError(f"cannot list directory: {exc.strerror or exc}", path=str(target))]
    else:
        files = [target]
    messages: list[TmfMessage] = []
    errors: list[TmfError] = []
    for file in files:
        try:
            data = read_regular_file(file, 2 * MAX_TMF_CHARS + 2)
            messages.extend(parse_tmf(data, str(file)))
        except TmfError as error:
            errors.append(error)
        except OSError as exc:
            errors.append(TmfError(f"cannot read TMF file: {exc.strerror or exc}", path=str(file)))
    return messages, errors
