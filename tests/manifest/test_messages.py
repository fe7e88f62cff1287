from __future__ import annotations

from openetw.manifest import format_message, inserts_used


def test_inserts_and_escapes():
    assert format_message("%1 is %2", ["x", 5]) == "x is 5"
    assert format_message("a%nb%tc%rd%be%.%!", []) == "a\nb\tc\rd e.!"
    assert format_message("a%nb", [], newline="\r\n") == "a\r\nb"
    assert format_message("100%% done", []) == "100% done"
    assert format_message("kept %3 here", ["a"]) == "kept %3 here"
    assert format_message("stop%0 ignored", []) == "stop"
    assert format_message("%10 %1", list("abcdefghij")) == "j a"


def test_printf_formats():
    assert format_message("%1!08X!", [255]) == "000000FF"
    assert format_message("%1!lu! %2!I64x!", [7, 255]) == "7 ff"
    assert format_message("%1!S!", ["wide"]) == "wide"
    assert format_message("%1!d!", ["not a number"]) == "not a number"


def test_parameter_strings():
    assert format_message("%1 %%11", [8]) == "8 %11"
    assert format_message("%1 %%11 = %2 %%12", [8, 2], parameter={11: "quarts", 12: "gallons"}.get) == "8 quarts = 2 gallons"


def test_inserts_used():
    assert inserts_used("%1 %2!d! %%5 %3 %0") == [1, 2, 3]
    assert inserts_used("none %n here %%") == []
