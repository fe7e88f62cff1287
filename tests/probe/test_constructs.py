"""Each construct of the documented language subset, run over a small trace written here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.testing import EventRecordBuilder
from tests.probe.helpers import json_records, run_probe

PROVIDER = "6a1f0b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b"
SECOND = 1_000_000_000  # the writer's clock counts nanoseconds


@pytest.fixture(scope="module")
def trace(tmp_path_factory: Any) -> Path:
    """Ten TraceLogging events, one a second: Count = n, Name = "item<n>", on threads 100 and 101."""
    path = tmp_path_factory.mktemp("constructs") / "t.etl"
    clock = linux_trace_clock()
    with EtlWriter(path, header=new_logfile_header(clock=clock, buffer_size=4096, number_of_processors=2)) as writer:
        for n in range(10):
            builder = EventRecordBuilder(PROVIDER, 0, level=4, keyword=0x2, pid=7, tid=100 + n % 2, cpu=n % 2,
                                         timestamp=clock.reference_timestamp + n * SECOND)  # fmt: skip
            builder.add_property("Count", n).add_property("Name", f"C:\\dir\\item{n}.txt")
            writer.write(builder.pack_tracelogging("Thing", provider_name="Test.Constructs"))
    return path


def probe(capsys: Any, trace: Path, program: str, *extra: str) -> tuple[int, str, str]:
    return run_probe(capsys, "--file", str(trace), "-q", *extra, "-n", program)


def test_variables_arrays_thread_and_clause_locals(capsys: Any, trace: Path) -> None:
    program = """
    etw:::Thing {
        total += args->Count;
        seen[tid] = seen[tid] + 1;
        this->double = args->Count * 2;
        self->last = this->double;
        pairs[tid, args->Name] = this->double;
    }
    END { printf("%d %d %d %d\\n", total, seen[100], seen[101], pairs[101, "C:\\\\dir\\\\item9.txt"]); }"""
    status, out, err = probe(capsys, trace, program)
    assert (status, out) == (0, "45 5 5 18\n"), err
    status, out, _ = probe(capsys, trace, "etw:::Thing { self->n = self->n + 1; } etw:::Thing /self->n == 3/ { printf(\"%d \", tid); }")
    assert status == 0 and out == "100 101 "


def test_if_else_conditional_and_operators(capsys: Any, trace: Path) -> None:
    program = """etw:::Thing {
        if (args->Count % 2 == 0) { printf("e"); } else if (args->Count == 3) { printf("3"); } else printf("o");
        printf("%s", args->Count > 7 ? "!" : "");
        printf("%d", (args->Count << 1 | 1) ^ 1);
    }"""
    status, out, _ = probe(capsys, trace, program)
    assert status == 0 and out == "e0o2e436e8o10e12o14e!16o!18"


def test_string_functions(capsys: Any, trace: Path) -> None:
    program = """etw:::Thing /args->Count == 4/ {
        printf("%d|%s|%s|%s|%d|%s|%s|%s|%s|%s|%s|%s\\n", strlen(args->Name), strjoin("a", "b"), substr(args->Name, 3),
               substr(args->Name, 3, 3), index(args->Name, "item"), strstr(args->Name, "item"), basename(args->Name),
               dirname(args->Name), lltostr(255, 16), stringof(42), toupper("x"), lltostr(-5));
    }"""
    status, out, _ = probe(capsys, trace, program)
    assert status == 0 and out == "16|ab|dir\\item4.txt|dir|7|item4.txt|item4.txt|C:\\dir|0xff|42|X|-5\n"


def test_builtins(capsys: Any, trace: Path) -> None:
    program = """etw:::Thing /args->Count == 1/ {
        printf("%d %d %d %s %s %s %s %d %d\\n", pid, tid, cpu, probeprov, probemod, probefunc, probename,
               timestamp, walltimestamp > 1000000000000000000);
    }"""
    status, out, _ = probe(capsys, trace, program)
    assert status == 0 and out == f"7 101 1 etw {PROVIDER} 0x04_0x0000000000000002 Thing 1000000000 1\n"


def test_trace_print_and_default_output(capsys: Any, trace: Path) -> None:
    status, out, _ = probe(capsys, trace, 'etw:::Thing /args->Count < 2/ { trace(args->Count); print(args->Name); }')
    assert status == 0 and out == "0\nC:\\dir\\item0.txt\n1\nC:\\dir\\item1.txt\n"
    status, out, _ = run_probe(capsys, "--file", str(trace), "-n", "etw:::Thing /args->Count == 0/ { }")
    assert status == 0 and out.splitlines()[0].split() == ["CPU", "ID", "FUNCTION:NAME"]
    assert out.splitlines()[1].split() == ["0", "1", "0x04_0x0000000000000002:Thing"]


def test_timers_on_trace_time(capsys: Any, trace: Path) -> None:
    status, out, _ = probe(capsys, trace, 'tick-2s { printf("t%d ", timestamp / 1000000000); } interval:ms:4500 { printf("i "); }')
    assert status == 0 and out == "t2 t4 i t6 t8 i "


def test_aggregation_actions_and_options(capsys: Any, trace: Path) -> None:
    program = """etw:::Thing { @c[tid] = count(); @s[tid] = sum(args->Count); }
    END { normalize(@s, 5); printa("%d %@d\\n", @s); denormalize(@s); clear(@c); printa("%d %@d\\n", @c); }"""
    status, out, _ = probe(capsys, trace, program)
    assert status == 0 and out == "100 4\n101 5\n100 0\n101 0\n"
    status, out, _ = probe(capsys, trace, "etw:::Thing { @[args->Count] = sum(args->Count); } END { trunc(@, 2); }", "-x", "aggsortrev")
    assert status == 0 and out.split() == ["9", "9", "8", "8"]
    status, out, err = probe(capsys, trace, "etw:::Thing { @[args->Count] = count(); }", "-x", "aggsize=3", "-f", "json")
    records = json_records(out)
    assert len(records[0]["data"]["@"]) == 3
    assert records[-1] == {"type": "lost", "data": {"events_lost": 0, "buffers_lost": 0, "aggregation_drops": 7, "runtime_errors": 0,
                                                    "decode_errors": 0, "format_errors": 0}}  # fmt: skip
    status, out, err = probe(capsys, trace, "etw:::Thing { @[args->Count] = count(); }", "-x", "aggsize=3")
    assert "openetw probe: 7 aggregation drops" in err
    status, out, _ = probe(capsys, trace, '#pragma D option strsize=5\netw:::Thing /args->Count == 0/ { printf("%s", args->Name); }')
    assert status == 0 and out == "C:\\d"


def test_macros_output_file_json_and_errors(capsys: Any, trace: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.ndjson"
    status, out, _ = run_probe(capsys, "--file", str(trace), "-q", "-f", "json", "-o", str(target), "-n",
                               'etw:::Thing /args->Count == $1/ { printf("%s", $$2); x = 1 / (args->Count - $1); } ERROR { printf("caught"); }',
                               "3", "three")  # fmt: skip
    assert status == 1 and out == ""
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert records[0] == {"type": "printf", "data": "three"}
    assert records[1]["type"] == "error" and records[1]["data"]["line"] == 1 and "division by zero" in records[1]["data"]["message"]
    assert records[2] == {"type": "printf", "data": "caught"}
    assert records[-1]["data"]["runtime_errors"] == 1


def test_quantize_text_layout(capsys: Any, trace: Path) -> None:
    def rows(program: str) -> dict[str, int]:
        status, out, _ = probe(capsys, trace, program)
        assert status == 0 and "value  ------------- Distribution ------------- count" in out
        return {line.split("|")[0].strip(): int(line.split()[-1]) for line in out.splitlines() if "|" in line}

    assert rows("etw:::Thing { @q = quantize(args->Count); }") == {"0": 1, "1": 1, "2": 2, "4": 4, "8": 2}
    assert rows("etw:::Thing { @l = lquantize(args->Count, 2, 8, 3); }") == {"< 2": 2, "2": 3, "5": 3, ">= 8": 2}
    assert rows("etw:::Thing { @l = llquantize(args->Count, 2, 1, 2, 2); }") == {"< 2": 2, "2": 2, "4": 4, ">= 8": 2}


def test_aggregations_are_bounded_by_default_and_drops_counted(capsys: Any, trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openetw.probe.lang import program as program_module

    compiled = program_module.compile_script("etw:::Thing { @[tid] = count(); }")
    assert compiled.options["aggsize"] == program_module.DEFAULT_AGGSIZE > 0  # bounded unless asked otherwise
    assert program_module.compile_script("#pragma D option aggsize=0\nBEGIN { }").options["aggsize"] == 0  # 0: no limit, asked for
    # The default is what bounds a run that sets nothing (a small default here, so ten keys pass it).
    monkeypatch.setitem(program_module._DEFAULTS, "aggsize", 4)
    for program in ("etw:::Thing { @[args->Count] = count(); }", "etw:::Thing { @[args->Name] = sum(args->Count); }"):
        status, out, err = probe(capsys, trace, program, "-f", "json")
        records = json_records(out)
        assert status == 0 and len(records[0]["data"]["@"]) == 4
        assert records[-1]["data"]["aggregation_drops"] == 6, err


@pytest.mark.parametrize("fmt", ["%999999999d", "%.999999999d", "%-70000s", "%65536x"])
def test_printf_widths_and_precisions_are_bounded_with_a_compile_error(fmt: str) -> None:
    from openetw.probe.lang.errors import ProbeCompileError
    from openetw.probe.lang.formatting import MAX_FORMAT_WIDTH
    from openetw.probe.lang.program import compile_script

    with pytest.raises(ProbeCompileError, match=f"above the largest, {MAX_FORMAT_WIDTH}"):
        compile_script(f'BEGIN {{ printf("{fmt}", 1); }}')
    with pytest.raises(ProbeCompileError, match="above the largest"):
        compile_script(f'etw:::Thing {{ @[tid] = count(); }} END {{ printa("{fmt} %@d", @); }}')
    assert compile_script('BEGIN { printf("%65535d|%.3s", 1, "abcdef"); }') is not None
