"""Turning parsed BinXml into XML text and into a tree of typed values.

Rendering follows ``wevtutil qe /f:xml``: one line, single-quoted attributes, an element with
no content closed as ``<Name/>``, an optional substitution whose value is null leaves its
attribute out, a BinXml value is rendered in place. ``resolve`` gives the same content as a tree
(``XmlNode``) whose leaves keep each value's type and bytes, for header fields, decoded
properties and the writer.
"""

from __future__ import annotations

from typing import Any

from openetw.evtx import values as V
from openetw.evtx.binxml import (
    MAX_DEPTH,
    Attribute,
    BinXmlError,
    CData,
    CharRef,
    ChunkParser,
    Element,
    EntityRef,
    ProcessingInstruction,
    Substitution,
    TemplateInstance,
)

# Control characters XML 1.0 cannot hold are written as character references (as XML 1.1 would).
_CONTROLS: dict[str, str] = {chr(c): f"&#x{c:x};" for c in range(0x20) if c not in (0x09, 0x0A, 0x0D)}
_TEXT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", **_CONTROLS})
_ATTR_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "'": "&apos;", '"': "&quot;", **_CONTROLS})


def escape_text(text: str) -> str:
    return text.translate(_TEXT_ESCAPES)


def escape_attribute(text: str) -> str:
    return text.translate(_ATTR_ESCAPES)


_ENTITIES = {"quot": '"', "amp": "&", "lt": "<", "gt": ">", "apos": "'"}


class Value:
    """A substitution value: its type and bytes, decoded on demand."""

    __slots__ = ("value_type", "raw")

    def __init__(self, value_type: int, raw: bytes) -> None:
        self.value_type = value_type
        self.raw = raw

    @property
    def text(self) -> str:
        """The value as the XML shows it (a value whose bytes do not fit its type: its bytes in hex)."""
        return value_text_lenient(self.value_type, self.raw)

    @property
    def value(self) -> Any:
        """The value as Python (a value whose bytes do not fit its type: those bytes)."""
        try:
            return V.python_value(self.value_type, self.raw)
        except V.ValueError_:
            return bytes(self.raw)

    def __repr__(self) -> str:
        return f"<Value {V.type_name(self.value_type)} {self.raw.hex()}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and other.value_type == self.value_type and other.raw == self.raw

    def __hash__(self) -> int:
        return hash((self.value_type, self.raw))


Leaf = str | Value


class XmlNode:
    """An element with its content resolved: attributes and children hold text or ``Value``s."""

    __slots__ = ("name", "attributes", "children")

    def __init__(self, name: str, attributes: dict[str, list[Leaf]] | None = None, children: list[Any] | None = None) -> None:
        self.name = name
        self.attributes: dict[str, list[Leaf]] = attributes if attributes is not None else {}
        self.children: list[XmlNode | Leaf] = children if children is not None else []

    def find(self, name: str) -> XmlNode | None:
        for child in self.children:
            if isinstance(child, XmlNode) and child.name == name:
                return child
        return None

    def elements(self) -> list[XmlNode]:
        return [c for c in self.children if isinstance(c, XmlNode)]

    def attribute_value(self, name: str) -> Any:
        """The attribute as a Python value (one typed value) or text; ``None`` when absent."""
        parts = self.attributes.get(name)
        return None if parts is None else leaves_value(parts)

    def value(self) -> Any:
        """The element's content as a Python value (one typed value), text, or ``None`` when empty."""
        leaves = [c for c in self.children if not isinstance(c, XmlNode)]
        return leaves_value(leaves) if leaves else None

    def text(self) -> str:
        return "".join(leaf_text(c) for c in self.children if not isinstance(c, XmlNode))

    def __repr__(self) -> str:
        return f"<XmlNode {self.name} {list(self.attributes)} {len(self.children)} children>"


def leaf_text(leaf: Leaf) -> str:
    return leaf if isinstance(leaf, str) else leaf.text


def leaves_value(leaves: list[Leaf]) -> Any:
    if len(leaves) == 1 and isinstance(leaves[0], Value):
        return leaves[0].value
    return "".join(leaf_text(leaf) for leaf in leaves)


def _unsigned(data: bytes) -> str:
    return str(int.from_bytes(data, "little"))


def _signed(data: bytes) -> str:
    return str(int.from_bytes(data, "little", signed=True))


def _hex(data: bytes) -> str:
    return f"0x{int.from_bytes(data, 'little'):x}"


# The commonest fixed-size types: (size, text) for a quicker path than ``values.value_text``.
_FAST_TEXT = {
    V.UINT8: (1, _unsigned), V.UINT16: (2, _unsigned), V.UINT32: (4, _unsigned), V.UINT64: (8, _unsigned),
    V.INT8: (1, _signed), V.INT16: (2, _signed), V.INT32: (4, _signed), V.INT64: (8, _signed),
    V.HEX_INT32: (4, _hex), V.HEX_INT64: (8, _hex),
}  # fmt: skip


def value_text_lenient(value_type: int, data: bytes) -> str:
    """The value's text; a value whose bytes do not fit its type shows as its bytes in hex."""
    fast = _FAST_TEXT.get(value_type)
    if fast is not None and len(data) == fast[0]:
        return fast[1](data)
    try:
        return V.value_text(value_type, data)
    except V.ValueError_:
        return bytes(data).hex().upper()


def _is_null(value: tuple[int, int, int]) -> bool:
    return value[0] == V.NULL or value[2] == 0


class Renderer:
    """Renders or resolves the nodes of one chunk's records (values are read from its bytes)."""

    __slots__ = ("parser", "data")

    def __init__(self, parser: ChunkParser) -> None:
        self.parser = parser
        self.data = parser.data

    # -- XML text --------------------------------------------------------------------------------
    def xml(self, nodes: list[Any]) -> str:
        out: list[str] = []
        self._nodes(nodes, None, out, 0)
        return "".join(out)

    def _value_xml(self, part: Substitution, value: tuple[int, int, int], nested: Any, out: list[str], depth: int, attribute: bool) -> None:
        value_type, offset, size = value
        if value_type == V.BINXML:
            nodes = nested.get(part.index) if nested else None
            if nodes is None:
                nodes = self.parser.fragment(offset, offset + size, depth + 1)
            if attribute:
                inner: list[str] = []
                self._nodes(nodes, None, inner, depth + 1)
                out.append(escape_attribute("".join(inner)))
            else:
                self._nodes(nodes, None, out, depth + 1)
            return
        text = value_text_lenient(value_type, self.data[offset : offset + size])
        out.append(escape_attribute(text) if attribute else escape_text(text))

    def _parts_xml(self, parts: list[Any], values: Any, out: list[str], depth: int, attribute: bool) -> None:
        for part in parts:
            if part.__class__ is str:
                out.append(escape_attribute(part) if attribute else escape_text(part))
            elif part.__class__ is Substitution:
                value = self._lookup(part, values)
                if value is not None:
                    self._value_xml(part, value, values.nested, out, depth, attribute)
            elif part.__class__ is CharRef:
                out.append(f"&#{part.code};")
            elif part.__class__ is EntityRef:
                out.append(f"&{part.name};")

    def _lookup(self, part: Substitution, instance: Any) -> tuple[int, int, int] | None:
        if instance is None:
            return None
        values = instance.values
        if part.index >= len(values):
            return None
        value = values[part.index]
        return None if _is_null(value) else value

    def _attribute_present(self, attribute: Attribute, values: Any) -> bool:
        return any(part.__class__ is not Substitution or self._lookup(part, values) is not None for part in attribute.parts)

    def _array_items(self, node: Element, values: Any) -> list[bytes] | None:
        """An element whose whole content is one array value repeats once per item (as wevtutil shows)."""
        children = node.children
        if len(children) != 1 or children[0].__class__ is not Substitution:
            return None
        value = self._lookup(children[0], values)
        if value is None or not value[0] & V.ARRAY:
            return None
        value_type, offset, size = value
        try:
            items = V.split_array(value_type, self.data[offset : offset + size])
        except V.ValueError_:
            return None
        return items or None

    def _text(self, value: tuple[int, int, int]) -> str:
        value_type, offset, size = value
        if value_type == V.STRING:
            return self.data[offset : offset + size].decode("utf-16-le", "replace").rstrip("\x00")
        return value_text_lenient(value_type, self.data[offset : offset + size])

    def _open_tag(self, node: Element, values: Any, depth: int) -> str:
        """``<Name a='v' ...`` with the attributes whose values are present."""
        tag = ["<", node.name]
        for attribute in node.attributes:
            parts = attribute.parts
            if len(parts) == 1 and parts[0].__class__ is Substitution:
                value = self._lookup(parts[0], values)
                if value is None:
                    continue  # an absent optional value leaves its attribute out
                if value[0] != V.BINXML:
                    tag.append(f" {attribute.name}='{escape_attribute(self._text(value))}'")
                    continue
            if self._attribute_present(attribute, values):
                tag.append(f" {attribute.name}='")
                self._parts_xml(parts, values, tag, depth, True)
                tag.append("'")
        return "".join(tag)

    def _nodes(self, nodes: list[Any], values: Any, out: list[str], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise BinXmlError("BinXml values nest too deeply", 0)
        for node in nodes:
            cls = node.__class__
            if cls is Element:
                tag = self._open_tag(node, values, depth)
                children = node.children
                if len(children) == 1 and children[0].__class__ is Substitution:
                    value = self._lookup(children[0], values)
                    if value is None:
                        out.append(tag + "/>")
                        continue
                    value_type = value[0]
                    if value_type == V.BINXML:
                        out.append(tag + ">")
                        self._value_xml(children[0], value, values.nested, out, depth, False)
                        out.append(f"</{node.name}>")
                        continue
                    if value_type & V.ARRAY and (items := self._array_items(node, values)) is not None:
                        # An element whose whole content is one array repeats once per item, as wevtutil shows.
                        closing = f"</{node.name}>"
                        for item in items:
                            text = escape_text(value_text_lenient(value_type & 0x7F, item))
                            out.append(f"{tag}>{text}{closing}" if text else tag + "/>")
                        continue
                    out.append(f"{tag}>{escape_text(self._text(value))}</{node.name}>")
                elif children:
                    mark = len(out)
                    out.append(tag + ">")
                    self._nodes(children, values, out, depth + 1)
                    if len(out) == mark + 1:
                        out[mark] = tag + "/>"
                    else:
                        out.append(f"</{node.name}>")
                else:
                    out.append(tag + "/>")
            elif cls is TemplateInstance:
                ops = node.template.cache.get("xml")
                if ops is None:
                    ops = node.template.cache["xml"] = compile_template(node.template.nodes)
                self._run(ops, node, out, depth + 1)
            elif cls is CData:
                out.append(f"<![CDATA[{node.text}]]>")
            elif cls is ProcessingInstruction:
                out.append(f"<?{node.target} {node.data}?>")
            else:
                self._parts_xml([node], values, out, depth, False)

    def _run(self, ops: list[tuple[Any, ...]], instance: TemplateInstance, out: list[str], depth: int) -> None:
        """Render a template instance from its compiled operations (see ``compile_template``)."""
        if depth > MAX_DEPTH:
            raise BinXmlError("BinXml values nest too deeply", 0)
        values, data = instance.values, self.data
        count = len(values)
        mark = 0
        append = out.append
        for op in ops:
            kind = op[0]
            if kind == _LIT:
                append(op[1])
            elif kind == _ATTR:
                index = op[2].index
                if index < count:
                    value_type, offset, size = values[index]
                    if value_type and size:
                        if value_type == V.STRING:
                            text = data[offset : offset + size].decode("utf-16-le", "replace").rstrip("\x00")
                        elif value_type == V.BINXML:
                            inner: list[str] = []
                            self._value_xml(op[2], values[index], instance.nested, inner, depth, True)
                            append(f" {op[1]}='{''.join(inner)}'")
                            continue
                        else:
                            text = value_text_lenient(value_type, data[offset : offset + size])
                        append(f" {op[1]}='{escape_attribute(text)}'")
            elif kind == _MARK:
                mark = len(out)
            elif kind == _VALUE:
                name, part = op[1], op[2]
                index = part.index
                if index >= count:
                    append("/>")
                    continue
                value = values[index]
                value_type, offset, size = value
                if not value_type or not size:
                    append("/>")
                elif value_type == V.STRING:
                    text = data[offset : offset + size].decode("utf-16-le", "replace").rstrip("\x00")
                    append(f">{escape_text(text)}</{name}>")
                elif value_type == V.BINXML:
                    append(">")
                    self._value_xml(part, value, instance.nested, out, depth, False)
                    append(f"</{name}>")
                elif value_type & V.ARRAY and (items := _split(value_type, data[offset : offset + size])):
                    # An element whose whole content is one array repeats once per item, as wevtutil shows.
                    tag = "".join(out[mark:])
                    del out[mark:]
                    closing = f"</{name}>"
                    for item in items:
                        text = escape_text(value_text_lenient(value_type & 0x7F, item))
                        append(f"{tag}>{text}{closing}" if text else tag + "/>")
                else:
                    append(f">{escape_text(value_text_lenient(value_type, data[offset : offset + size]))}</{name}>")
            elif kind == _ATTR_GENERIC:
                attribute = op[1]
                if self._attribute_present(attribute, instance):
                    append(f" {attribute.name}='")
                    self._parts_xml(attribute.parts, instance, out, depth, True)
                    append("'")
            else:
                self._nodes([op[1]], instance, out, depth + 1)

    # -- typed tree ------------------------------------------------------------------------------
    def resolve(self, nodes: list[Any]) -> list[XmlNode | Leaf]:
        out: list[XmlNode | Leaf] = []
        self._resolve(nodes, None, out, 0)
        return out

    def _leaf(self, part: Substitution, value: tuple[int, int, int], nested: Any, out: list[Any], depth: int) -> None:
        value_type, offset, size = value
        if value_type == V.BINXML:
            nodes = nested.get(part.index) if nested else None
            if nodes is None:
                nodes = self.parser.fragment(offset, offset + size, depth + 1)
            self._resolve(nodes, None, out, depth + 1)
        else:
            out.append(Value(value_type, bytes(self.data[offset : offset + size])))

    def _resolve_parts(self, parts: list[Any], values: Any, out: list[Any], depth: int) -> None:
        for part in parts:
            cls = part.__class__
            if cls is str:
                out.append(part)
            elif cls is Substitution:
                value = self._lookup(part, values)
                if value is not None:
                    self._leaf(part, value, values.nested, out, depth)
            elif cls is CharRef:
                out.append(chr(part.code) if part.code < 0x110000 else "")
            elif cls is EntityRef:
                out.append(_ENTITIES.get(part.name, f"&{part.name};"))

    def _resolve(self, nodes: list[Any], values: Any, out: list[Any], depth: int) -> None:
        if depth > MAX_DEPTH:
            raise BinXmlError("BinXml values nest too deeply", 0)
        for node in nodes:
            cls = node.__class__
            if cls is Element and values is not None and (items := self._array_items(node, values)) is not None:
                actual = values.values[node.children[0].index][0] & 0x7F
                attributes: dict[str, list[Any]] = {}
                for attribute in node.attributes:
                    if self._attribute_present(attribute, values):
                        resolved: list[Any] = []
                        self._resolve_parts(attribute.parts, values, resolved, depth)
                        attributes[attribute.name] = resolved
                for item in items:
                    # An empty item is an empty element (a value of no bytes would read back as null).
                    leaf = [Value(actual, bytes(item))] if item.strip(b"\x00") else []
                    out.append(XmlNode(node.name, dict(attributes), leaf))
            elif cls is Element:
                element = XmlNode(node.name)
                for attribute in node.attributes:
                    if self._attribute_present(attribute, values):
                        parts: list[Any] = []
                        self._resolve_parts(attribute.parts, values, parts, depth)
                        element.attributes[attribute.name] = parts
                self._resolve(node.children, values, element.children, depth + 1)
                out.append(element)
            elif cls is TemplateInstance:
                self._resolve(node.template.nodes, node, out, depth + 1)
            elif cls is CData:
                out.append(node.text)
            elif cls is ProcessingInstruction:
                continue
            else:
                self._resolve_parts([node], values, out, depth)


_LIT, _ATTR, _MARK, _VALUE, _ATTR_GENERIC, _NODE = range(6)


def _split(value_type: int, data: bytes) -> list[bytes] | None:
    try:
        return V.split_array(value_type, data) or None
    except V.ValueError_:
        return None


def compile_template(nodes: list[Any]) -> list[tuple[Any, ...]]:
    """A template's nodes as a flat list of operations for ``Renderer._run``: literal text
    (adjacent pieces merged), an attribute of one value, an element of one value (with the mark
    where its tag starts, for arrays), and the general cases handed to the node renderer."""
    ops: list[tuple[Any, ...]] = []

    def literal(text: str) -> None:
        if ops and ops[-1][0] == _LIT:
            ops[-1] = (_LIT, ops[-1][1] + text)
        else:
            ops.append((_LIT, text))

    def element(node: Element) -> None:
        children = node.children
        single = len(children) == 1 and children[0].__class__ is Substitution
        if single:
            ops.append((_MARK,))
        literal("<" + node.name)
        for attribute in node.attributes:
            parts = attribute.parts
            if len(parts) == 1 and parts[0].__class__ is Substitution:
                ops.append((_ATTR, attribute.name, parts[0]))
            elif all(part.__class__ is str for part in parts):
                literal(f" {attribute.name}='" + "".join(escape_attribute(str(part)) for part in parts) + "'")
            else:
                ops.append((_ATTR_GENERIC, attribute))
        if single:
            ops.append((_VALUE, node.name, children[0]))
        elif children:
            literal(">")
            for child in children:
                emit(child)
            literal(f"</{node.name}>")
        else:
            literal("/>")

    def emit(node: Any) -> None:
        if node.__class__ is Element:
            element(node)
        elif node.__class__ is str:
            literal(escape_text(node))
        else:
            ops.append((_NODE, node))

    for node in nodes:
        emit(node)
    return ops


def tree_xml(nodes: list[XmlNode | Leaf]) -> str:
    """XML text of a resolved tree, as ``Renderer.xml`` renders the BinXml it came from."""
    out: list[str] = []
    _tree_xml(nodes, out)
    return "".join(out)


def _tree_xml(nodes: list[XmlNode | Leaf], out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, XmlNode):
            out.append("<" + node.name)
            for name, parts in node.attributes.items():
                out.append(f" {name}='" + "".join(escape_attribute(leaf_text(p)) for p in parts) + "'")
            if node.children:
                mark = len(out)
                out.append(">")
                _tree_xml(node.children, out)
                if len(out) == mark + 1:
                    out[mark] = "/>"
                else:
                    out.append(f"</{node.name}>")
            else:
                out.append("/>")
        else:
            out.append(escape_text(leaf_text(node)))


# -- the expansion bound -----------------------------------------------------------------------

MAX_EXPANSION = 1 << 22  # characters one record may render to (an upper bound, counted before rendering)

# What a value's bytes may become as text: hex doubles them, escaping makes one UTF-16 unit of
# two bytes into at most six characters (``&quot;``).
_CHARS_PER_BYTE = 3


class _Summary:
    """What rendering a template's nodes costs: constant text, plus what each value adds."""

    __slots__ = ("literal", "slots", "arrays", "instances", "array_slots")

    def __init__(self) -> None:
        self.literal = 0
        self.slots: dict[int, int] = {}  # value index -> how many times it is rendered
        self.arrays: list[tuple[int, _Summary]] = []  # an element repeated once per array item
        self.instances: list[TemplateInstance] = []  # instances written inside the template
        self.array_slots: tuple[int, ...] = ()  # the indexes in ``arrays``


def _summarize(nodes: list[Any], summary: _Summary) -> _Summary:
    for node in nodes:
        cls = node.__class__
        if cls is Element:
            children = node.children
            if len(children) == 1 and children[0].__class__ is Substitution:
                # Rendered once, and its tag once more per item when its value is an array.
                element = _Summary()
                _element_cost(node, element)
                summary.literal += element.literal
                for index, times in element.slots.items():
                    summary.slots[index] = summary.slots.get(index, 0) + times
                summary.instances += element.instances
                index = children[0].index
                summary.slots[index] = summary.slots.get(index, 0) + 1
                summary.arrays.append((index, element))
                summary.array_slots += (index,)
            else:
                _element_cost(node, summary)
                _summarize(children, summary)
        elif cls is Substitution:
            summary.slots[node.index] = summary.slots.get(node.index, 0) + 1
        elif cls is TemplateInstance:
            summary.instances.append(node)
        elif cls is str:
            summary.literal += 6 * len(node)
        elif cls is CData:
            summary.literal += len(node.text) + 12
        elif cls is ProcessingInstruction:
            summary.literal += len(node.target) + len(node.data) + 5
        else:
            summary.literal += 16  # a character or entity reference
    return summary


def _element_cost(node: Element, summary: _Summary) -> None:
    summary.literal += 2 * len(node.name) + 5
    for attribute in node.attributes:
        summary.literal += len(attribute.name) + 4
        _summarize(attribute.parts, summary)


class _Expansion:
    """Counts, without rendering, an upper bound of what a record renders to."""

    __slots__ = ("data", "limit", "fragments")

    def __init__(self, data: Any, limit: int) -> None:
        self.data = data
        self.limit = limit
        self.fragments: dict[int, int] = {}  # id(nodes) -> cost: a value used many times is counted once

    def fragment(self, nodes: list[Any], depth: int) -> int:
        known = self.fragments.get(id(nodes))
        if known is not None:
            return known
        if depth > MAX_DEPTH:
            raise BinXmlError("BinXml values nest too deeply", 0)
        summary = _summarize(nodes, _Summary())
        cost = self.summary(summary, None, depth)
        self.fragments[id(nodes)] = cost
        return cost

    def instance(self, instance: TemplateInstance, depth: int) -> int:
        summary = instance.template.cache.get("expansion")
        if summary is None:
            summary = instance.template.cache["expansion"] = _summarize(instance.template.nodes, _Summary())
        return self.summary(summary, instance, depth + 1)

    def summary(self, summary: _Summary, instance: TemplateInstance | None, depth: int) -> int:
        total = summary.literal
        if instance is not None:
            values = instance.values
            for index, times in summary.slots.items():
                if index < len(values):
                    total += times * self.value(instance, index, depth)
            count = len(values)
            for index, element in summary.arrays:
                if index < count and values[index][0] & V.ARRAY:
                    value_type, _, size = values[index]
                    base = value_type & 0x7F
                    items = size // (2 if base == V.STRING else V.FIXED_SIZES.get(base) or 1)
                    total += items * self.summary(element, instance, depth)
        for inner in summary.instances:
            total += self.instance(inner, depth)
        if total > self.limit:
            raise BinXmlError(f"the record would render to more than {self.limit} characters", 0)
        return total

    def value(self, instance: TemplateInstance, index: int, depth: int) -> int:
        value_type, _, size = instance.values[index]
        if value_type == V.BINXML and size:
            nested = instance.nested.get(index) if instance.nested else None
            return self.fragment(nested, depth + 1) if nested is not None else 0
        return _CHARS_PER_BYTE * size + 2


def check_expansion(data: Any, nodes: list[Any], limit: int = MAX_EXPANSION) -> int:
    """-1 when the record's size bounds its text (the common case), else an upper bound of the characters ``nodes`` render to, counted in time linear in the
    record (each nested value is counted once, however often it is used); ``BinXmlError`` when
    it passes ``limit``: a record whose templates substitute each other into an exponential
    expansion (a template bomb) fails before any of it is rendered."""
    if len(nodes) == 1 and nodes[0].__class__ is TemplateInstance and nodes[0].nested is None:
        # The common record: one instance of plain values. Without array values or instances
        # inside its template, each value renders once: the record's own size bounds its text.
        instance = nodes[0]
        summary = instance.template.cache.get("expansion")
        if summary is None:
            summary = instance.template.cache["expansion"] = _summarize(instance.template.nodes, _Summary())
        if not summary.instances and summary.literal <= limit:
            values = instance.values
            count = len(values)
            if not any(values[index][0] & V.ARRAY for index in summary.array_slots if index < count):
                return -1
    return _Expansion(data, limit).fragment(nodes, 0)
