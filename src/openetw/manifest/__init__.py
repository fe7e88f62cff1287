"""The EventManifest model: parse instrumentation manifests, validate them as mc.exe would.

``parse_manifest`` (bytes or text in, ``ParseResult`` out) and ``validate`` are pure;
``load_manifest`` / ``load_manifests`` read files. winmeta's items and the TDH type numbers
(``InType``, ``OutType``) live in ``openetw.manifest.winmeta``. The installed manifests (the
user's and the system's stores, files on disk) are ``openetw.manifest.store``, the package's
I/O half, which nothing here imports.
"""

from __future__ import annotations

from openetw.manifest.diagnostics import Diagnostic, Severity
from openetw.manifest.loader import load_manifests
from openetw.manifest.messages import format_message, inserts_used
from openetw.manifest.model import (
    Channel,
    ChannelType,
    Event,
    Field,
    Keyword,
    Level,
    Manifest,
    Map,
    MapEntry,
    MapKind,
    Opcode,
    Provider,
    StringTable,
    Task,
    Template,
)
from openetw.manifest.parser import ParseResult, load_manifest, parse_manifest
from openetw.manifest.validate import validate
from openetw.manifest.winmeta import InType, OutType

__all__ = [
    "Channel",
    "ChannelType",
    "Diagnostic",
    "Event",
    "Field",
    "InType",
    "Keyword",
    "Level",
    "Manifest",
    "Map",
    "MapEntry",
    "MapKind",
    "Opcode",
    "OutType",
    "ParseResult",
    "Provider",
    "Severity",
    "StringTable",
    "Task",
    "Template",
    "format_message",
    "inserts_used",
    "load_manifest",
    "load_manifests",
    "parse_manifest",
    "validate",
]
