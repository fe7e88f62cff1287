"""What a generated module embeds of its manifest: its own provider, not every provider's.

A module reads its schemas from the manifest it embeds (``MANIFEST_XML``). A manifest of many
providers embedded whole in each of its modules grows as providers x size, so each module gets
the manifest with the other ``<provider>`` elements cut out (the byte ranges expat reports: the
rest of the file, localization included, stays as written). The cut manifest is parsed again and
used only when it holds just that provider, as the whole one described it; otherwise the module
embeds the whole manifest, as before.
"""

from __future__ import annotations

import re
from xml.parsers import expat

from openetw.errors import ManifestError
from openetw.manifest.model import Manifest
from openetw.manifest.parser import parse_manifest

__all__ = ["provider_ranges", "single_provider_manifests"]

_PROVIDER = "provider"
_QNAME = re.compile(rb"[^\s/>]+")


def provider_ranges(data: bytes) -> list[tuple[int, int]] | None:
    """(start, end) byte offsets of each ``<provider>`` element of ``data``, in order; ``None``
    when they cannot be told (the caller then embeds the whole manifest)."""
    starts: list[int] = []
    ranges: list[tuple[int, int]] = []
    depth = 0
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)

    def start(name: str, _attrs: object) -> None:
        nonlocal depth
        if name.rsplit(" ", 1)[-1] == _PROVIDER:
            if depth == 0:
                starts.append(parser.CurrentByteIndex)
            depth += 1

    def end(name: str) -> None:
        nonlocal depth
        if name.rsplit(" ", 1)[-1] != _PROVIDER:
            return
        depth -= 1
        if depth:
            return
        at = parser.CurrentByteIndex
        begin = starts[-1]
        # expat reports an end tag where it starts, and an empty element (<provider .../>)
        # where it ends: the element's own end tag tells them apart.
        qname = _QNAME.match(data, begin + 1)
        tag = b"</" + (qname.group(0) if qname else b"")
        if qname and data.startswith(tag, at) and data[at + len(tag) : at + len(tag) + 1] in (b">", b" ", b"\t", b"\r", b"\n"):
            close = data.find(b">", at)
            end_at = close + 1 if close >= 0 else -1
        else:
            end_at = at
        ranges.append((begin, end_at))

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except (expat.ExpatError, ValueError, UnicodeError, LookupError):
        return None
    if any(begin < 0 or end_at <= begin for begin, end_at in ranges):
        return None
    return ranges


def single_provider_manifests(manifest: Manifest, data: bytes, path: str) -> list[bytes]:
    """For each provider of ``manifest`` (parsed from ``data``), the bytes its module embeds:
    the manifest cut to that provider when that checks out, else the whole ``data``."""
    count = len(manifest.providers)
    if count <= 1:
        return [data] * count
    ranges = provider_ranges(data)
    if ranges is None or len(ranges) != count:
        return [data] * count
    out = []
    for index, provider in enumerate(manifest.providers):
        others = [r for i, r in enumerate(ranges) if i != index]
        pieces, position = [], 0
        for begin, end_at in others:
            pieces.append(data[position:begin])
            position = end_at
        pieces.append(data[position:])
        cut = b"".join(pieces)
        out.append(cut if _holds_just(cut, provider.name, provider.guid, path) else data)
    return out


def _holds_just(cut: bytes, name: str, guid: object, path: str) -> bool:
    try:
        providers = parse_manifest(cut, path).manifest.providers
    except ManifestError:
        return False
    return len(providers) == 1 and providers[0].name == name and providers[0].guid == guid
