"""The bytes of timeline exports of corpus traces, pinned: a change meant only to make the
export faster must leave every byte of the Perfetto and Chrome files as it was.

A change meant to alter the output updates the digests below, after checking the new files
(``openetw export --check``, the re-parse tests of ``test_timeline``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from openetw.export.timeline import export_timeline
from tests.conftest import corpus_path
from tests.export.conftest import registry

# (trace under the corpus' etl/, format): SHA-256 of the exported file
DIGESTS = {
    ("perfview/net.4.5.2.x64.etl", "perfetto"): "a963e20fc7453d5f42c292f97155ae0e4b5a89c78ccccaa04bac40929cfdfdff",
    ("perfview/net.4.5.2.x64.etl", "chrome"): "f70c0655e60c53c5d242a56e3202b25eebf205d5826645d400bbba8b53222fc5",
    ("etl-parser/ShutdownPerfDiagLogger.etl", "perfetto"): "b28e4c31f0cfe808a5a6715e0dae24a886599e12bdeaf1d8ff1f50a102139cae",
    ("etl-parser/ShutdownPerfDiagLogger.etl", "chrome"): "e7a956b93d7157c2617767347ef36c6a269fe0beb4c69306db2478d1e350918f",
    ("tx/Process.etl", "perfetto"): "55c362ca659ff5985f1cbf4df25c21c5eb9a91fb6eed6c3d401f12c714f66834",
    ("tx/Process.etl", "chrome"): "7dfc50c4eae33c2f8d6d8485725b71da10f9f5218292feaab6b231e11f015e71",
    ("tx/CrossMachineHTTP.etl", "perfetto"): "3f1d21e67455b721826eaa1a7fb5887797574fa07d99e7b6d4b42c332f1e285a",
    ("tx/CrossMachineHTTP.etl", "chrome"): "7ddc5f869a1cf6198ed8c93fc142cefa81a7ee5ec522007604f7f094bce0659d",
    ("tx/HTTP_Server.etl", "perfetto"): "4903bbd523b0f68387ab0985126754cae89b67c8441b29e1350089798b5a6206",
    ("tx/HTTP_Server.etl", "chrome"): "e77c289487857d58df2224ba66f3f01b2e42eee07281059de88c43f88c515adb",
    ("perfview/gcevents.etl", "chrome"): "411f6e8782ec09e71f205c7d8e9b9832f5fdeadf15eb5ebfd80089d18df61d34",
    ("krabsetw/powershell.etl", "perfetto"): "2d53fbd1ac53bc41f4c89ad50f1ed93d66cde2f0313518e6a61cabd7ef9aa084",
}


def exported_digest(trace: str, fmt: str, target: Path) -> str:
    export_timeline([str(corpus_path("etl", *trace.split("/")))], str(target), fmt, registry=registry())
    return hashlib.sha256(target.read_bytes()).hexdigest()


@pytest.mark.parametrize(("trace", "fmt"), sorted(DIGESTS))
def test_timeline_export_bytes_are_unchanged(trace: str, fmt: str, tmp_path: Path) -> None:
    assert exported_digest(trace, fmt, tmp_path / f"out.{fmt}") == DIGESTS[(trace, fmt)]
