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
    ("perfview/net.4.5.2.x64.etl", "perfetto"): "d290d840a960e0470404f850860728b05ff753be447a1389c43ca5ae7c276ae9",
    ("perfview/net.4.5.2.x64.etl", "chrome"): "54946649c338f249b77c73778952620ad7ddcf49967167136fea2b6778514739",
    ("etl-parser/ShutdownPerfDiagLogger.etl", "perfetto"): "a3fcdcd948f878c9b69b58d6ae3e6803901e1f0a20f269583e60ae38d9ab1029",
    ("etl-parser/ShutdownPerfDiagLogger.etl", "chrome"): "e7a956b93d7157c2617767347ef36c6a269fe0beb4c69306db2478d1e350918f",
    ("tx/Process.etl", "perfetto"): "c457d1bf2852265aa2d6871d9e0d3a81363eb0a98ab4bf5395d48aa78b299f78",
    ("tx/Process.etl", "chrome"): "7dfc50c4eae33c2f8d6d8485725b71da10f9f5218292feaab6b231e11f015e71",
    ("tx/CrossMachineHTTP.etl", "perfetto"): "3aff725c222b1f8defce7ae329c7341dce0a1e545062045ed002b8d4db342cf5",
    ("tx/CrossMachineHTTP.etl", "chrome"): "7ddc5f869a1cf6198ed8c93fc142cefa81a7ee5ec522007604f7f094bce0659d",
    ("tx/HTTP_Server.etl", "perfetto"): "d611122334397dffe0caf15873358410879fdf060de3fb13b61cae59094fefd9",
    ("tx/HTTP_Server.etl", "chrome"): "e77c289487857d58df2224ba66f3f01b2e42eee07281059de88c43f88c515adb",
    ("perfview/gcevents.etl", "chrome"): "411f6e8782ec09e71f205c7d8e9b9832f5fdeadf15eb5ebfd80089d18df61d34",
    ("krabsetw/powershell.etl", "perfetto"): "4dce18239066fcb4a795ff8a66b33f2848bcb468cbcf41b2c1f3c7447d8e3fba",
}


def exported_digest(trace: str, fmt: str, target: Path) -> str:
    export_timeline([str(corpus_path("etl", *trace.split("/")))], str(target), fmt, registry=registry())
    return hashlib.sha256(target.read_bytes()).hexdigest()


@pytest.mark.parametrize(("trace", "fmt"), sorted(DIGESTS))
def test_timeline_export_bytes_are_unchanged(trace: str, fmt: str, tmp_path: Path) -> None:
    assert exported_digest(trace, fmt, tmp_path / f"out.{fmt}") == DIGESTS[(trace, fmt)]
