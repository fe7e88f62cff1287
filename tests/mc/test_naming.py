"""Python names for manifest items."""

from __future__ import annotations

import pytest

from openetw.mc.naming import Names, class_name, constant_name, identifier, module_name, snake_case


@pytest.mark.parametrize(
    ("provider", "module"),
    [
        ("Sample Driver", "sample_driver"),
        ("Microsoft-Windows-Kernel-Power", "microsoft_windows_kernel_power"),
        ("OSRUSBFX2", "osrusbfx2"),
        ("Acme.Widget/Debug", "acme_widget_debug"),
        ("3Com-Driver", "_3com_driver"),
        ("Été", "_t_"),
        ("class", "_class"),
    ],
)
def test_module_names_replace_each_character_an_identifier_cannot_hold(provider: str, module: str) -> None:
    assert module_name(provider) == module
    assert module.isidentifier()


@pytest.mark.parametrize(
    ("text", "snake"),
    [
        ("StartEvent", "start_event"),
        ("SampleEventA", "sample_event_a"),
        ("IRPStart", "irp_start"),
        ("DirtyTransition_V1", "dirty_transition_v1"),
        ("DeviceNameLength", "device_name_length"),
        ("Byte Length", "byte_length"),
        ("po:Simple", "po_simple"),
        ("__x__", "x"),
        ("already_snake", "already_snake"),
        ("", ""),
    ],
)
def test_snake_case(text: str, snake: str) -> None:
    assert snake_case(text) == snake


def test_identifiers_constants_and_classes() -> None:
    assert identifier("3D", "field") == "field_3_d"
    assert identifier("", "field_2") == "field_2"
    assert constant_name("KernelProcessKeyword", "KEYWORD") == "KERNEL_PROCESS_KEYWORD"
    assert constant_name("0x10", "KEYWORD") == "KEYWORD_0X10"
    assert class_name("sample_driver") == "SampleDriverProvider"
    assert class_name("_3com_driver") == "Manifest3comDriverProvider"


def test_names_are_unique_within_a_scope() -> None:
    names = Names({"self"})
    assert names.take("self", "self_") == "self_"
    assert names.take("count") == "count"
    assert names.take("count", "count_v1") == "count_v1"
    assert names.take("count", "count_v1") == "count_2"
    assert names.take("class", "class_") == "class_"
    assert "count_2" in names
    with pytest.raises(ValueError):
        names.take("3d")
