"""The D language: parsing, checking and compiling, without any trace file."""

from __future__ import annotations

import pytest

from openetw.probe.lang.aggregate import llquantize_bucket, lquantize_bucket, quantize_bucket
from openetw.probe.lang.descriptions import EventIdentity, parse_description
from openetw.probe.lang.errors import ProbeCompileError
from openetw.probe.lang.formatting import Format
from openetw.probe.lang.program import compile_script

BAD_SCRIPTS = [
    ("BEGIN { x = 1 }\nEND { y = ; }", 2, 11, "expected an expression, found ';'"),
    ("BEGIN { printf(\"%d\\n\", \"text\"); }", 1, 24, "needs an integer"),
    ("BEGIN { x = \"a\" + 1; }", 1, 17, "operator '+' cannot be applied to a string"),
    ("BEGIN\n{\n  @a = count();\n  @a = sum(1);\n}", 4, 8, "@a is count() at line 3, not sum()"),
    ("BEGIN { trace(nosuch); }", 1, 15, "undefined variable 'nosuch'"),
    ("BEGIN { x = 1; x = \"s\"; }", 1, 16, "cannot assign string to 'x' of type int64_t"),
    ("BEGIN { @q = lquantize(1, 10, 0, 1); }", 1, 27, "lquantize() needs low < high"),
    ("typedef struct { int a; } t;\nBEGIN { trace(((t *)arg0)->b); }", 2, 16, "t has no member 'b'"),
    ("BEGIN { printf(\"%d %d\\n\", 1); }", 1, 9, "2 conversion(s) but 1 argument(s)"),
    ("BEGIN { x = $3; }", 1, 13, "macro argument $3 is not defined"),
    ("etw:::generic_event /pid == 1 { }", 1, 31, "expected '/'"),
    ("BEGIN { @a = frobnicate(1); }", 1, 14, "'frobnicate' is not an aggregating function"),
    ("BEGIN { trace(\"abc); }", 1, 15, "string is not closed"),
    ("#pragma D option nosuch=1\nBEGIN { }", 1, 1, "unknown option 'nosuch'"),
    ("etw:a:b:c:d { }", 1, 1, "at most four fields"),
    ("BEGIN { }\n  syscall::open:entry { }", 2, 3, "unknown probe provider 'syscall'"),
    ("BEGIN { trace(*arg0); }", 1, 15, "'*' needs a pointer"),
    ("BEGIN { exit(\"x\"); }", 1, 14, "argument 1 of exit() must be an integer"),
    ("BEGIN { printa(@nothing); }", 1, 16, "@nothing is never given an aggregating function"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), BAD_SCRIPTS)
def test_bad_scripts_name_line_column_and_what_was_expected(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ProbeCompileError) as caught:
        compile_script(text, name="bad.d", macros=["1"])
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert message in error.message
    assert str(error).startswith(f"bad.d:{line}:{column}: ")
    assert error.exit_code == 2


def test_args_fields_are_typed_by_the_schema_at_compile_time() -> None:
    from openetw.probe.lang.types import STRING, IntType

    fields = {"Count": IntType("uint32_t", 4, False), "Name": STRING, "S": {"Member": STRING}}
    compile_script("etw:::1 { @[args->Name, args->S.Member] = sum(args->Count); }", fields_of=lambda specs: fields)
    with pytest.raises(ProbeCompileError, match="has no field 'Missing'") as caught:
        compile_script("etw:::1 {\n  @ = sum(args->Missing); }", fields_of=lambda specs: fields)
    assert caught.value.line == 2
    with pytest.raises(ProbeCompileError, match="needs an integer, not string"):
        compile_script("etw:::1 { @ = sum(args->Name); }", fields_of=lambda specs: fields)
    with pytest.raises(ProbeCompileError, match="no event these probes match has a known schema"):
        compile_script("etw:::1 { @ = sum(args->Count); }", fields_of=lambda specs: None)


def test_a_clause_compiles_to_one_function_with_its_predicate_inlined() -> None:
    program = compile_script("etw:::generic_event /pid == 4/ { @[probemod] = count(); }\nEND { exit(0); }")
    source = program.python_source
    assert source.count("\ndef _c") == 2
    assert "if not ((rec.pid == 4)): return  # line 1" in source
    assert "A_.get(" in source


def test_integer_casts_truncate_and_wrap_as_in_c() -> None:
    from openetw.probe.lang.output import Output

    out: list[str] = []
    program = compile_script(
        'BEGIN { printf("%d %d %d %u %d %d\\n", (uint8_t)300, (int8_t)200, (int16_t)0x18000, (uint32_t)-1, -7 / 2, -7 % 2);'
        ' x = 0x7fffffffffffffff; x = x + 1; printf("%d\\n", x); exit(0); }'
    )
    functions, _ = program.load({"_field": None, "_ld": None, "_execname": None, "_ppid": None, "_timestamp": None,
                                 "_walltime": None, "_ARG0": 0}, Output(out.append, quiet=True))  # fmt: skip

    class Rec:
        pid = tid = cpu = 0

    functions["_c0"](Rec(), ("dtrace", "", "", "BEGIN"))
    assert "".join(out) == f"44 -56 -32768 4294967295 -3 -1\n{-(1 << 63)}\n"


def test_printf_conversions() -> None:
    assert Format("%5d|%-4s|%x|%X|%o|%c|%%|%lld|%u").format((42, "ab", 255, 255, 8, 65, -1, -1)) == (
        "   42|ab  |ff|FF|10|A|%|-1|18446744073709551615"
    )


def test_quantize_buckets() -> None:
    assert [quantize_bucket(v) for v in (0, 1, 2, 3, 4, 7, 8, -1, -5)] == [0, 1, 2, 2, 4, 4, 8, -1, -4]
    assert [lquantize_bucket(v, 0, 100, 10) for v in (-1, 0, 9, 10, 99, 100, 1000)] == [-1, 0, 0, 10, 90, 100, 100]
    assert [llquantize_bucket(v, 10, 0, 2, 10) for v in (0, 1, 9, 10, 11, 99, 100, 150, 999, 1000)] == [-1, 1, 9, 10, 10, 90, 100, 100, 900, 1000]


def test_probe_descriptions_match_as_an_etw_session_enables() -> None:
    event = EventIdentity("d1d93ef7-e1f2-4f45-9943-03d245fe6c00", "Microsoft-Windows-Kernel-Memory", 4, 0x10, 12, "MemNodeInfo")
    assert parse_description("etw:d1d93ef7-e1f2-4f45-9943-03d245fe6c00:0xff_0xffffffffffffffff:12").match(event) == (
        "etw", event.guid, "0xff_0xffffffffffffffff", "12")
    assert parse_description("etw:Microsoft-Windows-Kernel-*::MemNodeInfo").match(event) is not None
    assert parse_description("etw:::generic_event").match(event) is not None
    assert parse_description("etw:*:0x03_0xffffffffffffffff:*").match(event) is None  # level 4 > 3
    assert parse_description("etw:*:0x05_0x0000000000000001:*").match(event) is None  # keyword 0x10 & 0x1 == 0
    assert parse_description("etw:*:0x05_0x0000000000000010:1?").match(event) is not None
    assert parse_description("etw:::13").match(event) is None
    assert parse_description("tick-10ms").period == 10_000_000
    assert parse_description("interval:s:2").period == 2_000_000_000
    assert parse_description("BEGIN").special == "BEGIN"


def test_a_hundred_line_script_compiles() -> None:
    lines = ["etw:::generic_event", "{"]
    lines += [f"    @a{i}[probemod, pid] = count();" if i % 2 else f"    self->v{i} = tid + {i};" for i in range(96)]
    lines += ["}", "END { printa(@a1); }"]
    program = compile_script("\n".join(lines))
    assert len(program.aggregations) == 48


def test_mangled_programs_only_raise_compile_errors() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from openetw.errors import OpenEtwError

    base = (
        'typedef struct { uint32_t a; uint64_t b; } s;\nBEGIN { x = 1; }\n'
        'etw:::generic_event /pid > 2 && x/ { @[probemod, tid] = sum(((s *)arg0)->b); self->t = x ? 1 : 2; printf("%d %s", x, "y"); }\n'
        'END { printa("%s %d %@d\\n", @); exit(x); }'
    )

    @settings(max_examples=150, deadline=None)
    @given(st.integers(0, len(base) - 1), st.integers(0, 8), st.text(alphabet="(){}[]/;,@$\"'`*&-+<>=!?:.#x0 \n", max_size=4))
    def mangle(at: int, cut: int, insert: str) -> None:
        text = base[:at] + insert + base[at + cut :]
        try:
            program = compile_script(text, macros=["1"])
        except OpenEtwError as error:
            assert isinstance(error, ProbeCompileError)
            assert error.line is None or 1 <= error.line <= text.count("\n") + 1
        else:
            compile(program.python_source, "<mangled>", "exec")

    mangle()
