from __future__ import annotations

import pytest

from openetw.manifest import Severity, parse_manifest, validate
from tests.manifest.samples import full_manifest, manifest


def findings(text: str, *, strict: bool = False) -> list[tuple[str, str]]:
    result = parse_manifest(text, "t.man")
    return [(d.severity.value, d.code) for d in validate(result.manifest, strict=strict)]


def test_full_sample_is_clean():
    assert findings(full_manifest()) == []
    assert findings(full_manifest(), strict=True) == []


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('<events><event value="70000"/></events>', ("error", "event-value")),
        ('<events><event value="1" version="300"/></events>', ("error", "event-version")),
        ('<events><event value="1" template="Nope"/></events>', ("error", "undefined-template")),
        ('<events><event value="1" level="Loud"/></events>', ("error", "undefined-level")),
        ('<events><event value="1" keywords="Nope"/></events>', ("error", "undefined-keyword")),
        ('<events><event value="1" channel="Nope"/></events>', ("error", "undefined-channel")),
        ('<events><event value="1" task="Nope"/></events>', ("warning", "undefined-task")),
        ('<events><event value="1" opcode="Nope"/></events>', ("warning", "undefined-opcode")),
        ('<events><event value="1" message="$(string.Nope)"/></events>', ("warning", "undefined-string")),
        ('<events><event value="1"/><event value="1"/></events>', ("warning", "duplicate-event")),
        ('<events><event value="0"/></events>', ("warning", "event-value-zero")),
        ('<keywords><keyword name="K" mask="0x3"/></keywords>', ("error", "keyword-mask")),
        ('<keywords><keyword name="K" mask="0x0"/></keywords>', ("error", "keyword-mask")),
        ('<keywords><keyword name="K" mask="0x1000000000000"/></keywords>', ("error", "keyword-reserved")),
        ('<keywords><keyword name="K" mask="0x1"/><keyword name="L" mask="0x1"/></keywords>', ("error", "keyword-mask-reused")),
        ('<keywords><keyword name="K" mask="0x1"/><keyword name="K" mask="0x2"/></keywords>', ("warning", "duplicate-name")),
        ('<levels><level name="L" value="7"/></levels>', ("error", "level-value-range")),
        ('<opcodes><opcode name="O" value="5"/></opcodes>', ("warning", "opcode-value-range")),
        ('<opcodes><opcode name="O" value="300"/></opcodes>', ("error", "opcode-value")),
        ('<tasks><task name="T" value="0"/></tasks>', ("warning", "task-value-zero")),
        ('<tasks><task name="T" value="70000"/></tasks>', ("error", "task-value")),
        ('<tasks><task name="T" value="1" symbol="1bad"/></tasks>', ("warning", "symbol")),
        ('<templates><template tid="T"/><template tid="T"/></templates>', ("error", "duplicate-template")),
        ('<maps><valueMap name="M"><map value="1" message="a"/><map value="1" message="b"/></valueMap></maps>',
         ("warning", "duplicate-map-value")),
    ],
)
def test_single_rule(body, expected):
    assert expected in findings(manifest(body))


def template_findings(fields: str, maps: str = "") -> list[tuple[str, str]]:
    return findings(manifest(f'{maps}<templates><template tid="T">{fields}</template></templates>'))


def test_size_references():
    assert template_findings('<data name="N" inType="win:UInt16"/><data name="S" inType="win:UnicodeString" length="N"/>') == []
    later = template_findings('<data name="S" inType="win:UnicodeString" length="N"/><data name="N" inType="win:UInt16"/>')
    assert later == [("warning", "size-ref-not-earlier")]
    missing = template_findings('<data name="S" inType="win:Binary" length="Byte Length"/>')
    assert missing == [("warning", "size-ref-not-earlier")]
    strict = findings(manifest('<templates><template tid="T"><data name="S" inType="win:Binary" length="X"/></template></templates>'), strict=True)
    assert strict == [("error", "size-ref-not-earlier")]
    wrong_type = template_findings('<data name="N" inType="win:UnicodeString"/><data name="A" inType="win:UInt8" count="N"/>')
    assert wrong_type == [("error", "size-ref-type")]
    struct = template_findings(
        '<data name="C" inType="win:UInt32"/><struct name="S" count="C"><data name="X" inType="win:UInt8"/></struct>'
    )
    assert struct == []


def test_field_rules():
    assert template_findings('<data name="B" inType="win:Binary"/>') == [("warning", "binary-without-length")]
    assert template_findings('<data name="B" inType="win:Binary" outType="win:IPv6"/>') == []
    assert template_findings('<data name="U" inType="win:UInt32" length="4"/>') == [("error", "length-on-fixed-type")]
    assert template_findings('<data name="U" inType="win:UInt32" map="Nope"/>') == [("error", "undefined-map")]
    maps = '<maps><valueMap name="M"><map value="1" message="one"/></valueMap></maps>'
    assert template_findings('<data name="U" inType="win:UInt64" map="M"/>', maps) == [("error", "map-type")]
    assert template_findings('<data name="U" inType="win:UInt16" map="M"/>', maps) == []
    assert template_findings('<data name="G" inType="win:GUID" outType="xs:string"/>') == [("warning", "out-type")]
    assert template_findings('<data name="X" inType="win:Bogus"/>') == [("error", "unknown-in-type")]
    assert template_findings('<data name="X" inType="win:Struct"/>') == [("warning", "opaque-type")]
    assert template_findings('<data name="1" inType="win:UInt8"/>') == [("warning", "field-name")]
    duplicate = template_findings('<data name="A" inType="win:UInt8"/><data name="A" inType="win:UInt8"/>')
    assert duplicate == [("warning", "duplicate-field-name")]


def test_channel_rules():
    channels = "".join(f'<channel chid="C{i}" name="P/C{i}" type="Operational"/>' for i in range(9))
    assert ("error", "too-many-channels") in findings(manifest(f"<channels>{channels}</channels>"))
    admin = manifest(
        '<channels><channel chid="A" name="P/Admin" type="Admin"/></channels>'
        '<events><event value="1" channel="A" level="win:Verbose"/></events>'
    )
    assert findings(admin) == [("error", "admin-message"), ("error", "admin-level")]
    duplicate = manifest('<channels><channel chid="A" name="P/A" type="Debug"/><channel chid="A" name="P/B" type="Debug"/></channels>')
    assert ("error", "duplicate-channel") in findings(duplicate)


def test_opcode_scoping_rules():
    tasks = '<tasks><task name="T" value="1"><opcodes><opcode name="Local" value="10"/></opcodes></task><task name="U" value="2"/></tasks>'
    wrong_task = manifest(tasks + '<events><event value="1" task="U" opcode="Local"/></events>')
    assert findings(wrong_task) == [("error", "opcode-task")]
    clash = manifest(
        tasks + '<opcodes><opcode name="Global" value="10"/></opcodes><events><event value="1" task="T" opcode="Global"/></events>'
    )
    assert findings(clash) == [("error", "opcode-clash")]


def test_message_inserts():
    body = (
        '<templates><template tid="T"><data name="A" inType="win:UInt8"/></template></templates>'
        '<events><event value="1" template="T" message="$(string.M)"/></events>'
    )
    assert findings(manifest(body, '<string id="M" value="%1 and %2"/>')) == [("warning", "insert-range")]
    assert findings(manifest(body, '<string id="M" value="%1 and %%2"/>')) == []


def test_provider_rules():
    assert ("error", "provider-guid") in findings(manifest("", provider_attrs='name="P"'))
    assert ("error", "provider-name") in findings(manifest("", provider_attrs='guid="{11111111-2222-3333-4444-555555555555}"'))
    bad_name = 'name="a?b" guid="{11111111-2222-3333-4444-555555555555}"'
    assert ("error", "provider-name") in findings(manifest("", provider_attrs=bad_name))


def test_diagnostics_carry_location():
    text = manifest('<events>\n<event value="1" template="Nope"/></events>')
    (diagnostic,) = validate(parse_manifest(text, "t.man").manifest)
    assert diagnostic.severity is Severity.ERROR and diagnostic.is_error
    assert diagnostic.path == "t.man" and diagnostic.element == "event"
    assert 'template="Nope"' in text.splitlines()[diagnostic.line - 1]
    assert str(diagnostic).startswith(f"t.man:{diagnostic.line}: <event>: error: ")


def test_strict_turns_tolerated_defects_into_errors():
    body = '<events><event value="1" task="task_0"/><event value="1" task="task_0"/></events>'
    assert {s for s, _ in findings(manifest(body))} == {"warning"}
    assert {s for s, _ in findings(manifest(body), strict=True)} == {"error"}
