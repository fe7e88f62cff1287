"""One behaviour, two implementations: the compiled ``.evtx`` parser and renderer (``_evtx.c``)
against the pure-Python reference.

Both engines read the same inputs in one process (every corpus ``.evtx``, mutated copies of the
small ones by the evtx fuzz's mutators, template bombs) and must give identical records, XML
text, headers, properties, errors (messages, offsets, chunks, structures) and counts.
"""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import openetw._native as native
from openetw.evtx import reader
from openetw.evtx import values as V
from openetw.evtx.render import value_text_lenient
from tests.native import evtx_cases

_evtx = native.module("_evtx")
if _evtx is None and os.environ.get("CI") == "true" and os.environ.get(native.PURE_VARIABLE) != "1":
    raise AssertionError(f"the compiled core must be active under CI: {native.reason()}")
pytestmark = pytest.mark.skipif(_evtx is None, reason=f"compiled .evtx core not active: {native.reason()}")


@contextlib.contextmanager
def pure() -> Iterator[None]:
    """The pure-Python reference for the length of the block."""
    saved = reader._NATIVE
    reader._NATIVE = None
    try:
        yield
    finally:
        reader._NATIVE = saved


def both(data: bytes, decode_every: int = 1):  # type: ignore[no-untyped-def]
    fast = evtx_cases.read(data, decode_every=decode_every)
    with pure():
        reference = evtx_cases.read(data, decode_every=decode_every)
    return fast, reference


def test_the_compiled_path_reads_records() -> None:
    # Not a vacuous comparison: the twin accepts and renders the corpus's records itself.
    data = (evtx_cases.CORPUS / "security.evtx").read_bytes()
    records = list(reader.EvtxReader(data).records())
    assert len(records) > 1000
    assert all(record._xml is not None for record in records)


def test_every_corpus_file_reads_the_same() -> None:
    files = evtx_cases.corpus_files()
    if not files and os.environ.get("CI") == "true":
        pytest.fail(f"corpus missing under CI: {evtx_cases.CORPUS}")
    if not files:
        pytest.skip("no .evtx corpus here")
    for path in files:
        fast, reference = both(path.read_bytes(), decode_every=7)
        assert fast == reference, path.name


def test_mutated_files_and_template_bombs_read_the_same() -> None:
    cases = evtx_cases.mutated_cases(seed=3, per_file=40) + evtx_cases.binxml_cases(seed=5, count=12) + evtx_cases.bomb_cases()
    for label, data in cases:
        fast, reference = both(data)
        assert fast == reference, label


_TYPES = st.sampled_from([*V.TYPE_NAMES, 0x16, 0x22, 0x7F]).flatmap(lambda t: st.sampled_from([t, t | V.ARRAY]))


@settings(max_examples=400, deadline=None)
@given(value_type=_TYPES, data=st.binary(max_size=40))
def test_value_text_is_the_pure_text(value_type: int, data: bytes) -> None:
    text = _evtx.value_text(value_type, data)  # type: ignore[union-attr]
    if text is not None:  # None: left to the pure code (reals, short years)
        assert text == value_text_lenient(value_type, data)


@settings(max_examples=200, deadline=None)
@given(units=st.lists(st.sampled_from([0, 0x41, 0x26, 0x3C, 0x1F, 0xE9, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xFFFF]), max_size=12), odd=st.booleans())
def test_strings_decode_as_python_decodes_them(units: list[int], odd: bool) -> None:
    data = b"".join(unit.to_bytes(2, "little") for unit in units) + (b"\x01" if odd else b"")
    for value_type in (V.STRING, V.STRING | V.ARRAY):
        assert _evtx.value_text(value_type, data) == value_text_lenient(value_type, data)  # type: ignore[union-attr]


def test_values_the_twin_leaves_to_python() -> None:
    assert _evtx is not None
    assert _evtx.value_text(V.REAL64, struct.pack("<d", 1.5)) is None
    assert _evtx.value_text(V.UINT32, b"\x01\x00\x00\x00") == "1"


def test_the_engine_switch_reaches_the_evtx_reader() -> None:
    code = "from openetw.evtx import reader; print(reader._NATIVE is None)"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENETW_")}
    for pure_value, expected in (("1", "True"), ("0", "False")):
        done = subprocess.run([sys.executable, "-c", code], env={**env, native.PURE_VARIABLE: pure_value}, capture_output=True, text=True, check=True)
        assert done.stdout.strip() == expected


def test_batches_give_the_records_on_both_engines() -> None:
    # The column path (EvtxReader.batches) against the per-record path: every corpus file on the
    # compiled engine (the pure one reads them as the compiled one does, above); the generated
    # file with a stale chunk header, mutations of it and of small corpus files on both engines.
    for path in evtx_cases.corpus_files():
        data = path.read_bytes()
        assert evtx_cases.read(data, decode_every=7, batches=True) == evtx_cases.read(data, decode_every=7), path.name
    cases = evtx_cases.generated_cases(seed=11, count=12) + evtx_cases.mutated_cases(seed=13, per_file=4)
    for label, data in cases:
        reference = evtx_cases.read(data, decode_every=3)
        assert evtx_cases.read(data, decode_every=3, batches=True) == reference, label
        with pure():
            assert evtx_cases.read(data, decode_every=3, batches=True) == reference, label


def test_the_batch_path_renders_in_the_compiled_core() -> None:
    # Not a vacuous comparison: the generated file's records come back as columns, XML included,
    # no EvtxRecord made; a stale chunk header is counted, and costs no record.
    fine, stale = evtx_cases.generated_cases(seed=1, count=0)
    clean = reader.EvtxReader(fine[1])
    batches = list(clean.batches())
    assert sum(len(batch) for batch in batches) == 400 == clean.stats.records
    assert all(text is not None for batch in batches for text in batch.xml)
    assert all(not batch._records for batch in batches)
    assert "<Data Name='Mask'>65280</Data>" in batches[0].xml[0] and "<Keywords>0x8000000000000000</Keywords>" in batches[0].xml[0]
    dirty = reader.EvtxReader(stale[1])
    rows = [text for batch in dirty.batches() for text in batch.xml_texts()]
    assert len(rows) == 400 and dirty.stats.records_torn == 1
    assert dirty.stats.records_outside_header > 0 and dirty.stats.crc_mismatches >= 1
    assert not dirty.losses


def test_the_walks_system_columns_are_the_pure_headers() -> None:
    # RecordBatch.header (the compiled walk's <System> columns) against the pure tree's header:
    # every corpus file, generated files (facts that vary, a stale chunk header, mutations), mutated
    # small corpus files and BinXml damage; and on the pure engine, whose batches leave every row
    # to the tree.
    cases = [(path.name, path.read_bytes()) for path in evtx_cases.corpus_files()]
    cases += [("varied headers", evtx_cases.varied_headers_file())]
    cases += evtx_cases.generated_cases(seed=17, count=8) + evtx_cases.mutated_cases(seed=19, per_file=4)
    cases += evtx_cases.binxml_cases(seed=23, count=4)
    for number, (label, data) in enumerate(cases):
        with pure():
            reference = evtx_cases.headers(data)
        assert evtx_cases.headers(data, batches=True) == reference, label
        if number % 5 == 0:
            with pure():
                assert evtx_cases.headers(data, batches=True) == reference, label


def test_the_walk_reads_the_system_facts_itself() -> None:
    # Not a vacuous comparison: the corpus's clean files and the generated ones are read from the
    # columns, no record made; a record whose facts are text the walk does not parse is left to the tree.
    for data in ((evtx_cases.CORPUS / "security.evtx").read_bytes(), (evtx_cases.CORPUS / "system.evtx").read_bytes(),
                 evtx_cases.varied_headers_file()):  # fmt: skip
        batches = list(reader.EvtxReader(data).batches())
        assert sum(len(batch) for batch in batches) > 100
        for batch in batches:
            assert batch.unread_rows() == []
            assert [batch.header(i).event_id for i in range(len(batch))]
            assert not batch._records
    unread = [row for batch in reader.EvtxReader((evtx_cases.CORPUS / "issue_201.evtx").read_bytes()).batches() for row in batch.unread_rows()]
    assert len(unread) == 1


def test_the_walks_eventdata_fields_are_the_pure_properties() -> None:
    # RecordBatch.event_data and data_columns (the compiled walk's EventData fields) against the
    # pure tree's properties and texts: every corpus file, a file of varied field shapes, generated
    # files (a stale chunk header, mutations), mutated small corpus files and BinXml damage; and on
    # the pure engine, whose batches leave every row to the tree.
    cases = [(path.name, path.read_bytes()) for path in evtx_cases.corpus_files()]
    cases += [("varied fields", evtx_cases.varied_fields_file())]
    cases += evtx_cases.generated_cases(seed=29, count=8) + evtx_cases.mutated_cases(seed=31, per_file=4)
    cases += evtx_cases.binxml_cases(seed=37, count=4)
    for number, (label, data) in enumerate(cases):
        with pure():
            reference = evtx_cases.fields(data)
        assert evtx_cases.fields(data, batches=True) == reference, label
        if number % 5 == 0:
            with pure():
                assert evtx_cases.fields(data, batches=True) == reference, label


def test_the_walk_reads_the_eventdata_fields_itself() -> None:
    # Not a vacuous comparison: the walk reads the fields of the shapes it takes (no record made)
    # and leaves the others (a repeated name, mixed content, nested UserData elements) to the tree.
    batches = list(reader.EvtxReader(evtx_cases.varied_fields_file()).batches())
    rows = [(batch, i) for batch in batches for i in range(len(batch))]
    read = [batch.event_data(i) for batch, i in rows if batch.has_data(i)]
    left = {number for number, (batch, i) in enumerate(rows) if not batch.has_data(i)}
    # kinds 2 and 4 of the file's nine, the odd ones of 3 and 5; beside them only records whose XML the
    # compiled core leaves to Python (Real32, Real64)
    shapes = {number for number in range(250) if number % 9 in (2, 4) or (number % 9 in (3, 5) and number % 2)}
    assert shapes <= left and all(rows[number][0].xml[rows[number][1]] is None for number in left - shapes)
    assert len(read) > 120
    assert not any(batch._records for batch in batches)
    assert {"Literal": "text 1 é", "Empty": None, "Data1": -2, "Data2": 1, "Binary": b"\x01\x01\x01"} in read
    assert {"Data1": "one", "Data2": None, "Data3": "three", "After": 7} in read and {"Data1": None, "Data2": 5, "After": 65534} in read
    assert {"Field": 7, "Note": "literal", "None": None} in read
    assert {"Null": None, "Value": uuid.UUID(int=7)} in read and {"Value": b"\x01\x02\x03", "Index": 189} in read
    security = next(reader.EvtxReader((evtx_cases.CORPUS / "security.evtx").read_bytes()).batches())
    assert sum(security.has_data(i) for i in range(len(security))) > 80
    groups = security.data_columns()
    assert sum(len(group.rows) for group in groups) == len(security)
    assert any("TargetUserName" in group.names for group in groups)


def test_the_walk_leaves_out_the_columns_it_is_not_asked_for() -> None:
    # walk(system=False, data=False): the XML alone; the facts and fields then come from the tree.
    data = evtx_cases.generated_file(40)
    full = list(reader.EvtxReader(data).batches())
    bare = list(reader.EvtxReader(data).batches(system=False, data=False))
    assert [batch.xml for batch in bare] == [batch.xml for batch in full]
    assert all(batch.unread_rows() == list(range(len(batch))) and not any(map(batch.has_data, range(len(batch)))) for batch in bare)
    assert [batch.header(i).as_dict() for batch in bare for i in range(len(batch))] == [
        batch.header(i).as_dict() for batch in full for i in range(len(batch))
    ]
    assert [batch.event_data(i) for batch in bare for i in range(len(batch))] == [batch.event_data(i) for batch in full for i in range(len(batch))]


def test_the_twin_takes_a_chunk_back_after_a_damaged_record() -> None:
    # A record whose BinXml the pure parser rejects costs that record (a loss, counted); the records
    # after it in its chunk come from the compiled walk again (same template definitions cached on
    # both sides), and every engine and path reads the file the same.
    data = bytearray(evtx_cases.generated_file(400))
    base = 0x1000 + 0x200
    pos = base
    for _ in range(5):
        pos += int.from_bytes(data[pos + 4 : pos + 8], "little")
    data[pos + 24 + 4] = 0x8E  # the record's template instance token: unknown
    damaged = bytes(data)
    fast = reader.EvtxReader(damaged)
    batches = list(fast.batches())
    first = batches[0]
    assert fast.stats.records_damaged == 1 and len(fast.losses) == 1
    assert sum(len(batch) for batch in batches) == 399
    assert first.record_ids[5] == 7 and all(row not in first._records for row in range(5, len(first)))
    assert evtx_cases.read(damaged, batches=True) == evtx_cases.read(damaged)
    with pure():
        assert evtx_cases.read(damaged, batches=True) == evtx_cases.read(damaged) == both(damaged)[0]
    assert evtx_cases.fields(damaged, batches=True) == evtx_cases.fields(damaged)
