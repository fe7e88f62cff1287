"""Small manifests written on the fly: one provider, events given as (id, version, field names)."""

from __future__ import annotations

import re
from pathlib import Path

EVENTS_NS = "http://schemas.microsoft.com/win/2004/08/events"
WIN_NS = "http://manifests.microsoft.com/win/2004/08/windows/events"
XS_NS = "http://www.w3.org/2001/XMLSchema"

GUID_A = "11111111-2222-3333-4444-555555555555"
GUID_B = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

Events = list[tuple[int, int, list[str]]]


def provider_xml(name: str, guid: str | None, events: Events, *, keywords: dict[str, int] | None = None) -> str:
    """One ``<provider>``: each event gets its own template of win:UInt32 fields."""
    templates = []
    items = []
    for event_id, version, fields in events:
        tid = f"t{event_id}v{version}"
        attrs = f'value="{event_id}" version="{version}" level="win:Informational" symbol="E{event_id}v{version}"'
        if fields:
            data = "".join(f'<data name="{field}" inType="win:UInt32"/>' for field in fields)
            templates.append(f'<template tid="{tid}">{data}</template>')
            attrs += f' template="{tid}"'
        items.append(f"<event {attrs}/>")
    keyword_items = "".join(f'<keyword name="{kw}" mask="0x{mask:x}"/>' for kw, mask in (keywords or {}).items())
    guid_attr = f' guid="{{{guid}}}"' if guid else ""
    symbol = "P_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"""      <provider name="{name}"{guid_attr} symbol="{symbol}" resourceFileName="x.dll" messageFileName="x.dll">
        {"<keywords>" + keyword_items + "</keywords>" if keyword_items else ""}
        {"<templates>" + "".join(templates) + "</templates>" if templates else ""}
        <events>{"".join(items)}</events>
      </provider>
"""


def manifest_xml(*providers: str) -> str:
    return f"""<?xml version="1.0" encoding="utf-8"?>
<instrumentationManifest xmlns="{EVENTS_NS}" xmlns:win="{WIN_NS}" xmlns:xs="{XS_NS}">
  <instrumentation>
    <events>
{"".join(providers)}
    </events>
  </instrumentation>
</instrumentationManifest>
"""


def write_manifest(path: Path, name: str, guid: str | None, events: Events, **kwargs: object) -> Path:
    path.write_text(manifest_xml(provider_xml(name, guid, events, **kwargs)), encoding="utf-8")  # type: ignore[arg-type]
    return path


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
  <instrumentation><events><provider name="&lol4;" guid="{11111111-2222-3333-4444-555555555555}"/></events></instrumentation>
</instrumentationManifest>
"""

# mc rejects an event whose template is not defined: a validation error, not a parse error.
UNDEFINED_TEMPLATE = manifest_xml(
    f"""      <provider name="Broken" guid="{{{GUID_B}}}" symbol="BROKEN">
        <events><event value="1" template="missing"/></events>
      </provider>
"""
)
