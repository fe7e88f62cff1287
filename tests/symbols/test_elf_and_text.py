"""ELF symbol tables (a program compiled here), kallsyms and perf map text."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from openetw.errors import SymbolFormatError
from openetw.symbols.elf import read_elf
from openetw.symbols.table import SymbolTable
from openetw.symbols.text_maps import read_kallsyms, read_perf_map

PROGRAM = """
__attribute__((noinline)) int first_function(int x) { return x * 3 + 1; }
__attribute__((noinline)) int second_function(int x) { return first_function(x) ^ 5; }
int main(int argc, char **argv) { (void)argv; return second_function(argc); }
"""


def compiled(tmp_path: Path, *flags: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc is missing (CI must have it: make test installs it)")
        pytest.skip("gcc is not installed")
    source = tmp_path / "program.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "program"
    subprocess.run([gcc, "-O1", "-g", "-Wl,--build-id", *flags, "-o", str(binary), str(source)], check=True)
    return binary


def _nm(binary: Path) -> dict[str, int]:
    out = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in (line.split() for line in out.splitlines()) if len(parts) == 3 and parts[1] in "tT"}


def test_functions_and_build_id_of_a_compiled_program(tmp_path: Path) -> None:
    binary = compiled(tmp_path)
    elf = read_elf(binary.read_bytes())
    expected = _nm(binary) if shutil.which("nm") else {}
    for name in ("first_function", "second_function", "main"):
        address = elf.symbols.addresses[elf.symbols.names.index(name)]
        if expected:
            assert address == expected[name]
        assert elf.symbols.lookup(address + 1) == (name, 1)
    note = subprocess.run(["readelf", "-n", str(binary)], capture_output=True, text=True).stdout if shutil.which("readelf") else ""
    assert elf.build_id is not None and len(elf.build_id) == 40
    if note:
        assert elf.build_id in note
    # a file offset inside the text segment maps back to the address it is loaded at
    main = elf.symbols.addresses[elf.symbols.names.index("main")]
    offset = next(off + main - vaddr for off, vaddr, size in elf.segments if vaddr <= main < vaddr + size)
    assert elf.address_of_offset(offset) == main


def test_a_stripped_program_is_named_by_its_dynamic_symbols(tmp_path: Path) -> None:
    binary = compiled(tmp_path, "-rdynamic", "-s")
    elf = read_elf(binary.read_bytes())
    assert "second_function" in elf.symbols.names


def test_damaged_elf_files_only_raise_the_projects_error(tmp_path: Path) -> None:
    data = compiled(tmp_path).read_bytes()
    with pytest.raises(SymbolFormatError):
        read_elf(b"MZ" + data[2:])
    chooser = random.Random(7)
    for cut in (20, 60, 200, len(data) // 2):
        try:
            read_elf(data[:cut])
        except SymbolFormatError:
            pass
    for _ in range(200):
        mutated = bytearray(data)
        for _ in range(chooser.randint(1, 6)):
            mutated[chooser.randrange(len(data))] = chooser.randrange(256)
        try:
            read_elf(bytes(mutated))
        except SymbolFormatError:
            pass


def test_kallsyms_keeps_text_symbols_and_hidden_addresses_name_nothing() -> None:
    text = "ffffffff81000000 T _text\nffffffff81000100 T start_kernel\nffffffff82000000 D some_data\nffffffffc0000000 t mod_fn\t[mod]\n"
    table = read_kallsyms(text)
    assert table.lookup(0xFFFFFFFF81000180) == ("start_kernel", 0x80)
    assert table.lookup(0xFFFFFFFFC0000004) == ("mod_fn", 4)
    assert len(read_kallsyms("0000000000000000 T _text\n0000000000000000 T start_kernel\n")) == 0


def test_perf_maps_and_sized_symbols() -> None:
    table = read_perf_map("7f0000001000 40 jitted::hot\n7f0000002000 10 jitted::cold\nbroken line\n")
    assert table.lookup(0x7F0000001010) == ("jitted::hot", 0x10)
    assert table.lookup(0x7F0000001050) is None  # past the end of the sized symbol
    assert SymbolTable([]).lookup(5) is None
