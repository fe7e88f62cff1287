"""A small, hostile-input-safe XML reader that remembers where each element starts.

Manifests come from anywhere, so the reader refuses anything with a document type declaration
before expat expands a single entity (billion laughs, external entities), caps the input size
and the element nesting, and turns every expat failure into a ``ManifestError`` with the line.
Elements are reduced to what the manifest parser needs: local name, namespace, attributes, the
prefixes in scope (to read QName values such as ``win:UInt32``), children and line number.
Character data is not kept; no manifest element that openetw reads carries meaning in it.
"""

from __future__ import annotations

from xml.parsers import expat

from openetw.errors import ManifestError

MAX_INPUT_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 128

_SEPARATOR = "\x1f"  # expat joins namespace URI and local name with this


class Element:
    """One element: ``tag`` is the local name, ``namespace`` its URI ("" when none)."""

    __slots__ = ("tag", "namespace", "attrs", "children", "line", "prefixes")

    def __init__(self, tag: str, namespace: str, attrs: dict[str, str], line: int, prefixes: dict[str, str]):
        self.tag = tag
        self.namespace = namespace
        self.attrs = attrs
        self.children: list[Element] = []
        self.line = line
        self.prefixes = prefixes

    def get(self, name: str) -> str | None:
        return self.attrs.get(name)

    def children_named(self, tag: str) -> list[Element]:
        """Direct children with this local name."""
        return [child for child in self.children if child.tag == tag]

    def __repr__(self) -> str:
        return f"<{self.tag} line {self.line}>"


class _Refused(Exception):
    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class _TreeBuilder:
    def __init__(self, parser: expat.XMLParserType) -> None:
        self._parser = parser
        self.root: Element | None = None
        self.stack: list[Element] = []
        self._prefixes: dict[str, str] = {}
        self._pending: dict[str, str] | None = None

    def namespace_start(self, prefix: str | None, uri: str | None) -> None:
        if self._pending is None:
            self._pending = {}
        self._pending[prefix or ""] = uri or ""

    def start(self, name: str, raw_attrs: dict[str, str]) -> None:
        if len(self.stack) >= MAX_DEPTH:
            raise _Refused(f"elements nest deeper than {MAX_DEPTH} levels", self._parser.CurrentLineNumber)
        prefixes = self.stack[-1].prefixes if self.stack else self._prefixes
        if self._pending:
            prefixes = {**prefixes, **self._pending}
        self._pending = None
        namespace, _, tag = name.rpartition(_SEPARATOR)
        # Prefixed attributes (xsi:schemaLocation) arrive as "URI<separator>local"; no manifest
        # attribute openetw reads is prefixed, so keys are kept as expat gives them.
        element = Element(tag, namespace, raw_attrs, self._parser.CurrentLineNumber, prefixes)
        if self.stack:
            self.stack[-1].children.append(element)
        else:
            self.root = element
        self.stack.append(element)

    def end(self, name: str) -> None:
        self.stack.pop()

    def refuse_doctype(self, *args: object) -> None:
        raise _Refused(
            "document type declarations are not allowed in manifests (entity expansion refused)",
            self._parser.CurrentLineNumber,
        )

    def refuse_entity(self, *args: object) -> None:
        raise _Refused("entity declarations are not allowed in manifests", self._parser.CurrentLineNumber)

    def refuse_external(self, *args: object) -> int:
        raise _Refused("external entities are not allowed in manifests", self._parser.CurrentLineNumber)


def read_xml(source: bytes | str, path: str | None = None) -> Element:
    """Parse ``source`` into an ``Element`` tree; raise ``ManifestError`` for anything unsafe or malformed.

    Bytes may be UTF-8 (with or without BOM) or UTF-16 with a BOM: expat detects the encoding.
    Text is parsed as given, whatever its XML declaration claims.
    """
    if isinstance(source, str):
        if len(source) > MAX_INPUT_BYTES:
            raise ManifestError(f"input larger than {MAX_INPUT_BYTES} bytes refused", path=path)
        data = source.encode("utf-8", errors="surrogatepass")
        encoding: str | None = "UTF-8"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        encoding = None
    else:
        raise TypeError(f"manifest source must be bytes or str, not {type(source).__name__}")
    if len(data) > MAX_INPUT_BYTES:
        raise ManifestError(f"input larger than {MAX_INPUT_BYTES} bytes refused", path=path)

    parser = expat.ParserCreate(encoding, namespace_separator=_SEPARATOR)
    builder = _TreeBuilder(parser)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = builder.refuse_doctype
    parser.EntityDeclHandler = builder.refuse_entity
    parser.UnparsedEntityDeclHandler = builder.refuse_entity
    parser.ExternalEntityRefHandler = builder.refuse_external
    parser.StartNamespaceDeclHandler = builder.namespace_start
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    try:
        parser.Parse(data, True)
    except _Refused as refused:
        raise ManifestError(refused.message, path=path, line=refused.line, element=_open_tag(builder)) from None
    except expat.ExpatError as error:
        reason = expat.errors.messages.get(error.code, str(error)) if error.code else str(error)
        raise ManifestError(
            f"malformed XML: {reason} (column {error.offset + 1})",
            path=path,
            line=error.lineno,
            element=_open_tag(builder),
        ) from None
    except (UnicodeError, ValueError, LookupError) as error:
        raise ManifestError(f"cannot decode input: {error}", path=path) from None
    if builder.root is None:
        raise ManifestError("no root element", path=path)
    return builder.root


def _open_tag(builder: _TreeBuilder) -> str | None:
    return builder.stack[-1].tag if builder.stack else None
