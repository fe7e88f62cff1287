"""Hostile XML is refused before anything expands, with a ManifestError naming the line."""

from __future__ import annotations

import pytest

from openetw.errors import ManifestError
from openetw.manifest import parse_manifest
from openetw.manifest.xmlread import MAX_DEPTH, MAX_INPUT_BYTES
from tests.manifest.samples import full_manifest

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
  <instrumentation><events><provider name="&lol9;" guid="{11111111-2222-3333-4444-555555555555}"/></events></instrumentation>
</instrumentationManifest>
"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE m [ <!ENTITY secret SYSTEM "file:///etc/passwd"> ]>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events">
  <instrumentation><events><provider name="&secret;" guid="{11111111-2222-3333-4444-555555555555}"/></events></instrumentation>
</instrumentationManifest>
"""

EXTERNAL_DTD = """<?xml version="1.0"?>
<!DOCTYPE instrumentationManifest SYSTEM "http://example.invalid/evil.dtd">
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"/>
"""

PARAMETER_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE m [ <!ENTITY % remote SYSTEM "http://example.invalid/x.dtd"> %remote; ]>
<instrumentationManifest xmlns="http://schemas.microsoft.com/win/2004/08/events"/>
"""


@pytest.mark.parametrize("text", [BILLION_LAUGHS, EXTERNAL_ENTITY, EXTERNAL_DTD, PARAMETER_ENTITY])
def test_doctype_refused_before_expansion(text):
    with pytest.raises(ManifestError, match="document type declarations are not allowed") as caught:
        parse_manifest(text, "evil.man")
    assert caught.value.line == 2
    assert caught.value.path == "evil.man"


def test_doctype_refused_in_bytes_and_utf16():
    for data in (BILLION_LAUGHS.encode("utf-8"), BILLION_LAUGHS.replace("1.0\"?>", "1.0\" encoding=\"utf-16\"?>").encode("utf-16")):
        with pytest.raises(ManifestError, match="not allowed"):
            parse_manifest(data)


def test_huge_input_refused_without_parsing():
    data = b" " * (MAX_INPUT_BYTES + 1)
    with pytest.raises(ManifestError, match="larger than"):
        parse_manifest(data)
    with pytest.raises(ManifestError, match="larger than"):
        parse_manifest(data.decode("ascii"))


def test_deep_nesting_refused():
    depth = MAX_DEPTH + 10
    text = "<instrumentationManifest>" + "<a>" * depth + "</a>" * depth + "</instrumentationManifest>"
    with pytest.raises(ManifestError, match="nest deeper") as caught:
        parse_manifest(text)
    assert caught.value.element == "a"


def test_nesting_just_under_the_cap_is_fine():
    depth = MAX_DEPTH - 2
    text = "<instrumentationManifest>" + "<a>" * depth + "</a>" * depth + "</instrumentationManifest>"
    assert parse_manifest(text).manifest.providers == ()


def test_undefined_entity_is_malformed_not_expanded():
    text = full_manifest().replace('name="Contoso-Sample"', 'name="&undefined;"')
    with pytest.raises(ManifestError, match="undefined entity") as caught:
        parse_manifest(text)
    assert caught.value.element == "events"


def test_predefined_entities_still_work():
    text = full_manifest().replace('name="Contoso-Sample"', 'name="A&amp;B&#x41;"')
    assert parse_manifest(text).manifest.providers[0].name == "A&BA"


def test_truncated_and_garbage_input():
    text = full_manifest()
    with pytest.raises(ManifestError, match="malformed XML"):
        parse_manifest(text[: len(text) // 2])
    with pytest.raises(ManifestError):
        parse_manifest(b"\x00\xff\xfe garbage")
    with pytest.raises(ManifestError):
        parse_manifest("<a><b></a>")


def test_unknown_declared_encoding():
    with pytest.raises(ManifestError, match="cannot decode"):
        parse_manifest(b'<?xml version="1.0" encoding="A"?><instrumentationManifest/>')
