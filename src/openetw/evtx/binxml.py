"""BinXml: the token stream of EVTX records and templates, parsed into a small node tree.

Offsets inside BinXml (names, template definitions) are relative to the chunk, so a parser
works on one chunk's bytes. Template definitions are parsed once per chunk and shared by every
record that instantiates them; a record is a ``TemplateInstance`` (the template and where each
substitution value sits in the chunk) or, rarely, plain elements.

Tokens (MS-EVEN6): ``0x00`` end of stream, ``0x01`` open start element (``0x41`` with
attributes), ``0x02`` close start, ``0x03`` close empty, ``0x04`` end element, ``0x05`` value
text, ``0x06`` attribute, ``0x07`` CDATA, ``0x08`` character reference, ``0x09`` entity
reference, ``0x0a``/``0x0b`` processing instruction, ``0x0c`` template instance, ``0x0d``
normal and ``0x0e`` optional substitution, ``0x0f`` fragment header. ``0x40`` on a token says
"more of the same follow".
"""

from __future__ import annotations

import struct
from typing import Any

from openetw.evtx import values as V

TOKEN_EOF = 0x00
TOKEN_OPEN_START = 0x01
TOKEN_CLOSE_START = 0x02
TOKEN_CLOSE_EMPTY = 0x03
TOKEN_END_ELEMENT = 0x04
TOKEN_VALUE = 0x05
TOKEN_ATTRIBUTE = 0x06
TOKEN_CDATA = 0x07
TOKEN_CHAR_REF = 0x08
TOKEN_ENTITY_REF = 0x09
TOKEN_PI_TARGET = 0x0A
TOKEN_PI_DATA = 0x0B
TOKEN_TEMPLATE_INSTANCE = 0x0C
TOKEN_NORMAL_SUBSTITUTION = 0x0D
TOKEN_OPTIONAL_SUBSTITUTION = 0x0E
TOKEN_FRAGMENT_HEADER = 0x0F
FLAG_MORE = 0x40

MAX_DEPTH = 64  # elements and nested BinXml values: deeper is damage, not data
MAX_FRAGMENTS = 4096  # BinXml fragments one record may expand to (values may point back at each other)

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_TEMPLATE_INSTANCE = struct.Struct("<BII")  # unknown, template id, definition offset
_TEMPLATE_DEFINITION = struct.Struct("<I16sI")  # next offset, GUID, data size
_OPEN_START = struct.Struct("<HII")  # dependency id, data size, name offset
_SUBSTITUTION = struct.Struct("<HB")
_DESCRIPTOR = struct.Struct("<HBx")


class BinXmlError(Exception):
    """Damage inside BinXml; ``pos`` is the chunk offset where it was found."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


# -- nodes --------------------------------------------------------------------------------------


class Substitution:
    """A slot filled by the instance's value ``index``; an optional one vanishes when null."""

    __slots__ = ("index", "optional", "value_type")

    def __init__(self, index: int, optional: bool, value_type: int) -> None:
        self.index = index
        self.optional = optional
        self.value_type = value_type

    def __repr__(self) -> str:
        return f"<Substitution {self.index}{'?' if self.optional else ''} {V.type_name(self.value_type)}>"


class CharRef:
    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


class EntityRef:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class CData:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class ProcessingInstruction:
    __slots__ = ("target", "data")

    def __init__(self, target: str, data: str) -> None:
        self.target = target
        self.data = data


Part = str | Substitution | CharRef | EntityRef


class Attribute:
    __slots__ = ("name", "parts")

    def __init__(self, name: str) -> None:
        self.name = name
        self.parts: list[Part] = []


class Element:
    __slots__ = ("name", "attributes", "children", "empty")

    def __init__(self, name: str) -> None:
        self.name = name
        self.attributes: list[Attribute] = []
        self.children: list[Any] = []
        self.empty = False

    def __repr__(self) -> str:
        return f"<Element {self.name} attrs={len(self.attributes)} children={len(self.children)}>"


class Template:
    """A template definition: its chunk offset, GUID and node tree (with substitution slots)."""

    __slots__ = ("offset", "guid", "nodes", "data_size", "cache")

    def __init__(self, offset: int, guid: bytes, nodes: list[Any], data_size: int) -> None:
        self.offset = offset
        self.guid = guid
        self.nodes = nodes
        self.data_size = data_size
        self.cache: dict[str, Any] = {}  # derived views (header paths), built on first use


class TemplateInstance:
    """A template and its substitution values: ``(value type, chunk offset, size)`` each.

    BinXml values are parsed with the instance (damage inside them is damage of the record):
    ``nested`` maps their index to their nodes.
    """

    __slots__ = ("template", "values", "nested")

    def __init__(self, template: Template, values: list[tuple[int, int, int]], nested: dict[int, list[Any]] | None = None) -> None:
        self.template = template
        self.values = values
        self.nested = nested


# -- the parser ---------------------------------------------------------------------------------


class ChunkParser:
    """Parses BinXml inside one chunk, caching names and template definitions by offset."""

    __slots__ = ("data", "names", "templates", "limit", "_building", "work")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.names: dict[int, str] = {}
        self.templates: dict[int, Template] = {}
        self.limit = len(data)
        self._building: set[int] = set()
        self.work = 0  # fragments parsed since the caller last reset it: bounds hostile nesting

    # names
    def _name_at(self, offset: int) -> tuple[str, int]:
        """The name string stored at ``offset``: (text, offset just past it)."""
        data = self.data
        if offset + 8 > self.limit:
            raise BinXmlError(f"name at 0x{offset:x} is outside the chunk", offset)
        count = _u16(data, offset + 6)[0]
        end = offset + 8 + 2 * count
        if end + 2 > self.limit:
            raise BinXmlError(f"name of {count} characters at 0x{offset:x} runs past the chunk", offset)
        return data[offset + 8 : end].decode("utf-16-le", "replace"), end + 2

    def read_name(self, pos: int) -> tuple[str, int]:
        """A name reference at ``pos`` (a u32 chunk offset, the string inline when it points just past)."""
        if pos + 4 > self.limit:
            raise BinXmlError("name offset runs past the chunk", pos)
        offset = _u32(self.data, pos)[0]
        pos += 4
        if offset == pos:
            name, pos = self._name_at(offset)
            self.names[offset] = name
            return name, pos
        known = self.names.get(offset)
        if known is not None:
            return known, pos
        if offset < 0x80 or offset >= self.limit:
            raise BinXmlError(f"name offset 0x{offset:x} is outside the chunk", pos - 4)
        name = self._name_at(offset)[0]
        self.names[offset] = name
        return name, pos

    def _utf16_run(self, pos: int) -> tuple[str, int]:
        if pos + 2 > self.limit:
            raise BinXmlError("text length runs past the chunk", pos)
        count = _u16(self.data, pos)[0]
        end = pos + 2 + 2 * count
        if end > self.limit:
            raise BinXmlError(f"text of {count} characters runs past the chunk", pos)
        return self.data[pos + 2 : end].decode("utf-16-le", "replace"), end

    # templates
    def template_at(self, offset: int, depth: int) -> Template:
        template = self.templates.get(offset)
        if template is not None:
            return template
        if offset < 0x200 or offset + 24 > self.limit:
            raise BinXmlError(f"template definition offset 0x{offset:x} is outside the chunk", offset)
        if offset in self._building:
            raise BinXmlError(f"template definition at 0x{offset:x} instantiates itself", offset)
        _, guid, size = _TEMPLATE_DEFINITION.unpack_from(self.data, offset)
        start = offset + 24
        if start + size > self.limit:
            raise BinXmlError(f"template definition of {size} bytes runs past the chunk", offset)
        self._building.add(offset)
        try:
            nodes, _ = self.parse(start, start + size, depth + 1, in_template=True)
        finally:
            self._building.discard(offset)
        template = Template(offset, guid, nodes, size)
        self.templates[offset] = template
        return template

    def _instance(self, pos: int, end: int, depth: int) -> tuple[TemplateInstance, int]:
        """A template instance token at ``pos`` (the token byte included)."""
        if pos + 10 > end:
            raise BinXmlError("template instance runs past its data", pos)
        _, template_id, def_offset = _TEMPLATE_INSTANCE.unpack_from(self.data, pos + 1)
        pos += 10
        template = self.template_at(def_offset, depth)
        if template.guid[:4] != template_id.to_bytes(4, "little"):
            # The id is the definition's GUID's first four bytes: a record left from an earlier
            # use of the chunk points at definitions of that use, which are gone.
            raise BinXmlError(f"template id 0x{template_id:08x} does not name the definition at 0x{def_offset:x}", pos - 10)
        if def_offset == pos:
            pos = def_offset + 24 + template.data_size
        if pos + 4 > end:
            raise BinXmlError("substitution count runs past the record", pos)
        count = _u32(self.data, pos)[0]
        pos += 4
        if pos + 4 * count > end:
            raise BinXmlError(f"{count} substitution descriptors run past the record", pos - 4)
        descriptors = [_DESCRIPTOR.unpack_from(self.data, pos + 4 * i) for i in range(count)]
        pos += 4 * count
        values = []
        nested: dict[int, list[Any]] | None = None
        for index, (size, value_type) in enumerate(descriptors):
            if value_type == V.BINXML and size:
                if pos + size > end:
                    raise BinXmlError("BinXml value runs past the record", pos)
                if nested is None:
                    nested = {}
                nested[index] = self.parse(pos, pos + size, depth + 1)[0]
            values.append((value_type, pos, size))
            pos += size
        if pos > end:
            raise BinXmlError("substitution values run past the record", pos)
        return TemplateInstance(template, values, nested), pos

    def _open_start(self, pos: int, end: int) -> tuple[Element, int]:
        """An open-start-element token at ``pos``; some writers leave out the dependency id."""
        data = self.data
        if pos + 11 > end:
            raise BinXmlError("element header runs past its data", pos)
        token = data[pos]
        _, _, name_offset = _OPEN_START.unpack_from(data, pos + 1)
        after = pos + 11
        if not (name_offset == after or 0x80 <= name_offset < pos):
            short_name = _u32(data, pos + 5)[0]
            if short_name == pos + 9 or 0x80 <= short_name < pos:
                after = pos + 9
            else:
                raise BinXmlError(f"element name offset 0x{name_offset:x} points nowhere", pos)
        name, pos = self.read_name(after - 4)
        if token & FLAG_MORE:
            pos += 4  # attribute list size
        return Element(name), pos

    def parse(self, pos: int, end: int, depth: int = 0, in_template: bool = False) -> tuple[list[Any], int]:
        """Nodes from ``pos`` to the end-of-stream token (or ``end``): (nodes, position past)."""
        if depth > MAX_DEPTH:
            raise BinXmlError("BinXml nests too deeply", pos)
        self.work += 1
        if self.work > MAX_FRAGMENTS:
            raise BinXmlError(f"more than {MAX_FRAGMENTS} BinXml fragments in one record", pos)
        data = self.data
        if end > self.limit:
            end = self.limit
        out: list[Any] = []
        stack: list[Element] = []
        attribute: Attribute | None = None  # the attribute whose value tokens come next
        while pos < end:
            token = data[pos]
            kind = token & 0x0F if token & 0xB0 == 0 else -1
            if kind == TOKEN_EOF:
                pos += 1
                if stack:
                    raise BinXmlError(f"end of stream inside <{stack[-1].name}>", pos - 1)
                return out, pos
            if kind == TOKEN_OPEN_START:
                if len(stack) >= MAX_DEPTH:
                    raise BinXmlError("elements nest too deeply", pos)
                element, pos = self._open_start(pos, end)
                (stack[-1].children if stack else out).append(element)
                stack.append(element)
                attribute = None
            elif kind == TOKEN_ATTRIBUTE:
                if not stack:
                    raise BinXmlError("attribute outside an element", pos)
                name, pos = self.read_name(pos + 1)
                attribute = Attribute(name)
                stack[-1].attributes.append(attribute)
            elif kind == TOKEN_CLOSE_START:
                if not stack:
                    raise BinXmlError("close-start token outside an element", pos)
                attribute = None
                pos += 1
            elif kind == TOKEN_CLOSE_EMPTY:
                if not stack:
                    raise BinXmlError("close-empty token outside an element", pos)
                stack.pop().empty = True
                attribute = None
                pos += 1
            elif kind == TOKEN_END_ELEMENT:
                if not stack:
                    raise BinXmlError("end-element token outside an element", pos)
                stack.pop()
                attribute = None
                pos += 1
            elif kind in (TOKEN_VALUE, TOKEN_NORMAL_SUBSTITUTION, TOKEN_OPTIONAL_SUBSTITUTION, TOKEN_CHAR_REF, TOKEN_ENTITY_REF):
                part: Part
                if kind == TOKEN_VALUE:
                    if pos + 2 > end:
                        raise BinXmlError("value runs past its data", pos)
                    value_type = data[pos + 1]
                    if value_type != V.STRING:
                        raise BinXmlError(f"value token of type {V.type_name(value_type)} (only strings are defined)", pos)
                    part, pos = self._utf16_run(pos + 2)
                elif kind == TOKEN_CHAR_REF:
                    if pos + 3 > end:
                        raise BinXmlError("character reference runs past its data", pos)
                    part = CharRef(_u16(data, pos + 1)[0])
                    pos += 3
                elif kind == TOKEN_ENTITY_REF:
                    name, pos = self.read_name(pos + 1)
                    part = EntityRef(name)
                else:
                    if not in_template:
                        raise BinXmlError("substitution outside a template", pos)
                    if pos + 4 > end:
                        raise BinXmlError("substitution runs past its data", pos)
                    index, value_type = _SUBSTITUTION.unpack_from(data, pos + 1)
                    part = Substitution(index, kind == TOKEN_OPTIONAL_SUBSTITUTION, value_type)
                    pos += 4
                if attribute is not None:
                    attribute.parts.append(part)
                else:
                    (stack[-1].children if stack else out).append(part)
            elif kind == TOKEN_CDATA:
                text, pos = self._utf16_run(pos + 1)
                (stack[-1].children if stack else out).append(CData(text))
            elif kind == TOKEN_PI_TARGET:
                target, pos = self.read_name(pos + 1)
                text = ""
                if pos < end and data[pos] == TOKEN_PI_DATA:
                    text, pos = self._utf16_run(pos + 1)
                (stack[-1].children if stack else out).append(ProcessingInstruction(target, text))
            elif kind == TOKEN_TEMPLATE_INSTANCE:
                instance, pos = self._instance(pos, end, depth)
                (stack[-1].children if stack else out).append(instance)
            elif kind == TOKEN_FRAGMENT_HEADER:
                pos += 4
            else:
                raise BinXmlError(f"unknown BinXml token 0x{token:02x}", pos)
        if stack:
            raise BinXmlError(f"data ends inside <{stack[-1].name}>", pos)
        return out, pos

    def fragment(self, pos: int, end: int, depth: int = 0) -> list[Any]:
        """The nodes of a record's BinXml (or of a BinXml substitution value)."""
        nodes, _ = self.parse(pos, end, depth)
        return nodes
