"""The PDB reader against LLVM's (``llvm-pdbutil dump --publics``) on a real MSVC PDB."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid

import pytest

from openetw.errors import SymbolFormatError
from openetw.symbols.pdb import read_pdb
from tests.conftest import corpus_path

_PUBLIC = re.compile(r"(\d+) \| S_PUB32 \[size = \d+\] `(.*)`\n\s+flags = .*, addr = (\d+):(\d+)")


def _pdb_bytes() -> bytes:
    return corpus_path("symbols", "CppCon.pdb").read_bytes()


def _llvm_pdbutil() -> str:
    found = shutil.which("llvm-pdbutil")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("llvm-pdbutil is missing (CI must have it: make test installs Debian's llvm)")
        pytest.skip("llvm-pdbutil is not installed (Debian's llvm package)")
    return found


def test_publics_equal_llvm_pdbutils() -> None:
    path = corpus_path("symbols", "CppCon.pdb")
    text = subprocess.run([_llvm_pdbutil(), "dump", "--publics", "--summary", str(path)], capture_output=True, text=True, check=True).stdout
    expected = [(name, int(offset), int(segment), int(address)) for offset, name, segment, address in _PUBLIC.findall(text)]
    pdb = read_pdb(path.read_bytes())
    assert len(expected) == 198
    assert [(symbol.name, symbol.record_offset, symbol.segment, symbol.offset) for symbol in pdb.publics] == expected
    guid = re.search(r"GUID: \{([0-9A-F-]+)\}", text)
    age = re.search(r"Age: (\d+)", text)
    assert guid is not None and age is not None
    assert pdb.guid == uuid.UUID(guid.group(1)) and pdb.age == int(age.group(1))


def test_publics_become_rvas_through_the_section_headers() -> None:
    pdb = read_pdb(_pdb_bytes())
    main = next(symbol for symbol in pdb.publics if symbol.name == "_main")
    rva = pdb.rva(main)
    assert rva == pdb.section_rvas[main.segment - 1] + main.offset
    assert pdb.symbols().lookup(rva + 5) == ("_main", 5)
    assert pdb.guid == uuid.UUID("12dc0a4f-bd7d-4f2a-a9be-263bacaeb467")


@pytest.mark.parametrize("cut", [0, 10, 40, 4096, 8192, 40000])
def test_a_cut_or_damaged_pdb_raises_the_projects_error(cut: int) -> None:
    data = _pdb_bytes()
    with pytest.raises(SymbolFormatError):
        read_pdb(data[:cut])


def test_a_damaged_directory_is_reported_where_it_is() -> None:
    data = bytearray(_pdb_bytes())
    data[52:56] = (10_000_000).to_bytes(4, "little")  # the block map's block: far outside the file
    with pytest.raises(SymbolFormatError, match="block 10000000 outside the file"):
        read_pdb(bytes(data))


def test_mutated_pdbs_only_ever_raise_the_projects_error() -> None:
    import random

    data = _pdb_bytes()
    chooser = random.Random(20261129)
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(chooser.randint(1, 8)):
            at = chooser.randrange(0, 8192) if chooser.random() < 0.7 else chooser.randrange(len(data))
            mutated[at] = chooser.randrange(256)
        try:
            read_pdb(bytes(mutated))
        except SymbolFormatError:
            pass
