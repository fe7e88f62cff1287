"""Native Windows frames named from a PDB in --symbols DIR, matched by the GUID and age the trace's
ImageID/DbgID_RSDS record gives (the corpus's real MSVC PDB, read in place)."""

from __future__ import annotations

import uuid

from openetw.events.profile import load_profile
from openetw.symbols.pdb import read_pdb
from tests.conftest import corpus_path
from tests.events.kernel_records import dbg_id_rsds, image_load, sample, stack

BASE = 0x0040_0000
GUID = uuid.UUID("12dc0a4f-bd7d-4f2a-a9be-263bacaeb467")


def _trace(guid: uuid.UUID, age: int) -> list:  # type: ignore[type-arg]
    pdb = read_pdb(corpus_path("symbols", "CppCon.pdb").read_bytes())
    main = next(symbol for symbol in pdb.publics if symbol.name == "_main")
    cookie = next(symbol for symbol in pdb.publics if symbol.name == "@__security_check_cookie@4")
    rva_main, rva_cookie = pdb.rva(main), pdb.rva(cookie)
    assert rva_main is not None and rva_cookie is not None
    return [
        image_load(10, 40, BASE, 0x10000, "C:\\Users\\me\\CppCon\\bin\\Release\\CppCon.exe", opcode=3),
        dbg_id_rsds(10, 40, BASE, guid, age, "C:\\Users\\me\\CppCon\\bin\\Release\\CppCon.pdb"),
        sample(100, 7, BASE + rva_cookie + 2),
        stack(100, 40, 7, [BASE + rva_cookie + 2, BASE + rva_main + 5, BASE + 0xF000]),
    ]


def test_frames_are_named_by_the_matching_pdbs_publics() -> None:
    symbols = str(corpus_path("symbols", "CppCon.pdb").parent)
    profile = load_profile(_trace(GUID, 5), symbol_dirs=[symbols])
    labels = [frame.label for frame in profile.samples[0].frames]
    assert labels[:2] == ["CppCon!@__security_check_cookie@4", "CppCon!_main"]
    assert profile.naming.by_source["pdb"] >= 2 and profile.naming.symbol_files == 1


def test_a_pdb_of_another_build_names_nothing() -> None:
    symbols = str(corpus_path("symbols", "CppCon.pdb").parent)
    for guid, age in ((uuid.UUID(int=GUID.int ^ 1), 5), (GUID, 4)):
        profile = load_profile(_trace(guid, age), symbol_dirs=[symbols])
        assert [frame.label for frame in profile.samples[0].frames][1].startswith("CppCon!+0x")
        assert profile.naming.by_source["pdb"] == 0
