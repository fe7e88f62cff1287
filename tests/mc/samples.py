"""A hand-written manifest using what the generator must handle, and a fake session pool."""

from __future__ import annotations

import struct
import uuid
from typing import Any

from openetw.manifest import parse_manifest
from openetw.mc import GeneratedModule, generate_module, load_module
from openetw.session import EnableRule, EnableState, EventFilters
from openetw.session.enable import SessionEnable

WIDGET_GUID = uuid.UUID("11111111-2222-3333-4444-555555555555")

WIDGET_MANIFEST = b"""<?xml version="1.0" encoding="utf-8"?>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"
    xmlns:win="http://manifests.microsoft.com/win/2004/08/windows/events" xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <instrumentation>
    <events>
      <provider name="Acme-Widget/Tests" guid="{11111111-2222-3333-4444-555555555555}" symbol="ACME"
          resourceFileName="w.dll" messageFileName="w.dll">
        <channels>
          <channel chid="op" name="Acme-Widget/Operational" type="Operational" enabled="true"/>
          <importChannel chid="sys" name="System"/>
        </channels>
        <levels>
          <level name="Chatty" value="16" symbol="LEVEL_CHATTY"/>
        </levels>
        <tasks>
          <task name="Spin" value="1">
            <opcodes>
              <opcode name="Whirl" value="10"/>
            </opcodes>
          </task>
        </tasks>
        <opcodes>
          <opcode name="Reset" value="11" symbol="OP_RESET"/>
        </opcodes>
        <keywords>
          <keyword name="Motion" mask="0x1"/>
          <keyword name="Power" mask="0x2" symbol="KW_POWER"/>
        </keywords>
        <maps>
          <valueMap name="Color">
            <map value="1" message="$(string.red)"/>
            <map value="2" message="$(string.blue)"/>
          </valueMap>
        </maps>
        <templates>
          <template tid="T_Items">
            <data name="Count" inType="win:UInt16"/>
            <data name="Items" inType="win:UInt32" count="Count"/>
            <data name="Label" inType="win:CountedUnicodeString"/>
            <data name="class" inType="win:UInt8" map="Color"/>
          </template>
          <template tid="T_Point">
            <struct name="Point">
              <data name="X" inType="win:Int32"/>
              <data name="Y" inType="win:Int32"/>
            </struct>
          </template>
          <template tid="T_Blob">
            <data name="Blob" inType="win:Binary"/>
          </template>
          <template tid="T_Types">
            <data name="Id" inType="win:GUID"/>
            <data name="When" inType="win:FILETIME"/>
            <data name="On" inType="win:Boolean"/>
            <data name="Ratio" inType="win:Double"/>
            <data name="Ansi" inType="win:AnsiString"/>
            <data name="Address" inType="win:UInt32" outType="win:IPv4"/>
            <data name="3D" inType="win:Pointer"/>
          </template>
        </templates>
        <events>
          <event value="1" symbol="ItemsSeen" template="T_Items" keywords="Motion" level="win:Informational"
              channel="op" message="$(string.items)"/>
          <event value="1" version="1" symbol="ItemsSeen" template="T_Items" keywords="Motion"
              level="win:Informational" channel="op"/>
          <event value="2" task="Spin" opcode="Whirl" template="T_Point" level="Chatty"/>
          <event value="3" symbol="BlobWritten" template="T_Blob" level="win:Verbose"/>
          <event value="4" symbol="Typed" template="T_Types" keywords="Power" channel="sys" level="win:Warning"
              message="$(string.typed)"/>
        </events>
      </provider>
    </events>
  </instrumentation>
  <localization>
    <resources culture="en-US">
      <stringTable>
        <string id="red" value="Red"/>
        <string id="blue" value="Blue"/>
        <string id="items" value="Saw %1 items labelled %3"/>
        <string id="typed" value="It's a &quot;typed&quot; event, with \\ and ''' and &quot;&quot;&quot;&#10;and a new line"/>
      </stringTable>
    </resources>
  </localization>
</instrumentationManifest>
"""


def generated(xml: bytes = WIDGET_MANIFEST, module: str = "acme_widget_tests", index: int = 0) -> GeneratedModule:
    manifest = parse_manifest(xml, "widget.man").manifest
    return generate_module(manifest, index, xml, "widget.man", module)


def widget_module() -> Any:
    return load_module(generated().source, "acme_widget_tests")


class FakePool:
    """Stands in for a session's buffer pool: keeps every record written into it."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def write(self, record: bytes, timestamp: int, flags: int) -> bool:
        self.records.append(bytes(record))
        return True


def enable(provider: Any, *rules: EnableRule, pools: dict[int, FakePool] | None = None) -> dict[int, FakePool]:
    """Give ``provider`` the enable state of sessions 1, 2, ... with these rules, each with a pool,
    through the runtime's own state-change path."""
    entries = [SessionEnable(number, number, rule) for number, rule in enumerate(rules, start=1)]
    if pools is None:
        pools = {entry.session_id: FakePool() for entry in entries}
    provider._apply_state(EnableState.from_sessions(entries), pools)
    return pools


def only_ids(*ids: int) -> EventFilters:
    return EventFilters(frozenset(ids))


def descriptor_of(record: bytes) -> tuple[int, ...]:
    """(id, version, channel, level, opcode, task, keyword) from an EVENT_HEADER record."""
    return struct.unpack_from("<HBBBBHQ", record, 0x28)


def user_data(record: bytes) -> bytes:
    (flags,) = struct.unpack_from("<H", record, 4)
    assert not flags & 0x0001, "no extended items expected"
    return record[0x50:]
