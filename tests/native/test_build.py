"""The compiled core's build: generated constants are current, the engine is chosen as documented."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import openetw._native as native
from openetw._native import gen
from openetw.etl import framing as F
from openetw.etl import layouts as L
from openetw.etl import lzxpress as Z

_read = native.module("_read")
# Under CI the compiled core must be built (gcc is there): these never skip there unless the pure
# path is asked for.
needs_native = pytest.mark.skipif(
    os.environ.get(native.PURE_VARIABLE) == "1" or (_read is None and os.environ.get("CI") != "true"),
    reason=f"compiled core not active here: {native.reason()}",
)


def test_generated_headers_are_current() -> None:
    # Stale when a layout, a framing row or a codec constant changed without `python -m openetw._native.gen`.
    for path, text in gen.generated().items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m openetw._native.gen"
    assert gen.main(["--check"]) == 0


def test_every_compiled_module_has_a_stub_and_a_generator_or_none() -> None:
    for source in gen.HERE.glob("_*.c"):
        assert source.with_suffix(".pyi").exists(), f"{source.name} has no stub"


@needs_native
def test_the_compiled_module_was_built_from_the_current_constants() -> None:
    assert _read is not None
    built = _read.constants()
    from openetw._native.gen_read import KIND_NUMBERS

    for header_type, row in F.HEADER_KINDS.items():
        codes = "".join(code for _, code in row.layout.fields)
        assert built["header_kinds"][header_type] == (KIND_NUMBERS[row.kind], row.header_size, row.size_at, codes, row.structure)
    assert set(built["header_kinds"]) == set(F.HEADER_KINDS)
    m = F.MESSAGE_KIND
    assert built["message"] == (KIND_NUMBERS[m.kind], m.header_size, m.size_at, "".join(c for _, c in m.layout.fields), m.structure)
    assert built["records_start"] == F.RECORDS_START == L.BUFFER_HEADER_SIZE
    assert (built["typed_flags_mask"], built["message_flags_mask"], built["message_flags"]) == (F.TYPED_FLAGS_MASK, F.MESSAGE_FLAGS_MASK, F.MESSAGE_FLAGS)
    assert (built["marker_flags_shift"], built["marker_key_shift"], built["end_of_data"]) == (F.MARKER_FLAGS_SHIFT, F.MARKER_KEY_SHIFT, F.END_OF_DATA)
    assert built["record_alignment"] == F.RECORD_ALIGNMENT
    assert (built["min_match"], built["max_distance"], built["smallest_length_field"]) == (Z.MIN_MATCH, Z.MAX_DISTANCE, Z._SMALLEST_LENGTH_FIELD)


def _engine_in_child(**env: str) -> str:
    code = "import openetw._native as n; print(n.engine())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_openetw_pure_forces_the_python_engine() -> None:
    assert _engine_in_child(OPENETW_PURE="1") == "python"


@needs_native
def test_the_native_engine_is_the_default_where_built() -> None:
    assert _engine_in_child(OPENETW_PURE="0") == "native"
    assert native.module("_read") is _read
