"""Decode coverage of the ETL corpus: the share of records decoded into named fields, per file.

Every corpus manifest is available (the Windows 10 set, the authored samples, PerfView's and
dotnet/runtime's .NET manifests, Tx's HTTP manifest), loaded lazily per provider GUID as
``report --manifest`` does, plus what the traces carry themselves (TraceLogging metadata,
EventSource manifests, KernelTraceControl TDH metadata) and the kernel's classic layouts.
Each file must decode at least 95% of its records; the providers that lack a schema are
asserted to be exactly the ones listed, with the reason no schema exists for them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from openetw.etl import EtlReader
from openetw.events.decoded import decode_records
from openetw.events.registry import LazyManifestRegistry, build_registry
from openetw.tdh.context import DecodeContext
from tests.conftest import corpus_path

MINIMUM_SHARE = 0.95
DIAGHUB = ("perfview", "diaghub-dotnetcore3.1-win-x64-diagsession")

CORPUS_FILES = [
    ("etl-parser", "AMSITrace.etl"),
    ("etl-parser", "ShutdownPerfDiagLogger.etl"),
    ("etl-parser", "lxcore_kernel.etl"),
    ("krabsetw", "powershell.etl"),
    ("perfview", "SelfDescribingSingleEvent.etl"),
    (*DIAGHUB, "diaghub.etl"),
    (*DIAGHUB, "diaghub.kernel.1.etl"),
    (*DIAGHUB, "diaghub.user_injected.1.etl"),
    ("perfview", "gcevents.etl"),
    ("perfview", "gcrundownevents.etl"),
    ("perfview", "net.4.5.2.x64.etl"),
    ("perfview", "primitive-types.etl"),
    ("tx", "BondEtwSample.etl"),
    ("tx", "CrossMachineHTTP.etl"),
    ("tx", "HTTP_Server.etl"),
    ("tx", "Process.etl"),
]

# Records whose provider (name, else GUID) has no schema for them in any manifest of the corpus.
LACKING_SCHEMA: dict[str, dict[str, str]] = {
    "diaghub.kernel.1.etl": {
        "6f669bfa-816a-4204-a824-47c8e6a00474": "an EVENT_HEADER provider in a kernel session that no manifest describes",
    },
    "diaghub.user_injected.1.etl": {
        "9e5f9046-43c6-4f62-ba13-7b19896253ff": "the Visual Studio diagnostics hub's own provider: no manifest in the corpus",
    },
    "gcevents.etl": {
        "Microsoft-Windows-DotNETRuntime": "GC/LOHCompact and GC/FitBucketInfo (.NET 8) are newer than both runtime manifests",
    },
    "gcrundownevents.etl": {
        "Microsoft-Windows-DotNETRuntimeRundown": "GC/SettingsRundown (.NET 8) is newer than both runtime manifests",
    },
}


@pytest.fixture(scope="module")
def registry() -> LazyManifestRegistry:
    manifests = corpus_path("manifests")
    found = build_registry(
        [
            manifests / "Win10-17134",
            manifests / "authored-samples",
            manifests / "perfview",
            manifests / "dotnet-runtime",
            corpus_path("etl", "manifests", "tx"),
        ],
        installed=False,
    )
    assert found.errors == []
    return found  # files are parsed as their providers' records are met


def _coverage(path: Path, registry: LazyManifestRegistry) -> tuple[int, int, Counter[str], Counter[tuple[str, str]]]:
    """(records, decoded, records without a schema by provider, property errors)."""
    records = decoded = 0
    lacking: Counter[str] = Counter()
    errors: Counter[tuple[str, str]] = Counter()
    with EtlReader(path, strict=False) as reader:
        context = DecodeContext(registry)
        for event in decode_records(reader.records(time_order=True), registry, context):
            records += 1
            if event.is_decoded:
                decoded += 1
            elif event.schema is None:
                lacking[event.provider_label] += 1
            else:
                errors.update(event.errors.items())
        assert reader.stats.errors == []
    return records, decoded, lacking, errors


@pytest.mark.parametrize("parts", CORPUS_FILES, ids=[parts[-1] for parts in CORPUS_FILES])
def test_corpus_file_decodes_into_named_fields(parts: tuple[str, ...], registry: LazyManifestRegistry) -> None:
    path = corpus_path("etl", *parts)
    name = parts[-1]
    records, decoded, lacking, errors = _coverage(path, registry)
    share = decoded / records
    print(f"\n{name}: {decoded}/{records} records decoded ({share:.1%}); lacking a schema: {dict(lacking) or 'none'}")
    assert set(lacking) == set(LACKING_SCHEMA.get(name, {})), "providers without a schema changed"
    assert dict(errors) == {}, "records with a schema failed to decode"
    if share < MINIMUM_SHARE:
        assert name in LACKING_SCHEMA, f"{name}: only {share:.1%} decoded"


def test_the_registry_parses_only_the_manifests_it_needs() -> None:
    registry = build_registry([corpus_path("manifests", "Win10-17134"), corpus_path("manifests", "authored-samples")], installed=False)
    # Parsed up front: only a file a quick scan cannot index (PowerShell's declares a counter provider too).
    assert registry.parsed_files <= 1
    before = registry.parsed_files
    records, decoded, _, _ = _coverage(corpus_path("etl", "krabsetw", "powershell.etl"), registry)
    assert decoded == records
    assert 1 <= registry.parsed_files - before <= 2  # the PowerShell provider's file, not the corpus' 873


def test_http_urls_logged_without_their_nul_decode_to_the_end_of_the_payload(registry: LazyManifestRegistry) -> None:
    # HttpService logs the URL of each parsed request as the last property, without its NUL.
    unterminated = []
    with EtlReader(corpus_path("etl", "tx", "HTTP_Server.etl"), strict=False) as reader:
        for event in decode_records(reader.records(), registry, DecodeContext(registry)):
            if event.schema is None or event.schema.property_named("Url") is None:
                continue
            assert event.is_decoded
            url = event.properties["Url"]
            if not event.record.user_data.endswith(b"\0\0"):
                assert event.record.user_data.endswith(url.encode("utf-16-le"))
                unterminated.append(url)
    assert len(unterminated) == 291 and all(url.startswith("http://georgis2:80/") for url in unterminated)
