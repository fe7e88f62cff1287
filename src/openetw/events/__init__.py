"""The read model: what every application needs from a trace, between the engine and them.

One schema-registry builder (``registry``), the decoded event and its text (``decoded``,
``text``), one way to open any source as records under one damage policy (``sources``) and one
Event Log XPath with back ends for SQL, columns and records (``xpath``). It imports the engine
(``etl``, ``tdh``, ``evtx``, ``consumer``, ``store``, ``manifest``), never an application or
``cli``. Each name loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openetw.events.decoded import DecodedRecord, decode_record, decode_records, provider_key
    from openetw.events.registry import LazyManifestRegistry, build_registry
    from openetw.events.text import UNIX_EPOCH_FILETIME, filetime_text, json_properties, json_value, level_name

__all__ = [
    "DecodedRecord",
    "LazyManifestRegistry",
    "UNIX_EPOCH_FILETIME",
    "build_registry",
    "decode_record",
    "decode_records",
    "filetime_text",
    "json_properties",
    "json_value",
    "level_name",
    "provider_key",
]

_LAZY: dict[str, str] = {
    "LazyManifestRegistry": "openetw.events.registry",
    "build_registry": "openetw.events.registry",
    "DecodedRecord": "openetw.events.decoded",
    "decode_record": "openetw.events.decoded",
    "decode_records": "openetw.events.decoded",
    "provider_key": "openetw.events.decoded",
    "filetime_text": "openetw.events.text",
    "level_name": "openetw.events.text",
    "UNIX_EPOCH_FILETIME": "openetw.events.text",
    "json_value": "openetw.events.text",
    "json_properties": "openetw.events.text",
}


def __getattr__(name: str) -> object:
    from openetw._lazy import load  # on first use of a lazy name only

    return load(__name__, _LAZY, globals(), name)
