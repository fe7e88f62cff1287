"""Finding the schema of a record: TraceLogging metadata, manifests, classic MOF layouts, WPP TMFs.

The order is TDH's: a self-describing event decodes by the metadata it carries; a manifest-based
event by the manifest of its provider (exact version first, then the nearest lower one); a
kernel or classic event by its MOF class layout. Lookups are cached per record identity. The
manifests openetw ships (``openetw.manifest.builtin``: the .NET runtime's providers) come last:
they fill in only what no manifest given to the registry says.

``decode`` decodes a whole payload through the schema's compiled form (``compile_schema``),
made once per schema and pointer size and kept by the registry, so every user of a registry
(reports, dump, consumers) gets the fast path without holding compiled schemas itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from openetw.tdh.compiled import CompiledSchema, compile_schema
from openetw.tdh.decode import DecodedEvent
from openetw.tdh.schema import Schema

_MISSING: Any = object()
_CACHE_LIMIT = 1 << 16
_COMPILED_LIMIT = 8192


class SchemaRegistry:
    """Knows every schema source a decoder can use and finds the one for a record."""

    def __init__(self, manifests: Iterable[Any] = (), *, kernel: bool = True, builtin: bool = True) -> None:
        self._events: dict[tuple[uuid.UUID, int], dict[int, Schema]] = {}
        self._sources: dict[tuple[uuid.UUID, int, int], str] = {}
        self._provider_names: dict[uuid.UUID, str] = {}
        self._cache: dict[tuple[Any, ...], Schema | None] = {}
        self._kernel = kernel
        self._mof_classic: list[Any] = []
        # WPP: (message GUID as stored in records, message number) -> schema.
        self._wpp: dict[tuple[bytes, int], Schema] = {}
        # (id(schema), pointer size) -> its compiled form, which holds the schema (so the id stays its own).
        self._compiled: dict[tuple[int, int], CompiledSchema] = {}
        # Shipped providers not consulted yet (None: not scanned yet; empty: none left or none wanted).
        self._builtin_pending: set[uuid.UUID] | None = None if builtin else set()
        for manifest in manifests:
            self.add_manifest(manifest)

    # -- sources -----------------------------------------------------------------------------
    def add_manifest(self, manifest: Any, source: str | None = None) -> int:
        """Adds every event of ``manifest``; a later manifest wins for the same (provider, id, version)."""
        from openetw.tdh.from_manifest import schemas_from_manifest

        added = 0
        origin = source or getattr(manifest, "path", None) or "<manifest>"
        for provider_id, event_id, version, schema in schemas_from_manifest(manifest):
            self._events.setdefault((provider_id, event_id), {})[version] = schema
            self._sources[(provider_id, event_id, version)] = origin
            if schema.provider_name:
                self._provider_names[provider_id] = schema.provider_name
            added += 1
        for provider in getattr(manifest, "providers", ()):
            name, guid = getattr(provider, "name", None), getattr(provider, "guid", None)
            if name and guid is not None:
                self._provider_names[guid] = name
        self._cache.clear()
        return added

    def known_provider_names(self) -> dict[uuid.UUID, str]:
        """Provider GUID -> name, for every provider the added sources name (the shipped layouts
        only once a record of theirs was looked up)."""
        return dict(self._provider_names)

    def schemas(self) -> Iterator[Schema]:
        """Every schema the registry holds by provider and id (manifest events and classic
        classes, not WPP messages): for each (provider, id), its versions in order."""
        for versions in self._events.values():
            for version in sorted(versions):
                yield versions[version]

    def add_schema(self, schema: Schema, source: str = "<added>") -> None:
        """Adds one schema (a MOF class from a file, a WPP message, an embedded module's schema...)."""
        if schema.source == "wpp":
            self._wpp[(schema.provider_id.bytes_le, schema.event_id)] = schema
        else:
            self._events.setdefault((schema.provider_id, schema.event_id), {})[schema.version] = schema
        self._sources[(schema.provider_id, schema.event_id, schema.version)] = source
        if schema.provider_name:
            self._provider_names.setdefault(schema.provider_id, schema.provider_name)
        self._cache.clear()

    def add_tmf(self, messages: Iterable[Any], source: str | None = None) -> int:
        """Adds a schema per WPP message (``openetw.tdh.wpp.TmfMessage``, as ``parse_tmf`` gives
        them); a later message wins for the same (message GUID, message number)."""
        from openetw.tdh.wpp import schema_from_tmf

        added = 0
        for message in messages:
            self.add_schema(schema_from_tmf(message), source or message.path or "<tmf>")
            added += 1
        return added

    def source_of(self, schema: Schema) -> str | None:
        """The file a manifest schema came from."""
        return self._sources.get((schema.provider_id, schema.event_id, schema.version))

    @property
    def provider_count(self) -> int:
        return len({key[0] for key in self._events})

    # -- lookup ------------------------------------------------------------------------------
    def schema_for(self, record: Any) -> Schema | None:
        kind = record.kind
        if kind == "event":
            if record.flags & 1:
                from openetw.tdh.tracelogging import schema_from_record

                schema = schema_from_record(record)
                if schema is not None:
                    return schema
            key: tuple[Any, ...] = ("e", record.provider_guid_bytes, record.id, record.version)
            found: Schema | None = self._cache.get(key, _MISSING)  # (or _MISSING)
            if found is _MISSING:
                found = self._manifest_schema(record.provider_id, record.id, record.version)
                self._remember(key, found)
            return found
        if kind in ("system", "compact", "perfinfo"):
            key = ("k", record.hook_id, record.version)
            found = self._cache.get(key, _MISSING)
            if found is _MISSING:
                found = self._mof_schema(record.hook_id >> 8, record.opcode, record.version) if self._kernel else None
                self._remember(key, found)
            return found
        if kind in ("classic", "instance"):
            key = ("c", record.provider_guid_bytes, record.opcode, record.version)
            found = self._cache.get(key, _MISSING)
            if found is _MISSING:
                found = self._manifest_schema(record.provider_id, record.opcode, record.version, classic=True)
                if found is None and self._kernel:
                    found = self._mof_schema(record.provider_id, record.opcode, record.version)
                self._remember(key, found)
            return found
        if kind == "wpp":
            guid = record.provider_guid_bytes  # the message GUID, when the record carries one
            return None if guid is None else self._wpp.get((guid, record.id))
        return None

    def _remember(self, key: tuple[Any, ...], value: Schema | None) -> None:
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = value

    def _add_builtin(self, provider_id: uuid.UUID) -> None:
        """The shipped layouts of ``provider_id``, under everything the registry was given."""
        from openetw.manifest.builtin import builtin_manifest, builtin_providers
        from openetw.tdh.from_manifest import schemas_from_manifest

        if self._builtin_pending is None:
            self._builtin_pending = set(builtin_providers())
        if provider_id not in self._builtin_pending:
            return
        self._builtin_pending.discard(provider_id)
        name, path = builtin_providers()[provider_id]
        manifest = builtin_manifest(path)
        for guid, event_id, version, schema in schemas_from_manifest(manifest):
            if guid != provider_id:
                continue
            versions = self._events.setdefault((guid, event_id), {})
            if version not in versions:
                versions[version] = schema
                self._sources[(guid, event_id, version)] = f"{path.name} (built in)"
        self._provider_names.setdefault(provider_id, name)
        self._cache.clear()

    def _manifest_schema(self, provider_id: uuid.UUID, event_id: int, version: int, *, classic: bool = False) -> Schema | None:
        if self._builtin_pending is None or provider_id in self._builtin_pending:
            self._add_builtin(provider_id)
        versions = self._events.get((provider_id, event_id))
        if not versions:
            return None
        exact = versions.get(version)
        if exact is not None:
            return exact
        lower = [v for v in versions if v < version]
        return versions[max(lower)] if lower else None

    def _mof_schema(self, key: Any, opcode: int, version: int) -> Schema | None:
        from openetw.tdh.mof import schema_from_mof
        from openetw.tdh.mof_kernel import find_layout

        match = find_layout(key, opcode, version)
        if match is None:
            return None
        return schema_from_mof(match.mof_class, match.event, key if isinstance(key, uuid.UUID) else None)

    # -- decoding ----------------------------------------------------------------------------
    def compiled(self, schema: Schema, pointer_size: int) -> CompiledSchema:
        """``compile_schema(schema, pointer_size)``, made once per schema (by identity) and pointer size."""
        key = (id(schema), pointer_size)
        found = self._compiled.get(key)
        if found is None or found.schema is not schema:
            if len(self._compiled) >= _COMPILED_LIMIT:
                self._compiled.clear()
            found = self._compiled[key] = compile_schema(schema, pointer_size)
        return found

    def decode(self, schema: Schema, user_data: bytes, pointer_size: int) -> DecodedEvent:
        """Every property of ``user_data`` decoded now with ``schema`` (as ``decode_all`` does)."""
        return self.compiled(schema, pointer_size).decode(user_data)

    # -- names -------------------------------------------------------------------------------
    def provider_name(self, record: Any) -> str | None:
        schema = self.schema_for(record)
        if schema is not None and schema.provider_name:
            return schema.provider_name
        if record.provider_guid_bytes is not None:
            self._add_builtin(record.provider_id)
            return self._provider_names.get(record.provider_id)
        return None

    def event_name(self, record: Any) -> str | None:
        schema = self.schema_for(record)
        return None if schema is None else schema.event_name
