"""The generated module: names, constants, descriptors, signatures, enabled flags, writes that
decode back, and errors that name the event, the field and the parameter."""

from __future__ import annotations

import datetime
import inspect
import ipaddress
import uuid

import pytest

from openetw.errors import InvalidArgument
from openetw.manifest import parse_manifest
from openetw.mc import BANNER, InvalidEventValue, generate_module, load_module, module_name
from openetw.session import EnableRule
from openetw.tdh import decode_all, format_event_message
from tests.mc.samples import (
    WIDGET_GUID,
    WIDGET_MANIFEST,
    descriptor_of,
    enable,
    generated,
    only_ids,
    user_data,
    widget_module,
)

ALL_EVENTS = ("items_seen", "items_seen_v1", "spin_whirl", "blob_written", "typed")


def flags(provider: object) -> dict[str, bool]:
    return {name: getattr(provider, f"{name}_enabled") for name in ALL_EVENTS}


def test_the_module_starts_with_the_banner_and_embeds_the_manifest() -> None:
    module = widget_module()
    source = generated().source
    assert source.startswith(f"{BANNER} from widget.man; do not edit.\n")
    assert module.MANIFEST_XML == WIDGET_MANIFEST
    assert module.PROVIDER_NAME == "Acme-Widget/Tests"
    assert module.PROVIDER_GUID == WIDGET_GUID
    assert module.PROVIDER_SYMBOL == "ACME"
    assert module.provider.guid == WIDGET_GUID and module.provider.name == "Acme-Widget/Tests"


def test_symbols_become_constants() -> None:
    m = widget_module()
    assert (m.CHANNEL_ACME_WIDGET_OPERATIONAL, m.CHANNEL_ACME_WIDGET_OPERATIONAL_KEYWORD) == (16, 1 << 63)
    assert (m.CHANNEL_SYSTEM, m.CHANNEL_SYSTEM_KEYWORD) == (8, 1 << 62)
    assert m.LEVEL_CHATTY == 16  # the symbol, as mc names it
    assert (m.TASK_SPIN, m.OPCODE_SPIN_WHIRL, m.OP_RESET) == (1, 10, 11)
    assert (m.KEYWORD_MOTION, m.KW_POWER) == (0x1, 0x2)
    assert m.MAP_COLOR == {1: "Red", 2: "Blue"}


def test_descriptors_carry_the_channel_keyword_bit() -> None:
    m = widget_module()
    assert tuple(m.ITEMS_SEEN) == (1, 0, 16, 4, 0, 0, (1 << 63) | 0x1)
    assert tuple(m.ITEMS_SEEN_V1) == (1, 1, 16, 4, 0, 0, (1 << 63) | 0x1)
    assert tuple(m.EVENT_SPIN_WHIRL) == (2, 0, 0, 16, 10, 1, 0)
    assert tuple(m.TYPED) == (4, 0, 8, 3, 0, 0, (1 << 62) | 0x2)


def test_write_methods_are_named_after_symbols_and_take_the_template_in_order() -> None:
    provider = widget_module().provider
    signature = inspect.signature(provider.write_items_seen)
    assert list(signature.parameters) == ["count", "items", "label", "class_"]  # a keyword gets a "_"
    assert [p.annotation for p in signature.parameters.values()] == ["int", "Sequence[int]", "str", "int"]
    assert list(inspect.signature(provider.write_items_seen_v1).parameters) == ["count", "items", "label", "class_"]
    assert list(inspect.signature(provider.write_spin_whirl).parameters) == ["point"]  # no symbol: task + opcode
    typed = inspect.signature(provider.write_typed).parameters
    assert list(typed) == ["id", "when", "on", "ratio", "ansi", "address", "field_3_d"]
    assert typed["address"].annotation == "int | ipaddress.IPv4Address"
    assert typed["when"].annotation == "datetime.datetime | int"
    assert list(inspect.signature(provider.write_blob_written).parameters) == ["blob"]
    assert provider.write_items_seen.__doc__ == 'ItemsSeen (event 1, version 0): "Saw %1 items labelled %3"'


def test_flags_follow_level_keyword_channel_and_event_id_filters() -> None:
    provider = widget_module().provider
    assert not any(flags(provider).values())
    enable(provider, EnableRule())
    assert all(flags(provider).values()) and provider.enabled
    enable(provider, EnableRule(level=4))  # Chatty (16) and Verbose (5) are left out
    assert flags(provider) == dict.fromkeys(ALL_EVENTS, True) | {"spin_whirl": False, "blob_written": False}
    enable(provider, EnableRule(match_any=1 << 62))  # the System channel's keyword bit only
    assert flags(provider) == dict.fromkeys(ALL_EVENTS, False) | {"typed": True, "spin_whirl": True, "blob_written": True}
    enable(provider, EnableRule(match_any=0x2, match_all=0x2 | 1 << 62))
    assert [name for name, on in flags(provider).items() if on] == ["spin_whirl", "blob_written", "typed"]  # keyword 0 always passes
    enable(provider, EnableRule(filters=only_ids(2)), EnableRule(level=3))
    assert [name for name, on in flags(provider).items() if on] == ["spin_whirl", "typed"]
    enable(provider, EnableRule(), pools={})  # the session's pool is not mapped here (yet)
    assert not any(flags(provider).values()) and not provider.enabled
    enable(provider, EnableRule())
    provider.unregister()  # never registered: still leaves everything off
    enable(provider)
    assert not any(flags(provider).values())


def test_written_events_decode_with_the_embedded_schemas() -> None:
    module = widget_module()
    provider = module.provider
    (pool,) = enable(provider, EnableRule()).values()
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    assert provider.write_items_seen(3, [7, 8, 9], "three", 2)
    assert provider.write_spin_whirl({"X": 1, "Y": -2})  # a struct's value, one mapping
    assert provider.write_spin_whirl((5, 6))
    guid = uuid.uuid4()
    assert provider.write_typed(guid, when, True, 0.5, "ansi", ipaddress.IPv4Address("10.1.2.3"), 0x1234)
    schemas = {(s.event_id, s.version): s for s in module.schemas()}
    assert len(schemas) == 5
    decoded = []
    for record in pool.records:
        d = descriptor_of(record)
        decoded.append(decode_all(schemas[(d[0], d[1])], user_data(record)))
    assert descriptor_of(pool.records[0]) == tuple(module.ITEMS_SEEN)
    assert dict(decoded[0].items()) == {"Count": 3, "Items": [7, 8, 9], "Label": "three", "class": 2}
    assert format_event_message(decoded[0]) == "Saw 3 items labelled three"
    assert dict(decoded[1].items()) == {"Point": {"X": 1, "Y": -2}}
    assert dict(decoded[2].items()) == {"Point": {"X": 5, "Y": 6}}
    typed = dict(decoded[3].items())
    assert typed["Id"] == guid and typed["On"] is True and typed["Ratio"] == 0.5 and typed["Ansi"] == "ansi"
    assert typed["When"] == when and typed["3D"] == 0x1234 and str(typed["Address"]) == "10.1.2.3"


def test_a_disabled_event_is_not_even_checked() -> None:
    provider = widget_module().provider
    assert provider.write_items_seen("not a number", None, 5, "x") is False


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            lambda p: p.write_items_seen(2, [1, 2, 3], "x", 1),
            "write_items_seen(): ItemsSeen (event 1, version 0): field 'Items' (parameter items): has 3 values but 'Count' says 2",
        ),
        (lambda p: p.write_items_seen(1, [1], 5, 1), "field 'Label' (parameter label): "),
        (lambda p: p.write_items_seen(1, [1], "x" * 40000, 1), "field 'Label' (parameter label): 80000 bytes do not fit the u16 size"),
        (lambda p: p.write_items_seen(70000, [], "x", 1), "field 'Count' (parameter count): 70000 is out of range"),
        (lambda p: p.write_items_seen(2, [1, -1], "x", 1), "field 'Items[1]' (parameter items): -1 is out of range"),
        (lambda p: p.write_spin_whirl({"X": 1}), "field 'Point' (parameter point): struct value has no member(s) ['Y']"),
        (lambda p: p.write_typed("no guid", 0, True, 0.0, "", 0, 0), "write_typed(): Typed (event 4, version 0): field 'Id' (parameter id): "),
        (
            lambda p: p.write_blob_written(b"abc"),
            "write_blob_written(): BlobWritten (event 3, version 0) cannot be written: field 'Blob': BINARY needs a length",
        ),
    ],
)
def test_bad_values_raise_errors_naming_event_field_and_parameter(call: object, expected: str) -> None:
    provider = widget_module().provider
    (pool,) = enable(provider, EnableRule()).values()
    with pytest.raises(InvalidEventValue) as caught:
        call(provider)  # type: ignore[operator]
    assert expected in str(caught.value)
    assert isinstance(caught.value, InvalidArgument)
    assert caught.value.event in ("ItemsSeen", "Typed", "BlobWritten", "Spin/Whirl")
    assert pool.records == []


def test_unwritable_events_are_listed() -> None:
    module = generated()
    assert [label for label, _ in module.unwritable] == ["BlobWritten"]
    assert module.events == 5


def test_text_from_the_manifest_only_reaches_the_source_through_literals() -> None:
    hostile = WIDGET_MANIFEST.replace(b'name="Acme-Widget/Tests"', b'name="Evil&quot;&quot;&quot;&#10;import os; os._exit(3) #\\"')
    hostile = hostile.replace(b'symbol="ItemsSeen" template', b'symbol="Items&quot;&#10;x=1" template', 1)
    manifest = parse_manifest(hostile, "evil.man").manifest
    name = manifest.providers[0].name
    source = generate_module(manifest, 0, hostile, 'evil"\n.man', module_name(name)).source
    module = load_module(source, module_name(name))
    assert module.PROVIDER_NAME == name
    assert module.MANIFEST_FILE == 'evil"\n.man'
    assert module.provider.write_items_x_1 is not None
    assert module.schemas()[0].event_name.startswith('Items"')


def test_a_provider_without_events_still_makes_a_module() -> None:
    events = WIDGET_MANIFEST[WIDGET_MANIFEST.index(b"<events>\n          <event") : WIDGET_MANIFEST.index(b"</events>\n      </provider>") + 9]
    xml = WIDGET_MANIFEST.replace(events, b"")
    module = load_module(generated(xml).source, "empty")
    assert module.provider.EVENTS == () and module.schemas() == ()
