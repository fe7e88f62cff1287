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
    "etw::: /pid != 4 && (cpu == 0 || tid > 100)/ { @a[probemod] = count(); @b[cpu] = avg(tid); @c = avg(pid); }",
    "etw::: /!(pid < 1000)/ { @q = quantize(tid); @l[probename] = lquantize(pid, 0, 10000, 500); @n = count(); }",
    "etw::: /pid >= -1/ { @m[pid] = min(tid); } etw:::1 /tid < 0x7fffffff/ { @x[probename, cpu] = max(pid); }",
    "etw::: { @a[pid] = count(); @b[tid, cpu] = count(); @c[probename, pid] = count(); } etw:::1 { @d[probeprov, cpu] = count(); }",
]
# Values tested alone, and arithmetic wrapped to its type (32-bit unsigned, 64-bit signed, 64-bit
# unsigned); sums past 64 bits may be kept wrapped or not (what is shown is the same).
ARITHMETIC = [
    "etw::: /pid/ { @a[probename] = count(); } etw::: /!tid || !(cpu)/ { @b = count(); }",
    "etw::: /pid + 1 > 4 && (tid & 1) == 0/ { @a[probename] = sum(pid * 2); @b = min(-pid); @c[cpu] = max(~tid); @d = avg(pid - tid); }",
    "etw::: /(pid ^ tid) | 1/ { @a = sum(pid * 0x7fffffffffff); @b[pid] = min(-(tid * 0x100000001)); @c = max(tid - 0xffffffffffffffff); }",
    "etw::: { @q[probename] = quantize(pid - tid); @l = lquantize(tid * 3 - pid, -1000, 100000, 1000); @s = sum(+pid & ~0xff); }",
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


@pytest.mark.parametrize("text", ARITHMETIC)
def test_arithmetic_and_values_tested_alone_column_wise_show_what_records_show(text: str) -> None:
    path = str(corpus_path("etl", "tx", "Process.etl"))
    by_columns = _run(text, path, True)
    by_records = _run(text, path, False)
    assert by_columns[1:] == by_records[1:]
    assert by_columns[1] > 0 and by_columns[2].count("\n") > 4


@pytest.mark.parametrize("parts", [("tx", "Process.etl"), ("perfview", "gcevents.etl")])
def test_header_only_counts_equal_record_by_record_on_the_first_pass_and_after(parts: tuple[str, ...], tmp_path: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Column-wise with no index yet (the index is built in the same pass) and with the stored
    index (its header columns read alone), in blocks of a few hundred rows."""
    path = str(corpus_path("etl", *parts))
    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "300")
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "cold"))
    text = PROGRAMS[-1] + " etw::: { @e[pid, tid] = count(); @f[probefunc] = count(); }"
    cold = _run(text, path, True)
    warm = _run(text, path, True)
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "records"))
    assert cold == warm == _run(text, path, False)
    assert cold[1] > 0 and len(cold[0]["e"]) > 1


@pytest.mark.parametrize("text", [
    "etw:Microsoft-Windows-Kernel-Process::1 { @s[probename] = sum(args->ParentProcessID); }"
    "etw:Microsoft-Windows-Kernel-Process::1, etw:Microsoft-Windows-Kernel-Process::2 "
    "{ @m[cpu] = max(args->ProcessID); @n = min(args->ProcessID); }",
    "etw:Microsoft-Windows-Kernel-Process::1 /args->ParentProcessID && args->ProcessID - args->ParentProcessID > 100/ "
    "{ @s[probename] = sum(args->ProcessID * 3 + args->ParentProcessID); @q = quantize(args->ProcessID ^ pid); @m = min(-args->ProcessID); }",
])  # fmt: skip
def test_event_fields_at_fixed_places_read_column_wise(text: str) -> None:
    from openetw.probe.run.adapter import Catalog

    path = str(corpus_path("etl", "tx", "Process.etl"))
    manifest = str(corpus_path("manifests", "Win10-17134", "Microsoft-Windows-Kernel-Process.xml"))
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
    for text in ("etw::: /execname == \"x\"/ { @ = count(); }", "etw::: { @ = count(); exit(0); }", "etw::: { @[execname] = count(); }",
                 "tick-1s { } etw::: { @ = count(); }", "etw::: { @ = stddev(pid); }", "etw::: { @ = sum(pid / 2); }", "etw::: { @ = sum(pid >> 1); }",
                 "etw::: /(pid << 1) > 4/ { @ = count(); }", "etw::: { @ = sum(pid % 3); }", "etw::: /pid > 4 ? 1 : 0/ { @ = count(); }",
                 "etw::: { @ = llquantize(pid, 10, 0, 3, 10); }"):  # fmt: skip
        assert compile_script(text).columnar() is None, text


@pytest.mark.parametrize("parts", [("tx", "Process.etl"), ("tx", "HTTP_Server.etl"), ("perfview", "gcevents.etl"),
                                   ("perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")])  # fmt: skip
def test_the_catalog_from_the_index_equals_a_pass_over_every_record(parts: tuple[str, ...]) -> None:
    """Field types come from schema lookups over the index's kinds of event (in-trace metadata,
    TraceLogging and extended-data events included), the same catalog a pass gives."""
    from openetw.probe.run.adapter import Catalog

    path = str(corpus_path("etl", *parts))
    by_index = Catalog.from_index(TraceFiles([path], manifests=[]))
    by_pass = Catalog.scan_records(TraceFiles([path], manifests=[]))
    assert by_index is not None
    assert by_index.items() == by_pass.items() and by_pass.items()
    assert {key: schema for key, (schema, _size) in by_index.schemas.items()}.keys() == by_pass.schemas.keys()


def test_the_catalog_of_unindexed_files_is_a_pass() -> None:
    from openetw.probe.run.adapter import Catalog

    files = TraceFiles([str(corpus_path("etl", "tx", "Process.etl"))], manifests=[], index=False)
    assert Catalog.from_index(files) is None
    assert Catalog.scan(files).items()


def test_the_catalog_of_several_files_from_their_indexes_equals_a_pass() -> None:
    from openetw.probe.run.adapter import Catalog

    paths = [str(corpus_path("etl", "tx", "Process.etl")), str(corpus_path("etl", "perfview", "gcrundownevents.etl"))]
    by_index = Catalog.from_index(TraceFiles(paths, manifests=[]))
    by_pass = Catalog.scan_records(TraceFiles(paths, manifests=[]))
    assert by_index is not None
    assert by_index.items() == by_pass.items()


def test_the_catalog_reads_records_only_in_blocks_with_kinds_not_met_before(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """diaghub.etl relogged three times over, in small blocks: the same catalog as a pass, and no
    record of the third copy read (the records that teach schemas, in every copy, are shown to
    the decoder only when a lookup follows them; a later copy has no kind of event not met)."""
    import os

    from openetw.consumer.index import EtlIndex
    from openetw.probe.run.adapter import Catalog
    from openetw.testing.large import repeat_buffers

    monkeypatch.setenv("OPENETW_INDEX_BLOCK_ROWS", "2000")
    monkeypatch.setenv("OPENETW_INDEX_DIR", str(tmp_path / "index"))
    path = str(tmp_path / "relogged.etl")
    one_copy = repeat_buffers(corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl"), path, 0)
    repeat_buffers(corpus_path("etl", "perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl"), path, 2 * os.path.getsize(path))
    read: list[int] = []
    real = EtlIndex.records_at

    def records_at(index: EtlIndex, rows: Any) -> Any:
        read.extend(rows.tolist())
        return real(index, rows)

    monkeypatch.setattr(EtlIndex, "records_at", records_at)
    by_index = Catalog.from_index(TraceFiles([path], manifests=[]))
    monkeypatch.setattr(EtlIndex, "records_at", real)
    by_pass = Catalog.scan_records(TraceFiles([path], manifests=[]))
    assert by_index is not None and by_index.items() == by_pass.items() and by_pass.items()
    assert {key: size for key, (_schema, size) in by_index.schemas.items()} == {key: size for key, (_schema, size) in by_pass.schemas.items()}
    assert len(EtlIndex.open(path)) > 2 * one_copy and read and max(read) < 2 * one_copy  # (the third copy: nothing read)
