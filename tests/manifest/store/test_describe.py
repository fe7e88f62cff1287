"""The plain-data view of a merged provider: names as written, else found by descriptor value."""

from __future__ import annotations

import json
import uuid

from openetw.manifest import parse_manifest
from openetw.manifest.store import merge_manifests, provider_view
from tests.manifest.store.sample_manifests import GUID_A, manifest_xml

PROVIDER = f"""      <provider name="Contoso" guid="{{{GUID_A}}}" symbol="CONTOSO">
        <tasks><task name="Connect" value="3"><opcodes><opcode name="Retry" value="12"/></opcodes></task></tasks>
        <keywords><keyword name="Net" mask="0x10"/></keywords>
        <maps><valueMap name="StateMap"><map value="1" message="Up"/><map value="2" message="Down"/></valueMap></maps>
        <templates>
          <template tid="T">
            <data name="Count" inType="win:UInt16"/>
            <data name="Items" inType="win:UInt32" count="Count" outType="win:HexInt32"/>
            <data name="Blob" inType="win:Binary" length="4"/>
            <data name="State" inType="win:UInt32" map="StateMap"/>
            <struct name="Pair" count="2"><data name="Key" inType="win:UnicodeString"/></struct>
          </template>
        </templates>
        <events>
          <event value="5" task="Connect" opcode="Retry" keywords="Net" template="T" level="win:Warning"/>
          <event value="6" version="2" symbol="Plain"/>
          <event value="7"/>
        </events>
      </provider>
"""


def _view() -> dict:
    manifest = parse_manifest(manifest_xml(PROVIDER), "c.man").manifest
    return provider_view(merge_manifests([("c.man", manifest)])[uuid.UUID(GUID_A)], {"c.man": "given"})


def test_event_names_and_descriptor_values():
    view = _view()
    json.dumps(view)  # plain data only
    first, second, third = view["events"]
    assert first["name"] == "Connect/Retry" and first["symbol"] is None
    assert (first["level"], first["opcode"], first["task"], first["keywords"]) == ("win:Warning", "Retry", "Connect", ["Net"])
    assert (first["level_value"], first["opcode_value"], first["task_value"], first["keyword_mask"]) == (3, 12, 3, "0x10")
    assert (second["name"], second["version"], second["fields"]) == ("Plain", 2, [])
    assert third["name"] == "event_7"
    assert {e["source"] for e in view["events"]} == {"c.man"}
    assert view["sources"] == [{"path": "c.man", "store": "given"}]


def test_fields_carry_types_sizes_maps_and_struct_members():
    fields = _view()["events"][0]["fields"]
    assert [(f["name"], f["in_type"], f["out_type"], f["count"], f["length"], f["map"]) for f in fields] == [
        ("Count", "win:UInt16", "xs:unsignedShort", None, None, None),
        ("Items", "win:UInt32", "win:HexInt32", "Count", None, None),
        ("Blob", "win:Binary", "xs:hexBinary", None, 4, None),
        ("State", "win:UInt32", "xs:unsignedInt", None, None, "StateMap"),
        ("Pair", "struct", None, 2, None, None),
    ]
    assert [(m["name"], m["in_type"]) for m in fields[4]["members"]] == [("Key", "win:UnicodeString")]


def test_provider_definitions():
    view = _view()
    assert [(t["name"], t["value"]) for t in view["tasks"]] == [("Connect", 3)]
    assert [(o["name"], o["value"], o["task"]) for o in view["opcodes"]] == [("Retry", 12, "Connect")]
    assert view["keywords"] == [{"name": "Net", "mask": "0x10", "message": None}]
    entries = [{"value": 1, "message": "Up"}, {"value": 2, "message": "Down"}]
    assert view["maps"] == [{"name": "StateMap", "kind": "valueMap", "entries": entries}]
