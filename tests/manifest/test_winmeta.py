from __future__ import annotations

import pytest

from openetw.manifest import winmeta
from openetw.manifest.winmeta import InType, OutType


def test_tdh_in_type_numbers():
    assert [InType.NULL, InType.UNICODESTRING, InType.ANSISTRING, InType.INT8] == [0, 1, 2, 3]
    assert (InType.UINT32, InType.UINT64, InType.BOOLEAN, InType.BINARY, InType.GUID) == (8, 10, 13, 14, 15)
    assert (InType.POINTER, InType.FILETIME, InType.SYSTEMTIME, InType.SID) == (16, 17, 18, 19)
    assert (InType.HEXINT32, InType.HEXINT64) == (20, 21)
    assert (InType.MANIFEST_COUNTEDSTRING, InType.MANIFEST_COUNTEDANSISTRING, InType.MANIFEST_COUNTEDBINARY) == (22, 23, 25)
    assert (InType.COUNTEDSTRING, InType.SIZET, InType.HEXDUMP, InType.WBEMSID) == (300, 308, 309, 310)


def test_tdh_out_type_numbers():
    assert (OutType.STRING, OutType.DATETIME, OutType.HEXBINARY, OutType.HEXINT32) == (1, 2, 15, 18)
    assert (OutType.PORT, OutType.IPV4, OutType.IPV6, OutType.SOCKETADDRESS) == (22, 23, 24, 25)
    assert (OutType.XML, OutType.WIN32ERROR, OutType.NTSTATUS, OutType.HRESULT) == (28, 30, 31, 32)
    assert (OutType.JSON, OutType.UTF8, OutType.DATETIME_UTC) == (34, 35, 38)
    assert (OutType.REDUCEDSTRING, OutType.NOPRINT) == (300, 301)


def test_every_winmeta_in_type_has_a_default_out_type():
    for name, code in winmeta.IN_TYPE_NAMES.items():
        assert winmeta.default_out_type(code) is not OutType.NULL, name
    assert winmeta.default_out_type(InType.UINT32) is OutType.UNSIGNEDINT
    assert winmeta.default_out_type(InType.POINTER) is OutType.HEXINT64
    assert winmeta.default_out_type(InType.WBEMSID) is OutType.NULL


@pytest.mark.parametrize(
    ("name", "code", "noted"),
    [
        ("win:UInt32", InType.UINT32, False),
        ("win:CountedUtf16String", InType.MANIFEST_COUNTEDSTRING, True),
        ("win:CountedMbcsString", InType.MANIFEST_COUNTEDANSISTRING, True),
        ("win:Struct", InType.NULL, True),
        ("win:25", InType.NULL, True),
        ("win:50", InType.NULL, True),
        ("win:8", InType.UINT32, True),
        ("win:uint32", InType.UINT32, True),
        ("win:SizeT", InType.SIZET, True),
    ],
)
def test_resolve_in_type(name, code, noted):
    resolved = winmeta.resolve_in_type(name)
    assert resolved is not None and resolved.code == code
    assert (resolved.note is not None) == noted


def test_unknown_types():
    assert winmeta.resolve_in_type("win:Bogus") is None
    assert winmeta.resolve_out_type("xs:bogus") is None


def test_resolve_out_type():
    assert winmeta.resolve_out_type("win:HexInt32") == (OutType.HEXINT32, None)
    aliased = winmeta.resolve_out_type("xs:HexInt32")
    assert aliased.code == OutType.HEXINT32 and "win:HexInt32" in aliased.note
    assert winmeta.resolve_out_type("xs:GUID").code == OutType.GUID


def test_standard_items():
    assert {name: item.value for name, item in winmeta.LEVELS.items()} == {
        "win:LogAlways": 0, "win:Critical": 1, "win:Error": 2, "win:Warning": 3, "win:Informational": 4, "win:Verbose": 5,
    }
    assert winmeta.OPCODES["win:Receive"].value == 240
    assert winmeta.OPCODES["win:Send"].message_id == 0x30090000
    assert winmeta.KEYWORDS["win:ResponseTime"].value == 0x0001000000000000
    assert winmeta.KEYWORDS["win:WDIContext"].value == 0x0002000000000000
    assert winmeta.KEYWORDS["win:AuditFailure"].value == 0x10000000000000
    assert winmeta.KEYWORDS["win:EventlogClassic"].message_id == 0x10000038
    for item in winmeta.KEYWORDS.values():
        assert item.value == 0 or item.message_id == 0x10000000 + item.value.bit_length()
    assert winmeta.standard_channel("System").value == 8
    assert winmeta.standard_channel("win:Security").value == 10
    assert winmeta.standard_channel("Nope") is None
