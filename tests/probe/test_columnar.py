"""Header-only programs give the same aggregations column-wise as record by record."""

from __future__ import annotations

from typing import Any

import pytest

from openetw.probe.lang.program import compile_script
from openetw.probe.run.adapter import TraceFiles
from openetw.probe.run.runner import ProbeRun
from tests.conftest import corpus_path

PROGRAMS = [
    "etw:::generic_event { @[probemod] = count(); }",
    "etw::: { @a[probemod, probename] = count(); @b[pid, cpu] = sum(tid); @c[probefunc] = min(pid); @d = max(cpu); }",
    "etw:*:0x04_0x8000000000000010: { @[probename, tid] = count(); } END { printa(@); }",
    "BEGIN { n = 1; } etw:22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716::1?, etw:::2 { @[probemod, probename] = sum(pid); }",
]


def _run(program_text: str, path: str, columnar: bool) -> tuple[dict[str, Any], int, str]:
    program = compile_script(program_text)
    out: list[str] = []
    run = ProbeRun(program, TraceFiles([path], manifests=[]), write=out.append, quiet=True, columnar=columnar)
    assert run.run() == 0
    assert run.ran_columnar == columnar
    return {name: dict(entry[1]) for name, entry in run.output.aggregations.items()}, run.firings, "".join(out)


@pytest.mark.parametrize("text", PROGRAMS)
def test_column_wise_equals_record_by_record(text: str) -> None:
    path = str(corpus_path("etl", "tx", "Process.etl"))
    by_columns = _run(text, path, True)
    by_records = _run(text, path, False)
    assert by_columns == by_records
    assert by_columns[1] > 0


def test_event_fields_at_fixed_places_read_column_wise() -> None:
    from openetw.probe.run.adapter import Catalog

    path = str(corpus_path("etl", "tx", "Process.etl"))
    manifest = str(corpus_path("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml"))
    text = ("etw:Microsoft-Windows-Kernel-Process::1 { @s[probename] = sum(args->ParentProcessID); }"
            "etw:Microsoft-Windows-Kernel-Process::1, etw:Microsoft-Windows-Kernel-Process::2 "
            "{ @m[cpu] = max(args->ProcessID); @n = min(args->ProcessID); }")  # fmt: skip
    results = []
    for columnar in (True, False):
        files = TraceFiles([path], manifests=[manifest])
        catalog = Catalog.scan(files)

        def fields_of(specs: list[str], catalog: Any = catalog) -> Any:
            from openetw.probe.lang.descriptions import parse_description

            found = [f for identity, f, _ in catalog.items() if f and any(parse_description(s).match(identity) for s in specs)]
            return found[0] if found else None

        program = compile_script(text, fields_of=fields_of)
        run = ProbeRun(program, files, write=lambda s: None, quiet=True, columnar=columnar, catalog=catalog)
        assert run.run() == 0 and run.ran_columnar == columnar
        results.append({name: dict(entry[1]) for name, entry in run.output.aggregations.items()})
    assert results[0] == results[1] and results[0]["s"]


def test_programs_that_need_records_do_not_run_column_wise() -> None:
    for text in ("etw::: /pid == 4/ { @ = count(); }", "etw::: { @ = count(); exit(0); }", "etw::: { @[execname] = count(); }",
                 "tick-1s { } etw::: { @ = count(); }", "etw::: { @ = quantize(pid); }"):  # fmt: skip
        assert compile_script(text).columnar() is None, text
